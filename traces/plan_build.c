/* plan_build.c: builds the replay plan of a trace (traces/plan.h
 * plan_build) as AIPerf 0.13.0's Weka loader reconstructs it
 * (aiperf/dataset/loader/weka_trace.py): per session tree, its requests,
 * its streams (the root's main chain, each subagent's chains, the root's
 * flat chains; the chains by plan_chains.c), the dropped subagents and the
 * spawn groups with the turns that spawn and join them; plan_emit.c then
 * writes the tree into the plan.
 */
#define _GNU_SOURCE /* qsort_r */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/hmap.h"
#include "traces/base/mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_opts_defaults(struct plan_opts *o)
{
    /* aiperf/common/environment.py:502-654 */
    memset(o, 0, sizeof *o);
    o->split_flat_chains = true;
    o->seam_max_gap_s = 3600.0;
    o->seam_min_overlap_ratio = 0.5;
    o->aux_max_requests = 1;
    o->aux_isl_ratio = 0.10;
    o->aux_isl_floor = 16384;
    o->aux_cross_model = true;
    o->aux_reduction_osl_max = 4000;
    o->aux_reduction_ratio = 20.0;
    o->worker_group_min = 3;
}

/* ---- names ------------------------------------------------------------- */

char *pb_xprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

const char *pb_agent_name(const struct trace *t, uint32_t s, char *buf, size_t n)
{
    const char *nm = trace_str(t, t->sessions[s].name);
    if (nm)
        return nm;
    snprintf(buf, n, "subagent_%u", t->sessions[s].pos);
    return buf;
}

/* AIPerf's replay scope of a stream id (_replay_scope_for_session,
 * weka_trace.py:49-59): the root and its flat chains share the trace's;
 * a subagent's chains share "T::sa:AGENT". */
static char *scope_of(const char *id, const char *trace_id)
{
    const char *m = strstr(id, "::sa:");
    if (!m)
        return xstrdup(trace_id);
    char *agent = xstrdup(m + 5);
    static const char *const marks[] = {":aux:", ":fa:", ":wg:"};
    for (int k = 0; k < 3; k++) {
        char *last = NULL;
        for (char *q = strstr(agent, marks[k]); q; q = strstr(q + 1, marks[k]))
            last = q;
        if (last)
            *last = 0;
    }
    char *s = pb_xprintf("%.*s::sa:%s", (int)(m - id), id, agent);
    free(agent);
    return s;
}
/* ---- the tree's requests ------------------------------------------------ */

static void add_session_reqs(struct pb *b, uint32_t s, size_t *n_ids)
{
    const struct trace *t = b->t;
    const struct trace_session *ss = &t->sessions[s];
    b->req_of_session[s] = b->nr;
    for (uint32_t k = 0; k < ss->n_calls; k++) {
        uint32_t ci = ss->first_call + k;
        const struct trace_call *c = &t->calls[ci];
        struct pb_req *q = &b->r[b->nr++];
        q->call = ci;
        q->key = c->pos;
        q->t = c->at_s;
        q->api = c->api_s;
        q->end = c->at_s + (isfinite(c->api_s) && c->api_s > 0.0 ? c->api_s : 0.0);
        q->model = c->model;
        q->nh = c->n_blocks;
        q->h = (const uint64_t *)(uintptr_t)*n_ids; /* an offset until ids is final */
        q->in = c->prompt_tokens;
        q->out = c->output_tokens;
        *n_ids += c->n_blocks;
    }
    for (uint32_t c = ss->first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling)
        add_session_reqs(b, c, n_ids);
}

static uint32_t count_calls(const struct trace *t, uint32_t s)
{
    uint32_t n = t->sessions[s].n_calls;
    for (uint32_t c = t->sessions[s].first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling)
        n += count_calls(t, c);
    return n;
}

