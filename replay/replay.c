/* replay.c: session lanes with the AgentX rules, open- and closed-loop
 * arrivals, call lifecycle, records and the timeline (replay.h).
 *
 * Objects:
 *   lane    one of the N concurrency slots; holds one session-tree
 *           instance at a time (sessions mode) or one call at a time
 *           (closed mode);
 *   runner  one session (root or subagent) of a live tree: the index of
 *           its next call, its timer, its call in flight, joins;
 *   call    one call in flight: the target's struct, chunk times, the
 *           block chain it points to.
 * Everything happens in loop callbacks; nothing blocks. */
#include "replay/replay.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"
#include "traces/base/time_ns.h"
#include "traces/base/parse.h"

struct lane;
struct runner;

struct rcall {
    struct target_call tc;
    struct replay *rp;
    struct runner *rn;          /* sessions mode */
    struct lane *lane;          /* closed mode (and sessions) */
    const struct trace_call *call;
    uint32_t call_index;        /* within its session */
    int64_t intended_ns;
    int64_t first_ns;
    int64_t out, chunks;
    int64_t *chunk_t;
    size_t chunk_cap;
    bool warmup;
    bool cancel_requested;
    bool in_target;             /* submitted, done not yet delivered */
    uint64_t *blocks;
    char session[112];
    uint64_t session_uid;
    int lane_idx;
    int64_t tree;
    struct rcall *prev, *next;
};

struct runner {
    struct replay *rp;
    struct lane *lane;
    uint32_t session;
    uint32_t next;              /* next call index to send */
    uint32_t warmup_index;      /* UINT32_MAX: none */
    int64_t fork_min_t;         /* subagents forked before it are skipped */
    int64_t last_intended_ns;   /* previous call's intended start */
    struct loop_timer timer;
    struct rcall *inflight;
    struct runner *join_parent; /* parent waiting for this one, or NULL */
    int pending_joins;
    bool waiting_join;
    char name[112];
    uint64_t uid;
    struct runner *prev, *next_r;
};

struct lane {
    struct replay *rp;
    int idx;
    int64_t tree;
    uint64_t session_key;
    uint32_t root;
    int runners;                /* live runners of its tree */
    bool live;
    struct loop_timer timer;    /* closed mode */
};

struct replay {
    struct replay_config cfg;
    const struct trace *tr;
    struct target *tg;
    struct loop *loop;
    struct rng rng_trace, rng_arrival;
    struct lane *lanes;
    int n_lanes, live_lanes;
    uint32_t *roots;
    uint32_t n_roots;
    struct runner *runners;
    int n_runners;
    struct rcall *inflight;
    int64_t n_inflight;
    int64_t next_tree;
    uint64_t next_call_id;
    uint64_t calls_sent, recycled;
    bool started, stopping, finished, interrupted, arrivals_done, destroying;
    struct loop_timer stop_timer, grace_timer, tick_timer, arrival_timer;
    int64_t next_arrival_ns; /* intended time of the next open-loop arrival */
    /* Open loop. */
    uint32_t *order;
    uint32_t n_order, cursor;
    int64_t cycle;
    int64_t t0_ns;
    /* Outputs. */
    struct metrics metrics;
    struct records_writer *rec;
    FILE *timeline;
    struct target_stats last_st;
    void (*tick_cb)(void *, struct replay *, int64_t);
    void *tick_arg;
    int64_t end_ns;
    char io_error[ERR_LEN];
};

static const struct target_cb call_cb;
static void runner_after_call(struct runner *rn, uint32_t j);
static void maybe_finish(struct replay *rp);
static void closed_next(struct lane *ln);

/* ---------------------------------------------------------------------- */
/* Configuration. */

void replay_call_blocks(const struct trace *t, const struct trace_call *c, uint64_t *out)
{
    uint32_t hi = c->n_blocks;
    while (hi > 0) {
        uint32_t lo = c->n_shared;
        if (lo < hi)
            memcpy(out + lo, c->suffix, (size_t)(hi - lo) * sizeof *out);
        if (lo < hi)
            hi = lo;
        if (!hi || c->base == TRACE_NONE)
            break;
        c = &t->calls[c->base];
    }
}

static const struct trace_session *sess(const struct replay *rp, uint32_t s)
{
    return &rp->tr->sessions[s];
}

static const struct trace_call *scall(const struct replay *rp, uint32_t s, uint32_t j)
{
    return &rp->tr->calls[sess(rp, s)->first_call + j];
}

static int64_t capped(const struct replay *rp, int64_t gap)
{
    if (gap < 0)
        gap = 0;
    if (rp->cfg.idle_cap_ns >= 0 && gap > rp->cfg.idle_cap_ns)
        gap = rp->cfg.idle_cap_ns;
    return gap;
}

/* ---------------------------------------------------------------------- */
/* Calls. */

static void write_record(struct replay *rp, const struct replay_record *rec)
{
    metrics_add(&rp->metrics, rec);
    if (rp->rec) {
        char err[ERR_LEN];
        if (records_write(rp->rec, rec, err) && !rp->io_error[0])
            snprintf(rp->io_error, sizeof rp->io_error, "%s", err);
    }
}

