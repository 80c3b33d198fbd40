/* engine.h: the simulated serving engine; it speaks the request protocol of
 * engine/target.h.
 *
 * A cluster of G GPUs split into G/T replicas of tensor-parallel size T,
 * with a router in front; each replica has a vLLM V1-style scheduler, a
 * paged KV cache with prefix reuse, speculative decoding and a cost model
 * that prices every step from the batch's composition (engine/cost.h).
 *
 * The engine schedules its steps on a struct loop (engine/clock/loop.h):
 * on the virtual clock it runs far faster than real time and is
 * deterministic; on the real clock (serve) it steps on real timers.
 *
 * Calls: engine_submit() takes a struct target_call as target.h describes
 * it (the caller's part filled; the call and its block chain stay valid
 * until `done`) and answers through c->cb with target.h's statuses; its
 * own per-call state hangs on c->priv until `done`. At submit it sets
 * c->replica (where the call was routed), cached_tokens and preemptions
 * (0, then counted as the call runs), http_status 0, the server usage
 * fields -1 and error ""; a call that ends with a status other than
 * TARGET_OK gets the status's name in c->error. The first_token and
 * chunk callbacks may be NULL (tests that only want `done`).
 *
 * Callbacks carry their own time. `done` is always delivered when
 * loop_now() equals its time, so the caller may schedule follow-up work
 * from it. first_token and chunk callbacks may be delivered in a batch up
 * to the time of the next `done` or external event (when the engine
 * advances a run of identical decode steps in closed form); their times
 * are exact, and never later than the loop's current time. With
 * `stepwise` set in the config every step is a separate event.
 *
 * Timing rules (identical in both advance modes): a call submitted at
 * time t joins the first step that starts after t, or the step starting
 * at t when its replica is idle; a cancelled call gets the chunks emitted
 * up to the cancel time, then done(TARGET_ERR_CANCELLED) at the end of
 * the step in flight. Calls that are too long for max_model_len or can
 * never fit in the KV cache end with done(TARGET_ERR_TOO_LONG /
 * TARGET_ERR_NO_SPACE) at their replica's next boundary; engine_submit()
 * returns -1 only for malformed calls (no tokens, no callbacks, an engine
 * block size that does not divide the trace's block size). Acceptance
 * draws depend on (seed, call id, session_key, step), so callers should
 * give distinct calls distinct ids. Work a caller starts from a
 * first_token or chunk callback happens at loop_now(), which under
 * closed-form advance can be later than the callback's time; start
 * follow-up work from `done` (or a timer) to get the same run in both
 * modes.
 */
#ifndef ENGINE_H
#define ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/clock/loop.h"
#include "engine/target.h"
#include "traces/base/flags.h"

struct engine;

enum engine_backend {
    ENGINE_BACKEND_AUTO = 0,            /* the standard decode path */
    ENGINE_BACKEND_LATENCY_SPECIALIZED, /* the fused path, where it applies */
};

enum engine_router {
    ENGINE_ROUTER_AFFINITY = 0, /* a session's calls go where its prefix is */
    ENGINE_ROUTER_ROUND_ROBIN,
    ENGINE_ROUTER_LEAST_LOADED,
};

/* Everything that defines a deployment; engine_config_defaults() fills the
 * default (Kimi K3, 16 x GB300, TP16, auto, DSpark draft 7). */
struct engine_config {
    char model[64];            /* preset name or path to a preset file */
    char gpu[64];              /* preset name or path */
    int gpus;                  /* the whole deployment's GPU count */
    int tp;                    /* tensor-parallel size; replicas = gpus / tp */
    enum engine_backend backend;
    enum engine_router router;
    int block_size;            /* engine KV block size in tokens */
    int64_t max_num_batched_tokens;
    int max_num_seqs;
    int64_t max_model_len;     /* 0: the model's maximum */
    bool prefix_caching;
    double gpu_memory_utilization;
    /* Speculative decoding. */
    bool spec;                 /* DSpark on */
    int draft;                 /* draft tokens per step */
    char acceptance[128];      /* "curve" (default fitted), "fixed:A", or
                                  "p:0.9,0.8,..." per-position */
    char calibration[512];     /* measured kernel times file, "" if none */
    bool force_calibration;    /* accept a file for another GPU kind */
    bool stepwise;             /* one event per step (for checking) */
    uint64_t seed;
    char presets_dir[512];     /* where presets live ("" = built-in search) */
    int64_t hint_bytes;        /* memory for per-session prefix hints, which
                                  only speed lookups up (0: default 64 MB
                                  over the deployment; -1: none) */
    bool no_parks;             /* release KV blocks one by one instead of
                                  parking a session's prefix (for checking:
                                  results are the same) */
};

