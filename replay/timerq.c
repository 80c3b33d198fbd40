/* timerq.c: timers that can all be moved earlier together (timerq.h). */
#include "replay/timerq.h"

#include "traces/base/err.h"

static void fire_cb(struct loop *l, struct loop_timer *tm);

/* Arms the loop timer for the earliest pending timer, or cancels it. */
static void rearm(struct timerq *q)
{
    if (q->firing)
        return; /* fire_cb rearms when it is done */
    if (!q->heap.n) {
        loop_cancel(q->loop, &q->fire);
        return;
    }
    int64_t at = timerq_next(q);
    if (loop_timer_armed(&q->fire) && q->fire.at_ns == at)
        return;
    loop_at(q->loop, &q->fire, at, fire_cb, q);
}

void timerq_init(struct timerq *q, struct loop *l, void (*after)(void *), void *after_arg)
{
    q->loop = l;
    q->after = after;
    q->after_arg = after_arg;
    loop_heap_init(&q->heap);
    q->shift_ns = 0;
    q->fire = (struct loop_timer){0};
    q->firing = false;
}

void timerq_free(struct timerq *q)
{
    loop_cancel(q->loop, &q->fire);
    for (uint32_t i = 0; i < q->heap.n; i++)
        q->heap.v[i]->slot = 0;
    loop_heap_free(&q->heap);
}

void timerq_at(struct timerq *q, struct loop_timer *t, int64_t at_ns, loop_timer_cb cb, void *arg)
{
    ASSERT(!t->slot);
    int64_t now = loop_now(q->loop);
    if (at_ns < now)
        at_ns = now;
    t->at_ns = at_ns + q->shift_ns;
    t->cb = cb;
    t->arg = arg;
    loop_heap_push(&q->heap, t);
    rearm(q);
}

void timerq_cancel(struct timerq *q, struct loop_timer *t)
{
    if (!t->slot)
        return;
    ASSERT(t->slot <= q->heap.n && q->heap.v[t->slot - 1] == t);
    loop_heap_remove(&q->heap, t);
    rearm(q);
}

void timerq_shift(struct timerq *q, int64_t d_ns)
{
    ASSERT(d_ns > 0);
    q->shift_ns += d_ns;
    rearm(q);
}

void timerq_clear(struct timerq *q, void (*drop)(struct loop_timer *t))
{
    struct loop_timer *t;
    while ((t = loop_heap_pop(&q->heap)))
        if (drop)
            drop(t);
    rearm(q);
}

/* Runs every timer due now, in (time, arming) order; a callback may arm
 * or cancel others, and those due now run in the same pass. */
static void fire_cb(struct loop *l, struct loop_timer *tm)
{
    struct timerq *q = tm->arg;
    int64_t now = loop_now(l);
    q->firing = true;
    while (q->heap.n && timerq_next(q) <= now) {
        struct loop_timer *t = loop_heap_pop(&q->heap);
        t->at_ns -= q->shift_ns; /* its effective time, for the callback */
        t->cb(l, t);
    }
    q->firing = false;
    rearm(q);
    if (q->after)
        q->after(q->after_arg);
}

int timerq_verify(const struct timerq *q)
{
    if (loop_heap_verify(&q->heap))
        return -1;
    if (q->heap.n && !q->firing &&
        (!loop_timer_armed(&q->fire) || q->fire.at_ns > timerq_next(q)))
        return -1;
    return 0;
}
