/* openai.c: the OpenAI-compatible API over a simulated target (openai.h):
 * request parsing, the server-sent events, /metrics, faults and the
 * backend's construction. */
#include "engine/server/openai.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/target.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/list.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/base/time_ns.h"
#include "traces/prompt.h"

#define SERVE_CHUNK_TOKENS 64

/* ---- the server ---- */

struct openai_server {
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
    struct list_node live;  /* requests not yet freed, newest first */
};

struct openai_request {
    struct target_call call;
    struct openai_server *s;
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
    struct list_node node;    /* in the server's live list */
};

static void request_free(struct openai_request *q)
{
    list_remove(&q->node);
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

static void write_event(struct openai_request *q, const char *json, size_t n)
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
static size_t delta_json(struct openai_request *q, const char *content, const char *finish, char *buf, size_t cap);

static void stream_delta(struct openai_request *q, const char *content, const char *finish)
{
    char buf[1024];
    size_t n = delta_json(q, content, finish, buf, sizeof buf);
    if (n)
        write_event(q, buf, n);
}

static size_t delta_json(struct openai_request *q, const char *content, const char *finish, char *buf, size_t cap)
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

static json_t *usage_json(struct openai_request *q)
{
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)q->call.prompt_tokens,
                     "completion_tokens", (json_int_t)q->emitted, "total_tokens",
                     (json_int_t)(q->call.prompt_tokens + q->emitted), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)(q->call.cached_tokens > 0 ? q->call.cached_tokens : 0));
}

static void cancel_cb(struct loop *l, struct loop_timer *t)
{
    struct openai_request *q = t->arg;
    struct openai_server *s = q->s;
    if (!q->done) {
        int fz = loop_scaled_freeze(s->tloop);
        target_cancel(s->tg, &q->call); /* q may be freed from here on */
        loop_scaled_thaw(s->tloop, fz);
    }
}

/* Cancels the backend's work soon (never from inside its own callback). */
static void cancel_soon(struct openai_request *q)
{
    if (q->cancel_pending || q->done)
        return;
    q->cancel_pending = 1;
    loop_at(q->s->loop, &q->cancel_timer, loop_now(q->s->loop), cancel_cb, q);
}

static void client_gone(void *ctx)
{
    struct openai_request *q = ctx;
    q->c = NULL;
    q->s->client_gone++;
    if (!q->submitted) {
        request_free(q);
        return;
    }
    cancel_soon(q);
}

static void on_first(struct target_call *c, int64_t t) {}

static void on_chunk(struct target_call *c, int64_t t, int64_t tokens)
{
    struct openai_request *q = c->arg;
    struct openai_server *s = q->s;
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
    struct openai_request *q = c->arg;
    struct openai_server *s = q->s;
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
                request_free(q);
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
    request_free(q);
}

static const struct target_cb serve_cb = {on_first, on_chunk, on_done};

