/* k3layer.c: shapes, tensors and the two decode paths of one Kimi K3
 * layer in C (see k3layer.h). The standard path calls the k3ref.c
 * references one operation at a time, storing BF16 between operations as
 * the GPU does; the fused path's C kernels have their own loops that keep
 * intermediates in float where the fused CUDA kernels keep them in
 * registers, so comparing the two on the CPU checks the fusions. */
#include "kernels/k3layer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BF(x) k3_bf16_to_f32(x)

static int kerr(char *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, K3_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- shapes ---------------------------------------------------------- */

int k3_shape_full(struct k3_shape *s, int tp, int ctx_max, char *err)
{
    if (tp != 1 && tp != 2 && tp != 4 && tp != 8 && tp != 16)
        return kerr(err, "tp %d: must be 1, 2, 4, 8 or 16", tp);
    /* moonshotai/Kimi-K3 config.json (../shared/reference/kimi-k3-config.json) */
    *s = (struct k3_shape){
        .tp = tp, .hidden = 7168, .kda_heads = 96 / tp, .head_dim = 128,
        .conv = 4, .mla_heads = 96 / tp, .q_lora = 1536, .kv_lora = 512,
        .nope = 128, .rope = 64, .v_head = 128, .experts = 896, .topk = 16,
        .expert_inter = 3072 / tp, .shared_inter = 2 * 3072 / tp,
        .latent = 3584, .latent_shard = 3584 / tp, .ctx_max = ctx_max, .eps = 1e-5f,
        .situ_beta = 4.0f, .situ_linear_beta = 25.0f, .gate_lower = -5.0f,
        .route_scale = 1.0f,
    };
    return k3_shape_verify(s, err);
}

void k3_shape_small(struct k3_shape *s, int ctx_max)
{
    *s = (struct k3_shape){
        .tp = 1, .hidden = 256, .kda_heads = 2, .head_dim = 32, .conv = 4,
        .mla_heads = 2, .q_lora = 64, .kv_lora = 64, .nope = 32, .rope = 16,
        .v_head = 32, .experts = 32, .topk = 4, .expert_inter = 64,
        .shared_inter = 64, .latent = 128, .latent_shard = 128, .ctx_max = ctx_max, .eps = 1e-5f,
        .situ_beta = 4.0f, .situ_linear_beta = 25.0f, .gate_lower = -5.0f,
        .route_scale = 1.0f,
    };
}

int k3_shape_verify(const struct k3_shape *s, char *err)
{
    if (s->hidden <= 0 || s->hidden % 8)
        return kerr(err, "hidden %d: must be a positive multiple of 8", s->hidden);
    if (s->head_dim <= 0 || s->head_dim > 128 || s->head_dim % 32)
        return kerr(err, "head_dim %d: must be 32..128, a multiple of 32", s->head_dim);
    if (s->v_head != s->head_dim || s->nope % 8 || s->rope % 8 || s->nope <= 0)
        return kerr(err, "v_head must equal head_dim; nope, rope multiples of 8");
    if (s->kv_lora <= 0 || s->kv_lora > 1024 || s->kv_lora % 32)
        return kerr(err, "kv_lora %d: must be 32..1024, a multiple of 32", s->kv_lora);
    if (s->latent % K3_MX_GROUP || s->expert_inter % K3_MX_GROUP || s->expert_inter <= 0)
        return kerr(err, "latent %d and expert_inter %d must be multiples of %d",
                    s->latent, s->expert_inter, K3_MX_GROUP);
    if (s->latent_shard <= 0 || s->latent_shard > s->latent || s->latent_shard % 8)
        return kerr(err, "latent_shard %d: must be 8..latent, a multiple of 8", s->latent_shard);
    if (s->experts <= 0 || s->experts > 4096 || s->topk <= 0 || s->topk > 32 ||
        s->topk > s->experts)
        return kerr(err, "experts %d / topk %d out of range", s->experts, s->topk);
    if (s->conv < 2 || s->conv > 8)
        return kerr(err, "conv width %d: must be 2..8", s->conv);
    if (s->rope > 256 || s->nope > 1024)
        return kerr(err, "rope %d (at most 256) / nope %d (at most 1024)", s->rope, s->nope);
    if (s->kda_heads <= 0 || s->mla_heads <= 0 || s->ctx_max <= 0 ||
        s->q_lora % 8 || s->shared_inter % 8 || s->shared_inter <= 0)
        return kerr(err, "heads, ctx_max, q_lora, shared_inter out of range");
    return 0;
}

const char *k3_kind_name(enum k3_kind k) { return k == K3_KDA ? "kda" : "mla"; }
const char *k3_path_name(enum k3_path p) { return p == K3_STANDARD ? "standard" : "fused"; }

size_t k3_dtype_size(enum k3_dtype t)
{
    switch (t) {
    case K3_DT_BF16: return 2;
    case K3_DT_F32: return 4;
    case K3_DT_I32: return 4;
    default: return 1;
    }
}

int k3_kda_hd(const struct k3_shape *s) { return s->kda_heads * s->head_dim; }
int k3_kda_gw(const struct k3_shape *s) { return 2 * k3_kda_hd(s) + s->kda_heads; }
int k3_mla_aw(const struct k3_shape *s)
{
    return s->q_lora + s->kv_lora + s->rope + s->mla_heads * s->v_head;
}
int k3_mla_qw(const struct k3_shape *s) { return s->nope + s->rope; }
int k3_attn_width(const struct k3_shape *s, enum k3_kind k)
{
    return k == K3_KDA ? k3_kda_hd(s) : s->mla_heads * s->v_head;
}

/* ---- tensors --------------------------------------------------------- */

static void tensor_sizes(const struct k3_shape *s, enum k3_kind kind, int B,
                         struct k3_tensor *t)
{
    size_t H = s->hidden, E = s->experts, k = s->topk, I = s->expert_inter;
    size_t SI = s->shared_inter, Lt = s->latent, Ls = s->latent_shard, P = (size_t)B * k;
    size_t nh = s->kda_heads, d = s->head_dim, hd = nh * d;
    size_t gw = k3_kda_gw(s), mh = s->mla_heads, aw = k3_mla_aw(s);
    size_t kv = s->kv_lora, qw = k3_mla_qw(s), aow = k3_attn_width(s, kind);
    int kda = kind == K3_KDA, mla = kind == K3_MLA;
#define T(id, dt, n) t[id] = (struct k3_tensor){#id + 3, dt, (n), NULL, NULL}
    T(K3_W_ATTN_NORM, K3_DT_F32, H);
    T(K3_W_MOE_NORM, K3_DT_F32, H);
    T(K3_W_O, K3_DT_BF16, H * aow);
    T(K3_W_ROUTER, K3_DT_BF16, E * H);
    T(K3_W_ROUTER_BIAS, K3_DT_F32, E);
    T(K3_W_SH_GU, K3_DT_BF16, 2 * SI * H);
    T(K3_W_SH_DOWN, K3_DT_BF16, H * SI);
    T(K3_W_LAT_IN, K3_DT_BF16, Ls * H);
    T(K3_W_LAT_NORM, K3_DT_F32, Lt);
    T(K3_W_RT_GU, K3_DT_U8, E * 2 * I * Lt / 2);
    T(K3_W_RT_GU_S, K3_DT_U8, E * 2 * I * Lt / K3_MX_GROUP);
    T(K3_W_RT_DOWN, K3_DT_U8, E * Lt * I / 2);
    T(K3_W_RT_DOWN_S, K3_DT_U8, E * Lt * I / K3_MX_GROUP);
    T(K3_W_LAT_OUT, K3_DT_BF16, H * Ls);
    T(K3_W_KDA_QKV, K3_DT_BF16, kda * 3 * hd * H);
    T(K3_W_KDA_GATE, K3_DT_BF16, kda * gw * H);
    T(K3_W_KDA_CONV, K3_DT_F32, kda * 3 * hd * s->conv);
    T(K3_W_KDA_ALOG, K3_DT_F32, kda * nh);
    T(K3_W_KDA_DTB, K3_DT_F32, kda * hd);
    T(K3_W_KDA_ONORM, K3_DT_F32, kda * d);
    T(K3_W_MLA_A, K3_DT_BF16, mla * aw * H);
    T(K3_W_MLA_QNORM, K3_DT_F32, mla * s->q_lora);
    T(K3_W_MLA_KVNORM, K3_DT_F32, mla * kv);
    T(K3_W_MLA_QB, K3_DT_BF16, mla * mh * qw * s->q_lora);
    T(K3_W_MLA_UK, K3_DT_BF16, mla * mh * kv * s->nope);
    T(K3_W_MLA_UV, K3_DT_BF16, mla * mh * s->v_head * kv);
    T(K3_S_KDA_STATE, K3_DT_F32, kda * B * nh * d * d);
    T(K3_S_KDA_CONV, K3_DT_F32, kda * B * 3 * hd * (s->conv - 1));
    T(K3_S_MLA_CACHE, K3_DT_U8, mla * B * (size_t)s->ctx_max * (kv + s->rope));
    T(K3_S_MLA_POS, K3_DT_I32, mla * B);
    T(K3_IO_R_IN, K3_DT_BF16, B * H);
    T(K3_IO_D_IN, K3_DT_BF16, B * H);
    T(K3_IO_R_OUT, K3_DT_BF16, B * H);
    T(K3_IO_D_OUT, K3_DT_BF16, B * H);
    T(K3_A_XN, K3_DT_BF16, B * H);
    T(K3_A_QKV, K3_DT_BF16, kda * B * 3 * hd);
    T(K3_A_QKVC, K3_DT_BF16, kda * B * 3 * hd);
    T(K3_A_GP, K3_DT_BF16, kda * B * gw);
    T(K3_A_G, K3_DT_F32, kda * B * hd);
    T(K3_A_BETA, K3_DT_F32, kda * B * nh);
    T(K3_A_O, K3_DT_BF16, B * aow);
    T(K3_A_ON, K3_DT_BF16, kda * B * hd);
    T(K3_A_MA, K3_DT_BF16, mla * B * aw);
    T(K3_A_QAN, K3_DT_BF16, mla * B * s->q_lora);
    T(K3_A_QB, K3_DT_BF16, mla * B * mh * qw);
    T(K3_A_QLAT, K3_DT_BF16, mla * B * mh * kv);
    T(K3_A_OLAT, K3_DT_BF16, mla * B * mh * kv);
    T(K3_A_ATT, K3_DT_BF16, B * H);
    T(K3_A_XN2, K3_DT_BF16, B * H);
    T(K3_A_LOGITS, K3_DT_F32, B * E);
    T(K3_A_IDS, K3_DT_I32, B * k);
    T(K3_A_WTS, K3_DT_F32, B * k);
    T(K3_A_SHGU, K3_DT_BF16, B * 2 * SI);
    T(K3_A_SHH, K3_DT_BF16, B * SI);
    T(K3_A_SHOUT, K3_DT_BF16, B * H);
    T(K3_A_LAT, K3_DT_BF16, B * Lt);
    T(K3_A_LATN, K3_DT_BF16, B * Lt);
    T(K3_A_ALIGN, K3_DT_I32, 3 * P + 3);
    T(K3_A_RGU, K3_DT_BF16, P * 2 * I);
    T(K3_A_RF32, K3_DT_F32, P * 2 * I);
    T(K3_A_RH, K3_DT_BF16, P * I);
    T(K3_A_RACC, K3_DT_F32, B * Lt);
    T(K3_A_KVN, K3_DT_BF16, mla * B * (kv + s->rope));
    T(K3_A_ATT_PART, K3_DT_F32, mla * (B * mh > 4096 ? B * mh : 4096) * (kv + 2));
    T(K3_A_ATT_CNT, K3_DT_I32, mla * B * mh);
#undef T
}

int k3_layer_init(struct k3_layer *L, const struct k3_shape *s,
                  enum k3_kind kind, int batch, char *err)
{
    memset(L, 0, sizeof *L);
    if (k3_shape_verify(s, err))
        return -1;
    if (batch < 1 || batch > 64)
        return kerr(err, "batch %d: must be 1..64", batch);
    L->sh = *s;
    L->kind = kind;
    L->batch = batch;
    tensor_sizes(s, kind, batch, L->t);
    for (int i = 0; i < K3_T_COUNT; i++) {
        struct k3_tensor *t = &L->t[i];
        if (!t->count)
            continue;
        t->host = calloc(t->count, k3_dtype_size(t->dtype));
        if (!t->host) {
            k3_layer_free(L);
            return kerr(err, "out of memory for %s (%zu elements)", t->name, t->count);
        }
    }
    return 0;
}

void k3_layer_free(struct k3_layer *L)
{
    for (int i = 0; i < K3_T_COUNT; i++) {
        free(L->t[i].host);
        L->t[i].host = NULL;
    }
}

int k3_layer_clone(struct k3_layer *dst, const struct k3_layer *src, char *err)
{
    if (k3_layer_init(dst, &src->sh, src->kind, src->batch, err))
        return -1;
    dst->rank = src->rank;
    for (int i = 0; i < K3_T_COUNT; i++)
        if (src->t[i].count)
            memcpy(dst->t[i].host, src->t[i].host,
                   src->t[i].count * k3_dtype_size(src->t[i].dtype));
    return 0;
}

int k3_layer_verify(const struct k3_layer *L, char *err)
{
    struct k3_tensor want[K3_T_COUNT];
    if (k3_shape_verify(&L->sh, err))
        return -1;
    tensor_sizes(&L->sh, L->kind, L->batch, want);
    for (int i = 0; i < K3_T_COUNT; i++) {
        if (want[i].count != L->t[i].count || want[i].dtype != L->t[i].dtype)
            return kerr(err, "tensor %s: %zu elements, want %zu", want[i].name,
                        L->t[i].count, want[i].count);
        if (want[i].count && !L->t[i].host)
            return kerr(err, "tensor %s: not allocated", want[i].name);
    }
    if (L->kind == K3_MLA)
        for (int b = 0; b < L->batch; b++) {
            int p = K3_I32(L, K3_S_MLA_POS)[b];
            if (p < 0 || p >= L->sh.ctx_max)
                return kerr(err, "sequence %d: position %d outside the cache (%d)", b,
                            p, L->sh.ctx_max);
        }
    return 0;
}

/* ---- random contents ------------------------------------------------- */

struct krng {
    uint64_t s;
};
static uint64_t krng_next(struct krng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static float krng_unif(struct krng *r) /* (-1, 1), never 0 */
{
    float u = (float)((krng_next(r) >> 40) + 0.5) / (float)(1 << 24);
    return 2.0f * u - 1.0f;
}
static float krng_normal(struct krng *r)
{
    float u1 = 0.5f * (krng_unif(r) + 1.0f), u2 = 0.5f * (krng_unif(r) + 1.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

static void fill_bf16(struct krng *r, k3_bf16 *p, size_t n, float amp)
{
    for (size_t i = 0; i < n; i++) {
        float v = amp * krng_unif(r);
        if (k3_f32_to_bf16(v) == 0 || k3_f32_to_bf16(v) == 0x8000)
            v = amp * 0.5f;
        p[i] = k3_f32_to_bf16(v);
    }
}
static void fill_f32(struct krng *r, float *p, size_t n, float base, float amp)
{
    for (size_t i = 0; i < n; i++)
        p[i] = base + amp * krng_unif(r);
}
/* Projection weights [N][K] with standard deviation 1/sqrt(K). */
static void fill_proj(struct krng *r, struct k3_tensor *t, size_t K)
{
    if (t->count)
        fill_bf16(r, (k3_bf16 *)t->host, t->count, sqrtf(3.0f / (float)K));
}
/* MXFP4 rows of K values: random codes, scales near 1/(2.93 sqrt(K)),
 * 2.93 being the RMS of a uniformly drawn E2M1 code. */
static void fill_mxfp4(struct krng *r, uint8_t *w, uint8_t *sc, size_t rows, size_t K)
{
    for (size_t i = 0; i < rows * K / 2; i++) {
        uint8_t b = (uint8_t)krng_next(r);
        if ((b & 7) == 0)
            b |= 2; /* no zero codes */
        if ((b & 0x70) == 0)
            b |= 0x20;
        w[i] = b;
    }
    int base = 127 + (int)lrint(log2(1.0 / (2.93 * sqrt((double)K))));
    for (size_t i = 0; i < rows * K / K3_MX_GROUP; i++)
        sc[i] = (uint8_t)(base + (int)(krng_next(r) % 3) - 1);
}

void k3_layer_randomize(struct k3_layer *L, uint64_t seed, int ctx_len)
{
    struct krng r = {seed * 0x2545f4914f6cdd1dULL + 0x1234567};
    const struct k3_shape *s = &L->sh;
    size_t H = s->hidden;
    struct k3_tensor *t = L->t;
    fill_f32(&r, K3_F32(L, K3_W_ATTN_NORM), H, 1.0f, 0.2f);
    fill_f32(&r, K3_F32(L, K3_W_MOE_NORM), H, 1.0f, 0.2f);
    fill_proj(&r, &t[K3_W_O], k3_attn_width(s, L->kind));
    fill_proj(&r, &t[K3_W_ROUTER], H);
    fill_f32(&r, K3_F32(L, K3_W_ROUTER_BIAS), s->experts, 0.0f, 0.05f);
    fill_proj(&r, &t[K3_W_SH_GU], H);
    fill_proj(&r, &t[K3_W_SH_DOWN], s->shared_inter);
    fill_proj(&r, &t[K3_W_LAT_IN], H);
    fill_f32(&r, K3_F32(L, K3_W_LAT_NORM), s->latent, 1.0f, 0.2f);
    fill_mxfp4(&r, K3_U8(L, K3_W_RT_GU), K3_U8(L, K3_W_RT_GU_S),
               (size_t)s->experts * 2 * s->expert_inter, s->latent);
    fill_mxfp4(&r, K3_U8(L, K3_W_RT_DOWN), K3_U8(L, K3_W_RT_DOWN_S),
               (size_t)s->experts * s->latent, s->expert_inter);
    fill_proj(&r, &t[K3_W_LAT_OUT], s->latent);
    for (int i = 0; i < K3_T_COUNT; i++)
        if (t[i].count && i >= K3_IO_R_IN && i <= K3_IO_D_IN)
            fill_bf16(&r, (k3_bf16 *)t[i].host, t[i].count, i == K3_IO_R_IN ? 1.7f : 0.9f);
    if (L->kind == K3_KDA) {
        fill_proj(&r, &t[K3_W_KDA_QKV], H);
        fill_proj(&r, &t[K3_W_KDA_GATE], H);
        fill_f32(&r, K3_F32(L, K3_W_KDA_CONV), t[K3_W_KDA_CONV].count, 0.0f, 0.6f);
        for (int h = 0; h < s->kda_heads; h++)
            K3_F32(L, K3_W_KDA_ALOG)[h] = logf(1.0f + 7.5f * (1.0f + krng_unif(&r)));
        fill_f32(&r, K3_F32(L, K3_W_KDA_DTB), t[K3_W_KDA_DTB].count, 0.0f, 0.5f);
        fill_f32(&r, K3_F32(L, K3_W_KDA_ONORM), s->head_dim, 1.0f, 0.2f);
        float *S = K3_F32(L, K3_S_KDA_STATE);
        for (size_t i = 0; i < t[K3_S_KDA_STATE].count; i++)
            S[i] = 0.1f * krng_normal(&r);
        float *cs = K3_F32(L, K3_S_KDA_CONV);
        for (size_t i = 0; i < t[K3_S_KDA_CONV].count; i++)
            cs[i] = krng_normal(&r);
    } else {
        fill_proj(&r, &t[K3_W_MLA_A], H);
        fill_f32(&r, K3_F32(L, K3_W_MLA_QNORM), s->q_lora, 1.0f, 0.2f);
        fill_f32(&r, K3_F32(L, K3_W_MLA_KVNORM), s->kv_lora, 1.0f, 0.2f);
        fill_proj(&r, &t[K3_W_MLA_QB], s->q_lora);
        fill_proj(&r, &t[K3_W_MLA_UK], s->nope);
        fill_proj(&r, &t[K3_W_MLA_UV], s->kv_lora);
        /* Cached rows: FP8 codes drawn directly (sign, exponent field 5..8,
         * any mantissa: magnitudes 0.25..3.75, never zero or NaN), eight
         * per draw, so long caches fill fast. */
        uint8_t *c = K3_U8(L, K3_S_MLA_CACHE);
        uint64_t bits = 0;
        for (size_t i = 0; i < t[K3_S_MLA_CACHE].count; i++) {
            if ((i & 7) == 0)
                bits = krng_next(&r);
            uint8_t v = (uint8_t)(bits >> (8 * (i & 7)));
            c[i] = (uint8_t)((v & 0x87) | ((5 + ((v >> 3) & 3)) << 3));
        }
        if (ctx_len < 1)
            ctx_len = 1;
        if (ctx_len > s->ctx_max)
            ctx_len = s->ctx_max;
        for (int b = 0; b < L->batch; b++) {
            int p = ctx_len - 1 - (b % 3);
            K3_I32(L, K3_S_MLA_POS)[b] = p < 0 ? 0 : p;
        }
    }
    /* Scratch gets a poison pattern (NaN in every format). */
    for (int i = K3_A_XN; i < K3_T_COUNT; i++)
        if (t[i].count)
            memset(t[i].host, 0xff, t[i].count * k3_dtype_size(t[i].dtype));
    /* The latent columns other ranks project (tp > 1) hold their values. */
    for (int b = 0; b < L->batch; b++)
        for (int j = 0; j < s->latent; j++)
            if (j / s->latent_shard != L->rank)
                K3_BF(L, K3_A_LAT)[(size_t)b * s->latent + j] = k3_f32_to_bf16(krng_normal(&r));
    if (t[K3_A_ATT_CNT].count) /* the split counters start at zero */
        memset(t[K3_A_ATT_CNT].host, 0, t[K3_A_ATT_CNT].count * 4);
    memset(t[K3_IO_R_OUT].host, 0xff, t[K3_IO_R_OUT].count * 2);
    memset(t[K3_IO_D_OUT].host, 0xff, t[K3_IO_D_OUT].count * 2);
}

/* ---- standard path: one reference operation per kernel --------------- */

#define SH (&L->sh)
#define NB (L->batch)

static int mla_kv_off(const struct k3_shape *s) { return s->q_lora; }
static int mla_gate_off(const struct k3_shape *s) { return s->q_lora + s->kv_lora + s->rope; }
static float mla_scale(const struct k3_shape *s)
{
    return 1.0f / sqrtf((float)(s->nope + s->rope));
}

static void op_input_norm(struct k3_layer *L)
{
    memcpy(K3_BF(L, K3_IO_R_OUT), K3_BF(L, K3_IO_R_IN), L->t[K3_IO_R_IN].count * 2);
    k3_add_rmsnorm_cpu(NB, SH->hidden, K3_BF(L, K3_IO_R_OUT), K3_BF(L, K3_IO_D_IN),
                       K3_F32(L, K3_W_ATTN_NORM), SH->eps, K3_BF(L, K3_A_XN));
}
static void op_kda_qkv_proj(struct k3_layer *L)
{
    int n = 3 * k3_kda_hd(SH);
    k3_gemv_rows_cpu(NB, 0, n, SH->hidden, K3_BF(L, K3_A_XN), SH->hidden,
                     K3_BF(L, K3_W_KDA_QKV), NULL, K3_BF(L, K3_A_QKV), n);
}
static void op_kda_short_conv(struct k3_layer *L)
{
    k3_kda_conv_cpu(NB, 3 * k3_kda_hd(SH), SH->conv, K3_BF(L, K3_A_QKV),
                    K3_F32(L, K3_W_KDA_CONV), K3_F32(L, K3_S_KDA_CONV), K3_BF(L, K3_A_QKVC));
}
/* Decay and beta rows of the gate projection. */
static void op_kda_gate_proj(struct k3_layer *L)
{
    k3_gemv_rows_cpu(NB, 0, k3_kda_hd(SH) + SH->kda_heads, SH->hidden, K3_BF(L, K3_A_XN),
                     SH->hidden, K3_BF(L, K3_W_KDA_GATE), NULL, K3_BF(L, K3_A_GP),
                     k3_kda_gw(SH));
}
static void op_kda_gate_act(struct k3_layer *L)
{
    k3_kda_gates_cpu(NB, SH->kda_heads, SH->head_dim, K3_BF(L, K3_A_GP),
                     K3_F32(L, K3_W_KDA_ALOG), K3_F32(L, K3_W_KDA_DTB), SH->gate_lower,
                     K3_F32(L, K3_A_G), K3_F32(L, K3_A_BETA));
}
static void op_kda_recurrent(struct k3_layer *L)
{
    k3_kda_recurrent_cpu(NB, SH->kda_heads, SH->head_dim, K3_BF(L, K3_A_QKVC),
                         K3_F32(L, K3_A_G), K3_F32(L, K3_A_BETA),
                         K3_F32(L, K3_S_KDA_STATE), K3_BF(L, K3_A_O));
}
/* Output-gate rows of the gate projection. */
static void op_kda_out_gate_proj(struct k3_layer *L)
{
    k3_gemv_rows_cpu(NB, k3_kda_hd(SH) + SH->kda_heads, k3_kda_gw(SH), SH->hidden,
                     K3_BF(L, K3_A_XN), SH->hidden, K3_BF(L, K3_W_KDA_GATE), NULL,
                     K3_BF(L, K3_A_GP), k3_kda_gw(SH));
}
static void op_kda_out_norm_gate(struct k3_layer *L)
{
    int hd = k3_kda_hd(SH);
    k3_kda_out_norm_cpu(NB, SH->kda_heads, SH->head_dim, K3_BF(L, K3_A_O),
                        K3_BF(L, K3_A_GP) + hd + SH->kda_heads, k3_kda_gw(SH),
                        K3_F32(L, K3_W_KDA_ONORM), SH->eps, K3_BF(L, K3_A_ON));
}
static void op_mla_qkv_a_proj(struct k3_layer *L)
{
    k3_gemv_rows_cpu(NB, 0, mla_gate_off(SH), SH->hidden, K3_BF(L, K3_A_XN), SH->hidden,
                     K3_BF(L, K3_W_MLA_A), NULL, K3_BF(L, K3_A_MA), k3_mla_aw(SH));
}
static void op_mla_qkv_a_norm(struct k3_layer *L)
{
    int aw = k3_mla_aw(SH), kvw = SH->kv_lora + SH->rope;
    k3_rmsnorm_cpu(NB, SH->q_lora, K3_BF(L, K3_A_MA), aw, K3_F32(L, K3_W_MLA_QNORM),
                   SH->eps, K3_BF(L, K3_A_QAN), SH->q_lora);
    k3_rmsnorm_cpu(NB, SH->kv_lora, K3_BF(L, K3_A_MA) + mla_kv_off(SH), aw,
                   K3_F32(L, K3_W_MLA_KVNORM), SH->eps, K3_BF(L, K3_A_KVN), kvw);
    for (int b = 0; b < NB; b++)
        memcpy(K3_BF(L, K3_A_KVN) + (size_t)b * kvw + SH->kv_lora,
               K3_BF(L, K3_A_MA) + (size_t)b * aw + mla_kv_off(SH) + SH->kv_lora, SH->rope * 2);
}
static void op_mla_q_b_proj(struct k3_layer *L)
{
    int n = SH->mla_heads * k3_mla_qw(SH);
    k3_gemv_rows_cpu(NB, 0, n, SH->q_lora, K3_BF(L, K3_A_QAN), SH->q_lora,
                     K3_BF(L, K3_W_MLA_QB), NULL, K3_BF(L, K3_A_QB), n);
}
/* The latent row is stored as is (NoPE: the rope part is not rotated). */
static void op_mla_rope_cache_write(struct k3_layer *L)
{
    int kvw = SH->kv_lora + SH->rope;
    for (int b = 0; b < NB; b++) {
        uint8_t *dst = K3_U8(L, K3_S_MLA_CACHE) +
                       ((size_t)b * SH->ctx_max + K3_I32(L, K3_S_MLA_POS)[b]) * kvw;
        for (int i = 0; i < kvw; i++)
            dst[i] = k3_f32_to_fp8(BF(K3_BF(L, K3_A_KVN)[(size_t)b * kvw + i]));
    }
}
static void op_mla_q_absorb(struct k3_layer *L)
{
    k3_mla_absorb_cpu(NB, SH->mla_heads, SH->nope, SH->rope, SH->kv_lora, K3_BF(L, K3_A_QB),
                      K3_BF(L, K3_W_MLA_UK), K3_BF(L, K3_A_QLAT));
}
static void op_mla_attention(struct k3_layer *L)
{
    k3_mla_attn_cpu(NB, SH->mla_heads, SH->nope, SH->rope, SH->kv_lora, K3_BF(L, K3_A_QLAT),
                    K3_BF(L, K3_A_QB), K3_U8(L, K3_S_MLA_CACHE), SH->ctx_max,
                    K3_I32(L, K3_S_MLA_POS), mla_scale(SH), K3_BF(L, K3_A_OLAT));
}
static void op_mla_v_up(struct k3_layer *L)
{
    k3_mla_vup_cpu(NB, SH->mla_heads, SH->kv_lora, SH->v_head, K3_BF(L, K3_A_OLAT),
                   K3_BF(L, K3_W_MLA_UV), NULL, 0, K3_BF(L, K3_A_O));
}
/* Output-gate projection of the normalized input (stored beside the
 * a-projection), applied to the attention output in the epilogue:
 * o = bf16(o * sigmoid(bf16(gate))). */
static void op_mla_out_gate(struct k3_layer *L)
{
    int H = SH->hidden, n = SH->mla_heads * SH->v_head, off = mla_gate_off(SH);
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < H; k++)
                s += (double)BF(K3_BF(L, K3_A_XN)[(size_t)b * H + k]) *
                     BF(K3_BF(L, K3_W_MLA_A)[(size_t)(off + j) * H + k]);
            k3_bf16 *o = K3_BF(L, K3_A_O) + (size_t)b * n + j, gt = k3_f32_to_bf16((float)s);
            K3_BF(L, K3_A_MA)[(size_t)b * k3_mla_aw(SH) + off + j] = gt;
            *o = k3_f32_to_bf16(BF(*o) * k3_sigmoid(BF(gt)));
        }
}
static const k3_bf16 *attn_out(struct k3_layer *L)
{
    return L->kind == K3_KDA ? K3_BF(L, K3_A_ON) : K3_BF(L, K3_A_O);
}
static void op_attn_o_proj(struct k3_layer *L)
{
    int K = k3_attn_width(SH, L->kind);
    k3_gemv_rows_cpu(NB, 0, SH->hidden, K, attn_out(L), K, K3_BF(L, K3_W_O), NULL,
                     K3_BF(L, K3_A_ATT), SH->hidden);
}
/* One rank: the sum over ranks is the local partial itself. */
static void op_allreduce_local(struct k3_layer *L) { (void)L; }
static void op_post_attn_norm(struct k3_layer *L)
{
    k3_add_rmsnorm_cpu(NB, SH->hidden, K3_BF(L, K3_IO_R_OUT), K3_BF(L, K3_A_ATT),
                       K3_F32(L, K3_W_MOE_NORM), SH->eps, K3_BF(L, K3_A_XN2));
}
static void op_router_gemm(struct k3_layer *L)
{
    k3_gemv_f32_cpu(NB, SH->experts, SH->hidden, K3_BF(L, K3_A_XN2), K3_BF(L, K3_W_ROUTER),
                    K3_F32(L, K3_A_LOGITS));
}
static void op_router_topk(struct k3_layer *L)
{
    k3_router_topk_cpu(NB, SH->experts, SH->topk, K3_F32(L, K3_A_LOGITS),
                       K3_F32(L, K3_W_ROUTER_BIAS), SH->route_scale, K3_I32(L, K3_A_IDS),
                       K3_F32(L, K3_A_WTS));
}
static void op_shared_gate_up(struct k3_layer *L)
{
    int n = 2 * SH->shared_inter;
    k3_gemv_rows_cpu(NB, 0, n, SH->hidden, K3_BF(L, K3_A_XN2), SH->hidden,
                     K3_BF(L, K3_W_SH_GU), NULL, K3_BF(L, K3_A_SHGU), n);
}
static void op_shared_act(struct k3_layer *L)
{
    k3_situ_cpu(NB, SH->shared_inter, K3_BF(L, K3_A_SHGU), SH->situ_beta,
                SH->situ_linear_beta, K3_BF(L, K3_A_SHH));
}
static void op_shared_down(struct k3_layer *L)
{
    k3_gemv_rows_cpu(NB, 0, SH->hidden, SH->shared_inter, K3_BF(L, K3_A_SHH),
                     SH->shared_inter, K3_BF(L, K3_W_SH_DOWN), NULL, K3_BF(L, K3_A_SHOUT),
                     SH->hidden);
}
/* This rank's slice of the latent (columns 0..Ls); the all-gather that
 * completes it is a local step on one rank. */
static void op_moe_latent_down(struct k3_layer *L)
{
    k3_gemv_rows_cpu(NB, 0, SH->latent_shard, SH->hidden, K3_BF(L, K3_A_XN2), SH->hidden,
                     K3_BF(L, K3_W_LAT_IN), NULL,
                     K3_BF(L, K3_A_LAT) + (size_t)L->rank * SH->latent_shard, SH->latent);
}
/* Latent norm (latent_moe_use_norm), token-expert pairs grouped by
 * expert, and the routed accumulator cleared. */
static void op_moe_align(struct k3_layer *L)
{
    k3_rmsnorm_cpu(NB, SH->latent, K3_BF(L, K3_A_LAT), SH->latent, K3_F32(L, K3_W_LAT_NORM),
                   SH->eps, K3_BF(L, K3_A_LATN), SH->latent);
    k3_moe_align_cpu(NB, SH->topk, SH->experts, K3_I32(L, K3_A_IDS), K3_I32(L, K3_A_ALIGN));
    memset(K3_F32(L, K3_A_RACC), 0, L->t[K3_A_RACC].count * 4);
}
/* Grouped MXFP4 expert GEMV: each active expert's rows are read once for
 * all the pairs routed to it. */
static void op_moe_gate_up(struct k3_layer *L)
{
    int P = NB * SH->topk, n2 = 2 * SH->expert_inter, Lt = SH->latent;
    const int32_t *al = K3_I32(L, K3_A_ALIGN);
    for (int j = 0; j < al[0]; j++) {
        size_t e = al[1 + j];
        for (int r = 0; r < n2; r++) {
            size_t row = e * n2 + r;
            for (int q = al[P + 2 + j]; q < al[P + 3 + j]; q++) {
                int p = al[2 * P + 3 + q], b = p / SH->topk;
                double v = k3_mxfp4_dot_cpu(K3_BF(L, K3_A_LATN) + (size_t)b * Lt,
                                            K3_U8(L, K3_W_RT_GU) + row * Lt / 2,
                                            K3_U8(L, K3_W_RT_GU_S) + row * Lt / K3_MX_GROUP, Lt);
                K3_BF(L, K3_A_RGU)[(size_t)p * n2 + r] = k3_f32_to_bf16((float)v);
            }
        }
    }
}
static void op_moe_act(struct k3_layer *L)
{
    k3_situ_cpu(NB * SH->topk, SH->expert_inter, K3_BF(L, K3_A_RGU), SH->situ_beta,
                SH->situ_linear_beta, K3_BF(L, K3_A_RH));
}
/* Grouped MXFP4 down rows; each pair's output, times its routing weight,
 * accumulates into the float latent sum. */
static void op_moe_down(struct k3_layer *L)
{
    int P = NB * SH->topk, I = SH->expert_inter, Lt = SH->latent;
    const int32_t *al = K3_I32(L, K3_A_ALIGN);
    for (int j = 0; j < al[0]; j++) {
        size_t e = al[1 + j];
        for (int n = 0; n < Lt; n++) {
            size_t row = e * Lt + n;
            for (int q = al[P + 2 + j]; q < al[P + 3 + j]; q++) {
                int p = al[2 * P + 3 + q], b = p / SH->topk;
                double v = k3_mxfp4_dot_cpu(K3_BF(L, K3_A_RH) + (size_t)p * I,
                                            K3_U8(L, K3_W_RT_DOWN) + row * I / 2,
                                            K3_U8(L, K3_W_RT_DOWN_S) + row * I / K3_MX_GROUP, I);
                K3_F32(L, K3_A_RACC)[(size_t)b * Lt + n] += (float)(K3_F32(L, K3_A_WTS)[p] * v);
            }
        }
    }
}
/* The reduce-scatter of the partial latent is local on one rank: this
 * rank up-projects its slice (columns 0..Ls) and adds the shared experts. */
static void op_moe_combine(struct k3_layer *L)
{
    k3_gemv_xf32_cpu(NB, SH->hidden, SH->latent_shard,
                     K3_F32(L, K3_A_RACC) + (size_t)L->rank * SH->latent_shard, SH->latent,
                     K3_BF(L, K3_W_LAT_OUT), K3_BF(L, K3_A_SHOUT), K3_BF(L, K3_IO_D_OUT));
}

/* ---- fused path: the C form of each fused kernel --------------------- */

/* A projection that normalizes its own input: with x = r (+ d, rounded as
 * the residual is) and gamma the norm weight, each output is
 *     inv_rms(x) * sum_k W[n][k] * (x[k] * gamma[k])
 * so the sum of squares accumulates in the same pass as the dot products
 * and no normalized copy of the input is stored. */
struct fnorm {
    float *xg;  /* [K] x * gamma */
    float inv;  /* 1 / rms(x) */
};
static void fnorm_row(struct fnorm *f, const k3_bf16 *r, const k3_bf16 *d, const float *g,
                      int K, float eps, k3_bf16 *r_out)
{
    double ss = 0;
    for (int i = 0; i < K; i++) {
        float v = d ? k3_round_bf16(BF(r[i]) + BF(d[i])) : BF(r[i]);
        if (r_out)
            r_out[i] = k3_f32_to_bf16(v);
        ss += (double)v * v;
        f->xg[i] = v * g[i];
    }
    f->inv = (float)(1.0 / sqrt(ss / K + eps));
}
static float fnorm_dot(const struct fnorm *f, const k3_bf16 *w, int K)
{
    double s = 0;
    for (int k = 0; k < K; k++)
        s += (double)f->xg[k] * BF(w[k]);
    return (float)(s * f->inv);
}
static float *scratch_row(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p)
        abort(); /* the C model of a kernel's registers: one row */
    return p;
}

/* Residual add + norm + every input projection (q|k|v, decay, beta and
 * output gate) in one pass over the weights. */
static void fop_kda_in_proj(struct k3_layer *L)
{
    int H = SH->hidden, nq = 3 * k3_kda_hd(SH), ng = k3_kda_gw(SH);
    struct fnorm f = {scratch_row(H), 0};
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_IO_R_IN) + (size_t)b * H, K3_BF(L, K3_IO_D_IN) + (size_t)b * H,
                  K3_F32(L, K3_W_ATTN_NORM), H, SH->eps, K3_BF(L, K3_IO_R_OUT) + (size_t)b * H);
        for (int n = 0; n < nq; n++)
            K3_BF(L, K3_A_QKV)[(size_t)b * nq + n] =
                k3_f32_to_bf16(fnorm_dot(&f, K3_BF(L, K3_W_KDA_QKV) + (size_t)n * H, H));
        for (int n = 0; n < ng; n++)
            K3_BF(L, K3_A_GP)[(size_t)b * ng + n] =
                k3_f32_to_bf16(fnorm_dot(&f, K3_BF(L, K3_W_KDA_GATE) + (size_t)n * H, H));
    }
    free(f.xg);
}

