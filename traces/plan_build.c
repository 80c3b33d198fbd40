/* plan_build.c: builds the replay plan of a trace (traces/plan.h
 * plan_build) as AIPerf 0.13.0's Weka loader reconstructs it
 * (aiperf/dataset/loader/weka_trace.py): per session tree, the streams
 * (the root's main chain, each subagent's chains, the root's flat chains),
 * their turns with end-to-start delays, the spawn branches and their
 * joins, the theoretical prefix hits, then the gates (plan_gates.c), the
 * message deltas (plan_msgs.c) and the chains (plan_chains.c).
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

/* ---- the builder's state ---------------------------------------------- */

/* A stream before it is emitted. */
struct bstream {
    uint8_t kind;
    uint32_t parent;        /* bstream index; PLAN_NONE for the root */
    uint32_t session;
    uint32_t chain;         /* plan_stream.chain */
    uint32_t entry_pos;     /* a subagent stream: its entry's position */
    char *id, *scope;       /* malloc'ed until emitted */
    uint32_t *reqs, n;      /* tree request indices, in turn order */
    int64_t tool, system;   /* turn 0's declared prefix */
};

/* A spawn group under construction: the children of one parent turn that
 * share the turn that joins them. */
struct bgroup {
    uint32_t parent;        /* bstream of the spawning stream */
    uint32_t spawn, join;   /* its turn indices; join PLAN_NONE: background */
    bool flat;
    uint32_t name_entry;    /* subagent: the first entry's session; flat: chain */
    double start_s;         /* min spawn time (s) of the members */
    uint32_t *kids, n_kids; /* bstream indices, dispatch order */
};

struct pb {
    const struct trace *t;
    const struct plan_opts *o;
    struct plan *p;
    char *err;
    /* capacities of the plan's arrays */
    uint32_t cap_trees, cap_streams, cap_turns, cap_branches, cap_refs, cap_branch_refs,
        cap_children, cap_msgs, cap_strings;
    /* the current tree */
    struct pb_req *r;       /* every call of the tree */
    uint32_t nr;
    uint32_t *req_of_session; /* per trace session: its first tree request */
    uint64_t *ids;          /* the requests' block ids */
    struct bstream *bs;
    uint32_t nbs, capbs;
    struct bgroup *g;
    uint32_t ng, capg;
    const char *trace_id;
    uint32_t *dropped, n_dropped, cap_dropped; /* sessions not replayed */
    struct hmap trace_ids;  /* hash of every tree's id seen so far */
};

#define GROW(arr, n, cap)                                                  \
    do {                                                                   \
        if ((n) >= (cap)) {                                                \
            (cap) = (cap) ? 2 * (cap) : 16;                                \
            (arr) = xrealloc((arr), (size_t)(cap) * sizeof *(arr));        \
        }                                                                  \
    } while (0)

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...)
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

static const char *agent_name(const struct trace *t, uint32_t s, char *buf, size_t n)
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
    char *s = xprintf("%.*s::sa:%s", (int)(m - id), id, agent);
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

static int cmp_tk_req(const struct pb_req *a, const struct pb_req *b)
{
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->key < b->key ? -1 : a->key > b->key;
}

/* Sorts tree request indices by (t, key), stably. */
static void sort_by_tk(const struct pb_req *r, uint32_t *x, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        uint32_t v = x[i], j = i;
        while (j > 0 && cmp_tk_req(&r[x[j - 1]], &r[v]) > 0) {
            x[j] = x[j - 1];
            j--;
        }
        x[j] = v;
    }
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

