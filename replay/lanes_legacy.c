/* lanes_legacy.c: the replayer's earlier session-lane rules (`--rules legacy`),
 * kept unchanged so that earlier results can be reproduced: session trees on
 * N lanes: runners, per-gap capped think
 * times, subagent forks and joins, warm start, recycling (lanes.h).
 *
 * Objects:
 *   lane    one of the N concurrency slots; holds one session-tree
 *           instance at a time;
 *   runner  one session (root or subagent) of a live tree: the index of
 *           its next call, its timer, its call in flight, joins.
 * A runner is busy in exactly one way: its call is in flight, its timer
 * is armed for the next call, or it waits for subagents to join (or, just
 * spawned with joining subagents and no calls left, only for them).
 * Everything happens in loop callbacks; nothing blocks. */
#include "replay/lanes.h"

#include <stdlib.h>
#include <string.h>

#include "replay/replay_internal.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/list.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"

struct lane {
    struct lanes_legacy *ls;
    int idx;
    int64_t tree;               /* instance number of the tree it holds */
    uint64_t cache_key;         /* the target's session key for its calls */
    uint32_t root;              /* the tree's root session */
    int runners;                /* live runners of its tree */
    bool holds_tree;
};

struct runner {
    struct lanes_legacy *ls;
    struct lane *lane;
    uint32_t session;           /* index into trace.sessions */
    uint32_t next_call;         /* index of the next call to send */
    uint32_t warmup_index;      /* UINT32_MAX: none */
    int64_t fork_min_t_ns;      /* subagents forked before it are skipped */
    int64_t last_intended_ns;   /* previous call's intended start */
    struct loop_timer timer;    /* armed: the next call's send */
    struct replay_call *call;   /* in flight, or NULL */
    struct runner *join_parent; /* parent waiting for this one, or NULL */
    int pending_joins;          /* subagents it waits for */
    bool waiting_join;
    char name[112];             /* "name@tree", the records' session */
    uint64_t uid;
    struct list_node node;      /* in lanes.runners, newest first */
};

struct lanes_legacy {
    struct replay *rp;
    struct rng rng;             /* RNG_TRACE: permutation, start points, recycled roots */
    struct lane *lane;
    int n_lanes;
    int active;                 /* lanes holding a tree */
    uint32_t *roots;            /* root sessions with calls or subagents */
    uint32_t n_roots;
    struct list_node runners;
    int n_runners;
    int64_t next_tree;          /* the next tree instance's number */
    int64_t tree_step;          /* between a rank's numbers (replay_set_share) */
    uint64_t trees;             /* instances started here */
    uint64_t recycled;
};

static const struct trace_session *sess(const struct lanes_legacy *ls, uint32_t s)
{
    return &ls->rp->tr->sessions[s];
}

static const struct trace_call *scall(const struct lanes_legacy *ls, uint32_t s, uint32_t j)
{
    return &ls->rp->tr->calls[sess(ls, s)->first_call + j];
}

/* A recorded gap (think time, fork gap) under the idle cap. */
static int64_t capped(const struct lanes_legacy *ls, int64_t gap)
{
    if (gap < 0)
        gap = 0;
    if (ls->rp->cfg.idle_cap_ns >= 0 && gap > ls->rp->cfg.idle_cap_ns)
        gap = ls->rp->cfg.idle_cap_ns;
    return gap;
}

static void lane_tree_new(struct lane *ln, uint32_t root, bool warm);
static void runner_send(struct loop *l, struct loop_timer *tm);
static void runner_try_end(struct runner *rn);

static void lane_tree_done(struct lane *ln)
{
    struct lanes_legacy *ls = ln->ls;
    struct replay *rp = ls->rp;
    ln->holds_tree = false;
    ls->active--;
    if (rp->cfg.recycle && !rp->stopping && loop_now(rp->loop) < rp->cfg.duration_ns) {
        ls->recycled++;
        lane_tree_new(ln, ls->roots[rng_below(&ls->rng, ls->n_roots)], false);
    }
}

