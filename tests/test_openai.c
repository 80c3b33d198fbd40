/* test_openai.c: the OpenAI-compatible server as vLLM's peer, request by
 * request (in memory, the fake backend on the virtual clock): every route
 * and its HEAD, vLLM's error bodies, unknown models and aliases, API
 * keys, vLLM's type rules (400 for each wrong type, lax coercions
 * accepted), output lengths and the context limits, n choices and prompt
 * batches, stream shapes (role chunk, finish_reason on the last token
 * chunk, usage, continuous usage), /tokenize counting as completions do,
 * /detokenize, and the vLLM-named metrics. test_serve.c drives the binary
 * over sockets (timeouts, eviction, half-close, IPv6, zero-timing fake). */
#define _GNU_SOURCE
#include <jansson.h>

#include "engine/clock/loop.h"
#include "engine/server/openai.h"
#include "tests/testhelp.h"
#include "tests/testhttp.h"
#include "traces/base/err.h"

static struct loop *vl;

static struct openai_server *mk(int64_t ctx, const char *key, const char *const *names, int n_names)
{
    struct openai_config c;
    openai_config_defaults(&c);
    c.fake = true;
    c.fake_ttft_ms = 2;
    c.fake_tpot_ms = 1;
    c.engine.max_model_len = ctx;
    c.api_key = key;
    c.version = "9.9.9";
    for (int i = 0; i < n_names; i++)
        c.names[i] = names[i];
    c.n_names = n_names;
    char err[ERR_LEN];
    struct openai_server *s = openai_create(&c, vl, err);
    if (!s)
        fprintf(stderr, "openai_create: %s\n", err);
    return s;
}

/* Feeds raw on a new in-memory connection, runs the backend to its end;
 * the output (malloc'ed) and its length. */
static char *exchange(struct openai_server *s, const char *raw, size_t *n)
{
    struct httpd_conn *c = httpd_conn_mem_create(openai_httpd(s));
    httpd_conn_mem_feed(c, raw, strlen(raw));
    loop_run(vl);
    size_t on;
    const char *o = httpd_conn_mem_output(c, &on);
    char *copy = malloc(on + 1);
    memcpy(copy, o, on);
    copy[on] = 0;
    httpd_conn_mem_destroy(c);
    loop_run(vl);
    *n = on;
    return copy;
}

static char reqbuf[1 << 20];

static const char *req(const char *method, const char *path, const char *ctype, const char *extra,
                       const char *body)
{
    char ct[128] = "";
    if (ctype)
        snprintf(ct, sizeof ct, "Content-Type: %s\r\n", ctype);
    snprintf(reqbuf, sizeof reqbuf, "%s %s HTTP/1.1\r\nHost: t\r\n%s%sContent-Length: %zu\r\n\r\n%s",
             method, path, ct, extra ? extra : "", body ? strlen(body) : 0, body ? body : "");
    return reqbuf;
}

/* One exchange parsed; 0 or -1. */
static int ask(struct openai_server *s, const char *raw, int head_req, struct th_resp *r)
{
    size_t n;
    char *out = exchange(s, raw, &n);
    int rc = th_parse(out, n, head_req, r);
    free(out);
    return rc;
}

static int post(struct openai_server *s, const char *path, const char *body, struct th_resp *r)
{
    return ask(s, req("POST", path, "application/json", NULL, body), 0, r);
}

static json_t *body_json(const struct th_resp *r)
{
    return json_loadb(r->body, r->body_len, 0, NULL);
}

/* The error of a 4xx body: its type, param and whether message has needle. */
static int err_is(const struct th_resp *r, int status, const char *type, const char *param,
                  const char *needle)
{
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    const char *t = json_string_value(json_object_get(e, "type"));
    json_t *p = json_object_get(e, "param");
    const char *m = json_string_value(json_object_get(e, "message"));
    int ok = r->status == status && t && !strcmp(t, type) &&
             json_integer_value(json_object_get(e, "code")) == status &&
             (param ? json_is_string(p) && !strcmp(json_string_value(p), param) : json_is_null(p)) &&
             m && (!needle || strstr(m, needle));
    if (!ok)
        fprintf(stderr, "  got %d %s\n", r->status, r->body);
    json_decref(j);
    return ok;
}

/* ---- routes ---- */

