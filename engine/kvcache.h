/* kvcache.h: one replica's paged KV cache with prefix reuse.
 *
 * The pool is counted in units of one KV block (block_size tokens of KV on
 * every layer). A block is in one of three states:
 *   - in use (ref > 0), held by one or more running requests;
 *   - free and cached (ref == 0, hashed): on the LRU list, reusable by a
 *     prefix hit until evicted;
 *   - free and empty: on the empty stack (or never touched yet).
 * Allocation takes an empty block first and evicts the least recently
 * freed cached block only when none is empty. (vLLM keeps one free queue
 * for both kinds; taking empty blocks first never evicts a cached block
 * while an empty one is free, and is otherwise the same LRU order.)
 * Requests release their blocks tail first, so chain tails are evicted
 * before their heads.
 *
 * Hybrid models (KDA layers with recurrent state) can only resume from a
 * prefix whose recurrent state was saved: a state checkpoint attached to
 * the block that ends the prefix. A checkpoint costs `ckpt_units` units of
 * the same pool; it lives while its block is cached and is released with
 * it. Where checkpoints are placed is the scheduler's choice (sched.h).
 *
 * Block structs are created on first use, so a huge pool costs memory only
 * for the blocks a run touches.
 *
 * Parks: a finished request's prefix blocks [0, n) (all hashed, each held
 * by that request alone) can be released as a unit instead of block by
 * block. A park counts as n free cached blocks (n_lru, lru_units) at once
 * and reserves the n queue positions the blocks would have taken (tail
 * first), but leaves the block words as they were (ref 1, no KV_LRU, the
 * generation not bumped) and writes only a marker entry at its first
 * position. The session's next call adopts the park whole (kv_adopt) and
 * holds the blocks again without touching them. Anything that needs the
 * blocks' own state first materialises the park: the blocks get exactly
 * the words, queue entries and generations a block-by-block release would
 * have given them, at the reserved positions, so the eviction order is
 * unchanged. That happens when eviction reaches the marker, when a lookup
 * takes a block that is in use while parks are live (it may be parked:
 * kv_unpark_block), when the owner's hint is dropped, and for the part of a
 * park that its adopter does not match (kv_park_split). Compaction moves
 * a live park's range as a unit. An adopted park leaves a dead range that
 * eviction and compaction skip. */
#ifndef KVCACHE_H
#define KVCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "traces/base/err.h"

#define KV_NONE UINT32_MAX

enum {
    KV_HASHED = 1, /* has a content hash, registered in the table */
    KV_CKPT = 2,   /* carries a recurrent-state checkpoint */
    KV_LRU = 4,    /* on the LRU list (free, cached) */
};

/* Block state is kept as arrays (structure of arrays): a prefix hit or a
 * release touches one 8-byte word per block (`st`: reference count,
 * flags and the LRU generation), so the words of 160k blocks (1.3 MB)
 * mostly stay in cache where 24-byte structs (3.8 MB) would not. */
#define KV_REF_MASK 0x00ffffffu
#define KV_FLAG_SHIFT 24
#define KV_GEN_SHIFT 32
static inline uint32_t kv_st_ref(uint64_t st) { return (uint32_t)st & KV_REF_MASK; }
static inline uint32_t kv_st_flags(uint64_t st) { return (uint32_t)(st >> KV_FLAG_SHIFT) & 0xff; }
static inline uint32_t kv_st_gen(uint64_t st) { return (uint32_t)(st >> KV_GEN_SHIFT); }

/* One slot of the hash table: key 0 = empty. */
struct kv_slot {
    uint64_t key;
    uint32_t val;
};

/* The LRU order is a FIFO of (block, gen) in release order; acquiring a
 * cached block marks it in use and overwrites its entry with a tombstone
 * (block KV_NONE; the block records its entry's position), so a prefix
 * hit costs no unlinking from a list, and eviction and compaction skip
 * dead entries without reading their blocks (the queue is compacted when
 * tombstones outnumber live entries). */