static void submit_now(struct openai_request *q)
{
    char err[ERR_LEN];
    struct openai_server *s = q->s;
    int fz = loop_scaled_freeze(s->tloop);
    q->call.start_ns = loop_now(s->tloop);
    int rc = target_submit(s->tg, &q->call, err);
    loop_scaled_thaw(s->tloop, fz);
    if (rc) {
        s->completions_failed++;
        if (q->c)
            respond_error(q->c, 400, "invalid_request_error", err);
        request_free(q);
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

static int prompt_of(json_t *req, int chat, struct openai_request *q, char *err)
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

static void handle_completion(struct openai_server *s, struct httpd_conn *c, const struct httpd_request *r,
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
    struct openai_request *q = xcalloc(1, sizeof *q);
    q->s = s;
    list_push_front(&s->live, &q->node);
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
        request_free(q);
        return;
    }
    if (u_err < s->fault_error_rate) {
        s->faults_error++;
        respond_error(c, 500, "injected_fault", "injected fault: internal error");
        request_free(q);
        return;
    }
    if (u_disc < s->fault_disconnect_rate) {
        if (!q->stream) {
            s->faults_disconnect++;
            httpd_conn_abort(c);
            request_free(q);
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

static void metrics_text(struct openai_server *s, struct httpd_conn *c)
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

static int auth_ok(struct openai_server *s, const struct httpd_request *r)
{
    if (!s->api_key[0])
        return 1;
    if (!r->authorization || strncmp(r->authorization, "Bearer ", 7))
        return 0;
    return !strcmp(r->authorization + 7, s->api_key);
}

static void handler(struct httpd_conn *c, const struct httpd_request *r, void *arg)
{
    struct openai_server *s = arg;
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

/* ---- the server's life ---- */

void openai_config_defaults(struct openai_config *c)
{
    memset(c, 0, sizeof *c);
    engine_config_defaults(&c->engine);
    c->time_scale = 1;
    c->fake_ttft_ms = 20;
    c->fake_tpot_ms = 10;
    c->fault_stall_rate = -1;
    c->fault_seed = 1;
    c->max_body_mb = 64;
    c->max_conns = 16384;
}

struct openai_server *openai_create(const struct openai_config *c, struct loop *l, char *err)
{
    struct openai_server *s = xcalloc(1, sizeof *s);
    list_init(&s->live);
    s->loop = l;
    snprintf(s->model, sizeof s->model, "%s", c->model);
    snprintf(s->api_key, sizeof s->api_key, "%s", c->api_key);
    s->fault_error_rate = c->fault_error_rate;
    s->fault_disconnect_rate = c->fault_disconnect_rate;
    s->fault_stall_rate = c->fault_stall_rate < 0 ? 1 : c->fault_stall_rate;
    s->fault_stall_ns = (int64_t)(c->fault_stall_ms * NS_PER_MS);
    rng_init(&s->fault_rng, c->fault_seed, RNG_FAULT);
    s->tloop = loop_scaled_create(l, c->time_scale);
    if (c->fake) {
        struct target_fake_config fc = {
            .overhead_ns = (int64_t)(c->fake_ttft_ms * NS_PER_MS),
            .prefill_ns_per_token = (int64_t)(c->fake_prefill_us_per_token * NS_PER_US),
            .tpot_ns = (int64_t)(c->fake_tpot_ms * NS_PER_MS),
            .chunk_tokens = 1,
            .gpus = 1,
            .cache = true,
        };
        s->tg = target_fake_create(&fc, s->tloop);
        if (!s->model[0])
            snprintf(s->model, sizeof s->model, "fake");
    } else {
        struct engine_config ec = c->engine;
        ec.stepwise = true;
        s->tg = target_engine_create(&ec, s->tloop, err);
        if (!s->tg) {
            openai_destroy(s);
            return NULL;
        }
        if (!s->model[0])
            snprintf(s->model, sizeof s->model, "%s", ec.model[0] ? ec.model : "engine");
    }
    struct httpd_limits lim;
    httpd_limits_defaults(&lim);
    lim.max_body_bytes = (size_t)(c->max_body_mb * 1024 * 1024);
    lim.max_conns = (int)c->max_conns;
    s->httpd = httpd_create(l, &lim, handler, s);
    return s;
}

int openai_listen(struct openai_server *s, const char *host, int port, char *err)
{
    return httpd_listen(s->httpd, host, port, err);
}

int openai_port(const struct openai_server *s) { return httpd_port(s->httpd); }

const char *openai_model(const struct openai_server *s) { return s->model; }

void openai_get_counts(const struct openai_server *s, struct openai_counts *out)
{
    out->http_requests = s->http_requests;
    out->completions_ok = s->completions_ok;
    out->completions_failed = s->completions_failed;
}

void openai_destroy(struct openai_server *s)
{
    if (!s)
        return;
    if (s->httpd)
        httpd_destroy(s->httpd);
    /* Requests still live: cancel what the backend holds, free the rest. */
    while (!list_empty(&s->live)) {
        struct openai_request *q = LIST_ENTRY(list_first(&s->live), struct openai_request, node);
        q->c = NULL;
        if (q->submitted && !q->done) {
            int fz = loop_scaled_freeze(s->tloop);
            target_cancel(s->tg, &q->call); /* its done frees it */
            loop_scaled_thaw(s->tloop, fz);
        }
        if (list_first(&s->live) == &q->node)
            request_free(q);
    }
    target_destroy(s->tg);
    if (s->tloop && s->tloop != s->loop)
        loop_destroy(s->tloop);
    free(s);
}
