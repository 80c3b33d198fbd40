/* plot.c: the plot and report driver (see plot.h).
 *
 * Flow: load every input (run folders and sweep folders) into points,
 * group points into configurations (label, GPU count, layout, backend),
 * choose one run per configuration for the per-user charts and refuse
 * mixed GPU counts there, then write each chart's data (CSV), copy its
 * gnuplot script, write render.sh, run gnuplot once per chart and format,
 * and write report.md linking only to files that exist.
 *
 * Output file names never collide with result files (an output folder may
 * be an input folder): *_data.csv, *.gp, render.sh, report.md.
 */
#include "plots/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/file.h"
#include "traces/base/time_ns.h"

#define NPCT 5
static const int pct_list[NPCT] = {50, 75, 90, 95, 99};

/* CDF resolution: quantiles at fractions 0, 1/CDF_STEPS, ..., 1. */
#define CDF_STEPS 500
/* Timelines longer than this many rows (seconds) are averaged into bins of
 * whole seconds, at most this many: about two points per pixel column of
 * a panel at the default size. */
#define TIMELINE_MAX_ROWS 400
/* Tokens/s in the timeline: trailing means over this many seconds. */
#define TOKENS_WINDOW_S 10.0

/* ---- small helpers ---------------------------------------------------- */

/* A growable string. */
struct sbuf {
    char *p;
    size_t len, cap;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
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

static void sb_free(struct sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Copies src into dst (size n), truncating. */
static void scopy(char *dst, size_t n, const char *src)
{
    size_t l = strlen(src);
    if (l >= n)
        l = n - 1;
    memcpy(dst, src, l);
    dst[l] = 0;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int mkdir_p(const char *path, char *err)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set(err, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return err_set(err, "%s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return err_set(err, "%s: %s", buf, strerror(errno));
    if (!dir_exists(buf))
        return err_set(err, "%s: not a directory", buf);
    return 0;
}

/* Copies s into dst (size n), replacing characters that CSV, gnuplot
 * strings, shell double quotes or Markdown tables would misread. */
static void clean_text(char *dst, size_t n, const char *s)
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
static void csv_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile of sorted values by linear interpolation between closest
 * ranks (k = (n - 1) p), as reference/metrics.md defines it. */
static double quantile(const double *v, size_t n, double p)
{
    if (n == 0)
        return NAN;
    double k = (double)(n - 1) * p;
    size_t lo = (size_t)floor(k);
    if (lo >= n - 1)
        return v[n - 1];
    return v[lo] + (v[lo + 1] - v[lo]) * (k - (double)lo);
}

/* ---- a small CSV reader (header row, optional double quotes) ---------- */

struct csv {
    char path[PATH_MAX];
    int ncol;
    char **hdr;   /* ncol names */
    int nrows;
    char ***rows; /* nrows x ncol fields (missing trailing fields: "") */
    int *line;    /* source line of each row */
};

static void csv_free(struct csv *c)
{
    for (int i = 0; i < c->ncol; i++)
        free(c->hdr[i]);
    free(c->hdr);
    for (int r = 0; r < c->nrows; r++) {
        for (int i = 0; i < c->ncol; i++)
            free(c->rows[r][i]);
        free(c->rows[r]);
    }
    free(c->rows);
    free(c->line);
    memset(c, 0, sizeof *c);
}

/* Splits one line into fields; returns the count. */
static int csv_split(const char *s, char ***out)
{
    int n = 0, cap = 8;
    char **f = xmalloc(sizeof *f * (size_t)cap);
    for (;;) {
        struct sbuf b = {0};
        sb_printf(&b, "%s", "");
        if (*s == '"') {
            s++;
            while (*s) {
                if (*s == '"' && s[1] == '"') {
                    sb_printf(&b, "\"");
                    s += 2;
                } else if (*s == '"') {
                    s++;
                    break;
                } else {
                    sb_printf(&b, "%c", *s++);
                }
            }
        }
        while (*s && *s != ',' && *s != '\r' && *s != '\n')
            sb_printf(&b, "%c", *s++);
        if (n == cap) {
            cap *= 2;
            f = xrealloc(f, sizeof *f * (size_t)cap);
        }
        f[n++] = b.p;
        if (*s != ',')
            break;
        s++;
    }
    *out = f;
    return n;
}

static int csv_read(const char *path, struct csv *c, char *err)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    size_t len;
    char *text = file_read(path, &len, err);
    if (!text)
        return -1;
    int lineno = 0, cap = 0;
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        lineno++;
        size_t l = strlen(ln);
        if (l && ln[l - 1] == '\r')
            ln[--l] = 0;
        if (!l)
            continue;
        char **f;
        int k = csv_split(ln, &f);
        if (!c->hdr) {
            c->hdr = f;
            c->ncol = k;
            continue;
        }
        if (k > c->ncol) {
            for (int i = 0; i < k; i++)
                free(f[i]);
            free(f);
            free(text);
            err_set(err, "%s:%d: %d fields, the header has %d", path, lineno, k, c->ncol);
            csv_free(c);
            return -1;
        }
        if (k < c->ncol) {
            f = xrealloc(f, sizeof *f * (size_t)c->ncol);
            for (int i = k; i < c->ncol; i++)
                f[i] = xstrdup("");
        }
        if (c->nrows == cap) {
            cap = cap ? cap * 2 : 16;
            c->rows = xrealloc(c->rows, sizeof *c->rows * (size_t)cap);
            c->line = xrealloc(c->line, sizeof *c->line * (size_t)cap);
        }
        c->line[c->nrows] = lineno;
        c->rows[c->nrows++] = f;
    }
    free(text);
    if (!c->hdr)
        return err_set(err, "%s: empty file (no header)", path);
    return 0;
}

static int csv_col(const struct csv *c, const char *name)
{
    for (int i = 0; i < c->ncol; i++)
        if (!strcmp(c->hdr[i], name))
            return i;
    return -1;
}

/* The number in row r, column name: NaN for an empty field; an error for
 * a missing column (when required) or a malformed number. */
static int csv_num_at(const struct csv *c, int r, const char *name, bool required,
                      double *v, char *err)
{
    int i = csv_col(c, name);
    *v = NAN;
    if (i < 0)
        return required ? err_set(err, "%s:1: no column '%s'", c->path, name) : 0;
    const char *s = c->rows[r][i];
    while (*s == ' ')
        s++;
    if (!*s)
        return 0;
    char *end;
    double x = strtod(s, &end);
    while (*end == ' ')
        end++;
    if (*end)
        return err_set(err, "%s:%d: column %s: '%s' is not a number", c->path,
                       c->line[r], name, c->rows[r][i]);
    *v = x;
    return 0;
}

static const char *csv_str_at(const struct csv *c, int r, const char *name)
{
    int i = csv_col(c, name);
    return i < 0 ? "" : c->rows[r][i];
}

/* ---- results --------------------------------------------------------- */

/* One measured point: a run folder, or one row of a sweep.csv. */
struct point {
    int cfg;              /* index into set.cfgs */
    char label[160];      /* configuration label as recorded */
    char backend[64];
    char model[64];
    char gpu_kind[32];
    int gpus, tp, replicas;
    int concurrency;      /* live session trees */
    double inter[NPCT];   /* interactivity at P50..P99, tok/s/user */
    double ttft_p90_ms;
    double tpot_p90_ms;
    double total_tps_gpu;  /* (input incl. cached + output) tok/s/GPU */
    double output_tps_gpu; /* output tok/s/GPU */
    double prefix_hit;     /* achieved prefix-cache hit rate, 0..1 */
    double errors;         /* errored calls */
    char note[160];        /* interrupted / partial / invalid, or "" */
    char dir[PATH_MAX];    /* run folder, or "" when absent */
};

/* A configuration: the points that form one line of the Pareto chart. */
struct config {
    char label[160];
    char backend[64];
    int gpus, tp, replicas;
    char name[256]; /* what charts show: label with GPU count and layout */
    int run;        /* point chosen for distributions/timeline, or -1 */
};

struct set {
    struct point *pts;
    int npts, ptscap;
    struct config *cfgs;
    int ncfg;
    char breakdown[PATH_MAX]; /* breakdown.csv found in an input, or "" */
    char fidelity[PATH_MAX];
    char confounded[PATH_MAX];
    char inputs[2048];        /* description of the inputs, for the report */
};

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

static int load_input(struct set *s, const char *dir, char *err)
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
static void group_configs(struct set *s)
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
static int choose_runs(struct set *s, int want)
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

static void set_free(struct set *s)
{
    free(s->pts);
    free(s->cfgs);
    memset(s, 0, sizeof *s);
}

/* ---- chart data ------------------------------------------------------ */

/* A chart to render: its script and the gnuplot variables it needs. */
struct chart {
    const char *name;   /* base name of the images: NAME.png, NAME.svg */
    const char *script; /* plots/NAME.gp */
    char vars[2048];    /* gnuplot -e assignments (no quotes of type ") */
    const char *title;  /* heading in report.md */
    char about[2048];   /* what the chart shows, for report.md */
    char data[64];      /* its CSV */
    bool rendered[2];   /* png, svg */
};

static FILE *open_out(const char *outdir, const char *name, char *err)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        err_set(err, "%s: %s", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *outdir, const char *name, char *err)
{
    bool bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return err_set(err, "%s/%s: write failed", outdir, name);
    return 0;
}

static double point_x(const struct point *p, int pi)
{
    return p->inter[pi];
}

/* pareto_data.csv: one block per configuration ("name" header line), rows
 * x = interactivity at the chosen percentile, y = total tok/s/GPU,
 * concurrency, output tok/s/GPU; sorted by concurrency. */
static int write_pareto(const struct set *s, int pi, const char *outdir, struct chart *ch,
                        char *err)
{
    FILE *f = open_out(outdir, "pareto_data.csv", err);
    if (!f)
        return -1;
    double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
    int blocks = 0;
    int *idx = xmalloc(sizeof *idx * (size_t)(s->npts + 1));
    for (int g = 0; g < s->ncfg; g++) {
        int k = 0;
        for (int j = 0; j < s->npts; j++) {
            const struct point *p = &s->pts[j];
            if (p->cfg == g && point_x(p, pi) > 0 && p->total_tps_gpu > 0)
                idx[k++] = j;
        }
        if (!k)
            continue;
        /* insertion sort by concurrency (few points) */
        for (int a = 1; a < k; a++)
            for (int b = a; b > 0 && s->pts[idx[b - 1]].concurrency > s->pts[idx[b]].concurrency;
                 b--) {
                int t = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = t;
            }
        fprintf(f, "%s\"%s\",total_tok_s_per_gpu,concurrency,output_tok_s_per_gpu\n",
                blocks ? "\n\n" : "", s->cfgs[g].name);
        for (int a = 0; a < k; a++) {
            const struct point *p = &s->pts[idx[a]];
            double x = point_x(p, pi);
            fprintf(f, "%.6g,%.6g,%d,", x, p->total_tps_gpu, p->concurrency);
            csv_num(f, p->output_tps_gpu);
            fputc('\n', f);
            xmin = fmin(xmin, x);
            xmax = fmax(xmax, x);
            ymin = fmin(ymin, p->total_tps_gpu);
            ymax = fmax(ymax, p->total_tps_gpu);
        }
        blocks++;
    }
    free(idx);
    if (close_out(f, outdir, "pareto_data.csv", err))
        return -1;
    if (!blocks)
        return 0;
    int mixed = 0;
    for (int g = 1; g < s->ncfg; g++)
        mixed |= s->cfgs[g].gpus != s->cfgs[0].gpus;
    snprintf(ch->vars, sizeof ch->vars, "n=%d; pct=%d; logx=%d; logy=%d; mixed=%d", blocks,
             pct_list[pi], xmax > 20 * xmin, ymax > 50 * ymin, mixed);
    snprintf(ch->data, sizeof ch->data, "pareto_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "Total throughput per GPU against P%d interactivity (1 / P%d TPOT, tok/s per "
             "user), one line per configuration, each point labelled with its concurrency "
             "(live sessions). Total throughput = (input tokens, cached included, + output "
             "tokens) / measured duration / GPUs of the whole deployment.%s",
             pct_list[pi], pct_list[pi],
             mixed ? " The configurations use different GPU counts; each label states its "
                     "count and layout." : "");
    return 1;
}

/* Per-request values of one run (measured calls only). */
struct reqvals {
    double *ttft_ms, *tpot_ms, *inter;
    size_t n_ttft, n_tpot;
    size_t skipped; /* warmup, errored or cancelled */
};

static void reqvals_free(struct reqvals *v)
{
    free(v->ttft_ms);
    free(v->tpot_ms);
    free(v->inter);
    memset(v, 0, sizeof *v);
}

static bool jint64(json_t *o, const char *k, long long *v)
{
    json_t *x = json_object_get(o, k);
    if (json_is_integer(x)) {
        *v = json_integer_value(x);
        return true;
    }
    if (json_is_real(x) && isfinite(json_real_value(x))) {
        *v = (long long)json_real_value(x);
        return true;
    }
    return false;
}

static int read_requests(const char *dir, struct reqvals *v, char *err)
{
    memset(v, 0, sizeof *v);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/requests.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    size_t cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    int lineno = 0, rc = 0;
    while ((got = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (got == 1 && line[0] == '\n')
            continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o || !json_is_object(o)) {
            rc = o ? err_set(err, "%s:%d: not a JSON object", path, lineno)
                   : err_set(err, "%s:%d:%d: %s", path, lineno, je.column, je.text);
            json_decref(o);
            break;
        }
        json_t *e = json_object_get(o, "error");
        if (json_is_true(json_object_get(o, "warmup")) ||
            json_is_true(json_object_get(o, "cancelled")) || (e && !json_is_null(e))) {
            v->skipped++;
            json_decref(o);
            continue;
        }
        long long start, first, end, out;
        if (!jint64(o, "start_ns", &start) || !jint64(o, "end_ns", &end) ||
            !jint64(o, "output_tokens", &out)) {
            rc = err_set(err, "%s:%d: start_ns, end_ns or output_tokens missing", path, lineno);
            json_decref(o);
            break;
        }
        /* no first token: the end stands in for it (as replay/metrics.c) */
        if (!jint64(o, "first_token_ns", &first))
            first = end;
        bool has_first = first >= start;
        json_decref(o);
        if (v->n_ttft == cap) {
            cap = cap ? cap * 2 : 1024;
            v->ttft_ms = xrealloc(v->ttft_ms, sizeof(double) * cap);
            v->tpot_ms = xrealloc(v->tpot_ms, sizeof(double) * cap);
            v->inter = xrealloc(v->inter, sizeof(double) * cap);
        }
        if (!has_first)
            continue;
        v->ttft_ms[v->n_ttft++] = (double)(first - start) / (double)NS_PER_MS;
        if (out > 1 && end > first) {
            double tpot_s = (double)(end - first) / (double)(out - 1) / (double)NS_PER_S;
            v->tpot_ms[v->n_tpot] = tpot_s * 1e3;
            v->inter[v->n_tpot++] = 1.0 / tpot_s;
        }
    }
    free(line);
    fclose(f);
    if (rc) {
        reqvals_free(v);
        return -1;
    }
    /* No records with a first token (a run interrupted at once): the
     * arrays are NULL, which qsort must not be given. */
    if (v->n_ttft)
        qsort(v->ttft_ms, v->n_ttft, sizeof(double), cmp_double);
    if (v->n_tpot) {
        qsort(v->tpot_ms, v->n_tpot, sizeof(double), cmp_double);
        qsort(v->inter, v->n_tpot, sizeof(double), cmp_double);
    }
    return 0;
}

/* Whether a log axis reads better: positive values spanning decades. */
static bool want_log(double lo, double hi, double ratio)
{
    return lo > 0 && isfinite(hi) && hi > ratio * lo;
}

/* cdf_data.csv: one block per configuration; rows: fraction, TTFT (ms),
 * TPOT (ms), per-request interactivity (tok/s/user) at that quantile. */
static int write_cdf(const struct set *s, int conc, const char *warn, int pct,
                     const char *outdir, struct chart *ch, char *err)
{
    FILE *f = open_out(outdir, "cdf_data.csv", err);
    if (!f)
        return -1;
    int blocks = 0;
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {0, 0, 0};
    struct sbuf with_tpot = {0}; /* blocks that have TPOT values */
    sb_printf(&with_tpot, "%s", "");
    for (int g = 0; g < s->ncfg; g++) {
        int r = s->cfgs[g].run;
        if (r < 0)
            continue;
        struct reqvals v;
        if (read_requests(s->pts[r].dir, &v, err)) {
            fclose(f);
            sb_free(&with_tpot);
            return -1;
        }
        if (v.n_ttft) {
            char name[320];
            if (conc)
                snprintf(name, sizeof name, "%s, %zu calls", s->cfgs[g].name, v.n_ttft);
            else
                snprintf(name, sizeof name, "%s, c=%d, %zu calls", s->cfgs[g].name,
                         s->pts[r].concurrency, v.n_ttft);
            fprintf(f, "%s\"%s\",ttft_ms,tpot_ms,interactivity_tok_s\n", blocks ? "\n\n" : "",
                    name);
            for (int i = 0; i <= CDF_STEPS; i++) {
                double q = (double)i / CDF_STEPS;
                fprintf(f, "%.4f,", q);
                csv_num(f, quantile(v.ttft_ms, v.n_ttft, q));
                fputc(',', f);
                csv_num(f, quantile(v.tpot_ms, v.n_tpot, q));
                fputc(',', f);
                csv_num(f, quantile(v.inter, v.n_tpot, q));
                fputc('\n', f);
            }
            /* axis spans from the 1st to the 100th percentile */
            const double *arr[3] = {v.ttft_ms, v.tpot_ms, v.inter};
            size_t cnt[3] = {v.n_ttft, v.n_tpot, v.n_tpot};
            for (int m = 0; m < 3; m++)
                if (cnt[m]) {
                    lo[m] = fmin(lo[m], quantile(arr[m], cnt[m], 0.01));
                    hi[m] = fmax(hi[m], arr[m][cnt[m] - 1]);
                }
            if (v.n_tpot)
                sb_printf(&with_tpot, "%s%d", with_tpot.len ? " " : "", blocks);
            blocks++;
        }
        reqvals_free(&v);
    }
    bool bad = close_out(f, outdir, "cdf_data.csv", err);
    if (bad || !blocks) {
        sb_free(&with_tpot);
        return bad ? -1 : 0;
    }
    char cl[64] = "each configuration's highest concurrency";
    if (conc)
        snprintf(cl, sizeof cl, "concurrency %d", conc);
    snprintf(ch->vars, sizeof ch->vars,
             "n=%d; pct=%d; logx1=%d; logx2=%d; logx3=%d; xmax1=%.6g; xmax2=%.6g; "
             "xmax3=%.6g; ltpot='%s'; sub='%s'; warn='%s'",
             blocks, pct, want_log(lo[0], hi[0], 30), want_log(lo[1], hi[1], 30),
             want_log(lo[2], hi[2], 30), hi[0], hi[1], hi[2], with_tpot.p, cl, warn);
    sb_free(&with_tpot);
    snprintf(ch->data, sizeof ch->data, "cdf_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "Cumulative distributions over measured calls (warmup, errored and cancelled "
             "calls excluded) at %s: TTFT (first token - send time), TPOT ((last token - first "
             "token) / (output tokens - 1), calls with more than one output token) and "
             "per-request interactivity (1 / TPOT). Curves join the percentiles at every "
             "0.2 %% (linear interpolation between closest ranks, as the reported "
             "percentiles), so each curve crosses P%d at the reported value; P%d "
             "interactivity (1 / P%d TPOT) lies at fraction %.2f of the interactivity "
             "curve.%s%s",
             cl, pct, pct, pct, 1.0 - pct / 100.0, *warn ? " **" : "", *warn ? warn : "");
    if (*warn) {
        size_t l = strlen(ch->about);
        snprintf(ch->about + l, sizeof ch->about - l, "**");
    }
    return 1;
}

/* timeline_data.csv: one block per configuration; columns t_s,
 * live_sessions, running, waiting, kv_used_pct, prefix_hit_pct,
 * tokens_per_s, output_tokens_per_s; long runs averaged into bins. */
static int write_timeline(const struct set *s, int conc, const char *warn, const char *outdir,
                          struct chart *ch, char *err)
{
    static const char *cols[] = {"t_s", "live_sessions", "running", "waiting",
                                 "kv_used_frac", "prefix_hit_rate", "tokens_per_s",
                                 "output_tokens_per_s"};
    enum { NC = 8 };
    static const double scale[NC] = {1, 1, 1, 1, 100, 100, 1, 1};
    FILE *f = open_out(outdir, "timeline_data.csv", err);
    if (!f)
        return -1;
    int blocks = 0, rc = 0;
    double tmax = 0, cmax[NC] = {0}, cmin_pos[NC];
    int hit_over = 0; /* seconds whose hit rate exceeds 100 % (off scale) */
    int maxbin = 1;   /* rows (seconds) per point */
    for (int k = 0; k < NC; k++)
        cmin_pos[k] = INFINITY;
    struct sbuf has[NC]; /* per column: the blocks with values in it */
    memset(has, 0, sizeof has);
    for (int k = 0; k < NC; k++)
        sb_printf(&has[k], "%s", "");
    for (int g = 0; g < s->ncfg && !rc; g++) {
        int r = s->cfgs[g].run;
        char path[PATH_MAX + 32];
        if (r < 0 || (snprintf(path, sizeof path, "%s/timeline.csv", s->pts[r].dir),
                      !file_exists(path)))
            continue;
        struct csv c;
        if (csv_read(path, &c, err)) {
            rc = -1;
            break;
        }
        if (csv_col(&c, "t_s") < 0) {
            rc = err_set(err, "%s:1: no column 't_s'", path);
            csv_free(&c);
            break;
        }
        if (c.nrows) {
            if (conc)
                fprintf(f, "%s\"%s\"", blocks ? "\n\n" : "", s->cfgs[g].name);
            else
                fprintf(f, "%s\"%s, c=%d\"", blocks ? "\n\n" : "", s->cfgs[g].name,
                        s->pts[r].concurrency);
            fprintf(f, ",live_sessions,running,waiting,kv_used_pct,prefix_hit_pct,"
                       "tokens_per_s_mean%.0fs,output_tokens_per_s_mean%.0fs\n",
                    TOKENS_WINDOW_S, TOKENS_WINDOW_S);
            /* rows averaged into bins when long, NaN where absent */
            int bin = (c.nrows + TIMELINE_MAX_ROWS - 1) / TIMELINE_MAX_ROWS;
            maxbin = bin > maxbin ? bin : maxbin;
            int nb = 0;
            double(*v)[NC] = xmalloc(sizeof *v * (size_t)(c.nrows / bin + 1));
            for (int a = 0; a < c.nrows && !rc; a += bin) {
                double sum[NC] = {0};
                int cnt[NC] = {0};
                for (int b = a; b < a + bin && b < c.nrows && !rc; b++)
                    for (int k = 0; k < NC; k++) {
                        double x;
                        if ((rc = csv_num_at(&c, b, cols[k], false, &x, err)))
                            break;
                        if (isfinite(x)) {
                            sum[k] += x * scale[k];
                            cnt[k]++;
                        }
                    }
                if (rc || !cnt[0])
                    continue;
                for (int k = 0; k < NC; k++)
                    v[nb][k] = cnt[k] ? sum[k] / cnt[k] : NAN;
                nb++;
            }
            /* tokens/s: trailing means over TOKENS_WINDOW_S (prefill makes
             * single seconds spike far above the sustained rate) */
            double (*tok)[2] = xmalloc(sizeof *tok * (size_t)(nb + 1));
            for (int k = 0; k < 2; k++) {
                double acc = 0;
                int n_acc = 0, lo = 0;
                for (int i = 0; i < nb; i++) {
                    double x = v[i][6 + k];
                    if (isfinite(x)) {
                        acc += x;
                        n_acc++;
                    }
                    while (v[lo][0] <= v[i][0] - TOKENS_WINDOW_S) {
                        if (isfinite(v[lo][6 + k])) {
                            acc -= v[lo][6 + k];
                            n_acc--;
                        }
                        lo++;
                    }
                    tok[i][k] = n_acc ? acc / n_acc : NAN;
                }
            }
            bool seen[NC] = {false};
            for (int i = 0; i < nb; i++) {
                v[i][6] = tok[i][0];
                v[i][7] = tok[i][1];
                for (int k = 0; k < NC; k++) {
                    if (k)
                        fputc(',', f);
                    csv_num(f, v[i][k]);
                    if (k == 5 && v[i][k] > 100.5)
                        hit_over++;
                    if (isfinite(v[i][k])) {
                        cmax[k] = fmax(cmax[k], v[i][k]);
                        if (v[i][k] > 0)
                            cmin_pos[k] = fmin(cmin_pos[k], v[i][k]);
                        seen[k] = true;
                    }
                }
                fputc('\n', f);
                tmax = fmax(tmax, v[i][0]);
            }
            free(tok);
            free(v);
            for (int k = 0; k < NC; k++)
                if (seen[k])
                    sb_printf(&has[k], "%s%d", has[k].len ? " " : "", blocks);
            blocks++;
        }
        csv_free(&c);
    }
    bool bad = close_out(f, outdir, "timeline_data.csv", err) || rc;
    if (bad || !blocks) {
        for (int k = 0; k < NC; k++)
            sb_free(&has[k]);
        return bad ? -1 : 0;
    }
    char cl[64] = "each configuration's highest concurrency";
    if (conc)
        snprintf(cl, sizeof cl, "concurrency %d", conc);
    /* y axis tops (gnuplot warns on an all-zero autoscaled range) */
    double top[NC];
    for (int k = 0; k < NC; k++)
        top[k] = cmax[k] > 0 ? cmax[k] * 1.08 : 1;
    snprintf(ch->vars, sizeof ch->vars,
             "n=%d; tunit=%d; tmax=%.6g; ylive=%.6g; yrun=%.6g; ywait=%.6g; ytok=%.6g; "
             "binsec=%d; hitover=%d; logtok=%d; l2='%s'; l3='%s'; l4='%s'; l5='%s'; l6='%s'; "
             "l7='%s'; l8='%s'; sub='%s'; warn='%s'",
             blocks, tmax > 7200 ? 60 : 1, tmax, top[1], top[2], top[3], fmax(top[6], top[7]),
             maxbin, hit_over,
             want_log(fmin(cmin_pos[6], cmin_pos[7]), fmax(cmax[6], cmax[7]), 1000), has[1].p,
             has[2].p, has[3].p, has[4].p, has[5].p, has[6].p, has[7].p, cl, warn);
    for (int k = 0; k < NC; k++)
        sb_free(&has[k]);
    snprintf(ch->data, sizeof ch->data, "timeline_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "The run at %s over its own clock (simulated time for sim runs, real time for "
             "load runs), %s: live sessions and running calls, calls "
             "waiting for admission, KV cache in use (%% of blocks), prefix-cache hit rate "
             "(%% of the prompt tokens of that second served from cache; seconds without "
             "prompts have no point), and tokens/s of the whole deployment (total = input "
             "incl. cached + output, and output only; trailing %.0f s means, since a "
             "prefill makes single seconds spike).%s%s%s",
             cl, maxbin > 1 ? "means over bins of whole seconds" : "one value per second",
             TOKENS_WINDOW_S,
             *warn ? " **" : "", warn, *warn ? "**" : "");
    return 1;
}

static void short_backend(const char *b, char *dst, size_t n)
{
    if (strstr(b, "special"))
        snprintf(dst, n, "specialized");
    else if (!strcmp(b, "auto") || strstr(b, "standard"))
        snprintf(dst, n, "standard");
    else
        scopy(dst, n, b);
}

/* breakdown_data.csv: rows = decode path / layer kind, columns = kernels
 * (microseconds per layer), last column the row total. */
static int write_breakdown(const struct set *s, int want_batch, const char *outdir,
                          struct chart *ch, char *err)
{
    struct csv c;
    if (csv_read(s->breakdown, &c, err))
        return -1;
    static const char *need[] = {"path", "layer_kind", "kernel", "batch", "us_per_layer"};
    for (size_t i = 0; i < ARRAY_LEN(need); i++)
        if (csv_col(&c, need[i]) < 0) {
            err_set(err, "%s:1: no column '%s'", s->breakdown, need[i]);
            csv_free(&c);
            return -1;
        }
    /* the batch: as asked, or the one nearest 8 (geometrically) */
    int batch = want_batch;
    double bestd = INFINITY;
    bool found = false;
    for (int r = 0; r < c.nrows; r++) {
        double b;
        if (csv_num_at(&c, r, "batch", true, &b, err)) {
            csv_free(&c);
            return -1;
        }
        if (!(b >= 1))
            continue;
        if (want_batch) {
            found |= (int)b == want_batch;
        } else if (fabs(log(b / 8.0)) < bestd) {
            bestd = fabs(log(b / 8.0));
            batch = (int)b;
            found = true;
        }
    }
    if (!found) {
        err_set(err, "%s: no rows for batch %d", s->breakdown, want_batch);
        csv_free(&c);
        return -1;
    }
    enum { MAXL = 8, MAXP = 4, MAXK = 64 };
    char kinds[MAXL][40], paths[MAXP][40], kern[MAXK][64];
    double val[MAXL][MAXP][MAXK] = {{{0}}};
    bool any[MAXL][MAXP] = {{false}};
    int nl = 0, np = 0, nk = 0, rc = 0;
    for (int r = 0; r < c.nrows; r++) {
        double b, us;
        if ((rc = csv_num_at(&c, r, "batch", true, &b, err)) ||
            (rc = csv_num_at(&c, r, "us_per_layer", true, &us, err)))
            break;
        if ((int)b != batch || !isfinite(us))
            continue;
        char kname[64], pth[40], kind[40], pshort[40];
        clean_text(pth, sizeof pth, csv_str_at(&c, r, "path"));
        clean_text(kind, sizeof kind, csv_str_at(&c, r, "layer_kind"));
        clean_text(kname, sizeof kname, csv_str_at(&c, r, "kernel"));
        short_backend(pth, pshort, sizeof pshort);
        int l, p, k;
        for (l = 0; l < nl && strcmp(kinds[l], kind); l++)
            ;
        for (p = 0; p < np && strcmp(paths[p], pshort); p++)
            ;
        for (k = 0; k < nk && strcmp(kern[k], kname); k++)
            ;
        if (l == MAXL || p == MAXP || k == MAXK) {
            rc = err_set(err, "%s: more than %d layer kinds, %d paths or %d kernels",
                         s->breakdown, MAXL, MAXP, MAXK);
            break;
        }
        if (l == nl)
            snprintf(kinds[nl++], sizeof kinds[0], "%s", kind);
        if (p == np)
            snprintf(paths[np++], sizeof paths[0], "%s", pshort);
        if (k == nk)
            snprintf(kern[nk++], sizeof kern[0], "%s", kname);
        val[l][p][k] += us;
        any[l][p] = true;
    }
    csv_free(&c);
    if (rc)
        return -1;
    /* standard before specialized within each layer kind */
    for (int p = 1; p < np; p++)
        if (!strcmp(paths[p], "standard")) {
            for (int q = p; q > 0; q--) {
                char t[40];
                memcpy(t, paths[q], sizeof t);
                memcpy(paths[q], paths[q - 1], sizeof t);
                memcpy(paths[q - 1], t, sizeof t);
                for (int l = 0; l < nl; l++) {
                    bool ta = any[l][q];
                    any[l][q] = any[l][q - 1];
                    any[l][q - 1] = ta;
                    for (int k = 0; k < nk; k++) {
                        double tv = val[l][q][k];
                        val[l][q][k] = val[l][q - 1][k];
                        val[l][q - 1][k] = tv;
                    }
                }
            }
            break;
        }
    FILE *f = open_out(outdir, "breakdown_data.csv", err);
    if (!f)
        return -1;
    fprintf(f, "layer / path");
    for (int k = 0; k < nk; k++)
        fprintf(f, ",%s", kern[k]);
    fprintf(f, ",total_us\n");
    double tmax = 0;
    int nr = 0;
    for (int l = 0; l < nl; l++) {
        char kd[48];
        if (!strcmp(kinds[l], "step"))
            snprintf(kd, sizeof kd, "step");
        else if (strlen(kinds[l]) <= 4) {
            for (size_t i = 0; i <= strlen(kinds[l]); i++)
                kd[i] = (char)(kinds[l][i] >= 'a' && kinds[l][i] <= 'z' ? kinds[l][i] - 32
                                                                         : kinds[l][i]);
        } else
            snprintf(kd, sizeof kd, "%s", kinds[l]);
        if (l) { /* a gap between layer kinds */
            fprintf(f, "\" \""); /* (gnuplot misreads an empty quoted field) */
            for (int k = 0; k < nk; k++)
                fprintf(f, ",0");
            fprintf(f, ",\n");
            nr++;
        }
        for (int p = 0; p < np; p++) {
            if (!any[l][p])
                continue;
            double tot = 0;
            fprintf(f, "\"%s|%s\"", kd,
                    !strcmp(paths[p], "standard")      ? "std"
                    : !strcmp(paths[p], "specialized") ? "spec"
                                                       : paths[p]);
            for (int k = 0; k < nk; k++) {
                fprintf(f, ",%.6g", val[l][p][k]);
                tot += val[l][p][k];
            }
            fprintf(f, ",%.6g\n", tot);
            tmax = fmax(tmax, tot);
            nr++;
        }
    }
    if (close_out(f, outdir, "breakdown_data.csv", err))
        return -1;
    if (!nr)
        return 0;
    /* colours: one hue per kernel family (the name up to its first '_'),
     * lighter shades for its members */
    static const unsigned hues[] = {0x0072B2, 0xD55E00, 0x009E73, 0xCC79A7, 0xE69F00,
                                    0x56B4E9, 0x6A3D9A, 0xB8A300, 0x882255, 0x44AA99,
                                    0x8C564B, 0x555555};
    char fam[MAXK][24];
    int fam_of[MAXK], nf = 0, member[MAXK], fam_size[MAXK] = {0};
    char fams[MAXK][24];
    for (int k = 0; k < nk; k++) {
        size_t u = strcspn(kern[k], "_");
        u = u < sizeof fam[k] - 1 ? u : sizeof fam[k] - 1;
        memcpy(fam[k], kern[k], u);
        fam[k][u] = 0;
        int f2;
        for (f2 = 0; f2 < nf && strcmp(fams[f2], fam[k]); f2++)
            ;
        if (f2 == nf)
            memcpy(fams[nf++], fam[k], sizeof fams[0]);
        fam_of[k] = f2;
        member[k] = fam_size[f2]++;
    }
    struct sbuf col = {0};
    for (int k = 0; k < nk; k++) {
        unsigned h = hues[fam_of[k] % ARRAY_LEN(hues)];
        double t = fam_size[fam_of[k]] > 1 ? 0.65 * member[k] / (fam_size[fam_of[k]] - 1) : 0;
        int rgb[3] = {(int)(h >> 16) & 255, (int)(h >> 8) & 255, (int)h & 255};
        for (int i = 0; i < 3; i++)
            rgb[i] = (int)(rgb[i] + (255 - rgb[i]) * t + 0.5);
        sb_printf(&col, "%s#%02x%02x%02x", k ? " " : "", rgb[0], rgb[1], rgb[2]);
    }
    snprintf(ch->vars, sizeof ch->vars, "nk=%d; nr=%d; batch=%d; ymax=%.6g; colors='%s'", nk,
             nr, batch, tmax * 1.15, col.p);
    sb_free(&col);
    snprintf(ch->data, sizeof ch->data, "breakdown_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "Where one decode step's time goes at batch %d: the engine's per-layer time of "
             "each kernel (microseconds per layer), standard against latency-specialized "
             "path, for each layer kind, stacked by kernel (kernels of one family share a "
             "hue); the number above each bar is the layer's total. From %.300s.",
             batch, s->breakdown);
    return 1;
}


/* fidelity_data.csv: x position, tick label (lines split by '|'),
 * predicted and published tok/s (published empty where none),
 * predicted/published, 1 for the specialized path. Rows of one setup sit
 * together; a gap separates setups, whose names and positions go to the
 * script (gnames, gx). The decode path is told by colour. */
static int write_fidelity(const struct set *s, const char *outdir, struct chart *ch,
                          char *err)
{
    struct csv c;
    if (csv_read(s->fidelity, &c, err))
        return -1;
    if (csv_col(&c, "predicted_tok_s") < 0) {
        err_set(err, "%s:1: no column 'predicted_tok_s'", s->fidelity);
        csv_free(&c);
        return -1;
    }
    /* GPU count and TP: in the title when uniform, else in each label */
    double g0 = NAN, t0 = NAN;
    bool uniform = true;
    for (int r = 0; r < c.nrows; r++) {
        double g, t;
        if (csv_num_at(&c, r, "gpus", false, &g, err) || csv_num_at(&c, r, "tp", false, &t, err))
            break;
        if (r == 0) {
            g0 = g;
            t0 = t;
        } else if (!(g == g0 && t == t0)) {
            uniform = false;
        }
    }
    FILE *f = open_out(outdir, "fidelity_data.csv", err);
    if (!f) {
        csv_free(&c);
        return -1;
    }
    fprintf(f, "x,label,predicted_tok_s,published_tok_s,ratio,specialized\n");
    int n = 0, npub = 0, rc = 0, ng = 0;
    double lo = INFINITY, hi = 0, x = 0, gstart = 0;
    char prev[96] = "";
    struct sbuf gnames = {0}, gx = {0};
    sb_printf(&gnames, "%s", "");
    sb_printf(&gx, "%s", "");
    for (int r = 0; r < c.nrows && !rc; r++) {
        double pred, pub, batch, gpus, tp;
        if ((rc = csv_num_at(&c, r, "predicted_tok_s", true, &pred, err)) ||
            (rc = csv_num_at(&c, r, "published_tok_s", false, &pub, err)) ||
            (rc = csv_num_at(&c, r, "batch", false, &batch, err)) ||
            (rc = csv_num_at(&c, r, "gpus", false, &gpus, err)) ||
            (rc = csv_num_at(&c, r, "tp", false, &tp, err)))
            break;
        if (!(pred > 0))
            continue;
        char gpu[32], spec[48], acc[32], setup[96], label[200], raw_be[64];
        clean_text(gpu, sizeof gpu, csv_str_at(&c, r, "gpu"));
        clean_text(spec, sizeof spec, csv_str_at(&c, r, "spec"));
        clean_text(acc, sizeof acc, csv_str_at(&c, r, "acceptance"));
        clean_text(setup, sizeof setup, csv_str_at(&c, r, "setup"));
        clean_text(raw_be, sizeof raw_be, csv_str_at(&c, r, "backend"));
        for (char *q = setup; *q; q++)
            if (*q == ' ')
                *q = '-';
        if (n == 0 || strcmp(setup, prev)) {
            if (n) {
                sb_printf(&gx, "%s%.2f", ng > 1 ? " " : "", (gstart + x - 1) / 2);
                x += 0.6;
            }
            sb_printf(&gnames, "%s%s%s%s%s", ng ? " " : "", *setup ? setup : "-",
                      *gpu && !strstr(setup, gpu) ? "|(" : "", *gpu && !strstr(setup, gpu) ? gpu : "",
                      *gpu && !strstr(setup, gpu) ? ")" : "");
            ng++;
            gstart = x;
            scopy(prev, sizeof prev, setup);
        }
        int l = 0;
        label[0] = 0;
        if (!uniform && isfinite(gpus))
            l = snprintf(label, sizeof label, "%dx TP%d|", (int)gpus, (int)tp);
        if (isfinite(batch))
            l += snprintf(label + l, sizeof label - (size_t)l, "b=%d", (int)batch);
        if (*spec && strcmp(spec, "none") && strcmp(spec, "off") && strcmp(spec, "-"))
            snprintf(label + l, sizeof label - (size_t)l, "|%s%s%s", spec, *acc ? "|a=" : "", acc);
        if (pub > 0) /* room for the published bar beside */
            x += 0.4;
        fprintf(f, "%.2f,\"%s\",%.6g,", x, label, pred);
        csv_num(f, pub > 0 ? pub : NAN);
        fputc(',', f);
        csv_num(f, pub > 0 ? pred / pub : NAN);
        fprintf(f, ",%d\n", strstr(raw_be, "special") != NULL);
        lo = fmin(lo, pred);
        hi = fmax(hi, pred);
        if (pub > 0) {
            lo = fmin(lo, pub);
            hi = fmax(hi, pub);
            npub++;
        }
        n++;
        x += pub > 0 ? 1.4 : 1;
    }
    if (n)
        sb_printf(&gx, "%s%.2f", ng > 1 ? " " : "", (gstart + x - 1) / 2);
    csv_free(&c);
    if (close_out(f, outdir, "fidelity_data.csv", err) || rc || !n) {
        sb_free(&gnames);
        sb_free(&gx);
        return rc || n ? -1 : 0;
    }
    char sub[64] = "";
    if (uniform && isfinite(g0) && isfinite(t0))
        snprintf(sub, sizeof sub, "%d GPUs, TP%d", (int)g0, (int)t0);
    snprintf(ch->vars, sizeof ch->vars,
             "n=%d; xmax=%.2f; logy=%d; npub=%d; sub='%s'; gnames='%s'; gx='%s'", n, x - 1,
             want_log(lo, hi, 20), npub, sub, gnames.p, gx.p);
    sb_free(&gnames);
    sb_free(&gx);
    snprintf(ch->data, sizeof ch->data, "fidelity_data.csv");
    snprintf(ch->about, sizeof ch->about,
             "The engine's predicted aggregate decode throughput (tok/s; all requests' "
             "tokens after their first over the decode phase) for each setup (b = batch "
             "size; dspark a=N = speculative decoding with N tokens accepted per step), "
             "grouped by setup, beside the published figure where one exists (the "
             "calibration point); the ratio predicted / published is written above each "
             "published bar. From %.300s.",
             s->fidelity);
    return 1;
}

/* ---- gnuplot --------------------------------------------------------- */

/* Finds gnuplot: AGENTREPLAY_GNUPLOT (a path) or PATH. */
static int find_gnuplot(char *buf, size_t n, char *why)
{
    const char *env = getenv("AGENTREPLAY_GNUPLOT");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        if (access(buf, X_OK) == 0)
            return 0;
        return err_set(why, "gnuplot not found: AGENTREPLAY_GNUPLOT=%s is not an executable",
                       env);
    }
    const char *path = getenv("PATH");
    char dirs[8192];
    snprintf(dirs, sizeof dirs, "%s", path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(buf, n, "%s/gnuplot", *d ? d : ".");
        if (access(buf, X_OK) == 0)
            return 0;
    }
    return err_set(why, "gnuplot not found on PATH (install gnuplot-nox, or set "
                        "AGENTREPLAY_GNUPLOT to its path)");
}

static const char *fmt_name[2] = {"png", "svg"};

static void chart_expr(const struct chart *ch, int fmt, const struct plot_opts *o, char *buf,
                       size_t n)
{
    snprintf(buf, n, "fmt='%s'; out='%s.%s'; W=%d; H=%d; data='%s'; %s", fmt_name[fmt],
             ch->name, fmt_name[fmt], o->width_px, o->height_px, ch->data, ch->vars);
}

/* Runs gnuplot in outdir with stderr appended to gnuplot.log. Returns the
 * exit status, or -1 if it could not run. */
static int run_gnuplot(const char *gp, const char *outdir, const char *expr, const char *script)
{
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/gnuplot.log", outdir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        int log = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (null < 0 || log < 0 || chdir(outdir) != 0)
            _exit(127);
        dup2(null, 0);
        dup2(null, 1);
        dup2(log, 2);
        execl(gp, gp, "-e", expr, script, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* First line of the log from byte offset `from`, into dst. */
static void log_line(const char *logp, long from, char *dst, size_t n)
{
    dst[0] = 0;
    FILE *f = fopen(logp, "r");
    if (!f)
        return;
    fseek(f, from, SEEK_SET);
    char buf[512];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        if (buf[strspn(buf, " ^")]) {
            scopy(dst, n, buf);
            break;
        }
    }
    fclose(f);
}

static int copy_script(const char *name, const char *outdir, char *err)
{
    char rel[128], src[PATH_MAX], dst[PATH_MAX + 64];
    snprintf(rel, sizeof rel, "plots/%s", name);
    if (file_data_path(rel, src, sizeof src))
        return err_set(err, "%s: gnuplot script not found (looked beside the program, under "
                            "%s and in the current folder)",
                       rel, AGENTREPLAY_DATADIR);
    size_t len;
    char *text = file_read(src, &len, err);
    if (!text)
        return -1;
    snprintf(dst, sizeof dst, "%s/%s", outdir, name);
    FILE *f = fopen(dst, "w");
    if (!f) {
        free(text);
        return err_set(err, "%s: %s", dst, strerror(errno));
    }
    fwrite(text, 1, len, f);
    free(text);
    if (fclose(f))
        return err_set(err, "%s: write failed", dst);
    return 0;
}

/* ---- report ---------------------------------------------------------- */

static void md_num(struct sbuf *b, double v, const char *fmt)
{
    if (isfinite(v))
        sb_printf(b, fmt, v);
    else
        sb_printf(b, "n/a");
}

static void key_table(struct sbuf *b, const struct set *s, int pi)
{
    int p = pct_list[pi];
    sb_printf(b, "| Configuration | GPUs | Layout | Backend | Concurrency | "
                 "P90 interactivity (tok/s/user) |");
    if (p != 90)
        sb_printf(b, " P%d interactivity (tok/s/user) |", p);
    sb_printf(b, " P90 TTFT (ms) | P90 TPOT (ms) | Total tok/s/GPU | Output tok/s/GPU | "
                 "Prefix hit rate | Errors |\n|---|---:|---|---|---:|---:|");
    if (p != 90)
        sb_printf(b, "---:|");
    sb_printf(b, "---:|---:|---:|---:|---:|---:|\n");
    bool notes = false;
    for (int g = 0; g < s->ncfg; g++)
        for (int j = 0; j < s->npts; j++) {
            const struct point *q = &s->pts[j];
            if (q->cfg != g)
                continue;
            sb_printf(b, "| %s%s | %d | TP%d x %d | %s | %d | ", q->label, *q->note ? " *" : "",
                      q->gpus, q->tp, q->replicas, *q->backend ? q->backend : "n/a",
                      q->concurrency);
            notes |= *q->note != 0;
            md_num(b, q->inter[2], "%.1f");
            if (p != 90) {
                sb_printf(b, " | ");
                md_num(b, q->inter[pi], "%.1f");
            }
            sb_printf(b, " | ");
            md_num(b, q->ttft_p90_ms, "%.0f");
            sb_printf(b, " | ");
            md_num(b, q->tpot_p90_ms, "%.2f");
            sb_printf(b, " | ");
            md_num(b, q->total_tps_gpu, "%.0f");
            sb_printf(b, " | ");
            md_num(b, q->output_tps_gpu, "%.1f");
            sb_printf(b, " | ");
            md_num(b, q->prefix_hit * 100, "%.1f %%");
            sb_printf(b, " | ");
            md_num(b, q->errors, "%.0f");
            sb_printf(b, " |\n");
        }
    if (notes) {
        int nn = 0, first = -1;
        for (int j = 0; j < s->npts; j++)
            if (*s->pts[j].note) {
                nn++;
                first = first < 0 ? j : first;
            }
        sb_printf(b, "\n");
        if (nn > 5) /* many: one line, with the first as an example */
            sb_printf(b, "\\* %d of %d runs are flagged (run.json: interrupted, partial, "
                         "agentx_valid, invalid_reasons), for example %s at concurrency %d: "
                         "%s.\n",
                      nn, s->npts, s->pts[first].label, s->pts[first].concurrency,
                      s->pts[first].note);
        else
            for (int j = 0; j < s->npts; j++)
                if (*s->pts[j].note)
                    sb_printf(b, "\\* %s at concurrency %d: %s.  \n", s->pts[j].label,
                              s->pts[j].concurrency, s->pts[j].note);
    }
}

static void confounded_table(struct sbuf *b, const char *path)
{
    struct csv c;
    char err[ERR_LEN];
    if (csv_read(path, &c, err)) {
        sb_printf(b, "(confounded.csv could not be read: %s)\n", err);
        return;
    }
    sb_printf(b, "| Configuration | GPUs | Layout | Backend | Concurrency | P90 interactivity "
                 "(tok/s/user) | P90 TTFT (ms) | Total tok/s/GPU |\n"
                 "|---|---:|---|---|---:|---:|---:|---:|\n");
    for (int r = 0; r < c.nrows; r++) {
        char lab[160];
        clean_text(lab, sizeof lab, csv_str_at(&c, r, "label"));
        char be[64];
        clean_text(be, sizeof be, csv_str_at(&c, r, "backend"));
        double v[7];
        static const char *cols[7] = {"gpus", "tp", "replicas", "concurrency",
                                      "interactivity_p90", "ttft_p90_ms", "total_tok_s_per_gpu"};
        for (int k = 0; k < 7; k++)
            if (csv_num_at(&c, r, cols[k], false, &v[k], err))
                v[k] = NAN;
        sb_printf(b, "| %s | ", lab);
        md_num(b, v[0], "%.0f");
        sb_printf(b, " | TP");
        md_num(b, v[1], "%.0f");
        sb_printf(b, " x ");
        md_num(b, v[2], "%.0f");
        sb_printf(b, " | %s | ", be);
        md_num(b, v[3], "%.0f");
        sb_printf(b, " | ");
        md_num(b, v[4], "%.1f");
        sb_printf(b, " | ");
        md_num(b, v[5], "%.0f");
        sb_printf(b, " | ");
        md_num(b, v[6], "%.0f");
        sb_printf(b, " |\n");
    }
    csv_free(&c);
}

static int write_report(const struct set *s, const struct chart *charts, int nch,
                        const char *outdir, const struct plot_opts *o, int pi,
                        const char *unrendered, char *err)
{
    struct sbuf b = {0};
    char path[PATH_MAX + 64];
    sb_printf(&b, "# agentreplay report\n\n");
    if (o->command)
        sb_printf(&b, "Made by:\n\n```\n%s\n```\n\n", o->command);
    sb_printf(&b, "Inputs: %s.\n\n", s->inputs);
    /* what the results were measured on */
    char models[256] = "";
    for (int j = 0; j < s->npts; j++) {
        char one[100];
        snprintf(one, sizeof one, "%s on %s", *s->pts[j].model ? s->pts[j].model : "?",
                 *s->pts[j].gpu_kind ? s->pts[j].gpu_kind : "?");
        if (strcmp(one, "? on ?") && !strstr(models, one)) {
            size_t l = strlen(models);
            snprintf(models + l, sizeof models - l, "%s%s", l ? ", " : "", one);
        }
    }
    if (*models)
        sb_printf(&b, "Model and GPU: %s.\n\n", models);
    int gmin = INT32_MAX, gmax = 0;
    for (int g = 0; g < s->ncfg; g++) {
        gmin = s->cfgs[g].gpus < gmin ? s->cfgs[g].gpus : gmin;
        gmax = s->cfgs[g].gpus > gmax ? s->cfgs[g].gpus : gmax;
    }
    if (gmin == gmax)
        sb_printf(&b, "Every configuration uses the same %d GPUs.\n\n", gmin);
    else
        sb_printf(&b, "**The configurations use different GPU counts (%d to %d GPUs).** "
                      "Throughput is per GPU; per-user figures are comparable only at equal "
                      "GPU count.\n\n",
                  gmin, gmax);
    if (unrendered)
        sb_printf(&b, "**Charts not rendered: %s.** Their data (CSV) and gnuplot scripts "
                      "are in this folder; run `sh render.sh` here where gnuplot is "
                      "installed.\n\n",
                  unrendered);

    sb_printf(&b, "## Key figures\n\n");
    key_table(&b, s, pi);
    sb_printf(&b, "\nInteractivity at a percentile is 1 / that percentile of per-request TPOT "
                  "(tok/s per user). Total tok/s/GPU = (input tokens, cached included, + "
                  "output tokens) / measured duration / GPUs of the whole deployment; output "
                  "tok/s/GPU counts output tokens only.\n\n");

    for (int i = 0; i < nch; i++) {
        const struct chart *ch = &charts[i];
        sb_printf(&b, "## %s\n\n%s\n\n", ch->title, ch->about);
        snprintf(path, sizeof path, "%s/%s.png", outdir, ch->name);
        bool png = ch->rendered[0] && file_exists(path);
        snprintf(path, sizeof path, "%s/%s.svg", outdir, ch->name);
        bool svg = ch->rendered[1] && file_exists(path);
        if (png)
            sb_printf(&b, "![%s](%s.png)\n\n", ch->title, ch->name);
        else if (svg)
            sb_printf(&b, "![%s](%s.svg)\n\n", ch->title, ch->name);
        sb_printf(&b, "Files:");
        if (png && svg)
            sb_printf(&b, " [SVG](%s.svg),", ch->name);
        snprintf(path, sizeof path, "%s/%s", outdir, ch->data);
        if (file_exists(path))
            sb_printf(&b, " data [%s](%s),", ch->data, ch->data);
        snprintf(path, sizeof path, "%s/%s", outdir, ch->script);
        if (file_exists(path))
            sb_printf(&b, " script [%s](%s)", ch->script, ch->script);
        sb_printf(&b, ".\n\n");
    }
    if (*s->confounded) {
        sb_printf(&b, "## The published-style comparison (confounded)\n\n"
                      "**These rows change the GPU count together with the decode path**, as "
                      "the published comparison did, so their per-user differences do not "
                      "isolate the decode path. Shown for reference only (from %s).\n\n",
                  s->confounded);
        confounded_table(&b, s->confounded);
        sb_printf(&b, "\n");
    }
    snprintf(path, sizeof path, "%s/render.sh", outdir);
    if (file_exists(path))
        sb_printf(&b, "To render the charts again: `sh render.sh` in this folder "
                      "([render.sh](render.sh)).\n");

    FILE *f = open_out(outdir, "report.md", err);
    if (!f) {
        sb_free(&b);
        return -1;
    }
    fwrite(b.p, 1, b.len, f);
    sb_free(&b);
    return close_out(f, outdir, "report.md", err);
}

/* ---- the driver ------------------------------------------------------ */

void plot_opts_init(struct plot_opts *o)
{
    memset(o, 0, sizeof *o);
    o->percentile = 90;
    o->width_px = 1200;
    o->height_px = 750;
    o->png = o->svg = true;
}

static int pct_index(int p)
{
    for (int i = 0; i < NPCT; i++)
        if (pct_list[i] == p)
            return i;
    return -1;
}

/* The mixed-GPU warning for per-user charts, or "" (plain text without
 * quotes: it goes into a gnuplot string). */
static int mixed_gpus(const struct set *s, bool allow, char *warn, size_t n, char *err)
{
    warn[0] = 0;
    int first = -1;
    bool mixed = false;
    for (int g = 0; g < s->ncfg; g++) {
        if (s->cfgs[g].run < 0)
            continue;
        if (first < 0)
            first = g;
        else
            mixed |= s->cfgs[g].gpus != s->cfgs[first].gpus;
    }
    if (!mixed)
        return 0;
    struct sbuf b = {0}, counts = {0};
    for (int g = 0; g < s->ncfg; g++)
        if (s->cfgs[g].run >= 0) {
            sb_printf(&b, "%s%s: %d GPUs", b.len ? "; " : "", s->cfgs[g].label, s->cfgs[g].gpus);
            bool seen = false;
            for (int h = 0; h < g; h++)
                seen |= s->cfgs[h].run >= 0 && s->cfgs[h].gpus == s->cfgs[g].gpus;
            if (!seen)
                sb_printf(&counts, "%s%d", counts.len ? " vs " : "", s->cfgs[g].gpus);
        }
    int rc = 0;
    if (!allow)
        rc = err_set(err, "distributions refused: the configurations use different GPU counts "
                          "(%s); per-user views are comparable only at equal GPU count. Plot "
                          "them separately, or pass --allow-mixed-gpus (the chart then "
                          "carries a warning)",
                     b.p);
    else
        snprintf(warn, n, "WARNING: these configurations use different GPU counts (%s GPUs): "
                          "their per-user views are not comparable", counts.p);
    char tmp[512];
    clean_text(tmp, sizeof tmp, warn);
    snprintf(warn, n, "%s", tmp);
    sb_free(&b);
    sb_free(&counts);
    return rc;
}

int plot_results(const char **dirs, int n, const char *outdir, const struct plot_opts *o,
                 char *err)
{
    int pi = pct_index(o->percentile);
    if (pi < 0)
        return err_set(err, "percentile %d: use 50, 75, 90, 95 or 99", o->percentile),
               PLOT_EBADINPUT;
    if (o->width_px < 200 || o->height_px < 150 || o->width_px > 10000 || o->height_px > 10000)
        return err_set(err, "size %dx%d: use 200x150 to 10000x10000 pixels", o->width_px,
                       o->height_px),
               PLOT_EBADINPUT;
    if (!o->png && !o->svg)
        return err_set(err, "no image format chosen (png, svg)"), PLOT_EBADINPUT;
    if (n < 1)
        return err_set(err, "no result folders given"), PLOT_EBADINPUT;

    struct set s = {0};
    int rc = PLOT_OK;
    for (int i = 0; i < n; i++)
        if (load_input(&s, dirs[i], err)) {
            set_free(&s);
            return PLOT_EBADINPUT;
        }
    if (!s.npts) {
        set_free(&s);
        return err_set(err, "%s: no results in it", dirs[0]), PLOT_EBADINPUT;
    }
    group_configs(&s);
    int conc = choose_runs(&s, o->concurrency);
    if (o->concurrency) {
        bool any = false;
        for (int g = 0; g < s.ncfg; g++)
            any |= s.cfgs[g].run >= 0;
        if (!any) {
            set_free(&s);
            return err_set(err, "concurrency %d: no run folder at that concurrency",
                           o->concurrency),
                   PLOT_EBADINPUT;
        }
    }
    char warn[512];
    if (mixed_gpus(&s, o->allow_mixed_gpus, warn, sizeof warn, err)) {
        set_free(&s);
        return PLOT_EBADINPUT;
    }
    if (mkdir_p(outdir, err)) {
        set_free(&s);
        return PLOT_EFAIL;
    }

    /* chart data */
    struct chart charts[5];
    memset(charts, 0, sizeof charts);
    int nch = 0;
    struct chart *ch;
    int k;
#define NEXT(nm, ttl)                                                                        \
    (ch = &charts[nch], memset(ch, 0, sizeof *ch), ch->name = nm, ch->script = nm ".gp",     \
     ch->title = ttl)
    NEXT("pareto", "Throughput per GPU against interactivity");
    if ((k = write_pareto(&s, pi, outdir, ch, err)) < 0)
        goto fail_io;
    nch += k;
    NEXT("distributions", "Per-request distributions: TTFT, TPOT, interactivity");
    if ((k = write_cdf(&s, conc, warn, pct_list[pi], outdir, ch, err)) < 0)
        goto fail_input;
    nch += k;
    NEXT("timeline", "Timeline of the run");
    if ((k = write_timeline(&s, conc, warn, outdir, ch, err)) < 0)
        goto fail_input;
    nch += k;
    if (*s.breakdown) {
        NEXT("breakdown", "Where a decode step's time goes");
        if ((k = write_breakdown(&s, o->batch, outdir, ch, err)) < 0)
            goto fail_input;
        nch += k;
    } else if (o->batch) {
        err_set(err, "--batch %d: no breakdown.csv in the inputs", o->batch);
        goto fail_input;
    }
    if (*s.fidelity) {
        NEXT("fidelity", "Fidelity: predictions beside the calibration point");
        if ((k = write_fidelity(&s, outdir, ch, err)) < 0)
            goto fail_input;
        nch += k;
    }
#undef NEXT

    /* scripts and render.sh */
    if (copy_script("common.gp", outdir, err))
        goto fail_io;
    for (int i = 0; i < nch; i++)
        if (copy_script(charts[i].script, outdir, err))
            goto fail_io;
    {
        FILE *f = open_out(outdir, "render.sh", err);
        if (!f)
            goto fail_io;
        fprintf(f, "#!/bin/sh\n# Renders the charts of this folder from their CSV data "
                   "(needs gnuplot with the pngcairo and svg terminals).\n"
                   "cd \"$(dirname \"$0\")\" || exit 1\nGNUPLOT=${GNUPLOT:-gnuplot}\n");
        for (int i = 0; i < nch; i++)
            for (int fm = 0; fm < 2; fm++) {
                if (!(fm ? o->svg : o->png))
                    continue;
                char expr[2600];
                chart_expr(&charts[i], fm, o, expr, sizeof expr);
                fprintf(f, "\"$GNUPLOT\" -e \"%s\" %s || exit 1\n", expr, charts[i].script);
            }
        if (close_out(f, outdir, "render.sh", err))
            goto fail_io;
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/render.sh", outdir);
        chmod(p, 0755);
    }

    /* render */
    char gp[PATH_MAX], why[ERR_LEN] = "";
    const char *unrendered = NULL;
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/gnuplot.log", outdir);
    unlink(logp);
    if (find_gnuplot(gp, sizeof gp, why)) {
        unrendered = why;
        rc = PLOT_UNRENDERED;
    } else {
        char first_warn[300] = "";
        for (int i = 0; i < nch && rc >= 0; i++)
            for (int fm = 0; fm < 2 && rc >= 0; fm++) {
                if (!(fm ? o->svg : o->png))
                    continue;
                char expr[2600], img[PATH_MAX + 64];
                chart_expr(&charts[i], fm, o, expr, sizeof expr);
                snprintf(img, sizeof img, "%s/%s.%s", outdir, charts[i].name, fmt_name[fm]);
                unlink(img);
                long before = file_size(logp);
                int st = run_gnuplot(gp, outdir, expr, charts[i].script);
                long after = file_size(logp);
                char line[256] = "";
                if (after > (before < 0 ? 0 : before))
                    log_line(logp, before < 0 ? 0 : before, line, sizeof line);
                if (st != 0) {
                    err_set(err, "gnuplot %s (%s) failed (exit %d)%s%s; see %s", charts[i].script,
                            fmt_name[fm], st, *line ? ": " : "", line, logp);
                    rc = PLOT_EFAIL;
                } else if (!file_exists(img)) {
                    err_set(err, "gnuplot %s wrote no %s", charts[i].script, img);
                    rc = PLOT_EFAIL;
                } else {
                    charts[i].rendered[fm] = true;
                    if (*line && !*first_warn)
                        snprintf(first_warn, sizeof first_warn, "%s (%s): %s",
                                 charts[i].script, fmt_name[fm], line);
                }
            }
        if (rc == PLOT_OK && *first_warn) {
            err_set(err, "gnuplot warned: %s; all messages in %s", first_warn, logp);
            rc = PLOT_WARNED;
        }
        if (file_size(logp) == 0)
            unlink(logp);
    }
    {
        char rerr[ERR_LEN];
        if (write_report(&s, charts, nch, outdir, o, pi, unrendered, rerr)) {
            snprintf(err, ERR_LEN, "%s", rerr);
            rc = PLOT_EFAIL;
        } else if (rc == PLOT_UNRENDERED) {
            err_set(err, "%s; wrote the data, scripts and report.md without images (render "
                         "later with sh %s/render.sh)",
                    why, outdir);
        }
    }
    set_free(&s);
    return rc;
fail_io:
    set_free(&s);
    return PLOT_EFAIL;
fail_input:
    set_free(&s);
    return PLOT_EBADINPUT;
}
