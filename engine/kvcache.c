/* kvcache.c: the paged KV block pool with prefix reuse, LRU eviction and
 * recurrent-state checkpoints (see kvcache.h). */
#include "engine/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"

void kv_init(struct kvcache *kv, int64_t total_units, int64_t ckpt_units)
{
    memset(kv, 0, sizeof *kv);
    kv->total_units = total_units;
    kv->free_units = total_units;
    kv->ckpt_units = ckpt_units;
    kv->empty_head = KV_NONE;
    kv->tcap = 1024;
    kv->t = xcalloc(kv->tcap, sizeof *kv->t);
    kv->q_cap = 1024;
    kv->q = xmalloc(kv->q_cap * sizeof *kv->q);
    /* Every ring entry is defined (tombstones here): the reserved range of
     * a park keeps whatever it held, and eviction's prefetch reads ahead. */
    memset(kv->q, 0xff, kv->q_cap * sizeof *kv->q);
    kv->park_free = KV_NONE;
    kv->share_ev = xcalloc(KV_TAG_SLOTS, sizeof *kv->share_ev);
}

void kv_free(struct kvcache *kv)
{
    free(kv->st);
    free(kv->hash);
    free(kv->next);
    free(kv->t);
    free(kv->q);
    free(kv->parks);
    free(kv->tags);
    free(kv->share_ev);
    memset(kv, 0, sizeof *kv);
}

static inline void set_flags(struct kvcache *kv, uint32_t i, uint32_t f)
{
    uint64_t st = kv->st[i];
    kv->st[i] = (st & ~((uint64_t)0xff << KV_FLAG_SHIFT)) | (uint64_t)f << KV_FLAG_SHIFT;
}

/* ---- hash table ---- */

/* The block index (content hash -> block) is a table of its own, not
 * traces/base/hmap.h: every prefix-cache lookup, commit and eviction goes
 * through it (kv_commit, kv_lookup and evict_one: 10 % of the replay loop's
 * instructions in `bench_engine 600 16 64`), its slots are prefetched
 * ahead of batched lookups (kv_prefetch), and evictions remove entries,
 * which hmap.h cannot. */

static inline uint64_t tkey_of(uint64_t h) { return kv_tkey(h); }
static inline uint32_t home_of(uint64_t k, uint32_t m) { return kv_home(k, m); }

uint32_t kv_lookup(const struct kvcache *kv, uint64_t hash)
{
    uint64_t k = tkey_of(hash);
    uint32_t m = kv->tcap - 1;
    for (uint32_t p = home_of(k, m);; p = (p + 1) & m) {
        if (kv->t[p].key == k)
            return kv->t[p].val;
        if (!kv->t[p].key)
            return KV_NONE;
    }
}

static void table_put(struct kvcache *kv, uint64_t k, uint32_t v);

static void table_grow(struct kvcache *kv)
{
    struct kv_slot *old = kv->t;
    uint32_t oc = kv->tcap;
    kv->tcap *= 2;
    kv->t = xcalloc(kv->tcap, sizeof *kv->t);
    kv->tn = 0;
    for (uint32_t i = 0; i < oc; i++)
        if (old[i].key)
            table_put(kv, old[i].key, old[i].val);
    free(old);
}

static void table_put(struct kvcache *kv, uint64_t k, uint32_t v)
{
    if ((kv->tn + 1) * 2 > kv->tcap)
        table_grow(kv);
    uint32_t m = kv->tcap - 1;
    uint32_t p = home_of(k, m);
    while (kv->t[p].key)
        p = (p + 1) & m;
    kv->t[p].key = k;
    kv->t[p].val = v;
    kv->tn++;
}

static void table_del(struct kvcache *kv, uint64_t k)
{
    uint32_t m = kv->tcap - 1;
    uint32_t p = home_of(k, m);
    while (kv->t[p].key != k) {
        ASSERT(kv->t[p].key);
        p = (p + 1) & m;
    }
    /* Backward-shift deletion keeps probe chains intact. */
    uint32_t hole = p;
    for (uint32_t q = (p + 1) & m; kv->t[q].key; q = (q + 1) & m) {
        uint32_t home = home_of(kv->t[q].key, m);
        /* Move q into the hole unless its home lies in (hole, q]. */
        bool in_range = hole <= q ? (home > hole && home <= q)
                                  : (home > hole || home <= q);
        if (!in_range) {
            kv->t[hole] = kv->t[q];
            hole = q;
        }
    }
    kv->t[hole].key = 0;
    kv->tn--;
}

/* ---- LRU queue ---- */

static inline int64_t units_of(const struct kvcache *kv, uint32_t flags)
{
    return 1 + ((flags & KV_CKPT) ? kv->ckpt_units : 0);
}

