/* http_target.h: a live OpenAI-compatible endpoint as a replay target
 * (target.h), for `load`.
 *
 * libcurl's multi socket API on the loop (real clock): each call is one
 * streamed POST to /v1/chat/completions or /v1/completions over HTTP/1.1
 * keep-alive connections (TLS when the URL is https), with
 * stream_options.include_usage, max_tokens = the call's max_tokens and
 * ignore_eos when asked. The prompt is synthesized from the call's block
 * chain (prompt.h): a body over 32 KiB is generated as it is sent
 * (chunked), never held whole; a shorter one is rendered at once and sent
 * with the headers (one packet, no 16 KiB upload buffer in curl), and
 * freed when the answer begins.
 *
 * Per call it reports the first non-empty chunk, every chunk (one token
 * per content chunk; the last chunk is deferred until the stream ends so
 * that the server's usage.completion_tokens, when reported, makes the
 * total exact), the server's usage (prompt, completion and
 * prompt_tokens_details.cached_tokens) and errors: HTTP status (non-2xx),
 * transport errors, connect / read timeouts, malformed streams (bad JSON,
 * an error event, no [DONE]).
 */
#ifndef HTTP_TARGET_H
#define HTTP_TARGET_H

#include <stdint.h>

#include "engine/target.h"
#include "replay/http_shape.h"
#include "traces/prompt.h"

enum http_endpoint { HTTP_EP_CHAT = 0, HTTP_EP_COMPLETIONS = 1 };

struct http_target_config {
    char url[512];              /* base URL, e.g. http://127.0.0.1:8000 */
    enum http_endpoint endpoint;
    enum prompt_mode prompt_mode; /* PROMPT_TOKENS needs HTTP_EP_COMPLETIONS */
    char api_key[256];          /* "" for none */
    char model[128];            /* model name sent in requests */
    int64_t connect_timeout_ns; /* default 10 s */
    int64_t read_timeout_ns;    /* longest silence within a call (default
                                   600 s) */
    uint64_t seed;              /* salts the session markers of prompts */
    int max_connections;        /* connection cache size (default 16384) */
    int gpus;                   /* deployment size, for per-GPU figures */
};

void http_target_config_defaults(struct http_target_config *c);
struct target *http_target_create(const struct http_target_config *cfg, struct loop *l,
                                  char *err);

/* Stops sending (an interrupt's grace period): calls submitted from now on
 * are held, never sent, until cancelled (done: TARGET_ERR_CANCELLED). */
void http_target_hold(struct target *t);
/* Calls sent and not yet done. */
int64_t http_target_inflight(const struct target *t);

struct http_target_counts {
    uint64_t submitted, held, ok, http_errors, transport_errors, timeouts, malformed, cancelled;
    uint64_t bytes_sent, bytes_received, chunks;
    uint64_t templated; /* content events recognised by template, not parsed (http_shape.h) */
    uint64_t shaped;    /* events recognised by shape, not parsed */
    uint64_t parsed;    /* events parsed with Jansson */
};
void http_target_counts(const struct target *t, struct http_target_counts *out);

/* Asks GET {url}/v1/models (blocking, before a run) for the first model's
 * id. 0, or -1 with err set. */
int http_target_fetch_model(const struct http_target_config *cfg, char *model, size_t n,
                            char *err);
/* An asynchronous GET on the target's loop and connections (Prometheus
 * scrapes during a run): cb gets the status (0 on a transport error) and
 * the body (at most 4 MiB, NUL-terminated). Returns 0 or -1. */
typedef void (*http_get_cb)(void *arg, int status, const char *body, size_t len);
int http_target_get(struct target *t, const char *url, http_get_cb cb, void *arg);

#endif
