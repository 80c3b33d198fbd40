/* trace_native.c: the native JSONL trace format, version 1 (specified in
 * traces/FORMAT.md): a header line, then each session as a line followed by
 * its calls, one a line, with block chains in the model's compact form
 * (base call, shared blocks, new suffix). Lossless for every field of the
 * trace model; times are integer nanoseconds.
 */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/limits.h"
#include "traces/base/mem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NATIVE_MAGIC "agentreplay-trace"
#define NATIVE_VERSION 1

/* ---- writer ------------------------------------------------------------ */

static char **escaped_strings(const struct trace *t)
{
    char **e = xcalloc(t->n_strings ? t->n_strings : 1, sizeof *e);
    for (uint32_t i = 0; i < t->n_strings; i++) {
        json_t *s = json_string(t->strings[i]);
        if (!s) /* not UTF-8: keep the bytes that are printable ASCII */ {
            char *c = xstrdup(t->strings[i]);
            for (char *p = c; *p; p++)
                if ((unsigned char)*p >= 0x80)
                    *p = '?';
            s = json_string(c);
            free(c);
        }
        e[i] = json_dumps(s, JSON_ENCODE_ANY);
        json_decref(s);
    }
    return e;
}

static void put_str(FILE *f, char **esc, const char *key, uint32_t i)
{
    if (i != TRACE_NONE)
        fprintf(f, ",\"%s\":%s", key, esc[i]);
}

static void put_time(FILE *f, const char *key, int64_t v)
{
    if (v >= 0)
        fprintf(f, ",\"%s\":%" PRId64, key, v);
}

static int trace_write_native_file(const struct trace *t, FILE *f)
{
    char **esc = escaped_strings(t);
    fprintf(f,
            "{\"format\":\"" NATIVE_MAGIC "\",\"version\":%d,\"source\":\"%s\","
            "\"timestamped\":%s,\"global_scope\":%s,\"scopes\":%u,\"sessions\":%u,"
            "\"calls\":%u}\n",
            NATIVE_VERSION, trace_format_name(t->format), t->timestamped ? "true" : "false",
            t->global_scope ? "true" : "false", t->n_scopes, t->n_sessions, t->n_calls);
    for (uint32_t si = 0; si < t->n_sessions; si++) {
        const struct trace_session *s = &t->sessions[si];
        fprintf(f, "{\"session\":%u", si);
        if (s->parent != TRACE_NONE) {
            fprintf(f, ",\"parent\":%u", s->parent);
            if (s->fork_after != TRACE_NONE)
                fprintf(f, ",\"fork_after\":%u", s->fork_after);
            fprintf(f, ",\"fork_t\":%" PRId64 ",\"fork_gap\":%" PRId64 ",\"join\":%s",
                    s->fork_t_ns, s->fork_gap_ns, s->join ? "true" : "false");
        }
        fprintf(f, ",\"scope\":%u,\"block_size\":%" PRId64, s->scope, s->block_size);
        put_time(f, "duration", s->duration_ns);
        put_time(f, "start", s->start_ns);
        put_str(f, esc, "name", s->name);
        put_str(f, esc, "kind", s->kind);
        put_str(f, esc, "status", s->status);
        /* file: absent = the previous session line's (it is the same for
         * every session of a file); null = none. */
        uint32_t prev_file = si ? t->sessions[si - 1].file : TRACE_NONE;
        if (s->file != prev_file) {
            if (s->file == TRACE_NONE)
                fputs(",\"file\":null", f);
            else
                put_str(f, esc, "file", s->file);
        }
        fputs("}\n", f);
        for (uint32_t k = 0; k < s->n_calls; k++) {
            const struct trace_call *c = &t->calls[s->first_call + k];
            fprintf(f, "{\"t\":%" PRId64, c->t_ns);
            put_time(f, "think", c->think_ns);
            put_time(f, "api", c->api_ns);
            put_time(f, "ttft", c->ttft_ns);
            fprintf(f, ",\"in\":%" PRId64 ",\"out\":%" PRId64 ",\"type\":\"%s\"",
                    c->prompt_tokens, c->output_tokens, c->type == TRACE_CALL_NORMAL ? "n" : "s");
            put_str(f, esc, "model", c->model);
            put_str(f, esc, "stop", c->stop);
            put_str(f, esc, "input_types", c->input_types);
            put_str(f, esc, "output_types", c->output_types);
            if (c->n_shared)
                fprintf(f, ",\"base\":%u,\"shared\":%u", c->base, c->n_shared);
            /* Runs of 3 or more consecutive ids as [first, count]. */
            fputs(",\"ids\":[", f);
            uint32_t ns = c->n_blocks - c->n_shared;
            for (uint32_t b = 0; b < ns;) {
                uint32_t r = 1;
                while (b + r < ns && c->suffix[b + r] == c->suffix[b] + r)
                    r++;
                if (b)
                    fputc(',', f);
                if (r >= 3) {
                    fprintf(f, "[%" PRId64 ",%u]", (int64_t)c->suffix[b], r);
                    b += r;
                } else {
                    fprintf(f, "%" PRId64, (int64_t)c->suffix[b]);
                    b++;
                }
            }
            fputs("]}\n", f);
        }
    }
    for (uint32_t i = 0; i < t->n_strings; i++)
        free(esc[i]);
    free(esc);
    return ferror(f) ? -1 : 0;
}