static inline bool entry_live(const struct kvcache *kv, struct kv_lru_entry e)
{
    uint64_t st = kv->st[e.block];
    return (kv_st_flags(st) & KV_LRU) && kv_st_gen(st) == e.gen;
}

static void park_free(struct kvcache *kv, uint32_t id)
{
    struct kv_park *pk = &kv->parks[id];
    pk->state = KV_PARK_FREE;
    pk->blk = NULL;
    pk->gen = NULL;
    pk->next_free = kv->park_free;
    kv->park_free = id;
}

/* Drops dead entries (tombstones, dead park ranges) in place, keeping the
 * order of the live ones (the write position never passes the read
 * position); each live block's position moves with it, a live park's
 * range moves as a unit. */
static void lru_compact(struct kvcache *kv)
{
    struct kv_lru_entry *q = kv->q;
    uint32_t *pos = kv->next;
    const uint64_t m = kv->q_cap - 1, head = kv->q_head, len = kv->q_len;
    uint64_t w = 0, k = 0;
    /* The entries lie in at most two straight runs of the ring (more when
     * a park's range is skipped): read each run with a plain pointer (most
     * entries are tombstones). */
    while (k < len) {
        uint64_t a = (head + k) & m, run = len - k < m + 1 - a ? len - k : m + 1 - a;
        const struct kv_lru_entry *p = q + a, *end = p + run;
        for (; p < end; p++) {
            if (p->block >= KV_PARK_MARK) {
                if (p->block == KV_NONE)
                    continue;
                break;
            }
            struct kv_lru_entry e = *p;
            q[(head + w) & m] = e;
            pos[e.block] = (uint32_t)(head + w);
            w++;
        }
        k += (uint64_t)(p - (q + a));
        if (p < end) {
            /* A park's marker: a live range moves whole, a dead one goes. */
            struct kv_lru_entry e = *p;
            struct kv_park *pk = &kv->parks[e.gen];
            uint64_t span = pk->n;
            if (pk->state == KV_PARK_LIVE) {
                q[(head + w) & m] = e;
                pk->base = head + w;
                w += span;
            } else {
                park_free(kv, e.gen);
            }
            k += span;
        }
    }
    kv->q_len = w;
    kv->compactions++;
}

/* Unrolls the ring into one of cap entries starting at 0, dropping
 * tombstones and dead park ranges. */
static void lru_regrow(struct kvcache *kv, uint64_t cap)
{
    struct kv_lru_entry *nq = xmalloc(cap * sizeof *nq);
    uint32_t *pos = kv->next;
    const struct kv_lru_entry *q = kv->q;
    const uint64_t m = kv->q_cap - 1, len = kv->q_len, head = kv->q_head;
    uint64_t w = 0, k = 0;
    /* The old ring's entries in order: straight runs, as in lru_compact. */
    while (k < len) {
        uint64_t a = (head + k) & m, run = len - k < m + 1 - a ? len - k : m + 1 - a;
        const struct kv_lru_entry *p = q + a, *end = p + run;
        for (; p < end; p++) {
            if (p->block >= KV_PARK_MARK) {
                if (p->block == KV_NONE)
                    continue;
                break;
            }
            pos[p->block] = (uint32_t)w;
            nq[w++] = *p;
        }
        k += (uint64_t)(p - (q + a));
        if (p < end) {
            struct kv_lru_entry e = *p;
            struct kv_park *pk = &kv->parks[e.gen];
            uint64_t span = pk->n;
            if (pk->state == KV_PARK_LIVE) {
                nq[w] = e;
                /* Its range is read only through the park; keep it defined
                 * for eviction's prefetch. */
                memset(nq + w + 1, 0xff, (span - 1) * sizeof *nq);
                pk->base = w;
                w += span;
            } else {
                park_free(kv, e.gen);
            }
            k += span;
        }
    }
    free(kv->q);
    kv->q = nq;
    kv->q_head = 0;
    kv->q_len = w;
    kv->q_cap = cap;
    kv->regrowths++;
}

static void empty_push(struct kvcache *kv, uint32_t i);

/* Makes room in the LRU queue for n more entries. */
static void lru_reserve(struct kvcache *kv, uint64_t n)
{
    if (kv->q_len + n <= kv->q_cap)
        return;
    /* Compact only when three entries in four are stale: each compaction
     * reads every entry's block, so rarer is cheaper (the ring holds at
     * most 4x the cached blocks, 8 bytes each). */
    if (kv->q_len > 4 * (uint64_t)kv->n_lru + 1024)
        lru_compact(kv);
    if (kv->q_len + n <= kv->q_cap)
        return;
    uint64_t cap = kv->q_cap;
    while (kv->q_len + n > cap)
        cap *= 2;
    lru_regrow(kv, cap);
}

