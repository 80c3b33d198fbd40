/* plan.c: `agentreplay plan`: the most live sessions each layout and
 * decode path sustains under percentile objectives (--slo), or the fewest
 * GPUs that sustain a number of sessions; a search over simulated runs.
 * Under mpirun or srun with several ranks, each search (a layout and
 * decode path) goes to a rank from rank 0's queue; rank 0 prints their
 * lines in order and receives their run folders (replay/pool.h). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "replay/cli/points.h"
#include "replay/dist.h"
#include "replay/pool.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/time_ns.h"

struct plan_opts {
    struct points_opts co;
    int max_conc, sessions, max_gpus;
};

static void plan_init(void *opts)
{
    struct plan_opts *o = opts;
    points_init(&o->co);
    o->co.base.rc.duration_ns = 900 * NS_PER_S;
    o->max_conc = 256;
    o->max_gpus = 1024;
}

#define O struct plan_opts
static const struct flag plan_flags[] = {
    {"--max-concurrency", 0, FLAG_INT, FLAG_AT(O, max_conc), NULL,
     "the largest concurrency tried", .min = 1, .max = 1000000},
    {"--sessions", 0, FLAG_INT, FLAG_AT(O, sessions), NULL,
     "find the fewest GPUs (of --gpu, TP --tp) for N\nlive sessions", .def = "", .min = 1,
     .max = 1000000},
    {"--max-gpus", 0, FLAG_INT, FLAG_AT(O, max_gpus), "G", "with --sessions: the most GPUs tried",
     .min = 1, .max = 1000000},
    FLAG_END,
};

const struct flag_spec plan_spec = {
    .usage = "agentreplay plan [--trace PATH] --slo interactivity_p90=100,ttft_p90_ms=2000\n"
             "    [--layout 16x1,8x2] [--backend auto,latency_specialized] [--max-concurrency N]\n"
             "    [--sessions N --tp T [--max-gpus G]] [flags] [-o DIR]",
    .about = "Without --sessions: the most live sessions each layout and decode path sustains\n"
             "at the engine's GPU count (search over concurrency: doubling, then bisection).\n"
             "With --sessions N: the fewest GPUs (of the --gpu kind, TP size --tp) that\n"
             "sustain N live sessions. Prints the answer with the runs that bracket it.\n"
             "Objectives (--slo): interactivity_pXX (>=, tok/s/user), ttft_pXX_ms,\n"
             "tpot_pXX_ms, e2el_pXX_ms (<=), with XX in 50, 75, 90, 95, 99; per-request\n"
             "limits (ttft=MS...) add goodput to each run.",
    .size = sizeof(O),
    .init = plan_init,
    .groups = {{"plan", plan_flags, 0},
               {NULL, grid_flags, offsetof(O, co.grid)},
               POINTS_GROUPS(O, co)},
};
#undef O

struct plan_run {
    int x;                      /* concurrency or replicas */
    bool pass;
    double v[METRICS_SLO_OBJECTIVES];
};

struct plan_state {
    const struct run_env *env;
    const struct metrics_slo *slo;
    const char *out;
    struct plan_run runs[64];
    int n_runs;
    int code;                   /* the exit code of a run that failed */
};

static int plan_eval(struct plan_state *ps, struct run_point *p, int x, bool *pass, char *err)
{
    for (int i = 0; i < ps->n_runs; i++)
        if (ps->runs[i].x == x) {
            *pass = ps->runs[i].pass;
            return 0;
        }
    if (ps->out) {
        char dn[256];
        run_point_dirname(p->label, p->rc.concurrency, dn, sizeof dn);
        if (p->ec.gpus)
            snprintf(p->dir, sizeof p->dir, "%s/%dgpu-%s", ps->out, p->ec.gpus, dn);
        if (results_prepare_dir(p->dir, true, err)) {
            ps->code = EXIT_FAIL;
            return -1;
        }
    } else {
        p->dir[0] = 0;
    }
    void *run = NULL;
    int rc = run_point_exec(ps->env, p, &run, err);
    if (rc != EXIT_OK) {
        json_decref(run);
        ps->code = rc;
        return -1;
    }
    struct plan_run *r = &ps->runs[ps->n_runs < 64 ? ps->n_runs++ : 63];
    r->x = x;
    r->pass = results_num(run, "metrics.requests.completed") > 0;
    for (int i = 0; i < ps->slo->n_objectives; i++) {
        const struct metrics_objective *ob = &ps->slo->objectives[i];
        double v = results_num(run, ob->path);
        r->v[i] = v;
        if (!isfinite(v) || (ob->at_least ? v < ob->limit : v > ob->limit))
            r->pass = false;
    }
    json_decref(run);
    *pass = r->pass;
    return 0;
}