/* Short convolution + SiLU and the decay/beta activations in one kernel. */
static void fop_kda_conv_gate(struct k3_layer *L)
{
    int nh = SH->kda_heads, d = SH->head_dim, hd = nh * d, gw = k3_kda_gw(SH);
    int W = SH->conv, hist = W - 1;
    for (int b = 0; b < NB; b++) {
        for (int c = 0; c < 3 * hd; c++) {
            float *st = K3_F32(L, K3_S_KDA_CONV) + ((size_t)b * 3 * hd + c) * hist;
            const float *wc = K3_F32(L, K3_W_KDA_CONV) + (size_t)c * W;
            float x = BF(K3_BF(L, K3_A_QKV)[(size_t)b * 3 * hd + c]);
            float acc = wc[hist] * x;
            for (int t = 0; t < hist; t++)
                acc += wc[t] * st[t];
            for (int t = 0; t + 1 < hist; t++)
                st[t] = st[t + 1];
            st[hist - 1] = x;
            K3_BF(L, K3_A_QKVC)[(size_t)b * 3 * hd + c] = k3_f32_to_bf16(acc * k3_sigmoid(acc));
        }
        const k3_bf16 *gp = K3_BF(L, K3_A_GP) + (size_t)b * gw;
        for (int h = 0; h < nh; h++) {
            float a_scale = expf(K3_F32(L, K3_W_KDA_ALOG)[h]);
            for (int i = 0; i < d; i++) {
                int c = h * d + i;
                K3_F32(L, K3_A_G)[(size_t)b * hd + c] =
                    SH->gate_lower *
                    k3_sigmoid(a_scale * (BF(gp[c]) + K3_F32(L, K3_W_KDA_DTB)[c]));
            }
            K3_F32(L, K3_A_BETA)[(size_t)b * nh + h] = k3_sigmoid(BF(gp[hd + h]));
        }
    }
}

