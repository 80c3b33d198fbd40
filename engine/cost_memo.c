/* cost_memo.c: a memo of cost_step() over sum_ctx (cost.h): batches that
 * differ only in sum_ctx reprice only the kernels that read it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cost_internal.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

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
    double sum;              /* cost_list_sum() of them */
};

struct memo_entry {
    bool used;
    struct cost_batch key;   /* sum_ctx 0 */
    double floor_ns;         /* the fit it was priced with */
    struct shape s;
    int path;
    bool specialized, fallback;
    int nv;
    struct memo_var v[LAYER_KIND_COUNT * 2];
    double step_t, drafter;
};

/* The memo is a table of its own, not traces/base/hmap.h: its values are
 * whole entries (kernel lists, about 11 KB each), few shapes recur (492
 * fills, 4,142 hits in `bench_engine 600 16 64`), and a direct-mapped
 * slot that a new shape simply replaces needs no growth or removal. */
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
           memcmp(&a->comm_ns, &b->comm_ns, sizeof a->comm_ns) == 0 &&
           memcmp(&a->bw, &b->bw, sizeof a->bw) == 0 &&
           memcmp(&a->fixed_ns, &b->fixed_ns, sizeof a->fixed_ns) == 0;
}

static void memo_fill(const struct cost_model *c, const struct cost_batch *b,
                      struct memo_entry *e)
{
    e->used = true;
    e->key = *b;
    e->key.sum_ctx = 0;
    e->floor_ns = c->floor_ns;
    cost_make_shape(c, b, &e->s);
    e->path = cost_step_path(c, b);
    e->specialized = e->path == PATH_SPECIALIZED;
    e->fallback = c->backend == ENGINE_BACKEND_LATENCY_SPECIALIZED && !e->specialized;
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
            v->n_attn = cost_attn_kernels(c, e->path, kind, &e->s, v->k, 0);
            v->n = cost_ffn_kernels(c, e->path, moe, &e->s, v->k, v->n_attn);
            for (int i = 0; i < v->n; i++)
                v->t[i] = kern_ns_nocal(c, &v->k[i]);
            v->sum = cost_list_sum(c, v->k, v->t, v->n);
        }
    struct kern k[MAX_KERNELS];
    int n = cost_step_kernels(c, &e->s, k, 0);
    e->step_t = cost_list_ns_nocal(c, k, n);
    e->drafter = cost_drafter_ns(c, &e->s);
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
    out->specialized = e->specialized;
    out->fallback = e->fallback;
    /* cost_make_shape()'s sum_ctx; the rest of the shape does not read it. */
    e->s.sum_ctx = b->sum_ctx > 0 ? (double)b->sum_ctx : 0;
    double total = 0, kernels = 0;
    for (int i = 0; i < e->nv; i++) {
        struct memo_var *v = &e->v[i];
        if (!fresh && v->ctx) {
            struct kern a[MAX_KERNELS];
            int na = cost_attn_kernels(c, e->path, v->kind, &e->s, a, 0);
            ASSERT(na == v->n_attn);
            bool changed = false;
            for (int j = 0; j < na; j++)
                if (!kern_same(&a[j], &v->k[j])) {
                    v->k[j] = a[j];
                    v->t[j] = kern_ns_nocal(c, &a[j]);
                    changed = true;
                }
            if (changed)
                v->sum = cost_list_sum(c, v->k, v->t, v->n);
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
