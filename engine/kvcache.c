/* kvcache.c: the paged KV block pool with prefix reuse, LRU eviction and
 * recurrent-state checkpoints (see kvcache.h). */
#include "engine/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/util.h"

void kv_init(struct kvcache *kv, int64_t total_units, int64_t ckpt_units)
{
    memset(kv, 0, sizeof *kv);
    kv->total_units = total_units;
    kv->free_units = total_units;
    kv->ckpt_units = ckpt_units;
    kv->empty_head = KV_NONE;
    kv->lru_head = kv->lru_tail = KV_NONE;
    kv->tcap = 1024;
    kv->tkey = xcalloc(kv->tcap, sizeof *kv->tkey);
    kv->tval = xcalloc(kv->tcap, sizeof *kv->tval);
}

void kv_free(struct kvcache *kv)
{
    free(kv->b);
    free(kv->tkey);
    free(kv->tval);
    memset(kv, 0, sizeof *kv);
}

/* ---- hash table ---- */

static inline uint64_t tkey_of(uint64_t h) { return h ? h : 1; }

uint32_t kv_lookup(const struct kvcache *kv, uint64_t hash)
{
    uint64_t k = tkey_of(hash);
    uint32_t m = kv->tcap - 1;
    for (uint32_t p = (uint32_t)(k ^ (k >> 32)) & m;; p = (p + 1) & m) {
        if (kv->tkey[p] == k)
            return kv->tval[p];
        if (!kv->tkey[p])
            return KV_NONE;
    }
}

static void table_put(struct kvcache *kv, uint64_t k, uint32_t v);

static void table_grow(struct kvcache *kv)
{
    uint64_t *ok = kv->tkey;
    uint32_t *ov = kv->tval;
    uint32_t oc = kv->tcap;
    kv->tcap *= 2;
    kv->tkey = xcalloc(kv->tcap, sizeof *kv->tkey);
    kv->tval = xcalloc(kv->tcap, sizeof *kv->tval);
    kv->tn = 0;
    for (uint32_t i = 0; i < oc; i++)
        if (ok[i])
            table_put(kv, ok[i], ov[i]);
    free(ok);
    free(ov);
}

static void table_put(struct kvcache *kv, uint64_t k, uint32_t v)
{
    if ((kv->tn + 1) * 2 > kv->tcap)
        table_grow(kv);
    uint32_t m = kv->tcap - 1;
    uint32_t p = (uint32_t)(k ^ (k >> 32)) & m;
    while (kv->tkey[p])
        p = (p + 1) & m;
    kv->tkey[p] = k;
    kv->tval[p] = v;
    kv->tn++;
}

static void table_del(struct kvcache *kv, uint64_t k)
{
    uint32_t m = kv->tcap - 1;
    uint32_t p = (uint32_t)(k ^ (k >> 32)) & m;
    while (kv->tkey[p] != k) {
        ASSERT(kv->tkey[p]);
        p = (p + 1) & m;
    }
    /* Backward-shift deletion keeps probe chains intact. */
    uint32_t hole = p;
    for (uint32_t q = (p + 1) & m; kv->tkey[q]; q = (q + 1) & m) {
        uint64_t kq = kv->tkey[q];
        uint32_t home = (uint32_t)(kq ^ (kq >> 32)) & m;
        /* Move q into the hole if its home is not in (hole, q]. */
        bool in_range = hole <= q ? (home > hole && home <= q)
                                  : (home > hole || home <= q);
        if (!in_range) {
            kv->tkey[hole] = kq;
            kv->tval[hole] = kv->tval[q];
            hole = q;
        }
    }
    kv->tkey[hole] = 0;
    kv->tn--;
}

/* ---- lists ---- */

