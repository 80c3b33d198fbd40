/* plot_data.c: the plot files' text and file helpers, and reading run
 * and sweep folders into points grouped by configuration (plot_data.h). */
#include <stdarg.h>
#include <sys/stat.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plots/plot_data.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/csv.h"

const int pct_list[NPCT] = {50, 75, 90, 95, 99};

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        ASSERT(k >= 0);
        if ((size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
}

void sb_free(struct sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Copies src into dst (size n), truncating. */
void scopy(char *dst, size_t n, const char *src)
{
    size_t l = strlen(src);
    if (l >= n)
        l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Copies s into dst (size n), replacing characters that CSV, gnuplot
 * strings, shell double quotes or Markdown tables would misread. */
void clean_text(char *dst, size_t n, const char *s)
{
    size_t j = 0;
    for (; s && *s && j + 1 < n; s++) {
        char c = *s;
        if (c == '"' || c == '\'' || c == '`' || c == '$' || c == '\\')
            c = ' ';
        else if (c == ',' || c == '|')
            c = ';';
        else if ((unsigned char)c < 32)
            c = ' ';
        dst[j++] = c;
    }
    dst[j] = 0;
}

/* A CSV number: "%.6g", or an empty field for NaN (gnuplot: missing). */
void plot_csv_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
}

FILE *open_out(const char *outdir, const char *name, char *err)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        err_set(err, "%s: %s", path, strerror(errno));
    return f;
}

int close_out(FILE *f, const char *outdir, const char *name, char *err)
{
    bool bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return err_set(err, "%s/%s: write failed", outdir, name);
    return 0;
}

static struct point *set_add(struct set *s)
{
    if (s->npts == s->ptscap) {
        s->ptscap = s->ptscap ? s->ptscap * 2 : 16;
        s->pts = xrealloc(s->pts, sizeof *s->pts * (size_t)s->ptscap);
    }
    struct point *p = &s->pts[s->npts++];
    memset(p, 0, sizeof *p);
    p->cfg = -1;
    for (int i = 0; i < NPCT; i++)
        p->inter[i] = NAN;
    p->ttft_p90_ms = p->tpot_p90_ms = p->total_tps_gpu = p->output_tps_gpu = NAN;
    p->prefix_hit = p->errors = NAN;
    return p;
}

/* JSON value at a dotted path ("metrics.ttft_ms.p90"), or NULL. */
static json_t *jget(json_t *root, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = root;
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
        v = json_is_object(v) ? json_object_get(v, k) : NULL;
    return v;
}

static double jnum(json_t *root, const char *path)
{
    json_t *v = jget(root, path);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void jstr(json_t *root, const char *path, char *dst, size_t n)
{
    json_t *v = jget(root, path);
    clean_text(dst, n, json_is_string(v) ? json_string_value(v) : "");
}

/* Fills p from DIR/run.json. With numbers_too false only the descriptive
 * fields are read (a sweep row supplies the numbers). */
static int load_run_json(const char *dir, struct point *p, bool numbers_too, char *err)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return err_set(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    int rc = 0;
    if (!json_is_object(root)) {
        rc = err_set(err, "%s: the top level is not an object", path);
        goto out;
    }
    jstr(root, "model", p->model, sizeof p->model);
    jstr(root, "gpu", p->gpu_kind, sizeof p->gpu_kind);
    char note[160] = "";
    if (json_is_true(jget(root, "interrupted")))
        snprintf(note, sizeof note, "interrupted");
    else if (json_is_true(jget(root, "partial")))
        snprintf(note, sizeof note, "partial");
    if (json_is_false(jget(root, "agentx_valid"))) {
        json_t *why = jget(root, "invalid_reasons");
        const char *first = json_is_array(why) && json_array_size(why) &&
                                    json_is_string(json_array_get(why, 0))
                                ? json_string_value(json_array_get(why, 0))
                                : "";
        char w[100];
        clean_text(w, sizeof w, first);
        size_t l = strlen(note);
        snprintf(note + l, sizeof note - l, "%snot AgentX-valid%s%s", l ? "; " : "",
                 *w ? ": " : "", w);
    }
    snprintf(p->note, sizeof p->note, "%s", note);
    if (!numbers_too)
        goto out;

    jstr(root, "label", p->label, sizeof p->label);
    jstr(root, "backend", p->backend, sizeof p->backend);
    static const char *ints[] = {"gpus", "tp", "replicas", "concurrency"};
    int *dst[] = {&p->gpus, &p->tp, &p->replicas, &p->concurrency};
    for (size_t i = 0; i < ARRAY_LEN(ints); i++) {
        json_t *v = jget(root, ints[i]);
        /* tp and replicas are 0 (unknown) in `load` results. */
        int least = i == 1 || i == 2 ? 0 : 1;
        if (!json_is_integer(v) || json_integer_value(v) < least ||
            json_integer_value(v) > 1000000) {
            rc = err_set(err, "%s: %s: missing or not a %s integer", path, ints[i],
                         least ? "positive" : "non-negative");
            goto out;
        }
        *dst[i] = (int)json_integer_value(v);
    }
    if (!*p->label)
        snprintf(p->label, sizeof p->label, "TP%dx%d %s", p->tp, p->replicas,
                 *p->backend ? p->backend : "");
    static const char *need[] = {"metrics.interactivity_tok_s",
                                 "metrics.throughput_tok_s_per_gpu.total"};
    for (size_t i = 0; i < ARRAY_LEN(need); i++)
        if (!jget(root, need[i])) {
            rc = err_set(err, "%s: %s: missing", path, need[i]);
            goto out;
        }
    for (int i = 0; i < NPCT; i++) {
        char k[64];
        snprintf(k, sizeof k, "metrics.interactivity_tok_s.p%d", pct_list[i]);
        p->inter[i] = jnum(root, k);
    }
    p->ttft_p90_ms = jnum(root, "metrics.ttft_ms.p90");
    p->tpot_p90_ms = jnum(root, "metrics.tpot_ms.p90");
    p->total_tps_gpu = jnum(root, "metrics.throughput_tok_s_per_gpu.total");
    p->output_tps_gpu = jnum(root, "metrics.throughput_tok_s_per_gpu.output");
    p->prefix_hit = jnum(root, "metrics.prefix_hit_rate");
    p->errors = jnum(root, "metrics.requests.errors");
out:
    json_decref(root);
    return rc;
}

static int load_sweep(struct set *s, const char *sdir, char *err)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/sweep.csv", sdir);
    struct csv c;
    if (csv_read(path, &c, err))
        return -1;
    static const char *need[] = {"label", "gpus", "tp", "replicas", "concurrency",
                                 "total_tok_s_per_gpu"};
    for (size_t i = 0; i < ARRAY_LEN(need); i++)
        if (csv_col(&c, need[i]) < 0) {
            err_set(err, "%s:1: no column '%s'", path, need[i]);
            csv_free(&c);
            return -1;
        }
    int rc = 0;
    for (int r = 0; r < c.nrows && !rc; r++) {
        struct point *p = set_add(s);
        clean_text(p->label, sizeof p->label, csv_str_at(&c, r, "label"));
        clean_text(p->backend, sizeof p->backend, csv_str_at(&c, r, "backend"));
        double g, tp, rep, conc;
        if ((rc = csv_num_at(&c, r, "gpus", true, &g, err)) ||
            (rc = csv_num_at(&c, r, "tp", true, &tp, err)) ||
            (rc = csv_num_at(&c, r, "replicas", true, &rep, err)) ||
            (rc = csv_num_at(&c, r, "concurrency", true, &conc, err)))
            break;
        if (!(g >= 1 && tp >= 1 && rep >= 1 && conc >= 1 && g <= 1e6 && conc <= 1e7)) {
            rc = err_set(err, "%s:%d: gpus, tp, replicas and concurrency must be positive",
                         path, c.line[r]);
            break;
        }
        p->gpus = (int)g;
        p->tp = (int)tp;
        p->replicas = (int)rep;
        p->concurrency = (int)conc;
        for (int i = 0; i < NPCT && !rc; i++) {
            char k[64];
            snprintf(k, sizeof k, "interactivity_p%d", pct_list[i]);
            rc = csv_num_at(&c, r, k, false, &p->inter[i], err);
        }
        if (rc || (rc = csv_num_at(&c, r, "ttft_p90_ms", false, &p->ttft_p90_ms, err)) ||
            (rc = csv_num_at(&c, r, "tpot_p90_ms", false, &p->tpot_p90_ms, err)) ||
            (rc = csv_num_at(&c, r, "total_tok_s_per_gpu", true, &p->total_tps_gpu, err)) ||
            (rc = csv_num_at(&c, r, "output_tok_s_per_gpu", false, &p->output_tps_gpu, err)) ||
            (rc = csv_num_at(&c, r, "prefix_hit_rate", false, &p->prefix_hit, err)) ||
            (rc = csv_num_at(&c, r, "errors", false, &p->errors, err)))
            break;
        if (!*p->label)
            snprintf(p->label, sizeof p->label, "TP%dx%d %s", p->tp, p->replicas, p->backend);
        const char *d = csv_str_at(&c, r, "dir");
        if (*d) {
            if (*d == '/')
                scopy(p->dir, sizeof p->dir, d);
            else
                snprintf(p->dir, sizeof p->dir, "%s/%s", sdir, d);
            if (!dir_exists(p->dir))
                p->dir[0] = 0;
            else if (file_exists((snprintf(path, sizeof path, "%s/run.json", p->dir), path)))
                rc = load_run_json(p->dir, p, false, err);
        }
    }
    csv_free(&c);
    return rc ? -1 : 0;
}

static void find_extra(const char *dir, const char *name, char *dst, size_t n)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!*dst && file_exists(path))
        scopy(dst, n, path);
}