static void load_tree(struct pb *b, uint32_t root)
{
    const struct trace *t = b->t;
    uint32_t n = count_calls(t, root);
    b->r = xrealloc(b->r, (n ? n : 1) * sizeof *b->r);
    b->nr = 0;
    size_t n_ids = 0;
    add_session_reqs(b, root, &n_ids);
    b->ids = xrealloc(b->ids, (n_ids ? n_ids : 1) * sizeof *b->ids);
    for (uint32_t i = 0; i < b->nr; i++) {
        size_t off = (size_t)(uintptr_t)b->r[i].h;
        b->r[i].h = b->ids + off;
        trace_call_blocks(t, &t->calls[b->r[i].call], b->ids + off, b->r[i].nh);
    }
}

/* ---- chains of one request list ----------------------------------------- */

struct chains {
    uint32_t n;             /* chains: 0 the main one */
    uint32_t **reqs, *len;  /* tree request indices per chain */
    struct pc_class *cls;   /* per worker chain (cls[k - 1]) */
    const uint64_t *main_h; /* first block ids of the classification main */
    uint32_t main_nh;
};

static void chains_free(struct chains *c)
{
    for (uint32_t k = 0; k < c->n; k++)
        free(c->reqs[k]);
    free(c->reqs);
    free(c->len);
    free(c->cls);
    memset(c, 0, sizeof *c);
}

static int cmp_req_tk(const void *x, const void *y, void *ctx)
{
    const struct pb_req *r = ctx;
    return pc_cmp_tk(&r[*(const uint32_t *)x], &r[*(const uint32_t *)y]);
}

/* Sorts tree request indices of one request list by (t, key) (keys differ
 * within a list: a total order). */
static void sort_by_tk(const struct pb_req *r, uint32_t *x, uint32_t n)
{
    qsort_r(x, n, sizeof *x, cmp_req_tk, (void *)r);
}

/* The chains of the requests list[0 .. n) (tree indices, in key order):
 * the root's (root: flat-chain split, weka_trace.py:1344-1474) or a
 * subagent's (weka_trace.py:460-593). */
static void split_chains(struct pb *b, const uint32_t *list, uint32_t n, bool root,
                         struct chains *out)
{
    memset(out, 0, sizeof *out);
    bool split = b->o->split_flat_chains && (root ? n > 1 : n > 0);
    if (!split) {
        out->n = 1;
        out->reqs = xmalloc(sizeof *out->reqs);
        out->len = xmalloc(sizeof *out->len);
        out->reqs[0] = xmalloc((n ? n : 1) * sizeof **out->reqs);
        memcpy(out->reqs[0], list, n * sizeof *list);
        out->len[0] = n;
        if (!root) /* a subagent's requests in (t, inner index) order */
            sort_by_tk(b->r, out->reqs[0], n);
        return;
    }
    /* Detection works on a compact copy in key order. */
    struct pb_req *loc = xmalloc(n * sizeof *loc);
    for (uint32_t i = 0; i < n; i++)
        loc[i] = b->r[list[i]];
    uint32_t pre = pc_preamble(loc, n);
    uint32_t *map = xmalloc(n * sizeof *map), nd = 0; /* detection index -> list index */
    for (uint32_t i = 0; i < n; i++)
        if (i != pre)
            map[nd++] = i;
    struct pb_req *det = xmalloc((nd ? nd : 1) * sizeof *det);
    for (uint32_t i = 0; i < nd; i++)
        det[i] = loc[map[i]];
    struct pc_result res;
    pc_detect(det, nd, b->o, &res);
    const struct pc_chain *mc = &res.chains[res.main];
    out->n = 1 + res.n_workers;
    out->reqs = xcalloc(out->n, sizeof *out->reqs);
    out->len = xcalloc(out->n, sizeof *out->len);
    out->cls = xcalloc(res.n_workers ? res.n_workers : 1, sizeof *out->cls);
    /* The classification yardstick: the detected main chain. */
    uint32_t *mreq = xmalloc((mc->n ? mc->n : 1) * sizeof *mreq);
    for (uint32_t k = 0; k < mc->n; k++)
        mreq[k] = mc->reqs[k];
    pc_classify(&res, det, mreq, mc->n, b->o, out->cls);
    for (uint32_t k = 0; k < mc->n && !out->main_h; k++)
        if (det[mreq[k]].nh) {
            out->main_h = det[mreq[k]].h;
            out->main_nh = det[mreq[k]].nh;
        }
    if (root && !res.n_workers) {
        /* Nothing split off: the root keeps its requests in file order. */
        out->reqs[0] = xmalloc(n * sizeof **out->reqs);
        memcpy(out->reqs[0], list, n * sizeof *list);
        out->len[0] = n;
    } else {
        uint32_t m = mc->n + (pre != PLAN_NONE);
        out->reqs[0] = xmalloc(m * sizeof **out->reqs);
        for (uint32_t k = 0; k < mc->n; k++)
            out->reqs[0][k] = list[map[mc->reqs[k]]];
        out->len[0] = mc->n;
        if (pre != PLAN_NONE) { /* re-attached, the chain re-sorted */
            out->reqs[0][out->len[0]++] = list[pre];
            sort_by_tk(b->r, out->reqs[0], out->len[0]);
        }
        for (uint32_t w = 0; w < res.n_workers; w++) {
            const struct pc_chain *ch = &res.chains[res.workers[w]];
            out->reqs[1 + w] = xmalloc(ch->n * sizeof **out->reqs);
            for (uint32_t k = 0; k < ch->n; k++)
                out->reqs[1 + w][k] = list[map[ch->reqs[k]]];
            out->len[1 + w] = ch->n;
        }
    }
    free(mreq);
    pc_free(&res);
    free(det);
    free(map);
    free(loc);
}

