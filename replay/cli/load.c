/* load_cmd.c: `agentreplay load`: the replayer (replay.h) driving a live
 * OpenAI-compatible endpoint (http_target.h) on the real clock (libev),
 * with the same records, metrics and run.json as `sim`, plus what only a
 * live run has:
 *   - schedule lag (actual send - intended send) at P50 / P99 / max; a run
 *     whose lag P99 exceeds --lag-threshold-ms is marked degraded (the
 *     generator, not the server, was the bottleneck);
 *   - the server's usage counts (prompt, completion, cached prompt tokens)
 *     beside ours, and the achieved prefix-cache hit rate from them;
 *   - --metrics-url: the target's Prometheus metrics scraped every tick into
 *     metrics_timeline.jsonl;
 *   - Ctrl-C (SIGINT) stops sending, waits up to --grace for the calls in
 *     flight, then cancels the rest, writes everything and marks the result
 *     interrupted (a second Ctrl-C cancels at once).
 * Output folder: run.json, requests.jsonl, timeline.csv and, with
 * --metrics-url, metrics_timeline.jsonl.
 *
 * requests.jsonl is buffered (64 KiB) and flushed every 100 ms, on each
 * signal and at the end, instead of once per call: one write(2) per call
 * was a tenth of the generator's CPU per call at thousands of calls a
 * second. A run killed outright (SIGKILL) loses at most the last 100 ms of
 * records; Ctrl-C and SIGTERM lose nothing. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "replay/cli/cli.h"
#include "replay/http_target.h"
#include "replay/metrics.h"
#include "replay/records.h"
#include "replay/results.h"
#include "replay/replay.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/time_ns.h"
#include "traces/base/parse.h"

struct load {
    struct loop *loop;
    struct target *tg;
    struct replay *rp;
    struct replay_config rcfg;
    int sig_pipe[2];
    struct loop_io sig_io;
    int interrupts;
    struct loop_timer grace_timer, drain_timer, scrape_timer, flush_timer;
    struct records_writer *rw;
    char flush_err[ERR_LEN]; /* the first failed periodic flush */
    int64_t grace_ns;
    char metrics_url[600];
    FILE *mtl;               /* metrics_timeline.jsonl */
    uint64_t scrapes, scrape_errors;
    int scrape_busy;
    int64_t last_progress_ns;
    int quiet;
};

static int g_sig_fd = -1;
static volatile sig_atomic_t g_early_sigs; /* signals before the loop ran */
static void on_signal(int sig)
{
    if (g_sig_fd >= 0) {
        char b = (char)sig;
        ssize_t w = write(g_sig_fd, &b, 1);
        (void)w;
    } else {
        g_early_sigs++;
    }
}

static void catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void interrupt_now(struct loop *l, struct loop_timer *t)
{
    struct load *ld = t->arg;
    loop_cancel(l, &ld->drain_timer);
    loop_cancel(l, &ld->grace_timer);
    replay_interrupt(ld->rp);
}

/* During the grace period: interrupt as soon as nothing sent is in flight. */
static void drain_check(struct loop *l, struct loop_timer *t)
{
    struct load *ld = t->arg;
    if (http_target_inflight(ld->tg) == 0) {
        interrupt_now(l, t);
        return;
    }
    loop_at(l, t, loop_now(l) + 20 * NS_PER_MS, drain_check, ld);
}

#define RECORDS_FLUSH_NS (100 * NS_PER_MS)
#define RECORDS_BUFFER (64 * 1024)

static void flush_records(struct load *ld)
{
    char err[ERR_LEN];
    if (records_flush(ld->rw, err) && !ld->flush_err[0])
        snprintf(ld->flush_err, sizeof ld->flush_err, "%s", err);
}

static void flush_cb(struct loop *l, struct loop_timer *t)
{
    struct load *ld = t->arg;
    flush_records(ld);
    if (!replay_finished(ld->rp))
        loop_at(l, t, loop_now(l) + RECORDS_FLUSH_NS, flush_cb, ld);
}

