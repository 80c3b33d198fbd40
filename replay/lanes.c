/* lanes.c: the agentx rules: N session lanes executing the trace's replay
 * plan (traces/plan.h) as AIPerf 0.13.0's inferencex-agentx-mvp scenario
 * does (lanes.h; the rules in replay.h). The AIPerf file each rule follows
 * is named beside it (paths under site-packages/aiperf/).
 *
 * Objects:
 *   lane     one of the N concurrency slots (a session slot of
 *            timing/session_tree.py); holds one tree instance at a time,
 *            counted live from its first request;
 *   inst     a tree instance: the plan tree it runs, its cache key and
 *            marker, and per stream and per branch of the tree their state;
 *   sstream  a stream of an instance: its next turn, how many of its turns
 *            completed (the happens-before gates), its timer and its call.
 * A stream is in exactly one state: idle (not started, or done with its
 * warm-up), waiting for its next turn's delay (a timer of the shiftable
 * queue, timerq.h), waiting for its first turn's offset as a child (a
 * plain loop timer: the idle cap does not shorten it), held by a gate,
 * in flight, suspended before a join, or done.
 *
 * Phases: warm-up (the turn before t* of every live stream, max_tokens 1,
 * unmeasured, gates and spawns off), then measured (the duration counts
 * from its start), then stopped. Everything happens in loop callbacks;
 * per call the work is O(1) plus the gates and branches of its own tree. */
#include "replay/lanes.h"

#include <stdlib.h>
#include <string.h>

#include "replay/replay_internal.h"
#include "replay/timerq.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/plan.h"

#define NO_TIME INT64_MIN
#define NO_TURN UINT32_MAX
/* Direct sends nested in one another before one is deferred to a timer
 * due now (a chain of calls that end at once must not grow the stack). */
#define MAX_DEPTH 16

enum sst {
    SS_IDLE = 0, /* not started, or its warm-up returned */
    SS_WAIT,     /* its next turn's delay (or warm-up / start offset) runs
                    in the shiftable queue */
    SS_OFFSET,   /* a child's first-turn offset runs on the loop */
    SS_HELD,     /* its next turn waits for its gates */
    SS_FLIGHT,   /* a call in flight */
    SS_JOIN,     /* suspended before a joining turn */
    SS_DONE,
};

enum phase { PH_NONE = 0, PH_WARMUP, PH_MEASURE, PH_STOPPED };

struct inst;

struct sstream {
    struct inst *in;
    struct loop_timer tm;
    struct replay_call *call;   /* in flight, or NULL */
    uint32_t stream;            /* plan index */
    uint32_t next;              /* next turn to send */
    uint32_t done_turns;        /* turns completed (gates) */
    uint32_t warm_turn;         /* its warm-up turn, NO_TURN: none */
    int64_t start_off;          /* measured start: offset of its first
                                   turn; -1: none */
    uint8_t st;                 /* enum sst */
    bool tm_q;                  /* tm is in the shiftable queue */
    bool child;                 /* a live descendant counted in its branch */
    bool warm;                  /* its call in flight is its warm-up */
};

struct bstate {
    uint32_t outstanding;       /* children registered and not done */
    bool dispatched;            /* spawned (or settled at t*) in this instance */
    bool registered;            /* gates on it count */
};

struct lane {
    struct lanes *ls;
    int idx;
    bool active;                /* its tree sent its first request */
    struct inst *in;            /* NULL: empty */
};

struct inst {
    struct lanes *ls;
    struct lane *lane;
    const struct plan_tree *pt;
    int64_t id;                 /* instance number (records' tree) */
    uint64_t key;               /* the target's session key */
    uint64_t marker;            /* cache-bust marker; 0: none */
    uint64_t shared_key;        /* the trace's shared prefix */
    uint32_t live_children;
    uint32_t n_flight, n_held;
    int busy;                   /* handlers running on it: not freed */
    bool root_done;             /* its root sent its terminal turn */
    struct bstate *bs;          /* pt->n_branches */
    struct sstream ss[];        /* pt->n_streams, the root first */
};

struct warm_req {
    struct sstream *s;
    int64_t lead_ns;
};

struct lanes {
    struct replay *rp;
    const struct plan *p;
    struct rng rng;             /* RNG_TRACE: t* */
    struct timerq q;            /* next-turn, warm-up and start timers */
    struct lane *lane;
    int n_lanes;
    int active;                 /* lanes active (lane.active) */
    int n_inst;
    bool starting;              /* inside lanes_start */
    uint32_t cursor;            /* next plan tree, file order, wrapping */
    enum phase phase;
    int depth;                  /* nested direct sends */
    int64_t idle_start;         /* NO_TIME: none */
    uint64_t warm_pending, warm_calls;
    uint64_t next_inst, recycled, overflowed, idle_jumps;
    int64_t idle_skipped;
    /* Per plan stream: the branch that spawns it (PLAN_NONE: a root) and
     * the rank of its id among its tree's streams (release order). */
    uint32_t *branch_of, *id_rank;
    /* The whole message list of each turn, contiguous per turn:
     * msgs[msg_from[t] .. msg_to[t]) (deltas from its last reset turn). */
    struct plan_msg *msgs;
    uint32_t *msg_from, *msg_to;
};