int plot_load_input(struct set *s, const char *dir, char *err)
{
    char path[PATH_MAX + 16];
    size_t l = strlen(s->inputs);
    if (snprintf(path, sizeof path, "%s/sweep.csv", dir) < (int)sizeof path && file_exists(path)) {
        if (load_sweep(s, dir, err))
            return -1;
        snprintf(s->inputs + l, sizeof s->inputs - l, "%ssweep %s", l ? "; " : "", dir);
    } else if (snprintf(path, sizeof path, "%s/run.json", dir) < (int)sizeof path &&
               file_exists(path)) {
        struct point *p = set_add(s);
        if (load_run_json(dir, p, true, err))
            return -1;
        snprintf(p->dir, sizeof p->dir, "%s", dir);
        snprintf(s->inputs + l, sizeof s->inputs - l, "%srun %s", l ? "; " : "", dir);
    } else {
        return err_set(err, "%s: neither a run folder (run.json) nor a sweep folder (sweep.csv)",
                       dir);
    }
    find_extra(dir, "breakdown.csv", s->breakdown, sizeof s->breakdown);
    find_extra(dir, "fidelity.csv", s->fidelity, sizeof s->fidelity);
    find_extra(dir, "confounded.csv", s->confounded, sizeof s->confounded);
    return 0;
}

