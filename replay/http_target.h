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
 * per content chunk; the last chunk is held until the stream ends so that
 * the server's usage.completion_tokens, when reported, makes the total
 * exact), the server's usage (prompt, completion and
 * prompt_tokens_details.cached_tokens) and errors: HTTP status (non-2xx),
 * transport errors, connect / read timeouts, malformed streams (bad JSON,
 * an error event, no [DONE]).
 */
#ifndef HTTP_TARGET_H
#define HTTP_TARGET_H

#include <stdint.h>

#include "traces/prompt.h"
#include "engine/target.h"

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
    uint64_t templated; /* content events recognised by template, not parsed (http_target.c) */
    uint64_t shaped;    /* events recognised by shape, not parsed */
    uint64_t parsed;    /* events parsed with Jansson */
};
void http_target_counts(const struct target *t, struct http_target_counts *out);

/* Content-event templates (used per call in http_target.c; declared here
 * for tests). A template is a content event Jansson parsed (non-empty
 * content, no usage, no error) cut around the unique `:"CONTENT"` in it;
 * an event that is the template with that string body replaced by another
 * non-empty one needing no escapes is the same document with one string
 * changed: a content chunk without usage or error, so it needs no parse. */
struct http_tpl {
    char *buf;                /* the template event, NULL if none */
    size_t pre, suf, len;     /* content body at [pre, suf) of len bytes */
};
/* Learns from an event and its parsed content; 1 if a template was kept,
 * 0 if none (content absent, escaped, or not found exactly once). */
int http_tpl_learn(struct http_tpl *t, const char *ev, size_t n, const char *content, size_t clen);
/* 1 if ev matches: a content chunk with no usage and no error. */
int http_tpl_match(const struct http_tpl *t, const char *ev, size_t n);
void http_tpl_free(struct http_tpl *t);

/* Event shapes (target-wide, across calls; declared here for tests).
 * OpenAI-compatible servers send the same few event shapes in every call
 * (the first chunk with the role, content chunks, the finish chunk, the
 * usage chunk), differing only in a few scalar values: the id, "created",
 * the content string, the usage counts. A shape is an event Jansson parsed
 * (no backslash anywhere in it, no error) with holes at those values: the
 * string bodies after the unique `"id":"` and `"content":"` (`"text":"`
 * on /v1/completions) and the integers after the unique `"created":`,
 * `"prompt_tokens":`, `"completion_tokens":`, `"total_tokens":`,
 * `"cached_tokens":`, each checked equal to the value Jansson read at its
 * path. An event that is the shape with each string hole filled by a body
 * needing no escapes (no quote, backslash or control character; valid
 * UTF-8) and each integer hole by 1-18 digits without a leading zero is
 * the same document with those values changed, so its meaning is read
 * from the holes without a parse. */
#define HTTP_SHAPE_HOLES 8
#define HTTP_SHAPES 8
struct http_shape {
    char *buf;                  /* the learned event, NULL if none */
    size_t len;
    int n_holes;
    struct {
        size_t at, end;         /* the value's bytes in buf */
        unsigned char is_int, role; /* role: enum in http_target.c */
    } hole[HTTP_SHAPE_HOLES];
    int usage;                  /* the event has a usage object */
};
struct http_shape_set {
    struct http_shape s[HTTP_SHAPES];
    int next;                   /* the slot the next shape replaces */
    int last;                   /* the slot that matched last */
};
/* What an event means (as on_event reads it from Jansson). */
struct http_event {
    int content;                /* a non-empty content string */
    int usage;                  /* a usage object */
    int64_t prompt_tokens, completion_tokens, cached_tokens; /* -1: absent */
};
/* Learns a shape from an event and its parse (a json_t * object without
 * "error"); chat: /v1/chat/completions. 1 if kept, 0 if not (escapes,
 * ambiguous or spaced keys, a value not found where Jansson read it). */
int http_shape_learn(struct http_shape_set *set, const char *ev, size_t n, const void *json, int chat);
/* 1 and *out if ev matches a shape, 0 if it needs a parse. */
int http_shape_match(struct http_shape_set *set, const char *ev, size_t n, struct http_event *out);
/* What Jansson reads from a parsed event (the reference for the above). */
void http_event_of(const void *json, int chat, struct http_event *out);
void http_shape_set_free(struct http_shape_set *set);

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