struct kv_lru_entry {
    uint32_t block, gen;
};
/* Queue entry block value of a park's marker (its gen field: the park's
 * index); it sits at the first of the park's reserved positions. */
#define KV_PARK_MARK (UINT32_MAX - 1)

enum { KV_PARK_FREE = 0, KV_PARK_LIVE, KV_PARK_DEAD };

/* A park (see the top of this file). Its blocks belong to the owner that
 * parked them, which keeps `blk` and `gen` alive while the park is live. */
struct kv_park {
    uint64_t base;        /* queue position of its marker (blk[n - 1]'s) */
    uint64_t serial;      /* unique among the pool's parks (0: never used) */
    const uint32_t *blk;  /* blocks [0, n), in token order */
    uint32_t *gen;        /* receives gen[k] of blk[k] when materialised */
    uint32_t n;           /* live: blocks parked; dead: positions spanned */
    uint32_t n_ck;        /* live: of them, blocks with a checkpoint */
    uint32_t state;       /* KV_PARK_* */
    uint32_t next_free;
    uint32_t tag;         /* its owner's tag (kv_tag) */
};
/* Live park by owner tag: direct-mapped; a park whose slot is taken by
 * another live park is not made (the caller releases block by block).
 * Not traces/base/hmap.h: read for every in-use block taken while parks
 * are live (kv_unpark_block), and an entry leaves when its park ends. */
#define KV_TAG_SLOTS 4096
struct kv_tag_slot {
    uint32_t tag, park;
};

struct kvcache {
    int64_t total_units;     /* pool size in block units */
    int64_t free_units;      /* units not used by any block or checkpoint */
    int64_t lru_units;       /* units held by free cached blocks (+ ckpts) */
    int64_t ckpt_units;      /* units one checkpoint costs (0: no checkpoints) */
    int64_t used_blocks;     /* blocks with ref > 0 */
    int64_t n_ckpt;          /* checkpoints alive */
    uint64_t *st;            /* per block: ref | flags << 24 | gen << 32 (gen
                                bumped at each release to the LRU queue) */
    uint64_t *hash;          /* per block: content hash (with KV_HASHED) */
    uint32_t *next;          /* per block: empty stack link; for a block on
                                the LRU queue, its position (low 32 bits);
                                for a block in use, its holder's tag */
    uint32_t n_made, cap_made;
    uint32_t empty_head;     /* stack of empty made blocks */
    struct kv_lru_entry *q;  /* LRU queue: ring of q_cap (power of 2) */
    uint64_t q_head, q_len;  /* oldest entry, entries (live + stale) */
    uint64_t q_cap;
    int64_t n_lru;           /* free cached blocks (live entries) */
    struct kv_slot *t;       /* hash -> block, linear probing */
    uint32_t tcap, tn;       /* capacity (power of 2), entries */
    /* Parks. */
    struct kv_park *parks;   /* records; a dead one lives until its marker is passed */
    uint32_t n_parks, cap_parks, park_free;
    int64_t n_parks_live;
    int64_t n_parked;        /* blocks in live parks */
    uint64_t park_serials;
    struct kv_tag_slot *tags; /* KV_TAG_SLOTS, made at the first park */
    uint32_t tag_serial;     /* tags handed out */
    uint64_t share_events;   /* takes of a block already in use (a block got a
                                second holder) */
    uint32_t *share_ev;      /* KV_TAG_SLOTS: those takes by the slot of the
                                block's tag (holders compare theirs) */
    /* Counters. */
    int64_t evictions, ckpt_evictions, ckpt_made;
    int64_t parks_made, parks_adopted, park_blocks_materialised, unpark_alls, unpark_scans;
    int64_t compactions, regrowths;
};

void kv_init(struct kvcache *kv, int64_t total_units, int64_t ckpt_units);
void kv_free(struct kvcache *kv);