static void plan_print_run(FILE *out, const struct plan_state *ps, int x, const char *what)
{
    for (int i = 0; i < ps->n_runs; i++) {
        if (ps->runs[i].x != x)
            continue;
        fprintf(out, "    %s %-4d %s:", what, x, ps->runs[i].pass ? "pass" : "FAIL");
        for (int k = 0; k < ps->slo->n_objectives; k++)
            fprintf(out, "  %s %.1f", ps->slo->objectives[k].name, ps->runs[i].v[k]);
        fprintf(out, "\n");
    }
}

/* Sets the searched quantity: replicas (at p's TP) or concurrency. */
static void plan_set(struct run_point *p, bool by_replicas, int x)
{
    if (by_replicas) {
        p->ec.gpus = p->ec.tp * x;
        run_point_label(p);
    } else {
        p->rc.concurrency = x;
    }
}

/* Largest x in [1, max] that passes, assuming passing is monotone (more
 * load: worse). Returns it (0: none), with the failing neighbour in *fail
 * (0: not reached). By replicas: the smallest passing count (0: none),
 * the largest failing one in *fail. */
static int plan_search(struct plan_state *ps, struct run_point *p, int max, bool by_replicas,
                       int *fail, char *err)
{
    int lo = 0, hi = 0, x = 1;
    for (;;) {
        bool pass;
        plan_set(p, by_replicas, x);
        if (plan_eval(ps, p, x, &pass, err))
            return -1;
        if (by_replicas ? !pass : pass) {
            lo = x;
        } else {
            hi = x;
            break;
        }
        if (x >= max)
            break;
        x = x * 2 > max ? max : x * 2;
    }
    while (hi && hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        bool pass;
        plan_set(p, by_replicas, mid);
        if (plan_eval(ps, p, mid, &pass, err))
            return -1;
        if (by_replicas ? !pass : pass)
            lo = mid;
        else
            hi = mid;
    }
    if (by_replicas) {
        *fail = lo;
        return hi;
    }
    *fail = hi;
    return lo;
}

/* The most sessions of layout a and decode path b, its runs under root
 * (NULL: none), its lines to out. */
static int plan_sessions(const struct plan_opts *o, const struct run_env *env, int a, int b,
                         const char *root, FILE *out, char *err)
{
    const struct points_opts *co = &o->co;
    const struct grid *g = &co->grid;
    struct plan_state ps = {.env = env, .slo = &co->run.slo, .out = root};
    struct run_point p = co->base;
    p.ec.tp = g->tp[a];
    p.ec.gpus = g->tp[a] * g->rep[a];
    p.ec.backend = (enum engine_backend)g->backend.v[b];
    run_point_label(&p);
    int fail = 0;
    int best = plan_search(&ps, &p, o->max_conc, false, &fail, err);
    if (best < 0)
        return ps.code ? ps.code : EXIT_BADINPUT;
    fprintf(out, "%-32s %d GPUs: %d live sessions%s\n", p.label, p.ec.gpus, best,
            fail ? "" : " (or more: not bracketed, raise --max-concurrency)");
    if (best)
        plan_print_run(out, &ps, best, "c =");
    if (fail)
        plan_print_run(out, &ps, fail, "c =");
    return EXIT_OK;
}

/* The fewest GPUs for o->sessions live sessions on decode path b. */
static int plan_gpus(const struct plan_opts *o, const struct run_env *env, int b,
                     const char *root, FILE *out, char *err)
{
    const struct points_opts *co = &o->co;
    const struct grid *g = &co->grid;
    int tp = co->base.ec.tp;
    struct plan_state ps = {.env = env, .slo = &co->run.slo, .out = root};
    struct run_point p = co->base;
    p.ec.tp = tp;
    p.ec.backend = (enum engine_backend)g->backend.v[b];
    p.rc.concurrency = o->sessions;
    int fail = 0;
    int reps = plan_search(&ps, &p, o->max_gpus / (tp > 0 ? tp : 1), true, &fail, err);
    if (reps < 0)
        return ps.code ? ps.code : EXIT_BADINPUT;
    const char *be = engine_backend_name(p.ec.backend);
    if (!reps) {
        fprintf(out, "%s TP%d: no GPU count up to %d sustains %d sessions\n", be, tp,
                o->max_gpus, o->sessions);
    } else {
        fprintf(out, "%s TP%d: fewest GPUs for %d live sessions: %d (%d replicas)\n", be, tp,
                o->sessions, reps * tp, reps);
        plan_print_run(out, &ps, reps, "replicas =");
        if (reps > 1)
            plan_print_run(out, &ps, reps - 1, "replicas =");
    }
    return EXIT_OK;
}

