/* loop.c: the timer heap both clocks use, and the virtual clock.
 *
 * The virtual clock pops the earliest timer, sets now to its time and runs
 * its callback; time never goes backwards. A binary heap over pointers to
 * intrusive timers: push and pop are O(log n) with no allocation once the
 * array has grown, which is what a replay of thousands of sessions needs
 * (a few timers per live call). */
#include "engine/clock/loop.h"

#include <stdlib.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"

void loop_heap_init(struct loop_heap *h)
{
    h->v = NULL;
    h->n = h->cap = 0;
    h->next_seq = 0;
}

void loop_heap_free(struct loop_heap *h)
{
    free(h->v);
    loop_heap_init(h);
}

static inline int before(const struct loop_timer *a, const struct loop_timer *b)
{
    return a->at_ns < b->at_ns || (a->at_ns == b->at_ns && a->seq < b->seq);
}

static void place(struct loop_heap *h, uint32_t i, struct loop_timer *t)
{
    h->v[i] = t;
    t->slot = i + 1;
}

static void sift_up(struct loop_heap *h, uint32_t i)
{
    struct loop_timer *t = h->v[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!before(t, h->v[p]))
            break;
        place(h, i, h->v[p]);
        i = p;
    }
    place(h, i, t);
}

static void sift_down(struct loop_heap *h, uint32_t i)
{
    struct loop_timer *t = h->v[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(h->v[c + 1], h->v[c]))
            c++;
        if (!before(h->v[c], t))
            break;
        place(h, i, h->v[c]);
        i = c;
    }
    place(h, i, t);
}

void loop_heap_push(struct loop_heap *h, struct loop_timer *t)
{
    if (t->slot)
        loop_heap_remove(h, t);
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = xrealloc(h->v, h->cap * sizeof *h->v);
    }
    t->seq = h->next_seq++;
    h->v[h->n] = t;
    sift_up(h, h->n++);
}

void loop_heap_remove(struct loop_heap *h, struct loop_timer *t)
{
    ASSERT(t->slot >= 1 && t->slot <= h->n && h->v[t->slot - 1] == t);
    uint32_t i = t->slot - 1;
    t->slot = 0;
    h->n--;
    if (i == h->n)
        return;
    struct loop_timer *last = h->v[h->n];
    place(h, i, last);
    if (i > 0 && before(last, h->v[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct loop_timer *loop_heap_pop(struct loop_heap *h)
{
    if (!h->n)
        return NULL;
    struct loop_timer *t = h->v[0];
    loop_heap_remove(h, t);
    return t;
}

int loop_heap_verify(const struct loop_heap *h)
{
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->v[i]->slot != i + 1)
            return -1;
        if (i > 0 && before(h->v[i], h->v[(i - 1) / 2]))
            return -1;
    }
    return 0;
}

/* The virtual clock. */
struct vloop {
    struct loop base;
    int64_t now_ns;
};

static int64_t v_now(struct loop *l) { return ((struct vloop *)l)->now_ns; }
static void v_at(struct loop *l, struct loop_timer *t) { loop_heap_push(&l->heap, t); }
static void v_cancel(struct loop *l, struct loop_timer *t) { loop_heap_remove(&l->heap, t); }
static int v_io_start(struct loop *l, struct loop_io *io) { return -1; }
static void v_io_stop(struct loop *l, struct loop_io *io) {}
static void v_stop(struct loop *l) { l->stopped = 1; }

static int v_run(struct loop *l)
{
    struct vloop *v = (struct vloop *)l;
    l->stopped = 0;
    while (!l->stopped) {
        struct loop_timer *t = loop_heap_pop(&l->heap);
        if (!t)
            break;
        ASSERT(t->at_ns >= v->now_ns);
        v->now_ns = t->at_ns;
        l->fired++;
        t->cb(l, t);
    }
    return 0;
}

static void v_destroy(struct loop *l)
{
    loop_heap_free(&l->heap);
    free(l);
}

static const struct loop_ops vloop_ops = {
    .now = v_now, .at = v_at, .cancel = v_cancel, .io_start = v_io_start,
    .io_stop = v_io_stop, .run = v_run, .stop = v_stop, .destroy = v_destroy,
};

struct loop *loop_virtual_create(void)
{
    struct vloop *v = xcalloc(1, sizeof *v);
    v->base.ops = &vloop_ops;
    loop_heap_init(&v->base.heap);
    return &v->base;
}
