/* fidelity_ext.c: external validation (fidelity.h): published decode and
 * serving measurements that are not Kimi K3, read from
 * engine/presets/validation/external.json, each predicted the way it was
 * measured: a fixed batch with the decode measurement of metrics.md, or a
 * closed-loop serving benchmark (C clients, each sending its next request
 * when the previous one ends) simulated with the engine on a virtual
 * clock. */
#include "engine/fidelity.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/clock/loop.h"
#include "engine/engine.h"
#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

#define EXT_FILE "engine/presets/validation/external.json"
#define EXT_FORMAT "agentreplay-external/1"

/* ---- the closed-loop serving benchmark ---- */

/* Requests per client: the first fills the batch at once (the benchmark's
 * start), the rest see the steady mix of prefills and decodes. */
#define SERVE_PER_CLIENT 4
#define SERVE_BLOCK 64 /* tokens per prompt block (prompts share none) */

struct serve_client {
    struct serve *sv;
    struct target_call call;
    struct loop_timer timer;
    uint64_t *blocks;
    int64_t first_ns;
    int sent;
};

struct serve {
    struct engine *e;
    struct loop *l;
    int64_t isl, osl;
    int per_client;
    uint64_t next_id;
    double tpot_sum, ttft_sum;
    int64_t done, failed;
};

static void serve_send(struct loop *l, struct loop_timer *t);

static void serve_first(struct target_call *c, int64_t t_ns)
{
    struct serve_client *cl = c->arg;
    cl->first_ns = t_ns;
}

static void serve_done(struct target_call *c, int64_t t_ns, enum target_status st)
{
    struct serve_client *cl = c->arg;
    struct serve *sv = cl->sv;
    if (st != TARGET_OK || cl->first_ns < 0) {
        sv->failed++;
    } else {
        /* TPOT as serving benchmarks report it: (end - first token) /
         * (output tokens - 1), averaged over requests. */
        sv->tpot_sum += (double)(t_ns - cl->first_ns) / (double)(sv->osl - 1);
        sv->ttft_sum += (double)(cl->first_ns - c->start_ns);
        sv->done++;
    }
    if (cl->sent < sv->per_client)
        loop_at(sv->l, &cl->timer, t_ns, serve_send, cl);
}

static const struct target_cb SERVE_CB = {serve_first, NULL, serve_done};

static void serve_send(struct loop *l, struct loop_timer *t)
{
    struct serve_client *cl = t->arg;
    struct serve *sv = cl->sv;
    uint64_t id = ++sv->next_id;
    uint32_t nb = (uint32_t)((sv->isl + SERVE_BLOCK - 1) / SERVE_BLOCK);
    for (uint32_t i = 0; i < nb; i++)
        cl->blocks[i] = hash_mix(id, i + 1);
    memset(&cl->call, 0, sizeof cl->call);
    cl->call.id = id;
    cl->call.session_key = id;
    cl->call.prompt_tokens = sv->isl;
    cl->call.max_tokens = sv->osl;
    cl->call.ignore_eos = true;
    cl->call.blocks = cl->blocks;
    cl->call.n_blocks = nb;
    cl->call.trace_block_size = SERVE_BLOCK;
    cl->call.cb = &SERVE_CB;
    cl->call.arg = cl;
    cl->call.start_ns = loop_now(l);
    cl->first_ns = -1;
    cl->sent++;
    char err[ERR_LEN];
    if (engine_submit(sv->e, &cl->call, err) < 0)
        sv->failed++;
}

