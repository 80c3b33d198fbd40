/* openai.h: an OpenAI-compatible HTTP API in front of a simulated target
 * (the engine, or a fixed-rate fake), in real time, on httpd.h, answering
 * as vLLM 0.33's server does (the peer whose clients and dashboards it
 * serves; engine/server/SERVER.md has each route beside vLLM's, with the
 * vLLM source it follows).
 *
 * Routes: POST /v1/chat/completions and /v1/completions (streamed as
 * server-sent events, or whole; `n` choices; batches of prompts on
 * completions), POST /tokenize and /detokenize (the server's own word
 * tokenizer: the counts are the server's prompt counts), GET /v1/models,
 * /health, /ping (GET and POST), /version, /load and /metrics (Prometheus
 * text with vLLM's metric names and buckets, and agentreplay's own). HEAD
 * answers every GET route with its head and no body.
 *
 * The backend runs on its own clock (a scaled clock over the server's real
 * one: time_scale x real time), stepwise, so each chunk of tokens is
 * written when it is produced.
 *
 * Prefix caching follows the prompt content: the prompt's tokens (ids in
 * token mode; whitespace-separated words for text, the server's token
 * count) are cut into chunks of 64 and each chunk gets an id chained over
 * the chunks before it (traces/prompt.h), so identical prefixes hit in
 * the engine's cache and different ones do not. The engine's cache key
 * and routing key (session_key) is the request's "user" field when given,
 * else the id of the prompt's first chunk.
 *
 * Faults for testing clients (seeded, RNG_FAULT; the same draws per
 * completion request whatever happens, so the schedule does not depend on
 * the outcome):
 *   fault_error_rate P       answer 500 without serving the request;
 *   fault_disconnect_rate P  close the connection after a random number of
 *                            tokens (before any byte when whole);
 *   fault_stall_ms MS        hold each request (or a fraction
 *                            fault_stall_rate of them) for MS first.
 *
 * Limits (every size that comes from a client is checked before anything
 * is sized from it; tests/RELIABILITY.md links here):
 *
 * | what                          | limit                         | beyond it                     | flag                  |
 * | ----------------------------- | ----------------------------- | ----------------------------- | --------------------- |
 * | request line + headers        | 16 KiB                        | 431, connection closed        | -                     |
 * | request body                  | 64 MiB                        | 413, connection closed        | --max-body-mb         |
 * | headers complete              | 10 s from the request's start | 408, connection closed        | --header-timeout      |
 * | quiet connection / body pause | 60 s                          | closed (408 inside a body)    | --idle-timeout        |
 * | open connections              | 16384                         | the quietest connection with  | --max-conns           |
 * |                               |                               | no request in progress is     |                       |
 * |                               |                               | closed; refused when none     |                       |
 * | requests per connection       | 10000                         | last answer: Connection: close| --max-conn-requests   |
 * | queued stream bytes per conn  | 4 MiB                         | client dropped as slow        | -                     |
 * | a whole answer                | 256 MiB (HTTPD_MAX_WHOLE)     | client dropped                | -                     |
 * | prompt tokens                 | the model's context           | 400 (vLLM's message)          | --max-model-len       |
 * | max_tokens                    | the model's context; clamped  | 400 (vLLM's message)          | --max-model-len       |
 * |                               | to context - prompt           |                               |                       |
 * | choices (n x prompts)         | OPENAI_MAX_CHOICES (8)        | 400                           | -                     |
 * | served model names            | 16 names of 256 bytes         | refused at start              | --served-model-name   |
 * | API key                       | 1024 bytes, compared whole in | refused at start; requests:   | --api-key             |
 * |                               | constant time                 | 401                           |                       |
 * | Authorization header          | 4096 bytes kept, never cut    | 401                           | -                     |
 * | wrong JSON types              | vLLM's (pydantic's lax) rules | 400 with vLLM's error shape   | -                     |
 *
 * `--fake` obeys the same limits: its context is --max-model-len, else the
 * model preset's maximum, so no request can ask it for more tokens than
 * that, at any fake speed.
 */
#ifndef OPENAI_H
#define OPENAI_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/clock/loop.h"
#include "engine/engine.h"
#include "engine/server/httpd.h"

#define OPENAI_NAMES_MAX 16   /* served names (the first is reported) */
#define OPENAI_NAME_MAX 256   /* bytes of one name */
#define OPENAI_KEY_MAX 1024   /* bytes of the API key */
#define OPENAI_MAX_CHOICES 8  /* n x prompts of one request (vLLM: n up to
                                 16384; here each choice is a whole call
                                 and a whole answer keeps its text) */

struct openai_config {
    struct engine_config engine; /* the backend (stepwise is forced on); its
                                    model and max_model_len also set the
                                    fake's context */
    bool fake;                   /* a fixed-rate model instead of the engine */
    double fake_ttft_ms, fake_tpot_ms, fake_prefill_us_per_token;
    double time_scale;           /* backend clock / real clock */
    const char *names[OPENAI_NAMES_MAX]; /* served names, borrowed; none: the
                                    engine's model, or "fake" */
    int n_names;
    const char *api_key;         /* required as "Bearer K" on /v1 routes;
                                    NULL or "": none */
    const char *version;         /* /version's answer (NULL: "unknown") */
    int64_t default_max_tokens;  /* output length when a request gives none
                                    (0: to the context limit, as vLLM) */
    double fault_error_rate, fault_disconnect_rate;
    double fault_stall_ms;
    double fault_stall_rate;     /* < 0: 1 */
    uint64_t fault_seed;
    double max_body_mb;          /* request size limit */
    double max_conns;            /* connection limit */
    double header_timeout_s, idle_timeout_s;
    int64_t max_conn_requests;
};
/* Defaults: the engine's, time scale 1, fake 20 ms + 10 ms/token, no
 * faults, seed 1, 64 MB, 16384 connections, 10 s / 60 s, 10000 requests
 * per connection. */
void openai_config_defaults(struct openai_config *c);

/* A served name: 1 to OPENAI_NAME_MAX bytes of letters, digits and
 * - _ . / : @ + (model ids and paths as vLLM and the hub write them).
 * 0, or -1 with err. */
int openai_name_check(const char *name, char *err);

struct openai_server;
/* A server on the real-clock loop l (which must outlive it): the backend
 * and the HTTP server, not yet listening. NULL with err set when the
 * configuration is refused (engine layout, names, key). */
struct openai_server *openai_create(const struct openai_config *c, struct loop *l, char *err);
/* Listens on host:port (0: any free port). 0, or -1 with err. */
int openai_listen(struct openai_server *s, const char *host, int port, char *err);
int openai_port(const struct openai_server *s);
/* The first served name. */
const char *openai_model(const struct openai_server *s);
/* The context limit requests are checked against (tokens). */
int64_t openai_max_model_len(const struct openai_server *s);
/* The HTTP server (tests: its statistics and verify walker). */
struct httpd *openai_httpd(struct openai_server *s);

struct openai_counts {
    int64_t http_requests, completions_ok, completions_failed;
};
void openai_get_counts(const struct openai_server *s, struct openai_counts *out);
/* Closes the connections, cancels what the backend still serves, frees. */
void openai_destroy(struct openai_server *s);

#endif
