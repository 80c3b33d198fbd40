/* test_sched.c: the replica scheduler step by step against hand-worked
 * expectations: chunked prefill and the token budget, running requests
 * first, preemption by recompute and resumption from the prefix cache,
 * the admission rule, the prefix-cache cap and session salting, hybrid
 * state checkpoints, and speculative accounting (emitted tokens, rollback
 * of KV slots, max_tokens). Time comes from a hand-driven loop. */
#include "engine/sched.h"

#include "engine/preset.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"

struct fake_loop {
    struct loop base;
    int64_t now;
};
static int64_t f_now(struct loop *l) { return ((struct fake_loop *)l)->now; }
static const struct loop_ops f_ops = {.now = f_now};
static struct fake_loop FL = {.base = {.ops = &f_ops}};

struct rec {
    struct target_call r;
    int n_chunks;
    int64_t chunk_tok[64], chunk_t[64];
    int64_t first_t, done_t;
    int n_first, n_done;
    int status;
};

static void cb_first(struct target_call *r, int64_t t)
{
    struct rec *x = (struct rec *)r;
    x->first_t = t;
    x->n_first++;
}
static void cb_chunk(struct target_call *r, int64_t t, int64_t n)
{
    struct rec *x = (struct rec *)r;
    if (x->n_chunks < 64) {
        x->chunk_tok[x->n_chunks] = n;
        x->chunk_t[x->n_chunks] = t;
    }
    x->n_chunks++;
}
static void cb_done(struct target_call *r, int64_t t, enum target_status st)
{
    struct rec *x = (struct rec *)r;
    x->done_t = t;
    x->n_done++;
    x->status = st;
}
static const struct target_cb CB = {cb_first, cb_chunk, cb_done};

static struct cost_model *COST;
static struct pricer *PRICER;

static void req(struct rec *x, uint64_t id, int64_t prompt, int64_t max, uint64_t session,
                const uint64_t *blocks, uint32_t nb, int64_t tbs)
{
    memset(x, 0, sizeof *x);
    x->r.id = id;
    x->r.session_key = session;
    x->r.prompt_tokens = prompt;
    x->r.max_tokens = max;
    x->r.blocks = blocks;
    x->r.n_blocks = nb;
    x->r.trace_block_size = tbs;
    x->r.cb = &CB;
}

static struct spec_model SPEC;
static bool NO_PARKS; /* setup(): release blocks one by one */

static void setup(struct sched *s, int bs, int64_t budget, int max_seqs, int64_t units,
                  bool hybrid, int64_t ckpt_units, int draft, const char *acc)
{
    char err[ERR_LEN];
    if (spec_init(&SPEC, draft, acc, 1, err))
        fprintf(stderr, "spec_init: %s\n", err);
    struct sched_params p = {.block_size = bs, .max_num_batched_tokens = budget,
                             .max_num_seqs = max_seqs, .max_model_len = 1 << 20,
                             .prefix_caching = true, .hybrid = hybrid, .ckpt_interval = 2,
                             .ckpt_units = ckpt_units, .kv_units = units, .stepwise = true,
                             .spec = &SPEC, .hint_budget = 1 << 20, .no_parks = NO_PARKS};
    FL.now = 0;
    sched_init(s, 0, &p, PRICER, &FL.base);
}

static int verify(const struct sched *s)
{
    char err[ERR_LEN] = "";
    int rc = sched_verify(s, err);
    if (rc)
        fprintf(stderr, "sched_verify: %s\n", err);
    return rc;
}

/* Advances to the end of the step in flight; returns its end time. */
static int64_t step(struct sched *s)
{
    int64_t t = s->busy ? s->step_end_ns : FL.now;
    FL.now = t;
    sched_boundary(s, t);
    CHECK(verify(s) == 0, "verify after step");
    return t;
}

/* Runs until idle. */
static void drain(struct sched *s)
{
    for (int i = 0; i < 10000 && (s->busy || s->n_waiting); i++)
        step(s);
}

static bool in_batch(const struct sched *s, const struct rec *x, int64_t *new_tokens)
{
    for (int i = 0; i < s->n_batch; i++)
        if (s->batch[i]->c == &x->r) {
            if (new_tokens)
                *new_tokens = s->batch[i]->step_new;
            return true;
        }
    return false;
}

