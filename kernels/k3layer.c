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
        .latent = 3584, .ctx_max = ctx_max, .eps = 1e-5f,
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
        .shared_inter = 64, .latent = 128, .ctx_max = ctx_max, .eps = 1e-5f,
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
    if (s->experts <= 0 || s->experts > 4096 || s->topk <= 0 || s->topk > 32 ||
        s->topk > s->experts)
        return kerr(err, "experts %d / topk %d out of range", s->experts, s->topk);
    if (s->conv < 2 || s->conv > 8)
        return kerr(err, "conv width %d: must be 2..8", s->conv);
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
    size_t SI = s->shared_inter, Lt = s->latent;
    size_t nh = s->kda_heads, d = s->head_dim, hd = nh * d;
    size_t gw = k3_kda_gw(s), mh = s->mla_heads, aw = k3_mla_aw(s);
    size_t kv = s->kv_lora, qw = k3_mla_qw(s), aow = k3_attn_width(s, kind);
    int kda = kind == K3_KDA, mla = kind == K3_MLA;
    size_t rmax = 2 * I > Lt ? 2 * I : Lt;
#define T(id, dt, n) t[id] = (struct k3_tensor){#id + 3, dt, (n), NULL, NULL}
    T(K3_W_ATTN_NORM, K3_DT_F32, H);
    T(K3_W_MOE_NORM, K3_DT_F32, H);
    T(K3_W_O, K3_DT_BF16, H * aow);
    T(K3_W_ROUTER, K3_DT_BF16, E * H);
    T(K3_W_ROUTER_BIAS, K3_DT_F32, E);
    T(K3_W_SH_GU, K3_DT_BF16, 2 * SI * H);
    T(K3_W_SH_DOWN, K3_DT_BF16, H * SI);
    T(K3_W_LAT_IN, K3_DT_BF16, Lt * H);
    T(K3_W_LAT_NORM, K3_DT_F32, Lt);
    T(K3_W_RT_GU, K3_DT_U8, E * 2 * I * Lt / 2);
    T(K3_W_RT_GU_S, K3_DT_U8, E * 2 * I * Lt / K3_MX_GROUP);
    T(K3_W_RT_DOWN, K3_DT_U8, E * Lt * I / 2);
    T(K3_W_RT_DOWN_S, K3_DT_U8, E * Lt * I / K3_MX_GROUP);
    T(K3_W_LAT_OUT, K3_DT_BF16, H * Lt);
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
    T(K3_A_RGU, K3_DT_BF16, B * k * 2 * I);
    T(K3_A_RH, K3_DT_BF16, B * k * I);
    T(K3_A_RY, K3_DT_BF16, B * k * Lt);
    T(K3_A_RF32, K3_DT_F32, B * k * rmax);
    T(K3_A_RLAT, K3_DT_BF16, B * Lt);
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
        uint8_t *c = K3_U8(L, K3_S_MLA_CACHE);
        for (size_t i = 0; i < t[K3_S_MLA_CACHE].count; i++)
            c[i] = k3_f32_to_fp8(krng_normal(&r));
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
    memset(t[K3_IO_R_OUT].host, 0xff, t[K3_IO_R_OUT].count * 2);
    memset(t[K3_IO_D_OUT].host, 0xff, t[K3_IO_D_OUT].count * 2);
}

/* ---- standard path: one reference operation per kernel --------------- */

#define SH (&L->sh)
#define NB (L->batch)

