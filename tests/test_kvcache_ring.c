/* test_kvcache_ring.c: the LRU queue keeps release order and every live
 * block's recorded position through compaction and regrowth of the ring,
 * including when its live part wraps around the end of the ring. A small
 * pool is churned (chains hit, released, evicted) so that the ring fills
 * with tombstones; after every round kv_verify must hold and the live
 * entries, oldest first, must be in the order the blocks were released. */
#include <string.h>

#include "engine/kvcache.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"

#define POOL 200

static uint64_t seq_of[4 * POOL]; /* per block: release number (LRU) */

/* 0 if the live queue entries are in release order and count n_lru. */
static int check_order(const struct kvcache *kv)
{
    uint64_t m = kv->q_cap - 1, last = 0;
    int64_t live = 0;
    for (uint64_t k = 0; k < kv->q_len; k++) {
        struct kv_lru_entry e = kv->q[(kv->q_head + k) & m];
        if (e.block == KV_NONE)
            continue;
        if (!(kv_flags(kv, e.block) & KV_LRU) || kv_gen(kv, e.block) != e.gen)
            continue;
        if (seq_of[e.block] <= last)
            return -1;
        last = seq_of[e.block];
        live++;
    }
    return live == kv->n_lru ? 0 : -1;
}

int main(void)
{
    struct kvcache kv;
    kv_init(&kv, POOL, 0);
    struct rng r;
    rng_init(&r, 7, 1);
    uint32_t held[8][64], n_held[8] = {0};
    uint64_t seq = 0;
    int bad_verify = 0, bad_order = 0, n_compact = 0;
    uint32_t cap_seen = (uint32_t)kv.q_cap;
    for (int round = 0; round < 20000; round++) {
        int slot = (int)rng_below(&r, 8);
        uint64_t len_before = kv.q_len, cap_before = kv.q_cap, head_before = kv.q_head;
        if (n_held[slot]) {
            /* Release the slot's chain, tail first. */
            kv_release_chain(&kv, held[slot], n_held[slot], NULL);
            for (uint32_t k = n_held[slot]; k-- > 0;) {
                uint32_t b = held[slot][k];
                if (kv_flags(&kv, b) & KV_LRU)
                    seq_of[b] = ++seq;
            }
            n_held[slot] = 0;
        } else {
            /* Take a chain: hits where cached, fresh blocks otherwise. */
            uint32_t n = 1 + (uint32_t)rng_below(&r, 40);
            /* Phases: mostly hits (tombstones pile up in the ring), then
             * mostly misses (evictions move the ring's head on). */
            bool hits = (round / 1500) % 2 == 0;
            uint64_t salt = hits ? rng_below(&r, 3) : 3 + rng_below(&r, 1000);
            for (uint32_t k = 0; k < n; k++) {
                uint64_t h = hash_mix(salt, k + 1);
                uint32_t b = kv_lookup(&kv, h);
                if (b != KV_NONE && kv_ref(&kv, b) == 0) {
                    kv_acquire(&kv, b);
                } else {
                    b = kv_alloc(&kv);
                    if (b == KV_NONE)
                        break;
                    kv_commit(&kv, b, h);
                }
                held[slot][n_held[slot]++] = b;
            }
        }
        if (kv.q_len < len_before && kv.q_cap == cap_before && kv.q_head == head_before)
            n_compact++; /* shrank in place: not stale entries popped at the head */
        if (kv.q_cap > cap_seen)
            cap_seen = (uint32_t)kv.q_cap;
        char err[ERR_LEN] = "";
        if (kv_verify(&kv, err)) {
            if (!bad_verify)
                fprintf(stderr, "round %d: kv_verify: %s\n", round, err);
            bad_verify++;
        }
        if (check_order(&kv))
            bad_order++;
    }
    CHECKF(bad_verify == 0, "kv_verify holds after every round (%d failed)", bad_verify);
    CHECKF(bad_order == 0, "live LRU entries stay in release order (%d rounds out of order)", bad_order);
    CHECKF(cap_seen > 1024, "the ring grew (capacity %u)", cap_seen);
    CHECKF(n_compact > 0, "the ring was compacted (%d times)", n_compact);
    CHECKF(kv.evictions > 0, "blocks were evicted (%lld)", (long long)kv.evictions);
    kv_free(&kv);
    return test_report();
}
