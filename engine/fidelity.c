/* fidelity.c: the fixed-batch decode measurement (metrics.md) priced with
 * the cost model, and the fidelity and breakdown tables built on it
 * (fidelity.h). */
#include "engine/fidelity.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/preset.h"
#include "traces/base/err.h"

/* The published calibration point (calibration.md). */
#define CAL_SPEC_TOK_S 256.4
#define CAL_AUTO_TOK_S 136.4

int decode_setup_open(const struct decode_opts *o, struct decode_setup *s, char *err)
{
    memset(s, 0, sizeof *s);
    if (preset_load_model(o->model, &s->m, err) || preset_load_gpu(o->gpu, &s->g, err))
        return -1;
    if (o->tp > o->gpus)
        return err_set(err, "--tp %d is larger than --gpus %d", o->tp, o->gpus);
    if (o->gpus % o->tp != 0)
        return err_set(err, "--tp %d does not divide --gpus %d (replicas = gpus / tp)",
                       o->tp, o->gpus);
    double w = model_weight_bytes_per_gpu(&s->m, o->tp);
    if (w > s->g.hbm_bytes)
        return err_set(err, "%s does not fit at tp %d on %s: %.1f GB of weights per GPU, "
                            "limit %.1f GB of HBM",
                       s->m.name, o->tp, s->g.name, w / 1e9, s->g.hbm_bytes / 1e9);
    if (o->spec) {
        if (s->m.drafter_params <= 0)
            return err_set(err, "--spec dspark: model %s has no drafter in its preset", s->m.name);
        if (accept_parse(o->acceptance, o->draft, &s->acc, err))
            return -1;
        s->accept_len = accept_expected_len(&s->acc, o->draft);
    }
    s->c = cost_create(&s->m, &s->g, o->tp, o->backend, o->calibration, o->force, err);
    return s->c ? 0 : -1;
}

void decode_setup_close(struct decode_setup *s)
{
    cost_destroy(s->c);
    s->c = NULL;
}

int decode_setup_run(const struct decode_opts *o, struct decode_setup *s,
                     struct cost_decode_run *r, char *err)
{
    return cost_decode_run(s->c, o->batch, o->isl, o->osl, o->spec ? o->draft : 0,
                           o->spec ? s->accept_len : 0, r, err);
}

int decode_measure(const struct decode_opts *o, struct decode_setup *s,
                   struct cost_decode_run *r, char *err)
{
    int rc = decode_setup_open(o, s, err);
    if (!rc)
        rc = decode_setup_run(o, s, r, err);
    decode_setup_close(s);
    return rc;
}

void decode_opts_defaults(struct decode_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->model, sizeof o->model, "kimi-k3");
    snprintf(o->gpu, sizeof o->gpu, "gb300");
    o->gpus = 16;
    o->tp = 16;
    o->backend = ENGINE_BACKEND_AUTO;
    o->batch = 1;
    o->isl = 1;
    o->osl = 1000;
    o->draft = 7;
    snprintf(o->acceptance, sizeof o->acceptance, "curve");
}

/* The decode step used for --breakdown: mid-run context. */
void decode_breakdown_batch(const struct decode_opts *o, const struct decode_setup *s,
                            struct cost_batch *b)
{
    memset(b, 0, sizeof *b);
    b->n_decode = o->batch;
    b->decode_positions = o->spec ? o->draft + 1 : 1;
    b->draft = o->spec ? o->draft : 0;
    b->sum_ctx = (int64_t)o->batch * (o->isl + o->osl / 2);
    (void)s;
}

const char *decode_scope_name(int k)
{
    return k == LAYER_KIND_COUNT ? "step" : layer_kind_name(k);
}

/* ---- fidelity ---- */

static int fid_row(struct fidelity_row *row, const char *setup, const char *gpu,
                   enum engine_backend be, int batch, int draft, double acc,
                   double published, char *err)
{
    struct decode_opts o;
    decode_opts_defaults(&o);
    snprintf(o.gpu, sizeof o.gpu, "%s", gpu);
    o.backend = be;
    o.batch = batch;
    if (draft > 0) {
        o.spec = true;
        o.draft = draft;
        snprintf(o.acceptance, sizeof o.acceptance, "fixed:%g", acc);
    }
    struct decode_setup s;
    struct cost_decode_run r;
    if (decode_measure(&o, &s, &r, err))
        return -1;
    memset(row, 0, sizeof *row);
    snprintf(row->setup, sizeof row->setup, "%s", setup);
    snprintf(row->model, sizeof row->model, "%s", s.m.name);
    snprintf(row->gpu, sizeof row->gpu, "%s", s.g.name);
    row->gpus = o.gpus;
    row->tp = o.tp;
    snprintf(row->backend, sizeof row->backend, "%s", engine_backend_name(be));
    row->batch = batch;
    row->draft = draft;
    row->acceptance = draft > 0 ? acc : 0;
    row->predicted_tok_s = r.decode_tok_s;
    row->published_tok_s = published;
    row->step_us = r.step_us;
    row->layer_us = r.layer_us;
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        row->layer_us_kind[k] = r.layer_us_kind[k];
    row->kernels_per_layer = r.kernels_per_layer;
    row->fallback_steps = r.fallback_steps;
    return 0;
}

