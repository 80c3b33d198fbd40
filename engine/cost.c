/* cost.c: the step cost model (cost.h): a step's time from the kernel
 * lists of its decode path (cost_kernels.c), measured times where a
 * calibration file gives them (cost_calib.c), the drafter and the
 * per-step overhead; breakdowns; creation; the fixed-batch decode
 * measurement and the fit of the kernel floor and step overhead.
 *
 * Each kernel costs
 *     t = max(bytes / (hbm_bw * eff[class]), flops / (rate * ceff))
 *         + floor + communication
 * (eff and ceff: the preset's measured tables at the step's key where it
 * has them, else the flat efficiencies)
 * and a layer the sum of its kernels, except where the specialized path
 * overlaps them: its shared experts run on a side stream beside the
 * routed chain (the overlapped region costs the longer chain or the
 * combined bytes at stream bandwidth, whichever is larger), and the next
 * layer's first weights load while the MoE reduction runs (a prefetch
 * credit). Every number (bandwidths, efficiencies, latencies, the fitted
 * floor and step overhead) comes from the presets; engine/CALIBRATION.md
 * explains them. */
#include "engine/cost_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/mem.h"

/* Achieved fraction of HBM bandwidth for a kernel class. */
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

/* ---- a step's time ---- */

static double kern_ns(const struct cost_model *c, int path, int scope,
                      const struct kern *x, const struct shape *s, bool *calibrated)
{
    const struct cal_entry *e = c->cal[path][scope][x->id];
    if (e) {
        if (calibrated)
            *calibrated = true;
        double ctx = s->n_dec > 0 ? s->sum_ctx / s->n_dec : 0;
        return cost_cal_lookup_us(e, s->M, ctx) * 1e3;
    }
    if (calibrated)
        *calibrated = false;
    return kern_ns_nocal(c, x);
}

/* Memory time of a kernel (for the prefetch credit). */
static double kern_mem_ns(const struct cost_model *c, const struct kern *x)
{
    (void)c;
    if (x->klass == KC_COMM)
        return 0;
    return x->bytes / x->bw * 1e9;
}

/* list_ns() without calibration or per-kernel outputs (cost_step's case
 * on an uncalibrated model; about half the instructions): the same sums
 * in the same order, from the kernels' times tk[]. */
double cost_list_sum(const struct cost_model *c, const struct kern *k, const double *tk, int n)
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

