/* openai.c: the OpenAI-compatible server's life (openai.h): the backend's
 * construction, the routing of requests, API keys, vLLM's error bodies,
 * and the small routes (/health, /ping, /version, /load, /v1/models).
 * Completions are openai_gen.c, bodies openai_req.c, the tokenizer
 * openai_tokenize.c, /metrics openai_metrics.c. */
#include "engine/server/openai.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/preset.h"
#include "engine/server/openai_internal.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

/* ---- answers ---- */

void openai_respond_json(struct httpd_conn *c, int status, json_t *j)
{
    char *body = json_dumps(j, JSON_COMPACT);
    httpd_respond(c, status, "application/json", body, strlen(body));
    free(body);
    json_decref(j);
}

void openai_respond_error(struct httpd_conn *c, int status, const char *type, const char *param,
                          const char *msg)
{
    openai_respond_json(c, status,
                        json_pack("{s:{s:s,s:s,s:o,s:i}}", "error", "message", msg, "type", type,
                                  "param", param ? json_string(param) : json_null(), "code", status));
}

/* starlette's own answers for unknown paths and methods, which vLLM
 * leaves to FastAPI's default handler: {"detail": ...}
 * (vllm/entrypoints/serve/exception_handling/register.py:28). */
static void respond_detail(struct httpd_conn *c, int status, const char *allow)
{
    char extra[64] = "";
    if (allow)
        snprintf(extra, sizeof extra, "Allow: %s\r\n", allow);
    const char *body = status == 404 ? "{\"detail\":\"Not Found\"}" : "{\"detail\":\"Method Not Allowed\"}";
    httpd_respond_ex(c, status, "application/json", allow ? extra : NULL, body, strlen(body));
}

int openai_check_model(struct openai_server *s, struct httpd_conn *c, const char *name)
{
    if (!name || !*name) /* vLLM's _is_model_supported: no name = the first */
        return 0;
    for (int i = 0; i < s->n_names; i++)
        if (!strcmp(name, s->names[i]))
            return 0;
    /* vllm/entrypoints/serve/engine/serving.py:74-84 (the name shown cut
     * at OPENAI_NAME_MAX bytes). */
    char msg[OPENAI_NAME_MAX + sizeof s->aliases + 64];
    size_t n = strlen(name);
    snprintf(msg, sizeof msg, "The model `%.*s%s` does not exist. Valid aliases: %s.",
             (int)(n > OPENAI_NAME_MAX ? OPENAI_NAME_MAX : n), name, n > OPENAI_NAME_MAX ? "..." : "",
             s->aliases);
    openai_respond_error(c, 404, "NotFoundError", "model", msg);
    return -1;
}

json_t *openai_load_request(struct openai_server *s, struct httpd_conn *c, const struct httpd_request *r,
                            const char *route)
{
    struct openai_bad bad;
    json_t *req = openai_req_load(r->body, r->body_len, route, &bad);
    if (!req) {
        openai_respond_bad(c, &bad);
        return NULL;
    }
    if (openai_check_model(s, c, json_string_value(json_object_get(req, "model")))) {
        json_decref(req);
        return NULL;
    }
    return req;
}

/* ---- API keys ---- */

/* Compares the whole given key with the server's in time that depends on
 * the server key's length only; a header longer than HTTPD_AUTH_MAX was
 * never cut (auth_overlong) and fails. */
static int auth_ok(const struct openai_server *s, const struct httpd_request *r)
{
    if (!s->api_key_len)
        return 1;
    if (r->auth_overlong || !r->authorization || strncmp(r->authorization, "Bearer ", 7))
        return 0;
    const char *k = r->authorization + 7;
    size_t kl = strlen(k);
    unsigned diff = kl != s->api_key_len;
    for (size_t i = 0; i < s->api_key_len; i++)
        diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < kl ? k[i] : 0);
    return diff == 0;
}

/* The paths vLLM's API key guards (middleware/authenticate.py:11). */
static int guarded(const char *path)
{
    static const char *const pre[] = {"/v1", "/v2", "/inference", "/cohere"};
    for (size_t i = 0; i < ARRAY_LEN(pre); i++)
        if (!strncmp(path, pre[i], strlen(pre[i])))
            return 1;
    return 0;
}

/* ---- small routes ---- */

