/* sched.c: one replica's vLLM V1-style scheduler, prefix cache use,
 * speculative accounting and the advance of steps, one by one or in
 * closed-form runs (see sched.h). */
#include "engine/sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

/* Longest closed-form run, in steps, and the scratch it may use. */
#define RUN_MAX_STEPS 65536
#define RUN_MAX_EMITS (4 << 20)

/* ---- requests ---- */

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int positions(const struct sched *s) { return s->p.spec->draft + 1; }

/* ceil(tokens / block_size) and floor(tokens / block_size) for tokens >= 0:
 * a shift for the usual power-of-two block sizes (a 64-bit division costs
 * 20-40 cycles, and these run per request per step). */
static inline int64_t blocks_ceil(const struct sched *s, int64_t tokens)
{
    return s->bs_shift >= 0 ? (tokens + s->p.block_size - 1) >> s->bs_shift
                            : cdiv(tokens, s->p.block_size);
}

static inline int64_t blocks_floor(const struct sched *s, int64_t tokens)
{
    return s->bs_shift >= 0 ? tokens >> s->bs_shift : tokens / s->p.block_size;
}

/* Fills acc_tab from the spec model's thresholds (see sched.h), which are
 * monotone: the counts at each bucket's ends only grow, so one pass over
 * buckets and thresholds together (a replica's setup stays cheap with
 * hundreds of replicas). */
static void acc_tab_build(const struct spec_model *sp, uint8_t *tab)
{
    const int shift = 53 - SCHED_ACC_BITS;
    int k_lo = 1, k_hi = 1; /* 1 + thresholds at or below the bucket's ends */
    for (uint64_t b = 0; b < (1u << SCHED_ACC_BITS); b++) {
        uint64_t lo = b << shift, hi = lo + ((1ULL << shift) - 1);
        while (k_lo <= sp->draft && lo >= sp->thr[k_lo])
            k_lo++;
        while (k_hi <= sp->draft && hi >= sp->thr[k_hi])
            k_hi++;
        tab[b] = (uint8_t)(k_lo == k_hi ? k_lo : 0);
    }
}

/* spec_sample() on the table: the same splitmix64 draw, its bucket's
 * count, the thresholds only inside the few ambiguous buckets. */
