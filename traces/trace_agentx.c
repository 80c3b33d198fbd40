/* trace_agentx.c: reader of the AgentX / "Weka" agentic trace format: one
 * JSON object per session tree (a file; trace.c reads folders of them),
 * with subagents (nested ones too, which AIPerf refuses). It fills two
 * readings of a subagent's timing (traces/FORMAT.md): the legacy one in the
 * session's fork fields (`t` read as the subagent's completion) and the
 * AgentX view AIPerf 0.13.0 reads (`t` is the spawn time;
 * aiperf/dataset/loader/weka_trace.py:99-111 and :169-189), kept in
 * trace_call.at_s and trace_session.spawn_s/end_s for the replay plan.
 */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ax {
    struct tb *b;
    const char *name;
    bool skip_bad;
    char *err;
    uint64_t *ids;
    uint32_t cap_ids;
    int64_t block_size;
};

/* JSON path of entry i under prefix, e.g. requests[3].requests[0]. */
static void subpath(char *out, size_t n, const char *prefix, size_t i)
{
    snprintf(out, n, "%s%srequests[%zu]", prefix, *prefix ? "." : "", i);
}

static int bad(struct ax *a, const char *path, const char *field, const char *why)
{
    return err_set(a->err, "%s: %s%s%s: %s", a->name, path, field ? "." : "",
                   field ? field : "", why);
}

static int get_tokens(json_t *o, const char *k, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(o, k);
    if (!v)
        return -1;
    if (!json_is_integer(v))
        return -2;
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > max)
        return -3;
    *out = x;
    return 0;
}

/* Optional seconds field: absent or null -> -1 (and NAN in raw). AIPerf
 * takes any number (weka_trace_models.py:46-51); a negative one is kept in
 * raw (negative api_time lengthens a delay, weka_trace.py:131-157) and is
 * -1 ("not recorded") in the ns field. */
static int opt_seconds(json_t *o, const char *k, int64_t *out, double *raw)
{
    json_t *v = json_object_get(o, k);
    *out = -1;
    if (raw)
        *raw = NAN;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return -1;
    double x = json_number_value(v);
    if (!isfinite(x) || x > TRACE_MAX_SECONDS || x < -TRACE_MAX_SECONDS)
        return -1;
    if (raw)
        *raw = x;
    return x < 0 ? 0 : tb_seconds_ns(v, out);
}

static int opt_string(struct ax *a, json_t *o, const char *k, uint32_t *out)
{
    json_t *v = json_object_get(o, k);
    *out = TRACE_NONE;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return -1;
    *out = tb_str_n(a->b, json_string_value(v), json_string_length(v));
    return 0;
}

/* AIPerf's start of an inner request on the root's clock: one recorded
 * before its entry's spawn time (by more than 1e-6 s) is relative to it
 * (weka_trace.py:99-111, _JOIN_EPSILON_SECONDS). entry_t NAN: a root call. */
static double agentx_abs_t(double t, double entry_t)
{
    if (!isnan(entry_t) && t + 1e-6 < entry_t)
        return entry_t + t;
    return t;
}

/* A call of session sess at index pos of its request list; entry_t is the
 * spawn time (root clock) of the subagent entry that holds it, NAN for a
 * call of the root. */
