/* sched.c: one replica's vLLM V1-style scheduler (sched.h): requests and
 * their blocks, forming steps, speculative accounting and the advance of
 * steps, one by one or in closed-form runs; the prefix match and what a
 * request leaves for its session's next call are handoff.c's. */
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
    handoff_hints_init(&s->hints);
    s->bs_shift = -1;
    if (p->block_size > 0 && (p->block_size & (p->block_size - 1)) == 0)
        s->bs_shift = __builtin_ctz((unsigned)p->block_size);
    const struct spec_model *sp = p->spec;
    s->acc_fast = sp && sp->draft > 0 && sp->accept.kind != ACCEPT_FIXED && sp->thr_monotone;
    if (s->acc_fast)
        acc_tab_build(sp, s->acc_tab);
}

void sreq_free(struct sreq *q)
{
    if (q) {
        handoff_release(&q->ho);
        free(q->hash); /* both arrays */
    }
    free(q);
}

/* q's block, hash and generation arrays, made at its first admission
 * attempt (one allocation, sized at submit). */
static void sreq_arrays(struct sreq *q)
{
    if (q->hash)
        return;
    ASSERT(q->cap_hash && q->cap_blk);
    q->hash = xmalloc((size_t)q->cap_hash * 8 + (size_t)q->cap_blk * 8);
    q->blk = (uint32_t *)(q->hash + q->cap_hash);
    q->ho.gen = q->blk + q->cap_blk;
}

