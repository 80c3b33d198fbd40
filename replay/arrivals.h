/* arrivals.h: the replayer's modes over independent calls: open-loop
 * arrivals (a timestamped trace at its recorded times, Poisson, gamma)
 * and closed-loop lanes (N lanes sending calls back to back). Calls are
 * taken in trace order (time order for timestamp mode), cycling; each
 * pass over the trace is one cycle, the records' tree.
 *
 * Like the session lanes (lanes.h), they send calls through the call
 * bookkeeping only (replay_internal.h).
 */
#ifndef ARRIVALS_H
#define ARRIVALS_H

#include <stdbool.h>

struct replay;
struct arrivals;

/* For rp's mode (not sessions); rp's config and trace set. */
struct arrivals *arrivals_create(struct replay *rp);
/* Arms the first arrival, or every closed lane, now. */
void arrivals_start(struct arrivals *a);
/* The run stops: no arrival or closed-lane call starts from now. */
void arrivals_stop(struct arrivals *a);
/* Nothing more will arrive: the trace was played once (timestamp mode),
 * the next arrival falls after the duration, or the run stops (closed
 * lanes: only the stop). */
bool arrivals_idle(const struct arrivals *a);
/* Cancels the timers and frees (NULL is fine). */
void arrivals_destroy(struct arrivals *a);

#endif