static void test_chunking(void)
{
    struct sched s;
    setup(&s, 4, 16, 4, 64, false, 0, 0, "curve");
    struct rec r1, r2;
    char err[ERR_LEN];
    req(&r1, 1, 30, 3, 1, NULL, 0, 0);
    req(&r2, 2, 10, 2, 2, NULL, 0, 0);
    CHECK(sched_submit(&s, &r1.r, err) == 0 && sched_submit(&s, &r2.r, err) == 0, "submit");
    int64_t n;
    step(&s); /* t = 0: forms step 1 */
    CHECK(s.n_batch == 1 && in_batch(&s, &r1, &n) && n == 16, "step 1: R1 takes the whole budget (16)");
    CHECK(s.n_waiting == 1 && s.kv.used_blocks == 4, "step 1: R2 waits; R1 holds 4 blocks");
    CHECK(s.cb.n_prefill == 1 && s.cb.prefill_tokens == 16 && s.cb.n_decode == 0, "step 1 composition");
    int64_t t1 = step(&s);
    CHECK(in_batch(&s, &r1, &n) && n == 14 && in_batch(&s, &r2, NULL), "step 2: R1's last chunk of 14 first");
    in_batch(&s, &r2, &n);
    CHECK(n == 2 && s.batch[0]->c == &r1.r, "step 2: R2 gets the 2 tokens left");
    CHECK(s.kv.used_blocks == 8 + 1, "step 2: 8 + 1 blocks");
    CHECK(r1.n_chunks == 0, "no token before the prompt is done");
    int64_t t2 = step(&s);
    CHECK(r1.n_first == 1 && r1.first_t == t2 && r1.n_chunks == 1, "R1's first token at the end of step 2");
    CHECK(s.cb.n_decode == 1 && s.cb.n_prefill == 1 && s.cb.prefill_tokens == 8 && s.cb.sum_ctx == 31,
          "step 3: R1 decodes (ctx 31), R2 prefills its last 8");
    int64_t t3 = step(&s);
    CHECK(r2.n_first == 1 && r2.first_t == t3, "R2's first token at the end of step 3");
    CHECK(s.cb.n_decode == 2 && s.cb.sum_ctx == 32 + 11, "step 4: both decode");
    int64_t t4 = step(&s);
    CHECK(r1.n_done == 1 && r1.done_t == t4 && r1.status == TARGET_OK && r1.n_chunks == 3,
          "R1 done at step 4 with 3 tokens in 3 chunks");
    CHECK(r2.n_done == 1 && r2.done_t == t4 && r2.n_chunks == 2, "R2 done at step 4 with 2 tokens");
    CHECK(r1.chunk_t[1] == t3 && r1.chunk_t[2] == t4 && t1 < t2 && t2 < t3, "chunk times");
    CHECK(!s.busy && s.n_running == 0 && s.kv.used_blocks == 0, "idle, all blocks released");
    sched_free(&s);
}