/* The declared prefix a worker chain keeps: the trace's (or the entry's)
 * when its first block ids provably start with the same declared blocks as
 * the main chain's, else none (_chain_init_tokens, weka_trace.py:723-751). */
static void worker_init(const struct chains *c, const struct pb_req *first, int64_t bs,
                        int64_t tool, int64_t system, int64_t *wt, int64_t *ws)
{
    int64_t blocks = (tool + system + bs - 1) / bs;
    bool cov = blocks > 0 && first->nh >= blocks && c->main_nh >= blocks &&
               !memcmp(first->h, c->main_h, (size_t)blocks * sizeof *first->h);
    *wt = cov ? tool : 0;
    *ws = cov ? system : 0;
}

static uint32_t add_bstream(struct pb *b, uint8_t kind, uint32_t parent, uint32_t session,
                            uint32_t chain, char *id, uint32_t *reqs, uint32_t n, int64_t tool,
                            int64_t system)
{
    GROW(b->bs, b->nbs, b->capbs);
    uint32_t i = b->nbs++;
    struct bstream *s = &b->bs[i];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->parent = parent;
    s->session = session;
    s->chain = chain;
    s->entry_pos = b->t->sessions[session].pos;
    s->id = id;
    s->scope = scope_of(id, b->trace_id);
    s->reqs = xmalloc((n ? n : 1) * sizeof *s->reqs);
    memcpy(s->reqs, reqs, n * sizeof *reqs);
    s->n = n;
    s->tool = tool;
    s->system = system;
    return i;
}

/* The worker suffix: "aux:NNN", "wg:GGG_MMM" or "fa:NNN"
 * (_worker_suffix, weka_trace.py:358-383). */
static void worker_suffix(const struct pc_class *c, uint32_t n, char *buf, size_t len)
{
    if (c->kind == PC_AUX)
        snprintf(buf, len, "aux:%03u", n);
    else if (c->kind == PC_WG)
        snprintf(buf, len, "wg:%03u_%03u", c->group, c->member);
    else
        snprintf(buf, len, "fa:%03u", n);
}

/* ---- subagents and flat chains: streams and spawn groups ----------------- */

/* The group of (parent, spawn, join, flat), made when new. */
static uint32_t group_for(struct pb *b, uint32_t parent, uint32_t spawn, uint32_t join,
                          bool flat, uint32_t name, double start_s)
{
    for (uint32_t i = 0; i < b->ng; i++) {
        struct bgroup *g = &b->g[i];
        if (g->parent == parent && g->spawn == spawn && g->join == join && g->flat == flat) {
            if (start_s < g->start_s)
                g->start_s = start_s;
            return i;
        }
    }
    GROW(b->g, b->ng, b->capg);
    struct bgroup *g = &b->g[b->ng];
    memset(g, 0, sizeof *g);
    g->parent = parent;
    g->spawn = spawn;
    g->join = join;
    g->flat = flat;
    g->name_entry = name;
    g->start_s = start_s;
    return b->ng++;
}

