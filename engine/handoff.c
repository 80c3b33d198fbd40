/* handoff.c: a session's prefix kept between its calls (hint and park)
 * and the next call's prefix match that adopts it (handoff.h). */
#include "engine/handoff.h"

#include <stdlib.h>
#include <string.h>

#include "engine/kvcache.h"
#include "engine/sched.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

/* The hints are a table of their own, not traces/base/hmap.h: direct-mapped
 * (a session's new hint replaces whatever held its slot, so there is no
 * probing and no growth), looked up at every admission attempt, and a hint
 * leaves it when its session's next call is admitted, which hmap.h cannot
 * do (it has no removal). */
#define HANDOFF_SLOTS 1024

/* Prefetch distance of the hint walk, in blocks (a short loop body: the
 * block words must be asked for well ahead). */
#define HINT_AHEAD 48

/* ---- the hints ---- */

static inline uint32_t hint_slot(uint64_t key)
{
    return (uint32_t)hash_mix(key, 0x68696e74) & (HANDOFF_SLOTS - 1);
}

/* The hint of session `key`, or NULL. */
static struct sreq *hint_of(const struct handoff_hints *hs, uint64_t key)
{
    struct sreq *h = hs->slot ? hs->slot[hint_slot(key)] : NULL;
    return h && h->ho.key == key ? h : NULL;
}

void handoff_hints_init(struct handoff_hints *hs)
{
    memset(hs, 0, sizeof *hs);
    list_init(&hs->order);
}

void handoff_hints_free(struct handoff_hints *hs)
{
    LIST_FOR_EACH_SAFE(n, nx, &hs->order)
        sreq_free(LIST_ENTRY(n, struct sreq, ho.link));
    free(hs->slot);
    handoff_hints_init(hs);
}

void handoff_init(struct handoff *ho, uint32_t *gen, int64_t bytes)
{
    memset(ho, 0, sizeof *ho);
    ho->gen = gen;
    ho->bytes = bytes;
    list_node_init(&ho->link);
}

void handoff_release(struct handoff *ho)
{
    free(ho->ids);
    ho->ids = NULL;
}

static void hint_drop(struct sched *s, struct sreq *h)
{
    struct handoff_hints *hs = &s->hints;
    list_remove(&h->ho.link);
    hs->bytes -= h->ho.bytes;
    uint32_t k = hint_slot(h->ho.key);
    if (hs->slot[k] == h)
        hs->slot[k] = NULL;
    /* Its park (if not adopted) becomes cached blocks one by one. */
    if (kv_park_live(&s->kv, h->ho.park_id, h->ho.park_serial))
        kv_park_split(&s->kv, h->ho.park_id, 0);
    sreq_free(h);
}

/* Makes q (ended) its session's hint; drops the oldest hints beyond the
 * budget. */
static void hint_put(struct sched *s, struct sreq *q)
{
    struct handoff_hints *hs = &s->hints;
    struct handoff *ho = &q->ho;
    if (!hs->slot)
        hs->slot = xcalloc(HANDOFF_SLOTS, sizeof *hs->slot);
    ho->key = q->c->session_key;
    ho->serial = ++hs->serials;
    if (q->c->n_blocks && q->chain_ratio) {
        /* Its trace ids: where the next call's chain agrees, its hashes
         * are copied instead of recomputed. A buffer it holds already is
         * the one of the hint its ids were compared with (taken over at
         * admission): only the ids after the equal run are copied. */
        uint32_t n = q->c->n_blocks, same = ho->ids ? ho->src_same : 0;
        if (ho->cap_ids < n) {
            ho->cap_ids = n + n / 4;
            ho->ids = xrealloc(ho->ids, (size_t)ho->cap_ids * sizeof *ho->ids);
        }
        ho->n_ids = n;
        memcpy(ho->ids + same, q->c->blocks + same, (size_t)(n - same) * sizeof *ho->ids);
        ho->bytes += (int64_t)ho->n_ids * 8;
    }
    uint32_t k = hint_slot(ho->key);
    if (hs->slot[k])
        hint_drop(s, hs->slot[k]);
    hs->slot[k] = q;
    list_push_back(&hs->order, &ho->link);
    hs->bytes += ho->bytes;
    while (hs->bytes > s->p.hint_budget) {
        struct sreq *oldest = LIST_ENTRY(list_first(&hs->order), struct sreq, ho.link);
        if (oldest == q)
            break;
        hint_drop(s, oldest);
    }
}

