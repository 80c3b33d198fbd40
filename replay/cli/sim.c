/* sim_cmd.c: the replayer's commands on the simulated engine:
 *   sim      one run (or K seeds with --repeats) into a run folder;
 *   sweep    concurrency x backend x layout at one GPU count, in parallel
 *            worker processes, into a sweep folder with sweep.csv;
 *   plan     the most live sessions each layout and decode path sustains
 *            under SLOs, or the fewest GPUs for a number of sessions;
 *   compare  two results side by side, refusing different GPU counts;
 *   demo     the main job (./agentreplay with no arguments).
 * Result files: replay/SCHEMA.md. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "replay/cli/cli.h"
#include "replay/metrics.h"
#include "replay/records.h"
#include "replay/replay.h"
#include "replay/results.h"
#include "engine/target.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/file.h"
#include "traces/base/time_ns.h"

#if defined(__has_include)
#if __has_include("engine/fidelity.h")
#include "engine/fidelity.h"
#define HAVE_FIDELITY 1
#endif
#if __has_include("plots/plot.h")
#include "plots/plot.h"
#define HAVE_PLOTS 1
#endif
#endif

/* ---------------------------------------------------------------------- */
/* Shared pieces. */

static volatile sig_atomic_t g_interrupt;
static void on_signal(int sig)
{
    (void)sig;
    g_interrupt = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static char *join_argv(int argc, char **argv)
{
    size_t n = 16;
    for (int i = 0; i < argc; i++)
        n += strlen(argv[i]) + 3;
    char *s = xmalloc(n);
    strcpy(s, "agentreplay");
    for (int i = 0; i < argc; i++) {
        strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

/* The trace and what every point needs from it. */
struct ctx {
    struct trace *tr;
    char trace_path[1024];
    double hit_theoretical;
    const char *command;
    bool progress;               /* a terminal: show the bar */
    const char *chrome_trace;    /* sim only */
    int64_t chrome_kernel_step;  /* step whose kernels the trace shows, -1 none */
};

/* One point of a run: a deployment and a replay. */
struct point {
    struct engine_config ec;
    struct replay_config rc;
    struct metrics_slo slo;
    char label[128];
    char dir[1024];              /* "" : no files */
    bool fake;
    struct target_fake_config fc;
};

static int load_trace(struct ctx *c, const char *path, const struct trace_read_opts *o, char *err)
{
    char buf[1024];
    if (!path) {
        if (file_data_path("traces/samples/agentic-synth.jsonl", buf, sizeof buf))
            return err_set(err, "the built-in sample trace (traces/samples/agentic-synth.jsonl) was not found; give --trace");
        path = buf;
    }
    snprintf(c->trace_path, sizeof c->trace_path, "%s", path);
    c->tr = trace_read(path, o, err);
    if (!c->tr)
        return -1;
    if (!c->tr->n_calls) {
        trace_destroy(c->tr);
        c->tr = NULL;
        return err_set(err, "%s: the trace has no calls", path);
    }
    struct trace_stats st;
    trace_stats_compute(c->tr, &st);
    c->hit_theoretical = st.hit_rate_tokens;
    return 0;
}

struct progress {
    int64_t wall0;
    int64_t end_ns;
    int64_t last_wall;       /* last redraw; at most 10 a second */
    bool show;
    bool shown;
};

static void on_tick(void *arg, struct replay *r, int64_t now)
{
    struct progress *p = arg;
    if (g_interrupt)
        replay_interrupt(r);
    if (!p->show)
        return;
    int64_t wall = wall_ns() - p->wall0;
    if (p->shown && wall - p->last_wall < 100 * NS_PER_MS)
        return;
    p->last_wall = wall;
    double frac = p->end_ns > 0 ? (double)now / (double)p->end_ns : 0;
    if (frac > 1)
        frac = 1;
    int w = 30, k = (int)(frac * w);
    char bar[40];
    for (int i = 0; i < w; i++)
        bar[i] = i < k ? '#' : '.';
    bar[w] = 0;
    double eta = frac > 0 ? (double)wall / 1e9 * (1 - frac) / frac : 0;
    fprintf(stderr, "\r[%s] sim %6.0f/%.0f s  wall %5.1f s  ETA %5.1f s ", bar, (double)now / 1e9,
            (double)p->end_ns / 1e9, (double)wall / 1e9, eta);
    p->shown = true;
}

static void label_default(struct point *p)
{
    if (p->fake) {
        snprintf(p->label, sizeof p->label, "fake target");
        return;
    }
    snprintf(p->label, sizeof p->label, "TP%dx%d %s", p->ec.tp, p->ec.tp > 0 ? p->ec.gpus / p->ec.tp : 0,
             p->ec.backend == ENGINE_BACKEND_LATENCY_SPECIALIZED ? "latency_specialized" : "auto");
}

static void dir_name(const char *label, int conc, char *out, size_t n)
{
    snprintf(out, n, "%s-c%d", label, conc);
    for (char *p = out; *p; p++)
        if (*p == ' ' || *p == '/' || *p == '(' || *p == ')' || *p == ',')
            *p = '_';
}

static json_t *engine_config_json(const struct engine_config *e)
{
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(e->model));
    json_object_set_new(o, "gpu", json_string(e->gpu));
    json_object_set_new(o, "gpus", json_integer(e->gpus));
    json_object_set_new(o, "tp", json_integer(e->tp));
    json_object_set_new(o, "backend", json_string(engine_backend_name(e->backend)));
    json_object_set_new(o, "router", json_string(engine_router_name(e->router)));
    json_object_set_new(o, "block_size", json_integer(e->block_size));
    json_object_set_new(o, "max_num_batched_tokens", json_integer((json_int_t)e->max_num_batched_tokens));
    json_object_set_new(o, "max_num_seqs", json_integer(e->max_num_seqs));
    json_object_set_new(o, "max_model_len", json_integer((json_int_t)e->max_model_len));
    json_object_set_new(o, "prefix_caching", json_boolean(e->prefix_caching));
    json_object_set_new(o, "gpu_memory_utilization", json_real(e->gpu_memory_utilization));
    json_object_set_new(o, "spec", json_boolean(e->spec));
    json_object_set_new(o, "draft", json_integer(e->draft));
    json_object_set_new(o, "acceptance", json_string(e->acceptance));
    json_object_set_new(o, "calibration", json_string(e->calibration));
    json_object_set_new(o, "stepwise", json_boolean(e->stepwise));
    json_object_set_new(o, "seed", json_integer((json_int_t)e->seed));
    return o;
}

/* Runs one point; writes its folder when p->dir is set. On success *out is
 * the run.json object (caller owns). Returns EXIT_OK, EXIT_BADINPUT (the
 * engine or the replayer refused the configuration) or EXIT_FAIL. */
static int run_point(const struct ctx *c, const struct point *p, json_t **out, char *err)
{
    *out = NULL;
    struct engine_config ec = p->ec;
    ec.seed = p->rc.seed;
    if (p->rc.max_model_len > 0)
        ec.max_model_len = p->rc.max_model_len;
    struct loop *l = loop_virtual_create();
    struct target *tg;
    if (p->fake)
        tg = target_fake_create(&p->fc, l);
    else
        tg = target_engine_create(&ec, l, err);
    if (!tg) {
        loop_destroy(l);
        return EXIT_BADINPUT;
    }
    struct replay *r = replay_create(&p->rc, c->tr, tg, l, err);
    if (!r) {
        target_destroy(tg);
        loop_destroy(l);
        return EXIT_BADINPUT;
    }
    struct records_writer *w = NULL;
    FILE *tl = NULL;
    char path[1200];
    if (p->dir[0]) {
        snprintf(path, sizeof path, "%s/requests.jsonl", p->dir);
        w = records_open(path, p->rc.chunk_times, err);
        snprintf(path, sizeof path, "%s/timeline.csv", p->dir);
        tl = w ? fopen(path, "w") : NULL;
        if (!w || !tl) {
            if (w && !tl)
                err_set(err, "%s: %s", path, strerror(errno));
            records_close(w, NULL);
            replay_destroy(r);
            target_destroy(tg);
            loop_destroy(l);
            return EXIT_FAIL;
        }
        if (c->chrome_trace && !p->fake) {
            struct engine *e = target_engine_get(tg);
            if (e && engine_trace_open(e, c->chrome_trace, c->chrome_kernel_step, err)) {
                fclose(tl);
                records_close(w, NULL);
                replay_destroy(r);
                target_destroy(tg);
                loop_destroy(l);
                return EXIT_BADINPUT;
            }
        }
    }
    replay_set_outputs(r, w, tl);
    struct progress pr = {.wall0 = wall_ns(), .end_ns = p->rc.duration_ns, .show = c->progress};
    replay_set_tick(r, on_tick, &pr);
    replay_start(r);
    loop_run(l);
    if (pr.shown)
        fprintf(stderr, "\r%*s\r", 90, "");
    struct metrics_summary s;
    struct replay_outcome o;
    replay_summarize(r, &p->slo, &s, &o);
    s.prefix_hit_rate_theoretical = c->hit_theoretical;

    json_t *cfg = json_object();
    json_object_set_new(cfg, "target", json_string(p->fake ? "fake" : "engine"));
    json_object_set_new(cfg, "replay", replay_config_json(&p->rc));
    json_object_set_new(cfg, "engine", engine_config_json(&ec));
    json_object_set_new(cfg, "chunk_times", json_boolean(p->rc.chunk_times));
    struct run_info ri = {0};
    ri.kind = "sim";
    ri.command = c->command;
    ri.label = p->label;
    ri.gpus = p->fake ? p->fc.gpus : ec.gpus;
    ri.tp = p->fake ? p->fc.gpus : ec.tp;
    ri.replicas = ri.tp > 0 ? ri.gpus / ri.tp : 0;
    ri.backend = p->fake ? "fake" : engine_backend_name(ec.backend);
    ri.model = ec.model;
    ri.gpu = ec.gpu;
    ri.seed = p->rc.seed;
    ri.concurrency = p->rc.concurrency;
    ri.duration_s = (double)p->rc.duration_ns / 1e9;
    ri.spec = ec.spec && !p->fake;
    ri.spec_method = "dspark";
    ri.spec_draft = ec.draft;
    ri.spec_acceptance = ec.acceptance[0] ? ec.acceptance : "curve";
    ri.trace_path = c->trace_path;
    ri.trace_format = trace_format_name(c->tr->format);
    ri.trace_digest = c->tr->digest;
    ri.trace_sessions = c->tr->n_sessions;
    ri.trace_calls = c->tr->n_calls;
    ri.engine_json = tg->ops->describe_json ? tg->ops->describe_json(tg) : NULL;
    ri.config_json = cfg;
    json_t *run = results_run_json(&ri, &s, &o, NULL);
    if (c->chrome_trace && !p->fake) {
        struct engine *e = target_engine_get(tg);
        if (e)
            engine_trace_close(e);
    }
    replay_destroy(r);
    int rc = EXIT_OK;
    if (records_close(w, err))
        rc = EXIT_FAIL;
    if (tl && fclose(tl)) {
        err_set(err, "timeline.csv: %s", strerror(errno));
        rc = EXIT_FAIL;
    }
    if (p->dir[0] && rc == EXIT_OK) {
        if (results_write_json(p->dir, "run.json", run, err) ||
            results_write_summary(p->dir, &ri, &s, &o, err))
            rc = EXIT_FAIL;
    }
    target_destroy(tg);
    loop_destroy(l);
    if (o.interrupted && rc == EXIT_OK) {
        err_set(err, "interrupted: partial results written");
        rc = EXIT_FAIL;
    }
    *out = run;
    return rc;
}

/* Parses the flags every simulating command shares. Returns 1 consumed,
 * 0 not ours, -1 bad value. */
struct common {
    const char *trace;
    struct trace_read_opts tro;
    struct point base;
    const char *out;
    bool force;
    bool quiet;
    int jobs;
};

static void common_init(struct common *c)
{
    memset(c, 0, sizeof *c);
    engine_config_defaults(&c->base.ec);
    replay_config_defaults(&c->base.rc);
    c->base.fc = (struct target_fake_config){.overhead_ns = 20 * NS_PER_MS,
                                             .prefill_ns_per_token = 20000,
                                             .tpot_ns = 10 * NS_PER_MS,
                                             .chunk_tokens = 1,
                                             .gpus = 16,
                                             .cache = true};
    c->jobs = 2;
}

static int common_flag(struct common *c, int argc, char **argv, int *i, char *err)
{
    const char *f = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(f, "--trace") || !strcmp(f, "-o") || !strcmp(f, "--out") || !strcmp(f, "--slo") ||
        !strcmp(f, "--label") || !strcmp(f, "--target") || !strcmp(f, "--format") ||
        !strcmp(f, "-j") || !strcmp(f, "--jobs")) {
        if (!v)
            return err_set(err, "%s needs a value", f);
        (*i) += 2;
        if (!strcmp(f, "--trace"))
            c->trace = v;
        else if (!strcmp(f, "-o") || !strcmp(f, "--out"))
            c->out = v;
        else if (!strcmp(f, "--slo")) {
            if (metrics_slo_parse(v, &c->base.slo, err))
                return -1;
        } else if (!strcmp(f, "--label"))
            snprintf(c->base.label, sizeof c->base.label, "%s", v);
        else if (!strcmp(f, "--target")) {
            if (!strcmp(v, "fake"))
                c->base.fake = true;
            else if (!strcmp(v, "engine"))
                c->base.fake = false;
            else
                return err_set(err, "bad --target '%s' (engine, fake)", v);
        } else if (!strcmp(f, "--format")) {
            if (trace_format_parse(v, &c->tro.format))
                return err_set(err, "bad --format '%s'", v);
        } else {
            char *end;
            long j = strtol(v, &end, 10);
            if (*end || j < 1 || j > 64)
                return err_set(err, "bad %s '%s' (1..64)", f, v);
            c->jobs = (int)j;
        }
        return 1;
    }
    if (!strcmp(f, "--force") || !strcmp(f, "--quiet") || !strcmp(f, "--skip-bad")) {
        if (!strcmp(f, "--force"))
            c->force = true;
        else if (!strcmp(f, "--quiet"))
            c->quiet = true;
        else
            c->tro.skip_bad = true;
        (*i)++;
        return 1;
    }
    int k = replay_config_flag(&c->base.rc, argc, argv, i, err);
    if (k)
        return k;
    return engine_config_flag(&c->base.ec, argc, argv, i, err);
}

static int bad(const char *cmd, const char *err)
{
    fprintf(stderr, "agentreplay %s: %s\n", cmd, err);
    return EXIT_BADINPUT;
}

static const char common_help[] =
    "  --trace PATH           trace file or folder [traces/samples, built in]\n"
    "  --format FMT           agentx, mooncake, azure, burstgpt, native [auto]\n"
    "  --skip-bad             skip bad trace records (counted)\n"
    "  --slo ttft=MS,tpot=MS,e2el=MS   goodput objectives\n"
    "  --label TEXT           the configuration's name in results\n"
    "  --target engine|fake   the simulated engine, or a fixed-rate fake [engine]\n"
    "  --force                overwrite an existing result folder\n"
    "  --quiet                no table\n";

/* ---------------------------------------------------------------------- */
/* Repeats: mean and 95 % CI of every metric over seeds. */

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
        double ci = n > 1 ? results_t975(n - 1) * sd / sqrt((double)n) : NAN;
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

/* ---------------------------------------------------------------------- */
/* sim */

static const char sim_help[] =
    "usage: agentreplay sim [--trace PATH] [engine flags] [replay flags] -o DIR\n"
    "                       [--repeats K] [--force] [--chrome-trace FILE]\n"
    "Replays a trace against the simulated engine (virtual clock) and writes\n"
    "DIR/run.json, requests.jsonl, timeline.csv, summary.md (replay/SCHEMA.md).\n"
    "  --repeats K            K seeds (seed, seed+1, ...): mean and 95 % CI of\n"
    "                         every metric; repeat i > 0 in DIR/repeat-i/\n"
    "  --chrome-trace FILE    engine steps as a Chrome trace\n"
    "  --chrome-trace-kernels N  also the kernels inside step N (0-based)\n";

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

int replay_cmd_sim(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct common co;
    common_init(&co);
    int repeats = 1;
    const char *chrome = NULL;
    int64_t chrome_step = -1;
    for (int i = 1; i < argc;) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("%s%s%s\nengine:\n%s", sim_help, common_help, replay_flags_help, engine_flags_help);
            return EXIT_OK;
        }
        if (!strcmp(argv[i], "--repeats") || !strcmp(argv[i], "--chrome-trace") ||
            !strcmp(argv[i], "--chrome-trace-kernels")) {
            if (i + 1 >= argc)
                return bad("sim", "--repeats / --chrome-trace / --chrome-trace-kernels need a value");
            if (!strcmp(argv[i], "--chrome-trace")) {
                chrome = argv[i + 1];
            } else if (!strcmp(argv[i], "--chrome-trace-kernels")) {
                char *end;
                long long k = strtoll(argv[i + 1], &end, 10);
                if (*end || k < 0)
                    return bad("sim", "bad --chrome-trace-kernels (a step index >= 0)");
                chrome_step = k;
            } else {
                char *end;
                long k = strtol(argv[i + 1], &end, 10);
                if (*end || k < 1 || k > 1000)
                    return bad("sim", "bad --repeats (1..1000)");
                repeats = (int)k;
            }
            i += 2;
            continue;
        }
        int k = common_flag(&co, argc, argv, &i, err);
        if (k < 0)
            return bad("sim", err);
        if (k == 0) {
            snprintf(err, sizeof err, "unknown flag '%s' (see --help)", argv[i]);
            return bad("sim", err);
        }
    }
    if (!co.out)
        return bad("sim", "-o DIR is required");
    if (results_prepare_dir(co.out, co.force, err))
        return bad("sim", err);
    struct ctx c = {0};
    char *cmd = join_argv(argc, argv);
    c.command = cmd;
    c.progress = isatty(2);
    c.chrome_trace = chrome;
    c.chrome_kernel_step = chrome_step;
    /* From here on a signal ends the run with partial results (an early one
     * at the first tick) instead of killing the process. */
    install_signals();
    if (load_trace(&c, co.trace, &co.tro, err)) {
        free(cmd);
        return bad("sim", err);
    }
    struct point p = co.base;
    if (!p.label[0])
        label_default(&p);
    json_t **runs = xcalloc((size_t)repeats, sizeof *runs);
    uint64_t *seeds = xcalloc((size_t)repeats, sizeof *seeds);
    int rc = EXIT_OK;
    for (int k = 0; k < repeats && rc == EXIT_OK; k++) {
        struct point pk = p;
        pk.rc.seed = p.rc.seed + (uint64_t)k;
        seeds[k] = pk.rc.seed;
        if (k == 0)
            snprintf(pk.dir, sizeof pk.dir, "%s", co.out);
        else {
            snprintf(pk.dir, sizeof pk.dir, "%s/repeat-%d", co.out, k);
            if (results_prepare_dir(pk.dir, true, err)) {
                rc = EXIT_FAIL;
                break;
            }
        }
        c.chrome_trace = k == 0 ? chrome : NULL;
        rc = run_point(&c, &pk, &runs[k], err);
    }
    if (rc == EXIT_BADINPUT) {
        fprintf(stderr, "agentreplay sim: %s\n", err);
    } else {
        if (rc != EXIT_OK)
            fprintf(stderr, "agentreplay sim: %s\n", err);
        if (repeats > 1 && runs[0]) {
            int got = 0;
            while (got < repeats && runs[got])
                got++;
            json_object_set_new(runs[0], "repeats", repeats_json(runs, got, seeds));
            if (results_write_json(co.out, "run.json", runs[0], err)) {
                fprintf(stderr, "agentreplay sim: %s\n", err);
                rc = EXIT_FAIL;
            }
        }
        if (runs[0] && !co.quiet) {
            results_table_header(stdout);
            results_table_row(stdout, runs[0]);
            json_t *why = json_object_get(runs[0], "invalid_reasons");
            if (json_array_size(why)) {
                printf("not AgentX-valid:");
                size_t i;
                json_t *x;
                json_array_foreach(why, i, x) printf("%s %s", i ? ";" : "", json_string_value(x));
                printf("\n");
            }
            if (repeats > 1)
                print_repeats(json_object_get(runs[0], "repeats"));
            printf("results: %s/\n", co.out);
        }
    }
    for (int k = 0; k < repeats; k++)
        json_decref(runs[k]);
    free(runs);
    free(seeds);
    trace_destroy(c.tr);
    free(cmd);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Running many points in worker processes. */

