/* records.h: one record per call, the unit everything downstream is built
 * from, and its JSONL writer (requests.jsonl, replay/SCHEMA.md).
 *
 * Records are written as each call ends, one JSON object per line, and
 * flushed, so an interrupted run keeps every call measured so far. A
 * buffered writer (records_set_buffered, for the live load generator,
 * where one write per call is a tenth of its CPU per call) keeps up to
 * its buffer of lines until records_flush, a full buffer or the close:
 * its owner flushes on a periodic tick and on interrupts. */
#ifndef RECORDS_H
#define RECORDS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct replay_record {
    const char *session;       /* session instance id ("name@tree") */
    uint64_t session_uid;      /* hash of it: per-session grouping */
    int lane;                  /* -1 for open-loop arrivals */
    uint32_t call;             /* call index within its session */
    int64_t tree;              /* session-tree instance (lanes), or the
                                  arrival cycle (open loop) */
    int64_t intended_start_ns; /* when the schedule said to send it */
    int64_t start_ns;          /* when it was sent */
    int64_t first_token_ns;    /* -1: no token came */
    int64_t end_ns;            /* last token, or the error / cancel time */
    int64_t chunks;            /* non-empty chunks received */
    int64_t prompt_tokens;     /* whole prompt as sent */
    int64_t cached_tokens;     /* -1: unknown */
    int64_t output_tokens;     /* tokens received */
    int64_t max_tokens;        /* tokens asked for */
    int replica;               /* -1: unknown */
    int64_t preemptions;
    bool warmup;               /* excluded from statistics by design */
    bool cancelled;            /* cut at the end of the grace period or by
                                  an interrupt */
    bool overflow;             /* over the context limit */
    const char *error;         /* NULL when it completed */
    const char *model;         /* model name recorded in the trace, or NULL */
    /* Theoretical prefix hit of the turn it replays (agentx rules: the
     * plan's leading blocks seen earlier in the trace's recorded order, of
     * its chain's blocks); written when has_blocks. */
    bool has_blocks;
    int64_t hit_blocks, total_blocks;
    /* Chunk arrival times (chunks of them), or NULL. */
    const int64_t *chunk_times_ns;
    /* Live targets only (written when `live`). */
    bool live;
    int http_status;
    int64_t server_prompt_tokens, server_output_tokens; /* -1: not reported */
};

/* True when the record enters latency statistics. */
static inline bool record_measured(const struct replay_record *r)
{
    return !r->warmup && !r->cancelled && !r->error;
}

struct records_writer;
/* Opens path for writing (truncates). chunk_times: also write each call's
 * chunk times ("chunk_times_ns"). NULL with err set on failure. */
struct records_writer *records_open(const char *path, bool chunk_times, char *err);
/* Writes to an open stream (not closed by records_close). */
struct records_writer *records_from_stream(FILE *f, bool chunk_times);
/* Appends one line and flushes (buffered: flushes when the buffer is
 * full). 0, or -1 with err set (disk full...). */
int records_write(struct records_writer *w, const struct replay_record *r, char *err);
/* Lines are held in a buffer of `bytes` (>= 4096) and written when it
 * fills or at records_flush / records_close. Call before the first
 * records_write. */
void records_set_buffered(struct records_writer *w, size_t bytes);
/* Writes what is buffered. 0, or -1 with err set. */
int records_flush(struct records_writer *w, char *err);
/* fn(arg, r) after each record written (the live load generator gathers
 * schedule lag from them instead of reading the file back). */
typedef void (*records_observer)(void *arg, const struct replay_record *r);
void records_set_observer(struct records_writer *w, records_observer fn, void *arg);
/* One record as its line (no newline; malloc'ed, the caller frees it).
 * jansson: through Jansson, the reference; else the direct formatter
 * where it applies (the bytes are the same). */
char *records_json_line(const struct replay_record *r, bool chunk_times, bool jansson);
uint64_t records_count(const struct records_writer *w);
int records_close(struct records_writer *w, char *err);

#endif
