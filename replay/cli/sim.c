/* sim.c: `agentreplay sim`: one run (or K seeds with --repeats, with the
 * mean and 95 % confidence interval of every metric) of a trace against
 * the simulated engine, into a run folder (replay/SCHEMA.md). Under mpirun
 * or srun with several ranks, the seeds go to the ranks from rank 0's
 * queue and their folders back to rank 0 (replay/pool.h), which writes
 * the same folder as one process would. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/cli/cli.h"
#include "replay/cli/points.h"
#include "replay/dist.h"
#include "replay/pool.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/stats.h"

struct sim_opts {
    struct points_opts co;
    int repeats;
    const char *chrome;
    int64_t chrome_step;
};

static void sim_init(void *opts)
{
    struct sim_opts *o = opts;
    points_init(&o->co);
    o->repeats = 1;
    o->chrome_step = -1;
}

#define O struct sim_opts
static const struct flag sim_flags[] = {
    {"--repeats", 0, FLAG_INT, FLAG_AT(O, repeats), "K",
     "K seeds (seed, seed+1, ...): mean and 95 % CI of\nevery metric; repeat i > 0 in DIR/repeat-i/",
     .min = 1, .max = 1000},
    {"--chrome-trace", 0, FLAG_STR, FLAG_AT(O, chrome), "FILE", "engine steps as a Chrome trace",
     .def = ""},
    {"--chrome-trace-kernels", 0, FLAG_INT64, FLAG_AT(O, chrome_step), "N",
     "also the kernels inside step N (0-based)", .def = "", .min = 0, .max = INT64_MAX},
    FLAG_END,
};

const struct flag_spec sim_spec = {
    .usage = "agentreplay sim [--trace PATH] [flags] -o DIR",
    .about = "Replays a trace against the simulated engine (virtual clock) and writes\n"
             "DIR/run.json, requests.jsonl, timeline.csv, summary.md (replay/SCHEMA.md).",
    .size = sizeof(O),
    .init = sim_init,
    .groups = {{"sim", sim_flags, 0}, POINTS_GROUPS(O, co)},
};
#undef O

/* Every number of the runs' "metrics", by dotted path: the values of
 * each seed (null where absent). */
static void collect_numbers(json_t *j, const char *prefix, json_t *acc, int k, int K)
{
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        char path[256];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
        if (json_is_object(v)) {
            collect_numbers(v, path, acc, k, K);
        } else if (json_is_number(v) || json_is_null(v)) {
            json_t *a = json_object_get(acc, path);
            if (!a) {
                a = json_array();
                for (int i = 0; i < K; i++)
                    json_array_append_new(a, json_null());
                json_object_set_new(acc, path, a);
            }
            json_array_set(a, (size_t)k, v);
        }
    }
}

/* run.json's "repeats": mean, sd and 95 % Student-t interval of each
 * metric over the seeds. */
static json_t *repeats_json(json_t **runs, int K, const uint64_t *seeds)
{
    json_t *acc = json_object();
    for (int k = 0; k < K; k++)
        if (runs[k])
            collect_numbers(json_object_get(runs[k], "metrics"), "", acc, k, K);
    json_t *m = json_object();
    const char *key;
    json_t *a;
    json_object_foreach(acc, key, a) {
        double sum = 0, sq = 0;
        int n = 0;
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) if (json_is_number(x)) {
            sum += json_number_value(x);
            n++;
        }
        double mean = n ? sum / n : NAN;
        json_array_foreach(a, i, x) if (json_is_number(x)) {
            double d = json_number_value(x) - mean;
            sq += d * d;
        }
        double sd = n > 1 ? sqrt(sq / (n - 1)) : NAN;
        double ci = n > 1 ? stats_t975(n - 1) * sd / sqrt((double)n) : NAN;
        json_object_set_new(m, key,
                            json_pack("{s:o, s:o, s:o, s:O}", "mean",
                                      isfinite(mean) ? json_real(mean) : json_null(), "ci95",
                                      isfinite(ci) ? json_real(ci) : json_null(), "sd",
                                      isfinite(sd) ? json_real(sd) : json_null(), "values", a));
    }
    json_decref(acc);
    json_t *seeds_a = json_array();
    for (int k = 0; k < K; k++)
        json_array_append_new(seeds_a, json_integer((json_int_t)seeds[k]));
    return json_pack("{s:i, s:o, s:s, s:o}", "k", K, "seeds", seeds_a, "ci", "95 % (Student t)",
                     "metrics", m);
}