/* Units an allocation could get now: free + evictable. */
static inline int64_t kv_available(const struct kvcache *kv)
{
    return kv->free_units + kv->lru_units;
}
static inline uint32_t kv_ref(const struct kvcache *kv, uint32_t i) { return kv_st_ref(kv->st[i]); }
static inline uint32_t kv_flags(const struct kvcache *kv, uint32_t i) { return kv_st_flags(kv->st[i]); }
/* Generation of block i: changes whenever it leaves use. */
static inline uint32_t kv_gen(const struct kvcache *kv, uint32_t i) { return kv_st_gen(kv->st[i]); }
/* Whether block i (< n_made) holds content `hash` now. */
static inline bool kv_holds(const struct kvcache *kv, uint32_t i, uint64_t hash)
{
    return (kv_flags(kv, i) & KV_HASHED) && kv->hash[i] == (hash ? hash : 1);
}
/* Units a block would stop being evictable for if acquired (0 if in use). */
static inline int64_t kv_block_lru_units(const struct kvcache *kv, uint32_t i)
{
    uint32_t f = kv_flags(kv, i);
    if (!(f & KV_LRU))
        return 0;
    return 1 + ((f & KV_CKPT) ? kv->ckpt_units : 0);
}

/* Block holding content `hash`, or KV_NONE. */
uint32_t kv_lookup(const struct kvcache *kv, uint64_t hash);
/* A prefetch the compiler keeps: GCC 12 drops some __builtin_prefetch
 * calls in loops as dead code (seen in the eviction walk). */
static inline void kv_pf(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#else
    __builtin_prefetch(p);
#endif
}

/* Table key of a hash (0 is the empty key) and its home slot. */
static inline uint64_t kv_tkey(uint64_t h) { return h ? h : 1; }
static inline uint32_t kv_home(uint64_t k, uint32_t m) { return (uint32_t)(k ^ (k >> 29)) & m; }
/* Hints the cache to load the table slot of `hash` (batched lookups). */
static inline void kv_prefetch(const struct kvcache *kv, uint64_t hash)
{
    kv_pf(&kv->t[kv_home(kv_tkey(hash), kv->tcap - 1)]);
}
/* The least recently freed cached block (next to be evicted), or KV_NONE. */
uint32_t kv_lru_oldest(struct kvcache *kv);
/* Takes one more reference on a block (removes it from the LRU list). */
void kv_acquire(struct kvcache *kv, uint32_t i);
/* A fresh empty block with ref 1, evicting if needed; KV_NONE if the pool
 * is exhausted. */
uint32_t kv_alloc(struct kvcache *kv);
/* Drops one reference; at zero a hashed block goes to the LRU list's
 * most-recent end, an unhashed one back to the empty stack. */
void kv_release(struct kvcache *kv, uint32_t i);
/* Releases blk[n-1] down to blk[0] (a request's blocks, tail first);
 * gen_out (if not NULL) receives each block's generation afterwards. */
void kv_release_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n, uint32_t *gen_out);
/* Acquires blk[0 .. n). */
void kv_acquire_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n);
/* Tags: a holder that may park its blocks marks each block it holds
 * alone with its tag (kept in the block's `next` word while in use), so
 * that kv_unpark_block finds the one park a block may be in. A fresh
 * tag, never KV_NONE: */
static inline uint32_t kv_tag_new(struct kvcache *kv)
{
    if (++kv->tag_serial == KV_NONE)
        kv->tag_serial = 1;
    return kv->tag_serial;
}
/* Marks block i (in use) as held by `tag`. */
static inline void kv_tag(struct kvcache *kv, uint32_t i, uint32_t tag) { kv->next[i] = tag; }
/* Block i, in use, gets another holder: counted against its tag's slot,
 * so that its first holder knows not to park it. */
static inline void kv_share_note(struct kvcache *kv, uint32_t i)
{
    kv->share_events++;
    kv->share_ev[kv->next[i] & (KV_TAG_SLOTS - 1)]++;
}
/* Takes of in-use blocks so far among tags sharing `tag`'s slot: a holder
 * that took every block alone and sees this unchanged at its end holds
 * each of them alone. */