static struct rcall *call_new(struct replay *rp, const struct trace_call *c, uint32_t index,
                              uint64_t key, int64_t intended)
{
    struct rcall *k = xcalloc(1, sizeof *k);
    const struct trace_session *s = &rp->tr->sessions[c->session];
    k->rp = rp;
    k->call = c;
    k->call_index = index;
    k->intended_ns = intended;
    k->first_ns = -1;
    k->blocks = xmalloc((c->n_blocks ? c->n_blocks : 1) * sizeof *k->blocks);
    replay_call_blocks(rp->tr, c, k->blocks);
    k->tc.id = ++rp->next_call_id;
    k->tc.session_key = key;
    k->tc.prompt_tokens = c->prompt_tokens;
    k->tc.max_tokens = c->output_tokens > 0 ? c->output_tokens : 1;
    k->tc.ignore_eos = rp->cfg.ignore_eos;
    k->tc.blocks = k->blocks;
    k->tc.n_blocks = c->n_blocks;
    k->tc.trace_block_size = s->block_size > 0 ? s->block_size : 64;
    k->tc.model = trace_str(rp->tr, c->model);
    k->tc.cb = &call_cb;
    k->tc.arg = k;
    k->tc.replica = -1;
    k->tc.cached_tokens = -1;
    k->tc.server_prompt_tokens = k->tc.server_output_tokens = -1;
    k->lane_idx = -1;
    if (!rp->cfg.measure_all_types && c->type != TRACE_CALL_NORMAL)
        k->warmup = true;
    return k;
}

static void call_free(struct rcall *k)
{
    free(k->chunk_t);
    free(k->blocks);
    free(k);
}

/* The end of a call, whatever it was: record it, then let its owner go on. */
static void call_finish(struct rcall *k, int64_t t, enum target_status st, const char *msg)
{
    struct replay *rp = k->rp;
    if (rp->destroying) {
        call_free(k);
        return;
    }
    if (k->in_target) {
        k->in_target = false;
        if (k->prev)
            k->prev->next = k->next;
        else
            rp->inflight = k->next;
        if (k->next)
            k->next->prev = k->prev;
        rp->n_inflight--;
    }
    struct replay_record r = {0};
    r.session = k->session;
    r.session_uid = k->session_uid;
    r.lane = k->lane_idx;
    r.call = k->call_index;
    r.tree = k->tree;
    r.intended_start_ns = k->intended_ns;
    r.start_ns = k->tc.start_ns;
    r.first_token_ns = k->first_ns;
    r.end_ns = k->chunks ? k->chunk_t[k->chunks - 1] : t;
    if (st != TARGET_OK)
        r.end_ns = t > r.end_ns ? t : r.end_ns;
    r.chunks = k->chunks;
    r.prompt_tokens = k->tc.prompt_tokens;
    r.cached_tokens = k->tc.cached_tokens;
    r.output_tokens = k->out;
    r.max_tokens = k->tc.max_tokens;
    r.replica = k->tc.replica;
    r.preemptions = k->tc.preemptions;
    r.warmup = k->warmup;
    r.model = k->tc.model;
    r.chunk_times_ns = k->chunk_t;
    r.http_status = k->tc.http_status;
    r.server_prompt_tokens = k->tc.server_prompt_tokens;
    r.server_output_tokens = k->tc.server_output_tokens;
    r.live = rp->tg->live || k->tc.http_status != 0;
    if (st == TARGET_ERR_CANCELLED || (k->cancel_requested && st != TARGET_OK)) {
        r.cancelled = true;
        r.error = "cancelled";
    } else if (st == TARGET_ERR_TOO_LONG) {
        r.overflow = true;
        r.error = "context overflow";
    } else if (st != TARGET_OK) {
        r.error = msg && *msg ? msg : target_status_name(st);
    }
    write_record(rp, &r);
    if (k->rn)
        runner_after_call(k->rn, k->call_index);
    else if (k->lane)
        closed_next(k->lane);
    call_free(k);
    maybe_finish(rp);
}

/* Sends k now (or records it as an overflow without sending). */
static void call_send(struct replay *rp, struct rcall *k)
{
    int64_t now = loop_now(rp->loop);
    k->tc.start_ns = now;
    rp->calls_sent++;
    if (rp->cfg.max_model_len > 0 &&
        k->tc.prompt_tokens + k->tc.max_tokens > rp->cfg.max_model_len) {
        snprintf(k->tc.error, sizeof k->tc.error, "context overflow");
        call_finish(k, now, TARGET_ERR_TOO_LONG, NULL);
        return;
    }
    k->in_target = true;
    k->next = rp->inflight;
    k->prev = NULL;
    if (rp->inflight)
        rp->inflight->prev = k;
    rp->inflight = k;
    rp->n_inflight++;
    char err[ERR_LEN];
    err[0] = 0;
    if (target_submit(rp->tg, &k->tc, err)) {
        snprintf(k->tc.error, sizeof k->tc.error, "%.120s", err[0] ? err : "submit failed");
        call_finish(k, loop_now(rp->loop), TARGET_ERR_OTHER, k->tc.error);
    }
}

