/* lanes.c: the agentx rules: N session lanes executing the trace's replay
 * plan (traces/plan.h) as AIPerf 0.13.0's inferencex-agentx-mvp scenario
 * does (lanes.h; the rules in replay.h): a call's life in its tree
 * instance, branches, joins, gates, overflow, recycling and the system
 * idle cap. The warm start, creation and accounting are in lanes_start.c.
 * The AIPerf file each rule follows is named beside it (paths under
 * site-packages/aiperf/).
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
#include "replay/lanes_internal.h"

#include <stdlib.h>
#include <string.h>

#include "traces/base/hash.h"
#include "traces/base/mem.h"

static void lane_recycle(struct lane *ln);

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

void lanes_idle_check(struct lanes *ls, bool after_return)
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
void lanes_after_timers(void *arg) { lanes_idle_check(arg, false); }

/* ---------------------------------------------------------------------- */
/* Instances. */


struct inst *lanes_inst_new(struct lane *ln, uint32_t tree)
{
    struct lanes *ls = ln->ls;
    struct replay *rp = ls->rp;
    const struct plan_tree *pt = &ls->p->trees[tree];
    struct inst *in = xcalloc(1, sizeof *in + pt->n_streams * sizeof in->ss[0]);
    in->bs = xcalloc(pt->n_branches ? pt->n_branches : 1, sizeof *in->bs);
    in->ls = ls;
    in->lane = ln;
    in->pt = pt;
    in->id = (int64_t)ls->next_inst;
    ls->next_inst += ls->inst_step;
    ls->trees++;
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

void lanes_inst_free(struct inst *in)
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
    lanes_inst_free(in);
    lane_recycle(ln);
}

void lanes_inst_release(struct inst *in)
{
    ASSERT(in->busy > 0);
    if (--in->busy == 0)
        maybe_drain(in);
}

/* ---------------------------------------------------------------------- */
/* Sending a turn. */

static void on_call_end(void *owner, uint32_t k);
static void branch_dispatch(struct inst *in, uint32_t b);

void lanes_send_turn(struct sstream *s, uint32_t k, bool warm)
{
    struct inst *in = s->in;
    struct lanes *ls = in->ls;
    struct replay *rp = ls->rp;
    const struct plan *p = ls->p;
    const struct plan_stream *ps = pstream(s);
    const struct plan_turn *pt = pturn(s, k);
    uint32_t ti = ps->first_turn + k;
    const struct trace_call *c = &p->tr->calls[pt->call];
    /* Block ids are unique within their trace only: salted with its scope,
     * so that traces sharing an id do not share text or cache. */
    uint64_t salt = hash_mix(0x5c09e1dull, (uint64_t)p->tr->sessions[c->session].scope + 1);
    struct replay_call *call = replay_call_new(rp, c, k, in->key, loop_now(rp->loop), &salt);
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
    lanes_inst_hold(in);
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
    lanes_inst_release(in);
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

void lanes_fire_cb(struct loop *l, struct loop_timer *tm)
{
    struct sstream *s = tm->arg;
    s->tm_q = false;
    s->st = SS_IDLE;
    lanes_stream_fire(s);
}

/* Stream s's next turn is due now: sent, or held by its gates (measured
 * phase; the barrier is off in the warm-up). */
void lanes_stream_fire(struct sstream *s)
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
        timerq_at(&ls->q, &s->tm, loop_now(rp->loop), lanes_fire_cb, s);
        return;
    }
    ls->depth++;
    lanes_send_turn(s, s->next, false);
    ls->depth--;
}

/* The next turn after `delay` (agentic_replay.py _dispatch_next_turn: 0 or
 * none: at once; else a LoopScheduler timer, which the idle cap shifts). */
static void schedule_next(struct sstream *s, int64_t delay)
{
    struct lanes *ls = s->in->ls;
    s->st = SS_IDLE;
    if (delay <= 0) {
        lanes_stream_fire(s);
        return;
    }
    s->st = SS_WAIT;
    s->tm_q = true;
    timerq_at(&ls->q, &s->tm, loop_now(ls->rp->loop) + delay, lanes_fire_cb, s);
}

/* ---------------------------------------------------------------------- */
/* Branches and joins (timing/branch_orchestrator.py). */

static void offset_cb(struct loop *l, struct loop_timer *tm)
{
    struct sstream *s = tm->arg;
    struct inst *in = s->in;
    s->st = SS_IDLE;
    lanes_inst_hold(in);
    lanes_stream_fire(s);
    lanes_inst_release(in);
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
    lanes_inst_hold(in);
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
            lanes_stream_fire(c);
        }
    }
    if (idx != buf)
        free(idx);
    lanes_inst_release(in);
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
        lanes_stream_fire(parent);
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
        lanes_stream_fire(s);
    }
    if (ready != buf)
        free(ready);
}

/* ---------------------------------------------------------------------- */
/* A call's end (credit/callback_handler.py on_credit_return,
 * agentic_replay.py handle_credit_return). */


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
        lanes_measure_begin(ls);
    else
        lanes_idle_check(ls, true);
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
    lanes_inst_hold(in);
    if (s->warm) {
        s->warm = false;
        warm_end(s, k, end, call->tc.error);
        lanes_inst_release(in);
        return;
    }
    const struct plan_stream *ps = pstream(s);
    bool last = k + 1 >= ps->n_turns;
    bool overflow_end = end == REPLAY_END_OVERFLOW && !last;
    if (ls->phase != PH_MEASURE) {
        /* Stopping: nothing new goes out. */
        s->st = SS_DONE;
        lanes_inst_release(in);
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
    lanes_inst_release(in);
    lanes_idle_check(ls, true);
}

static void lane_recycle(struct lane *ln)
{
    struct lanes *ls = ln->ls;
    if (!ls->rp->cfg.recycle || ls->phase != PH_MEASURE || !replay_can_send(ls->rp))
        return;
    ls->recycled++;
    lanes_fresh_tree(ln);
}