/* Turn indices of stream pm in key order. */
static uint32_t *turns_by_key(const struct pb *b, uint32_t pm)
{
    const struct bstream *m = &b->bs[pm];
    uint32_t *x = xmalloc((m->n ? m->n : 1) * sizeof *x);
    for (uint32_t i = 0; i < m->n; i++)
        x[i] = i;
    for (uint32_t i = 1; i < m->n; i++) {
        uint32_t v = x[i], j = i;
        while (j > 0 && b->r[m->reqs[x[j - 1]]].key > b->r[m->reqs[v]].key) {
            x[j] = x[j - 1];
            j--;
        }
        x[j] = v;
    }
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
        const char *agent = agent_name(t, e, nb, sizeof nb);
        for (uint32_t j = 0; j < nkept && !rc; j++) {
            char n1[32], n2[32];
            if (!strcmp(agent_name(t, kept[j], n1, sizeof n1), agent_name(t, e, n2, sizeof n2)))
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
            char *id = xprintf("%s::sa:%s%s", pid, agent, suf);
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
                                 xprintf("%s::%s", b->trace_id, suf), ch.reqs[k], ch.len[k], wt, ws);
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

/* ---- emission ----------------------------------------------------------- */

/* A prefix-hit record: a turn with its recorded-order key
 * (weka_trace.py:1477-1542: root and flat turns (t, outer, 0, 0),
 * subagent turns (t, entry position, chain, turn)). */
struct hrec {
    double t;
    uint32_t a, c, k;
    uint32_t stream, turn;  /* bstream, turn index: the tie-break */
};

static int cmp_hrec(const void *x, const void *y)
{
    const struct hrec *p = x, *q = y;
    if (p->t != q->t)
        return p->t < q->t ? -1 : 1;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->c != q->c)
        return p->c < q->c ? -1 : 1;
    if (p->k != q->k)
        return p->k < q->k ? -1 : 1;
    if (p->stream != q->stream)
        return p->stream < q->stream ? -1 : 1;
    return p->turn < q->turn ? -1 : p->turn > q->turn;
}

/* Theoretical prefix hits of every turn (hits[turn order over bstreams]):
 * one seen-set per trace, records in recorded order, a hit counts the
 * leading ids already seen (weka_metric_prepass.py:33-48). */
static void prefix_hits(struct pb *b, uint32_t *hits)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->nbs; i++)
        n += b->bs[i].n;
    struct hrec *rec = xmalloc((n ? n : 1) * sizeof *rec);
    uint32_t *base = xmalloc((b->nbs ? b->nbs : 1) * sizeof *base), m = 0;
    for (uint32_t i = 0; i < b->nbs; i++) {
        const struct bstream *s = &b->bs[i];
        base[i] = m;
        for (uint32_t k = 0; k < s->n; k++, m++) {
            const struct pb_req *q = &b->r[s->reqs[k]];
            if (s->kind == PLAN_STREAM_SUBAGENT)
                rec[m] = (struct hrec){q->t, s->entry_pos, s->chain, k, i, k};
            else
                rec[m] = (struct hrec){q->t, q->key, 0, 0, i, k};
        }
    }
    qsort(rec, n, sizeof *rec, cmp_hrec);
    struct hmap seen;
    hmap_init(&seen);
    /* Per stream the request it last added: its ids are all seen, so the
     * prefix shared with it needs no lookups (most turns extend it). */
    const struct pb_req **last = xcalloc(b->nbs ? b->nbs : 1, sizeof *last);
    for (uint32_t j = 0; j < n; j++) {
        const struct pb_req *q = &b->r[b->bs[rec[j].stream].reqs[rec[j].turn]];
        const struct pb_req *l = last[rec[j].stream];
        uint32_t h = l ? pc_lcp(l->h, l->nh, q->h, q->nh) : 0;
        while (h < q->nh && hmap_get(&seen, q->h[h]))
            h++;
        last[rec[j].stream] = q;
        hits[base[rec[j].stream] + rec[j].turn] = h;
        bool added; /* the first h are in already */
        for (uint32_t x = h; x < q->nh; x++)
            hmap_put(&seen, q->h[x], &added);
    }
    hmap_free(&seen);
    free(last);
    free(rec);
    free(base);
}

/* Whether the comma-joined list s holds item. */
static bool list_has(const char *s, const char *item)
{
    size_t n = strlen(item);
    for (const char *q = s; q && *q;) {
        const char *e = strchr(q, ',');
        size_t k = e ? (size_t)(e - q) : strlen(q);
        if (k == n && !strncmp(q, item, n))
            return true;
        q = e ? e + 1 : NULL;
    }
    return false;
}

/* _classify_turn_input (weka_trace.py:786-806). */
static uint8_t input_kind(const struct trace *t, const struct trace_call *c,
                          const struct trace_call *prev)
{
    const char *it = trace_str(t, c->input_types);
    if (it && *it)
        return list_has(it, "tool_result") ? PLAN_INPUT_TOOL_RESULT : PLAN_INPUT_USER;
    const char *st = prev ? trace_str(t, prev->stop) : NULL;
    if (st && *st)
        return !strcmp(st, "tool_use") ? PLAN_INPUT_TOOL_RESULT : PLAN_INPUT_USER;
    return PLAN_INPUT_NONE;
}