static void sig_cb(struct loop *l, struct loop_io *io, int revents)
{
    struct load *ld = io->arg;
    char b[16];
    ssize_t n = read(io->fd, b, sizeof b);
    if (n <= 0)
        return;
    flush_records(ld);
    ld->interrupts += (int)n;
    if (replay_finished(ld->rp))
        return;
    if (ld->interrupts == (int)n) {
        fprintf(stderr, "load: interrupted: no new calls; waiting %s for %lld in flight (Ctrl-C again to stop now)\n",
                ld->grace_ns < 0 ? "without limit" : "up to the grace period",
                (long long)http_target_inflight(ld->tg));
        http_target_hold(ld->tg);
        if (ld->grace_ns >= 0)
            loop_at(l, &ld->grace_timer, loop_now(l) + ld->grace_ns, interrupt_now, ld);
        loop_at(l, &ld->drain_timer, loop_now(l), drain_check, ld);
    } else {
        interrupt_now(l, &ld->grace_timer);
    }
}

/* ---- Prometheus scraping ---- */

static void scrape_done(void *arg, int status, const char *body, size_t len)
{
    struct load *ld = arg;
    ld->scrape_busy = 0;
    if (status != 200) {
        ld->scrape_errors++;
        return;
    }
    ld->scrapes++;
    json_t *samples = json_object();
    const char *p = body, *end = body + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p && *p != '#') {
            /* name{labels} value [timestamp] */
            const char *q = p;
            int depth = 0;
            while (q < le && (depth || (*q != ' ' && *q != '\t'))) {
                if (*q == '{')
                    depth++;
                else if (*q == '}')
                    depth--;
                q++;
            }
            if (q < le) {
                char num[64];
                size_t k = (size_t)(le - q - 1) < sizeof num - 1 ? (size_t)(le - q - 1) : sizeof num - 1;
                memcpy(num, q + 1, k);
                num[k] = 0;
                char *e;
                double v = strtod(num, &e);
                if (e != num && isfinite(v)) {
                    char name[256];
                    size_t nl2 = (size_t)(q - p) < sizeof name - 1 ? (size_t)(q - p) : sizeof name - 1;
                    memcpy(name, p, nl2);
                    name[nl2] = 0;
                    json_object_set_new(samples, name, json_real(v));
                }
            }
        }
        p = le + 1;
    }
    json_t *line = json_pack("{s:f,s:o}", "t_s", (double)loop_now(ld->loop) / 1e9, "samples", samples);
    char *s = json_dumps(line, JSON_COMPACT);
    if (ld->mtl && s) {
        fprintf(ld->mtl, "%s\n", s);
        fflush(ld->mtl);
    }
    free(s);
    json_decref(line);
}

static void scrape_cb(struct loop *l, struct loop_timer *t)
{
    struct load *ld = t->arg;
    if (replay_finished(ld->rp))
        return;
    if (!ld->scrape_busy && http_target_get(ld->tg, ld->metrics_url, scrape_done, ld) == 0)
        ld->scrape_busy = 1;
    loop_at(l, t, loop_now(l) + ld->rcfg.tick_ns, scrape_cb, ld);
}

static void tick_cb(void *arg, struct replay *r, int64_t now)
{
    struct load *ld = arg;
    if (ld->quiet || now - ld->last_progress_ns < 10 * NS_PER_S)
        return;
    ld->last_progress_ns = now;
    const struct metrics *m = replay_metrics(r);
    fprintf(stderr, "load: %5.0f s  %llu calls done, %llu errors, %lld in flight\n", (double)now / 1e9,
            (unsigned long long)m->records, (unsigned long long)m->errors,
            (long long)http_target_inflight(ld->tg));
}

/* ---- schedule lag and cache figures from the records ---- */

struct lagstat {
    struct dvec lags;        /* lag of each record, ms */
    struct metrics_stat lag_ms;
    double lag_max_ms;
    int64_t prompt_with_cache, cached;
    uint64_t records, with_usage, usage_output_mismatch;
};

/* Gathered from each record as it is written (records_set_observer):
 * the same figures as reading requests.jsonl back, without parsing it. */
static void observe_record(void *arg, const struct replay_record *r)
{
    struct lagstat *ls = arg;
    ls->records++;
    double lag = (double)(r->start_ns - r->intended_start_ns) / 1e6;
    dvec_push(&ls->lags, lag);
    if (lag > ls->lag_max_ms)
        ls->lag_max_ms = lag;
    if (r->cached_tokens >= 0) {
        ls->cached += r->cached_tokens;
        ls->prompt_with_cache += r->prompt_tokens;
    }
    if (r->live && r->server_output_tokens >= 0) {
        ls->with_usage++;
        if (r->server_output_tokens != r->output_tokens)
            ls->usage_output_mismatch++;
    }
}