static void fop_mla_in_proj(struct k3_layer *L)
{
    int H = SH->hidden, aw = k3_mla_aw(SH);
    struct fnorm f = {scratch_row(H), 0};
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_IO_R_IN) + (size_t)b * H, K3_BF(L, K3_IO_D_IN) + (size_t)b * H,
                  K3_F32(L, K3_W_ATTN_NORM), H, SH->eps, K3_BF(L, K3_IO_R_OUT) + (size_t)b * H);
        for (int n = 0; n < aw; n++)
            K3_BF(L, K3_A_MA)[(size_t)b * aw + n] =
                k3_f32_to_bf16(fnorm_dot(&f, K3_BF(L, K3_W_MLA_A) + (size_t)n * H, H));
    }
    free(f.xg);
}

/* q norm + q_b projection; the same kernel's cache blocks normalize the
 * new latent row and store it as FP8 directly (no BF16 copy). */
static void fop_mla_q_b_proj_rope(struct k3_layer *L)
{
    int aw = k3_mla_aw(SH), ql = SH->q_lora, n = SH->mla_heads * k3_mla_qw(SH);
    struct fnorm f = {scratch_row(ql), 0};
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_A_MA) + (size_t)b * aw, NULL, K3_F32(L, K3_W_MLA_QNORM), ql,
                  SH->eps, NULL);
        for (int j = 0; j < n; j++)
            K3_BF(L, K3_A_QB)[(size_t)b * n + j] =
                k3_f32_to_bf16(fnorm_dot(&f, K3_BF(L, K3_W_MLA_QB) + (size_t)j * ql, ql));
    }
    free(f.xg);
    k3_mla_kv_cache_cpu(NB, SH->kv_lora, SH->rope, K3_BF(L, K3_A_MA), aw, mla_kv_off(SH),
                        K3_F32(L, K3_W_MLA_KVNORM), SH->eps, K3_U8(L, K3_S_MLA_CACHE),
                        SH->ctx_max, K3_I32(L, K3_S_MLA_POS));
}