static void lru_unlink(struct kvcache *kv, uint32_t i)
{
    struct kv_block *b = &kv->b[i];
    if (b->prev != KV_NONE)
        kv->b[b->prev].next = b->next;
    else
        kv->lru_head = b->next;
    if (b->next != KV_NONE)
        kv->b[b->next].prev = b->prev;
    else
        kv->lru_tail = b->prev;
    b->prev = b->next = KV_NONE;
    b->flags &= ~KV_LRU;
    kv->n_lru--;
    kv->lru_units -= 1 + ((b->flags & KV_CKPT) ? kv->ckpt_units : 0);
}

static void lru_append(struct kvcache *kv, uint32_t i)
{
    struct kv_block *b = &kv->b[i];
    b->prev = kv->lru_tail;
    b->next = KV_NONE;
    if (kv->lru_tail != KV_NONE)
        kv->b[kv->lru_tail].next = i;
    else
        kv->lru_head = i;
    kv->lru_tail = i;
    b->flags |= KV_LRU;
    kv->n_lru++;
    kv->lru_units += 1 + ((b->flags & KV_CKPT) ? kv->ckpt_units : 0);
}

static void empty_push(struct kvcache *kv, uint32_t i)
{
    kv->b[i].flags = 0;
    kv->b[i].next = kv->empty_head;
    kv->b[i].prev = KV_NONE;
    kv->empty_head = i;
}

/* Evicts the least recently freed cached block; its units become free. */
static bool evict_one(struct kvcache *kv)
{
    uint32_t i = kv->lru_head;
    if (i == KV_NONE)
        return false;
    struct kv_block *b = &kv->b[i];
    lru_unlink(kv, i);
    kv->free_units += 1;
    if (b->flags & KV_CKPT) {
        kv->free_units += kv->ckpt_units;
        kv->n_ckpt--;
        kv->ckpt_evictions++;
    }
    if (b->flags & KV_HASHED)
        table_del(kv, tkey_of(b->hash));
    kv->evictions++;
    empty_push(kv, i);
    return true;
}

void kv_acquire(struct kvcache *kv, uint32_t i)
{
    struct kv_block *b = &kv->b[i];
    if (b->ref == 0) {
        ASSERT(b->flags & KV_LRU);
        lru_unlink(kv, i);
        kv->used_blocks++;
    }
    b->ref++;
}

uint32_t kv_alloc(struct kvcache *kv)
{
    while (kv->free_units < 1)
        if (!evict_one(kv))
            return KV_NONE;
    kv->free_units--;
    uint32_t i = kv->empty_head;
    if (i != KV_NONE) {
        kv->empty_head = kv->b[i].next;
    } else {
        if (kv->n_made == kv->cap_made) {
            kv->cap_made = kv->cap_made ? kv->cap_made * 2 : 1024;
            kv->b = xrealloc(kv->b, (size_t)kv->cap_made * sizeof *kv->b);
        }
        i = kv->n_made++;
    }
    struct kv_block *b = &kv->b[i];
    b->hash = 0;
    b->ref = 1;
    b->prev = b->next = KV_NONE;
    b->flags = 0;
    kv->used_blocks++;
    return i;
}

void kv_release(struct kvcache *kv, uint32_t i)
{
    struct kv_block *b = &kv->b[i];
    ASSERT(b->ref > 0);
    if (--b->ref)
        return;
    kv->used_blocks--;
    if (b->flags & KV_HASHED) {
        lru_append(kv, i);
    } else {
        ASSERT(!(b->flags & KV_CKPT));
        kv->free_units++;
        empty_push(kv, i);
    }
}

void kv_commit(struct kvcache *kv, uint32_t i, uint64_t hash)
{
    struct kv_block *b = &kv->b[i];
    if (b->flags & KV_HASHED)
        return;
    uint64_t k = tkey_of(hash);
    if (kv_lookup(kv, k) != KV_NONE)
        return;
    table_put(kv, k, i);
    b->hash = k;
    b->flags |= KV_HASHED;
}