static inline int acc_draw(const struct spec_model *sp, const uint8_t *tab, uint64_t skey,
                           int64_t step)
{
    uint64_t z = skey + (uint64_t)(step + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    uint64_t x = z >> 11;
    int k = tab[x >> (53 - SCHED_ACC_BITS)];
    if (__builtin_expect(k == 0, 0)) {
        k = 1;
        for (int j = 1; j <= sp->draft; j++)
            k += x >= sp->thr[j];
    }
    return k;
}

void sched_init(struct sched *s, int index, const struct sched_params *p,
                struct pricer *pricer, struct loop *l)
{
    memset(s, 0, sizeof *s);
    s->index = index;
    s->p = *p;
    s->pricer = pricer;
    s->loop = l;
    kv_init(&s->kv, p->kv_units, p->hybrid && p->prefix_caching ? p->ckpt_units : 0);
    list_init(&s->waiting);
    s->bs_shift = -1;
    if (p->block_size > 0 && (p->block_size & (p->block_size - 1)) == 0)
        s->bs_shift = __builtin_ctz((unsigned)p->block_size);
    const struct spec_model *sp = p->spec;
    s->acc_fast = sp && sp->draft > 0 && sp->accept.kind != ACCEPT_FIXED && sp->thr_monotone;
    if (s->acc_fast)
        acc_tab_build(sp, s->acc_tab);
}

#define SCHED_HINTS 1024
/* Prefetch distance of the hint walk, in blocks (a short loop body: the
 * block words must be asked for well ahead). */
#ifndef HINT_AHEAD
#define HINT_AHEAD 48
#endif

static void sreq_destroy(struct sreq *q)
{
    if (q)
        free(q->hint_ids);
    free(q);
}

void sched_free(struct sched *s)
{
    for (int i = 0; i < s->n_running; i++)
        sreq_destroy(s->running[i]);
    LIST_FOR_EACH_SAFE(n, nx, &s->waiting)
        sreq_destroy(LIST_ENTRY(n, struct sreq, wait));
    for (struct sreq *q = s->hint_first, *n; q; q = n) {
        n = q->wnext;
        sreq_destroy(q);
    }
    free(s->hint);
    free(s->running);
    free(s->batch);
    free(s->run_end);
    free(s->run_emit);
    free(s->run_fb);
    kv_free(&s->kv);
    memset(s, 0, sizeof *s);
}

static void wq_append(struct sched *s, struct sreq *q)
{
    list_push_back(&s->waiting, &q->wait);
    s->n_waiting++;
}

static void wq_prepend(struct sched *s, struct sreq *q)
{
    list_push_front(&s->waiting, &q->wait);
    s->n_waiting++;
}

static void wq_remove(struct sched *s, struct sreq *q)
{
    list_remove(&q->wait);
    s->n_waiting--;
}

static void running_push(struct sched *s, struct sreq *q)
{
    if (s->n_running == s->cap_running) {
        s->cap_running = s->cap_running ? s->cap_running * 2 : 64;
        s->running = xrealloc(s->running, (size_t)s->cap_running * sizeof *s->running);
    }
    s->running[s->n_running++] = q;
}

int sched_submit(struct sched *s, struct target_call *c, char *err)
{
    int bs = s->p.block_size;
    if (c->prompt_tokens < 1)
        return err_set(err, "request %llu: prompt_tokens %lld: must be at least 1",
                       (unsigned long long)c->id, (long long)c->prompt_tokens);
    if (c->max_tokens < 1)
        return err_set(err, "request %llu: max_tokens %lld: must be at least 1",
                       (unsigned long long)c->id, (long long)c->max_tokens);
    uint32_t ratio = 0;
    if (c->n_blocks) {
        if (!c->blocks)
            return err_set(err, "request %llu: %u blocks but no block array",
                           (unsigned long long)c->id, c->n_blocks);
        if (c->trace_block_size < 1 || c->trace_block_size % bs)
            return err_set(err, "request %llu: engine block size %d does not divide the "
                           "trace block size %lld", (unsigned long long)c->id, bs,
                           (long long)c->trace_block_size);
        ratio = (uint32_t)(c->trace_block_size / bs);
    }
    int64_t total = c->prompt_tokens + c->max_tokens;
    uint32_t cap_blk = (uint32_t)cdiv(total + positions(s), bs) + 1;
    uint32_t cap_hash = (uint32_t)(total / bs) + 1;
    size_t sz = sizeof(struct sreq) + (size_t)cap_hash * 8 + (size_t)cap_blk * 8;
    struct sreq *q = xmalloc(sz);
    memset(q, 0, sizeof *q);
    q->hash = (uint64_t *)(q + 1);
    q->blk = (uint32_t *)(q->hash + cap_hash);
    q->gen = q->blk + cap_blk;
    q->cap_hash = cap_hash;
    q->cap_blk = cap_blk;
    q->bytes = (int64_t)sz;
    q->c = c;
    q->arrival_ns = loop_now(s->loop);
    q->num_tokens = c->prompt_tokens;
    q->chain_ratio = ratio;
    int64_t chain_blocks = (int64_t)c->n_blocks * ratio;
    q->prompt_full = c->prompt_tokens / bs;
    q->n_chain = chain_blocks < q->prompt_full ? chain_blocks : q->prompt_full;
    q->chain_seed = hash_mix(0x6b76636861696e00ULL, c->session_key);
    q->key = spec_key(s->p.spec, hash_mix(c->id, c->session_key));
    q->salt = hash_mix(q->key ^ 0x73616c7400000000ULL, (uint64_t)q->arrival_ns);
    q->state = SREQ_WAITING;
    c->priv = q;
    c->replica = s->index;
    c->cached_tokens = 0;
    c->preemptions = 0;
    /* Errors that are not the caller's input arrive as done at the next
     * boundary. */
    if (total > s->p.max_model_len)
        q->cancelled = true, q->fail = TARGET_ERR_TOO_LONG, s->cancel_pending++;
    else if (cdiv(total + positions(s), bs) > s->p.kv_units)
        q->cancelled = true, q->fail = TARGET_ERR_NO_SPACE, s->cancel_pending++;
    s->outstanding++;
    wq_append(s, q);
    return 0;
}

void sched_cancel(struct sched *s, struct target_call *c)
{
    struct sreq *q = c->priv;
    if (!q || q->state == SREQ_DONE || q->cancelled)
        return;
    q->cancelled = true;
    q->cancel_ns = loop_now(s->loop);
    s->cancel_pending++;
}

/* Hash of full block i of q's tokens (hash[i-1] must be known): the
 * previous hash chained with the content, which is the salted trace id
 * and the position inside the trace block, or the request's salt and the
 * position. One multiply-xorshift per block: hashing every block of a
 * 100k-token prompt costs about 2 us. */
static inline uint64_t fmix(uint64_t x)
{
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return x;
}

static uint64_t block_hash(const struct sreq *q, uint32_t i)
{
    uint64_t prev = i ? q->hash[i - 1] : q->chain_seed;
    uint64_t content;
    if ((int64_t)i < q->n_chain) {
        uint64_t id = q->c->blocks[i / q->chain_ratio];
        content = (id ^ q->chain_seed) * 0x9e3779b97f4a7c15ULL + i % q->chain_ratio;
    } else {
        content = (q->salt ^ i) * 0xbf58476d1ce4e5b9ULL;
    }
    return fmix(prev * 0x94d049bb133111ebULL ^ content);
}

static void ensure_hashes(struct sreq *q, uint32_t upto)
{
    ASSERT(upto <= q->cap_hash);
    uint32_t i = q->n_hash;
    /* Chain blocks without a division per block. */
    uint32_t chain_end = (int64_t)upto < q->n_chain ? upto : (uint32_t)q->n_chain;
    if (i < chain_end) {
        uint32_t ratio = q->chain_ratio, id = i / ratio, sub = i % ratio;
        uint64_t prev = i ? q->hash[i - 1] : q->chain_seed, seed = q->chain_seed;
        const uint64_t *ids = q->c->blocks;
        for (; i < chain_end; i++) {
            uint64_t content = (ids[id] ^ seed) * 0x9e3779b97f4a7c15ULL + sub;
            prev = fmix(prev * 0x94d049bb133111ebULL ^ content);
            q->hash[i] = prev;
            if (++sub == ratio) {
                sub = 0;
                id++;
            }
        }
    }
    for (; i < upto; i++) {
        q->n_hash = i;
        q->hash[i] = block_hash(q, i);
    }
    q->n_hash = upto > q->n_hash ? upto : q->n_hash;
}

static void release_blocks(struct sched *s, struct sreq *q, uint32_t *gen_out)
{
    /* Tail first, so that chain tails are evicted before their heads. */
    kv_release_chain(&s->kv, q->blk, q->n_blk, gen_out);
    q->n_blk = 0;
    q->n_committed = 0;
}

/* Registers newly full blocks and places prompt checkpoints. */
static void commit_blocks(struct sched *s, struct sreq *q)
{
    if (!s->p.prefix_caching)
        return;
    uint32_t full = (uint32_t)blocks_floor(s, q->num_computed);
    if (full > q->n_blk)
        full = q->n_blk;
    if (full <= q->n_committed)
        return;
    ensure_hashes(q, full);
    for (uint32_t i = q->n_committed; i < full; i++) {
        if (i + 8 < full)
            kv_prefetch(&s->kv, q->hash[i + 8]);
        bool hashed = kv_commit(&s->kv, q->blk[i], q->hash[i]);
        if (i == q->hp && hashed)
            q->hp++;
        if (s->kv.ckpt_units && (int64_t)i + 1 <= q->prompt_full &&
            (((int64_t)i + 1) % s->p.ckpt_interval == 0 || (int64_t)i + 1 == q->prompt_full)) {
            bool had = kv_has_ckpt(&s->kv, q->blk[i]);
            if (kv_checkpoint(&s->kv, q->blk[i]) == 0 && !had && i < q->hp)
                q->ck_hp++;
        }
    }
    q->n_committed = full;
}

static inline uint32_t hint_slot(uint64_t key)
{
    return (uint32_t)hash_mix(key, 0x68696e74) & (SCHED_HINTS - 1);
}

static void hint_drop(struct sched *s, struct sreq *h)
{
    if (h->wprev)
        h->wprev->wnext = h->wnext;
    else
        s->hint_first = h->wnext;
    if (h->wnext)
        h->wnext->wprev = h->wprev;
    else
        s->hint_last = h->wprev;
    s->hint_bytes -= h->bytes;
    uint32_t k = hint_slot(h->hint_key);
    if (s->hint[k] == h)
        s->hint[k] = NULL;
    /* Its park (if not adopted) becomes cached blocks one by one. */
    if (kv_park_live(&s->kv, h->park_id, h->park_serial))
        kv_park_split(&s->kv, h->park_id, 0);
    sreq_destroy(h);
}

/* Makes q its session's hint; drops the oldest hints beyond the budget. */
static void hint_put(struct sched *s, struct sreq *q, uint64_t key)
{
    if (!s->hint)
        s->hint = xcalloc(SCHED_HINTS, sizeof *s->hint);
    q->hint_key = key;
    /* Its trace ids: where the next call's chain agrees, its hashes are
     * copied instead of recomputed. */
    uint32_t k = hint_slot(key);
    q->hint_serial = ++s->hint_serials;
    if (q->c && q->c->n_blocks && q->chain_ratio) {
        /* A buffer it holds already is the one of the hint its ids were
         * compared with (taken over at admission): only the ids after the
         * equal run are copied. */
        uint32_t n = q->c->n_blocks, same = q->hint_ids ? q->src_same : 0;
        if (q->hint_cap_ids < n) {
            q->hint_cap_ids = n + n / 4;
            q->hint_ids = xrealloc(q->hint_ids, (size_t)q->hint_cap_ids * sizeof *q->hint_ids);
        }
        q->hint_n_ids = n;
        memcpy(q->hint_ids + same, q->c->blocks + same, (size_t)(n - same) * sizeof *q->hint_ids);
        q->bytes += (int64_t)q->hint_n_ids * 8;
    }
    if (s->hint[k])
        hint_drop(s, s->hint[k]);
    s->hint[k] = q;
    q->wnext = NULL;
    q->wprev = s->hint_last;
    if (s->hint_last)
        s->hint_last->wnext = q;
    else
        s->hint_first = q;
    s->hint_last = q;
    s->hint_bytes += q->bytes;
    while (s->hint_bytes > s->p.hint_budget && s->hint_first != q)
        hint_drop(s, s->hint_first);
}

static void finish_request(struct sched *s, struct sreq *q, int64_t t, enum target_status st)
{
    q->hint_n = q->n_committed < q->n_blk ? q->n_committed : q->n_blk;
    bool keep = s->p.prefix_caching && q->hint_n && s->p.hint_budget > 0;
    if (keep && q->hp && q->hp <= q->n_blk && !q->no_park && !s->p.no_parks &&
        q->share_epoch == kv_share_mark(&s->kv, q->tag)) {
        /* Released tail first as always: the blocks after the hashed
         * prefix one by one, then the prefix as a park that the session's
         * next call adopts whole (kvcache.h). */
        uint32_t hp = q->hp;
        kv_release_chain(&s->kv, q->blk + hp, q->n_blk - hp, q->gen + hp);
        q->park_id = kv_park(&s->kv, q->blk, q->gen, hp, q->ck_hp, q->tag, &q->park_serial);
        if (q->park_id == KV_NONE) /* no park: the prefix one by one */
            kv_release_chain(&s->kv, q->blk, hp, q->gen);
        q->n_blk = 0;
        q->n_committed = 0;
    } else {
        release_blocks(s, q, q->gen);
    }
    q->state = SREQ_DONE;
    s->outstanding--;
    s->finished++;
    struct target_call *c = q->c;
    c->priv = NULL;
    /* Keep it as its session's hint (it no longer refers to c). */
    if (keep) {
        hint_put(s, q, c->session_key);
        q->c = NULL;
    } else {
        sreq_destroy(q);
    }
    if (st != TARGET_OK && !c->error[0])
        snprintf(c->error, sizeof c->error, "%s", target_status_name(st));
    c->cb->done(c, t, st);
}

static void preempt(struct sched *s, struct sreq *q)
{
    release_blocks(s, q, NULL);
    q->hit_epoch = 0;
    q->num_computed = 0;
    q->state = SREQ_WAITING;
    q->c->preemptions++;
    s->preemptions++;
    wq_prepend(s, q);
}

/* Allocates blocks so that q holds ceil(tokens / bs). */
static bool grow_blocks(struct sched *s, struct sreq *q, int64_t tokens)
{
    uint32_t want = (uint32_t)blocks_ceil(s, tokens);
    ASSERT(want <= q->cap_blk);
    if (want <= q->n_blk)
        return true;
    if (want - q->n_blk > kv_available(&s->kv))
        return false;
    while (q->n_blk < want) {
        uint32_t b = kv_alloc(&s->kv);
        ASSERT(b != KV_NONE);
        kv_tag(&s->kv, b, q->tag);
        q->blk[q->n_blk++] = b;
    }
    return true;
}

/* Frees blocks beyond ceil(tokens / bs) (rejected draft slots). */
static void trim_blocks(struct sched *s, struct sreq *q, int64_t tokens)
{
    uint32_t want = (uint32_t)blocks_ceil(s, tokens);
    while (q->n_blk > want) {
        q->n_blk--;
        kv_release(&s->kv, q->blk[q->n_blk]);
    }
    if (q->n_committed > q->n_blk)
        q->n_committed = q->n_blk;
    if (q->hp > q->n_blk) {
        q->hp = q->n_blk;
        q->no_park = true; /* its checkpoint count is no longer known */
    }
}

static inline void batch_push(struct sched *s, struct sreq *q)
{
    if (__builtin_expect(s->n_batch == s->cap_batch, 0)) {
        s->cap_batch = s->cap_batch ? s->cap_batch * 2 : 64;
        s->batch = xrealloc(s->batch, (size_t)s->cap_batch * sizeof *s->batch);
    }
    s->batch[s->n_batch++] = q;
}

/* Prefix hit for a waiting request: matched blocks m, usable hit j (both
 * in blocks). */
static void prefix_hit(struct sched *s, struct sreq *q, uint32_t *m_out, uint32_t *j_out,
                       int64_t *pinned_out)
{
    *m_out = *j_out = 0;
    *pinned_out = 0;
    /* The matched blocks blk[0 .. m) are taken (kv_take) as they are
     * found, while each block's word is at hand; pinned is the units they
     * stopped being evictable for. The caller keeps them, or gives them
     * back with kv_untake_chain() when the request cannot be admitted. */
    int64_t pinned = 0;
    q->hp = q->ck_hp = 0;
    q->no_park = false;
    if (!s->p.prefix_caching)
        return;
    uint32_t ck_all = 0; /* matched blocks with a checkpoint */
    bool took_shared = false; /* a matched block was in use */
    int bs = s->p.block_size;
    int64_t cap = (q->num_tokens - 1) / bs;
    int64_t known = q->num_tokens / bs;
    uint32_t copied = 0;  /* hashes known equal to the hint's */
    const struct sreq *h = s->hint ? s->hint[hint_slot(q->c->session_key)] : NULL;
    if (h && h->hint_key != q->c->session_key)
        h = NULL;
    if (q->n_hash == 0 && h && h->hint_n_ids && h->chain_ratio == q->chain_ratio) {
        /* Same session (same salt), same ids at the same places: same
         * hashes. */
        uint32_t n = q->c->n_blocks < h->hint_n_ids ? q->c->n_blocks : h->hint_n_ids, c = 0;
        const uint64_t *a = q->c->blocks, *b = h->hint_ids;
        /* Equal runs are long (a session's calls share their history):
         * compare 64 ids at a time with memcmp, then find the first
         * difference id by id. */
        while (c + 64 <= n && memcmp(a + c, b + c, 64 * sizeof *a) == 0)
            c += 64;
        while (c < n && a[c] == b[c])
            c++;
        q->src_serial = h->hint_serial;
        q->src_same = c;
        int64_t e = (int64_t)c * q->chain_ratio;
        if (e > q->n_chain)
            e = q->n_chain;
        if (e > h->n_chain)
            e = h->n_chain;
        if (e > h->n_hash)
            e = h->n_hash;
        memcpy(q->hash, h->hash, (size_t)e * sizeof *q->hash);
        q->n_hash = (uint32_t)e;
        copied = (uint32_t)e;
    }
    if (q->n_hash < known && q->n_hash < q->n_chain)
        ensure_hashes(q, (uint32_t)(known < q->n_chain ? known : q->n_chain));
    uint32_t m = 0;
    ASSERT(q->n_blk == 0);
    /* A head blocked for blocks retries every step: reuse its last match
     * while nothing was evicted (an eviction is the only way a matched
     * block leaves the table). */
    bool retry = q->hit_epoch == s->kv.evictions + 1;
    if (!retry)
        q->adopt_n = 0;
    if (retry) {
        m = q->hit_m;
        uint32_t k0 = 0;
        if (q->adopt_n) {
            /* Its park, if still parked (what was materialised since is
             * taken block by block). */
            if (kv_park_live(&s->kv, q->adopt_id, q->adopt_serial)) {
                k0 = s->kv.parks[q->adopt_id].n;
                ASSERT(k0 <= q->adopt_n);
                ck_all += s->kv.parks[q->adopt_id].n_ck;
                pinned += kv_adopt(&s->kv, q->adopt_id);
            }
            q->adopt_n = k0;
        }
        for (uint32_t k = k0; k < m; k++) {
            int64_t u = kv_take(&s->kv, q->blk[k]);
            pinned += u;
            ck_all += u > 1;
            took_shared |= u == 0;
        }
    } else if (h) {
        /* The session's previous request: same hashes, blocks that still
         * hold them. */
        {
            uint32_t lim = h->hint_n;
            if ((int64_t)lim > cap)
                lim = (uint32_t)cap;
            if (lim > q->n_hash)
                lim = q->n_hash;
            struct kvcache *kv = &s->kv;
            if (kv_park_live(kv, h->park_id, h->park_serial)) {
                /* The hint's blocks [0, n) are parked, unchanged since: the
                 * walk below would take blk[0, a) for a = n capped at lim
                 * and at the first differing hash past the copied ones.
                 * Adopt those whole; the rest become cached blocks as a
                 * release one by one would have left them. */
                struct kv_park *pk = &kv->parks[h->park_id];
                uint32_t a = pk->n < lim ? pk->n : lim;
                for (uint32_t k = copied; k < a; k++)
                    if (h->hash[k] != q->hash[k]) {
                        a = k;
                        break;
                    }
                if (a < pk->n)
                    kv_park_split(kv, h->park_id, a);
                if (a) {
                    ck_all += pk->n_ck;
                    pinned += kv_adopt(kv, h->park_id);
                    memcpy(q->blk, h->blk, (size_t)a * sizeof *q->blk);
                    q->adopt_id = h->park_id;
                    q->adopt_serial = h->park_serial;
                    q->adopt_n = a;
                    m = a;
                }
            }
            /* kv_take() block by block, with the pool's counters kept in
             * registers (stores to the block words could alias them) and
             * applied once after the walk. */
            uint64_t *stw = kv->st;
            const uint32_t *qpos = kv->next;
            struct kv_lru_entry *lq = kv->q;
            const uint64_t qm = kv->q_cap - 1;
            const uint64_t lru_bit = (uint64_t)KV_LRU << KV_FLAG_SHIFT;
            int64_t taken = 0, ck = 0, shared = 0;
            /* A block in use may be parked by someone else while parks are
             * live (not while this hint is, but exactness does not rely on
             * it): its park is materialised first. */
#define HINT_TAKE(m)                                                            \
    ({                                                                          \
        uint32_t b_ = h->blk[m];                                                \
        uint64_t st_ = stw[b_];                                                 \
        if (__builtin_expect((st_ & KV_REF_MASK) && kv->n_parks_live, 0)) {     \
            kv_unpark_block(kv, b_);                                            \
            st_ = stw[b_];                                                      \
        }                                                                       \
        bool ok_ = (kv_st_flags(st_) & KV_HASHED) && kv_st_gen(st_) == h->gen[m]; \
        if (ok_) {                                                              \
            if (!(st_ & KV_REF_MASK)) {                                         \
                ASSERT(st_ & lru_bit);                                          \
                lq[qpos[b_] & qm].block = KV_NONE; /* its queue entry dies */   \
                taken++;                                                        \
                ck += (kv_st_flags(st_) & KV_CKPT) != 0;                        \
                st_ &= ~lru_bit;                                                \
            } else {                                                            \
                shared++;                                                       \
                kv_share_note(kv, b_);                                          \
            }                                                                   \
            ASSERT((st_ & KV_REF_MASK) != KV_REF_MASK);                         \
            stw[b_] = st_ + 1;                                                  \
            q->blk[m] = b_;                                                     \
        }                                                                       \
        ok_;                                                                    \
    })
            /* First the blocks whose hashes were copied (equal by
             * construction) while the prefetch stays inside the chain,
             * then the rest, comparing hashes. */
            uint32_t fast = lim < copied ? lim : copied;
            fast = fast > HINT_AHEAD ? fast - HINT_AHEAD : 0;
            bool stop = false;
            while (m < fast) {
                __builtin_prefetch(&stw[h->blk[m + HINT_AHEAD]]);
                if (!HINT_TAKE(m)) {
                    stop = true;
                    break;
                }
                m++;
            }
            if (!stop) {
                while (m < lim && (m < copied || h->hash[m] == q->hash[m])) {
                    if (m + HINT_AHEAD < lim)
                        __builtin_prefetch(&stw[h->blk[m + HINT_AHEAD]]);
                    if (!HINT_TAKE(m))
                        break;
                    m++;
                }
            }
#undef HINT_TAKE
            int64_t u = taken + ck * kv->ckpt_units;
            kv->lru_units -= u;
            kv->n_lru -= taken;
            kv->used_blocks += taken;
            took_shared |= shared != 0;
            ck_all += (uint32_t)ck;
            pinned += u;
            s->hint_hits += m;
        }
    }
    /* Lookups are independent cache misses: prefetch a few ahead. */
    uint32_t lim = (uint32_t)(cap < (int64_t)q->n_hash ? cap : (int64_t)q->n_hash);
    for (uint32_t k = m; k < m + 16 && k < lim; k++)
        kv_prefetch(&s->kv, q->hash[k]);
    while (m < lim) {
        if (m + 16 < lim)
            kv_prefetch(&s->kv, q->hash[m + 16]);
        uint32_t b = kv_lookup(&s->kv, q->hash[m]);
        if (b == KV_NONE)
            break;
        int64_t u = kv_take(&s->kv, b);
        pinned += u;
        ck_all += u > 1;
        took_shared |= u == 0;
        q->blk[m++] = b;
    }
    *pinned_out = pinned;
    /* All matched blocks are hashed. (Checkpoints on blocks taken while
     * in use are not counted, but such a take rules parking out.) An
     * adopted park's blocks carry its tag, which q takes over. */
    q->hp = m;
    q->ck_hp = ck_all;
    q->tag = q->adopt_n ? s->kv.parks[q->adopt_id].tag : kv_tag_new(&s->kv);
    q->share_epoch = kv_share_mark(&s->kv, q->tag);
    q->no_park = took_shared;
    q->hit_m = m;
    q->hit_epoch = s->kv.evictions + 1;
    uint32_t j = m;
    if (s->kv.ckpt_units) {
        while (j > 0 && !kv_has_ckpt(&s->kv, q->blk[j - 1]))
            j--;
    } else if (s->p.hybrid) {
        j = 0;
    }
    *m_out = m;
    *j_out = j;
}

/* Forms the next step. Returns true if a request was preempted. */
static bool schedule(struct sched *s, int64_t now)
{
    int64_t budget = s->p.max_num_batched_tokens;
    int P = positions(s);
    int bs = s->p.block_size;
    bool preempted = false;
    bool had_running = s->n_running > 0;
    s->n_batch = 0;
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        struct sreq *q = s->running[i];
        int64_t num_new;
        bool decode = !q->prefilling;
        if (decode) {
            if (P > budget)
                break;
            num_new = P;
        } else {
            num_new = q->num_tokens - q->num_computed;
            if (num_new > budget)
                num_new = budget;
        }
        bool ok = true;
        /* (grow_blocks() is a no-op while the request's blocks suffice,
         * the common case of a decode step.) */
        while ((int64_t)q->n_blk < blocks_ceil(s, q->num_computed + num_new) &&
               !grow_blocks(s, q, q->num_computed + num_new)) {
            struct sreq *v = s->running[--s->n_running];
            preempt(s, v);
            preempted = true;
            if (v == q) {
                ok = false;
                break;
            }
        }
        if (!ok)
            break;
        q->step_new = num_new;
        q->step_decode = decode;
        q->step_start = q->num_computed;
        batch_push(s, q);
        budget -= num_new;
    }
    if (!preempted) {
        struct sreq *q;
        while ((q = sched_waiting_head(s)) && budget > 0 && s->n_running < s->p.max_num_seqs) {
            if (had_running && q->arrival_ns >= now)
                break;
            uint32_t m, j;
            int64_t pinned;
            prefix_hit(s, q, &m, &j, &pinned);
            int64_t start = (int64_t)j * bs;
            int64_t num_new = q->num_tokens - start;
            if (num_new > budget)
                num_new = budget;
            int64_t want = cdiv(start + num_new, bs);
            int64_t need = want > m ? want - m : 0;
            /* The matched blocks are taken: what is available now is what
             * was available less their evictable units (pinned). */
            (void)pinned;
            if (need > kv_available(&s->kv)) {
                kv_untake_chain(&s->kv, q->blk + q->adopt_n, m - q->adopt_n);
                if (q->adopt_n)
                    kv_unadopt(&s->kv, q->adopt_id);
                break;
            }
            q->n_blk = m;
            for (uint32_t k = q->adopt_n; k < m; k++)
                kv_tag(&s->kv, q->blk[k], q->tag);
            q->n_committed = j; /* hybrid: recomputed blocks may still get checkpoints */
            q->num_computed = start;
            ASSERT(grow_blocks(s, q, start + num_new));
            if (q->c->preemptions == 0) {
                /* Prompt and cached tokens counted together, at the first
                 * admission only, so that any interval's cached / prompt
                 * is the hit rate of one set of requests (at most 1). */
                q->c->cached_tokens = start;
                s->cached_tokens += start;
                s->prompt_tokens += q->c->prompt_tokens;
            }
            wq_remove(s, q);
            if (s->hint) {
                /* This call supersedes its session's hint. */
                struct sreq *h = s->hint[hint_slot(q->c->session_key)];
                if (h && h->hint_key == q->c->session_key) {
                    if (h->hint_ids && !q->hint_ids && q->src_serial == h->hint_serial) {
                        /* Its ids [0, src_same) are in the hint's buffer. */
                        q->hint_ids = h->hint_ids;
                        q->hint_cap_ids = h->hint_cap_ids;
                        h->hint_ids = NULL;
                        h->hint_n_ids = h->hint_cap_ids = 0;
                    }
                    hint_drop(s, h);
                }
            }
            q->state = SREQ_RUNNING;
            q->prefilling = true;
            running_push(s, q);
            q->step_new = num_new;
            q->step_decode = false;
            q->step_start = start;
            batch_push(s, q);
            budget -= num_new;
        }
    }
    /* Composition. */
    struct cost_batch *cb = &s->cb;
    memset(cb, 0, sizeof *cb);
    cb->decode_positions = P;
    cb->draft = s->p.spec->draft;
    for (int i = 0; i < s->n_batch; i++) {
        struct sreq *q = s->batch[i];
        if (q->step_decode) {
            cb->n_decode++;
            cb->sum_ctx += q->num_computed + P;
        } else {
            cb->n_prefill++;
            cb->prefill_tokens += q->step_new;
            cb->prefill_attn += q->step_new * q->step_start + q->step_new * q->step_new / 2;
        }
    }
    return preempted;
}

