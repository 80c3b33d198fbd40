/* cost_calib.c: calibration files (engine/CALIBRATION.md): loading and
 * checking measured kernel times, and looking a kernel's time up at a
 * batch and context. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cost_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

static const char *const path_names[PATH_COUNT] = {"auto", "latency_specialized"};

/* ---- calibration lookup ---- */

static double interp_row(const struct cal_entry *e, int lo, int hi, double b)
{
    /* points lo..hi-1 share one context, sorted by batch */
    if (hi - lo == 1 || b <= e->batch[lo])
        return e->us[lo];
    for (int i = lo + 1; i < hi; i++)
        if (b <= e->batch[i]) {
            double f = (b - e->batch[i - 1]) / (e->batch[i] - e->batch[i - 1]);
            return e->us[i - 1] + f * (e->us[i] - e->us[i - 1]);
        }
    /* above the largest batch: extend the last segment */
    double f = (b - e->batch[hi - 2]) / (e->batch[hi - 1] - e->batch[hi - 2]);
    return fmax(0, e->us[hi - 2] + f * (e->us[hi - 1] - e->us[hi - 2]));
}

double cost_cal_lookup_us(const struct cal_entry *e, double batch, double ctx)
{
    /* rows of equal context */
    int rows[64][2] = {{0, 0}}, nr = 0;
    for (int i = 0; i < e->n && nr < 64;) {
        int j = i;
        while (j < e->n && e->ctx[j] == e->ctx[i])
            j++;
        rows[nr][0] = i;
        rows[nr][1] = j;
        nr++;
        i = j;
    }
    if (nr == 1 || ctx <= e->ctx[rows[0][0]])
        return interp_row(e, rows[0][0], rows[0][1], batch);
    int r = 1;
    while (r < nr - 1 && ctx > e->ctx[rows[r][0]])
        r++;
    double c0 = e->ctx[rows[r - 1][0]], c1 = e->ctx[rows[r][0]];
    double u0 = interp_row(e, rows[r - 1][0], rows[r - 1][1], batch);
    double u1 = interp_row(e, rows[r][0], rows[r][1], batch);
    double f = (ctx - c0) / (c1 - c0);
    return fmax(0, u0 + f * (u1 - u0));
}

/* ---- calibration files ---- */

static int scope_from_name(const char *s)
{
    if (strcmp(s, "step") == 0)
        return SCOPE_STEP;
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (strcmp(s, layer_kind_name(k)) == 0)
            return k;
    return -1;
}

static int path_from_name(const char *s)
{
    if (strcmp(s, "auto") == 0 || strcmp(s, "standard") == 0)
        return PATH_STANDARD;
    if (strcmp(s, "latency_specialized") == 0 || strcmp(s, "fused") == 0)
        return PATH_SPECIALIZED;
    return -1;
}

static int kid_from_name(const char *s)
{
    for (int i = 0; i < K_COUNT; i++)
        if (strcmp(cost_kid_names[i], s) == 0)
            return i;
    return -1;
}

/* Whether a kernel id appears in some list of (path, scope), for any
 * batch and either FFN variant. */
static bool kernel_in(const struct cost_model *c, int path, int scope, int id)
{
    struct kern k[MAX_KERNELS];
    for (int small = 0; small < 2; small++) {
        struct cost_batch b = {.n_decode = small ? 1 : 64, .decode_positions = 1};
        struct shape s;
        cost_make_shape(c, &b, &s);
        if (scope == SCOPE_STEP) {
            if (id == K_DRAFTER && path == PATH_STANDARD)
                return true;
            int n = cost_step_kernels(c, &s, k, 0);
            for (int i = 0; i < n; i++)
                if ((int)k[i].id == id)
                    return true;
            continue;
        }
        for (int moe = 0; moe < 2; moe++) {
            int n = cost_layer_list(c, path, scope, moe, &s, k);
            for (int i = 0; i < n; i++)
                if ((int)k[i].id == id)
                    return true;
        }
    }
    return false;
}

static int cmp_pt(const void *a, const void *b)
{
    const double *x = a, *y = b; /* {ctx, batch, us} */
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    if (x[1] != y[1])
        return x[1] < y[1] ? -1 : 1;
    return 0;
}

void cost_cal_free(struct cost_model *c)
{
    for (int p = 0; p < PATH_COUNT; p++)
        for (int s = 0; s < N_SCOPES; s++)
            for (int k = 0; k < K_COUNT; k++)
                if (c->cal[p][s][k]) {
                    free(c->cal[p][s][k]->batch);
                    free(c->cal[p][s][k]);
                    c->cal[p][s][k] = NULL;
                }
    c->n_cal = 0;
}

