/* test_convert.c: traces written for the peers and read back.
 *   - native -> weka -> native (a `trace synth` trace): every call's
 *     times, lengths, model, stop and types, every subagent's name, kind,
 *     status and duration (to the ms: AIPerf's duration_ms is an integer)
 *     and spawn time (as the AgentX reader reads a subagent's t), and the
 *     prefix structure of every call's full blocks, exactly;
 *   - native -> mooncake -> native: arrivals to the ms, lengths, and the
 *     prefix structure at 512 tokens: two calls share their first k
 *     512-token ids exactly when they share the first 512k tokens;
 *   - the public Mooncake trace -> mooncake: the same file content
 *     (timestamps, lengths, prefix structure with partial blocks);
 *   - the public agentic traces -> weka: lengths, models and the
 *     theoretical hit rate over full blocks kept;
 *   - what AIPerf's and GuideLLM's schemas demand: only their keys,
 *     floor(in / 64) Weka ids and ceil(in / 512) Mooncake ids, ids below
 *     2^31, an id never at two sizes, timestamps in ms never decreasing;
 *   - a folder holding .json files is refused without --force; `trace
 *     convert -o` onto its own input is refused without --force.
 * Runs under the caps of tests/testhttp.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/testhelp.h"
#include "tests/testhttp.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/hmap.h"
#include "traces/base/mem.h"
#include "traces/trace.h"
#include "traces/trace_write.h"

static char tmp[256];

/* The AgentX reader's reading of a subagent entry's t (spawn or end) and
 * of its calls' t (absolute on the root's timeline, or as given). */
static int reads_spawn, reads_absolute;

static void probe_reader(void)
{
    const char *doc = "{\"id\":\"p\",\"block_size\":64,\"hash_id_scope\":\"local\",\"requests\":["
                      "{\"t\":0,\"type\":\"n\",\"in\":64,\"out\":1,\"hash_ids\":[1]},"
                      "{\"t\":10,\"type\":\"subagent\",\"duration_ms\":4000,\"requests\":["
                      "{\"t\":12,\"type\":\"n\",\"in\":64,\"out\":1,\"hash_ids\":[2]}]}]}";
    struct trace_read_opts o = {.format = TRACE_FMT_AGENTX};
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(doc, strlen(doc), "probe.json", &o, err);
    CHECKF(t && t->n_sessions == 2, "probe read (%s)", t ? "" : err);
    if (!t)
        return;
    reads_spawn = t->sessions[1].fork_t_ns == 10 * 1000000000LL;
    reads_absolute = t->calls[1].t_ns == 2 * 1000000000LL;
    printf("NOTE the AgentX reader reads a subagent's t as its %s and its calls' t as %s\n",
           reads_spawn ? "spawn" : "end", reads_absolute ? "absolute" : "given");
    trace_destroy(t);
}

/* Canonical ids of each call's full chain blocks: a dense number per
 * distinct (scope, previous canonical id, block id), in call order. Two
 * traces with calls in the same order have equal canonical ids exactly
 * when their prefix structures are equal. Calls are taken in order[]
 * (NULL: the trace's); out[q] and n[q] are those of the q-th taken. */
static uint32_t **canon(const struct trace *t, uint32_t *n, int64_t bs_override, const uint32_t *order)
{
    uint32_t **out = xcalloc(t->n_calls, sizeof *out);
    struct hmap m;
    hmap_init(&m);
    uint64_t *buf = NULL;
    uint32_t cap = 0;
    for (uint32_t q = 0; q < t->n_calls; q++) {
        uint32_t i = order ? order[q] : q;
        const struct trace_call *c = &t->calls[i];
        const struct trace_session *s = &t->sessions[c->session];
        int64_t bs = bs_override > 0 ? bs_override : s->block_size;
        uint32_t full = (uint32_t)(c->prompt_tokens / bs);
        uint32_t k = c->n_blocks < full ? c->n_blocks : full;
        if (c->n_blocks > cap) {
            cap = c->n_blocks + 64;
            buf = xrealloc(buf, cap * sizeof *buf);
        }
        trace_call_blocks(t, c, buf, cap);
        out[q] = xmalloc((k + 1) * sizeof **out);
        uint64_t prev = 0x5eed;
        for (uint32_t j = 0; j < k; j++) {
            bool added;
            uint64_t *v = hmap_put(&m, hash_mix(hash_mix(prev, s->scope * 0x9e37ull + 1), buf[j]), &added);
            if (added)
                *v = hmap_size(&m);
            out[q][j] = (uint32_t)*v;
            prev = *v;
        }
        n[q] = k;
    }
    free(buf);
    hmap_free(&m);
    return out;
}