static void run_reserve(struct sched *s, int64_t k, int64_t n)
{
    if (k > s->run_cap) {
        s->run_cap = k * 2 > 64 ? k * 2 : 64;
        s->run_end = xrealloc(s->run_end, (size_t)s->run_cap * sizeof *s->run_end);
        s->run_fb = xrealloc(s->run_fb, (size_t)s->run_cap * sizeof *s->run_fb);
    }
    if (k * n > s->run_emit_cap) {
        s->run_emit_cap = k * n * 2 > 1024 ? k * n * 2 : 1024;
        s->run_emit = xrealloc(s->run_emit, (size_t)s->run_emit_cap);
    }
}

/* Plans the step just formed: draws of its decoding requests and its
 * end; for a closed-form run, the following identical steps too. */
static void plan(struct sched *s, int64_t now, bool preempted)
{
    int n = s->n_batch;
    int P = positions(s);
    const struct spec_model *sp = s->p.spec;
    const uint8_t *tab = s->acc_fast ? s->acc_tab : NULL;
    bool closed = !s->p.stepwise && !preempted && s->cb.n_prefill == 0 &&
                  s->cb.n_decode == n && n == s->n_running &&
                  (s->n_waiting == 0 || s->n_running >= s->p.max_num_seqs);
    for (int i = 0; closed && i < n; i++)
        if (s->batch[i]->cancelled)
            closed = false;
    int64_t max_k = closed ? RUN_MAX_STEPS : 1;
    if (closed && max_k * n > RUN_MAX_EMITS)
        max_k = RUN_MAX_EMITS / n;
    if (max_k < 1)
        max_k = 1;
    /* Per-request simulated state lives in the emit scratch's first rows
     * only as needed; keep small locals on the heap for big batches. */
    int64_t pool = 0;
    if (closed) {
        int64_t held = 0;
        for (int i = 0; i < n; i++)
            held += s->batch[i]->n_blk;
        pool = held + kv_available(&s->kv);
    }
    run_reserve(s, closed ? 256 : 1, n ? n : 1);
    int64_t t = now;
    int64_t sum_ctx = s->cb.sum_ctx;
    struct cost_batch cb = s->cb;
    int k = 0;
    /* Simulated per-request progress. */
    int64_t *c = NULL, *rem = NULL;
    if (closed) {
        c = xmalloc((size_t)n * 2 * sizeof *c);
        rem = c + n;
        for (int i = 0; i < n; i++) {
            c[i] = s->batch[i]->num_computed;
            rem[i] = s->batch[i]->c->max_tokens - s->batch[i]->output_done;
        }
    }
    for (;;) {
        if (k >= 1) {
            /* Blocks for step k: every request holds ceil((c + P) / bs). */
            int64_t need = 0;
            for (int i = 0; i < n; i++)
                need += blocks_ceil(s, c[i] + P);
            if (need > pool)
                break;
            cb.sum_ctx = sum_ctx;
        }
        run_reserve(s, k + 1, n ? n : 1);
        bool fb;
        int64_t ns = pricer_step(s->pricer, &cb, &fb);
        if (ns < 1)
            ns = 1;
        t += ns;
        s->run_end[k] = t;
        s->run_fb[k] = fb;
        bool done = false;
        uint8_t *e = s->run_emit + (size_t)k * n;
        for (int i = 0; i < n; i++) {
            struct sreq *q = s->batch[i];
            if (!q->step_decode) {
                e[i] = 0;
                continue;
            }
            int64_t left = closed ? rem[i] : q->c->max_tokens - q->output_done;
            int64_t x = tab ? acc_draw(sp, tab, q->key, q->spec_steps + k)
                            : spec_sample(sp, q->key, q->spec_steps + k);
            if (x > left)
                x = left;
            e[i] = (uint8_t)x;
            if (closed) {
                c[i] += x;
                rem[i] -= x;
                sum_ctx += x;
                if (!rem[i])
                    done = true;
            }
        }
        k++;
        if (!closed || done || k >= max_k)
            break;
    }
    free(c);
    s->run_k = k;
    s->step_start_ns = now;
    s->step_end_ns = s->run_end[k - 1];
    if (k > 1)
        s->runs++;
}

