/* test_kernels.c: the Kimi K3 decode layer on the CPU: number formats,
 * properties of the reference operations, and the equivalence of the
 * standard and fused paths (per-operation NMSE tolerances, fresh random
 * inputs for every case) at reduced shapes with the real structure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/k3layer.h"
#include "tests/testhelp.h"

static uint64_t base_seed = 20261130;

static void test_formats(void)
{
    CHECK(k3_f32_to_bf16(1.0f) == 0x3f80, "bf16 of 1");
    CHECK(k3_f32_to_bf16(-2.0f) == 0xc000, "bf16 of -2");
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1). */
    CHECK(k3_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 tie to even");
    CHECK(k3_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 tie to even, odd side");
    CHECK(isnan(k3_bf16_to_f32(k3_f32_to_bf16(NAN))), "bf16 NaN");
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        float v = k3_fp8_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            bad += !isnan(v);
            continue;
        }
        if (c == 0x80) /* -0 encodes as +0 or -0, both zero */
            continue;
        bad += k3_f32_to_fp8(v) != c;
    }
    CHECKF(bad == 0, "fp8 e4m3 round trip of all codes: %d mismatches", bad);
    CHECK(k3_fp8_to_f32(0x7e) == 448.0f, "fp8 max 448");
    CHECK(k3_f32_to_fp8(1e6f) == 0x7e, "fp8 saturates");
    CHECK(k3_fp8_to_f32(0x01) == 1.0f / 512, "fp8 smallest subnormal");
    CHECK(k3_f32_to_fp8(0.3f) == k3_f32_to_fp8(0.3125f) ||
              k3_fp8_to_f32(k3_f32_to_fp8(0.3f)) == 0.28125f,
          "fp8 rounds to nearest");
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    int ok = 1;
    for (unsigned c = 0; c < 16; c++)
        ok &= k3_e2m1_to_f32(c) == ((c & 8) ? -e2m1[c & 7] : e2m1[c & 7]);
    CHECK(ok, "e2m1 code table");
    CHECK(k3_e8m0_to_f32(127) == 1.0f && k3_e8m0_to_f32(120) == 1.0f / 128, "e8m0 scales");
    /* SiTU: small up values pass linearly; large ones saturate at 25. */
    float g = 1.5f;
    CHECK_NEAR(k3_situ(g, 0.01f, 4, 25), g / (1 + expf(-4 * g)) * 0.01f, 1e-4, "situ linear");
    CHECK_NEAR(k3_situ(g, 1e4f, 4, 25), g / (1 + expf(-4 * g)) * 25.0f, 1e-5, "situ bounded");
}