/* Runs pts[0..n) with up to `jobs` processes (each point has its own
 * engine and loop; the trace is shared copy-on-write). Each point's run
 * folder must be set. Returns the number of points that failed. */
static int run_points(const struct ctx *c, struct point *pts, int n, int jobs, bool verbose)
{
    if (jobs > n)
        jobs = n;
    if (jobs < 1)
        jobs = 1;
    fflush(NULL);
    pid_t *pid = xcalloc((size_t)jobs, sizeof *pid);
    for (int w = 0; w < jobs; w++) {
        pid[w] = jobs > 1 ? fork() : 0;
        if (pid[w] < 0) {
            pid[w] = 0;
            jobs = w; /* fall back to what started */
            break;
        }
        if (pid[w] == 0) {
            int failed = 0;
            struct ctx cc = *c;
            cc.progress = false;
            for (int i = w; i < n; i += (jobs > 1 ? jobs : 1)) {
                char err[ERR_LEN] = "";
                json_t *run = NULL;
                int64_t t0 = wall_ns();
                int rc = run_point(&cc, &pts[i], &run, err);
                if (rc != EXIT_OK) {
                    failed++;
                    fprintf(stderr, "%s: %s\n", pts[i].label, err);
                } else if (verbose) {
                    fprintf(stderr, "  done %-34s c=%-3d %6.1f s wall\n", pts[i].label,
                            pts[i].rc.concurrency, (double)(wall_ns() - t0) / 1e9);
                }
                json_decref(run);
                if (g_interrupt)
                    break;
            }
            if (jobs > 1) {
                fflush(NULL);
                _exit(failed ? 1 : 0);
            }
            free(pid);
            return failed;
        }
    }
    /* A signal sent to this process alone (not to its group, as Ctrl-C
     * does) is passed on, so that the workers write partial points and stop
     * rather than run on unseen. */
    int failed = 0;
    bool forwarded = false;
    for (int w = 0; w < jobs; w++) {
        int st = 0;
        pid_t r;
        for (;;) {
            if (g_interrupt && !forwarded) {
                for (int x = 0; x < jobs; x++)
                    kill(pid[x], SIGINT);
                forwarded = true;
            }
            r = waitpid(pid[w], &st, 0);
            if (r >= 0 || errno != EINTR)
                break;
        }
        if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            failed++;
    }
    free(pid);
    return failed;
}

