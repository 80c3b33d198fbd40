/* replay_internal.h: what the replayer's modules share: the run's state
 * (struct replay), a call in flight and the call bookkeeping
 * (replay_call.c) that the traffic sources (lanes.c, lanes_legacy.c,
 * arrivals.c) use to send calls. Not for use outside replay/replay*.c,
 * lanes*.c, arrivals.c.
 *
 * The sources make calls and hear when each ends; the bookkeeping sends
 * them, keeps the in-flight list, writes their records and ends the run
 * when nothing is left (replay.c). A source never reaches the target or
 * the records itself.
 */
#ifndef REPLAY_INTERNAL_H
#define REPLAY_INTERNAL_H

#include "replay/replay.h"
#include "traces/base/list.h"

struct lanes;
struct lanes_legacy;
struct arrivals;
struct plan;

/* How a call ended, as its owner hears it. */
enum replay_end {
    REPLAY_END_OK = 0,
    REPLAY_END_ERROR,           /* any error but an overflow */
    REPLAY_END_OVERFLOW,        /* over the context limit (client or server) */
    REPLAY_END_CANCELLED,
};

/* The continuation of a call's owner (a session runner, a closed-loop
 * lane): called once when the call has ended and its record is written,
 * with the call's index within its session; the call is freed after it
 * returns. */
typedef void (*replay_call_end_fn)(void *owner, uint32_t call_index);

/* One call made from a trace call: the target's struct, its chunk times
 * and the block chain the target reads. Owned by the bookkeeping from
 * replay_call_new until its end. */
struct replay_call {
    struct target_call tc;
    struct replay *rp;
    const struct trace_call *trace_call; /* the call it replays */
    uint32_t call_index;        /* within its session */
    int64_t intended_ns;        /* when it was due (schedule) */
    int64_t first_ns;           /* first token, -1 none */
    int64_t out, chunks;        /* tokens and chunks received */
    int64_t *chunk_t;           /* chunk arrival times (ns), chunks of them */
    size_t chunk_cap;
    bool warmup;                /* recorded, not measured */
    uint8_t end;                /* enum replay_end, set before on_end */
    int64_t hit_blocks, total_blocks; /* theoretical prefix hit; -1: unknown */
    bool cancel_requested;
    bool in_target;             /* submitted, done not yet delivered */
    struct replay_chain *chain; /* its block chain (tc.blocks), shared */
    char session_name[112];     /* the record's session: "name@instance" */
    uint64_t session_uid;
    int lane_idx;               /* -1: none (open loop) */
    int64_t tree;               /* tree instance (sessions) or cycle */
    replay_call_end_fn on_end;  /* NULL: no owner (open loop) */
    void *owner;
    struct list_node node;      /* in replay.inflight or replay.cancelling */
};

/* The block chain of one trace call, as the target reads it (salted),
 * shared by every call of that trace call in flight: at 100,000 lanes
 * most calls in flight replay one of a few thousand trace calls, and a
 * copy each would be most of the run's memory. */
struct replay_chain {
    uint32_t refs;
    uint32_t n;
    bool salted;
    uint64_t salt;
    uint32_t slot;              /* index in replay.chains; UINT32_MAX: own */
    uint64_t ids[];
};

struct replay {
    struct replay_config cfg;
    const struct trace *tr;
    /* The chains in flight by trace call index (tr->n_calls slots, made
     * at the first call), NULL where none is. */
    struct replay_chain **chains;
    struct target *tg;
    struct loop *loop;
    struct lanes *lanes;        /* sessions mode, agentx rules, else NULL */
    struct lanes_legacy *legacy; /* sessions mode, legacy rules, else NULL */
    const struct plan *plan;    /* the agentx rules' plan (borrowed or own_plan) */
    struct plan *own_plan;
    struct arrivals *arrivals;  /* every other mode, else NULL */
    /* Calls in the target: not asked to cancel (newest first), and asked
     * to cancel with their done still to come. */
    struct list_node inflight, cancelling;
    int64_t n_inflight;         /* both lists */
    uint64_t next_call_id;
    uint64_t calls_sent;
    uint64_t measured_sent;     /* calls sent that are not warm-up */
    int64_t measure_start_ns;   /* the duration counts from here */
    int64_t stop_ns;            /* measure_start + duration; INT64_MAX before */
    bool requests_hit;          /* --requests reached */
    /* No progress: call ends in a row at one time of the clock. */
    int64_t same_end_ns;
    uint64_t same_ends;
    uint64_t failed_in_a_row;   /* calls ended in error since the last success */
    char aborted[ERR_LEN];      /* why the run was cut short, "" if not */
    bool started, stopping, finished, interrupted, destroying;
    struct loop_timer stop_timer, grace_timer, tick_timer;
    /* Outputs. */
    struct metrics metrics;
    struct records_writer *rec;
    FILE *timeline;
    struct target_stats last_stats; /* at the previous tick */
    void (*tick_cb)(void *, struct replay *, int64_t);
    void *tick_arg;
    int64_t end_ns;
    char io_error[ERR_LEN];
    int share_rank, share_ranks; /* replay_set_share: (0, 1) is the whole run */
};

/* A call of trace call c (index: within its session) for the target's
 * cache key, due at intended_ns; its chain's ids are salted with *salt
 * (hash_mix(id, *salt); NULL: as the trace has them). The caller sets the record's identity
 * (session_name, session_uid, lane_idx, tree), warmup and its owner, then
 * sends it. */
struct replay_call *replay_call_new(struct replay *rp, const struct trace_call *c, uint32_t index,
                                    uint64_t cache_key, int64_t intended_ns, const uint64_t *salt);
/* Frees the chain table (replay_destroy, after the last call). */
void replay_chains_free(struct replay *rp);
/* Sends k now, or records it at once as a context overflow or a submit
 * error (the owner hears of its end before this returns). */
void replay_call_send(struct replay *rp, struct replay_call *k);
/* Asks the target to cancel every call in flight, each once: O(1) a call. */
void replay_calls_cancel(struct replay *rp);
/* Run cut short (replay_destroy): cancels what the target holds; the
 * calls are freed without records. */
void replay_calls_drop(struct replay *rp);
/* The in-flight lists against their count; 0 or -1 with err set. */
int replay_calls_verify(const struct replay *rp, char *err);

/* Ends the run when nothing is left to send or to hear (replay.c). */
void replay_maybe_finish(struct replay *rp);
/* The measured phase begins now (after the warm-up): the duration and the
 * grace count from here (replay.c). */
void replay_measure_start(struct replay *rp);
/* The last call --requests allows was sent: the stop follows at once. */
void replay_requests_reached(struct replay *rp);
/* A new call may start now: not stopping, before the end of the duration
 * and under --requests. */
bool replay_can_send(const struct replay *rp);
/* Cuts the run short with a reason (a failed root warm-up, no progress):
 * nothing new starts, calls in flight are cancelled, the outcome carries
 * the reason and the run fails. */
void replay_abort(struct replay *rp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