static inline const struct plan_stream *pstream(const struct sstream *s)
{
    return &s->in->ls->p->streams[s->stream];
}

static inline const struct plan_turn *pturn(const struct sstream *s, uint32_t k)
{
    return &s->in->ls->p->turns[pstream(s)->first_turn + k];
}

static inline struct sstream *stream_of(struct inst *in, uint32_t stream)
{
    ASSERT(stream >= in->pt->first_stream && stream < in->pt->first_stream + in->pt->n_streams);
    return &in->ss[stream - in->pt->first_stream];
}

static inline struct bstate *branch_state(struct inst *in, uint32_t b)
{
    ASSERT(b >= in->pt->first_branch && b < in->pt->first_branch + in->pt->n_branches);
    return &in->bs[b - in->pt->first_branch];
}

/* A recorded delay or offset under --think-cap (not AgentX). */
static int64_t think(const struct lanes *ls, int64_t d)
{
    if (d < 0)
        d = 0;
    if (ls->rp->cfg.think_cap_ns >= 0 && d > ls->rp->cfg.think_cap_ns)
        d = ls->rp->cfg.think_cap_ns;
    return d;
}

/* ---------------------------------------------------------------------- */
/* The system-wide idle cap (timing/strategies/agentic_replay.py
 * enforce_system_idle_cap, common/loop_scheduler.py cap_pending_delay):
 * only when nothing is in flight anywhere, every pending queue timer moves
 * earlier by one amount, so the next fires within the cap of the moment
 * the system went idle (the last return). */

static void idle_check(struct lanes *ls, bool after_return)
{
    struct replay *rp = ls->rp;
    if (rp->cfg.idle_cap_ns < 0 || (ls->phase != PH_WARMUP && ls->phase != PH_MEASURE))
        return;
    int64_t now = loop_now(rp->loop);
    if (rp->n_inflight > 0) {
        ls->idle_start = NO_TIME;
        return;
    }
    if (after_return || ls->idle_start == NO_TIME)
        ls->idle_start = now;
    int64_t next = timerq_next(&ls->q);
    if (next == INT64_MAX)
        return;
    int64_t remaining = rp->cfg.idle_cap_ns - (now - ls->idle_start);
    if (remaining < 0)
        remaining = 0;
    int64_t d = next - now - remaining;
    if (d > 0) {
        timerq_shift(&ls->q, d);
        ls->idle_jumps++;
        ls->idle_skipped += d;
    }
}

/* After every batch of queue timers (the scheduler drain observer). */
static void after_timers(void *arg) { idle_check(arg, false); }

/* ---------------------------------------------------------------------- */
/* Instances. */

static void lane_recycle(struct lane *ln);

static struct inst *inst_new(struct lane *ln, uint32_t tree)
{
    struct lanes *ls = ln->ls;
    struct replay *rp = ls->rp;
    const struct plan_tree *pt = &ls->p->trees[tree];
    struct inst *in = xcalloc(1, sizeof *in + pt->n_streams * sizeof in->ss[0]);
    in->bs = xcalloc(pt->n_branches ? pt->n_branches : 1, sizeof *in->bs);
    in->ls = ls;
    in->lane = ln;
    in->pt = pt;
    in->id = (int64_t)ls->next_inst++;
    uint32_t scope = ls->p->tr->sessions[pt->root_session].scope;
    in->shared_key = hash_mix(hash_mix(0x5ea4edull, rp->cfg.seed), (uint64_t)scope + 1);
    if (rp->cfg.cache_isolation) {
        in->key = hash_mix(hash_mix(rp->cfg.seed, 0xcac4e), (uint64_t)in->id + 1);
        in->marker = in->key | 1;
    } else {
        in->key = hash_mix(0x5c09e, (uint64_t)scope + 1);
    }
    for (uint32_t i = 0; i < pt->n_streams; i++) {
        struct sstream *s = &in->ss[i];
        s->in = in;
        s->stream = pt->first_stream + i;
        s->warm_turn = NO_TURN;
        s->start_off = -1;
    }
    ln->in = in;
    ls->n_inst++;
    return in;
}

static void stream_cancel(struct sstream *s)
{
    struct lanes *ls = s->in->ls;
    if (s->tm_q)
        timerq_cancel(&ls->q, &s->tm);
    else
        loop_cancel(ls->rp->loop, &s->tm);
    s->tm_q = false;
}

static void inst_free(struct inst *in)
{
    for (uint32_t i = 0; i < in->pt->n_streams; i++)
        stream_cancel(&in->ss[i]);
    in->ls->n_inst--;
    free(in->bs);
    free(in);
}

/* The tree drained (its root terminal, every descendant done): the slot is
 * released and the lane recycles (timing/session_tree.py,
 * agentic_replay.py _on_tree_drained). */
static void maybe_drain(struct inst *in)
{
    if (in->busy || !in->root_done || in->live_children || in->n_flight)
        return;
    struct lane *ln = in->lane;
    struct lanes *ls = in->ls;
    ln->in = NULL;
    if (ln->active) {
        ln->active = false;
        ls->active--;
    }
    inst_free(in);
    lane_recycle(ln);
}