/* Writes SDIR/sweep.json: whether every point of the grid is there and
 * complete ("partial": false) or the sweep was interrupted or lost points. */
static int write_sweep_json(const char *sdir, const struct point *pts, int n, char *err)
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
    json_t *o = json_pack("{s:i,s:s,s:b,s:b,s:i,s:i,s:i}", "schema_version", 1, "kind", "sweep",
                          "interrupted", (int)(g_interrupt != 0), "partial",
                          (int)(g_interrupt || written < n || partial), "points", n,
                          "points_written", written, "points_partial", partial);
    char path[1200];
    snprintf(path, sizeof path, "%s/sweep.json", sdir);
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    return rc ? err_set(err, "%s: cannot write", path) : 0;
}

/* Writes SDIR/NAME from the points' run.json files; prints the table. */
static int write_sweep_csv(const char *sdir, const char *name, struct point *pts, int n, bool print,
                           char *err)
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

/* Lists: "1,2,4" and "16x1,8x2" and "auto,latency_specialized". */
static int parse_int_list(const char *s, int *out, int cap, char *err)
{
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > 1000000 || n >= cap)
            return err_set(err, "bad list item '%s' in '%s'", t, s);
        out[n++] = (int)v;
    }
    if (!n)
        return err_set(err, "empty list '%s'", s);
    return n;
}