static void canon_free(uint32_t **c, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        free(c[i]);
    free(c);
}

static struct trace *read_path(const char *path, enum trace_format f)
{
    struct trace_read_opts o = {.format = f};
    char err[ERR_LEN];
    struct trace *t = trace_read(path, &o, err);
    if (!t)
        fprintf(stderr, "read %s: %s\n", path, err);
    return t;
}

static int streq(const struct trace *a, uint32_t i, const struct trace *b, uint32_t j)
{
    const char *x = trace_str(a, i), *y = trace_str(b, j);
    return (!x && !y) || (x && y && !strcmp(x, y));
}

/* ---- the schemas ---- */

static int keys_only(json_t *o, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            ok |= !strcmp(k, allowed[i]);
        if (!ok) {
            fprintf(stderr, "  unexpected key %s\n", k);
            return 0;
        }
    }
    return 1;
}

static const char *const trace_keys[] = {"id", "models", "block_size", "hash_id_scope", "tool_tokens",
                                         "system_tokens", "requests", "totals", NULL};
static const char *const call_keys[] = {"t", "type", "model", "in", "out", "hash_ids", "input_types", "output_types",
                                        "stop", "api_time", "think_time", "ttft", NULL};
static const char *const sub_keys[] = {"t", "type", "agent_id", "subagent_type", "duration_ms", "total_tokens",
                                       "tool_use_count", "status", "requests", "models", "tool_tokens",
                                       "system_tokens", NULL};

/* One Weka call object as AIPerf's WekaNormalRequest/WekaStreamingRequest
 * takes it; *ids counts its ids. */
static int weka_call_ok(json_t *r, struct hmap *sizes)
{
    const char *ty = json_string_value(json_object_get(r, "type"));
    json_t *h = json_object_get(r, "hash_ids");
    int64_t in = json_integer_value(json_object_get(r, "in"));
    int ok = keys_only(r, call_keys) && ty && (!strcmp(ty, "n") || !strcmp(ty, "s")) &&
             (!strcmp(ty, "s") || !json_object_get(r, "ttft")) && json_is_number(json_object_get(r, "t")) &&
             json_is_string(json_object_get(r, "model")) && json_is_integer(json_object_get(r, "out")) &&
             json_is_array(h) && (int64_t)json_array_size(h) == in / 64;
    for (size_t i = 0; ok && i < json_array_size(h); i++) {
        json_int_t id = json_integer_value(json_array_get(h, i));
        ok = json_is_integer(json_array_get(h, i)) && id >= 0 && id < (1LL << 31);
    }
    (void)sizes; /* every Weka id is a full 64-token block */
    return ok;
}