static inline uint32_t kv_share_mark(const struct kvcache *kv, uint32_t tag)
{
    return kv->share_ev[tag & (KV_TAG_SLOTS - 1)];
}
/* Materialises every live park. */
void kv_unpark_all(struct kvcache *kv);
/* Materialises the live park that holds block b, if any (call before
 * taking a block that is in use while parks are live). */
void kv_unpark_block(struct kvcache *kv, uint32_t b);
/* Takes one more reference on block i, as kv_acquire() does, and returns
 * the units it stopped being evictable for (kv_block_lru_units before). */
static inline int64_t kv_take(struct kvcache *kv, uint32_t i)
{
    uint64_t s = kv->st[i];
    int64_t u = 0;
    if ((s & KV_REF_MASK) && kv->n_parks_live) {
        kv_unpark_block(kv, i); /* it may be parked: give it its own state */
        s = kv->st[i];
    }
    if (s & KV_REF_MASK)
        kv_share_note(kv, i);
    if (!(s & KV_REF_MASK)) {
        ASSERT(kv_st_flags(s) & KV_LRU);
        kv->q[kv->next[i] & (kv->q_cap - 1)].block = KV_NONE; /* entry dies */
        u = 1 + ((kv_st_flags(s) & KV_CKPT) ? kv->ckpt_units : 0);
        kv->lru_units -= u;
        kv->n_lru--;
        kv->used_blocks++;
        s &= ~((uint64_t)KV_LRU << KV_FLAG_SHIFT);
    }
    ASSERT((s & KV_REF_MASK) != KV_REF_MASK);
    kv->st[i] = s + 1;
    return u;
}
/* Undoes kv_take() of blk[0 .. n) exactly (walking back from blk[n-1]),
 * provided nothing was released, evicted or compacted in between: blocks
 * taken from the LRU queue go back to their own entries. */
void kv_untake_chain(struct kvcache *kv, const uint32_t *blk, uint32_t n);
/* Registers a full block's content hash. If another block already holds
 * that content, the table keeps the older one and this block stays
 * unhashed. Returns whether block i is hashed afterwards. */
bool kv_commit(struct kvcache *kv, uint32_t i, uint64_t hash);
/* Attaches a state checkpoint to hashed block i (in use), evicting other
 * cached blocks if needed. Returns 0, or -1 if there is no room (then no
 * checkpoint is made). */
int kv_checkpoint(struct kvcache *kv, uint32_t i);
static inline bool kv_has_ckpt(const struct kvcache *kv, uint32_t i)
{
    return (kv_flags(kv, i) & KV_CKPT) != 0;
}

/* Parks blk[0 .. n) (see the top of this file): each block hashed, held
 * only by the caller (ref 1) and marked with its tag, n_ck of them with a
 * checkpoint. The caller keeps blk and gen alive while the park is live.
 * Returns the park's index (*serial receives its serial), or KV_NONE
 * when no park was made (another live park has the tag's slot): then
 * nothing changed. */
uint32_t kv_park(struct kvcache *kv, const uint32_t *blk, uint32_t *gen, uint32_t n,
                 uint32_t n_ck, uint32_t tag, uint64_t *serial);
/* Whether park `id` with `serial` is live. */
static inline bool kv_park_live(const struct kvcache *kv, uint32_t id, uint64_t serial)
{
    return id < kv->n_parks && kv->parks[id].serial == serial &&
           kv->parks[id].state == KV_PARK_LIVE;
}
/* Materialises blocks [keep, n) of live park id (as if released one by
 * one then); the park keeps blk[0 .. keep) (keep 0: all, the park ends). */
void kv_park_split(struct kvcache *kv, uint32_t id, uint32_t keep);
/* The caller takes over live park id's blocks (ref 1 each) whole; returns
 * the units they stopped being evictable for. The park's range is dead. */
int64_t kv_adopt(struct kvcache *kv, uint32_t id);
/* Undoes kv_adopt(id), provided nothing was evicted or compacted since. */
void kv_unadopt(struct kvcache *kv, uint32_t id);

/* Walks every structure and checks the counts agree; 0 or -1 with err. */
int kv_verify(const struct kvcache *kv, char *err);

#endif
