/* serve.c: `agentreplay serve`: the simulated engine behind an
 * OpenAI-compatible HTTP server, in real time.
 *
 * Endpoints: POST /v1/chat/completions and /v1/completions (streamed as
 * server-sent events, or whole), GET /v1/models, /health and /metrics
 * (Prometheus text). The engine (or, with --fake, a fixed-rate
 * model) runs on the same real-clock loop as the server, stepwise, so each
 * chunk of tokens is written when it is produced; --time-scale X runs the
 * engine's clock X times faster than real time.
 *
 * Prefix caching follows the prompt content: the prompt's tokens (ids in
 * token mode; whitespace-separated words for text, the server's token
 * count) are cut into chunks of 64 and each chunk gets an id chained over
 * the chunks before it (replay/prompt.h), so identical prefixes hit in the
 * engine's cache and different ones do not. The engine's cache key and
 * routing key (session_key) is the request's "user" field when given,
 * else the id of the prompt's first chunk.
 *
 * Faults for testing clients (seeded, RNG_FAULT; two draws per completion
 * request so the schedule does not depend on the outcome):
 *   --fault-error-rate P       answer 500 without serving the request;
 *   --fault-disconnect-rate P  close the connection after a random number
 *                              of tokens (before any byte when whole);
 *   --fault-stall-ms MS        hold each request (or, with
 *                              --fault-stall-rate P, a fraction P of them)
 *                              for MS before serving it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/server/httpd.h"
#include "replay/cli/cli.h"
#include "engine/clock/loop.h"
#include "traces/prompt.h"
#include "engine/target.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"
#include "traces/base/time_ns.h"

#define SERVE_CHUNK_TOKENS 64

/* ---- the server ---- */

struct srv {
    struct loop *loop;      /* real clock: HTTP */
    struct loop *tloop;     /* the backend's clock (scaled or the same) */
    struct target *tg;
    struct httpd *httpd;
    char model[128];
    char api_key[256];
    double fault_error_rate, fault_disconnect_rate, fault_stall_rate;
    int64_t fault_stall_ns;
    struct rng fault_rng;
    uint64_t next_id;
    /* Counters for /metrics. */
    int64_t http_requests, completions, completions_ok, completions_failed;
    int64_t faults_error, faults_disconnect, faults_stall, client_gone;
    int64_t prompt_tokens, cached_tokens, output_tokens;
    int64_t running;
    int sig_pipe[2];
    struct loop_io sig_io;
    struct sreq *live;      /* requests not yet freed */
};

struct sreq {
    struct target_call call;
    struct srv *s;
    struct httpd_conn *c;     /* NULL once the client is gone */
    int chat, stream, include_usage;
    int64_t emitted;
    int64_t disconnect_at;    /* tokens after which to cut, -1: never */
    int submitted, done, cancel_pending;
    uint64_t *blocks;
    struct loop_timer stall_timer, cancel_timer;
    char id[40];
    long created;
    char *text;               /* whole responses: the generated text */
    size_t text_len, text_cap;
    struct sreq *prev, *next; /* the server's live list */
};

static void sreq_free(struct sreq *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        q->s->live = q->next;
    if (q->next)
        q->next->prev = q->prev;
    loop_cancel(q->s->loop, &q->stall_timer);
    loop_cancel(q->s->loop, &q->cancel_timer);
    free(q->blocks);
    free(q->text);
    free(q);
}

static void respond_json(struct httpd_conn *c, int status, json_t *j)
{
    char *body = json_dumps(j, JSON_COMPACT);
    httpd_respond(c, status, "application/json", body, strlen(body));
    free(body);
    json_decref(j);
}

static void respond_error(struct httpd_conn *c, int status, const char *type, const char *msg)
{
    respond_json(c, status,
                 json_pack("{s:{s:s,s:s,s:i}}", "error", "message", msg, "type", type, "code", status));
}

/* Appends the words of tokens [from, from + n) to buf (cap bytes); returns
 * the length written. Words come from the prompt vocabulary. */
static size_t words(int64_t from, int64_t n, char *buf, size_t cap)
{
    size_t k = 0;
    for (int64_t i = from; i < from + n; i++) {
        size_t wl;
        const char *w = prompt_word((uint32_t)hash_mix(0x6f7574ull, (uint64_t)i), &wl);
        if (k + wl >= cap)
            break;
        memcpy(buf + k, w, wl);
        k += wl;
    }
    buf[k] = 0;
    return k;
}