/* W_uk absorption in the attention kernel's prologue (the absorbed query
 * stays in float), then decode attention over the FP8 cache. */
static void fop_mla_attention(struct k3_layer *L)
{
    int mh = SH->mla_heads, kv = SH->kv_lora, rope = SH->rope, qw = k3_mla_qw(SH);
    int row_w = kv + rope;
    float scale = mla_scale(SH), ql[1024];
    double acc[1024];
    for (int b = 0; b < NB; b++) {
        int pos = K3_I32(L, K3_S_MLA_POS)[b];
        for (int h = 0; h < mh; h++) {
            const k3_bf16 *qb = K3_BF(L, K3_A_QB) + (size_t)b * mh * qw + h * qw;
            for (int c = 0; c < kv; c++) {
                const k3_bf16 *w = K3_BF(L, K3_W_MLA_UK) + ((size_t)h * kv + c) * SH->nope;
                double s = 0;
                for (int i = 0; i < SH->nope; i++)
                    s += (double)BF(w[i]) * BF(qb[i]);
                ql[c] = (float)s;
                acc[c] = 0;
            }
            double m = -INFINITY, l = 0;
            for (int t = 0; t <= pos; t++) {
                const uint8_t *row =
                    K3_U8(L, K3_S_MLA_CACHE) + ((size_t)b * SH->ctx_max + t) * row_w;
                double s = 0;
                for (int c = 0; c < kv; c++)
                    s += (double)ql[c] * k3_fp8_to_f32(row[c]);
                for (int j = 0; j < rope; j++)
                    s += (double)BF(qb[SH->nope + j]) * k3_fp8_to_f32(row[kv + j]);
                s *= scale;
                double mn = s > m ? s : m, corr = exp(m - mn), p = exp(s - mn);
                l = l * corr + p;
                for (int c = 0; c < kv; c++)
                    acc[c] = acc[c] * corr + p * k3_fp8_to_f32(row[c]);
                m = mn;
            }
            for (int c = 0; c < kv; c++)
                K3_BF(L, K3_A_OLAT)[((size_t)b * mh + h) * kv + c] =
                    k3_f32_to_bf16((float)(acc[c] / l));
        }
    }
}