static void op_attn_add_norm(struct k3_layer *L)
{
    memcpy(K3_BF(L, K3_IO_R_OUT), K3_BF(L, K3_IO_R_IN), L->t[K3_IO_R_IN].count * 2);
    k3_add_rmsnorm_cpu(NB, SH->hidden, K3_BF(L, K3_IO_R_OUT), K3_BF(L, K3_IO_D_IN),
                       K3_F32(L, K3_W_ATTN_NORM), SH->eps, K3_BF(L, K3_A_XN));
}
static void op_kda_qkv_proj(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, 3 * k3_kda_hd(SH), SH->hidden, K3_BF(L, K3_A_XN),
                     K3_BF(L, K3_W_KDA_QKV), NULL, K3_BF(L, K3_A_QKV));
}
static void op_kda_gate_proj(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, k3_kda_gw(SH), SH->hidden, K3_BF(L, K3_A_XN),
                     K3_BF(L, K3_W_KDA_GATE), NULL, K3_BF(L, K3_A_GP));
}
static void op_kda_conv(struct k3_layer *L)
{
    k3_kda_conv_cpu(NB, 3 * k3_kda_hd(SH), SH->conv, K3_BF(L, K3_A_QKV),
                    K3_F32(L, K3_W_KDA_CONV), K3_F32(L, K3_S_KDA_CONV),
                    K3_BF(L, K3_A_QKVC));
}
static void op_kda_gates(struct k3_layer *L)
{
    k3_kda_gates_cpu(NB, SH->kda_heads, SH->head_dim, K3_BF(L, K3_A_GP),
                     K3_F32(L, K3_W_KDA_ALOG), K3_F32(L, K3_W_KDA_DTB),
                     SH->gate_lower, K3_F32(L, K3_A_G), K3_F32(L, K3_A_BETA));
}
static void op_kda_recurrent(struct k3_layer *L)
{
    k3_kda_recurrent_cpu(NB, SH->kda_heads, SH->head_dim, K3_BF(L, K3_A_QKVC),
                         K3_F32(L, K3_A_G), K3_F32(L, K3_A_BETA),
                         K3_F32(L, K3_S_KDA_STATE), K3_BF(L, K3_A_O));
}
static void op_kda_out_norm(struct k3_layer *L)
{
    int hd = k3_kda_hd(SH);
    k3_kda_out_norm_cpu(NB, SH->kda_heads, SH->head_dim, K3_BF(L, K3_A_O),
                        K3_BF(L, K3_A_GP) + hd + SH->kda_heads, k3_kda_gw(SH),
                        K3_F32(L, K3_W_KDA_ONORM), SH->eps, K3_BF(L, K3_A_ON));
}
static void op_mla_a_proj(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, k3_mla_aw(SH), SH->hidden, K3_BF(L, K3_A_XN),
                     K3_BF(L, K3_W_MLA_A), NULL, K3_BF(L, K3_A_MA));
}
static void op_mla_q_norm(struct k3_layer *L)
{
    k3_rmsnorm_cpu(NB, SH->q_lora, K3_BF(L, K3_A_MA), k3_mla_aw(SH),
                   K3_F32(L, K3_W_MLA_QNORM), SH->eps, K3_BF(L, K3_A_QAN), SH->q_lora);
}
static void op_mla_kv_cache(struct k3_layer *L)
{
    k3_mla_kv_cache_cpu(NB, SH->kv_lora, SH->rope, K3_BF(L, K3_A_MA), k3_mla_aw(SH),
                        SH->q_lora, K3_F32(L, K3_W_MLA_KVNORM), SH->eps,
                        K3_U8(L, K3_S_MLA_CACHE), SH->ctx_max, K3_I32(L, K3_S_MLA_POS));
}
static void op_mla_q_b_proj(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, SH->mla_heads * k3_mla_qw(SH), SH->q_lora, K3_BF(L, K3_A_QAN),
                     K3_BF(L, K3_W_MLA_QB), NULL, K3_BF(L, K3_A_QB));
}
static void op_mla_q_absorb(struct k3_layer *L)
{
    k3_mla_absorb_cpu(NB, SH->mla_heads, SH->nope, SH->rope, SH->kv_lora,
                      K3_BF(L, K3_A_QB), K3_BF(L, K3_W_MLA_UK), K3_BF(L, K3_A_QLAT));
}
static float mla_scale(const struct k3_shape *s)
{
    return 1.0f / sqrtf((float)(s->nope + s->rope));
}
static void op_mla_attn(struct k3_layer *L)
{
    k3_mla_attn_cpu(NB, SH->mla_heads, SH->nope, SH->rope, SH->kv_lora,
                    K3_BF(L, K3_A_QLAT), K3_BF(L, K3_A_QB), K3_U8(L, K3_S_MLA_CACHE),
                    SH->ctx_max, K3_I32(L, K3_S_MLA_POS), mla_scale(SH),
                    K3_BF(L, K3_A_OLAT));
}
static int mla_gate_off(const struct k3_shape *s) { return s->q_lora + s->kv_lora + s->rope; }
static void op_mla_v_up(struct k3_layer *L)
{
    k3_mla_vup_cpu(NB, SH->mla_heads, SH->kv_lora, SH->v_head, K3_BF(L, K3_A_OLAT),
                   K3_BF(L, K3_W_MLA_UV), K3_BF(L, K3_A_MA) + mla_gate_off(SH),
                   k3_mla_aw(SH), K3_BF(L, K3_A_O));
}
static void op_attn_o_proj(struct k3_layer *L)
{
    const k3_bf16 *in = L->kind == K3_KDA ? K3_BF(L, K3_A_ON) : K3_BF(L, K3_A_O);
    k3_gemv_bf16_cpu(NB, SH->hidden, k3_attn_width(SH, L->kind), in, K3_BF(L, K3_W_O),
                     NULL, K3_BF(L, K3_A_ATT));
}
/* One rank: the sum over ranks is the local partial itself. */
static void op_allreduce_local(struct k3_layer *L) { (void)L; }
static void op_moe_add_norm(struct k3_layer *L)
{
    k3_add_rmsnorm_cpu(NB, SH->hidden, K3_BF(L, K3_IO_R_OUT), K3_BF(L, K3_A_ATT),
                       K3_F32(L, K3_W_MOE_NORM), SH->eps, K3_BF(L, K3_A_XN2));
}
static void op_router_gemv(struct k3_layer *L)
{
    k3_gemv_f32_cpu(NB, SH->experts, SH->hidden, K3_BF(L, K3_A_XN2),
                    K3_BF(L, K3_W_ROUTER), K3_F32(L, K3_A_LOGITS));
}
static void op_router_topk(struct k3_layer *L)
{
    k3_router_topk_cpu(NB, SH->experts, SH->topk, K3_F32(L, K3_A_LOGITS),
                       K3_F32(L, K3_W_ROUTER_BIAS), SH->route_scale,
                       K3_I32(L, K3_A_IDS), K3_F32(L, K3_A_WTS));
}
static void op_shared_gate_up(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, 2 * SH->shared_inter, SH->hidden, K3_BF(L, K3_A_XN2),
                     K3_BF(L, K3_W_SH_GU), NULL, K3_BF(L, K3_A_SHGU));
}
static void op_shared_act(struct k3_layer *L)
{
    k3_situ_cpu(NB, SH->shared_inter, K3_BF(L, K3_A_SHGU), SH->situ_beta,
                SH->situ_linear_beta, K3_BF(L, K3_A_SHH));
}
static void op_shared_down(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, SH->hidden, SH->shared_inter, K3_BF(L, K3_A_SHH),
                     K3_BF(L, K3_W_SH_DOWN), NULL, K3_BF(L, K3_A_SHOUT));
}
static void op_latent_in(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, SH->latent, SH->hidden, K3_BF(L, K3_A_XN2),
                     K3_BF(L, K3_W_LAT_IN), NULL, K3_BF(L, K3_A_LAT));
}
static void op_latent_norm(struct k3_layer *L)
{
    k3_rmsnorm_cpu(NB, SH->latent, K3_BF(L, K3_A_LAT), SH->latent,
                   K3_F32(L, K3_W_LAT_NORM), SH->eps, K3_BF(L, K3_A_LATN), SH->latent);
}
static void f32_to_bf16_rows(const float *in, k3_bf16 *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = k3_f32_to_bf16(in[i]);
}
static void op_routed_gate_up(struct k3_layer *L)
{
    int n = 2 * SH->expert_inter;
    k3_moe_gemv_mxfp4_f32_cpu(NB, SH->topk, n, SH->latent, K3_BF(L, K3_A_LATN), 0,
                              K3_I32(L, K3_A_IDS), K3_U8(L, K3_W_RT_GU),
                              K3_U8(L, K3_W_RT_GU_S), K3_F32(L, K3_A_RF32));
    f32_to_bf16_rows(K3_F32(L, K3_A_RF32), K3_BF(L, K3_A_RGU), (size_t)NB * SH->topk * n);
}
static void op_routed_act(struct k3_layer *L)
{
    k3_situ_cpu(NB * SH->topk, SH->expert_inter, K3_BF(L, K3_A_RGU), SH->situ_beta,
                SH->situ_linear_beta, K3_BF(L, K3_A_RH));
}
static void op_routed_down(struct k3_layer *L)
{
    k3_moe_gemv_mxfp4_f32_cpu(NB, SH->topk, SH->latent, SH->expert_inter,
                              K3_BF(L, K3_A_RH), 1, K3_I32(L, K3_A_IDS),
                              K3_U8(L, K3_W_RT_DOWN), K3_U8(L, K3_W_RT_DOWN_S),
                              K3_F32(L, K3_A_RF32));
    f32_to_bf16_rows(K3_F32(L, K3_A_RF32), K3_BF(L, K3_A_RY),
                     (size_t)NB * SH->topk * SH->latent);
}
static void op_routed_combine(struct k3_layer *L)
{
    k3_moe_combine_cpu(NB, SH->topk, SH->latent, K3_BF(L, K3_A_RY), K3_F32(L, K3_A_WTS),
                       K3_BF(L, K3_A_RLAT));
}
static void op_latent_out(struct k3_layer *L)
{
    k3_gemv_bf16_cpu(NB, SH->hidden, SH->latent, K3_BF(L, K3_A_RLAT),
                     K3_BF(L, K3_W_LAT_OUT), K3_BF(L, K3_A_SHOUT), K3_BF(L, K3_IO_D_OUT));
}

