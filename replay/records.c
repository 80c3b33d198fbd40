/* records.c: requests.jsonl, one JSON object per call (records.h).
 * Keys in a fixed order, so the same run gives the same bytes.
 *
 * Two formatters give the same bytes: Jansson (json_dumpf, compact, keys
 * in insertion order, ASCII only), the reference; and a direct one for
 * records whose strings are printable ASCII without quotes or
 * backslashes (every record of a run whose session names and errors are
 * plain), which needs no escaping. The direct one costs ~4,000
 * instructions a record instead of ~75,000 (callgrind, a 16-chunk call),
 * which mattered to the live load generator at thousands of calls a
 * second; records with any other string go through Jansson.
 * tests/test_live.c compares the two on random records. */
#include "replay/records.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"

struct records_writer {
    FILE *f;
    bool own;
    bool chunk_times;
    bool buffered;           /* no flush per line (records_set_buffered) */
    uint64_t n;
    records_observer obs;
    void *obs_arg;
    char *buf;               /* the direct formatter's line */
    char *iobuf;             /* the stream's buffer when buffered */
    size_t cap;
};

struct records_writer *records_open(const char *path, bool chunk_times, char *err)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        err_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct records_writer *w = records_from_stream(f, chunk_times);
    w->own = true;
    return w;
}

struct records_writer *records_from_stream(FILE *f, bool chunk_times)
{
    struct records_writer *w = xcalloc(1, sizeof *w);
    w->f = f;
    w->chunk_times = chunk_times;
    return w;
}

static json_t *int_or_null(int64_t v)
{
    return v < 0 ? json_null() : json_integer((json_int_t)v);
}

static json_t *record_json(const struct replay_record *r, bool chunk_times)
{
    json_t *o = json_object();
    json_object_set_new(o, "session", json_string(r->session ? r->session : ""));
    json_object_set_new(o, "lane", json_integer(r->lane));
    json_object_set_new(o, "call", json_integer(r->call));
    json_object_set_new(o, "tree", json_integer((json_int_t)r->tree));
    json_object_set_new(o, "intended_start_ns", json_integer((json_int_t)r->intended_start_ns));
    json_object_set_new(o, "start_ns", json_integer((json_int_t)r->start_ns));
    json_object_set_new(o, "first_token_ns", int_or_null(r->first_token_ns));
    json_object_set_new(o, "end_ns", json_integer((json_int_t)r->end_ns));
    json_object_set_new(o, "chunks", json_integer((json_int_t)r->chunks));
    json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)r->prompt_tokens));
    json_object_set_new(o, "cached_tokens", int_or_null(r->cached_tokens));
    json_object_set_new(o, "output_tokens", json_integer((json_int_t)r->output_tokens));
    json_object_set_new(o, "max_tokens", json_integer((json_int_t)r->max_tokens));
    json_object_set_new(o, "replica", json_integer(r->replica));
    json_object_set_new(o, "preemptions", json_integer((json_int_t)r->preemptions));
    json_object_set_new(o, "warmup", json_boolean(r->warmup));
    json_object_set_new(o, "cancelled", json_boolean(r->cancelled));
    json_object_set_new(o, "overflow", json_boolean(r->overflow));
    json_object_set_new(o, "error", r->error ? json_string(r->error) : json_null());
    json_object_set_new(o, "model", r->model ? json_string(r->model) : json_null());
    if (r->has_blocks) {
        json_object_set_new(o, "hit_blocks", json_integer((json_int_t)r->hit_blocks));
        json_object_set_new(o, "blocks", json_integer((json_int_t)r->total_blocks));
    }
    if (r->live) {
        json_object_set_new(o, "http_status", json_integer(r->http_status));
        json_object_set_new(o, "server_prompt_tokens", int_or_null(r->server_prompt_tokens));
        json_object_set_new(o, "server_output_tokens", int_or_null(r->server_output_tokens));
    }
    if (chunk_times && r->chunk_times_ns) {
        json_t *a = json_array();
        for (int64_t i = 0; i < r->chunks; i++)
            json_array_append_new(a, json_integer((json_int_t)r->chunk_times_ns[i]));
        json_object_set_new(o, "chunk_times_ns", a);
    }
    return o;
}

#define JFLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)

/* ---- the direct formatter ---- */

/* Printable ASCII without '"' or '\\': written as is by Jansson. */
static bool plain(const char *s)
{
    if (!s)
        return true;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
            return false;
    return true;
}

struct lbuf {
    char *p;
    size_t n, cap;
};

