/* run.c: replaying one configuration into a folder, its signals, progress
 * and the flags every replaying command shares (run.h). */
#define _GNU_SOURCE
#include "replay/run.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/limits.h"
#include "traces/base/parse.h"
#include "traces/base/time_ns.h"

/* ---- signals ------------------------------------------------------------ */

/* Signals since install, and a self-pipe each one writes a byte into (the
 * real clock watches its read end; the virtual one polls the count). */
static volatile sig_atomic_t g_signals;
static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    g_signals++;
    if (g_sig_pipe[1] >= 0) {
        char b = (char)sig;
        int saved = errno;
        ssize_t w = write(g_sig_pipe[1], &b, 1);
        (void)w;
        errno = saved;
    }
}

void run_signals_install(void)
{
    if (g_sig_pipe[0] < 0 && pipe2(g_sig_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
        g_sig_pipe[0] = g_sig_pipe[1] = -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool run_interrupted(void) { return g_signals > 0; }

int run_signals_fd(void) { return g_sig_pipe[0]; }

/* ---- the shared flags --------------------------------------------------- */

static int parse_format(const char *name, const char *v, void *group, char *err)
{
    struct trace_read_opts *o = group;
    if (trace_format_parse(v, &o->format))
        return err_set(err, "%s '%s': expected auto, agentx, mooncake, azure, burstgpt or native",
                       name, v);
    return 0;
}

static int parse_slo(const char *name, const char *v, void *group, char *err)
{
    struct run_opts *o = group;
    char e2[ERR_LEN];
    if (metrics_slo_parse(v, &o->slo, e2))
        return err_set(err, "%s '%s': %s", name, v, e2);
    return 0;
}

#define TR struct trace_read_opts
const struct flag trace_read_flags[] = {
    {"--format", 0, FLAG_CUSTOM, FLAG_AT(TR, format), "FMT",
     "agentx, mooncake, azure, burstgpt, native", .def = "auto, by content",
     .parse = parse_format, .example = "agentx"},
    {"--skip-bad", 0, FLAG_BOOL, FLAG_AT(TR, skip_bad), NULL, "skip bad trace records (counted)",
     .value = true},
    FLAG_END,
};
#undef TR

#define RO struct run_opts
const struct flag run_flags[] = {
    {"--trace", 0, FLAG_STR, FLAG_AT(RO, trace), "PATH",
     "trace file or folder (sim, sweep, plan, demo:\nthe built-in sample when not given)",
     .def = NULL},
    {"--slo", 0, FLAG_CUSTOM, FLAG_AT(RO, slo), "TERM=V,...",
     "objectives: ttft=MS,tpot=MS,e2el=MS per request\n(goodput); interactivity_pXX=TOK_S,\n"
     "ttft_pXX_ms=MS, tpot_pXX_ms, e2el_pXX_ms on the\nrun's percentiles (plan); XX: 50 75 90 95 99",
     .parse = parse_slo, .example = "ttft=500,tpot=50"},
    {"--out", 'o', FLAG_STR, FLAG_AT(RO, out), "DIR", "the result folder", .max_len = 900},
    {"--force", 0, FLAG_BOOL, FLAG_AT(RO, force), NULL, "write into an existing result folder",
     .value = true},
    {"--quiet", 0, FLAG_BOOL, FLAG_AT(RO, quiet), NULL, "no table, no progress lines",
     .value = true},
    FLAG_END,
};
#undef RO

static int read_progress_cb(void *arg, const struct trace_read_progress *p)
{
    struct run_read_progress *rp = arg;
    if (run_interrupted()) {
        rp->stopped = true;
        return 1;
    }
    bool big = p->files_total >= LIMIT_PROGRESS_FILES || p->bytes >= 64 * (uint64_t)LIMIT_MIB;
    int64_t now = wall_ns();
    if (!rp->tty || !big || (rp->shown && now - rp->last_ns < 100 * NS_PER_MS))
        return 0;
    rp->last_ns = now;
    rp->shown = true;
    if (p->files_total > 1)
        fprintf(stderr, "\rreading traces: %zu of %zu files ", p->files_done, p->files_total);
    else
        fprintf(stderr, "\rreading the trace: %.0f MiB ", (double)p->bytes / (double)LIMIT_MIB);
    return 0;
}

void run_read_progress_attach(struct run_read_progress *rp, struct trace_read_opts *o)
{
    memset(rp, 0, sizeof *rp);
    rp->tty = isatty(2) == 1;
    o->progress = read_progress_cb;
    o->progress_arg = rp;
}

bool run_read_progress_end(struct run_read_progress *rp)
{
    if (rp->shown)
        fprintf(stderr, "\r%*s\r", 60, "");
    rp->shown = false;
    return rp->stopped;
}

int run_trace_load(struct run_trace *t, const char *path, const struct trace_read_opts *o,
                   char *err)
{
    char buf[1024];
    memset(t, 0, sizeof *t);
    if (!path) {
        if (file_data_path("traces/samples/agentic-synth.jsonl", buf, sizeof buf)) {
            err_set(err, "the built-in sample trace (traces/samples/agentic-synth.jsonl) "
                         "was not found; give --trace");
            return EXIT_BADINPUT;
        }
        path = buf;
    }
    snprintf(t->path, sizeof t->path, "%s", path);
    struct trace_read_opts ro = *o;
    struct run_read_progress rp;
    run_read_progress_attach(&rp, &ro);
    t->tr = trace_read(path, &ro, err);
    bool stopped = run_read_progress_end(&rp);
    if (t->tr && stopped)
        fprintf(stderr, "agentreplay: interrupted while reading %s: replaying none of it\n", path);
    if (!t->tr || !t->tr->n_calls) {
        if (t->tr)
            err_set(err, "%s: the trace has no calls", path);
        run_trace_free(t);
        if (stopped) {
            err_set(err, "interrupted while reading %s", path);
            return EXIT_FAIL;
        }
        return EXIT_BADINPUT;
    }
    if (t->tr->skipped_records)
        fprintf(stderr, "agentreplay: %s: skipped %llu bad records (--skip-bad)\n", path,
                (unsigned long long)t->tr->skipped_records);
    struct trace_stats st;
    t->hit_theoretical = NAN; /* an interrupted run does not wait for it */
    if (!stopped) {
        trace_stats_compute(t->tr, &st);
        t->hit_theoretical = st.hit_rate_tokens;
    }
    return 0;
}

void run_trace_free(struct run_trace *t)
{
    trace_destroy(t->tr);
    t->tr = NULL;
}

/* ---- one run ------------------------------------------------------------ */

#define RECORDS_FLUSH_NS (100 * NS_PER_MS)

struct run {
    const struct run_spec *s;
    struct replay *r;
    struct records_writer *w;
    FILE *tl;
    bool tl_borrowed;            /* s->timeline_to */
    char flush_err[ERR_LEN];     /* the first failed periodic flush */
    struct loop_timer flush_timer, grace_timer, drain_timer;
    struct loop_io sig_io;
    bool watching;               /* sig_io started (a real clock) */
    int interrupts;
    /* progress */
    int64_t wall0, last_wall, last_line_ns;
    bool shown;
};

static void flush_records(struct run *run)
{
    char err[ERR_LEN];
    if (run->w && records_flush(run->w, err) && !run->flush_err[0])
        snprintf(run->flush_err, sizeof run->flush_err, "%s", err);
}

static void flush_cb(struct loop *l, struct loop_timer *t)
{
    struct run *run = t->arg;
    flush_records(run);
    if (!replay_finished(run->r))
        loop_at(l, t, loop_now(l) + RECORDS_FLUSH_NS, flush_cb, run);
}

static void stop_now(struct run *run)
{
    loop_cancel(run->s->loop, &run->drain_timer);
    loop_cancel(run->s->loop, &run->grace_timer);
    replay_interrupt(run->r);
}

static void interrupt_now(struct loop *l, struct loop_timer *t) { stop_now(t->arg); }

/* During the grace period: interrupt as soon as nothing sent is in flight. */
static void drain_check(struct loop *l, struct loop_timer *t)
{
    struct run *run = t->arg;
    if (run->s->inflight(run->s->tg) == 0) {
        stop_now(run);
        return;
    }
    loop_at(l, t, loop_now(l) + 20 * NS_PER_MS, drain_check, run);
}

static void sig_cb(struct loop *l, struct loop_io *io, int revents)
{
    struct run *run = io->arg;
    const struct run_spec *s = run->s;
    char b[16];
    ssize_t n = read(io->fd, b, sizeof b);
    if (n <= 0)
        return;
    flush_records(run);
    run->interrupts += (int)n;
    if (replay_finished(run->r))
        return;
    bool term = memchr(b, SIGTERM, (size_t)n) != NULL;
    if (run->interrupts == (int)n && s->hold && s->inflight && !term) {
        /* The first Ctrl-C: the calls in flight get the grace period (a
         * bounded one for --grace none: limits.h); SIGTERM or a second
         * signal: at once. */
        int64_t grace = s->rc->grace_ns < 0 ? LIMIT_LIVE_GRACE_NS : s->rc->grace_ns;
        char g[32];
        parse_duration_format(grace, g, sizeof g);
        fprintf(stderr, "%s: interrupted: no new calls; waiting up to %s for %lld in flight "
                        "(Ctrl-C again or SIGTERM to stop now)\n",
                s->kind, g, (long long)s->inflight(s->tg));
        s->hold(s->tg);
        loop_at(l, &run->grace_timer, loop_now(l) + grace, interrupt_now, run);
        loop_at(l, &run->drain_timer, loop_now(l), drain_check, run);
    } else {
        stop_now(run);
    }
}

static void on_tick(void *arg, struct replay *r, int64_t now)
{
    struct run *run = arg;
    const struct run_spec *s = run->s;
    if (!run->watching && run_interrupted())
        replay_interrupt(r);
    if (s->progress == RUN_PROGRESS_LINES) {
        if (now - run->last_line_ns < 10 * NS_PER_S)
            return;
        run->last_line_ns = now;
        const struct metrics *m = replay_metrics(r);
        fprintf(stderr, "%s: %5.0f s  %llu calls done, %llu errors, %lld in flight\n", s->kind,
                (double)now / 1e9, (unsigned long long)m->records, (unsigned long long)m->errors,
                (long long)(s->inflight ? s->inflight(s->tg) : -1));
        return;
    }
    if (s->progress != RUN_PROGRESS_BAR)
        return;
    int64_t wall = wall_ns() - run->wall0;
    if (run->shown && wall - run->last_wall < 100 * NS_PER_MS)
        return;
    run->last_wall = wall;
    int64_t end = s->rc->duration_ns;
    double frac = end > 0 ? (double)now / (double)end : 0;
    if (frac > 1)
        frac = 1;
    int w = 30, k = (int)(frac * w);
    char bar[40];
    for (int i = 0; i < w; i++)
        bar[i] = i < k ? '#' : '.';
    bar[w] = 0;
    double eta = frac > 0 ? (double)wall / 1e9 * (1 - frac) / frac : 0;
    fprintf(stderr, "\r[%s] %s %6.0f/%.0f s  wall %5.1f s  ETA %5.1f s ", bar, s->kind,
            (double)now / 1e9, (double)end / 1e9, (double)wall / 1e9, eta);
    run->shown = true;
}

/* Opens requests.jsonl and timeline.csv in s->dir, or takes the streams
 * that replace them. */
static int open_outputs(struct run *run, char *err)
{
    const struct run_spec *s = run->s;
    char path[1200];
    if (s->records_to) {
        run->w = records_from_stream(s->records_to, s->rc->chunk_times);
    } else {
        snprintf(path, sizeof path, "%s/requests.jsonl", s->dir);
        run->w = records_open(path, s->rc->chunk_times, err);
        if (!run->w)
            return -1;
    }
    if (s->records_buffer)
        records_set_buffered(run->w, s->records_buffer);
    if (s->observe)
        records_set_observer(run->w, s->observe, s->observe_arg);
    if (s->timeline_to) {
        run->tl = s->timeline_to;
        run->tl_borrowed = true;
        return 0;
    }
    snprintf(path, sizeof path, "%s/timeline.csv", s->dir);
    run->tl = fopen(path, "w");
    if (!run->tl)
        return err_set(err, "%s: %s", path, strerror(errno));
    return 0;
}

/* Closes the outputs; an error marks the result partial. */
static int close_outputs(struct run *run, struct replay_outcome *o, char *err)
{
    int rc = 0;
    if (run->flush_err[0]) {
        err_set(err, "%s", run->flush_err);
        rc = -1;
    }
    char e2[ERR_LEN];
    if (run->w && records_close(run->w, e2)) {
        if (!rc)
            err_set(err, "%s", e2);
        rc = -1;
    }
    run->w = NULL;
    if (run->tl && (run->tl_borrowed ? fflush(run->tl) : fclose(run->tl))) {
        if (!rc)
            err_set(err, "timeline.csv: %s", strerror(errno));
        rc = -1;
    }
    run->tl = NULL;
    if (rc)
        o->partial = true;
    return rc;
}

static void watch_signals(struct run *run)
{
    int fd = run_signals_fd();
    if (fd < 0)
        return;
    run->sig_io = (struct loop_io){.fd = fd, .events = LOOP_READ, .cb = sig_cb, .arg = run};
    run->watching = loop_io_start(run->s->loop, &run->sig_io) == 0;
}

/* ---- inputs that can only fail ----------------------------------------- */

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* The target's figure at describe_json's "scheduler".key, or -1. */
static int64_t target_sched_int(struct target *tg, const char *key)
{
    json_t *d = tg->ops->describe_json ? tg->ops->describe_json(tg) : NULL;
    json_t *v = json_object_get(json_object_get(d, "scheduler"), key);
    int64_t x = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
    json_decref(d);
    return x;
}

/* Refuses, before anything runs, a configuration under which every call
 * (or every call of some sessions) can only fail, which would otherwise
 * make a run of errors at no virtual time: an engine block size that does
 * not divide the trace's, a context limit below every call, an open-loop
 * rate or a number of offered calls beyond limits.h. 0, or -1 with a
 * message naming the flag and the trace. */
static int check_inputs(const struct run_trace *rt, const struct replay_config *rc,
                        struct target *tg, char *err)
{
    const struct trace *tr = rt->tr;
    double each = LIMIT_WAITING_CALL_BYTES +
                  8.0 * (double)tr->total_block_ids / (tr->n_calls ? tr->n_calls : 1);
    char lim[32];
    file_size_format((int64_t)LIMIT_WAITING_BYTES, lim, sizeof lim);
    if (rc->mode == REPLAY_MODE_POISSON || rc->mode == REPLAY_MODE_GAMMA) {
        double offered = rc->rate * ((double)rc->duration_ns / 1e9);
        if (rc->rate > LIMIT_ARRIVAL_RATE)
            return err_set(err, "--arrival: %g calls/s is more than the %g calls/s an open-loop "
                                "run may offer", rc->rate, LIMIT_ARRIVAL_RATE);
        if (offered * each > LIMIT_WAITING_BYTES)
            return err_set(err, "--arrival %g calls/s over --duration %.0f s offers %.3g calls of "
                                "%s; waiting at about %.1f KB each they could take more than the "
                                "%s a run may hold: lower the rate or the duration",
                           rc->rate, (double)rc->duration_ns / 1e9, offered, rt->path, each / 1024,
                           lim);
    } else if (rc->concurrency * each > LIMIT_WAITING_BYTES) {
        return err_set(err, "--concurrency %d: calls of %s waiting at about %.1f KB each could "
                            "take more than the %s a run may hold", rc->concurrency, rt->path,
                       each / 1024, lim);
    }
    /* The engine's block size must divide the block size of every chain it
     * is given (engine.h): the gcd of the trace's says which do. */
    int64_t bs = target_sched_int(tg, "block_size"), g = 0;
    uint32_t g_session = TRACE_NONE;
    int64_t shortest = INT64_MAX; /* prompt + max_tokens of the shortest call */
    for (uint32_t i = 0; i < tr->n_calls; i++) {
        const struct trace_call *c = &tr->calls[i];
        int64_t need = c->prompt_tokens + (c->output_tokens > 0 ? c->output_tokens : 1);
        if (need < shortest)
            shortest = need;
        if (bs > 0 && c->n_blocks) {
            int64_t tbs = tr->sessions[c->session].block_size > 0
                              ? tr->sessions[c->session].block_size : 64;
            int64_t ng = gcd64(g, tbs);
            if (ng % bs && g_session == TRACE_NONE)
                g_session = c->session;
            g = ng;
        }
    }
    if (bs > 0 && g > 0 && g % bs) {
        const struct trace_session *ss = &tr->sessions[g_session];
        const char *name = trace_str(tr, ss->name);
        return err_set(err, "--block-size %lld does not divide the block size %lld of trace %s "
                            "(session %s): every call of it would fail; give --block-size %lld "
                            "or a divisor of it",
                       (long long)bs, (long long)ss->block_size, rt->path, name ? name : "?",
                       (long long)g);
    }
    int64_t mml = rc->max_model_len > 0 ? rc->max_model_len : target_sched_int(tg, "max_model_len");
    if (mml > 0 && shortest > mml && shortest != INT64_MAX)
        return err_set(err, "--max-model-len %lld is shorter than every call of %s (the shortest "
                            "needs %lld tokens: prompt + output): every call would overflow",
                       (long long)mml, rt->path, (long long)shortest);
    return 0;
}

int run_replay(const struct run_spec *s, struct run_result *res, void **run_json, char *err)
{
    *run_json = NULL;
    memset(res, 0, sizeof *res);
    struct run run = {.s = s, .wall0 = wall_ns()};
    bool files = s->dir && s->dir[0];
    ASSERT(!s->records_to == !s->timeline_to);
    /* A live target's --grace none still ends (limits.h). */
    struct replay_config rcfg = *s->rc;
    if (s->hold && rcfg.grace_ns < 0)
        rcfg.grace_ns = LIMIT_LIVE_GRACE_NS;
    run.r = check_inputs(s->trace, &rcfg, s->tg, err)
                ? NULL
                : replay_create(&rcfg, s->trace->tr, s->tg, s->loop, err);
    if (!run.r) {
        json_decref(s->info.config_json);
        return EXIT_BADINPUT;
    }
    if ((files || s->records_to) && open_outputs(&run, err)) {
        records_close(run.w, NULL);
        replay_destroy(run.r);
        json_decref(s->info.config_json);
        return EXIT_FAIL;
    }
    replay_set_outputs(run.r, run.w, run.tl);
    replay_set_tick(run.r, on_tick, &run);
    if (run.w && s->records_buffer)
        loop_at(s->loop, &run.flush_timer, loop_now(s->loop) + RECORDS_FLUSH_NS, flush_cb, &run);
    watch_signals(&run);
    if (s->started)
        s->started(s->hook_arg, run.r);
    int rc = EXIT_OK;
    if (replay_start(run.r)) {
        err_set(err, "the replay did not start");
        rc = EXIT_FAIL;
    }
    while (rc == EXIT_OK && !replay_finished(run.r)) {
        loop_run(s->loop);
        if (!replay_finished(run.r) && !s->loop->stopped)
            break; /* nothing left to wait for */
    }
    if (s->stopped)
        s->stopped(s->hook_arg);
    loop_cancel(s->loop, &run.flush_timer);
    loop_cancel(s->loop, &run.grace_timer);
    loop_cancel(s->loop, &run.drain_timer);
    if (run.watching)
        loop_io_stop(s->loop, &run.sig_io);
    if (run.shown)
        fprintf(stderr, "\r%*s\r", 90, "");

    replay_summarize(run.r, s->slo, &res->sum, &res->out);
    res->sum.prefix_hit_rate_theoretical = s->trace->hit_theoretical;
    res->interrupts = run.interrupts;
    if (close_outputs(&run, &res->out, err))
        rc = EXIT_FAIL;
    if (res->out.io_error[0] && rc == EXIT_OK) {
        /* Records lost to a failed write: the result is partial (run.json
         * says so) and the run failed. */
        err_set(err, "%s", res->out.io_error);
        rc = EXIT_FAIL;
    }
    if (s->summarized)
        s->summarized(s->hook_arg, res);

    struct run_info ri = s->info;
    ri.kind = s->kind;
    ri.trace_path = s->trace->path;
    ri.trace_format = trace_format_name(s->trace->tr->format);
    ri.trace_digest = s->trace->tr->digest;
    ri.trace_sessions = s->trace->tr->n_sessions;
    ri.trace_calls = s->trace->tr->n_calls;
    ri.engine_json = s->tg->ops->describe_json ? s->tg->ops->describe_json(s->tg) : NULL;
    json_t *run_j = results_run_json(&ri, &res->sum, &res->out, NULL);
    if (s->extend)
        s->extend(s->hook_arg, run_j, res);
    replay_destroy(run.r);
    char e2[ERR_LEN];
    if (files && (results_write_json(s->dir, "run.json", run_j, e2) ||
                  results_write_summary(s->dir, &ri, &res->sum, &res->out, e2))) {
        if (rc == EXIT_OK)
            err_set(err, "%s", e2);
        rc = EXIT_FAIL;
    }
    if (res->out.aborted[0] && rc == EXIT_OK) {
        err_set(err, "%s (partial results written)", res->out.aborted);
        rc = EXIT_FAIL;
    }
    if (res->out.interrupted && rc == EXIT_OK) {
        err_set(err, "interrupted: partial results written");
        rc = EXIT_FAIL;
    }
    *run_json = run_j;
    return rc;
}

/* ---- one simulated configuration ---------------------------------------- */

static int parse_target(const char *name, const char *v, void *group, char *err)
{
    struct run_point *p = group;
    if (!strcmp(v, "fake"))
        p->fake = true;
    else if (!strcmp(v, "engine"))
        p->fake = false;
    else
        return err_set(err, "%s '%s': expected engine or fake", name, v);
    return 0;
}

#define RP struct run_point
const struct flag run_point_flags[] = {
    {"--label", 0, FLAG_BUF, FLAG_AT(RP, label), "TEXT", "the configuration's name in results",
     .def = "the layout's, e.g. TP16x1 auto"},
    {"--target", 0, FLAG_CUSTOM, FLAG_AT(RP, fake), "engine|fake",
     "the simulated engine, or a fixed-rate fake", .def = "engine", .parse = parse_target,
     .example = "fake"},
    FLAG_END,
};
#undef RP

void run_point_init(struct run_point *p)
{
    memset(p, 0, sizeof *p);
    engine_config_defaults(&p->ec);
    replay_config_defaults(&p->rc);
    p->fc = (struct target_fake_config){.overhead_ns = 20 * NS_PER_MS,
                                        .prefill_ns_per_token = 20000,
                                        .tpot_ns = 10 * NS_PER_MS,
                                        .chunk_tokens = 1,
                                        .gpus = 16,
                                        .cache = true};
}

void run_point_label(struct run_point *p)
{
    if (p->fake) {
        snprintf(p->label, sizeof p->label, "fake target");
        return;
    }
    snprintf(p->label, sizeof p->label, "TP%dx%d %s", p->ec.tp,
             p->ec.tp > 0 ? p->ec.gpus / p->ec.tp : 0,
             p->ec.backend == ENGINE_BACKEND_LATENCY_SPECIALIZED ? "latency_specialized" : "auto");
}

void run_point_dirname(const char *label, int concurrency, char *out, size_t n)
{
    snprintf(out, n, "%s-c%d", label, concurrency);
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

/* The engine as the point runs it: the replay's seed and context limit. */
static void point_engine(const struct run_point *p, struct engine_config *ec)
{
    *ec = p->ec;
    ec->seed = p->rc.seed;
    if (p->rc.max_model_len > 0)
        ec->max_model_len = p->rc.max_model_len;
}

static struct target *point_target(const struct run_point *p, const struct engine_config *ec,
                                   struct loop *l, char *err)
{
    return p->fake ? target_fake_create(&p->fc, l) : target_engine_create(ec, l, err);
}

int run_point_check(const struct run_env *env, const struct run_point *p, char *err)
{
    struct engine_config ec;
    point_engine(p, &ec);
    struct loop *l = loop_virtual_create();
    struct target *tg = point_target(p, &ec, l, err);
    struct replay *r = tg && !check_inputs(env->trace, &p->rc, tg, err)
                           ? replay_create(&p->rc, env->trace->tr, tg, l, err)
                           : NULL;
    int rc = r ? EXIT_OK : EXIT_BADINPUT;
    replay_destroy(r);
    target_destroy(tg);
    loop_destroy(l);
    return rc;
}

int run_point_exec(const struct run_env *env, const struct run_point *p, void **run_json,
                   char *err)
{
    *run_json = NULL;
    struct engine_config ec;
    point_engine(p, &ec);
    struct loop *l = loop_virtual_create();
    struct target *tg = point_target(p, &ec, l, err);
    if (!tg) {
        loop_destroy(l);
        return EXIT_BADINPUT;
    }
    struct engine *e = env->chrome_trace && !p->fake && p->dir[0] ? target_engine_get(tg) : NULL;
    if (e && engine_trace_open(e, env->chrome_trace, env->chrome_kernel_step, err)) {
        target_destroy(tg);
        loop_destroy(l);
        return EXIT_BADINPUT;
    }
    json_t *cfg = json_object();
    json_object_set_new(cfg, "target", json_string(p->fake ? "fake" : "engine"));
    struct replay_config fit = p->rc;
    replay_config_fit(&fit, env->trace->tr);
    json_object_set_new(cfg, "replay", replay_config_json(&fit));
    json_object_set_new(cfg, "engine", engine_config_json(&ec));
    json_object_set_new(cfg, "chunk_times", json_boolean(p->rc.chunk_times));
    struct run_spec s = {
        .kind = "sim",
        .trace = env->trace,
        .rc = &p->rc,
        .slo = &p->slo,
        .dir = p->dir,
        .loop = l,
        .tg = tg,
        .progress = env->progress ? RUN_PROGRESS_BAR : RUN_PROGRESS_NONE,
    };
    struct run_info *ri = &s.info;
    ri->command = env->command;
    ri->label = p->label;
    ri->gpus = p->fake ? p->fc.gpus : ec.gpus;
    ri->tp = p->fake ? p->fc.gpus : ec.tp;
    ri->replicas = ri->tp > 0 ? ri->gpus / ri->tp : 0;
    ri->backend = p->fake ? "fake" : engine_backend_name(ec.backend);
    ri->model = ec.model;
    ri->gpu = ec.gpu;
    ri->seed = p->rc.seed;
    ri->concurrency = p->rc.concurrency;
    ri->duration_s = (double)p->rc.duration_ns / 1e9;
    ri->spec = ec.spec && !p->fake;
    ri->spec_method = "dspark";
    ri->spec_draft = ec.draft;
    ri->spec_acceptance = ec.acceptance[0] ? ec.acceptance : "curve";
    ri->config_json = cfg;
    struct run_result res;
    int rc = run_replay(&s, &res, run_json, err);
    if (e && engine_trace_close(e)) {
        /* A Chrome trace cut short by a full disk is not a result. */
        if (rc == EXIT_OK)
            err_set(err, "--chrome-trace %s: %s", env->chrome_trace, strerror(errno));
        rc = rc == EXIT_BADINPUT ? rc : EXIT_FAIL;
    }
    target_destroy(tg);
    loop_destroy(l);
    return rc;
}