static const char *intern(struct plan *p, const char *s)
{
    return arena_strdup(&p->arena, s);
}

/* Interns a malloc'ed string and frees it. */
static const char *intern_free(struct plan *p, char *s)
{
    const char *r = arena_strdup(&p->arena, s);
    free(s);
    return r;
}

double plan_child_offset_ms(const struct plan *p, uint32_t b, uint32_t k)
{
    const struct plan_branch *br = &p->branches[b];
    const struct plan_stream *c = &p->streams[p->children[br->children + k]];
    if (!c->n_turns)
        return 0.0;
    double origin = br->dispatch == PLAN_AT_ISSUE
                        ? p->turns[p->streams[br->parent].first_turn + br->spawn_turn].t_ms
                        : br->start_ms;
    double d = p->turns[c->first_turn].t_ms - origin;
    return d > 0.0 ? d : 0.0;
}

/* One bstream's turns into the plan. */
static int emit_turns(struct pb *b, uint32_t i, const uint32_t *hits, uint32_t *sys_blocks)
{
    struct plan *p = b->p;
    const struct trace *t = b->t;
    const struct bstream *s = &b->bs[i];
    uint32_t first = p->n_turns;
    for (uint32_t k = 0; k < s->n; k++) {
        GROW(p->turns, p->n_turns, b->cap_turns);
        const struct pb_req *q = &b->r[s->reqs[k]];
        struct plan_turn *u = &p->turns[p->n_turns++];
        memset(u, 0, sizeof *u);
        u->call = q->call;
        u->t_ms = q->t * 1000.0;
        u->t_ns = plan_ms_to_ns(u->t_ms);
        u->delay_ms = NAN;
        u->delay_ns = -1;
        if (k) {
            /* _end_to_start_delay_ms (weka_trace.py:131-157): after the
             * previous turn of this stream returns; a negative api_time
             * lengthens it; clamped at 0, never capped. */
            const struct pb_req *pq = &b->r[s->reqs[k - 1]];
            double api = isfinite(pq->api) ? pq->api * 1000.0 : 0.0;
            double d = (u->t_ms - pq->t * 1000.0) - api;
            u->delay_ms = d > 0.0 ? d : 0.0;
            u->delay_ns = plan_ms_to_ns(u->delay_ms);
        }
        u->api_ms = isfinite(q->api) ? (q->api > 0.0 ? q->api : 0.0) * 1000.0 : NAN;
        u->api_ns = isfinite(u->api_ms) ? plan_ms_to_ns(u->api_ms) : -1;
        u->max_tokens = q->out >= 1 ? q->out : 1;
        u->input_kind = input_kind(t, &t->calls[q->call], k ? &t->calls[b->r[s->reqs[k - 1]].call] : NULL);
        u->hit_blocks = hits[k];
        u->total_blocks = q->nh;
        u->after = u->spawn = u->join = 0;
    }
    /* Message deltas. */
    struct pm_turn *pt = xmalloc((s->n ? s->n : 1) * sizeof *pt);
    uint32_t *mf = xmalloc((s->n ? s->n : 1) * sizeof *mf), *mc = xmalloc((s->n ? s->n : 1) * sizeof *mc);
    bool *rs = xmalloc((s->n ? s->n : 1) * sizeof *rs);
    for (uint32_t k = 0; k < s->n; k++) {
        const struct pb_req *q = &b->r[s->reqs[k]];
        pt[k] = (struct pm_turn){q->h, q->nh, q->in, q->out};
    }
    char why[ERR_LEN];
    int rc = pm_plan(pt, s->n, t->sessions[s->session].block_size, s->tool, s->system,
                     b->o->corpus_tokens, &p->msgs, &p->n_msgs, &b->cap_msgs, mf, mc, rs,
                     sys_blocks, why);
    if (rc)
        err_set(b->err, "%s: stream %s: %s", b->trace_id, s->id, why);
    for (uint32_t k = 0; k < s->n && !rc; k++) {
        p->turns[first + k].msgs = mf[k];
        p->turns[first + k].n_msgs = mc[k];
        p->turns[first + k].reset = rs[k];
    }
    free(pt);
    free(mf);
    free(mc);
    free(rs);
    return rc;
}