int fidelity_serve(const struct engine_config *ec, int concurrency, int64_t isl, int64_t osl,
                   struct serve_result *r, char *err)
{
    memset(r, 0, sizeof *r);
    if (concurrency < 1 || concurrency > 4096)
        return err_set(err, "concurrency %d out of range (1..4096)", concurrency);
    if (isl < 1 || osl < 2)
        return err_set(err, "isl %lld / osl %lld: need isl >= 1 and osl >= 2", (long long)isl,
                       (long long)osl);
    struct loop *l = loop_virtual_create();
    struct engine *e = engine_create(ec, l, err);
    if (!e) {
        loop_destroy(l);
        return -1;
    }
    struct serve sv = {.e = e, .l = l, .isl = isl, .osl = osl, .per_client = SERVE_PER_CLIENT};
    struct serve_client *cl = xcalloc((size_t)concurrency, sizeof *cl);
    size_t nb = (size_t)((isl + SERVE_BLOCK - 1) / SERVE_BLOCK);
    for (int i = 0; i < concurrency; i++) {
        cl[i].sv = &sv;
        cl[i].blocks = xcalloc(nb, sizeof *cl[i].blocks);
        loop_at(l, &cl[i].timer, 0, serve_send, &cl[i]);
    }
    loop_run(l);
    struct target_stats st;
    engine_get_stats(e, &st);
    engine_destroy(e);
    loop_destroy(l);
    for (int i = 0; i < concurrency; i++)
        free(cl[i].blocks);
    free(cl);
    if (sv.failed || !sv.done)
        return err_set(err, "%lld of %lld requests failed (concurrency %d, isl %lld, osl %lld)",
                       (long long)sv.failed, (long long)(sv.failed + sv.done), concurrency,
                       (long long)isl, (long long)osl);
    r->requests = sv.done;
    r->tpot_ms = sv.tpot_sum / (double)sv.done / 1e6;
    r->ttft_ms = sv.ttft_sum / (double)sv.done / 1e6;
    r->steps = st.steps;
    return 0;
}

/* ---- the table ---- */

static const char *const role_names[] = {"validation", "not_modelled", "efficiency_source"};
static const char *const kind_names[] = {"serving", "fixed"};
static const char *const metric_names[] = {"tpot_ms", "tok_s_per_user", "decode_tok_s"};

const char *ext_role_name(int role) { return role >= 0 && role < 3 ? role_names[role] : "?"; }
const char *ext_metric_name(int m) { return m >= 0 && m < 3 ? metric_names[m] : "?"; }

static int pick(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (s && !strcmp(s, names[i]))
            return i;
    return -1;
}

/* A string field (required: non-empty) copied into out. */
static int ext_str(json_t *o, const char *key, char *out, size_t n, bool required,
                   const char *label, int row, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v && !required) {
        out[0] = 0;
        return 0;
    }
    if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) >= n)
        return err_set(err, "%s: rows[%d].%s: %s", label, row, key,
                       v ? "must be a non-empty string that fits" : "missing");
    snprintf(out, n, "%s", json_string_value(v));
    return 0;
}

static int ext_num(json_t *o, const char *key, double lo, double hi, double *out,
                   const char *label, int row, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !(json_number_value(v) >= lo) || !(json_number_value(v) <= hi))
        return err_set(err, "%s: rows[%d].%s: %s (a number in [%g, %g])", label, row, key,
                       v ? "out of range" : "missing", lo, hi);
    *out = json_number_value(v);
    return 0;
}

