/* replay.c: the replayer's run: creation and its checks, start, the
 * timeline ticks, the end of the run (stop at the duration or after
 * --requests calls, grace, cancellation, interrupt, abort), verify and
 * destroy (replay.h).
 *
 * The traffic comes from one of three sources, chosen by the mode and
 * the rules: the session lanes (lanes.c, the agentx rules, over the
 * trace's replay plan; lanes_legacy.c, the legacy rules) or the arrivals
 * over independent calls (arrivals.c); all send through the call
 * bookkeeping (replay_call.c).
 * The summary and the AgentX verdict are in replay_outcome.c.
 * Everything happens in loop callbacks; nothing blocks. */
#include "replay/replay_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "replay/arrivals.h"
#include "replay/lanes.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"
#include "traces/plan.h"

/* Lanes holding a tree, whichever rules. */
static int64_t lanes_live(const struct replay *rp)
{
    return rp->lanes ? lanes_active(rp->lanes) : lanes_legacy_active(rp->legacy);
}

/* ---------------------------------------------------------------------- */
/* Timeline. */

static void write_tick(struct replay *rp, int64_t now)
{
    struct target_stats ts;
    target_stats(rp->tg, &ts);
    if (rp->timeline) {
        double dt = (double)rp->cfg.tick_ns / 1e9;
        int64_t dp = ts.prompt_tokens - rp->last_stats.prompt_tokens;
        int64_t dc = ts.cached_tokens - rp->last_stats.cached_tokens;
        int64_t dout = ts.output_tokens - rp->last_stats.output_tokens;
        /* The live_sessions column: lanes holding a tree, or calls in flight. */
        int64_t live = rp->lanes || rp->legacy ? lanes_live(rp) : rp->n_inflight;
        char kv[32], hit[32];
        if (ts.kv_used_frac >= 0)
            snprintf(kv, sizeof kv, "%.6f", ts.kv_used_frac);
        else
            snprintf(kv, sizeof kv, "nan");
        if (dp > 0)
            snprintf(hit, sizeof hit, "%.6f", (double)dc / (double)dp);
        else
            snprintf(hit, sizeof hit, "nan");
        if (fprintf(rp->timeline, "%.0f,%lld,%lld,%lld,%s,%s,%.3f,%.3f\n", (double)now / 1e9,
                    (long long)live, (long long)ts.running, (long long)ts.waiting, kv, hit,
                    (double)(dp + dout) / dt, (double)dout / dt) < 0 &&
            !rp->io_error[0])
            snprintf(rp->io_error, sizeof rp->io_error, "writing timeline: %s", strerror(errno));
    }
    rp->last_stats = ts;
}

static void on_tick(struct loop *l, struct loop_timer *tm)
{
    struct replay *rp = tm->arg;
    int64_t now = loop_now(l);
    write_tick(rp, now);
    if (rp->finished)
        return;
    loop_at(l, &rp->tick_timer, now + rp->cfg.tick_ns, on_tick, rp);
    if (rp->tick_cb)
        rp->tick_cb(rp->tick_arg, rp, now);
}

/* ---------------------------------------------------------------------- */
/* End of run. */

static void on_stop(struct loop *l, struct loop_timer *tm);

static void on_grace(struct loop *l, struct loop_timer *tm)
{
    struct replay *rp = tm->arg;
    replay_calls_cancel(rp);
    replay_maybe_finish(rp);
}

/* Nothing new starts from now. */
static void begin_stop(struct replay *rp)
{
    if (rp->stopping)
        return;
    rp->stopping = true;
    if (rp->arrivals)
        arrivals_stop(rp->arrivals);
    if (rp->lanes)
        lanes_stop(rp->lanes);
    if (rp->legacy)
        lanes_legacy_stop(rp->legacy);
}

/* At the duration (or when --requests is reached): nothing new starts;
 * calls in flight get the grace period from now. */
