/* plan_chains.c: agent-chain detection over the block ids of one request
 * list, as AIPerf 0.13.0 splits flattened agents (plan_internal.h):
 * the preamble rule (aiperf/dataset/loader/weka_trace.py:654-700), the
 * greedy forward pass and the seam splicing
 * (aiperf/dataset/loader/weka_agent_chains.py:343-461, 464-504, 571-740),
 * and the classification of worker chains as aux, reduction or
 * worker-group members (weka_agent_chains.py:128-312).
 */
#define _GNU_SOURCE /* qsort_r */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/hmap.h"
#include "traces/base/mem.h"

#include <stdlib.h>
#include <string.h>

/* ---- preamble ---------------------------------------------------------- */

uint32_t pc_preamble(const struct pb_req *r, uint32_t n)
{
    if (n < 2)
        return PLAN_NONE;
    uint32_t f = 0;
    for (uint32_t i = 1; i < n; i++)
        if (pc_cmp_tk(&r[i], &r[f]) < 0)
            f = i;
    const struct pb_req *q = &r[f];
    if (!q->nh)
        return PLAN_NONE;
    for (uint32_t i = 0; i < n; i++)
        if (i != f && r[i].nh && pc_lcp(q->h, q->nh, r[i].h, r[i].nh) > 0)
            return PLAN_NONE;
    /* A large leader stays unless none of its blocks is reused anywhere
     * (weka_trace.py:689-694: output > 64 tokens). */
    if (q->out > 64) {
        struct hmap seen;
        hmap_init(&seen);
        bool added, reused = false;
        for (uint32_t b = 0; b < q->nh; b++)
            hmap_put(&seen, q->h[b], &added);
        for (uint32_t i = 0; i < n && !reused; i++)
            for (uint32_t a = 0; i != f && a < r[i].nh && !reused; a++)
                reused = hmap_get(&seen, r[i].h[a]) != NULL;
        hmap_free(&seen);
        if (reused)
            return PLAN_NONE;
    }
    return f;
}

/* ---- phase 1: the greedy forward pass ---------------------------------- */

struct det {
    const struct pb_req *r;
    uint32_t n;
    struct pc_chain *c;
    uint32_t nc, capc;
    uint32_t *tail;         /* per chain: last hash-bearing request or NONE */
    uint32_t *chain_of;     /* per request: its chain */
    /* forks registered on a tail request: per request a list of chains */
    uint32_t **forks, *n_forks, *cap_forks;
};

static void chain_push(struct pc_chain *ch, uint32_t req)
{
    if (ch->n == ch->cap) {
        ch->cap = ch->cap ? 2 * ch->cap : 8;
        ch->reqs = xrealloc(ch->reqs, ch->cap * sizeof *ch->reqs);
    }
    ch->reqs[ch->n++] = req;
}

static uint32_t new_chain(struct det *d)
{
    if (d->nc == d->capc) {
        d->capc = d->capc ? 2 * d->capc : 8;
        d->c = xrealloc(d->c, d->capc * sizeof *d->c);
        d->tail = xrealloc(d->tail, d->capc * sizeof *d->tail);
    }
    uint32_t i = d->nc++;
    memset(&d->c[i], 0, sizeof d->c[i]);
    d->c[i].parent = d->c[i].fork_req = d->c[i].spliced = PLAN_NONE;
    d->tail[i] = PLAN_NONE;
    return i;
}

static void append(struct det *d, uint32_t ci, uint32_t req)
{
    chain_push(&d->c[ci], req);
    d->chain_of[req] = ci;
    if (d->r[req].nh)
        d->tail[ci] = req;
}

static void fork_add(struct det *d, uint32_t tail_req, uint32_t ci)
{
    if (d->n_forks[tail_req] == d->cap_forks[tail_req]) {
        d->cap_forks[tail_req] = d->cap_forks[tail_req] ? 2 * d->cap_forks[tail_req] : 4;
        d->forks[tail_req] =
            xrealloc(d->forks[tail_req], d->cap_forks[tail_req] * sizeof **d->forks);
    }
    d->forks[tail_req][d->n_forks[tail_req]++] = ci;
}

