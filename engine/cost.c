/* cost.c: the step cost model (cost.h).
 *
 * Each path (standard `auto`, `latency_specialized`) is an explicit list
 * of kernels per layer kind (KDA, MLA, GQA attention; dense FFN or MoE
 * block), plus per-step kernels (embedding, final norm, LM head, logits
 * gather, sampler) and the DSpark drafter. For a batch, each kernel gets
 * bytes and FLOPs per GPU from the model shape at tensor-parallel size tp:
 *     t = max(bytes / (hbm_bw * eff[class]), flops / (rate * eff_compute))
 *         + floor + communication
 * Communication (TP all-reduce): latency(message) + bytes / link, where
 * the latency follows hardware.md's small-message measurements (one-shot
 * custom kernel or the library path). The specialized path fuses the
 * reduction into the output projection, overlaps shared with routed
 * experts (the overlapped region costs the longer chain or the combined
 * bytes at stream bandwidth, whichever is larger) and prefetches the next
 * layer's first weights while the MoE reduction runs.
 * Every number (bandwidths, efficiencies, latencies, the fitted floor and
 * step overhead) comes from the presets; engine/CALIBRATION.md explains
 * them and lists every kernel name (the calibration-file contract). */
#include "engine/cost.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"
#include "traces/base/file.h"

/* ---- kernel names (the contract with calibration files) ---- */

#define KERNELS(X)                                                        \
    X(INPUT_NORM, "input_norm")                                           \
    X(KDA_QKV_PROJ, "kda_qkv_proj")                                       \
    X(KDA_SHORT_CONV, "kda_short_conv")                                   \
    X(KDA_GATE_PROJ, "kda_gate_proj")                                     \
    X(KDA_GATE_ACT, "kda_gate_act")                                       \
    X(KDA_RECURRENT, "kda_recurrent")                                     \
    X(KDA_OUT_GATE_PROJ, "kda_out_gate_proj")                             \
    X(KDA_OUT_NORM_GATE, "kda_out_norm_gate")                             \
    X(MLA_QKV_A_PROJ, "mla_qkv_a_proj")                                   \
    X(MLA_QKV_A_NORM, "mla_qkv_a_norm")                                   \
    X(MLA_Q_B_PROJ, "mla_q_b_proj")                                       \
    X(MLA_ROPE_CACHE_WRITE, "mla_rope_cache_write")                       \
    X(MLA_Q_ABSORB, "mla_q_absorb")                                       \
    X(MLA_ATTENTION, "mla_attention")                                     \
    X(MLA_V_UP, "mla_v_up")                                               \
    X(MLA_OUT_GATE, "mla_out_gate")                                       \
    X(GQA_QKV_PROJ, "gqa_qkv_proj")                                       \
    X(GQA_ROPE_CACHE_WRITE, "gqa_rope_cache_write")                       \
    X(GQA_ATTENTION, "gqa_attention")                                     \
    X(ATTN_O_PROJ, "attn_o_proj")                                         \
    X(ATTN_ALLREDUCE, "attn_allreduce")                                   \
    X(POST_ATTN_NORM, "post_attn_norm")                                   \
    X(ROUTER_GEMM, "router_gemm")                                         \
    X(ROUTER_TOPK, "router_topk")                                         \
    X(SHARED_GATE_UP, "shared_gate_up")                                   \
    X(SHARED_ACT, "shared_act")                                           \
    X(SHARED_DOWN, "shared_down")                                         \
    X(MOE_LATENT_DOWN, "moe_latent_down")                                 \
    X(MOE_ALIGN, "moe_align")                                             \
    X(MOE_GATE_UP, "moe_gate_up")                                         \
    X(MOE_ACT, "moe_act")                                                 \
    X(MOE_DOWN, "moe_down")                                               \
    X(MOE_COMBINE, "moe_combine")                                         \
    X(MOE_ALLREDUCE, "moe_allreduce")                                     \
    X(FFN_GATE_UP, "ffn_gate_up")                                         \
    X(FFN_ACT, "ffn_act")                                                 \
    X(FFN_DOWN, "ffn_down")                                               \
    X(FFN_ALLREDUCE, "ffn_allreduce")                                     \
    X(KDA_IN_PROJ_SMALL, "kda_in_proj_small")                             \
    X(KDA_IN_PROJ_LARGE, "kda_in_proj_large")                             \
    X(KDA_CONV_GATE, "kda_conv_gate")                                     \
    X(MLA_IN_PROJ_SMALL, "mla_in_proj_small")                             \
    X(MLA_IN_PROJ_LARGE, "mla_in_proj_large")                             \
    X(MLA_Q_B_PROJ_ROPE, "mla_q_b_proj_rope")                             \
    X(MLA_V_UP_GATE, "mla_v_up_gate")                                     \
    X(O_PROJ_AR_RESIDUAL, "o_proj_allreduce_residual")                    \
    X(SHARED_GATE_UP_ACT, "shared_gate_up_act")                           \
    X(MOE_GATE_UP_ACT, "moe_gate_up_act")                                 \
    X(MOE_COMBINE_AR, "moe_combine_allreduce_residual")                   \
    X(FFN_GATE_UP_ACT, "ffn_gate_up_act")                                 \
    X(FFN_DOWN_AR, "ffn_down_allreduce_residual")                         \
    X(EMBED, "embed")                                                     \
    X(FINAL_NORM, "final_norm")                                           \
    X(LM_HEAD, "lm_head")                                                 \
    X(LOGITS_GATHER, "logits_gather")                                     \
    X(SAMPLER, "sampler")                                                 \
    X(DRAFTER, "drafter_pass")

enum kid {
#define X(id, name) K_##id,
    KERNELS(X)
#undef X
    K_COUNT
};

static const char *const kid_names[K_COUNT] = {
#define X(id, name) name,
    KERNELS(X)
#undef X
};

enum kclass { KC_STREAM, KC_GEMM, KC_GROUPED, KC_ATTN, KC_ELEM, KC_COMM };

enum kflag {
    KF_SIDE = 1,     /* runs on the side stream (overlapped) */
    KF_OVL = 2,      /* main-stream kernel inside the overlapped region */
    KF_PREFETCH = 4, /* the next layer's first weights load during its comm */
    KF_NOFLOOR = 8,  /* a pure communication kernel: its measured latency
                        already includes launch and tail */
};

enum { PATH_STD = 0, PATH_SPEC = 1, PATH_COUNT };
#define SCOPE_STEP LAYER_KIND_COUNT /* step-level kernels (no layer) */
#define N_SCOPES (LAYER_KIND_COUNT + 1)
#define MAX_KERNELS 32

static const char *const path_names[PATH_COUNT] = {"auto", "latency_specialized"};

struct kern {
    enum kid id;
    int klass;
    int flags;
    double bytes;    /* per GPU */
    double flops;    /* per GPU */
    double rate;     /* datasheet FLOP/s for the kernel's precision */
    double comm_ns;  /* reduction time inside the kernel */
};

/* Calibration: measured times of one kernel, a grid in (batch, context). */
struct cal_entry {
    int n;           /* points, sorted by (context, batch) */
    double *batch, *ctx, *us;
};

struct cost_model {
    struct model_preset m;
    struct gpu_preset g;
    int tp;
    enum engine_backend backend;
    bool spec_capable;      /* the specialized path exists for this layout */
    double floor_ns, overhead_ns;
    struct cal_entry *cal[PATH_COUNT][N_SCOPES][K_COUNT];
    const char *cal_names[PATH_COUNT * N_SCOPES * K_COUNT];
    char cal_name_buf[PATH_COUNT * N_SCOPES * K_COUNT][80];
    int n_cal;
    /* hbm_bw * class_eff(klass), per kernel class (the same products the
     * formulas take; set with g). */
    double bw_eff[KC_COMM + 1];
    /* The majority variant (MoE or dense) of each layer kind, and how many
     * layers of each (kind, moe). */
    int n_variant[LAYER_KIND_COUNT][2];
};

/* What a step computes, in the quantities the formulas need. */
struct shape {
    double M;        /* tokens through the layer */
    double n_dec;    /* decoding sequences */
    double P;        /* positions per decoding sequence */
    double n_pre, pre_tokens, pre_attn;
    double sum_ctx;  /* KV tokens read by decoding sequences */
    double n_seq;    /* sequences in the step */
    double experts;  /* distinct routed experts touched */
    double draft;
};

/* ---- helpers ---- */

static double rate_for_bits(const struct gpu_preset *g, double bits)
{
    if (bits <= 4.5 && g->flops_fp4 > 0)
        return g->flops_fp4;
    if (bits <= 8.5)
        return g->flops_fp8;
    return g->flops_bf16;
}