static int parse_layouts(const char *s, int *tp, int *rep, int cap, char *err)
{
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int a, b;
        char x;
        if (sscanf(t, "%d%c%d", &a, &x, &b) != 3 || (x != 'x' && x != 'X') || a < 1 || b < 1 || n >= cap)
            return err_set(err, "bad layout '%s' (want TPxREPLICAS, e.g. 16x1,8x2)", t);
        tp[n] = a;
        rep[n++] = b;
    }
    if (!n)
        return err_set(err, "empty --layout");
    return n;
}

static int parse_backends(const char *s, enum engine_backend *out, int cap, char *err)
{
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n >= cap)
            return err_set(err, "too many backends");
        if (!strcmp(t, "auto") || !strcmp(t, "standard"))
            out[n++] = ENGINE_BACKEND_AUTO;
        else if (!strcmp(t, "latency_specialized") || !strcmp(t, "specialized"))
            out[n++] = ENGINE_BACKEND_LATENCY_SPECIALIZED;
        else
            return err_set(err, "bad backend '%s' (auto, latency_specialized)", t);
    }
    if (!n)
        return err_set(err, "empty --backend");
    return n;
}

/* ---------------------------------------------------------------------- */
/* sweep */

static const char sweep_help[] =
    "usage: agentreplay sweep [--trace PATH] --concurrency 1,2,4 [--backend auto,latency_specialized]\n"
    "                         [--layout 16x1,8x2] [engine flags] [replay flags] -o SDIR [-j N]\n"
    "One run folder per point (SDIR/<label>-c<N>/) and SDIR/sweep.csv. All layouts\n"
    "must use the same GPU count (TP x replicas).\n"
    "  -j N                   worker processes [2]\n";

struct grid {
    int conc[64], n_conc;
    int tp[16], rep[16], n_layout;
    enum engine_backend be[4];
    int n_be;
};

static int grid_flag(struct grid *g, int argc, char **argv, int *i, char *err)
{
    const char *f = argv[*i];
    if (strcmp(f, "--concurrency") && strcmp(f, "--backend") && strcmp(f, "--layout"))
        return 0;
    if (*i + 1 >= argc)
        return err_set(err, "%s needs a value", f);
    const char *v = argv[*i + 1];
    *i += 2;
    int k;
    if (!strcmp(f, "--concurrency"))
        k = g->n_conc = parse_int_list(v, g->conc, 64, err);
    else if (!strcmp(f, "--backend"))
        k = g->n_be = parse_backends(v, g->be, 4, err);
    else
        k = g->n_layout = parse_layouts(v, g->tp, g->rep, 16, err);
    return k < 0 ? -1 : 1;
}

static struct point *grid_points(const struct grid *g, const struct point *base, const char *sdir,
                                 int *n_out, char *err)
{
    int n = g->n_layout * g->n_be * g->n_conc;
    struct point *pts = xcalloc((size_t)n, sizeof *pts);
    int k = 0;
    for (int a = 0; a < g->n_layout; a++)
        for (int b = 0; b < g->n_be; b++)
            for (int c = 0; c < g->n_conc; c++) {
                struct point *p = &pts[k++];
                *p = *base;
                p->ec.tp = g->tp[a];
                p->ec.gpus = g->tp[a] * g->rep[a];
                p->ec.backend = g->be[b];
                p->rc.concurrency = g->conc[c];
                if (!base->label[0] || g->n_layout * g->n_be > 1)
                    label_default(p);
                char dn[256];
                dir_name(p->label, p->rc.concurrency, dn, sizeof dn);
                snprintf(p->dir, sizeof p->dir, "%s/%s", sdir, dn);
                if (results_prepare_dir(p->dir, true, err)) {
                    free(pts);
                    return NULL;
                }
            }
    *n_out = n;
    return pts;
}

int replay_cmd_sweep(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct common co;
    common_init(&co);
    struct grid g = {0};
    for (int i = 1; i < argc;) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("%s%s%s\nengine:\n%s", sweep_help, common_help, replay_flags_help, engine_flags_help);
            return EXIT_OK;
        }
        int k = grid_flag(&g, argc, argv, &i, err);
        if (k == 0)
            k = common_flag(&co, argc, argv, &i, err);
        if (k < 0)
            return bad("sweep", err);
        if (k == 0) {
            snprintf(err, sizeof err, "unknown flag '%s' (see --help)", argv[i]);
            return bad("sweep", err);
        }
    }
    if (!co.out)
        return bad("sweep", "-o SDIR is required");
    if (!g.n_conc) {
        g.conc[0] = co.base.rc.concurrency;
        g.n_conc = 1;
    }
    if (!g.n_be) {
        g.be[0] = co.base.ec.backend;
        g.n_be = 1;
    }
    if (!g.n_layout) {
        g.tp[0] = co.base.ec.tp;
        g.rep[0] = co.base.ec.tp > 0 ? co.base.ec.gpus / co.base.ec.tp : 1;
        g.n_layout = 1;
    }
    for (int a = 1; a < g.n_layout; a++)
        if (g.tp[a] * g.rep[a] != g.tp[0] * g.rep[0]) {
            snprintf(err, sizeof err, "layouts %dx%d and %dx%d use %d and %d GPUs: a sweep holds "
                                      "the GPU count fixed",
                     g.tp[0], g.rep[0], g.tp[a], g.rep[a], g.tp[0] * g.rep[0], g.tp[a] * g.rep[a]);
            return bad("sweep", err);
        }
    if (results_prepare_dir(co.out, co.force, err))
        return bad("sweep", err);
    struct ctx c = {0};
    char *cmd = join_argv(argc, argv);
    c.command = cmd;
    install_signals();
    if (load_trace(&c, co.trace, &co.tro, err)) {
        free(cmd);
        return bad("sweep", err);
    }
    int n;
    struct point *pts = grid_points(&g, &co.base, co.out, &n, err);
    if (!pts) {
        trace_destroy(c.tr);
        free(cmd);
        return bad("sweep", err);
    }
    /* Check every configuration here, so that bad input is exit 2. */
    {
        bool ok = true;
        for (int i = 0; ok && i < n; i++) {
            bool same = i && pts[i].ec.tp == pts[i - 1].ec.tp && pts[i].ec.gpus == pts[i - 1].ec.gpus &&
                        pts[i].ec.backend == pts[i - 1].ec.backend;
            if (same && pts[i].rc.concurrency == pts[i - 1].rc.concurrency)
                continue;
            struct loop *l = loop_virtual_create();
            struct target *tg = pts[i].fake ? target_fake_create(&pts[i].fc, l)
                                            : target_engine_create(&pts[i].ec, l, err);
            struct replay *r = tg ? replay_create(&pts[i].rc, c.tr, tg, l, err) : NULL;
            ok = r != NULL;
            replay_destroy(r);
            target_destroy(tg);
            loop_destroy(l);
        }
        if (!ok) {
            free(pts);
            trace_destroy(c.tr);
            free(cmd);
            return bad("sweep", err);
        }
    }
    int failed = run_points(&c, pts, n, co.jobs, isatty(2));
    if (!co.quiet)
        results_table_header(stdout);
    int rc = write_sweep_csv(co.out, "sweep.csv", pts, n, !co.quiet, err) ? EXIT_FAIL : EXIT_OK;
    if (rc)
        fprintf(stderr, "agentreplay sweep: %s\n", err);
    if (write_sweep_json(co.out, pts, n, err)) {
        fprintf(stderr, "agentreplay sweep: %s\n", err);
        rc = EXIT_FAIL;
    }
    if (failed) {
        fprintf(stderr, "agentreplay sweep: %d worker(s) reported failures%s\n", failed,
                g_interrupt ? " (interrupted)" : "");
        rc = EXIT_FAIL;
    }
    if (!co.quiet)
        printf("results: %s/sweep.csv\n", co.out);
    free(pts);
    trace_destroy(c.tr);
    free(cmd);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* compare */

