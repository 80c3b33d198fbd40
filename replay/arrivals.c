/* arrivals.c: open-loop arrivals (timestamp, Poisson, gamma) and
 * closed-loop lanes over independent calls (arrivals.h). */
#include "replay/arrivals.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay/replay_internal.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"

struct closed_lane {
    struct arrivals *a;
    int idx;
    struct loop_timer timer;    /* armed: its next call's send */
};

struct arrivals {
    struct replay *rp;
    struct rng rng;             /* RNG_ARRIVAL: Poisson and gamma gaps */
    uint32_t *order;            /* call indices in sending order */
    uint32_t n_order, cursor;   /* cursor: the next call's place in order */
    int64_t cycle;              /* passes over order so far */
    uint32_t step;              /* places the cursor moves per call: the
                                   ranks sharing the run (replay_set_share) */
    int64_t t0_ns;              /* timestamp mode: the first call's time */
    bool done;                  /* no arrival will be armed again */
    struct loop_timer timer;    /* the next open-loop arrival */
    int64_t next_ns;            /* its intended time */
    struct closed_lane *lane;   /* closed mode */
    int n_lanes;
};

/* The target's session key of an independent call: its id scope's, so
 * calls sharing prefixes may hit the cache. */
static uint64_t cache_key(const struct replay *rp, const struct trace_call *c)
{
    return hash_mix(0x5c09e, (uint64_t)rp->tr->sessions[c->session].scope + 1);
}

/* Moves the cursor k places through order, cycling; a timestamped trace
 * is played once. */
static void advance(struct arrivals *a, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++)
        if (++a->cursor == a->n_order) {
            a->cursor = 0;
            a->cycle++;
            if (a->rp->cfg.mode == REPLAY_MODE_TIMESTAMP)
                a->done = true;
        }
}

/* The next call in order, due at intended_ns. */
static struct replay_call *next_call(struct arrivals *a, int64_t intended_ns)
{
    struct replay *rp = a->rp;
    uint32_t ci = a->order[a->cursor];
    const struct trace_call *c = &rp->tr->calls[ci];
    struct replay_call *call = replay_call_new(rp, c, c->index, cache_key(rp, c), intended_ns, NULL);
    const char *name = trace_str(rp->tr, rp->tr->sessions[c->session].name);
    if (name)
        snprintf(call->session_name, sizeof call->session_name, "%s@%lld", name, (long long)a->cycle);
    else
        snprintf(call->session_name, sizeof call->session_name, "s%u@%lld", c->session,
                 (long long)a->cycle);
    call->session_uid = hash_mix(hash_mix(0x0be11, (uint64_t)a->cycle + 1), (uint64_t)c->session + 1);
    call->tree = a->cycle;
    advance(a, a->step);
    return call;
}

/* The gap to the arrival after the next (Poisson, gamma), in ns. */
static int64_t next_gap(struct arrivals *a)
{
    const struct replay_config *c = &a->rp->cfg;
    if (c->mode == REPLAY_MODE_POISSON)
        return (int64_t)llround(rng_exp(&a->rng, 1e9 / c->rate));
    double shape = 1.0 / (c->gamma_cv * c->gamma_cv);
    double scale = 1e9 / (c->rate * shape);
    return (int64_t)llround(rng_gamma(&a->rng, shape, scale));
}

static void on_arrival(struct loop *l, struct loop_timer *tm)
{
    struct arrivals *a = tm->arg;
    struct replay *rp = a->rp;
    if (rp->stopping || rp->requests_hit)
        return;
    /* The intended time, not the (possibly late) firing time: on the real
     * clock a stalled generator must show as schedule lag, not as fewer
     * arrivals (wrk2's coordinated-omission rule). */
    int64_t intended = a->next_ns;
    struct replay_call *call = next_call(a, intended);
    int64_t at;
    if (a->done) {
        at = INT64_MAX;
    } else if (rp->cfg.mode == REPLAY_MODE_TIMESTAMP) {
        double rel = (double)(rp->tr->calls[a->order[a->cursor]].t_ns - a->t0_ns) * rp->cfg.time_scale;
        at = (int64_t)llround(rel);
    } else {
        /* The other ranks' arrivals in between are drawn, not sent. */
        at = intended;
        for (uint32_t k = 0; k < a->step; k++)
            at += next_gap(a);
    }
    if (at >= rp->cfg.duration_ns) {
        a->done = true;
    } else {
        a->next_ns = at;
        loop_at(l, &a->timer, at, on_arrival, a);
    }
    replay_call_send(rp, call);
    replay_maybe_finish(rp);
}

static void closed_lane_send(struct loop *l, struct loop_timer *tm);

