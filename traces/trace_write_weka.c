/* trace_write_weka.c: session trees as Weka / AgentX JSON, with exactly
 * the keys of AIPerf 0.13.0's strict schema (extra="forbid" at every
 * level, aiperf/dataset/loader/weka_trace_models.py): a trace has id,
 * models, block_size 64, hash_id_scope "local" and requests; a call t,
 * type ("n", or "s" when it carries a ttft or was recorded as another
 * type), model, in, out, hash_ids, input_types, output_types, stop,
 * api_time, think_time (and ttft on "s"); a subagent t, type, agent_id,
 * subagent_type, duration_ms (an integer: AIPerf's int), status, models,
 * requests.
 *
 * Times: every t is in seconds on the root's timeline, written as exact
 * decimals of the model's nanoseconds. A subagent's t is its spawn time
 * (weka_trace.py reads t as the spawn and t + duration_ms as its end,
 * _sa_end_seconds) and its calls' t are absolute on the same timeline
 * (_subagent_request_absolute_t reads any t at or after the spawn as
 * absolute). A subagent's entry follows the parent call it forks after
 * (the native fork_after; first when it forks at the start), siblings in
 * spawn order: AIPerf spawns it from the preceding parent turn and joins
 * it at the next. Subagents of subagents, which AIPerf's schema cannot
 * hold (a subagent's requests are calls only), are written as subagents
 * of the root, after the root's last call begun by their spawn. */
#include "traces/trace_write_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/hmap.h"
#include "traces/base/mem.h"

#define WEKA_BS 64

struct item {
    uint64_t slot;  /* root call k: 2k + 1; a subagent after call k: 2k + 2;
                       one at the root's start: 0 */
    int64_t t_ns;   /* on the root's timeline */
    uint32_t ref;   /* a call index, or a session index */
    uint8_t is_sub;
};

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->slot != y->slot)
        return x->slot < y->slot ? -1 : 1;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    return x->ref < y->ref ? -1 : x->ref > y->ref;
}

struct wk {
    const struct trace *t;
    struct trace_reblock *rb;
    int64_t *starts;
    uint32_t *ids;
    int64_t cap_ids;
    char *err;
};

static const char *model_of(const struct trace *t, const struct trace_call *c)
{
    const char *m = trace_str(t, c->model);
    return m && *m ? m : "unknown";
}

/* The distinct models of the calls of sessions ss[0..n), as a JSON array
 * ("unknown" when none is recorded). */
static void models(FILE *f, const struct trace *t, const uint32_t *ss, size_t n)
{
    struct hmap seen;
    hmap_init(&seen);
    fputc('[', f);
    int k = 0;
    for (size_t q = 0; q < n; q++) {
        const struct trace_session *s = &t->sessions[ss[q]];
        for (uint32_t i = 0; i < s->n_calls; i++) {
            const char *m = model_of(t, &t->calls[s->first_call + i]);
            bool added;
            hmap_put(&seen, hash64(m, strlen(m), 0x6d6f64ull), &added);
            if (!added)
                continue;
            if (k++)
                fputc(',', f);
            tw_str(f, m);
        }
    }
    if (!k)
        tw_str(f, "unknown");
    fputc(']', f);
    hmap_free(&seen);
}

/* The sessions of root's tree, root first (a walk of the subagent links:
 * linear in the tree's size). *n their count; malloc'ed. */
static uint32_t *tree_sessions(const struct trace *t, uint32_t root, size_t *n)
{
    size_t cap = 16, k = 0, top = 0;
    uint32_t *out = xmalloc(cap * sizeof *out), *stack = xmalloc(cap * sizeof *stack);
    stack[top++] = root;
    while (top) {
        uint32_t s = stack[--top];
        if (k == cap || top + 1 >= cap) {
            cap *= 2;
            out = xrealloc(out, cap * sizeof *out);
            stack = xrealloc(stack, cap * sizeof *stack);
        }
        out[k++] = s;
        for (uint32_t c = t->sessions[s].first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling) {
            if (top + 1 >= cap) {
                cap *= 2;
                out = xrealloc(out, cap * sizeof *out);
                stack = xrealloc(stack, cap * sizeof *stack);
            }
            stack[top++] = c;
        }
    }
    free(stack);
    *n = k;
    return out;
}