static const char compare_help[] =
    "usage: agentreplay compare A B [--per-gpu]\n"
    "A and B: run folders (or run.json files). Side by side with ratios B/A.\n"
    "Two sweep folders: total throughput per GPU at equal P90 interactivity.\n"
    "Refuses (exit 3) when the GPU counts differ: per-user metrics are not\n"
    "comparable across deployment sizes. --per-gpu compares only throughput\n"
    "per GPU against interactivity, and says so.\n";

/* Sweep folders: per-GPU throughput against P90 interactivity curves. */
struct sweep_pt {
    char label[128];
    int gpus, conc;
    double inter90, total;
};

static int read_sweep(const char *dir, struct sweep_pt **out, char *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/sweep.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    char line[4096];
    int n = 0, cap = 0, ln = 0;
    struct sweep_pt *v = NULL;
    while (fgets(line, sizeof line, f)) {
        if (ln++ == 0)
            continue;
        char *fld[20];
        int k = 0;
        char *q = line;
        while (k < 20 && *q && *q != '\n') {
            if (*q == '"') {
                fld[k++] = ++q;
                while (*q && *q != '"')
                    q++;
                if (*q)
                    *q++ = 0;
            } else {
                fld[k++] = q;
            }
            while (*q && *q != ',' && *q != '\n')
                q++;
            if (*q == ',')
                *q++ = 0;
            else if (*q == '\n')
                *q = 0;
        }
        if (k < 19) {
            fclose(f);
            free(v);
            return err_set(err, "%s:%d: %d fields, want 19", path, ln, k);
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            v = xrealloc(v, (size_t)cap * sizeof *v);
        }
        snprintf(v[n].label, sizeof v[n].label, "%s", fld[0]);
        v[n].gpus = atoi(fld[1]);
        v[n].conc = atoi(fld[5]);
        v[n].inter90 = *fld[9] ? atof(fld[9]) : NAN;
        v[n].total = *fld[14] ? atof(fld[14]) : NAN;
        n++;
    }
    fclose(f);
    *out = v;
    return n;
}

/* Throughput per GPU of curve (label lb in v, its points in order of
 * concurrency) at interactivity x, by linear interpolation on the segment
 * that spans x (the best one if several do); NAN outside the curve. */
static double curve_at(const struct sweep_pt *v, int n, const char *lb, double x)
{
    int idx[256], m = 0;
    for (int i = 0; i < n && m < 256; i++)
        if (!strcmp(v[i].label, lb) && isfinite(v[i].inter90) && isfinite(v[i].total))
            idx[m++] = i;
    for (int i = 1; i < m; i++) /* insertion sort by concurrency */
        for (int j = i; j > 0 && v[idx[j - 1]].conc > v[idx[j]].conc; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    double best = NAN;
    for (int k = 0; k < m; k++) {
        const struct sweep_pt *p = &v[idx[k]];
        double y = NAN;
        if (p->inter90 == x)
            y = p->total;
        else if (k + 1 < m) {
            const struct sweep_pt *q = &v[idx[k + 1]];
            double lo = fmin(p->inter90, q->inter90), hi = fmax(p->inter90, q->inter90);
            if (x >= lo && x <= hi && hi > lo)
                y = p->total + (q->total - p->total) * (x - p->inter90) / (q->inter90 - p->inter90);
        }
        if (isfinite(y) && (isnan(best) || y > best))
            best = y;
    }
    return best;
}

static int compare_sweeps(const char *a, const char *b, bool per_gpu)
{
    char err[ERR_LEN];
    struct sweep_pt *A = NULL, *B = NULL;
    int na = read_sweep(a, &A, err);
    if (na < 0)
        return bad("compare", err);
    int nb = read_sweep(b, &B, err);
    if (nb < 0) {
        free(A);
        return bad("compare", err);
    }
    bool same = true;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            same &= A[i].gpus == B[j].gpus;
    if (!same && !per_gpu) {
        fprintf(stderr, "agentreplay compare: refused: the sweeps use different GPU counts (%d vs %d).\n"
                        "Compare at equal GPU count, or pass --per-gpu to compare throughput per GPU\n"
                        "against P90 interactivity.\n",
                na ? A[0].gpus : 0, nb ? B[0].gpus : 0);
        free(A);
        free(B);
        return EXIT_REFUSED;
    }
    if (!same)
        printf("!!! PER-GPU COMPARISON: the GPU counts differ. Only total throughput per GPU at\n"
               "!!! equal P90 interactivity is compared; nothing per-user is compared.\n\n");
    printf("total tok/s per GPU at A's P90 interactivity points (B interpolated on its curve):\n");
    printf("%-40s %-40s %5s %10s %12s %12s %7s\n", "A", "B", "A c", "P90 tok/s", "A tok/s/GPU",
           "B tok/s/GPU", "B/A");
    for (int i = 0; i < na; i++) {
        for (int j = 0; j < nb; j++) {
            if (j && !strcmp(B[j].label, B[j - 1].label))
                continue;
            double y = curve_at(B, nb, B[j].label, A[i].inter90);
            char yb[32] = "-", r[32] = "-";
            if (isfinite(y)) {
                snprintf(yb, sizeof yb, "%.0f", y);
                if (A[i].total > 0)
                    snprintf(r, sizeof r, "%.3f", y / A[i].total);
            }
            char la[160], lb[160];
            snprintf(la, sizeof la, "%s (%d GPUs)", A[i].label, A[i].gpus);
            snprintf(lb, sizeof lb, "%s (%d GPUs)", B[j].label, B[j].gpus);
            printf("%-40s %-40s %5d %10.1f %12.0f %12s %7s\n", la, lb, A[i].conc, A[i].inter90, A[i].total,
                   yb, r);
        }
    }
    free(A);
    free(B);
    return EXIT_OK;
}

static bool is_sweep(const char *dir)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/sweep.csv", dir);
    return access(p, R_OK) == 0;
}