static void runner_end(struct runner *rn)
{
    struct lanes_legacy *ls = rn->ls;
    struct replay *rp = ls->rp;
    struct lane *ln = rn->lane;
    ASSERT(!rn->call && !loop_timer_armed(&rn->timer) && rn->pending_joins == 0);
    list_remove(&rn->node);
    ls->n_runners--;
    struct runner *p = rn->join_parent;
    free(rn);
    ln->runners--;
    if (!p) {
        if (!ln->runners)
            lane_tree_done(ln);
        return;
    }
    /* A waiting parent is a runner of the same lane, so the lane is not
     * done here; if the parent ends now, its own runner_end says so. */
    p->pending_joins--;
    if (!p->pending_joins && p->waiting_join) {
        p->waiting_join = false;
        /* The parent goes on from now, as if its call ended now. */
        if (p->next_call >= sess(ls, p->session)->n_calls) {
            runner_try_end(p);
        } else {
            int64_t at = loop_now(rp->loop) + capped(ls, scall(ls, p->session, p->next_call)->think_ns);
            if (at >= rp->cfg.duration_ns || rp->stopping)
                runner_try_end(p);
            else
                loop_at(rp->loop, &p->timer, at, runner_send, p);
        }
    }
}

static void runner_try_end(struct runner *rn)
{
    if (rn->pending_joins > 0) {
        rn->waiting_join = true;
        return;
    }
    runner_end(rn);
}

static void runner_spawn(struct lane *ln, uint32_t s, uint32_t first, uint32_t warmup_index,
                         int64_t fork_min_t_ns, struct runner *join_parent, int64_t at);

/* Spawns rn's subagents recorded as forking after its call `after`
 * (TRACE_NONE: at its start), base_ns being that call's end (or the
 * start). */
static void fork_children(struct runner *rn, uint32_t after, int64_t base_ns)
{
    struct lanes_legacy *ls = rn->ls;
    struct replay *rp = ls->rp;
    if (!rp->cfg.subagents)
        return;
    for (uint32_t ch = sess(ls, rn->session)->first_child; ch != TRACE_NONE;
         ch = sess(ls, ch)->next_sibling) {
        const struct trace_session *cs = sess(ls, ch);
        uint32_t fa = cs->fork_after, n = sess(ls, rn->session)->n_calls;
        if (fa != TRACE_NONE && n > 0 && fa >= n)
            fa = n - 1; /* forks recorded after the last call */
        if (fa != after)
            continue;
        if (rp->cfg.skip_early_subagents && cs->fork_t_ns < rn->fork_min_t_ns)
            continue;
        int64_t gap = after == TRACE_NONE ? cs->fork_t_ns : cs->fork_gap_ns;
        int64_t at = base_ns + capped(ls, gap);
        if (at >= rp->cfg.duration_ns || rp->stopping)
            continue;
        bool join = (cs->join && rp->cfg.honour_join) || rp->cfg.join_all;
        runner_spawn(rn->lane, ch, 0, UINT32_MAX, INT64_MIN, join ? rn : NULL, at);
    }
}

static void runner_after_call(void *owner, uint32_t j);

static void runner_send(struct loop *l, struct loop_timer *tm)
{
    struct runner *rn = tm->arg;
    struct lanes_legacy *ls = rn->ls;
    struct replay *rp = ls->rp;
    if (rp->stopping || tm->at_ns >= rp->cfg.duration_ns) {
        runner_try_end(rn);
        return;
    }
    uint32_t j = rn->next_call;
    struct lane *ln = rn->lane;
    struct replay_call *call =
        replay_call_new(rp, scall(ls, rn->session, j), j, ln->cache_key, tm->at_ns, NULL);
    call->on_end = runner_after_call;
    call->owner = rn;
    call->lane_idx = ln->idx;
    call->tree = ln->tree;
    call->session_uid = rn->uid;
    memcpy(call->session_name, rn->name, sizeof call->session_name);
    if (j == rn->warmup_index)
        call->warmup = true;
    rn->call = call;
    rn->last_intended_ns = tm->at_ns;
    replay_call_send(rp, call);
}

