/* target.h: the request protocol between the replayer and what it drives.
 * A target takes calls (a prompt described by its token count and block
 * chain, and an exact output length) and reports back, through callbacks,
 * the first token, every chunk of tokens and the end. Implementations:
 *   - the simulated engine, in process (engine/engine.h, which speaks this
 *     protocol itself; engine.c wraps it as a target);
 *   - a fixed-rate fake whose timelines are known exactly (engine/fake.c;
 *     tests and dry runs);
 *   - a live OpenAI-compatible HTTP endpoint (replay/http_target.c, the
 *     load generator's).
 * The replayer does not know which one it drives.
 *
 * Protocol:
 *   - the caller fills the "caller" part of a struct target_call, sets
 *     start_ns to loop_now() and calls target_submit(); the call must stay
 *     valid (with its block chain) until `done`;
 *   - the target calls cb->first_token once (time of the first non-empty
 *     chunk), cb->chunk for every chunk (the first one included; several
 *     tokens at once under speculative decoding), then cb->done once, with
 *     a status; after done the target no longer touches the call;
 *   - callback times are exact and never later than loop_now() when they
 *     are delivered; done is delivered at loop_now() == its time, so the
 *     caller may schedule follow-up work from it;
 *   - a target may set start_ns later than the caller did (a live target
 *     that sends after the intended time); the caller keeps its own
 *     intended start;
 *   - target_submit() returns 0, or -1 with err set when the call is
 *     invalid as given (then no callback follows and the caller records an
 *     error itself);
 *   - target_cancel() on a call in flight: its done arrives (possibly at
 *     once, from inside target_cancel) with TARGET_ERR_CANCELLED.
 */
#ifndef TARGET_H
#define TARGET_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/clock/loop.h"

struct target;
struct target_call;
struct plan_msg; /* traces/plan.h */

enum target_status {
    TARGET_OK = 0,
    TARGET_ERR_TOO_LONG = 1,  /* prompt + max_tokens over the context limit */
    TARGET_ERR_CANCELLED = 2, /* target_cancel() */
    TARGET_ERR_NO_SPACE = 3,  /* can never fit in the KV cache */
    TARGET_ERR_HTTP = 4,      /* non-2xx status or a broken stream */
    TARGET_ERR_TIMEOUT = 5,   /* the target's own request timeout */
    TARGET_ERR_OTHER = 6,     /* anything else; see call->error */
};

struct target_cb {
    void (*first_token)(struct target_call *c, int64_t t_ns);
    void (*chunk)(struct target_call *c, int64_t t_ns, int64_t tokens);
    void (*done)(struct target_call *c, int64_t t_ns, enum target_status st);
};

struct target_call {
    /* Filled by the caller. */
    uint64_t id;               /* the caller's id (unique in a run) */
    uint64_t session_key;      /* session tree: cache isolation and affinity
                                  (hashes are salted with it); the live
                                  target puts a marker derived from it at
                                  the start of the prompt */
    int64_t prompt_tokens;     /* whole prompt, cached part included */
    int64_t max_tokens;        /* exactly this many are asked for */
    bool ignore_eos;           /* ask the server to ignore end-of-sequence
                                  (AgentX: on), so max_tokens are produced */
    const uint64_t *blocks;    /* trace block ids of the prompt */
    uint32_t n_blocks;
    int64_t trace_block_size;  /* tokens per trace block */
    const char *model;         /* recorded model name: informational only,
                                  the deployment serves one model; may be
                                  NULL */
    /* Prefix sharing between tree instances (AgentX's cache-bust marker
     * follows the system message): the first shared_blocks blocks of the
     * chain are hashed under shared_key, the same for every instance of a
     * trace; the rest under session_key. 0: all under session_key. */
    uint64_t shared_key;
    uint32_t shared_blocks;
    /* Chat structure for live targets (NULL: the prompt is one user
     * message with the session marker at token 0): the prompt's messages
     * in order, each a role and its share of the prompt's tokens (the
     * chain's blocks, then the synthetic tail), summing to prompt_tokens
     * minus the marker; marker != 0: one extra token made from it at the
     * start of the first user message. */
    const struct plan_msg *msgs;
    uint32_t n_msgs;
    uint64_t marker;
    const struct target_cb *cb;
    void *arg;                 /* the caller's pointer */
    int64_t start_ns;          /* set by the caller to loop_now() before
                                  submit; a live target may move it to the
                                  actual send time */
    /* Filled by the target (before or at done). */
    int replica;               /* replica that served it, -1 if unknown */
    int64_t cached_tokens;     /* prompt tokens served from a prefix cache,
                                  -1 if unknown */
    int64_t preemptions;       /* times it was preempted */
    int http_status;           /* live target only, 0 otherwise */
    int64_t server_prompt_tokens; /* usage reported by a server, -1 if none */
    int64_t server_output_tokens; /* likewise */
    char error[128];           /* message for a non-OK done, "" otherwise */
    void *priv;                /* the target's own per-call state */
};

