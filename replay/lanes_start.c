/* lanes_start.c: the agentx rules' lanes (lanes.h): the sampler's cursor,
 * fresh and recycled trees, the warm start at t* with its warm-up phase,
 * the measured phase's start, creation, stop and accounting. */
#include "replay/lanes_internal.h"

#include <stdlib.h>
#include <string.h>

#include "traces/base/mem.h"

/* ---------------------------------------------------------------------- */
/* The sampler's cursor, fresh trees, the warm start. */

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

/* The next tree of this rank's share: of the cursor's positions after the
 * initial lanes, rank r of N takes r, r + N, r + 2N, ... (replay_set_share;
 * one process takes them all). */
static uint32_t cursor_take(struct lanes *ls)
{
    for (; ls->cursor_skip > 0; ls->cursor_skip--)
        if (cursor_next(ls) == PLAN_NONE)
            return PLAN_NONE;
    ls->cursor_skip = (uint32_t)ls->rp->share_ranks - 1;
    return cursor_next(ls);
}

/* A tree from its first turn, now (agentic_replay.py
 * _dispatch_recycled_on_lane; also the lanes of --no-warm-start). */
void lanes_fresh_tree(struct lane *ln)
{
    uint32_t t = cursor_take(ln->ls);
    if (t == PLAN_NONE)
        return;
    struct inst *in = lanes_inst_new(ln, t);
    lanes_inst_hold(in);
    in->ss[0].next = 0;
    lanes_stream_fire(&in->ss[0]);
    lanes_inst_release(in);
}


/* Lane ln's tree `t` at t*: the streams live at t* and what completed
 * before it (trajectory_source.py _snapshot_for, _replay_resume_boundaries;
 * branch_orchestrator.py seed_snapshot). 0 when nothing is live. A lane of
 * another rank (!mine) is only counted: its longest warm-up lead joins
 * *max_lead, so that every rank spreads its warm-up as one process would. */
static int lane_snapshot(struct lane *ln, uint32_t t, double t_star_ms, bool mine,
                         int64_t *max_lead, struct warm_req **wr, size_t *n_wr, size_t *cap_wr)
{
    struct lanes *ls = ln->ls;
    const struct plan *p = ls->p;
    const struct plan_tree *pt = &p->trees[t];
    struct plan_resume *res = xcalloc(pt->n_streams ? pt->n_streams : 1, sizeof *res);
    uint32_t *boundary = xcalloc(pt->n_streams ? pt->n_streams : 1, sizeof *boundary);
    int n = plan_snapshot_ms(p, t, t_star_ms, res, (int)pt->n_streams, boundary);
    for (int i = 0; i < n; i++)
        if (res[i].warm_turn != NO_TURN && res[i].lead_ns > *max_lead)
            *max_lead = res[i].lead_ns;
    if (n <= 0 || !mine) {
        free(res);
        free(boundary);
        return n > 0 ? n : 0;
    }
    ls->next_inst = (uint64_t)ln->idx; /* the number it has in one process */
    struct inst *in = lanes_inst_new(ln, t);
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
    lanes_send_turn(s, s->warm_turn, true);
}

/* The measured phase: the duration starts; every live stream's first turn
 * after its offset from t* (a LoopScheduler timer), a waiting root on its
 * join (agentic_replay.py _dispatch_snapshot_for_profiling). */
void lanes_measure_begin(struct lanes *ls)
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
        lanes_inst_hold(in);
        for (uint32_t j = 0; j < in->pt->n_streams; j++) {
            struct sstream *s = &in->ss[j];
            if (s->start_off < 0 || s->st != SS_IDLE)
                continue;
            if (s->start_off > 0) {
                s->st = SS_WAIT;
                s->tm_q = true;
                timerq_at(&ls->q, &s->tm, now + s->start_off, lanes_fire_cb, s);
            } else {
                lanes_stream_fire(s);
            }
        }
        lanes_inst_release(in);
    }
    lanes_idle_check(ls, false);
}