static double class_eff(const struct gpu_preset *g, int klass)
{
    switch (klass) {
    case KC_STREAM: return g->eff_stream;
    case KC_GEMM: return g->eff_gemm;
    case KC_GROUPED: return g->eff_grouped;
    case KC_ATTN: return g->eff_attention;
    case KC_ELEM: return g->eff_elementwise;
    }
    return 1.0;
}

/* All-reduce of `bytes` over tp ranks: latency interpolated (log-linear in
 * message size) between the 16 KiB and 1 MiB measurements, plus the
 * transfer beyond 1 MiB at link bandwidth (2 (tp-1)/tp of the message). */
static double allreduce_impl_ns(const struct cost_model *c, double bytes, int impl)
{
    if (c->tp <= 1)
        return 0;
    double l16 = c->g.ar_library_ns, l1m = c->g.ar_library_1m_ns;
    if (impl == 0) {
        l16 = c->g.ar_oneshot_ns;
        l1m = c->g.ar_oneshot_1m_ns;
    } else if (impl == 1) {
        l16 = c->g.ar_multimem_ns;
        l1m = c->g.ar_multimem_1m_ns;
    }
    const double k16 = 16384, m1 = 1048576;
    if (bytes <= k16)
        return l16;
    if (bytes <= m1) {
        double f = log(bytes / k16) / log(m1 / k16);
        return l16 + (l1m - l16) * f;
    }
    return l1m + (bytes - m1) * 2.0 * (c->tp - 1) / c->tp / c->g.link_bw * 1e9;
}

/* The standard path's reduction (engine/CALIBRATION.md): the serving
 * stack's one-shot custom kernel for at most 8 ranks; beyond that, inside
 * one NVLink domain, the symmetric-memory multimem all-reduce where the
 * GPU has one; the library (NCCL) path otherwise. */
enum ar_impl { AR_ONESHOT, AR_MULTIMEM, AR_LIBRARY };

static enum ar_impl std_ar(const struct cost_model *c)
{
    if (c->tp <= 8 && c->tp <= c->g.nvlink_domain)
        return AR_ONESHOT;
    if (c->tp <= c->g.nvlink_domain && c->g.ar_multimem_ns > 0)
        return AR_MULTIMEM;
    return AR_LIBRARY;
}

/* fused: the specialized path's own one-shot kernel; else the standard
 * path's choice. */
static double allreduce_ns(const struct cost_model *c, double bytes, bool fused)
{
    return allreduce_impl_ns(c, bytes, fused ? AR_ONESHOT : (int)std_ar(c));
}

static double wbytes(double bits, int group)
{
    return bits / 8.0 + (group > 0 && bits < 8 ? 1.0 / group : 0.0);
}

static struct kern *push(struct kern *k, int *n, enum kid id, int klass,
                         double bytes, double flops, double rate)
{
    ASSERT(*n < MAX_KERNELS);
    struct kern *x = &k[(*n)++];
    *x = (struct kern){.id = id, .klass = klass, .bytes = bytes, .flops = flops, .rate = rate};
    return x;
}

/* ---- per-layer kernel lists ---- */

static int attn_kernels(const struct cost_model *c, int path, int kind,
                        const struct shape *s, struct kern *k, int n)
{
    const struct model_preset *m = &c->m;
    const struct gpu_preset *g = &c->g;
    double tp = c->tp, h = m->hidden, M = s->M;
    double bt = m->bits_trunk / 8, rt = rate_for_bits(g, m->bits_trunk);
    double rbf = g->flops_bf16;
    double act = M * h * 2; /* one BF16 activation row set */
    bool spec = path == PATH_SPEC;
    bool small = M <= 16;
    double ar_bytes = M * h * 2;
    struct kern *x;

    if (kind == LAYER_KDA) {
        double H = m->kda_heads / tp, d = m->kda_head_dim, hd = H * d;
        double gate_w = m->kda_full_rank_gate ? h * hd : h * d / tp + d * hd;
        double qkv_w = 3 * h * hd, beta_w = h * H, o_w = hd * h;
        double state = H * d * d * m->bits_state / 8;
        double conv_state = 3 * hd * (m->kda_conv > 1 ? m->kda_conv - 1 : 0) * 2;
        /* Recurrent state: decode reads it once and writes it at every
         * verified position (per-position snapshots allow rollback of
         * rejected drafts); prefill chunks read and write it once. */
        double st_bytes = s->n_dec * state * (1 + s->P) + s->n_pre * state * 2 +
                          M * 4 * hd * 2;
        double st_flops = M * H * 6 * d * d;
        double conv_bytes = M * 3 * hd * 2 * 2 + s->n_seq * conv_state * 2;
        if (!spec) {
            push(k, &n, K_INPUT_NORM, KC_ELEM, act * 3, 0, rbf);
            push(k, &n, K_KDA_QKV_PROJ, KC_GEMM, qkv_w * bt + act + M * 3 * hd * 2,
                 2 * M * qkv_w, rt);
            push(k, &n, K_KDA_SHORT_CONV, KC_ELEM, conv_bytes, 0, rbf);
            push(k, &n, K_KDA_GATE_PROJ, KC_GEMM, (gate_w + beta_w) * bt + act + M * hd * 2,
                 2 * M * (gate_w + beta_w), rt);
            push(k, &n, K_KDA_GATE_ACT, KC_ELEM, M * 3 * hd * 2 * 2, 0, rbf);
            push(k, &n, K_KDA_RECURRENT, KC_ATTN, st_bytes, st_flops, rbf);
            push(k, &n, K_KDA_OUT_GATE_PROJ, KC_GEMM, gate_w * bt + act + M * hd * 2,
                 2 * M * gate_w, rt);
            push(k, &n, K_KDA_OUT_NORM_GATE, KC_ELEM, M * hd * 2 * 3, 0, rbf);
            push(k, &n, K_ATTN_O_PROJ, KC_GEMM, o_w * bt + act + M * hd * 2, 2 * M * o_w, rt);
            x = push(k, &n, K_ATTN_ALLREDUCE, KC_COMM, 0, 0, rbf);
            x->comm_ns = allreduce_ns(c, ar_bytes, false);
            x->flags = KF_NOFLOOR;
        } else {
            double in_w = qkv_w + 2 * gate_w + beta_w;
            push(k, &n, small ? K_KDA_IN_PROJ_SMALL : K_KDA_IN_PROJ_LARGE, KC_STREAM,
                 in_w * bt + act * 2 + M * 5 * hd * 2, 2 * M * in_w, rt);
            push(k, &n, K_KDA_CONV_GATE, KC_ELEM, conv_bytes + M * 2 * hd * 2, 0, rbf);
            push(k, &n, K_KDA_RECURRENT, KC_ATTN, st_bytes, st_flops, rbf);
            push(k, &n, K_KDA_OUT_NORM_GATE, KC_ELEM, M * hd * 2 * 3, 0, rbf);
            x = push(k, &n, K_O_PROJ_AR_RESIDUAL, KC_STREAM,
                     o_w * bt + M * hd * 2 + act * 3, 2 * M * o_w, rt);
            x->comm_ns = allreduce_ns(c, ar_bytes, true);
        }
    } else if (kind == LAYER_MLA) {
        double H = m->n_heads / tp;
        double qk = m->qk_nope_dim + m->qk_rope_dim, lat = m->kv_lora_rank;
        double row = (lat + m->qk_rope_dim) * m->bits_kv / 8; /* cached latent row */
        double qa_w = m->q_lora_rank > 0
                          ? h * (m->q_lora_rank + lat + m->qk_rope_dim)
                          : h * (lat + m->qk_rope_dim);
        double qb_w = m->q_lora_rank > 0 ? m->q_lora_rank * H * qk : h * H * qk;
        double uk_w = H * m->qk_nope_dim * lat, uv_w = H * lat * m->v_head_dim;
        double gate_w = m->mla_output_gate ? h * H * m->v_head_dim : 0;
        double o_w = H * m->v_head_dim * h;
        /* Decode attention reads each sequence's latent cache once for all
         * its positions; absorbed MLA does (latent+rope) + latent MACs per
         * cached token, head and position. Prefill chunks: the
         * non-absorbed form over the chunk's token pairs. */
        double dec_tok = s->n_dec * s->P;
        double at_bytes = s->sum_ctx * row + dec_tok * H * (lat + m->qk_rope_dim) * 2 * 2 +
                          s->pre_tokens * row * 2 +
                          (s->pre_tokens > 0 ? s->n_pre * fmax(0, s->pre_attn / s->pre_tokens - s->pre_tokens / (2 * fmax(1, s->n_pre))) * row : 0);
        double at_flops = s->P * s->sum_ctx * H * 2 * (lat + m->qk_rope_dim + lat) +
                          s->pre_attn * H * 2 * (qk + m->v_head_dim);
        double qa_bytes = qa_w * bt + act + M * (m->q_lora_rank + lat + m->qk_rope_dim) * 2;
        if (!spec) {
            push(k, &n, K_INPUT_NORM, KC_ELEM, act * 3, 0, rbf);
            push(k, &n, K_MLA_QKV_A_PROJ, KC_GEMM, qa_bytes, 2 * M * qa_w, rt);
            push(k, &n, K_MLA_QKV_A_NORM, KC_ELEM, M * (m->q_lora_rank + lat) * 2 * 2, 0, rbf);
            push(k, &n, K_MLA_Q_B_PROJ, KC_GEMM, qb_w * bt + M * H * qk * 2, 2 * M * qb_w, rt);
            push(k, &n, K_MLA_ROPE_CACHE_WRITE, KC_ELEM, M * (H * m->qk_rope_dim * 2 * 2) + M * row, 0, rbf);
            push(k, &n, K_MLA_Q_ABSORB, KC_GEMM, uk_w * bt + M * H * (qk + lat) * 2, 2 * M * uk_w, rt);
            push(k, &n, K_MLA_ATTENTION, KC_ATTN, at_bytes, at_flops, rbf);
            push(k, &n, K_MLA_V_UP, KC_GEMM, uv_w * bt + M * H * (lat + m->v_head_dim) * 2, 2 * M * uv_w, rt);
            if (gate_w > 0)
                push(k, &n, K_MLA_OUT_GATE, KC_GEMM, gate_w * bt + act + M * H * m->v_head_dim * 2 * 2,
                     2 * M * gate_w, rt);
            push(k, &n, K_ATTN_O_PROJ, KC_GEMM, o_w * bt + act + M * H * m->v_head_dim * 2, 2 * M * o_w, rt);
            x = push(k, &n, K_ATTN_ALLREDUCE, KC_COMM, 0, 0, rbf);
            x->comm_ns = allreduce_ns(c, ar_bytes, false);
            x->flags = KF_NOFLOOR;
        } else {
            push(k, &n, small ? K_MLA_IN_PROJ_SMALL : K_MLA_IN_PROJ_LARGE, KC_STREAM,
                 qa_bytes + gate_w * bt + act, 2 * M * (qa_w + gate_w), rt);
            push(k, &n, K_MLA_Q_B_PROJ_ROPE, KC_STREAM,
                 qb_w * bt + M * H * qk * 2 + M * row, 2 * M * qb_w, rt);
            push(k, &n, K_MLA_ATTENTION, KC_ATTN, at_bytes + uk_w * bt,
                 at_flops + 2 * M * uk_w, rbf);
            push(k, &n, K_MLA_V_UP_GATE, KC_STREAM, uv_w * bt + M * H * (lat + m->v_head_dim) * 2 * 2,
                 2 * M * uv_w, rt);
            x = push(k, &n, K_O_PROJ_AR_RESIDUAL, KC_STREAM,
                     o_w * bt + M * H * m->v_head_dim * 2 + act * 3, 2 * M * o_w, rt);
            x->comm_ns = allreduce_ns(c, ar_bytes, true);
        }
    } else { /* GQA (no specialized path exists; the standard list) */
        double H = m->n_heads / tp, d = m->head_dim;
        double kvh = m->n_kv_heads >= tp ? m->n_kv_heads / tp : 1;
        double qkv_w = h * d * (H + 2 * kvh), o_w = H * d * h;
        double row = 2 * kvh * d * m->bits_kv / 8;
        double pre_prefix = s->pre_tokens > 0
                                ? s->n_pre * fmax(0, s->pre_attn / s->pre_tokens -
                                                         s->pre_tokens / (2 * fmax(1, s->n_pre)))
                                : 0; /* prefix tokens the chunks attend to */
        double at_bytes = s->sum_ctx * row + M * (H + 2 * kvh) * d * 2 +
                          (s->pre_tokens * 2 + pre_prefix) * row;
        double at_flops = (s->P * s->sum_ctx + s->pre_attn) * H * 4 * d;
        push(k, &n, K_INPUT_NORM, KC_ELEM, act * 3, 0, rbf);
        push(k, &n, K_GQA_QKV_PROJ, KC_GEMM, qkv_w * bt + act + M * (H + 2 * kvh) * d * 2, 2 * M * qkv_w, rt);
        push(k, &n, K_GQA_ROPE_CACHE_WRITE, KC_ELEM, M * (H + kvh) * d * 2 * 2 + M * row, 0, rbf);
        push(k, &n, K_GQA_ATTENTION, KC_ATTN, at_bytes, at_flops, rbf);
        push(k, &n, K_ATTN_O_PROJ, KC_GEMM, o_w * bt + act + M * H * d * 2, 2 * M * o_w, rt);
        x = push(k, &n, K_ATTN_ALLREDUCE, KC_COMM, 0, 0, rbf);
        x->comm_ns = allreduce_ns(c, ar_bytes, false);
        x->flags = KF_NOFLOOR;
    }
    return n;
}