static void test_routes(void)
{
    const char *names[] = {"m1", "org/m2:v1"};
    struct openai_server *s = mk(256, NULL, names, 2);
    struct th_resp r, h;
    CHECK(ask(s, req("GET", "/health", NULL, NULL, NULL), 0, &r) == 0 && r.status == 200 && r.body_len == 0,
          "GET /health: 200, empty");
    th_resp_free(&r);
    CHECK(ask(s, req("POST", "/ping", NULL, NULL, NULL), 0, &r) == 0 && r.status == 200, "POST /ping: 200");
    th_resp_free(&r);
    CHECK(ask(s, req("GET", "/ping", NULL, NULL, NULL), 0, &r) == 0 && r.status == 200, "GET /ping: 200");
    th_resp_free(&r);
    CHECK(ask(s, req("GET", "/version", NULL, NULL, NULL), 0, &r) == 0 && r.status == 200 &&
              !strcmp(r.body, "{\"version\":\"9.9.9\"}"),
          "/version");
    th_resp_free(&r);
    CHECK(ask(s, req("GET", "/load", NULL, NULL, NULL), 0, &r) == 0 && strstr(r.body, "\"server_load\":0"),
          "/load");
    th_resp_free(&r);
    /* /v1/models: every name, root, max_model_len, permission. */
    ask(s, req("GET", "/v1/models", NULL, NULL, NULL), 0, &r);
    json_t *j = body_json(&r);
    json_t *d = json_object_get(j, "data");
    CHECKF(json_array_size(d) == 2 &&
               !strcmp(json_string_value(json_object_get(json_array_get(d, 0), "id")), "m1") &&
               !strcmp(json_string_value(json_object_get(json_array_get(d, 1), "id")), "org/m2:v1") &&
               !strcmp(json_string_value(json_object_get(json_array_get(d, 0), "root")), "fake") &&
               json_integer_value(json_object_get(json_array_get(d, 0), "max_model_len")) == 256 &&
               json_array_size(json_object_get(json_array_get(d, 0), "permission")) == 1,
           "/v1/models: both names, root, max_model_len, permission (%s)", r.body);
    json_decref(j);
    th_resp_free(&r);
    /* HEAD on every GET route: the GET's head, no body. */
    const char *gets[] = {"/health", "/ping", "/version", "/load", "/v1/models", "/metrics"};
    for (size_t i = 0; i < ARRAY_LEN(gets); i++) {
        struct th_resp g;
        char v1[32], v2[32];
        ask(s, req("GET", gets[i], NULL, NULL, NULL), 0, &g);
        size_t n;
        char *out = exchange(s, req("HEAD", gets[i], NULL, NULL, NULL), &n);
        int ok = th_parse(out, n, 1, &h) == 0 && h.consumed == n && h.status == 200 && g.status == 200;
        const char *l1 = th_header(&g, "Content-Length", v1, sizeof v1);
        const char *l2 = th_header(&h, "Content-Length", v2, sizeof v2);
        /* /metrics and /load change between the two asks; lengths of the
         * fixed ones must match. */
        if (strcmp(gets[i], "/metrics") && strcmp(gets[i], "/load"))
            ok &= l1 && l2 && !strcmp(l1, l2);
        CHECKF(ok, "HEAD %s: 200, the GET's head, no body (%zu bytes)", gets[i], n);
        free(out);
        th_resp_free(&g);
        th_resp_free(&h);
    }
    /* HEAD then GET pipelined on one connection: the GET parses right
     * after the HEAD's head (AIPerf's probe of /metrics). */
    char two[256];
    snprintf(two, sizeof two, "HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\nGET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    size_t n;
    char *out = exchange(s, two, &n);
    struct th_resp a, b;
    int ok = th_parse(out, n, 1, &a) == 0 && a.status == 200 &&
             th_parse(out + a.consumed, n - a.consumed, 0, &b) == 0 && b.status == 200 &&
             strstr(b.body, "vllm:num_requests_running") && a.consumed + b.consumed == n;
    CHECK(ok, "HEAD /metrics then GET /metrics on one connection: both parse, in sync");
    free(out);
    th_resp_free(&a);
    if (ok)
        th_resp_free(&b);
    /* Unknown paths and wrong methods: starlette's bodies. */
    ask(s, req("GET", "/nosuch", NULL, NULL, NULL), 0, &r);
    CHECK(r.status == 404 && !strcmp(r.body, "{\"detail\":\"Not Found\"}"), "GET /nosuch: 404 detail");
    th_resp_free(&r);
    out = exchange(s, req("HEAD", "/nosuch", NULL, NULL, NULL), &n);
    CHECK(th_parse(out, n, 1, &r) == 0 && r.status == 404 && r.consumed == n, "HEAD /nosuch: 404, no body");
    free(out);
    th_resp_free(&r);
    char v[64];
    ask(s, req("GET", "/v1/chat/completions", NULL, NULL, NULL), 0, &r);
    CHECK(r.status == 405 && !strcmp(r.body, "{\"detail\":\"Method Not Allowed\"}") &&
              th_header(&r, "Allow", v, sizeof v) && !strcmp(v, "POST"),
          "GET /v1/chat/completions: 405, Allow: POST");
    th_resp_free(&r);
    out = exchange(s, req("HEAD", "/tokenize", NULL, NULL, NULL), &n);
    CHECK(th_parse(out, n, 1, &r) == 0 && r.status == 405 && r.consumed == n, "HEAD /tokenize: 405, no body");
    free(out);
    th_resp_free(&r);
    ask(s, req("POST", "/health", "application/json", NULL, "{}"), 0, &r);
    CHECK(r.status == 405, "POST /health: 405");
    th_resp_free(&r);
    /* Models: aliases served, the first reported; an unknown one 404. */
    post(s, "/v1/completions", "{\"model\":\"org/m2:v1\",\"prompt\":\"the of\",\"max_tokens\":2}", &r);
    j = body_json(&r);
    CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "model")), "m1"),
          "an alias is served; the answer names the first");
    json_decref(j);
    th_resp_free(&r);
    const char *paths[] = {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"};
    const char *bodies[] = {"{\"model\":\"nope\",\"prompt\":\"a\"}",
                            "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}",
                            "{\"model\":\"nope\",\"prompt\":\"a\"}", "{\"model\":\"nope\",\"tokens\":[2]}"};
    for (int i = 0; i < 4; i++) {
        post(s, paths[i], bodies[i], &r);
        CHECKF(err_is(&r, 404, "NotFoundError", "model", "The model `nope` does not exist. Valid aliases: m1, org/m2:v1."),
               "%s: unknown model is 404 with vLLM's body", paths[i]);
        th_resp_free(&r);
    }
    post(s, "/v1/completions", "{\"model\":\"\",\"prompt\":\"a\",\"max_tokens\":1}", &r);
    CHECK(r.status == 200, "model \"\" names the first (vLLM)");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"model\":null,\"prompt\":\"a\",\"max_tokens\":1}", &r);
    CHECK(r.status == 200, "model null names the first");
    th_resp_free(&r);
    /* JSON only on POST routes. */
    ask(s, req("POST", "/v1/completions", "text/plain", NULL, "{\"prompt\":\"a\"}"), 0, &r);
    CHECK(err_is(&r, 400, "Bad Request", NULL, "Unsupported Media Type"), "text/plain: 400 as vLLM");
    th_resp_free(&r);
    ask(s, req("POST", "/v1/completions", "Application/JSON; charset=utf-8", NULL,
               "{\"prompt\":\"a\",\"max_tokens\":1}"),
        0, &r);
    CHECK(r.status == 200, "Content-Type with parameters and any case: accepted");
    th_resp_free(&r);
    openai_destroy(s);
}