/* Prefetch distance of the chain loops, in blocks: their bodies are
 * short, so block words are asked for well ahead. */
#ifndef KV_CHAIN_AHEAD
#define KV_CHAIN_AHEAD 48
#endif

/* State-word bits used by the chain loops. */
#define ST_HASHED ((uint64_t)KV_HASHED << KV_FLAG_SHIFT)
#define ST_CKPT ((uint64_t)KV_CKPT << KV_FLAG_SHIFT)
#define ST_LRU ((uint64_t)KV_LRU << KV_FLAG_SHIFT)
#define ST_GEN1 ((uint64_t)1 << KV_GEN_SHIFT)

/* Releases blk[n-1] down to blk[0]. The common case (last holder of a
 * hashed block: to the LRU queue, generation bumped) stays in registers;
 * the rest goes through release_rare(). */
static void release_rare(struct kvcache *kv, uint32_t i, uint64_t s, int64_t *freed)
{
    /* s: the word after the decrement. */
    if (s & KV_REF_MASK) {
        kv->st[i] = s;
        return;
    }
    ASSERT(!(s & ST_CKPT));
    kv->st[i] = s;
    kv->free_units++;
    empty_push(kv, i);
    (*freed)++;
}

/* Writes queue entry {block i, generation of word s} with one 8-byte store
 * where the layout allows (the generation is the word's high half). */
static inline void q_store(struct kv_lru_entry *e, uint32_t i, uint64_t s)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    _Static_assert(sizeof(struct kv_lru_entry) == 8 && KV_GEN_SHIFT == 32, "entry layout");
    uint64_t v = (s & ~(uint64_t)UINT32_MAX) | i;
    memcpy(e, &v, sizeof v);
#else
    *e = (struct kv_lru_entry){i, (uint32_t)(s >> KV_GEN_SHIFT)};
#endif
}

static inline __attribute__((always_inline)) void
release_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n, uint32_t *gen_out)
{
    lru_reserve(kv, n);
    uint64_t *st = kv->st;
    uint32_t *pos = kv->next;
    struct kv_lru_entry *q = kv->q;
    const uint64_t m = kv->q_cap - 1, tail0 = kv->q_head + kv->q_len;
    uint64_t tail = tail0;
    int64_t freed = 0, ck = 0;
    /* The body for block blk[k]; the loop is split so that the part with
     * prefetches ahead needs no bound test. */
#define RELEASE_ONE(k)                                                        \
    do {                                                                      \
        uint32_t i = blk[k];                                                  \
        uint64_t s = st[i];                                                   \
        ASSERT(s & KV_REF_MASK);                                              \
        s--;                                                                  \
        if (__builtin_expect((s & (KV_REF_MASK | ST_HASHED)) == ST_HASHED, 1)) { \
            s = (s | ST_LRU) + ST_GEN1;                                       \
            st[i] = s;                                                        \
            pos[i] = (uint32_t)tail;                                          \
            q_store(&q[tail & m], i, s);                                      \
            tail++;                                                           \
            ck += (int64_t)(s & ST_CKPT); /* scaled by ST_CKPT; unscaled below */ \
            if (gen_out)                                                      \
                gen_out[k] = (uint32_t)(s >> KV_GEN_SHIFT);                   \
        } else {                                                              \
            release_rare(kv, i, s, &freed);                                   \
            pos = kv->next; /* empty_push writes it; the array does not move */ \
            if (gen_out)                                                      \
                gen_out[k] = kv_st_gen(st[i]);                                \
        }                                                                     \
    } while (0)
    uint32_t k = n;
    for (; k > KV_CHAIN_AHEAD;) {
        k--;
        uint32_t a = blk[k - KV_CHAIN_AHEAD];
        __builtin_prefetch(&st[a]);
        __builtin_prefetch(&pos[a], 1);
        RELEASE_ONE(k);
    }
    while (k-- > 0)
        RELEASE_ONE(k);
#undef RELEASE_ONE
    ck /= (int64_t)ST_CKPT;
    int64_t pushed = (int64_t)(tail - tail0);
    kv->q_len += (uint64_t)pushed;
    kv->n_lru += pushed;
    kv->lru_units += pushed + ck * kv->ckpt_units;
    kv->used_blocks -= freed + pushed;
}

void kv_release_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n, uint32_t *gen_out)
{
    if (gen_out)
        release_chain(kv, blk, n, gen_out);
    else
        release_chain(kv, blk, n, NULL);
}

