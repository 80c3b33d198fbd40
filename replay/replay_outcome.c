/* replay_outcome.c: the end-of-run summary (metrics, target counters)
 * and the outcome: interrupted or partial, and why a run is not
 * AgentX-valid (replay.h). */
#include "replay/replay_internal.h"

#include <stdarg.h>
#include <string.h>

#include "replay/lanes.h"
#include "traces/base/err.h"
#include "traces/base/time_ns.h"

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

/* Validity under the agentx rules (aiperf/common/scenario/validator.py,
 * aiperf/exporters/aggregate/aggregate_base_exporter.py): the configured
 * duration, the overflow rate and no switch away from the scenario. */
static void agentx_reasons(const struct replay *rp, const struct metrics_summary *s,
                           struct replay_outcome *o)
{
    const struct replay_config *c = &rp->cfg;
    if (c->duration_ns < c->min_measured_ns)
        add_reason(o, "the configured duration %.0f s is under the %.0f s minimum",
                   (double)c->duration_ns / 1e9, (double)c->min_measured_ns / 1e9);
    uint64_t counted = s->records - s->warmup;
    if (counted && (double)s->overflow / (double)counted > c->overflow_limit)
        add_reason(o, "%llu of %llu requests (%.2f %%) overflow the context (limit %.2f %%)",
                   (unsigned long long)s->overflow, (unsigned long long)counted,
                   100.0 * (double)s->overflow / (double)counted, 100.0 * c->overflow_limit);
    if (!s->completed)
        add_reason(o, "no call completed");
    if (!c->warm_start)
        add_reason(o, "no warm start (--no-warm-start)");
    if (!c->recycle)
        add_reason(o, "no recycling (--no-recycle)");
    if (!c->cache_isolation)
        add_reason(o, "no cache-bust marker (--no-cache-isolation)");
    if (!c->subagents)
        add_reason(o, "subagents off (--no-subagents)");
    if (c->think_cap_ns >= 0)
        add_reason(o, "a per-gap think cap of %.3f s (--think-cap)", (double)c->think_cap_ns / 1e9);
    if (c->idle_cap_ns != 10 * NS_PER_S)
        add_reason(o, "the system idle cap is not 10 s (--idle-cap)");
    if (!c->ignore_eos)
        add_reason(o, "end-of-sequence honoured (--honour-eos)");
    if (c->requests > 0)
        add_reason(o, "a request count (--requests)");
}

void replay_summarize(const struct replay *rp, const struct metrics_slo *slo,
                      struct metrics_summary *s, struct replay_outcome *o)
{
    metrics_summarize(&rp->metrics, rp->tg->gpus, slo, s);
    struct target_stats ts;
    target_stats(rp->tg, &ts);
    s->fallback_steps = ts.fallback_steps;
    memset(o, 0, sizeof *o);
    o->interrupted = rp->interrupted;
    o->partial = rp->interrupted || rp->io_error[0] || !rp->finished;
    o->partial |= rp->aborted[0] != 0;
    o->calls_sent = rp->calls_sent;
    if (rp->lanes) {
        o->lanes_recycled = lanes_recycled(rp->lanes);
        o->trees_started = lanes_trees_started(rp->lanes);
        lanes_outcome(rp->lanes, o);
        o->measure_start_ns = rp->measure_start_ns;
        o->requests_limit_hit = rp->requests_hit;
    } else if (rp->legacy) {
        o->lanes_recycled = lanes_legacy_recycled(rp->legacy);
        o->trees_started = lanes_legacy_trees_started(rp->legacy);
    }
    o->end_ns = rp->finished ? rp->end_ns : loop_now(rp->loop);
    snprintf(o->io_error, sizeof o->io_error, "%s", rp->io_error);
    snprintf(o->aborted, sizeof o->aborted, "%s", rp->aborted);
    const struct replay_config *c = &rp->cfg;
    if (rp->interrupted)
        add_reason(o, "interrupted");
    if (rp->aborted[0])
        add_reason(o, "aborted: %.140s", rp->aborted);
    if (rp->io_error[0])
        add_reason(o, "records incomplete: %s", rp->io_error);
    if (c->mode != REPLAY_MODE_SESSIONS)
        add_reason(o, "not a session replay (mode %s)", replay_mode_name(c->mode));
    if (rp->lanes) {
        agentx_reasons(rp, s, o);
        o->agentx_valid = o->n_reasons == 0;
        return;
    }
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
        add_reason(o, rp->tr->timestamped
                          ? "a timestamped trace: one-call sessions under the legacy rules, not "
                            "AIPerf's AgentX replay"
                          : "the legacy rules (--rules legacy), not AIPerf's AgentX replay");
    }
    o->agentx_valid = o->n_reasons == 0;
}
