/* openai_internal.h: what the OpenAI-compatible server's files share: the
 * server and request structs, vLLM-shaped error answers, the request
 * parser's results and the metrics' entry points (openai.h is the API). */
#ifndef OPENAI_INTERNAL_H
#define OPENAI_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "engine/server/openai.h"
#include "engine/target.h"
#include "traces/base/err.h"
#include "traces/base/list.h"
#include "traces/base/rng.h"

#define SERVE_CHUNK_TOKENS 64 /* tokens per prompt block id */

/* A histogram with fixed upper bounds (Prometheus buckets). */
struct openai_hist {
    const double *le;       /* n upper bounds, increasing (+Inf implied) */
    int n;
    uint64_t count[64];     /* per bucket (not cumulative), count[n]: +Inf */
    uint64_t total;
    double sum;
};

struct openai_metrics {
    struct openai_hist ttft, itl, tpot, e2e, decode, prompt_tok, gen_tok, params_n,
        params_max_tokens;
    double tok_le[64];      /* 1-2-5 series up to the context */
    int n_tok_le;
    uint64_t finished[5];   /* by reason: stop, length, abort, error, repetition */
    int64_t requests_running; /* requests admitted and not yet finished */
    /* Speculative decoding, derived from the chunks of decode steps. */
    int spec_draft;         /* draft tokens per step; 0: no speculation */
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted;
    uint64_t spec_accepted_pos[32];
};

struct openai_server {
    struct loop *loop;      /* real clock: HTTP */
    struct loop *tloop;     /* the backend's clock (scaled or the same) */
    struct target *tg;
    struct httpd *httpd;
    char names[OPENAI_NAMES_MAX][OPENAI_NAME_MAX + 1];
    int n_names;
    char aliases[OPENAI_NAMES_MAX * (OPENAI_NAME_MAX + 2) + 1]; /* "a, b" */
    char root[512];         /* /v1/models root: the model preset (or "fake") */
    char version[64];
    char api_key[OPENAI_KEY_MAX + 1];
    size_t api_key_len;     /* 0: no key */
    int64_t max_model_len;  /* context limit of every request (tokens) */
    int64_t default_max_tokens; /* 0: to the context limit */
    int engine_block_size;  /* for vllm:cache_config_info (0: fake) */
    int64_t kv_blocks;      /* likewise (0: unknown) */
    int prefix_caching;
    long created;           /* start time (s since the epoch) */
    double fault_error_rate, fault_disconnect_rate, fault_stall_rate;
    int64_t fault_stall_ns;
    struct rng fault_rng;
    uint64_t next_id;
    /* agentreplay_* counters. */
    int64_t http_requests, completions, completions_ok, completions_failed;
    int64_t faults_error, faults_disconnect, faults_stall, client_gone;
    int64_t running;        /* completion requests submitted and not done */
    struct openai_metrics m;
    char model_json[OPENAI_NAME_MAX * 6 + 3]; /* names[0] as a JSON string */
    char *scratch;          /* events are formatted here */
    size_t scratch_cap;
    struct list_node live;  /* requests not yet freed, newest first */
};

struct openai_request;

/* One choice of a request: one call to the backend. */
struct openai_choice {
    struct target_call call;
    struct openai_request *q;
    int index;              /* the choice's index in the answer */
    int prompt;             /* which prompt of the request */
    int64_t emitted;        /* tokens produced */
    int64_t t_first, t_last;/* real times of its first and last chunk (ns) */
    int done, submitted;
    enum target_status st;
    char *text;             /* whole answers: the generated text */
    size_t text_len, text_cap;
};

/* A prompt of a request: its token count and block chain. */
struct openai_prompt {
    int64_t tokens;
    uint64_t *blocks;       /* owned */
    uint32_t n_blocks;
};

struct openai_request {
    struct openai_server *s;
    struct httpd_conn *c;     /* NULL once the client is gone */
    int chat, stream, include_usage, continuous_usage;
    int n_prompts, n_choices, n_done;
    int64_t max_tokens;       /* per choice, after the context clamp */
    int64_t asked_max_tokens; /* what the request asked (0: none) */
    int64_t emitted;          /* over every choice */
    int64_t disconnect_at;    /* tokens after which to cut, -1: never */
    int64_t received_ns;      /* its first byte, on the server's loop */
    int submitted, cancel_pending, failed;
    int in_cancel, finished;  /* cancel_all running; the last done came in it */
    enum target_status fail_st; /* the first choice that failed */
    char fail_msg[128];
    uint64_t session_key;     /* from "user", 0: none */
    int64_t arrival_ns;       /* real time the request was read */
    struct loop_timer stall_timer, cancel_timer;
    char id[40];
    long created;
    struct list_node node;    /* in the server's live list */
    struct openai_prompt *prompts;
    struct openai_choice ch[];
};