void handoff_supersede(struct sched *s, struct sreq *q)
{
    struct sreq *h = hint_of(&s->hints, q->c->session_key);
    if (!h)
        return;
    if (h->ho.ids && !q->ho.ids && q->ho.src_serial == h->ho.serial) {
        /* Its ids [0, src_same) are in the hint's buffer. */
        q->ho.ids = h->ho.ids;
        q->ho.cap_ids = h->ho.cap_ids;
        h->ho.ids = NULL;
        h->ho.n_ids = h->ho.cap_ids = 0;
    }
    hint_drop(s, h);
}

/* ---- the end of a request ---- */

/* Whether q's hashed prefix can be parked: each of its blocks is held by
 * q alone (q took none in use, none got a second holder since). */
static bool holds_prefix_alone(const struct sched *s, const struct sreq *q)
{
    const struct handoff *ho = &q->ho;
    return ho->hashed && ho->hashed <= q->n_blk && !ho->no_park && !s->p.no_parks &&
           ho->share_mark == kv_share_mark(&s->kv, ho->tag);
}

bool handoff_finish(struct sched *s, struct sreq *q)
{
    struct kvcache *kv = &s->kv;
    struct handoff *ho = &q->ho;
    ho->hint_n = q->n_committed < q->n_blk ? q->n_committed : q->n_blk;
    bool keep = s->p.prefix_caching && ho->hint_n && s->p.hint_budget > 0;
    if (keep && holds_prefix_alone(s, q)) {
        /* Released tail first as always: the blocks after the hashed
         * prefix one by one, then the prefix as a park that the session's
         * next call adopts whole (kvcache.h). */
        uint32_t hp = ho->hashed;
        kv_release_chain(kv, q->blk + hp, q->n_blk - hp, ho->gen + hp);
        ho->park_id = kv_park(kv, q->blk, ho->gen, hp, ho->hashed_ck, ho->tag, &ho->park_serial);
        if (ho->park_id == KV_NONE) /* no park: the prefix one by one */
            kv_release_chain(kv, q->blk, hp, ho->gen);
    } else {
        /* Tail first, so that chain tails are evicted before their heads. */
        kv_release_chain(kv, q->blk, q->n_blk, ho->gen);
    }
    q->n_blk = 0;
    q->n_committed = 0;
    if (keep)
        hint_put(s, q);
    return keep;
}

/* ---- the prefix match ---- */

/* What a match has found so far. */
struct match {
    uint32_t m;       /* blocks matched: q->blk[0, m), each taken */
    uint32_t ck;      /* of them, taken free (from the LRU queue or a park)
                         with a checkpoint */
    bool shared;      /* one of them was in use (taken with a second holder) */
};

/* When q has no hashes yet and its session's hint has trace ids laid out
 * like its own, copies the hint's hashes over the leading ids both share
 * (same session, same ids at the same places: same hashes). Returns the
 * blocks copied. */