static int ffn_kernels(const struct cost_model *c, int path, bool moe,
                       const struct shape *s, struct kern *k, int n)
{
    const struct model_preset *m = &c->m;
    const struct gpu_preset *g = &c->g;
    double tp = c->tp, h = m->hidden, M = s->M;
    double bt = m->bits_trunk / 8, rt = rate_for_bits(g, m->bits_trunk);
    double bs = m->bits_shared / 8, rs = rate_for_bits(g, m->bits_shared);
    double be = wbytes(m->bits_expert, m->expert_group), re = rate_for_bits(g, m->bits_expert);
    double rbf = g->flops_bf16;
    double act = M * h * 2, ar_bytes = M * h * 2;
    bool spec = path == PATH_SPEC;
    struct kern *x;

    if (!moe) {
        double I = m->dense_intermediate / tp;
        double gu_w = 2 * h * I, d_w = I * h;
        if (!spec) {
            push(k, &n, K_POST_ATTN_NORM, KC_ELEM, act * 3, 0, rbf);
            push(k, &n, K_FFN_GATE_UP, KC_GEMM, gu_w * bt + act + M * 2 * I * 2, 2 * M * gu_w, rt);
            push(k, &n, K_FFN_ACT, KC_ELEM, M * 3 * I * 2, 0, rbf);
            push(k, &n, K_FFN_DOWN, KC_GEMM, d_w * bt + M * I * 2 + act, 2 * M * d_w, rt);
            x = push(k, &n, K_FFN_ALLREDUCE, KC_COMM, 0, 0, rbf);
            x->comm_ns = allreduce_ns(c, ar_bytes, false);
            x->flags = KF_NOFLOOR;
        } else {
            push(k, &n, K_FFN_GATE_UP_ACT, KC_STREAM, gu_w * bt + act + M * I * 2, 2 * M * gu_w, rt);
            x = push(k, &n, K_FFN_DOWN_AR, KC_STREAM, d_w * bt + M * I * 2 + act * 3, 2 * M * d_w, rt);
            x->comm_ns = allreduce_ns(c, ar_bytes, true);
            x->flags = KF_PREFETCH;
        }
        return n;
    }

    double E = m->n_experts, topk = m->experts_per_token;
    double w = m->expert_latent > 0 ? m->expert_latent : h;
    double Ie = m->expert_intermediate / tp;
    double Is = (double)m->expert_intermediate * m->n_shared_experts / tp;
    double router_w = h * E; /* replicated */
    double sgu_w = 2 * h * Is, sd_w = Is * h;
    double lat_w = m->expert_latent > 0 ? h * m->expert_latent / tp : 0;
    double egu_w = 2 * w * Ie, ed_w = Ie * w; /* one expert's shard */
    double tok_e = M * topk;                  /* token-expert pairs */
    double router_bytes = router_w * bt + act + M * E * 4;
    double topk_bytes = M * E * 4 + M * topk * 8;
    double egu_bytes = s->experts * egu_w * be + tok_e * w * 2 + tok_e * Ie * 2 * 2;
    double ed_bytes = s->experts * ed_w * be + tok_e * Ie * 2 + tok_e * w * 2;
    if (!spec) {
        push(k, &n, K_POST_ATTN_NORM, KC_ELEM, act * 3, 0, rbf);
        push(k, &n, K_ROUTER_GEMM, KC_GEMM, router_bytes, 2 * M * router_w, rbf);
        push(k, &n, K_ROUTER_TOPK, KC_ELEM, topk_bytes, 0, rbf);
        if (Is > 0) {
            push(k, &n, K_SHARED_GATE_UP, KC_GEMM, sgu_w * bs + act + M * 2 * Is * 2, 2 * M * sgu_w, rs);
            push(k, &n, K_SHARED_ACT, KC_ELEM, M * 3 * Is * 2, 0, rbf);
            push(k, &n, K_SHARED_DOWN, KC_GEMM, sd_w * bs + M * Is * 2 + act, 2 * M * sd_w, rs);
        }
        if (lat_w > 0)
            push(k, &n, K_MOE_LATENT_DOWN, KC_GEMM, lat_w * bt + act + M * w * 2 / tp, 2 * M * lat_w, rt);
        push(k, &n, K_MOE_ALIGN, KC_ELEM, M * topk * 16 + E * 8, 0, rbf);
        push(k, &n, K_MOE_GATE_UP, KC_GROUPED, egu_bytes, 2 * tok_e * egu_w, re);
        push(k, &n, K_MOE_ACT, KC_ELEM, tok_e * 3 * Ie * 2, 0, rbf);
        push(k, &n, K_MOE_DOWN, KC_GROUPED, ed_bytes, 2 * tok_e * ed_w, re);
        push(k, &n, K_MOE_COMBINE, lat_w > 0 ? KC_GEMM : KC_ELEM,
             lat_w * bt + tok_e * w * 2 + act * 2, 2 * M * lat_w, rt);
        x = push(k, &n, K_MOE_ALLREDUCE, KC_COMM, 0, 0, rbf);
        x->comm_ns = allreduce_ns(c, ar_bytes, false);
        x->flags = KF_NOFLOOR;
    } else {
        /* Router split into a GEMM part and a top-k part; shared experts
         * on a side stream overlapping the routed chain. */
        push(k, &n, K_ROUTER_GEMM, KC_STREAM, router_bytes, 2 * M * router_w, rbf)->flags = KF_OVL;
        push(k, &n, K_ROUTER_TOPK, KC_ELEM, topk_bytes, 0, rbf)->flags = KF_OVL;
        if (Is > 0) {
            push(k, &n, K_SHARED_GATE_UP_ACT, KC_GEMM, sgu_w * bs + act + M * Is * 2, 2 * M * sgu_w, rs)->flags = KF_SIDE;
            push(k, &n, K_SHARED_DOWN, KC_GEMM, sd_w * bs + M * Is * 2 + act, 2 * M * sd_w, rs)->flags = KF_SIDE;
        }
        if (lat_w > 0)
            push(k, &n, K_MOE_LATENT_DOWN, KC_STREAM, lat_w * bt + act + M * w * 2 / tp, 2 * M * lat_w, rt)->flags = KF_OVL;
        push(k, &n, K_MOE_GATE_UP_ACT, KC_GROUPED, egu_bytes, 2 * tok_e * egu_w, re)->flags = KF_OVL;
        push(k, &n, K_MOE_DOWN, KC_GROUPED, ed_bytes, 2 * tok_e * ed_w, re)->flags = KF_OVL;
        x = push(k, &n, K_MOE_COMBINE_AR, KC_STREAM, lat_w * bt + tok_e * w * 2 + act * 4,
                 2 * M * lat_w, rt);
        x->comm_ns = allreduce_ns(c, ar_bytes, true);
        x->flags = KF_PREFETCH;
    }
    return n;
}