static int write_call(FILE *f, struct wk *w, uint32_t ci)
{
    const struct trace *t = w->t;
    const struct trace_call *c = &t->calls[ci];
    int64_t need = c->prompt_tokens / WEKA_BS + 1;
    if (need > w->cap_ids) {
        w->cap_ids = need + 1024;
        w->ids = xrealloc(w->ids, (size_t)w->cap_ids * sizeof *w->ids);
    }
    int64_t n = trace_reblock_call(w->rb, ci, true, w->ids, w->cap_ids, w->err);
    if (n < 0)
        return -1;
    int s = c->type != TRACE_CALL_NORMAL || c->ttft_ns >= 0;
    fputs("{\"t\":", f);
    tw_seconds(f, w->starts[c->session] + c->t_ns);
    fprintf(f, ",\"type\":\"%s\",\"model\":", s ? "s" : "n");
    tw_str(f, model_of(t, c));
    fprintf(f, ",\"in\":%" PRId64 ",\"out\":%" PRId64 ",\"hash_ids\":[", c->prompt_tokens, c->output_tokens);
    for (int64_t j = 0; j < n; j++)
        fprintf(f, j ? ",%u" : "%u", w->ids[j]);
    fputc(']', f);
    if (c->input_types != TRACE_NONE) {
        fputs(",\"input_types\":", f);
        tw_str_list(f, trace_str(t, c->input_types));
    }
    if (c->output_types != TRACE_NONE) {
        fputs(",\"output_types\":", f);
        tw_str_list(f, trace_str(t, c->output_types));
    }
    if (c->stop != TRACE_NONE) {
        fputs(",\"stop\":", f);
        tw_str(f, trace_str(t, c->stop));
    }
    fputs(",\"api_time\":", f);
    tw_seconds(f, c->api_ns);
    fputs(",\"think_time\":", f);
    tw_seconds(f, c->think_ns);
    if (s && c->ttft_ns >= 0) {
        fputs(",\"ttft\":", f);
        tw_seconds(f, c->ttft_ns);
    }
    fputc('}', f);
    return 0;
}

static const char *or_default(const struct trace *t, uint32_t i, const char *d)
{
    const char *s = trace_str(t, i);
    return s && *s ? s : d;
}

/* The root tree of session root as one JSON object (no newline). */
static int write_tree(FILE *f, struct wk *w, uint32_t root, const char *id)
{
    const struct trace *t = w->t;
    size_t n_sess;
    uint32_t *sess = tree_sessions(t, root, &n_sess);
    size_t n = 0, cap = t->sessions[root].n_calls + n_sess;
    struct item *it = xmalloc((cap ? cap : 1) * sizeof *it);
    const struct trace_session *rs = &t->sessions[root];
    for (uint32_t i = 0; i < rs->n_calls; i++)
        it[n++] = (struct item){2 * (uint64_t)i + 1, w->starts[root] + t->calls[rs->first_call + i].t_ns,
                                rs->first_call + i, 0};
    for (size_t q = 1; q < n_sess; q++) {
        const struct trace_session *ss = &t->sessions[sess[q]];
        int64_t at = w->starts[sess[q]];
        uint32_t after = ss->fork_after;
        if (ss->parent != root) { /* a nested one: after the root's last call begun by its spawn */
            after = TRACE_NONE;
            for (uint32_t i = 0; i < rs->n_calls && t->calls[rs->first_call + i].t_ns <= at; i++)
                after = i;
        }
        it[n++] = (struct item){after == TRACE_NONE ? 0 : 2 * (uint64_t)after + 2, at, sess[q], 1};
    }
    qsort(it, n, sizeof *it, cmp_item);
    fputs("{\"id\":", f);
    tw_str(f, id);
    fputs(",\"models\":", f);
    models(f, t, sess, n_sess);
    fprintf(f, ",\"block_size\":%d,\"hash_id_scope\":\"local\",\"requests\":[", WEKA_BS);
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        if (k)
            fputc(',', f);
        if (!it[k].is_sub) {
            rc = write_call(f, w, it[k].ref);
            continue;
        }
        uint32_t s = it[k].ref;
        const struct trace_session *ss = &t->sessions[s];
        char agent[32];
        snprintf(agent, sizeof agent, "agent_%u", s);
        fputs("{\"t\":", f);
        tw_seconds(f, w->starts[s]);
        fputs(",\"type\":\"subagent\",\"agent_id\":", f);
        tw_str(f, or_default(t, ss->name, agent));
        fputs(",\"subagent_type\":", f);
        tw_str(f, or_default(t, ss->kind, "unknown"));
        if (ss->duration_ns >= 0)
            fprintf(f, ",\"duration_ms\":%" PRId64, (ss->duration_ns + 500000) / 1000000);
        else
            fputs(",\"duration_ms\":null", f);
        fputs(",\"status\":", f);
        tw_str(f, or_default(t, ss->status, "completed"));
        fputs(",\"models\":", f);
        models(f, t, &s, 1);
        fputs(",\"requests\":[", f);
        for (uint32_t i = 0; i < ss->n_calls && !rc; i++) {
            if (i)
                fputc(',', f);
            rc = write_call(f, w, ss->first_call + i);
        }
        fputs("]}", f);
    }
    fputs("]}", f);
    free(it);
    free(sess);
    return rc;
}