static void lb_need(struct lbuf *b, size_t add)
{
    if (b->n + add <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + add)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void lb_lit(struct lbuf *b, const char *s, size_t n)
{
    lb_need(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
#define LB_LIT(b, s) lb_lit(b, s, sizeof(s) - 1)

static void lb_int(struct lbuf *b, int64_t v)
{
    char t[24];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        t[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    lb_need(b, (size_t)k + 1);
    if (v < 0)
        b->p[b->n++] = '-';
    while (k)
        b->p[b->n++] = t[--k];
}

static void lb_int_or_null(struct lbuf *b, int64_t v)
{
    if (v < 0)
        LB_LIT(b, "null");
    else
        lb_int(b, v);
}

static void lb_str(struct lbuf *b, const char *s)
{
    size_t n = strlen(s);
    lb_need(b, n + 2);
    b->p[b->n++] = '"';
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n++] = '"';
}

static void lb_bool(struct lbuf *b, bool v)
{
    if (v)
        LB_LIT(b, "true");
    else
        LB_LIT(b, "false");
}

/* The record as Jansson writes it (plain strings only). */
static void format_direct(struct lbuf *b, const struct replay_record *r, bool chunk_times)
{
    LB_LIT(b, "{\"session\":");
    lb_str(b, r->session ? r->session : "");
    LB_LIT(b, ",\"lane\":");
    lb_int(b, r->lane);
    LB_LIT(b, ",\"call\":");
    lb_int(b, r->call);
    LB_LIT(b, ",\"tree\":");
    lb_int(b, r->tree);
    LB_LIT(b, ",\"intended_start_ns\":");
    lb_int(b, r->intended_start_ns);
    LB_LIT(b, ",\"start_ns\":");
    lb_int(b, r->start_ns);
    LB_LIT(b, ",\"first_token_ns\":");
    lb_int_or_null(b, r->first_token_ns);
    LB_LIT(b, ",\"end_ns\":");
    lb_int(b, r->end_ns);
    LB_LIT(b, ",\"chunks\":");
    lb_int(b, r->chunks);
    LB_LIT(b, ",\"prompt_tokens\":");
    lb_int(b, r->prompt_tokens);
    LB_LIT(b, ",\"cached_tokens\":");
    lb_int_or_null(b, r->cached_tokens);
    LB_LIT(b, ",\"output_tokens\":");
    lb_int(b, r->output_tokens);
    LB_LIT(b, ",\"max_tokens\":");
    lb_int(b, r->max_tokens);
    LB_LIT(b, ",\"replica\":");
    lb_int(b, r->replica);
    LB_LIT(b, ",\"preemptions\":");
    lb_int(b, r->preemptions);
    LB_LIT(b, ",\"warmup\":");
    lb_bool(b, r->warmup);
    LB_LIT(b, ",\"cancelled\":");
    lb_bool(b, r->cancelled);
    LB_LIT(b, ",\"overflow\":");
    lb_bool(b, r->overflow);
    LB_LIT(b, ",\"error\":");
    if (r->error)
        lb_str(b, r->error);
    else
        LB_LIT(b, "null");
    LB_LIT(b, ",\"model\":");
    if (r->model)
        lb_str(b, r->model);
    else
        LB_LIT(b, "null");
    if (r->has_blocks) {
        LB_LIT(b, ",\"hit_blocks\":");
        lb_int(b, r->hit_blocks);
        LB_LIT(b, ",\"blocks\":");
        lb_int(b, r->total_blocks);
    }
    if (r->live) {
        LB_LIT(b, ",\"http_status\":");
        lb_int(b, r->http_status);
        LB_LIT(b, ",\"server_prompt_tokens\":");
        lb_int_or_null(b, r->server_prompt_tokens);
        LB_LIT(b, ",\"server_output_tokens\":");
        lb_int_or_null(b, r->server_output_tokens);
    }
    if (chunk_times && r->chunk_times_ns) {
        LB_LIT(b, ",\"chunk_times_ns\":[");
        for (int64_t i = 0; i < r->chunks; i++) {
            if (i)
                LB_LIT(b, ",");
            lb_int(b, r->chunk_times_ns[i]);
        }
        LB_LIT(b, "]");
    }
    LB_LIT(b, "}");
}

char *records_json_line(const struct replay_record *r, bool chunk_times, bool jansson)
{
    if (jansson || !plain(r->session) || !plain(r->error) || !plain(r->model)) {
        json_t *o = record_json(r, chunk_times);
        char *s = json_dumps(o, JFLAGS);
        json_decref(o);
        return s;
    }
    struct lbuf b = {0};
    format_direct(&b, r, chunk_times);
    lb_need(&b, 1);
    b.p[b.n] = 0;
    return b.p;
}

int records_write(struct records_writer *w, const struct replay_record *r, char *err)
{
    int rc;
    if (plain(r->session) && plain(r->error) && plain(r->model)) {
        struct lbuf b = {w->buf, 0, w->cap};
        format_direct(&b, r, w->chunk_times);
        lb_need(&b, 1);
        b.p[b.n++] = '\n';
        w->buf = b.p;
        w->cap = b.cap;
        rc = fwrite(b.p, 1, b.n, w->f) == b.n ? 0 : -1;
    } else {
        json_t *o = record_json(r, w->chunk_times);
        rc = json_dumpf(o, w->f, JFLAGS);
        json_decref(o);
        if (!rc && fputc('\n', w->f) == EOF)
            rc = -1;
    }
    if (rc || (!w->buffered && fflush(w->f)))
        return err_set(err, "writing records: %s", strerror(errno));
    w->n++;
    if (w->obs)
        w->obs(w->obs_arg, r);
    return 0;
}

void records_set_buffered(struct records_writer *w, size_t bytes)
{
    if (bytes < 4096)
        bytes = 4096;
    /* Our own buffer: glibc ignores the size when given none. */
    free(w->iobuf);
    w->iobuf = xmalloc(bytes);
    setvbuf(w->f, w->iobuf, _IOFBF, bytes);
    w->buffered = true;
}

int records_flush(struct records_writer *w, char *err)
{
    if (w && fflush(w->f))
        return err_set(err, "writing records: %s", strerror(errno));
    return 0;
}

void records_set_observer(struct records_writer *w, records_observer fn, void *arg)
{
    w->obs = fn;
    w->obs_arg = arg;
}

uint64_t records_count(const struct records_writer *w) { return w->n; }

int records_close(struct records_writer *w, char *err)
{
    if (!w)
        return 0;
    int rc = 0;
    if (!w->own && w->buffered && fflush(w->f))
        rc = err_set(err, "writing records: %s", strerror(errno));
    if (w->own && fclose(w->f))
        rc = err_set(err, "closing records: %s", strerror(errno));
    if (!w->own && w->iobuf)
        setvbuf(w->f, NULL, _IOFBF, BUFSIZ); /* the stream outlives our buffer */
    free(w->iobuf);
    free(w->buf);
    free(w);
    return rc;
}
