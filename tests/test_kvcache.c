/* test_kvcache.c: the block pool: allocation, LRU order over free cached
 * blocks, chain tails evicted first, hits, checkpoints and their units,
 * and kv_verify on a long random run. */
#include "engine/kvcache.h"

#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"

static int verify(const struct kvcache *kv)
{
    char err[ERR_LEN] = "";
    int rc = kv_verify(kv, err);
    if (rc)
        fprintf(stderr, "kv_verify: %s\n", err);
    return rc;
}

static void test_basic(void)
{
    struct kvcache kv;
    kv_init(&kv, 4, 0);
    uint32_t a = kv_alloc(&kv), b = kv_alloc(&kv), c = kv_alloc(&kv), d = kv_alloc(&kv);
    CHECK(a != KV_NONE && b != KV_NONE && c != KV_NONE && d != KV_NONE, "4 blocks fit a pool of 4");
    CHECK(kv_alloc(&kv) == KV_NONE, "the fifth does not");
    CHECK(kv_available(&kv) == 0, "nothing available");
    kv_commit(&kv, a, 100);
    kv_commit(&kv, b, 200);
    kv_commit(&kv, c, 100); /* same content as a: stays unhashed */
    CHECK(kv_lookup(&kv, 100) == a, "lookup finds the first holder");
    CHECK(kv_lookup(&kv, 200) == b, "lookup b");
    CHECK(kv_lookup(&kv, 300) == KV_NONE, "unknown hash misses");
    /* Release as a request does: tail first. */
    kv_release(&kv, d);
    kv_release(&kv, c);
    kv_release(&kv, b);
    kv_release(&kv, a);
    CHECK(kv.free_units == 2 && kv.lru_units == 2, "unhashed blocks free, hashed ones cached");
    CHECK(kv_lru_oldest(&kv) == b, "the chain tail (b) is the least recently freed");
    CHECK(verify(&kv) == 0, "verify after release");
    /* Two allocations use the empty blocks, the third evicts b (the tail). */
    uint32_t x = kv_alloc(&kv), y = kv_alloc(&kv);
    CHECK(kv.evictions == 0, "empty blocks first, no eviction");
    uint32_t z = kv_alloc(&kv);
    CHECK(kv.evictions == 1 && kv_lookup(&kv, 200) == KV_NONE && kv_lookup(&kv, 100) == a,
          "the chain tail is evicted before its head");
    /* A hit on a takes it off the LRU list. */
    kv_acquire(&kv, a);
    CHECK(kv.n_lru == 0 && kv_available(&kv) == 0, "acquired block is no longer evictable");
    CHECK(verify(&kv) == 0, "verify after hit");
    kv_release(&kv, x);
    kv_release(&kv, y);
    kv_release(&kv, z);
    kv_release(&kv, a);
    CHECK(kv.used_blocks == 0 && kv_available(&kv) == 4, "all back");
    kv_free(&kv);
}

static void test_lru_order(void)
{
    struct kvcache kv;
    kv_init(&kv, 6, 0);
    uint32_t b[6];
    for (int i = 0; i < 6; i++) {
        b[i] = kv_alloc(&kv);
        kv_commit(&kv, b[i], 1000 + i);
    }
    /* Free in the order 2, 0, 4: that is their LRU order. */
    kv_release(&kv, b[2]);
    kv_release(&kv, b[0]);
    kv_release(&kv, b[4]);
    /* A hit on 0 refreshes it when released again. */
    kv_acquire(&kv, b[0]);
    kv_release(&kv, b[0]);
    uint32_t n1 = kv_alloc(&kv);
    CHECK(kv_lookup(&kv, 1002) == KV_NONE, "least recently freed (2) evicted first");
    uint32_t n2 = kv_alloc(&kv);
    CHECK(kv_lookup(&kv, 1004) == KV_NONE && kv_lookup(&kv, 1000) == b[0],
          "then 4; 0 was refreshed by its hit");
    CHECK(verify(&kv) == 0, "verify");
    (void)n1;
    (void)n2;
    kv_free(&kv);
}

