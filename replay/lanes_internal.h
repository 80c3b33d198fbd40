/* lanes_internal.h: what the agentx rules' two files share (lanes.c: a
 * call's life in a tree instance, branches, joins, gates, the idle cap;
 * lanes_start.c: the sampler's cursor, the warm start and its warm-up
 * phase, creation and accounting): the lanes, tree instances and their
 * streams. Not for use outside them. */
#ifndef LANES_INTERNAL_H
#define LANES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "replay/lanes.h"
#include "replay/replay_internal.h"
#include "replay/timerq.h"
#include "traces/base/err.h"
#include "traces/plan.h"

#define NO_TIME INT64_MIN
#define NO_TURN UINT32_MAX
/* Direct sends nested in one another before one is deferred to a timer
 * due now (a chain of calls that end at once must not grow the stack). */
#define MAX_DEPTH 16

enum sst {
    SS_IDLE = 0, /* not started, or its warm-up returned */
    SS_WAIT,     /* its next turn's delay (or warm-up / start offset) runs
                    in the shiftable queue */
    SS_OFFSET,   /* a child's first-turn offset runs on the loop */
    SS_HELD,     /* its next turn waits for its gates */
    SS_FLIGHT,   /* a call in flight */
    SS_JOIN,     /* suspended before a joining turn */
    SS_DONE,
};

enum phase { PH_NONE = 0, PH_WARMUP, PH_MEASURE, PH_STOPPED };

struct inst;

struct sstream {
    struct inst *in;
    struct loop_timer tm;
    struct replay_call *call;   /* in flight, or NULL */
    uint32_t stream;            /* plan index */
    uint32_t next;              /* next turn to send */
    uint32_t done_turns;        /* turns completed (gates) */
    uint32_t warm_turn;         /* its warm-up turn, NO_TURN: none */
    int64_t start_off;          /* measured start: offset of its first
                                   turn; -1: none */
    uint8_t st;                 /* enum sst */
    bool tm_q;                  /* tm is in the shiftable queue */
    bool child;                 /* a live descendant counted in its branch */
    bool warm;                  /* its call in flight is its warm-up */
};

struct bstate {
    uint32_t outstanding;       /* children registered and not done */
    bool dispatched;            /* spawned (or settled at t*) in this instance */
    bool registered;            /* gates on it count */
};

struct lane {
    struct lanes *ls;
    int idx;
    bool active;                /* its tree sent its first request */
    struct inst *in;            /* NULL: empty */
};

struct inst {
    struct lanes *ls;
    struct lane *lane;
    const struct plan_tree *pt;
    int64_t id;                 /* instance number (records' tree) */
    uint64_t key;               /* the target's session key */
    uint64_t marker;            /* cache-bust marker; 0: none */
    uint64_t shared_key;        /* the trace's shared prefix */
    uint32_t live_children;
    uint32_t n_flight, n_held;
    int busy;                   /* handlers running on it: not freed */
    bool root_done;             /* its root sent its terminal turn */
    struct bstate *bs;          /* pt->n_branches */
    struct sstream ss[];        /* pt->n_streams, the root first */
};

struct warm_req {
    struct sstream *s;
    int64_t lead_ns;
};

struct lanes {
    struct replay *rp;
    const struct plan *p;
    struct timerq q;            /* next-turn, warm-up and start timers */
    struct lane *lane;
    int n_lanes;
    int active;                 /* lanes active (lane.active) */
    int n_inst;
    bool starting;              /* inside lanes_start */
    uint32_t cursor;            /* next plan tree, file order, wrapping */
    uint32_t cursor_skip;       /* trees another rank takes first */
    enum phase phase;
    int depth;                  /* nested direct sends */
    int64_t idle_start;         /* NO_TIME: none */
    uint64_t warm_pending, warm_calls;
    uint64_t next_inst, recycled, overflowed, idle_jumps;
    uint64_t inst_step;         /* between a rank's numbers (replay_set_share) */
    uint64_t trees;             /* instances started here */
    int64_t idle_skipped;
    /* Per plan stream: the branch that spawns it (PLAN_NONE: a root) and
     * the rank of its id among its tree's streams (release order). */
    uint32_t *branch_of, *id_rank;
    /* The whole message list of each turn, contiguous per turn:
     * msgs[msg_from[t] .. msg_to[t]) (deltas from its last reset turn). */
    struct plan_msg *msgs;
    uint32_t *msg_from, *msg_to;
};

static inline const struct plan_stream *pstream(const struct sstream *s)
{
    return &s->in->ls->p->streams[s->stream];
}

static inline const struct plan_turn *pturn(const struct sstream *s, uint32_t k)
{
    return &s->in->ls->p->turns[pstream(s)->first_turn + k];
}

static inline struct sstream *stream_of(struct inst *in, uint32_t stream)
{
    ASSERT(stream >= in->pt->first_stream && stream < in->pt->first_stream + in->pt->n_streams);
    return &in->ss[stream - in->pt->first_stream];
}

static inline struct bstate *branch_state(struct inst *in, uint32_t b)
{
    ASSERT(b >= in->pt->first_branch && b < in->pt->first_branch + in->pt->n_branches);
    return &in->bs[b - in->pt->first_branch];
}

/* lanes.c */
/* The system idle cap after a return (after_return) or a batch of queue
 * timers, the phase's start (not). */
void lanes_idle_check(struct lanes *ls, bool after_return);
void lanes_after_timers(void *arg);
/* A new instance of plan tree `tree` on ln (every stream idle). */
struct inst *lanes_inst_new(struct lane *ln, uint32_t tree);
void lanes_inst_free(struct inst *in);
/* Handlers running on an instance keep it alive; the last release frees
 * a drained one (and recycles its lane). */
static inline void lanes_inst_hold(struct inst *in) { in->busy++; }
void lanes_inst_release(struct inst *in);
/* Sends turn k of s now (warm: its warm-up request). */
void lanes_send_turn(struct sstream *s, uint32_t k, bool warm);
/* s's next turn is due now: sent, held by its gates, or dropped. */
void lanes_stream_fire(struct sstream *s);
/* A queue timer of a stream: its next turn is due. */
void lanes_fire_cb(struct loop *l, struct loop_timer *tm);

/* lanes_start.c */
/* The next tree from the cursor, at turn 0, now, on ln. */
void lanes_fresh_tree(struct lane *ln);
/* The measured phase begins now. */
void lanes_measure_begin(struct lanes *ls);

#endif
