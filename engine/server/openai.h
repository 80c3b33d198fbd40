/* openai.h: an OpenAI-compatible HTTP API in front of a simulated target
 * (the engine, or a fixed-rate fake), in real time, on httpd.h.
 *
 * Endpoints: POST /v1/chat/completions and /v1/completions (streamed as
 * server-sent events, or whole), GET /v1/models, /health and /metrics
 * (Prometheus text). The backend runs on its own clock (a scaled clock
 * over the server's real one: time_scale x real time), stepwise, so each
 * chunk of tokens is written when it is produced.
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
 */
#ifndef OPENAI_H
#define OPENAI_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/clock/loop.h"
#include "engine/engine.h"
#include "engine/server/httpd.h"

struct openai_config {
    struct engine_config engine; /* the backend (stepwise is forced on) */
    bool fake;                   /* a fixed-rate model instead of the engine */
    double fake_ttft_ms, fake_tpot_ms, fake_prefill_us_per_token;
    double time_scale;           /* backend clock / real clock */
    char model[128];             /* name served; "": the engine's model, or "fake" */
    char api_key[256];           /* required as "Bearer K"; "": none */
    double fault_error_rate, fault_disconnect_rate;
    double fault_stall_ms;
    double fault_stall_rate;     /* < 0: 1 */
    uint64_t fault_seed;
    double max_body_mb;          /* request size limit */
    double max_conns;            /* connection limit */
};
/* Defaults: the engine's, time scale 1, fake 20 ms + 10 ms/token, no
 * faults, seed 1, 64 MB, 16384 connections. */
void openai_config_defaults(struct openai_config *c);

struct openai_server;
/* A server on the real-clock loop l (which must outlive it): the backend
 * and the HTTP server, not yet listening. NULL with err set when the
 * engine refuses its configuration. */
struct openai_server *openai_create(const struct openai_config *c, struct loop *l, char *err);
/* Listens on host:port (0: any free port). 0, or -1 with err. */
int openai_listen(struct openai_server *s, const char *host, int port, char *err);
int openai_port(const struct openai_server *s);
const char *openai_model(const struct openai_server *s);

struct openai_counts {
    int64_t http_requests, completions_ok, completions_failed;
};
void openai_get_counts(const struct openai_server *s, struct openai_counts *out);
/* Closes the connections, cancels what the backend still serves, frees. */
void openai_destroy(struct openai_server *s);

#endif
