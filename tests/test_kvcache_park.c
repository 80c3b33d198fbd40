/* test_kvcache_park.c: parks (kvcache.h) against block-by-block release.
 *
 * Two pools run the same random workload of sessions: pool A parks each
 * finished call's hashed prefix and lets the session's next call adopt
 * it, as the scheduler does; pool B releases and takes every block one by
 * one. Calls are admitted or given back (untake), other holders take
 * blocks of parked prefixes (foreign lookups), allocations and
 * checkpoints evict (eviction reaches parks), the queue is compacted and
 * regrown with parks on it. After every operation both pools pass
 * kv_verify and agree on everything observable: block ids handed out,
 * lookups, the next block to evict, every block's state (a parked block
 * in A is a free cached block in B) and all counters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kvcache.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"

#define N_SESS 10
#define MAXB 64
#define N_FOREIGN 24

struct tsess {
    int calls;
    bool busy;
    /* The call in flight. */
    uint32_t n, blk[MAXB], gen[MAXB];
    uint64_t hash[MAXB];  /* content of blk[k] */
    uint32_t hp, ck_hp, tag, adopt_n;
    uint32_t epoch;
    bool took_shared;
    /* Its park (the blocks and generations live here while it is live). */
    uint32_t park_id;
    uint64_t park_serial;
    uint32_t park_blk[MAXB], park_gen[MAXB];
    uint64_t park_hash[MAXB];
};

struct world {
    struct kvcache a, b;
    struct tsess s[N_SESS];
    uint32_t foreign[N_FOREIGN];
    int n_foreign;
    struct rng r;
    /* What happened (the test checks each case was reached). */
    int64_t parks, adopts, partial_adopts, untakes_with_adopt, foreign_parked, evict_parked,
        compact_with_parks, refused, ops, mismatches;
};

static struct world TOTAL; /* the cases reached, over all runs */

static uint64_t chain_hash(int s, uint32_t k) { return hash_mix((uint64_t)s + 1, (uint64_t)k + 1); }

static bool parked_in_a(const struct kvcache *a, uint32_t i)
{
    for (uint32_t id = 0; id < a->n_parks; id++) {
        const struct kv_park *pk = &a->parks[id];
        if (pk->state != KV_PARK_LIVE)
            continue;
        for (uint32_t k = 0; k < pk->n; k++)
            if (pk->blk[k] == i)
                return true;
    }
    return false;
}

/* Both pools pass kv_verify and agree on every observable. */
static void compare(struct world *w, const char *what)
{
    char err[ERR_LEN];
    bool ok = true;
    if (kv_verify(&w->a, err) < 0) {
        fprintf(stderr, "op %lld (%s): pool A: %s\n", (long long)w->ops, what, err);
        ok = false;
    }
    if (kv_verify(&w->b, err) < 0) {
        fprintf(stderr, "op %lld (%s): pool B: %s\n", (long long)w->ops, what, err);
        ok = false;
    }
    const struct kvcache *a = &w->a, *b = &w->b;
    if (a->free_units != b->free_units || a->lru_units != b->lru_units || a->n_lru != b->n_lru ||
        a->used_blocks != b->used_blocks || a->n_ckpt != b->n_ckpt ||
        a->evictions != b->evictions || a->ckpt_evictions != b->ckpt_evictions ||
        a->tn != b->tn || a->n_made != b->n_made || a->empty_head != b->empty_head) {
        fprintf(stderr, "op %lld (%s): counters differ: free %lld/%lld lru %lld/%lld n_lru "
                        "%lld/%lld used %lld/%lld evictions %lld/%lld made %u/%u\n",
                (long long)w->ops, what, (long long)a->free_units, (long long)b->free_units,
                (long long)a->lru_units, (long long)b->lru_units, (long long)a->n_lru,
                (long long)b->n_lru, (long long)a->used_blocks, (long long)b->used_blocks,
                (long long)a->evictions, (long long)b->evictions, a->n_made, b->n_made);
        ok = false;
    }
    uint8_t *parked = calloc(a->n_made + 1, 1);
    for (uint32_t id = 0; id < a->n_parks; id++)
        if (a->parks[id].state == KV_PARK_LIVE)
            for (uint32_t k = 0; k < a->parks[id].n; k++)
                parked[a->parks[id].blk[k]] = 1;
    for (uint32_t i = 0; ok && i < a->n_made; i++) {
        uint32_t fa = kv_flags(a, i), fb = kv_flags(b, i);
        uint32_t ra = kv_ref(a, i), rb = kv_ref(b, i);
        if (parked[i]) {
            if (ra != 1 || rb != 0 || (fa & KV_LRU) || !(fb & KV_LRU) ||
                (fa | KV_LRU) != fb) {
                fprintf(stderr, "op %lld (%s): parked block %u: A ref %u flags %#x, B ref %u "
                                "flags %#x\n", (long long)w->ops, what, i, ra, fa, rb, fb);
                ok = false;
            }
        } else if (ra != rb || fa != fb) {
            fprintf(stderr, "op %lld (%s): block %u: A ref %u flags %#x, B ref %u flags %#x\n",
                    (long long)w->ops, what, i, ra, fa, rb, fb);
            ok = false;
        }
        if (ok && (fa & KV_HASHED) && a->hash[i] != b->hash[i]) {
            fprintf(stderr, "op %lld (%s): block %u holds other content\n", (long long)w->ops,
                    what, i);
            ok = false;
        }
    }
    free(parked);
    if (!ok)
        w->mismatches++;
}