/* ---- answers (openai.c) ---- */

void openai_respond_json(struct httpd_conn *c, int status, json_t *j);
/* {"error":{"message","type","param","code"}} with the HTTP status code
 * (vLLM's ErrorResponse); param NULL: null. */
void openai_respond_error(struct httpd_conn *c, int status, const char *type, const char *param,
                          const char *msg);
/* The 404 of an unknown model, or 0 when the name is served (NULL or ""
 * name the first model, as vLLM's _is_model_supported). */
int openai_check_model(struct openai_server *s, struct httpd_conn *c, const char *name);

/* A request body checked (openai_req_load) and naming a served model
 * (openai_check_model); NULL after answering 400 or 404. Caller owns. */
json_t *openai_load_request(struct openai_server *s, struct httpd_conn *c, const struct httpd_request *r,
                            const char *route);

/* ---- request bodies (openai_req.c) ---- */

/* An error found in a request body: HTTP status, vLLM's error type,
 * parameter and message. */
struct openai_bad {
    int status;
    char type[32];
    char param[96];
    char msg[1024];
};

/* Parses and type-checks a JSON body the way vLLM's request models do
 * (pydantic's lax rules; openai_req.c lists the fields). Returns the
 * object (caller owns), or NULL with *bad filled. route: "chat",
 * "completions", "tokenize", "detokenize". */
json_t *openai_req_load(const char *body, size_t len, const char *route, struct openai_bad *bad);
/* A field's value after openai_req_load's checks: integer (lax: "5", 5.0,
 * true), float, bool; def when absent or null. */
int64_t openai_req_int(json_t *req, const char *key, int64_t def);
double openai_req_num(json_t *req, const char *key, double def);
int openai_req_bool(json_t *req, const char *key, int def);
/* A value as an integer under the lax rules; 0, or -1 when it is not one. */
int openai_req_intval(json_t *v, int64_t *out);
/* True when key is present and not null. */
int openai_req_has(json_t *req, const char *key);
/* The prompts of a checked request: chat messages (contents joined by
 * spaces), or completions' prompt (string, ids, or a batch of either).
 * Fills *out (n_out entries, malloc'ed, each with its blocks); 0, or -1
 * with *bad. */
int openai_req_prompts(json_t *req, int chat, struct openai_prompt **out, int *n_out,
                       struct openai_bad *bad);
/* The text of a chat request's messages or a completion prompt string,
 * for /tokenize (malloc'ed, NUL-terminated; NULL with *bad). */
char *openai_req_text(json_t *req, int chat, size_t *len, struct openai_bad *bad);
void openai_prompts_free(struct openai_prompt *p, int n);
void openai_respond_bad(struct httpd_conn *c, const struct openai_bad *bad);

/* ---- completions (openai_gen.c) ---- */

void openai_handle_completion(struct openai_server *s, struct httpd_conn *c,
                              const struct httpd_request *r, int chat);
/* Cancels and frees every live request (server shutdown). */
void openai_requests_destroy(struct openai_server *s);

/* ---- tokenizer (openai_tokenize.c) ---- */

void openai_handle_tokenize(struct openai_server *s, struct httpd_conn *c,
                            const struct httpd_request *r);
void openai_handle_detokenize(struct openai_server *s, struct httpd_conn *c,
                              const struct httpd_request *r);

/* ---- a growable byte buffer (openai_req.c) ---- */

/* Bytes kept NUL-terminated; {0} is empty; the caller frees p. */
struct openai_buf {
    char *p;
    size_t len, cap;
};
void openai_buf_put(struct openai_buf *b, const char *s, size_t n);

/* ---- metrics (openai_metrics.c) ---- */

void openai_metrics_init(struct openai_server *s);
/* A request was admitted with n choices asking max_tokens each (0: none
 * asked). */
void openai_metrics_admit(struct openai_server *s, int n, int64_t asked_max_tokens);
/* A chunk of tokens of a choice at real time now. */
void openai_metrics_chunk(struct openai_server *s, struct openai_choice *ch, int64_t now,
                          int64_t tokens);
/* A choice finished at real time now with status st. */
void openai_metrics_done(struct openai_server *s, struct openai_choice *ch, int64_t now,
                         enum target_status st);
void openai_handle_metrics(struct openai_server *s, struct httpd_conn *c);

#endif