void kv_acquire_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n)
{
    if (kv->n_parks_live)
        kv_unpark_all(kv); /* a block in use may be parked */
    uint64_t *st = kv->st;
    uint32_t *pos = kv->next;
    struct kv_lru_entry *q = kv->q;
    uint64_t m = kv->q_cap - 1;
    int64_t taken = 0, ck = 0;
    uint64_t bad = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = blk[k];
        if (k + KV_CHAIN_AHEAD < n) {
            __builtin_prefetch(&st[blk[k + KV_CHAIN_AHEAD]]);
            __builtin_prefetch(&pos[blk[k + KV_CHAIN_AHEAD]]);
        }
        uint64_t s = st[i];
        if (!(s & KV_REF_MASK)) {
            /* Free and cached: leaves the LRU list (its entry goes stale). */
            bad |= ~s & ST_LRU;
            q[pos[i] & m].block = KV_NONE;  /* its queue entry dies */
            taken++;
            ck += (int64_t)((s & ST_CKPT) != 0);
            s &= ~ST_LRU;
        } else {
            kv_share_note(kv, i);
        }
        bad |= (s & KV_REF_MASK) == KV_REF_MASK;
        st[i] = s + 1;
    }
    ASSERT(!bad);
    kv->lru_units -= taken + ck * kv->ckpt_units;
    kv->n_lru -= taken;
    kv->used_blocks += taken;
}

void kv_untake_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n)
{
    uint64_t m = kv->q_cap - 1;
    for (uint32_t k = n; k-- > 0;) {
        uint32_t i = blk[k];
        uint64_t s = kv->st[i];
        ASSERT(s & KV_REF_MASK);
        if ((s & KV_REF_MASK) == 1) {
            /* It was free and cached: back on the queue where it was (its
             * generation and entry are unchanged). */
            ASSERT(kv->q[kv->next[i] & m].block == KV_NONE);
            kv->q[kv->next[i] & m].block = i;
            s = (s - 1) | ST_LRU;
            kv->lru_units += 1 + ((s & ST_CKPT) ? kv->ckpt_units : 0);
            kv->n_lru++;
            kv->used_blocks--;
        } else {
            s--;
        }
        kv->st[i] = s;
    }
}

static void lru_push(struct kvcache *kv, uint32_t i)
{
    if (kv->q_len == kv->q_cap) {
        if (kv->q_len > 2 * (uint64_t)kv->n_lru + 1024)
            lru_compact(kv);
        if (kv->q_len == kv->q_cap)
            lru_regrow(kv, 2 * kv->q_cap); /* grow: unroll into a bigger ring */
    }
    uint64_t st = kv->st[i];
    uint32_t f = kv_st_flags(st) | KV_LRU;
    uint32_t g = kv_st_gen(st) + 1;
    kv->st[i] = kv_st_ref(st) | (uint64_t)f << KV_FLAG_SHIFT | (uint64_t)g << KV_GEN_SHIFT;
    kv->next[i] = (uint32_t)(kv->q_head + kv->q_len);
    kv->q[(kv->q_head + kv->q_len) & (kv->q_cap - 1)] = (struct kv_lru_entry){i, g};
    kv->q_len++;
    kv->n_lru++;
    kv->lru_units += units_of(kv, f);
}

/* Marks a cached block no longer free; its queue entry dies (a
 * tombstone that eviction and compaction skip without reading the block). */
static void lru_take(struct kvcache *kv, uint32_t i)
{
    kv->q[kv->next[i] & (kv->q_cap - 1)].block = KV_NONE;
    uint32_t f = kv_flags(kv, i);
    kv->lru_units -= units_of(kv, f);
    set_flags(kv, i, f & ~(uint32_t)KV_LRU);
    kv->n_lru--;
}

/* Eviction reads the queue in order: the block words and table slots of
 * the entries a little ahead are loaded early (their misses otherwise
 * dominate an eviction burst). Entries ahead may be stale; prefetching
 * them is harmless. */
#ifndef KV_EVICT_AHEAD
#define KV_EVICT_AHEAD 64
#endif
static inline void evict_prefetch(const struct kvcache *kv)
{
    uint64_t m = kv->q_cap - 1;
    /* The queue's own lines first, further ahead (evictions come one at a
     * time between other work, so the queue is cold): the entries read
     * below are then at hand. */
    if (kv->q_len > 2 * KV_EVICT_AHEAD)
        kv_pf(&kv->q[(kv->q_head + 2 * KV_EVICT_AHEAD) & m]);
    /* (Inside a park's range entries are stale but defined: any block
     * index below n_made is safe to prefetch.) */
    if (kv->q_len > KV_EVICT_AHEAD) {
        uint32_t b = kv->q[(kv->q_head + KV_EVICT_AHEAD) & m].block;
        if (b < kv->n_made) {
            kv_pf(&kv->st[b]);
            kv_pf(&kv->hash[b]);
            kv_pf(&kv->next[b]); /* empty_push stores to it */
        }
    }
    if (kv->q_len > KV_EVICT_AHEAD / 4) {
        uint32_t b = kv->q[(kv->q_head + KV_EVICT_AHEAD / 4) & m].block;
        if (b < kv->n_made)
            kv_prefetch(kv, kv->hash[b]);
    }
}

