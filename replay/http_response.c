/* http_response.c: the live target's answers: the byte stream of a call
 * parsed into server-sent events, content chunks and usage (by template,
 * by shape, else by Jansson), a scrape's body gathered, and the faults:
 * what a finished transfer amounts to (HTTP error, malformed stream,
 * timeout, transport error) and the read timeout (http_internal.h).
 *
 * Tokens: one per content chunk; the last chunk is deferred until the
 * stream ends, so that the server's usage.completion_tokens, when
 * reported, makes the call's total exact. */
#include "replay/http_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/limits.h"
#include "traces/base/mem.h"

void http_response_deliver_deferred(struct http_xfer *x, int64_t tokens)
{
    if (x->deferred_t_ns < 0)
        return;
    struct target_call *c = x->c;
    if (tokens < 1)
        tokens = 1;
    x->delivered += tokens;
    x->t->stats.output_tokens += tokens;
    c->cb->chunk(c, x->deferred_t_ns, tokens);
    x->deferred_t_ns = -1;
}

/* Notes the first failure of x's stream; the transfer stops reading. */
static void fail(struct http_xfer *x, const char *fmt, const char *detail)
{
    if (x->failed)
        return;
    x->failed = 1;
    snprintf(x->fail_msg, sizeof x->fail_msg, fmt, detail);
}

/* What a call's stream may hold (limits.h): content chunks up to its
 * max_tokens plus a margin, events and bytes in proportion. A server that
 * streams past them (one that never stops) ends the call as a protocol
 * error instead of filling memory and holding the run. */
static int64_t stream_chunks(const struct http_xfer *x)
{
    int64_t m = x->c->max_tokens, margin = m / 4;
    return m + (margin > LIMIT_STREAM_MARGIN_MIN ? margin : LIMIT_STREAM_MARGIN_MIN);
}

static bool stream_over(struct http_xfer *x)
{
    char why[88];
    int64_t chunks = stream_chunks(x);
    if (x->chunks >= chunks)
        snprintf(why, sizeof why, "over %lld content chunks for max_tokens %lld",
                 (long long)chunks, (long long)x->c->max_tokens);
    else if (x->events > chunks * LIMIT_STREAM_EVENTS_PER_CHUNK)
        snprintf(why, sizeof why, "over %lld events for max_tokens %lld",
                 (long long)(chunks * LIMIT_STREAM_EVENTS_PER_CHUNK), (long long)x->c->max_tokens);
    else if (x->bytes > (uint64_t)(chunks * LIMIT_STREAM_BYTES_PER_CHUNK + LIMIT_STREAM_BYTES_BASE))
        snprintf(why, sizeof why, "over %lld bytes for max_tokens %lld",
                 (long long)(chunks * LIMIT_STREAM_BYTES_PER_CHUNK + LIMIT_STREAM_BYTES_BASE),
                 (long long)x->c->max_tokens);
    else
        return false;
    fail(x, "protocol error: %.88s", why);
    return true;
}

/* A content chunk arrived now. */
static void on_content(struct http_xfer *x)
{
    int64_t now = loop_now(x->t->base.loop);
    if (x->chunks == 0)
        x->c->cb->first_token(x->c, now);
    http_response_deliver_deferred(x, 1);
    x->deferred_t_ns = now;
    x->chunks++;
    x->t->counts.chunks++;
}

static int on_event(void *arg, const char *event, const char *data, size_t n)
{
    struct http_xfer *x = arg;
    struct http_target *t = x->t;
    struct target_call *c = x->c;
    x->events++;
    if (stream_over(x))
        return 1;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        x->got_done = 1;
        return 0;
    }
    if (http_tpl_match(&x->tpl, data, n)) {
        t->counts.templated++;
        on_content(x);
        return 0;
    }
    int chat = t->cfg.endpoint == HTTP_EP_CHAT;
    struct http_event ev;
    if (http_shape_match(&t->shapes, data, n, &ev)) {
        t->counts.shaped++;
        if (ev.content)
            on_content(x);
        if (ev.usage) {
            if (ev.prompt_tokens >= 0)
                c->server_prompt_tokens = ev.prompt_tokens;
            if (ev.completion_tokens >= 0)
                c->server_output_tokens = ev.completion_tokens;
            if (ev.cached_tokens >= 0)
                c->cached_tokens = ev.cached_tokens;
            x->got_usage = 1;
        }
        return 0;
    }
    t->counts.parsed++;
    json_error_t je;
    json_t *j = json_loadb(data, n, 0, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        fail(x, "malformed stream: %.90s", j ? "event is not an object" : je.text);
        return 1;
    }
    json_t *err = json_object_get(j, "error");
    if (err) {
        json_t *m = json_is_object(err) ? json_object_get(err, "message") : err;
        fail(x, "error event: %.90s", json_is_string(m) ? json_string_value(m) : "(no message)");
        json_decref(j);
        return 1;
    }
    http_shape_learn(&t->shapes, data, n, j, chat);
    json_t *choices = json_object_get(j, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (ch) {
        json_t *content = chat ? json_object_get(json_object_get(ch, "delta"), "content")
                               : json_object_get(ch, "text");
        if (json_is_string(content) && json_string_length(content) > 0) {
            on_content(x);
            if (!json_object_get(j, "usage"))
                http_tpl_learn(&x->tpl, data, n, json_string_value(content), json_string_length(content));
        }
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens");
        json_t *ct = json_object_get(usage, "completion_tokens");
        json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(pt))
            c->server_prompt_tokens = json_integer_value(pt);
        if (json_is_integer(ct))
            c->server_output_tokens = json_integer_value(ct);
        if (json_is_integer(cached))
            c->cached_tokens = json_integer_value(cached);
        x->got_usage = 1;
    }
    json_decref(j);
    return 0;
}