static void test_preemption(void)
{
    struct sched s;
    setup(&s, 4, 64, 4, 9, false, 0, 0, "curve");
    struct rec r1, r2, r3;
    char err[ERR_LEN];
    req(&r1, 1, 12, 6, 1, NULL, 0, 0);
    req(&r2, 2, 12, 12, 2, NULL, 0, 0);
    req(&r3, 3, 4, 1, 3, NULL, 0, 0);
    sched_submit(&s, &r1.r, err);
    sched_submit(&s, &r2.r, err);
    step(&s);
    CHECK(s.n_batch == 2 && s.kv.used_blocks == 6, "both prompts admitted: 3 + 3 blocks");
    step(&s); /* t1: first tokens; step 2 decodes, 4 + 4 blocks */
    CHECK(s.kv.used_blocks == 8 && s.cb.n_decode == 2, "decode needs a 4th block each");
    step(&s);
    step(&s);
    int64_t t4 = step(&s);
    CHECK(r1.n_chunks == 4 && r2.n_chunks == 4, "4 tokens each by t4");
    /* A request arrives during the step ending at t5. */
    FL.now = t4 + 1;
    sched_submit(&s, &r3.r, err);
    step(&s); /* t5: both need a 5th block; only one is left */
    CHECK(r2.r.preemptions == 1 && s.preemptions == 1, "R2 (last running) preempted");
    CHECK(s.n_batch == 1 && in_batch(&s, &r1, NULL), "R1 keeps running");
    CHECK(s.n_waiting == 2 && sched_waiting_head(&s)->c == &r2.r, "R2 back at the front of the queue");
    CHECK(s.kv.n_lru == 4 && s.kv.free_units == 0, "R2's 4 full blocks stay cached");
    CHECK(!in_batch(&s, &r3, NULL), "admission rule: nothing admitted in a step that preempted");
    struct sreq *q1 = r1.r.priv;
    uint64_t h3 = q1->hash[3], h2 = q1->hash[2];
    int64_t t6 = step(&s); /* R1 finishes; R2 resumes from its cached blocks */
    CHECK(r1.n_done == 1 && r1.done_t == t6 && r1.n_chunks == 6, "R1 done with 6 tokens");
    int64_t n;
    CHECK(in_batch(&s, &r2, &n) && n == 1 && s.batch[0]->step_start == 16,
          "R2 resumes: 16 tokens from the cache, 1 recomputed");
    CHECK(in_batch(&s, &r3, &n) && n == 4, "R3 admitted behind it");
    CHECK(kv_lookup(&s.kv, h3) == KV_NONE && kv_lookup(&s.kv, h2) != KV_NONE,
          "R1's tail block evicted first, its head kept");
    int64_t t7 = step(&s);
    CHECK(r3.n_done == 1 && r3.done_t == t7 && r3.n_chunks == 1, "R3 done (max_tokens 1)");
    CHECK(r2.n_chunks == 6 && r2.n_first == 1, "R2's resumption emits its 6th token, no second first token");
    drain(&s);
    CHECK(r2.n_done == 1 && r2.status == TARGET_OK && r2.n_chunks == 12, "R2 completes all 12");
    CHECK(r2.r.cached_tokens == 0, "cached_tokens counts the first admission only");
    CHECK(s.kv.used_blocks == 0 && s.outstanding == 0, "all released");
    sched_free(&s);
}

static void test_same_time_arrival(void)
{
    struct sched s;
    setup(&s, 4, 64, 8, 64, false, 0, 0, "curve");
    struct rec r1, r2, r3;
    char err[ERR_LEN];
    req(&r1, 1, 8, 5, 1, NULL, 0, 0);
    req(&r2, 2, 8, 2, 2, NULL, 0, 0);
    req(&r3, 3, 8, 2, 3, NULL, 0, 0);
    sched_submit(&s, &r1.r, err);
    sched_submit(&s, &r2.r, err);
    step(&s);
    CHECK(s.n_batch == 2, "an idle replica admits same-time arrivals together");
    int64_t t = s.step_end_ns;
    FL.now = t;
    sched_submit(&s, &r3.r, err); /* exactly at the boundary */
    step(&s);
    CHECK(!in_batch(&s, &r3, NULL) && s.n_waiting == 1, "arrival at a boundary waits for the next step");
    step(&s);
    CHECK(in_batch(&s, &r3, NULL), "and joins the one after");
    drain(&s);
    sched_free(&s);
}

static void test_prefix(void)
{
    struct sched s;
    setup(&s, 4, 64, 8, 64, false, 0, 0, "curve");
    static const uint64_t A[] = {11, 12}, B[] = {11, 99};
    struct rec r;
    char err[ERR_LEN];
    req(&r, 1, 16, 1, 1, A, 2, 8);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 0 && s.kv.n_lru == 4, "first call: no hit; 4 blocks cached");
    req(&r, 2, 16, 1, 1, A, 2, 8);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 12, "hit capped at prompt - 1: 3 of 4 blocks (12 tokens)");
    req(&r, 3, 17, 1, 1, A, 2, 8);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 16, "a longer prompt hits all 4 blocks");
    req(&r, 4, 17, 1, 2, A, 2, 8);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 0, "another session tree does not share (salted hashes)");
    req(&r, 5, 16, 1, 1, B, 2, 8);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 8, "a chain that diverges at trace block 1 hits 8 tokens");
    req(&r, 6, 16, 1, 1, A, 2, 6);
    CHECK(sched_submit(&s, &r.r, err) == -1 && strstr(err, "does not divide"),
          "engine block 4 must divide the trace block (6)");
    sched_free(&s);
}