uint32_t kv_lru_oldest(struct kvcache *kv)
{
    while (kv->q_len) {
        evict_prefetch(kv);
        struct kv_lru_entry e = kv->q[kv->q_head & (kv->q_cap - 1)];
        if (e.block < KV_PARK_MARK)
            return e.block;
        if (e.block == KV_PARK_MARK) {
            struct kv_park *pk = &kv->parks[e.gen];
            if (pk->state == KV_PARK_LIVE) {
                kv_park_split(kv, e.gen, 0); /* its blocks get their entries */
            } else {
                kv->q_head += pk->n;
                kv->q_len -= pk->n;
                park_free(kv, e.gen);
            }
            continue;
        }
        kv->q_head++;
        kv->q_len--;
    }
    return KV_NONE;
}

static void empty_push(struct kvcache *kv, uint32_t i)
{
    /* Keep the generation and bump it: every way out of use (to the LRU
     * queue, or emptied) changes it, so an unchanged generation means the
     * block still holds what it held (session hints rely on it). */
    uint32_t g = kv_st_gen(kv->st[i]) + 1;
    kv->st[i] = (uint64_t)g << KV_GEN_SHIFT;
    kv->next[i] = kv->empty_head;
    kv->empty_head = i;
}

/* Evicts the least recently freed cached block; its units become free. */
static bool evict_one(struct kvcache *kv)
{
    uint32_t i = kv_lru_oldest(kv);
    if (i == KV_NONE)
        return false;
    /* lru_take() inlined: the block's entry is the queue's head (no read
     * of its queue position), and its flags need not be rewritten, since
     * empty_push() below replaces the whole word. */
    uint32_t f = kv_flags(kv, i);
    ASSERT(f & KV_LRU);
    ASSERT((kv->next[i] & (kv->q_cap - 1)) == (kv->q_head & (kv->q_cap - 1)));
    kv->q[kv->q_head & (kv->q_cap - 1)].block = KV_NONE;
    kv->lru_units -= units_of(kv, f);
    kv->n_lru--;
    kv->q_head++;
    kv->q_len--;
    kv->free_units += 1;
    if (f & KV_CKPT) {
        kv->free_units += kv->ckpt_units;
        kv->n_ckpt--;
        kv->ckpt_evictions++;
    }
    if (f & KV_HASHED)
        table_del(kv, kv->hash[i]);
    kv->evictions++;
    empty_push(kv, i);
    return true;
}

void kv_acquire(struct kvcache *kv, uint32_t i)
{
    uint64_t st = kv->st[i];
    if (kv_st_ref(st) && kv->n_parks_live) {
        kv_unpark_block(kv, i); /* it may be parked */
        st = kv->st[i];
    }
    if (kv_st_ref(st))
        kv_share_note(kv, i);
    if (kv_st_ref(st) == 0) {
        ASSERT(kv_st_flags(st) & KV_LRU);
        lru_take(kv, i);
        kv->used_blocks++;
    }
    ASSERT(kv_st_ref(kv->st[i]) < KV_REF_MASK);
    kv->st[i]++;
}

uint32_t kv_alloc(struct kvcache *kv)
{
    while (kv->free_units < 1)
        if (!evict_one(kv))
            return KV_NONE;
    kv->free_units--;
    uint32_t i = kv->empty_head;
    if (i != KV_NONE) {
        kv->empty_head = kv->next[i];
    } else {
        if (kv->n_made == kv->cap_made) {
            kv->cap_made = kv->cap_made ? kv->cap_made * 2 : 1024;
            kv->st = xrealloc(kv->st, (size_t)kv->cap_made * sizeof *kv->st);
            kv->hash = xrealloc(kv->hash, (size_t)kv->cap_made * sizeof *kv->hash);
            kv->next = xrealloc(kv->next, (size_t)kv->cap_made * sizeof *kv->next);
        }
        i = kv->n_made++;
        kv->st[i] = 0;
    }
    kv->hash[i] = 0;
    kv->next[i] = KV_NONE;
    kv->st[i] = (kv->st[i] & ((uint64_t)0xffffffff << KV_GEN_SHIFT)) | 1;
    kv->used_blocks++;
    return i;
}

void kv_release(struct kvcache *kv, uint32_t i)
{
    uint64_t st = kv->st[i];
    ASSERT(kv_st_ref(st) > 0);
    kv->st[i] = --st;
    if (kv_st_ref(st))
        return;
    kv->used_blocks--;
    if (kv_st_flags(st) & KV_HASHED) {
        lru_push(kv, i);
    } else {
        ASSERT(!(kv_st_flags(st) & KV_CKPT));
        kv->free_units++;
        empty_push(kv, i);
    }
}