static inline void inst_hold(struct inst *in) { in->busy++; }
static void inst_release(struct inst *in)
{
    ASSERT(in->busy > 0);
    if (--in->busy == 0)
        maybe_drain(in);
}

/* ---------------------------------------------------------------------- */
/* Sending a turn. */

static void on_call_end(void *owner, uint32_t k);
static void stream_fire(struct sstream *s);
static void branch_dispatch(struct inst *in, uint32_t b);

static void send_turn(struct sstream *s, uint32_t k, bool warm)
{
    struct inst *in = s->in;
    struct lanes *ls = in->ls;
    struct replay *rp = ls->rp;
    const struct plan *p = ls->p;
    const struct plan_stream *ps = pstream(s);
    const struct plan_turn *pt = pturn(s, k);
    uint32_t ti = ps->first_turn + k;
    const struct trace_call *c = &p->tr->calls[pt->call];
    struct replay_call *call = replay_call_new(rp, c, k, in->key, loop_now(rp->loop));
    call->on_end = on_call_end;
    call->owner = s;
    call->lane_idx = in->lane->idx;
    call->tree = in->id;
    call->session_uid = hash_mix(hash_mix(0x5e55104e, (uint64_t)in->id + 1), (uint64_t)s->stream + 1);
    snprintf(call->session_name, sizeof call->session_name, "%s@%lld", ps->id, (long long)in->id);
    call->warmup = warm;
    call->hit_blocks = pt->hit_blocks;
    call->total_blocks = pt->total_blocks;
    /* The marker is one more token (cache_bust.py, worker.py). */
    call->tc.prompt_tokens = c->prompt_tokens + (in->marker ? 1 : 0);
    call->tc.max_tokens = warm ? 1 : pt->max_tokens;
    /* Block ids are unique within their trace only: salted with its scope,
     * so that traces sharing an id do not share text or cache. */
    uint64_t salt = hash_mix(0x5c09e1dull, (uint64_t)p->tr->sessions[c->session].scope + 1);
    for (uint32_t i = 0; i < c->n_blocks; i++)
        call->blocks[i] = hash_mix(call->blocks[i], salt);
    if (in->marker) {
        call->tc.shared_key = in->shared_key;
        call->tc.shared_blocks = in->pt->shared_blocks;
    }
    call->tc.msgs = ls->msgs + ls->msg_from[ti];
    call->tc.n_msgs = ls->msg_to[ti] - ls->msg_from[ti];
    call->tc.marker = in->marker;
    if (!in->lane->active) {
        in->lane->active = true;
        ls->active++;
    }
    s->st = SS_FLIGHT;
    s->call = call;
    s->warm = warm;
    in->n_flight++;
    inst_hold(in);
    /* Branches that began while this turn was in flight start when it is
     * sent (branch_orchestrator.py on_credit_issued: roots, measured
     * phase), the children counted before the send so that the instance
     * outlives a call that ends at once. */
    uint32_t at_issue[16], n_issue = 0;
    if (!warm && ls->phase == PH_MEASURE && ps->kind == PLAN_STREAM_ROOT)
        for (uint32_t i = 0; i < pt->n_spawn; i++) {
            uint32_t b = p->branch_refs[pt->spawn + i];
            if (p->branches[b].dispatch == PLAN_AT_ISSUE && !branch_state(in, b)->dispatched) {
                if (n_issue < ARRAY_LEN(at_issue))
                    at_issue[n_issue++] = b;
                branch_state(in, b)->dispatched = true;
            }
        }
    replay_call_send(rp, call);
    for (uint32_t i = 0; i < n_issue; i++)
        branch_dispatch(in, at_issue[i]);
    inst_release(in);
}

/* All of turn t's predecessors completed in this instance
 * (timing/replay_dependencies.py ReplayBarrierCoordinator._ready). */
static bool gates_ready(struct inst *in, const struct plan_turn *t)
{
    const struct plan *p = in->ls->p;
    for (uint32_t i = 0; i < t->n_after; i++) {
        const struct plan_ref *r = &p->refs[t->after + i];
        if (stream_of(in, r->stream)->done_turns <= r->turn)
            return false;
    }
    return true;
}

static void fire_cb(struct loop *l, struct loop_timer *tm)
{
    struct sstream *s = tm->arg;
    s->tm_q = false;
    s->st = SS_IDLE;
    stream_fire(s);
}

/* Stream s's next turn is due now: sent, or held by its gates (measured
 * phase; the barrier is off in the warm-up). */
static void stream_fire(struct sstream *s)
{
    struct inst *in = s->in;
    struct lanes *ls = in->ls;
    struct replay *rp = ls->rp;
    ASSERT(s->st == SS_IDLE && s->next < pstream(s)->n_turns);
    if (ls->phase != PH_MEASURE || !replay_can_send(rp)) {
        s->st = SS_DONE; /* the run stops: dropped */
        return;
    }
    if (!gates_ready(in, pturn(s, s->next))) {
        s->st = SS_HELD;
        in->n_held++;
        return;
    }
    if (ls->depth >= MAX_DEPTH) {
        s->st = SS_WAIT;
        s->tm_q = true;
        timerq_at(&ls->q, &s->tm, loop_now(rp->loop), fire_cb, s);
        return;
    }
    ls->depth++;
    send_turn(s, s->next, false);
    ls->depth--;
}