/* The chain whose tail is a complete prefix of q's ids, has ended by q's
 * start and ran on q's model; deepest wins, then the lowest index
 * (_find_extension_target). */
static uint32_t extension_target(const struct det *d, const struct pb_req *q)
{
    uint32_t best = PLAN_NONE, best_len = 0;
    for (uint32_t i = 0; i < d->nc; i++) {
        if (d->tail[i] == PLAN_NONE)
            continue;
        const struct pb_req *tl = &d->r[d->tail[i]];
        if (tl->nh > q->nh || (best != PLAN_NONE && tl->nh <= best_len))
            continue;
        if (tl->model != q->model || tl->end > q->t + PLAN_EPS_S)
            continue;
        if (tl->h[tl->nh - 1] != q->h[tl->nh - 1] || memcmp(tl->h, q->h, tl->nh * sizeof *q->h))
            continue;
        best = i;
        best_len = tl->nh;
    }
    return best;
}

/* The tail with the deepest common prefix with q (ties: the longer tail,
 * then the lowest index); *depth 0 and PLAN_NONE when none shares one
 * (_max_lcp_chain). */
static uint32_t max_lcp_chain(const struct det *d, const struct pb_req *q, uint32_t *depth)
{
    uint32_t best = PLAN_NONE, bd = 0, bl = 0;
    for (uint32_t i = 0; i < d->nc; i++) {
        if (d->tail[i] == PLAN_NONE)
            continue;
        const struct pb_req *tl = &d->r[d->tail[i]];
        uint32_t x = pc_lcp(tl->h, tl->nh, q->h, q->nh);
        if (!x)
            continue;
        if (x > bd || (x == bd && tl->nh > bl)) {
            best = i;
            bd = x;
            bl = tl->nh;
        }
    }
    *depth = bd;
    return best;
}

static void classify(struct det *d, uint32_t req)
{
    const struct pb_req *q = &d->r[req];
    if (!q->nh) { /* no evidence: rides chain 0, invisible to tails */
        if (!d->nc)
            new_chain(d);
        chain_push(&d->c[0], req);
        d->chain_of[req] = 0;
        return;
    }
    if (!d->nc) {
        append(d, new_chain(d), req);
        return;
    }
    uint32_t tgt = extension_target(d, q);
    if (tgt != PLAN_NONE) {
        append(d, tgt, req);
        return;
    }
    uint32_t depth, parent = max_lcp_chain(d, q, &depth);
    if (parent == PLAN_NONE) {
        bool any_tail = false;
        for (uint32_t i = 0; i < d->nc && !any_tail; i++)
            any_tail = d->tail[i] != PLAN_NONE;
        if (!any_tail) { /* the first hash-bearing request joins chain 0 */
            append(d, 0, req);
            return;
        }
    }
    uint32_t fork_req = parent != PLAN_NONE ? d->tail[parent] : PLAN_NONE;
    uint32_t ci = new_chain(d);
    struct pc_chain *ch = &d->c[ci];
    ch->fork = true;
    ch->parent = parent;
    ch->fork_req = fork_req;
    ch->depth = parent != PLAN_NONE ? depth : 0;
    ch->fork_time = q->t;
    append(d, ci, req);
    if (fork_req != PLAN_NONE && ch->depth > 0)
        fork_add(d, fork_req, ci);
}

/* ---- phase 2: seams ---------------------------------------------------- */

static uint32_t resolve(const struct det *d, uint32_t ci)
{
    while (d->c[ci].spliced != PLAN_NONE)
        ci = d->c[ci].spliced;
    return ci;
}

static uint32_t last_hash_req(const struct det *d, uint32_t ci)
{
    const struct pc_chain *ch = &d->c[ci];
    for (uint32_t k = ch->n; k-- > 0;)
        if (d->r[ch->reqs[k]].nh)
            return ch->reqs[k];
    return PLAN_NONE;
}

/* Among the live forks registered on tail request f, the continuation:
 * positive depth, starts after f ended, same model, not a long-gap
 * low-overlap resume; deepest, then earliest fork, then lowest index
 * (_elect_continuation). */