/* ---- the command ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: agentreplay load --url URL --trace PATH -o DIR [options] [replay flags]\n"
            "Replays a trace against a live OpenAI-compatible endpoint in real time.\n"
            "  --url URL               base URL (http:// or https://), e.g. http://127.0.0.1:8000\n"
            "  --trace PATH            trace file or folder\n"
            "  -o, --out DIR           output folder (run.json, requests.jsonl, timeline.csv)\n"
            "  --endpoint chat|completions          [chat]\n"
            "  --prompt-mode text|tokens            tokens: ids on /v1/completions [text]\n"
            "  --model NAME            model sent (default: the server's first /v1/models)\n"
            "  --api-key K             Authorization: Bearer K (or $OPENAI_API_KEY)\n"
            "  --connect-timeout S     [10]\n"
            "  --read-timeout S        longest silence within a call [600]\n"
            "  --lag-threshold-ms MS   schedule-lag P99 above it marks the run degraded [50]\n"
            "  --metrics-url URL       scrape Prometheus metrics every tick\n"
            "  --gpus N                GPUs of the deployment, for per-GPU throughput [1]\n"
            "  --tp N                  its tensor-parallel size (replicas = gpus / tp) [gpus]\n"
            "  --quiet                 no progress lines\n"
            "  --force                 write into a non-empty output folder\n"
            "Text mode makes each prompt token one common English word (one token in\n"
            "current BPE vocabularies, so lengths are approximate); tokens mode sends\n"
            "exact token ids. Ctrl-C stops sending, waits up to --grace for calls in\n"
            "flight, writes everything and marks the run interrupted (twice: at once).\n\n%s",
            replay_flags_help);
}

static int parse_secs(const char *v, int64_t *ns, char *err)
{
    if (parse_duration(v, ns, err))
        return -1;
    if (*ns <= 0)
        return err_set(err, "'%s' must be > 0", v);
    return 0;
}

int load_cmd(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    struct http_target_config hc;
    http_target_config_defaults(&hc);
    struct load ld;
    memset(&ld, 0, sizeof ld);
    ld.sig_pipe[0] = ld.sig_pipe[1] = -1;
    /* A signal from here on still leaves a result folder: one that comes
     * before the replay starts is acted on at its first turn. */
    catch_signals();
    replay_config_defaults(&ld.rcfg);
    const char *trace_path = NULL, *out_dir = NULL;
    double lag_threshold_ms = 50;
    int have_url = 0, gpus = 1, tp = 0, force = 0;
    const char *env_key = getenv("OPENAI_API_KEY");
    if (env_key)
        snprintf(hc.api_key, sizeof hc.api_key, "%s", env_key);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return EXIT_OK;
        }
        if (!strcmp(a, "--quiet")) {
            ld.quiet = 1;
            continue;
        }
        if (!strcmp(a, "--force")) {
            force = 1;
            continue;
        }
        int k = replay_config_flag(&ld.rcfg, argc, argv, &i, err);
        if (k < 0) {
            fprintf(stderr, "load: %s\n", err);
            return EXIT_BADINPUT;
        }
        if (k > 0) {
            i--; /* it advanced past its value; the loop adds one */
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "load: unknown flag or missing value: %s (see --help)\n", a);
            return EXIT_BADINPUT;
        }
        i++;
        int bad = 0;
        if (!strcmp(a, "--url")) {
            snprintf(hc.url, sizeof hc.url, "%s", v);
            have_url = 1;
        } else if (!strcmp(a, "--trace")) {
            trace_path = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            out_dir = v;
        } else if (!strcmp(a, "--endpoint")) {
            if (!strcmp(v, "chat"))
                hc.endpoint = HTTP_EP_CHAT;
            else if (!strcmp(v, "completions"))
                hc.endpoint = HTTP_EP_COMPLETIONS;
            else
                bad = 1;
        } else if (!strcmp(a, "--prompt-mode")) {
            if (!strcmp(v, "text"))
                hc.prompt_mode = PROMPT_TEXT;
            else if (!strcmp(v, "tokens"))
                hc.prompt_mode = PROMPT_TOKENS;
            else
                bad = 1;
        } else if (!strcmp(a, "--model")) {
            snprintf(hc.model, sizeof hc.model, "%s", v);
        } else if (!strcmp(a, "--api-key")) {
            snprintf(hc.api_key, sizeof hc.api_key, "%s", v);
        } else if (!strcmp(a, "--connect-timeout")) {
            bad = parse_secs(v, &hc.connect_timeout_ns, err);
        } else if (!strcmp(a, "--read-timeout")) {
            bad = parse_secs(v, &hc.read_timeout_ns, err);
        } else if (!strcmp(a, "--lag-threshold-ms")) {
            char *e;
            lag_threshold_ms = strtod(v, &e);
            bad = *e || !(lag_threshold_ms > 0);
        } else if (!strcmp(a, "--metrics-url")) {
            snprintf(ld.metrics_url, sizeof ld.metrics_url, "%s", v);
        } else if (!strcmp(a, "--tp")) {
            char *e;
            long x = strtol(v, &e, 10);
            bad = *e || x < 1 || x > 1000000;
            tp = (int)x;
        } else if (!strcmp(a, "--gpus")) {
            char *e;
            long g = strtol(v, &e, 10);
            bad = *e || g < 1 || g > 1000000;
            gpus = (int)g;
        } else {
            fprintf(stderr, "load: unknown flag %s (see --help)\n", a);
            return EXIT_BADINPUT;
        }
        if (bad) {
            fprintf(stderr, "load: bad value for %s: '%s'%s%s\n", a, v, err[0] ? ": " : "", err);
            return EXIT_BADINPUT;
        }
    }
    if (!have_url || !trace_path || !out_dir) {
        fprintf(stderr, "load: --url, --trace and -o are required (see --help)\n");
        return EXIT_BADINPUT;
    }
    if (hc.prompt_mode == PROMPT_TOKENS && hc.endpoint != HTTP_EP_COMPLETIONS) {
        fprintf(stderr, "load: --prompt-mode tokens needs --endpoint completions\n");
        return EXIT_BADINPUT;
    }
    if (!tp)
        tp = gpus;
    if (gpus % tp) {
        fprintf(stderr, "load: --gpus %d is not a multiple of --tp %d\n", gpus, tp);
        return EXIT_BADINPUT;
    }
    hc.seed = ld.rcfg.seed;
    hc.gpus = gpus;
    ld.grace_ns = ld.rcfg.grace_ns;

    struct trace_read_opts topts = {0};
    struct trace *tr = trace_read(trace_path, &topts, err);
    if (!tr) {
        fprintf(stderr, "load: %s\n", err);
        return EXIT_BADINPUT;
    }
    if (results_prepare_dir(out_dir, force, err)) {
        fprintf(stderr, "load: %s\n", err);
        trace_destroy(tr);
        return EXIT_BADINPUT;
    }
    if (!hc.model[0] && http_target_fetch_model(&hc, hc.model, sizeof hc.model, err)) {
        fprintf(stderr, "load: %s (give --model to skip this)\n", err);
        trace_destroy(tr);
        return EXIT_FAIL;
    }

    int rc = EXIT_FAIL;
    char path[4096];
    struct records_writer *rw = NULL;
    FILE *tl = NULL;
    struct lagstat ls;
    memset(&ls, 0, sizeof ls);
    ld.loop = loop_real_create();
    ld.tg = ld.loop ? http_target_create(&hc, ld.loop, err) : NULL;
    if (!ld.tg) {
        fprintf(stderr, "load: %s\n", err[0] ? err : "cannot create the event loop");
        rc = EXIT_BADINPUT;
        goto out;
    }
    ld.rp = replay_create(&ld.rcfg, tr, ld.tg, ld.loop, err);
    if (!ld.rp) {
        fprintf(stderr, "load: %s\n", err);
        rc = EXIT_BADINPUT;
        goto out;
    }
    snprintf(path, sizeof path, "%s/requests.jsonl", out_dir);
    rw = records_open(path, ld.rcfg.chunk_times, err);
    if (!rw) {
        fprintf(stderr, "load: %s\n", err);
        goto out;
    }
    records_set_buffered(rw, RECORDS_BUFFER);
    records_set_observer(rw, observe_record, &ls);
    ld.rw = rw;
    loop_at(ld.loop, &ld.flush_timer, loop_now(ld.loop) + RECORDS_FLUSH_NS, flush_cb, &ld);
    snprintf(path, sizeof path, "%s/timeline.csv", out_dir);
    tl = fopen(path, "w");
    if (!tl) {
        fprintf(stderr, "load: %s: %s\n", path, strerror(errno));
        goto out;
    }
    replay_set_outputs(ld.rp, rw, tl);
    replay_set_tick(ld.rp, tick_cb, &ld);
    if (ld.metrics_url[0]) {
        snprintf(path, sizeof path, "%s/metrics_timeline.jsonl", out_dir);
        ld.mtl = fopen(path, "w");
        loop_at(ld.loop, &ld.scrape_timer, loop_now(ld.loop), scrape_cb, &ld);
    }
    if (pipe2(ld.sig_pipe, O_NONBLOCK | O_CLOEXEC) == 0) {
        g_sig_fd = ld.sig_pipe[1];
        ld.sig_io.fd = ld.sig_pipe[0];
        ld.sig_io.events = LOOP_READ;
        ld.sig_io.cb = sig_cb;
        ld.sig_io.arg = &ld;
        loop_io_start(ld.loop, &ld.sig_io);
        for (int k = g_early_sigs; k > 0; k--) {
            char b = (char)SIGINT;
            ssize_t w = write(g_sig_fd, &b, 1);
            (void)w;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (!ld.quiet)
        fprintf(stderr, "load: %s (%s, model %s), %s, concurrency %d, duration %.0f s\n", hc.url,
                hc.endpoint == HTTP_EP_CHAT ? "chat" : "completions", hc.model, trace_path,
                ld.rcfg.concurrency, (double)ld.rcfg.duration_ns / 1e9);
    if (replay_start(ld.rp)) {
        fprintf(stderr, "load: the replay did not start\n");
        goto out;
    }
    while (!replay_finished(ld.rp)) {
        loop_run(ld.loop);
        if (!replay_finished(ld.rp) && !ld.loop->stopped)
            break; /* nothing left to wait for */
    }
    loop_cancel(ld.loop, &ld.scrape_timer);
    loop_cancel(ld.loop, &ld.flush_timer);
    loop_cancel(ld.loop, &ld.grace_timer);
    loop_cancel(ld.loop, &ld.drain_timer);
    g_sig_fd = -1;
    /* Ignored while the results are written: a late signal must not leave
     * records without their run.json. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);

    struct metrics_summary sum;
    struct replay_outcome oc;
    replay_summarize(ld.rp, NULL, &sum, &oc);
    if (ld.flush_err[0]) {
        fprintf(stderr, "load: %s\n", ld.flush_err);
        oc.partial = true;
    }
    if (records_close(rw, err)) {
        fprintf(stderr, "load: %s\n", err);
        oc.partial = true;
    }
    rw = NULL;
    ld.rw = NULL;
    fclose(tl);
    tl = NULL;
    metrics_stat_compute(ls.lags.v, ls.lags.n, &ls.lag_ms);
    struct http_target_counts cnt;
    http_target_counts(ld.tg, &cnt);
    bool degraded = ls.lag_ms.p99 > lag_threshold_ms;

    char cmdline[4096];
    size_t cl = 0;
    cmdline[0] = 0;
    for (int i = 0; i < argc && cl < sizeof cmdline - 2; i++)
        cl += (size_t)snprintf(cmdline + cl, sizeof cmdline - cl, "%s%s", i ? " " : "agentreplay ", argv[i]);
    char label[200];
    snprintf(label, sizeof label, "live %s", hc.model);
    json_t *cfgj = json_object();
    json_object_set_new(cfgj, "replay", replay_config_json(&ld.rcfg));
    json_object_set_new(cfgj, "load",
                        json_pack("{s:s,s:s,s:s,s:f,s:f,s:f,s:s?}", "url", hc.url, "endpoint",
                                  hc.endpoint == HTTP_EP_CHAT ? "chat" : "completions", "prompt_mode",
                                  hc.prompt_mode == PROMPT_TOKENS ? "tokens" : "text",
                                  "connect_timeout_s", (double)hc.connect_timeout_ns / 1e9,
                                  "read_timeout_s", (double)hc.read_timeout_ns / 1e9,
                                  "lag_threshold_ms", lag_threshold_ms, "metrics_url",
                                  ld.metrics_url[0] ? ld.metrics_url : NULL));
    struct run_info ri = {
        .kind = "load",
        .command = cmdline,
        .label = label,
        .gpus = gpus,
        .tp = tp,
        .replicas = gpus / tp,
        .backend = "live",
        .model = hc.model,
        .gpu = NULL,
        .seed = ld.rcfg.seed,
        .concurrency = ld.rcfg.concurrency,
        .duration_s = (double)ld.rcfg.duration_ns / 1e9,
        .trace_path = trace_path,
        .trace_format = trace_format_name(tr->format),
        .trace_digest = tr->digest,
        .trace_sessions = tr->n_sessions,
        .trace_calls = tr->n_calls,
        .engine_json = ld.tg->ops->describe_json ? ld.tg->ops->describe_json(ld.tg) : NULL,
        .config_json = cfgj,
    };
    json_t *run = results_run_json(&ri, &sum, &oc, NULL);
    double hit = ls.prompt_with_cache > 0 ? (double)ls.cached / (double)ls.prompt_with_cache : NAN;
    json_t *live = json_pack(
        "{s:s,s:{s:f,s:f,s:f,s:f,s:I},s:f,s:b,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
        "url", hc.url, "schedule_lag_ms", "p50", ls.lag_ms.p50, "p99", ls.lag_ms.p99, "max",
        ls.lag_max_ms, "mean", ls.lag_ms.mean, "n", (json_int_t)ls.lag_ms.n, "lag_threshold_ms",
        lag_threshold_ms, "degraded", degraded, "prefix_hit_rate_achieved",
        isfinite(hit) ? json_real(hit) : json_null(), "cached_tokens", (json_int_t)ls.cached,
        "prompt_tokens_with_usage", (json_int_t)ls.prompt_with_cache, "records_with_usage",
        (json_int_t)ls.with_usage, "usage_output_mismatch", (json_int_t)ls.usage_output_mismatch,
        "http_errors", (json_int_t)cnt.http_errors, "transport_errors", (json_int_t)cnt.transport_errors,
        "timeouts", (json_int_t)cnt.timeouts, "malformed_streams", (json_int_t)cnt.malformed,
        "cancelled", (json_int_t)cnt.cancelled, "held_unsent", (json_int_t)cnt.held, "bytes_sent",
        (json_int_t)cnt.bytes_sent);
    json_object_set_new(live, "bytes_received", json_integer((json_int_t)cnt.bytes_received));
    json_object_set_new(live, "interrupts", json_integer(ld.interrupts));
    if (ld.metrics_url[0])
        json_object_set_new(live, "metrics_scrapes",
                            json_pack("{s:s,s:I,s:I,s:s}", "url", ld.metrics_url, "ok",
                                      (json_int_t)ld.scrapes, "failed", (json_int_t)ld.scrape_errors,
                                      "file", "metrics_timeline.jsonl"));
    json_object_set_new(run, "live", live);
    if (results_write_json(out_dir, "run.json", run, err) ||
        results_write_summary(out_dir, &ri, &sum, &oc, err)) {
        fprintf(stderr, "load: %s\n", err);
        json_decref(run);
        goto out;
    }
    snprintf(path, sizeof path, "%s/run.json", out_dir);
    json_decref(run);
    if (!ld.quiet)
        fprintf(stderr,
                "load: %s%llu calls (%llu errors, %llu cancelled); TTFT P90 %.1f ms, TPOT P90 %.2f ms, "
                "interactivity P90 %.1f tok/s/user; schedule lag P99 %.3f ms%s; %s\n",
                oc.interrupted ? "INTERRUPTED: " : "", (unsigned long long)sum.records,
                (unsigned long long)sum.errors, (unsigned long long)sum.cancelled, sum.ttft_ms.p90,
                sum.tpot_ms.p90, sum.interactivity.p90, ls.lag_ms.p99, degraded ? " (DEGRADED)" : "",
                path);
    rc = EXIT_OK;
out:
    if (rw)
        records_close(rw, err);
    if (tl)
        fclose(tl);
    if (ld.mtl)
        fclose(ld.mtl);
    dvec_free(&ls.lags);
    replay_destroy(ld.rp);
    target_destroy(ld.tg);
    if (ld.sig_pipe[0] >= 0) {
        g_sig_fd = -1;
        loop_io_stop(ld.loop, &ld.sig_io);
        close(ld.sig_pipe[0]);
        close(ld.sig_pipe[1]);
    }
    loop_destroy(ld.loop);
    trace_destroy(tr);
    return rc;
}