/* The searches: one per layout and decode path (one per decode path with
 * --sessions). */
static int plan_n_jobs(const struct plan_opts *o)
{
    const struct grid *g = &o->co.grid;
    return o->sessions ? g->backend.n : g->n_layout * g->backend.n;
}

static int plan_job(const struct plan_opts *o, const struct run_env *env, int i, const char *root,
                    FILE *out, char *err)
{
    int nb = o->co.grid.backend.n;
    return o->sessions ? plan_gpus(o, env, i, root, out, err)
                       : plan_sessions(o, env, i / nb, i % nb, root, out, err);
}

struct plan_rjob {
    const struct plan_opts *o;
    const struct run_env *env;
};

static int plan_rjob(void *arg, int i, const char *root, FILE *out)
{
    struct plan_rjob *j = arg;
    char err[ERR_LEN] = "";
    int rc = plan_job(j->o, j->env, i, root, out, err);
    if (rc != EXIT_OK)
        fprintf(stderr, "agentreplay plan: %s\n", err);
    return rc;
}

/* Every search in order here, or across the ranks (every rank). */
static int plan_run(const struct plan_opts *o, const struct run_env *env, char *err)
{
    int n = plan_n_jobs(o);
    if (dist_env_size() <= 1) {
        for (int i = 0; i < n; i++) {
            int rc = plan_job(o, env, i, o->co.run.out, stdout, err);
            if (rc != EXIT_OK)
                return rc;
        }
        return EXIT_OK;
    }
    if (dist_init(err))
        return EXIT_FAIL;
    run_signals_install(); /* after MPI_Init, whatever it set */
    struct plan_rjob j = {o, env};
    struct pool_ranks pr = {.n = n, .jobs = 1, .root = o->co.run.out, .fn = plan_rjob, .arg = &j};
    int failed = pool_run_ranks(&pr);
    if (pr.end_job) { /* ranks left behind: the job ends with this one */
        fflush(stdout);
        dist_abort(EXIT_FAIL);
    }
    if (!failed)
        return EXIT_OK;
    snprintf(err, ERR_LEN, "%d of %d searches failed or did not run", failed, n);
    return pr.first_failure ? pr.first_failure : EXIT_FAIL;
}

int replay_cmd_plan(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct plan_opts o;
    int rc = points_parse("plan", &plan_spec, &o, &o.co, argc, argv, true);
    if (rc >= 0)
        return rc;
    struct points_opts *co = &o.co;
    const struct metrics_slo *slo = &co->run.slo;
    if (!slo->n_objectives)
        return cli_bad("plan", "--slo with a percentile objective is required (e.g. "
                               "interactivity_p90=100,ttft_p90_ms=2000)");
    if (grid_complete(&co->grid, &co->base, false, err))
        return cli_bad("plan", err);
    bool lead = dist_env_rank() == 0;
    if (co->run.out && lead && results_prepare_dir(co->run.out, co->run.force, err))
        return cli_bad("plan", err);
    char *cmd = cli_command_line(argc, argv);
    struct run_trace tr;
    struct run_env env = {.trace = &tr, .command = cmd, .chrome_kernel_step = -1};
    run_signals_install();
    if ((rc = run_trace_load(&tr, co->run.trace, &co->run.tro, err))) {
        free(cmd);
        fprintf(stderr, "agentreplay plan: %s\n", err);
        return rc;
    }
    if (lead) {
        printf("plan: SLO");
        for (int k = 0; k < slo->n_objectives; k++)
            printf(" %s %s %g", slo->objectives[k].name, slo->objectives[k].at_least ? ">=" : "<=",
                   slo->objectives[k].limit);
        printf("; %s %s, %.0f s per run\n", co->base.ec.model, co->base.ec.gpu,
               (double)co->base.rc.duration_ns / 1e9);
    }
    rc = plan_run(&o, &env, err);
    if (!lead) {
        run_trace_free(&tr);
        free(cmd);
        return rc;
    }
    if (rc != EXIT_OK)
        fprintf(stderr, "agentreplay plan: %s\n", err);
    else if (run_interrupted()) {
        fprintf(stderr, "agentreplay plan: interrupted\n");
        rc = EXIT_FAIL;
    }
    run_trace_free(&tr);
    free(cmd);
    return rc;
}