static int read_call(struct ax *a, json_t *r, uint32_t sess, const char *path, size_t pos,
                     double entry_t)
{
    static const char *const tok_why[] = {"", "missing", "expected an integer",
                                          "token count negative or absurd"};
    struct trace_call c;
    tb_call_init(&c);
    json_t *ty = json_object_get(r, "type");
    const char *tys = json_string_value(ty);
    c.type = tys && !strcmp(tys, "n") ? TRACE_CALL_NORMAL : TRACE_CALL_OTHER;
    json_t *tv = json_object_get(r, "t");
    if (!tv)
        return bad(a, path, "t", "missing");
    if (tb_seconds_ns(tv, &c.t_ns))
        return bad(a, path, "t", "expected seconds (a number >= 0)");
    int rc = get_tokens(r, "in", TRACE_MAX_TOKENS, &c.prompt_tokens);
    if (rc)
        return bad(a, path, "in", tok_why[-rc]);
    rc = get_tokens(r, "out", TRACE_MAX_OUTPUT, &c.output_tokens);
    if (rc)
        return bad(a, path, "out", tok_why[-rc]);
    if (opt_seconds(r, "api_time", &c.api_ns, &c.api_s))
        return bad(a, path, "api_time", "expected seconds (a number)");
    if (opt_seconds(r, "ttft", &c.ttft_ns, NULL))
        return bad(a, path, "ttft", "expected seconds (a number)");
    if (opt_seconds(r, "think_time", &c.think_ns, NULL))
        return bad(a, path, "think_time", "expected seconds (a number)");
    c.at_s = agentx_abs_t(json_number_value(tv), entry_t);
    c.pos = (uint32_t)pos;
    if (opt_string(a, r, "model", &c.model))
        return bad(a, path, "model", "expected a string");
    if (opt_string(a, r, "stop", &c.stop))
        return bad(a, path, "stop", "expected a string");
    json_t *v = json_object_get(r, "input_types");
    if (v && !json_is_null(v) && tb_json_str_list(a->b, v, &c.input_types))
        return bad(a, path, "input_types", "expected an array of strings");
    v = json_object_get(r, "output_types");
    if (v && !json_is_null(v) && tb_json_str_list(a->b, v, &c.output_types))
        return bad(a, path, "output_types", "expected an array of strings");
    json_t *h = json_object_get(r, "hash_ids");
    if (!h)
        return bad(a, path, "hash_ids", "missing");
    if (!json_is_array(h))
        return bad(a, path, "hash_ids", "expected an array of block ids");
    size_t n = json_array_size(h);
    int64_t maxn = (c.prompt_tokens + a->block_size - 1) / a->block_size;
    if ((int64_t)n > maxn) {
        char why[160];
        snprintf(why, sizeof why, "%zu block ids for %lld tokens (at most %lld with %lld-token blocks)",
                 n, (long long)c.prompt_tokens, (long long)maxn, (long long)a->block_size);
        return bad(a, path, "hash_ids", why);
    }
    if (n > a->cap_ids) {
        a->cap_ids = (uint32_t)n + 256;
        a->ids = xrealloc(a->ids, a->cap_ids * sizeof *a->ids);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(h, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            char f[64];
            snprintf(f, sizeof f, "hash_ids[%zu]", i);
            return bad(a, path, f, "expected a non-negative integer block id");
        }
        a->ids[i] = (uint64_t)json_integer_value(e);
    }
    tb_call(a->b, sess, &c, a->ids, (uint32_t)n);
    return 0;
}

struct sub {
    json_t *r;
    size_t pos;
    int64_t start_ns;
};

static int cmp_sub(const void *x, const void *y)
{
    const struct sub *p = x, *q = y;
    if (p->start_ns != q->start_ns)
        return p->start_ns < q->start_ns ? -1 : 1;
    return p->pos < q->pos ? -1 : p->pos > q->pos;
}

static int read_session(struct ax *a, json_t *reqs, uint32_t sess, const char *prefix,
                        int depth, double entry_t);

/* Optional declared prefix size (tool_tokens, system_tokens): absent or
 * null -> 0. */
static int opt_tokens(json_t *o, const char *k, int64_t *out)
{
    json_t *v = json_object_get(o, k);
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > TRACE_MAX_TOKENS)
        return -1;
    *out = json_integer_value(v);
    return 0;
}

/* Checks a subagent entry's own fields; fills its legacy start time
 * (t - duration). */
static int check_sub(struct ax *a, json_t *r, const char *path, int64_t *start_ns)
{
    json_t *rq = json_object_get(r, "requests");
    if (!rq)
        return bad(a, path, "requests", "subagent without requests[]");
    if (!json_is_array(rq))
        return bad(a, path, "requests", "expected an array");
    json_t *tv = json_object_get(r, "t");
    int64_t t_ns, dur = -1, tok;
    if (!tv)
        return bad(a, path, "t", "missing");
    if (tb_seconds_ns(tv, &t_ns))
        return bad(a, path, "t", "expected seconds (a number >= 0)");
    json_t *d = json_object_get(r, "duration_ms");
    if (d && !json_is_null(d)) {
        double ms = json_number_value(d);
        if (!json_is_number(d) || !isfinite(ms) || fabs(ms) > TRACE_MAX_SECONDS * 1e3)
            return bad(a, path, "duration_ms", "expected milliseconds (a number)");
        /* Negative: AIPerf ends the subagent at its spawn (weka_trace.py:
         * 169-189); the legacy reading takes it as not recorded. */
        dur = ms >= 0 ? llround(ms * 1e6) : -1;
    }
    const char *keys[] = {"agent_id", "subagent_type", "status"};
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        json_t *v = json_object_get(r, keys[i]);
        if (v && !json_is_null(v) && !json_is_string(v))
            return bad(a, path, keys[i], "expected a string");
    }
    if (opt_tokens(r, "tool_tokens", &tok))
        return bad(a, path, "tool_tokens", "expected a token count");
    if (opt_tokens(r, "system_tokens", &tok))
        return bad(a, path, "system_tokens", "expected a token count");
    /* Legacy reading: `t` is when the subagent finished, start = t -
     * duration (traces/FORMAT.md). */
    *start_ns = dur >= 0 ? (t_ns > dur ? t_ns - dur : 0) : t_ns;
    return 0;
}