static void fop_mla_v_up_gate(struct k3_layer *L)
{
    k3_mla_vup_cpu(NB, SH->mla_heads, SH->kv_lora, SH->v_head, K3_BF(L, K3_A_OLAT),
                   K3_BF(L, K3_W_MLA_UV), K3_BF(L, K3_A_MA) + mla_gate_off(SH), k3_mla_aw(SH),
                   K3_BF(L, K3_A_O));
}

/* Output projection + reduction + residual: each rank's partial is
 * exchanged in BF16 (rounded here), summed and added to the residual. */
static void fop_o_proj_ar_residual(struct k3_layer *L)
{
    int H = SH->hidden, K = k3_attn_width(SH, L->kind);
    const k3_bf16 *in = attn_out(L);
    for (int b = 0; b < NB; b++)
        for (int n = 0; n < H; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)BF(in[(size_t)b * K + k]) * BF(K3_BF(L, K3_W_O)[(size_t)n * K + k]);
            k3_bf16 *r = K3_BF(L, K3_IO_R_OUT) + (size_t)b * H + n;
            *r = k3_f32_to_bf16(BF(*r) + k3_round_bf16((float)s));
        }
}

/* Router part 1: logits of the normalized residual (norm in the kernel). */
static void fop_router_gemm(struct k3_layer *L)
{
    int H = SH->hidden, E = SH->experts;
    struct fnorm f = {scratch_row(H), 0};
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, NULL, K3_F32(L, K3_W_MOE_NORM), H,
                  SH->eps, NULL);
        for (int n = 0; n < E; n++)
            K3_F32(L, K3_A_LOGITS)[(size_t)b * E + n] =
                fnorm_dot(&f, K3_BF(L, K3_W_ROUTER) + (size_t)n * H, H);
    }
    free(f.xg);
}