/* ---- API keys ---- */

static void test_keys(void)
{
    const char *key = "sk-0123456789abcdef";
    struct openai_server *s = mk(256, key, NULL, 0);
    struct th_resp r;
    struct {
        const char *auth;
        int status;
        const char *what;
    } cases[] = {
        {NULL, 401, "no key"},
        {"Authorization: Bearer sk-0123456789abcdef\r\n", 200, "the key"},
        {"Authorization: Bearer sk-0123456789abcde\r\n", 401, "a prefix of the key"},
        {"Authorization: Bearer sk-0123456789abcdefX\r\n", 401, "the key and more"},
        {"Authorization: Bearer sk-0123456789abcdeF\r\n", 401, "the last byte wrong"},
        {"Authorization: sk-0123456789abcdef\r\n", 401, "without Bearer"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        ask(s, req("GET", "/v1/models", NULL, cases[i].auth, NULL), 0, &r);
        CHECKF(r.status == cases[i].status &&
                   (r.status == 200 || !strcmp(r.body, "{\"error\":\"Unauthorized\"}")),
               "/v1/models with %s: %d (%d)", cases[i].what, cases[i].status, r.status);
        th_resp_free(&r);
    }
    /* An Authorization header past the server's buffer is refused, never
     * cut to a prefix that might match. */
    static char big[6000];
    int k = snprintf(big, sizeof big, "Authorization: Bearer %s", key);
    memset(big + k, 'x', 5000);
    strcpy(big + k + 5000, "\r\n");
    ask(s, req("GET", "/v1/models", NULL, big, NULL), 0, &r);
    CHECK(r.status == 401, "an overlong Authorization header: 401");
    th_resp_free(&r);
    /* vLLM guards /v1 only. */
    ask(s, req("GET", "/metrics", NULL, NULL, NULL), 0, &r);
    CHECK(r.status == 200, "/metrics needs no key (vLLM)");
    th_resp_free(&r);
    ask(s, req("POST", "/tokenize", "application/json", NULL, "{\"prompt\":\"a b\"}"), 0, &r);
    CHECK(r.status == 200, "/tokenize needs no key (vLLM)");
    th_resp_free(&r);
    openai_destroy(s);
    /* Keys and names refused at the start. */
    static char longkey[OPENAI_KEY_MAX + 2];
    memset(longkey, 'k', OPENAI_KEY_MAX + 1);
    struct openai_config c;
    openai_config_defaults(&c);
    c.fake = true;
    c.api_key = longkey;
    char err[ERR_LEN];
    CHECK(!openai_create(&c, vl, err) && strstr(err, "--api-key"), "a key over 1024 bytes is refused");
    longkey[OPENAI_KEY_MAX] = 0;
    s = openai_create(&c, vl, err);
    CHECK(s != NULL, "a key of 1024 bytes is taken");
    openai_destroy(s);
    c.api_key = NULL;
    c.names[0] = "bad name";
    c.n_names = 1;
    CHECK(!openai_create(&c, vl, err) && strstr(err, "--served-model-name"), "a name with a space is refused");
}

/* ---- types ---- */

static void test_types(void)
{
    struct openai_server *s = mk(256, NULL, NULL, 0);
    struct th_resp r;
    /* 400 with vLLM's validation body. */
    struct {
        const char *body, *type, *loc;
    } bad[] = {
        {"{\"prompt\":\"a\",\"max_tokens\":\"x\"}", "int_parsing", "body.max_tokens"},
        {"{\"prompt\":\"a\",\"max_tokens\":1.5}", "int_from_float", "body.max_tokens"},
        {"{\"prompt\":\"a\",\"max_tokens\":[1]}", "int_type", "body.max_tokens"},
        {"{\"prompt\":\"a\",\"stream\":2}", "bool_parsing", "body.stream"},
        {"{\"prompt\":\"a\",\"stream\":\"x\"}", "bool_parsing", "body.stream"},
        {"{\"prompt\":\"a\",\"model\":5}", "string_type", "body.model"},
        {"{\"prompt\":\"a\",\"user\":5}", "string_type", "body.user"},
        {"{\"prompt\":\"a\",\"temperature\":\"x\"}", "float_parsing", "body.temperature"},
        {"{\"prompt\":\"a\",\"n\":null}", "int_type", "body.n"},
        {"{\"prompt\":\"a\",\"ignore_eos\":null}", "bool_type", "body.ignore_eos"},
        {"{\"prompt\":\"a\",\"seed\":\"x\"}", "int_parsing", "body.seed"},
        {"{\"prompt\":\"a\",\"stop\":5}", "string_type", "body.stop"},
        {"{\"prompt\":[1,-2]}", "greater_than_equal", "body.prompt.1"},
        {"{\"prompt\":[\"a\",5]}", "string_type", "body.prompt.1"},
        {"{\"prompt\":5}", "string_type", "body.prompt"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        post(s, "/v1/completions", bad[i].body, &r);
        char want[160];
        snprintf(want, sizeof want, "'type': '%s', 'loc': '%s'", bad[i].type, bad[i].loc);
        CHECKF(err_is(&r, 400, "Bad Request", bad[i].loc, want), "%s: 400 %s", bad[i].body, bad[i].type);
        th_resp_free(&r);
    }
    struct {
        const char *body, *type, *loc;
    } cbad[] = {
        {"{\"messages\":\"hi\"}", "list_type", "body.messages"},
        {"{\"max_tokens\":3}", "missing", "body.messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "string_type", "body.messages.0.content"},
        {"{\"messages\":[{\"content\":\"x\"}]}", "missing", "body.messages.0.role"},
        {"{\"messages\":[5]}", "model_type", "body.messages.0"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":\"x\"}", "int_parsing",
         "body.max_completion_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":5}", "bool_parsing", "body.logprobs"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cbad); i++) {
        post(s, "/v1/chat/completions", cbad[i].body, &r);
        char want[160];
        snprintf(want, sizeof want, "'type': '%s', 'loc': '%s'", cbad[i].type, cbad[i].loc);
        CHECKF(err_is(&r, 400, "Bad Request", cbad[i].loc, want), "chat %s: 400 %s", cbad[i].body, cbad[i].type);
        th_resp_free(&r);
    }
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"x\",\"stream\":\"x\"}", &r);
    CHECK(err_is(&r, 400, "Bad Request", "body.max_tokens", "2 validation errors:"), "two errors, both listed");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"model\": ", &r);
    CHECK(err_is(&r, 400, "Bad Request", "body.10", "'type': 'json_invalid', 'loc': 'body.10'"),
          "malformed JSON: json_invalid at its offset");
    th_resp_free(&r);
    post(s, "/v1/completions", "[1,2]", &r);
    CHECK(r.status == 400, "a body that is not an object: 400");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", &r);
    CHECK(err_is(&r, 400, "BadRequestError", "stream_options", "Stream options can only be defined when `stream=True`"),
          "stream_options without stream: 400 as vLLM");
    th_resp_free(&r);
    /* Lax coercions vLLM accepts: the answer is what they mean. */
    struct {
        const char *body;
        int64_t tokens;
    } ok[] = {
        {"{\"prompt\":\"a\",\"max_tokens\":\"5\"}", 5},
        {"{\"prompt\":\"a\",\"max_tokens\":\" +4 \"}", 4},
        {"{\"prompt\":\"a\",\"max_tokens\":3.0}", 3},
        {"{\"prompt\":\"a\",\"max_tokens\":true}", 1},
        {"{\"prompt\":\"a\",\"max_tokens\":2,\"stream\":\"no\",\"temperature\":\"0.5\",\"ignore_eos\":1}", 2},
        {"{\"prompt\":\"a\",\"max_tokens\":2,\"extra_field\":[1,{\"x\":2}]}", 2},
        {"{\"prompt\":\"a\",\"max_tokens\":2,\"stream\":null}", 2},
        {"{\"prompt\":\"a\"}", 16},                 /* completions: 16 */
        {"{\"prompt\":\"a\",\"max_tokens\":null}", 255}, /* null: the context */
    };
    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        post(s, "/v1/completions", ok[i].body, &r);
        json_t *j = body_json(&r);
        json_int_t ct = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        CHECKF(r.status == 200 && ct == ok[i].tokens, "%s: 200 with %lld tokens (%d, %lld)", ok[i].body,
               (long long)ok[i].tokens, r.status, (long long)ct);
        json_decref(j);
        th_resp_free(&r);
    }
    openai_destroy(s);
}

