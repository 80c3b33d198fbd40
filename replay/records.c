/* records.c: requests.jsonl, one JSON object per call (records.h).
 * Written with Jansson, keys in a fixed order, so the same run gives the
 * same bytes. */
#include "replay/records.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "traces/util.h"

struct records_writer {
    FILE *f;
    bool own;
    bool chunk_times;
    uint64_t n;
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

int records_write(struct records_writer *w, const struct replay_record *r, char *err)
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
    if (r->live) {
        json_object_set_new(o, "http_status", json_integer(r->http_status));
        json_object_set_new(o, "server_prompt_tokens", int_or_null(r->server_prompt_tokens));
        json_object_set_new(o, "server_output_tokens", int_or_null(r->server_output_tokens));
    }
    if (w->chunk_times && r->chunk_times_ns) {
        json_t *a = json_array();
        for (int64_t i = 0; i < r->chunks; i++)
            json_array_append_new(a, json_integer((json_int_t)r->chunk_times_ns[i]));
        json_object_set_new(o, "chunk_times_ns", a);
    }
    int rc = json_dumpf(o, w->f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(o);
    if (rc || fputc('\n', w->f) == EOF || fflush(w->f))
        return err_set(err, "writing records: %s", strerror(errno));
    w->n++;
    return 0;
}

uint64_t records_count(const struct records_writer *w) { return w->n; }

int records_close(struct records_writer *w, char *err)
{
    if (!w)
        return 0;
    int rc = 0;
    if (w->own && fclose(w->f))
        rc = err_set(err, "closing records: %s", strerror(errno));
    free(w);
    return rc;
}