int fidelity_rows(struct fidelity_row *rows, int cap, char *err)
{
    int n = 0;
    const enum engine_backend both[2] = {ENGINE_BACKEND_LATENCY_SPECIALIZED, ENGINE_BACKEND_AUTO};
#define ROW(...)                                                               \
    do {                                                                       \
        if (n >= cap)                                                          \
            return err_set(err, "fidelity table larger than %d rows", cap);    \
        if (fid_row(&rows[n], __VA_ARGS__, err))                               \
            return -1;                                                         \
        n++;                                                                   \
    } while (0)
    /* The calibration point (also the per-layer time of both paths). */
    ROW("calibration", "gb300", both[0], 1, 0, 0, CAL_SPEC_TOK_S);
    ROW("calibration", "gb300", both[1], 1, 0, 0, CAL_AUTO_TOK_S);
    for (int b = 2; b <= 64; b *= 2)
        for (int p = 0; p < 2; p++)
            ROW("batch-sweep", "gb300", both[p], b, 0, 0, 0);
    for (int p = 0; p < 2; p++)
        ROW("dspark", "gb300", both[p], 1, 7, 6, 0);
    for (int b = 1; b <= 8; b *= 2)
        ROW("gb200-standard", "gb200", ENGINE_BACKEND_AUTO, b, 0, 0, 0);
    ROW("gb200-dspark", "gb200", ENGINE_BACKEND_AUTO, 1, 7, 3, 0);
    ROW("gb200-dspark", "gb200", ENGINE_BACKEND_AUTO, 1, 7, 6, 0);
#undef ROW
    return n;
}

int fidelity_write_csv(const char *path, char *err)
{
    struct fidelity_row rows[64];
    int n = fidelity_rows(rows, 64, err);
    if (n < 0)
        return -1;
    struct ext_row *ext;
    int ne;
    if (ext_rows_load(NULL, &ext, &ne, err) || ext_rows_predict(ext, ne, err))
        return -1;
    FILE *f = fopen(path, "w");
    if (!f) {
        free(ext);
        return err_set(err, "%s: %s", path, strerror(errno));
    }
    /* Kimi K3 rows (aggregate decode tok/s), then the external validation
     * rows (per-user tok/s: 1000 / TPOT for serving rows; batch = the
     * benchmark's concurrency). positions: decode positions per sequence
     * (8 at the DSpark rows: the verification step's per-layer view). */
    fprintf(f, "setup,gpu,gpus,tp,backend,batch,spec,acceptance,predicted_tok_s,"
               "published_tok_s,step_us,layer_us,positions,kernels_per_layer,role,metric,id,"
               "error\n");
    for (int i = 0; i < n; i++) {
        const struct fidelity_row *r = &rows[i];
        fprintf(f, "%s,%s,%d,%d,%s,%d,%s,", r->setup, r->gpu, r->gpus, r->tp, r->backend,
                r->batch, r->draft ? "dspark" : "none");
        if (r->draft)
            fprintf(f, "%g", r->acceptance);
        fprintf(f, ",%.2f,", r->predicted_tok_s);
        if (r->published_tok_s > 0)
            fprintf(f, "%.1f", r->published_tok_s);
        fprintf(f, ",%.1f,%.3f,%d,%d,kimi-k3,decode_tok_s,,", r->step_us, r->layer_us,
                r->draft ? r->draft + 1 : 1, r->kernels_per_layer);
        if (r->published_tok_s > 0)
            fprintf(f, "%.4f", r->predicted_tok_s / r->published_tok_s - 1);
        fputc('\n', f);
    }
    for (int i = 0; i < ne; i++) {
        const struct ext_row *x = &ext[i];
        if (x->role != EXT_VALIDATION)
            continue;
        bool tpot = x->metric == EXT_TPOT_MS;
        char fam[sizeof x->model];
        memcpy(fam, x->model, sizeof fam);
        fam[strcspn(fam, "-.")] = 0; /* "llama", "deepseek" */
        fprintf(f, "ext-%s-%s,%s,%d,%d,auto,%d,none,,%.3f,%.3f,,,1,,validation,%s,%s,%.4f\n",
                fam, x->gpu, x->gpu, x->gpus, x->tp, x->concurrency,
                tpot ? 1000 / x->predicted : x->predicted, tpot ? 1000 / x->published : x->published,
                ext_metric_name(x->metric), x->id, x->error);
    }
    free(ext);
    if (fclose(f) != 0)
        return err_set(err, "%s: %s", path, strerror(errno));
    return 0;
}

int breakdown_write_csv(const char *path, int batch, char *err)
{
    if (batch < 1)
        return err_set(err, "breakdown batch %d must be at least 1", batch);
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    fprintf(f, "path,layer_kind,kernel,batch,us_per_layer\n");
    const enum engine_backend both[2] = {ENGINE_BACKEND_AUTO, ENGINE_BACKEND_LATENCY_SPECIALIZED};
    int rc = 0;
    for (int p = 0; p < 2 && !rc; p++) {
        struct decode_opts o;
        decode_opts_defaults(&o);
        o.backend = both[p];
        o.batch = batch;
        struct decode_setup s;
        if (decode_setup_open(&o, &s, err)) {
            decode_setup_close(&s);
            rc = -1;
            break;
        }
        struct cost_batch b;
        decode_breakdown_batch(&o, &s, &b);
        struct cost_kernel_time kt[128];
        int n = cost_breakdown(s.c, &b, kt, 128);
        struct cost_result res;
        cost_step(s.c, &b, &res);
        const char *pname = res.specialized ? "latency_specialized" : "auto";
        for (int i = 0; i < n; i++)
            fprintf(f, "%s,%s,%s,%d,%.4f\n", pname, decode_scope_name(kt[i].layer_kind), kt[i].name,
                    batch, kt[i].ns / 1e3);
        decode_setup_close(&s);
    }
    if (fclose(f) != 0 && !rc)
        return err_set(err, "%s: %s", path, strerror(errno));
    return rc;
}