static void test_hybrid(void)
{
    struct sched s;
    setup(&s, 4, 64, 8, 64, true, 2, 0, "curve");
    static const uint64_t A[] = {1, 2, 3, 4}, L[] = {1, 2, 3, 4, 5, 6, 7}, D[] = {1, 2, 3, 9};
    struct rec r;
    char err[ERR_LEN];
    req(&r, 1, 18, 1, 1, A, 4, 4);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(s.kv.n_ckpt == 2, "checkpoints at block 2 (interval) and 4 (prompt end)");
    CHECK(s.kv.lru_units == 4 + 2 * 2, "cached: 4 blocks + 2 checkpoints of 2 units");
    req(&r, 2, 30, 1, 1, L, 7, 4);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 16, "hit up to the prompt-end checkpoint");
    req(&r, 3, 18, 1, 1, D, 4, 4);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 8, "3 blocks match, but the state exists only at block 2");
    /* A prompt ending at block 3 recomputes it and leaves a checkpoint
     * there, which the next call can resume from. */
    static const uint64_t E[] = {1, 2, 3}, F[] = {1, 2, 3, 7};
    req(&r, 4, 13, 1, 1, E, 3, 4);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 8, "resumes at block 2, recomputes block 3");
    req(&r, 5, 20, 1, 1, F, 4, 4);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.r.cached_tokens == 12, "the recomputed prompt end got its checkpoint");
    sched_free(&s);
}

static void test_spec(void)
{
    struct sched s;
    struct rec r;
    char err[ERR_LEN];
    /* fixed:3 with draft 3: 1 token from the prefill, then 3 per step. */
    setup(&s, 4, 64, 8, 64, false, 0, 3, "fixed:3");
    req(&r, 1, 8, 10, 1, NULL, 0, 0);
    sched_submit(&s, &r.r, err);
    step(&s);
    step(&s);
    CHECK(s.cb.n_decode == 1 && s.cb.decode_positions == 4 && s.cb.draft == 3,
          "verification computes draft + 1 = 4 positions");
    CHECK(s.kv.used_blocks == 3, "lookahead slots: blocks for 8 + 4 tokens");
    drain(&s);
    CHECK(r.n_chunks == 4 && r.chunk_tok[0] == 1 && r.chunk_tok[1] == 3 && r.chunk_tok[2] == 3 &&
              r.chunk_tok[3] == 3, "chunks 1, 3, 3, 3");
    sched_free(&s);
    /* fixed:1: rejected positions roll back their slots. */
    setup(&s, 4, 64, 8, 64, false, 0, 3, "fixed:1");
    req(&r, 2, 9, 3, 1, NULL, 0, 0);
    sched_submit(&s, &r.r, err);
    step(&s);
    step(&s);
    CHECK(s.kv.used_blocks == 4, "step 2: blocks for 9 + 4 positions");
    step(&s);
    CHECK(r.n_chunks == 2, "1 token accepted of 4 positions");
    struct sreq *q = r.r.priv;
    CHECK(q->num_computed == 10 && s.kv.used_blocks == 4,
          "rollback to 10 computed tokens; next step's lookahead re-allocated");
    drain(&s);
    CHECK(r.n_chunks == 3 && r.n_done == 1, "3 tokens in 3 chunks");
    sched_free(&s);
    /* fixed:4 never emits beyond max_tokens. */
    setup(&s, 4, 64, 8, 64, false, 0, 3, "fixed:4");
    req(&r, 3, 8, 6, 1, NULL, 0, 0);
    sched_submit(&s, &r.r, err);
    drain(&s);
    CHECK(r.n_chunks == 3 && r.chunk_tok[1] == 4 && r.chunk_tok[2] == 1, "chunks 1, 4, 1 (max 6)");
    CHECK(s.output_tokens == 6, "6 tokens counted");
    sched_free(&s);
}