static void test_checkpoints(void)
{
    struct kvcache kv;
    kv_init(&kv, 10, 3);
    uint32_t a = kv_alloc(&kv), b = kv_alloc(&kv);
    CHECK(kv_checkpoint(&kv, a) == -1, "no checkpoint on an unhashed block");
    kv_commit(&kv, a, 1);
    kv_commit(&kv, b, 2);
    CHECK(kv_checkpoint(&kv, b) == 0 && kv_has_ckpt(&kv, b), "checkpoint attached");
    CHECK(kv.free_units == 10 - 2 - 3, "a checkpoint costs its units");
    kv_release(&kv, b);
    kv_release(&kv, a);
    CHECK(kv.lru_units == 1 + 1 + 3, "a cached block carries its checkpoint's units");
    CHECK(verify(&kv) == 0, "verify");
    /* Fill the pool: evicting b (least recent: released first) frees 4 units. */
    uint32_t held[8];
    int n = 0;
    while (kv.free_units > 0)
        held[n++] = kv_alloc(&kv);
    CHECK(n == 5 && kv_has_ckpt(&kv, b), "free units used first");
    held[n++] = kv_alloc(&kv);
    CHECK(kv_lookup(&kv, 2) == KV_NONE && kv.n_ckpt == 0 && kv.ckpt_evictions == 1,
          "evicting the block drops its checkpoint");
    CHECK(kv.free_units == 3, "and frees its units");
    CHECK(verify(&kv) == 0, "verify after eviction");
    for (int i = 0; i < n; i++)
        kv_release(&kv, held[i]);
    kv_free(&kv);
}

static void test_random(void)
{
    struct kvcache kv;
    kv_init(&kv, 200, 5);
    struct rng r;
    rng_init(&r, 42, 9);
    uint32_t held[512];
    int n = 0;
    int bad = 0;
    for (int it = 0; it < 20000; it++) {
        uint64_t op = rng_below(&r, 10);
        if (op < 4) {
            uint32_t b = kv_alloc(&kv);
            if (b != KV_NONE) {
                held[n++] = b;
                if (rng_below(&r, 2))
                    kv_commit(&kv, b, rng_below(&r, 500) + 1);
                if (rng_below(&r, 8) == 0)
                    kv_checkpoint(&kv, b);
            }
        } else if (op < 8 && n) {
            uint32_t k = (uint32_t)rng_below(&r, (uint64_t)n);
            kv_release(&kv, held[k]);
            held[k] = held[--n];
        } else if (n < 400) {
            uint32_t b = kv_lookup(&kv, rng_below(&r, 500) + 1);
            if (b != KV_NONE) {
                kv_acquire(&kv, b);
                held[n++] = b;
            }
        }
        if (n >= 390) {
            /* Half the time as one chain (tail first), as requests do. */
            if (rng_below(&r, 2)) {
                kv_release_chain(&kv, held, (uint32_t)n, NULL);
                n = 0;
            }
            while (n)
                kv_release(&kv, held[--n]);
        }
        if (op == 9 && n < 300) {
            /* Re-acquire a run of cached blocks as one chain. */
            uint32_t run[64];
            uint32_t k = 0;
            for (uint32_t h = 1; h <= 500 && k < 64; h++) {
                uint32_t b = kv_lookup(&kv, h);
                bool dup = false;
                for (uint32_t x = 0; x < k; x++)
                    dup |= run[x] == b;
                if (b != KV_NONE && !dup)
                    run[k++] = b;
            }
            kv_acquire_chain(&kv, run, k);
            for (uint32_t x = 0; x < k; x++)
                held[n++] = run[x];
        }
        if (it % 97 == 0 && verify(&kv))
            bad++;
    }
    CHECK(bad == 0, "kv_verify holds on a long random run");
    CHECK(kv.evictions > 0 && kv.ckpt_evictions > 0, "the run evicted blocks and checkpoints");
    while (n)
        kv_release(&kv, held[--n]);
    CHECK(verify(&kv) == 0 && kv.used_blocks == 0, "verify at the end");
    kv_free(&kv);
}

int main(void)
{
    test_basic();
    test_lru_order();
    test_checkpoints();
    test_random();
    return test_report();
}