int kv_checkpoint(struct kvcache *kv, uint32_t i)
{
    struct kv_block *b = &kv->b[i];
    if (!kv->ckpt_units || !(b->flags & KV_HASHED) || (b->flags & KV_CKPT))
        return (b->flags & KV_CKPT) ? 0 : -1;
    ASSERT(b->ref > 0);
    if (kv->free_units + kv->lru_units < kv->ckpt_units)
        return -1;
    while (kv->free_units < kv->ckpt_units)
        if (!evict_one(kv))
            return -1;
    kv->free_units -= kv->ckpt_units;
    b->flags |= KV_CKPT;
    kv->n_ckpt++;
    kv->ckpt_made++;
    return 0;
}

int kv_verify(const struct kvcache *kv, char *err)
{
    int64_t in_use = 0, lru = 0, lru_units = 0, hashed = 0, ckpt = 0, ckpt_in_use = 0;
    for (uint32_t i = 0; i < kv->n_made; i++) {
        const struct kv_block *b = &kv->b[i];
        if (b->flags & KV_HASHED) {
            hashed++;
            if (kv_lookup(kv, b->hash) != i)
                return err_set(err, "kv: block %u hash not in table", i);
        }
        if (b->flags & KV_CKPT) {
            ckpt++;
            if (!(b->flags & KV_HASHED))
                return err_set(err, "kv: block %u has a checkpoint but no hash", i);
        }
        if (b->ref > 0) {
            in_use++;
            if (b->flags & KV_LRU)
                return err_set(err, "kv: block %u in use and on the LRU list", i);
            if (b->flags & KV_CKPT)
                ckpt_in_use++;
        }
    }
    uint32_t prev = KV_NONE;
    for (uint32_t i = kv->lru_head; i != KV_NONE; i = kv->b[i].next) {
        const struct kv_block *b = &kv->b[i];
        if (b->ref || !(b->flags & KV_LRU) || !(b->flags & KV_HASHED) || b->prev != prev)
            return err_set(err, "kv: LRU list corrupt at block %u", i);
        lru++;
        lru_units += 1 + ((b->flags & KV_CKPT) ? kv->ckpt_units : 0);
        prev = i;
        if (lru > kv->n_made)
            return err_set(err, "kv: LRU list has a cycle");
    }
    if (prev != kv->lru_tail)
        return err_set(err, "kv: LRU tail mismatch");
    int64_t empty = 0;
    for (uint32_t i = kv->empty_head; i != KV_NONE; i = kv->b[i].next) {
        if (kv->b[i].ref || kv->b[i].flags)
            return err_set(err, "kv: empty block %u is not empty", i);
        if (++empty > kv->n_made)
            return err_set(err, "kv: empty stack has a cycle");
    }
    if (in_use != kv->used_blocks)
        return err_set(err, "kv: %lld blocks in use, counted %lld", (long long)in_use,
                       (long long)kv->used_blocks);
    if (lru != kv->n_lru || lru_units != kv->lru_units)
        return err_set(err, "kv: LRU count %lld/%lld units %lld/%lld", (long long)lru,
                       (long long)kv->n_lru, (long long)lru_units, (long long)kv->lru_units);
    if (in_use + lru + empty != kv->n_made)
        return err_set(err, "kv: %lld in use + %lld cached + %lld empty != %u made",
                       (long long)in_use, (long long)lru, (long long)empty, kv->n_made);
    if (hashed != kv->tn)
        return err_set(err, "kv: %lld hashed blocks, table holds %u", (long long)hashed, kv->tn);
    if (ckpt != kv->n_ckpt)
        return err_set(err, "kv: %lld checkpoints, counted %lld", (long long)ckpt,
                       (long long)kv->n_ckpt);
    int64_t used_units = in_use + ckpt_in_use * kv->ckpt_units + kv->lru_units;
    if (used_units + kv->free_units != kv->total_units || kv->free_units < 0)
        return err_set(err, "kv: units used %lld + free %lld != total %lld",
                       (long long)used_units, (long long)kv->free_units,
                       (long long)kv->total_units);
    return 0;
}