void engine_config_defaults(struct engine_config *c);
/* The engine flags every command shares, as a table into struct
 * engine_config (traces/base/flags.h), and the --backend names. */
extern const struct flag engine_flags[];
extern const struct flag_choice engine_backend_choices[];

/* Validates the layout and memory; on failure a message with the numbers. */
struct engine *engine_create(const struct engine_config *c, struct loop *l,
                             char *err);
void engine_destroy(struct engine *e);

/* Submits call c at loop_now() (see the top of this file). Returns 0, or
 * -1 with err set for a call that is invalid as given (then no callback
 * follows; the caller records it as an error). */
int engine_submit(struct engine *e, struct target_call *c, char *err);
/* Cancels a call in flight; its done arrives with TARGET_ERR_CANCELLED.
 * A call that is not in flight (c->priv NULL) is left alone. */
void engine_cancel(struct engine *e, struct target_call *c);

/* Aggregate state, for timelines and the /metrics endpoint (target.h's
 * struct; every field known). Counters are exact at any time in both
 * advance modes; kv_used_frac is the state at each replica's last step
 * boundary (a closed-form run allocates its blocks when it is applied). */
void engine_get_stats(const struct engine *e, struct target_stats *s);
/* A description for run.json: layout, presets and their sources, derived
 * capacities. Returns a new json_t* (caller owns), typed void* here to
 * keep Jansson out of this header. */
void *engine_describe_json(const struct engine *e);
int engine_replicas(const struct engine *e);

/* ---- checking, per-replica statistics, step trace ---- */

/* Called after every replica step boundary is processed (after each step
 * with `stepwise`; after each closed-form run otherwise). Tests run
 * engine_verify() from it. */
typedef void (*engine_step_hook_fn)(struct engine *e, int replica, void *arg);
void engine_set_step_hook(struct engine *e, engine_step_hook_fn fn, void *arg);
/* Walks every replica's scheduler and KV cache (sched_verify, kv_verify)
 * and the engine's event order. 0, or -1 with err. */
int engine_verify(const struct engine *e, char *err);

struct engine_replica_stats {
    int64_t running, waiting;
    int64_t kv_blocks, kv_blocks_used;  /* pool, and in use (checkpoints included) */
    int64_t kv_blocks_cached;           /* free but reusable */
    int64_t checkpoints, evictions;
    int64_t steps, closed_form_runs, closed_form_steps;
    /* Parks (kvcache.h): made, adopted whole, live now, blocks given
     * their own state, queue compactions and regrowths. */
    int64_t parks_made, parks_adopted, parks_live, park_blocks_materialised;
    int64_t queue_compactions, queue_regrowths;
};
void engine_get_replica_stats(const struct engine *e, int replica,
                              struct engine_replica_stats *st);

/* Chrome trace (chrome://tracing, Perfetto): every step as a complete
 * event per replica (pid = replica), and the kernels of the step with
 * global index kernel_step (0-based, in order of completion; -1: none)
 * laid out layer by layer from cost_breakdown(). Close before reading. */
int engine_trace_open(struct engine *e, const char *path, int64_t kernel_step, char *err);
/* 0, or -1 when a write failed (errno says why: a full disk). */
int engine_trace_close(struct engine *e);

const char *engine_backend_name(enum engine_backend b);
const char *engine_router_name(enum engine_router r);

#endif