static uint32_t elect(const struct det *d, const uint32_t *reg, uint32_t nreg, uint32_t f,
                      const struct plan_opts *o)
{
    const struct pb_req *tq = &d->r[f];
    uint32_t best = PLAN_NONE;
    for (uint32_t k = 0; k < nreg; k++) {
        const struct pc_chain *ch = &d->c[reg[k]];
        if (!ch->fork || ch->depth == 0)
            continue;
        const struct pb_req *first = &d->r[ch->reqs[0]];
        if (!(tq->end <= first->t + PLAN_EPS_S) || first->model != tq->model)
            continue;
        if (tq->nh > 0 && first->t - tq->end > o->seam_max_gap_s &&
            (double)ch->depth / (double)tq->nh < o->seam_min_overlap_ratio)
            continue;
        if (best == PLAN_NONE) {
            best = reg[k];
            continue;
        }
        const struct pc_chain *b = &d->c[best];
        if (ch->depth > b->depth ||
            (ch->depth == b->depth &&
             (ch->fork_time < b->fork_time || (ch->fork_time == b->fork_time && reg[k] < best))))
            best = reg[k];
    }
    return best;
}

/* A binary min-heap of request indices (their key order is index order). */
struct heap {
    uint32_t *a, n, cap;
};

static void heap_push(struct heap *h, uint32_t v)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 16;
        h->a = xrealloc(h->a, h->cap * sizeof *h->a);
    }
    uint32_t i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2] > v) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = v;
}

static uint32_t heap_pop(struct heap *h)
{
    uint32_t top = h->a[0], v = h->a[--h->n], i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->a[c + 1] < h->a[c])
            c++;
        if (h->a[c] >= v)
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = v;
    return top;
}

static void resolve_seams(struct det *d, const struct plan_opts *o)
{
    struct heap h = {0};
    bool *done = xcalloc(d->n ? d->n : 1, sizeof *done);
    for (uint32_t i = 0; i < d->n; i++)
        if (d->n_forks[i])
            heap_push(&h, i);
    uint32_t *reg = NULL, cap_reg = 0;
    while (h.n) {
        uint32_t f = heap_pop(&h);
        if (done[f])
            continue;
        done[f] = true;
        uint32_t owner = resolve(d, d->chain_of[f]);
        if (last_hash_req(d, owner) != f)
            continue; /* the longer state was extended: all forks spawn */
        /* The list may grow while we work (re-keys), so copy it. */
        uint32_t nreg = 0;
        if (d->n_forks[f] > cap_reg) {
            cap_reg = d->n_forks[f];
            reg = xrealloc(reg, cap_reg * sizeof *reg);
        }
        for (uint32_t k = 0; k < d->n_forks[f]; k++)
            if (d->c[d->forks[f][k]].spliced == PLAN_NONE)
                reg[nreg++] = d->forks[f][k];
        uint32_t el = elect(d, reg, nreg, f, o);
        if (el == PLAN_NONE)
            continue;
        struct pc_chain *tg = &d->c[el];
        for (uint32_t k = 0; k < tg->n; k++) {
            chain_push(&d->c[owner], tg->reqs[k]);
            d->chain_of[tg->reqs[k]] = owner;
        }
        d->c[el].spliced = owner;
        uint32_t nt = last_hash_req(d, owner);
        if (nt == PLAN_NONE)
            continue;
        /* Re-key the other forks of f against the merged chain's new tail
         * (_rekey_leftover_forks). */
        bool rekeyed = false;
        const struct pb_req *ntq = &d->r[nt];
        for (uint32_t k = 0; k < nreg; k++) {
            struct pc_chain *ch = &d->c[reg[k]];
            if (reg[k] == el || ch->spliced != PLAN_NONE || !ch->fork)
                continue;
            const struct pb_req *first = &d->r[ch->reqs[0]];
            uint32_t x = pc_lcp(ntq->h, ntq->nh, first->h, first->nh);
            if (!x)
                continue;
            ch->fork_req = nt;
            ch->depth = x;
            ch->parent = owner;
            fork_add(d, nt, reg[k]);
            rekeyed = true;
        }
        if (rekeyed) {
            done[nt] = false;
            heap_push(&h, nt);
        }
    }
    free(reg);
    free(h.a);
    free(done);
}