static void group_add(struct pb *b, uint32_t gi, uint32_t stream)
{
    struct bgroup *g = &b->g[gi];
    if (!(g->n_kids & (g->n_kids + 1)) || !g->kids) /* grow at 2^k - 1 */
        g->kids = xrealloc(g->kids, (2 * (size_t)g->n_kids + 2) * sizeof *g->kids);
    g->kids[g->n_kids++] = stream;
}

/* The spawning and joining turns of a child at position pos that ends at
 * end_s, on parent stream pm (weka_trace.py:2022-2151): the last turn of
 * pm before it in the file (by largest turn index), and the first turn
 * after it in the file (by position) recorded at or after its end. */
static void spawn_join(const struct pb *b, uint32_t pm, const uint32_t *by_key, uint32_t pos,
                       double end_s, uint32_t *spawn, uint32_t *join)
{
    const struct bstream *m = &b->bs[pm];
    *spawn = *join = PLAN_NONE;
    for (uint32_t k = 0; k < m->n; k++)
        if (b->r[m->reqs[k]].key < pos && (*spawn == PLAN_NONE || k > *spawn))
            *spawn = k;
    for (uint32_t i = 0; i < m->n; i++) {
        const struct pb_req *q = &b->r[m->reqs[by_key[i]]];
        if (q->key > pos && q->t + PLAN_EPS_S >= end_s) {
            *join = by_key[i];
            break;
        }
    }
}

struct key_ctx {
    const struct pb *b;
    const struct bstream *m;
};

static int cmp_turn_key(const void *x, const void *y, void *ctx)
{
    const struct key_ctx *c = ctx;
    uint32_t a = c->b->r[c->m->reqs[*(const uint32_t *)x]].key;
    uint32_t d = c->b->r[c->m->reqs[*(const uint32_t *)y]].key;
    return a < d ? -1 : a > d;
}

/* Turn indices of stream pm in key order. */
static uint32_t *turns_by_key(const struct pb *b, uint32_t pm)
{
    const struct bstream *m = &b->bs[pm];
    uint32_t *x = xmalloc((m->n ? m->n : 1) * sizeof *x);
    for (uint32_t i = 0; i < m->n; i++)
        x[i] = i;
    struct key_ctx c = {b, m};
    qsort_r(x, m->n, sizeof *x, cmp_turn_key, &c);
    return x;
}

static int cmp_session_pos(const void *x, const void *y, void *ctx)
{
    const struct trace *t = ctx;
    uint32_t a = t->sessions[*(const uint32_t *)x].pos, c = t->sessions[*(const uint32_t *)y].pos;
    return a < c ? -1 : a > c;
}

/* Expands the subagents of session ps, whose main stream is bstream pm:
 * each is dropped (no turn of pm before it) or becomes its chains'
 * streams in a spawn group of pm; nested subagents recurse. */