void http_response_init(struct http_xfer *x) { sse_init(&x->sse, SSE_MAX_EVENT, on_event, x); }

size_t http_response_write(char *ptr, size_t size, size_t nmemb, void *userp)
{
    struct http_xfer *x = userp;
    size_t n = size * nmemb;
    x->t->counts.bytes_received += n;
    x->bytes += n;
    x->last_byte_ns = loop_now(x->t->base.loop);
    if (x->kind == XFER_GET) {
        if (x->glen + n + 1 > GET_MAX_BODY)
            return 0;
        if (x->glen + n + 1 > x->gcap) {
            x->gcap = (x->glen + n + 1) * 2;
            x->gbuf = xrealloc(x->gbuf, x->gcap);
        }
        memcpy(x->gbuf + x->glen, ptr, n);
        x->glen += n;
        x->gbuf[x->glen] = 0;
        return n;
    }
    http_request_answered(x);
    long status = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status && (status < 200 || status > 299)) {
        /* Keep the start of the error body for the message. */
        if (!x->failed) {
            char msg[100];
            size_t k = n < sizeof msg - 1 ? n : sizeof msg - 1;
            memcpy(msg, ptr, k);
            msg[k] = 0;
            for (size_t i = 0; i < k; i++)
                if (msg[i] == '\n' || msg[i] == '\r')
                    msg[i] = ' ';
            fail(x, "%s", msg);
        }
        return n;
    }
    if (x->failed || stream_over(x))
        return 0;
    int rc = sse_feed(&x->sse, ptr, n);
    if (rc == SSE_ERR_TOO_BIG)
        fail(x, "malformed stream: %s", "event over 1 MiB");
    return x->failed ? 0 : n;
}

/* ---- faults and timeouts ---- */

enum target_status http_response_outcome(struct http_target *t, struct http_xfer *x,
                                         CURLcode res, long status, char *msg, size_t n)
{
    msg[0] = 0;
    if (status && (status < 200 || status > 299)) {
        t->counts.http_errors++;
        snprintf(msg, n, "HTTP %ld: %s", status, x->fail_msg);
        return TARGET_ERR_HTTP;
    }
    if (x->failed) {
        t->counts.malformed++;
        snprintf(msg, n, "%s", x->fail_msg);
        return TARGET_ERR_HTTP;
    }
    if (res == CURLE_OPERATION_TIMEDOUT) {
        t->counts.timeouts++;
        snprintf(msg, n, "timeout: %.150s", x->curl_err[0] ? x->curl_err : curl_easy_strerror(res));
        return TARGET_ERR_TIMEOUT;
    }
    if (res != CURLE_OK) {
        t->counts.transport_errors++;
        snprintf(msg, n, "transport: %.150s", x->curl_err[0] ? x->curl_err : curl_easy_strerror(res));
        return TARGET_ERR_OTHER;
    }
    if (!x->got_done || sse_pending(&x->sse)) {
        t->counts.malformed++;
        snprintf(msg, n, "malformed stream: ended without [DONE]");
        return TARGET_ERR_HTTP;
    }
    if (x->chunks == 0) {
        t->counts.malformed++;
        snprintf(msg, n, "malformed stream: no content");
        return TARGET_ERR_HTTP;
    }
    return TARGET_OK;
}

void http_response_read_timeout(struct loop *l, struct loop_timer *tm)
{
    struct http_xfer *x = tm->arg;
    struct http_target *t = x->t;
    int64_t now = loop_now(l);
    if (now - x->last_byte_ns < t->cfg.read_timeout_ns) {
        loop_at(l, tm, x->last_byte_ns + t->cfg.read_timeout_ns, http_response_read_timeout, x);
        return;
    }
    t->counts.timeouts++;
    char msg[96];
    snprintf(msg, sizeof msg, "read timeout: no data for %.3f s", (double)t->cfg.read_timeout_ns / 1e9);
    http_xfer_finish(t, x, TARGET_ERR_TIMEOUT, msg);
}