struct tref {
    uint32_t turn, branch;
};

static int cmp_tref(const void *x, const void *y)
{
    const struct tref *a = x, *c = y;
    if (a->turn != c->turn)
        return a->turn < c->turn ? -1 : 1;
    return a->branch < c->branch ? -1 : a->branch > c->branch;
}

/* The spawn (join: the join) lists of the tree's turns from its branches. */
static void turn_lists(struct pb *b, uint32_t tree, bool join)
{
    struct plan *p = b->p;
    const struct plan_tree *tr = &p->trees[tree];
    struct tref *x = xmalloc((tr->n_branches ? tr->n_branches : 1) * sizeof *x);
    uint32_t n = 0;
    for (uint32_t i = 0; i < tr->n_branches; i++) {
        const struct plan_branch *br = &p->branches[tr->first_branch + i];
        uint32_t k = join ? br->join_turn : br->spawn_turn;
        if (k != PLAN_NONE)
            x[n++] = (struct tref){p->streams[br->parent].first_turn + k, tr->first_branch + i};
    }
    qsort(x, n, sizeof *x, cmp_tref);
    for (uint32_t i = 0; i < n;) {
        struct plan_turn *u = &p->turns[x[i].turn];
        uint32_t *first = join ? &u->join : &u->spawn, *cnt = join ? &u->n_join : &u->n_spawn;
        *first = p->n_branch_refs;
        *cnt = 0;
        for (; i < n && &p->turns[x[i].turn] == u; i++) {
            GROW(p->branch_refs, p->n_branch_refs, b->cap_branch_refs);
            p->branch_refs[p->n_branch_refs++] = x[i].branch;
            (*cnt)++;
        }
    }
    free(x);
}

