/* timerq.h: a queue of timers over a loop that can all be moved earlier
 * together, as AIPerf's LoopScheduler.cap_pending_delay moves its pending
 * timers (aiperf/common/loop_scheduler.py): the replayer's next-turn,
 * warm-up and start timers, which the system-idle cap shifts.
 *
 * The timers are the loop's own (struct loop_timer, intrusive) kept in a
 * heap of their own keyed by their unshifted time; one loop timer is armed
 * for the earliest. A shift adds to one offset, so moving every pending
 * timer costs O(1) and arming or cancelling one O(log n). Timers due at
 * the same time fire in the order they were armed.
 */
#ifndef TIMERQ_H
#define TIMERQ_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/clock/loop.h"

struct timerq {
    struct loop *loop;          /* not owned */
    struct loop_heap heap;      /* pending timers; at_ns + 0 = unshifted time */
    int64_t shift_ns;           /* removed from every pending time so far */
    struct loop_timer fire;     /* armed at the earliest effective time */
    bool firing;                /* inside the fire callback */
    void (*after)(void *arg);   /* after each batch of timers fired, or NULL */
    void *after_arg;
};

/* after(after_arg) runs once every timer due at one moment has run (the
 * point where AIPerf's scheduler drains its running tasks). */
void timerq_init(struct timerq *q, struct loop *l, void (*after)(void *), void *after_arg);
/* Cancels the loop timer and frees the heap (the timers are the callers'). */
void timerq_free(struct timerq *q);
/* Arms t to call cb(loop, t) at at_ns (clamped to now); t must not be
 * armed in the loop or the queue. */
void timerq_at(struct timerq *q, struct loop_timer *t, int64_t at_ns, loop_timer_cb cb, void *arg);
/* Cancels t if it is pending here. */
void timerq_cancel(struct timerq *q, struct loop_timer *t);
/* Effective time of t (pending here). */
static inline int64_t timerq_when(const struct timerq *q, const struct loop_timer *t)
{
    return t->at_ns - q->shift_ns;
}
/* Effective time of the earliest pending timer; INT64_MAX when none. */
static inline int64_t timerq_next(const struct timerq *q)
{
    return q->heap.n ? q->heap.v[0]->at_ns - q->shift_ns : INT64_MAX;
}
static inline uint32_t timerq_pending(const struct timerq *q) { return q->heap.n; }
/* Moves every pending timer d_ns (> 0) earlier. */
void timerq_shift(struct timerq *q, int64_t d_ns);
/* Removes every pending timer, calling drop(t) for each (may be NULL). */
void timerq_clear(struct timerq *q, void (*drop)(struct loop_timer *t));
/* Heap order and the armed loop timer; 0 or -1. */
int timerq_verify(const struct timerq *q);

#endif