/* The next turn after `delay` (agentic_replay.py _dispatch_next_turn: 0 or
 * none: at once; else a LoopScheduler timer, which the idle cap shifts). */
static void schedule_next(struct sstream *s, int64_t delay)
{
    struct lanes *ls = s->in->ls;
    s->st = SS_IDLE;
    if (delay <= 0) {
        stream_fire(s);
        return;
    }
    s->st = SS_WAIT;
    s->tm_q = true;
    timerq_at(&ls->q, &s->tm, loop_now(ls->rp->loop) + delay, fire_cb, s);
}

/* ---------------------------------------------------------------------- */
/* Branches and joins (timing/branch_orchestrator.py). */

static void offset_cb(struct loop *l, struct loop_timer *tm)
{
    struct sstream *s = tm->arg;
    struct inst *in = s->in;
    s->st = SS_IDLE;
    inst_hold(in);
    stream_fire(s);
    inst_release(in);
}

static void child_done(struct sstream *s);

/* Starts branch b's children: each after its recorded offset from the
 * dispatch moment (an asyncio sleep, not shortened by the idle cap:
 * _start_delayed_first_turn), at once when 0. Every child counts as one
 * of the tree's descendants and of the branch's outstanding children
 * before any is sent (_spawn_children_and_register_gates). */
static void branch_dispatch(struct inst *in, uint32_t b)
{
    struct lanes *ls = in->ls;
    const struct plan *p = ls->p;
    const struct plan_branch *br = &p->branches[b];
    struct bstate *bs = branch_state(in, b);
    bs->dispatched = true;
    if (!ls->rp->cfg.subagents && br->n_children &&
        p->streams[p->children[br->children]].kind == PLAN_STREAM_SUBAGENT)
        return; /* --no-subagents */
    bs->registered = true;
    inst_hold(in);
    uint32_t buf[32], *idx = br->n_children <= ARRAY_LEN(buf) ? buf : xmalloc(br->n_children * sizeof *idx);
    uint32_t n = 0;
    for (uint32_t i = 0; i < br->n_children; i++) {
        struct sstream *c = stream_of(in, p->children[br->children + i]);
        if (c->st != SS_IDLE || c->child)
            continue; /* already live (settled at t*) */
        c->child = true;
        c->next = 0;
        bs->outstanding++;
        in->live_children++;
        idx[n++] = i;
    }
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = idx[j];
        struct sstream *c = stream_of(in, p->children[br->children + i]);
        if (!pstream(c)->n_turns) {
            child_done(c); /* an empty stream is done at once */
            continue;
        }
        int64_t off = think(ls, p->child_offset_ns[br->children + i]);
        if (off > 0) {
            c->st = SS_OFFSET;
            loop_at(ls->rp->loop, &c->tm, loop_now(ls->rp->loop) + off, offset_cb, c);
        } else {
            stream_fire(c);
        }
    }
    if (idx != buf)
        free(idx);
    inst_release(in);
}

/* Turn t of the root waits for a branch with children still running. */
static bool join_blocked(struct inst *in, const struct plan_turn *t)
{
    const struct plan *p = in->ls->p;
    for (uint32_t i = 0; i < t->n_join; i++) {
        struct bstate *bs = branch_state(in, p->branch_refs[t->join + i]);
        if (bs->registered && bs->outstanding)
            return true;
    }
    return false;
}

/* A child stream is done (its last turn returned, whatever its outcome,
 * or it stopped early): its branch's count drops, and a parent suspended
 * on the join fires its joining turn at once, its own delay dropped
 * (_release_blocked_join, dispatch_join_turn). */
static void child_done(struct sstream *s)
{
    struct inst *in = s->in;
    const struct plan *p = in->ls->p;
    s->st = SS_DONE;
    if (!s->child)
        return;
    s->child = false;
    uint32_t b = in->ls->branch_of[s->stream];
    struct bstate *bs = branch_state(in, b);
    ASSERT(bs->outstanding > 0 && in->live_children > 0);
    bs->outstanding--;
    in->live_children--;
    const struct plan_branch *br = &p->branches[b];
    if (bs->outstanding || br->join_turn == PLAN_NONE)
        return;
    struct sstream *parent = stream_of(in, br->parent);
    if (parent->st == SS_JOIN && parent->next == br->join_turn &&
        !join_blocked(in, pturn(parent, parent->next))) {
        parent->st = SS_IDLE;
        stream_fire(parent);
    }
}

/* Held turns of the instance whose gates are now complete go out, in
 * (stream id, turn) order (ReplayBarrierCoordinator.complete). */