static void handle_models(struct openai_server *s, struct httpd_conn *c)
{
    /* vllm/entrypoints/openai/models/serving.py:64-77, card fields
     * engine/protocol.py:90-118: one card per served name. */
    json_t *data = json_array();
    for (int i = 0; i < s->n_names; i++) {
        json_t *perm = json_pack(
            "{s:s,s:s,s:I,s:b,s:b,s:b,s:b,s:b,s:b,s:s,s:n,s:b}", "id", "modelperm-agentreplay",
            "object", "model_permission", "created", (json_int_t)s->created, "allow_create_engine", 0,
            "allow_sampling", 1, "allow_logprobs", 1, "allow_search_indices", 0, "allow_view", 1,
            "allow_fine_tuning", 0, "organization", "*", "group", "is_blocking", 0);
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s,s:n,s:I,s:[o]}", "id", s->names[i],
                                              "object", "model", "created", (json_int_t)s->created,
                                              "owned_by", "agentreplay", "root", s->root, "parent",
                                              "max_model_len", (json_int_t)s->max_model_len,
                                              "permission", perm));
    }
    openai_respond_json(c, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

static void respond_empty(struct httpd_conn *c) { httpd_respond(c, 200, NULL, "", 0); }

static void handler(struct httpd_conn *c, const struct httpd_request *r, void *arg)
{
    struct openai_server *s = arg;
    s->http_requests++;
    const char *m = r->method, *p = r->path;
    int get = !strcmp(m, "GET") || r->head, post = !strcmp(m, "POST");
    if (guarded(p) && !auth_ok(s, r)) {
        /* authenticate.py:60 */
        const char *b = "{\"error\":\"Unauthorized\"}";
        httpd_respond(c, 401, "application/json", b, strlen(b));
        return;
    }
    static const struct {
        const char *path;
        const char *allow; /* methods */
    } routes[] = {
        {"/health", "GET"},          {"/ping", "GET, POST"},   {"/version", "GET"},
        {"/load", "GET"},            {"/metrics", "GET"},      {"/v1/models", "GET"},
        {"/tokenize", "POST"},       {"/detokenize", "POST"},  {"/v1/chat/completions", "POST"},
        {"/v1/completions", "POST"},
    };
    size_t k = 0;
    while (k < ARRAY_LEN(routes) && strcmp(p, routes[k].path))
        k++;
    if (k == ARRAY_LEN(routes)) {
        respond_detail(c, 404, NULL);
        return;
    }
    int is_get_route = strstr(routes[k].allow, "GET") != NULL;
    int ok = (get && is_get_route) || (post && strstr(routes[k].allow, "POST"));
    if (!ok) {
        respond_detail(c, 405, routes[k].allow);
        return;
    }
    if (!strcmp(p, "/health") || !strcmp(p, "/ping")) {
        respond_empty(c); /* instrumentator/health.py:22-33, sagemaker/api_router.py:91-96 */
        return;
    }
    if (!strcmp(p, "/version")) {
        openai_respond_json(c, 200, json_pack("{s:s}", "version", s->version));
        return;
    }
    if (!strcmp(p, "/load")) { /* instrumentator/basic.py:30-50 */
        openai_respond_json(c, 200, json_pack("{s:I}", "server_load", (json_int_t)s->running));
        return;
    }
    if (!strcmp(p, "/metrics")) {
        openai_handle_metrics(s, c);
        return;
    }
    if (!strcmp(p, "/v1/models")) {
        handle_models(s, c);
        return;
    }
    /* Every POST route takes JSON only: vLLM's validate_json_request
     * (vllm/entrypoints/serve/utils/api_utils.py:309-315) answers 400. */
    if (strcmp(r->media_type, "application/json")) {
        openai_respond_error(c, 400, "Bad Request", NULL,
                             "1 validation error:\n  Unsupported Media Type: Only "
                             "'application/json' is allowed");
        return;
    }
    if (!strcmp(p, "/tokenize"))
        openai_handle_tokenize(s, c, r);
    else if (!strcmp(p, "/detokenize"))
        openai_handle_detokenize(s, c, r);
    else
        openai_handle_completion(s, c, r, !strcmp(p, "/v1/chat/completions"));
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
    c->header_timeout_s = 10;
    c->idle_timeout_s = 60;
    c->max_conn_requests = 10000;
}

int openai_name_check(const char *name, char *err)
{
    size_t n = strlen(name);
    if (!n || n > OPENAI_NAME_MAX)
        return err_set(err, "a name of 1 to %d bytes (got %zu)", OPENAI_NAME_MAX, n);
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("-_./:@+", ch)))
            return err_set(err, "only letters, digits and - _ . / : @ + (byte %zu)", i + 1);
    }
    return 0;
}

/* Names, key and version from the configuration; 0 or -1 with err. */
static int take_names(struct openai_server *s, const struct openai_config *c, const char *dflt,
                      char *err)
{
    if (c->n_names > OPENAI_NAMES_MAX)
        return err_set(err, "--served-model-name: %d names; at most %d", c->n_names, OPENAI_NAMES_MAX);
    for (int i = 0; i < c->n_names || (i == 0 && !c->n_names); i++) {
        const char *nm = c->n_names ? c->names[i] : dflt;
        char why[ERR_LEN];
        if (!nm || openai_name_check(nm, why))
            return err_set(err, "--served-model-name '%.64s': %s", nm ? nm : "", nm ? why : "none");
        snprintf(s->names[s->n_names++], sizeof s->names[0], "%.256s", nm);
        size_t al = strlen(s->aliases);
        snprintf(s->aliases + al, sizeof s->aliases - al, "%s%s", i ? ", " : "", nm);
    }
    json_t *js = json_string(s->names[0]);
    char *mj = json_dumps(js, JSON_ENCODE_ANY);
    snprintf(s->model_json, sizeof s->model_json, "%s", mj);
    free(mj);
    json_decref(js);
    if (c->api_key && strlen(c->api_key) > OPENAI_KEY_MAX)
        return err_set(err, "--api-key: %zu bytes; at most %d", strlen(c->api_key), OPENAI_KEY_MAX);
    if (c->api_key) {
        s->api_key_len = strlen(c->api_key);
        memcpy(s->api_key, c->api_key, s->api_key_len);
    }
    snprintf(s->version, sizeof s->version, "%s", c->version ? c->version : "unknown");
    return 0;
}

