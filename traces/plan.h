/* plan.h: the replay plan of a trace: what AgentX replay executes, built as
 * AIPerf 0.13.0's inferencex-agentx-mvp scenario builds it from Weka traces
 * (aiperf/dataset/loader/weka_trace.py, weka_agent_chains.py,
 * aiperf/timing/replay_dependencies.py, branch_orchestrator.py,
 * trajectory_source.py; tests/conformance/ compares the two plans).
 *
 * Per trace (a tree: one root session and everything it spawns):
 *   streams   the root, each subagent's chains (its main chain and worker
 *             chains) and the root's flat chains (calls of several agents
 *             recorded in one request list, split by longest-common-prefix
 *             chain detection over the block ids);
 *   turns     each stream's calls in replay order, each with the recorded
 *             end-to-start delay after the previous turn of its stream
 *             returns (never capped), its output length, its theoretical
 *             prefix hit, and the message roles of its prompt;
 *   branches  a parent turn that spawns children (subagent streams, flat
 *             streams) when it is sent or when it returns, each child after
 *             its recorded offset; the parent turn that joins them (waits
 *             until every child is done) or none (background);
 *   gates     happens-before edges between streams of one scope: a turn is
 *             sent only once the listed turns of other streams completed.
 * Every index is into the plan's own arrays; `call` indexes trace.calls.
 * The plan borrows the trace (it must outlive the plan); everything else
 * belongs to the plan (its arrays, and its strings in its arena), freed by
 * plan_destroy.
 *
 * Times: each time comes twice, as the double AIPerf computes in ms (the
 * `_ms` fields, which decide every comparison and the JSON) and rounded to
 * integer ns for the replayer (the `_ns` fields: llround(ms * 1e6)).
 *
 * The replayer (replay/lanes.c) executes a plan; `agentreplay trace plan
 * --json` prints it in the canonical form of the schema in
 * tests/conformance/README.md.
 *
 * How a replayer uses it: plan_build once per trace (plan_verify in
 * tests), then per lane: the next tree from one cursor over plan.trees
 * (file order; skip trees with n_turns 0); t* = plan_t_star_ms(p, tree, u)
 * with u drawn in the ratio range; plan_snapshot_ms(p, tree, t*, states,
 * n_streams, boundary) gives the streams live at t* (0: nothing live, take
 * the next tree) and the turns the gates count as done. Warm-up: each
 * state with warm_turn != PLAN_NONE sends that turn (max_tokens 1) at
 * max(lead) - lead. Measurement: each state not waiting sends next_turn
 * after offset; a waiting root sends its join turn when the branches it
 * joins are done. After a turn returns: start its spawn branches (at
 * issue: when it was sent), each child after child_offset; send the next
 * turn after delay, unless it joins branches with children still running
 * (then at once when they are done), and only once its `after` turns have
 * completed. A recycled tree starts at turn 0 of its root with nothing
 * completed. Nested subagents (which AIPerf refuses) are planned as
 * children of their parent subagent's main stream; only the root's
 * branches are live at t*.
 */
#ifndef PLAN_H
#define PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "traces/base/mem.h"
#include "traces/trace.h"

#define PLAN_NONE UINT32_MAX

enum plan_stream_kind {
    PLAN_STREAM_ROOT = 0,
    PLAN_STREAM_SUBAGENT, /* a subagent's main or worker chain ("T::sa:A...") */
    PLAN_STREAM_FLAT,     /* a flat chain of the root ("T::fa:NNN", ...) */
};

enum plan_dispatch {
    PLAN_AT_RETURN = 0, /* children start when the spawning turn returns */
    PLAN_AT_ISSUE,      /* ... when it is sent (the branch began while the
                           spawning turn was in flight) */
};

enum plan_role { PLAN_ROLE_SYSTEM = 0, PLAN_ROLE_USER, PLAN_ROLE_ASSISTANT };

/* What produced a turn's new input (weka_trace.py:786-806). */
enum plan_input { PLAN_INPUT_NONE = 0, PLAN_INPUT_TOOL_RESULT, PLAN_INPUT_USER };

/* A turn of a stream. */
struct plan_ref {
    uint32_t stream; /* index into plan.streams */
    uint32_t turn;   /* index within that stream */
};

/* One message of a turn's prompt: a role and how many of the prompt's
 * tokens it holds (the tokens are the call's block chain, then its
 * synthetic tail, in order). */
struct plan_msg {
    uint8_t role;    /* enum plan_role */
    int64_t tokens;
};

