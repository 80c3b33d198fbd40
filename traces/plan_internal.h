/* plan_internal.h: what the replay-plan modules share (plan_build.c,
 * plan_chains.c, plan_msgs.c, plan_gates.c, plan_snapshot.c, plan_json.c):
 * the request view the builder works on, chain detection, the prompt
 * message planner and small helpers. Not for use outside traces/.
 */
#ifndef PLAN_INTERNAL_H
#define PLAN_INTERNAL_H

#include <math.h>

#include "traces/plan.h"
#include "traces/base/hmap.h"

/* AIPerf's epsilon for "at or after" comparisons of recorded times
 * (weka_trace.py _JOIN_EPSILON_SECONDS, weka_agent_chains.py _EPSILON_SECONDS). */
#define PLAN_EPS_S 1e-6

/* One recorded request as chain detection and the builder see it. */
struct pb_req {
    uint32_t call;          /* index into trace.calls */
    uint32_t key;           /* its position in its request list (the outer
                               index of a root call, the inner one of a
                               subagent's): ties in time go to the lower */
    double t;               /* start on the root's clock (s), AIPerf's t */
    double api;             /* recorded api_time (s), NAN if none */
    double end;             /* t + max(api, 0) (api missing: 0) */
    uint32_t model;         /* trace string index, TRACE_NONE if none */
    const uint64_t *h;      /* its block ids (nh of them) */
    uint32_t nh;
    int64_t in, out;        /* recorded tokens */
};

/* ---- chain detection (plan_chains.c; weka_agent_chains.py) ------------ */

struct pc_chain {
    uint32_t *reqs, n, cap; /* request indices, in chain order */
    bool fork;              /* has a fork record (every chain but chain 0) */
    uint32_t parent;        /* fork parent chain, PLAN_NONE: none */
    uint32_t fork_req;      /* request it forked from, PLAN_NONE: none */
    uint32_t depth;         /* blocks shared at the fork */
    double fork_time;       /* t of its first request */
    uint32_t spliced;       /* chain it was spliced into, PLAN_NONE: live */
};

struct pc_result {
    struct pc_chain *chains;
    uint32_t n_chains;
    uint32_t main;          /* the main chain */
    uint32_t *workers, n_workers; /* live chains but main, by first (t, key) */
};

/* Detects the agent chains of r[0 .. n) (given in key order, n >= 1);
 * fills res (pc_free frees it). */
void pc_detect(const struct pb_req *r, uint32_t n, const struct plan_opts *o,
               struct pc_result *res);
void pc_free(struct pc_result *res);
/* The index (into r, key order) of the leading throwaway request that is
 * set aside before detection, or PLAN_NONE (weka_trace.py:654-700). */
uint32_t pc_preamble(const struct pb_req *r, uint32_t n);

enum pc_kind { PC_FA = 0, PC_AUX, PC_WG };
struct pc_class {
    uint8_t kind;           /* enum pc_kind */
    uint32_t group, member; /* PC_WG: its coordinate */
};
/* Classifies each worker of res (out[n_workers]) against the main chain
 * (its requests main_reqs[0 .. n_main), the detected main without a
 * preamble). */
void pc_classify(const struct pc_result *res, const struct pb_req *r, const uint32_t *main_reqs,
                 uint32_t n_main, const struct plan_opts *o, struct pc_class *out);

/* Order by time, ties by key (AIPerf's (t, index) sort keys). */
static inline int pc_cmp_time_key(double ta, uint32_t ka, double tb, uint32_t kb)
{
    if (ta != tb)
        return ta < tb ? -1 : 1;
    return ka < kb ? -1 : ka > kb;
}

/* (t, key) order of two requests. */
static inline int pc_cmp_tk(const struct pb_req *a, const struct pb_req *b)
{
    return pc_cmp_time_key(a->t, a->key, b->t, b->key);
}