static void release_held(struct inst *in)
{
    if (!in->n_held)
        return;
    struct lanes *ls = in->ls;
    struct sstream *buf[32], **ready = in->pt->n_streams <= ARRAY_LEN(buf)
                                          ? buf
                                          : xmalloc(in->pt->n_streams * sizeof *ready);
    uint32_t n = 0;
    for (uint32_t i = 0; i < in->pt->n_streams; i++) {
        struct sstream *s = &in->ss[i];
        if (s->st != SS_HELD || !gates_ready(in, pturn(s, s->next)))
            continue;
        uint32_t j = n++;
        while (j > 0 && ls->id_rank[ready[j - 1]->stream] > ls->id_rank[s->stream]) {
            ready[j] = ready[j - 1];
            j--;
        }
        ready[j] = s;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct sstream *s = ready[i];
        if (s->st != SS_HELD)
            continue;
        in->n_held--;
        s->st = SS_IDLE;
        stream_fire(s);
    }
    if (ready != buf)
        free(ready);
}

/* ---------------------------------------------------------------------- */
/* A call's end (credit/callback_handler.py on_credit_return,
 * agentic_replay.py handle_credit_return). */

static void measure_begin(struct lanes *ls);

static void warm_end(struct sstream *s, uint32_t k, enum replay_end end, const char *error)
{
    struct inst *in = s->in;
    struct lanes *ls = in->ls;
    s->st = SS_IDLE;
    ASSERT(ls->warm_pending > 0);
    ls->warm_pending--;
    /* A root warm-up that fails aborts the run
     * (callback_handler.py _handle_warmup_failure). */
    if (end != REPLAY_END_OK && pstream(s)->kind == PLAN_STREAM_ROOT && ls->phase == PH_WARMUP) {
        replay_abort(ls->rp, "the warm-up request of %s turn %u failed (%s): a root warm-up "
                             "must succeed, the run is aborted",
                     pstream(s)->id, k, error && *error ? error : "cancelled");
        return;
    }
    if (!ls->warm_pending && ls->phase == PH_WARMUP)
        measure_begin(ls);
    else
        idle_check(ls, true);
}

static void on_call_end(void *owner, uint32_t k)
{
    struct sstream *s = owner;
    struct inst *in = s->in;
    struct lanes *ls = in->ls;
    const struct plan *p = ls->p;
    struct replay_call *call = s->call;
    ASSERT(call && s->st == SS_FLIGHT);
    enum replay_end end = (enum replay_end)call->end;
    s->call = NULL;
    in->n_flight--;
    inst_hold(in);
    if (s->warm) {
        s->warm = false;
        warm_end(s, k, end, call->tc.error);
        inst_release(in);
        return;
    }
    const struct plan_stream *ps = pstream(s);
    bool last = k + 1 >= ps->n_turns;
    bool overflow_end = end == REPLAY_END_OVERFLOW && !last;
    if (ls->phase != PH_MEASURE) {
        /* Stopping: nothing new goes out. */
        s->st = SS_DONE;
        inst_release(in);
        return;
    }
    if (s->done_turns < k + 1)
        s->done_turns = k + 1;
    if (overflow_end)
        ls->overflowed++;
    s->st = SS_IDLE;
    /* The child's final turn (any outcome) or an overflow: done. */
    if ((last || overflow_end) && ps->kind != PLAN_STREAM_ROOT)
        child_done(s);
    /* Spawns at return of turn k (branch_orchestrator.py intercept), not
     * after an overflow. */
    if (!overflow_end) {
        const struct plan_turn *pt = pturn(s, k);
        for (uint32_t i = 0; i < pt->n_spawn; i++) {
            uint32_t b = p->branch_refs[pt->spawn + i];
            if (!branch_state(in, b)->dispatched)
                branch_dispatch(in, b);
        }
    }
    if (last || overflow_end) {
        s->st = SS_DONE;
        if (ps->kind == PLAN_STREAM_ROOT)
            in->root_done = true; /* session_tree.py on_root_terminal */
    } else {
        s->next = k + 1;
        const struct plan_turn *nt = pturn(s, s->next);
        if (join_blocked(in, nt))
            s->st = SS_JOIN; /* _maybe_suspend_parent */
        else
            schedule_next(s, think(ls, nt->delay_ns));
    }
    release_held(in);
    inst_release(in);
    idle_check(ls, true);
}

/* ---------------------------------------------------------------------- */
/* Lanes: the sampler's cursor, recycling, warm start. */

/* The next tree from the global cursor in file order whose root has turns
 * (dataset_samplers.py sequential; trajectory_source.py
 * next_recycle_conversation_id skips roots without turns). */
static uint32_t cursor_next(struct lanes *ls)
{
    const struct plan *p = ls->p;
    for (uint32_t tries = 0; tries < p->n_trees; tries++) {
        uint32_t t = ls->cursor;
        ls->cursor = (ls->cursor + 1) % p->n_trees;
        if (p->streams[p->trees[t].first_stream].n_turns)
            return t;
    }
    return PLAN_NONE;
}

/* A tree from its first turn, now (agentic_replay.py
 * _dispatch_recycled_on_lane; also the lanes of --no-warm-start). */
static void lane_fresh(struct lane *ln)
{
    uint32_t t = cursor_next(ln->ls);
    if (t == PLAN_NONE)
        return;
    struct inst *in = inst_new(ln, t);
    inst_hold(in);
    in->ss[0].next = 0;
    stream_fire(&in->ss[0]);
    inst_release(in);
}