/* ---- fused path: the C form of each fused kernel --------------------- */

/* 1/rms of a BF16 row (double sum, as the references). */
static float row_inv_rms(const k3_bf16 *x, int n, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)BF(x[i]) * BF(x[i]);
    return (float)(1.0 / sqrt(ss / n + eps));
}

/* Residual add and RMSNorm recomputed inside a projection kernel: every
 * block of the kernel recomputes the row's norm; the normalized operand is
 * rounded to BF16 as the tensor-core operand is. xn: [n] scratch row. */
static void fused_norm_row(const k3_bf16 *r, const k3_bf16 *d, const float *w,
                           int n, float eps, k3_bf16 *r_out, float *xn)
{
    double ss = 0;
    for (int i = 0; i < n; i++) {
        float v = d ? k3_round_bf16(BF(r[i]) + BF(d[i])) : BF(r[i]);
        if (r_out)
            r_out[i] = k3_f32_to_bf16(v);
        xn[i] = v;
        ss += (double)v * v;
    }
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        xn[i] = k3_round_bf16(xn[i] * inv * w[i]);
}

static double dot_f_bf(const float *x, const k3_bf16 *w, int K)
{
    double s = 0;
    for (int k = 0; k < K; k++)
        s += (double)x[k] * BF(w[k]);
    return s;
}

static float *scratch_row(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p)
        abort(); /* C model of a kernel: scratch for one row */
    return p;
}

static void fop_kda_norm_proj(struct k3_layer *L)
{
    int H = SH->hidden, nq = 3 * k3_kda_hd(SH), ng = k3_kda_gw(SH);
    float *xn = scratch_row(H);
    for (int b = 0; b < NB; b++) {
        fused_norm_row(K3_BF(L, K3_IO_R_IN) + (size_t)b * H, K3_BF(L, K3_IO_D_IN) + (size_t)b * H,
                       K3_F32(L, K3_W_ATTN_NORM), H, SH->eps,
                       K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, xn);
        for (int n = 0; n < nq + ng; n++) {
            const k3_bf16 *w = n < nq ? K3_BF(L, K3_W_KDA_QKV) + (size_t)n * H
                                      : K3_BF(L, K3_W_KDA_GATE) + (size_t)(n - nq) * H;
            k3_bf16 v = k3_f32_to_bf16((float)dot_f_bf(xn, w, H));
            if (n < nq)
                K3_BF(L, K3_A_QKV)[(size_t)b * nq + n] = v;
            else
                K3_BF(L, K3_A_GP)[(size_t)b * ng + n - nq] = v;
        }
    }
    free(xn);
}

/* Convolution, gates, L2 norms, delta rule and gated output norm for one
 * (sequence, head), intermediates kept in float. */
