/* openai_req.c: request bodies of the OpenAI-compatible server, checked
 * the way vLLM 0.33's request models check them, and the prompts they
 * carry.
 *
 * vLLM declares its bodies as pydantic models (ChatCompletionRequest,
 * vllm/entrypoints/openai/chat_completion/protocol.py:235-300;
 * CompletionRequest, .../completion/protocol.py:49-100; StreamOptions,
 * vllm/entrypoints/generate/base/protocol.py:293-295; the tokenize models,
 * vllm/entrypoints/serve/tokenize/protocol.py:23-206) validated in
 * pydantic's lax mode: an integer field takes 5, 5.0, "5", " +5 ", true;
 * refuses 1.5 (int_from_float), "x" (int_parsing), [] or {} (int_type);
 * a number field takes numbers, numeric strings and booleans; a boolean
 * takes true/false, 0/1, 0.0/1.0 and the strings yes/no, on/off, t/f,
 * y/n, true/false, 1/0 in any case; a string field takes only strings;
 * null only where the field is optional. Unknown fields are accepted
 * (extra="allow"). A failure is a 400 whose message lists the errors as
 * vLLM's validation handler does
 * (vllm/entrypoints/serve/exception_handling/handlers/validation.py:
 * 79-81, 109-195): "N validation error(s):\n  {'type': ..., 'loc':
 * 'body.FIELD', 'msg': ..., 'input': ...}" with type "Bad Request" and
 * param "body.FIELD" (the first error's). Checked here: every field these
 * routes read, and the sampling fields clients commonly send. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/openai_internal.h"
#include "traces/base/mem.h"
#include "traces/prompt.h"

enum vtype { V_INT, V_NUM, V_BOOL, V_STR, V_LIST, V_OBJ, V_STOP, V_INTLIST };
enum { NUL_OK = 1, CHAT = 2, COMPL = 4, TOK = 8, DETOK = 16, GEN = CHAT | COMPL };

struct vfield {
    const char *name;
    enum vtype type;
    unsigned flags; /* NUL_OK and the routes that have it */
};

/* In each model's declaration order (pydantic reports errors in it). */
static const struct vfield fields[] = {
    {"messages", V_LIST, CHAT | TOK},
    {"model", V_STR, NUL_OK | GEN | TOK | DETOK},
    {"prompt", V_STR, TOK},            /* completions: openai_req_prompts */
    {"tokens", V_INTLIST, DETOK},
    {"echo", V_BOOL, NUL_OK | COMPL},
    {"frequency_penalty", V_NUM, NUL_OK | GEN},
    {"logprobs", V_BOOL, NUL_OK | CHAT},
    {"logprobs", V_INT, NUL_OK | COMPL},
    {"top_logprobs", V_INT, NUL_OK | CHAT},
    {"max_tokens", V_INT, NUL_OK | GEN},
    {"max_completion_tokens", V_INT, NUL_OK | CHAT},
    {"n", V_INT, NUL_OK | CHAT},
    {"n", V_INT, COMPL},
    {"presence_penalty", V_NUM, NUL_OK | GEN},
    {"seed", V_INT, NUL_OK | GEN},
    {"stop", V_STOP, NUL_OK | GEN},
    {"stream", V_BOOL, NUL_OK | GEN},
    {"stream_options", V_OBJ, NUL_OK | GEN},
    {"suffix", V_STR, NUL_OK | COMPL},
    {"temperature", V_NUM, NUL_OK | GEN},
    {"top_p", V_NUM, NUL_OK | GEN},
    {"tools", V_LIST, NUL_OK | CHAT},
    {"parallel_tool_calls", V_BOOL, NUL_OK | CHAT},
    {"include_reasoning", V_BOOL, CHAT},
    {"user", V_STR, NUL_OK | GEN},
    {"use_beam_search", V_BOOL, GEN},
    {"top_k", V_INT, NUL_OK | GEN},
    {"min_p", V_NUM, NUL_OK | GEN},
    {"repetition_penalty", V_NUM, NUL_OK | GEN},
    {"length_penalty", V_NUM, GEN},
    {"stop_token_ids", V_INTLIST, NUL_OK | GEN},
    {"include_stop_str_in_output", V_BOOL, GEN},
    {"ignore_eos", V_BOOL, GEN},
    {"min_tokens", V_INT, GEN},
    {"skip_special_tokens", V_BOOL, NUL_OK | GEN},
    {"spaces_between_special_tokens", V_BOOL, GEN},
    {"add_generation_prompt", V_BOOL, TOK},
    {"add_special_tokens", V_BOOL, TOK},
    {"return_token_strs", V_BOOL, NUL_OK | TOK},
};