static void on_first_token(struct target_call *c, int64_t t)
{
    struct rcall *k = c->arg;
    if (k->first_ns < 0)
        k->first_ns = t;
}

static void on_chunk(struct target_call *c, int64_t t, int64_t n)
{
    struct rcall *k = c->arg;
    if (n <= 0)
        return;
    if (k->first_ns < 0)
        k->first_ns = t;
    if ((size_t)k->chunks == k->chunk_cap) {
        k->chunk_cap = k->chunk_cap ? k->chunk_cap * 2 : 16;
        k->chunk_t = xrealloc(k->chunk_t, k->chunk_cap * sizeof *k->chunk_t);
    }
    k->chunk_t[k->chunks++] = t;
    k->out += n;
}

static void on_done(struct target_call *c, int64_t t, enum target_status st)
{
    struct rcall *k = c->arg;
    call_finish(k, t, st, c->error);
}

static const struct target_cb call_cb = {
    .first_token = on_first_token, .chunk = on_chunk, .done = on_done,
};

/* ---------------------------------------------------------------------- */
/* Session lanes. */

static void lane_tree_new(struct lane *ln, uint32_t root, bool warm);
static void runner_send(struct loop *l, struct loop_timer *t);

static void lane_tree_done(struct lane *ln)
{
    struct replay *rp = ln->rp;
    ln->live = false;
    rp->live_lanes--;
    if (rp->cfg.recycle && !rp->stopping && loop_now(rp->loop) < rp->cfg.duration_ns) {
        rp->recycled++;
        lane_tree_new(ln, rp->roots[rng_below(&rp->rng_trace, rp->n_roots)], false);
    }
}

static void runner_try_end(struct runner *rn);