static int weka_folder_ok(const char *dir, int *files)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int ok = d != NULL;
    *files = 0;
    while (d && (e = readdir(d))) {
        if (!strstr(e->d_name, ".json"))
            continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        json_t *j = json_load_file(p, 0, NULL);
        (*files)++;
        ok &= j && keys_only(j, trace_keys) && json_integer_value(json_object_get(j, "block_size")) == 64 &&
              !strcmp(json_string_value(json_object_get(j, "hash_id_scope")), "local") &&
              json_array_size(json_object_get(j, "models")) > 0;
        json_t *reqs = json_object_get(j, "requests");
        for (size_t i = 0; ok && i < json_array_size(reqs); i++) {
            json_t *r = json_array_get(reqs, i);
            const char *ty = json_string_value(json_object_get(r, "type"));
            if (ty && !strcmp(ty, "subagent")) {
                json_t *dm = json_object_get(r, "duration_ms");
                ok &= keys_only(r, sub_keys) && (json_is_integer(dm) || json_is_null(dm)) &&
                      json_is_string(json_object_get(r, "agent_id")) &&
                      json_is_string(json_object_get(r, "subagent_type")) &&
                      json_is_string(json_object_get(r, "status")) && json_is_array(json_object_get(r, "models"));
                json_t *in = json_object_get(r, "requests");
                for (size_t k = 0; ok && k < json_array_size(in); k++)
                    ok &= weka_call_ok(json_array_get(in, k), NULL) &&
                          json_number_value(json_object_get(json_array_get(in, k), "t")) >=
                              json_number_value(json_object_get(r, "t"));
            } else {
                ok &= weka_call_ok(r, NULL);
            }
        }
        json_decref(j);
    }
    if (d)
        closedir(d);
    return ok;
}

/* A Mooncake file as the three readers want it; *lines its line count. */
static int mooncake_ok(const char *path, int *lines)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int ok = f != NULL;
    long long prev = -1;
    struct hmap size_of; /* id -> its block size: never two */
    hmap_init(&size_of);
    *lines = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        static const char *const keys[] = {"timestamp", "input_length", "output_length", "hash_ids", "duration", NULL};
        json_t *h = json_object_get(j, "hash_ids");
        long long ts = json_integer_value(json_object_get(j, "timestamp"));
        int64_t in = json_integer_value(json_object_get(j, "input_length"));
        ok &= j && keys_only(j, keys) && json_is_integer(json_object_get(j, "timestamp")) && ts >= prev &&
              (int64_t)json_array_size(h) == (in + 511) / 512;
        prev = ts;
        for (size_t i = 0; ok && i < json_array_size(h); i++) {
            json_int_t id = json_integer_value(json_array_get(h, i));
            int64_t sz = i + 1 < json_array_size(h) ? 512 : in - (int64_t)i * 512;
            bool added;
            uint64_t *v = hmap_put(&size_of, (uint64_t)id, &added);
            if (added)
                *v = (uint64_t)sz;
            ok &= id >= 0 && id < (1LL << 31) && *v == (uint64_t)sz;
        }
        json_decref(j);
        (*lines)++;
    }
    free(line);
    if (f)
        fclose(f);
    hmap_free(&size_of);
    return ok;
}

/* ---- round trips ---- */

static struct trace *synth(uint32_t sessions, uint64_t seed)
{
    struct trace_synth_params p;
    trace_synth_defaults(&p);
    p.sessions = sessions;
    p.seed = seed;
    p.subagent_p = 0.08;
    char err[ERR_LEN];
    struct trace *t = trace_synth(&p, err);
    CHECKF(t != NULL, "synth (%s)", t ? "" : err);
    return t;
}