/* The context limit of the fake: --max-model-len, else the model
 * preset's maximum. */
static int64_t fake_context(const struct engine_config *ec, char *err)
{
    if (ec->max_model_len > 0)
        return ec->max_model_len;
    struct model_preset *m = xcalloc(1, sizeof *m);
    int64_t ctx = preset_load_model(ec->model, m, err) ? -1 : m->max_position;
    free(m);
    return ctx;
}

static void engine_facts(struct openai_server *s)
{
    json_t *d = s->tg->ops->describe_json ? s->tg->ops->describe_json(s->tg) : NULL;
    json_t *sch = json_object_get(d, "scheduler");
    s->max_model_len = json_integer_value(json_object_get(sch, "max_model_len"));
    s->engine_block_size = (int)json_integer_value(json_object_get(sch, "block_size"));
    s->prefix_caching = json_is_true(json_object_get(sch, "prefix_caching"));
    s->kv_blocks = json_integer_value(json_object_get(json_object_get(d, "capacity"), "kv_blocks_per_replica"));
    json_t *spec = json_object_get(d, "speculative");
    if (json_is_string(json_object_get(spec, "method")) &&
        strcmp(json_string_value(json_object_get(spec, "method")), "none"))
        s->m.spec_draft = (int)json_integer_value(json_object_get(spec, "draft"));
    json_decref(d);
}

struct openai_server *openai_create(const struct openai_config *c, struct loop *l, char *err)
{
    struct openai_server *s = xcalloc(1, sizeof *s);
    list_init(&s->live);
    s->loop = l;
    s->created = (long)time(NULL);
    s->fault_error_rate = c->fault_error_rate;
    s->fault_disconnect_rate = c->fault_disconnect_rate;
    s->fault_stall_rate = c->fault_stall_rate < 0 ? 1 : c->fault_stall_rate;
    s->fault_stall_ns = (int64_t)(c->fault_stall_ms * NS_PER_MS);
    s->default_max_tokens = c->default_max_tokens;
    rng_init(&s->fault_rng, c->fault_seed, RNG_FAULT);
    s->tloop = loop_scaled_create(l, c->time_scale);
    if (c->fake) {
        int64_t ctx = fake_context(&c->engine, err);
        if (ctx < 1) {
            openai_destroy(s);
            return NULL;
        }
        struct target_fake_config fc = {
            .overhead_ns = (int64_t)(c->fake_ttft_ms * NS_PER_MS),
            .prefill_ns_per_token = (int64_t)(c->fake_prefill_us_per_token * NS_PER_US),
            .tpot_ns = (int64_t)(c->fake_tpot_ms * NS_PER_MS),
            .chunk_tokens = 1,
            .max_model_len = ctx,
            .gpus = 1,
            .cache = true,
        };
        s->tg = target_fake_create(&fc, s->tloop);
        s->max_model_len = ctx;
        s->prefix_caching = 1;
        snprintf(s->root, sizeof s->root, "fake");
    } else {
        struct engine_config ec = c->engine;
        ec.stepwise = true;
        s->tg = target_engine_create(&ec, s->tloop, err);
        if (!s->tg) {
            openai_destroy(s);
            return NULL;
        }
        engine_facts(s);
        snprintf(s->root, sizeof s->root, "%s", ec.model[0] ? ec.model : "engine");
    }
    if (take_names(s, c, c->fake ? "fake" : s->root, err)) {
        openai_destroy(s);
        return NULL;
    }
    openai_metrics_init(s);
    struct httpd_limits lim;
    httpd_limits_defaults(&lim);
    lim.max_body_bytes = (size_t)(c->max_body_mb * 1024 * 1024);
    lim.max_conns = (int)c->max_conns;
    lim.header_timeout_ns = (int64_t)(c->header_timeout_s * NS_PER_S);
    lim.idle_timeout_ns = (int64_t)(c->idle_timeout_s * NS_PER_S);
    lim.max_requests_per_conn = c->max_conn_requests;
    s->httpd = httpd_create(l, &lim, handler, s);
    return s;
}

int openai_listen(struct openai_server *s, const char *host, int port, char *err)
{
    return httpd_listen(s->httpd, host, port, err);
}

int openai_port(const struct openai_server *s) { return httpd_port(s->httpd); }

const char *openai_model(const struct openai_server *s) { return s->names[0]; }

int64_t openai_max_model_len(const struct openai_server *s) { return s->max_model_len; }

struct httpd *openai_httpd(struct openai_server *s) { return s->httpd; }

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
    openai_requests_destroy(s);
    target_destroy(s->tg);
    if (s->tloop && s->tloop != s->loop)
        loop_destroy(s->tloop);
    free(s->scratch);
    free(s);
}