static int expand_children(struct pb *b, uint32_t ps, uint32_t pm)
{
    const struct trace *t = b->t;
    uint32_t nk = 0;
    for (uint32_t c = t->sessions[ps].first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling)
        nk++;
    if (!nk)
        return 0;
    uint32_t *kids = xmalloc(nk * sizeof *kids);
    nk = 0;
    for (uint32_t c = t->sessions[ps].first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling)
        kids[nk++] = c;
    qsort_r(kids, nk, sizeof *kids, cmp_session_pos, (void *)t);
    uint32_t *by_key = turns_by_key(b, pm);
    uint32_t *kept = xmalloc(nk * sizeof *kept), nkept = 0;
    int rc = 0;
    for (uint32_t i = 0; i < nk && !rc; i++) {
        uint32_t e = kids[i];
        const struct trace_session *es = &t->sessions[e];
        uint32_t spawn, join;
        spawn_join(b, pm, by_key, es->pos, es->end_s, &spawn, &join);
        if (spawn == PLAN_NONE) { /* dropped (weka_trace.py:703-720) */
            GROW(b->dropped, b->n_dropped, b->cap_dropped);
            b->dropped[b->n_dropped++] = e;
            continue;
        }
        char nb[32];
        const char *agent = pb_agent_name(t, e, nb, sizeof nb);
        for (uint32_t j = 0; j < nkept && !rc; j++) {
            char n1[32], n2[32];
            if (!strcmp(pb_agent_name(t, kept[j], n1, sizeof n1), pb_agent_name(t, e, n2, sizeof n2)))
                rc = err_set(b->err,
                             "%s: subagent agent_id '%s' appears twice among the replayed "
                             "subagents (AIPerf refuses the trace, weka_trace.py:1318-1339)",
                             b->trace_id, agent);
        }
        if (rc)
            break;
        kept[nkept++] = e;
        uint32_t gi = group_for(b, pm, spawn, join, false, e, es->spawn_s);
        /* Its requests, in key (file) order. */
        uint32_t *list = xmalloc((es->n_calls ? es->n_calls : 1) * sizeof *list);
        for (uint32_t k = 0; k < es->n_calls; k++)
            list[k] = b->req_of_session[e] + k;
        struct chains ch;
        split_chains(b, list, es->n_calls, false, &ch);
        const char *pid = b->bs[pm].kind == PLAN_STREAM_ROOT ? b->trace_id : b->bs[pm].id;
        uint32_t main = PLAN_NONE;
        for (uint32_t k = 0; k < ch.n; k++) {
            char suf[48] = "";
            int64_t wt = es->tool_tokens, ws = es->system_tokens;
            if (k) {
                worker_suffix(&ch.cls[k - 1], k - 1, suf + 1, sizeof suf - 1);
                suf[0] = ':';
                uint32_t f = 0;
                while (f + 1 < ch.len[k] && !b->r[ch.reqs[k][f]].nh)
                    f++;
                worker_init(&ch, &b->r[ch.reqs[k][f]], t->sessions[e].block_size,
                            es->tool_tokens, es->system_tokens, &wt, &ws);
            }
            char *id = pb_xprintf("%s::sa:%s%s", pid, agent, suf);
            uint32_t s = add_bstream(b, PLAN_STREAM_SUBAGENT, pm, e, k, id, ch.reqs[k],
                                     ch.len[k], wt, ws);
            if (!k)
                main = s;
            group_add(b, gi, s);
        }
        chains_free(&ch);
        free(list);
        rc = expand_children(b, e, main);
    }
    free(kept);
    free(by_key);
    free(kids);
    return rc;
}

/* The root's streams: its main chain, its subagents, its flat chains. */
static int expand_root(struct pb *b, uint32_t root)
{
    const struct trace *t = b->t;
    const struct trace_session *rs = &t->sessions[root];
    uint32_t *list = xmalloc((rs->n_calls ? rs->n_calls : 1) * sizeof *list);
    for (uint32_t k = 0; k < rs->n_calls; k++)
        list[k] = b->req_of_session[root] + k;
    struct chains ch;
    split_chains(b, list, rs->n_calls, true, &ch);
    free(list);
    add_bstream(b, PLAN_STREAM_ROOT, PLAN_NONE, root, 0, xstrdup(b->trace_id), ch.reqs[0],
                ch.len[0], rs->tool_tokens, rs->system_tokens);
    int rc = expand_children(b, root, 0);
    uint32_t *by_key = turns_by_key(b, 0);
    for (uint32_t k = 1; k < ch.n && !rc; k++) {
        char suf[48];
        worker_suffix(&ch.cls[k - 1], k - 1, suf, sizeof suf);
        int64_t wt, ws;
        worker_init(&ch, &b->r[ch.reqs[k][0]], rs->block_size, rs->tool_tokens,
                    rs->system_tokens, &wt, &ws);
        uint32_t s = add_bstream(b, PLAN_STREAM_FLAT, 0, root, k - 1,
                                 pb_xprintf("%s::%s", b->trace_id, suf), ch.reqs[k], ch.len[k], wt, ws);
        const struct pb_req *first = &b->r[ch.reqs[k][0]];
        double end = 0;
        for (uint32_t j = 0; j < ch.len[k]; j++)
            if (j == 0 || b->r[ch.reqs[k][j]].end > end)
                end = b->r[ch.reqs[k][j]].end;
        uint32_t spawn, join;
        spawn_join(b, 0, by_key, first->key, end, &spawn, &join);
        if (spawn == PLAN_NONE)
            spawn = 0; /* flat chains are never dropped (weka_trace.py:2097-2100) */
        group_add(b, group_for(b, 0, spawn, join, true, k - 1, first->t), s);
    }
    free(by_key);
    chains_free(&ch);
    return rc;
}