static void test_rollback_slots(void)
{
    /* After a step, a request holds blocks only for its computed tokens. */
    struct sched s;
    struct rec r;
    char err[ERR_LEN];
    setup(&s, 4, 64, 8, 64, false, 0, 3, "fixed:1");
    req(&r, 1, 9, 2, 1, NULL, 0, 0);
    sched_submit(&s, &r.r, err);
    step(&s); /* forms the prefill */
    step(&s); /* prefill applied; decode formed: 13 positions -> 4 blocks */
    CHECK(s.kv.used_blocks == 4, "4 blocks during verification");
    step(&s); /* decode applied: done (max 2) */
    CHECK(r.n_done == 1 && s.kv.used_blocks == 0, "done releases all");
    sched_free(&s);
}

/* Parked prefixes (kvcache.h) in a pool of 30 blocks: a session's
 * finished call is parked; three calls then fill the pool so that the
 * last one's next chunk finds too few blocks and it is preempted while the
 * park is live; eviction later reaches the park; the session's next call
 * adopts what is left of it, or finds its blocks one by one. Run with
 * parks and with every block released one by one: the same records. */
struct park_run {
    struct rec r[5];
    int64_t preempt_with_parks, parks, adopted, materialised, steps;
};

static void park_script(bool no_parks, struct park_run *o)
{
    struct sched s;
    memset(o, 0, sizeof *o);
    NO_PARKS = no_parks;
    setup(&s, 4, 64, 8, 30, false, 0, 0, "curve");
    NO_PARKS = false;
    char err[ERR_LEN];
    static const uint64_t ids[12] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22};
    req(&o->r[0], 1, 33, 1, 1, ids, 8, 4);
    sched_submit(&s, &o->r[0].r, err);
    for (int i = 0; i < 100 && !o->r[0].n_done; i++)
        step(&s);
    CHECK(o->r[0].n_done == 1, "the first call is done");
    CHECK(no_parks ? s.kv.n_parks_live == 0 : s.kv.n_parks_live == 1 && s.kv.n_parked == 8,
          no_parks ? "no park" : "its 8 full blocks are parked");
    req(&o->r[1], 3, 8, 40, 3, NULL, 0, 0);
    req(&o->r[2], 4, 40, 40, 4, NULL, 0, 0);
    req(&o->r[3], 2, 100, 1, 2, NULL, 0, 0);
    for (int i = 1; i < 4; i++)
        sched_submit(&s, &o->r[i].r, err);
    for (int i = 0; i < 10000 && (s.busy || s.n_waiting); i++) {
        int64_t p0 = s.preemptions;
        step(&s);
        o->steps++;
        if (s.preemptions > p0 && s.kv.n_parks_live)
            o->preempt_with_parks++;
        if (s.preemptions && !o->r[4].r.id) {
            /* The session's next call: the same 8 ids, then 2 more. */
            req(&o->r[4], 5, 41, 3, 1, ids, 10, 4);
            sched_submit(&s, &o->r[4].r, err);
        }
    }
    for (int i = 0; i < 5; i++)
        CHECKF(o->r[i].n_done == 1, "call %d done (status %d)", i, o->r[i].status);
    o->parks = s.kv.parks_made;
    o->adopted = s.kv.parks_adopted;
    o->materialised = s.kv.park_blocks_materialised;
    CHECK(s.kv.used_blocks == 0 && s.outstanding == 0, "all released");
    sched_free(&s);
}