static void test_ref_properties(void)
{
    /* Delta rule with no decay and beta 1: afterwards S^T k_hat = v. */
    enum { d = 32 };
    k3_bf16 qkv[3 * d];
    float g[d], beta = 1.0f, S[d * d];
    uint64_t x = base_seed;
    for (int i = 0; i < 3 * d; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        qkv[i] = k3_f32_to_bf16((float)((x >> 40) % 2000) / 1000.0f - 0.999f);
    }
    for (int i = 0; i < d * d; i++)
        S[i] = 0.01f * (float)((i * 7919) % 101 - 50);
    for (int i = 0; i < d; i++)
        g[i] = 0.0f;
    k3_bf16 o[d];
    k3_kda_recurrent_cpu(1, 1, d, qkv, g, &beta, S, o);
    double kn = 0;
    for (int i = 0; i < d; i++)
        kn += (double)k3_bf16_to_f32(qkv[d + i]) * k3_bf16_to_f32(qkv[d + i]);
    kn = 1.0 / sqrt(kn + 1e-6);
    double err = 0;
    for (int j = 0; j < d; j++) {
        double s = 0;
        for (int i = 0; i < d; i++)
            s += (double)S[i * d + j] * k3_bf16_to_f32(qkv[d + i]) * kn;
        err = fmax(err, fabs(s - k3_bf16_to_f32(qkv[2 * d + j])));
    }
    CHECKF(err < 1e-4, "delta rule stores v under k: max error %g", err);

    /* MLA attention over a single position returns that position's latent. */
    struct k3_shape s;
    k3_shape_small(&s, 8);
    int kv = s.kv_lora, rope = s.rope, qw = s.nope + s.rope;
    uint8_t cache[8 * 128];
    k3_bf16 qlat[64], qb[48], olat[64];
    for (int i = 0; i < 8 * (kv + rope); i++)
        cache[i] = k3_f32_to_fp8(0.1f * (float)(i % 17) - 0.8f);
    for (int i = 0; i < kv; i++)
        qlat[i] = k3_f32_to_bf16(0.05f * (float)(i % 5));
    for (int i = 0; i < qw; i++)
        qb[i] = k3_f32_to_bf16(0.1f);
    int32_t pos = 0;
    k3_mla_attn_cpu(1, 1, s.nope, rope, kv, qlat, qb, cache, 8, &pos, 0.1f, olat);
    int same = 1;
    for (int c = 0; c < kv; c++)
        same &= k3_bf16_to_f32(olat[c]) == k3_round_bf16(k3_fp8_to_f32(cache[c]));
    CHECK(same, "attention over one position returns its latent");

    /* Top-k: picks the largest sigmoid + bias, weights sum to the scale. */
    float logits[8] = {0.1f, 2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.4f, 1.0f};
    float bias[8] = {0, 0, 0, 0.9f, 0, 0, 0, 0};
    int32_t ids[3];
    float w[3];
    k3_router_topk_cpu(1, 8, 3, logits, bias, 1.0f, ids, w);
    CHECKF(ids[0] == 3 && ids[1] == 4 && ids[2] == 1, "top-3 with bias: %d %d %d", ids[0],
           ids[1], ids[2]);
    CHECK_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6, "renormalized weights");
    CHECK(w[0] < w[1], "weights follow the unbiased scores");

    /* Convolution: state shifts and the newest input lands last. */
    k3_bf16 in[2] = {k3_f32_to_bf16(1.0f), k3_f32_to_bf16(-2.0f)};
    float cw[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    float st[6] = {1, 2, 3, 4, 5, 6};
    k3_bf16 out[2];
    k3_kda_conv_cpu(1, 2, 4, in, cw, st, out);
    float y0 = 0.1f * 1 + 0.2f * 2 + 0.3f * 3 + 0.4f * 1;
    CHECK_NEAR(k3_bf16_to_f32(out[0]), y0 / (1 + expf(-y0)), 1e-2, "conv + silu");
    CHECK(st[0] == 2 && st[1] == 3 && st[2] == 1 && st[5] == -2, "conv state shift");

    /* MXFP4 GEMV equals the GEMV over the dequantized weights. */
    enum { K = 64, N = 3 };
    uint8_t wq[N * K / 2], sc[N * K / 32];
    k3_bf16 xv[K], wd[N * K];
    for (int i = 0; i < N * K / 2; i++)
        wq[i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < N * K / 32; i++)
        sc[i] = (uint8_t)(124 + i % 4);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < K; j++)
            wd[n * K + j] = k3_f32_to_bf16(
                k3_e2m1_to_f32((wq[(n * K + j) / 2] >> ((j & 1) * 4)) & 15) *
                k3_e8m0_to_f32(sc[n * 2 + j / 32]));
    for (int j = 0; j < K; j++)
        xv[j] = k3_f32_to_bf16(0.01f * (float)(j % 13) - 0.05f);
    int32_t e0 = 0;
    float yq[N], yd[N];
    k3_moe_gemv_mxfp4_f32_cpu(1, 1, N, K, xv, 0, &e0, wq, sc, yq);
    k3_gemv_f32_cpu(1, N, K, xv, wd, yd);
    CHECKF(k3_nmse_f32(yq, yd, N) < 1e-12, "mxfp4 gemv = dequantized gemv (nmse %g)",
           k3_nmse_f32(yq, yd, N));
}