/* ---- lengths and limits ---- */

static int64_t usage_of(const struct th_resp *r, const char *key)
{
    json_t *j = body_json(r);
    int64_t v = json_integer_value(json_object_get(json_object_get(j, "usage"), key));
    json_decref(j);
    return v;
}

static void test_limits(void)
{
    struct openai_server *s = mk(100, NULL, NULL, 0);
    struct th_resp r;
    const char *chat10 = "{\"messages\":[{\"role\":\"user\",\"content\":\"a b c d e f g h i j\"}]%s}";
    char b[512];
    snprintf(b, sizeof b, chat10, "");
    post(s, "/v1/chat/completions", b, &r);
    CHECKF(r.status == 200 && usage_of(&r, "prompt_tokens") == 10 && usage_of(&r, "completion_tokens") == 90,
           "chat without max_tokens: to the context (90 = 100 - 10; got %lld)",
           (long long)usage_of(&r, "completion_tokens"));
    th_resp_free(&r);
    snprintf(b, sizeof b, chat10, ",\"max_tokens\":95");
    post(s, "/v1/chat/completions", b, &r);
    CHECK(r.status == 200 && usage_of(&r, "completion_tokens") == 90, "prompt + max_tokens past the context: clamped");
    th_resp_free(&r);
    snprintf(b, sizeof b, chat10, ",\"max_completion_tokens\":7,\"max_tokens\":50");
    post(s, "/v1/chat/completions", b, &r);
    CHECK(r.status == 200 && usage_of(&r, "completion_tokens") == 7, "max_completion_tokens wins over max_tokens");
    th_resp_free(&r);
    const char *huge[] = {"1000000000000", "500000000000", "9223372036854775807", "101"};
    for (size_t i = 0; i < ARRAY_LEN(huge); i++) {
        snprintf(b, sizeof b, chat10, ",\"max_tokens\":");
        b[strlen(b) - 1] = 0;
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s}", huge[i]);
        post(s, "/v1/chat/completions", b, &r);
        CHECKF(err_is(&r, 400, "BadRequestError", "max_tokens", "cannot be greater than max_model_len=100"),
               "max_tokens %s: 400 before anything is sized", huge[i]);
        th_resp_free(&r);
    }
    snprintf(b, sizeof b, chat10, ",\"max_tokens\":0");
    post(s, "/v1/chat/completions", b, &r);
    CHECK(err_is(&r, 400, "BadRequestError", "max_tokens", "max_tokens must be at least 1, got 0."), "max_tokens 0: 400");
    th_resp_free(&r);
    /* Prompts at and past the context. */
    char p100[400] = "", p101[420] = "";
    for (int i = 0; i < 100; i++)
        strcat(p100, "w ");
    snprintf(p101, sizeof p101, "%sw", p100);
    snprintf(b, sizeof b, "{\"prompt\":\"%s\",\"max_tokens\":1}", p101);
    post(s, "/v1/completions", b, &r);
    CHECK(err_is(&r, 400, "BadRequestError", "input_tokens",
                 "This model's maximum context length is 100 tokens. However, your prompt contains 101 input tokens"),
          "a prompt past the context: 400 as vLLM");
    th_resp_free(&r);
    snprintf(b, sizeof b, "{\"prompt\":\"%s\",\"max_tokens\":1}", p100);
    post(s, "/v1/completions", b, &r);
    CHECK(err_is(&r, 400, "BadRequestError", NULL, "The decoder prompt (length 100) plus the number of requested output"),
          "a prompt that fills the context: 400 as vLLM");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":\"   \",\"max_tokens\":1}", &r);
    CHECK(err_is(&r, 400, "BadRequestError", NULL, "The decoder prompt cannot be empty"), "an empty prompt: 400");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":[],\"max_tokens\":1}", &r);
    CHECK(r.status == 400, "an empty id list: 400");
    th_resp_free(&r);
    /* n and batches. */
    post(s, "/v1/completions", "{\"prompt\":\"a b c\",\"max_tokens\":4,\"n\":3}", &r);
    json_t *j = body_json(&r);
    json_t *ch = json_object_get(j, "choices");
    CHECK(r.status == 200 && json_array_size(ch) == 3 &&
              json_integer_value(json_object_get(json_array_get(ch, 2), "index")) == 2 &&
              usage_of(&r, "completion_tokens") == 12 && usage_of(&r, "prompt_tokens") == 3,
          "n=3: three choices, usage sums their tokens, the prompt counted once");
    CHECK(strcmp(json_string_value(json_object_get(json_array_get(ch, 0), "text")),
                 json_string_value(json_object_get(json_array_get(ch, 1), "text"))),
          "n=3: the choices differ");
    json_decref(j);
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":[\"a b\",\"c d e\"],\"max_tokens\":2}", &r);
    CHECK(r.status == 200 && usage_of(&r, "prompt_tokens") == 5 && usage_of(&r, "completion_tokens") == 4,
          "a batch of two prompts: two choices, prompt tokens summed");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":[[5,6,7],[8]],\"max_tokens\":2}", &r);
    CHECK(r.status == 200 && usage_of(&r, "prompt_tokens") == 4, "a batch of id lists");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"n\":0}", &r);
    CHECK(err_is(&r, 400, "BadRequestError", NULL, "n must be at least 1, got 0."), "n=0: 400");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"n\":9}", &r);
    CHECK(err_is(&r, 400, "BadRequestError", NULL, "n must be at most 8, got 9."), "n=9: 400 (the server's limit)");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"n\":2,\"temperature\":0}", &r);
    CHECK(err_is(&r, 400, "BadRequestError", NULL, "n must be 1 when using greedy sampling, got 2."),
          "n=2 with temperature 0: 400 as vLLM");
    th_resp_free(&r);
    post(s, "/v1/completions", "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":3}", &r);
    CHECK(r.status == 400, "n x prompts over 8: 400");
    th_resp_free(&r);
    openai_destroy(s);
}

