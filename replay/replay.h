/* replay.h: the replayer. It turns a trace into traffic on a target
 * (target.h) over a loop (loop.h; the virtual clock for `sim`, the real
 * one for `load`), records every call (records.h) and accumulates the
 * statistics (metrics.h). One replayer, any target, any clock.
 *
 * Modes:
 *   sessions   (default) concurrency N = N live session trees, under one of
 *              two rule sets:
 *     agentx   (default; lanes.c) executes the trace's replay plan
 *              (traces/plan.h) exactly as AIPerf 0.13.0's
 *              inferencex-agentx-mvp scenario does
 *              (aiperf/timing/strategies/agentic_replay.py and the files
 *              it uses; ../shared/reference/agentx.md):
 *              - every stream's turns with the recorded end-to-start delay
 *                after the previous turn of the same stream returns, never
 *                capped per gap;
 *              - branches (subagents, flat chains) dispatched when their
 *                spawning turn is sent or returns, each child after its
 *                recorded offset; a joining turn fires at once when its
 *                last child is done; background branches never gate;
 *              - happens-before gates between streams of one scope;
 *              - a context overflow ends that stream (a root: its tree's
 *                root part); its records are counted, not measured;
 *              - a session tree (root and every descendant) holds one of
 *                the N lane slots from its first request until it drains;
 *                lanes take traces from one global cursor in file order,
 *                and a drained lane recycles into the next trace at turn 0
 *                with a fresh cache-bust marker;
 *              - warm start: per initial lane t* uniform over the tree's
 *                recorded start times within the ratio range; streams
 *                live at t* resume at their first turn at or after t*; the
 *                turn before it goes out in a separate, unmeasured warm-up
 *                phase with max_tokens 1, spread so every lane's t* falls
 *                at its end; a failed root warm-up aborts the run; the
 *                duration counts from the end of the warm-up;
 *              - the system-wide idle cap: only when nothing is in flight
 *                anywhere, pending next-turn, warm-up and start timers
 *                shift so the next fires within the cap of the system
 *                going idle (child offsets and gate-held turns are not
 *                shifted);
 *              - a cache-bust marker per tree instance (one extra prompt
 *                token at the start of the first user message, after the
 *                system message, so instances of a trace share the system
 *                prefix);
 *              - valid for AgentX with a configured duration >= 900 s,
 *                <= 1 % overflows, end-of-sequence ignored and no
 *                non-AgentX switch (--think-cap, --no-warm-start, ...);
 *     legacy   (`--rules legacy`; lanes_legacy.c) the earlier rules,
 *              unchanged, so earlier results can be reproduced: per-gap
 *              capped think times, a warm start at a random call, random
 *              recycling (each rule a switch in struct replay_config).
 *   timestamp  a timestamped trace (Mooncake, Azure) at its recorded
 *              arrival times multiplied by time_scale (0.5 = twice as
 *              fast), open loop.
 *   poisson, gamma  open-loop arrivals at `rate` calls/s (gamma with a
 *              coefficient of variation), calls in trace order, cycling.
 *   closed     N lanes each sending independent calls back to back.
 * End of run: no call starts at or after the duration (or after
 * `requests` calls); calls in flight run on, up to grace, then are
 * cancelled (recorded, counted, not measured).
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

enum replay_rules {
    REPLAY_RULES_AGENTX = 0,    /* AIPerf's AgentX replay of the plan (lanes.c) */
    REPLAY_RULES_LEGACY = 1,    /* the earlier rules (lanes_legacy.c) */
};

enum replay_mode {
    REPLAY_MODE_SESSIONS = 0,
    REPLAY_MODE_TIMESTAMP,
    REPLAY_MODE_POISSON,
    REPLAY_MODE_GAMMA,
    REPLAY_MODE_CLOSED,
};

struct replay_config {
    enum replay_mode mode;
    enum replay_rules rules;    /* sessions mode */
    int concurrency;            /* lanes (sessions, closed) */
    int64_t duration_ns;        /* no call starts at or after this (agentx:
                                   counted from the end of the warm-up) */
    int64_t grace_ns;           /* after duration; < 0: wait for all (300 s;
                                   replay_config_grace: 30 s under the
                                   agentx rules unless grace_set) */
    int64_t idle_cap_ns;        /* agentx: the system-wide idle cap; legacy:
                                   the cap on each think time and fork gap;
                                   < 0: none */
    int64_t think_cap_ns;       /* agentx: a cap on each recorded delay and
                                   child offset (not AgentX); < 0: none */
    double start_min_ratio;     /* agentx: t* range as fractions of a tree's */
    double start_max_ratio;     /* recorded span (0..1) */
    int64_t requests;           /* no call starts after this many measured
                                   calls were sent; 0: no limit */
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
    bool grace_set;             /* --grace given */
    /* Call ends in a row at one time of the clock after which the run
     * stops for lack of progress; 0: 1,000,000 + 16 x concurrency (tests
     * lower it; not a flag). */
    uint64_t no_progress_ends;
};

void replay_config_defaults(struct replay_config *c);
/* Switches c to the legacy rules. */
void replay_config_legacy(struct replay_config *c);
/* Fits c to trace t: a timestamped trace (Mooncake, Azure) holds arrivals,
 * not session trees, so the agentx rules have nothing to replay in it; in
 * the sessions mode its sessions (a call each) follow the legacy rules.
 * replay_create applies it too; a front end calls it to write the config
 * it runs. */
void replay_config_fit(struct replay_config *c, const struct trace *t);
/* The grace period in force (ns, < 0: none): 30 s under the agentx rules
 * unless --grace was given, else grace_ns. */
int64_t replay_config_grace(const struct replay_config *c);
/* The config as run.json's "config.replay" object (json_t*, caller owns). */
void *replay_config_json(const struct replay_config *c);
const char *replay_mode_name(enum replay_mode m);

struct replay;

/* Checks the config against the trace (exit-2 errors: empty trace, a
 * concurrency above the sessions when recycling is off, timestamp mode on
 * an untimed trace...). The trace, target and loop must outlive it. */
struct replay *replay_create(const struct replay_config *c, const struct trace *t,
                             struct target *tg, struct loop *l, char *err);
/* The same with the replay plan of t given (borrowed; it must outlive the
 * replayer); replay_create builds its own when the agentx rules need one. */
struct plan;
struct replay *replay_create_plan(const struct replay_config *c, const struct trace *t,
                                  const struct plan *p, struct target *tg, struct loop *l,
                                  char *err);
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
    char aborted[ERR_LEN];      /* why the run was cut short, "" if it was
                                   not (a failed root warm-up, no progress) */
    /* The agentx rules (agentx true; run.json's run.agentx). */
    bool agentx;
    uint64_t warmup_calls;      /* requests of the warm-up phase */
    int64_t measure_start_ns;   /* end of the warm-up: the duration's start */
    uint64_t idle_jumps;        /* system-idle cap shifts */
    int64_t idle_skipped_ns;    /* time they removed */
    uint64_t streams_overflowed; /* streams ended by a context overflow */
    uint64_t requests_limit_hit; /* 1 when --requests stopped the run */
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