int ext_rows_parse(const char *text, size_t len, const char *label, struct ext_row **out,
                   int *n_out, char *err)
{
    *out = NULL;
    *n_out = 0;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(err, "%s:%d:%d: %s", label, je.line, je.column, je.text);
    int rc = -1;
    json_t *rows = json_object_get(root, "rows");
    json_t *fmt = json_object_get(root, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), EXT_FORMAT)) {
        err_set(err, "%s: format: must be \"%s\"", label, EXT_FORMAT);
        goto out;
    }
    if (!json_is_array(rows) || json_array_size(rows) < 1 || json_array_size(rows) > EXT_MAX_ROWS) {
        err_set(err, "%s: rows: must be an array of 1..%d rows", label, EXT_MAX_ROWS);
        goto out;
    }
    int n = (int)json_array_size(rows);
    struct ext_row *r = xcalloc((size_t)n, sizeof *r);
    for (int i = 0; i < n; i++) {
        json_t *o = json_array_get(rows, (size_t)i);
        struct ext_row *x = &r[i];
        char role[32], kind[16], metric[32];
        if (!json_is_object(o)) {
            err_set(err, "%s: rows[%d]: must be an object", label, i);
            goto bad;
        }
        if (ext_str(o, "id", x->id, sizeof x->id, true, label, i, err) ||
            ext_str(o, "role", role, sizeof role, true, label, i, err) ||
            ext_str(o, "source", x->source, sizeof x->source, true, label, i, err) ||
            ext_str(o, "setup", x->setup, sizeof x->setup, true, label, i, err))
            goto bad;
        for (int j = 0; j < i; j++)
            if (!strcmp(r[j].id, x->id)) {
                err_set(err, "%s: rows[%d].id: \"%s\" listed twice", label, i, x->id);
                goto bad;
            }
        if ((x->role = pick(role, role_names, 3)) < 0) {
            err_set(err, "%s: rows[%d].role: must be validation, not_modelled or efficiency_source",
                    label, i);
            goto bad;
        }
        if (x->role == EXT_EFFICIENCY) {
            if (ext_str(o, "sets", x->why, sizeof x->why, true, label, i, err))
                goto bad;
            continue;
        }
        if (ext_str(o, "model", x->model, sizeof x->model, true, label, i, err) ||
            ext_str(o, "gpu", x->gpu, sizeof x->gpu, true, label, i, err))
            goto bad;
        if (x->role == EXT_NOT_MODELLED) {
            if (ext_str(o, "why", x->why, sizeof x->why, true, label, i, err))
                goto bad;
            continue;
        }
        double gpus, tp, conc, isl, osl, band = 0.10;
        if (ext_str(o, "framework", x->framework, sizeof x->framework, true, label, i, err) ||
            ext_str(o, "kind", kind, sizeof kind, true, label, i, err) ||
            ext_str(o, "metric", metric, sizeof metric, true, label, i, err) ||
            ext_num(o, "gpus", 1, 4096, &gpus, label, i, err) ||
            ext_num(o, "tp", 1, 1024, &tp, label, i, err) ||
            ext_num(o, "concurrency", 1, 4096, &conc, label, i, err) ||
            ext_num(o, "isl", 1, 1 << 20, &isl, label, i, err) ||
            ext_num(o, "osl", 2, 1 << 20, &osl, label, i, err) ||
            ext_num(o, "published", 1e-6, 1e9, &x->published, label, i, err) ||
            (json_object_get(o, "band") && ext_num(o, "band", 0.001, 10, &band, label, i, err)) ||
            ext_str(o, "known_miss", x->why, sizeof x->why, false, label, i, err))
            goto bad;
        x->kind = pick(kind, kind_names, 2);
        x->metric = pick(metric, metric_names, 3);
        if (x->kind < 0 || x->metric < 0 || (x->kind == EXT_SERVING) != (x->metric == EXT_TPOT_MS)) {
            err_set(err, "%s: rows[%d]: kind/metric: serving rows give tpot_ms, fixed rows "
                         "tok_s_per_user or decode_tok_s", label, i);
            goto bad;
        }
        x->gpus = (int)gpus, x->tp = (int)tp, x->concurrency = (int)conc;
        x->isl = (int64_t)isl, x->osl = (int64_t)osl;
        x->band = band;
        x->known_miss = x->why[0] != 0;
    }
    *out = r;
    *n_out = n;
    rc = 0;
    goto out;
bad:
    free(r);
out:
    json_decref(root);
    return rc;
}

/* A table is a few hundred rows of text: 4 MiB is far more than one needs
 * and little enough to read whole. */
#define EXT_MAX_BYTES (4 << 20)