static void fop_kda_mix(struct k3_layer *L)
{
    int nh = SH->kda_heads, d = SH->head_dim, hd = nh * d, gw = k3_kda_gw(SH);
    int W = SH->conv, hist = W - 1;
    float q[128], k[128], v[128], u[128], o[128];
    for (int b = 0; b < NB; b++)
        for (int h = 0; h < nh; h++) {
            float *part[3] = {q, k, v};
            const k3_bf16 *gp = K3_BF(L, K3_A_GP) + (size_t)b * gw;
            for (int p = 0; p < 3; p++)
                for (int i = 0; i < d; i++) {
                    int c = p * hd + h * d + i;
                    float *st = K3_F32(L, K3_S_KDA_CONV) + ((size_t)b * 3 * hd + c) * hist;
                    const float *wc = K3_F32(L, K3_W_KDA_CONV) + (size_t)c * W;
                    float x = BF(K3_BF(L, K3_A_QKV)[(size_t)b * 3 * hd + c]);
                    double acc = (double)wc[hist] * x;
                    for (int t = 0; t < hist; t++)
                        acc += (double)wc[t] * st[t];
                    for (int t = 0; t + 1 < hist; t++)
                        st[t] = st[t + 1];
                    st[hist - 1] = x;
                    float y = (float)acc;
                    part[p][i] = y * k3_sigmoid(y);
                }
            double qs = 0, ks = 0;
            for (int i = 0; i < d; i++) {
                qs += (double)q[i] * q[i];
                ks += (double)k[i] * k[i];
            }
            float qn = (float)(1.0 / sqrt(qs + 1e-6) / sqrt((double)d));
            float kn = (float)(1.0 / sqrt(ks + 1e-6));
            float bt = k3_sigmoid(BF(gp[hd + h]));
            float a_scale = expf(K3_F32(L, K3_W_KDA_ALOG)[h]);
            float *S = K3_F32(L, K3_S_KDA_STATE) + ((size_t)b * nh + h) * d * d;
            for (int i = 0; i < d; i++) {
                int c = h * d + i;
                float g = SH->gate_lower *
                          k3_sigmoid(a_scale * (BF(gp[c]) + K3_F32(L, K3_W_KDA_DTB)[c]));
                float a = expf(g);
                for (int j = 0; j < d; j++)
                    S[i * d + j] *= a;
            }
            for (int j = 0; j < d; j++) {
                double s = 0;
                for (int i = 0; i < d; i++)
                    s += (double)S[i * d + j] * k[i] * kn;
                u[j] = (float)(v[j] - s);
            }
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++)
                    S[i * d + j] = (float)(S[i * d + j] + (double)bt * k[i] * kn * u[j]);
            double os = 0;
            for (int j = 0; j < d; j++) {
                double s = 0;
                for (int i = 0; i < d; i++)
                    s += (double)S[i * d + j] * q[i] * qn;
                o[j] = (float)s;
                os += s * s;
            }
            float inv = (float)(1.0 / sqrt(os / d + SH->eps));
            for (int j = 0; j < d; j++) {
                float gt = BF(gp[hd + nh + h * d + j]);
                K3_BF(L, K3_A_ON)[(size_t)b * hd + h * d + j] = k3_f32_to_bf16(
                    o[j] * inv * K3_F32(L, K3_W_KDA_ONORM)[j] * k3_sigmoid(gt));
            }
        }
}

static void fop_mla_norm_a_proj(struct k3_layer *L)
{
    int H = SH->hidden, aw = k3_mla_aw(SH);
    float *xn = scratch_row(H);
    for (int b = 0; b < NB; b++) {
        fused_norm_row(K3_BF(L, K3_IO_R_IN) + (size_t)b * H, K3_BF(L, K3_IO_D_IN) + (size_t)b * H,
                       K3_F32(L, K3_W_ATTN_NORM), H, SH->eps,
                       K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, xn);
        for (int n = 0; n < aw; n++)
            K3_BF(L, K3_A_MA)[(size_t)b * aw + n] = k3_f32_to_bf16(
                (float)dot_f_bf(xn, K3_BF(L, K3_W_MLA_A) + (size_t)n * H, H));
    }
    free(xn);
}

/* q norm + q_b projection + W_uk absorption per head; the kv part of the
 * same kernel normalizes the new latent row and writes the FP8 cache. */
static void fop_mla_q_absorb_cache(struct k3_layer *L)
{
    int aw = k3_mla_aw(SH), ql = SH->q_lora, qw = k3_mla_qw(SH), kv = SH->kv_lora;
    int mh = SH->mla_heads;
    float *qa = scratch_row(ql);
    float qh[512];
    for (int b = 0; b < NB; b++) {
        const k3_bf16 *ma = K3_BF(L, K3_A_MA) + (size_t)b * aw;
        float inv = row_inv_rms(ma, ql, SH->eps);
        for (int i = 0; i < ql; i++)
            qa[i] = k3_round_bf16(BF(ma[i]) * inv * K3_F32(L, K3_W_MLA_QNORM)[i]);
        for (int h = 0; h < mh; h++) {
            for (int j = 0; j < qw; j++) {
                int row = h * qw + j;
                qh[j] = k3_round_bf16(
                    (float)dot_f_bf(qa, K3_BF(L, K3_W_MLA_QB) + (size_t)row * ql, ql));
                K3_BF(L, K3_A_QB)[(size_t)b * mh * qw + row] = k3_f32_to_bf16(qh[j]);
            }
            for (int c = 0; c < kv; c++)
                K3_BF(L, K3_A_QLAT)[((size_t)b * mh + h) * kv + c] = k3_f32_to_bf16((float)dot_f_bf(
                    qh, K3_BF(L, K3_W_MLA_UK) + ((size_t)h * kv + c) * SH->nope, SH->nope));
        }
    }
    free(qa);
    op_mla_kv_cache(L); /* the kernel's cache-writing blocks: same arithmetic */
}