static void test_same_experts(void)
{
    int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {3, 1, 2, 6, 5, 4}, c[6] = {1, 2, 3, 4, 5, 7};
    CHECK(k3_same_experts(2, 3, a, b), "same experts in another order");
    CHECK(!k3_same_experts(2, 3, a, c), "another expert");
}

static void test_tables(void)
{
    /* The kernel counts of the published per-layer traces: 23 standard,
     * 13 specialized (calibration.md); MLA's standard list has the output
     * gate as a 24th. */
    static const int want[K3_PATH_COUNT][K3_KIND_COUNT] = {{23, 24}, {13, 13}};
    for (int p = 0; p < K3_PATH_COUNT; p++)
        for (int k = 0; k < K3_KIND_COUNT; k++) {
            const struct k3_op *ops;
            int n = k3_path_ops((enum k3_path)p, (enum k3_kind)k, &ops);
            CHECKF(n == want[p][k], "%s %s layer: %d kernels", k3_path_name((enum k3_path)p),
                   k3_kind_name((enum k3_kind)k), n);
            int unique = 1, side = 0;
            for (int i = 0; i < n; i++) {
                side += ops[i].side_stream;
                for (int j = 0; j < i; j++)
                    unique &= strcmp(ops[i].name, ops[j].name) != 0;
            }
            CHECK(unique, "kernel names unique within a path");
            CHECKF(side == (p == K3_FUSED ? 2 : 0), "side-stream kernels: %d", side);
        }
    for (int i = 0; i < K3_OP_COUNT; i++)
        CHECKF((int)k3_op_by_id((enum k3_op_id)i)->id == i, "op %d table order", i);
    const struct k3_op *in = k3_op_by_id(K3_OP_F_KDA_IN_PROJ);
    CHECK(!strcmp(k3_op_name(in, 16), "kda_in_proj_small") &&
              !strcmp(k3_op_name(in, 17), "kda_in_proj_large"),
          "small and large projection variants by batch");
    struct k3_shape s;
    char err[K3_ERR_LEN];
    CHECK(k3_shape_full(&s, 16, 4096, err) == 0, "full shape at tp 16");
    CHECK(s.kda_heads == 6 && s.expert_inter == 192 && s.shared_inter == 384,
          "tp 16 shard widths");
    CHECK(k3_shape_full(&s, 8, 4096, err) == 0 && s.expert_inter == 384, "tp 8");
    CHECK(k3_shape_full(&s, 3, 4096, err) != 0 && strstr(err, "tp 3"), "tp 3 refused");
    k3_shape_small(&s, 16);
    s.latent = 100;
    CHECK(k3_shape_verify(&s, err) != 0, "latent not a multiple of 32 refused");
    struct k3_layer L;
    k3_shape_small(&s, 16);
    CHECK(k3_layer_init(&L, &s, K3_KDA, 65, err) != 0, "batch 65 refused");
}

static int has_nan_bf16(const k3_bf16 *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(k3_bf16_to_f32(p[i])))
            return 1;
    return 0;
}

/* NMSE tolerance of a tensor compared between the paths. */
static double tolerance(enum k3_tid t)
{
    switch (t) {
    case K3_A_LOGITS: return 1e-4; /* the fused norm skips one BF16 rounding */
    case K3_A_WTS: return 1e-6;
    case K3_A_OLAT: return 1e-3;
    default: return 1e-4;
    }
}

/* FP8 cache: rows other than the new token's untouched; the new rows may
 * differ by one FP8 step where the fused path's float value and the
 * standard path's BF16 value round to neighbouring codes. */