static void write_event(struct sreq *q, const char *json, size_t n)
{
    if (!q->c)
        return;
    char stackbuf[1024];
    char *b = n + 10 <= sizeof stackbuf ? stackbuf : xmalloc(n + 10);
    memcpy(b, "data: ", 6);
    memcpy(b + 6, json, n);
    memcpy(b + 6 + n, "\n\n", 2);
    httpd_stream_write(q->c, b, n + 8);
    if (b != stackbuf)
        free(b);
}

/* "data: JSON\n\n" at dst; returns its length (dst holds n + 8 bytes). */
static size_t event_into(char *dst, const char *json, size_t n)
{
    memcpy(dst, "data: ", 6);
    memcpy(dst + 6, json, n);
    memcpy(dst + 6 + n, "\n\n", 2);
    return n + 8;
}

/* A delta event's JSON in buf (cap bytes); returns its length, or 0 when it
 * does not fit. */
static size_t delta_json(struct sreq *q, const char *content, const char *finish, char *buf, size_t cap);

static void stream_delta(struct sreq *q, const char *content, const char *finish)
{
    char buf[1024];
    size_t n = delta_json(q, content, finish, buf, sizeof buf);
    if (n)
        write_event(q, buf, n);
}

static size_t delta_json(struct sreq *q, const char *content, const char *finish, char *buf, size_t cap)
{
    int n;
    char fin[32];
    if (finish)
        snprintf(fin, sizeof fin, "\"%s\"", finish);
    else
        strcpy(fin, "null");
    if (q->chat)
        n = snprintf(buf, cap,
                     "{\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%ld,"
                     "\"model\":\"%s\",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"%s\"},"
                     "\"finish_reason\":%s}]}",
                     q->id, q->created, q->s->model, q->emitted == 0 ? "\"role\":\"assistant\"," : "",
                     content, fin);
    else
        n = snprintf(buf, cap,
                     "{\"id\":\"%s\",\"object\":\"text_completion\",\"created\":%ld,"
                     "\"model\":\"%s\",\"choices\":[{\"index\":0,\"text\":\"%s\","
                     "\"finish_reason\":%s}]}",
                     q->id, q->created, q->s->model, content, fin);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static json_t *usage_json(struct sreq *q)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)q->call.prompt_tokens,
                     "completion_tokens", (json_int_t)q->emitted, "total_tokens",
                     (json_int_t)(q->call.prompt_tokens + q->emitted), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)(q->call.cached_tokens > 0 ? q->call.cached_tokens : 0));
}

static void cancel_cb(struct loop *l, struct loop_timer *t)
{
    struct sreq *q = t->arg;
    struct srv *s = q->s;
    if (!q->done) {
        int fz = loop_scaled_freeze(s->tloop);
        target_cancel(s->tg, &q->call); /* q may be freed from here on */
        loop_scaled_thaw(s->tloop, fz);
    }
}

/* Cancels the backend's work soon (never from inside its own callback). */
static void cancel_soon(struct sreq *q)
{
    if (q->cancel_pending || q->done)
        return;
    q->cancel_pending = 1;
    loop_at(q->s->loop, &q->cancel_timer, loop_now(q->s->loop), cancel_cb, q);
}

static void client_gone(void *ctx)
{
    struct sreq *q = ctx;
    q->c = NULL;
    q->s->client_gone++;
    if (!q->submitted) {
        sreq_free(q);
        return;
    }
    cancel_soon(q);
}

static void on_first(struct target_call *c, int64_t t) {}

static void on_chunk(struct target_call *c, int64_t t, int64_t tokens)
{
    struct sreq *q = c->arg;
    struct srv *s = q->s;
    s->output_tokens += tokens;
    if (!q->c) {
        q->emitted += tokens;
        return;
    }
    if (q->stream) {
        char content[1024];
        words(q->emitted, tokens, content, sizeof content);
        stream_delta(q, content, NULL);
    } else {
        size_t need = q->text_len + (size_t)tokens * 16 + 1;
        if (need > q->text_cap) {
            q->text_cap = need * 2;
            q->text = xrealloc(q->text, q->text_cap);
        }
        q->text_len += words(q->emitted, tokens, q->text + q->text_len, q->text_cap - q->text_len);
    }
    q->emitted += tokens;
    if (q->c && q->disconnect_at >= 0 && q->emitted >= q->disconnect_at) {
        s->faults_disconnect++;
        httpd_conn_abort(q->c);
        q->c = NULL;
        cancel_soon(q);
    }
}