/* Materialises session s's park if it is still live (the scheduler does
 * it when the hint that owns a park is dropped). */
static void drop_park(struct world *w, struct tsess *t)
{
    if (kv_park_live(&w->a, t->park_id, t->park_serial))
        kv_park_split(&w->a, t->park_id, 0);
    t->park_serial = 0;
}

static void give_back(struct world *w, struct tsess *t, uint32_t m)
{
    /* Undo both pools' takes (A: the adopted park goes back whole). */
    kv_untake_chain(&w->a, t->blk + t->adopt_n, m - t->adopt_n);
    if (t->adopt_n) {
        kv_unadopt(&w->a, t->park_id);
        w->untakes_with_adopt++;
    }
    kv_untake_chain(&w->b, t->blk, m);
}

static void start_call(struct world *w, int si)
{
    struct tsess *t = &w->s[si];
    struct kvcache *a = &w->a, *b = &w->b;
    uint32_t n = 4 + 3 * (uint32_t)t->calls + (uint32_t)rng_below(&w->r, 3);
    if (n > MAXB)
        n = MAXB - (uint32_t)rng_below(&w->r, 8);
    uint32_t lim = n - 1 - (uint32_t)rng_below(&w->r, 2); /* hits stop before the end */
    t->adopt_n = 0;
    t->took_shared = false;
    uint32_t m = 0, ck = 0;
    if (kv_park_live(a, t->park_id, t->park_serial)) {
        struct kv_park *pk = &a->parks[t->park_id];
        /* As the scheduler: the parked blocks up to the limit whose
         * content is what this call wants. */
        uint32_t k = 0;
        while (k < pk->n && k < lim && t->park_hash[k] == chain_hash(si, k))
            k++;
        if (k < pk->n) {
            kv_park_split(a, t->park_id, k);
            w->partial_adopts++;
        }
        if (k) {
            ck += pk->n_ck;
            kv_adopt(a, t->park_id);
            memcpy(t->blk, t->park_blk, k * sizeof *t->blk);
            t->adopt_n = m = k;
            w->adopts++;
        }
    }
    while (m < lim) {
        uint32_t x = kv_lookup(a, chain_hash(si, m));
        if (x == KV_NONE)
            break;
        int64_t u = kv_take(a, x);
        ck += u > 1;
        t->took_shared |= u == 0;
        t->hash[m] = chain_hash(si, m);
        t->blk[m++] = x;
    }
    /* Pool B finds the same blocks one by one. */
    uint32_t mb = 0;
    bool same = true;
    while (mb < lim) {
        uint32_t x = kv_lookup(b, chain_hash(si, mb));
        if (x == KV_NONE)
            break;
        kv_take(b, x);
        same &= mb < m && x == t->blk[mb];
        mb++;
    }
    if (!same || mb != m) {
        fprintf(stderr, "op %lld: session %d matched %u blocks in A, %u in B\n",
                (long long)w->ops, si, m, mb);
        w->mismatches++;
        return;
    }
    int64_t need = (int64_t)(n - m);
    if (kv_available(a) != kv_available(b))
        w->mismatches++;
    if (rng_below(&w->r, 8) == 0 || need > kv_available(a)) {
        give_back(w, t, m);
        return;
    }
    t->tag = t->adopt_n ? a->parks[t->park_id].tag : kv_tag_new(a);
    for (uint32_t k = t->adopt_n; k < m; k++)
        kv_tag(a, t->blk[k], t->tag);
    t->epoch = kv_share_mark(a, t->tag);
    t->hp = m;
    t->ck_hp = ck;
    for (uint32_t k = m; k < n; k++) {
        uint32_t x = kv_alloc(a), y = kv_alloc(b);
        if (x != y || x == KV_NONE) {
            fprintf(stderr, "op %lld: alloc gave %u in A, %u in B\n", (long long)w->ops, x, y);
            w->mismatches++;
            return;
        }
        kv_tag(a, x, t->tag);
        t->blk[k] = x;
    }
    t->n = n;
    /* Commit: now and then another session's content, which may already
     * be cached (the block then stays unhashed: the hashed prefix ends). */
    for (uint32_t k = m; k < n; k++) {
        uint64_t h = rng_below(&w->r, 12) ? chain_hash(si, k)
                                          : chain_hash((int)rng_below(&w->r, N_SESS), k);
        bool ha = kv_commit(a, t->blk[k], h), hb = kv_commit(b, t->blk[k], h);
        t->hash[k] = h;
        if (ha != hb)
            w->mismatches++;
        if (k == t->hp && ha)
            t->hp++;
        if ((k + 1) % 4 == 0 || k + 1 == n) {
            bool had = kv_has_ckpt(a, t->blk[k]);
            int ra = kv_checkpoint(a, t->blk[k]), rb = kv_checkpoint(b, t->blk[k]);
            if (ra != rb)
                w->mismatches++;
            if (ra == 0 && !had && k < t->hp)
                t->ck_hp++;
        }
    }
    /* The session's previous park is superseded (the hint is dropped at
     * admission). */
    if (!t->adopt_n)
        drop_park(w, t);
    t->busy = true;
    t->calls++;
}