int64_t sched_cut(struct sched *s, int64_t now)
{
    if (!s->busy)
        return INT64_MAX;
    if (s->run_k > 1) {
        int k = 0;
        while (k < s->run_k - 1 && s->run_end[k] <= now)
            k++;
        s->run_k = k + 1;
        s->step_end_ns = s->run_end[k];
    }
    return s->step_end_ns;
}

/* Applies step k of the run in flight, which ended at t. */
static void apply_step(struct sched *s, int k, int64_t t)
{
    int n = s->n_batch;
    int bs = s->p.block_size;
    const uint8_t *e = s->run_emit + (size_t)k * n;
    int64_t start = k ? s->run_end[k - 1] : s->step_start_ns;
    s->steps++;
    s->busy_ns += t - start;
    if (s->run_fb[k])
        s->fallback_steps++;
    if (k)
        s->run_steps++;
    if (s->on_step) {
        struct cost_batch cb = s->cb;
        if (k) {
            cb.sum_ctx = 0;
            for (int i = 0; i < n; i++)
                cb.sum_ctx += s->batch[i]->num_computed + cb.decode_positions;
        }
        s->on_step(s->on_step_arg, s->index, start, t, &cb, s->run_fb[k]);
    }
    for (int i = 0; i < n; i++) {
        struct sreq *q = s->batch[i];
        struct target_call *c = q->c;
        int64_t emitted = 0;
        if (q->step_decode) {
            emitted = e[i];
            q->spec_steps++;
            q->num_computed = q->step_start + emitted;
            trim_blocks(s, q, q->num_computed);
        } else {
            q->num_computed = q->step_start + q->step_new;
            if (q->num_computed == q->num_tokens) {
                emitted = 1;
                q->prefilling = false;  /* prefill over: decoding from now on */
            }
        }
        q->output_done += emitted;
        q->num_tokens += emitted;
        commit_blocks(s, q);
        if (emitted) {
            s->output_tokens += emitted;
            if (q->cancelled && t > q->cancel_ns)
                continue;
            if (!q->first_sent) {
                q->first_sent = true;
                if (c->cb->first_token)
                    c->cb->first_token(c, t);
            }
            if (c->cb->chunk)
                c->cb->chunk(c, t, emitted);
        }
    }
    (void)bs;
}