static void fop_shared_gate_up_act(struct k3_layer *L)
{
    int H = SH->hidden, SI = SH->shared_inter;
    struct fnorm f = {scratch_row(H), 0};
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, NULL, K3_F32(L, K3_W_MOE_NORM), H,
                  SH->eps, NULL);
        for (int j = 0; j < SI; j++) {
            float g = fnorm_dot(&f, K3_BF(L, K3_W_SH_GU) + (size_t)j * H, H);
            float u = fnorm_dot(&f, K3_BF(L, K3_W_SH_GU) + (size_t)(SI + j) * H, H);
            K3_BF(L, K3_A_SHH)[(size_t)b * SI + j] =
                k3_f32_to_bf16(k3_situ(g, u, SH->situ_beta, SH->situ_linear_beta));
        }
    }
    free(f.xg);
}

static void fop_moe_latent_down(struct k3_layer *L)
{
    int H = SH->hidden, Ls = SH->latent_shard;
    struct fnorm f = {scratch_row(H), 0};
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, NULL, K3_F32(L, K3_W_MOE_NORM), H,
                  SH->eps, NULL);
        for (int n = 0; n < Ls; n++)
            K3_BF(L, K3_A_LAT)[(size_t)b * SH->latent + (size_t)L->rank * Ls + n] =
                k3_f32_to_bf16(fnorm_dot(&f, K3_BF(L, K3_W_LAT_IN) + (size_t)n * H, H));
    }
    free(f.xg);
}

static float fmx_dot(const struct fnorm *f, const uint8_t *w, const uint8_t *sc, int K)
{
    double acc = 0;
    for (int g = 0; g < K / K3_MX_GROUP; g++) {
        double part = 0;
        for (int j = g * K3_MX_GROUP; j < (g + 1) * K3_MX_GROUP; j++)
            part += (double)k3_e2m1_to_f32((w[j / 2] >> ((j & 1) * 4)) & 15u) * f->xg[j];
        acc += part * k3_e8m0_to_f32(sc[g]);
    }
    return (float)(acc * f->inv);
}

/* Latent norm in the prologue, MXFP4 gate and up rows of each chosen
 * expert, SiTU in the epilogue; the grouping by expert happens inside the
 * kernel (no align kernel), which also clears the routed accumulator. */
static void fop_moe_gate_up_act(struct k3_layer *L)
{
    int Lt = SH->latent, I = SH->expert_inter, k = SH->topk;
    struct fnorm f = {scratch_row(Lt), 0};
    memset(K3_F32(L, K3_A_RACC), 0, L->t[K3_A_RACC].count * 4);
    for (int b = 0; b < NB; b++) {
        fnorm_row(&f, K3_BF(L, K3_A_LAT) + (size_t)b * Lt, NULL, K3_F32(L, K3_W_LAT_NORM), Lt,
                  SH->eps, NULL);
        for (int s = 0; s < k; s++) {
            size_t e = K3_I32(L, K3_A_IDS)[(size_t)b * k + s];
            for (int j = 0; j < I; j++) {
                size_t rg = e * 2 * I + j, ru = rg + I;
                float g = fmx_dot(&f, K3_U8(L, K3_W_RT_GU) + rg * Lt / 2,
                                  K3_U8(L, K3_W_RT_GU_S) + rg * Lt / K3_MX_GROUP, Lt);
                float u = fmx_dot(&f, K3_U8(L, K3_W_RT_GU) + ru * Lt / 2,
                                  K3_U8(L, K3_W_RT_GU_S) + ru * Lt / K3_MX_GROUP, Lt);
                K3_BF(L, K3_A_RH)[((size_t)b * k + s) * I + j] =
                    k3_f32_to_bf16(k3_situ(g, u, SH->situ_beta, SH->situ_linear_beta));
            }
        }
    }
    free(f.xg);
}

static void fop_moe_down(struct k3_layer *L)
{
    int Lt = SH->latent, I = SH->expert_inter, k = SH->topk;
    for (int b = 0; b < NB; b++)
        for (int s = 0; s < k; s++) {
            size_t p = (size_t)b * k + s, e = K3_I32(L, K3_A_IDS)[p];
            for (int n = 0; n < Lt; n++) {
                size_t row = e * Lt + n;
                double v = k3_mxfp4_dot_cpu(K3_BF(L, K3_A_RH) + p * I,
                                            K3_U8(L, K3_W_RT_DOWN) + row * I / 2,
                                            K3_U8(L, K3_W_RT_DOWN_S) + row * I / K3_MX_GROUP, I);
                K3_F32(L, K3_A_RACC)[(size_t)b * Lt + n] += (float)(K3_F32(L, K3_A_WTS)[p] * v);
            }
        }
}

/* Latent up-projection + shared experts + reduction + residual add. */
static void fop_moe_combine_ar_residual(struct k3_layer *L)
{
    int H = SH->hidden, Ls = SH->latent_shard, Lt = SH->latent;
    for (int b = 0; b < NB; b++)
        for (int n = 0; n < H; n++) {
            double s = 0;
            for (int j = 0; j < Ls; j++)
                s += (double)K3_F32(L, K3_A_RACC)[(size_t)b * Lt + (size_t)L->rank * Ls + j] *
                     BF(K3_BF(L, K3_W_LAT_OUT)[(size_t)n * Ls + j]);
            s += BF(K3_BF(L, K3_A_SHOUT)[(size_t)b * H + n]);
            k3_bf16 *r = K3_BF(L, K3_IO_R_OUT) + (size_t)b * H + n;
            *r = k3_f32_to_bf16(BF(*r) + k3_round_bf16((float)s));
        }
}

/* ---- the tables ------------------------------------------------------ */