/* ---- pydantic's lax conversions ---- */

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s))
        (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* An integer from a string: [+-]digits, optionally ".000". */
static int str_int(const char *s, size_t n, int64_t *out)
{
    trim(&s, &n);
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (i == n || !isdigit((unsigned char)s[i]))
        return -1;
    uint64_t v = 0;
    for (; i < n && isdigit((unsigned char)s[i]); i++) {
        if (v > (UINT64_C(1) << 62))
            return -2;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && s[i] == '0'; i++)
            ;
    }
    if (i != n)
        return -1;
    if (v > (uint64_t)INT64_MAX)
        return -2;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static int str_num(const char *s, size_t n, double *out)
{
    trim(&s, &n);
    if (!n || n > 64)
        return -1;
    char buf[72];
    memcpy(buf, s, n);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)tolower((unsigned char)buf[i]);
    if (!strcmp(buf, "inf") || !strcmp(buf, "+inf") || !strcmp(buf, "infinity")) {
        *out = INFINITY;
        return 0;
    }
    if (!strcmp(buf, "-inf") || !strcmp(buf, "-infinity")) {
        *out = -INFINITY;
        return 0;
    }
    if (!strcmp(buf, "nan")) {
        *out = NAN;
        return 0;
    }
    char *end;
    *out = strtod(buf, &end);
    return *end || !isfinite(*out) || end == buf ? -1 : 0;
}

static int str_bool(const char *s, size_t n, int *out)
{
    static const char *const yes[] = {"1", "on", "t", "true", "y", "yes"};
    static const char *const no[] = {"0", "off", "f", "false", "n", "no"};
    char buf[8];
    if (n >= sizeof buf)
        return -1;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)tolower((unsigned char)s[i]);
    buf[n] = 0;
    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (!strcmp(buf, yes[i]))
            return *out = 1, 0;
        if (!strcmp(buf, no[i]))
            return *out = 0, 0;
    }
    return -1;
}

/* The value as an integer under the lax rules: 0, or the pydantic error
 * type. */
static const char *lax_int(json_t *v, int64_t *out)
{
    if (json_is_integer(v))
        return *out = json_integer_value(v), NULL;
    if (json_is_boolean(v))
        return *out = json_is_true(v), NULL;
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d))
            return "int_from_float";
        if (fabs(d) >= 9.2e18)
            return "int_parsing_size";
        return *out = (int64_t)d, NULL;
    }
    if (json_is_string(v)) {
        int rc = str_int(json_string_value(v), json_string_length(v), out);
        return rc == -2 ? "int_parsing_size" : rc ? "int_parsing" : NULL;
    }
    return "int_type";
}

static const char *lax_num(json_t *v, double *out)
{
    if (json_is_number(v))
        return *out = json_number_value(v), NULL;
    if (json_is_boolean(v))
        return *out = json_is_true(v), NULL;
    if (json_is_string(v))
        return str_num(json_string_value(v), json_string_length(v), out) ? "float_parsing" : NULL;
    return "float_type";
}

static const char *lax_bool(json_t *v, int *out)
{
    if (json_is_boolean(v))
        return *out = json_is_true(v), NULL;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        return i == 0 || i == 1 ? (*out = (int)i, NULL) : "bool_parsing";
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        return d == 0 || d == 1 ? (*out = d == 1, NULL) : "bool_type";
    }
    if (json_is_string(v))
        return str_bool(json_string_value(v), json_string_length(v), out) ? "bool_parsing" : NULL;
    return "bool_type";
}

static const char *type_msg(const char *type)
{
    static const struct {
        const char *type, *msg;
    } m[] = {
        {"int_parsing", "Input should be a valid integer, unable to parse string as an integer"},
        {"int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size"},
        {"int_from_float", "Input should be a valid integer, got a number with a fractional part"},
        {"int_type", "Input should be a valid integer"},
        {"float_parsing", "Input should be a valid number, unable to parse string as a number"},
        {"float_type", "Input should be a valid number"},
        {"bool_parsing", "Input should be a valid boolean, unable to interpret input"},
        {"bool_type", "Input should be a valid boolean"},
        {"string_type", "Input should be a valid string"},
        {"list_type", "Input should be a valid list"},
        {"model_type", "Input should be a valid dictionary or object to extract fields from"},
        {"missing", "Field required"},
        {"greater_than_equal", "Input should be greater than or equal to 0"},
    };
    for (size_t i = 0; i < ARRAY_LEN(m); i++)
        if (!strcmp(m[i].type, type))
            return m[i].msg;
    return "Input is not valid";
}