static void print_repeats(const json_t *rep)
{
    const char *keys[] = {"interactivity_tok_s.p90", "interactivity_tok_s.p50", "ttft_ms.p90",
                          "tpot_ms.p90", "throughput_tok_s_per_gpu.total",
                          "throughput_tok_s_per_gpu.output", "prefix_hit_rate"};
    json_t *m = json_object_get(rep, "metrics");
    printf("over %d seeds (mean +- 95 %% CI):\n", (int)json_integer_value(json_object_get(rep, "k")));
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        json_t *e = json_object_get(m, keys[i]);
        printf("  %-34s %12.3f +- %.3f\n", keys[i], json_number_value(json_object_get(e, "mean")),
               json_number_value(json_object_get(e, "ci95")));
    }
}

/* The table, the reasons a run is not AgentX-valid and the repeats. */
static void print_result(json_t *run, int repeats, const char *out)
{
    results_table_header(stdout);
    results_table_row(stdout, run);
    json_t *why = json_object_get(run, "invalid_reasons");
    if (json_array_size(why)) {
        printf("not AgentX-valid:");
        size_t i;
        json_t *x;
        json_array_foreach(why, i, x) printf("%s %s", i ? ";" : "", json_string_value(x));
        printf("\n");
    }
    if (repeats > 1)
        print_repeats(json_object_get(run, "repeats"));
    printf("results: %s/\n", out);
}

/* One seed of a distributed sim: the options, the environment and the
 * base point. */
struct sim_job {
    const struct sim_opts *o;
    struct run_env *env;
    const struct run_point *p;
};

/* The folder of repeat k under root (the result folder); 0 or -1. */
static int repeat_dir(const char *root, int k, char *out, size_t n, char *err)
{
    if (k == 0) {
        snprintf(out, n, "%s", root);
        return 0;
    }
    if (snprintf(out, n, "%s/repeat-%d", root, k) >= (int)n)
        return err_set(err, "%s: path too long", root);
    return results_prepare_dir(out, true, err);
}

/* Repeat k of the base point into root. */
static int sim_job(void *arg, int k, const char *root, FILE *out)
{
    struct sim_job *j = arg;
    struct run_point pk = *j->p;
    char err[ERR_LEN] = "";
    pk.rc.seed = j->p->rc.seed + (uint64_t)k;
    int rc = repeat_dir(root, k, pk.dir, sizeof pk.dir, err) ? EXIT_FAIL : EXIT_OK;
    j->env->chrome_trace = k == 0 ? j->o->chrome : NULL;
    void *run = NULL;
    if (rc == EXIT_OK)
        rc = run_point_exec(j->env, &pk, &run, err);
    if (rc != EXIT_OK)
        fprintf(stderr, "agentreplay sim: %s\n", err);
    json_decref(run);
    return rc;
}

/* The repeats across the ranks (every rank), then each run.json read back
 * at rank 0; returns the first failure's exit code, or EXIT_OK. */
