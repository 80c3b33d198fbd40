/* plan_emit.c: the replay plan's emission (plan_internal.h pb_emit_tree):
 * a tree's planned streams into the plan's arrays, with each turn's
 * recorded start, end-to-start delay, output limit, input kind, message
 * deltas and theoretical prefix hit, then the spawn branches with their
 * dispatch and child offsets, the turns' spawn and join lists, the gates
 * and the time bounds (aiperf/dataset/loader/weka_trace.py:1874-2151,
 * 1477-1542; aiperf/timing/branch_orchestrator.py:434-474, 1277-1289).
 */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/hmap.h"
#include "traces/base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int pb_emit_tree(struct pb *b, uint32_t root, uint32_t *n_scopes)
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
        br->id = intern_free(p, g->flat ? pb_xprintf("%s:flatspawn:%u", b->trace_id, g->name_entry)
                                   : pb_xprintf("%s:spawn:%s",
                                             b->bs[g->parent].kind == PLAN_STREAM_ROOT
                                                 ? b->trace_id
                                                 : b->bs[g->parent].id,
                                             pb_agent_name(t, g->name_entry, nb, sizeof nb)));
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
        p->strings[p->n_strings++] = intern(p, pb_agent_name(t, b->dropped[i], nb, sizeof nb));
    }
    return 0;
}