/* The owner continuation of a closed lane's call: the next one at once. */
static void closed_lane_after_call(void *owner, uint32_t call_index)
{
    struct closed_lane *ln = owner;
    struct replay *rp = ln->a->rp;
    int64_t now = loop_now(rp->loop);
    if (!rp->stopping && now < rp->cfg.duration_ns)
        loop_at(rp->loop, &ln->timer, now, closed_lane_send, ln);
}

static void closed_lane_send(struct loop *l, struct loop_timer *tm)
{
    struct closed_lane *ln = tm->arg;
    struct replay *rp = ln->a->rp;
    if (rp->stopping || rp->requests_hit || tm->at_ns >= rp->cfg.duration_ns) {
        replay_maybe_finish(rp);
        return;
    }
    struct replay_call *call = next_call(ln->a, tm->at_ns);
    call->on_end = closed_lane_after_call;
    call->owner = ln;
    call->lane_idx = ln->idx;
    replay_call_send(rp, call);
}

struct arrivals *arrivals_create(struct replay *rp)
{
    const struct trace *tr = rp->tr;
    struct arrivals *a = xcalloc(1, sizeof *a);
    a->rp = rp;
    a->step = 1;
    rng_init(&a->rng, rp->cfg.seed, RNG_ARRIVAL);
    if (rp->cfg.mode == REPLAY_MODE_CLOSED) {
        a->n_lanes = rp->cfg.concurrency;
        a->lane = xcalloc((size_t)a->n_lanes, sizeof *a->lane);
        for (int i = 0; i < a->n_lanes; i++) {
            a->lane[i].a = a;
            a->lane[i].idx = i;
        }
    }
    a->n_order = tr->n_calls;
    a->order = xmalloc(tr->n_calls * sizeof *a->order);
    for (uint32_t i = 0; i < tr->n_calls; i++)
        a->order[i] = i;
    if (rp->cfg.mode == REPLAY_MODE_TIMESTAMP) {
        /* Stable insertion into time order (traces are nearly sorted). */
        for (uint32_t i = 1; i < tr->n_calls; i++) {
            uint32_t x = a->order[i];
            uint32_t j = i;
            while (j > 0 && tr->calls[a->order[j - 1]].t_ns > tr->calls[x].t_ns) {
                a->order[j] = a->order[j - 1];
                j--;
            }
            a->order[j] = x;
        }
        a->t0_ns = tr->calls[a->order[0]].t_ns;
    }
    return a;
}

void arrivals_start(struct arrivals *a)
{
    struct replay *rp = a->rp;
    struct loop *l = rp->loop;
    int64_t now = loop_now(l);
    /* A share of the run (replay_set_share): this rank's first call is
     * the rank-th of the order; then every ranks-th. */
    int rank = rp->share_rank;
    a->step = (uint32_t)rp->share_ranks;
    advance(a, (uint32_t)rank);
    switch (rp->cfg.mode) {
    case REPLAY_MODE_CLOSED:
        for (int i = rank; i < a->n_lanes; i += rp->share_ranks)
            loop_at(l, &a->lane[i].timer, now, closed_lane_send, &a->lane[i]);
        break;
    case REPLAY_MODE_TIMESTAMP:
        if (a->done)
            break; /* fewer calls than ranks */
        a->next_ns = rank == 0 ? now
                               : (int64_t)llround((double)(rp->tr->calls[a->order[a->cursor]].t_ns -
                                                           a->t0_ns) * rp->cfg.time_scale);
        loop_at(l, &a->timer, a->next_ns, on_arrival, a);
        break;
    case REPLAY_MODE_POISSON:
    case REPLAY_MODE_GAMMA:
        a->next_ns = now + (int64_t)llround(rng_exp(&a->rng, 1e9 / rp->cfg.rate));
        for (int k = 0; k < rank; k++)
            a->next_ns += next_gap(a);
        loop_at(l, &a->timer, a->next_ns, on_arrival, a);
        break;
    case REPLAY_MODE_SESSIONS:
        ASSERT(!"arrivals in sessions mode");
    }
}

void arrivals_stop(struct arrivals *a)
{
    loop_cancel(a->rp->loop, &a->timer);
    a->done = true;
    for (int i = 0; i < a->n_lanes; i++)
        loop_cancel(a->rp->loop, &a->lane[i].timer);
}

bool arrivals_idle(const struct arrivals *a)
{
    return a->rp->cfg.mode == REPLAY_MODE_CLOSED ? a->rp->stopping : a->done;
}

void arrivals_destroy(struct arrivals *a)
{
    if (!a)
        return;
    loop_cancel(a->rp->loop, &a->timer);
    for (int i = 0; i < a->n_lanes; i++)
        loop_cancel(a->rp->loop, &a->lane[i].timer);
    free(a->lane);
    free(a->order);
    free(a);
}