static void fop_mla_attn_v_up(struct k3_layer *L)
{
    int mh = SH->mla_heads, kv = SH->kv_lora, rope = SH->rope, qw = k3_mla_qw(SH);
    int row_w = kv + rope, aw = k3_mla_aw(SH), v = SH->v_head;
    float scale = mla_scale(SH);
    double acc[1024];
    float ol[1024];
    for (int b = 0; b < NB; b++) {
        int pos = K3_I32(L, K3_S_MLA_POS)[b];
        for (int h = 0; h < mh; h++) {
            const k3_bf16 *ql = K3_BF(L, K3_A_QLAT) + ((size_t)b * mh + h) * kv;
            const k3_bf16 *qr = K3_BF(L, K3_A_QB) + (size_t)b * mh * qw + h * qw + SH->nope;
            double m = -INFINITY, l = 0;
            for (int c = 0; c < kv; c++)
                acc[c] = 0;
            for (int t = 0; t <= pos; t++) {
                const uint8_t *row =
                    K3_U8(L, K3_S_MLA_CACHE) + ((size_t)b * SH->ctx_max + t) * row_w;
                double s = 0;
                for (int c = 0; c < kv; c++)
                    s += (double)BF(ql[c]) * k3_fp8_to_f32(row[c]);
                for (int j = 0; j < rope; j++)
                    s += (double)BF(qr[j]) * k3_fp8_to_f32(row[kv + j]);
                s *= scale;
                double mn = s > m ? s : m, corr = exp(m - mn), p = exp(s - mn);
                l = l * corr + p;
                for (int c = 0; c < kv; c++)
                    acc[c] = acc[c] * corr + p * k3_fp8_to_f32(row[c]);
                m = mn;
            }
            for (int c = 0; c < kv; c++)
                ol[c] = k3_round_bf16((float)(acc[c] / l));
            for (int j = 0; j < v; j++) {
                const k3_bf16 *w = K3_BF(L, K3_W_MLA_UV) + ((size_t)h * v + j) * kv;
                float gt = BF(K3_BF(L, K3_A_MA)[(size_t)b * aw + mla_gate_off(SH) + h * v + j]);
                K3_BF(L, K3_A_O)[(size_t)b * mh * v + h * v + j] =
                    k3_f32_to_bf16((float)dot_f_bf(ol, w, kv) * k3_sigmoid(gt));
            }
        }
    }
}

/* Output projection + reduction + residual: each rank's partial is
 * exchanged in BF16 (rounded here), summed and added to the residual. */
static void fop_o_proj_residual(struct k3_layer *L)
{
    int H = SH->hidden, K = k3_attn_width(SH, L->kind);
    const k3_bf16 *in = L->kind == K3_KDA ? K3_BF(L, K3_A_ON) : K3_BF(L, K3_A_O);
    for (int b = 0; b < NB; b++)
        for (int n = 0; n < H; n++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)BF(in[(size_t)b * K + k]) * BF(K3_BF(L, K3_W_O)[(size_t)n * K + k]);
            k3_bf16 *r = K3_BF(L, K3_IO_R_OUT) + (size_t)b * H + n;
            *r = k3_f32_to_bf16(BF(*r) + k3_round_bf16((float)s));
        }
}

/* Router part 1 (logits) and the latent down-projection share one pass
 * over the normalized input. */
static void fop_router_latent_in(struct k3_layer *L)
{
    int H = SH->hidden, E = SH->experts, Lt = SH->latent;
    float *xn = scratch_row(H);
    for (int b = 0; b < NB; b++) {
        fused_norm_row(K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, NULL, K3_F32(L, K3_W_MOE_NORM),
                       H, SH->eps, NULL, xn);
        for (int n = 0; n < E + Lt; n++) {
            if (n < E)
                K3_F32(L, K3_A_LOGITS)[(size_t)b * E + n] =
                    (float)dot_f_bf(xn, K3_BF(L, K3_W_ROUTER) + (size_t)n * H, H);
            else
                K3_BF(L, K3_A_LAT)[(size_t)b * Lt + n - E] = k3_f32_to_bf16(
                    (float)dot_f_bf(xn, K3_BF(L, K3_W_LAT_IN) + (size_t)(n - E) * H, H));
        }
    }
    free(xn);
}

static void fop_shared_gate_up_act(struct k3_layer *L)
{
    int H = SH->hidden, SI = SH->shared_inter;
    float *xn = scratch_row(H);
    for (int b = 0; b < NB; b++) {
        fused_norm_row(K3_BF(L, K3_IO_R_OUT) + (size_t)b * H, NULL, K3_F32(L, K3_W_MOE_NORM),
                       H, SH->eps, NULL, xn);
        for (int j = 0; j < SI; j++) {
            float g = (float)dot_f_bf(xn, K3_BF(L, K3_W_SH_GU) + (size_t)j * H, H);
            float u = (float)dot_f_bf(xn, K3_BF(L, K3_W_SH_GU) + (size_t)(SI + j) * H, H);
            K3_BF(L, K3_A_SHH)[(size_t)b * SI + j] =
                k3_f32_to_bf16(k3_situ(g, u, SH->situ_beta, SH->situ_linear_beta));
        }
    }
    free(xn);
}

static double dot_mxfp4(const float *x, const uint8_t *w, const uint8_t *sc, int K)
{
    double acc = 0;
    for (int g = 0; g < K / K3_MX_GROUP; g++) {
        double part = 0;
        for (int j = g * K3_MX_GROUP; j < (g + 1) * K3_MX_GROUP; j++)
            part += (double)k3_e2m1_to_f32((w[j / 2] >> ((j & 1) * 4)) & 15u) * x[j];
        acc += part * k3_e8m0_to_f32(sc[g]);
    }
    return acc;
}

/* Router part 2 (top-k) in the prologue, latent norm, MXFP4 gate and up
 * rows of each chosen expert, SiTU in the epilogue. */
static void fop_routed_gate_up_act(struct k3_layer *L)
{
    int Lt = SH->latent, I = SH->expert_inter, k = SH->topk;
    op_router_topk(L);
    float *xl = scratch_row(Lt);
    for (int b = 0; b < NB; b++) {
        const k3_bf16 *lat = K3_BF(L, K3_A_LAT) + (size_t)b * Lt;
        float inv = row_inv_rms(lat, Lt, SH->eps);
        for (int i = 0; i < Lt; i++)
            xl[i] = k3_round_bf16(BF(lat[i]) * inv * K3_F32(L, K3_W_LAT_NORM)[i]);
        for (int s = 0; s < k; s++) {
            size_t e = K3_I32(L, K3_A_IDS)[(size_t)b * k + s];
            for (int j = 0; j < I; j++) {
                size_t rg = e * 2 * I + j, ru = e * 2 * I + I + j;
                float g = (float)dot_mxfp4(xl, K3_U8(L, K3_W_RT_GU) + rg * Lt / 2,
                                           K3_U8(L, K3_W_RT_GU_S) + rg * Lt / K3_MX_GROUP, Lt);
                float u = (float)dot_mxfp4(xl, K3_U8(L, K3_W_RT_GU) + ru * Lt / 2,
                                           K3_U8(L, K3_W_RT_GU_S) + ru * Lt / K3_MX_GROUP, Lt);
                K3_BF(L, K3_A_RH)[((size_t)b * k + s) * I + j] =
                    k3_f32_to_bf16(k3_situ(g, u, SH->situ_beta, SH->situ_linear_beta));
            }
        }
    }
    free(xl);
}

