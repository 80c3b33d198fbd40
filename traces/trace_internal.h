/* trace_internal.h: what the trace readers share: a builder that appends
 * sessions and calls to a trace, interns strings and stores block chains
 * compactly, plus small parsing helpers. Not for use outside traces/.
 */
#ifndef TRACE_INTERNAL_H
#define TRACE_INTERNAL_H

#include <jansson.h>

#include "traces/trace.h"

/* Bounds beyond which a count or a time is rejected as absurd. */
#define TRACE_MAX_TOKENS 100000000LL  /* 1e8 tokens in one prompt */
#define TRACE_MAX_OUTPUT 10000000LL   /* 1e7 output tokens */
#define TRACE_MAX_SECONDS 1e9         /* about 31 years */
#define TRACE_MAX_BLOCK_SIZE 1048576
/* A call of no prompt token can only fail (every target refuses it): the
 * readers refuse it, or skip it under skip-bad; the message's tail. */
#define TB_NO_PROMPT_WHY "0 tokens: a call needs at least one prompt token"
#define TB_NO_PROMPT TB_NO_PROMPT_WHY " (--skip-bad skips it)"

struct tb_pfx {
    uint32_t key;  /* high 32 bits of the chained prefix hash, never 0; it
                      also picks the slot. A false match costs compression
                      only: shared blocks are checked one by one */
    uint32_t call; /* first call whose chain has this prefix */
};

struct tb {
    struct trace *t;
    size_t cap_calls, cap_sessions, cap_strings;
    /* Own table, not base/hmap.h: hot (every string field read), keyed by the string itself. */
    uint32_t *str_tab;     /* open addressing: string index + 1, 0 empty */
    size_t str_mask;
    /* Prefix table for global-scope traces: chained prefix hash -> call
     * that first had that prefix (0 key = empty). */
    /* Own table, not base/hmap.h: hot (every block id of a global-scope trace), 8-byte slots. */
    struct tb_pfx *pfx;    /* open addressing, key 0 = empty */
    size_t pfx_mask, pfx_used;
    bool use_pfx;
    /* The chain of the last call appended (its session's previous call). */
    uint64_t *last;
    uint32_t n_last, cap_last, last_call;
    uint64_t *scratch;
    uint32_t cap_scratch;
    uint32_t global_scope_id; /* AgentX files with hash_id_scope global */
};

void tb_init(struct tb *b, enum trace_format f);
/* Hands over the finished trace (computes digest and counts; verifies). */
struct trace *tb_finish(struct tb *b);
void tb_abort(struct tb *b);
uint32_t tb_str(struct tb *b, const char *s); /* NULL -> TRACE_NONE */
uint32_t tb_str_n(struct tb *b, const char *s, size_t n);
/* A new session (fields default: root of itself, no calls, times -1). */
uint32_t tb_session(struct tb *b, uint32_t parent);
/* Appends a call to session s, which must be the session of the last call
 * appended or have no calls yet. Copies ids. Returns the call index. */
uint32_t tb_call(struct tb *b, uint32_t s, const struct trace_call *proto,
                 const uint64_t *ids, uint32_t n_ids);
/* Appends a call stored as (base, n_shared, suffix) (the native reader);
 * checks base < the new index and n_shared <= base's n_blocks. */
int tb_call_compact(struct tb *b, uint32_t s, const struct trace_call *proto,
                    uint32_t base, uint32_t n_shared, const uint64_t *suffix,
                    uint32_t n_suffix, char *err);
void tb_call_init(struct trace_call *c);
/* Sizes the prefix table for about n distinct prefixes (a hint). */
void tb_pfx_reserve(struct tb *b, size_t n);

/* Join strings of a JSON array of strings with ','; -1 if not strings. */
int tb_json_str_list(struct tb *b, json_t *a, uint32_t *out);

/* Lines of a file read in chunks (so a large JSONL or CSV trace is never
 * held whole in memory), or of a buffer. */
struct tb_lines {
    FILE *f;                /* NULL: read from mem */
    const char *mem;
    size_t mem_len, mem_pos;
    char *buf;              /* file mode: bytes [start, end) not yet used */
    size_t cap, start, end;
    bool eof, error;
    size_t lineno;          /* of the line last returned (1-based) */
    size_t size_hint;       /* total bytes (file size), for table sizing */
    /* Why tb_lines_next() failed (tb_lines_error() words it). */
    enum { TB_LINES_OK, TB_LINES_READ, TB_LINES_LONG, TB_LINES_NUL } why;
    size_t bad_line, bad_col; /* where (LONG, NUL) */
    /* Asked every TB_LINES_POLL lines; non-zero stops the source as if
     * the file ended there (an interrupt): `stopped` tells. */
    int (*poll)(void *arg, uint64_t bytes);
    void *poll_arg;
    uint64_t bytes;         /* bytes read from the file so far */
    bool stopped;
};
#define TB_LINES_POLL 16384
void tb_lines_mem(struct tb_lines *L, const char *data, size_t len);
void tb_lines_file(struct tb_lines *L, FILE *f, size_t size_hint);
void tb_lines_free(struct tb_lines *L);
/* The next line (without its newline; valid until the next call): 1, or 0
 * at the end (or when poll stopped it), or -1 on a read error, a line
 * longer than LIMIT_TRACE_LINE_BYTES or a NUL byte (traces/base/limits.h). */
int tb_lines_next(struct tb_lines *L, const char **line, size_t *n);
/* The message of tb_lines_next()'s -1, located ("name:LINE:COL: ..."). */
int tb_lines_error(const struct tb_lines *L, const char *name, char *err);
/* The first bytes not yet consumed (at most want), for format detection. */
void tb_lines_peek(struct tb_lines *L, size_t want, const char **p, size_t *n);

/* Readers. `name` appears in messages. AgentX reads one whole document;
 * the others read lines. */
int trace_read_agentx_doc(struct tb *b, const char *data, size_t len,
                          const char *name, bool skip_bad, char *err);
int trace_read_mooncake(struct tb *b, struct tb_lines *L, const char *name,
                        bool skip_bad, char *err);
int trace_read_azure(struct tb *b, struct tb_lines *L, const char *name,
                     bool skip_bad, char *err);
int trace_read_burstgpt(struct tb *b, struct tb_lines *L, const char *name,
                        bool skip_bad, char *err);
int trace_read_native(struct tb *b, struct tb_lines *L, const char *name,
                      bool skip_bad, char *err);

/* Jansson parses between begin and end allocate from a per-thread arena
 * (see trace_read.c); reset drops every document parsed so far; no json_decref
 * of them is needed or allowed after end. */
void tb_json_begin(void);
void tb_json_reset(void);
void tb_json_end(void);

/* Content digest: every field but file names; chains by their content, so
 * the same trace stored with other bases gives the same digest (trace.c). */
uint64_t trace_digest_compute(const struct trace *t);

/* Seconds (a JSON number) to ns, with range checks; -1 on error. */
int tb_seconds_ns(json_t *v, int64_t *ns);
/* Line and column (1-based) of byte offset off in data. */
void tb_line_col(const char *data, size_t off, size_t *line, size_t *col);

#endif
