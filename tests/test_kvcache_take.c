/* test_kvcache_take.c: taking matched blocks during a prefix match and
 * giving them back (kv_take, kv_untake_chain) restores the pool exactly:
 * block words, LRU queue entries (tombstones undone) and every counter,
 * so the next eviction order is unchanged; the units taking pins are
 * kv_block_lru_units summed over the match. */
#include <string.h>

#include "engine/kvcache.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"

static int verify(const struct kvcache *kv)
{
    char err[ERR_LEN] = "";
    int rc = kv_verify(kv, err);
    if (rc)
        fprintf(stderr, "kv_verify: %s\n", err);
    return rc;
}

/* Builds a pool in a mixed state: chains held, released, evicted and
 * re-hit, some blocks checkpointed and some shared. */
static void churn(struct kvcache *kv, struct rng *r, uint32_t *held, uint32_t *n_held)
{
    uint32_t chain[64];
    for (int round = 0; round < 200; round++) {
        uint32_t n = 1 + (uint32_t)rng_below(r, 48), got = 0;
        uint64_t salt = rng_below(r, 6);
        for (uint32_t k = 0; k < n; k++) {
            uint64_t h = hash_mix(salt, k + 1);
            uint32_t b = kv_lookup(kv, h);
            if (b != KV_NONE) {
                kv_acquire(kv, b);
            } else {
                b = kv_alloc(kv);
                if (b == KV_NONE)
                    break;
                kv_commit(kv, b, h);
                if (k % 7 == 6)
                    kv_checkpoint(kv, b);
            }
            chain[got++] = b;
        }
        if (rng_below(r, 4) == 0 && *n_held + got <= 256) {
            memcpy(held + *n_held, chain, got * sizeof *chain);
            *n_held += got;
        } else {
            kv_release_chain(kv, chain, got, NULL);
        }
    }
}

struct snap {
    uint64_t st[4096];
    struct kv_lru_entry q[8192];
    uint64_t q_head, q_len;
    int64_t free_units, lru_units, used_blocks, n_lru, n_ckpt;
};

static void take_snap(const struct kvcache *kv, struct snap *s)
{
    memset(s, 0, sizeof *s);
    memcpy(s->st, kv->st, kv->n_made * sizeof *kv->st);
    for (uint64_t k = 0; k < kv->q_len && k < 8192; k++)
        s->q[k] = kv->q[(kv->q_head + k) & (kv->q_cap - 1)];
    s->q_head = kv->q_head;
    s->q_len = kv->q_len;
    s->free_units = kv->free_units;
    s->lru_units = kv->lru_units;
    s->used_blocks = kv->used_blocks;
    s->n_lru = kv->n_lru;
    s->n_ckpt = kv->n_ckpt;
}

int main(void)
{
    struct rng r;
    rng_init(&r, 11, RNG_TRACE);
    for (int trial = 0; trial < 20; trial++) {
        struct kvcache kv;
        kv_init(&kv, 600, trial % 2 ? 3 : 0);
        uint32_t held[256], n_held = 0;
        churn(&kv, &r, held, &n_held);
        CHECKF(verify(&kv) == 0, "trial %d: pool consistent after churn", trial);
        CHECKF(kv.n_made <= 4096 && kv.q_len <= 8192, "trial %d: snapshot fits", trial);
        /* A match: cached blocks and blocks held by others, in chain order. */
        uint32_t m = 0, blk[64];
        uint64_t salt = rng_below(&r, 6);
        for (uint32_t k = 0; k < 48; k++) {
            uint32_t b = kv_lookup(&kv, hash_mix(salt, k + 1));
            if (b == KV_NONE)
                break;
            blk[m++] = b;
        }
        int64_t pinned_ref = 0;
        for (uint32_t k = 0; k < m; k++)
            pinned_ref += kv_block_lru_units(&kv, blk[k]);
        struct snap *before = xmalloc(sizeof *before), *after = xmalloc(sizeof *after);
        take_snap(&kv, before);
        int64_t avail = kv_available(&kv), pinned = 0;
        for (uint32_t k = 0; k < m; k++)
            pinned += kv_take(&kv, blk[k]);
        CHECKF(pinned == pinned_ref, "trial %d: taking %u blocks pins %lld units, expected %lld",
               trial, m, (long long)pinned, (long long)pinned_ref);
        CHECKF(kv_available(&kv) == avail - pinned, "trial %d: available drops by pinned", trial);
        CHECKF(verify(&kv) == 0, "trial %d: consistent with the blocks taken", trial);
        kv_untake_chain(&kv, blk, m);
        take_snap(&kv, after);
        CHECKF(memcmp(before, after, sizeof *before) == 0,
               "trial %d: giving %u blocks back restores words, queue and counters", trial, m);
        CHECKF(verify(&kv) == 0, "trial %d: consistent after giving back", trial);
        /* And the eviction order is the one before: evict everything. */
        uint32_t order1[1024], n1 = 0;
        while (n1 < 1024) {
            uint32_t b = kv_lru_oldest(&kv);
            if (b == KV_NONE)
                break;
            order1[n1++] = b;
            kv_acquire(&kv, b); /* takes it off the queue */
        }
        CHECKF(n1 == (uint32_t)before->n_lru, "trial %d: every cached block is reached once",
               trial);
        /* The order is the queue order of the snapshot's live entries. */
        uint32_t k1 = 0;
        bool same = true;
        for (uint64_t k = 0; k < before->q_len; k++)
            if (before->q[k].block != KV_NONE)
                same &= k1 < n1 && order1[k1++] == before->q[k].block;
        CHECKF(same && k1 == n1, "trial %d: eviction order unchanged", trial);
        free(before);
        free(after);
        kv_free(&kv);
    }
    return test_report();
}