static uint32_t copy_hint_hashes(struct sreq *q, const struct sreq *h)
{
    if (q->n_hash || !h || !h->ho.n_ids || h->chain_ratio != q->chain_ratio)
        return 0;
    uint32_t n = q->c->n_blocks < h->ho.n_ids ? q->c->n_blocks : h->ho.n_ids, same = 0;
    const uint64_t *a = q->c->blocks, *b = h->ho.ids;
    /* Equal runs are long (a session's calls share their history):
     * compare 64 ids at a time with memcmp, then find the first
     * difference id by id. */
    while (same + 64 <= n && memcmp(a + same, b + same, 64 * sizeof *a) == 0)
        same += 64;
    while (same < n && a[same] == b[same])
        same++;
    q->ho.src_serial = h->ho.serial;
    q->ho.src_same = same;
    int64_t e = (int64_t)same * q->chain_ratio;
    if (e > q->n_chain)
        e = q->n_chain;
    if (e > h->n_chain)
        e = h->n_chain;
    if (e > h->n_hash)
        e = h->n_hash;
    memcpy(q->hash, h->hash, (size_t)e * sizeof *q->hash);
    q->n_hash = (uint32_t)e;
    return (uint32_t)e;
}

/* A head of the queue blocked for blocks retries every step: while
 * nothing was evicted since its last match (an eviction is the only way
 * a matched block leaves the table), the same blocks still match; they
 * are taken again, its park adopted again if still parked (what was
 * materialised since is taken block by block). */
static void retake_last_match(struct kvcache *kv, struct sreq *q, struct match *mt)
{
    struct handoff *ho = &q->ho;
    uint32_t k0 = 0;
    if (ho->adopt_n) {
        if (kv_park_live(kv, ho->adopt_id, ho->adopt_serial)) {
            k0 = kv->parks[ho->adopt_id].n;
            ASSERT(k0 <= ho->adopt_n);
            mt->ck += kv->parks[ho->adopt_id].n_ck;
            kv_adopt(kv, ho->adopt_id);
        }
        ho->adopt_n = k0;
    }
    mt->m = ho->matched;
    for (uint32_t k = k0; k < mt->m; k++) {
        int64_t u = kv_take(kv, q->blk[k]);
        mt->ck += u > 1;
        mt->shared |= u == 0;
    }
}

/* The hint's park, unchanged since the hint's request parked blocks
 * [0, n) of it: the hint walk would take blk[0, a) for a = n capped at
 * lim and at the first differing hash past the copied ones. Adopts those
 * whole; the rest become cached blocks as a release one by one would
 * have left them. */
static void adopt_hint_park(struct kvcache *kv, struct sreq *q, const struct sreq *h,
                            uint32_t lim, uint32_t copied, struct match *mt)
{
    const struct handoff *hh = &h->ho;
    if (!kv_park_live(kv, hh->park_id, hh->park_serial))
        return;
    struct kv_park *pk = &kv->parks[hh->park_id];
    uint32_t a = pk->n < lim ? pk->n : lim;
    for (uint32_t k = copied; k < a; k++)
        if (h->hash[k] != q->hash[k]) {
            a = k;
            break;
        }
    if (a < pk->n)
        kv_park_split(kv, hh->park_id, a);
    if (!a)
        return;
    mt->ck += pk->n_ck;
    kv_adopt(kv, hh->park_id);
    memcpy(q->blk, h->blk, (size_t)a * sizeof *q->blk);
    q->ho.adopt_id = hh->park_id;
    q->ho.adopt_serial = hh->park_serial;
    q->ho.adopt_n = a;
    mt->m = a;
}

/* The hint walk's view of the pool, and the counts of its takes, applied
 * to the pool once after the walk: kept in locals, they stay in registers
 * (stores to the block words could alias the pool's own counters). */
struct hint_walk {
    struct kvcache *kv;
    uint64_t *st;                 /* the block words */
    const uint32_t *qpos;         /* a cached block's queue position */
    struct kv_lru_entry *lq;      /* the LRU queue */
    uint64_t qmask;
    const struct sreq *h;
    struct sreq *q;
    int64_t taken, ck, shared;    /* taken free, of them with a checkpoint;
                                     taken in use */
};