/* Removes finished and cancelled requests from the running list (keeping
 * the order) and delivers their done. */
static void reap(struct sched *s, int64_t t)
{
    int w = 0;
    int n = s->n_running;
    struct sreq **fin = NULL;
    int n_fin = 0;
    for (int i = 0; i < n; i++) {
        struct sreq *q = s->running[i];
        if (q->output_done >= q->c->max_tokens || q->cancelled) {
            if (!fin)
                fin = xmalloc((size_t)n * sizeof *fin);
            fin[n_fin++] = q;
        } else {
            s->running[w++] = q;
        }
    }
    s->n_running = w;
    for (int i = 0; i < n_fin; i++) {
        struct sreq *q = fin[i];
        enum target_status st = q->output_done >= q->c->max_tokens ? TARGET_OK
                                : q->fail ? (enum target_status)q->fail
                                          : TARGET_ERR_CANCELLED;
        finish_request(s, q, t, st);
    }
    free(fin);
    /* Cancelled or failed waiting requests (a walk only when some were
     * marked since the last one). */
    if (!s->cancel_pending)
        return;
    s->cancel_pending = 0;
    LIST_FOR_EACH_SAFE(node, next, &s->waiting) {
        struct sreq *q = LIST_ENTRY(node, struct sreq, wait);
        if (!q->cancelled)
            continue;
        wq_remove(s, q);
        enum target_status st = q->fail ? (enum target_status)q->fail : TARGET_ERR_CANCELLED;
        finish_request(s, q, t, st);
    }
}

