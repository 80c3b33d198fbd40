/* lanes.h: session lanes, the replayer's sessions mode. Two rule sets:
 *   lanes_*         the agentx rules (lanes.c): N lanes, each executing one
 *                   session-tree instance of the trace's replay plan
 *                   (traces/plan.h) at a time, as AIPerf 0.13.0's AgentX
 *                   scenario does (replay.h lists the rules);
 *   lanes_legacy_*  the earlier rules (lanes_legacy.c, `--rules legacy`),
 *                   kept unchanged to reproduce earlier results.
 *
 * Both send calls through the call bookkeeping only (replay_call_new,
 * replay_call_send in replay_internal.h) and hear each call's end through
 * its owner continuation; they read the run's config, trace, loop and
 * stop state, and own nothing else of the run.
 */
#ifndef LANES_H
#define LANES_H

#include <stdbool.h>
#include <stdint.h>

struct replay;
struct replay_outcome;
struct plan;
struct lanes;
struct lanes_legacy;

/* ---- agentx (lanes.c) ------------------------------------------------- */

/* Lanes for rp (rp->cfg.concurrency of them) over plan p (borrowed; built
 * from rp's trace). NULL with err set when the plan has no tree to run. */
struct lanes *lanes_create(struct replay *rp, const struct plan *p, char *err);
/* Starts the run now: the initial lanes (traces from the cursor, each at
 * its t*), their warm-up phase, then the measured phase, which calls
 * replay_measure_start (replay_internal.h) when it begins. */
void lanes_start(struct lanes *ls);
/* The run stops: pending timers are cancelled, held turns dropped; calls
 * in flight end as they end, and nothing new is sent. */
void lanes_stop(struct lanes *ls);
/* Lanes holding a tree that has sent its first request (the timeline's
 * live_sessions). */
int lanes_active(const struct lanes *ls);
/* Nothing left to send: stopped, or no tree on any lane. */
bool lanes_idle(const struct lanes *ls);
uint64_t lanes_trees_started(const struct lanes *ls);
uint64_t lanes_recycled(const struct lanes *ls);
/* The agentx fields of the outcome (warm-up, idle cap, overflows). */
void lanes_outcome(const struct lanes *ls, struct replay_outcome *o);
/* Every instance's stream states against its counts; 0 or -1 with err. */
int lanes_verify(const struct lanes *ls, char *err);
/* Cancels the timers and frees everything (calls in flight belong to the
 * bookkeeping). NULL is fine. */
void lanes_destroy(struct lanes *ls);

/* ---- legacy (lanes_legacy.c) ------------------------------------------ */

/* As lanes_create for the legacy rules (each a switch in struct
 * replay_config); NULL with err set when the trace cannot feed them: no
 * session with calls, or more lanes than sessions with recycling off. */
struct lanes_legacy *lanes_legacy_create(struct replay *rp, char *err);
/* Starts one tree on every lane, now: roots in a random permutation,
 * cycled, each at its warm-start point. */
void lanes_legacy_start(struct lanes_legacy *ls);
/* The run stops: runners waiting to send their next call end now (those
 * with a call in flight end with it). */
void lanes_legacy_stop(struct lanes_legacy *ls);
/* Lanes holding a tree (the timeline's live_sessions). */
int lanes_legacy_active(const struct lanes_legacy *ls);
/* Runners alive: sending, waiting for a call or for subagents to join. */
int lanes_legacy_runners(const struct lanes_legacy *ls);
uint64_t lanes_legacy_trees_started(const struct lanes_legacy *ls);
uint64_t lanes_legacy_recycled(const struct lanes_legacy *ls);
/* Runner states and per-lane counts; 0 or -1 with err set. */
int lanes_legacy_verify(const struct lanes_legacy *ls, char *err);
/* Cancels the runners' timers and frees everything. NULL is fine. */
void lanes_legacy_destroy(struct lanes_legacy *ls);

#endif