/* MXFP4 down rows of every chosen expert, weighted and summed over the
 * top-k in float before the single BF16 rounding. */
static void fop_routed_down_combine(struct k3_layer *L)
{
    int Lt = SH->latent, I = SH->expert_inter, k = SH->topk;
    float h[4096];
    for (int b = 0; b < NB; b++)
        for (int n = 0; n < Lt; n++) {
            double acc = 0;
            for (int s = 0; s < k; s++) {
                size_t e = K3_I32(L, K3_A_IDS)[(size_t)b * k + s];
                const k3_bf16 *hr = K3_BF(L, K3_A_RH) + ((size_t)b * k + s) * I;
                for (int j = 0; j < I; j++)
                    h[j] = BF(hr[j]);
                size_t row = e * Lt + n;
                acc += K3_F32(L, K3_A_WTS)[(size_t)b * k + s] *
                       dot_mxfp4(h, K3_U8(L, K3_W_RT_DOWN) + row * I / 2,
                                 K3_U8(L, K3_W_RT_DOWN_S) + row * I / K3_MX_GROUP, I);
            }
            K3_BF(L, K3_A_RLAT)[(size_t)b * Lt + n] = k3_f32_to_bf16((float)acc);
        }
}

static void fop_latent_out_shared(struct k3_layer *L) { op_latent_out(L); }

/* ---- the tables ------------------------------------------------------ */

static const struct k3_op all_ops[K3_OP_COUNT] = {
    {K3_OP_ATTN_ADD_NORM, "attn_add_norm", 0, 0, op_attn_add_norm},
    {K3_OP_KDA_QKV_PROJ, "kda_qkv_proj", 0, 0, op_kda_qkv_proj},
    {K3_OP_KDA_GATE_PROJ, "kda_gate_proj", 0, 0, op_kda_gate_proj},
    {K3_OP_KDA_CONV, "kda_conv", 0, 0, op_kda_conv},
    {K3_OP_KDA_GATES, "kda_gates", 0, 0, op_kda_gates},
    {K3_OP_KDA_RECURRENT, "kda_recurrent", 0, 0, op_kda_recurrent},
    {K3_OP_KDA_OUT_NORM, "kda_out_norm", 0, 0, op_kda_out_norm},
    {K3_OP_MLA_A_PROJ, "mla_a_proj", 0, 0, op_mla_a_proj},
    {K3_OP_MLA_Q_NORM, "mla_q_norm", 0, 0, op_mla_q_norm},
    {K3_OP_MLA_KV_CACHE, "mla_kv_cache", 0, 0, op_mla_kv_cache},
    {K3_OP_MLA_Q_B_PROJ, "mla_q_b_proj", 0, 0, op_mla_q_b_proj},
    {K3_OP_MLA_Q_ABSORB, "mla_q_absorb", 0, 0, op_mla_q_absorb},
    {K3_OP_MLA_ATTN, "mla_attn", 0, 0, op_mla_attn},
    {K3_OP_MLA_V_UP, "mla_v_up", 0, 0, op_mla_v_up},
    {K3_OP_ATTN_O_PROJ, "attn_o_proj", 0, 0, op_attn_o_proj},
    {K3_OP_ATTN_ALLREDUCE, "attn_allreduce", 0, 1, op_allreduce_local},
    {K3_OP_MOE_ADD_NORM, "moe_add_norm", 0, 0, op_moe_add_norm},
    {K3_OP_ROUTER_GEMV, "router_gemv", 0, 0, op_router_gemv},
    {K3_OP_ROUTER_TOPK, "router_topk", 0, 0, op_router_topk},
    {K3_OP_SHARED_GATE_UP, "shared_gate_up", 0, 0, op_shared_gate_up},
    {K3_OP_SHARED_ACT, "shared_act", 0, 0, op_shared_act},
    {K3_OP_SHARED_DOWN, "shared_down", 0, 0, op_shared_down},
    {K3_OP_LATENT_IN, "latent_in", 0, 0, op_latent_in},
    {K3_OP_LATENT_NORM, "latent_norm", 0, 0, op_latent_norm},
    {K3_OP_ROUTED_GATE_UP, "routed_gate_up", 0, 0, op_routed_gate_up},
    {K3_OP_ROUTED_ACT, "routed_act", 0, 0, op_routed_act},
    {K3_OP_ROUTED_DOWN, "routed_down", 0, 0, op_routed_down},
    {K3_OP_ROUTED_COMBINE, "routed_combine", 0, 0, op_routed_combine},
    {K3_OP_LATENT_OUT, "latent_out", 0, 0, op_latent_out},
    {K3_OP_MOE_ALLREDUCE, "moe_allreduce", 0, 1, op_allreduce_local},
    {K3_OP_F_KDA_NORM_PROJ, "fused_kda_norm_proj", 0, 0, fop_kda_norm_proj},
    {K3_OP_F_KDA_MIX, "fused_kda_mix", 0, 0, fop_kda_mix},
    {K3_OP_F_MLA_NORM_A_PROJ, "fused_mla_norm_a_proj", 0, 0, fop_mla_norm_a_proj},
    {K3_OP_F_MLA_Q_ABSORB_CACHE, "fused_mla_q_absorb_cache", 0, 0, fop_mla_q_absorb_cache},
    {K3_OP_F_MLA_ATTN_V_UP, "fused_mla_attn_v_up", 0, 0, fop_mla_attn_v_up},
    {K3_OP_F_O_PROJ_RESIDUAL, "fused_o_proj_allreduce_residual", 0, 1, fop_o_proj_residual},
    {K3_OP_F_ROUTER_LATENT_IN, "fused_router_latent_in", 0, 0, fop_router_latent_in},
    {K3_OP_F_SHARED_GATE_UP_ACT, "fused_shared_gate_up_act", 1, 0, fop_shared_gate_up_act},
    {K3_OP_F_SHARED_DOWN, "fused_shared_down", 1, 0, op_shared_down},
    {K3_OP_F_ROUTED_GATE_UP_ACT, "fused_routed_gate_up_act", 0, 0, fop_routed_gate_up_act},
    {K3_OP_F_ROUTED_DOWN_COMBINE, "fused_routed_down_combine", 0, 0, fop_routed_down_combine},
    {K3_OP_F_LATENT_OUT_SHARED, "fused_latent_out_shared", 0, 0, fop_latent_out_shared},
    {K3_OP_F_MOE_ALLREDUCE, "fused_moe_allreduce", 0, 1, op_allreduce_local},
};