static int sim_ranks(const struct sim_opts *o, struct run_env *env, const struct run_point *p,
                     json_t **runs, bool *end_job, char *err)
{
    if (dist_init(err))
        return EXIT_FAIL;
    run_signals_install(); /* after MPI_Init, whatever it set */
    struct sim_job j = {o, env, p};
    struct pool_ranks pr = {.n = o->repeats, .jobs = 1, .root = o->co.run.out, .fn = sim_job,
                            .arg = &j};
    int failed = pool_run_ranks(&pr);
    *end_job = pr.end_job;
    if (dist_rank() != 0)
        return failed ? EXIT_FAIL : EXIT_OK;
    for (int k = 0; k < o->repeats; k++) {
        char dir[1024];
        if (repeat_dir(o->co.run.out, k, dir, sizeof dir, err) == 0)
            runs[k] = results_read_run(dir, err);
    }
    if (failed)
        snprintf(err, ERR_LEN, "%d of %d repeats failed or did not run", failed, o->repeats);
    return failed ? (pr.first_failure ? pr.first_failure : EXIT_FAIL) : EXIT_OK;
}

int replay_cmd_sim(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct sim_opts o;
    int rc = points_parse("sim", &sim_spec, &o, &o.co, argc, argv, false);
    if (rc >= 0)
        return rc;
    if (!o.co.run.out)
        return cli_bad("sim", "-o DIR is required");
    bool ranks = dist_env_size() > 1, lead = dist_env_rank() == 0;
    char *cmd = cli_command_line(argc, argv);
    struct run_trace tr;
    struct run_env env = {.trace = &tr, .command = cmd, .progress = isatty(2),
                          .chrome_kernel_step = o.chrome_step};
    /* From here on a signal ends the run with partial results (an early one
     * at the first tick) instead of killing the process. */
    run_signals_install();
    if ((rc = run_trace_load(&tr, o.co.run.trace, &o.co.run.tro, err))) {
        free(cmd);
        fprintf(stderr, "agentreplay sim: %s\n", err);
        return rc;
    }
    struct run_point p = o.co.base;
    if (!p.label[0])
        run_point_label(&p);
    /* Inputs that can only fail are refused before the folder is made. */
    if (run_point_check(&env, &p, err) ||
        (lead && results_prepare_dir(o.co.run.out, o.co.run.force, err))) {
        run_trace_free(&tr);
        free(cmd);
        return cli_bad("sim", err);
    }
    int repeats = o.repeats;
    json_t **runs = xcalloc((size_t)repeats, sizeof *runs);
    uint64_t *seeds = xcalloc((size_t)repeats, sizeof *seeds);
    for (int k = 0; k < repeats; k++)
        seeds[k] = p.rc.seed + (uint64_t)k;
    rc = EXIT_OK;
    for (int k = 0; k < repeats && rc == EXIT_OK && !ranks; k++) {
        struct run_point pk = p;
        pk.rc.seed = seeds[k];
        if (repeat_dir(o.co.run.out, k, pk.dir, sizeof pk.dir, err)) {
            rc = EXIT_FAIL;
            break;
        }
        env.chrome_trace = k == 0 ? o.chrome : NULL;
        void *run;
        rc = run_point_exec(&env, &pk, &run, err);
        runs[k] = run;
    }
    bool end_job = false;
    if (ranks)
        rc = sim_ranks(&o, &env, &p, (json_t **)runs, &end_job, err);
    if (rc != EXIT_OK && (lead || !ranks))
        fprintf(stderr, "agentreplay sim: %s\n", err);
    if (rc != EXIT_BADINPUT && lead) {
        if (repeats > 1 && runs[0]) {
            int got = 0;
            while (got < repeats && runs[got])
                got++;
            json_object_set_new(runs[0], "repeats", repeats_json(runs, got, seeds));
            if (results_write_json(o.co.run.out, "run.json", runs[0], err)) {
                fprintf(stderr, "agentreplay sim: %s\n", err);
                rc = EXIT_FAIL;
            }
        }
        if (runs[0] && !o.co.run.quiet)
            print_result(runs[0], repeats, o.co.run.out);
    }
    for (int k = 0; k < repeats; k++)
        json_decref(runs[k]);
    free(runs);
    free(seeds);
    run_trace_free(&tr);
    free(cmd);
    if (end_job) /* ranks left behind: the job ends with this one */
        dist_abort(rc ? rc : EXIT_FAIL);
    return rc;
}