/* Groups points into configurations, in order of first appearance. */
void plot_group_configs(struct set *s)
{
    s->cfgs = xcalloc((size_t)s->npts + 1, sizeof *s->cfgs);
    for (int i = 0; i < s->npts; i++) {
        struct point *p = &s->pts[i];
        int c;
        for (c = 0; c < s->ncfg; c++) {
            struct config *g = &s->cfgs[c];
            if (!strcmp(g->label, p->label) && !strcmp(g->backend, p->backend) &&
                g->gpus == p->gpus && g->tp == p->tp && g->replicas == p->replicas)
                break;
        }
        if (c == s->ncfg) {
            struct config *g = &s->cfgs[s->ncfg++];
            snprintf(g->label, sizeof g->label, "%s", p->label);
            snprintf(g->backend, sizeof g->backend, "%s", p->backend);
            g->gpus = p->gpus;
            g->tp = p->tp;
            g->replicas = p->replicas;
            g->run = -1;
            char layout[48];
            snprintf(layout, sizeof layout, "TP%dx%d", g->tp, g->replicas);
            if (strstr(g->label, layout))
                snprintf(g->name, sizeof g->name, "%s (%d GPUs)", g->label, g->gpus);
            else
                snprintf(g->name, sizeof g->name, "%s (%d GPUs, %s)", g->label, g->gpus,
                         layout);
        }
        p->cfg = c;
    }
}

/* Chooses the run each configuration shows in the per-user charts and
 * returns the concurrency chosen (0: each configuration's highest). By
 * default: the middle (upper median) of the concurrencies that every
 * configuration with run folders has, a typical load rather than the
 * most or least loaded point. */
int plot_choose_runs(struct set *s, int want)
{
    int conc = want;
    if (!conc) {
        int *common = xmalloc(sizeof *common * (size_t)(s->npts + 1));
        int nc = 0;
        for (int i = 0; i < s->npts; i++) {
            int c = s->pts[i].concurrency;
            if (!*s->pts[i].dir)
                continue;
            bool all = true, dup = false;
            for (int k = 0; k < nc; k++)
                dup |= common[k] == c;
            for (int g = 0; g < s->ncfg && all && !dup; g++) {
                bool any_dir = false, has = false;
                for (int j = 0; j < s->npts; j++)
                    if (s->pts[j].cfg == g && *s->pts[j].dir) {
                        any_dir = true;
                        has |= s->pts[j].concurrency == c;
                    }
                all = !any_dir || has;
            }
            if (all && !dup)
                common[nc++] = c;
        }
        for (int a = 1; a < nc; a++) /* few values: insertion sort */
            for (int b = a; b > 0 && common[b - 1] > common[b]; b--) {
                int t = common[b];
                common[b] = common[b - 1];
                common[b - 1] = t;
            }
        conc = nc ? common[nc / 2] : 0;
        free(common);
    }
    for (int g = 0; g < s->ncfg; g++) {
        int best = -1;
        for (int j = 0; j < s->npts; j++) {
            struct point *p = &s->pts[j];
            if (p->cfg != g || !*p->dir)
                continue;
            bool take = conc ? p->concurrency == conc && best < 0
                             : best < 0 || p->concurrency > s->pts[best].concurrency;
            if (take)
                best = j;
        }
        s->cfgs[g].run = best;
    }
    return conc;
}

void plot_set_free(struct set *s)
{
    free(s->pts);
    free(s->cfgs);
    memset(s, 0, sizeof *s);
}