#define OP(id) all_ops[id]
static const struct k3_op std_kda[] = {
    OP(K3_OP_ATTN_ADD_NORM), OP(K3_OP_KDA_QKV_PROJ), OP(K3_OP_KDA_GATE_PROJ),
    OP(K3_OP_KDA_CONV), OP(K3_OP_KDA_GATES), OP(K3_OP_KDA_RECURRENT),
    OP(K3_OP_KDA_OUT_NORM), OP(K3_OP_ATTN_O_PROJ), OP(K3_OP_ATTN_ALLREDUCE),
    OP(K3_OP_MOE_ADD_NORM), OP(K3_OP_ROUTER_GEMV), OP(K3_OP_ROUTER_TOPK),
    OP(K3_OP_SHARED_GATE_UP), OP(K3_OP_SHARED_ACT), OP(K3_OP_SHARED_DOWN),
    OP(K3_OP_LATENT_IN), OP(K3_OP_LATENT_NORM), OP(K3_OP_ROUTED_GATE_UP),
    OP(K3_OP_ROUTED_ACT), OP(K3_OP_ROUTED_DOWN), OP(K3_OP_ROUTED_COMBINE),
    OP(K3_OP_LATENT_OUT), OP(K3_OP_MOE_ALLREDUCE),
};
static const struct k3_op std_mla[] = {
    OP(K3_OP_ATTN_ADD_NORM), OP(K3_OP_MLA_A_PROJ), OP(K3_OP_MLA_Q_NORM),
    OP(K3_OP_MLA_KV_CACHE), OP(K3_OP_MLA_Q_B_PROJ), OP(K3_OP_MLA_Q_ABSORB),
    OP(K3_OP_MLA_ATTN), OP(K3_OP_MLA_V_UP), OP(K3_OP_ATTN_O_PROJ),
    OP(K3_OP_ATTN_ALLREDUCE), OP(K3_OP_MOE_ADD_NORM), OP(K3_OP_ROUTER_GEMV),
    OP(K3_OP_ROUTER_TOPK), OP(K3_OP_SHARED_GATE_UP), OP(K3_OP_SHARED_ACT),
    OP(K3_OP_SHARED_DOWN), OP(K3_OP_LATENT_IN), OP(K3_OP_LATENT_NORM),
    OP(K3_OP_ROUTED_GATE_UP), OP(K3_OP_ROUTED_ACT), OP(K3_OP_ROUTED_DOWN),
    OP(K3_OP_ROUTED_COMBINE), OP(K3_OP_LATENT_OUT), OP(K3_OP_MOE_ALLREDUCE),
};
#define FUSED_MOE                                                            \
    OP(K3_OP_F_SHARED_GATE_UP_ACT), OP(K3_OP_F_SHARED_DOWN),                 \
        OP(K3_OP_F_ROUTER_LATENT_IN), OP(K3_OP_F_ROUTED_GATE_UP_ACT),        \
        OP(K3_OP_F_ROUTED_DOWN_COMBINE), OP(K3_OP_F_LATENT_OUT_SHARED),      \
        OP(K3_OP_F_MOE_ALLREDUCE)