#define NO K3_T_COUNT
static const struct k3_op all_ops[K3_OP_COUNT] = {
    {K3_OP_INPUT_NORM, "input_norm", NULL, 0, 0, op_input_norm, {K3_IO_R_OUT, K3_A_XN, NO, NO}},
    {K3_OP_KDA_QKV_PROJ, "kda_qkv_proj", NULL, 0, 0, op_kda_qkv_proj, {K3_A_QKV, NO, NO, NO}},
    {K3_OP_KDA_SHORT_CONV, "kda_short_conv", NULL, 0, 0, op_kda_short_conv,
     {K3_A_QKVC, K3_S_KDA_CONV, NO, NO}},
    {K3_OP_KDA_GATE_PROJ, "kda_gate_proj", NULL, 0, 0, op_kda_gate_proj, {K3_A_GP, NO, NO, NO}},
    {K3_OP_KDA_GATE_ACT, "kda_gate_act", NULL, 0, 0, op_kda_gate_act, {K3_A_G, K3_A_BETA, NO, NO}},
    {K3_OP_KDA_RECURRENT, "kda_recurrent", NULL, 0, 0, op_kda_recurrent,
     {K3_A_O, K3_S_KDA_STATE, NO, NO}},
    {K3_OP_KDA_OUT_GATE_PROJ, "kda_out_gate_proj", NULL, 0, 0, op_kda_out_gate_proj,
     {K3_A_GP, NO, NO, NO}},
    {K3_OP_KDA_OUT_NORM_GATE, "kda_out_norm_gate", NULL, 0, 0, op_kda_out_norm_gate,
     {K3_A_ON, NO, NO, NO}},
    {K3_OP_MLA_QKV_A_PROJ, "mla_qkv_a_proj", NULL, 0, 0, op_mla_qkv_a_proj, {K3_A_MA, NO, NO, NO}},
    {K3_OP_MLA_QKV_A_NORM, "mla_qkv_a_norm", NULL, 0, 0, op_mla_qkv_a_norm,
     {K3_A_QAN, K3_A_KVN, NO, NO}},
    {K3_OP_MLA_Q_B_PROJ, "mla_q_b_proj", NULL, 0, 0, op_mla_q_b_proj, {K3_A_QB, NO, NO, NO}},
    {K3_OP_MLA_ROPE_CACHE_WRITE, "mla_rope_cache_write", NULL, 0, 0, op_mla_rope_cache_write,
     {K3_S_MLA_CACHE, NO, NO, NO}},
    {K3_OP_MLA_Q_ABSORB, "mla_q_absorb", NULL, 0, 0, op_mla_q_absorb, {K3_A_QLAT, NO, NO, NO}},
    {K3_OP_MLA_ATTENTION, "mla_attention", NULL, 0, 0, op_mla_attention, {K3_A_OLAT, NO, NO, NO}},
    {K3_OP_MLA_V_UP, "mla_v_up", NULL, 0, 0, op_mla_v_up, {K3_A_O, NO, NO, NO}},
    {K3_OP_MLA_OUT_GATE, "mla_out_gate", NULL, 0, 0, op_mla_out_gate, {K3_A_O, K3_A_MA, NO, NO}},
    {K3_OP_ATTN_O_PROJ, "attn_o_proj", NULL, 0, 0, op_attn_o_proj, {K3_A_ATT, NO, NO, NO}},
    {K3_OP_ATTN_ALLREDUCE, "attn_allreduce", NULL, 0, 1, op_allreduce_local, {NO, NO, NO, NO}},
    {K3_OP_POST_ATTN_NORM, "post_attn_norm", NULL, 0, 0, op_post_attn_norm,
     {K3_IO_R_OUT, K3_A_XN2, NO, NO}},
    {K3_OP_ROUTER_GEMM, "router_gemm", NULL, 0, 0, op_router_gemm, {K3_A_LOGITS, NO, NO, NO}},
    {K3_OP_ROUTER_TOPK, "router_topk", NULL, 0, 0, op_router_topk, {K3_A_IDS, K3_A_WTS, NO, NO}},
    {K3_OP_SHARED_GATE_UP, "shared_gate_up", NULL, 0, 0, op_shared_gate_up, {K3_A_SHGU, NO, NO, NO}},
    {K3_OP_SHARED_ACT, "shared_act", NULL, 0, 0, op_shared_act, {K3_A_SHH, NO, NO, NO}},
    {K3_OP_SHARED_DOWN, "shared_down", NULL, 0, 0, op_shared_down, {K3_A_SHOUT, NO, NO, NO}},
    {K3_OP_MOE_LATENT_DOWN, "moe_latent_down", NULL, 0, 0, op_moe_latent_down,
     {K3_A_LAT, NO, NO, NO}},
    {K3_OP_MOE_ALIGN, "moe_align", NULL, 0, 0, op_moe_align, {K3_A_LATN, K3_A_ALIGN, NO, NO}},
    {K3_OP_MOE_GATE_UP, "moe_gate_up", NULL, 0, 0, op_moe_gate_up, {K3_A_RGU, NO, NO, NO}},
    {K3_OP_MOE_ACT, "moe_act", NULL, 0, 0, op_moe_act, {K3_A_RH, NO, NO, NO}},
    {K3_OP_MOE_DOWN, "moe_down", NULL, 0, 0, op_moe_down, {K3_A_RACC, NO, NO, NO}},
    {K3_OP_MOE_COMBINE, "moe_combine", NULL, 0, 0, op_moe_combine, {K3_IO_D_OUT, NO, NO, NO}},
    {K3_OP_MOE_ALLREDUCE, "moe_allreduce", NULL, 0, 1, op_allreduce_local, {NO, NO, NO, NO}},
    {K3_OP_F_KDA_IN_PROJ, "kda_in_proj_small", "kda_in_proj_large", 0, 0, fop_kda_in_proj,
     {K3_IO_R_OUT, K3_A_QKV, K3_A_GP, NO}},
    {K3_OP_F_KDA_CONV_GATE, "kda_conv_gate", NULL, 0, 0, fop_kda_conv_gate,
     {K3_A_QKVC, K3_S_KDA_CONV, K3_A_G, K3_A_BETA}},
    {K3_OP_F_MLA_IN_PROJ, "mla_in_proj_small", "mla_in_proj_large", 0, 0, fop_mla_in_proj,
     {K3_IO_R_OUT, K3_A_MA, NO, NO}},
    {K3_OP_F_MLA_Q_B_PROJ_ROPE, "mla_q_b_proj_rope", NULL, 0, 0, fop_mla_q_b_proj_rope,
     {K3_A_QB, K3_S_MLA_CACHE, NO, NO}},
    {K3_OP_F_MLA_ATTENTION, "mla_attention", NULL, 0, 0, fop_mla_attention, {K3_A_OLAT, NO, NO, NO}},
    {K3_OP_F_MLA_V_UP_GATE, "mla_v_up_gate", NULL, 0, 0, fop_mla_v_up_gate, {K3_A_O, NO, NO, NO}},
    {K3_OP_F_O_PROJ_AR_RESIDUAL, "o_proj_allreduce_residual", NULL, 0, 1, fop_o_proj_ar_residual,
     {K3_IO_R_OUT, NO, NO, NO}},
    {K3_OP_F_ROUTER_GEMM, "router_gemm", NULL, 0, 0, fop_router_gemm, {K3_A_LOGITS, NO, NO, NO}},
    {K3_OP_F_SHARED_GATE_UP_ACT, "shared_gate_up_act", NULL, 1, 0, fop_shared_gate_up_act,
     {K3_A_SHH, NO, NO, NO}},
    {K3_OP_F_SHARED_DOWN, "shared_down", NULL, 1, 0, op_shared_down, {K3_A_SHOUT, NO, NO, NO}},
    {K3_OP_F_MOE_LATENT_DOWN, "moe_latent_down", NULL, 0, 0, fop_moe_latent_down,
     {K3_A_LAT, NO, NO, NO}},
    {K3_OP_F_MOE_GATE_UP_ACT, "moe_gate_up_act", NULL, 0, 0, fop_moe_gate_up_act,
     {K3_A_RH, NO, NO, NO}},
    {K3_OP_F_MOE_DOWN, "moe_down", NULL, 0, 0, fop_moe_down, {K3_A_RACC, NO, NO, NO}},
    {K3_OP_F_MOE_COMBINE_AR_RESIDUAL, "moe_combine_allreduce_residual", NULL, 0, 1,
     fop_moe_combine_ar_residual, {K3_IO_R_OUT, NO, NO, NO}},
};
#undef NO

#define OP(id) all_ops[id]
#define STD_MOE                                                              \
    OP(K3_OP_POST_ATTN_NORM), OP(K3_OP_ROUTER_GEMM), OP(K3_OP_ROUTER_TOPK),  \
        OP(K3_OP_SHARED_GATE_UP), OP(K3_OP_SHARED_ACT), OP(K3_OP_SHARED_DOWN), \
        OP(K3_OP_MOE_LATENT_DOWN), OP(K3_OP_MOE_ALIGN), OP(K3_OP_MOE_GATE_UP), \
        OP(K3_OP_MOE_ACT), OP(K3_OP_MOE_DOWN), OP(K3_OP_MOE_COMBINE),        \
        OP(K3_OP_MOE_ALLREDUCE)
#define FUSED_MOE                                                            \
    OP(K3_OP_F_ROUTER_GEMM), OP(K3_OP_ROUTER_TOPK),                          \
        OP(K3_OP_F_SHARED_GATE_UP_ACT), OP(K3_OP_F_SHARED_DOWN),             \
        OP(K3_OP_F_MOE_LATENT_DOWN), OP(K3_OP_F_MOE_GATE_UP_ACT),            \
        OP(K3_OP_F_MOE_DOWN), OP(K3_OP_F_MOE_COMBINE_AR_RESIDUAL)
static const struct k3_op std_kda[] = {
    OP(K3_OP_INPUT_NORM), OP(K3_OP_KDA_QKV_PROJ), OP(K3_OP_KDA_SHORT_CONV),
    OP(K3_OP_KDA_GATE_PROJ), OP(K3_OP_KDA_GATE_ACT), OP(K3_OP_KDA_RECURRENT),
    OP(K3_OP_KDA_OUT_GATE_PROJ), OP(K3_OP_KDA_OUT_NORM_GATE), OP(K3_OP_ATTN_O_PROJ),
    OP(K3_OP_ATTN_ALLREDUCE), STD_MOE,
};
static const struct k3_op std_mla[] = {
    OP(K3_OP_INPUT_NORM), OP(K3_OP_MLA_QKV_A_PROJ), OP(K3_OP_MLA_QKV_A_NORM),
    OP(K3_OP_MLA_Q_B_PROJ), OP(K3_OP_MLA_ROPE_CACHE_WRITE), OP(K3_OP_MLA_Q_ABSORB),
    OP(K3_OP_MLA_ATTENTION), OP(K3_OP_MLA_V_UP), OP(K3_OP_MLA_OUT_GATE),
    OP(K3_OP_ATTN_O_PROJ), OP(K3_OP_ATTN_ALLREDUCE), STD_MOE,
};
static const struct k3_op fused_kda[] = {
    OP(K3_OP_F_KDA_IN_PROJ), OP(K3_OP_F_KDA_CONV_GATE), OP(K3_OP_KDA_RECURRENT),
    OP(K3_OP_KDA_OUT_NORM_GATE), OP(K3_OP_F_O_PROJ_AR_RESIDUAL), FUSED_MOE,
};
static const struct k3_op fused_mla[] = {
    OP(K3_OP_F_MLA_IN_PROJ), OP(K3_OP_F_MLA_Q_B_PROJ_ROPE), OP(K3_OP_F_MLA_ATTENTION),
    OP(K3_OP_F_MLA_V_UP_GATE), OP(K3_OP_F_O_PROJ_AR_RESIDUAL), FUSED_MOE,
};