struct plan_turn {
    uint32_t call;          /* index into trace.calls */
    int64_t t_ns;           /* recorded start on the root's clock */
    int64_t delay_ns;       /* wait after the previous turn of its stream
                               returns; -1 for a stream's first turn */
    int64_t api_ns;         /* recorded max(0, api_time); -1 if none */
    int64_t max_tokens;     /* output tokens asked for: max(out, 1) */
    uint32_t after, n_after;   /* gates: plan.refs[after ..+ n_after) */
    uint32_t spawn, n_spawn;   /* branches it starts: plan.branch_refs[...] */
    uint32_t join, n_join;     /* branches it waits for: plan.branch_refs[...] */
    uint32_t msgs, n_msgs;     /* its message delta: plan.msgs[...] */
    bool reset;             /* the delta is the whole message list */
    uint32_t hit_blocks;    /* theoretical prefix hit: leading blocks seen
                               earlier in the trace's recorded order */
    uint32_t total_blocks;  /* blocks of its chain */
    double t_ms;            /* t_ns as AIPerf holds it: t * 1000.0 */
    double delay_ms;        /* delay_ns as AIPerf holds it; NAN for a first turn */
    double api_ms;          /* max(0, api_time) * 1000.0; NAN if none */
    uint8_t input_kind;     /* enum plan_input */
};

struct plan_stream {
    uint8_t kind;           /* enum plan_stream_kind */
    uint32_t tree;          /* index into plan.trees */
    uint32_t parent;        /* stream that spawns it; PLAN_NONE: the root */
    uint32_t scope;         /* gate scope, unique over the plan: the root
                               and its flat streams share one, each
                               subagent's streams another */
    uint32_t session;       /* the trace session its calls come from */
    uint32_t first_turn, n_turns; /* plan.turns[first_turn ..+ n_turns) */
    const char *id;         /* AIPerf's stream id ("T", "T::sa:A", "T::fa:000") */
    const char *scope_id;   /* AIPerf's replay scope ("T", "T::sa:A") */
    uint32_t chain;         /* its chain: 0 a subagent's main chain, k its
                               k-th worker; a flat stream's worker number;
                               0 for the root */
};

struct plan_branch {
    const char *id;         /* "T:spawn:A" or "T:flatspawn:N" */
    uint32_t parent;        /* spawning stream */
    uint32_t spawn_turn;    /* its turn (index within the stream) */
    uint32_t join_turn;     /* the parent turn that waits; PLAN_NONE:
                               background */
    uint8_t dispatch;       /* enum plan_dispatch */
    int64_t start_ns;       /* recorded start of the branch */
    double start_ms;        /* the same as AIPerf holds it */
    uint32_t children, n_children; /* plan.children[...]: stream indices,
                                      in dispatch order */
    /* Per child (same order, plan.child_offset_ns[children ..]): the wait
     * from the dispatch moment to the child's first turn. Not shortened by
     * the system idle cap. */
};

struct plan_tree {
    uint32_t root_session;  /* trace session of the root */
    uint32_t first_stream, n_streams; /* the root first */
    uint32_t first_branch, n_branches;
    int64_t t_lo_ns, t_hi_ns;  /* min and max recorded start over all its
                                  turns: the warm-start range */
    double t_lo_ms, t_hi_ms;   /* the same in AIPerf's ms (equal when the
                                  tree has no turns) */
    int64_t block_size;
    int64_t tool_tokens, system_tokens; /* declared prefix (turn 0's system
                                           message) */
    uint32_t shared_blocks; /* leading blocks of the system message, which
                               instances of this trace share (the cache-bust
                               marker follows them) */
    uint32_t n_turns;       /* over all its streams */
    uint32_t n_file_calls;  /* calls in the file, dropped ones included */
    const char *trace_id;   /* the file's id */
    const char *file;       /* the file name */
    uint32_t dropped, n_dropped; /* plan.strings[...]: agent ids of
                                    subagents not replayed */
};

/* Knobs of the construction, AIPerf's defaults (its environment
 * variables WEKA_*). */
struct plan_opts {
    bool split_flat_chains;        /* WEKA_SPLIT_FLATTENED_AGENTS (true) */
    double seam_max_gap_s;         /* WEKA_SEAM_MAX_GAP_SECONDS (3600) */
    double seam_min_overlap_ratio; /* WEKA_SEAM_MIN_OVERLAP_RATIO (0.5) */
    int aux_max_requests;          /* WEKA_AUX_MAX_REQUESTS (1) */
    double aux_isl_ratio;          /* WEKA_AUX_ISL_RATIO (0.10) */
    int64_t aux_isl_floor;         /* WEKA_AUX_ISL_FLOOR (16384) */
    bool aux_cross_model;          /* WEKA_AUX_CROSS_MODEL (true) */
    int64_t aux_reduction_osl_max; /* WEKA_AUX_REDUCTION_OSL_MAX (4000) */
    double aux_reduction_ratio;    /* WEKA_AUX_REDUCTION_RATIO (20.0) */
    int worker_group_min;          /* WEKA_WORKER_GROUP_MIN (3) */
    int64_t corpus_tokens;         /* tokens of AIPerf's prompt corpus: a
                                      synthetic tail is cut to it; 0 (the
                                      default): no cut */
};