bool kv_commit(struct kvcache *kv, uint32_t i, uint64_t hash)
{
    uint32_t f = kv_flags(kv, i);
    if (f & KV_HASHED)
        return true;
    if ((kv->tn + 1) * 2 > kv->tcap)
        table_grow(kv);
    /* One probe: find the content or the empty slot to insert at. */
    uint64_t k = tkey_of(hash);
    uint32_t m = kv->tcap - 1;
    uint32_t p = home_of(k, m);
    for (; kv->t[p].key; p = (p + 1) & m)
        if (kv->t[p].key == k)
            return false;
    kv->t[p].key = k;
    kv->t[p].val = i;
    kv->tn++;
    kv->hash[i] = k;
    set_flags(kv, i, f | KV_HASHED);
    return true;
}

int kv_checkpoint(struct kvcache *kv, uint32_t i)
{
    uint32_t f = kv_flags(kv, i);
    if (f & KV_CKPT)
        return 0;
    if (!kv->ckpt_units || !(f & KV_HASHED))
        return -1;
    ASSERT(kv_ref(kv, i) > 0);
    if (kv->free_units + kv->lru_units < kv->ckpt_units)
        return -1;
    while (kv->free_units < kv->ckpt_units)
        if (!evict_one(kv))
            return -1;
    kv->free_units -= kv->ckpt_units;
    set_flags(kv, i, f | KV_CKPT);
    kv->n_ckpt++;
    kv->ckpt_made++;
    return 0;
}

/* ---- parks ---- */

static inline bool tag_slot_busy(const struct kvcache *kv, const struct kv_tag_slot *t)
{
    return t->park < kv->n_parks && kv->parks[t->park].state == KV_PARK_LIVE &&
           kv->parks[t->park].tag == t->tag;
}

uint32_t kv_park(struct kvcache *kv, const uint32_t *blk, uint32_t *gen, uint32_t n,
                 uint32_t n_ck, uint32_t tag, uint64_t *serial)
{
    ASSERT(n > 0 && n_ck <= n);
    if (!kv->tags) {
        kv->tags = xmalloc(KV_TAG_SLOTS * sizeof *kv->tags);
        for (int i = 0; i < KV_TAG_SLOTS; i++)
            kv->tags[i] = (struct kv_tag_slot){KV_NONE, KV_NONE};
    }
    struct kv_tag_slot *ts = &kv->tags[tag & (KV_TAG_SLOTS - 1)];
    if (tag_slot_busy(kv, ts))
        return KV_NONE;
    lru_reserve(kv, n);
    uint32_t id = kv->park_free;
    if (id != KV_NONE) {
        kv->park_free = kv->parks[id].next_free;
    } else {
        if (kv->n_parks == kv->cap_parks) {
            kv->cap_parks = kv->cap_parks ? kv->cap_parks * 2 : 64;
            kv->parks = xrealloc(kv->parks, (size_t)kv->cap_parks * sizeof *kv->parks);
        }
        id = kv->n_parks++;
    }
    struct kv_park *pk = &kv->parks[id];
    pk->base = kv->q_head + kv->q_len;
    pk->serial = ++kv->park_serials;
    pk->blk = blk;
    pk->gen = gen;
    pk->n = n;
    pk->n_ck = n_ck;
    pk->state = KV_PARK_LIVE;
    pk->next_free = KV_NONE;
    pk->tag = tag;
    *ts = (struct kv_tag_slot){tag, id};
    kv->q[pk->base & (kv->q_cap - 1)] = (struct kv_lru_entry){KV_PARK_MARK, id};
    kv->q_len += n;
    kv->n_lru += n;
    kv->lru_units += (int64_t)n + (int64_t)n_ck * kv->ckpt_units;
    kv->used_blocks -= n;
    kv->n_parks_live++;
    kv->n_parked += n;
    kv->parks_made++;
    *serial = pk->serial;
    return id;
}

