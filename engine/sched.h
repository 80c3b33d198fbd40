/* sched.h: one replica's scheduler with vLLM V1 semantics, its requests,
 * and the advance of its steps (one by one, or runs of identical decode
 * steps in closed form).
 *
 * A step is formed the way vLLM V1's scheduler forms it:
 *   - a token budget (max_num_batched_tokens) and a cap on running
 *     sequences (max_num_seqs);
 *   - running requests first, in admission order: a decoding request asks
 *     for 1 position (1 + draft under speculation), a request still in
 *     prefill for the rest of its prompt, both cut to the budget left
 *     (chunked prefill);
 *   - when KV blocks run out, the last running request is preempted by
 *     recompute (its blocks are released with their hashes, so the prefix
 *     cache can serve them again; it goes back to the front of the waiting
 *     queue with nothing computed);
 *   - waiting requests are admitted in order, each with its prefix-cache
 *     hit, only when no request was preempted in this step.
 * A request submitted exactly at a step boundary joins the step after
 * (unless nothing is running), whichever order the loop runs same-time
 * events in; that is what keeps the two advance modes identical.
 *
 * Prefix cache: every full block of a request's tokens gets a chained
 * hash. Blocks covered by the trace's block-id chain hash the (session-
 * salted) trace id and the position, so equal prefixes in one session
 * tree share blocks; other tokens (prompt beyond the chain, outputs) hash
 * a per-request salt, so only the same request (after a preemption) can
 * hit them. Hits are capped at (tokens - 1) rounded down to full blocks.
 *
 * Hybrid models (KDA layers): a hit must end where a recurrent-state
 * checkpoint was saved. Placement policy: a checkpoint at the last full
 * block of each request's prompt (where the session's next call resumes)
 * and at every `ckpt_interval` blocks along the prompt (where subagents
 * and retries branch), each costing its size in the same block pool
 * (kvcache.h); matched blocks beyond the last checkpoint are reused but
 * recomputed.
 *
 * Session handoff (handoff.h): when a request ends it stays as its
 * session's hint, the blocks of its hashed prefix that it held alone
 * parked as a unit (kvcache.h); the session's next call matches its
 * prefix through the hint and adopts the park whole. Neither changes a
 * result (sched_params.hint_budget and no_parks turn them off for
 * checking).
 *
 * Speculative decoding: a decoding request computes draft + 1 positions
 * per step (KV slots for all of them: the lookahead), emits 1 + accepted
 * tokens (spec.h) never beyond max_tokens, and rejected positions roll
 * back (their slots are freed; the cost model prices the KDA state
 * restore from the batch's draft length).
 *
 * Closed form: when the formed step is decode only and nothing can change
 * the batch (no waiting request admissible, no completion, blocks enough
 * for every step), the scheduler plans the run of steps up to the first
 * completion, prices each, and takes one event for the whole run; a submit
 * or cancel cuts the run at the next step boundary. Outputs of each step
 * are applied in order, as stepping one by one would, so both modes give
 * identical results.
 */
#ifndef SCHED_H
#define SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/handoff.h"
#include "engine/kvcache.h"
#include "engine/pricer.h"
#include "engine/spec.h"
#include "traces/base/list.h"

struct sched_params {
    int block_size;                 /* engine block, tokens */
    int64_t max_num_batched_tokens; /* token budget per step */
    int max_num_seqs;
    int64_t max_model_len;          /* tokens */
    bool prefix_caching;
    bool hybrid;                    /* recurrent-state checkpoints needed */
    int64_t ckpt_interval;          /* blocks between prompt checkpoints */
    int64_t ckpt_units;             /* pool units per checkpoint */
    int64_t kv_units;               /* pool size, blocks */
    bool stepwise;                  /* no closed-form runs */
    const struct spec_model *spec;  /* draft 0: no speculation */
    int64_t hint_budget;            /* bytes of session hints (0: none) */
    bool no_parks;                  /* release blocks one by one (for checking) */
};

enum sreq_state { SREQ_WAITING = 0, SREQ_RUNNING, SREQ_DONE };

struct sreq {
    struct target_call *c;   /* the call it serves (NULL once it is a hint) */
    int64_t arrival_ns;
    int64_t output_done;     /* tokens emitted */
    int64_t num_tokens;      /* prompt + output_done */
    int64_t num_computed;    /* tokens whose KV is computed */
    int64_t spec_steps;      /* verification steps so far (draw counter) */
    uint64_t key;            /* acceptance draws */
    uint64_t salt;           /* hashes of blocks outside the trace chain */
    uint64_t chain_seed;     /* session salt for chain hashes */
    uint32_t *blk;           /* blocks held, in token order */
    uint32_t n_blk, cap_blk;
    uint64_t *hash;          /* hashes of full blocks [0, n_hash) */
    uint32_t n_hash, cap_hash;
    uint32_t n_committed;    /* blocks [0, n_committed) registered */
    uint32_t chain_ratio;    /* engine blocks per trace block */
    int64_t n_chain;         /* full engine blocks covered by the chain */
    int64_t prompt_full;     /* full blocks of the original prompt */
    enum sreq_state state;
    bool cancelled, first_sent, prefilling;
    int fail;                /* target_status to end with at the next boundary */
    int64_t cancel_ns;       /* when cancelled: emissions after it are not delivered */
    /* This step. */
    int64_t step_new;        /* tokens computed this step */
    bool step_decode;        /* a decode (verification) step */
    int64_t step_start;      /* num_computed at the step's start */
    struct list_node wait;   /* in sched.waiting while waiting */
    struct handoff ho;       /* its session's prefix: match, park, hint */
};