/* ---- streams ---- */

static void test_streams(void)
{
    struct openai_server *s = mk(256, NULL, NULL, 0);
    struct th_resp r;
    struct th_events e;
    /* Chat: role chunk, 5 token chunks, the last with finish_reason, usage, [DONE]. */
    post(s, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"the of and\"}],\"max_tokens\":5,\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true}}",
         &r);
    th_events(r.body, &e);
    int role = 0, tokens = 0, finish_at = -1, empty = 0, usage_ok = 0, bad = 0;
    for (int i = 0; i < e.n; i++) {
        if (!strcmp(e.ev[i], "[DONE]"))
            continue;
        json_t *j = json_loads(e.ev[i], 0, NULL);
        bad += !j;
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        json_t *d = json_object_get(c0, "delta");
        if (json_object_get(d, "role"))
            role++;
        else if (c0) {
            const char *t = json_string_value(json_object_get(d, "content"));
            if (!t || !*t)
                empty++;
            else
                tokens++;
            if (json_is_string(json_object_get(c0, "finish_reason")))
                finish_at = tokens;
        } else if (json_object_get(j, "usage")) {
            json_t *u = json_object_get(j, "usage");
            usage_ok = json_integer_value(json_object_get(u, "completion_tokens")) == 5 &&
                       json_integer_value(json_object_get(u, "prompt_tokens")) == 3 &&
                       json_is_integer(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
        }
        json_decref(j);
    }
    CHECKF(r.status == 200 && role == 1 && tokens == 5 && empty == 0 && finish_at == 5 && usage_ok && !bad &&
               e.n == 8 && !strcmp(e.ev[e.n - 1], "[DONE]"),
           "chat stream: role, 5 token chunks, finish_reason on the 5th, no empty chunk, usage, [DONE] "
           "(%d events: role %d tokens %d finish %d empty %d usage %d)",
           e.n, role, tokens, finish_at, empty, usage_ok);
    th_events_free(&e);
    th_resp_free(&r);
    /* Without include_usage: no usage chunk. */
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":3,\"stream\":true}", &r);
    th_events(r.body, &e);
    CHECKF(e.n == 4 && !strstr(r.body, "usage") && strstr(e.ev[2], "\"finish_reason\":\"length\"") &&
               strstr(e.ev[0], "\"text\":\" ") && !strstr(r.body, "\"role\""),
           "completions stream: 3 token chunks, the last finishing, no role, no usage (%d)", e.n);
    th_events_free(&e);
    th_resp_free(&r);
    /* Continuous usage: every chunk carries the running count. */
    post(s, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],\"max_tokens\":4,\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}}",
         &r);
    th_events(r.body, &e);
    int running_ok = e.n == 7;
    for (int i = 0; i < e.n - 2 && running_ok; i++) {
        json_t *j = json_loads(e.ev[i], 0, NULL);
        running_ok = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")) == i;
        json_decref(j);
    }
    CHECKF(running_ok, "continuous_usage_stats: role chunk 0, then 1, 2, 3, 4 (%d events)", e.n);
    th_events_free(&e);
    th_resp_free(&r);
    post(s, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],\"max_tokens\":4,\"stream\":true,"
         "\"stream_options\":{\"continuous_usage_stats\":true}}",
         &r);
    CHECK(r.status == 200 && !strstr(r.body, "usage"), "continuous_usage_stats without include_usage: nothing");
    th_resp_free(&r);
    /* n=2 streamed: each chunk one choice; each index its role and finish. */
    post(s, "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],\"max_tokens\":3,\"n\":2,\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true}}",
         &r);
    th_events(r.body, &e);
    int per[2][3] = {{0}}; /* role, tokens, finish */
    int64_t total = -1;
    for (int i = 0; i < e.n; i++) {
        json_t *j = json_loads(e.ev[i], 0, NULL);
        json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
        int ix = (int)json_integer_value(json_object_get(c0, "index"));
        if (c0 && ix >= 0 && ix < 2) {
            json_t *d = json_object_get(c0, "delta");
            per[ix][0] += json_object_get(d, "role") != NULL;
            per[ix][1] += json_object_get(d, "role") == NULL;
            per[ix][2] += json_is_string(json_object_get(c0, "finish_reason"));
        }
        if (j && !c0 && json_object_get(j, "usage"))
            total = json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens"));
        json_decref(j);
    }
    CHECKF(per[0][0] == 1 && per[1][0] == 1 && per[0][1] == 3 && per[1][1] == 3 && per[0][2] == 1 &&
               per[1][2] == 1 && total == 6,
           "n=2 streamed: per index a role chunk, 3 tokens, one finish; usage 6 (%lld)", (long long)total);
    th_events_free(&e);
    th_resp_free(&r);
    /* A whole chat answer. */
    post(s, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a b\"}],\"max_tokens\":3}", &r);
    json_t *j = body_json(&r);
    json_t *m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    const char *content = json_string_value(json_object_get(m, "content"));
    int words = 0;
    for (const char *p = content; p && *p; p++)
        words += *p == ' ';
    CHECK(r.status == 200 && !strcmp(json_string_value(json_object_get(j, "object")), "chat.completion") &&
              !strcmp(json_string_value(json_object_get(m, "role")), "assistant") && words == 3 &&
              !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                                        "finish_reason")),
                      "length"),
          "whole chat answer: one assistant message of 3 words, finish length");
    json_decref(j);
    th_resp_free(&r);
    openai_destroy(s);
}