int ext_rows_load(const char *path, struct ext_row **rows, int *n, char *err)
{
    char buf[4096];
    if (!path) {
        if (file_data_path(EXT_FILE, buf, sizeof buf) != 0)
            return err_set(err, "no %s found", EXT_FILE);
        path = buf;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > EXT_MAX_BYTES)
        return err_set(err, "%s: %lld bytes, more than the %d a table may have", path,
                       (long long)sb.st_size, EXT_MAX_BYTES);
    size_t len;
    char *text = file_read(path, &len, err);
    if (!text)
        return -1;
    int rc = ext_rows_parse(text, len, path, rows, n, err);
    free(text);
    return rc;
}

/* One validation row's prediction, the way it was measured. */
static int ext_predict_row(struct ext_row *x, char *err)
{
    if (x->kind == EXT_SERVING) {
        struct engine_config ec;
        engine_config_defaults(&ec);
        snprintf(ec.model, sizeof ec.model, "%s", x->model);
        snprintf(ec.gpu, sizeof ec.gpu, "%s", x->gpu);
        ec.gpus = x->gpus;
        ec.tp = x->tp;
        ec.spec = false;
        struct serve_result r;
        if (fidelity_serve(&ec, x->concurrency, x->isl, x->osl, &r, err))
            return -1;
        x->predicted = r.tpot_ms;
        return 0;
    }
    struct decode_opts o;
    decode_opts_defaults(&o);
    snprintf(o.model, sizeof o.model, "%s", x->model);
    snprintf(o.gpu, sizeof o.gpu, "%s", x->gpu);
    o.gpus = x->gpus;
    o.tp = x->tp;
    o.batch = x->concurrency;
    o.isl = x->isl;
    o.osl = x->osl;
    struct decode_setup s;
    struct cost_decode_run r;
    if (decode_measure(&o, &s, &r, err))
        return -1;
    x->predicted = x->metric == EXT_DECODE_TOK_S ? r.decode_tok_s : r.decode_tok_s / o.batch;
    return 0;
}

int ext_rows_predict(struct ext_row *rows, int n, char *err)
{
    for (int i = 0; i < n; i++) {
        struct ext_row *x = &rows[i];
        if (x->role != EXT_VALIDATION)
            continue;
        char e2[ERR_LEN];
        if (ext_predict_row(x, e2))
            return err_set(err, "row %s: %s", x->id, e2);
        x->error = x->predicted / x->published - 1;
        x->within = fabs(x->error) <= x->band;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void ext_rows_stats(const struct ext_row *rows, int n, struct ext_stats *st)
{
    memset(st, 0, sizeof *st);
    double *e = xcalloc((size_t)(n > 0 ? n : 1), sizeof *e);
    int k = 0;
    char kinds[EXT_MAX_ROWS][16];
    for (int i = 0; i < n; i++) {
        const struct ext_row *x = &rows[i];
        if (x->role != EXT_VALIDATION)
            continue;
        e[k++] = fabs(x->error);
        if (fabs(x->error) > st->worst) {
            st->worst = fabs(x->error);
            st->worst_row = i;
        }
        st->within += x->within;
        st->known_misses += x->known_miss;
        /* A GPU kind is the preset name before any '-': a validation
         * variant of a preset (h100-vllm0.14: other kernel tables, the
         * same GPU) is not another kind. */
        char kind[sizeof kinds[0]];
        snprintf(kind, sizeof kind, "%.*s", (int)strcspn(x->gpu, "-"), x->gpu);
        bool seen = false;
        for (int j = 0; j < st->gpu_kinds; j++)
            seen |= !strcmp(kinds[j], kind);
        if (!seen && st->gpu_kinds < EXT_MAX_ROWS)
            snprintf(kinds[st->gpu_kinds++], sizeof kinds[0], "%s", kind);
    }
    st->validation = k;
    if (k) {
        qsort(e, (size_t)k, sizeof *e, cmp_double);
        st->median = k % 2 ? e[k / 2] : (e[k / 2 - 1] + e[k / 2]) / 2;
    }
    free(e);
}