static int step_kernels(const struct cost_model *c, const struct shape *s,
                        struct kern *k, int n)
{
    const struct model_preset *m = &c->m;
    const struct gpu_preset *g = &c->g;
    double tp = c->tp, h = m->hidden, M = s->M, V = m->vocab;
    double bt = m->bits_trunk / 8, rt = rate_for_bits(g, m->bits_trunk);
    /* Logits are needed only for the positions that sample: decode
     * positions and the last token of each prefill chunk. */
    double L = s->n_dec * s->P + s->n_pre;
    push(k, &n, K_EMBED, KC_ELEM, M * h * 2 * 2 + M * 8, 0, g->flops_bf16);
    push(k, &n, K_FINAL_NORM, KC_ELEM, L * h * 2 * 3, 0, g->flops_bf16);
    push(k, &n, K_LM_HEAD, KC_STREAM, V / tp * h * bt + L * h * 2 + L * V / tp * 4,
         2 * L * V / tp * h, rt);
    struct kern *x = push(k, &n, K_LOGITS_GATHER, KC_COMM, 0, 0, g->flops_bf16);
    x->comm_ns = allreduce_ns(c, L * V / tp * 4, false);
    x->flags = KF_NOFLOOR;
    push(k, &n, K_SAMPLER, KC_ELEM, L * V * 4 * 2, 0, g->flops_bf16);
    return n;
}

/* ---- calibration lookup ---- */

static double interp_row(const struct cal_entry *e, int lo, int hi, double b)
{
    /* points lo..hi-1 share one context, sorted by batch */
    if (hi - lo == 1 || b <= e->batch[lo])
        return e->us[lo];
    for (int i = lo + 1; i < hi; i++)
        if (b <= e->batch[i]) {
            double f = (b - e->batch[i - 1]) / (e->batch[i] - e->batch[i - 1]);
            return e->us[i - 1] + f * (e->us[i] - e->us[i - 1]);
        }
    /* above the largest batch: extend the last segment */
    double f = (b - e->batch[hi - 2]) / (e->batch[hi - 1] - e->batch[hi - 2]);
    return fmax(0, e->us[hi - 2] + f * (e->us[hi - 1] - e->us[hi - 2]));
}

static double cal_lookup_us(const struct cal_entry *e, double batch, double ctx)
{
    /* rows of equal context */
    int rows[64][2] = {{0, 0}}, nr = 0;
    for (int i = 0; i < e->n && nr < 64;) {
        int j = i;
        while (j < e->n && e->ctx[j] == e->ctx[i])
            j++;
        rows[nr][0] = i;
        rows[nr][1] = j;
        nr++;
        i = j;
    }
    if (nr == 1 || ctx <= e->ctx[rows[0][0]])
        return interp_row(e, rows[0][0], rows[0][1], batch);
    int r = 1;
    while (r < nr - 1 && ctx > e->ctx[rows[r][0]])
        r++;
    double c0 = e->ctx[rows[r - 1][0]], c1 = e->ctx[rows[r][0]];
    double u0 = interp_row(e, rows[r - 1][0], rows[r - 1][1], batch);
    double u1 = interp_row(e, rows[r][0], rows[r][1], batch);
    double f = (ctx - c0) / (c1 - c0);
    return fmax(0, u0 + f * (u1 - u0));
}

/* ---- evaluation ---- */

static double kern_ns(const struct cost_model *c, int path, int scope,
                      const struct kern *x, const struct shape *s, bool *calibrated)
{
    const struct cal_entry *e = c->cal[path][scope][x->id];
    if (e) {
        if (calibrated)
            *calibrated = true;
        double ctx = s->n_dec > 0 ? s->sum_ctx / s->n_dec : 0;
        return cal_lookup_us(e, s->M, ctx) * 1e3;
    }
    if (calibrated)
        *calibrated = false;
    double t = 0;
    if (x->klass != KC_COMM) {
        double tb = x->bytes / (c->g.hbm_bw * class_eff(&c->g, x->klass)) * 1e9;
        double tf = x->rate > 0 ? x->flops / (x->rate * c->g.eff_compute) * 1e9 : 0;
        t = tb > tf ? tb : tf;
    }
    if (!(x->flags & KF_NOFLOOR))
        t += c->floor_ns;
    return t + x->comm_ns;
}

/* Memory time of a kernel (for the prefetch credit). */
static double kern_mem_ns(const struct cost_model *c, const struct kern *x)
{
    if (x->klass == KC_COMM)
        return 0;
    return x->bytes / (c->g.hbm_bw * class_eff(&c->g, x->klass)) * 1e9;
}

/* kern_ns() for a model without calibration: the same arithmetic, the
 * class bandwidths taken from bw_eff. */
static inline double kern_ns_nocal(const struct cost_model *c, const struct kern *x)
{
    double t = 0;
    if (x->klass != KC_COMM) {
        double tb = x->bytes / c->bw_eff[x->klass] * 1e9;
        double tf = x->rate > 0 ? x->flops / (x->rate * c->g.eff_compute) * 1e9 : 0;
        t = tb > tf ? tb : tf;
    }
    if (!(x->flags & KF_NOFLOOR))
        t += c->floor_ns;
    return t + x->comm_ns;
}

/* list_ns() without calibration or per-kernel outputs (cost_step's case
 * on an uncalibrated model; about half the instructions): the same sums
 * in the same order, from the kernels' times tk[]. */
