/* trace.h: the in-memory trace model every reader fills and every consumer
 * (stats, the replayer, the load generator) reads.
 *
 * A trace is a set of session trees. A session is an ordered list of
 * calls; a subagent session forks from a point of its parent (after the
 * parent's call `fork_after`, `fork_gap_ns` after that call's recorded end)
 * and may nest further. Traces without sessions (Mooncake, Azure, BurstGPT
 * without session ids) are sessions of one call each with absolute arrival
 * times (`timestamped`).
 *
 * Prompts are described by chains of block ids (one id per block of
 * `block_size` tokens; the same id at the same position = the same
 * content). Ids are scoped: `scope` numbers the id space a session's ids
 * live in (one per trace file for "local" traces, 0 for global ones).
 *
 * Chains are stored compactly: a call's chain is the first `n_shared`
 * blocks of an earlier call's chain (`base`) plus its own new suffix, so
 * storage grows with the new blocks each call adds, not with every call's
 * whole chain. Use trace_call_blocks() to read a chain.
 *
 * All memory belongs to the trace (its arena and its three arrays);
 * trace_destroy() frees it.
 */
#ifndef TRACE_H
#define TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "traces/base/mem.h"

#define TRACE_NONE UINT32_MAX

enum trace_format {
    TRACE_FMT_AUTO = 0,
    TRACE_FMT_AGENTX,   /* AgentX / "Weka" JSON: a file or a folder of files */
    TRACE_FMT_MOONCAKE, /* JSONL: timestamp, input_length, output_length, hash_ids */
    TRACE_FMT_AZURE,    /* CSV: TIMESTAMP,ContextTokens,GeneratedTokens */
    TRACE_FMT_BURSTGPT, /* CSV: Timestamp,Session ID,Elapsed time,Model,... */
    TRACE_FMT_NATIVE,   /* our JSONL (traces/FORMAT.md) */
};

enum trace_call_type {
    TRACE_CALL_NORMAL = 0, /* "n" */
    TRACE_CALL_OTHER = 1,  /* "s" and anything else recorded */
};

struct trace_call {
    int64_t t_ns;          /* arrival: offset from its session's start, or
                              absolute (from the trace's start) when the
                              trace is timestamped */
    int64_t think_ns;      /* recorded think time before it (end-to-start),
                              -1 if not recorded */
    int64_t api_ns;        /* recorded end-to-end time, -1 if not recorded */
    int64_t ttft_ns;       /* recorded time to first token, -1 if none */
    int64_t prompt_tokens; /* whole prompt, cached part included */
    int64_t output_tokens;
    uint32_t session;      /* index into trace.sessions */
    uint32_t index;        /* position within its session */
    uint32_t model;        /* index into trace.strings, TRACE_NONE if none */
    uint32_t stop;         /* index into trace.strings, TRACE_NONE if none */
    uint32_t input_types;  /* index into trace.strings: comma-joined list */
    uint32_t output_types; /* likewise */
    uint8_t type;          /* enum trace_call_type */
    /* Block chain: blocks [0, n_shared) are blocks [0, n_shared) of call
     * `base` (TRACE_NONE when n_shared == 0); blocks [n_shared, n_blocks)
     * are suffix[0 .. n_blocks - n_shared). */
    uint32_t base;
    uint32_t n_shared;
    uint32_t n_blocks;
    const uint64_t *suffix;
    /* The AgentX view (AIPerf 0.13.0's reading of a Weka file; the replay
     * plan, traces/plan.h, reads only these and the fields above). Readers
     * of other formats leave them to tb_finish, which derives them from
     * the model (traces/FORMAT.md, "The AgentX view"). Not in the digest. */
    double at_s;           /* start on its root's clock (s): a subagent
                              call's `t` read as AIPerf reads it */
    double api_s;          /* recorded api_time (s) as written, negative
                              kept; NAN if not recorded */
    uint32_t pos;          /* its index in its session's request list in
                              the file (a subagent entry takes an index) */
};

struct trace_session {
    uint32_t parent;       /* parent session, TRACE_NONE for a root */
    uint32_t root;         /* root of its tree (itself for a root) */
    uint32_t first_call;   /* its calls are calls[first_call ..+ n_calls);
                              n_calls may be 0 (an empty subagent) */
    uint32_t n_calls;
    uint32_t first_child;  /* first subagent forked from it, TRACE_NONE */
    uint32_t next_sibling; /* next subagent of the same parent, in fork order */
    uint32_t fork_after;   /* parent's call index after whose end it forks;
                              TRACE_NONE: at the parent's start */
    int64_t fork_t_ns;     /* recorded fork time (the subagent's start),
                              offset from the parent's start; AgentX:
                              t - duration_ms (traces/FORMAT.md) */
    int64_t fork_gap_ns;   /* recorded gap from that call's end to the fork */
    int64_t duration_ns;   /* recorded duration, -1 if not recorded */
    bool join;             /* the parent waits for it before its next call */
    uint32_t scope;        /* block-id scope */
    int64_t block_size;    /* tokens per block of its chains */
    uint32_t name;         /* string: trace id or agent id */
    uint32_t kind;         /* string: subagent_type, TRACE_NONE for roots */
    uint32_t status;       /* string: recorded status, TRACE_NONE if none */
    uint32_t file;         /* string: the file it was read from */
    int64_t start_ns;      /* recorded absolute start of a root session
                              (BurstGPT sessions), -1 if none */
    /* The AgentX view (see trace_call; not in the digest). */
    uint32_t pos;          /* a subagent: its entry's index in its parent's
                              request list; TRACE_NONE for a root */
    double spawn_s;        /* a subagent: its spawn time (the entry's `t`)
                              on the root's clock (s); 0 for a root */
    double end_s;          /* a subagent: spawn_s + duration (negative: 0),
                              else its calls' latest end, else spawn_s */
    int64_t tool_tokens, system_tokens; /* declared prefix (the file's or
                              the subagent entry's), 0 if none */
};