static const struct k3_op fused_kda[] = {
    OP(K3_OP_F_KDA_NORM_PROJ), OP(K3_OP_F_KDA_MIX), OP(K3_OP_F_O_PROJ_RESIDUAL), FUSED_MOE,
};
static const struct k3_op fused_mla[] = {
    OP(K3_OP_F_MLA_NORM_A_PROJ), OP(K3_OP_F_MLA_Q_ABSORB_CACHE),
    OP(K3_OP_F_MLA_ATTN_V_UP), OP(K3_OP_F_O_PROJ_RESIDUAL), FUSED_MOE,
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
    return id >= 0 && id < K3_OP_COUNT ? &all_ops[id] : NULL;
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

void k3_op_cost(const struct k3_layer *L, enum k3_op_id id, double *bytes,
                double *flops)
{
    const struct k3_shape *s = &L->sh;
    double B = L->batch, H = s->hidden, hd = k3_kda_hd(s), gw = k3_kda_gw(s);
    double aw = k3_mla_aw(s), E = s->experts, k = s->topk, I = s->expert_inter;
    double SI = s->shared_inter, Lt = s->latent, mh = s->mla_heads;
    double kv = s->kv_lora, qw = k3_mla_qw(s), d = s->head_dim;
    double aow = k3_attn_width(s, L->kind), ue = distinct_experts(L);
    double ctx = 0, row = kv + s->rope;
    if (L->kind == K3_MLA)
        for (int b = 0; b < L->batch; b++)
            ctx += K3_I32(L, K3_S_MLA_POS)[b] + 1;
    /* MXFP4: 4.25 bits per weight (a byte of scale per 32). */
    double fp4 = 0.5 + 1.0 / K3_MX_GROUP;
    double by = 0, fl = 0;
#define GEMV(N, K, wbytes) (by += (N) * (K) * (wbytes) + B * ((K) + (N)) * 2, fl += 2 * B * (N) * (K))
    switch (id) {
    case K3_OP_ATTN_ADD_NORM: case K3_OP_MOE_ADD_NORM:
        by = B * H * 2 * 4; fl = 5 * B * H; break;
    case K3_OP_KDA_QKV_PROJ: GEMV(3 * hd, H, 2); break;
    case K3_OP_KDA_GATE_PROJ: GEMV(gw, H, 2); break;
    case K3_OP_F_KDA_NORM_PROJ: GEMV(3 * hd + gw, H, 2); by += B * H * 4; break;
    case K3_OP_KDA_CONV: by = B * 3 * hd * (2 * 2 + 2 * 4 * (s->conv - 1)); fl = B * 3 * hd * 2 * s->conv; break;
    case K3_OP_KDA_GATES: by = B * gw * 2 + B * (hd + mh) * 4; fl = B * hd * 10; break;
    case K3_OP_KDA_RECURRENT: by = B * hd * d * 4 * 2 + B * hd * 4 * 2; fl = B * hd * d * 8; break;
    case K3_OP_KDA_OUT_NORM: by = B * hd * 2 * 3; fl = B * hd * 8; break;
    case K3_OP_F_KDA_MIX:
        by = B * hd * d * 4 * 2 + B * (3 * hd + gw) * 2 + B * hd * 2 + B * 3 * hd * 2 * 4 * (s->conv - 1);
        fl = B * hd * d * 8 + B * 3 * hd * 2 * s->conv; break;
    case K3_OP_MLA_A_PROJ: GEMV(aw, H, 2); break;
    case K3_OP_F_MLA_NORM_A_PROJ: GEMV(aw, H, 2); by += B * H * 4; break;
    case K3_OP_MLA_Q_NORM: by = B * s->q_lora * 4; fl = 4 * B * s->q_lora; break;
    case K3_OP_MLA_KV_CACHE: by = B * row * 3; fl = 4 * B * row; break;
    case K3_OP_MLA_Q_B_PROJ: GEMV(mh * qw, s->q_lora, 2); break;
    case K3_OP_MLA_Q_ABSORB: GEMV(mh * kv, s->nope, 2); break;
    case K3_OP_F_MLA_Q_ABSORB_CACHE:
        GEMV(mh * qw, s->q_lora, 2); GEMV(mh * kv, s->nope, 2); by += B * row * 3; break;
    case K3_OP_MLA_ATTN: by = ctx * row + B * mh * (kv + qw + kv) * 2; fl = 4 * ctx * mh * row; break;
    case K3_OP_MLA_V_UP: GEMV(mh * s->v_head, kv, 2); break;
    case K3_OP_F_MLA_ATTN_V_UP:
        by = ctx * row + B * mh * (kv + qw) * 2; fl = 4 * ctx * mh * row; GEMV(mh * s->v_head, kv, 2); break;
    case K3_OP_ATTN_O_PROJ: GEMV(H, aow, 2); break;
    case K3_OP_F_O_PROJ_RESIDUAL: GEMV(H, aow, 2); by += B * H * 4; break;
    case K3_OP_ATTN_ALLREDUCE: case K3_OP_MOE_ALLREDUCE: case K3_OP_F_MOE_ALLREDUCE:
        by = B * H * 2 * 2; fl = B * H; break;
    case K3_OP_ROUTER_GEMV: GEMV(E, H, 2); break;
    case K3_OP_ROUTER_TOPK: by = B * E * 4 + E * 4 + B * k * 8; fl = B * E * (k + 4); break;
    case K3_OP_SHARED_GATE_UP: GEMV(2 * SI, H, 2); break;
    case K3_OP_SHARED_ACT: by = B * SI * 2 * 3; fl = B * SI * 10; break;
    case K3_OP_SHARED_DOWN: case K3_OP_F_SHARED_DOWN: GEMV(H, SI, 2); break;
    case K3_OP_F_SHARED_GATE_UP_ACT: GEMV(2 * SI, H, 2); by += B * H * 2; break;
    case K3_OP_LATENT_IN: GEMV(Lt, H, 2); break;
    case K3_OP_F_ROUTER_LATENT_IN: GEMV(E + Lt, H, 2); by += B * H * 2; break;
    case K3_OP_LATENT_NORM: by = B * Lt * 4; fl = 4 * B * Lt; break;
    case K3_OP_ROUTED_GATE_UP: case K3_OP_F_ROUTED_GATE_UP_ACT:
        by = ue * 2 * I * Lt * fp4 + B * Lt * 2 + B * k * 2 * I * 2;
        fl = 2 * B * k * 2 * I * Lt; break;
    case K3_OP_ROUTED_ACT: by = B * k * I * 2 * 3; fl = B * k * I * 10; break;
    case K3_OP_ROUTED_DOWN: case K3_OP_F_ROUTED_DOWN_COMBINE:
        by = ue * Lt * I * fp4 + B * k * I * 2 + B * k * Lt * 2;
        fl = 2 * B * k * Lt * I; break;
    case K3_OP_ROUTED_COMBINE: by = B * k * Lt * 2 + B * Lt * 2; fl = 2 * B * k * Lt; break;
    case K3_OP_LATENT_OUT: case K3_OP_F_LATENT_OUT_SHARED: GEMV(H, Lt, 2); by += B * H * 2; break;
    default: break;
    }
#undef GEMV
    *bytes = by;
    *flops = fl;
}