int replay_cmd_compare(int argc, char **argv)
{
    const char *a = NULL, *b = NULL;
    bool per_gpu = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(compare_help, stdout);
            return EXIT_OK;
        } else if (!strcmp(argv[i], "--per-gpu"))
            per_gpu = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "agentreplay compare: unknown flag '%s'\n", argv[i]);
            return EXIT_BADINPUT;
        } else if (!a)
            a = argv[i];
        else if (!b)
            b = argv[i];
        else {
            fprintf(stderr, "agentreplay compare: more than two results given\n");
            return EXIT_BADINPUT;
        }
    }
    if (!a || !b) {
        fputs(compare_help, stderr);
        return EXIT_BADINPUT;
    }
    if (is_sweep(a) && is_sweep(b))
        return compare_sweeps(a, b, per_gpu);
    char err[ERR_LEN];
    json_t *A = results_read_run(a, err);
    if (!A)
        return bad("compare", err);
    json_t *B = results_read_run(b, err);
    if (!B) {
        json_decref(A);
        return bad("compare", err);
    }
    int ga = (int)results_num(A, "gpus"), gb = (int)results_num(B, "gpus");
    int rc = EXIT_OK;
    if (ga != gb && !per_gpu) {
        fprintf(stderr,
                "agentreplay compare: refused: A runs on %d GPUs and B on %d.\n"
                "Per-user metrics (interactivity, TTFT) of deployments of different sizes are\n"
                "not comparable: the GPU count changes with whatever else differs, so the\n"
                "comparison cannot isolate it. Compare at equal GPU count (e.g. 2 x TP8 against\n"
                "1 x TP16 on the same 16 GPUs), or pass --per-gpu to compare throughput per GPU\n"
                "against interactivity.\n",
                ga, gb);
        json_decref(A);
        json_decref(B);
        return EXIT_REFUSED;
    }
    if (ga != gb)
        printf("!!! PER-GPU COMPARISON: the GPU counts differ (%d vs %d). Only throughput per GPU\n"
               "!!! against interactivity is compared; per-user latency differences below are\n"
               "!!! confounded with the deployment size and are not a fair comparison.\n\n",
               ga, gb);
    printf("A: %s  (%s)\nB: %s  (%s)\n\n", a, results_str(A, "label") ? results_str(A, "label") : "?", b,
           results_str(B, "label") ? results_str(B, "label") : "?");
    struct {
        const char *name, *path;
        bool per_user;
    } rows[] = {
        {"GPUs", "gpus", false},
        {"TP", "tp", false},
        {"replicas", "replicas", false},
        {"concurrency", "concurrency", false},
        {"P50 interactivity tok/s/user", "metrics.interactivity_tok_s.p50", true},
        {"P90 interactivity tok/s/user", "metrics.interactivity_tok_s.p90", true},
        {"P99 interactivity tok/s/user", "metrics.interactivity_tok_s.p99", true},
        {"P90 TTFT ms", "metrics.ttft_ms.p90", true},
        {"P90 TPOT ms", "metrics.tpot_ms.p90", true},
        {"P90 E2EL ms", "metrics.e2el_ms.p90", true},
        {"total tok/s per GPU", "metrics.throughput_tok_s_per_gpu.total", false},
        {"output tok/s per GPU", "metrics.throughput_tok_s_per_gpu.output", false},
        {"prefix hit rate", "metrics.prefix_hit_rate", false},
        {"completed", "metrics.requests.completed", false},
        {"errors", "metrics.requests.errors", false},
        {"fallback steps", "metrics.fallback_steps", false},
    };
    printf("%-32s %14s %14s %9s\n", "metric", "A", "B", "B/A");
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        double x = results_num(A, rows[i].path), y = results_num(B, rows[i].path);
        char ratio[32] = "";
        if (isfinite(x) && isfinite(y) && x != 0)
            snprintf(ratio, sizeof ratio, "%.3f", y / x);
        printf("%-32s %14.3f %14.3f %9s%s\n", rows[i].name, x, y, ratio,
               rows[i].per_user && ga != gb ? "  (confounded: GPU counts differ)" : "");
    }
    /* Confounders other than the GPU count. */
    struct {
        const char *name, *path;
    } conf[] = {{"model", "model"},
                {"GPU kind", "gpu"},
                {"trace digest", "trace.digest"},
                {"spec acceptance", "spec.acceptance"},
                {"spec draft", "spec.draft"},
                {"kind (sim/load)", "kind"},
                {"backend", "backend"},
                {"layout TP", "tp"},
                {"seed", "seed"},
                {"duration_s", "duration_s"},
                {"concurrency", "concurrency"}};
    int nconf = 0;
    printf("\n");
    for (size_t i = 0; i < ARRAY_LEN(conf); i++) {
        json_t *x = json_object_get(A, "x");
        (void)x;
        const char *sa = results_str(A, conf[i].path), *sb = results_str(B, conf[i].path);
        double na = results_num(A, conf[i].path), nb = results_num(B, conf[i].path);
        bool differ;
        char va[96], vb[96];
        if (sa || sb) {
            differ = !sa || !sb || strcmp(sa, sb);
            snprintf(va, sizeof va, "%s", sa ? sa : "-");
            snprintf(vb, sizeof vb, "%s", sb ? sb : "-");
        } else {
            differ = !(na == nb || (isnan(na) && isnan(nb)));
            snprintf(va, sizeof va, "%g", na);
            snprintf(vb, sizeof vb, "%g", nb);
        }
        if (differ) {
            printf("differs: %-16s A=%s  B=%s\n", conf[i].name, va, vb);
            nconf++;
        }
    }
    if (!json_is_true(json_object_get(A, "agentx_valid")) || !json_is_true(json_object_get(B, "agentx_valid")))
        printf("note: %s not AgentX-valid (see invalid_reasons in run.json)\n",
               !json_is_true(json_object_get(A, "agentx_valid")) &&
                       !json_is_true(json_object_get(B, "agentx_valid"))
                   ? "A and B are"
                   : !json_is_true(json_object_get(A, "agentx_valid")) ? "A is" : "B is");
    if (nconf > 1)
        printf("warning: %d things differ; a difference in the metrics cannot be pinned on one\n", nconf);
    json_decref(A);
    json_decref(B);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* plan */

static const char plan_help[] =
    "usage: agentreplay plan [--trace PATH] --slo interactivity_p90=100,ttft_p90_ms=2000\n"
    "         [--layout 16x1,8x2] [--backend auto,latency_specialized] [--max-concurrency N]\n"
    "         [--sessions N --tp T [--max-gpus G]] [engine flags] [replay flags] [-o DIR]\n"
    "Without --sessions: the most live sessions each layout and decode path sustains\n"
    "at the engine's GPU count (search over concurrency: doubling, then bisection).\n"
    "With --sessions N: the fewest GPUs (of the --gpu kind, TP size --tp) that\n"
    "sustain N live sessions. Prints the answer with the runs that bracket it.\n"
    "SLO terms: interactivity_pXX (>=, tok/s/user), ttft_pXX_ms, tpot_pXX_ms,\n"
    "e2el_pXX_ms (<=), with XX in 50, 75, 90, 95, 99.\n";

struct plan_slo {
    char path[96];
    char name[48];
    double limit;
    bool at_least;
};

static int plan_slo_parse(const char *s, struct plan_slo *out, int cap, char *err)
{
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq || n >= cap)
            return err_set(err, "bad --slo item '%s' (want NAME=VALUE)", t);
        *eq = 0;
        char *end;
        double v = strtod(eq + 1, &end);
        if (*end || end == eq + 1 || !(v > 0))
            return err_set(err, "bad --slo value '%s' for %s", eq + 1, t);
        int pct;
        char metric[32], tail[16] = "";
        if (sscanf(t, "%31[a-z2]_p%d%15s", metric, &pct, tail) < 2 ||
            (pct != 50 && pct != 75 && pct != 90 && pct != 95 && pct != 99))
            return err_set(err, "bad --slo term '%s' (e.g. interactivity_p90, ttft_p90_ms)", t);
        struct plan_slo *p = &out[n++];
        snprintf(p->name, sizeof p->name, "%s", t);
        p->limit = v;
        if (!strcmp(metric, "interactivity") && !tail[0]) {
            snprintf(p->path, sizeof p->path, "metrics.interactivity_tok_s.p%d", pct);
            p->at_least = true;
        } else if ((!strcmp(metric, "ttft") || !strcmp(metric, "tpot") || !strcmp(metric, "e2el")) &&
                   !strcmp(tail, "_ms")) {
            snprintf(p->path, sizeof p->path, "metrics.%s_ms.p%d", metric, pct);
            p->at_least = false;
        } else {
            return err_set(err, "bad --slo term '%s' (interactivity_pXX, ttft_pXX_ms, tpot_pXX_ms, "
                                "e2el_pXX_ms)", t);
        }
    }
    if (!n)
        return err_set(err, "empty --slo");
    return n;
}