/* Takes the hint's block m for q if it still holds the hint's content
 * (hashed, the generation it had at the hint's release): kv_take() with
 * the counters in the walk. A block in use may be parked by someone else
 * while parks are live (not while the hint's own is, but exactness does
 * not rely on it): its park is materialised first. */
static inline __attribute__((always_inline)) bool hint_take(struct hint_walk *w, uint32_t m)
{
    const uint64_t lru_bit = (uint64_t)KV_LRU << KV_FLAG_SHIFT;
    uint32_t b = w->h->blk[m];
    uint64_t st = w->st[b];
    if (__builtin_expect((st & KV_REF_MASK) && w->kv->n_parks_live, 0)) {
        kv_unpark_block(w->kv, b);
        st = w->st[b];
    }
    if (!(kv_st_flags(st) & KV_HASHED) || kv_st_gen(st) != w->h->ho.gen[m])
        return false;
    if (!(st & KV_REF_MASK)) {
        ASSERT(st & lru_bit);
        w->lq[w->qpos[b] & w->qmask].block = KV_NONE; /* its queue entry dies */
        w->taken++;
        w->ck += (kv_st_flags(st) & KV_CKPT) != 0;
        st &= ~lru_bit;
    } else {
        w->shared++;
        kv_share_note(w->kv, b);
    }
    ASSERT((st & KV_REF_MASK) != KV_REF_MASK);
    w->st[b] = st + 1;
    w->q->blk[m] = b;
    return true;
}

/* Takes the hint's blocks from mt->m on while they match: first the
 * blocks whose hashes were copied (equal by construction) while the
 * prefetch stays inside them, then the rest, comparing hashes. */
static void walk_hint(struct kvcache *kv, struct sreq *q, const struct sreq *h, uint32_t lim,
                      uint32_t copied, struct match *mt)
{
    struct hint_walk w = {.kv = kv, .st = kv->st, .qpos = kv->next, .lq = kv->q,
                          .qmask = kv->q_cap - 1, .h = h, .q = q};
    uint32_t m = mt->m;
    uint32_t fast = lim < copied ? lim : copied;
    fast = fast > HINT_AHEAD ? fast - HINT_AHEAD : 0;
    bool stopped = false;
    for (; m < fast; m++) {
        __builtin_prefetch(&w.st[h->blk[m + HINT_AHEAD]]);
        if (!hint_take(&w, m)) {
            stopped = true;
            break;
        }
    }
    for (; !stopped && m < lim && (m < copied || h->hash[m] == q->hash[m]); m++) {
        if (m + HINT_AHEAD < lim)
            __builtin_prefetch(&w.st[h->blk[m + HINT_AHEAD]]);
        if (!hint_take(&w, m))
            break;
    }
    int64_t units = w.taken + w.ck * kv->ckpt_units;
    kv->lru_units -= units;
    kv->n_lru -= w.taken;
    kv->used_blocks += w.taken;
    mt->m = m;
    mt->ck += (uint32_t)w.ck;
    mt->shared |= w.shared != 0;
}

/* Through the session's hint: its park adopted where it matches, then its
 * other blocks while they still hold the same content, up to lim. */
static void take_through_hint(struct kvcache *kv, struct sreq *q, const struct sreq *h,
                              int64_t cap, uint32_t copied, struct match *mt)
{
    uint32_t lim = h->ho.hint_n;
    if ((int64_t)lim > cap)
        lim = (uint32_t)cap;
    if (lim > q->n_hash)
        lim = q->n_hash;
    adopt_hint_park(kv, q, h, lim, copied, mt);
    walk_hint(kv, q, h, lim, copied, mt);
}

/* The rest through the table, block by block, up to cap. Lookups are
 * independent cache misses: prefetched a few ahead. */