int trace_write_native(const struct trace *t, const char *path, char *err)
{
    FILE *f = !strcmp(path, "-") ? stdout : fopen(path, "w");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    int rc = trace_write_native_file(t, f);
    if (f != stdout) {
        if (fclose(f))
            rc = -1;
    } else if (fflush(f)) {
        rc = -1;
    }
    if (rc)
        return err_set(err, "%s: write failed", path);
    return 0;
}

/* ---- reader ------------------------------------------------------------ */

struct nat {
    struct tb *b;
    const char *name;
    size_t lineno;
    char *err;
    uint32_t cur;       /* current session, TRACE_NONE before the first */
    uint32_t declared_scopes;
    uint64_t *ids;
    uint32_t cap_ids;
};

#define NBAD(n, key, ...)                                                     \
    err_set((n)->err, "%s:%zu:1: %s: " key, (n)->name, (n)->lineno, __VA_ARGS__)

/* Optional integer field in [lo, hi]; absent -> dflt. */
static int opt_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t dflt, int64_t *out)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return -1;
    *out = json_integer_value(v);
    return 0;
}

/* A required integer: present, not null, and in [lo, hi]. */
static int req_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return -1;
    return opt_int(o, k, lo, hi, -1, out);
}

/* An optional string of at most max bytes (limits.h). 0, or -1 with the
 * message. */
static int opt_str(struct nat *n, json_t *o, const char *k, size_t max, uint32_t *out)
{
    json_t *v = json_object_get(o, k);
    *out = TRACE_NONE;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return NBAD(n, "%s", k, "expected a string");
    if (json_string_length(v) > max)
        return NBAD(n, "%zu bytes, more than the %zu it may hold", k, json_string_length(v), max);
    *out = tb_str_n(n->b, json_string_value(v), json_string_length(v));
    return 0;
}

static const int64_t TMAX = (int64_t)(TRACE_MAX_SECONDS * 1e9);

static int nat_session(struct nat *n, json_t *o)
{
    struct trace *t = n->b->t;
    int64_t idx, parent, after, v;
    if (opt_int(o, "session", 0, UINT32_MAX - 1, -1, &idx) || idx != (int64_t)t->n_sessions)
        return NBAD(n, "%s", "session", "expected the next session number");
    if (opt_int(o, "parent", 0, idx - 1, -1, &parent))
        return NBAD(n, "%s", "parent", "expected an earlier session number");
    uint32_t s = tb_session(n->b, parent < 0 ? TRACE_NONE : (uint32_t)parent);
    struct trace_session *ss = &t->sessions[s];
    if (parent >= 0) {
        const struct trace_session *ps = &t->sessions[parent];
        if (opt_int(o, "fork_after", 0, (int64_t)ps->n_calls - 1, -1, &after))
            return NBAD(n, "%s", "fork_after", "expected a call index of the parent");
        ss->fork_after = after < 0 ? TRACE_NONE : (uint32_t)after;
        if (opt_int(o, "fork_t", 0, TMAX, 0, &ss->fork_t_ns))
            return NBAD(n, "%s", "fork_t", "expected nanoseconds >= 0");
        if (opt_int(o, "fork_gap", 0, TMAX, 0, &ss->fork_gap_ns))
            return NBAD(n, "%s", "fork_gap", "expected nanoseconds >= 0");
        json_t *j = json_object_get(o, "join");
        if (j && !json_is_boolean(j))
            return NBAD(n, "%s", "join", "expected true or false");
        ss->join = j && json_is_true(j);
    }
    if (opt_int(o, "scope", 0, (int64_t)n->declared_scopes - 1, -1, &v) || v < 0)
        return NBAD(n, "%s", "scope", "expected a scope number below the header's scopes");
    if (parent >= 0 && (uint32_t)v != t->sessions[parent].scope)
        return NBAD(n, "%s", "scope", "a subagent shares its parent's scope");
    ss->scope = (uint32_t)v;
    if (opt_int(o, "block_size", 1, TRACE_MAX_BLOCK_SIZE, -1, &v) || v < 0)
        return NBAD(n, "%s", "block_size", "expected a positive integer");
    ss->block_size = v;
    if (opt_int(o, "duration", 0, TMAX, -1, &ss->duration_ns))
        return NBAD(n, "%s", "duration", "expected nanoseconds >= 0");
    if (opt_int(o, "start", 0, TMAX, -1, &ss->start_ns))
        return NBAD(n, "%s", "start", "expected nanoseconds >= 0");
    const char *keys[] = {"name", "kind", "status", "file"};
    uint32_t *dst[] = {&ss->name, &ss->kind, &ss->status, &ss->file};
    const size_t max[] = {LIMIT_NAME_BYTES, LIMIT_NAME_BYTES, LIMIT_NAME_BYTES, LIMIT_PATH_BYTES};
    for (int i = 0; i < 4; i++)
        if (opt_str(n, o, keys[i], max[i], dst[i]))
            return -1;
    if (!json_object_get(o, "file")) /* absent: the previous session's */
        ss->file = s ? t->sessions[s - 1].file : TRACE_NONE;
    n->cur = s;
    return 0;
}

