/* cost_kernels.c: the kernel lists of each decode path per layer kind and
 * per step, with each kernel's bytes and FLOPs per GPU for a batch, and
 * the kernel names that calibration files use.
 *
 * Each path (standard `auto`, `latency_specialized`) is an explicit list
 * of kernels per layer kind (KDA, MLA, GQA attention; dense FFN or MoE
 * block), plus per-step kernels (embedding, final norm, LM head, logits
 * gather, sampler). Bytes and FLOPs follow the model shape at
 * tensor-parallel size tp and the batch (distinct experts touched, KV and
 * state actually read). Communication (TP all-reduce): latency(message)
 * + bytes / link, where the latency follows hardware.md's small-message
 * measurements (one-shot custom kernel or the library path). The
 * specialized path fuses the reduction into the output projection, runs
 * the shared experts on a side stream and prefetches the next layer's
 * first weights (flags the evaluation in cost.c applies).
 * engine/CALIBRATION.md lists every kernel name (the calibration-file
 * contract). */
#include <math.h>
#include <string.h>

#include "engine/cost_internal.h"
#include "traces/base/err.h"

const char *const cost_kid_names[K_COUNT] = {
#define X(id, name) name,
    KERNELS(X)
#undef X
};

double cost_rate_for_bits(const struct gpu_preset *g, double bits)
{
    if (bits <= 4.5 && g->flops_fp4 > 0)
        return g->flops_fp4;
    if (bits <= 8.5)
        return g->flops_fp8;
    return g->flops_bf16;
}

/* All-reduce of `bytes` over tp ranks: latency interpolated (log-linear in
 * message size) between the 16 KiB and 1 MiB measurements, plus the
 * transfer beyond 1 MiB at link bandwidth (2 (tp-1)/tp of the message). */