static void take_from_table(struct kvcache *kv, struct sreq *q, int64_t cap, struct match *mt)
{
    uint32_t m = mt->m;
    uint32_t lim = (uint32_t)(cap < (int64_t)q->n_hash ? cap : (int64_t)q->n_hash);
    for (uint32_t k = m; k < m + 16 && k < lim; k++)
        kv_prefetch(kv, q->hash[k]);
    while (m < lim) {
        if (m + 16 < lim)
            kv_prefetch(kv, q->hash[m + 16]);
        uint32_t b = kv_lookup(kv, q->hash[m]);
        if (b == KV_NONE)
            break;
        int64_t u = kv_take(kv, b);
        mt->ck += u > 1;
        mt->shared |= u == 0;
        q->blk[m++] = b;
    }
    mt->m = m;
}

/* Records the match for parking and for the next attempt. All matched
 * blocks are hashed. (Checkpoints on blocks taken while in use are not
 * counted, but such a take rules parking out.) An adopted park's blocks
 * carry its tag, which q takes over. */
static void note_match(struct kvcache *kv, struct sreq *q, const struct match *mt)
{
    struct handoff *ho = &q->ho;
    ho->hashed = mt->m;
    ho->hashed_ck = mt->ck;
    ho->tag = ho->adopt_n ? kv->parks[ho->adopt_id].tag : kv_tag_new(kv);
    ho->share_mark = kv_share_mark(kv, ho->tag);
    ho->no_park = mt->shared;
    ho->matched = mt->m;
    ho->match_epoch = kv->evictions + 1;
}

/* Of m matched blocks, those whose KV can be reused: on a hybrid model up
 * to the last one with a recurrent-state checkpoint (none without
 * checkpoints). */
static uint32_t usable_blocks(const struct sched *s, const struct sreq *q, uint32_t m)
{
    if (s->kv.ckpt_units) {
        while (m > 0 && !kv_has_ckpt(&s->kv, q->blk[m - 1]))
            m--;
        return m;
    }
    return s->p.hybrid ? 0 : m;
}

uint32_t handoff_match(struct sched *s, struct sreq *q, uint32_t *usable)
{
    struct kvcache *kv = &s->kv;
    struct handoff *ho = &q->ho;
    ho->hashed = ho->hashed_ck = 0;
    ho->no_park = false;
    *usable = 0;
    if (!s->p.prefix_caching)
        return 0;
    ASSERT(q->n_blk == 0);
    int bs = s->p.block_size;
    int64_t cap = (q->num_tokens - 1) / bs; /* hits end before the last token */
    int64_t known = q->num_tokens / bs;     /* full blocks */
    /* Its hashes: the hint's where the trace ids agree, then the rest of
     * the prompt's chain. */
    const struct sreq *h = hint_of(&s->hints, q->c->session_key);
    uint32_t copied = copy_hint_hashes(q, h);
    if (q->n_hash < known && q->n_hash < q->n_chain)
        sreq_hashes(q, (uint32_t)(known < q->n_chain ? known : q->n_chain));
    /* Its blocks: the last match again while nothing was evicted since,
     * else through the hint (its park, then its other blocks); the table
     * for the rest. */
    struct match mt = {0};
    if (ho->match_epoch == kv->evictions + 1) {
        retake_last_match(kv, q, &mt);
    } else {
        ho->adopt_n = 0;
        if (h)
            take_through_hint(kv, q, h, cap, copied, &mt);
    }
    take_from_table(kv, q, cap, &mt);
    note_match(kv, q, &mt);
    *usable = usable_blocks(s, q, mt.m);
    return mt.m;
}

void handoff_unmatch(struct sched *s, struct sreq *q, uint32_t m)
{
    kv_untake_chain(&s->kv, q->blk + q->ho.adopt_n, m - q->ho.adopt_n);
    if (q->ho.adopt_n)
        kv_unadopt(&s->kv, q->ho.adopt_id);
}

void handoff_admit(struct sched *s, struct sreq *q, uint32_t m)
{
    for (uint32_t k = q->ho.adopt_n; k < m; k++)
        kv_tag(&s->kv, q->blk[k], q->ho.tag);
}