double cost_list_ns_nocal(const struct cost_model *c, const struct kern *k, int n)
{
    double tk[MAX_KERNELS];
    for (int i = 0; i < n; i++)
        tk[i] = kern_ns_nocal(c, &k[i]);
    return cost_list_sum(c, k, tk, n);
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

void cost_make_shape(const struct cost_model *c, const struct cost_batch *b,
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
    memcpy(s->bw, c->flat_bw, sizeof s->bw);
    double extra[PATH_COUNT][N_SLOTS];
    memcpy(extra, c->flat_extra_ns, sizeof extra);
    /* The kernel tables at this step's keys: tokens through the layer, or
     * decoding sequences (at least 1); MLA verification where a sequence
     * carries several positions. */
    double key[2] = {s->M > 1 ? s->M : 1, s->n_dec >= 1 ? s->n_dec : s->n_seq >= 1 ? s->n_seq : 1};
    for (int p = 0; c->any_table && p < PATH_COUNT; p++)
        for (int k = 0; k < N_SLOTS; k++) {
            const struct kt_table *t = c->tab[p][k];
            if (k == SLOT_ATTN_MLA && s->P > 1 && c->tab_mla_verify[p])
                t = c->tab_mla_verify[p];
            if (!t || t->key == KT_KEY_SHARD_MB)
                continue;
            double eff;
            kt_lookup(t, key[t->key == KT_KEY_SEQS], &eff, &extra[p][k]);
            s->bw[p][k] = c->g.hbm_bw * eff;
        }
    /* FLOP efficiency: the slot's FLOP table at the step's tokens. */
    for (int p = 0; p < PATH_COUNT; p++)
        for (int k = 0; k < N_SLOTS; k++) {
            s->ceff[p][k] = c->g.eff_compute;
            if (c->ctab[p][k]) {
                double x;
                kt_lookup(c->ctab[p][k], key[0], &s->ceff[p][k], &x);
            }
        }
    /* A kernel with a floor pays floor + extra, never below 0. */
    for (int p = 0; p < PATH_COUNT; p++)
        for (int k = 0; k < N_SLOTS; k++) {
            double f = c->floor_ns + extra[p][k];
            s->fixed_ns[p][k] = f > 0 ? f : 0;
        }
}

bool cost_specialized_applies(const struct cost_model *c, const struct cost_batch *b)
{
    if (!c->has_specialized)
        return false;
    if (b->n_prefill > 0 || b->prefill_tokens > 0 || b->n_decode < 1 || b->n_decode > 64)
        return false;
    if (b->draft > 0)
        return b->draft >= 3 && b->draft <= 7;
    return b->decode_positions <= 1;
}

/* The path that prices b: the specialized one where the backend asks for
 * it and it applies, else the standard one. */
int cost_step_path(const struct cost_model *c, const struct cost_batch *b)
{
    return c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && cost_specialized_applies(c, b)
               ? PATH_SPECIALIZED : PATH_STANDARD;
}

/* The drafter: one pass per step proposing `draft` tokens for each
 * decoding sequence (a parallel block drafter), as a dense model on the
 * standard kernels: per layer 13 kernels with a floor and 2 reductions,
 * its weights streamed once at generic-GEMM efficiency. */
#define DRAFTER_KERNELS_PER_LAYER 13
double cost_drafter_ns(const struct cost_model *c, const struct shape *s)
{
    const struct model_preset *m = &c->m;
    if (s->draft <= 0 || m->drafter_params <= 0 || s->n_dec <= 0)
        return 0;
    const struct cal_entry *e = c->cal[PATH_STANDARD][SCOPE_STEP][K_DRAFTER];
    double M = s->n_dec * s->draft;
    if (e)
        return cost_cal_lookup_us(e, M, s->n_dec > 0 ? s->sum_ctx / s->n_dec : 0) * 1e3;
    double bytes = m->drafter_params * m->drafter_bits / 8 / c->tp;
    double flops = 2 * m->drafter_params * M / c->tp;
    /* Its GEMMs at the standard path's efficiencies for its precision. */
    int slot = m->drafter_bits > 8.5 ? SLOT_GEMM16 : m->drafter_bits > 4.5 ? SLOT_GEMM8 : SLOT_GEMM4;
    double tb = bytes / s->bw[PATH_STANDARD][slot] * 1e9;
    double ceff = c->g.eff_compute, x;
    if (c->ctab[PATH_STANDARD][slot]) /* its own tokens, not the step's */
        kt_lookup(c->ctab[PATH_STANDARD][slot], M, &ceff, &x);
    double tf = flops / (cost_rate_for_bits(&c->g, m->drafter_bits) * ceff) * 1e9;
    double per_layer = DRAFTER_KERNELS_PER_LAYER * c->floor_ns +
                       2 * cost_allreduce_ns(c, M * m->hidden * 2, false);
    return (tb > tf ? tb : tf) + m->drafter_layers * per_layer;
}

void cost_step(const struct cost_model *c, const struct cost_batch *b,
               struct cost_result *out)
{
    memset(out, 0, sizeof *out);
    struct shape s;
    cost_make_shape(c, b, &s);
    int path = cost_step_path(c, b);
    out->specialized = path == PATH_SPECIALIZED;
    out->fallback = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && !out->specialized;
    struct kern k[MAX_KERNELS];
    double total = 0, kernels = 0;
    for (int kind = 0; kind < LAYER_KIND_COUNT; kind++)
        for (int moe = 0; moe < 2; moe++) {
            int cnt = c->n_variant[kind][moe];
            if (!cnt)
                continue;
            int n = cost_layer_list(c, path, kind, moe, &s, k);
            double t = c->n_cal ? list_ns(c, path, kind, k, n, &s, NULL, NULL)
                                : cost_list_ns_nocal(c, k, n);
            total += cnt * t;
            kernels += (double)cnt * n;
            bool typical = c->n_variant[kind][moe] >= c->n_variant[kind][!moe];
            if (typical)
                out->layer_ns[kind] = (int64_t)llround(t);
        }
    out->layers_ns = (int64_t)llround(total);
    int n = cost_step_kernels(c, &s, k, 0);
    total += c->n_cal ? list_ns(c, path, SCOPE_STEP, k, n, &s, NULL, NULL)
                      : cost_list_ns_nocal(c, k, n);
    double d = cost_drafter_ns(c, &s);
    out->drafter_ns = (int64_t)llround(d);
    out->overhead_ns = (int64_t)llround(c->overhead_ns);
    out->kernels_per_layer = (int)llround(kernels / c->m.n_layers);
    out->step_ns = (int64_t)llround(total + d + c->overhead_ns);
}

double cost_step_bytes(const struct cost_model *c, const struct cost_batch *b)
{
    struct shape s;
    cost_make_shape(c, b, &s);
    int path = cost_step_path(c, b);
    struct kern k[MAX_KERNELS];
    double total = 0;
    for (int kind = 0; kind < LAYER_KIND_COUNT; kind++)
        for (int moe = 0; moe < 2; moe++) {
            if (!c->n_variant[kind][moe])
                continue;
            int n = cost_layer_list(c, path, kind, moe, &s, k);
            for (int i = 0; i < n; i++)
                total += c->n_variant[kind][moe] * k[i].bytes;
        }
    int n = cost_step_kernels(c, &s, k, 0);
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
    cost_make_shape(c, b, &s);
    int path = cost_step_path(c, b);
    struct kern k[MAX_KERNELS];
    double per[MAX_KERNELS];
    bool cal[MAX_KERNELS];
    int w = 0;
    for (int kind = 0; kind <= LAYER_KIND_COUNT; kind++) {
        int n;
        if (kind == LAYER_KIND_COUNT) {
            n = cost_step_kernels(c, &s, k, 0);
        } else {
            int moe = c->n_variant[kind][1] >= c->n_variant[kind][0];
            if (!c->n_variant[kind][moe])
                continue;
            n = cost_layer_list(c, path, kind, moe, &s, k);
        }
        list_ns(c, path, kind, k, n, &s, per, cal);
        for (int i = 0; i < n && w < cap; i++) {
            out[w].name = cost_kid_names[k[i].id];
            out[w].layer_kind = kind;
            out[w].ns = (int64_t)llround(per[i]);
            out[w].calibrated = cal[i];
            w++;
        }
    }
    double d = cost_drafter_ns(c, &s);
    if (d > 0 && w < cap) {
        out[w].name = cost_kid_names[K_DRAFTER];
        out[w].layer_kind = LAYER_KIND_COUNT;
        out[w].ns = (int64_t)llround(d);
        out[w].calibrated = c->cal[PATH_STANDARD][SCOPE_STEP][K_DRAFTER] != NULL;
        w++;
    }
    return w;
}

/* ---- creation ---- */

/* The table behind each slot (the most specific class the preset has),
 * the flat bandwidths, the grouped slot at this model's expert shard, and
 * the measured all-reduce tables at this tp. */
static void cost_resolve_tables(struct cost_model *c)
{
    const struct gpu_preset *g = &c->g;
    static const int chain[N_SLOTS][3] = {
        [SLOT_STREAM] = {KT_STREAM, -1, -1},
        [SLOT_GEMM16] = {KT_GEMM_BF16, KT_GEMM, -1},
        [SLOT_GEMM8] = {KT_GEMM_FP8, KT_GEMM, -1},
        [SLOT_GEMM4] = {KT_GEMM, -1, -1},
        [SLOT_GROUPED] = {KT_GROUPED, -1, -1},
        [SLOT_ATTN_KDA] = {KT_ATTENTION, -1, -1},
        [SLOT_ATTN_MLA] = {KT_ATTENTION_MLA, KT_ATTENTION, -1},
        [SLOT_ATTN_GQA] = {KT_ATTENTION_GQA, KT_ATTENTION, -1},
        [SLOT_ELEM] = {KT_ELEMENTWISE, -1, -1},
    };
    static const int klass[N_SLOTS] = {
        [SLOT_STREAM] = KC_STREAM, [SLOT_GEMM16] = KC_GEMM, [SLOT_GEMM8] = KC_GEMM,
        [SLOT_GEMM4] = KC_GEMM, [SLOT_GROUPED] = KC_GROUPED, [SLOT_ATTN_KDA] = KC_ATTN,
        [SLOT_ATTN_MLA] = KC_ATTN, [SLOT_ATTN_GQA] = KC_ATTN, [SLOT_ELEM] = KC_ELEM,
    };
    const struct model_preset *m = &c->m;
    double shard_mb = 0;
    if (m->n_experts > 0) {
        double w = m->expert_latent > 0 ? m->expert_latent : m->hidden;
        double be = m->bits_expert / 8.0 +
                    (m->expert_group > 0 && m->bits_expert < 8 ? 1.0 / m->expert_group : 0.0);
        shard_mb = 3 * w * (double)m->expert_intermediate / c->tp * be / 1e6;
    }
    c->any_table = false;
    for (int p = 0; p < PATH_COUNT; p++) {
        for (int k = 0; k < N_SLOTS; k++) {
            const struct kt_table *t = NULL;
            for (int j = 0; j < 3 && !t && chain[k][j] >= 0; j++)
                if (g->kt[p][chain[k][j]].n > 0)
                    t = &g->kt[p][chain[k][j]];
            c->flat_bw[p][k] = g->hbm_bw * class_eff(g, klass[k]);
            c->flat_extra_ns[p][k] = 0;
            c->tab[p][k] = NULL;
            if (t && t->key == KT_KEY_SHARD_MB) {
                double eff, extra;
                kt_lookup(t, shard_mb, &eff, &extra);
                c->flat_bw[p][k] = g->hbm_bw * eff;
                c->flat_extra_ns[p][k] = extra;
            } else if (t) {
                c->tab[p][k] = t;
                c->any_table = true;
            }
        }
        /* FLOP tables: GEMMs by precision; the routed experts at the
         * measured shard nearest (in log) to the model's. */
        for (int k = 0; k < N_SLOTS; k++)
            c->ctab[p][k] = NULL;
        if (g->kt[p][KT_GEMM_BF16_FLOPS].n > 0)
            c->ctab[p][SLOT_GEMM16] = &g->kt[p][KT_GEMM_BF16_FLOPS];
        if (g->kt[p][KT_GEMM_FP8_FLOPS].n > 0)
            c->ctab[p][SLOT_GEMM8] = &g->kt[p][KT_GEMM_FP8_FLOPS];
        if (g->n_gflops[p] > 0 && shard_mb > 0) {
            int best = 0;
            for (int i = 1; i < g->n_gflops[p]; i++)
                if (fabs(log(g->kt_gflops_mb[p][i] / shard_mb)) <
                    fabs(log(g->kt_gflops_mb[p][best] / shard_mb)))
                    best = i;
            c->ctab[p][SLOT_GROUPED] = &g->kt_gflops[p][best];
        }
        for (int k = 0; k < N_SLOTS; k++)
            c->any_table |= c->ctab[p][k] != NULL;
        const struct kt_table *v = &g->kt[p][KT_ATTENTION_MLA_VERIFY];
        c->tab_mla_verify[p] = v->n > 0 && v->key != KT_KEY_SHARD_MB ? v : NULL;
        c->any_table |= c->tab_mla_verify[p] != NULL;
    }
    for (int i = 0; i < 3; i++)
        c->art[i] = NULL;
    for (int kind = 0; kind < AR_TABLE_KINDS; kind++)
        for (int i = 0; i < g->n_ar[kind]; i++)
            if (g->ar[kind][i].ranks == c->tp && g->ar[kind][i].n > 0)
                c->art[kind == AR_TABLE_ONESHOT ? 0 : 2] = &g->ar[kind][i];
}

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
    cost_resolve_tables(c);
    c->backend = backend;
    c->floor_ns = g->kernel_floor_ns;
    c->overhead_ns = g->step_overhead_ns;
    c->has_specialized = m->specialized_path && strcmp(g->family, "blackwell") == 0 &&
                      (tp == 8 || tp == 16) && tp <= g->nvlink_domain;
    for (int i = 0; i < m->n_layers; i++)
        c->n_variant[m->layer_kind[i]][m->layer_moe[i] ? 1 : 0]++;
    cost_kern_slots(c);
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
    cost_cal_free(c);
    free(c);
}