/* ---- collecting errors ---- */

struct verrs {
    int n;
    char param[96];
    char text[900];
    size_t len;
};

/* The input as vLLM's handler summarises it: strings as they are (cut at
 * 200 characters), containers as "<list of N items>", others as Python
 * prints them. */
static void input_repr(json_t *v, char *buf, size_t cap)
{
    if (!v) {
        snprintf(buf, cap, "<dict of 0 items>");
    } else if (json_is_string(v)) {
        size_t n = json_string_length(v);
        snprintf(buf, cap, "%.*s%s", (int)(n > 200 ? 200 : n), json_string_value(v),
                 n > 200 ? "...[truncated]" : "");
    } else if (json_is_array(v)) {
        snprintf(buf, cap, "<list of %zu items>", json_array_size(v));
    } else if (json_is_object(v)) {
        snprintf(buf, cap, "<dict of %zu items>", json_object_size(v));
    } else if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(buf, cap, "%.17g", json_real_value(v));
    } else {
        snprintf(buf, cap, "%s", json_is_true(v) ? "True" : json_is_false(v) ? "False" : "None");
    }
    for (char *p = buf; *p; p++) { /* keep the message one quoted string */
        if (*p == '\'')
            *p = '"';
        else if ((unsigned char)*p < 0x20)
            *p = ' ';
    }
}

static void verr(struct verrs *e, const char *type, const char *loc, json_t *input)
{
    if (e->n++ == 0)
        snprintf(e->param, sizeof e->param, "body.%s", loc);
    if (e->n > 10)
        return;
    char in[256];
    input_repr(input, in, sizeof in);
    int k = snprintf(e->text + e->len, sizeof e->text - e->len,
                     "\n  {'type': '%s', 'loc': 'body.%s', 'msg': '%s', 'input': '%s'}", type, loc,
                     type_msg(type), in);
    if (k > 0 && e->len + (size_t)k < sizeof e->text)
        e->len += (size_t)k;
}

/* *bad: one validation error. */
static void bad_one(struct openai_bad *bad, const char *type, const char *loc, json_t *v)
{
    struct verrs e = {0};
    verr(&e, type, loc, v);
    bad->status = 400;
    snprintf(bad->type, sizeof bad->type, "Bad Request");
    snprintf(bad->param, sizeof bad->param, "%s", e.param);
    snprintf(bad->msg, sizeof bad->msg, "1 validation error:%s", e.text);
}

static void check_value(struct verrs *e, const char *loc, enum vtype t, json_t *v)
{
    int64_t i;
    double d;
    int b;
    const char *bad = NULL;
    char sub[128];
    switch (t) {
    case V_INT: bad = lax_int(v, &i); break;
    case V_NUM: bad = lax_num(v, &d); break;
    case V_BOOL: bad = lax_bool(v, &b); break;
    case V_STR: bad = json_is_string(v) ? NULL : "string_type"; break;
    case V_LIST: bad = json_is_array(v) ? NULL : "list_type"; break;
    case V_OBJ: bad = json_is_object(v) ? NULL : "model_type"; break;
    case V_STOP:
        if (json_is_string(v))
            break;
        if (!json_is_array(v)) {
            bad = "string_type";
            break;
        }
        for (size_t k = 0; k < json_array_size(v); k++)
            if (!json_is_string(json_array_get(v, k))) {
                snprintf(sub, sizeof sub, "%s.%zu", loc, k);
                verr(e, "string_type", sub, json_array_get(v, k));
            }
        break;
    case V_INTLIST:
        if (!json_is_array(v)) {
            bad = "list_type";
            break;
        }
        for (size_t k = 0; k < json_array_size(v) && e->n < 11; k++) {
            json_t *x = json_array_get(v, k);
            const char *xb = lax_int(x, &i);
            snprintf(sub, sizeof sub, "%s.%zu", loc, k);
            if (xb)
                verr(e, xb, sub, x);
            else if (i < 0)
                verr(e, "greater_than_equal", sub, x);
        }
        break;
    }
    if (bad)
        verr(e, bad, loc, v);
}