/* After the first `first` instances: this rank's recycled trees, numbered
 * first + rank + k * ranks, from its share of the cursor (cursor_take). */
static void share_rest(struct lanes *ls, uint64_t first)
{
    const struct replay *rp = ls->rp;
    ls->next_inst = first + (uint64_t)rp->share_rank;
    ls->inst_step = (uint64_t)rp->share_ranks;
    ls->cursor_skip = (uint32_t)rp->share_rank;
}

void lanes_start(struct lanes *ls)
{
    struct replay *rp = ls->rp;
    const struct replay_config *c = &rp->cfg;
    ls->starting = true;
    int rank = rp->share_rank, ranks = rp->share_ranks;
    if (!c->warm_start) {
        ls->phase = PH_MEASURE;
        replay_measure_start(rp);
        /* Lane i takes the cursor's position i, in one process or split. */
        for (int i = 0; i < ls->n_lanes && ls->phase == PH_MEASURE; i++) {
            if (ranks > 1 && i % ranks != rank) {
                cursor_next(ls);
                continue;
            }
            if (ranks > 1) {
                ls->next_inst = (uint64_t)i;
                ls->cursor_skip = 0;
            }
            lanes_fresh_tree(&ls->lane[i]);
        }
        if (ranks > 1)
            share_rest(ls, (uint64_t)ls->n_lanes);
        ls->starting = false;
        lanes_idle_check(ls, false);
        return;
    }
    /* Initial lanes from the sampler, each at its own t*; a tree with
     * nothing live at t* is skipped without using a lane
     * (trajectory_source.py _build_trajectories). */
    struct warm_req *wr = NULL;
    size_t n_wr = 0, cap_wr = 0;
    int lane = 0;
    int64_t max_lead = 0;
    uint64_t attempts = 0, max_attempts = (uint64_t)ls->n_lanes + 2 * (uint64_t)ls->p->n_trees;
    while (lane < ls->n_lanes && attempts++ < max_attempts) {
        uint32_t t = cursor_next(ls);
        if (t == PLAN_NONE)
            break;
        double t_star = plan_t_star_draw(ls->p, t, c->start_min_ratio, c->start_max_ratio,
                                         c->seed, lane);
        if (lane_snapshot(&ls->lane[lane], t, t_star, lane % ranks == rank, &max_lead, &wr, &n_wr,
                          &cap_wr))
            lane++;
    }
    share_rest(ls, (uint64_t)lane);
    /* The warm-up: turn next-1 of every live stream, max_tokens 1, each at
     * (max lead - lead) so every lane's t* falls at its end
     * (agentic_replay.py _execute_warmup; leads not clamped). */
    ls->phase = PH_WARMUP;
    ls->warm_pending = ls->warm_calls = n_wr;
    int64_t now = loop_now(rp->loop);
    for (size_t i = 0; i < n_wr; i++) {
        struct sstream *s = wr[i].s;
        int64_t off = max_lead - (wr[i].lead_ns > 0 ? wr[i].lead_ns : 0);
        if (off > 0) {
            s->st = SS_WAIT;
            s->tm_q = true;
            timerq_at(&ls->q, &s->tm, now + off, warm_cb, s);
        } else {
            lanes_send_turn(s, s->warm_turn, true);
        }
    }
    free(wr);
    ls->starting = false;
    if (!n_wr)
        lanes_measure_begin(ls);
    else
        lanes_idle_check(ls, false);
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
    ls->inst_step = 1;
    timerq_init(&ls->q, rp->loop, lanes_after_timers, ls);
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
uint64_t lanes_trees_started(const struct lanes *ls) { return ls->trees; }
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
            lanes_inst_free(ls->lane[i].in);
    timerq_free(&ls->q);
    free(ls->lane);
    free(ls->branch_of);
    free(ls->id_rank);
    free(ls->msgs);
    free(ls->msg_from);
    free(ls->msg_to);
    free(ls);
}