static void test_weka_round_trip(void)
{
    struct trace *a = synth(12, 7);
    if (!a)
        return;
    char dir[300], err[ERR_LEN];
    snprintf(dir, sizeof dir, "%s/weka", tmp);
    CHECKF(trace_write_weka(a, dir, false, err) == 0, "weka written (%s)", err);
    int files;
    CHECKF(weka_folder_ok(dir, &files) && files == (int)a->n_roots,
           "weka: %d files, only AIPerf's keys, floor(in/64) ids below 2^31", files);
    struct trace *b = read_path(dir, TRACE_FMT_AGENTX);
    CHECK(b != NULL, "weka read back");
    if (!b) {
        trace_destroy(a);
        return;
    }
    CHECKF(a->n_roots == b->n_roots && a->n_sessions == b->n_sessions && a->n_calls == b->n_calls,
           "counts kept: %u/%u roots, %u/%u sessions, %u/%u calls", a->n_roots, b->n_roots, a->n_sessions,
           b->n_sessions, a->n_calls, b->n_calls);
    /* Sessions matched by root and name (the reader orders a root's
     * subagents by its reading of their start). */
    uint32_t *match = xmalloc((a->n_sessions + 1) * sizeof *match), *order = xmalloc((a->n_calls + 1) * sizeof *order);
    int sess_ok = a->n_sessions == b->n_sessions, call_ok = 1;
    for (uint32_t s = 0; sess_ok && s < a->n_sessions; s++) {
        const struct trace_session *x = &a->sessions[s];
        match[s] = TRACE_NONE;
        for (uint32_t r = 0; r < b->n_sessions && match[s] == TRACE_NONE; r++) {
            const struct trace_session *y = &b->sessions[r];
            uint32_t xr = x->root, yr = y->root;
            if ((x->parent == TRACE_NONE) == (y->parent == TRACE_NONE) && streq(a, x->name, b, y->name) &&
                (x->parent == TRACE_NONE || (match[xr] == yr)))
                match[s] = r;
        }
        sess_ok &= match[s] != TRACE_NONE;
    }
    uint32_t q = 0;
    for (uint32_t s = 0; sess_ok && s < a->n_sessions; s++) {
        const struct trace_session *x = &a->sessions[s], *y = &b->sessions[match[s]];
        sess_ok &= x->n_calls == y->n_calls;
        if (x->parent != TRACE_NONE) {
            int64_t dur_ms = (x->duration_ns + 500000) / 1000000 * 1000000;
            int64_t fork = reads_spawn ? x->fork_t_ns : (x->fork_t_ns > dur_ms ? x->fork_t_ns - dur_ms : 0);
            sess_ok &= y->duration_ns == dur_ms && y->fork_t_ns == fork && streq(a, x->kind, b, y->kind) &&
                       streq(a, x->status, b, y->status);
        }
        if (!sess_ok)
            fprintf(stderr, "  session %u: calls %u/%u fork %lld/%lld dur %lld/%lld\n", s, x->n_calls, y->n_calls,
                    (long long)x->fork_t_ns, (long long)y->fork_t_ns, (long long)x->duration_ns,
                    (long long)y->duration_ns);
        for (uint32_t k = 0; sess_ok && k < x->n_calls; k++) {
            const struct trace_call *c = &a->calls[x->first_call + k], *d = &b->calls[y->first_call + k];
            order[q++] = y->first_call + k;
            /* Calls of a subagent are written on the root's timeline. */
            int64_t t = c->t_ns;
            if (x->parent != TRACE_NONE && !reads_absolute)
                t += x->fork_t_ns;
            call_ok &= d->t_ns == t && d->prompt_tokens == c->prompt_tokens && d->output_tokens == c->output_tokens &&
                       d->api_ns == c->api_ns && d->think_ns == c->think_ns && d->ttft_ns == c->ttft_ns &&
                       d->type == c->type && streq(a, c->model, b, d->model) && streq(a, c->stop, b, d->stop) &&
                       streq(a, c->input_types, b, d->input_types) &&
                       streq(a, c->output_types, b, d->output_types);
        }
    }
    CHECK(sess_ok, "sessions kept: roots, names, kinds, statuses, durations (ms), spawn times");
    CHECK(call_ok, "calls kept: t (ns), lengths, think/api/ttft (ns), type, model, stop, types");
    /* The original in session order = its call order. */
    uint32_t *na = xcalloc(a->n_calls, 4), *nb = xcalloc(b->n_calls, 4);
    uint32_t **ca = canon(a, na, 0, NULL), **cb = sess_ok ? canon(b, nb, 0, order) : NULL;
    int same = sess_ok && a->n_calls == b->n_calls;
    for (uint32_t i = 0; same && i < a->n_calls; i++) {
        same = na[i] == nb[i] && !memcmp(ca[i], cb[i], na[i] * sizeof **ca);
        if (!same)
            fprintf(stderr, "  call %u: %u/%u full blocks\n", i, na[i], nb[i]);
    }
    CHECK(same, "prefix structure of every call's full blocks kept exactly");
    canon_free(ca, a->n_calls);
    if (cb)
        canon_free(cb, b->n_calls);
    free(na);
    free(nb);
    free(match);
    free(order);
    struct trace_stats sa, sb;
    trace_stats_compute(a, &sa);
    trace_stats_compute(b, &sb);
    CHECKF(fabs(sa.hit_rate_full_blocks - sb.hit_rate_full_blocks) < 1e-12,
           "theoretical hit rate (full blocks) %.6f = %.6f", sa.hit_rate_full_blocks, sb.hit_rate_full_blocks);
    /* The folder again: refused while it holds .json files, unless replace. */
    CHECK(trace_write_weka(a, dir, false, err) == -1 && strstr(err, "--force"), "a folder of .json refused");
    CHECK(trace_write_weka(a, dir, true, err) == 0, "replaced with replace");
    /* JSONL: the same objects, one a line. */
    char jl[300];
    snprintf(jl, sizeof jl, "%s/weka.jsonl", tmp);
    CHECK(trace_write_weka_jsonl(a, jl, err) == 0, "weka-jsonl written");
    FILE *f = fopen(jl, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    CHECKF(n == (int)a->n_roots, "weka-jsonl: one line per tree (%d)", n);
    trace_destroy(a);
    trace_destroy(b);
}

/* LCP of two id lists. */
static uint32_t lcp(const uint64_t *x, uint32_t nx, const uint64_t *y, uint32_t ny)
{
    uint32_t k = 0;
    while (k < nx && k < ny && x[k] == y[k])
        k++;
    return k;
}

static void test_mooncake_round_trip(void)
{
    struct trace *a = synth(10, 11);
    if (!a)
        return;
    char path[300], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/m.jsonl", tmp);
    CHECKF(trace_write_mooncake(a, path, err) == 0, "mooncake written (%s)", err);
    int lines;
    CHECKF(mooncake_ok(path, &lines) && lines == (int)a->n_calls,
           "mooncake: %d lines, ms timestamps in order, ceil(in/512) ids below 2^31, one size per id", lines);
    struct trace *b = read_path(path, TRACE_FMT_MOONCAKE);
    CHECK(b && b->n_calls == a->n_calls && b->timestamped && b->global_scope, "mooncake read back: every call");
    if (!b) {
        trace_destroy(a);
        return;
    }
    /* Arrival order: the original's calls sorted by absolute start. */
    int64_t *abs = xmalloc(a->n_calls * sizeof *abs);
    trace_call_abs_times(a, abs);
    uint32_t *ord = xmalloc(a->n_calls * sizeof *ord);
    for (uint32_t i = 0; i < a->n_calls; i++)
        ord[i] = i;
    for (uint32_t i = 1; i < a->n_calls; i++) /* insertion sort: stable, small */
        for (uint32_t j = i; j > 0 && abs[ord[j - 1]] > abs[ord[j]]; j--) {
            uint32_t x = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = x;
        }
    int fields = 1;
    for (uint32_t k = 0; k < b->n_calls; k++) {
        const struct trace_call *c = &a->calls[ord[k]], *d = &b->calls[k];
        fields &= d->prompt_tokens == c->prompt_tokens && d->output_tokens == c->output_tokens &&
                  d->t_ns == (abs[ord[k]] + 500000) / 1000000 * 1000000 - (abs[ord[0]] + 500000) / 1000000 * 1000000;
    }
    CHECK(fields, "arrivals (ms) and lengths kept, in arrival order");
    /* Sharing at 512 tokens: equal first k ids <=> the first 512k tokens
     * shared in the original (same scope, full 64-token blocks). */
    uint32_t n = b->n_calls < 400 ? b->n_calls : 400, bad = 0;
    uint64_t *xa = xmalloc(4096 * 8), *ya = xmalloc(4096 * 8), *xb = xmalloc(4096 * 8), *yb = xmalloc(4096 * 8);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++) {
            const struct trace_call *ci = &a->calls[ord[i]], *cj = &a->calls[ord[j]];
            uint32_t want = 0;
            if (a->sessions[ci->session].scope == a->sessions[cj->session].scope) {
                uint32_t ni = trace_call_blocks(a, ci, xa, 4096), nj = trace_call_blocks(a, cj, ya, 4096);
                uint32_t fi = (uint32_t)(ci->prompt_tokens / 64), fj = (uint32_t)(cj->prompt_tokens / 64);
                uint32_t l = lcp(xa, ni < fi ? ni : fi, ya, nj < fj ? nj : fj);
                want = l / 8;
                uint32_t fullmin = (uint32_t)((ci->prompt_tokens < cj->prompt_tokens ? ci->prompt_tokens
                                                                                      : cj->prompt_tokens) / 512);
                if (want > fullmin)
                    want = fullmin;
            }
            const struct trace_call *di = &b->calls[i], *dj = &b->calls[j];
            uint32_t mi = trace_call_blocks(b, di, xb, 4096), mj = trace_call_blocks(b, dj, yb, 4096);
            uint32_t got = lcp(xb, (uint32_t)(di->prompt_tokens / 512) < mi ? (uint32_t)(di->prompt_tokens / 512) : mi,
                               yb, (uint32_t)(dj->prompt_tokens / 512) < mj ? (uint32_t)(dj->prompt_tokens / 512) : mj);
            bad += got != want;
        }
    CHECKF(bad == 0, "512-token sharing of %u x %u call pairs as in the original (%u differ)", n, n, bad);
    free(xa), free(ya), free(xb), free(yb), free(abs), free(ord);
    trace_destroy(a);
    trace_destroy(b);
}