static int emit_tree(struct pb *b, uint32_t root, uint32_t *n_scopes)
{
    struct plan *p = b->p;
    const struct trace *t = b->t;
    GROW(p->trees, p->n_trees, b->cap_trees);
    uint32_t ti = p->n_trees++;
    struct plan_tree *tr = &p->trees[ti];
    memset(tr, 0, sizeof *tr);
    tr->root_session = root;
    tr->first_stream = p->n_streams;
    tr->first_branch = p->n_branches;
    tr->block_size = t->sessions[root].block_size;
    tr->tool_tokens = t->sessions[root].tool_tokens;
    tr->system_tokens = t->sessions[root].system_tokens;
    tr->n_file_calls = b->nr;
    tr->trace_id = intern(p, b->trace_id);
    const char *file = trace_str(t, t->sessions[root].file);
    const char *slash = file ? strrchr(file, '/') : NULL;
    tr->file = file ? intern(p, slash ? slash + 1 : file) : NULL;
    uint32_t n_all = 0;
    for (uint32_t i = 0; i < b->nbs; i++)
        n_all += b->bs[i].n;
    uint32_t *hits = xmalloc((n_all ? n_all : 1) * sizeof *hits);
    prefix_hits(b, hits);
    /* Streams and turns; scopes numbered over the plan. */
    int rc = 0;
    uint32_t off = 0, scope0 = *n_scopes;
    for (uint32_t i = 0; i < b->nbs && !rc; i++) {
        const struct bstream *s = &b->bs[i];
        GROW(p->streams, p->n_streams, b->cap_streams);
        struct plan_stream *ps = &p->streams[p->n_streams++];
        memset(ps, 0, sizeof *ps);
        ps->kind = s->kind;
        ps->tree = ti;
        ps->parent = s->parent == PLAN_NONE ? PLAN_NONE : tr->first_stream + s->parent;
        ps->session = s->session;
        ps->chain = s->chain;
        ps->id = intern(p, s->id);
        ps->scope_id = intern(p, s->scope);
        ps->scope = PLAN_NONE;
        for (uint32_t j = 0; j < i && ps->scope == PLAN_NONE; j++)
            if (!strcmp(p->streams[tr->first_stream + j].scope_id, ps->scope_id))
                ps->scope = p->streams[tr->first_stream + j].scope;
        if (ps->scope == PLAN_NONE)
            ps->scope = (*n_scopes)++;
        ps->first_turn = p->n_turns;
        ps->n_turns = s->n;
        uint32_t sys = 0;
        rc = emit_turns(b, i, hits + off, &sys);
        if (i == 0)
            tr->shared_blocks = sys;
        off += s->n;
    }
    (void)scope0;
    free(hits);
    if (rc)
        return rc;
    tr->n_streams = p->n_streams - tr->first_stream;
    /* Branches. */
    for (uint32_t gi = 0; gi < b->ng; gi++) {
        const struct bgroup *g = &b->g[gi];
        GROW(p->branches, p->n_branches, b->cap_branches);
        struct plan_branch *br = &p->branches[p->n_branches++];
        memset(br, 0, sizeof *br);
        uint32_t ps = tr->first_stream + g->parent;
        char nb[32];
        br->id = intern_free(p, g->flat ? xprintf("%s:flatspawn:%u", b->trace_id, g->name_entry)
                                   : xprintf("%s:spawn:%s",
                                             b->bs[g->parent].kind == PLAN_STREAM_ROOT
                                                 ? b->trace_id
                                                 : b->bs[g->parent].id,
                                             agent_name(t, g->name_entry, nb, sizeof nb)));
        br->parent = ps;
        br->spawn_turn = g->spawn;
        br->join_turn = g->join;
        br->start_ms = g->start_s * 1000.0;
        br->start_ns = plan_ms_to_ns(br->start_ms);
        /* At issue when the branch began while its spawning root turn was
         * in flight (branch_orchestrator.py:434-474: root credits only). */
        const struct plan_turn *st = &p->turns[p->streams[ps].first_turn + g->spawn];
        br->dispatch = p->streams[ps].kind == PLAN_STREAM_ROOT && isfinite(st->api_ms) &&
                               st->api_ms > 0 && br->start_ms < st->t_ms + st->api_ms
                           ? PLAN_AT_ISSUE
                           : PLAN_AT_RETURN;
        br->children = p->n_children;
        br->n_children = g->n_kids;
        for (uint32_t k = 0; k < g->n_kids; k++) {
            if (p->n_children >= b->cap_children) {
                b->cap_children = b->cap_children ? 2 * b->cap_children : 64;
                p->children = xrealloc(p->children, b->cap_children * sizeof *p->children);
                p->child_offset_ns =
                    xrealloc(p->child_offset_ns, b->cap_children * sizeof *p->child_offset_ns);
            }
            p->children[p->n_children++] = tr->first_stream + g->kids[k];
        }
        for (uint32_t k = 0; k < g->n_kids; k++)
            p->child_offset_ns[br->children + k] =
                plan_ms_to_ns(plan_child_offset_ms(p, p->n_branches - 1, k));
    }
    tr->n_branches = p->n_branches - tr->first_branch;
    turn_lists(b, ti, false);
    turn_lists(b, ti, true);
    pg_gates(p, ti, &b->cap_refs);
    /* Bounds over every turn of the tree (trajectory_source.py:639-651). */
    tr->n_turns = 0;
    for (uint32_t i = 0; i < tr->n_streams; i++) {
        const struct plan_stream *s = &p->streams[tr->first_stream + i];
        for (uint32_t k = 0; k < s->n_turns; k++) {
            double x = p->turns[s->first_turn + k].t_ms;
            if (tr->n_turns == 0 || x < tr->t_lo_ms)
                tr->t_lo_ms = x;
            if (tr->n_turns == 0 || x > tr->t_hi_ms)
                tr->t_hi_ms = x;
            tr->n_turns++;
        }
    }
    tr->t_lo_ns = plan_ms_to_ns(tr->t_lo_ms);
    tr->t_hi_ns = plan_ms_to_ns(tr->t_hi_ms);
    tr->dropped = p->n_strings;
    tr->n_dropped = b->n_dropped;
    for (uint32_t i = 0; i < b->n_dropped; i++) {
        GROW(p->strings, p->n_strings, b->cap_strings);
        char nb[32];
        p->strings[p->n_strings++] = intern(p, agent_name(t, b->dropped[i], nb, sizeof nb));
    }
    return 0;
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
            rc = emit_tree(&b, root, &n_scopes);
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