/* ---- the plan ------------------------------------------------------------ */

static void reset_tree(struct pb *b)
{
    for (uint32_t i = 0; i < b->nbs; i++) {
        free(b->bs[i].id);
        free(b->bs[i].scope);
        free(b->bs[i].reqs);
    }
    b->nbs = 0;
    for (uint32_t i = 0; i < b->ng; i++)
        free(b->g[i].kids);
    b->ng = 0;
    b->n_dropped = 0;
}

/* The id of the tree of root: its name (the file's `id`), else its file
 * name, else "trace_N". */
static const char *tree_id(const struct trace *t, uint32_t root, uint32_t n, char *buf, size_t len)
{
    const char *s = trace_str(t, t->sessions[root].name);
    if (!s) {
        s = trace_str(t, t->sessions[root].file);
        if (s && strrchr(s, '/'))
            s = strrchr(s, '/') + 1;
    }
    if (!s) {
        snprintf(buf, len, "trace_%u", n);
        s = buf;
    }
    return s;
}

struct plan *plan_build(const struct trace *t, const struct plan_opts *o, char *err)
{
    struct plan_opts def;
    if (!o) {
        plan_opts_defaults(&def);
        o = &def;
    }
    struct plan *p = xcalloc(1, sizeof *p);
    arena_init(&p->arena);
    p->tr = t;
    p->opts = *o;
    struct pb b = {.t = t, .o = &p->opts, .p = p, .err = err};
    hmap_init(&b.trace_ids);
    b.req_of_session = xmalloc((t->n_sessions ? t->n_sessions : 1) * sizeof *b.req_of_session);
    uint32_t n_scopes = 0;
    int rc = 0;
    /* Traces without sessions (arrivals with absolute times) have no trees. */
    for (uint32_t root = 0; root < t->n_sessions && !rc && !t->timestamped; root++) {
        if (t->sessions[root].parent != TRACE_NONE)
            continue;
        char buf[32];
        b.trace_id = tree_id(t, root, p->n_trees, buf, sizeof buf);
        bool added;
        uint64_t *v = hmap_put(&b.trace_ids, hash64(b.trace_id, strlen(b.trace_id), 7), &added);
        bool dup = false;
        for (uint32_t i = 0; !added && i < p->n_trees && !dup; i++) /* rare: same hash */
            dup = !strcmp(p->trees[i].trace_id, b.trace_id);
        if (dup) {
            rc = err_set(err, "%s: trace id '%s' appears twice (AIPerf refuses duplicate ids, "
                              "weka_trace.py:1134-1138)",
                         trace_str(t, t->sessions[root].file) ? trace_str(t, t->sessions[root].file)
                                                               : "trace",
                         b.trace_id);
            break;
        }
        if (added)
            *v = p->n_trees;
        load_tree(&b, root);
        rc = expand_root(&b, root);
        if (!rc)
            rc = pb_emit_tree(&b, root, &n_scopes);
        reset_tree(&b);
    }
    hmap_free(&b.trace_ids);
    free(b.req_of_session);
    free(b.r);
    free(b.ids);
    free(b.bs);
    free(b.g);
    free(b.dropped);
    if (rc) {
        plan_destroy(p);
        return NULL;
    }
    return p;
}

void plan_destroy(struct plan *p)
{
    if (!p)
        return;
    free(p->trees);
    free(p->streams);
    free(p->turns);
    free(p->branches);
    free(p->refs);
    free(p->branch_refs);
    free(p->children);
    free(p->child_offset_ns);
    free(p->msgs);
    free(p->strings);
    arena_free(&p->arena);
    free(p);
}