static int nat_call(struct nat *n, json_t *o)
{
    struct trace *t = n->b->t;
    if (n->cur == TRACE_NONE)
        return err_set(n->err, "%s:%zu:1: a call before any session line", n->name, n->lineno);
    struct trace_call c;
    tb_call_init(&c);
    int64_t v;
    if (!json_object_get(o, "t"))
        return NBAD(n, "%s", "t", "missing");
    if (req_int(o, "t", 0, TMAX, &c.t_ns))
        return NBAD(n, "%s", "t", "expected nanoseconds >= 0");
    if (opt_int(o, "think", 0, TMAX, -1, &c.think_ns))
        return NBAD(n, "%s", "think", "expected nanoseconds >= 0");
    if (opt_int(o, "api", 0, TMAX, -1, &c.api_ns))
        return NBAD(n, "%s", "api", "expected nanoseconds >= 0");
    if (opt_int(o, "ttft", 0, TMAX, -1, &c.ttft_ns))
        return NBAD(n, "%s", "ttft", "expected nanoseconds >= 0");
    if (req_int(o, "in", 0, TRACE_MAX_TOKENS, &c.prompt_tokens))
        return NBAD(n, "%s", "in", "expected a token count (0 .. 1e8)");
    if (c.prompt_tokens < 1)
        return NBAD(n, "%s", "in", TB_NO_PROMPT);
    if (req_int(o, "out", 0, TRACE_MAX_OUTPUT, &c.output_tokens))
        return NBAD(n, "%s", "out", "expected a token count (0 .. 1e7)");
    json_t *ty = json_object_get(o, "type");
    const char *tys = json_string_value(ty);
    if (ty && (!tys || (strcmp(tys, "n") && strcmp(tys, "s"))))
        return NBAD(n, "%s", "type", "expected \"n\" or \"s\"");
    c.type = tys && !strcmp(tys, "s") ? TRACE_CALL_OTHER : TRACE_CALL_NORMAL;
    const char *keys[] = {"model", "stop", "input_types", "output_types"};
    uint32_t *dst[] = {&c.model, &c.stop, &c.input_types, &c.output_types};
    const size_t max[] = {LIMIT_NAME_BYTES, LIMIT_NAME_BYTES, LIMIT_TYPES_BYTES,
                          LIMIT_TYPES_BYTES};
    for (int i = 0; i < 4; i++)
        if (opt_str(n, o, keys[i], max[i], dst[i]))
            return -1;
    int64_t base, shared;
    if (opt_int(o, "base", 0, (int64_t)t->n_calls - 1, -1, &base))
        return NBAD(n, "%s", "base", "expected an earlier call number");
    if (opt_int(o, "shared", 0, UINT32_MAX / 2, 0, &shared))
        return NBAD(n, "%s", "shared", "expected a block count");
    if ((base < 0) != (shared == 0))
        return NBAD(n, "%s", "base", "base and shared go together");
    json_t *ids = json_object_get(o, "ids");
    if (!ids)
        return NBAD(n, "%s", "ids", "missing");
    if (!json_is_array(ids))
        return NBAD(n, "%s", "ids", "expected an array");
    /* Elements: an id, or [first, count] for count consecutive ids. */
    size_t ne = json_array_size(ids);
    const struct trace_session *ss = &t->sessions[n->cur];
    int64_t maxn = (c.prompt_tokens + ss->block_size - 1) / ss->block_size;
    int64_t k = 0; /* ids so far */
    for (size_t i = 0; i < ne; i++) {
        json_t *e = json_array_get(ids, i);
        int64_t cnt = 1;
        uint64_t first;
        if (json_is_integer(e)) {
            first = (uint64_t)json_integer_value(e);
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_integer(json_array_get(e, 0)) && json_is_integer(json_array_get(e, 1)) &&
                   json_integer_value(json_array_get(e, 1)) >= 1) {
            first = (uint64_t)json_integer_value(json_array_get(e, 0));
            cnt = json_integer_value(json_array_get(e, 1));
        } else {
            return err_set(n->err, "%s:%zu:1: ids[%zu]: expected a block id or [first, count]",
                           n->name, n->lineno, i);
        }
        if (cnt > maxn - shared - k)
            return err_set(n->err, "%s:%zu:1: ids: more than %lld block ids for %lld tokens",
                           n->name, n->lineno, (long long)maxn, (long long)c.prompt_tokens);
        if ((uint64_t)(k + cnt) > n->cap_ids) {
            n->cap_ids = (uint32_t)(k + cnt) + 256;
            n->ids = xrealloc(n->ids, n->cap_ids * sizeof *n->ids);
        }
        for (int64_t r = 0; r < cnt; r++)
            n->ids[k + r] = first + (uint64_t)r;
        k += cnt;
    }
    (void)v;
    char why[ERR_LEN];
    if (tb_call_compact(n->b, n->cur, &c, base < 0 ? TRACE_NONE : (uint32_t)base,
                        (uint32_t)shared, n->ids, (uint32_t)k, why))
        return err_set(n->err, "%s:%zu:1: %s", n->name, n->lineno, why);
    return 0;
}