void kv_park_split(struct kvcache *kv, uint32_t id, uint32_t keep)
{
    struct kv_park *pk = &kv->parks[id];
    ASSERT(pk->state == KV_PARK_LIVE && keep <= pk->n);
    const uint32_t n = pk->n, *blk = pk->blk;
    const uint64_t base = pk->base, m = kv->q_cap - 1;
    uint64_t *st = kv->st;
    uint32_t *pos = kv->next, *gen = pk->gen;
    struct kv_lru_entry *q = kv->q;
    uint32_t ck = 0;
    /* blk[k] takes position base + (n - 1 - k): released tail first. */
    for (uint32_t k = n; k-- > keep;) {
        if (k >= keep + KV_CHAIN_AHEAD)
            __builtin_prefetch(&st[blk[k - KV_CHAIN_AHEAD]]);
        uint32_t i = blk[k];
        uint64_t s = st[i];
        ASSERT((s & (KV_REF_MASK | ST_HASHED | ST_LRU)) == (1 | ST_HASHED));
        s = ((s - 1) | ST_LRU) + ST_GEN1;
        st[i] = s;
        uint64_t p = base + (n - 1 - k);
        pos[i] = (uint32_t)p;
        q_store(&q[p & m], i, s);
        gen[k] = (uint32_t)(s >> KV_GEN_SHIFT);
        ck += (s & ST_CKPT) != 0;
    }
    ASSERT(ck <= pk->n_ck);
    pk->n_ck -= ck;
    kv->n_parked -= n - keep;
    kv->park_blocks_materialised += n - keep;
    if (!keep) {
        kv->n_parks_live--;
        park_free(kv, id); /* its marker was overwritten by blk[n - 1]'s entry */
    } else {
        pk->base = base + (n - keep);
        pk->n = keep;
        q[pk->base & m] = (struct kv_lru_entry){KV_PARK_MARK, id};
    }
}

void kv_unpark_block(struct kvcache *kv, uint32_t b)
{
    /* Only a block held once can be parked, and then it carries its
     * park's tag; the tag's park is searched (the tag may be stale). */
    if (kv_st_ref(kv->st[b]) != 1 || !kv->tags)
        return;
    uint32_t tag = kv->next[b];
    const struct kv_tag_slot *ts = &kv->tags[tag & (KV_TAG_SLOTS - 1)];
    if (ts->tag != tag || !tag_slot_busy(kv, ts))
        return;
    kv->unpark_scans++;
    const struct kv_park *pk = &kv->parks[ts->park];
    bool found = false;
    for (uint32_t k = 0; k < pk->n; k++)
        found |= pk->blk[k] == b;
    if (found)
        kv_park_split(kv, ts->park, 0);
}

void kv_unpark_all(struct kvcache *kv)
{
    kv->unpark_alls++;
    for (uint32_t id = 0; id < kv->n_parks && kv->n_parks_live; id++)
        if (kv->parks[id].state == KV_PARK_LIVE)
            kv_park_split(kv, id, 0);
}

int64_t kv_adopt(struct kvcache *kv, uint32_t id)
{
    struct kv_park *pk = &kv->parks[id];
    ASSERT(pk->state == KV_PARK_LIVE);
    int64_t u = (int64_t)pk->n + (int64_t)pk->n_ck * kv->ckpt_units;
    kv->lru_units -= u;
    kv->n_lru -= pk->n;
    kv->used_blocks += pk->n;
    kv->n_parks_live--;
    kv->n_parked -= pk->n;
    kv->parks_adopted++;
    pk->state = KV_PARK_DEAD;
    return u;
}

void kv_unadopt(struct kvcache *kv, uint32_t id)
{
    struct kv_park *pk = &kv->parks[id];
    ASSERT(pk->state == KV_PARK_DEAD && pk->blk);
    kv->lru_units += (int64_t)pk->n + (int64_t)pk->n_ck * kv->ckpt_units;
    kv->n_lru += pk->n;
    kv->used_blocks -= pk->n;
    kv->n_parks_live++;
    kv->n_parked += pk->n;
    kv->parks_adopted--;
    pk->state = KV_PARK_LIVE;
}

