/* pricer.c: step prices for the scheduler (pricer.h): decode-only steps
 * interpolated between memoised grid points of sum_ctx, other steps
 * priced by the cost model directly. */
#include "engine/pricer.h"

#include <stdlib.h>

#include "traces/base/mem.h"

/* One priced grid point. The key packs the batch shape and the grid
 * index (pricer_grid); bit 63 is always set, so 0 marks an empty slot. */
struct price_entry {
    uint64_t key;
    int64_t ns;
    bool fallback;
};

/* The grid prices are a table of their own, not traces/base/hmap.h: it is
 * probed once or twice per step, the hottest lookup of the engine, and
 * holds its entries in the slots (one cache miss, no index array, no
 * insertion order to keep). */
struct pricer {
    const struct cost_model *cost;
    struct cost_memo *memo;   /* grid points: cost_step over sum_ctx */
    struct price_entry *t;    /* cap slots (a power of 2), linear probing */
    uint32_t cap, n;
    int64_t calls;            /* cost model calls (statistics) */
};

struct pricer *pricer_create(const struct cost_model *c)
{
    struct pricer *p = xcalloc(1, sizeof *p);
    p->cost = c;
    p->memo = cost_memo_create(c);
    p->cap = 4096;
    p->t = xcalloc(p->cap, sizeof *p->t);
    return p;
}

void pricer_destroy(struct pricer *p)
{
    if (!p)
        return;
    free(p->t);
    cost_memo_destroy(p->memo);
    free(p);
}

static void pricer_put(struct pricer *p, uint64_t key, int64_t ns, bool fb);

/* Home slot of a price key: an inline murmur-style finaliser (lookups run
 * once or twice per step; the table's layout changes no price). */
static inline uint32_t pricer_home(uint64_t key, uint32_t m)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (uint32_t)key & m;
}

static void pricer_grow(struct pricer *p)
{
    struct price_entry *old = p->t;
    uint32_t oc = p->cap;
    p->cap *= 2;
    p->t = xcalloc(p->cap, sizeof *p->t);
    p->n = 0;
    for (uint32_t i = 0; i < oc; i++)
        if (old[i].key)
            pricer_put(p, old[i].key, old[i].ns, old[i].fallback);
    free(old);
}

static void pricer_put(struct pricer *p, uint64_t key, int64_t ns, bool fb)
{
    if ((p->n + 1) * 2 > p->cap)
        pricer_grow(p);
    uint32_t m = p->cap - 1;
    uint32_t i = pricer_home(key, m);
    while (p->t[i].key)
        i = (i + 1) & m;
    p->t[i].key = key;
    p->t[i].ns = ns;
    p->t[i].fallback = fb;
    p->n++;
}

/* Decode-only step at a grid point of sum_ctx. */
static int64_t pricer_grid(struct pricer *p, const struct cost_batch *b,
                           int64_t g, bool *fb)
{
    uint64_t key = ((uint64_t)(uint32_t)b->n_decode << 44) ^
                   ((uint64_t)(b->decode_positions & 0xff) << 36) ^
                   ((uint64_t)(b->draft & 0xff) << 28) ^ (uint64_t)g ^ (1ULL << 63);
    uint32_t m = p->cap - 1;
    for (uint32_t i = pricer_home(key, m); p->t[i].key; i = (i + 1) & m)
        if (p->t[i].key == key) {
            *fb = p->t[i].fallback;
            return p->t[i].ns;
        }
    struct cost_batch q = *b;
    q.sum_ctx = g * PRICE_GRID;
    struct cost_result r;
    cost_step_memo(p->memo, &q, &r);
    p->calls++;
    pricer_put(p, key, r.step_ns, r.fallback);
    *fb = r.fallback;
    return r.step_ns;
}

int64_t pricer_step(struct pricer *p, const struct cost_batch *b, bool *fallback)
{
    if (b->n_prefill || b->n_decode <= 0 || b->n_decode >= (1 << 19) || b->sum_ctx < 0 ||
        b->sum_ctx / PRICE_GRID >= (1LL << 27)) {
        struct cost_result r;
        cost_step(p->cost, b, &r);
        p->calls++;
        *fallback = r.fallback;
        return r.step_ns;
    }
    int64_t g = b->sum_ctx / PRICE_GRID, off = b->sum_ctx - g * PRICE_GRID;
    bool fb1;
    int64_t c0 = pricer_grid(p, b, g, fallback);
    if (!off)
        return c0;
    int64_t c1 = pricer_grid(p, b, g + 1, &fb1);
    return c0 + ((c1 - c0) * off) / PRICE_GRID;
}