static void on_stop(struct loop *l, struct loop_timer *tm)
{
    struct replay *rp = tm->arg;
    begin_stop(rp);
    if (rp->cfg.grace_ns >= 0)
        loop_at(l, &rp->grace_timer, loop_now(l) + rp->cfg.grace_ns, on_grace, rp);
    replay_maybe_finish(rp);
}

void replay_measure_start(struct replay *rp)
{
    int64_t now = loop_now(rp->loop);
    rp->measure_start_ns = now;
    rp->stop_ns = now + rp->cfg.duration_ns;
    loop_at(rp->loop, &rp->stop_timer, rp->stop_ns, on_stop, rp);
}

void replay_requests_reached(struct replay *rp)
{
    rp->requests_hit = true;
    loop_at(rp->loop, &rp->stop_timer, loop_now(rp->loop), on_stop, rp);
}

bool replay_can_send(const struct replay *rp)
{
    if (rp->stopping || rp->requests_hit)
        return false;
    return loop_now(rp->loop) < rp->stop_ns;
}

void replay_abort(struct replay *rp, const char *fmt, ...)
{
    if (rp->finished || rp->aborted[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rp->aborted, sizeof rp->aborted, fmt, ap);
    va_end(ap);
    begin_stop(rp);
    replay_calls_cancel(rp);
    replay_maybe_finish(rp);
}

/* No call in flight and the source has nothing more to send. */
static bool idle(const struct replay *rp)
{
    if (rp->n_inflight)
        return false;
    if (rp->lanes)
        return lanes_idle(rp->lanes);
    if (rp->legacy)
        return lanes_legacy_active(rp->legacy) == 0;
    return arrivals_idle(rp->arrivals);
}

void replay_maybe_finish(struct replay *rp)
{
    if (rp->finished || !rp->started || !idle(rp))
        return;
    if (!rp->stopping)
        begin_stop(rp);
    if (rp->n_inflight || (rp->legacy && lanes_legacy_runners(rp->legacy)))
        return;
    rp->finished = true;
    rp->end_ns = loop_now(rp->loop);
    loop_cancel(rp->loop, &rp->stop_timer);
    loop_cancel(rp->loop, &rp->grace_timer);
    loop_cancel(rp->loop, &rp->tick_timer);
    loop_stop(rp->loop);
}

void replay_interrupt(struct replay *rp)
{
    if (rp->finished)
        return;
    rp->interrupted = true;
    begin_stop(rp);
    replay_calls_cancel(rp);
    replay_maybe_finish(rp);
}

/* ---------------------------------------------------------------------- */
/* Creation. */

/* The agentx rules refuse the legacy rules' own switches, which have no
 * meaning for a plan. */
static int check_agentx(const struct replay_config *c, char *err)
{
    struct replay_config d;
    replay_config_defaults(&d);
    const char *bad = !c->warmup_call                            ? "--no-warmup-call"
                      : !c->skip_early_subagents                 ? "--keep-early-subagents"
                      : !c->honour_join                          ? "--no-join"
                      : c->join_all                              ? "--join-subagents"
                      : c->think_end_to_start != d.think_end_to_start ? "--think"
                      : c->measure_all_types != d.measure_all_types   ? "--measure"
                                                                 : NULL;
    if (bad)
        return err_set(err, "%s belongs to the legacy rules: add --rules legacy", bad);
    if (!(c->start_min_ratio >= 0 && c->start_min_ratio <= c->start_max_ratio &&
          c->start_max_ratio <= 1))
        return err_set(err, "--start-min-ratio %g and --start-max-ratio %g: need 0 <= min <= max <= 1",
                       c->start_min_ratio, c->start_max_ratio);
    return 0;
}

struct replay *replay_create(const struct replay_config *c, const struct trace *t,
                             struct target *tg, struct loop *l, char *err)
{
    return replay_create_plan(c, t, NULL, tg, l, err);
}

struct replay *replay_create_plan(const struct replay_config *c, const struct trace *t,
                                  const struct plan *plan, struct target *tg, struct loop *l,
                                  char *err)
{
    if (!t || !t->n_calls) {
        err_set(err, "the trace has no calls");
        return NULL;
    }
    struct replay_config fit = *c;
    replay_config_fit(&fit, t);
    c = &fit;
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
    bool agentx = c->mode == REPLAY_MODE_SESSIONS && c->rules == REPLAY_RULES_AGENTX;
    if (agentx && check_agentx(c, err))
        return NULL;
    if (c->mode == REPLAY_MODE_SESSIONS && c->rules == REPLAY_RULES_LEGACY && c->requests > 0) {
        err_set(err, "--requests needs the agentx rules or an arrival mode");
        return NULL;
    }
    struct replay *rp = xcalloc(1, sizeof *rp);
    rp->cfg = *c;
    rp->cfg.grace_ns = replay_config_grace(c);
    if (rp->cfg.tick_ns <= 0)
        rp->cfg.tick_ns = NS_PER_S;
    rp->tr = t;
    rp->tg = tg;
    rp->loop = l;
    rp->share_ranks = 1;
    list_init(&rp->inflight);
    list_init(&rp->cancelling);
    metrics_init(&rp->metrics);
    rp->stop_ns = INT64_MAX;
    rp->same_end_ns = -1;
    if (agentx) {
        rp->metrics.theoretical = true;
        rp->plan = plan;
        if (!plan) {
            struct plan_opts po;
            plan_opts_defaults(&po);
            rp->plan = rp->own_plan = plan_build(t, &po, err);
            if (!rp->plan) {
                replay_destroy(rp);
                return NULL;
            }
        }
        rp->lanes = lanes_create(rp, rp->plan, err);
        if (!rp->lanes) {
            replay_destroy(rp);
            return NULL;
        }
    } else if (c->mode == REPLAY_MODE_SESSIONS) {
        rp->legacy = lanes_legacy_create(rp, err);
        if (!rp->legacy) {
            replay_destroy(rp);
            return NULL;
        }
    } else {
        rp->arrivals = arrivals_create(rp);
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
    target_stats(rp->tg, &rp->last_stats);
    if (!rp->lanes)
        replay_measure_start(rp); /* agentx: after the warm-up */
    loop_at(l, &rp->tick_timer, now + rp->cfg.tick_ns, on_tick, rp);
    if (rp->lanes)
        lanes_start(rp->lanes);
    else if (rp->legacy)
        lanes_legacy_start(rp->legacy);
    else
        arrivals_start(rp->arrivals);
    replay_maybe_finish(rp);
    return 0;
}

void replay_set_share(struct replay *rp, int rank, int ranks)
{
    ASSERT(!rp->started && ranks >= 1 && rank >= 0 && rank < ranks);
    rp->share_rank = rank;
    rp->share_ranks = ranks;
}

void replay_add_record(struct replay *rp, const struct replay_record *rec)
{
    metrics_add(&rp->metrics, rec);
}

bool replay_finished(const struct replay *rp) { return rp->finished; }
const struct metrics *replay_metrics(const struct replay *rp) { return &rp->metrics; }

int replay_verify(const struct replay *rp, char *err)
{
    if (replay_calls_verify(rp, err))
        return -1;
    if (rp->lanes && lanes_verify(rp->lanes, err))
        return -1;
    if (rp->legacy && lanes_legacy_verify(rp->legacy, err))
        return -1;
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
    replay_calls_drop(rp);
    lanes_destroy(rp->lanes);
    lanes_legacy_destroy(rp->legacy);
    arrivals_destroy(rp->arrivals);
    if (rp->own_plan)
        plan_destroy(rp->own_plan);
    loop_cancel(rp->loop, &rp->stop_timer);
    loop_cancel(rp->loop, &rp->grace_timer);
    loop_cancel(rp->loop, &rp->tick_timer);
    metrics_free(&rp->metrics);
    replay_chains_free(rp);
    free(rp);
}
