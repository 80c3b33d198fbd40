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
    o->calls_sent = rp->calls_sent;
    o->lanes_recycled = rp->lanes ? lanes_recycled(rp->lanes) : 0;
    o->trees_started = rp->lanes ? lanes_trees_started(rp->lanes) : 0;
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