static void on_done(struct target_call *c, int64_t t, enum target_status st)
{
    struct sreq *q = c->arg;
    struct srv *s = q->s;
    q->done = 1;
    s->running--;
    s->prompt_tokens += c->prompt_tokens;
    s->cached_tokens += c->cached_tokens > 0 ? c->cached_tokens : 0;
    /* Served: the backend finished and the client is still there to get it. */
    if (st == TARGET_OK && q->c)
        s->completions_ok++;
    else
        s->completions_failed++;
    struct httpd_conn *hc = q->c;
    if (hc) {
        if (q->stream) {
            if (st == TARGET_OK) {
                /* The finish event, usage, [DONE] and the stream's end go
                 * out in one write. */
                char dj[1024];
                size_t dn = delta_json(q, "", "length", dj, sizeof dj);
                char *b = NULL;
                if (q->include_usage) {
                    json_t *j = json_pack("{s:s,s:s,s:i,s:s,s:[],s:o}", "id", q->id, "object",
                                          q->chat ? "chat.completion.chunk" : "text_completion",
                                          "created", (int)q->created, "model", s->model, "choices",
                                          "usage", usage_json(q));
                    b = json_dumps(j, JSON_COMPACT);
                    json_decref(j);
                }
                size_t bn = b ? strlen(b) : 0, k = 0;
                char *tail = xmalloc(dn + bn + 6 + 3 * 8);
                if (dn)
                    k += event_into(tail + k, dj, dn);
                if (b)
                    k += event_into(tail + k, b, bn);
                k += event_into(tail + k, "[DONE]", 6);
                free(b);
                httpd_stream_end_with(hc, tail, k);
                free(tail);
                sreq_free(q);
                return;
            } else {
                json_t *j = json_pack("{s:{s:s,s:s}}", "error", "message",
                                      c->error[0] ? c->error : target_status_name(st), "type",
                                      target_status_name(st));
                char *b = json_dumps(j, JSON_COMPACT);
                write_event(q, b, strlen(b));
                free(b);
                json_decref(j);
            }
            if (q->c)
                write_event(q, "[DONE]", 6);
            if (q->c)
                httpd_stream_end(q->c);
        } else if (st == TARGET_OK) {
            json_t *choice;
            if (q->chat)
                choice = json_pack("{s:i,s:{s:s,s:s%},s:s}", "index", 0, "message", "role",
                                   "assistant", "content", q->text ? q->text : "", q->text_len,
                                   "finish_reason", "length");
            else
                choice = json_pack("{s:i,s:s%,s:s}", "index", 0, "text", q->text ? q->text : "",
                                   q->text_len, "finish_reason", "length");
            json_t *j = json_pack("{s:s,s:s,s:i,s:s,s:[o],s:o}", "id", q->id, "object",
                                  q->chat ? "chat.completion" : "text_completion", "created",
                                  (int)q->created, "model", s->model, "choices", choice, "usage",
                                  usage_json(q));
            respond_json(hc, 200, j);
        } else {
            int status = st == TARGET_ERR_TOO_LONG || st == TARGET_ERR_NO_SPACE ? 400 : 500;
            respond_error(hc, status, target_status_name(st), c->error[0] ? c->error : target_status_name(st));
        }
    }
    sreq_free(q);
}

static const struct target_cb serve_cb = {on_first, on_chunk, on_done};

static void submit_now(struct sreq *q)
{
    char err[ERR_LEN];
    struct srv *s = q->s;
    int fz = loop_scaled_freeze(s->tloop);
    q->call.start_ns = loop_now(s->tloop);
    int rc = target_submit(s->tg, &q->call, err);
    loop_scaled_thaw(s->tloop, fz);
    if (rc) {
        s->completions_failed++;
        if (q->c)
            respond_error(q->c, 400, "invalid_request_error", err);
        sreq_free(q);
        return;
    }
    q->submitted = 1;
    s->running++;
    if (q->stream && q->c)
        httpd_stream_begin(q->c, 200, "text/event-stream");
}

static void stall_cb(struct loop *l, struct loop_timer *t) { submit_now(t->arg); }