/* ---- tokenizer ---- */

static void test_tokenize(void)
{
    struct openai_server *s = mk(4096, NULL, NULL, 0);
    struct th_resp r, t;
    const char *texts[] = {"the of and", "  the\tof\n\nzebra  x\r\ny ", "one", "it's a \"quote\" \\ here", ""};
    for (size_t i = 0; i < ARRAY_LEN(texts); i++) {
        json_t *rq = json_pack("{s:s}", "prompt", texts[i]);
        char *body = json_dumps(rq, 0);
        post(s, "/tokenize", body, &t);
        json_t *tj = body_json(&t);
        int64_t count = json_integer_value(json_object_get(tj, "count"));
        json_object_set_new(rq, "max_tokens", json_integer(1));
        free(body);
        body = json_dumps(rq, 0);
        post(s, "/v1/completions", body, &r);
        int64_t served = r.status == 200 ? usage_of(&r, "prompt_tokens") : 0;
        CHECKF(t.status == 200 && json_array_size(json_object_get(tj, "tokens")) == (size_t)count &&
                   (count == served || (count == 0 && r.status == 400)) &&
                   json_integer_value(json_object_get(tj, "max_model_len")) == 4096,
               "/tokenize %zu counts as completions do (%lld vs %lld)", i, (long long)count, (long long)served);
        json_decref(tj);
        json_decref(rq);
        free(body);
        th_resp_free(&t);
        th_resp_free(&r);
    }
    post(s, "/tokenize", "{\"prompt\":\"the of zebra\",\"return_token_strs\":true}", &t);
    CHECK(!strcmp(t.body, "{\"count\":3,\"max_model_len\":4096,\"tokens\":[2,3,1],\"token_strs\":[\"the\",\"of\",\"zebra\"]}"),
          "/tokenize ids: the vocabulary from 2, unknown words 1; token_strs when asked");
    th_resp_free(&t);
    post(s, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"a b\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"c\"}]}]}", &t);
    CHECK(t.status == 200 && strstr(t.body, "\"count\":3,") && strstr(t.body, "\"token_strs\":null"),
          "/tokenize chat form: the contents joined");
    th_resp_free(&t);
    post(s, "/tokenize", "{\"model\":\"fake\"}", &t);
    CHECK(err_is(&t, 400, "Bad Request", "body.prompt", "'type': 'missing'"), "/tokenize without a prompt: 400");
    th_resp_free(&t);
    post(s, "/detokenize", "{\"tokens\":[2,3,4,1,0,99999]}", &t);
    CHECK(!strcmp(t.body, "{\"prompt\":\"the of and unk <|endoftext|> unk\"}"), "/detokenize joins the words");
    th_resp_free(&t);
    post(s, "/detokenize", "{\"tokens\":[2,-1]}", &t);
    CHECK(err_is(&t, 400, "Bad Request", "body.tokens.1", "greater_than_equal"), "/detokenize of -1: 400");
    th_resp_free(&t);
    /* Round trip: every id back is one word. */
    post(s, "/detokenize", "{\"tokens\":[5,77,0,1,250,9000,3]}", &t);
    json_t *dj = body_json(&t);
    json_t *rq = json_pack("{s:O}", "prompt", json_object_get(dj, "prompt"));
    char *body = json_dumps(rq, 0);
    post(s, "/tokenize", body, &r);
    CHECK(strstr(r.body, "\"count\":7,"), "count(detokenize(ids)) == len(ids)");
    free(body);
    json_decref(rq);
    json_decref(dj);
    th_resp_free(&t);
    th_resp_free(&r);
    openai_destroy(s);
}