void sched_free(struct sched *s)
{
    for (int i = 0; i < s->n_running; i++)
        sreq_free(s->running[i]);
    LIST_FOR_EACH_SAFE(n, nx, &s->waiting)
        sreq_free(LIST_ENTRY(n, struct sreq, wait));
    handoff_hints_free(&s->hints);
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
    /* Prompt + max_tokens against the context and the pool before anything
     * is sized from them (a client's max_tokens of 1e12 must cost nothing;
     * saturating for any int64). A request that fails here holds no
     * arrays; the others get theirs at their first admission
     * (sreq_arrays), so a waiting request costs its struct alone: 100,000
     * queued calls of 100k tokens take 30 MB instead of 2.5 GB. */
    int64_t total = c->max_tokens > INT64_MAX - c->prompt_tokens ? INT64_MAX
                                                                  : c->prompt_tokens + c->max_tokens;
    int fail = total > s->p.max_model_len                      ? TARGET_ERR_TOO_LONG
             : cdiv(total + positions(s), bs) > s->p.kv_units ? TARGET_ERR_NO_SPACE
                                                               : 0;
    uint32_t cap_blk = fail ? 0 : (uint32_t)cdiv(total + positions(s), bs) + 1;
    uint32_t cap_hash = fail ? 0 : (uint32_t)(total / bs) + 1;
    /* What it holds as a hint: the struct and both arrays. */
    size_t sz = sizeof(struct sreq) + (size_t)cap_hash * 8 + (size_t)cap_blk * 8;
    struct sreq *q = xcalloc(1, sizeof *q);
    q->cap_hash = cap_hash;
    q->cap_blk = cap_blk;
    handoff_init(&q->ho, NULL, (int64_t)sz);
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
    if (fail)
        q->cancelled = true, q->fail = fail, s->cancel_pending++;
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

/* The salt of chain block i: the session's, or for the first
 * shared_blocks trace blocks the shared key's (instances of a trace share
 * their system prefix; target.h). */
static inline uint64_t seed_at(const struct sreq *q, uint32_t i)
{
    if (i < (uint64_t)q->c->shared_blocks * q->chain_ratio)
        return hash_mix(0x6b76636861696e00ULL, q->c->shared_key);
    return q->chain_seed;
}

static uint64_t block_hash(const struct sreq *q, uint32_t i)
{
    uint64_t prev = i ? q->hash[i - 1] : seed_at(q, 0);
    uint64_t content;
    if ((int64_t)i < q->n_chain) {
        uint64_t id = q->c->blocks[i / q->chain_ratio];
        content = (id ^ seed_at(q, i)) * 0x9e3779b97f4a7c15ULL + i % q->chain_ratio;
    } else {
        content = (q->salt ^ i) * 0xbf58476d1ce4e5b9ULL;
    }
    return fmix(prev * 0x94d049bb133111ebULL ^ content);
}

void sreq_hashes(struct sreq *q, uint32_t upto)
{
    ASSERT(upto <= q->cap_hash);
    uint32_t i = q->n_hash;
    /* Chain blocks without a division per block. */
    uint32_t chain_end = (int64_t)upto < q->n_chain ? upto : (uint32_t)q->n_chain;
    if (i < chain_end) {
        uint32_t ratio = q->chain_ratio, id = i / ratio, sub = i % ratio;
        uint64_t prev = i ? q->hash[i - 1] : seed_at(q, 0), seed = seed_at(q, i);
        uint64_t shared_end = (uint64_t)q->c->shared_blocks * ratio;
        const uint64_t *ids = q->c->blocks;
        for (; i < chain_end; i++) {
            if (i == shared_end)
                seed = q->chain_seed;
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

static void release_blocks(struct sched *s, struct sreq *q)
{
    /* Tail first, so that chain tails are evicted before their heads. */
    kv_release_chain(&s->kv, q->blk, q->n_blk, NULL);
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
    sreq_hashes(q, full);
    for (uint32_t i = q->n_committed; i < full; i++) {
        if (i + 8 < full)
            kv_prefetch(&s->kv, q->hash[i + 8]);
        bool hashed = kv_commit(&s->kv, q->blk[i], q->hash[i]);
        handoff_committed(&q->ho, i, hashed);
        if (s->kv.ckpt_units && (int64_t)i + 1 <= q->prompt_full &&
            (((int64_t)i + 1) % s->p.ckpt_interval == 0 || (int64_t)i + 1 == q->prompt_full)) {
            bool had = kv_has_ckpt(&s->kv, q->blk[i]);
            if (kv_checkpoint(&s->kv, q->blk[i]) == 0 && !had)
                handoff_checkpointed(&q->ho, i);
        }
    }
    q->n_committed = full;
}

static void finish_request(struct sched *s, struct sreq *q, int64_t t, enum target_status st)
{
    bool kept = handoff_finish(s, q); /* its blocks released (or parked) */
    q->state = SREQ_DONE;
    s->outstanding--;
    s->finished++;
    struct target_call *c = q->c;
    c->priv = NULL;
    if (kept)
        q->c = NULL; /* its session's hint now */
    else
        sreq_free(q);
    if (st != TARGET_OK && !c->error[0])
        snprintf(c->error, sizeof c->error, "%s", target_status_name(st));
    c->cb->done(c, t, st);
}

static void preempt(struct sched *s, struct sreq *q)
{
    release_blocks(s, q);
    handoff_preempted(&q->ho);
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
        kv_tag(&s->kv, b, handoff_tag(&q->ho));
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
    handoff_trimmed(&q->ho, q->n_blk);
}

static inline void batch_push(struct sched *s, struct sreq *q)
{
    if (__builtin_expect(s->n_batch == s->cap_batch, 0)) {
        s->cap_batch = s->cap_batch ? s->cap_batch * 2 : 64;
        s->batch = xrealloc(s->batch, (size_t)s->cap_batch * sizeof *s->batch);
    }
    s->batch[s->n_batch++] = q;
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
            /* Its prefix hit: m blocks matched and taken, j usable. */
            sreq_arrays(q);
            uint32_t j, m = handoff_match(s, q, &j);
            int64_t start = (int64_t)j * bs;
            int64_t num_new = q->num_tokens - start;
            if (num_new > budget)
                num_new = budget;
            int64_t want = cdiv(start + num_new, bs);
            int64_t need = want > m ? want - m : 0;
            /* (The matched blocks are taken already: kv_available() no
             * longer counts them as evictable.) */
            if (need > kv_available(&s->kv)) {
                handoff_unmatch(s, q, m);
                break;
            }
            q->n_blk = m;
            handoff_admit(s, q, m);
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
            handoff_supersede(s, q);
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