static double list_sum(const struct cost_model *c, const struct kern *k, const double *tk, int n)
{
    double total = 0, side = 0, main_ovl = 0, ovl_bytes = 0;
    bool any_ovl = false, prefetch = false;
    for (int i = 0; i < n; i++) {
        double t = tk[i];
        int f = k[i].flags;
        if (__builtin_expect(f & (KF_SIDE | KF_OVL | KF_PREFETCH), 0)) {
            prefetch |= (f & KF_PREFETCH) != 0;
            if (f & KF_SIDE) {
                side += t;
                ovl_bytes += k[i].bytes;
                any_ovl = true;
                continue;
            }
            if (f & KF_OVL) {
                main_ovl += t;
                ovl_bytes += k[i].bytes;
                any_ovl = true;
                continue;
            }
        }
        total += t;
    }
    if (any_ovl) {
        double shared_bw = ovl_bytes / (c->g.hbm_bw * c->g.eff_stream) * 1e9;
        double r = side > main_ovl ? side : main_ovl;
        total += r > shared_bw ? r : shared_bw;
    }
    if (prefetch)
        for (int i = 0; i < n; i++)
            if (k[i].flags & KF_PREFETCH) {
                double credit = kern_mem_ns(c, &k[0]);
                total -= credit < k[i].comm_ns ? credit : k[i].comm_ns;
            }
    return total;
}

static double list_ns_nocal(const struct cost_model *c, const struct kern *k, int n)
{
    double tk[MAX_KERNELS];
    for (int i = 0; i < n; i++)
        tk[i] = kern_ns_nocal(c, &k[i]);
    return list_sum(c, k, tk, n);
}

/* Cost of one layer's kernel list; fills per-kernel times if asked. */
static double list_ns(const struct cost_model *c, int path, int scope,
                      const struct kern *k, int n, const struct shape *s,
                      double *per, bool *cal)
{
    double total = 0, side = 0, main_ovl = 0, ovl_bytes = 0;
    bool any_ovl = false;
    for (int i = 0; i < n; i++) {
        bool cb = false;
        double t = kern_ns(c, path, scope, &k[i], s, &cb);
        if (per)
            per[i] = t;
        if (cal)
            cal[i] = cb;
        if (k[i].flags & KF_SIDE) {
            side += t;
            ovl_bytes += k[i].bytes;
            any_ovl = true;
        } else if (k[i].flags & KF_OVL) {
            main_ovl += t;
            ovl_bytes += k[i].bytes;
            any_ovl = true;
        } else {
            total += t;
        }
    }
    if (any_ovl) {
        /* Concurrent streams share HBM: the region takes the longer chain,
         * or the combined bytes at stream bandwidth if that is longer. */
        double shared_bw = ovl_bytes / (c->g.hbm_bw * c->g.eff_stream) * 1e9;
        double r = side > main_ovl ? side : main_ovl;
        total += r > shared_bw ? r : shared_bw;
    }
    /* Prefetch: the next layer's first kernel loads weights while this
     * layer's final reduction runs (cyclic: the same kind follows). */
    for (int i = 0; i < n; i++)
        if ((k[i].flags & KF_PREFETCH) && n > 0) {
            bool cb = false;
            kern_ns(c, path, scope, &k[0], s, &cb);
            if (!cb) {
                double credit = kern_mem_ns(c, &k[0]);
                total -= credit < k[i].comm_ns ? credit : k[i].comm_ns;
            }
        }
    return total;
}

static void make_shape(const struct cost_model *c, const struct cost_batch *b,
                       struct shape *s)
{
    memset(s, 0, sizeof *s);
    s->n_dec = b->n_decode > 0 ? b->n_decode : 0;
    s->P = b->decode_positions > 0 ? b->decode_positions : 1;
    s->n_pre = b->n_prefill > 0 ? b->n_prefill : 0;
    s->pre_tokens = b->prefill_tokens > 0 ? (double)b->prefill_tokens : 0;
    s->pre_attn = b->prefill_attn > 0 ? (double)b->prefill_attn : 0;
    s->sum_ctx = b->sum_ctx > 0 ? (double)b->sum_ctx : 0;
    s->M = s->n_dec * s->P + s->pre_tokens;
    s->n_seq = s->n_dec + s->n_pre;
    s->experts = model_experts_touched(&c->m, s->M);
    s->draft = b->draft > 0 ? b->draft : 0;
}

static bool spec_applies(const struct cost_model *c, const struct cost_batch *b)
{
    if (!c->spec_capable)
        return false;
    if (b->n_prefill > 0 || b->prefill_tokens > 0 || b->n_decode < 1 || b->n_decode > 64)
        return false;
    if (b->draft > 0)
        return b->draft >= 3 && b->draft <= 7;
    return b->decode_positions <= 1;
}

static int layer_list(const struct cost_model *c, int path, int kind, bool moe,
                      const struct shape *s, struct kern *k)
{
    int n = attn_kernels(c, path, kind, s, k, 0);
    return ffn_kernels(c, path, moe, s, k, n);
}

/* The drafter: one pass per step proposing `draft` tokens for each
 * decoding sequence (a parallel block drafter), as a dense model on the
 * standard kernels: per layer 13 kernels with a floor and 2 reductions,
 * its weights streamed once at generic-GEMM efficiency. */
#define DRAFTER_KERNELS_PER_LAYER 13
static double drafter_ns(const struct cost_model *c, const struct shape *s)
{
    const struct model_preset *m = &c->m;
    if (s->draft <= 0 || m->drafter_params <= 0 || s->n_dec <= 0)
        return 0;
    const struct cal_entry *e = c->cal[PATH_STD][SCOPE_STEP][K_DRAFTER];
    double M = s->n_dec * s->draft;
    if (e)
        return cal_lookup_us(e, M, s->n_dec > 0 ? s->sum_ctx / s->n_dec : 0) * 1e3;
    double bytes = m->drafter_params * m->drafter_bits / 8 / c->tp;
    double flops = 2 * m->drafter_params * M / c->tp;
    double tb = bytes / (c->g.hbm_bw * c->g.eff_gemm) * 1e9;
    double tf = flops / (rate_for_bits(&c->g, m->drafter_bits) * c->g.eff_compute) * 1e9;
    double per_layer = DRAFTER_KERNELS_PER_LAYER * c->floor_ns +
                       2 * allreduce_ns(c, M * m->hidden * 2, false);
    return (tb > tf ? tb : tf) + m->drafter_layers * per_layer;
}

void cost_step(const struct cost_model *c, const struct cost_batch *b,
               struct cost_result *out)
{
    memset(out, 0, sizeof *out);
    struct shape s;
    make_shape(c, b, &s);
    bool spec = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && spec_applies(c, b);
    out->specialized = spec;
    out->fallback = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && !spec;
    int path = spec ? PATH_SPEC : PATH_STD;
    struct kern k[MAX_KERNELS];
    double total = 0, kernels = 0;
    for (int kind = 0; kind < LAYER_KIND_COUNT; kind++)
        for (int moe = 0; moe < 2; moe++) {
            int cnt = c->n_variant[kind][moe];
            if (!cnt)
                continue;
            int n = layer_list(c, path, kind, moe, &s, k);
            double t = c->n_cal ? list_ns(c, path, kind, k, n, &s, NULL, NULL)
                                : list_ns_nocal(c, k, n);
            total += cnt * t;
            kernels += (double)cnt * n;
            bool typical = c->n_variant[kind][moe] >= c->n_variant[kind][!moe];
            if (typical)
                out->layer_ns[kind] = (int64_t)llround(t);
        }
    out->layers_ns = (int64_t)llround(total);
    int n = step_kernels(c, &s, k, 0);
    total += c->n_cal ? list_ns(c, path, SCOPE_STEP, k, n, &s, NULL, NULL)
                      : list_ns_nocal(c, k, n);
    double d = drafter_ns(c, &s);
    out->drafter_ns = (int64_t)llround(d);
    out->overhead_ns = (int64_t)llround(c->overhead_ns);
    out->kernels_per_layer = (int)llround(kernels / c->m.n_layers);
    out->step_ns = (int64_t)llround(total + d + c->overhead_ns);
}

/* ---- memo over sum_ctx ---- */

/* One batch shape (every field but sum_ctx): its layer variants' kernel
 * lists and times, the step list's and the drafter's cost. Only the
 * attention kernels of MLA and GQA layers read sum_ctx (KDA layers,
 * FFNs, step kernels and the uncalibrated drafter do not), so a query
 * rebuilds those lists and prices the kernels that changed. */