/* Appends a message's content (string, or parts with "text") to *buf. */
static void append_text(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 2 > *cap) {
        *cap = (*len + n + 2) * 2;
        *buf = xrealloc(*buf, *cap);
    }
    if (*len)
        (*buf)[(*len)++] = ' ';
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

static int prompt_of(json_t *req, int chat, struct sreq *q, char *err)
{
    char *text = NULL;
    size_t len = 0, cap = 0;
    int64_t *ids = NULL;
    size_t n_ids = 0;
    if (chat) {
        json_t *msgs = json_object_get(req, "messages");
        if (!json_is_array(msgs) || !json_array_size(msgs))
            return err_set(err, "messages: a non-empty array is required");
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m)
        {
            json_t *content = json_object_get(m, "content");
            if (json_is_string(content)) {
                append_text(&text, &len, &cap, json_string_value(content), json_string_length(content));
            } else if (json_is_array(content)) {
                size_t k;
                json_t *part;
                json_array_foreach(content, k, part)
                {
                    json_t *t = json_object_get(part, "text");
                    if (json_is_string(t))
                        append_text(&text, &len, &cap, json_string_value(t), json_string_length(t));
                }
            } else if (!json_is_null(content) && content) {
                free(text);
                return err_set(err, "messages[%zu].content: a string or an array of parts", i);
            }
        }
    } else {
        json_t *p = json_object_get(req, "prompt");
        if (json_is_string(p)) {
            append_text(&text, &len, &cap, json_string_value(p), json_string_length(p));
        } else if (json_is_array(p) && json_array_size(p) && json_is_integer(json_array_get(p, 0))) {
            n_ids = json_array_size(p);
            ids = xmalloc(n_ids * sizeof *ids);
            for (size_t i = 0; i < n_ids; i++) {
                json_t *v = json_array_get(p, i);
                if (!json_is_integer(v)) {
                    free(ids);
                    return err_set(err, "prompt[%zu]: token ids must be integers", i);
                }
                ids[i] = json_integer_value(v);
            }
        } else if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) {
            json_t *v = json_array_get(p, 0);
            append_text(&text, &len, &cap, json_string_value(v), json_string_length(v));
        } else {
            return err_set(err, "prompt: a string, or an array of token ids (batches are not supported)");
        }
    }
    uint32_t nb = 0;
    int64_t tokens;
    if (ids) {
        tokens = prompt_blocks_ids(ids, n_ids, SERVE_CHUNK_TOKENS, NULL, 0, &nb);
        q->blocks = xmalloc((nb + 1) * sizeof *q->blocks);
        prompt_blocks_ids(ids, n_ids, SERVE_CHUNK_TOKENS, q->blocks, nb, &nb);
    } else {
        tokens = prompt_blocks_text(text ? text : "", len, SERVE_CHUNK_TOKENS, NULL, 0, &nb);
        q->blocks = xmalloc((nb + 1) * sizeof *q->blocks);
        prompt_blocks_text(text ? text : "", len, SERVE_CHUNK_TOKENS, q->blocks, nb, &nb);
    }
    free(text);
    free(ids);
    if (tokens < 1)
        return err_set(err, "the prompt is empty");
    q->call.prompt_tokens = tokens;
    q->call.blocks = q->blocks;
    q->call.n_blocks = nb;
    q->call.trace_block_size = SERVE_CHUNK_TOKENS;
    return 0;
}