struct plan {
    struct arena arena;     /* owns the strings; the arrays are malloc'ed;
                               plan_destroy frees both */
    const struct trace *tr; /* borrowed */
    struct plan_opts opts;
    struct plan_tree *trees;      /* in sampler order (file order) */
    uint32_t n_trees;
    struct plan_stream *streams;
    uint32_t n_streams;
    struct plan_turn *turns;
    uint32_t n_turns;
    struct plan_branch *branches;
    uint32_t n_branches;
    struct plan_ref *refs;        /* gate lists */
    uint32_t n_refs;
    uint32_t *branch_refs;        /* spawn and join lists */
    uint32_t n_branch_refs;
    uint32_t *children;           /* branch children */
    int64_t *child_offset_ns;     /* parallel to children */
    uint32_t n_children;
    struct plan_msg *msgs;
    uint32_t n_msgs;
    const char **strings;
    uint32_t n_strings;
};

void plan_opts_defaults(struct plan_opts *o);
/* Builds the plan of every session tree of t (any session trace; traces
 * without sessions have none). NULL with a located message on error. */
struct plan *plan_build(const struct trace *t, const struct plan_opts *o, char *err);
void plan_destroy(struct plan *p);
/* Checks every invariant (indices in range, streams and turns in order,
 * each child in one branch, gates within a scope on turns that completed
 * before the gated one starts, spawn and join turns distinct and naming
 * their branches); 0, or -1 with err. */
int plan_verify(const struct plan *p, char *err);

/* Where a tree instance resumes at warm-start time t* (trajectory_source.py
 * _snapshot_for): the streams live at t*, root first, then children by
 * branch and child order. */
struct plan_resume {
    uint32_t stream;
    uint32_t next_turn;     /* first turn at or after t* */
    int64_t offset_ns;      /* max(0, t(next_turn) - t*): dispatch delay */
    bool waiting;           /* a root that waits for a join first */
    uint32_t branch;        /* the branch feeding a child; PLAN_NONE: root */
    uint32_t warm_turn;     /* next_turn - 1, sent in the warm-up phase;
                               PLAN_NONE if next_turn is 0 */
    int64_t lead_ns;        /* t* - t(warm_turn), unclamped; -1 if none */
    uint32_t join_turn;     /* the turn of its parent that waits for it (a
                               child), or that it waits to send (a waiting
                               root); PLAN_NONE if none */
    double offset_ms, lead_ms; /* offset_ns, lead_ns as AIPerf holds them
                                  (lead NAN if none) */
};
/* Fills out (capacity cap; the tree's n_streams always suffices) with
 * tree's live streams at t_star_ns and returns their count (0: nothing
 * live, the tree is skipped; -1: cap too small; out NULL: only the
 * boundaries); boundary (NULL, or room for the tree's n_streams) gets, per
 * stream of the tree in order, the number of its turns that count as
 * completed for the gates. */
int plan_snapshot(const struct plan *p, uint32_t tree, int64_t t_star_ns,
                  struct plan_resume *out, int cap, uint32_t *boundary);
/* The same at t* in AIPerf's ms (exact comparisons with the turns' t_ms). */
int plan_snapshot_ms(const struct plan *p, uint32_t tree, double t_star_ms,
                     struct plan_resume *out, int cap, uint32_t *boundary);
/* t* at ratio (0 .. 1) of the tree's range, as AIPerf computes it:
 * t_lo + ratio * (t_hi - t_lo), in ms (trajectory_source.py:602-621). */
double plan_t_star_ms(const struct plan *p, uint32_t tree, double ratio);
/* Lane `lane`'s t* in a tree, uniform over the ratio range [lo, hi] of its
 * span (ms), drawn as AIPerf draws it, so that both start the same lanes at
 * the same points: np.random.default_rng(s).uniform(t_lo, t_hi) with s the
 * first 8 bytes (big-endian) of SHA-256("<seed>:<trace id>:<lane>")
 * (timing/trajectory_source.py _seed_for_trace_lane,
 * _build_timestamped_trajectory; traces/base/npgen.h). A single point is
 * exact: no draw. */
double plan_t_star_draw(const struct plan *p, uint32_t tree, double lo, double hi, uint64_t seed,
                        int lane);

/* The plan in the canonical JSON form (one line, keys sorted); with
 * lanes > 0 also the initial lanes for that concurrency at the given t*
 * ratio range and seed (plan_t_star_draw). 0, or -1 with err (write errors
 * included). */
struct plan_json_opts {
    int lanes;              /* 0: no "lanes" block */
    double ratio_lo, ratio_hi; /* t* range as fractions of [t_lo, t_hi] */
    uint64_t seed;
    const char *model;      /* every turn's model: AIPerf maps the trace's
                               models onto the configured ones; NULL: "plan",
                               the one model the comparison configures */
};
int plan_write_json(const struct plan *p, const struct plan_json_opts *o, FILE *f, char *err);

#endif