/* The AgentX end of subagent session s read from entry r (AIPerf's
 * _sa_end_seconds, weka_trace.py:169-189): spawn + duration_ms (negative
 * or non-finite: 0), else the latest end of its calls, else the spawn. */
static double agentx_sub_end(const struct trace *t, const struct trace_session *s, json_t *r)
{
    json_t *d = json_object_get(r, "duration_ms");
    if (d && json_is_number(d)) {
        double ds = json_number_value(d) / 1000.0;
        if (!isfinite(ds) || ds < 0.0)
            ds = 0.0;
        return s->spawn_s + ds;
    }
    if (!s->n_calls)
        return s->spawn_s;
    double end = 0;
    for (uint32_t k = 0; k < s->n_calls; k++) {
        const struct trace_call *c = &t->calls[s->first_call + k];
        double e = c->at_s + (isfinite(c->api_s) && c->api_s > 0.0 ? c->api_s : 0.0);
        if (k == 0 || e > end)
            end = e;
    }
    return end;
}

/* Reads one request list: the root's (entry_t NAN) or a subagent's
 * (entry_t its spawn time on the root clock). */
static int read_session(struct ax *a, json_t *reqs, uint32_t sess, const char *prefix,
                        int depth, double entry_t)
{
    char path[512];
    if (depth > 64)
        return err_set(a->err, "%s: %s: subagents nested more than 64 deep", a->name, prefix);
    size_t n = json_array_size(reqs);
    struct sub *subs = NULL;
    size_t n_subs = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *r = json_array_get(reqs, i);
        subpath(path, sizeof path, prefix, i);
        if (!json_is_object(r)) {
            rc = bad(a, path, NULL, "expected an object (a call or a subagent)");
        } else {
            json_t *ty = json_object_get(r, "type");
            if (!ty)
                rc = bad(a, path, "type", "missing");
            else if (!json_is_string(ty))
                rc = bad(a, path, "type", "expected a string");
            else if (!strcmp(json_string_value(ty), "subagent")) {
                int64_t start = 0;
                rc = check_sub(a, r, path, &start);
                if (!rc) {
                    subs = xrealloc(subs, (n_subs + 1) * sizeof *subs);
                    subs[n_subs++] = (struct sub){r, i, start};
                }
            } else if (json_object_get(r, "requests")) {
                rc = bad(a, path, "requests", "an entry with requests[] must have type \"subagent\"");
            } else {
                rc = read_call(a, r, sess, path, i, entry_t);
            }
        }
        if (rc && a->skip_bad) {
            a->b->t->skipped_records++;
            rc = 0;
        }
    }
    /* Sessions in legacy start order (the legacy lanes read them so). */
    if (n_subs > 1)
        qsort(subs, n_subs, sizeof *subs, cmp_sub);
    for (size_t k = 0; k < n_subs && !rc; k++) {
        json_t *r = subs[k].r;
        subpath(path, sizeof path, prefix, subs[k].pos);
        struct trace *t = a->b->t;
        uint32_t s = tb_session(a->b, sess);
        struct trace_session *ss = &t->sessions[s];
        ss->fork_t_ns = subs[k].start_ns;
        ss->join = false;
        json_t *d = json_object_get(r, "duration_ms");
        if (d && json_is_number(d) && json_number_value(d) >= 0)
            ss->duration_ns = llround(json_number_value(d) * 1e6);
        const char *id = json_string_value(json_object_get(r, "agent_id"));
        ss->name = tb_str(a->b, id);
        ss->kind = tb_str(a->b, json_string_value(json_object_get(r, "subagent_type")));
        ss->status = tb_str(a->b, json_string_value(json_object_get(r, "status")));
        ss->pos = (uint32_t)subs[k].pos;
        ss->spawn_s = agentx_abs_t(json_number_value(json_object_get(r, "t")), entry_t);
        opt_tokens(r, "tool_tokens", &ss->tool_tokens);
        opt_tokens(r, "system_tokens", &ss->system_tokens);
        /* Fork point: the parent's last call recorded at or before the
         * subagent's start; the gap runs from that call's recorded end. */
        const struct trace_session *ps = &t->sessions[sess];
        uint32_t after = TRACE_NONE;
        int64_t end = 0;
        for (uint32_t c = 0; c < ps->n_calls; c++) {
            const struct trace_call *pc = &t->calls[ps->first_call + c];
            if (pc->t_ns <= ss->fork_t_ns && (after == TRACE_NONE ||
                                              pc->t_ns >= t->calls[ps->first_call + after].t_ns)) {
                after = c;
                end = pc->t_ns + (pc->api_ns > 0 ? pc->api_ns : 0);
            }
        }
        ss->fork_after = after;
        ss->fork_gap_ns = ss->fork_t_ns > end ? ss->fork_t_ns - end : 0;
        double spawn = ss->spawn_s;
        rc = read_session(a, json_object_get(r, "requests"), s, path, depth + 1, spawn);
        ss = &a->b->t->sessions[s]; /* the array may have moved */
        ss->end_s = agentx_sub_end(a->b->t, ss, r);
    }
    free(subs);
    return rc;
}