struct memo_var {
    int kind, moe, cnt, n, n_attn;
    bool typical, ctx;       /* ctx: its attention list reads sum_ctx */
    struct kern k[MAX_KERNELS];
    double t[MAX_KERNELS];   /* kern_ns_nocal(k[i]) */
    double sum;              /* list_sum() of them */
};

struct memo_entry {
    bool used;
    struct cost_batch key;   /* sum_ctx 0 */
    double floor_ns;         /* the fit it was priced with */
    struct shape s;
    int path;
    bool spec, fallback;
    int nv;
    struct memo_var v[LAYER_KIND_COUNT * 2];
    double step_t, drafter;
};

#define MEMO_ENTRIES 32

struct cost_memo {
    const struct cost_model *c;
    struct memo_entry *e;    /* MEMO_ENTRIES, direct-mapped */
};

struct cost_memo *cost_memo_create(const struct cost_model *c)
{
    struct cost_memo *m = xcalloc(1, sizeof *m);
    m->c = c;
    m->e = xcalloc(MEMO_ENTRIES, sizeof *m->e);
    return m;
}

void cost_memo_destroy(struct cost_memo *m)
{
    if (!m)
        return;
    free(m->e);
    free(m);
}

static bool kern_same(const struct kern *a, const struct kern *b)
{
    return a->id == b->id && a->klass == b->klass && a->flags == b->flags &&
           memcmp(&a->bytes, &b->bytes, sizeof a->bytes) == 0 &&
           memcmp(&a->flops, &b->flops, sizeof a->flops) == 0 &&
           memcmp(&a->rate, &b->rate, sizeof a->rate) == 0 &&
           memcmp(&a->comm_ns, &b->comm_ns, sizeof a->comm_ns) == 0;
}

static void memo_fill(const struct cost_model *c, const struct cost_batch *b,
                      struct memo_entry *e)
{
    e->used = true;
    e->key = *b;
    e->key.sum_ctx = 0;
    e->floor_ns = c->floor_ns;
    make_shape(c, b, &e->s);
    e->spec = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && spec_applies(c, b);
    e->fallback = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && !e->spec;
    e->path = e->spec ? PATH_SPEC : PATH_STD;
    e->nv = 0;
    for (int kind = 0; kind < LAYER_KIND_COUNT; kind++)
        for (int moe = 0; moe < 2; moe++) {
            int cnt = c->n_variant[kind][moe];
            if (!cnt)
                continue;
            struct memo_var *v = &e->v[e->nv++];
            v->kind = kind;
            v->moe = moe;
            v->cnt = cnt;
            v->typical = c->n_variant[kind][moe] >= c->n_variant[kind][!moe];
            v->ctx = kind != LAYER_KDA;
            v->n_attn = attn_kernels(c, e->path, kind, &e->s, v->k, 0);
            v->n = ffn_kernels(c, e->path, moe, &e->s, v->k, v->n_attn);
            for (int i = 0; i < v->n; i++)
                v->t[i] = kern_ns_nocal(c, &v->k[i]);
            v->sum = list_sum(c, v->k, v->t, v->n);
        }
    struct kern k[MAX_KERNELS];
    int n = step_kernels(c, &e->s, k, 0);
    e->step_t = list_ns_nocal(c, k, n);
    e->drafter = drafter_ns(c, &e->s);
}

void cost_step_memo(struct cost_memo *m, const struct cost_batch *b, struct cost_result *out)
{
    const struct cost_model *c = m->c;
    if (c->n_cal) {
        cost_step(c, b, out);
        return;
    }
    uint64_t h = hash_mix(((uint64_t)(uint32_t)b->n_decode << 32) ^
                              ((uint64_t)(uint32_t)b->decode_positions << 16) ^
                              (uint64_t)(uint32_t)b->draft,
                          hash_mix((uint64_t)b->n_prefill ^ (uint64_t)b->prefill_tokens << 8,
                                   (uint64_t)b->prefill_attn));
    struct memo_entry *e = &m->e[h & (MEMO_ENTRIES - 1)];
    bool fresh = !e->used || e->floor_ns != c->floor_ns || e->key.n_decode != b->n_decode ||
                 e->key.decode_positions != b->decode_positions || e->key.draft != b->draft ||
                 e->key.n_prefill != b->n_prefill ||
                 e->key.prefill_tokens != b->prefill_tokens ||
                 e->key.prefill_attn != b->prefill_attn;
    if (fresh)
        memo_fill(c, b, e);
    memset(out, 0, sizeof *out);
    out->specialized = e->spec;
    out->fallback = e->fallback;
    /* make_shape()'s sum_ctx; the rest of the shape does not read it. */
    e->s.sum_ctx = b->sum_ctx > 0 ? (double)b->sum_ctx : 0;
    double total = 0, kernels = 0;
    for (int i = 0; i < e->nv; i++) {
        struct memo_var *v = &e->v[i];
        if (!fresh && v->ctx) {
            struct kern a[MAX_KERNELS];
            int na = attn_kernels(c, e->path, v->kind, &e->s, a, 0);
            ASSERT(na == v->n_attn);
            bool changed = false;
            for (int j = 0; j < na; j++)
                if (!kern_same(&a[j], &v->k[j])) {
                    v->k[j] = a[j];
                    v->t[j] = kern_ns_nocal(c, &a[j]);
                    changed = true;
                }
            if (changed)
                v->sum = list_sum(c, v->k, v->t, v->n);
        }
        double t = v->sum;
        total += v->cnt * t;
        kernels += (double)v->cnt * v->n;
        if (v->typical)
            out->layer_ns[v->kind] = (int64_t)llround(t);
    }
    out->layers_ns = (int64_t)llround(total);
    total += e->step_t;
    double d = e->drafter;
    out->drafter_ns = (int64_t)llround(d);
    out->overhead_ns = (int64_t)llround(c->overhead_ns);
    out->kernels_per_layer = (int)llround(kernels / c->m.n_layers);
    out->step_ns = (int64_t)llround(total + d + c->overhead_ns);
}

double cost_step_bytes(const struct cost_model *c, const struct cost_batch *b)
{
    struct shape s;
    make_shape(c, b, &s);
    bool spec = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && spec_applies(c, b);
    int path = spec ? PATH_SPEC : PATH_STD;
    struct kern k[MAX_KERNELS];
    double total = 0;
    for (int kind = 0; kind < LAYER_KIND_COUNT; kind++)
        for (int moe = 0; moe < 2; moe++) {
            if (!c->n_variant[kind][moe])
                continue;
            int n = layer_list(c, path, kind, moe, &s, k);
            for (int i = 0; i < n; i++)
                total += c->n_variant[kind][moe] * k[i].bytes;
        }
    int n = step_kernels(c, &s, k, 0);
    for (int i = 0; i < n; i++)
        total += k[i].bytes;
    if (s.draft > 0 && c->m.drafter_params > 0 && s.n_dec > 0)
        total += c->m.drafter_params * c->m.drafter_bits / 8 / c->tp;
    return total;
}

int cost_breakdown(const struct cost_model *c, const struct cost_batch *b,
                   struct cost_kernel_time *out, int cap)
{
    struct shape s;
    make_shape(c, b, &s);
    bool spec = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && spec_applies(c, b);
    int path = spec ? PATH_SPEC : PATH_STD;
    struct kern k[MAX_KERNELS];
    double per[MAX_KERNELS];
    bool cal[MAX_KERNELS];
    int w = 0;
    for (int kind = 0; kind <= LAYER_KIND_COUNT; kind++) {
        int n;
        if (kind == LAYER_KIND_COUNT) {
            n = step_kernels(c, &s, k, 0);
        } else {
            int moe = c->n_variant[kind][1] >= c->n_variant[kind][0];
            if (!c->n_variant[kind][moe])
                continue;
            n = layer_list(c, path, kind, moe, &s, k);
        }
        list_ns(c, path, kind, k, n, &s, per, cal);
        for (int i = 0; i < n && w < cap; i++) {
            out[w].name = kid_names[k[i].id];
            out[w].layer_kind = kind;
            out[w].ns = (int64_t)llround(per[i]);
            out[w].calibrated = cal[i];
            w++;
        }
    }
    double d = drafter_ns(c, &s);
    if (d > 0 && w < cap) {
        out[w].name = kid_names[K_DRAFTER];
        out[w].layer_kind = LAYER_KIND_COUNT;
        out[w].ns = (int64_t)llround(d);
        out[w].calibrated = c->cal[PATH_STD][SCOPE_STEP][K_DRAFTER] != NULL;
        w++;
    }
    return w;
}

int cost_calibrated_kernels(const struct cost_model *c, const char **names, int cap)
{
    int n = c->n_cal < cap ? c->n_cal : cap;
    for (int i = 0; i < n; i++)
        names[i] = c->cal_names[i];
    return c->n_cal;
}