static void lane_recycle(struct lane *ln)
{
    struct lanes *ls = ln->ls;
    if (!ls->rp->cfg.recycle || ls->phase != PH_MEASURE || !replay_can_send(ls->rp))
        return;
    ls->recycled++;
    lane_fresh(ln);
}

/* Lane ln's tree `t` at t*: the streams live at t* and what completed
 * before it (trajectory_source.py _snapshot_for, _replay_resume_boundaries;
 * branch_orchestrator.py seed_snapshot). 0 when nothing is live. */
static int lane_snapshot(struct lane *ln, uint32_t t, double t_star_ms, struct warm_req **wr,
                         size_t *n_wr, size_t *cap_wr)
{
    struct lanes *ls = ln->ls;
    const struct plan *p = ls->p;
    const struct plan_tree *pt = &p->trees[t];
    struct plan_resume *res = xcalloc(pt->n_streams ? pt->n_streams : 1, sizeof *res);
    uint32_t *boundary = xcalloc(pt->n_streams ? pt->n_streams : 1, sizeof *boundary);
    int n = plan_snapshot_ms(p, t, t_star_ms, res, (int)pt->n_streams, boundary);
    if (n <= 0) {
        free(res);
        free(boundary);
        return 0;
    }
    struct inst *in = inst_new(ln, t);
    for (uint32_t i = 0; i < pt->n_streams; i++)
        in->ss[i].done_turns = boundary[i];
    uint32_t root_next = p->streams[pt->first_stream].n_turns;
    in->root_done = true; /* a rootless lane drains on its children */
    for (int i = 0; i < n; i++) {
        struct sstream *s = stream_of(in, res[i].stream);
        s->next = res[i].next_turn;
        s->warm_turn = res[i].warm_turn;
        if (pstream(s)->kind == PLAN_STREAM_ROOT) {
            in->root_done = false;
            root_next = res[i].next_turn;
        }
        if (res[i].waiting)
            s->st = SS_JOIN;
        else
            s->start_off = res[i].offset_ns;
        if (res[i].branch != PLAN_NONE) {
            struct bstate *bs = branch_state(in, res[i].branch);
            bs->dispatched = bs->registered = true;
            bs->outstanding++;
            s->child = true;
            in->live_children++;
        }
        if (s->warm_turn != NO_TURN) {
            if (*n_wr == *cap_wr) {
                *cap_wr = *cap_wr ? *cap_wr * 2 : 64;
                *wr = xrealloc(*wr, *cap_wr * sizeof **wr);
            }
            (*wr)[(*n_wr)++] = (struct warm_req){s, res[i].lead_ns};
        }
    }
    /* Branches spawned before t* never spawn again; one without a live
     * child counts as satisfied (_ensure_seeded_join). */
    for (uint32_t b = pt->first_branch; b < pt->first_branch + pt->n_branches; b++) {
        const struct plan_branch *br = &p->branches[b];
        if (p->streams[br->parent].kind == PLAN_STREAM_ROOT && br->spawn_turn < root_next) {
            struct bstate *bs = branch_state(in, b);
            bs->dispatched = bs->registered = true;
        }
    }
    free(res);
    free(boundary);
    return n;
}

static void warm_cb(struct loop *l, struct loop_timer *tm)
{
    struct sstream *s = tm->arg;
    s->tm_q = false;
    s->st = SS_IDLE;
    send_turn(s, s->warm_turn, true);
}

/* The measured phase: the duration starts; every live stream's first turn
 * after its offset from t* (a LoopScheduler timer), a waiting root on its
 * join (agentic_replay.py _dispatch_snapshot_for_profiling). */
static void measure_begin(struct lanes *ls)
{
    struct replay *rp = ls->rp;
    ls->phase = PH_MEASURE;
    ls->idle_start = NO_TIME;
    replay_measure_start(rp);
    int64_t now = loop_now(rp->loop);
    for (int i = 0; i < ls->n_lanes; i++) {
        struct inst *in = ls->lane[i].in;
        if (!in)
            continue;
        inst_hold(in);
        for (uint32_t j = 0; j < in->pt->n_streams; j++) {
            struct sstream *s = &in->ss[j];
            if (s->start_off < 0 || s->st != SS_IDLE)
                continue;
            if (s->start_off > 0) {
                s->st = SS_WAIT;
                s->tm_q = true;
                timerq_at(&ls->q, &s->tm, now + s->start_off, fire_cb, s);
            } else {
                stream_fire(s);
            }
        }
        inst_release(in);
    }
    idle_check(ls, false);
}