int trace_read_agentx_doc(struct tb *b, const char *data, size_t len, const char *name,
                          bool skip_bad, char *err)
{
    json_error_t je;
    tb_json_begin();
    json_t *root = json_loadb(data, len, 0, &je);
    if (!root) {
        tb_json_end();
        if (len == 0)
            return err_set(err, "%s:1:1: empty file", name);
        return err_set(err, "%s:%d:%d: %s", name, je.line, je.column, je.text);
    }
    struct ax a = {.b = b, .name = name, .skip_bad = skip_bad, .err = err, .block_size = 64};
    int rc = 0;
    if (!json_is_object(root)) {
        rc = err_set(err, "%s: top level: expected an object (one session)", name);
        goto out;
    }
    json_t *reqs = json_object_get(root, "requests");
    if (!reqs) {
        rc = err_set(err, "%s: requests: missing", name);
        goto out;
    }
    if (!json_is_array(reqs)) {
        rc = err_set(err, "%s: requests: expected an array", name);
        goto out;
    }
    json_t *bs = json_object_get(root, "block_size");
    if (bs) {
        if (!json_is_integer(bs) || json_integer_value(bs) <= 0 ||
            json_integer_value(bs) > TRACE_MAX_BLOCK_SIZE) {
            rc = err_set(err, "%s: block_size: expected a positive integer", name);
            goto out;
        }
        a.block_size = json_integer_value(bs);
    }
    json_t *sc = json_object_get(root, "hash_id_scope");
    bool global = false;
    if (sc && !json_is_null(sc)) {
        const char *v = json_string_value(sc);
        if (!v || (strcmp(v, "local") && strcmp(v, "global"))) {
            rc = err_set(err, "%s: hash_id_scope: expected \"local\" or \"global\"", name);
            goto out;
        }
        global = !strcmp(v, "global");
    }
    json_t *id = json_object_get(root, "id");
    if (id && !json_is_null(id) && !json_is_string(id)) {
        rc = err_set(err, "%s: id: expected a string", name);
        goto out;
    }
    struct trace *t = b->t;
    uint32_t s = tb_session(b, TRACE_NONE);
    struct trace_session *ss = &t->sessions[s];
    /* Scope: one per local file; every global file shares one. */
    if (global) {
        if (b->global_scope_id == TRACE_NONE)
            b->global_scope_id = t->n_scopes++;
        ss->scope = b->global_scope_id;
    } else {
        ss->scope = t->n_scopes++;
    }
    ss->block_size = a.block_size;
    ss->file = tb_str(b, name);
    ss->spawn_s = ss->end_s = 0.0;
    if (opt_tokens(root, "tool_tokens", &ss->tool_tokens) ||
        opt_tokens(root, "system_tokens", &ss->system_tokens)) {
        rc = err_set(err, "%s: tool_tokens, system_tokens: expected token counts", name);
        goto out;
    }
    ss->name = id && json_is_string(id) ? tb_str(b, json_string_value(id)) : ss->file;
    rc = read_session(&a, reqs, s, "", 0, NAN);
out:
    free(a.ids);
    tb_json_end(); /* frees the document */
    return rc;
}