/* ---- kernel name tables (for the doc, calibration checks and tests) ---- */

int cost_kernel_names(const struct cost_model *c, int path, int scope, bool moe,
                      int batch, const char **names, int cap)
{
    if (path < 0 || path >= PATH_COUNT || scope < 0 || scope > SCOPE_STEP)
        return 0;
    struct cost_batch b = {.n_decode = batch > 0 ? batch : 1, .decode_positions = 1};
    struct shape s;
    make_shape(c, &b, &s);
    struct kern k[MAX_KERNELS];
    int n = scope == SCOPE_STEP ? step_kernels(c, &s, k, 0)
                                : layer_list(c, path, scope, moe, &s, k);
    for (int i = 0; i < n && i < cap; i++)
        names[i] = kid_names[k[i].id];
    return n;
}

/* ---- calibration files ---- */

static int scope_from_name(const char *s)
{
    if (strcmp(s, "step") == 0)
        return SCOPE_STEP;
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (strcmp(s, layer_kind_name(k)) == 0)
            return k;
    return -1;
}

static int path_from_name(const char *s)
{
    if (strcmp(s, "auto") == 0 || strcmp(s, "standard") == 0)
        return PATH_STD;
    if (strcmp(s, "latency_specialized") == 0 || strcmp(s, "fused") == 0)
        return PATH_SPEC;
    return -1;
}

static int kid_from_name(const char *s)
{
    for (int i = 0; i < K_COUNT; i++)
        if (strcmp(kid_names[i], s) == 0)
            return i;
    return -1;
}

/* Whether a kernel id appears in some list of (path, scope), for any
 * batch and either FFN variant. */
static bool kernel_in(const struct cost_model *c, int path, int scope, int id)
{
    struct kern k[MAX_KERNELS];
    for (int small = 0; small < 2; small++) {
        struct cost_batch b = {.n_decode = small ? 1 : 64, .decode_positions = 1};
        struct shape s;
        make_shape(c, &b, &s);
        if (scope == SCOPE_STEP) {
            if (id == K_DRAFTER && path == PATH_STD)
                return true;
            int n = step_kernels(c, &s, k, 0);
            for (int i = 0; i < n; i++)
                if ((int)k[i].id == id)
                    return true;
            continue;
        }
        for (int moe = 0; moe < 2; moe++) {
            int n = layer_list(c, path, scope, moe, &s, k);
            for (int i = 0; i < n; i++)
                if ((int)k[i].id == id)
                    return true;
        }
    }
    return false;
}

static int cmp_pt(const void *a, const void *b)
{
    const double *x = a, *y = b; /* {ctx, batch, us} */
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    if (x[1] != y[1])
        return x[1] < y[1] ? -1 : 1;
    return 0;
}

static void cal_free(struct cost_model *c)
{
    for (int p = 0; p < PATH_COUNT; p++)
        for (int s = 0; s < N_SCOPES; s++)
            for (int k = 0; k < K_COUNT; k++)
                if (c->cal[p][s][k]) {
                    free(c->cal[p][s][k]->batch);
                    free(c->cal[p][s][k]);
                    c->cal[p][s][k] = NULL;
                }
    c->n_cal = 0;
}

int cost_load_calibration_mem(struct cost_model *c, const char *text, size_t len,
                              const char *label, bool force, char *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(err, "%s:%d:%d: %s", label, je.line, je.column, je.text);
    int rc = -1;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *gpu = json_string_value(json_object_get(root, "gpu"));
    json_t *ftp = json_object_get(root, "tp");
    json_t *entries = json_object_get(root, "entries");
    if (!json_is_object(root)) {
        err_set(err, "%s: a calibration file must be a JSON object", label);
        goto out;
    }
    if (!fmt || strcmp(fmt, "agentreplay-calibration/1") != 0) {
        err_set(err, "%s: field 'format': must be \"agentreplay-calibration/1\"", label);
        goto out;
    }
    if (!gpu) {
        err_set(err, "%s: field 'gpu': missing (the GPU kind measured)", label);
        goto out;
    }
    if (strcmp(gpu, c->g.name) != 0 && !force) {
        err_set(err, "%s: field 'gpu': measured on %s, the deployment is %s "
                     "(use --force-calibration to accept)", label, gpu, c->g.name);
        goto out;
    }
    if (ftp && (!json_is_integer(ftp) || json_integer_value(ftp) < 1)) {
        err_set(err, "%s: field 'tp': must be a positive integer", label);
        goto out;
    }
    if (!json_is_array(entries)) {
        err_set(err, "%s: field 'entries': missing or not an array", label);
        goto out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        char at[64];
        snprintf(at, sizeof at, "entries[%zu]", i);
        if (!json_is_object(e)) {
            err_set(err, "%s: field '%s': must be an object", label, at);
            goto out;
        }
        json_t *etp = json_object_get(e, "tp");
        if (!etp)
            etp = ftp;
        if (!etp || !json_is_integer(etp) || json_integer_value(etp) < 1) {
            err_set(err, "%s: field '%s.tp': missing or not a positive integer", label, at);
            goto out;
        }
        const char *ps = json_string_value(json_object_get(e, "path"));
        const char *ks = json_string_value(json_object_get(e, "layer_kind"));
        const char *ns = json_string_value(json_object_get(e, "kernel"));
        int path = ps ? path_from_name(ps) : -1;
        if (path < 0) {
            err_set(err, "%s: field '%s.path': must be \"auto\" or \"latency_specialized\"", label, at);
            goto out;
        }
        int scope = ks ? scope_from_name(ks) : -1;
        if (scope < 0) {
            err_set(err, "%s: field '%s.layer_kind': must be kda, mla, gqa or step", label, at);
            goto out;
        }
        int id = ns ? kid_from_name(ns) : -1;
        if (id < 0 || !kernel_in(c, path, scope, id)) {
            err_set(err, "%s: field '%s.kernel': '%s' is not a kernel of path %s, layer kind %s "
                         "for model %s (engine/CALIBRATION.md lists them)",
                    label, at, ns ? ns : "(missing)", path_names[path], ks, c->m.name);
            goto out;
        }
        json_t *pts = json_object_get(e, "points");
        size_t np = json_is_array(pts) ? json_array_size(pts) : 0;
        if (np == 0 || np > 4096) {
            err_set(err, "%s: field '%s.points': must be an array of 1..4096 points", label, at);
            goto out;
        }
        double *buf = xmalloc(np * 3 * sizeof(double));
        size_t j;
        json_t *pt;
        json_array_foreach(pts, j, pt) {
            json_t *jb = json_object_get(pt, "batch"), *jc = json_object_get(pt, "context"),
                   *ju = json_object_get(pt, "us");
            double bb = json_is_number(jb) ? json_number_value(jb) : -1;
            double cc = jc == NULL ? 0 : json_is_number(jc) ? json_number_value(jc) : -1;
            double uu = json_is_number(ju) ? json_number_value(ju) : -1;
            if (!(bb >= 1 && bb <= 1e7) || !(cc >= 0 && cc <= 1e9) || !(uu >= 0 && uu <= 1e9)) {
                err_set(err, "%s: field '%s.points[%zu]': needs batch >= 1, context >= 0, us >= 0 "
                             "(numbers)", label, at, j);
                free(buf);
                goto out;
            }
            buf[j * 3] = cc;
            buf[j * 3 + 1] = bb;
            buf[j * 3 + 2] = uu;
        }
        qsort(buf, np, 3 * sizeof(double), cmp_pt);
        for (j = 1; j < np; j++)
            if (buf[j * 3] == buf[(j - 1) * 3] && buf[j * 3 + 1] == buf[(j - 1) * 3 + 1]) {
                err_set(err, "%s: field '%s.points': two points at batch %g, context %g",
                        label, at, buf[j * 3 + 1], buf[j * 3]);
                free(buf);
                goto out;
            }
        if (json_integer_value(etp) != c->tp) {
            free(buf); /* another tensor-parallel size: not this layout */
            continue;
        }
        struct cal_entry *ce = xcalloc(1, sizeof *ce);
        ce->n = (int)np;
        ce->batch = xmalloc(np * 3 * sizeof(double));
        ce->ctx = ce->batch + np;
        ce->us = ce->ctx + np;
        for (j = 0; j < np; j++) {
            ce->ctx[j] = buf[j * 3];
            ce->batch[j] = buf[j * 3 + 1];
            ce->us[j] = buf[j * 3 + 2];
        }
        free(buf);
        if (c->cal[path][scope][id]) {
            free(c->cal[path][scope][id]->batch);
            free(c->cal[path][scope][id]);
        } else {
            snprintf(c->cal_name_buf[c->n_cal], sizeof c->cal_name_buf[0], "%s/%s/%s",
                     path_names[path], scope == SCOPE_STEP ? "step" : layer_kind_name(scope),
                     kid_names[id]);
            c->cal_names[c->n_cal] = c->cal_name_buf[c->n_cal];
            c->n_cal++;
        }
        c->cal[path][scope][id] = ce;
    }
    rc = 0;
out:
    json_decref(root);
    if (rc)
        cal_free(c);
    return rc;
}