/* Bits of a 53-bit acceptance draw that index struct sched's acc_tab
 * (1 KiB: with 7 thresholds, at most 7 of 1,024 buckets need the
 * comparisons; small enough to stay cached with many replicas). */
#define SCHED_ACC_BITS 10

/* Called after each step is applied (stepwise: after every step). */
typedef void (*sched_step_fn)(void *arg, int replica, int64_t start_ns, int64_t end_ns,
                              const struct cost_batch *b, bool fallback);

struct sched {
    int index;               /* replica index */
    struct sched_params p;
    struct kvcache kv;
    struct pricer *pricer;
    struct loop *loop;
    /* Requests. */
    struct sreq **running;   /* admission order */
    int n_running, cap_running;
    struct list_node waiting; /* waiting queue (struct sreq.wait), in order */
    int64_t n_waiting;
    int64_t outstanding;     /* submitted, not done (router load) */
    int64_t cancel_pending;  /* requests marked cancelled since the last reap */
    /* The step (or run of steps) in flight. */
    bool busy;               /* a step is in flight */
    struct sreq **batch;     /* the step's requests, in schedule order */
    int n_batch, cap_batch;
    struct cost_batch cb;    /* the first step's composition */
    bool step_fallback;
    int64_t step_start_ns, step_end_ns;
    /* Closed-form run: K steps; end times, draws (K x n_batch). */
    int run_k;
    int64_t *run_end;
    uint8_t *run_emit;
    bool *run_fb;
    int64_t run_cap, run_emit_cap;
    /* Block arithmetic: log2(block_size) when it is a power of two, else
     * -1 (divisions then). */
    int bs_shift;
    /* Acceptance draws (spec.h's curve fast path) by a table on the draw's
     * top SCHED_ACC_BITS bits: acc_tab[b] is the emitted count of every
     * draw in bucket b, or 0 where a threshold falls inside the bucket
     * (those draws compare with the thresholds). acc_fast: the table is
     * in use (spec_sample's fast path applies). Same counts as
     * spec_sample, draw for draw. */
    bool acc_fast;
    uint8_t acc_tab[1 << SCHED_ACC_BITS];
    /* Statistics. */
    int64_t steps, fallback_steps, preemptions, runs, run_steps;
    int64_t prompt_tokens, cached_tokens, output_tokens, busy_ns;
    int64_t finished;
    sched_step_fn on_step;
    void *on_step_arg;
    struct handoff_hints hints; /* each session's last finished request */
};

/* The request at the head of the waiting queue, or NULL. */
static inline struct sreq *sched_waiting_head(const struct sched *s)
{
    struct list_node *n = list_first(&s->waiting);
    return n ? LIST_ENTRY(n, struct sreq, wait) : NULL;
}

void sched_init(struct sched *s, int index, const struct sched_params *p,
                struct pricer *pricer, struct loop *l);
void sched_free(struct sched *s);

/* Adds a request (arrival = now). err for invalid input. */
int sched_submit(struct sched *s, struct target_call *c, char *err);
/* Marks a request cancelled; its done comes at the next boundary. */
void sched_cancel(struct sched *s, struct target_call *c);
/* Cuts a closed-form run at the first step boundary after now. Returns
 * the (possibly new) time of the replica's next boundary. */
int64_t sched_cut(struct sched *s, int64_t now);

/* Processes the boundary at now: applies the step (or run) that ended,
 * delivers callbacks, forms the next step. Returns the time of the next
 * boundary, or INT64_MAX when idle. */
int64_t sched_boundary(struct sched *s, int64_t now);

/* Tokens emitted by verification step `step` of the request with draw
 * key `skey`, as the scheduler draws them (its acceptance table; equal to
 * spec_sample()). For tests. */
int sched_acc_draw(const struct sched *s, uint64_t skey, int64_t step);

/* Checks the scheduler's invariants and its KV cache. 0 or -1 with err. */
int sched_verify(const struct sched *s, char *err);

/* For handoff.c: computes the hashes of q's full blocks [n_hash, upto);
 * frees a request (running, waiting or a hint). */
void sreq_hashes(struct sreq *q, uint32_t upto);
void sreq_free(struct sreq *q);

#endif
