/* demo.c: the main job (`agentreplay` with no arguments, or `agentreplay
 * demo`): the sample trace on Kimi K3 / 16 x GB300, {auto,
 * latency_specialized} x {TP16x1, TP8x2} x concurrency 1..64, beside the
 * confounded published-style pair, into results/demo/ with the breakdown,
 * fidelity, charts and report. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fidelity.h"
#include "plots/plot.h"
#include "replay/cli/cli.h"
#include "replay/cli/points.h"
#include "replay/dist.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

#define DEMO_OUT "results/demo"

struct demo_opts {
    struct points_opts co;
};

static void demo_init(void *opts)
{
    struct points_opts *co = &((struct demo_opts *)opts)->co;
    points_init(co);
    co->base.rc.duration_ns = 960 * NS_PER_S;
    co->run.out = DEMO_OUT;
    static const int conc[] = {1, 2, 4, 8, 16, 32, 64};
    struct grid *g = &co->grid;
    for (size_t i = 0; i < ARRAY_LEN(conc); i++)
        g->conc.v[g->conc.n++] = conc[i];
    g->backend.v[g->backend.n++] = ENGINE_BACKEND_AUTO;
    g->backend.v[g->backend.n++] = ENGINE_BACKEND_LATENCY_SPECIALIZED;
    g->tp[0] = 16, g->rep[0] = 1;
    g->tp[1] = 8, g->rep[1] = 2;
    g->n_layout = 2;
}

#define O struct demo_opts
const struct flag_spec demo_spec = {
    .usage = "agentreplay [demo [-o DIR] [--duration S] [-j N] [--trace PATH] [flags]]",
    .about = "The main job: the sample trace on Kimi K3 / 16 x GB300, {auto,\n"
             "latency_specialized} x {TP16x1, TP8x2} x concurrency {1..64}, DSpark draft 7,\n"
             "beside the confounded published-style pair (8 GPUs standard vs 16 GPUs\n"
             "specialized). Writes results/demo/ and prints P90 interactivity, P90 TTFT\n"
             "and tokens/s per GPU. --layout's default: 16x1,8x2.",
    .size = sizeof(O),
    .init = demo_init,
    .groups = {{"demo", jobs_flag, offsetof(O, co)},
               {NULL, grid_conc_flags, offsetof(O, co.grid)},
               {NULL, grid_flags, offsetof(O, co.grid)},
               POINTS_GROUPS(O, co)},
};
#undef O

/* The confounded published-style pair at concurrency 1: 8 GPUs standard
 * against 16 GPUs specialized. */
static int confounded_pair(const struct points_opts *co, struct run_point cf[2], char *err)
{
    cf[0] = co->base;
    cf[0].ec.gpus = 8, cf[0].ec.tp = 8, cf[0].ec.backend = ENGINE_BACKEND_AUTO;
    cf[1] = co->base;
    cf[1].ec.gpus = 16, cf[1].ec.tp = 16, cf[1].ec.backend = ENGINE_BACKEND_LATENCY_SPECIALIZED;
    snprintf(cf[0].label, sizeof cf[0].label, "8 GPUs TP8 standard (confounded)");
    snprintf(cf[1].label, sizeof cf[1].label, "16 GPUs TP16 specialized (confounded)");
    for (int k = 0; k < 2; k++) {
        cf[k].rc.concurrency = 1;
        char dn[256];
        run_point_dirname(cf[k].label, 1, dn, sizeof dn);
        snprintf(cf[k].dir, sizeof cf[k].dir, "%s/confounded/%s", co->run.out, dn);
        if (results_prepare_dir(cf[k].dir, true, err))
            return -1;
    }
    return 0;
}

/* breakdown.csv, fidelity.csv, the charts and report.md. */
static void demo_extras(const char *out, const char *cmd)
{
    char err[ERR_LEN] = "", path[1200];
    snprintf(path, sizeof path, "%s/breakdown.csv", out);
    if (breakdown_write_csv(path, 8, err))
        fprintf(stderr, "agentreplay: breakdown.csv: %s\n", err);
    snprintf(path, sizeof path, "%s/fidelity.csv", out);
    if (fidelity_write_csv(path, err))
        fprintf(stderr, "agentreplay: fidelity.csv: %s\n", err);
    struct plot_opts po;
    plot_opts_init(&po);
    po.svg = false;
    po.command = cmd;
    const char *dirs[1] = {out};
    int pr = plot_results(dirs, 1, out, &po, err);
    if (pr < 0 || pr == PLOT_UNRENDERED)
        fprintf(stderr, "agentreplay: plots: %s\n", err);
    else
        printf("\ncharts and report: %s/report.md\n", out);
}