/* ---- creation ---- */

static int check_div(char *err, const char *model, int tp, int n, const char *what)
{
    if (n > 0 && n % tp != 0)
        return err_set(err, "tp %d does not divide the %d %s of %s", tp, n, what, model);
    return 0;
}

struct cost_model *cost_create(const struct model_preset *m,
                               const struct gpu_preset *g, int tp,
                               enum engine_backend backend,
                               const char *calibration_path, bool force,
                               char *err)
{
    if (tp < 1) {
        err_set(err, "tp %d must be at least 1", tp);
        return NULL;
    }
    if (check_div(err, m->name, tp, m->n_layers_kind[LAYER_KDA] ? m->kda_heads : 0, "KDA heads") ||
        check_div(err, m->name, tp, m->n_layers_kind[LAYER_MLA] || m->n_layers_kind[LAYER_GQA] ? m->n_heads : 0,
                  "attention heads") ||
        check_div(err, m->name, tp, m->dense_intermediate, "dense FFN columns") ||
        check_div(err, m->name, tp, m->n_experts ? m->expert_intermediate : 0, "expert FFN columns"))
        return NULL;
    struct cost_model *c = xcalloc(1, sizeof *c);
    c->m = *m;
    c->g = *g;
    c->tp = tp;
    for (int kc = 0; kc <= KC_COMM; kc++)
        c->bw_eff[kc] = c->g.hbm_bw * class_eff(&c->g, kc);
    c->backend = backend;
    c->floor_ns = g->kernel_floor_ns;
    c->overhead_ns = g->step_overhead_ns;
    c->spec_capable = m->specialized_path && strcmp(g->family, "blackwell") == 0 &&
                      (tp == 8 || tp == 16) && tp <= g->nvlink_domain;
    for (int i = 0; i < m->n_layers; i++)
        c->n_variant[m->layer_kind[i]][m->layer_moe[i] ? 1 : 0]++;
    if (calibration_path && *calibration_path) {
        size_t len;
        char *text = file_read(calibration_path, &len, err);
        if (!text) {
            free(c);
            return NULL;
        }
        int rc = cost_load_calibration_mem(c, text, len, calibration_path, force, err);
        free(text);
        if (rc) {
            free(c);
            return NULL;
        }
    }
    return c;
}

void cost_destroy(struct cost_model *c)
{
    if (!c)
        return;
    cal_free(c);
    free(c);
}

void cost_set_fit(struct cost_model *c, double floor_ns, double overhead_ns)
{
    c->floor_ns = floor_ns;
    c->overhead_ns = overhead_ns;
}

bool cost_specialized_applies(const struct cost_model *c, const struct cost_batch *b)
{
    return spec_applies(c, b);
}

/* ---- the fixed-batch decode measurement and the fit ---- */

int cost_decode_run(const struct cost_model *c, int batch, int64_t isl, int64_t osl,
                    int draft, double accept_len, struct cost_decode_run *out, char *err)
{
    memset(out, 0, sizeof *out);
    if (batch < 1)
        return err_set(err, "batch %d must be at least 1", batch);
    if (isl < 1)
        return err_set(err, "isl %lld must be at least 1", (long long)isl);
    if (osl < 2)
        return err_set(err, "osl %lld must be at least 2 (the decode phase starts after the first token)",
                       (long long)osl);
    if (draft < 0 || draft > 16)
        return err_set(err, "draft %d out of range (0..16)", draft);
    if (draft > 0 && (accept_len < 1 || accept_len > draft + 1))
        return err_set(err, "acceptance length %g outside 1..draft + 1 = %d", accept_len, draft + 1);
    struct cost_result r;
    struct cost_batch pb = {.n_prefill = batch, .prefill_tokens = (int64_t)batch * isl,
                            .prefill_attn = (int64_t)batch * (isl * (isl + 1) / 2),
                            .decode_positions = 1};
    cost_step(c, &pb, &r);
    out->prefill_s = r.step_ns / 1e9;
    int64_t remaining = osl - 1, generated = 1; /* per request */
    double carry = 0, total_ns = 0, layers_ns = 0, drafter_ns = 0, over_ns = 0;
    double kind_ns[LAYER_KIND_COUNT] = {0};
    int64_t kpl = 0;
    while (remaining > 0) {
        struct cost_batch b = {.n_decode = batch, .decode_positions = draft > 0 ? draft + 1 : 1,
                               .draft = draft,
                               .sum_ctx = (int64_t)batch * (isl + generated)};
        cost_step(c, &b, &r);
        int64_t emit = 1;
        if (draft > 0) {
            carry += accept_len;
            emit = (int64_t)floor(carry + 1e-9);
            carry -= (double)emit;
        }
        if (emit > remaining)
            emit = remaining;
        remaining -= emit;
        generated += emit;
        total_ns += r.step_ns;
        layers_ns += r.layers_ns;
        drafter_ns += r.drafter_ns;
        over_ns += r.overhead_ns;
        for (int k = 0; k < LAYER_KIND_COUNT; k++)
            kind_ns[k] += r.layer_ns[k];
        kpl += r.kernels_per_layer;
        out->steps++;
        out->fallback_steps += r.fallback;
    }
    double n = (double)out->steps;
    out->decode_s = total_ns / 1e9;
    out->decode_tok_s = (double)batch * (osl - 1) / out->decode_s;
    out->step_us = total_ns / n / 1e3;
    out->layer_us = layers_ns / n / c->m.n_layers / 1e3;
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        out->layer_us_kind[k] = kind_ns[k] / n / 1e3;
    out->drafter_us = drafter_ns / n / 1e3;
    out->overhead_us = over_ns / n / 1e3;
    out->kernels_per_layer = (int)llround((double)kpl / n);
    return 0;
}

/* Mean decode step (ns) of the calibration setup at a floor, overhead 0. */
static double fit_step(struct cost_model *c, double floor_ns)
{
    struct cost_decode_run r;
    char err[ERR_LEN];
    cost_set_fit(c, floor_ns, 0);
    if (cost_decode_run(c, 1, 1, 1000, 0, 0, &r, err))
        return NAN;
    return r.step_us * 1e3;
}

int cost_fit(const struct model_preset *m, const struct gpu_preset *g, int tp,
             double spec_tok_s, double auto_tok_s, double *floor_ns,
             double *overhead_ns, char *err)
{
    struct cost_model *cs = cost_create(m, g, tp, ENGINE_BACKEND_LATENCY_SPECIALIZED, NULL, false, err);
    struct cost_model *ca = cost_create(m, g, tp, ENGINE_BACKEND_AUTO, NULL, false, err);
    int rc = -1;
    if (!cs || !ca)
        goto out;
    /* Decode steps at batch 1 emit one token each: tok/s = 1 / step. */
    double want_s = 1e9 / spec_tok_s, want_a = 1e9 / auto_tok_s;
    double gap = want_a - want_s;
    /* The gap auto - specialized grows with the floor (more kernels on the
     * standard path); bisect for it, then the overhead closes the rest. */
    double lo = 0, hi = 100e3;
    double glo = fit_step(ca, lo) - fit_step(cs, lo);
    double ghi = fit_step(ca, hi) - fit_step(cs, hi);
    if (!(glo <= gap && gap <= ghi)) {
        err_set(err, "fit: the auto - specialized gap %.1f us is outside what a floor in "
                     "[0, 100] us gives (%.1f .. %.1f us)", gap / 1e3, glo / 1e3, ghi / 1e3);
        goto out;
    }
    for (int it = 0; it < 80; it++) {
        double mid = (lo + hi) / 2;
        double gm = fit_step(ca, mid) - fit_step(cs, mid);
        if (gm < gap)
            lo = mid;
        else
            hi = mid;
    }
    double f = (lo + hi) / 2;
    double o = want_s - fit_step(cs, f);
    if (o < 0) {
        err_set(err, "fit: floor %.3f us leaves a negative step overhead (%.1f us)", f / 1e3, o / 1e3);
        goto out;
    }
    *floor_ns = f;
    *overhead_ns = o;
    rc = 0;
out:
    cost_destroy(cs);
    cost_destroy(ca);
    return rc;
}