static void handle_completion(struct srv *s, struct httpd_conn *c, const struct httpd_request *r,
                              int chat)
{
    char err[ERR_LEN];
    s->completions++;
    /* Two fault draws per request, always. */
    double u_err = rng_uniform(&s->fault_rng), u_disc = rng_uniform(&s->fault_rng);
    double u_stall = rng_uniform(&s->fault_rng);
    uint64_t cut = rng_next(&s->fault_rng);
    json_error_t je;
    json_t *req = json_loadb(r->body, r->body_len, 0, &je);
    if (!req || !json_is_object(req)) {
        snprintf(err, sizeof err, "request body: %s at line %d column %d", req ? "not an object" : je.text,
                 je.line, je.column);
        json_decref(req);
        respond_error(c, 400, "invalid_request_error", err);
        return;
    }
    struct sreq *q = xcalloc(1, sizeof *q);
    q->s = s;
    q->next = s->live;
    if (s->live)
        s->live->prev = q;
    s->live = q;
    q->c = c;
    q->chat = chat;
    q->disconnect_at = -1;
    q->created = (long)time(NULL);
    snprintf(q->id, sizeof q->id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)++s->next_id);
    json_t *mt = json_object_get(req, "max_tokens");
    if (!mt || json_is_null(mt))
        mt = json_object_get(req, "max_completion_tokens");
    int64_t max_tokens = json_is_integer(mt) ? json_integer_value(mt) : 16;
    q->stream = json_is_true(json_object_get(req, "stream"));
    q->include_usage = json_is_true(json_object_get(json_object_get(req, "stream_options"), "include_usage"));
    json_t *user = json_object_get(req, "user");
    if (json_is_string(user))
        q->call.session_key = hash64(json_string_value(user), json_string_length(user), 0x75736572ull);
    int rc = max_tokens < 1 ? err_set(err, "max_tokens must be >= 1") : prompt_of(req, chat, q, err);
    json_decref(req);
    if (rc) {
        s->completions_failed++;
        respond_error(c, 400, "invalid_request_error", err);
        sreq_free(q);
        return;
    }
    if (u_err < s->fault_error_rate) {
        s->faults_error++;
        respond_error(c, 500, "injected_fault", "injected fault: internal error");
        sreq_free(q);
        return;
    }
    if (u_disc < s->fault_disconnect_rate) {
        if (!q->stream) {
            s->faults_disconnect++;
            httpd_conn_abort(c);
            sreq_free(q);
            return;
        }
        q->disconnect_at = 1 + (int64_t)(cut % (uint64_t)max_tokens);
        if (q->disconnect_at >= max_tokens)
            q->disconnect_at = max_tokens > 1 ? max_tokens - 1 : 1;
    }
    /* Without a "user", the first chunk's id is the cache key: two prompts
     * can share a prefix only if their first chunks are equal, so keying
     * by it loses no hit, and the affinity router keeps a conversation
     * (whose prompts start alike) on one replica. */
    if (!q->call.session_key && q->call.n_blocks)
        q->call.session_key = q->blocks[0];
    q->call.id = s->next_id;
    q->call.max_tokens = max_tokens;
    q->call.ignore_eos = true;
    q->call.cb = &serve_cb;
    q->call.arg = q;
    httpd_conn_on_close(c, client_gone, q);
    if (s->fault_stall_ns > 0 && u_stall < s->fault_stall_rate) {
        s->faults_stall++;
        loop_at(s->loop, &q->stall_timer, loop_now(s->loop) + s->fault_stall_ns, stall_cb, q);
        return;
    }
    submit_now(q);
}