/* Chat messages: objects with a string role and content a string, a list
 * of parts (objects; "text" a string when present) or null. */
static void check_messages(struct verrs *e, json_t *msgs)
{
    char loc[96];
    for (size_t i = 0; i < json_array_size(msgs) && e->n < 11; i++) {
        json_t *m = json_array_get(msgs, i);
        snprintf(loc, sizeof loc, "messages.%zu", i);
        if (!json_is_object(m)) {
            verr(e, "model_type", loc, m);
            continue;
        }
        json_t *role = json_object_get(m, "role");
        snprintf(loc, sizeof loc, "messages.%zu.role", i);
        if (!role)
            verr(e, "missing", loc, m);
        else if (!json_is_string(role))
            verr(e, "string_type", loc, role);
        json_t *content = json_object_get(m, "content");
        snprintf(loc, sizeof loc, "messages.%zu.content", i);
        if (!content || json_is_null(content) || json_is_string(content))
            continue;
        if (!json_is_array(content)) {
            verr(e, "string_type", loc, content);
            continue;
        }
        for (size_t k = 0; k < json_array_size(content); k++) {
            json_t *part = json_array_get(content, k);
            snprintf(loc, sizeof loc, "messages.%zu.content.%zu", i, k);
            if (!json_is_object(part))
                verr(e, "model_type", loc, part);
            else if (json_object_get(part, "text") && !json_is_string(json_object_get(part, "text")))
                verr(e, "string_type", loc, json_object_get(part, "text"));
        }
    }
}

static unsigned route_bit(const char *route)
{
    return !strcmp(route, "chat") ? CHAT : !strcmp(route, "completions") ? COMPL
                                         : !strcmp(route, "tokenize") ? TOK : DETOK;
}

json_t *openai_req_load(const char *body, size_t len, const char *route, struct openai_bad *bad)
{
    memset(bad, 0, sizeof *bad);
    bad->status = 400;
    snprintf(bad->type, sizeof bad->type, "Bad Request");
    json_error_t je;
    json_t *req = json_loadb(body, len, 0, &je);
    if (!req) {
        snprintf(bad->param, sizeof bad->param, "body.%d", je.position);
        snprintf(bad->msg, sizeof bad->msg,
                 "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.%d', 'msg': "
                 "'JSON decode error', 'input': '<dict of 0 items>', 'ctx': {'error': '%s'}}",
                 je.position, je.text);
        return NULL;
    }
    struct verrs e = {0};
    if (!json_is_object(req)) {
        e.n = 0;
        verr(&e, "model_type", "", req);
        snprintf(bad->param, sizeof bad->param, "body");
    } else {
        unsigned rb = route_bit(route);
        /* The tokenize route takes either form: prompt, or messages. */
        int tok_chat = rb == TOK && json_object_get(req, "messages") != NULL;
        for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
            const struct vfield *f = &fields[i];
            if (!(f->flags & rb))
                continue;
            if (rb == TOK && ((tok_chat && !strcmp(f->name, "prompt")) ||
                              (!tok_chat && !strcmp(f->name, "messages"))))
                continue;
            json_t *v = json_object_get(req, f->name);
            int required = !strcmp(f->name, "messages") || !strcmp(f->name, "tokens") ||
                           (rb == TOK && !strcmp(f->name, "prompt"));
            if (!v) {
                if (required)
                    verr(&e, "missing", f->name, req);
                continue;
            }
            if (json_is_null(v)) {
                if (!(f->flags & NUL_OK))
                    verr(&e, f->type == V_INT ? "int_type" : f->type == V_NUM ? "float_type"
                             : f->type == V_BOOL ? "bool_type" : f->type == V_LIST ? "list_type"
                                                                 : "string_type",
                         f->name, v);
                continue;
            }
            check_value(&e, f->name, f->type, v);
            if (!strcmp(f->name, "messages") && json_is_array(v))
                check_messages(&e, v);
        }
        json_t *so = json_object_get(req, "stream_options");
        if (json_is_object(so)) {
            check_value(&e, "stream_options.include_usage", V_BOOL,
                        json_object_get(so, "include_usage") ? json_object_get(so, "include_usage")
                                                             : json_false());
            json_t *cu = json_object_get(so, "continuous_usage_stats");
            if (cu && !json_is_null(cu))
                check_value(&e, "stream_options.continuous_usage_stats", V_BOOL, cu);
        }
    }
    if (e.n) {
        snprintf(bad->param, sizeof bad->param, "%s", e.param);
        snprintf(bad->msg, sizeof bad->msg, "%d validation error%s:%s%s", e.n, e.n > 1 ? "s" : "",
                 e.text, e.n > 10 ? "\n  ...and more errors" : "");
        json_decref(req);
        return NULL;
    }
    /* vLLM's model validator: stream_options need stream=True
     * (chat_completion/protocol.py:858-869, completion/protocol.py). */
    if ((route_bit(route) & GEN) && openai_req_has(req, "stream_options") &&
        !openai_req_bool(req, "stream", 0)) {
        snprintf(bad->type, sizeof bad->type, "BadRequestError");
        snprintf(bad->param, sizeof bad->param, "stream_options");
        snprintf(bad->msg, sizeof bad->msg,
                 "Stream options can only be defined when `stream=True`. (parameter=stream_options)");
        json_decref(req);
        return NULL;
    }
    return req;
}

