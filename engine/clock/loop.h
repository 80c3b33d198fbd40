/* loop.h: the one small scheduling interface the engine and the replayer
 * share, with two clocks behind it:
 *   - the virtual clock (loop_virtual_create): an event heap; time jumps to
 *     the next timer; deterministic; no I/O;
 *   - the real clock (loop_real_create, loop_ev.c): libev, monotonic time,
 *     timers and socket watchers (libcurl's multi socket API, the HTTP
 *     server);
 *   - the scaled clock (loop_scaled_create, loop_scaled.c): a real clock
 *     running `scale` times faster that, like the virtual one, never
 *     passes an armed timer (the engine behind `serve`).
 * Neither the engine nor the replayer knows which one it runs on.
 *
 * Timers are intrusive: the caller owns a struct loop_timer (usually inside
 * its own object) and arms it with loop_at(); nothing is allocated per
 * timer. Timers due at the same time fire in the order they were armed, so
 * runs are deterministic.
 *
 * Times are int64 nanoseconds since the loop was created.
 */
#ifndef LOOP_H
#define LOOP_H

#include <stdint.h>

struct loop;
struct loop_timer;
struct loop_io;

typedef void (*loop_timer_cb)(struct loop *l, struct loop_timer *t);
typedef void (*loop_io_cb)(struct loop *l, struct loop_io *io, int revents);

struct loop_timer {
    int64_t at_ns;    /* when it fires (set by loop_at) */
    uint64_t seq;     /* arming order, breaks ties */
    loop_timer_cb cb;
    void *arg;        /* the owner's pointer, untouched by the loop */
    uint32_t slot;    /* heap position + 1; 0 when not armed */
};

enum { LOOP_READ = 1, LOOP_WRITE = 2 };

struct loop_io {
    int fd;
    int events;       /* LOOP_READ | LOOP_WRITE */
    loop_io_cb cb;
    void *arg;
    void *impl;       /* the clock's own watcher, owned by the loop */
};

struct loop_ops {
    int64_t (*now)(struct loop *l);
    void (*at)(struct loop *l, struct loop_timer *t);
    void (*cancel)(struct loop *l, struct loop_timer *t);
    int (*io_start)(struct loop *l, struct loop_io *io); /* -1: no I/O */
    void (*io_stop)(struct loop *l, struct loop_io *io);
    int (*run)(struct loop *l);
    void (*stop)(struct loop *l);
    void (*destroy)(struct loop *l);
};

/* Binary heap of armed timers ordered by (at_ns, seq); both clocks use it. */
struct loop_heap {
    struct loop_timer **v;
    uint32_t n, cap;
    uint64_t next_seq;
};

struct loop {
    const struct loop_ops *ops;
    struct loop_heap heap;
    int stopped;
    uint64_t fired; /* timers fired so far (statistics) */
};

/* Creates a virtual-clock loop starting at time 0. */
struct loop *loop_virtual_create(void);
/* Creates a real-clock loop on libev (loop_ev.c); time 0 is creation. */
struct loop *loop_real_create(void);
/* Creates a scaled clock over the real loop `inner` (which must outlive
 * it); its time is inner's times `scale`. */
struct loop *loop_scaled_create(struct loop *inner, double scale);
/* Freezes a scaled clock at its current time around a call into the
 * engine from outside its timers (submit, cancel), so that the engine
 * reads one time throughout, as it would on the virtual clock. Returns
 * whether it froze (nested calls leave it as it is); pass that to thaw. */
int loop_scaled_freeze(struct loop *l);
/* The same, frozen at an earlier time: inner_ns (a time of the inner
 * loop, when something arrived) in the scaled clock, unless the clock has
 * already handed out a later time (a timer fired, a freeze), then at that
 * one. So a request submitted after its server's own parsing enters the
 * engine when it arrived, and time still never goes backwards. */
int loop_scaled_freeze_at(struct loop *l, int64_t inner_ns);
void loop_scaled_thaw(struct loop *l, int froze);

static inline int64_t loop_now(struct loop *l) { return l->ops->now(l); }

/* Arms (or re-arms) t to fire at at_ns (clamped to now). */
static inline void loop_at(struct loop *l, struct loop_timer *t, int64_t at_ns,
                           loop_timer_cb cb, void *arg)
{
    int64_t now = loop_now(l);
    t->at_ns = at_ns < now ? now : at_ns;
    t->cb = cb;
    t->arg = arg;
    l->ops->at(l, t);
}
static inline void loop_cancel(struct loop *l, struct loop_timer *t)
{
    if (t->slot)
        l->ops->cancel(l, t);
}
static inline int loop_timer_armed(const struct loop_timer *t) { return t->slot != 0; }
static inline int loop_io_start(struct loop *l, struct loop_io *io) { return l->ops->io_start(l, io); }
static inline void loop_io_stop(struct loop *l, struct loop_io *io) { l->ops->io_stop(l, io); }
/* Runs until no timer (and no I/O watcher) is left, or loop_stop(). */
static inline int loop_run(struct loop *l) { return l->ops->run(l); }
static inline void loop_stop(struct loop *l) { l->ops->stop(l); }
static inline void loop_destroy(struct loop *l)
{
    if (l)
        l->ops->destroy(l);
}
/* Time of the earliest armed timer, or INT64_MAX when none is armed. */
static inline int64_t loop_next_time(const struct loop *l)
{
    return l->heap.n ? l->heap.v[0]->at_ns : INT64_MAX;
}

/* Heap primitives shared by the clocks. */
void loop_heap_init(struct loop_heap *h);
void loop_heap_free(struct loop_heap *h);
void loop_heap_push(struct loop_heap *h, struct loop_timer *t);
void loop_heap_remove(struct loop_heap *h, struct loop_timer *t);
struct loop_timer *loop_heap_pop(struct loop_heap *h);
/* Checks the heap invariant; returns 0 or -1 (tests call it). */
int loop_heap_verify(const struct loop_heap *h);

#endif