/* ---- detection --------------------------------------------------------- */

static int cmp_idx_tk(const void *a, const void *b, void *ctx)
{
    const struct pb_req *r = ctx;
    return pc_cmp_tk(&r[*(const uint32_t *)a], &r[*(const uint32_t *)b]);
}

void pc_detect(const struct pb_req *r, uint32_t n, const struct plan_opts *o,
               struct pc_result *res)
{
    ASSERT(n >= 1);
    struct det d = {.r = r, .n = n};
    d.chain_of = xmalloc(n * sizeof *d.chain_of);
    d.forks = xcalloc(n, sizeof *d.forks);
    d.n_forks = xcalloc(n, sizeof *d.n_forks);
    d.cap_forks = xcalloc(n, sizeof *d.cap_forks);
    uint32_t *ord = xmalloc(n * sizeof *ord);
    for (uint32_t i = 0; i < n; i++)
        ord[i] = i;
    qsort_r(ord, n, sizeof *ord, cmp_idx_tk, (void *)r); /* keys differ: a total order */
    for (uint32_t i = 0; i < n; i++)
        classify(&d, ord[i]);
    resolve_seams(&d, o);
    /* Fork parents through the splices. */
    for (uint32_t i = 0; i < d.nc; i++)
        if (d.c[i].spliced == PLAN_NONE && d.c[i].fork && d.c[i].parent != PLAN_NONE)
            d.c[i].parent = resolve(&d, d.c[i].parent);
    res->chains = d.c;
    res->n_chains = d.nc;
    res->main = resolve(&d, d.chain_of[ord[0]]);
    res->workers = xmalloc((d.nc ? d.nc : 1) * sizeof *res->workers);
    res->n_workers = 0;
    for (uint32_t i = 0; i < d.nc; i++)
        if (d.c[i].spliced == PLAN_NONE && i != res->main)
            res->workers[res->n_workers++] = i;
    /* By first request (t, key): sort their first requests, map back. */
    uint32_t *first = xmalloc((res->n_workers ? res->n_workers : 1) * sizeof *first);
    for (uint32_t i = 0; i < res->n_workers; i++) {
        first[i] = d.c[res->workers[i]].reqs[0];
        d.chain_of[first[i]] = res->workers[i]; /* no longer needed as such */
    }
    qsort_r(first, res->n_workers, sizeof *first, cmp_idx_tk, (void *)r);
    for (uint32_t i = 0; i < res->n_workers; i++)
        res->workers[i] = d.chain_of[first[i]];
    free(first);
    for (uint32_t i = 0; i < n; i++)
        free(d.forks[i]);
    free(d.forks);
    free(d.n_forks);
    free(d.cap_forks);
    free(d.tail);
    free(d.chain_of);
    free(ord);
}

void pc_free(struct pc_result *res)
{
    for (uint32_t i = 0; i < res->n_chains; i++)
        free(res->chains[i].reqs);
    free(res->chains);
    free(res->workers);
    memset(res, 0, sizeof *res);
}

/* ---- classification ---------------------------------------------------- */

struct wg_cand {
    double t0, t1;
    uint32_t key;           /* first request's key */
    uint32_t chain;
    uint32_t bucket;
};

static int cmp_cand(const void *a, const void *b)
{
    const struct wg_cand *x = a, *y = b;
    if (x->bucket != y->bucket)
        return x->bucket < y->bucket ? -1 : 1;
    return pc_cmp_time_key(x->t0, x->key, y->t0, y->key);
}

struct wg_group {
    uint32_t first, n;      /* into the candidate array */
    double t0;
    uint32_t key;
};

static int cmp_group(const void *a, const void *b)
{
    const struct wg_group *x = a, *y = b;
    return pc_cmp_time_key(x->t0, x->key, y->t0, y->key);
}

/* Worker groups: workers forked with shared context from one fork point,
 * split into runs of overlapping [first start, latest end) intervals;
 * runs of at least worker_group_min are groups, numbered by earliest
 * start, members by (start, key) (worker_group_assignment). */