/* ---- metrics ---- */

static double metric(const char *text, const char *line_start)
{
    const char *p = strstr(text, line_start);
    return p ? strtod(p + strlen(line_start), NULL) : -1;
}

static void test_metrics(void)
{
    struct openai_server *s = mk(1000, NULL, NULL, 0);
    struct th_resp r;
    for (int i = 0; i < 3; i++) {
        post(s, "/v1/completions", "{\"prompt\":\"a b c d\",\"max_tokens\":5}", &r);
        th_resp_free(&r);
    }
    post(s, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2,\"n\":2}", &r);
    th_resp_free(&r);
    ask(s, req("GET", "/metrics", NULL, NULL, NULL), 0, &r);
    char v[96];
    const char *L = "{engine=\"0\",model_name=\"fake\"} ";
    char k[256];
    CHECK(r.status == 200 && th_header(&r, "Content-Type", v, sizeof v) &&
              !strcmp(v, "text/plain; version=0.0.4; charset=utf-8"),
          "/metrics: Prometheus text 0.0.4");
    snprintf(k, sizeof k, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"fake\"} ");
    CHECKF(metric(r.body, k) == 5, "request_success_total length = 5 choices (%g)", metric(r.body, k));
    snprintf(k, sizeof k, "vllm:generation_tokens_total%s", L);
    CHECKF(metric(r.body, k) == 19, "generation_tokens_total = 19 (%g)", metric(r.body, k));
    snprintf(k, sizeof k, "vllm:prompt_tokens_total%s", L);
    CHECKF(metric(r.body, k) == 14, "prompt_tokens_total = 14 (%g)", metric(r.body, k));
    snprintf(k, sizeof k, "vllm:time_to_first_token_seconds_count%s", L);
    CHECK(metric(r.body, k) == 5, "TTFT histogram: one per choice");
    snprintf(k, sizeof k, "vllm:inter_token_latency_seconds_count%s", L);
    CHECKF(metric(r.body, k) == 14, "ITL histogram: one per later chunk (%g)", metric(r.body, k));
    snprintf(k, sizeof k, "vllm:request_params_n_count%s", L);
    CHECK(metric(r.body, k) == 4, "params_n: one per request");
    snprintf(k, sizeof k, "vllm:request_params_max_tokens_bucket{engine=\"0\",le=\"2\",model_name=\"fake\"} ");
    CHECK(metric(r.body, k) == 1, "params_max_tokens: 1-2-5 buckets, cumulative");
    /* Every histogram: buckets cumulative, +Inf == count; TTFT's bounds. */
    const char *fams[] = {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                          "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
                          "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
                          "vllm:request_decode_time_seconds"};
    for (size_t f = 0; f < ARRAY_LEN(fams); f++) {
        char pat[200];
        snprintf(pat, sizeof pat, "%s_bucket{", fams[f]);
        double prev = 0, inf = -1;
        int mono = 1, nb = 0;
        for (const char *p = strstr(r.body, pat); p; p = strstr(p + 1, pat)) {
            const char *sp = strchr(p, '}');
            double x = strtod(sp + 2, NULL);
            mono &= x >= prev;
            prev = x;
            nb++;
            if (strstr(p, "le=\"+Inf\"") && strstr(p, "le=\"+Inf\"") < sp)
                inf = x;
        }
        snprintf(k, sizeof k, "%s_count%s", fams[f], L);
        CHECKF(nb > 3 && mono && inf == metric(r.body, k), "%s: %d cumulative buckets, +Inf = count", fams[f], nb);
    }
    CHECK(strstr(r.body, "le=\"0.001\"") && strstr(r.body, "le=\"2560\"") && strstr(r.body, "le=\"7680\""),
          "vLLM's bucket bounds (TTFT 0.001..2560, latency ..7680)");
    const char *types[] = {"# TYPE vllm:num_requests_running gauge", "# TYPE vllm:num_requests_waiting gauge",
                           "# TYPE vllm:kv_cache_usage_perc gauge", "# TYPE vllm:prefix_cache_queries_total counter",
                           "# TYPE vllm:prefix_cache_hits_total counter", "# TYPE vllm:e2e_request_latency_seconds histogram",
                           "# TYPE vllm:cache_config_info gauge", "# TYPE agentreplay_completions_total counter"};
    for (size_t i = 0; i < ARRAY_LEN(types); i++)
        CHECKF(strstr(r.body, types[i]) != NULL, "%s", types[i]);
    th_resp_free(&r);
    openai_destroy(s);
}

int main(void)
{
    th_caps(120);
    vl = loop_virtual_create();
    test_routes();
    test_keys();
    test_types();
    test_limits();
    test_streams();
    test_tokenize();
    test_metrics();
    loop_destroy(vl);
    return test_report();
}