int openai_req_intval(json_t *v, int64_t *out) { return lax_int(v, out) ? -1 : 0; }

int openai_req_has(json_t *req, const char *key)
{
    json_t *v = json_object_get(req, key);
    return v && !json_is_null(v);
}

int64_t openai_req_int(json_t *req, const char *key, int64_t def)
{
    json_t *v = json_object_get(req, key);
    int64_t x;
    return v && !json_is_null(v) && !lax_int(v, &x) ? x : def;
}

double openai_req_num(json_t *req, const char *key, double def)
{
    json_t *v = json_object_get(req, key);
    double x;
    return v && !json_is_null(v) && !lax_num(v, &x) ? x : def;
}

int openai_req_bool(json_t *req, const char *key, int def)
{
    json_t *v = json_object_get(req, key);
    int x;
    return v && !json_is_null(v) && !lax_bool(v, &x) ? x : def;
}

void openai_respond_bad(struct httpd_conn *c, const struct openai_bad *bad)
{
    openai_respond_error(c, bad->status, bad->type, bad->param[0] ? bad->param : NULL, bad->msg);
}

static void set_bad(struct openai_bad *bad, const char *param, const char *fmt, const char *a)
{
    bad->status = 400;
    snprintf(bad->type, sizeof bad->type, "BadRequestError");
    snprintf(bad->param, sizeof bad->param, "%s", param ? param : "");
    snprintf(bad->msg, sizeof bad->msg, fmt, a);
}

/* ---- prompts ---- */

void openai_buf_put(struct openai_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* Appends s with a space before it when the buffer is not empty (how the
 * server joins message contents). */
static void text_add(struct openai_buf *b, const char *s, size_t n)
{
    if (b->len)
        openai_buf_put(b, " ", 1);
    openai_buf_put(b, s, n);
}

static void chat_text(json_t *msgs, struct openai_buf *b)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        json_t *content = json_object_get(m, "content");
        if (json_is_string(content)) {
            text_add(b, json_string_value(content), json_string_length(content));
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part)
            {
                json_t *t = json_object_get(part, "text");
                if (json_is_string(t))
                    text_add(b, json_string_value(t), json_string_length(t));
            }
        }
    }
}

char *openai_req_text(json_t *req, int chat, size_t *len, struct openai_bad *bad)
{
    struct openai_buf b = {0};
    if (chat) {
        chat_text(json_object_get(req, "messages"), &b);
    } else {
        json_t *p = json_object_get(req, "prompt");
        if (!json_is_string(p)) {
            set_bad(bad, "prompt", "%s", "prompt: a string is required");
            return NULL;
        }
        text_add(&b, json_string_value(p), json_string_length(p));
    }
    if (!b.p)
        b.p = xstrdup("");
    *len = b.len;
    return b.p;
}

static void prompt_from_text(struct openai_prompt *p, const char *text, size_t len)
{
    uint32_t nb = 0;
    p->tokens = prompt_blocks_text(text, len, SERVE_CHUNK_TOKENS, NULL, 0, &nb);
    p->blocks = xmalloc((nb + 1) * sizeof *p->blocks);
    prompt_blocks_text(text, len, SERVE_CHUNK_TOKENS, p->blocks, nb, &nb);
    p->n_blocks = nb;
}

