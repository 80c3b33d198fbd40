/* test_loop.c: the timer heap and the virtual clock. */
#include "engine/clock/loop.h"
#include "tests/testhelp.h"
#include "traces/base/rng.h"
#include "traces/base/time_ns.h"
#include "traces/base/parse.h"

static int64_t fired_at[64];
static int order[64];
static int n_fired;

static void on_timer(struct loop *l, struct loop_timer *t)
{
    fired_at[n_fired] = loop_now(l);
    order[n_fired++] = (int)(intptr_t)t->arg;
}

static void rearm(struct loop *l, struct loop_timer *t)
{
    on_timer(l, t);
    if (n_fired < 5)
        loop_at(l, t, loop_now(l) + 10, rearm, t->arg);
}

int main(void)
{
    /* Fires in time order; equal times in arming order; cancel works. */
    struct loop *l = loop_virtual_create();
    struct loop_timer t[6] = {0};
    int64_t when[6] = {50, 10, 30, 10, 70, 20};
    for (int i = 0; i < 6; i++)
        loop_at(l, &t[i], when[i], on_timer, (void *)(intptr_t)i);
    CHECK(loop_heap_verify(&l->heap) == 0, "heap invariant after pushes");
    CHECK(loop_next_time(l) == 10, "next time is the earliest");
    loop_cancel(l, &t[2]);
    CHECK(!loop_timer_armed(&t[2]), "cancelled timer is disarmed");
    loop_run(l);
    int want[] = {1, 3, 5, 0, 4};
    CHECK(n_fired == 5, "five timers fired");
    for (int i = 0; i < 5; i++)
        CHECKF(order[i] == want[i], "order[%d] = %d, want %d", i, order[i], want[i]);
    CHECK(loop_now(l) == 70, "clock ends at the last timer");
    loop_destroy(l);

    /* A timer re-armed from its own callback. */
    n_fired = 0;
    l = loop_virtual_create();
    struct loop_timer r = {0};
    loop_at(l, &r, 5, rearm, (void *)7);
    loop_run(l);
    CHECK(n_fired == 5 && fired_at[4] == 45, "re-armed timer fires every 10 ns");
    loop_destroy(l);

    /* Random pushes and removals keep the heap ordered. */
    l = loop_virtual_create();
    static struct loop_timer many[2000];
    struct rng g;
    rng_init(&g, 1, 0);
    for (int i = 0; i < 2000; i++)
        loop_at(l, &many[i], (int64_t)rng_below(&g, 1000), on_timer, 0);
    for (int i = 0; i < 2000; i += 3)
        loop_cancel(l, &many[i]);
    CHECK(loop_heap_verify(&l->heap) == 0, "heap invariant after removals");
    int64_t last = -1;
    int ok = 1;
    struct loop_timer *p;
    while ((p = loop_heap_pop(&l->heap))) {
        if (p->at_ns < last)
            ok = 0;
        last = p->at_ns;
    }
    CHECK(ok, "pops come out in time order");
    loop_destroy(l);

    /* Random numbers: streams are independent and reproducible. */
    struct rng a, b, c;
    rng_init(&a, 42, RNG_TRACE);
    rng_init(&b, 42, RNG_TRACE);
    rng_init(&c, 42, RNG_ACCEPT);
    uint64_t xa = rng_next(&a), xb = rng_next(&b), xc = rng_next(&c);
    CHECK(xa == xb, "same seed and stream, same numbers");
    CHECK(xa != xc, "different streams differ");
    double sum = 0;
    for (int i = 0; i < 100000; i++)
        sum += rng_exp(&a, 2.0);
    CHECK_NEAR(sum / 100000, 2.0, 0.02, "exponential mean");
    int64_t ns;
    CHECK(parse_duration("1.5m", &ns, NULL) == 0 && ns == 90 * NS_PER_S, "parse 1.5m");
    CHECK(parse_duration("abc", &ns, NULL) < 0, "bad duration refused");
    return test_report();
}