int64_t sched_boundary(struct sched *s, int64_t now)
{
    if (s->busy) {
        ASSERT(s->step_end_ns == now);
        int P = positions(s);
        for (int k = 0; k < s->run_k; k++) {
            if (k) {
                /* The next step of the run: same batch, decode lookahead. */
                for (int i = 0; i < s->n_batch; i++) {
                    struct sreq *q = s->batch[i];
                    q->step_start = q->num_computed;
                    q->step_new = P;
                    if ((int64_t)q->n_blk < blocks_ceil(s, q->num_computed + P))
                        ASSERT(grow_blocks(s, q, q->num_computed + P));
                }
            }
            apply_step(s, k, s->run_end[k]);
        }
        s->busy = false;
    }
    reap(s, now);
    s->n_batch = 0;
    bool preempted = schedule(s, now);
    while (!s->n_batch && sched_waiting_head(s)) {
        /* Everything was preempted (the next schedule admits), or the head
         * cannot fit even alone (its blocks and checkpoints exceed the
         * pool): end it rather than stall. */
        if (!preempted) {
            if (s->n_running)
                break;
            struct sreq *q = sched_waiting_head(s);
            wq_remove(s, q);
            finish_request(s, q, now, TARGET_ERR_NO_SPACE);
            reap(s, now);
        }
        preempted = schedule(s, now);
    }
    if (!s->n_batch)
        return INT64_MAX;
    plan(s, now, preempted);
    s->busy = true;
    return s->step_end_ns;
}