static void end_call(struct world *w, int si)
{
    struct tsess *t = &w->s[si];
    struct kvcache *a = &w->a;
    bool park = t->hp && !t->took_shared && t->epoch == kv_share_mark(a, t->tag) &&
                rng_below(&w->r, 6) != 0;
    drop_park(w, t); /* a park not adopted goes now (its arrays are reused) */
    if (park) {
        kv_release_chain(a, t->blk + t->hp, t->n - t->hp, t->gen + t->hp);
        memcpy(t->park_blk, t->blk, t->hp * sizeof *t->blk);
        memcpy(t->park_hash, t->hash, t->hp * sizeof *t->hash);
        t->park_id = kv_park(a, t->park_blk, t->park_gen, t->hp, t->ck_hp, t->tag,
                             &t->park_serial);
        if (t->park_id == KV_NONE) {
            kv_release_chain(a, t->blk, t->hp, t->gen);
            t->park_serial = 0;
            w->refused++;
        } else {
            w->parks++;
        }
    } else {
        kv_release_chain(a, t->blk, t->n, t->gen);
    }
    kv_release_chain(&w->b, t->blk, t->n, NULL);
    t->busy = false;
    if (t->calls > 18 && rng_below(&w->r, 3) == 0)
        t->calls = 0; /* a new conversation: shorter prompts again */
}

/* Another holder takes a cached block of some session's chain. */
static void foreign_take(struct world *w)
{
    if (w->n_foreign == N_FOREIGN)
        return;
    int si = (int)rng_below(&w->r, N_SESS);
    uint64_t h = chain_hash(si, (uint32_t)rng_below(&w->r, 24));
    uint32_t x = kv_lookup(&w->a, h), y = kv_lookup(&w->b, h);
    if (x != y) {
        w->mismatches++;
        return;
    }
    if (x == KV_NONE)
        return;
    if (parked_in_a(&w->a, x))
        w->foreign_parked++;
    kv_take(&w->a, x);
    kv_take(&w->b, x);
    w->foreign[w->n_foreign++] = x;
}

static void foreign_release(struct world *w)
{
    if (!w->n_foreign)
        return;
    uint32_t k = (uint32_t)rng_below(&w->r, (uint64_t)w->n_foreign);
    uint32_t x = w->foreign[k];
    w->foreign[k] = w->foreign[--w->n_foreign];
    kv_release(&w->a, x);
    kv_release(&w->b, x);
}