static int nat_header(struct nat *n, json_t *o)
{
    struct trace *t = n->b->t;
    json_t *f = json_object_get(o, "format");
    if (!json_is_string(f) || strcmp(json_string_value(f), NATIVE_MAGIC))
        return NBAD(n, "%s", "format", "expected \"" NATIVE_MAGIC "\"");
    int64_t v;
    if (opt_int(o, "version", 1, 1000000, -1, &v) || v < 0)
        return NBAD(n, "%s", "version", "expected a version number");
    if (v > NATIVE_VERSION)
        return err_set(n->err, "%s:%zu:1: version %lld is newer than this reader's (%d)",
                       n->name, n->lineno, (long long)v, NATIVE_VERSION);
    if (opt_int(o, "scopes", 0, UINT32_MAX - 1, -1, &v) || v < 0)
        return NBAD(n, "%s", "scopes", "expected a count");
    n->declared_scopes = (uint32_t)v;
    t->n_scopes = (uint32_t)v;
    json_t *b1 = json_object_get(o, "timestamped"), *b2 = json_object_get(o, "global_scope");
    if ((b1 && !json_is_boolean(b1)) || (b2 && !json_is_boolean(b2)))
        return NBAD(n, "%s", "timestamped", "expected true or false");
    t->timestamped = b1 && json_is_true(b1);
    t->global_scope = b2 && json_is_true(b2);
    return 0;
}

int trace_read_native(struct tb *b, struct tb_lines *L, const char *name, bool skip_bad,
                      char *err)
{
    if (b->t->n_calls || b->t->n_sessions)
        return err_set(err, "%s: a native trace is read on its own", name);
    struct nat n = {.b = b, .name = name, .err = err, .cur = TRACE_NONE};
    int rc = 0;
    bool header = false;
    tb_json_begin();
    for (;;) {
        const char *line;
        size_t k;
        int got = tb_lines_next(L, &line, &k);
        if (got < 0) {
            rc = tb_lines_error(L, name, err);
            break;
        }
        if (got == 0)
            break;
        n.lineno = L->lineno;
        size_t w = 0;
        while (w < k && (line[w] == ' ' || line[w] == '\t' || line[w] == '\r'))
            w++;
        if (w == k)
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, k, 0, &je);
        if (!o) {
            rc = err_set(err, "%s:%zu:%d: %s", name, n.lineno, je.column, je.text);
        } else if (!json_is_object(o)) {
            rc = err_set(err, "%s:%zu:1: expected an object", name, n.lineno);
        } else if (!header) {
            rc = nat_header(&n, o);
            header = !rc;
            if (rc) /* without a header nothing else can be read */
                break;
        } else if (json_object_get(o, "session")) {
            rc = nat_session(&n, o);
            if (rc) /* a bad session line leaves its calls homeless */
                n.cur = TRACE_NONE;
        } else {
            rc = nat_call(&n, o);
        }
        tb_json_reset(); /* frees the line's document */
        if (rc && skip_bad && header) {
            b->t->skipped_records++;
            rc = 0;
        }
        if (rc)
            break;
    }
    tb_json_end();
    free(n.ids);
    if (!rc && !header)
        rc = err_set(err, "%s:1:1: empty file (no header line)", name);
    return rc;
}