static void test_parks(void)
{
    struct park_run a, b;
    park_script(false, &a);
    park_script(true, &b);
    bool same = a.steps == b.steps;
    for (int i = 0; i < 5; i++) {
        const struct rec *x = &a.r[i], *y = &b.r[i];
        same &= x->first_t == y->first_t && x->done_t == y->done_t &&
                x->n_chunks == y->n_chunks && x->status == y->status &&
                x->r.cached_tokens == y->r.cached_tokens &&
                x->r.preemptions == y->r.preemptions &&
                !memcmp(x->chunk_t, y->chunk_t, sizeof x->chunk_t) &&
                !memcmp(x->chunk_tok, y->chunk_tok, sizeof x->chunk_tok);
    }
    CHECKF(same, "parks on and off: the same %lld steps and records", (long long)a.steps);
    CHECKF(a.preempt_with_parks > 0, "a call was preempted while a park was live (%lld)",
           (long long)a.preempt_with_parks);
    CHECKF(a.parks >= 4 && a.materialised > 0,
           "parks made (%lld), blocks materialised (%lld), adopted (%lld)", (long long)a.parks,
           (long long)a.materialised, (long long)a.adopted);
    CHECK(b.parks == 0, "none with parks off");
    fprintf(stderr, "parks: %lld steps, %lld preemptions with a park live, %lld parks, %lld "
                    "adopted, %lld blocks materialised\n", (long long)a.steps,
            (long long)a.preempt_with_parks, (long long)a.parks, (long long)a.adopted,
            (long long)a.materialised);
}

/* The scheduler's table-driven acceptance draws against spec_sample(),
 * draw for draw, and every bucket of the table at both of its ends
 * against the thresholds, for several acceptance models. */
static void test_acc_table(void)
{
    static const struct {
        int draft;
        const char *acc;
        bool fast;
    } cases[] = {{7, "curve", true},           {3, "curve", true},
                 {16, "curve", true},          {4, "p:0.9,0.7,0.5", true},
                 {2, "p:1,0", true},           {5, "p:0.999999,0.000001", true},
                 {7, "fixed:3.5", false},      {0, "curve", false}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct sched s;
        setup(&s, 16, 64, 4, 64, false, 0, cases[c].draft, cases[c].acc);
        CHECKF(s.acc_fast == cases[c].fast, "%s draft %d: table %d", cases[c].acc,
               cases[c].draft, s.acc_fast);
        if (s.acc_fast) {
            const int shift = 53 - SCHED_ACC_BITS;
            int bad = 0, ambiguous = 0;
            for (uint64_t b = 0; b < (1u << SCHED_ACC_BITS); b++) {
                uint64_t lo = b << shift, hi = lo + ((1ULL << shift) - 1);
                int k_lo = 1, k_hi = 1;
                for (int j = 1; j <= SPEC.draft; j++) {
                    k_lo += lo >= SPEC.thr[j];
                    k_hi += hi >= SPEC.thr[j];
                }
                ambiguous += !s.acc_tab[b];
                if (s.acc_tab[b] ? s.acc_tab[b] != k_lo || k_lo != k_hi : k_lo == k_hi)
                    bad++;
            }
            CHECKF(bad == 0, "%s draft %d: %d buckets wrong", cases[c].acc, cases[c].draft, bad);
            CHECKF(ambiguous <= SPEC.draft, "%s: %d ambiguous buckets", cases[c].acc, ambiguous);
        }
        int diff = 0;
        for (uint64_t key = 1; key <= 2000; key++) {
            uint64_t sk = spec_key(&SPEC, key * 0x9e3779b97f4a7c15ULL);
            for (int64_t st = 0; st < 250; st++)
                diff += sched_acc_draw(&s, sk, st) != spec_sample(&SPEC, sk, st);
        }
        CHECKF(diff == 0, "%s draft %d: %d of 500000 draws differ", cases[c].acc, cases[c].draft,
               diff);
        CHECK(verify(&s) == 0, "verify with the table");
        sched_free(&s);
    }
}

int main(void)
{
    char err[ERR_LEN];
    struct model_preset m;
    struct gpu_preset g;
    if (preset_load_model("kimi-k3", &m, err) || preset_load_gpu("gb300", &g, err)) {
        fprintf(stderr, "presets: %s\n", err);
        return 1;
    }
    COST = cost_create(&m, &g, 16, ENGINE_BACKEND_AUTO, NULL, false, err);
    if (!COST) {
        fprintf(stderr, "cost: %s\n", err);
        return 1;
    }
    PRICER = pricer_create(COST);
    test_chunking();
    test_preemption();
    test_same_time_arrival();
    test_prefix();
    test_hybrid();
    test_spec();
    test_rollback_slots();
    test_parks();
    test_acc_table();
    pricer_destroy(PRICER);
    cost_destroy(COST);
    return test_report();
}