static void worker_groups(const struct pc_result *res, const struct pb_req *r,
                          const struct plan_opts *o, struct pc_class *out)
{
    if (o->worker_group_min <= 0 || !res->n_workers)
        return;
    struct wg_cand *c = xmalloc(res->n_workers * sizeof *c);
    uint32_t nc = 0;
    /* Buckets by (parent, fork request), numbered by first appearance. */
    uint32_t *bp = xmalloc(res->n_workers * sizeof *bp), *bf = xmalloc(res->n_workers * sizeof *bf);
    uint32_t nb = 0;
    for (uint32_t w = 0; w < res->n_workers; w++) {
        const struct pc_chain *ch = &res->chains[res->workers[w]];
        if (!ch->fork || ch->depth == 0 || ch->parent == PLAN_NONE || ch->fork_req == PLAN_NONE ||
            !ch->n)
            continue;
        uint32_t b = 0;
        while (b < nb && !(bp[b] == ch->parent && bf[b] == ch->fork_req))
            b++;
        if (b == nb) {
            bp[nb] = ch->parent;
            bf[nb++] = ch->fork_req;
        }
        double t1 = 0;
        for (uint32_t k = 0; k < ch->n; k++)
            if (k == 0 || r[ch->reqs[k]].end > t1)
                t1 = r[ch->reqs[k]].end;
        c[nc++] = (struct wg_cand){r[ch->reqs[0]].t, t1, r[ch->reqs[0]].key, w, b};
    }
    qsort(c, nc, sizeof *c, cmp_cand);
    /* Components: a new one starts when nothing earlier is still running
     * (every earlier end at or before this start; touching ends do not
     * overlap). */
    struct wg_group *g = xmalloc((nc ? nc : 1) * sizeof *g);
    uint32_t ng = 0;
    for (uint32_t i = 0; i < nc;) {
        uint32_t j = i + 1;
        double hi = c[i].t1;
        while (j < nc && c[j].bucket == c[i].bucket && hi > c[j].t0) {
            if (c[j].t1 > hi)
                hi = c[j].t1;
            j++;
        }
        if ((int64_t)(j - i) >= o->worker_group_min)
            g[ng++] = (struct wg_group){i, j - i, c[i].t0, c[i].key};
        i = j;
    }
    qsort(g, ng, sizeof *g, cmp_group);
    for (uint32_t k = 0; k < ng; k++)
        for (uint32_t m = 0; m < g[k].n; m++) {
            struct pc_class *cl = &out[c[g[k].first + m].chain];
            cl->kind = PC_WG;
            cl->group = k;
            cl->member = m;
        }
    free(g);
    free(c);
    free(bp);
    free(bf);
}

void pc_classify(const struct pc_result *res, const struct pb_req *r, const uint32_t *main_reqs,
                 uint32_t n_main, const struct plan_opts *o, struct pc_class *out)
{
    int64_t peak = 0;
    for (uint32_t k = 0; k < n_main; k++)
        if (r[main_reqs[k]].in > peak)
            peak = r[main_reqs[k]].in;
    uint32_t main_model = n_main ? r[main_reqs[0]].model : TRACE_NONE;
    memset(out, 0, res->n_workers * sizeof *out);
    worker_groups(res, r, o, out);
    /* The ISL threshold as Python computes it: int() of the double product. */
    int64_t thr = (int64_t)(o->aux_isl_ratio * (double)peak);
    if (thr < o->aux_isl_floor)
        thr = o->aux_isl_floor;
    for (uint32_t w = 0; w < res->n_workers; w++) {
        const struct pc_chain *ch = &res->chains[res->workers[w]];
        const struct pb_req *f = &r[ch->reqs[0]];
        bool aux = ch->n >= 1 && (int64_t)ch->n <= o->aux_max_requests &&
                   ((o->aux_cross_model && n_main && f->model != main_model) || f->in < thr);
        bool red = !aux && o->aux_reduction_osl_max > 0 && ch->n == 1 && f->out > 0 &&
                   f->out < o->aux_reduction_osl_max && f->in >= o->aux_isl_floor &&
                   (double)f->in > o->aux_reduction_ratio * (double)f->out;
        if (aux || red)
            out[w].kind = PC_AUX;
    }
}
