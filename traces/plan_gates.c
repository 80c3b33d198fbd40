/* plan_gates.c: the happens-before gates between the streams of one replay
 * scope (plan_internal.h pg_gates): a turn waits for the latest turn of
 * every other stream of its scope that had completed by its recorded
 * start, keeping only the frontier, as AIPerf 0.13.0's
 * infer_cross_stream_predecessors does
 * (aiperf/timing/replay_dependencies.py:67-131; installed per scope by
 * aiperf/dataset/loader/weka_trace.py:62-96).
 */
#define _GNU_SOURCE /* qsort_r */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

#include <stdlib.h>
#include <string.h>

/* A turn's recorded interval [y0, y1] in ms: start, start + api time
 * (missing: zero width). */
struct iv {
    double y0, y1;
    uint32_t stream;        /* plan stream index */
    uint32_t turn;          /* index within it */
};

/* Key order of two turns: stream id (code point order), then index. */
static int cmp_key(const struct plan *p, const struct iv *a, const struct iv *b)
{
    if (a->stream != b->stream) {
        int c = strcmp(p->streams[a->stream].id, p->streams[b->stream].id);
        if (c)
            return c;
    }
    return a->turn < b->turn ? -1 : a->turn > b->turn;
}

/* (y1, y0, key) order. */
static int cmp_iv(const void *x, const void *y, void *ctx)
{
    const struct iv *a = x, *b = y;
    if (a->y1 != b->y1)
        return a->y1 < b->y1 ? -1 : 1;
    if (a->y0 != b->y0)
        return a->y0 < b->y0 ? -1 : 1;
    return cmp_key(ctx, a, b);
}

static int cmp_ref(const void *x, const void *y, void *ctx)
{
    const struct plan_ref *a = x, *b = y;
    struct iv ia = {0, 0, a->stream, a->turn}, ib = {0, 0, b->stream, b->turn};
    return cmp_key(ctx, &ia, &ib);
}

static void push_ref(struct plan *p, uint32_t *cap, struct plan_ref r)
{
    if (p->n_refs == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        p->refs = xrealloc(p->refs, *cap * sizeof *p->refs);
    }
    p->refs[p->n_refs++] = r;
}

void pg_gates(struct plan *p, uint32_t tree, uint32_t *cap_refs)
{
    const struct plan_tree *tr = &p->trees[tree];
    uint32_t s0 = tr->first_stream, ns = tr->n_streams;
    /* Streams grouped by scope (scopes are numbered over the plan). */
    uint32_t *ord = xmalloc((ns ? ns : 1) * sizeof *ord);
    for (uint32_t i = 0; i < ns; i++)
        ord[i] = s0 + i;
    uint32_t cap = *cap_refs;
    for (uint32_t a = 0; a < ns;) {
        uint32_t scope = p->streams[ord[a]].scope, b = a;
        /* Gather the scope's streams into ord[a .. b). */
        for (uint32_t i = a; i < ns; i++)
            if (p->streams[ord[i]].scope == scope) {
                uint32_t v = ord[i];
                ord[i] = ord[b];
                ord[b++] = v;
            }
        /* Keep stream order within the scope (the swaps may disturb it). */
        for (uint32_t i = a + 1; i < b; i++) {
            uint32_t v = ord[i], j = i;
            while (j > a && ord[j - 1] > v) {
                ord[j] = ord[j - 1];
                j--;
            }
            ord[j] = v;
        }
        uint32_t nsc = b - a;
        if (nsc > 1) {
            /* Per stream, its intervals sorted by (y1, y0, key). */
            struct iv **by = xmalloc(nsc * sizeof *by);
            for (uint32_t i = 0; i < nsc; i++) {
                const struct plan_stream *st = &p->streams[ord[a + i]];
                by[i] = xmalloc((st->n_turns ? st->n_turns : 1) * sizeof **by);
                for (uint32_t k = 0; k < st->n_turns; k++) {
                    const struct plan_turn *u = &p->turns[st->first_turn + k];
                    double w = isfinite(u->api_ms) && u->api_ms >= 0 ? u->api_ms : 0.0;
                    by[i][k] = (struct iv){u->t_ms, u->t_ms + w, ord[a + i], k};
                }
                qsort_r(by[i], st->n_turns, sizeof **by, cmp_iv, p);
            }
            struct iv *front = xmalloc(nsc * sizeof *front);
            for (uint32_t i = 0; i < nsc; i++) {
                const struct plan_stream *st = &p->streams[ord[a + i]];
                for (uint32_t k = 0; k < st->n_turns; k++) {
                    struct plan_turn *u = &p->turns[st->first_turn + k];
                    double x = u->t_ms;
                    uint32_t nf = 0;
                    for (uint32_t j = 0; j < nsc; j++) {
                        if (j == i)
                            continue;
                        /* The last interval ending by x, then down past
                         * those starting at x (completed = y0 < x and
                         * y1 <= x). */
                        uint32_t lo = 0, hi = p->streams[ord[a + j]].n_turns;
                        while (lo < hi) {
                            uint32_t mid = lo + (hi - lo) / 2;
                            if (by[j][mid].y1 <= x)
                                lo = mid + 1;
                            else
                                hi = mid;
                        }
                        while (lo > 0 && !(by[j][lo - 1].y0 < x))
                            lo--;
                        if (lo > 0)
                            front[nf++] = by[j][lo - 1];
                    }
                    /* Drop a candidate that finished before another began. */
                    u->after = p->n_refs;
                    u->n_after = 0;
                    for (uint32_t c = 0; c < nf; c++) {
                        bool drop = false;
                        for (uint32_t e = 0; e < nf && !drop; e++)
                            drop = e != c && front[c].y0 < front[e].y0 &&
                                   front[c].y1 <= front[e].y0;
                        if (!drop) {
                            push_ref(p, &cap, (struct plan_ref){front[c].stream, front[c].turn});
                            u->n_after++;
                        }
                    }
                    if (u->n_after > 1)
                        qsort_r(p->refs + u->after, u->n_after, sizeof *p->refs, cmp_ref, p);
                }
            }
            free(front);
            for (uint32_t i = 0; i < nsc; i++)
                free(by[i]);
            free(by);
        } else {
            const struct plan_stream *st = &p->streams[ord[a]];
            for (uint32_t k = 0; k < st->n_turns; k++) {
                p->turns[st->first_turn + k].after = p->n_refs;
                p->turns[st->first_turn + k].n_after = 0;
            }
        }
        a = b;
    }
    *cap_refs = cap;
    free(ord);
}