static void cmp_cache(const struct k3_layer *F, const struct k3_layer *A)
{
    const struct k3_shape *s = &A->sh;
    const uint8_t *cf = K3_U8(F, K3_S_MLA_CACHE), *ca = K3_U8(A, K3_S_MLA_CACHE);
    int row_w = s->kv_lora + s->rope, far = 0, other = 0, near = 0;
    for (int b = 0; b < A->batch; b++)
        for (int t = 0; t < s->ctx_max; t++)
            for (int j = 0; j < row_w; j++) {
                size_t at = ((size_t)b * s->ctx_max + t) * row_w + j;
                float x = k3_fp8_to_f32(cf[at]), y = k3_fp8_to_f32(ca[at]);
                if (cf[at] == ca[at])
                    continue;
                if (t != K3_I32(A, K3_S_MLA_POS)[b])
                    other++;
                else if (fabsf(x - y) > 0.125f * fmaxf(fabsf(x), fabsf(y)) + 1.0f / 512)
                    far++;
                else
                    near++;
            }
    CHECKF(other == 0 && far == 0 && near <= A->batch * row_w / 8,
           "MLA B=%d cache: %d codes off in old rows, %d more than one step, %d one step",
           A->batch, other, far, near);
}

static void copy_tensor(struct k3_layer *F, const struct k3_layer *A, enum k3_tid t)
{
    memcpy(F->t[t].host, A->t[t].host, A->t[t].count * k3_dtype_size(A->t[t].dtype));
}

/* Standard vs fused on one fresh random layer. The fused path runs one
 * kernel at a time; after each, every tensor it wrote is compared with
 * the standard path's and then replaced by it, so each tolerance is per
 * operation and each fused kernel starts from the same inputs (the
 * discrete routing cannot turn a rounding difference into another
 * expert). Then the fused path runs end to end on its own. */