/* The first n lines of a file into path. */
static int head_lines(const char *src, const char *dst, int n)
{
    FILE *f = fopen(src, "r"), *g = fopen(dst, "w");
    char *line = NULL;
    size_t cap = 0;
    int k = 0;
    while (f && g && k < n && getline(&line, &cap, f) > 0) {
        fputs(line, g);
        k++;
    }
    free(line);
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return k;
}

static void test_public(void)
{
    const char *mc = test_shared("traces/mooncake/conversation_trace.jsonl");
    char err[ERR_LEN];
    if (!mc) {
        SKIP("../shared/traces/mooncake not found");
    } else {
        char cut[300], out[300];
        snprintf(cut, sizeof cut, "%s/mc_cut.jsonl", tmp);
        snprintf(out, sizeof out, "%s/mc_out.jsonl", tmp);
        head_lines(mc, cut, 3000);
        struct trace *a = read_path(cut, TRACE_FMT_MOONCAKE);
        CHECK(a && trace_write_mooncake(a, out, err) == 0, "public Mooncake (3000 lines) written as mooncake");
        struct trace *b = a ? read_path(out, TRACE_FMT_MOONCAKE) : NULL;
        int same = a && b && a->n_calls == b->n_calls;
        for (uint32_t i = 0; same && i < a->n_calls; i++)
            same = a->calls[i].t_ns == b->calls[i].t_ns && a->calls[i].prompt_tokens == b->calls[i].prompt_tokens &&
                   a->calls[i].output_tokens == b->calls[i].output_tokens && a->calls[i].n_blocks == b->calls[i].n_blocks;
        CHECK(same, "public Mooncake -> mooncake: timestamps, lengths, id counts kept");
        if (same) {
            uint32_t *na = xcalloc(a->n_calls, 4), *nb = xcalloc(b->n_calls, 4);
            /* bs 1: every id, partial blocks included */
            uint32_t **ca = canon(a, na, 1, NULL), **cb = canon(b, nb, 1, NULL);
            for (uint32_t i = 0; same && i < a->n_calls; i++)
                same = na[i] == nb[i] && !memcmp(ca[i], cb[i], na[i] * sizeof **ca);
            CHECK(same, "public Mooncake -> mooncake: the prefix structure, partial blocks included");
            canon_free(ca, a->n_calls);
            canon_free(cb, b->n_calls);
            free(na);
            free(nb);
        }
        trace_destroy(a);
        trace_destroy(b);
    }
    const char *ax = test_shared("traces/agentic-cc");
    if (!ax) {
        SKIP("../shared/traces/agentic-cc not found");
        return;
    }
    struct trace *a = read_path(ax, TRACE_FMT_AGENTX);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/agentic", tmp);
    CHECK(a && trace_write_weka(a, dir, false, err) == 0, "public agentic traces written as weka");
    int files = 0;
    CHECKF(a && weka_folder_ok(dir, &files) && files == (int)a->n_roots, "their weka folder: AIPerf's schema (%d)", files);
    struct trace *b = a ? read_path(dir, TRACE_FMT_AGENTX) : NULL;
    if (a && b) {
        struct trace_stats sa, sb;
        trace_stats_compute(a, &sa);
        trace_stats_compute(b, &sb);
        CHECKF(a->n_calls == b->n_calls && sa.prompt_tokens == sb.prompt_tokens &&
                   sa.output_tokens == sb.output_tokens && fabs(sa.hit_rate_full_blocks - sb.hit_rate_full_blocks) < 1e-12,
               "agentic -> weka -> read: %u calls, tokens, hit rate (full blocks) %.4f = %.4f", b->n_calls,
               sa.hit_rate_full_blocks, sb.hit_rate_full_blocks);
    }
    trace_destroy(a);
    trace_destroy(b);
}