int kv_verify(const struct kvcache *kv, char *err)
{
    int64_t in_use = 0, lru = 0, lru_units = 0, hashed = 0, ckpt = 0, ckpt_in_use = 0;
    for (uint32_t i = 0; i < kv->n_made; i++) {
        uint32_t f = kv_flags(kv, i), ref = kv_ref(kv, i);
        if (f & KV_HASHED) {
            hashed++;
            if (kv_lookup(kv, kv->hash[i]) != i)
                return err_set(err, "kv: block %u hash not in table", i);
        }
        if (f & KV_CKPT) {
            ckpt++;
            if (!(f & KV_HASHED))
                return err_set(err, "kv: block %u has a checkpoint but no hash", i);
        }
        if (ref > 0) {
            in_use++;
            if (f & KV_LRU)
                return err_set(err, "kv: block %u in use and on the LRU list", i);
            if (f & KV_CKPT)
                ckpt_in_use++;
        }
    }
    /* Live parks: each block hashed, off the LRU list, held once (by the
     * park), in one park only. */
    int64_t parked = 0, parked_ck = 0, n_live = 0, n_records = 0;
    uint8_t *seen = kv->n_made ? xcalloc(kv->n_made, 1) : NULL;
    int rc = 0;
    for (uint32_t id = 0; id < kv->n_parks && !rc; id++) {
        const struct kv_park *pk = &kv->parks[id];
        if (pk->state == KV_PARK_FREE)
            continue;
        n_records++;
        if (pk->n == 0) {
            rc = err_set(err, "kv: park %u spans no positions", id);
            break;
        }
        if (pk->state != KV_PARK_LIVE)
            continue;
        n_live++;
        int64_t ck = 0;
        for (uint32_t k = 0; k < pk->n; k++) {
            uint32_t b = pk->blk[k];
            if (b >= kv->n_made) {
                rc = err_set(err, "kv: park %u names block %u of %u", id, b, kv->n_made);
                break;
            }
            uint64_t st = kv->st[b];
            if (kv_st_ref(st) != 1 || !(kv_st_flags(st) & KV_HASHED) ||
                (kv_st_flags(st) & KV_LRU)) {
                rc = err_set(err, "kv: parked block %u (park %u) has ref %u flags %#x", b, id,
                             kv_st_ref(st), kv_st_flags(st));
                break;
            }
            if (seen[b]++) {
                rc = err_set(err, "kv: block %u parked twice", b);
                break;
            }
            if (kv->next[b] != pk->tag) {
                rc = err_set(err, "kv: parked block %u has tag %u, park %u %u", b, kv->next[b],
                             id, pk->tag);
                break;
            }
            ck += (kv_st_flags(st) & KV_CKPT) != 0;
        }
        const struct kv_tag_slot *ts = &kv->tags[pk->tag & (KV_TAG_SLOTS - 1)];
        if (!rc && (ts->tag != pk->tag || ts->park != id))
            rc = err_set(err, "kv: park %u's tag slot names park %u", id, ts->park);
        if (!rc && ck != pk->n_ck)
            rc = err_set(err, "kv: park %u has %lld checkpoints, counted %u", id, (long long)ck,
                         pk->n_ck);
        parked += pk->n;
        parked_ck += ck;
    }
    free(seen);
    if (rc)
        return rc;
    if (n_live != kv->n_parks_live || parked != kv->n_parked)
        return err_set(err, "kv: %lld live parks of %lld blocks, counted %lld of %lld",
                       (long long)n_live, (long long)parked, (long long)kv->n_parks_live,
                       (long long)kv->n_parked);
    int64_t markers = 0;
    for (uint64_t k = 0; k < kv->q_len; k++) {
        struct kv_lru_entry e = kv->q[(kv->q_head + k) & (kv->q_cap - 1)];
        if (e.block == KV_NONE)
            continue;  /* tombstone */
        if (e.block == KV_PARK_MARK) {
            if (e.gen >= kv->n_parks || kv->parks[e.gen].state == KV_PARK_FREE)
                return err_set(err, "kv: queue marker at %llu names no park",
                               (unsigned long long)(kv->q_head + k));
            const struct kv_park *pk = &kv->parks[e.gen];
            if (pk->base != kv->q_head + k || k + pk->n > kv->q_len)
                return err_set(err, "kv: park %u at %llu records base %llu, spans %u of %llu",
                               e.gen, (unsigned long long)(kv->q_head + k),
                               (unsigned long long)pk->base, pk->n,
                               (unsigned long long)(kv->q_len - k));
            markers++;
            k += pk->n - 1; /* its range */
            continue;
        }
        if (e.block >= kv->n_made)
            return err_set(err, "kv: LRU entry names block %u of %u", e.block, kv->n_made);
        if (!entry_live(kv, e))
            return err_set(err, "kv: LRU entry for block %u is stale", e.block);
        if (kv->next[e.block] != (uint32_t)(kv->q_head + k))
            return err_set(err, "kv: LRU block %u records position %u, is at %llu", e.block,
                           kv->next[e.block], (unsigned long long)(kv->q_head + k));
        uint32_t f = kv_flags(kv, e.block);
        if (kv_ref(kv, e.block) || !(f & KV_HASHED))
            return err_set(err, "kv: LRU block %u in use or unhashed", e.block);
        lru++;
        lru_units += units_of(kv, f);
    }
    if (markers != n_records)
        return err_set(err, "kv: %lld park markers on the queue, %lld parks", (long long)markers,
                       (long long)n_records);
    int64_t empty = 0;
    for (uint32_t i = kv->empty_head; i != KV_NONE; i = kv->next[i]) {
        if (kv_st_ref(kv->st[i]) || kv_st_flags(kv->st[i]))
            return err_set(err, "kv: empty block %u is not empty", i);
        if (++empty > kv->n_made)
            return err_set(err, "kv: empty stack has a cycle");
    }
    /* Parked blocks are counted as free cached blocks, though their words
     * still say in use. */
    in_use -= parked;
    ckpt_in_use -= parked_ck;
    lru += parked;
    lru_units += parked + parked_ck * kv->ckpt_units;
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