void cost_set_fit(struct cost_model *c, double floor_ns, double overhead_ns)
{
    c->floor_ns = floor_ns;
    c->overhead_ns = overhead_ns;
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
             double specialized_tok_s, double auto_tok_s, double *floor_ns,
             double *overhead_ns, char *err)
{
    struct cost_model *c_specialized =
        cost_create(m, g, tp, ENGINE_BACKEND_LATENCY_SPECIALIZED, NULL, false, err);
    struct cost_model *c_auto = cost_create(m, g, tp, ENGINE_BACKEND_AUTO, NULL, false, err);
    int rc = -1;
    if (!c_specialized || !c_auto)
        goto out;
    /* Decode steps at batch 1 emit one token each: tok/s = 1 / step. */
    double want_specialized = 1e9 / specialized_tok_s, want_auto = 1e9 / auto_tok_s;
    double gap = want_auto - want_specialized;
    /* The gap auto - specialized grows with the floor (more kernels on the
     * standard path); bisect for it, then the overhead closes the rest. */
    double lo = 0, hi = 100e3;
    double glo = fit_step(c_auto, lo) - fit_step(c_specialized, lo);
    double ghi = fit_step(c_auto, hi) - fit_step(c_specialized, hi);
    if (!(glo <= gap && gap <= ghi)) {
        err_set(err, "fit: the auto - specialized gap %.1f us is outside what a floor in "
                     "[0, 100] us gives (%.1f .. %.1f us)", gap / 1e3, glo / 1e3, ghi / 1e3);
        goto out;
    }
    for (int it = 0; it < 80; it++) {
        double mid = (lo + hi) / 2;
        double gm = fit_step(c_auto, mid) - fit_step(c_specialized, mid);
        if (gm < gap)
            lo = mid;
        else
            hi = mid;
    }
    double f = (lo + hi) / 2;
    double o = want_specialized - fit_step(c_specialized, f);
    if (o < 0) {
        err_set(err, "fit: floor %.3f us leaves a negative step overhead (%.1f us)", f / 1e3, o / 1e3);
        goto out;
    }
    *floor_ns = f;
    *overhead_ns = o;
    rc = 0;
out:
    cost_destroy(c_specialized);
    cost_destroy(c_auto);
    return rc;
}