int cost_load_calibration_mem(struct cost_model *c, const char *text, size_t len,
                              const char *label, bool force, char *err)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(err, "%s:%d:%d: %s", label, je.line, je.column, je.text);
    int rc = -1;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *gpu = json_string_value(json_object_get(root, "gpu"));
    json_t *ftp = json_object_get(root, "tp");
    json_t *entries = json_object_get(root, "entries");
    if (!json_is_object(root)) {
        err_set(err, "%s: a calibration file must be a JSON object", label);
        goto out;
    }
    if (!fmt || strcmp(fmt, "agentreplay-calibration/1") != 0) {
        err_set(err, "%s: field 'format': must be \"agentreplay-calibration/1\"", label);
        goto out;
    }
    if (!gpu) {
        err_set(err, "%s: field 'gpu': missing (the GPU kind measured)", label);
        goto out;
    }
    if (strcmp(gpu, c->g.name) != 0 && !force) {
        err_set(err, "%s: field 'gpu': measured on %s, the deployment is %s "
                     "(use --force-calibration to accept)", label, gpu, c->g.name);
        goto out;
    }
    if (ftp && (!json_is_integer(ftp) || json_integer_value(ftp) < 1)) {
        err_set(err, "%s: field 'tp': must be a positive integer", label);
        goto out;
    }
    if (!json_is_array(entries)) {
        err_set(err, "%s: field 'entries': missing or not an array", label);
        goto out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        char at[64];
        snprintf(at, sizeof at, "entries[%zu]", i);
        if (!json_is_object(e)) {
            err_set(err, "%s: field '%s': must be an object", label, at);
            goto out;
        }
        json_t *etp = json_object_get(e, "tp");
        if (!etp)
            etp = ftp;
        if (!etp || !json_is_integer(etp) || json_integer_value(etp) < 1) {
            err_set(err, "%s: field '%s.tp': missing or not a positive integer", label, at);
            goto out;
        }
        const char *ps = json_string_value(json_object_get(e, "path"));
        const char *ks = json_string_value(json_object_get(e, "layer_kind"));
        const char *ns = json_string_value(json_object_get(e, "kernel"));
        int path = ps ? path_from_name(ps) : -1;
        if (path < 0) {
            err_set(err, "%s: field '%s.path': must be \"auto\" or \"latency_specialized\"", label, at);
            goto out;
        }
        int scope = ks ? scope_from_name(ks) : -1;
        if (scope < 0) {
            err_set(err, "%s: field '%s.layer_kind': must be kda, mla, gqa or step", label, at);
            goto out;
        }
        int id = ns ? kid_from_name(ns) : -1;
        if (id < 0 || !kernel_in(c, path, scope, id)) {
            err_set(err, "%s: field '%s.kernel': '%s' is not a kernel of path %s, layer kind %s "
                         "for model %s (engine/CALIBRATION.md lists them)",
                    label, at, ns ? ns : "(missing)", path_names[path], ks, c->m.name);
            goto out;
        }
        json_t *pts = json_object_get(e, "points");
        size_t np = json_is_array(pts) ? json_array_size(pts) : 0;
        if (np == 0 || np > 4096) {
            err_set(err, "%s: field '%s.points': must be an array of 1..4096 points", label, at);
            goto out;
        }
        double *buf = xmalloc(np * 3 * sizeof(double));
        size_t j;
        json_t *pt;
        json_array_foreach(pts, j, pt) {
            json_t *jb = json_object_get(pt, "batch"), *jc = json_object_get(pt, "context"),
                   *ju = json_object_get(pt, "us");
            double bb = json_is_number(jb) ? json_number_value(jb) : -1;
            double cc = jc == NULL ? 0 : json_is_number(jc) ? json_number_value(jc) : -1;
            double uu = json_is_number(ju) ? json_number_value(ju) : -1;
            if (!(bb >= 1 && bb <= 1e7) || !(cc >= 0 && cc <= 1e9) || !(uu >= 0 && uu <= 1e9)) {
                err_set(err, "%s: field '%s.points[%zu]': needs batch >= 1, context >= 0, us >= 0 "
                             "(numbers)", label, at, j);
                free(buf);
                goto out;
            }
            buf[j * 3] = cc;
            buf[j * 3 + 1] = bb;
            buf[j * 3 + 2] = uu;
        }
        qsort(buf, np, 3 * sizeof(double), cmp_pt);
        for (j = 1; j < np; j++)
            if (buf[j * 3] == buf[(j - 1) * 3] && buf[j * 3 + 1] == buf[(j - 1) * 3 + 1]) {
                err_set(err, "%s: field '%s.points': two points at batch %g, context %g",
                        label, at, buf[j * 3 + 1], buf[j * 3]);
                free(buf);
                goto out;
            }
        if (json_integer_value(etp) != c->tp) {
            free(buf); /* another tensor-parallel size: not this layout */
            continue;
        }
        struct cal_entry *ce = xcalloc(1, sizeof *ce);
        ce->n = (int)np;
        ce->batch = xmalloc(np * 3 * sizeof(double));
        ce->ctx = ce->batch + np;
        ce->us = ce->ctx + np;
        for (j = 0; j < np; j++) {
            ce->ctx[j] = buf[j * 3];
            ce->batch[j] = buf[j * 3 + 1];
            ce->us[j] = buf[j * 3 + 2];
        }
        free(buf);
        if (c->cal[path][scope][id]) {
            free(c->cal[path][scope][id]->batch);
            free(c->cal[path][scope][id]);
        } else {
            snprintf(c->cal_name_buf[c->n_cal], sizeof c->cal_name_buf[0], "%s/%s/%s",
                     path_names[path], scope == SCOPE_STEP ? "step" : layer_kind_name(scope),
                     cost_kid_names[id]);
            c->cal_names[c->n_cal] = c->cal_name_buf[c->n_cal];
            c->n_cal++;
        }
        c->cal[path][scope][id] = ce;
    }
    rc = 0;
out:
    json_decref(root);
    if (rc)
        cost_cal_free(c);
    return rc;
}

int cost_calibrated_kernels(const struct cost_model *c, const char **names, int cap)
{
    int n = c->n_cal < cap ? c->n_cal : cap;
    for (int i = 0; i < n; i++)
        names[i] = c->cal_names[i];
    return c->n_cal;
}