int replay_cmd_demo(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct demo_opts o;
    /* `./agentreplay` with no arguments arrives here with argv[0] the binary. */
    bool named = !strcmp(argv[0], "demo");
    int rc = points_parse("demo", &demo_spec, &o, &o.co, named ? argc : 1, argv, false);
    if (rc >= 0)
        return rc;
    struct points_opts *co = &o.co;
    const struct grid *g = &co->grid;
    const char *out = co->run.out;
    if (dist_env_size() > 1) /* every rank would write the same folder */
        return cli_bad("demo", "the main job runs in one process; under mpirun or srun, "
                               "split its points with `agentreplay sweep` instead");
    bool own = !strcmp(out, DEMO_OUT);
    if (results_prepare_dir(out, co->run.force || own, err))
        return cli_bad("demo", err);
    /* The command as typed; "agentreplay" for the bare main job. */
    char *cmd = cli_command_line(named && argc > 1 ? argc : 0, argv);
    struct run_trace tr;
    struct run_env env = {.trace = &tr, .command = cmd, .chrome_kernel_step = -1};
    int64_t t0 = wall_ns();
    if ((rc = run_trace_load(&tr, co->run.trace, &co->run.tro, err))) {
        free(cmd);
        fprintf(stderr, "agentreplay demo: %s\n", err);
        return rc;
    }
    int n;
    struct run_point *grid = grid_points(g, &co->base, out, &n, err);
    struct run_point *pts = grid ? xcalloc((size_t)n + 2, sizeof *pts) : NULL;
    if (grid)
        memcpy(pts, grid, (size_t)n * sizeof *pts);
    free(grid);
    struct run_point *cf = pts ? &pts[n] : NULL;
    if (!pts || confounded_pair(co, cf, err)) {
        free(pts);
        run_trace_free(&tr);
        free(cmd);
        return cli_bad("demo", err);
    }
    printf("agentreplay: the fair comparison on %s (%u sessions, %u calls)\n"
           "Kimi K3 on 16 x GB300, DSpark draft 7; {auto, latency_specialized} x {TP16x1, TP8x2}\n"
           "x concurrency 1..64, %.0f s of traffic per point; %d points in %d processes.\n",
           tr.path, tr.tr->n_roots, tr.tr->n_calls, (double)co->base.rc.duration_ns / 1e9, n + 2,
           co->jobs);
    fflush(stdout);
    run_signals_install();
    /* Longest points first, so the workers finish together. */
    struct run_point *order = xcalloc((size_t)n + 2, sizeof *order);
    int k = 0;
    for (int c = g->conc.n - 1; c >= 0; c--)
        for (int i = 0; i < n; i++)
            if (pts[i].rc.concurrency == g->conc.v[c])
                order[k++] = pts[i];
    order[k++] = cf[0];
    order[k++] = cf[1];
    int failed = points_run(&env, order, k, co->jobs, false);
    free(order);
    rc = EXIT_OK;
    printf("\nfair comparison (16 GPUs each; P90 interactivity = 1 / P90 TPOT):\n");
    results_table_header(stdout);
    if (sweep_write_csv(out, "sweep.csv", pts, n, true, err) ||
        sweep_write_csv(out, "confounded.csv", cf, 2, false, err)) {
        fprintf(stderr, "agentreplay: %s\n", err);
        rc = EXIT_FAIL;
    }
    printf("\nCONFOUNDED published-style pair (GPU count changes with the decode path; not a fair\n"
           "comparison of decode paths):\n");
    for (int i = 0; i < 2; i++) {
        json_t *run = results_read_run(cf[i].dir, err);
        if (run) {
            results_table_row(stdout, run);
            json_decref(run);
        }
    }
    demo_extras(out, cmd);
    if (failed) {
        fprintf(stderr, "agentreplay: %d worker(s) reported failures%s\n", failed,
                run_interrupted() ? " (interrupted)" : "");
        rc = EXIT_FAIL;
    } else if (run_interrupted()) {
        fprintf(stderr, "agentreplay: interrupted: partial results written\n");
        rc = EXIT_FAIL;
    }
    printf("results: %s/ (sweep.csv, confounded.csv, breakdown.csv, fidelity.csv)  %.1f s\n", out,
           (double)(wall_ns() - t0) / 1e9);
    free(pts);
    run_trace_free(&tr);
    free(cmd);
    return rc;
}