static void run_world(uint64_t seed, int64_t units, int64_t ckpt_units, int ops)
{
    struct world *w = calloc(1, sizeof *w);
    kv_init(&w->a, units, ckpt_units);
    kv_init(&w->b, units, ckpt_units);
    rng_init(&w->r, seed, RNG_SYNTH);
    for (int i = 0; i < ops; i++) {
        w->ops++;
        uint64_t cap0 = w->a.q_cap, head0 = w->a.q_head, len0 = w->a.q_len;
        int64_t live0 = w->a.n_parks_live, ev0 = w->a.evictions;
        int64_t mat0 = w->a.park_blocks_materialised;
        int si = (int)rng_below(&w->r, N_SESS);
        uint64_t op = rng_below(&w->r, 16);
        const char *what;
        if (op < 10) {
            what = w->s[si].busy ? "end call" : "start call";
            if (w->s[si].busy)
                end_call(w, si);
            else
                start_call(w, si);
        } else if (op < 12) {
            what = "foreign take";
            foreign_take(w);
        } else if (op < 14) {
            what = "foreign release";
            foreign_release(w);
        } else if (op < 15) {
            what = "hint dropped";
            if (!w->s[si].busy)
                drop_park(w, &w->s[si]);
        } else {
            what = "next to evict";
            uint32_t x = kv_lru_oldest(&w->a), y = kv_lru_oldest(&w->b);
            if (x != y) {
                fprintf(stderr, "op %lld: next to evict %u in A, %u in B\n",
                        (long long)w->ops, x, y);
                w->mismatches++;
            }
        }
        if (w->a.evictions > ev0 && w->a.park_blocks_materialised > mat0 && live0)
            w->evict_parked++;
        /* The ring compacted or regrew (its length fell by more than
         * eviction pops, or its capacity changed) while parks were on it. */
        if (live0 && w->a.n_parks_live &&
            (w->a.q_cap != cap0 || (w->a.q_head == head0 && w->a.q_len < len0)))
            w->compact_with_parks++;
        compare(w, what);
        if (w->mismatches)
            break;
    }
    fprintf(stderr, "seed %llu, %lld units: %lld ops, %lld parks (%lld refused), %lld adopted "
                    "(%lld after a split), %lld given back, %lld foreign takes of parked blocks, "
                    "%lld evictions reaching parks, %lld compactions/regrowths with parks, "
                    "%lld blocks materialised, ring %llu\n",
            (unsigned long long)seed, (long long)units, (long long)w->ops, (long long)w->parks,
            (long long)w->refused, (long long)w->adopts, (long long)w->partial_adopts,
            (long long)w->untakes_with_adopt, (long long)w->foreign_parked,
            (long long)w->evict_parked, (long long)w->compact_with_parks,
            (long long)w->a.park_blocks_materialised, (unsigned long long)w->a.q_cap);
    CHECKF(w->mismatches == 0, "seed %llu: parks and one-by-one release agree after every "
           "operation (%lld ops)", (unsigned long long)seed, (long long)w->ops);
    CHECKF(w->parks > 100 && w->adopts > 50, "seed %llu: parks made (%lld) and adopted (%lld)",
           (unsigned long long)seed, (long long)w->parks, (long long)w->adopts);
    TOTAL.partial_adopts += w->partial_adopts;
    TOTAL.untakes_with_adopt += w->untakes_with_adopt;
    TOTAL.foreign_parked += w->foreign_parked;
    TOTAL.evict_parked += w->evict_parked;
    TOTAL.compact_with_parks += w->compact_with_parks;
    for (int i = 0; i < N_SESS; i++)
        drop_park(w, &w->s[i]);
    kv_free(&w->a);
    kv_free(&w->b);
    free(w);
}