struct trace {
    struct arena arena;            /* owns everything below */
    struct trace_session *sessions;
    uint32_t n_sessions;
    uint32_t n_roots;
    struct trace_call *calls;      /* grouped by session, in session order */
    uint32_t n_calls;
    const char **strings;          /* interned strings */
    uint32_t n_strings;
    enum trace_format format;
    bool timestamped;              /* calls carry absolute arrival times */
    bool global_scope;             /* one id space for the whole trace */
    uint32_t n_scopes;
    uint64_t digest;               /* content digest of the parsed model */
    uint64_t skipped_records;      /* records skipped under skip_bad */
    /* Storage accounting for the benchmark. */
    uint64_t stored_block_ids;     /* ids held in suffixes */
    uint64_t total_block_ids;      /* sum of n_blocks over calls */
};

/* How far trace_read() has come, for a progress line. */
struct trace_read_progress {
    const char *path;              /* the file being read */
    size_t files_done, files_total; /* a folder's files (0 of 1 for a file) */
    uint64_t bytes;                /* of the current file, read so far */
};

struct trace_read_opts {
    enum trace_format format;      /* TRACE_FMT_AUTO: detect by content */
    bool skip_bad;                 /* skip bad records, count them */
    /* Called before each file and every 16,384 lines of a line format
     * (NULL: never). A non-zero return stops the read there: the trace
     * holds the records read so far (an interrupt; the caller knows). */
    int (*progress)(void *arg, const struct trace_read_progress *p);
    void *progress_arg;
};

/* Reads one file or a folder of files. On error returns NULL with a message
 * naming file:line:column (or the JSON path) and the reason. */
struct trace *trace_read(const char *path, const struct trace_read_opts *opts,
                         char *err);
/* Reads from memory (fuzzing, tests); `name` is used in messages. */
struct trace *trace_read_mem(const char *data, size_t len, const char *name,
                             const struct trace_read_opts *opts, char *err);
void trace_destroy(struct trace *t);

/* Checks every invariant of the model (session ranges and links, chain
 * bases earlier than their calls, counts); 0, or -1 with a message. */
int trace_verify(const struct trace *t, char *err);

/* Absolute start of each call on its file's timeline (ns): a root call's
 * t_ns; a subagent call's t_ns plus its session's fork time plus its
 * parent's. Fills out[n_calls]. */
void trace_call_abs_times(const struct trace *t, int64_t *out);

/* Writes the native JSONL format (traces/FORMAT.md). */
int trace_write_native(const struct trace *t, const char *path, char *err);

/* Copies call c's block chain into out (capacity cap); returns n_blocks.
 * If cap < n_blocks only the first cap are written. */
uint32_t trace_call_blocks(const struct trace *t, const struct trace_call *c,
                           uint64_t *out, uint32_t cap);
/* Block i of call c's chain (i < c->n_blocks). */
uint64_t trace_call_block(const struct trace *t, const struct trace_call *c,
                          uint32_t i);

const char *trace_format_name(enum trace_format f);
int trace_format_parse(const char *name, enum trace_format *f);
static inline const char *trace_str(const struct trace *t, uint32_t i)
{
    return i == TRACE_NONE ? NULL : t->strings[i];
}

/* Statistics (trace stats). */
struct trace_stats {
    uint64_t sessions, subagents, calls;
    int64_t duration_ns;
    uint64_t prompt_tokens, output_tokens;
    double prompt_p[5], output_p[5], think_p[5], calls_per_session_p[5];
                                   /* p50, p90, p99, mean, max */
    uint64_t think_samples;        /* calls with a recorded think time */
    double hit_rate_tokens;        /* theoretical, token-weighted */
    double hit_rate_blocks;        /* block-weighted */
    double hit_rate_full_blocks;   /* only full blocks counted */
};
void trace_stats_compute(const struct trace *t, struct trace_stats *s);
/* The same as one JSON object (trace stats --json); caller owns it. */
struct json_t;
struct json_t *trace_stats_json(const struct trace *t, const struct trace_stats *s);

/* The generator (trace synth). Every field has a default (synth_defaults)
 * taken from the statistics of the public agentic traces. */
struct trace_synth_params {
    uint32_t sessions;          /* root sessions */
    uint64_t seed;
    int64_t block_size;         /* tokens per block */
    double initial_mu, initial_sigma;  /* lognormal first prompt (tokens) */
    double calls_mu, calls_sigma;      /* lognormal calls per root session */
    double growth_mu, growth_sigma;    /* lognormal new tokens per call */
    double output_mu, output_sigma;    /* lognormal output tokens */
    double think_mu, think_sigma;      /* lognormal think time (s) */
    double think_max_s;                /* cap on one think time */
    double api_s_per_ktok;             /* recorded api time per 1k output */
    double subagent_p;                 /* chance a call forks a subagent */
    uint32_t subagent_calls_mean;      /* mean calls of a subagent */
    double subagent_initial;           /* subagent first prompt (tokens) */
    double compact_p;                  /* chance a call compacts context */
    double compact_keep;               /* fraction kept by a compaction */
    int64_t max_prompt;                /* context limit (tokens) */
    const char *model, *subagent_model;
};
void trace_synth_defaults(struct trace_synth_params *p);
/* Builds a trace in memory (format TRACE_FMT_NATIVE). */
struct trace *trace_synth(const struct trace_synth_params *p, char *err);

#endif
