/* points.c: the simulating commands' shared options, the grid of points,
 * running points in workers and the sweep folder's files (points.h). */
#include "replay/cli/points.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "replay/pool.h"
#include "replay/results.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/parse.h"
#include "traces/base/time_ns.h"

void points_init(struct points_opts *o)
{
    memset(o, 0, sizeof *o);
    run_point_init(&o->base);
    o->jobs = 2;
}

int points_parse(const char *cmd, const struct flag_spec *spec, void *opts, struct points_opts *o,
                 int argc, char **argv, bool objectives)
{
    int rc = cli_parse(cmd, spec, opts, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    if (o->run.slo.n_objectives && !objectives) {
        char msg[256];
        snprintf(msg, sizeof msg, "--slo %s: percentile objectives are plan's; %s takes "
                                  "per-request limits (ttft=MS,tpot=MS,e2el=MS)",
                 o->run.slo.objectives[0].name, cmd);
        return cli_bad(cmd, msg);
    }
    o->base.slo = o->run.slo;
    o->base.slo.n_objectives = 0;
    return -1;
}

/* "16x1,8x2": tensor-parallel size x replicas. */
static int parse_layouts(const char *name, const char *v, void *group, char *err)
{
    struct grid *g = group;
    int n = 0, tp[GRID_LAYOUTS] = {0}, rep[GRID_LAYOUTS] = {0};
    char buf[512];
    if (strlen(v) >= sizeof buf)
        return err_set(err, "%s: a value longer than %zu characters", name, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int64_t a, b;
        if (parse_i64_pair(t, &a, &b, NULL) || a < 1 || b < 1 || a > 1 << 20 || b > 1 << 20)
            return err_set(err, "%s '%s': bad layout '%s' (TPxREPLICAS, e.g. 16x1,8x2)", name, v, t);
        if (n == GRID_LAYOUTS)
            return err_set(err, "%s '%s': more than %d layouts", name, v, GRID_LAYOUTS);
        tp[n] = (int)a;
        rep[n++] = (int)b;
    }
    if (!n)
        return err_set(err, "%s '%s': no layout", name, v);
    g->n_layout = n;
    memcpy(g->tp, tp, sizeof tp);
    memcpy(g->rep, rep, sizeof rep);
    return 0;
}

#define G struct grid
const struct flag grid_conc_flags[] = {
    {"--concurrency", 0, FLAG_LIST, FLAG_AT(G, conc), "N,N,...",
     "live session trees of each point", .min = 1, .max = 1000000, .opts = FLAG_SHADOW},
    FLAG_END,
};

const struct flag grid_flags[] = {
    {"--backend", 0, FLAG_LIST, FLAG_AT(G, backend), "auto,latency_specialized",
     "decode paths (standard = auto, specialized =\nlatency_specialized)",
     .choices = engine_backend_choices, .opts = FLAG_SHADOW},
    {"--layout", 0, FLAG_CUSTOM, FLAG_AT(G, tp), "TPxR,...",
     "layouts (tensor-parallel size x replicas)", .parse = parse_layouts, .example = "16x1,8x2"},
    FLAG_END,
};
#undef G

const struct flag jobs_flag[] = {
    {"--jobs", 'j', FLAG_INT, FLAG_AT(struct points_opts, jobs), NULL, "worker processes",
     .min = 1, .max = 64},
    FLAG_END,
};

int grid_complete(struct grid *g, const struct run_point *base, bool same_gpus, char *err)
{
    if (!g->conc.n) {
        g->conc.v[0] = base->rc.concurrency;
        g->conc.n = 1;
    }
    if (!g->backend.n) {
        g->backend.v[0] = (int)base->ec.backend;
        g->backend.n = 1;
    }
    if (!g->n_layout) {
        g->tp[0] = base->ec.tp;
        g->rep[0] = base->ec.tp > 0 ? base->ec.gpus / base->ec.tp : 1;
        g->n_layout = 1;
    }
    for (int a = 1; same_gpus && a < g->n_layout; a++)
        if (g->tp[a] * g->rep[a] != g->tp[0] * g->rep[0])
            return err_set(err, "layouts %dx%d and %dx%d use %d and %d GPUs: a sweep holds "
                                "the GPU count fixed",
                           g->tp[0], g->rep[0], g->tp[a], g->rep[a], g->tp[0] * g->rep[0],
                           g->tp[a] * g->rep[a]);
    return 0;
}

struct run_point *grid_points(const struct grid *g, const struct run_point *base, const char *sdir,
                              int *n_out, char *err)
{
    int n = g->n_layout * g->backend.n * g->conc.n;
    struct run_point *pts = xcalloc((size_t)n, sizeof *pts);
    int k = 0;
    for (int a = 0; a < g->n_layout; a++)
        for (int b = 0; b < g->backend.n; b++)
            for (int c = 0; c < g->conc.n; c++) {
                struct run_point *p = &pts[k++];
                *p = *base;
                p->ec.tp = g->tp[a];
                p->ec.gpus = g->tp[a] * g->rep[a];
                p->ec.backend = (enum engine_backend)g->backend.v[b];
                p->rc.concurrency = g->conc.v[c];
                if (!base->label[0] || g->n_layout * g->backend.n > 1)
                    run_point_label(p);
                char dn[256];
                run_point_dirname(p->label, p->rc.concurrency, dn, sizeof dn);
                if (!sdir) {
                    snprintf(p->dir, sizeof p->dir, "%s", dn);
                    continue;
                }
                snprintf(p->dir, sizeof p->dir, "%s/%s", sdir, dn);
                if (results_prepare_dir(p->dir, true, err)) {
                    free(pts);
                    return NULL;
                }
            }
    *n_out = n;
    return pts;
}

struct points_job {
    const struct run_env *env;
    const struct run_point *pts;
    bool verbose;
};

static int point_job(void *arg, int i)
{
    struct points_job *j = arg;
    const struct run_point *p = &j->pts[i];
    char err[ERR_LEN] = "";
    void *run = NULL;
    int64_t t0 = wall_ns();
    int rc = run_point_exec(j->env, p, &run, err);
    if (rc != EXIT_OK)
        fprintf(stderr, "%s: %s\n", p->label, err);
    else if (j->verbose)
        fprintf(stderr, "  done %-34s c=%-3d %6.1f s wall\n", p->label, p->rc.concurrency,
                (double)(wall_ns() - t0) / 1e9);
    json_decref(run);
    return rc != EXIT_OK;
}

int points_run(const struct run_env *env, const struct run_point *pts, int n, int jobs,
               bool verbose)
{
    struct run_env e = *env;
    e.progress = false;
    struct points_job j = {&e, pts, verbose};
    return pool_run(n, jobs, point_job, &j);
}

struct points_rjob {
    const struct run_env *env;
    const struct run_point *pts;
    const char *sdir;            /* the points' folders' parent here, or NULL */
};

/* Point i into root/<its folder's name>. */
static int point_rjob(void *arg, int i, const char *root, FILE *out)
{
    struct points_rjob *j = arg;
    struct run_point p = j->pts[i];
    char err[ERR_LEN] = "";
    const char *rel = j->pts[i].dir;
    size_t sl = j->sdir ? strlen(j->sdir) : 0;
    if (sl && !strncmp(rel, j->sdir, sl) && rel[sl] == '/')
        rel += sl + 1;
    int rc = 0;
    if (snprintf(p.dir, sizeof p.dir, "%s/%s", root, rel) >= (int)sizeof p.dir)
        rc = err_set(err, "%s/%s: path too long", root, rel);
    else if (strcmp(p.dir, j->pts[i].dir))
        rc = results_prepare_dir(p.dir, true, err);
    void *run = NULL;
    if (!rc)
        rc = run_point_exec(j->env, &p, &run, err);
    if (rc != EXIT_OK)
        fprintf(stderr, "%s: %s\n", p.label, err);
    json_decref(run);
    return rc != EXIT_OK;
}

int points_run_ranks(const struct run_env *env, const struct run_point *pts, int n, int jobs,
                     const char *sdir, bool *end_job)
{
    struct run_env e = *env;
    e.progress = false;
    struct points_rjob j = {&e, pts, sdir};
    /* The highest concurrency first: the longest points, mostly. */
    int *order = xmalloc((size_t)(n ? n : 1) * sizeof *order);
    for (int i = 0; i < n; i++) {
        int k = i;
        for (; k > 0 && pts[order[k - 1]].rc.concurrency < pts[i].rc.concurrency; k--)
            order[k] = order[k - 1];
        order[k] = i;
    }
    struct pool_ranks pr = {.n = n, .jobs = jobs, .order = order, .root = sdir ? sdir : "",
                            .fn = point_rjob, .arg = &j};
    int failed = pool_run_ranks(&pr);
    *end_job = pr.end_job;
    free(order);
    return failed;
}

int sweep_write_json(const char *sdir, const struct run_point *pts, int n, char *err)
{
    int written = 0, partial = 0;
    for (int i = 0; i < n; i++) {
        char e2[ERR_LEN];
        json_t *run = results_read_run(pts[i].dir, e2);
        if (!run)
            continue;
        written++;
        partial += json_is_true(json_object_get(run, "partial"));
        json_decref(run);
    }
    bool intr = run_interrupted();
    json_t *o = json_pack("{s:i,s:s,s:b,s:b,s:i,s:i,s:i}", "schema_version", 1, "kind", "sweep",
                          "interrupted", (int)intr, "partial", (int)(intr || written < n || partial),
                          "points", n, "points_written", written, "points_partial", partial);
    char path[1200];
    snprintf(path, sizeof path, "%s/sweep.json", sdir);
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return rc ? err_set(err, "%s: cannot write", path) : 0;
}

int sweep_write_start(const char *sdir, const struct run_point *pts, int n, char *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/sweep.csv", sdir);
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    fputs(results_sweep_header, f);
    if (fclose(f))
        return err_set(err, "%s: %s", path, strerror(errno));
    return sweep_write_json(sdir, pts, n, err);
}

int sweep_write_csv(const char *sdir, const char *name, const struct run_point *pts, int n,
                    bool print, char *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", sdir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    fputs(results_sweep_header, f);
    size_t sl = strlen(sdir);
    for (int i = 0; i < n; i++) {
        char e2[ERR_LEN];
        json_t *run = results_read_run(pts[i].dir, e2);
        if (!run) {
            fprintf(stderr, "missing point %s: %s\n", pts[i].label, e2);
            continue;
        }
        const char *rel = pts[i].dir;
        if (!strncmp(rel, sdir, sl) && rel[sl] == '/')
            rel += sl + 1;
        results_sweep_row(f, run, rel);
        if (print)
            results_table_row(stdout, run);
        json_decref(run);
    }
    if (fclose(f))
        return err_set(err, "%s: %s", path, strerror(errno));
    return 0;
}