/* The park primitives on their own: counters, marker, split, adopt. */
static void test_basics(void)
{
    struct kvcache kv;
    kv_init(&kv, 20, 2);
    uint32_t blk[6], gen[6];
    uint32_t tag = kv_tag_new(&kv);
    for (int i = 0; i < 6; i++) {
        blk[i] = kv_alloc(&kv);
        kv_tag(&kv, blk[i], tag);
        CHECK(kv_commit(&kv, blk[i], 500 + (uint64_t)i), "commit");
    }
    CHECK(kv_checkpoint(&kv, blk[5]) == 0, "checkpoint on the last block");
    char err[ERR_LEN];
    uint64_t serial;
    uint32_t id = kv_park(&kv, blk, gen, 6, 1, tag, &serial);
    CHECK(id != KV_NONE && kv_park_live(&kv, id, serial), "parked");
    CHECK(kv.used_blocks == 0 && kv.n_lru == 6 && kv.lru_units == 8 && kv.free_units == 12,
          "a park counts as free cached blocks and its checkpoint");
    CHECK(kv_verify(&kv, err) == 0, "verify with a park");
    kv_park_split(&kv, id, 4);
    CHECK(kv_park_live(&kv, id, serial) && kv.parks[id].n == 4 && kv.parks[id].n_ck == 0,
          "split: blocks 4 and 5 materialised, 0..3 stay parked");
    CHECK(kv_flags(&kv, blk[5]) & KV_LRU, "materialised block on the LRU list");
    CHECK(kv_lru_oldest(&kv) == blk[5], "released tail first: block 5 is evicted first");
    CHECK(kv_verify(&kv, err) == 0, "verify after the split");
    int64_t u = kv_adopt(&kv, id);
    CHECK(u == 4 && kv.used_blocks == 4 && kv.n_lru == 2, "adopt takes the 4 blocks whole");
    kv_unadopt(&kv, id);
    CHECK(kv.used_blocks == 0 && kv.n_lru == 6 && kv_verify(&kv, err) == 0, "unadopt restores");
    /* Eviction reaches the park after blocks 5 and 4. */
    for (int i = 0; i < 40 && kv.evictions < 2; i++)
        CHECK(kv_alloc(&kv) != KV_NONE, "alloc");
    CHECK(kv.evictions == 2 && kv_park_live(&kv, id, serial), "two evictions: the park waits");
    CHECK(kv_verify(&kv, err) == 0, "verify");
    for (int i = 0; i < 40 && kv.evictions < 3; i++)
        CHECK(kv_alloc(&kv) != KV_NONE, "alloc");
    CHECK(kv.evictions == 3 && !kv_park_live(&kv, id, serial),
          "the next eviction materialises the park");
    CHECK(kv_lookup(&kv, 503) == KV_NONE && kv_lookup(&kv, 502) == blk[2],
          "and evicts its tail block first");
    CHECK(kv_verify(&kv, err) == 0, "verify after eviction");
    kv_free(&kv);

    /* A second holder of a tagged block moves its tag's share mark; a park
     * whose tag slot is held by another live park is not made. */
    kv_init(&kv, 20, 0);
    uint32_t t1 = kv_tag_new(&kv), x[2], y[2];
    for (int i = 0; i < 2; i++) {
        x[i] = kv_alloc(&kv);
        kv_tag(&kv, x[i], t1);
        kv_commit(&kv, x[i], 900 + (uint64_t)i);
    }
    uint32_t mark = kv_share_mark(&kv, t1);
    kv_take(&kv, x[1]);
    CHECK(kv_share_mark(&kv, t1) != mark, "taking an in-use block moves its holder's mark");
    kv_release(&kv, x[1]);
    id = kv_park(&kv, x, gen, 2, 0, t1, &serial);
    CHECK(id != KV_NONE, "parked");
    kv.tag_serial = t1 + KV_TAG_SLOTS - 1;
    uint32_t t2 = kv_tag_new(&kv);
    CHECK((t2 & (KV_TAG_SLOTS - 1)) == (t1 & (KV_TAG_SLOTS - 1)), "a tag in the same slot");
    for (int i = 0; i < 2; i++) {
        y[i] = kv_alloc(&kv);
        kv_tag(&kv, y[i], t2);
        kv_commit(&kv, y[i], 950 + (uint64_t)i);
    }
    int64_t used = kv.used_blocks, lru = kv.lru_units;
    uint64_t serial2;
    CHECK(kv_park(&kv, y, gen + 2, 2, 0, t2, &serial2) == KV_NONE && kv.used_blocks == used &&
              kv.lru_units == lru && kv.n_parks_live == 1,
          "refused: its tag's slot is taken; nothing changed");
    kv_release_chain(&kv, y, 2, NULL);
    /* Taking a parked block materialises its park first. */
    kv_take(&kv, x[0]);
    CHECK(kv.n_parks_live == 0 && kv_ref(&kv, x[0]) == 1 && (kv_flags(&kv, x[1]) & KV_LRU),
          "a lookup that takes a parked block materialises its park");
    CHECK(kv_verify(&kv, err) == 0, "verify");
    kv_free(&kv);
}

int main(void)
{
    test_basics();
    run_world(1, 160, 2, 6000);
    run_world(2, 96, 3, 6000);
    run_world(3, 400, 0, 8000);
    run_world(4, 3000, 0, 30000);
    run_world(5, 1500, 1, 30000);
    CHECKF(TOTAL.partial_adopts > 0 && TOTAL.untakes_with_adopt > 0,
           "partial adoptions (%lld) and adoptions given back (%lld)",
           (long long)TOTAL.partial_adopts, (long long)TOTAL.untakes_with_adopt);
    CHECKF(TOTAL.foreign_parked > 0, "foreign takes of parked blocks (%lld)",
           (long long)TOTAL.foreign_parked);
    CHECKF(TOTAL.evict_parked > 0, "evictions that reach parks (%lld)",
           (long long)TOTAL.evict_parked);
    CHECKF(TOTAL.compact_with_parks > 0, "compactions or regrowths with parks (%lld)",
           (long long)TOTAL.compact_with_parks);
    return test_report();
}