int k3_path_ops(enum k3_path p, enum k3_kind k, const struct k3_op **ops)
{
    if (p == K3_STANDARD) {
        *ops = k == K3_KDA ? std_kda : std_mla;
        return k == K3_KDA ? (int)(sizeof std_kda / sizeof *std_kda)
                           : (int)(sizeof std_mla / sizeof *std_mla);
    }
    *ops = k == K3_KDA ? fused_kda : fused_mla;
    return k == K3_KDA ? (int)(sizeof fused_kda / sizeof *fused_kda)
                       : (int)(sizeof fused_mla / sizeof *fused_mla);
}

const struct k3_op *k3_op_by_id(enum k3_op_id id)
{
    return (int)id >= 0 && id < K3_OP_COUNT ? &all_ops[id] : NULL;
}

const char *k3_op_name(const struct k3_op *op, int batch)
{
    return batch > K3_SMALL_BATCH && op->name_large ? op->name_large : op->name;
}

void k3_layer_run_cpu(struct k3_layer *L, enum k3_path p)
{
    const struct k3_op *ops;
    int n = k3_path_ops(p, L->kind, &ops);
    for (int i = 0; i < n; i++)
        ops[i].cpu(L);
}

/* ---- cost: minimal bytes and FLOPs ----------------------------------- */

static double distinct_experts(const struct k3_layer *L)
{
    unsigned char seen[4096] = {0};
    int n = 0;
    for (int i = 0; i < L->batch * L->sh.topk; i++) {
        int e = K3_I32(L, K3_A_IDS)[i];
        if (e >= 0 && e < L->sh.experts && !seen[e]) {
            seen[e] = 1;
            n++;
        }
    }
    return n;
}

void k3_op_cost(const struct k3_layer *L, enum k3_op_id id, double *bytes, double *flops)
{
    double ctx = 0;
    if (L->kind == K3_MLA)
        for (int b = 0; b < L->batch; b++)
            ctx += K3_I32(L, K3_S_MLA_POS)[b] + 1;
    k3_op_cost_shape(&L->sh, L->kind, L->batch, distinct_experts(L), ctx, id, bytes, flops);
}

int k3_same_experts(int B, int k, const int32_t *a, const int32_t *b)
{
    for (int t = 0; t < B; t++)
        for (int i = 0; i < k; i++) {
            int found = 0;
            for (int j = 0; j < k && !found; j++)
                found = a[(size_t)t * k + i] == b[(size_t)t * k + j];
            if (!found)
                return 0;
        }
    return 1;
}

double k3_experts_touched(const struct k3_shape *s, int batch)
{
    return s->experts * (1.0 - pow(1.0 - (double)s->topk / s->experts, batch));
}

void k3_op_cost_shape(const struct k3_shape *s, enum k3_kind kind, int batch, double ue,
                      double ctx, enum k3_op_id id, double *bytes, double *flops)
{
    double B = batch, H = s->hidden, hd = k3_kda_hd(s), gw = k3_kda_gw(s);
    double aw = k3_mla_aw(s), E = s->experts, k = s->topk, I = s->expert_inter;
    double SI = s->shared_inter, Lt = s->latent, Ls = s->latent_shard, mh = s->mla_heads;
    double nh = s->kda_heads, kv = s->kv_lora, qw = k3_mla_qw(s), d = s->head_dim;
    double aow = k3_attn_width(s, kind), P = B * k;
    double row = kv + s->rope, ga = aw - (s->q_lora + row);
    double conv_st = B * 3 * hd * (s->conv - 1) * 4 * 2;
    double fp4 = 0.5 + 1.0 / K3_MX_GROUP; /* MXFP4 bytes per weight */
    double by = 0, fl = 0;
#define GEMV(N, K, wb) (by += (N) * (K) * (wb) + B * ((K) + (N)) * 2, fl += 2 * B * (N) * (K))
    switch (id) {
    case K3_OP_INPUT_NORM: case K3_OP_POST_ATTN_NORM: by = B * H * 2 * 4; fl = 6 * B * H; break;
    case K3_OP_KDA_QKV_PROJ: GEMV(3 * hd, H, 2); break;
    case K3_OP_KDA_GATE_PROJ: GEMV(hd + nh, H, 2); break;
    case K3_OP_KDA_OUT_GATE_PROJ: GEMV(hd, H, 2); break;
    case K3_OP_F_KDA_IN_PROJ: GEMV(3 * hd + gw, H, 2); by += B * H * 4; break;
    case K3_OP_KDA_SHORT_CONV: by = B * 3 * hd * 4 + conv_st; fl = B * 3 * hd * 2 * s->conv; break;
    case K3_OP_KDA_GATE_ACT: by = B * (hd + nh) * (2 + 4); fl = B * hd * 10; break;
    case K3_OP_F_KDA_CONV_GATE:
        by = B * 3 * hd * 4 + conv_st + B * (hd + nh) * 6; fl = B * 3 * hd * 2 * s->conv; break;
    case K3_OP_KDA_RECURRENT: by = B * hd * d * 4 * 2 + B * hd * (3 * 2 + 4 + 2); fl = B * hd * d * 8; break;
    case K3_OP_KDA_OUT_NORM_GATE: by = B * hd * 2 * 3; fl = B * hd * 8; break;
    case K3_OP_MLA_QKV_A_PROJ: GEMV(aw - ga, H, 2); break;
    case K3_OP_F_MLA_IN_PROJ: GEMV(aw, H, 2); by += B * H * 4; break;
    case K3_OP_MLA_QKV_A_NORM: by = B * (s->q_lora + row) * 4; fl = 4 * B * (s->q_lora + row); break;
    case K3_OP_MLA_ROPE_CACHE_WRITE: by = B * row * 3; fl = B * row; break;
    case K3_OP_MLA_Q_B_PROJ: GEMV(mh * qw, s->q_lora, 2); break;
    case K3_OP_F_MLA_Q_B_PROJ_ROPE: GEMV(mh * qw, s->q_lora, 2); by += B * row * 3; break;
    case K3_OP_MLA_Q_ABSORB: GEMV(mh * kv, s->nope, 2); break;
    case K3_OP_MLA_ATTENTION: by = ctx * row + B * mh * (kv + qw + kv) * 2; fl = 2 * ctx * mh * (row + kv); break;
    case K3_OP_F_MLA_ATTENTION:
        by = ctx * row + B * mh * (qw + kv) * 2; fl = 2 * ctx * mh * (row + kv);
        GEMV(mh * kv, s->nope, 2); break;
    case K3_OP_MLA_V_UP: GEMV(mh * s->v_head, kv, 2); break;
    case K3_OP_MLA_OUT_GATE: GEMV(ga, H, 2); by += B * ga * 4; break;
    case K3_OP_F_MLA_V_UP_GATE: GEMV(mh * s->v_head, kv, 2); by += B * ga * 2; break;
    case K3_OP_ATTN_O_PROJ: GEMV(H, aow, 2); break;
    case K3_OP_F_O_PROJ_AR_RESIDUAL: GEMV(H, aow, 2); by += B * H * 4; break;
    case K3_OP_ATTN_ALLREDUCE: case K3_OP_MOE_ALLREDUCE: by = B * H * 2 * 2; fl = B * H; break;
    case K3_OP_ROUTER_GEMM: GEMV(E, H, 2); by += B * E * 2; break;
    case K3_OP_F_ROUTER_GEMM: GEMV(E, H, 2); by += B * E * 2 + B * H * 4; break;
    case K3_OP_ROUTER_TOPK: by = B * E * 4 + E * 4 + P * 8; fl = B * E * (k + 4); break;
    case K3_OP_SHARED_GATE_UP: GEMV(2 * SI, H, 2); break;
    case K3_OP_SHARED_ACT: by = B * SI * 2 * 3; fl = B * SI * 10; break;
    case K3_OP_SHARED_DOWN: case K3_OP_F_SHARED_DOWN: GEMV(H, SI, 2); break;
    case K3_OP_F_SHARED_GATE_UP_ACT: GEMV(2 * SI, H, 2); by += B * H * 4 - B * SI * 2; break;
    case K3_OP_MOE_LATENT_DOWN: GEMV(Ls, H, 2); break;
    case K3_OP_F_MOE_LATENT_DOWN: GEMV(Ls, H, 2); by += B * H * 4; break;
    case K3_OP_MOE_ALIGN: by = B * Lt * 4 + P * 12 + B * Lt * 4; fl = 4 * B * Lt; break;
    case K3_OP_MOE_GATE_UP:
        by = ue * 2 * I * Lt * fp4 + B * Lt * 2 + P * 2 * I * 2; fl = 2 * P * 2 * I * Lt; break;
    case K3_OP_F_MOE_GATE_UP_ACT:
        by = ue * 2 * I * Lt * fp4 + B * Lt * 2 + P * I * 2 + B * Lt * 4; fl = 2 * P * 2 * I * Lt; break;
    case K3_OP_MOE_ACT: by = P * I * 2 * 3; fl = P * I * 10; break;
    case K3_OP_MOE_DOWN: case K3_OP_F_MOE_DOWN:
        by = ue * Lt * I * fp4 + P * I * 2 + B * Lt * 4 * 2; fl = 2 * P * Lt * I; break;
    case K3_OP_MOE_COMBINE: GEMV(H, Ls, 2); by += B * Ls * 2 + B * H * 2; break;
    case K3_OP_F_MOE_COMBINE_AR_RESIDUAL: GEMV(H, Ls, 2); by += B * Ls * 2 + B * H * 6; break;
    default: break;
    }
#undef GEMV
    *bytes = by;
    *flops = fl;
}
