/* loop_ev.c: the real clock of loop.h (loop_real_create), on libev.
 *
 * Time is CLOCK_MONOTONIC in nanoseconds since the loop was created.
 * Timers live in the shared struct loop_heap; one timerfd, armed with an
 * absolute nanosecond deadline to the earliest timer and watched by an
 * ev_io, wakes the loop. A timerfd rather than an ev_timer because libev's
 * epoll backend sleeps in whole milliseconds (epoll_wait's timeout), which
 * would put up to 1 ms of lag on every scheduled send; the timerfd wakes
 * epoll within the kernel's timer slack (about 50 us by default). Socket
 * watchers (struct loop_io) are ev_io watchers allocated at io_start.
 *
 * loop_run() returns when no timer is armed and no socket watcher is
 * active, or after loop_stop(). */
#include "engine/clock/loop.h"

#include <errno.h>
#include <ev.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

struct rloop {
    struct loop base;
    struct ev_loop *ev;
    int64_t t0_ns;         /* CLOCK_MONOTONIC at creation */
    int tfd;               /* timerfd */
    ev_io tio;             /* watches tfd */
    int64_t armed_ns;      /* deadline tfd is armed to, INT64_MAX if none */
    int n_io;              /* active socket watchers */
};

struct rio {
    ev_io w;
    struct rloop *rl;
    struct loop_io *io;
};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t r_now(struct loop *l) { return mono_ns() - ((struct rloop *)l)->t0_ns; }

static void arm(struct rloop *rl)
{
    int64_t next = loop_next_time(&rl->base);
    if (next == rl->armed_ns)
        return;
    struct itimerspec its = {0};
    if (next != INT64_MAX) {
        int64_t abs_ns = next + rl->t0_ns;
        if (abs_ns <= 0)
            abs_ns = 1;
        its.it_value.tv_sec = abs_ns / NS_PER_S;
        its.it_value.tv_nsec = abs_ns % NS_PER_S;
    }
    timerfd_settime(rl->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    rl->armed_ns = next;
}

static void r_at(struct loop *l, struct loop_timer *t) { loop_heap_push(&l->heap, t); }
static void r_cancel(struct loop *l, struct loop_timer *t) { loop_heap_remove(&l->heap, t); }

/* Fires every timer due now; re-reads the clock as it goes so that a slow
 * callback lets later timers through in the same pass. */
static void fire_due(struct rloop *rl)
{
    struct loop *l = &rl->base;
    int64_t now = r_now(l);
    while (!l->stopped && l->heap.n) {
        struct loop_timer *t = l->heap.v[0];
        if (t->at_ns > now) {
            now = r_now(l);
            if (t->at_ns > now)
                break;
        }
        loop_heap_pop(&l->heap);
        l->fired++;
        t->cb(l, t);
    }
}

static void tfd_cb(struct ev_loop *ev, ev_io *w, int revents)
{
    struct rloop *rl = w->data;
    uint64_t expirations;
    /* One read takes every expiration; a second would only say EAGAIN
     * (a syscall a wake-up saved). */
    ssize_t n = read(rl->tfd, &expirations, sizeof expirations);
    (void)n;
    rl->armed_ns = INT64_MAX; /* an expired timerfd is disarmed */
}

static void io_cb(struct ev_loop *ev, ev_io *w, int revents)
{
    struct rio *r = (struct rio *)w;
    struct loop_io *io = r->io;
    int ev_out = (revents & EV_READ ? LOOP_READ : 0) | (revents & EV_WRITE ? LOOP_WRITE : 0);
    io->cb(&r->rl->base, io, ev_out);
}

static int r_io_start(struct loop *l, struct loop_io *io)
{
    struct rloop *rl = (struct rloop *)l;
    struct rio *r = io->impl;
    int evs = (io->events & LOOP_READ ? EV_READ : 0) | (io->events & LOOP_WRITE ? EV_WRITE : 0);
    if (r) {
        if (r->w.fd == io->fd && r->w.events == evs && ev_is_active(&r->w))
            return 0;
        ev_io_stop(rl->ev, &r->w);
    } else {
        r = xcalloc(1, sizeof *r);
        r->rl = rl;
        r->io = io;
        io->impl = r;
        rl->n_io++;
    }
    ev_io_init(&r->w, io_cb, io->fd, evs);
    ev_io_start(rl->ev, &r->w);
    return 0;
}

static void r_io_stop(struct loop *l, struct loop_io *io)
{
    struct rloop *rl = (struct rloop *)l;
    struct rio *r = io->impl;
    if (!r)
        return;
    ev_io_stop(rl->ev, &r->w);
    free(r);
    io->impl = NULL;
    rl->n_io--;
}

static int r_run(struct loop *l)
{
    struct rloop *rl = (struct rloop *)l;
    l->stopped = 0;
    for (;;) {
        fire_due(rl);
        if (l->stopped || (!l->heap.n && !rl->n_io))
            break;
        arm(rl);
        ev_run(rl->ev, EVRUN_ONCE);
        if (l->stopped)
            break;
    }
    return 0;
}

static void r_stop(struct loop *l)
{
    l->stopped = 1;
    ev_break(((struct rloop *)l)->ev, EVBREAK_ONE);
}

static void r_destroy(struct loop *l)
{
    struct rloop *rl = (struct rloop *)l;
    ev_io_stop(rl->ev, &rl->tio);
    close(rl->tfd);
    ev_loop_destroy(rl->ev);
    loop_heap_free(&l->heap);
    free(rl);
}

static const struct loop_ops rloop_ops = {
    .now = r_now, .at = r_at, .cancel = r_cancel, .io_start = r_io_start,
    .io_stop = r_io_stop, .run = r_run, .stop = r_stop, .destroy = r_destroy,
};

struct loop *loop_real_create(void)
{
    struct rloop *rl = xcalloc(1, sizeof *rl);
    rl->base.ops = &rloop_ops;
    loop_heap_init(&rl->base.heap);
    rl->ev = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
    rl->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!rl->ev || rl->tfd < 0) {
        if (rl->ev)
            ev_loop_destroy(rl->ev);
        if (rl->tfd >= 0)
            close(rl->tfd);
        free(rl);
        return NULL;
    }
    rl->armed_ns = INT64_MAX;
    rl->t0_ns = mono_ns();
    ev_io_init(&rl->tio, tfd_cb, rl->tfd, EV_READ);
    rl->tio.data = rl;
    ev_io_start(rl->ev, &rl->tio);
    return &rl->base;
}