static void metrics_text(struct srv *s, struct httpd_conn *c)
{
    struct target_stats ts;
    memset(&ts, 0, sizeof ts);
    target_stats(s->tg, &ts);
    char buf[4096];
    double hit = ts.prompt_tokens > 0 ? (double)ts.cached_tokens / (double)ts.prompt_tokens : 0;
    int n = snprintf(
        buf, sizeof buf,
        "# HELP agentreplay_requests_running Requests being served.\n"
        "# TYPE agentreplay_requests_running gauge\nagentreplay_requests_running %lld\n"
        "# HELP agentreplay_requests_waiting Requests queued in the engine.\n"
        "# TYPE agentreplay_requests_waiting gauge\nagentreplay_requests_waiting %lld\n"
        "# HELP agentreplay_kv_cache_usage_ratio KV blocks in use over all blocks.\n"
        "# TYPE agentreplay_kv_cache_usage_ratio gauge\nagentreplay_kv_cache_usage_ratio %.6f\n"
        "# HELP agentreplay_prefix_cache_hit_rate Prompt tokens served from the prefix cache over prompt tokens.\n"
        "# TYPE agentreplay_prefix_cache_hit_rate gauge\nagentreplay_prefix_cache_hit_rate %.6f\n"
        "# TYPE agentreplay_prompt_tokens_total counter\nagentreplay_prompt_tokens_total %lld\n"
        "# TYPE agentreplay_cached_prompt_tokens_total counter\nagentreplay_cached_prompt_tokens_total %lld\n"
        "# TYPE agentreplay_generation_tokens_total counter\nagentreplay_generation_tokens_total %lld\n"
        "# TYPE agentreplay_http_requests_total counter\nagentreplay_http_requests_total %lld\n"
        "# TYPE agentreplay_completions_total counter\nagentreplay_completions_total{status=\"ok\"} %lld\n"
        "agentreplay_completions_total{status=\"failed\"} %lld\n"
        "# TYPE agentreplay_faults_injected_total counter\n"
        "agentreplay_faults_injected_total{kind=\"error\"} %lld\n"
        "agentreplay_faults_injected_total{kind=\"disconnect\"} %lld\n"
        "agentreplay_faults_injected_total{kind=\"stall\"} %lld\n"
        "# TYPE agentreplay_client_disconnects_total counter\nagentreplay_client_disconnects_total %lld\n"
        "# TYPE agentreplay_preemptions_total counter\nagentreplay_preemptions_total %lld\n",
        (long long)(ts.running >= 0 ? ts.running : s->running), (long long)(ts.waiting > 0 ? ts.waiting : 0),
        ts.kv_used_frac > 0 ? ts.kv_used_frac : 0.0, hit, (long long)ts.prompt_tokens,
        (long long)ts.cached_tokens, (long long)ts.output_tokens, (long long)s->http_requests,
        (long long)s->completions_ok, (long long)s->completions_failed, (long long)s->faults_error,
        (long long)s->faults_disconnect, (long long)s->faults_stall, (long long)s->client_gone,
        (long long)ts.preemptions);
    httpd_respond(c, 200, "text/plain; version=0.0.4", buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
}

static int auth_ok(struct srv *s, const struct httpd_request *r)
{
    if (!s->api_key[0])
        return 1;
    if (!r->authorization || strncmp(r->authorization, "Bearer ", 7))
        return 0;
    return !strcmp(r->authorization + 7, s->api_key);
}

static void handler(struct httpd_conn *c, const struct httpd_request *r, void *arg)
{
    struct srv *s = arg;
    s->http_requests++;
    int get = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
    if (get && !strcmp(r->path, "/health")) {
        httpd_respond(c, 200, "text/plain", "ok\n", 3);
        return;
    }
    if (!auth_ok(s, r)) {
        respond_error(c, 401, "authentication_error", "missing or wrong API key");
        return;
    }
    if (get && !strcmp(r->path, "/metrics")) {
        metrics_text(s, c);
        return;
    }
    if (get && !strcmp(r->path, "/v1/models")) {
        respond_json(c, 200, json_pack("{s:s,s:[{s:s,s:s,s:i,s:s}]}", "object", "list", "data", "id",
                                       s->model, "object", "model", "created", 0, "owned_by",
                                       "agentreplay"));
        return;
    }
    int chat = !strcmp(r->path, "/v1/chat/completions");
    if (chat || !strcmp(r->path, "/v1/completions")) {
        if (!post) {
            respond_error(c, 405, "invalid_request_error", "use POST");
            return;
        }
        handle_completion(s, c, r, chat);
        return;
    }
    respond_error(c, 404, "not_found", "no such endpoint");
}

/* ---- signals: a self-pipe read on the loop ---- */

static int g_sig_fd = -1;
static void on_signal(int sig)
{
    if (g_sig_fd >= 0) {
        char b = (char)sig;
        ssize_t w = write(g_sig_fd, &b, 1);
        (void)w;
    }
}

static void sig_cb(struct loop *l, struct loop_io *io, int revents)
{
    char b[16];
    ssize_t n = read(io->fd, b, sizeof b);
    (void)n;
    loop_stop(l);
}

/* ---- the command ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: agentreplay serve [--listen HOST:PORT] [engine flags] [options]\n"
            "Serves the simulated engine over an OpenAI-compatible HTTP API in real time.\n"
            "  --listen HOST:PORT        default 127.0.0.1:8000 (port 0: any free port)\n"
            "  --port-file PATH          write the port there once listening\n"
            "  --served-model-name NAME  model name reported (default: the engine's model)\n"
            "  --time-scale X            engine clock runs X times faster than real time (1)\n"
            "  --api-key K               require 'Authorization: Bearer K' (required\n"
            "                            when not listening on loopback)\n"
            "  --fake                    a fixed-rate model instead of the engine\n"
            "                            (--fake-ttft-ms 20, --fake-tpot-ms 10,\n"
            "                            --fake-prefill-us-per-token 0)\n"
            "  --max-body-mb N           request size limit (64)\n"
            "  --max-conns N             connection limit (16384)\n"
            "  --fault-error-rate P      answer 500 to a fraction P of completions\n"
            "  --fault-disconnect-rate P cut a fraction P of streams mid-way\n"
            "  --fault-stall-ms MS       hold requests MS before serving them\n"
            "  --fault-stall-rate P      fraction held (default 1 when --fault-stall-ms)\n"
            "  --fault-seed S            seed of the fault draws (1)\n"
            "The engine runs stepwise and each chunk is streamed when produced;\n"
            "chunks a stream produces in the same loop iteration leave in one\n"
            "write (the fast mode for load tests: --fake --fake-ttft-ms 0\n"
            "--fake-tpot-ms 0, or a large --time-scale).\n\n%s",
            engine_flags_help);
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int serve_cmd(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    char host[256] = "127.0.0.1";
    int port = 8000;
    const char *port_file = NULL;
    double time_scale = 1, fake_ttft_ms = 20, fake_tpot_ms = 10, fake_prefill_us = 0;
    double max_body_mb = 64, max_conns = 16384;
    double fault_seed = 1;
    int fake = 0;
    struct engine_config ecfg;
    memset(&ecfg, 0, sizeof ecfg);
    engine_config_defaults(&ecfg);
    struct srv *s = xcalloc(1, sizeof *s);
    s->fault_stall_rate = -1;
    s->sig_pipe[0] = s->sig_pipe[1] = -1;
    int rc = EXIT_BADINPUT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(s);
            return EXIT_OK;
        }
        {
            int k = engine_config_flag(&ecfg, argc, argv, &i, err);
            if (k < 0) {
                fprintf(stderr, "serve: %s\n", err);
                goto out;
            }
            if (k > 0) {
                i--; /* it advanced past its value; the loop adds one */
                continue;
            }
        }
        if (!strcmp(a, "--fake")) {
            fake = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "serve: unknown flag or missing value: %s\n", a);
            goto out;
        }
        int bad = 0;
        i++;
        if (!strcmp(a, "--listen")) {
            const char *colon = strrchr(v, ':');
            if (!colon || (size_t)(colon - v) >= sizeof host) {
                bad = 1;
            } else {
                memcpy(host, v, (size_t)(colon - v));
                host[colon - v] = 0;
                char *end;
                long p = strtol(colon + 1, &end, 10);
                bad = *end || p < 0 || p > 65535;
                port = (int)p;
            }
        } else if (!strcmp(a, "--port-file")) {
            port_file = v;
        } else if (!strcmp(a, "--served-model-name")) {
            snprintf(s->model, sizeof s->model, "%s", v);
        } else if (!strcmp(a, "--api-key")) {
            snprintf(s->api_key, sizeof s->api_key, "%s", v);
        } else if (!strcmp(a, "--time-scale")) {
            bad = parse_double(v, 1e-3, 1e6, &time_scale);
        } else if (!strcmp(a, "--fake-ttft-ms")) {
            bad = parse_double(v, 0, 1e7, &fake_ttft_ms);
        } else if (!strcmp(a, "--fake-tpot-ms")) {
            bad = parse_double(v, 0, 1e7, &fake_tpot_ms);
        } else if (!strcmp(a, "--fake-prefill-us-per-token")) {
            bad = parse_double(v, 0, 1e7, &fake_prefill_us);
        } else if (!strcmp(a, "--max-body-mb")) {
            bad = parse_double(v, 0.001, 4096, &max_body_mb);
        } else if (!strcmp(a, "--max-conns")) {
            bad = parse_double(v, 1, 1e6, &max_conns);
        } else if (!strcmp(a, "--fault-error-rate")) {
            bad = parse_double(v, 0, 1, &s->fault_error_rate);
        } else if (!strcmp(a, "--fault-disconnect-rate")) {
            bad = parse_double(v, 0, 1, &s->fault_disconnect_rate);
        } else if (!strcmp(a, "--fault-stall-rate")) {
            bad = parse_double(v, 0, 1, &s->fault_stall_rate);
        } else if (!strcmp(a, "--fault-stall-ms")) {
            double ms;
            bad = parse_double(v, 0, 1e7, &ms);
            s->fault_stall_ns = (int64_t)(ms * NS_PER_MS);
        } else if (!strcmp(a, "--fault-seed")) {
            bad = parse_double(v, 0, 1.8e19, &fault_seed);
        } else {
            fprintf(stderr, "serve: unknown flag %s (see --help)\n", a);
            goto out;
        }
        if (bad) {
            fprintf(stderr, "serve: bad value for %s: '%s'\n", a, v);
            goto out;
        }
    }
    if (s->fault_stall_rate < 0)
        s->fault_stall_rate = 1;
    int loopback = !strncmp(host, "127.", 4) || !strcmp(host, "localhost");
    if (!loopback && !s->api_key[0]) {
        fprintf(stderr, "serve: listening on %s (not loopback) needs --api-key\n", host);
        goto out;
    }
    rng_init(&s->fault_rng, (uint64_t)fault_seed, RNG_FAULT);
    s->loop = loop_real_create();
    if (!s->loop) {
        fprintf(stderr, "serve: cannot create the event loop\n");
        rc = EXIT_FAIL;
        goto out;
    }
    s->tloop = loop_scaled_create(s->loop, time_scale);
    if (fake) {
        struct target_fake_config fc = {
            .overhead_ns = (int64_t)(fake_ttft_ms * NS_PER_MS),
            .prefill_ns_per_token = (int64_t)(fake_prefill_us * NS_PER_US),
            .tpot_ns = (int64_t)(fake_tpot_ms * NS_PER_MS),
            .chunk_tokens = 1,
            .gpus = 1,
            .cache = true,
        };
        s->tg = target_fake_create(&fc, s->tloop);
        if (!s->model[0])
            snprintf(s->model, sizeof s->model, "fake");
    } else {
        ecfg.stepwise = true;
        s->tg = target_engine_create(&ecfg, s->tloop, err);
        if (!s->tg) {
            fprintf(stderr, "serve: %s\n", err);
            goto out;
        }
        if (!s->model[0])
            snprintf(s->model, sizeof s->model, "%s", ecfg.model[0] ? ecfg.model : "engine");
    }
    struct httpd_limits lim;
    httpd_limits_defaults(&lim);
    lim.max_body_bytes = (size_t)(max_body_mb * 1024 * 1024);
    lim.max_conns = (int)max_conns;
    s->httpd = httpd_create(s->loop, &lim, handler, s);
    if (httpd_listen(s->httpd, host, port, err)) {
        fprintf(stderr, "serve: %s\n", err);
        rc = EXIT_FAIL;
        goto out;
    }
    if (pipe2(s->sig_pipe, O_NONBLOCK | O_CLOEXEC) == 0) {
        g_sig_fd = s->sig_pipe[1];
        s->sig_io.fd = s->sig_pipe[0];
        s->sig_io.events = LOOP_READ;
        s->sig_io.cb = sig_cb;
        s->sig_io.arg = s;
        loop_io_start(s->loop, &s->sig_io);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "serve: listening on http://%s:%d (model %s, %s, time scale %g)\n", host,
            httpd_port(s->httpd), s->model, fake ? "fake backend" : "engine", time_scale);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *pf = fopen(tmp, "w");
        if (pf) {
            fprintf(pf, "%d\n", httpd_port(s->httpd));
            fclose(pf);
            rename(tmp, port_file);
        }
    }
    loop_run(s->loop);
    fprintf(stderr, "serve: stopped after %lld requests (%lld completions ok, %lld failed)\n",
            (long long)s->http_requests, (long long)s->completions_ok, (long long)s->completions_failed);
    rc = EXIT_OK;
out:
    if (s->httpd)
        httpd_destroy(s->httpd);
    /* Requests still live: cancel what the backend holds, free the rest. */
    while (s->live) {
        struct sreq *q = s->live;
        q->c = NULL;
        if (q->submitted && !q->done) {
            int fz = loop_scaled_freeze(s->tloop);
            target_cancel(s->tg, &q->call);
            loop_scaled_thaw(s->tloop, fz);
        }
        if (s->live == q)
            sreq_free(q);
    }
    if (s->tg)
        target_destroy(s->tg);
    if (s->sig_pipe[0] >= 0) {
        g_sig_fd = -1;
        if (s->loop)
            loop_io_stop(s->loop, &s->sig_io);
        close(s->sig_pipe[0]);
        close(s->sig_pipe[1]);
    }
    if (s->tloop && s->tloop != s->loop)
        loop_destroy(s->tloop);
    loop_destroy(s->loop);
    free(s);
    return rc;
}