static double allreduce_impl_ns(const struct cost_model *c, double bytes, int impl)
{
    if (c->tp <= 1)
        return 0;
    double l16 = c->g.ar_library_ns, l1m = c->g.ar_library_1m_ns;
    if (impl == 0 || impl == 3) {
        l16 = c->g.ar_oneshot_ns;
        l1m = c->g.ar_oneshot_1m_ns;
    } else if (impl == 1) {
        l16 = c->g.ar_multimem_ns;
        l1m = c->g.ar_multimem_1m_ns;
    }
    const struct ar_table *t = impl <= 2 ? c->art[impl] : NULL;
    if (t) {
        /* Measured: log-linear between the points, flat below the first,
         * the transfer beyond the last at link bandwidth. */
        if (bytes <= t->bytes[0])
            return t->ns[0];
        int n = t->n;
        if (bytes >= t->bytes[n - 1])
            return t->ns[n - 1] + (bytes - t->bytes[n - 1]) * 2.0 * (c->tp - 1) / c->tp /
                                      c->g.link_bw * 1e9;
        int i = 1;
        while (t->bytes[i] < bytes)
            i++;
        double f = log(bytes / t->bytes[i - 1]) / log(t->bytes[i] / t->bytes[i - 1]);
        return t->ns[i - 1] + (t->ns[i] - t->ns[i - 1]) * f;
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

/* fused: the specialized path's own one-shot kernel (the preset's
 * two-point figures: the measured tables are the serving stack's
 * all-reduce, which that kernel replaces); else the standard path's
 * choice. */
double cost_allreduce_ns(const struct cost_model *c, double bytes, bool fused)
{
    return allreduce_impl_ns(c, bytes, fused ? 3 : (int)std_ar(c));
}

static double wbytes(double bits, int group)
{
    return bits / 8.0 + (group > 0 && bits < 8 ? 1.0 / group : 0.0);
}

/* The slot of a GEMM by its weights' precision. */
static int gemm_slot(double bits)
{
    return bits > 8.5 ? SLOT_GEMM16 : bits > 4.5 ? SLOT_GEMM8 : SLOT_GEMM4;
}

static int kern_slot(const struct cost_model *c, const struct kern *x, int kind)
{
    switch (x->klass) {
    case KC_STREAM: return SLOT_STREAM;
    case KC_GROUPED: return SLOT_GROUPED;
    case KC_ATTN:
        return kind == LAYER_MLA ? SLOT_ATTN_MLA : kind == LAYER_GQA ? SLOT_ATTN_GQA : SLOT_ATTN_KDA;
    case KC_GEMM: {
        bool shared = x->id == K_SHARED_GATE_UP || x->id == K_SHARED_DOWN ||
                      x->id == K_SHARED_GATE_UP_ACT;
        return gemm_slot(shared ? c->m.bits_shared : c->m.bits_trunk);
    }
    }
    return SLOT_ELEM;
}

void cost_kern_rates(const struct cost_model *c, int path, int kind, const struct shape *s,
                     struct kern *k, int from, int n)
{
    const double *bw = s->bw[path], *fx = s->fixed_ns[path], *ce = s->ceff[path];
    if (__builtin_expect(!c->kslot_ready, 0)) {
        for (int i = from; i < n; i++) {
            int slot = kern_slot(c, &k[i], kind);
            k[i].bw = bw[slot];
            k[i].ceff = ce[slot];
            k[i].fixed_ns = k[i].flags & KF_NOFLOOR ? 0 : fx[slot];
        }
        return;
    }
    const uint8_t *ks = c->kslot[path][kind];
    for (int i = from; i < n; i++) {
        int slot = ks[k[i].id];
        if (__builtin_expect(slot == KSLOT_NONE, 0)) /* a kernel the probes did not meet */
            slot = kern_slot(c, &k[i], kind);
        k[i].bw = bw[slot];
        k[i].ceff = ce[slot];
        k[i].fixed_ns = k[i].flags & KF_NOFLOOR ? 0 : fx[slot];
    }
}

void cost_kern_slots(struct cost_model *c)
{
    /* Probes: one and 64 tokens (the specialized path's small- and
     * large-batch projections); any other kernel is looked up when met. */
    struct cost_batch probe[2] = {{.n_decode = 1, .decode_positions = 1},
                                  {.n_decode = 64, .decode_positions = 1}};
    struct shape s;
    struct kern k[MAX_KERNELS];
    memset(c->kslot, KSLOT_NONE, sizeof c->kslot);
    for (int q = 0; q < 2; q++) {
        cost_make_shape(c, &probe[q], &s);
        for (int p = 0; p < PATH_COUNT; p++) {
            for (int kind = 0; kind < LAYER_KIND_COUNT; kind++) {
                int n = cost_attn_kernels(c, p, kind, &s, k, 0);
                for (int i = 0; i < n; i++)
                    c->kslot[p][kind][k[i].id] = (uint8_t)kern_slot(c, &k[i], kind);
            }
            for (int moe = 0; moe < 2; moe++) {
                int n = cost_ffn_kernels(c, p, moe, &s, k, 0);
                for (int i = 0; i < n; i++)
                    c->kslot[p][LAYER_KIND_COUNT][k[i].id] =
                        (uint8_t)kern_slot(c, &k[i], LAYER_KIND_COUNT);
            }
            int n = cost_step_kernels(c, &s, k, 0);
            for (int i = 0; i < n; i++)
                c->kslot[p][SCOPE_STEP][k[i].id] = (uint8_t)kern_slot(c, &k[i], SCOPE_STEP);
        }
    }
    c->kslot_ready = true;
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
                        const struct shape *s, struct kern *k, int n);
static int ffn_kernels(const struct cost_model *c, int path, bool moe,
                       const struct shape *s, struct kern *k, int n);

int cost_attn_kernels(const struct cost_model *c, int path, int kind,
                      const struct shape *s, struct kern *k, int n)
{
    int e = attn_kernels(c, path, kind, s, k, n);
    cost_kern_rates(c, path, kind, s, k, n, e);
    return e;
}

int cost_ffn_kernels(const struct cost_model *c, int path, bool moe,
                     const struct shape *s, struct kern *k, int n)
{
    int e = ffn_kernels(c, path, moe, s, k, n);
    cost_kern_rates(c, path, LAYER_KIND_COUNT, s, k, n, e);
    return e;
}

static int attn_kernels(const struct cost_model *c, int path, int kind,
                        const struct shape *s, struct kern *k, int n)
{
    const struct model_preset *m = &c->m;
    const struct gpu_preset *g = &c->g;
    double tp = c->tp, h = m->hidden, M = s->M;
    double bt = m->bits_trunk / 8, rt = cost_rate_for_bits(g, m->bits_trunk);
    double rbf = g->flops_bf16;
    double act = M * h * 2; /* one BF16 activation row set */
    bool specialized = path == PATH_SPECIALIZED;
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
        if (!specialized) {
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
            x->comm_ns = cost_allreduce_ns(c, ar_bytes, false);
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
            x->comm_ns = cost_allreduce_ns(c, ar_bytes, true);
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
        if (!specialized) {
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
            x->comm_ns = cost_allreduce_ns(c, ar_bytes, false);
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
            x->comm_ns = cost_allreduce_ns(c, ar_bytes, true);
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
        x->comm_ns = cost_allreduce_ns(c, ar_bytes, false);
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
    double bt = m->bits_trunk / 8, rt = cost_rate_for_bits(g, m->bits_trunk);
    double bs = m->bits_shared / 8, rs = cost_rate_for_bits(g, m->bits_shared);
    double be = wbytes(m->bits_expert, m->expert_group), re = cost_rate_for_bits(g, m->bits_expert);
    double rbf = g->flops_bf16;
    double act = M * h * 2, ar_bytes = M * h * 2;
    bool specialized = path == PATH_SPECIALIZED;
    struct kern *x;

    if (!moe) {
        double I = m->dense_intermediate / tp;
        double gu_w = 2 * h * I, d_w = I * h;
        if (!specialized) {
            push(k, &n, K_POST_ATTN_NORM, KC_ELEM, act * 3, 0, rbf);
            push(k, &n, K_FFN_GATE_UP, KC_GEMM, gu_w * bt + act + M * 2 * I * 2, 2 * M * gu_w, rt);
            push(k, &n, K_FFN_ACT, KC_ELEM, M * 3 * I * 2, 0, rbf);
            push(k, &n, K_FFN_DOWN, KC_GEMM, d_w * bt + M * I * 2 + act, 2 * M * d_w, rt);
            x = push(k, &n, K_FFN_ALLREDUCE, KC_COMM, 0, 0, rbf);
            x->comm_ns = cost_allreduce_ns(c, ar_bytes, false);
            x->flags = KF_NOFLOOR;
        } else {
            push(k, &n, K_FFN_GATE_UP_ACT, KC_STREAM, gu_w * bt + act + M * I * 2, 2 * M * gu_w, rt);
            x = push(k, &n, K_FFN_DOWN_AR, KC_STREAM, d_w * bt + M * I * 2 + act * 3, 2 * M * d_w, rt);
            x->comm_ns = cost_allreduce_ns(c, ar_bytes, true);
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
    if (!specialized) {
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
        x->comm_ns = cost_allreduce_ns(c, ar_bytes, false);
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
        x->comm_ns = cost_allreduce_ns(c, ar_bytes, true);
        x->flags = KF_PREFETCH;
    }
    return n;
}

int cost_step_kernels(const struct cost_model *c, const struct shape *s,
                      struct kern *k, int n)
{
    const struct model_preset *m = &c->m;
    const struct gpu_preset *g = &c->g;
    double tp = c->tp, h = m->hidden, M = s->M, V = m->vocab;
    double bt = m->bits_trunk / 8, rt = cost_rate_for_bits(g, m->bits_trunk);
    /* Logits are needed only for the positions that sample: decode
     * positions and the last token of each prefill chunk. */
    double L = s->n_dec * s->P + s->n_pre;
    int n0 = n;
    push(k, &n, K_EMBED, KC_ELEM, M * h * 2 * 2 + M * 8, 0, g->flops_bf16);
    push(k, &n, K_FINAL_NORM, KC_ELEM, L * h * 2 * 3, 0, g->flops_bf16);
    push(k, &n, K_LM_HEAD, KC_STREAM, V / tp * h * bt + L * h * 2 + L * V / tp * 4,
         2 * L * V / tp * h, rt);
    struct kern *x = push(k, &n, K_LOGITS_GATHER, KC_COMM, 0, 0, g->flops_bf16);
    x->comm_ns = cost_allreduce_ns(c, L * V / tp * 4, false);
    x->flags = KF_NOFLOOR;
    push(k, &n, K_SAMPLER, KC_ELEM, L * V * 4 * 2, 0, g->flops_bf16);
    cost_kern_rates(c, PATH_STANDARD, SCOPE_STEP, s, k, n0, n);
    return n;
}

/* ---- kernel name tables (for the doc, calibration checks and tests) ---- */

int cost_kernel_names(const struct cost_model *c, int path, int scope, bool moe,
                      int batch, const char **names, int cap)
{
    if (path < 0 || path >= PATH_COUNT || scope < 0 || scope > SCOPE_STEP)
        return 0;
    struct cost_batch b = {.n_decode = batch > 0 ? batch : 1, .decode_positions = 1};
    struct shape s;
    cost_make_shape(c, &b, &s);
    struct kern k[MAX_KERNELS];
    int n = scope == SCOPE_STEP ? cost_step_kernels(c, &s, k, 0)
                                : cost_layer_list(c, path, scope, moe, &s, k);
    for (int i = 0; i < n && i < cap; i++)
        names[i] = cost_kid_names[k[i].id];
    return n;
}