/* Aggregate state for timelines and /metrics (cumulative counters since
 * creation). The engine fills every field; other targets leave what they
 * cannot know at -1 (gauges) or 0 (engine-only counters). */
struct target_stats {
    int64_t running, waiting;       /* requests now (-1: unknown) */
    double kv_used_frac;            /* KV blocks in use / total, 0..1
                                       (-1: unknown) */
    int64_t prompt_tokens;          /* cumulative, whole prompts (counted
                                       with cached_tokens at a call's first
                                       admission) */
    int64_t cached_tokens;          /* cumulative */
    int64_t output_tokens;          /* cumulative */
    int64_t preemptions;            /* cumulative */
    int64_t steps;                  /* cumulative (engine only) */
    int64_t fallback_steps;         /* cumulative: steps the specialized
                                       path handed to the standard one
                                       (engine only) */
    int64_t busy_ns;                /* cumulative time replicas spent in
                                       steps, summed over replicas (engine
                                       only) */
};

struct target_ops {
    int (*submit)(struct target *t, struct target_call *c, char *err);
    void (*cancel)(struct target *t, struct target_call *c);
    void (*stats)(struct target *t, struct target_stats *s);
    /* A json_t* (typed void* to keep Jansson out) describing the target
     * for run.json's "engine" key; caller owns; may be NULL. */
    void *(*describe_json)(struct target *t);
    void (*destroy)(struct target *t);
};

/* The common head of every target; implementations embed it first. */
struct target {
    const struct target_ops *ops;
    struct loop *loop;         /* the loop it delivers callbacks on */
    int gpus;                  /* GPUs of the whole deployment (0 unknown) */
    bool live;                 /* a live endpoint: records carry
                                  http_status and the server's usage */
};

static inline int target_submit(struct target *t, struct target_call *c, char *err)
{
    return t->ops->submit(t, c, err);
}
static inline void target_cancel(struct target *t, struct target_call *c)
{
    t->ops->cancel(t, c);
}
static inline void target_stats(struct target *t, struct target_stats *s)
{
    t->ops->stats(t, s);
}
static inline void target_destroy(struct target *t)
{
    if (t)
        t->ops->destroy(t);
}
const char *target_status_name(enum target_status st);

/* The simulated engine as a target (engine.c). The engine is created from
 * the config on loop l; target_destroy() destroys it. NULL with err set
 * when the engine refuses the config. target_engine_get() gives the
 * engine behind such a target (NULL for any other target). */
struct engine_config;
struct engine;
struct target *target_engine_create(const struct engine_config *cfg,
                                    struct loop *l, char *err);
struct engine *target_engine_get(struct target *t);

/* A fixed-rate fake (fake.c): a call submitted at s gets its first
 * token at s + overhead_ns + uncached_prompt * prefill_ns_per_token and
 * then `chunk_tokens` tokens every chunk_tokens * tpot_ns (the last chunk
 * may be shorter); no queueing (every call runs at once). Its prefix cache
 * is per session_key: the longest run of leading blocks seen before under
 * the same key is cached (capped at prompt - 1 tokens). Calls with
 * prompt + max_tokens > max_model_len (when > 0) finish at once with
 * TARGET_ERR_TOO_LONG. */
struct target_fake_config {
    int64_t overhead_ns;           /* before the first token */
    int64_t prefill_ns_per_token;  /* per uncached prompt token */
    int64_t tpot_ns;               /* per output token after the first */
    int64_t chunk_tokens;          /* tokens per chunk (>= 1) */
    int64_t max_model_len;         /* 0: no limit */
    int gpus;                      /* reported deployment size */
    bool cache;                    /* prefix cache on */
};
struct target *target_fake_create(const struct target_fake_config *cfg,
                                  struct loop *l);

#endif