struct plan_run {
    int x;                      /* concurrency or replicas */
    bool pass;
    double v[8];
};

struct plan_state {
    const struct ctx *c;
    const struct plan_slo *slo;
    int n_slo;
    const char *out;
    struct plan_run runs[64];
    int n_runs;
};

static int plan_eval(struct plan_state *ps, struct point *p, int x, bool *pass, char *err)
{
    for (int i = 0; i < ps->n_runs; i++)
        if (ps->runs[i].x == x) {
            *pass = ps->runs[i].pass;
            return 0;
        }
    if (ps->out) {
        char dn[256];
        dir_name(p->label, p->rc.concurrency, dn, sizeof dn);
        if (p->ec.gpus)
            snprintf(p->dir, sizeof p->dir, "%s/%dgpu-%s", ps->out, p->ec.gpus, dn);
        if (results_prepare_dir(p->dir, true, err))
            return -1;
    } else {
        p->dir[0] = 0;
    }
    json_t *run = NULL;
    int rc = run_point(ps->c, p, &run, err);
    if (rc != EXIT_OK) {
        json_decref(run);
        return -1;
    }
    struct plan_run *r = &ps->runs[ps->n_runs < 64 ? ps->n_runs++ : 63];
    r->x = x;
    r->pass = results_num(run, "metrics.requests.completed") > 0;
    for (int i = 0; i < ps->n_slo; i++) {
        double v = results_num(run, ps->slo[i].path);
        r->v[i] = v;
        if (!isfinite(v) || (ps->slo[i].at_least ? v < ps->slo[i].limit : v > ps->slo[i].limit))
            r->pass = false;
    }
    json_decref(run);
    *pass = r->pass;
    return 0;
}

static void plan_print_run(const struct plan_state *ps, int x, const char *what)
{
    for (int i = 0; i < ps->n_runs; i++) {
        if (ps->runs[i].x != x)
            continue;
        printf("    %s %-4d %s:", what, x, ps->runs[i].pass ? "pass" : "FAIL");
        for (int k = 0; k < ps->n_slo; k++)
            printf("  %s %.1f", ps->slo[k].name, ps->runs[i].v[k]);
        printf("\n");
    }
}

/* Largest x in [1, max] that passes, assuming passing is monotone (more
 * load: worse). Returns it (0: none), with the failing neighbour in *fail
 * (0: not reached). */
static int plan_search(struct plan_state *ps, struct point *p, int max, bool by_replicas, int *fail,
                       char *err)
{
    int lo = 0, hi = 0, x = 1;
    for (;;) {
        bool pass;
        if (by_replicas) {
            p->ec.gpus = p->ec.tp * x;
            label_default(p);
        } else {
            p->rc.concurrency = x;
        }
        if (plan_eval(ps, p, x, &pass, err))
            return -1;
        if (by_replicas ? !pass : pass)
            lo = x;
        else {
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
        if (by_replicas) {
            p->ec.gpus = p->ec.tp * mid;
            label_default(p);
        } else {
            p->rc.concurrency = mid;
        }
        if (plan_eval(ps, p, mid, &pass, err))
            return -1;
        if (by_replicas ? !pass : pass)
            lo = mid;
        else
            hi = mid;
    }
    if (by_replicas) {
        *fail = lo;  /* the largest failing count */
        return hi;   /* the smallest passing one (0: none) */
    }
    *fail = hi;
    return lo;
}

int replay_cmd_plan(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct common co;
    common_init(&co);
    co.base.rc.duration_ns = 900 * NS_PER_S;
    struct grid g = {0};
    struct plan_slo slo[8];
    int n_slo = 0, max_conc = 256, sessions = 0, tp = 0, max_gpus = 1024;
    for (int i = 1; i < argc;) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            printf("%s%s%s\nengine:\n%s", plan_help, common_help, replay_flags_help, engine_flags_help);
            return EXIT_OK;
        }
        if (!strcmp(f, "--slo") || !strcmp(f, "--max-concurrency") || !strcmp(f, "--sessions") ||
            !strcmp(f, "--max-gpus")) {
            if (i + 1 >= argc)
                return bad("plan", "a flag needs a value");
            const char *v = argv[i + 1];
            i += 2;
            if (!strcmp(f, "--slo")) {
                n_slo = plan_slo_parse(v, slo, 8, err);
                if (n_slo < 0)
                    return bad("plan", err);
            } else {
                char *end;
                long x = strtol(v, &end, 10);
                if (*end || x < 1 || x > 1000000)
                    return bad("plan", "bad number");
                if (!strcmp(f, "--max-concurrency"))
                    max_conc = (int)x;
                else if (!strcmp(f, "--sessions"))
                    sessions = (int)x;
                else
                    max_gpus = (int)x;
            }
            continue;
        }
        int k = grid_flag(&g, argc, argv, &i, err);
        if (k == 0)
            k = common_flag(&co, argc, argv, &i, err);
        if (k < 0)
            return bad("plan", err);
        if (k == 0) {
            snprintf(err, sizeof err, "unknown flag '%s' (see --help)", argv[i]);
            return bad("plan", err);
        }
    }
    if (!n_slo)
        return bad("plan", "--slo is required (e.g. interactivity_p90=100,ttft_p90_ms=2000)");
    tp = co.base.ec.tp;
    if (!g.n_be) {
        g.be[0] = co.base.ec.backend;
        g.n_be = 1;
    }
    if (!g.n_layout) {
        g.tp[0] = co.base.ec.tp;
        g.rep[0] = co.base.ec.tp > 0 ? co.base.ec.gpus / co.base.ec.tp : 1;
        g.n_layout = 1;
    }
    if (co.out && results_prepare_dir(co.out, co.force, err))
        return bad("plan", err);
    struct ctx c = {0};
    char *cmd = join_argv(argc, argv);
    c.command = cmd;
    if (load_trace(&c, co.trace, &co.tro, err)) {
        free(cmd);
        return bad("plan", err);
    }
    install_signals();
    printf("plan: SLO");
    for (int k = 0; k < n_slo; k++)
        printf(" %s %s %g", slo[k].name, slo[k].at_least ? ">=" : "<=", slo[k].limit);
    printf("; %s %s, %.0f s per run\n", co.base.ec.model, co.base.ec.gpu,
           (double)co.base.rc.duration_ns / 1e9);
    int rc = EXIT_OK;
    if (!sessions) {
        for (int a = 0; a < g.n_layout && rc == EXIT_OK; a++)
            for (int b = 0; b < g.n_be && rc == EXIT_OK; b++) {
                struct plan_state ps = {.c = &c, .slo = slo, .n_slo = n_slo, .out = co.out};
                struct point p = co.base;
                p.ec.tp = g.tp[a];
                p.ec.gpus = g.tp[a] * g.rep[a];
                p.ec.backend = g.be[b];
                label_default(&p);
                int fail = 0;
                int best = plan_search(&ps, &p, max_conc, false, &fail, err);
                if (best < 0) {
                    rc = strstr(err, "interrupted") ? EXIT_FAIL : EXIT_BADINPUT;
                    fprintf(stderr, "agentreplay plan: %s\n", err);
                    break;
                }
                printf("%-32s %d GPUs: %d live sessions%s\n", p.label, p.ec.gpus, best,
                       fail ? "" : " (or more: not bracketed, raise --max-concurrency)");
                if (best)
                    plan_print_run(&ps, best, "c =");
                if (fail)
                    plan_print_run(&ps, fail, "c =");
            }
    } else {
        for (int b = 0; b < g.n_be && rc == EXIT_OK; b++) {
            struct plan_state ps = {.c = &c, .slo = slo, .n_slo = n_slo, .out = co.out};
            struct point p = co.base;
            p.ec.tp = tp;
            p.ec.backend = g.be[b];
            p.rc.concurrency = sessions;
            int fail = 0;
            int reps = plan_search(&ps, &p, max_gpus / (tp > 0 ? tp : 1), true, &fail, err);
            if (reps < 0) {
                rc = EXIT_BADINPUT;
                fprintf(stderr, "agentreplay plan: %s\n", err);
                break;
            }
            /* by replicas: `fail` is the first passing count, lo failing. */
            if (!reps)
                printf("%s TP%d: no GPU count up to %d sustains %d sessions\n",
                       engine_backend_name(g.be[b]), tp, max_gpus, sessions);
            else {
                printf("%s TP%d: fewest GPUs for %d live sessions: %d (%d replicas)\n",
                       engine_backend_name(g.be[b]), tp, sessions, reps * tp, reps);
                plan_print_run(&ps, reps, "replicas =");
                if (reps > 1)
                    plan_print_run(&ps, reps - 1, "replicas =");
            }
        }
    }
    trace_destroy(c.tr);
    free(cmd);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* demo: the main job */