int sched_acc_draw(const struct sched *s, uint64_t skey, int64_t step)
{
    return s->acc_fast ? acc_draw(s->p.spec, s->acc_tab, skey, step)
                       : spec_sample(s->p.spec, skey, step);
}

int sched_verify(const struct sched *s, char *err)
{
    if (kv_verify(&s->kv, err) < 0)
        return -1;
    int64_t held = 0;
    int bs = s->p.block_size;
    if (s->n_running > s->p.max_num_seqs)
        return err_set(err, "sched %d: %d running > max_num_seqs %d", s->index, s->n_running,
                       s->p.max_num_seqs);
    for (int i = 0; i < s->n_running; i++) {
        const struct sreq *q = s->running[i];
        if (q->state != SREQ_RUNNING)
            return err_set(err, "sched %d: running request %llu in state %d", s->index,
                           (unsigned long long)q->c->id, q->state);
        if (q->num_computed > q->num_tokens || q->num_computed < 0)
            return err_set(err, "sched %d: request %llu computed %lld of %lld tokens", s->index,
                           (unsigned long long)q->c->id, (long long)q->num_computed,
                           (long long)q->num_tokens);
        if (q->output_done > q->c->max_tokens)
            return err_set(err, "sched %d: request %llu emitted %lld > max_tokens %lld",
                           s->index, (unsigned long long)q->c->id, (long long)q->output_done,
                           (long long)q->c->max_tokens);
        if (q->num_tokens != q->c->prompt_tokens + q->output_done)
            return err_set(err, "sched %d: request %llu token count", s->index,
                           (unsigned long long)q->c->id);
        if ((int64_t)q->n_blk < cdiv(q->num_computed, bs))
            return err_set(err, "sched %d: request %llu holds %u blocks for %lld tokens",
                           s->index, (unsigned long long)q->c->id, q->n_blk,
                           (long long)q->num_computed);
        for (uint32_t b = 0; b < q->n_blk; b++) {
            if (q->blk[b] >= s->kv.n_made || kv_ref(&s->kv, q->blk[b]) == 0)
                return err_set(err, "sched %d: request %llu holds a free block", s->index,
                               (unsigned long long)q->c->id);
        }
        held += q->n_blk;
    }
    int64_t nw = 0;
    LIST_FOR_EACH(n, &s->waiting) {
        const struct sreq *q = LIST_ENTRY(n, struct sreq, wait);
        if (q->state != SREQ_WAITING || q->n_blk)
            return err_set(err, "sched %d: waiting request %llu holds blocks or is not waiting",
                           s->index, (unsigned long long)q->c->id);
        nw++;
    }
    if (nw != s->n_waiting)
        return err_set(err, "sched %d: %lld waiting, counted %lld", s->index, (long long)nw,
                       (long long)s->n_waiting);
    if (s->outstanding != s->n_running + s->n_waiting)
        return err_set(err, "sched %d: %lld outstanding != %d running + %lld waiting", s->index,
                       (long long)s->outstanding, s->n_running, (long long)s->n_waiting);
    /* Blocks shared by requests count once per holder in `held`; the pool
     * has at least as many references as distinct blocks. */
    if (held < s->kv.used_blocks)
        return err_set(err, "sched %d: requests hold %lld block references, %lld blocks in use",
                       s->index, (long long)held, (long long)s->kv.used_blocks);
    if (s->bs_shift >= 0 ? (1 << s->bs_shift) != bs : (bs > 0 && (bs & (bs - 1)) == 0))
        return err_set(err, "sched %d: block shift %d for block size %d", s->index, s->bs_shift,
                       bs);
    if (s->acc_fast) {
        /* Buckets with a threshold inside compare; every 64th bucket holds
         * its draws' count (the whole table: tests/test_sched.c). */
        const struct spec_model *sp = s->p.spec;
        const int shift = 53 - SCHED_ACC_BITS;
        for (int j = 1; j <= sp->draft; j++) {
            uint64_t b = sp->thr[j] >> shift;
            if (b < (1u << SCHED_ACC_BITS) && (sp->thr[j] & ((1ULL << shift) - 1)) &&
                s->acc_tab[b])
                return err_set(err, "sched %d: acceptance bucket %llu holds threshold %d",
                               s->index, (unsigned long long)b, j);
        }
        for (uint64_t b = 0; b < (1u << SCHED_ACC_BITS); b += 64) {
            int k = 1;
            for (int j = 1; j <= sp->draft; j++)
                k += (b << shift) >= sp->thr[j];
            if (s->acc_tab[b] && s->acc_tab[b] != k)
                return err_set(err, "sched %d: acceptance bucket %llu: %d, draws give %d",
                               s->index, (unsigned long long)b, s->acc_tab[b], k);
        }
    }
    return 0;
}