static void runner_end(struct runner *rn)
{
    struct replay *rp = rn->rp;
    struct lane *ln = rn->lane;
    ASSERT(!rn->inflight && !loop_timer_armed(&rn->timer) && rn->pending_joins == 0);
    if (rn->prev)
        rn->prev->next_r = rn->next_r;
    else
        rp->runners = rn->next_r;
    if (rn->next_r)
        rn->next_r->prev = rn->prev;
    rp->n_runners--;
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
    {
        p->pending_joins--;
        if (!p->pending_joins && p->waiting_join) {
            p->waiting_join = false;
            /* The parent goes on from now, as if its call ended now. */
            if (p->next >= sess(rp, p->session)->n_calls)
                runner_try_end(p);
            else {
                int64_t at = loop_now(rp->loop) + capped(rp, scall(rp, p->session, p->next)->think_ns);
                if (at >= rp->cfg.duration_ns || rp->stopping)
                    runner_try_end(p);
                else
                    loop_at(rp->loop, &p->timer, at, runner_send, p);
            }
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

/* Creates a runner for session s of lane ln's tree that sends call `first`
 * at time `at`; forks its subagents recorded at its start. */
static void runner_spawn(struct lane *ln, uint32_t s, uint32_t first, uint32_t warmup_index,
                         int64_t fork_min_t, struct runner *join_parent, int64_t at);

static void fork_children(struct runner *rn, uint32_t after, int64_t base_ns)
{
    struct replay *rp = rn->rp;
    if (!rp->cfg.subagents)
        return;
    for (uint32_t ch = sess(rp, rn->session)->first_child; ch != TRACE_NONE;
         ch = sess(rp, ch)->next_sibling) {
        const struct trace_session *cs = sess(rp, ch);
        uint32_t fa = cs->fork_after, n = sess(rp, rn->session)->n_calls;
        if (fa != TRACE_NONE && n > 0 && fa >= n)
            fa = n - 1; /* forks recorded after the last call */
        if (fa != after)
            continue;
        if (rp->cfg.skip_early_subagents && cs->fork_t_ns < rn->fork_min_t)
            continue;
        int64_t gap = after == TRACE_NONE ? cs->fork_t_ns : cs->fork_gap_ns;
        int64_t at = base_ns + capped(rp, gap);
        if (at >= rp->cfg.duration_ns || rp->stopping)
            continue;
        bool join = (cs->join && rp->cfg.honour_join) || rp->cfg.join_all;
        runner_spawn(rn->lane, ch, 0, UINT32_MAX, INT64_MIN, join ? rn : NULL, at);
    }
}

static void runner_send(struct loop *l, struct loop_timer *t)
{
    struct runner *rn = t->arg;
    struct replay *rp = rn->rp;
    if (rp->stopping || t->at_ns >= rp->cfg.duration_ns) {
        runner_try_end(rn);
        return;
    }
    uint32_t j = rn->next;
    struct lane *ln = rn->lane;
    struct rcall *k = call_new(rp, scall(rp, rn->session, j), j, ln->session_key, t->at_ns);
    k->rn = rn;
    k->lane_idx = ln->idx;
    k->tree = ln->tree;
    k->session_uid = rn->uid;
    memcpy(k->session, rn->name, sizeof k->session);
    if (j == rn->warmup_index)
        k->warmup = true;
    rn->inflight = k;
    rn->last_intended_ns = t->at_ns;
    call_send(rp, k);
}

static void runner_spawn(struct lane *ln, uint32_t s, uint32_t first, uint32_t warmup_index,
                         int64_t fork_min_t, struct runner *join_parent, int64_t at)
{
    struct replay *rp = ln->rp;
    struct runner *rn = xcalloc(1, sizeof *rn);
    rn->rp = rp;
    rn->lane = ln;
    rn->session = s;
    rn->next = first;
    rn->warmup_index = warmup_index;
    rn->fork_min_t = fork_min_t;
    rn->join_parent = join_parent;
    if (join_parent)
        join_parent->pending_joins++;
    const char *name = trace_str(rp->tr, sess(rp, s)->name);
    if (name)
        snprintf(rn->name, sizeof rn->name, "%s@%lld", name, (long long)ln->tree);
    else
        snprintf(rn->name, sizeof rn->name, "s%u@%lld", s, (long long)ln->tree);
    rn->uid = hash_mix(hash_mix(0x5e55104e, (uint64_t)ln->tree + 1), (uint64_t)s + 1);
    rn->next_r = rp->runners;
    if (rp->runners)
        rp->runners->prev = rn;
    rp->runners = rn;
    rp->n_runners++;
    ln->runners++;
    fork_children(rn, TRACE_NONE, at);
    if (first >= sess(rp, s)->n_calls)
        runner_try_end(rn);
    else
        loop_at(rp->loop, &rn->timer, at, runner_send, rn);
}

static void runner_after_call(struct runner *rn, uint32_t j)
{
    struct replay *rp = rn->rp;
    int64_t now = loop_now(rp->loop);
    rn->inflight = NULL;
    if (!rp->stopping)
        fork_children(rn, j, now);
    rn->next = j + 1;
    const struct trace_session *s = sess(rp, rn->session);
    if (rn->next >= s->n_calls || rp->stopping) {
        runner_try_end(rn);
        return;
    }
    if (rn->pending_joins > 0) {
        rn->waiting_join = true;
        return;
    }
    const struct trace_call *nc = scall(rp, rn->session, rn->next);
    const struct trace_call *pc = scall(rp, rn->session, j);
    int64_t at;
    if (rp->cfg.think_end_to_start) {
        int64_t think = nc->think_ns;
        if (think < 0)
            think = pc->api_ns >= 0 ? nc->t_ns - (pc->t_ns + pc->api_ns) : nc->t_ns - pc->t_ns;
        at = now + capped(rp, think);
    } else {
        at = rn->last_intended_ns + capped(rp, nc->t_ns - pc->t_ns);
        if (at < now)
            at = now;
    }
    if (at >= rp->cfg.duration_ns) {
        runner_try_end(rn);
        return;
    }
    loop_at(rp->loop, &rn->timer, at, runner_send, rn);
}

static void lane_tree_new(struct lane *ln, uint32_t root, bool warm)
{
    struct replay *rp = ln->rp;
    ln->tree = rp->next_tree++;
    ln->root = root;
    ln->live = true;
    rp->live_lanes++;
    const struct trace_session *s = sess(rp, root);
    ln->session_key = rp->cfg.cache_isolation
                          ? hash_mix(hash_mix(rp->cfg.seed, 0xcac4e), (uint64_t)ln->tree + 1)
                          : hash_mix(0x5c09e, (uint64_t)s->scope + 1);
    uint32_t k = 0, warm_i = UINT32_MAX, first = 0;
    int64_t min_t = INT64_MIN;
    if (warm && rp->cfg.warm_start && s->n_calls > 0) {
        k = (uint32_t)rng_below(&rp->rng_trace, s->n_calls);
        first = k;
        if (k > 0) {
            min_t = scall(rp, root, k)->t_ns;
            if (rp->cfg.warmup_call)
                first = warm_i = k - 1;
        }
    }
    if (!rp->cfg.skip_early_subagents)
        min_t = INT64_MIN;
    runner_spawn(ln, root, first, warm_i, min_t, NULL, loop_now(rp->loop));
}

/* ---------------------------------------------------------------------- */
/* Open and closed loops over independent calls. */

static uint64_t open_key(const struct replay *rp, const struct trace_call *c)
{
    return hash_mix(0x5c09e, (uint64_t)rp->tr->sessions[c->session].scope + 1);
}

static struct rcall *open_call(struct replay *rp, int64_t intended)
{
    uint32_t ci = rp->order[rp->cursor];
    const struct trace_call *c = &rp->tr->calls[ci];
    struct rcall *k = call_new(rp, c, c->index, open_key(rp, c), intended);
    const char *name = trace_str(rp->tr, rp->tr->sessions[c->session].name);
    if (name)
        snprintf(k->session, sizeof k->session, "%s@%lld", name, (long long)rp->cycle);
    else
        snprintf(k->session, sizeof k->session, "s%u@%lld", c->session, (long long)rp->cycle);
    k->session_uid = hash_mix(hash_mix(0x0be11, (uint64_t)rp->cycle + 1), (uint64_t)c->session + 1);
    k->tree = rp->cycle;
    if (++rp->cursor == rp->n_order) {
        rp->cursor = 0;
        rp->cycle++;
        if (rp->cfg.mode == REPLAY_MODE_TIMESTAMP)
            rp->arrivals_done = true;
    }
    return k;
}

static void on_arrival(struct loop *l, struct loop_timer *t)
{
    struct replay *rp = t->arg;
    if (rp->stopping)
        return;
    /* The intended time, not the (possibly late) firing time: on the real
     * clock a stalled generator must show as schedule lag, not as fewer
     * arrivals (wrk2's coordinated-omission rule). */
    int64_t intended = rp->next_arrival_ns;
    struct rcall *k = open_call(rp, intended);
    int64_t at;
    if (rp->arrivals_done) {
        at = INT64_MAX;
    } else if (rp->cfg.mode == REPLAY_MODE_TIMESTAMP) {
        double rel = (double)(rp->tr->calls[rp->order[rp->cursor]].t_ns - rp->t0_ns) * rp->cfg.time_scale;
        at = (int64_t)llround(rel);
    } else if (rp->cfg.mode == REPLAY_MODE_POISSON) {
        at = intended + (int64_t)llround(rng_exp(&rp->rng_arrival, 1e9 / rp->cfg.rate));
    } else {
        double shape = 1.0 / (rp->cfg.gamma_cv * rp->cfg.gamma_cv);
        double scale = 1e9 / (rp->cfg.rate * shape);
        at = intended + (int64_t)llround(rng_gamma(&rp->rng_arrival, shape, scale));
    }
    if (at >= rp->cfg.duration_ns) {
        rp->arrivals_done = true;
    } else {
        rp->next_arrival_ns = at;
        loop_at(l, &rp->arrival_timer, at, on_arrival, rp);
    }
    call_send(rp, k);
    maybe_finish(rp);
}

static void on_closed_lane(struct loop *l, struct loop_timer *t)
{
    struct lane *ln = t->arg;
    struct replay *rp = ln->rp;
    if (rp->stopping || t->at_ns >= rp->cfg.duration_ns) {
        maybe_finish(rp);
        return;
    }
    struct rcall *k = open_call(rp, t->at_ns);
    k->lane = ln;
    k->lane_idx = ln->idx;
    call_send(rp, k);
}

static void closed_next(struct lane *ln)
{
    struct replay *rp = ln->rp;
    int64_t now = loop_now(rp->loop);
    if (!rp->stopping && now < rp->cfg.duration_ns)
        loop_at(rp->loop, &ln->timer, now, on_closed_lane, ln);
}

/* ---------------------------------------------------------------------- */
/* Run control. */

static void write_tick(struct replay *rp, int64_t now)
{
    struct target_stats st;
    target_stats(rp->tg, &st);
    if (rp->timeline) {
        double dt = (double)rp->cfg.tick_ns / 1e9;
        int64_t dp = st.prompt_tokens - rp->last_st.prompt_tokens;
        int64_t dc = st.cached_tokens - rp->last_st.cached_tokens;
        int64_t dout = st.output_tokens - rp->last_st.output_tokens;
        int64_t live = rp->cfg.mode == REPLAY_MODE_SESSIONS ? rp->live_lanes : rp->n_inflight;
        char kv[32], hit[32];
        if (st.kv_used_frac >= 0)
            snprintf(kv, sizeof kv, "%.6f", st.kv_used_frac);
        else
            snprintf(kv, sizeof kv, "nan");
        if (dp > 0)
            snprintf(hit, sizeof hit, "%.6f", (double)dc / (double)dp);
        else
            snprintf(hit, sizeof hit, "nan");
        if (fprintf(rp->timeline, "%.0f,%lld,%lld,%lld,%s,%s,%.3f,%.3f\n", (double)now / 1e9,
                    (long long)live, (long long)st.running, (long long)st.waiting, kv, hit,
                    (double)(dp + dout) / dt, (double)dout / dt) < 0 &&
            !rp->io_error[0])
            snprintf(rp->io_error, sizeof rp->io_error, "writing timeline: %s", strerror(errno));
    }
    rp->last_st = st;
}

static void on_tick(struct loop *l, struct loop_timer *t)
{
    struct replay *rp = t->arg;
    int64_t now = loop_now(l);
    write_tick(rp, now);
    if (rp->finished)
        return;
    loop_at(l, &rp->tick_timer, now + rp->cfg.tick_ns, on_tick, rp);
    if (rp->tick_cb)
        rp->tick_cb(rp->tick_arg, rp, now);
}

static void cancel_inflight(struct replay *rp)
{
    for (;;) {
        struct rcall *k = rp->inflight;
        while (k && k->cancel_requested)
            k = k->next;
        if (!k)
            break;
        k->cancel_requested = true;
        target_cancel(rp->tg, &k->tc);
    }
}

static void on_grace(struct loop *l, struct loop_timer *t)
{
    struct replay *rp = t->arg;
    cancel_inflight(rp);
    maybe_finish(rp);
}

static void begin_stop(struct replay *rp)
{
    if (rp->stopping)
        return;
    rp->stopping = true;
    loop_cancel(rp->loop, &rp->arrival_timer);
    rp->arrivals_done = true;
    /* Timers of calls not yet sent: those runners end now. */
    for (;;) {
        struct runner *rn = rp->runners;
        while (rn && !loop_timer_armed(&rn->timer))
            rn = rn->next_r;
        if (!rn)
            break;
        loop_cancel(rp->loop, &rn->timer);
        runner_try_end(rn);
    }
    for (int i = 0; i < rp->n_lanes; i++)
        loop_cancel(rp->loop, &rp->lanes[i].timer);
}

static void on_stop(struct loop *l, struct loop_timer *t)
{
    struct replay *rp = t->arg;
    begin_stop(rp);
    if (rp->cfg.grace_ns >= 0)
        loop_at(l, &rp->grace_timer, rp->cfg.duration_ns + rp->cfg.grace_ns, on_grace, rp);
    maybe_finish(rp);
}

static bool idle(const struct replay *rp)
{
    if (rp->n_inflight)
        return false;
    switch (rp->cfg.mode) {
    case REPLAY_MODE_SESSIONS:
        return rp->live_lanes == 0;
    case REPLAY_MODE_CLOSED:
        return rp->stopping;
    default:
        return rp->arrivals_done;
    }
}

static void maybe_finish(struct replay *rp)
{
    if (rp->finished || !rp->started || !idle(rp))
        return;
    if (!rp->stopping)
        begin_stop(rp);
    if (rp->n_inflight || rp->n_runners)
        return;
    rp->finished = true;
    rp->end_ns = loop_now(rp->loop);
    loop_cancel(rp->loop, &rp->stop_timer);
    loop_cancel(rp->loop, &rp->grace_timer);
    loop_cancel(rp->loop, &rp->arrival_timer);
    loop_cancel(rp->loop, &rp->tick_timer);
    loop_stop(rp->loop);
}

void replay_interrupt(struct replay *rp)
{
    if (rp->finished)
        return;
    rp->interrupted = true;
    begin_stop(rp);
    cancel_inflight(rp);
    maybe_finish(rp);
}

/* ---------------------------------------------------------------------- */
/* Creation. */

struct replay *replay_create(const struct replay_config *c, const struct trace *t,
                             struct target *tg, struct loop *l, char *err)
{
    if (!t || !t->n_calls) {
        err_set(err, "the trace has no calls");
        return NULL;
    }
    if (c->duration_ns <= 0) {
        err_set(err, "duration must be > 0");
        return NULL;
    }
    if (c->concurrency < 1 && (c->mode == REPLAY_MODE_SESSIONS || c->mode == REPLAY_MODE_CLOSED)) {
        err_set(err, "concurrency must be >= 1");
        return NULL;
    }
    if (c->mode == REPLAY_MODE_TIMESTAMP && !t->timestamped) {
        err_set(err, "--mode timestamp needs a timestamped trace (Mooncake, Azure); this one "
                     "has sessions (use the default sessions mode, or --arrival)");
        return NULL;
    }
    if (c->time_scale != 1.0 && c->mode != REPLAY_MODE_TIMESTAMP) {
        err_set(err, "--time-scale applies to --mode timestamp only");
        return NULL;
    }
    if (c->concurrency_set && c->mode != REPLAY_MODE_SESSIONS && c->mode != REPLAY_MODE_CLOSED) {
        err_set(err, "--concurrency conflicts with open-loop arrivals (--mode %s): they have no "
                     "lanes; use a rate or --mode closed", replay_mode_name(c->mode));
        return NULL;
    }
    if ((c->mode == REPLAY_MODE_POISSON || c->mode == REPLAY_MODE_GAMMA) && !(c->rate > 0)) {
        err_set(err, "--arrival needs a rate > 0");
        return NULL;
    }
    struct replay *rp = xcalloc(1, sizeof *rp);
    rp->cfg = *c;
    if (rp->cfg.tick_ns <= 0)
        rp->cfg.tick_ns = NS_PER_S;
    rp->tr = t;
    rp->tg = tg;
    rp->loop = l;
    rng_init(&rp->rng_trace, c->seed, RNG_TRACE);
    rng_init(&rp->rng_arrival, c->seed, RNG_ARRIVAL);
    metrics_init(&rp->metrics);
    rp->roots = xmalloc(t->n_sessions * sizeof *rp->roots);
    for (uint32_t s = 0; s < t->n_sessions; s++)
        if (t->sessions[s].parent == TRACE_NONE &&
            (t->sessions[s].n_calls > 0 || t->sessions[s].first_child != TRACE_NONE))
            rp->roots[rp->n_roots++] = s;
    if (c->mode == REPLAY_MODE_SESSIONS) {
        if (!rp->n_roots) {
            err_set(err, "the trace has no sessions with calls");
            replay_destroy(rp);
            return NULL;
        }
        if (!c->recycle && (uint32_t)c->concurrency > rp->n_roots) {
            err_set(err, "--concurrency %d is above the %u sessions of the trace and recycling "
                         "is off (--no-recycle)", c->concurrency, rp->n_roots);
            replay_destroy(rp);
            return NULL;
        }
    }
    if (c->mode == REPLAY_MODE_SESSIONS || c->mode == REPLAY_MODE_CLOSED) {
        rp->n_lanes = c->concurrency;
        rp->lanes = xcalloc((size_t)rp->n_lanes, sizeof *rp->lanes);
        for (int i = 0; i < rp->n_lanes; i++) {
            rp->lanes[i].rp = rp;
            rp->lanes[i].idx = i;
        }
    }
    if (c->mode != REPLAY_MODE_SESSIONS) {
        rp->n_order = t->n_calls;
        rp->order = xmalloc(t->n_calls * sizeof *rp->order);
        for (uint32_t i = 0; i < t->n_calls; i++)
            rp->order[i] = i;
        if (c->mode == REPLAY_MODE_TIMESTAMP) {
            /* Stable insertion into time order (traces are nearly sorted). */
            for (uint32_t i = 1; i < t->n_calls; i++) {
                uint32_t x = rp->order[i];
                uint32_t j = i;
                while (j > 0 && t->calls[rp->order[j - 1]].t_ns > t->calls[x].t_ns) {
                    rp->order[j] = rp->order[j - 1];
                    j--;
                }
                rp->order[j] = x;
            }
            rp->t0_ns = t->calls[rp->order[0]].t_ns;
        }
    }
    return rp;
}

void replay_set_outputs(struct replay *rp, struct records_writer *records, FILE *timeline)
{
    rp->rec = records;
    rp->timeline = timeline;
    if (timeline)
        fprintf(timeline, "t_s,live_sessions,running,waiting,kv_used_frac,prefix_hit_rate,"
                          "tokens_per_s,output_tokens_per_s\n");
}

void replay_set_tick(struct replay *rp, void (*cb)(void *, struct replay *, int64_t), void *arg)
{
    rp->tick_cb = cb;
    rp->tick_arg = arg;
}

int replay_start(struct replay *rp)
{
    struct loop *l = rp->loop;
    int64_t now = loop_now(l);
    rp->started = true;
    target_stats(rp->tg, &rp->last_st);
    loop_at(l, &rp->stop_timer, rp->cfg.duration_ns, on_stop, rp);
    loop_at(l, &rp->tick_timer, now + rp->cfg.tick_ns, on_tick, rp);
    switch (rp->cfg.mode) {
    case REPLAY_MODE_SESSIONS: {
        /* First lanes: a random permutation of the roots, cycled. */
        uint32_t *perm = xmalloc(rp->n_roots * sizeof *perm);
        memcpy(perm, rp->roots, rp->n_roots * sizeof *perm);
        for (uint32_t i = rp->n_roots; i > 1; i--) {
            uint32_t j = (uint32_t)rng_below(&rp->rng_trace, i);
            uint32_t x = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = x;
        }
        for (int i = 0; i < rp->n_lanes; i++)
            lane_tree_new(&rp->lanes[i], perm[(uint32_t)i % rp->n_roots], true);
        free(perm);
        break;
    }
    case REPLAY_MODE_CLOSED:
        for (int i = 0; i < rp->n_lanes; i++)
            loop_at(l, &rp->lanes[i].timer, now, on_closed_lane, &rp->lanes[i]);
        break;
    case REPLAY_MODE_TIMESTAMP:
        rp->next_arrival_ns = now;
        loop_at(l, &rp->arrival_timer, now, on_arrival, rp);
        break;
    case REPLAY_MODE_POISSON:
    case REPLAY_MODE_GAMMA:
        rp->next_arrival_ns = now + (int64_t)llround(rng_exp(&rp->rng_arrival, 1e9 / rp->cfg.rate));
        loop_at(l, &rp->arrival_timer, rp->next_arrival_ns, on_arrival, rp);
        break;
    }
    maybe_finish(rp);
    return 0;
}

bool replay_finished(const struct replay *rp) { return rp->finished; }
const struct metrics *replay_metrics(const struct replay *rp) { return &rp->metrics; }

static void add_reason(struct replay_outcome *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add_reason(struct replay_outcome *o, const char *fmt, ...)
{
    if (o->n_reasons >= (int)ARRAY_LEN(o->reasons))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->reasons[o->n_reasons++], sizeof o->reasons[0], fmt, ap);
    va_end(ap);
}

void replay_summarize(const struct replay *rp, const struct metrics_slo *slo,
                      struct metrics_summary *s, struct replay_outcome *o)
{
    metrics_summarize(&rp->metrics, rp->tg->gpus, slo, s);
    struct target_stats st;
    target_stats(rp->tg, &st);
    s->fallback_steps = st.fallback_steps;
    memset(o, 0, sizeof *o);
    o->interrupted = rp->interrupted;
    o->partial = rp->interrupted || rp->io_error[0] || !rp->finished;
    o->calls_sent = rp->calls_sent;
    o->lanes_recycled = rp->recycled;
    o->trees_started = (uint64_t)rp->next_tree;
    o->end_ns = rp->finished ? rp->end_ns : loop_now(rp->loop);
    snprintf(o->io_error, sizeof o->io_error, "%s", rp->io_error);
    const struct replay_config *c = &rp->cfg;
    if (rp->interrupted)
        add_reason(o, "interrupted");
    if (rp->io_error[0])
        add_reason(o, "records incomplete: %s", rp->io_error);
    if (c->mode != REPLAY_MODE_SESSIONS)
        add_reason(o, "not a session replay (mode %s)", replay_mode_name(c->mode));
    if (s->measured_duration_s * 1e9 < (double)c->min_measured_ns)
        add_reason(o, "measured traffic %.0f s is under the %.0f s minimum",
                   s->measured_duration_s, (double)c->min_measured_ns / 1e9);
    uint64_t counted = s->records - s->warmup;
    if (counted && (double)s->overflow / (double)counted > c->overflow_limit)
        add_reason(o, "%llu of %llu calls (%.2f %%) exceed the context limit (limit %.2f %%)",
                   (unsigned long long)s->overflow, (unsigned long long)counted,
                   100.0 * (double)s->overflow / (double)counted, 100.0 * c->overflow_limit);
    if (!s->completed)
        add_reason(o, "no call completed");
    if (c->mode == REPLAY_MODE_SESSIONS) {
        if (!c->warm_start)
            add_reason(o, "warm start off");
        if (!c->warmup_call)
            add_reason(o, "warm-up call off");
        if (!c->skip_early_subagents)
            add_reason(o, "subagents before the start point kept");
        if (!c->recycle)
            add_reason(o, "recycling off");
        if (!c->cache_isolation)
            add_reason(o, "cache isolation off");
        if (!c->subagents)
            add_reason(o, "subagents off");
        if (!c->think_end_to_start)
            add_reason(o, "think time start-to-start");
        if (c->idle_cap_ns != 10 * NS_PER_S)
            add_reason(o, "idle cap is not 10 s");
        if (!c->measure_all_types)
            add_reason(o, "only normal calls measured");
        if (!c->ignore_eos)
            add_reason(o, "end-of-sequence honoured");
    }
    o->agentx_valid = o->n_reasons == 0;
}

int replay_verify(const struct replay *rp, char *err)
{
    int64_t n = 0;
    for (const struct rcall *k = rp->inflight; k; k = k->next) {
        if (k->next && k->next->prev != k)
            return err_set(err, "in-flight list broken");
        if (!k->in_target)
            return err_set(err, "call %llu listed but not in the target", (unsigned long long)k->tc.id);
        n++;
    }
    if (n != rp->n_inflight)
        return err_set(err, "in-flight count %lld, listed %lld", (long long)rp->n_inflight, (long long)n);
    int nr = 0;
    int *per_lane = xcalloc((size_t)(rp->n_lanes ? rp->n_lanes : 1), sizeof *per_lane);
    for (const struct runner *rn = rp->runners; rn; rn = rn->next_r) {
        nr++;
        per_lane[rn->lane->idx]++;
        int busy = (rn->inflight != NULL) + loop_timer_armed(&rn->timer) + rn->waiting_join;
        if (busy != 1 && !(busy == 0 && rn->pending_joins > 0)) {
            free(per_lane);
            return err_set(err, "runner %s: in flight %d, timer %d, waiting %d", rn->name,
                           rn->inflight != NULL, loop_timer_armed(&rn->timer), rn->waiting_join);
        }
    }
    int live = 0;
    for (int i = 0; i < rp->n_lanes && rp->cfg.mode == REPLAY_MODE_SESSIONS; i++) {
        if (per_lane[i] != rp->lanes[i].runners) {
            int listed = per_lane[i];
            free(per_lane);
            return err_set(err, "lane %d: %d runners counted, %d listed", i, rp->lanes[i].runners,
                           listed);
        }
        if (rp->lanes[i].live != (rp->lanes[i].runners > 0)) {
            free(per_lane);
            return err_set(err, "lane %d live flag wrong", i);
        }
        live += rp->lanes[i].live;
    }
    free(per_lane);
    if (nr != rp->n_runners)
        return err_set(err, "runner count %d, listed %d", rp->n_runners, nr);
    if (rp->cfg.mode == REPLAY_MODE_SESSIONS && live != rp->live_lanes)
        return err_set(err, "live lanes %d, counted %d", rp->live_lanes, live);
    if (loop_heap_verify(&rp->loop->heap))
        return err_set(err, "timer heap invariant broken");
    return 0;
}

void replay_destroy(struct replay *rp)
{
    if (!rp)
        return;
    /* Calls still in the target (a run cut short): cancel quietly; their
     * done (delivered at once by the targets here) only frees them. */
    rp->destroying = true;
    while (rp->inflight) {
        struct rcall *k = rp->inflight;
        rp->inflight = k->next;
        target_cancel(rp->tg, &k->tc);
    }
    while (rp->runners) {
        struct runner *rn = rp->runners;
        rp->runners = rn->next_r;
        loop_cancel(rp->loop, &rn->timer);
        free(rn);
    }
    loop_cancel(rp->loop, &rp->stop_timer);
    loop_cancel(rp->loop, &rp->grace_timer);
    loop_cancel(rp->loop, &rp->arrival_timer);
    loop_cancel(rp->loop, &rp->tick_timer);
    for (int i = 0; i < rp->n_lanes; i++)
        loop_cancel(rp->loop, &rp->lanes[i].timer);
    metrics_free(&rp->metrics);
    free(rp->lanes);
    free(rp->roots);
    free(rp->order);
    free(rp);
}
