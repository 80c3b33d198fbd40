/* sweep.c: `agentreplay sweep`: concurrency x decode path x layout at one
 * GPU count, one run folder per point, run in worker processes, with
 * sweep.csv and sweep.json (replay/SCHEMA.md). Under mpirun or srun with
 * several ranks, the points go to every rank's workers from rank 0's
 * queue and their folders back to rank 0, which writes the same sweep
 * folder as one process would (replay/pool.h). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/cli/cli.h"
#include "replay/cli/points.h"
#include "replay/dist.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"

struct sweep_opts {
    struct points_opts co;
};

static void sweep_init(void *opts) { points_init(&((struct sweep_opts *)opts)->co); }

#define O struct sweep_opts
const struct flag_spec sweep_spec = {
    .usage = "agentreplay sweep [--trace PATH] --concurrency 1,2,4\n"
             "    [--backend auto,latency_specialized] [--layout 16x1,8x2] [flags] -o SDIR [-j N]",
    .about = "One run folder per point (SDIR/<label>-c<N>/) and SDIR/sweep.csv. All layouts\n"
             "must use the same GPU count (TP x replicas).",
    .size = sizeof(O),
    .init = sweep_init,
    .groups = {{"sweep", jobs_flag, offsetof(O, co)},
               {NULL, grid_conc_flags, offsetof(O, co.grid)},
               {NULL, grid_flags, offsetof(O, co.grid)},
               POINTS_GROUPS(O, co)},
};
#undef O

/* Builds every distinct configuration once, so that bad input is exit 2
 * before any run. */
static int check_points(const struct run_env *env, const struct run_point *pts, int n, char *err)
{
    for (int i = 0; i < n; i++) {
        const struct run_point *p = &pts[i], *q = &pts[i ? i - 1 : 0];
        if (i && p->ec.tp == q->ec.tp && p->ec.gpus == q->ec.gpus && p->ec.backend == q->ec.backend &&
            p->rc.concurrency == q->rc.concurrency)
            continue;
        if (run_point_check(env, p, err))
            return -1;
    }
    return 0;
}

int replay_cmd_sweep(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct sweep_opts o;
    int rc = points_parse("sweep", &sweep_spec, &o, &o.co, argc, argv, false);
    if (rc >= 0)
        return rc;
    struct points_opts *co = &o.co;
    if (!co->run.out)
        return cli_bad("sweep", "-o SDIR is required");
    if (grid_complete(&co->grid, &co->base, true, err))
        return cli_bad("sweep", err);
    bool ranks = dist_env_size() > 1, lead = dist_env_rank() == 0;
    if (lead && results_prepare_dir(co->run.out, co->run.force, err))
        return cli_bad("sweep", err);
    char *cmd = cli_command_line(argc, argv);
    struct run_trace tr;
    struct run_env env = {.trace = &tr, .command = cmd, .chrome_kernel_step = -1};
    run_signals_install();
    if ((rc = run_trace_load(&tr, co->run.trace, &co->run.tro, err))) {
        free(cmd);
        fprintf(stderr, "agentreplay sweep: %s\n", err);
        return rc;
    }
    int n;
    bool end_job = false;
    const char *sdir = lead ? co->run.out : NULL;
    struct run_point *pts = grid_points(&co->grid, &co->base, sdir, &n, err);
    if (!pts || check_points(&env, pts, n, err)) {
        free(pts);
        run_trace_free(&tr);
        free(cmd);
        return cli_bad("sweep", err);
    }
    int failed;
    if (ranks) {
        if (dist_init(err)) {
            fprintf(stderr, "agentreplay sweep: %s\n", err);
            free(pts);
            run_trace_free(&tr);
            free(cmd);
            return EXIT_FAIL;
        }
        run_signals_install(); /* after MPI_Init, whatever it set */
        /* A job can be killed before rank 0 writes the tables at its end
         * (mpirun's SIGKILL follows its SIGTERM within a second, and a
         * loaded machine may not schedule rank 0 in time): start with a
         * header-only sweep.csv and a sweep.json marked partial, which the
         * end rewrites. */
        if (lead && sweep_write_start(co->run.out, pts, n, err)) {
            fprintf(stderr, "agentreplay sweep: %s\n", err);
            free(pts);
            run_trace_free(&tr);
            free(cmd);
            return EXIT_FAIL;
        }
        failed = points_run_ranks(&env, pts, n, co->jobs, sdir, &end_job);
        if (!lead) {
            free(pts);
            run_trace_free(&tr);
            free(cmd);
            if (end_job)
                dist_abort(EXIT_FAIL);
            return failed ? EXIT_FAIL : EXIT_OK;
        }
    } else {
        failed = points_run(&env, pts, n, co->jobs, isatty(2));
    }
    if (!co->run.quiet)
        results_table_header(stdout);
    rc = sweep_write_csv(co->run.out, "sweep.csv", pts, n, !co->run.quiet, err) ? EXIT_FAIL : EXIT_OK;
    if (rc)
        fprintf(stderr, "agentreplay sweep: %s\n", err);
    if (sweep_write_json(co->run.out, pts, n, err)) {
        fprintf(stderr, "agentreplay sweep: %s\n", err);
        rc = EXIT_FAIL;
    }
    if (failed) {
        fprintf(stderr, "agentreplay sweep: %d %s reported failures%s\n", failed,
                ranks ? "point(s)" : "worker(s)", run_interrupted() ? " (interrupted)" : "");
        rc = EXIT_FAIL;
    } else if (run_interrupted()) {
        fprintf(stderr, "agentreplay sweep: interrupted: partial results written\n");
        rc = EXIT_FAIL;
    }
    if (!co->run.quiet)
        printf("results: %s/sweep.csv\n", co->run.out);
    free(pts);
    run_trace_free(&tr);
    free(cmd);
    if (end_job) /* ranks left behind: the job ends with rank 0 */
        dist_abort(rc ? rc : EXIT_FAIL);
    return rc;
}