static const char demo_help[] =
    "usage: agentreplay [demo [-o DIR] [--duration S] [-j N] [--trace PATH]]\n"
    "The main job: the sample trace on Kimi K3 / 16 x GB300, {auto,\n"
    "latency_specialized} x {TP16x1, TP8x2} x concurrency {1..64}, DSpark draft 7,\n"
    "beside the confounded published-style pair (8 GPUs standard vs 16 GPUs\n"
    "specialized). Writes results/demo/ and prints P90 interactivity, P90 TTFT\n"
    "and tokens/s per GPU.\n";

int replay_cmd_demo(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct common co;
    common_init(&co);
    co.base.rc.duration_ns = 960 * NS_PER_S;
    co.out = "results/demo";
    struct grid g = {0};
    /* `./agentreplay` with no arguments arrives here with argv[0] the binary. */
    for (int i = 1; i < argc && !strcmp(argv[0], "demo");) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(demo_help, stdout);
            return EXIT_OK;
        }
        int k = grid_flag(&g, argc, argv, &i, err);
        if (k == 0)
            k = common_flag(&co, argc, argv, &i, err);
        if (k < 0)
            return bad("demo", err);
        if (k == 0) {
            snprintf(err, sizeof err, "unknown flag '%s' (see --help)", argv[i]);
            return bad("demo", err);
        }
    }
    if (!g.n_conc) {
        int cs[] = {1, 2, 4, 8, 16, 32, 64};
        memcpy(g.conc, cs, sizeof cs);
        g.n_conc = 7;
    }
    if (!g.n_be) {
        g.be[0] = ENGINE_BACKEND_AUTO;
        g.be[1] = ENGINE_BACKEND_LATENCY_SPECIALIZED;
        g.n_be = 2;
    }
    if (!g.n_layout) {
        g.tp[0] = 16, g.rep[0] = 1;
        g.tp[1] = 8, g.rep[1] = 2;
        g.n_layout = 2;
    }
    bool own = !strcmp(co.out, "results/demo");
    if (results_prepare_dir(co.out, co.force || own, err))
        return bad("demo", err);
    struct ctx c = {0};
    char *cmd = join_argv(argc > 1 && !strcmp(argv[0], "demo") ? argc : 0, argv);
    if (strcmp(argv[0], "demo"))
        snprintf(cmd, 16, "agentreplay");
    c.command = cmd;
    int64_t t0 = wall_ns();
    if (load_trace(&c, co.trace, &co.tro, err)) {
        free(cmd);
        return bad("demo", err);
    }
    int n;
    struct point *grid = grid_points(&g, &co.base, co.out, &n, err);
    if (!grid) {
        trace_destroy(c.tr);
        free(cmd);
        return bad("demo", err);
    }
    /* The confounded published-style pair at concurrency 1. */
    struct point *pts = xcalloc((size_t)n + 2, sizeof *pts);
    memcpy(pts, grid, (size_t)n * sizeof *pts);
    free(grid);
    struct point *cf = &pts[n];
    cf[0] = co.base;
    cf[0].ec.gpus = 8, cf[0].ec.tp = 8, cf[0].ec.backend = ENGINE_BACKEND_AUTO;
    cf[1] = co.base;
    cf[1].ec.gpus = 16, cf[1].ec.tp = 16, cf[1].ec.backend = ENGINE_BACKEND_LATENCY_SPECIALIZED;
    snprintf(cf[0].label, sizeof cf[0].label, "8 GPUs TP8 standard (confounded)");
    snprintf(cf[1].label, sizeof cf[1].label, "16 GPUs TP16 specialized (confounded)");
    for (int k = 0; k < 2; k++) {
        cf[k].rc.concurrency = 1;
        char dn[256];
        dir_name(cf[k].label, 1, dn, sizeof dn);
        snprintf(cf[k].dir, sizeof cf[k].dir, "%s/confounded/%s", co.out, dn);
        if (results_prepare_dir(cf[k].dir, true, err)) {
            free(pts);
            trace_destroy(c.tr);
            free(cmd);
            return bad("demo", err);
        }
    }
    printf("agentreplay: the fair comparison on %s (%u sessions, %u calls)\n"
           "Kimi K3 on 16 x GB300, DSpark draft 7; {auto, latency_specialized} x {TP16x1, TP8x2}\n"
           "x concurrency 1..64, %.0f s of traffic per point; %d points in %d processes.\n",
           c.trace_path, c.tr->n_roots, c.tr->n_calls, (double)co.base.rc.duration_ns / 1e9, n + 2,
           co.jobs);
    fflush(stdout);
    install_signals();
    /* Longest points first, so the two workers finish together. */
    struct point *order = xcalloc((size_t)n + 2, sizeof *order);
    int k = 0;
    for (int cc = g.n_conc - 1; cc >= 0; cc--)
        for (int i = 0; i < n; i++)
            if (pts[i].rc.concurrency == g.conc[cc])
                order[k++] = pts[i];
    order[k++] = cf[0];
    order[k++] = cf[1];
    int failed = run_points(&c, order, k, co.jobs, false);
    free(order);
    int rc = EXIT_OK;
    printf("\nfair comparison (16 GPUs each; P90 interactivity = 1 / P90 TPOT):\n");
    results_table_header(stdout);
    if (write_sweep_csv(co.out, "sweep.csv", pts, n, true, err) ||
        write_sweep_csv(co.out, "confounded.csv", cf, 2, false, err)) {
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
#ifdef HAVE_FIDELITY
    {
        char path[1200];
        snprintf(path, sizeof path, "%s/breakdown.csv", co.out);
        if (breakdown_write_csv(path, 8, err))
            fprintf(stderr, "agentreplay: breakdown.csv: %s\n", err);
        snprintf(path, sizeof path, "%s/fidelity.csv", co.out);
        if (fidelity_write_csv(path, err))
            fprintf(stderr, "agentreplay: fidelity.csv: %s\n", err);
    }
#endif
#ifdef HAVE_PLOTS
    {
        struct plot_opts po;
        plot_opts_init(&po);
        po.svg = false;
        po.command = cmd;
        const char *dirs[1] = {co.out};
        int pr = plot_results(dirs, 1, co.out, &po, err);
        if (pr < 0 || pr == PLOT_UNRENDERED)
            fprintf(stderr, "agentreplay: plots: %s\n", err);
        else
            printf("\ncharts and report: %s/report.md\n", co.out);
    }
#endif
    if (failed) {
        fprintf(stderr, "agentreplay: %d worker(s) reported failures%s\n", failed,
                g_interrupt ? " (interrupted)" : "");
        rc = EXIT_FAIL;
    }
    printf("results: %s/ (sweep.csv, confounded.csv, breakdown.csv, fidelity.csv)  %.1f s\n", co.out,
           (double)(wall_ns() - t0) / 1e9);
    free(pts);
    trace_destroy(c.tr);
    free(cmd);
    return rc;
}