/* Creates a runner for session s of lane ln's tree that sends call `first`
 * at time `at`; forks its subagents recorded at its start. */
static void runner_spawn(struct lane *ln, uint32_t s, uint32_t first, uint32_t warmup_index,
                         int64_t fork_min_t_ns, struct runner *join_parent, int64_t at)
{
    struct lanes_legacy *ls = ln->ls;
    struct replay *rp = ls->rp;
    struct runner *rn = xcalloc(1, sizeof *rn);
    rn->ls = ls;
    rn->lane = ln;
    rn->session = s;
    rn->next_call = first;
    rn->warmup_index = warmup_index;
    rn->fork_min_t_ns = fork_min_t_ns;
    rn->join_parent = join_parent;
    if (join_parent)
        join_parent->pending_joins++;
    const char *name = trace_str(rp->tr, sess(ls, s)->name);
    if (name)
        snprintf(rn->name, sizeof rn->name, "%s@%lld", name, (long long)ln->tree);
    else
        snprintf(rn->name, sizeof rn->name, "s%u@%lld", s, (long long)ln->tree);
    rn->uid = hash_mix(hash_mix(0x5e55104e, (uint64_t)ln->tree + 1), (uint64_t)s + 1);
    list_push_front(&ls->runners, &rn->node);
    ls->n_runners++;
    ln->runners++;
    fork_children(rn, TRACE_NONE, at);
    if (first >= sess(ls, s)->n_calls)
        runner_try_end(rn);
    else
        loop_at(rp->loop, &rn->timer, at, runner_send, rn);
}

/* The owner continuation of a runner's call j: forks what follows it,
 * then the next call after its think time (or the end). */
static void runner_after_call(void *owner, uint32_t j)
{
    struct runner *rn = owner;
    struct lanes_legacy *ls = rn->ls;
    struct replay *rp = ls->rp;
    int64_t now = loop_now(rp->loop);
    rn->call = NULL;
    if (!rp->stopping)
        fork_children(rn, j, now);
    rn->next_call = j + 1;
    const struct trace_session *s = sess(ls, rn->session);
    if (rn->next_call >= s->n_calls || rp->stopping) {
        runner_try_end(rn);
        return;
    }
    if (rn->pending_joins > 0) {
        rn->waiting_join = true;
        return;
    }
    const struct trace_call *nc = scall(ls, rn->session, rn->next_call);
    const struct trace_call *pc = scall(ls, rn->session, j);
    int64_t at;
    if (rp->cfg.think_end_to_start) {
        int64_t think = nc->think_ns;
        if (think < 0)
            think = pc->api_ns >= 0 ? nc->t_ns - (pc->t_ns + pc->api_ns) : nc->t_ns - pc->t_ns;
        at = now + capped(ls, think);
    } else {
        at = rn->last_intended_ns + capped(ls, nc->t_ns - pc->t_ns);
        if (at < now)
            at = now;
    }
    if (at >= rp->cfg.duration_ns) {
        runner_try_end(rn);
        return;
    }
    loop_at(rp->loop, &rn->timer, at, runner_send, rn);
}

/* A new instance of the tree at root on ln, from now; warm: at a random
 * start point (a first lane), else from its first call (recycled). */