static void equivalence_case(enum k3_kind kind, int batch, int ctx, uint64_t seed, int rank)
{
    struct k3_shape s;
    struct k3_layer A, F;
    char err[K3_ERR_LEN];
    k3_shape_small(&s, 48);
    if (rank) /* one rank of two: half the latent projected here */
        s.latent_shard = s.latent / 2;
    if (k3_layer_init(&A, &s, kind, batch, err)) {
        CHECKF(0, "init: %s", err);
        return;
    }
    A.rank = rank;
    k3_layer_randomize(&A, seed, ctx);
    CHECKF(k3_layer_verify(&A, err) == 0, "verify: %s", err);
    k3_layer_clone(&F, &A, err);
    k3_layer_run_cpu(&A, K3_STANDARD);
    CHECKF(k3_layer_verify(&A, err) == 0, "verify after: %s", err);
    const char *kn = k3_kind_name(kind);
    size_t BH = (size_t)batch * s.hidden;
    CHECKF(!has_nan_bf16(K3_BF(&A, K3_IO_R_OUT), BH) && !has_nan_bf16(K3_BF(&A, K3_IO_D_OUT), BH),
           "%s B=%d standard writes every output", kn, batch);
    /* The hidden state after the layer: residual + MoE output. */
    k3_bf16 *h = malloc(BH * 2);
    for (size_t j = 0; j < BH; j++)
        h[j] = k3_f32_to_bf16(k3_bf16_to_f32(K3_BF(&A, K3_IO_R_OUT)[j]) +
                              k3_bf16_to_f32(K3_BF(&A, K3_IO_D_OUT)[j]));

    const struct k3_op *ops;
    int nops = k3_path_ops(K3_FUSED, kind, &ops);
    for (int i = 0; i < nops; i++) {
        ops[i].cpu(&F);
        for (int j = 0; j < 4 && ops[i].out[j] != K3_T_COUNT; j++) {
            enum k3_tid t = ops[i].out[j];
            const char *what = ops[i].name;
            double e;
            if (t == K3_IO_R_OUT) {
                if (ops[i].id == K3_OP_F_O_PROJ_AR_RESIDUAL) {
                    e = k3_nmse_bf16(K3_BF(&F, t), K3_BF(&A, t), BH);
                    CHECKF(e < 1e-4, "%s B=%d %s: residual nmse %.3g", kn, batch, what, e);
                    copy_tensor(&F, &A, t);
                } else if (ops[i].id == K3_OP_F_MOE_COMBINE_AR_RESIDUAL) {
                    e = k3_nmse_bf16(K3_BF(&F, t), h, BH);
                    CHECKF(e < 1e-4, "%s B=%d %s: layer output nmse %.3g", kn, batch, what, e);
                }
                continue; /* the input projection's copy of r_in + d_in */
            }
            if (t == K3_S_MLA_CACHE) {
                cmp_cache(&F, &A);
            } else if (t == K3_A_IDS) {
                if (!k3_same_experts(batch, s.topk, K3_I32(&F, t), K3_I32(&A, t)))
                    fprintf(stderr, "NOTE %s B=%d: a near tie chose another expert\n", kn, batch);
            } else if (A.t[t].dtype == K3_DT_BF16) {
                e = k3_nmse_bf16(K3_BF(&F, t), K3_BF(&A, t), A.t[t].count);
                CHECKF(e < tolerance(t), "%s B=%d %s: %s nmse %.3g (tolerance %g)", kn, batch,
                       what, A.t[t].name, e, tolerance(t));
            } else {
                e = k3_nmse_f32(K3_F32(&F, t), K3_F32(&A, t), A.t[t].count);
                CHECKF(e < tolerance(t), "%s B=%d %s: %s nmse %.3g (tolerance %g)", kn, batch,
                       what, A.t[t].name, e, tolerance(t));
            }
            copy_tensor(&F, &A, t);
        }
    }
    /* The fused path on its own, end to end. */
    struct k3_layer O;
    k3_layer_clone(&O, &A, err);
    k3_layer_randomize(&O, seed, ctx);
    k3_layer_run_cpu(&O, K3_FUSED);
    CHECKF(!has_nan_bf16(K3_BF(&O, K3_IO_R_OUT), BH), "%s B=%d fused writes every output", kn,
           batch);
    double e = k3_nmse_bf16(K3_BF(&O, K3_IO_R_OUT), h, BH);
    if (k3_same_experts(batch, s.topk, K3_I32(&O, K3_A_IDS), K3_I32(&A, K3_A_IDS)))
        CHECKF(e < 1e-3, "%s B=%d fused end to end nmse %.3g", kn, batch, e);
    /* And the comparison has teeth: other weights give other outputs. */
    k3_layer_randomize(&O, seed + 1000003, ctx);
    k3_layer_run_cpu(&O, K3_FUSED);
    e = k3_nmse_bf16(K3_BF(&O, K3_IO_R_OUT), h, BH);
    CHECKF(e > 1e-2, "%s B=%d other weights give other outputs (nmse %.3g)", kn, batch, e);
    free(h);
    k3_layer_free(&O);
    k3_layer_free(&A);
    k3_layer_free(&F);
}

int main(void)
{
    const char *env = getenv("K3_TEST_SEED");
    if (env && *env)
        base_seed = strtoull(env, NULL, 10);
    test_formats();
    test_ref_properties();
    test_tables();
    test_same_experts();
    static const int batches[] = {1, 3, 8, 17};
    uint64_t seed = base_seed;
    for (int k = 0; k < K3_KIND_COUNT; k++)
        for (size_t i = 0; i < sizeof batches / sizeof *batches; i++)
            equivalence_case((enum k3_kind)k, batches[i], 5 + 13 * (int)i, seed++, 0);
    /* rank 1 of a latent split in two: the same function per rank */
    for (int k = 0; k < K3_KIND_COUNT; k++)
        equivalence_case((enum k3_kind)k, 5, 20, seed++, 1);
    return test_report();
}
