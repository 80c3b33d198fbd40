/* replay.h: the replayer. It turns a trace into traffic on a target
 * (target.h) over a loop (loop.h; the virtual clock for `sim`, the real
 * one for `load`), records every call (records.h) and accumulates the
 * statistics (metrics.h). One replayer, any target, any clock.
 *
 * Modes:
 *   sessions   (default; AgentX) concurrency N = N live session trees.
 *              Each rule of ../shared/reference/agentx.md is a switch in
 *              struct replay_config with the AgentX default:
 *              - warm start: each first lane starts its trace at a random
 *                call k (uniform over the root's calls); call k-1 is sent
 *                first as an unmeasured warm-up; subagents recorded as
 *                forked before call k's time are skipped;
 *              - recycling: when a tree ends its lane starts a new trace
 *                (a random root, from its first call; RNG_TRACE);
 *              - think time end-to-start (recorded think_time, else
 *                derived from t and api_time), capped at idle_cap;
 *              - max_tokens = recorded output, end-of-sequence ignored;
 *              - every call type measured alike;
 *              - cache isolation: one session_key per tree instance (its
 *                subagents share it);
 *              - subagents fork when the parent's call fork_after ends,
 *                after min(fork_gap, idle_cap), with a fresh context; the
 *                parent does not wait unless the trace says join;
 *              - calls over max_model_len are not sent: recorded as error
 *                "context overflow", counted; > 1 % makes the run invalid;
 *              - at least 900 s of measured traffic for a valid run.
 *   timestamp  a timestamped trace (Mooncake, Azure) at its recorded
 *              arrival times multiplied by time_scale (0.5 = twice as
 *              fast), open loop.
 *   poisson, gamma  open-loop arrivals at `rate` calls/s (gamma with a
 *              coefficient of variation), calls in trace order, cycling.
 *   closed     N lanes each sending independent calls back to back.
 * End of run: no call starts at or after duration; calls in flight run
 * on, up to grace, then are cancelled (recorded, counted, not measured).
 */
#ifndef REPLAY_H
#define REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/clock/loop.h"
#include "replay/metrics.h"
#include "replay/records.h"
#include "engine/target.h"
#include "traces/trace.h"
#include "traces/base/err.h"

enum replay_mode {
    REPLAY_MODE_SESSIONS = 0,
    REPLAY_MODE_TIMESTAMP,
    REPLAY_MODE_POISSON,
    REPLAY_MODE_GAMMA,
    REPLAY_MODE_CLOSED,
};

struct replay_config {
    enum replay_mode mode;
    int concurrency;            /* lanes (sessions, closed) */
    int64_t duration_ns;        /* no call starts at or after this */
    int64_t grace_ns;           /* after duration; < 0: wait for all */
    int64_t idle_cap_ns;        /* cap on think time and fork gaps; < 0: none */
    bool warm_start;            /* random start point per first lane */
    bool warmup_call;           /* send the call before it, unmeasured */
    bool skip_early_subagents;  /* skip subagents forked before t* */
    bool recycle;               /* lanes start a new trace when one ends */
    bool cache_isolation;       /* one cache key per tree instance */
    bool subagents;             /* replay subagents */
    bool honour_join;           /* parent waits where a trace says join */
    bool join_all;              /* parent waits for every subagent */
    bool think_end_to_start;    /* false: recorded start-to-start gaps */
    bool measure_all_types;     /* false: only "n" calls are measured */
    bool ignore_eos;            /* max_tokens are produced exactly */
    int64_t max_model_len;      /* tokens; 0: no client-side limit */
    double overflow_limit;      /* fraction of calls; above it: invalid */
    int64_t min_measured_ns;    /* AgentX minimum (900 s) */
    double time_scale;          /* timestamp mode */
    double rate;                /* poisson / gamma: calls per second */
    double gamma_cv;            /* gamma: coefficient of variation */
    uint64_t seed;
    int64_t tick_ns;            /* timeline period (1 s) */
    bool chunk_times;           /* write chunk times into records */
    /* Set by --mode and --arrival: which flag chose the mode ("" default),
     * so that conflicting mode flags are refused. */
    char mode_flag[32];
    bool concurrency_set;       /* --concurrency given */
};

void replay_config_defaults(struct replay_config *c);
/* The config as run.json's "config.replay" object (json_t*, caller owns). */
void *replay_config_json(const struct replay_config *c);
const char *replay_mode_name(enum replay_mode m);

struct replay;

/* Checks the config against the trace (exit-2 errors: empty trace, a
 * concurrency above the sessions when recycling is off, timestamp mode on
 * an untimed trace...). The trace, target and loop must outlive it. */
struct replay *replay_create(const struct replay_config *c, const struct trace *t,
                             struct target *tg, struct loop *l, char *err);
/* Where records and the timeline go (either may be NULL; not owned). */
void replay_set_outputs(struct replay *r, struct records_writer *records, FILE *timeline);
/* Called once per tick (timeline period) with the clock and the planned
 * end; for progress bars and interrupt checks (may call replay_interrupt). */
void replay_set_tick(struct replay *r, void (*cb)(void *arg, struct replay *r, int64_t now_ns),
                     void *arg);
/* Arms the first timers; then run the loop until it returns. */
int replay_start(struct replay *r);
/* One rank's share of a run split across `ranks` processes (replay/dist.h),
 * set before replay_start: every rank builds the same schedule from the
 * same trace, config and seed, and plays only its part of it:
 *   sessions, closed: lanes i with i % ranks == rank (tree instances are
 *     numbered so that no two ranks share one; a rank's recycled roots come
 *     from its own RNG_TRACE stream, seeded with the seed and the rank);
 *   timestamp, poisson, gamma: arrivals k with k % ranks == rank of the one
 *     schedule (its gaps drawn on every rank, in the same order);
 *   closed: a rank takes positions rank, rank + ranks, ... of the calls'
 *     cycling order.
 * (0, 1), the default, is the whole run. */
void replay_set_share(struct replay *r, int rank, int ranks);
/* A record of another rank's share enters this replayer's statistics
 * (the rank that merges a split run). */
void replay_add_record(struct replay *r, const struct replay_record *rec);
/* Stops now: nothing new starts, calls in flight are cancelled (recorded
 * as cancelled); the run is marked interrupted. */
void replay_interrupt(struct replay *r);
bool replay_finished(const struct replay *r);
const struct metrics *replay_metrics(const struct replay *r);

struct replay_outcome {
    bool interrupted;
    bool partial;               /* interrupted, or records lost (I/O) */
    bool agentx_valid;
    int n_reasons;
    char reasons[12][160];      /* why not AgentX-valid */
    uint64_t calls_sent, lanes_recycled, trees_started;
    int64_t end_ns;             /* clock when the run finished */
    char io_error[ERR_LEN];     /* first write error, "" if none */
};
/* Fills the summary (gpus from the target) and the outcome. */
void replay_summarize(const struct replay *r, const struct metrics_slo *slo,
                      struct metrics_summary *s, struct replay_outcome *o);
/* Checks internal invariants; 0 or -1 with err set (tests call it). */
int replay_verify(const struct replay *r, char *err);
void replay_destroy(struct replay *r);

/* Block chain of call c into out (capacity >= c->n_blocks): trace_call_blocks
 * with the whole chain. */
void replay_call_blocks(const struct trace *t, const struct trace_call *c, uint64_t *out);

#endif