static void lane_tree_new(struct lane *ln, uint32_t root, bool warm)
{
    struct lanes_legacy *ls = ln->ls;
    struct replay *rp = ls->rp;
    ln->tree = ls->next_tree;
    ls->next_tree += ls->tree_step;
    ls->trees++;
    ln->root = root;
    ln->holds_tree = true;
    ls->active++;
    const struct trace_session *s = sess(ls, root);
    ln->cache_key = rp->cfg.cache_isolation
                        ? hash_mix(hash_mix(rp->cfg.seed, 0xcac4e), (uint64_t)ln->tree + 1)
                        : hash_mix(0x5c09e, (uint64_t)s->scope + 1);
    uint32_t start = 0, warm_i = UINT32_MAX, first = 0; /* start: AgentX's call k */
    int64_t min_t = INT64_MIN;
    if (warm && rp->cfg.warm_start && s->n_calls > 0) {
        start = (uint32_t)rng_below(&ls->rng, s->n_calls);
        first = start;
        if (start > 0) {
            min_t = scall(ls, root, start)->t_ns;
            if (rp->cfg.warmup_call)
                first = warm_i = start - 1;
        }
    }
    if (!rp->cfg.skip_early_subagents)
        min_t = INT64_MIN;
    runner_spawn(ln, root, first, warm_i, min_t, NULL, loop_now(rp->loop));
}

struct lanes_legacy *lanes_legacy_create(struct replay *rp, char *err)
{
    const struct trace *tr = rp->tr;
    const struct replay_config *c = &rp->cfg;
    struct lanes_legacy *ls = xcalloc(1, sizeof *ls);
    ls->rp = rp;
    ls->tree_step = 1;
    rng_init(&ls->rng, c->seed, RNG_TRACE);
    list_init(&ls->runners);
    ls->roots = xmalloc((tr->n_sessions ? tr->n_sessions : 1) * sizeof *ls->roots);
    for (uint32_t s = 0; s < tr->n_sessions; s++)
        if (tr->sessions[s].parent == TRACE_NONE &&
            (tr->sessions[s].n_calls > 0 || tr->sessions[s].first_child != TRACE_NONE))
            ls->roots[ls->n_roots++] = s;
    if (!ls->n_roots) {
        err_set(err, "the trace has no sessions with calls");
        lanes_legacy_destroy(ls);
        return NULL;
    }
    if (!c->recycle && (uint32_t)c->concurrency > ls->n_roots) {
        err_set(err, "--concurrency %d is above the %u sessions of the trace and recycling "
                     "is off (--no-recycle)", c->concurrency, ls->n_roots);
        lanes_legacy_destroy(ls);
        return NULL;
    }
    ls->n_lanes = c->concurrency;
    ls->lane = xcalloc((size_t)ls->n_lanes, sizeof *ls->lane);
    for (int i = 0; i < ls->n_lanes; i++) {
        ls->lane[i].ls = ls;
        ls->lane[i].idx = i;
    }
    return ls;
}

void lanes_legacy_start(struct lanes_legacy *ls)
{
    /* First lanes: a random permutation of the roots, cycled. */
    uint32_t *perm = xmalloc(ls->n_roots * sizeof *perm);
    memcpy(perm, ls->roots, ls->n_roots * sizeof *perm);
    for (uint32_t i = ls->n_roots; i > 1; i--) {
        uint32_t j = (uint32_t)rng_below(&ls->rng, i);
        uint32_t x = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = x;
    }
    /* Another rank's lanes: their numbers and start points are drawn as
     * if they started here, so that every rank's lanes start as they would
     * in one process (replay_set_share). */
    struct replay *rp = ls->rp;
    int rank = rp->share_rank, ranks = rp->share_ranks;
    for (int i = 0; i < ls->n_lanes; i++) {
        uint32_t root = perm[(uint32_t)i % ls->n_roots];
        if (i % ranks == rank) {
            lane_tree_new(&ls->lane[i], root, true);
            continue;
        }
        ls->next_tree++;
        if (rp->cfg.warm_start && sess(ls, root)->n_calls > 0)
            rng_below(&ls->rng, sess(ls, root)->n_calls);
    }
    if (ranks > 1) {
        /* Recycled trees: numbers past the first lanes', rank + k * ranks;
         * roots from the rank's own stream. */
        ls->next_tree = ls->n_lanes + rank;
        ls->tree_step = ranks;
        rng_init(&ls->rng, hash_mix(rp->cfg.seed, (uint64_t)rank + 1), RNG_TRACE);
    }
    free(perm);
}