/* Each root's id: its name, made unique with "_N" where names repeat (or
 * are absent: trace_N). ids[r] malloc'ed. */
static char **root_ids(const struct trace *t)
{
    char **ids = xcalloc(t->n_sessions ? t->n_sessions : 1, sizeof *ids);
    struct hmap used;
    hmap_init(&used);
    for (uint32_t r = 0; r < t->n_sessions; r++) {
        if (t->sessions[r].parent != TRACE_NONE)
            continue;
        const char *name = trace_str(t, t->sessions[r].name);
        char buf[600];
        snprintf(buf, sizeof buf, "%s", name && *name ? name : "trace");
        if (!name || !*name)
            snprintf(buf, sizeof buf, "trace_%06u", r);
        for (uint32_t k = 1;; k++) {
            bool added;
            hmap_put(&used, hash64(buf, strlen(buf), 0x6964ull), &added);
            if (added)
                break;
            snprintf(buf, sizeof buf, "%.500s_%u", name && *name ? name : "trace", r + k);
        }
        ids[r] = xstrdup(buf);
    }
    hmap_free(&used);
    return ids;
}

static int weka_write(const struct trace *t, const char *dir, const char *jsonl, char *err)
{
    struct wk w = {.t = t, .err = err};
    w.rb = trace_reblock_create(t, WEKA_BS, true, err);
    w.starts = tw_session_starts(t);
    char **ids = root_ids(t);
    uint32_t n_root = 0;
    struct tw_file one;
    int rc = jsonl ? tw_open(&one, jsonl, err) : 0;
    for (uint32_t r = 0; r < t->n_sessions && !rc; r++) {
        if (t->sessions[r].parent != TRACE_NONE)
            continue;
        trace_reblock_root(w.rb);
        if (jsonl) {
            rc = write_tree(one.f, &w, r, ids[r]);
            fputc('\n', one.f);
            continue;
        }
        char path[4096];
        if (snprintf(path, sizeof path, "%s/trace_%08u.json", dir, n_root++) >= (int)sizeof path) {
            rc = err_set(err, "%s: path too long", dir);
            break;
        }
        struct tw_file f;
        rc = tw_open(&f, path, err);
        if (rc)
            break;
        rc = write_tree(f.f, &w, r, ids[r]);
        fputc('\n', f.f);
        rc = tw_close(&f, rc, err);
    }
    if (jsonl)
        rc = tw_close(&one, rc, err);
    for (uint32_t r = 0; r < t->n_sessions; r++)
        free(ids[r]);
    free(ids);
    free(w.ids);
    free(w.starts);
    trace_reblock_destroy(w.rb);
    return rc;
}

/* Makes dir, or checks what it holds: *.json files are refused unless
 * replace, which removes them. */
static int prepare_dir(const char *dir, bool replace, char *err)
{
    struct stat st;
    if (stat(dir, &st)) {
        if (errno != ENOENT || mkdir(dir, 0777))
            return err_set(err, "%s: %s", dir, strerror(errno));
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return err_set(err, "%s: not a folder (a Weka trace is a folder of JSON files)", dir);
    DIR *d = opendir(dir);
    if (!d)
        return err_set(err, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    int found = 0, rc = 0;
    while ((e = readdir(d)) && !rc) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        found++;
        if (replace) {
            char p[4600];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p))
                rc = err_set(err, "%s: %s", p, strerror(errno));
        }
    }
    closedir(d);
    if (!rc && found && !replace)
        rc = err_set(err, "%s holds %d .json files (a reader would take them too); --force replaces them",
                     dir, found);
    return rc;
}

int trace_write_weka(const struct trace *t, const char *dir, bool replace, char *err)
{
    if (prepare_dir(dir, replace, err))
        return -1;
    return weka_write(t, dir, NULL, err);
}

int trace_write_weka_jsonl(const struct trace *t, const char *path, char *err)
{
    return weka_write(t, NULL, path, err);
}