void lanes_start(struct lanes *ls)
{
    struct replay *rp = ls->rp;
    const struct replay_config *c = &rp->cfg;
    ls->starting = true;
    if (!c->warm_start) {
        ls->phase = PH_MEASURE;
        replay_measure_start(rp);
        for (int i = 0; i < ls->n_lanes && ls->phase == PH_MEASURE; i++)
            lane_fresh(&ls->lane[i]);
        ls->starting = false;
        idle_check(ls, false);
        return;
    }
    /* Initial lanes from the sampler, each at its own t*; a tree with
     * nothing live at t* is skipped without using a lane
     * (trajectory_source.py _build_trajectories). */
    struct warm_req *wr = NULL;
    size_t n_wr = 0, cap_wr = 0;
    int lane = 0;
    uint64_t attempts = 0, max_attempts = (uint64_t)ls->n_lanes + 2 * (uint64_t)ls->p->n_trees;
    while (lane < ls->n_lanes && attempts++ < max_attempts) {
        uint32_t t = cursor_next(ls);
        if (t == PLAN_NONE)
            break;
        /* t* uniform over the ratio range of the tree's recorded span, in
         * AIPerf's ms; exactly there for a single point (our own random
         * stream: AIPerf's numpy draw is not reproduced). */
        double lo = c->start_min_ratio, hi = c->start_max_ratio;
        double ratio = hi > lo ? lo + rng_uniform(&ls->rng) * (hi - lo) : lo;
        double t_star = plan_t_star_ms(ls->p, t, ratio);
        if (lane_snapshot(&ls->lane[lane], t, t_star, &wr, &n_wr, &cap_wr))
            lane++;
    }
    /* The warm-up: turn next-1 of every live stream, max_tokens 1, each at
     * (max lead - lead) so every lane's t* falls at its end
     * (agentic_replay.py _execute_warmup; leads not clamped). */
    ls->phase = PH_WARMUP;
    ls->warm_pending = ls->warm_calls = n_wr;
    int64_t max_lead = 0;
    for (size_t i = 0; i < n_wr; i++)
        if (wr[i].lead_ns > max_lead)
            max_lead = wr[i].lead_ns;
    int64_t now = loop_now(rp->loop);
    for (size_t i = 0; i < n_wr; i++) {
        struct sstream *s = wr[i].s;
        int64_t off = max_lead - (wr[i].lead_ns > 0 ? wr[i].lead_ns : 0);
        if (off > 0) {
            s->st = SS_WAIT;
            s->tm_q = true;
            timerq_at(&ls->q, &s->tm, now + off, warm_cb, s);
        } else {
            send_turn(s, s->warm_turn, true);
        }
    }
    free(wr);
    ls->starting = false;
    if (!n_wr)
        measure_begin(ls);
    else
        idle_check(ls, false);
}

/* ---------------------------------------------------------------------- */
/* Creation, stop, accounting. */

struct lanes *lanes_create(struct replay *rp, const struct plan *p, char *err)
{
    uint32_t roots = 0;
    for (uint32_t t = 0; t < p->n_trees; t++)
        roots += p->streams[p->trees[t].first_stream].n_turns > 0;
    if (!roots) {
        err_set(err, "the trace has no session with calls to replay");
        return NULL;
    }
    struct lanes *ls = xcalloc(1, sizeof *ls);
    ls->rp = rp;
    ls->p = p;
    ls->idle_start = NO_TIME;
    rng_init(&ls->rng, rp->cfg.seed, RNG_TRACE);
    timerq_init(&ls->q, rp->loop, after_timers, ls);
    ls->n_lanes = rp->cfg.concurrency;
    ls->lane = xcalloc((size_t)ls->n_lanes, sizeof *ls->lane);
    for (int i = 0; i < ls->n_lanes; i++) {
        ls->lane[i].ls = ls;
        ls->lane[i].idx = i;
    }
    size_t ns = p->n_streams ? p->n_streams : 1;
    ls->branch_of = xmalloc(ns * sizeof *ls->branch_of);
    ls->id_rank = xmalloc(ns * sizeof *ls->id_rank);
    for (uint32_t s = 0; s < p->n_streams; s++)
        ls->branch_of[s] = PLAN_NONE;
    for (uint32_t b = 0; b < p->n_branches; b++)
        for (uint32_t i = 0; i < p->branches[b].n_children; i++)
            ls->branch_of[p->children[p->branches[b].children + i]] = b;
    uint32_t *order = xmalloc(ns * sizeof *order);
    for (uint32_t t = 0; t < p->n_trees; t++) {
        const struct plan_tree *pt = &p->trees[t];
        /* By id (insertion sort: a tree has a few streams). */
        for (uint32_t i = 0; i < pt->n_streams; i++) {
            uint32_t j = i, x = pt->first_stream + i;
            while (j > 0 && strcmp(p->streams[order[j - 1]].id, p->streams[x].id) > 0) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = x;
        }
        for (uint32_t i = 0; i < pt->n_streams; i++)
            ls->id_rank[order[i]] = i;
    }
    free(order);
    /* Each turn's whole message list, laid out contiguously: the deltas
     * of its stream from its last reset turn on (workers/worker.py). */
    size_t nt = p->n_turns ? p->n_turns : 1, total = 0;
    ls->msg_from = xmalloc(nt * sizeof *ls->msg_from);
    ls->msg_to = xmalloc(nt * sizeof *ls->msg_to);
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (uint32_t s = 0; s < p->n_streams; s++) {
            const struct plan_stream *ps = &p->streams[s];
            uint32_t from = ps->first_turn;
            for (uint32_t k = 0; k < ps->n_turns; k++) {
                uint32_t ti = ps->first_turn + k;
                if (p->turns[ti].reset || k == 0)
                    from = ti;
                if (pass)
                    ls->msg_from[ti] = (uint32_t)at;
                for (uint32_t u = from; u <= ti; u++) {
                    const struct plan_turn *x = &p->turns[u];
                    if (pass)
                        memcpy(ls->msgs + at, p->msgs + x->msgs, x->n_msgs * sizeof *ls->msgs);
                    at += x->n_msgs;
                }
                if (pass)
                    ls->msg_to[ti] = (uint32_t)at;
            }
        }
        if (!pass) {
            total = at;
            ls->msgs = xmalloc((total ? total : 1) * sizeof *ls->msgs);
        }
    }
    return ls;
}

