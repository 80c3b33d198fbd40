/* loop_scaled.c: the scaled clock (loop.h): a loop over the real one whose
 * time runs `scale` times faster and, like the virtual clock, never passes
 * an armed timer: now() is the firing timer's own time inside its
 * callback, else min(scaled real time, earliest armed timer). So the
 * engine sees every step boundary at exactly its time (as on the virtual
 * clock), requests that arrive while a step is due are submitted at that
 * step's time, and time never goes backwards (timers are armed at or after
 * now, and fire only once real time has reached them). I/O watchers, run
 * and stop go to the real loop underneath. */
#include <math.h>
#include <stdlib.h>

#include "engine/clock/loop.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

struct sloop {
    struct loop base;
    struct loop *inner;
    double scale;
    struct loop_timer wake;
    int firing;
    int64_t fire_at;
    int64_t given;   /* the latest time handed out frozen (fired or frozen) */
};

static int64_t s_real(struct sloop *s) { return (int64_t)((double)loop_now(s->inner) * s->scale); }

static int64_t s_now(struct loop *l)
{
    struct sloop *s = (struct sloop *)l;
    if (s->firing)
        return s->fire_at;
    int64_t t = s_real(s);
    if (l->heap.n && l->heap.v[0]->at_ns < t)
        t = l->heap.v[0]->at_ns;
    return t;
}

static void s_fire(struct loop *il, struct loop_timer *t);
static void s_rearm(struct sloop *s);

/* Freezes the clock at its current time around a call into the engine
 * from outside its timers (submit, cancel), so that the engine reads one
 * time throughout, as it would on the virtual clock. Returns whether it
 * froze (nested calls leave it as it is). */
static const struct loop_ops sloop_ops;

int loop_scaled_freeze(struct loop *l)
{
    ASSERT(l->ops == &sloop_ops);
    struct sloop *s = (struct sloop *)l;
    if (s->firing)
        return 0;
    s->fire_at = s->given = s_now(l);
    s->firing = 1;
    return 1;
}

int loop_scaled_freeze_at(struct loop *l, int64_t inner_ns)
{
    ASSERT(l->ops == &sloop_ops);
    struct sloop *s = (struct sloop *)l;
    if (s->firing)
        return 0;
    int64_t now = s_now(l), t = (int64_t)((double)inner_ns * s->scale);
    if (t > now)
        t = now;
    if (t < s->given)
        t = s->given;
    s->fire_at = s->given = t;
    s->firing = 1;
    return 1;
}

void loop_scaled_thaw(struct loop *l, int froze)
{
    struct sloop *s = (struct sloop *)l;
    if (!froze)
        return;
    s->firing = 0;
    s_rearm(s);
}

static void s_rearm(struct sloop *s)
{
    if (s->firing)
        return;
    if (!s->base.heap.n) {
        loop_cancel(s->inner, &s->wake);
        return;
    }
    int64_t at = (int64_t)ceil((double)s->base.heap.v[0]->at_ns / s->scale);
    if (!loop_timer_armed(&s->wake) || s->wake.at_ns != at)
        loop_at(s->inner, &s->wake, at, s_fire, s);
}

static void s_fire(struct loop *il, struct loop_timer *t)
{
    struct sloop *s = t->arg;
    struct loop *l = &s->base;
    while (l->heap.n && l->heap.v[0]->at_ns <= s_real(s)) {
        struct loop_timer *x = loop_heap_pop(&l->heap);
        l->fired++;
        s->firing = 1;
        s->fire_at = s->given = x->at_ns;
        x->cb(l, x);
        s->firing = 0;
    }
    s_rearm(s);
}

static void s_at(struct loop *l, struct loop_timer *t)
{
    loop_heap_push(&l->heap, t);
    s_rearm((struct sloop *)l);
}
static void s_cancel(struct loop *l, struct loop_timer *t)
{
    loop_heap_remove(&l->heap, t);
    s_rearm((struct sloop *)l);
}
static int s_io_start(struct loop *l, struct loop_io *io) { return loop_io_start(((struct sloop *)l)->inner, io); }
static void s_io_stop(struct loop *l, struct loop_io *io) { loop_io_stop(((struct sloop *)l)->inner, io); }
static int s_run(struct loop *l) { return loop_run(((struct sloop *)l)->inner); }
static void s_stop(struct loop *l) { loop_stop(((struct sloop *)l)->inner); }
static void s_destroy(struct loop *l)
{
    struct sloop *s = (struct sloop *)l;
    loop_cancel(s->inner, &s->wake);
    loop_heap_free(&l->heap);
    free(s);
}

static const struct loop_ops sloop_ops = {
    .now = s_now, .at = s_at, .cancel = s_cancel, .io_start = s_io_start,
    .io_stop = s_io_stop, .run = s_run, .stop = s_stop, .destroy = s_destroy,
};

struct loop *loop_scaled_create(struct loop *inner, double scale)
{
    struct sloop *s = xcalloc(1, sizeof *s);
    s->base.ops = &sloop_ops;
    loop_heap_init(&s->base.heap);
    s->inner = inner;
    s->scale = scale;
    return &s->base;
}
