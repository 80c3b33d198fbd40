/* lanes.h: session lanes, the replayer's sessions mode: N lanes, each
 * replaying one session-tree instance at a time under the AgentX rules
 * (replay.h lists them; each is a switch in struct replay_config).
 *
 * The lanes send calls through the call bookkeeping only
 * (replay_call_new, replay_call_send in replay_internal.h) and hear each
 * call's end through its owner continuation; they read the run's config,
 * trace, loop and `stopping` flag, and own nothing else of the run.
 */
#ifndef LANES_H
#define LANES_H

#include <stdbool.h>
#include <stdint.h>

struct replay;
struct lanes;

/* Lanes for rp (rp->cfg.concurrency of them; rp's config, trace and loop
 * set). NULL with err set when the trace cannot feed them: no session with
 * calls, or more lanes than sessions with recycling off. */
struct lanes *lanes_create(struct replay *rp, char *err);
/* Starts one tree on every lane, now: roots in a random permutation,
 * cycled, each at its warm-start point. */
void lanes_start(struct lanes *ls);
/* The run stops: runners waiting to send their next call end now (those
 * with a call in flight end with it). */
void lanes_stop(struct lanes *ls);
/* Lanes holding a tree (the timeline's live_sessions). */
int lanes_active(const struct lanes *ls);
/* Runners alive: sending, waiting for a call or for subagents to join. */
int lanes_runners(const struct lanes *ls);
uint64_t lanes_trees_started(const struct lanes *ls);
uint64_t lanes_recycled(const struct lanes *ls);
/* Runner states and per-lane counts; 0 or -1 with err set. */
int lanes_verify(const struct lanes *ls, char *err);
/* Cancels the runners' timers and frees everything (their calls in
 * flight belong to the bookkeeping). NULL is fine. */
void lanes_destroy(struct lanes *ls);

#endif