/* Token ids (each >= 0; pydantic's Field(ge=0) in CompletionRequest). */
static int prompt_from_ids(struct openai_prompt *p, json_t *a, const char *loc, struct openai_bad *bad)
{
    size_t n = json_array_size(a);
    int64_t *ids = xmalloc((n + 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        const char *t = lax_int(v, &ids[i]);
        if (!t && ids[i] < 0)
            t = "greater_than_equal";
        if (t) {
            char where[64];
            snprintf(where, sizeof where, "%s.%zu", loc, i);
            bad_one(bad, t, where, v);
            free(ids);
            return -1;
        }
    }
    uint32_t nb = 0;
    p->tokens = prompt_blocks_ids(ids, n, SERVE_CHUNK_TOKENS, NULL, 0, &nb);
    p->blocks = xmalloc((nb + 1) * sizeof *p->blocks);
    prompt_blocks_ids(ids, n, SERVE_CHUNK_TOKENS, p->blocks, nb, &nb);
    p->n_blocks = nb;
    free(ids);
    return 0;
}

void openai_prompts_free(struct openai_prompt *p, int n)
{
    for (int i = 0; p && i < n; i++)
        free(p[i].blocks);
    free(p);
}

int openai_req_prompts(json_t *req, int chat, struct openai_prompt **out, int *n_out,
                       struct openai_bad *bad)
{
    *out = NULL;
    *n_out = 0;
    if (chat) {
        struct openai_buf b = {0};
        json_t *msgs = json_object_get(req, "messages");
        if (!json_array_size(msgs)) {
            set_bad(bad, "messages", "%s", "messages: at least one message is required");
            return -1;
        }
        chat_text(msgs, &b);
        struct openai_prompt *p = xcalloc(1, sizeof *p);
        prompt_from_text(p, b.p ? b.p : "", b.len);
        free(b.p);
        *out = p;
        *n_out = 1;
        return 0;
    }
    /* prompt: str | list[str] | list[int] | list[list[int]]
     * (completion/protocol.py:53-59). */
    json_t *pr = json_object_get(req, "prompt");
    if (!pr || json_is_null(pr)) {
        set_bad(bad, "prompt", "%s", "Either prompt or prompt_embeds must be provided and non-empty.");
        return -1;
    }
    if (json_is_string(pr)) {
        struct openai_prompt *p = xcalloc(1, sizeof *p);
        prompt_from_text(p, json_string_value(pr), json_string_length(pr));
        *out = p;
        *n_out = 1;
        return 0;
    }
    if (!json_is_array(pr) || !json_array_size(pr)) {
        if (json_is_array(pr))
            set_bad(bad, "prompt", "%s", "Either prompt or prompt_embeds must be provided and non-empty.");
        else
            bad_one(bad, "string_type", "prompt", pr);
        return -1;
    }
    json_t *first = json_array_get(pr, 0);
    if (!json_is_string(first) && !json_is_array(first)) { /* one prompt of ids */
        struct openai_prompt *p = xcalloc(1, sizeof *p);
        if (prompt_from_ids(p, pr, "prompt", bad)) {
            openai_prompts_free(p, 1);
            return -1;
        }
        *out = p;
        *n_out = 1;
        return 0;
    }
    size_t n = json_array_size(pr);
    if (n > OPENAI_MAX_CHOICES) {
        char m[128];
        snprintf(m, sizeof m, "prompt: a batch of %zu prompts; at most %d", n, OPENAI_MAX_CHOICES);
        set_bad(bad, "prompt", "%s", m);
        return -1;
    }
    struct openai_prompt *p = xcalloc(n, sizeof *p);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(pr, i);
        char loc[32];
        snprintf(loc, sizeof loc, "prompt.%zu", i);
        int rc = 0;
        if (json_is_string(v) && json_is_string(first)) {
            prompt_from_text(&p[i], json_string_value(v), json_string_length(v));
        } else if (json_is_array(v) && json_is_array(first)) {
            rc = prompt_from_ids(&p[i], v, loc, bad);
        } else {
            bad_one(bad, json_is_string(first) ? "string_type" : "list_type", loc, v);
            rc = -1;
        }
        if (rc) {
            openai_prompts_free(p, (int)n);
            return -1;
        }
    }
    *out = p;
    *n_out = (int)n;
    return 0;
}