static void drop_cb(struct loop_timer *tm)
{
    struct sstream *s = tm->arg;
    s->tm_q = false;
    s->st = SS_DONE;
}

void lanes_stop(struct lanes *ls)
{
    /* Pending timers cancelled, held turns and child offsets dropped
     * (timing/phase/runner.py at the duration). */
    ls->phase = PH_STOPPED;
    timerq_clear(&ls->q, drop_cb);
    for (int i = 0; i < ls->n_lanes; i++) {
        struct inst *in = ls->lane[i].in;
        if (!in)
            continue;
        for (uint32_t j = 0; j < in->pt->n_streams; j++) {
            struct sstream *s = &in->ss[j];
            if (s->st == SS_OFFSET)
                loop_cancel(ls->rp->loop, &s->tm);
            if (s->st == SS_OFFSET || s->st == SS_HELD || s->st == SS_JOIN || s->st == SS_IDLE)
                s->st = SS_DONE;
        }
        in->n_held = 0;
    }
}

int lanes_active(const struct lanes *ls) { return ls->active; }
bool lanes_idle(const struct lanes *ls)
{
    return ls->phase == PH_STOPPED || (!ls->n_inst && !ls->starting);
}
uint64_t lanes_trees_started(const struct lanes *ls) { return ls->next_inst; }
uint64_t lanes_recycled(const struct lanes *ls) { return ls->recycled; }

void lanes_outcome(const struct lanes *ls, struct replay_outcome *o)
{
    o->agentx = true;
    o->warmup_calls = ls->warm_calls;
    o->idle_jumps = ls->idle_jumps;
    o->idle_skipped_ns = ls->idle_skipped;
    o->streams_overflowed = ls->overflowed;
}

int lanes_verify(const struct lanes *ls, char *err)
{
    if (timerq_verify(&ls->q))
        return err_set(err, "the shiftable timer queue is broken");
    int active = 0, n_inst = 0;
    for (int i = 0; i < ls->n_lanes; i++) {
        const struct lane *ln = &ls->lane[i];
        active += ln->active;
        const struct inst *in = ln->in;
        if (!in) {
            if (ln->active)
                return err_set(err, "lane %d: active without a tree", i);
            continue;
        }
        n_inst++;
        uint32_t flight = 0, held = 0, children = 0;
        for (uint32_t j = 0; j < in->pt->n_streams; j++) {
            const struct sstream *s = &in->ss[j];
            flight += s->st == SS_FLIGHT;
            held += s->st == SS_HELD;
            children += s->child;
            if ((s->st == SS_FLIGHT) != (s->call != NULL))
                return err_set(err, "lane %d stream %s: state %d with call %p", i,
                               ls->p->streams[s->stream].id, s->st, (void *)s->call);
            bool armed = loop_timer_armed(&s->tm);
            if ((s->st == SS_WAIT) != (armed && s->tm_q) || (s->st == SS_OFFSET) != (armed && !s->tm_q))
                return err_set(err, "lane %d stream %s: state %d, timer %d (queue %d)", i,
                               ls->p->streams[s->stream].id, s->st, armed, s->tm_q);
        }
        if (flight != in->n_flight || held != in->n_held || children != in->live_children)
            return err_set(err, "lane %d: in flight %u/%u, held %u/%u, children %u/%u", i, flight,
                           in->n_flight, held, in->n_held, children, in->live_children);
        for (uint32_t b = 0; b < in->pt->n_branches; b++) {
            uint32_t out = 0;
            for (uint32_t j = 0; j < in->pt->n_streams; j++)
                out += in->ss[j].child && ls->branch_of[in->ss[j].stream] == in->pt->first_branch + b;
            if (out != in->bs[b].outstanding)
                return err_set(err, "lane %d branch %u: %u outstanding, %u counted", i, b,
                               in->bs[b].outstanding, out);
        }
    }
    if (active != ls->active || n_inst != ls->n_inst)
        return err_set(err, "active lanes %d/%d, trees %d/%d", active, ls->active, n_inst, ls->n_inst);
    return 0;
}

void lanes_destroy(struct lanes *ls)
{
    if (!ls)
        return;
    for (int i = 0; i < ls->n_lanes; i++)
        if (ls->lane[i].in)
            inst_free(ls->lane[i].in);
    timerq_free(&ls->q);
    free(ls->lane);
    free(ls->branch_of);
    free(ls->id_rank);
    free(ls->msgs);
    free(ls->msg_from);
    free(ls->msg_to);
    free(ls);
}