/* Longest common prefix of two block-id lists. */
static inline uint32_t pc_lcp(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb)
{
    uint32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* ---- prompt messages (plan_msgs.c; weka_synth_buf.py) ----------------- */

/* One turn's request for the message planner. */
struct pm_turn {
    const uint64_t *h;
    uint32_t nh;
    int64_t in, out;
};
/* Plans the message deltas of one stream's turns: appends each turn's
 * messages to *msgs (growing it; *n_msgs, *cap_msgs) and sets, per turn k,
 * first[k], count[k] and reset[k]. The turn-0 system segment takes the
 * declared tool + system tokens. corpus > 0: synthetic tails longer than
 * the prompt corpus (AIPerf's tokenized corpus) are cut to it. 0, or -1
 * with err (a declared prefix longer than turn 0's block ids: AIPerf
 * refuses the trace). */
int pm_plan(const struct pm_turn *turns, uint32_t n, int64_t bs, int64_t tool, int64_t system,
            int64_t corpus, struct plan_msg **msgs, uint32_t *n_msgs, uint32_t *cap_msgs,
            uint32_t *first, uint32_t *count, bool *reset, uint32_t *sys_blocks, char *err);

/* ---- gates (plan_gates.c; replay_dependencies.py) --------------------- */

/* Fills the happens-before lists of tree's turns (appended to p->refs,
 * whose capacity is *cap_refs), scope by scope. */
void pg_gates(struct plan *p, uint32_t tree, uint32_t *cap_refs);

/* ---- the builder (plan_build.c, plan_emit.c) -------------------------- */

/* A stream before it is emitted. */
struct bstream {
    uint8_t kind;
    uint32_t parent;        /* bstream index; PLAN_NONE for the root */
    uint32_t session;
    uint32_t chain;         /* plan_stream.chain */
    uint32_t entry_pos;     /* a subagent stream: its entry's position */
    char *id, *scope;       /* malloc'ed until emitted */
    uint32_t *reqs, n;      /* tree request indices, in turn order */
    int64_t tool, system;   /* turn 0's declared prefix */
};

/* A spawn group under construction: the children of one parent turn that
 * share the turn that joins them. */
struct bgroup {
    uint32_t parent;        /* bstream of the spawning stream */
    uint32_t spawn, join;   /* its turn indices; join PLAN_NONE: background */
    bool flat;
    uint32_t name_entry;    /* subagent: the first entry's session; flat: chain */
    double start_s;         /* min spawn time (s) of the members */
    uint32_t *kids, n_kids; /* bstream indices, dispatch order */
};

struct pb {
    const struct trace *t;
    const struct plan_opts *o;
    struct plan *p;
    char *err;
    /* capacities of the plan's arrays */
    uint32_t cap_trees, cap_streams, cap_turns, cap_branches, cap_refs, cap_branch_refs,
        cap_children, cap_msgs, cap_strings;
    /* the current tree */
    struct pb_req *r;       /* every call of the tree */
    uint32_t nr;
    uint32_t *req_of_session; /* per trace session: its first tree request */
    uint64_t *ids;          /* the requests' block ids */
    struct bstream *bs;
    uint32_t nbs, capbs;
    struct bgroup *g;
    uint32_t ng, capg;
    const char *trace_id;
    uint32_t *dropped, n_dropped, cap_dropped; /* sessions not replayed */
    struct hmap trace_ids;  /* hash of every tree's id seen so far */
};

#define GROW(arr, n, cap)                                                  \
    do {                                                                   \
        if ((n) >= (cap)) {                                                \
            (cap) = (cap) ? 2 * (cap) : 16;                                \
            (arr) = xrealloc((arr), (size_t)(cap) * sizeof *(arr));        \
        }                                                                  \
    } while (0)

/* A malloc'ed formatted string. */
char *pb_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A subagent session's agent id ("subagent_POS" when it has none). */
const char *pb_agent_name(const struct trace *t, uint32_t s, char *buf, size_t n);
/* Emits the planned tree of root (b->bs, b->g) into the plan. 0, or -1
 * with b->err. */
int pb_emit_tree(struct pb *b, uint32_t root, uint32_t *n_scopes);

/* ---- helpers ---------------------------------------------------------- */

/* Python's max(0.0, x) then floor(x + 0.5): the plan's integer ms. */
static inline int64_t plan_round_ms(double x) { return (int64_t)floor(x + 0.5); }

/* Rounds ms to integer ns (the runtime's unit). */
static inline int64_t plan_ms_to_ns(double ms) { return (int64_t)llround(ms * 1e6); }

/* Child k of branch b: the wait from its dispatch moment to its first
 * turn (ms; branch_orchestrator.py:1277-1289). */
double plan_child_offset_ms(const struct plan *p, uint32_t b, uint32_t k);

#endif