static int run(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void)
{
    char cmd[2400], p[300];
    snprintf(p, sizeof p, "%s/cli.jsonl", tmp);
    snprintf(cmd, sizeof cmd, "%s trace synth --sessions 2 --seed 1 -o %s 2>/dev/null", test_bin(), p);
    CHECK(run(cmd) == 0, "trace synth");
    snprintf(cmd, sizeof cmd, "%s trace convert %s -o %s 2>/dev/null", test_bin(), p, p);
    CHECK(run(cmd) == 2, "trace convert -o onto its input: refused (exit 2)");
    snprintf(cmd, sizeof cmd, "%s trace convert %s -o %s --force 2>/dev/null", test_bin(), p, p);
    CHECK(run(cmd) == 0, "... written with --force");
    char w[300];
    snprintf(w, sizeof w, "%s/cli_w", tmp);
    snprintf(cmd, sizeof cmd, "%s trace convert %s -o %s --to weka 2>/dev/null && %s trace convert %s -o %s --to weka 2>/dev/null",
             test_bin(), p, w, test_bin(), p, w);
    CHECK(run(cmd) == 1, "a weka folder of .json: refused the second time");
    snprintf(cmd, sizeof cmd, "%s trace convert %s -o %s --to weka 2>/dev/null", test_bin(), w, w);
    CHECK(run(cmd) == 2, "a weka folder onto itself: refused");
    snprintf(cmd, sizeof cmd, "%s trace convert %s -o %s/m.jsonl --to nope 2>/dev/null", test_bin(), p, tmp);
    CHECK(run(cmd) == 2, "--to nope: refused");
}

int main(void)
{
    th_caps(240);
    snprintf(tmp, sizeof tmp, "/tmp/test_convert.XXXXXX");
    if (!mkdtemp(tmp))
        return 1;
    probe_reader();
    test_weka_round_trip();
    test_mooncake_round_trip();
    test_public();
    test_cli();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd))
        fprintf(stderr, "could not remove %s\n", tmp);
    return test_report();
}