void lanes_legacy_stop(struct lanes_legacy *ls)
{
    /* The runners whose timer is armed, newest first. Ending one ends at
     * most itself and ancestors that wait for joins (whose timers are not
     * armed), and arms nothing (the run is stopping), so collecting them
     * first visits the same runners in the same order as rescanning the
     * list after each, in linear time. */
    struct runner **armed = xmalloc(((size_t)ls->n_runners + 1) * sizeof *armed);
    size_t n = 0;
    LIST_FOR_EACH(node, &ls->runners) {
        struct runner *rn = LIST_ENTRY(node, struct runner, node);
        if (loop_timer_armed(&rn->timer))
            armed[n++] = rn;
    }
    for (size_t i = 0; i < n; i++) {
        loop_cancel(ls->rp->loop, &armed[i]->timer);
        runner_try_end(armed[i]);
    }
    free(armed);
}

int lanes_legacy_active(const struct lanes_legacy *ls) { return ls->active; }
int lanes_legacy_runners(const struct lanes_legacy *ls) { return ls->n_runners; }
uint64_t lanes_legacy_trees_started(const struct lanes_legacy *ls) { return ls->trees; }
uint64_t lanes_legacy_recycled(const struct lanes_legacy *ls) { return ls->recycled; }

int lanes_legacy_verify(const struct lanes_legacy *ls, char *err)
{
    int nr = 0, rc = 0;
    int *per_lane = xcalloc((size_t)(ls->n_lanes ? ls->n_lanes : 1), sizeof *per_lane);
    LIST_FOR_EACH(node, &ls->runners) {
        const struct runner *rn = LIST_ENTRY(node, struct runner, node);
        nr++;
        per_lane[rn->lane->idx]++;
        int busy = (rn->call != NULL) + loop_timer_armed(&rn->timer) + rn->waiting_join;
        if (busy != 1 && !(busy == 0 && rn->pending_joins > 0)) {
            rc = err_set(err, "runner %s: in flight %d, timer %d, waiting %d", rn->name,
                         rn->call != NULL, loop_timer_armed(&rn->timer), rn->waiting_join);
            goto out;
        }
    }
    int active = 0;
    for (int i = 0; i < ls->n_lanes; i++) {
        if (per_lane[i] != ls->lane[i].runners) {
            rc = err_set(err, "lane %d: %d runners counted, %d listed", i, ls->lane[i].runners,
                         per_lane[i]);
            goto out;
        }
        if (ls->lane[i].holds_tree != (ls->lane[i].runners > 0)) {
            rc = err_set(err, "lane %d: holds a tree %d with %d runners", i,
                         ls->lane[i].holds_tree, ls->lane[i].runners);
            goto out;
        }
        active += ls->lane[i].holds_tree;
    }
    if (nr != ls->n_runners)
        rc = err_set(err, "runner count %d, listed %d", ls->n_runners, nr);
    else if (active != ls->active)
        rc = err_set(err, "active lanes %d, counted %d", ls->active, active);
out:
    free(per_lane);
    return rc;
}

void lanes_legacy_destroy(struct lanes_legacy *ls)
{
    if (!ls)
        return;
    struct list_node *node;
    while ((node = list_first(&ls->runners))) {
        struct runner *rn = LIST_ENTRY(node, struct runner, node);
        list_remove(node);
        loop_cancel(ls->rp->loop, &rn->timer);
        free(rn);
    }
    free(ls->lane);
    free(ls->roots);
    free(ls);
}
