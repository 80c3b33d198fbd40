/* load.c: `agentreplay load`: the run pipeline (replay/run.h) driving a
 * live OpenAI-compatible endpoint (http_target.h) on the real clock, with
 * the same records, metrics and run.json as `sim`, plus what only a live
 * run has:
 *   - schedule lag (actual send - intended send) at P50 / P99 / max; a run
 *     whose lag P99 exceeds --lag-threshold-ms is marked degraded (the
 *     generator, not the server, was the bottleneck);
 *   - the server's usage counts (prompt, completion, cached prompt tokens)
 *     beside ours, and the achieved prefix-cache hit rate from them;
 *   - --metrics-url: the target's Prometheus metrics scraped every tick into
 *     metrics_timeline.jsonl (every sample but histogram buckets);
 *   - Ctrl-C (SIGINT) stops sending, waits up to --grace for the calls in
 *     flight, then cancels the rest, writes everything, marks the result
 *     interrupted and exits 1 (a second Ctrl-C cancels at once).
 * Output folder: run.json, requests.jsonl, timeline.csv, summary.md and,
 * with --metrics-url, metrics_timeline.jsonl.
 *
 * requests.jsonl is buffered (64 KiB) and flushed every 100 ms, on each
 * signal and at the end, instead of once per call: one write(2) per call
 * was a tenth of the generator's CPU per call at thousands of calls a
 * second. A run killed outright (SIGKILL) loses at most the last 100 ms of
 * records; Ctrl-C and SIGTERM lose nothing.
 *
 * Under mpirun or srun with several ranks, the run is split across them
 * (replay/dist_load.h): each rank plays its share of the lanes against
 * the same URL from a common start and streams its records to rank 0,
 * which writes the one result folder (with run.json's "ranks"); the
 * first signal stops at once (mpirun kills a second later). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/cli/cli.h"
#include "replay/dist.h"
#include "replay/dist_load.h"
#include "replay/http_target.h"
#include "replay/replay_flags.h"
#include "replay/results.h"
#include "replay/run.h"
#include "traces/base/err.h"
#include "traces/base/limits.h"
#include "traces/base/time_ns.h"

#define RECORDS_BUFFER (64 * 1024)

struct load_opts {
    struct run_opts run;
    struct replay_config rc;
    struct http_target_config hc;
    double lag_threshold_ms;
    char metrics_url[600];
    int gpus, tp;
    bool url_given, key_given;
};

static void load_init(void *opts)
{
    struct load_opts *o = opts;
    replay_config_defaults(&o->rc);
    http_target_config_defaults(&o->hc);
    /* A key longer than the buffer is refused in load_cmd, never cut. */
    const char *key = getenv("OPENAI_API_KEY");
    if (key && strlen(key) <= LIMIT_API_KEY_BYTES)
        snprintf(o->hc.api_key, sizeof o->hc.api_key, "%s", key);
    o->lag_threshold_ms = 50;
    o->gpus = 1;
}

static const struct flag_choice endpoint_names[] = {
    {"chat", HTTP_EP_CHAT, false}, {"completions", HTTP_EP_COMPLETIONS, false}, {NULL, 0, false}};
static const struct flag_choice prompt_mode_names[] = {
    {"text", PROMPT_TEXT, false}, {"tokens", PROMPT_TOKENS, false}, {NULL, 0, false}};

#define O struct load_opts
static const struct flag load_flags[] = {
    {"--url", 0, FLAG_BUF, FLAG_AT(O, hc.url), "URL",
     "base URL (http:// or https://), e.g.\nhttp://127.0.0.1:8000 (required)", .def = "",
     .seen = FLAG_SEEN(O, url_given)},
    {"--endpoint", 0, FLAG_CHOICE, FLAG_AT(O, hc.endpoint), NULL, "the API called",
     .choices = endpoint_names},
    {"--prompt-mode", 0, FLAG_CHOICE, FLAG_AT(O, hc.prompt_mode), NULL,
     "tokens: ids on /v1/completions", .choices = prompt_mode_names},
    {"--model", 0, FLAG_BUF, FLAG_AT(O, hc.model), "NAME",
     "the one model name every request sends, whatever\nthe trace records", .def = "the server's first /v1/models"},
    {"--api-key", 0, FLAG_BUF, FLAG_AT(O, hc.api_key), "K", "Authorization: Bearer K",
     .def = "$OPENAI_API_KEY", .seen = FLAG_SEEN(O, key_given)},
    {"--connect-timeout", 0, FLAG_DURATION, FLAG_AT(O, hc.connect_timeout_ns), NULL,
     "connecting", .min = 0, .max = INT64_C(1000000000) * NS_PER_S, .opts = FLAG_OPEN_MIN},
    {"--read-timeout", 0, FLAG_DURATION, FLAG_AT(O, hc.read_timeout_ns), NULL,
     "longest silence within a call", .min = 0, .max = INT64_C(1000000000) * NS_PER_S,
     .opts = FLAG_OPEN_MIN},
    {"--lag-threshold-ms", 0, FLAG_DOUBLE, FLAG_AT(O, lag_threshold_ms), "MS",
     "schedule-lag P99 above it marks the run degraded", .fmin = 0, .fmax = 1e12,
     .opts = FLAG_OPEN_MIN},
    {"--metrics-url", 0, FLAG_BUF, FLAG_AT(O, metrics_url), "URL",
     "scrape Prometheus metrics every tick", .def = NULL},
    {"--gpus", 0, FLAG_INT, FLAG_AT(O, gpus), NULL,
     "GPUs of the deployment, for per-GPU throughput", .min = 1, .max = 1000000},
    {"--tp", 0, FLAG_INT, FLAG_AT(O, tp), NULL, "its tensor-parallel size (replicas = gpus / tp)",
     .def = "gpus", .min = 1, .max = 1000000},
    FLAG_END,
};

const struct flag_spec load_spec = {
    .usage = "agentreplay load --url URL --trace PATH -o DIR [flags]",
    .about = "Replays a trace against a live OpenAI-compatible endpoint in real time.\n"
             "--trace and -o are required.",
    .size = sizeof(O),
    .init = load_init,
    .groups = {{"load", load_flags, 0},
               {"run", run_flags, offsetof(O, run)},
               {NULL, trace_read_flags, offsetof(O, run.tro)},
               {"replay (AgentX defaults)", replay_flags, offsetof(O, rc)}},
    .notes = "Text mode makes each prompt token one common English word (one token in\n"
             "current BPE vocabularies, so lengths are approximate); tokens mode sends\n"
             "exact token ids. Ctrl-C stops sending, waits up to --grace for calls in\n"
             "flight, writes everything, marks the run interrupted and exits 1 (twice: at\n"
             "once).",
};
#undef O

/* The run's live state for the hooks. */
struct load {
    const struct load_opts *o;
    struct loop *loop;
    struct target *tg;
    struct replay *rp;
    struct loop_timer scrape_timer;
    FILE *mtl;                   /* metrics_timeline.jsonl */
    char mtl_err[ERR_LEN];       /* its first open or write error, "" if none */
    uint64_t scrapes, scrape_errors;
    int scrape_busy;
    /* schedule lag and cache figures, gathered from each record written */
    struct dvec lags;            /* ms */
    struct metrics_stat lag_ms;
    double lag_max_ms;
    int64_t prompt_with_cache, cached;
    uint64_t records, with_usage, usage_output_mismatch;
    bool degraded;
    struct dist_load *dl;        /* a run split across MPI ranks, or NULL */
    char dist_err[ERR_LEN];
};

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
                /* Histogram buckets (vLLM's are most of a scrape, ~20 KB)
                 * are left out; their _sum and _count stay. */
                const char *brace = memchr(p, '{', (size_t)(q - p));
                const char *ne = brace ? brace : q;
                bool bucket = ne - p >= 7 && !memcmp(ne - 7, "_bucket", 7);
                if (e != num && isfinite(v) && !bucket) {
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
    if (ld->mtl && s && (fprintf(ld->mtl, "%s\n", s) < 0 || fflush(ld->mtl)) && !ld->mtl_err[0])
        snprintf(ld->mtl_err, sizeof ld->mtl_err, "metrics_timeline.jsonl: %s", strerror(errno));
    free(s);
    json_decref(line);
}

static void scrape_cb(struct loop *l, struct loop_timer *t)
{
    struct load *ld = t->arg;
    if (replay_finished(ld->rp))
        return;
    if (!ld->scrape_busy && http_target_get(ld->tg, ld->o->metrics_url, scrape_done, ld) == 0)
        ld->scrape_busy = 1;
    loop_at(l, t, loop_now(l) + ld->o->rc.tick_ns, scrape_cb, ld);
}

static void note_record(void *arg, const struct replay_record *r);

static void started(void *arg, struct replay *r)
{
    struct load *ld = arg;
    ld->rp = r;
    if (ld->dl)
        dist_load_attach(ld->dl, r, ld->loop, note_record, ld);
    if (ld->o->metrics_url[0] && dist_env_rank() == 0) {
        char path[1200];
        snprintf(path, sizeof path, "%s/metrics_timeline.jsonl", ld->o->run.out);
        ld->mtl = fopen(path, "w");
        if (!ld->mtl)
            snprintf(ld->mtl_err, sizeof ld->mtl_err, "%.400s: %s", path, strerror(errno));
        loop_at(ld->loop, &ld->scrape_timer, loop_now(ld->loop), scrape_cb, ld);
    }
}

static void stopped(void *arg)
{
    struct load *ld = arg;
    loop_cancel(ld->loop, &ld->scrape_timer);
    if (ld->dl) {
        struct http_target_counts cnt;
        http_target_counts(ld->tg, &cnt);
        if (dist_load_end(ld->dl, &cnt, sizeof cnt, ld->dist_err))
            fprintf(stderr, "agentreplay load: rank %d: %s\n", dist_rank(), ld->dist_err);
    }
}

static void summarized(void *arg, struct run_result *res)
{
    struct load *ld = arg;
    if (ld->dl)
        dist_load_outcome(ld->dl, &res->out);
}

/* The other ranks' counters added to this one's (rank 0). */
static void add_rank_counts(const struct load *ld, struct http_target_counts *cnt)
{
    uint64_t sum[sizeof *cnt / sizeof(uint64_t)], x[ARRAY_LEN(sum)];
    _Static_assert(sizeof sum == sizeof *cnt, "http_target_counts holds uint64_t only");
    memcpy(sum, cnt, sizeof sum);
    for (int r = 1; r < dist_size(); r++) {
        size_t len;
        const void *e = dist_load_extra(ld->dl, r, &len);
        if (!e || len != sizeof x)
            continue;
        memcpy(x, e, sizeof x);
        for (size_t i = 0; i < ARRAY_LEN(sum); i++)
            sum[i] += x[i];
    }
    memcpy(cnt, sum, sizeof sum);
}

/* Lag, usage and cache figures of each record: this rank's, and at rank 0
 * of a split run the other ranks' too. */
static void note_record(void *arg, const struct replay_record *r)
{
    struct load *ld = arg;
    ld->records++;
    double lag = (double)(r->start_ns - r->intended_start_ns) / 1e6;
    dvec_push(&ld->lags, lag);
    if (lag > ld->lag_max_ms)
        ld->lag_max_ms = lag;
    if (r->cached_tokens >= 0) {
        ld->cached += r->cached_tokens;
        ld->prompt_with_cache += r->prompt_tokens;
    }
    if (r->live && r->server_output_tokens >= 0) {
        ld->with_usage++;
        if (r->server_output_tokens != r->output_tokens)
            ld->usage_output_mismatch++;
    }
}

static void observe_record(void *arg, const struct replay_record *r)
{
    struct load *ld = arg;
    note_record(ld, r);
    if (ld->dl)
        dist_load_record(ld->dl, r);
}

/* run.json's "live": lag, usage, the target's counts, scrapes. */
static void extend(void *arg, void *run_json, const struct run_result *res)
{
    struct load *ld = arg;
    const struct load_opts *o = ld->o;
    metrics_stat_compute(ld->lags.v, ld->lags.n, &ld->lag_ms);
    struct http_target_counts cnt;
    http_target_counts(ld->tg, &cnt);
    if (ld->dl)
        add_rank_counts(ld, &cnt);
    ld->degraded = ld->lag_ms.p99 > o->lag_threshold_ms;
    double hit = ld->prompt_with_cache > 0 ? (double)ld->cached / (double)ld->prompt_with_cache : NAN;
    json_t *live = json_pack(
        "{s:s,s:{s:f,s:f,s:f,s:f,s:I},s:f,s:b,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
        "url", o->hc.url, "schedule_lag_ms", "p50", ld->lag_ms.p50, "p99", ld->lag_ms.p99, "max",
        ld->lag_max_ms, "mean", ld->lag_ms.mean, "n", (json_int_t)ld->lag_ms.n, "lag_threshold_ms",
        o->lag_threshold_ms, "degraded", ld->degraded, "prefix_hit_rate_achieved",
        isfinite(hit) ? json_real(hit) : json_null(), "cached_tokens", (json_int_t)ld->cached,
        "prompt_tokens_with_usage", (json_int_t)ld->prompt_with_cache, "records_with_usage",
        (json_int_t)ld->with_usage, "usage_output_mismatch", (json_int_t)ld->usage_output_mismatch,
        "http_errors", (json_int_t)cnt.http_errors, "transport_errors", (json_int_t)cnt.transport_errors,
        "timeouts", (json_int_t)cnt.timeouts, "malformed_streams", (json_int_t)cnt.malformed,
        "cancelled", (json_int_t)cnt.cancelled, "held_unsent", (json_int_t)cnt.held, "bytes_sent",
        (json_int_t)cnt.bytes_sent);
    json_object_set_new(live, "bytes_received", json_integer((json_int_t)cnt.bytes_received));
    json_object_set_new(live, "interrupts", json_integer(res->interrupts));
    if (o->metrics_url[0])
        json_object_set_new(live, "metrics_scrapes",
                            json_pack("{s:s,s:I,s:I,s:s}", "url", o->metrics_url, "ok",
                                      (json_int_t)ld->scrapes, "failed", (json_int_t)ld->scrape_errors,
                                      "file", "metrics_timeline.jsonl"));
    json_object_set_new((json_t *)run_json, "live", live);
    if (ld->dl)
        json_object_set_new((json_t *)run_json, "ranks", dist_load_ranks_json(ld->dl));
}

/* The run's "config": the replayer's and the load generator's. */
static json_t *config_json(const struct load_opts *o)
{
    const struct http_target_config *hc = &o->hc;
    json_t *cfg = json_object();
    json_object_set_new(cfg, "replay", replay_config_json(&o->rc));
    json_object_set_new(cfg, "load",
                        json_pack("{s:s,s:s,s:s,s:f,s:f,s:f,s:s?}", "url", hc->url, "endpoint",
                                  hc->endpoint == HTTP_EP_CHAT ? "chat" : "completions", "prompt_mode",
                                  hc->prompt_mode == PROMPT_TOKENS ? "tokens" : "text",
                                  "connect_timeout_s", (double)hc->connect_timeout_ns / 1e9,
                                  "read_timeout_s", (double)hc->read_timeout_ns / 1e9,
                                  "lag_threshold_ms", o->lag_threshold_ms, "metrics_url",
                                  o->metrics_url[0] ? o->metrics_url : NULL));
    return cfg;
}

/* Joins the MPI job and waits for the common start (dist_load.h). */
static int dist_begin(struct load *ld, char *err)
{
    if (dist_init(err))
        return -1;
    run_signals_install(); /* after MPI_Init, whatever it set */
    ld->dl = dist_load_create(ld->o->run.out, err);
    if (!ld->dl || dist_load_start(ld->dl, err)) {
        fprintf(stderr, "agentreplay load: rank %d: %s\n", dist_rank(), err);
        dist_abort(EXIT_FAIL);
    }
    return 0;
}

int load_cmd(int argc, char **argv)
{
    char err[ERR_LEN] = "";
    /* A signal from here on still leaves a result folder: one that comes
     * before the replay starts is acted on at its first turn. */
    run_signals_install();
    struct load_opts o;
    int rc = cli_parse("load", &load_spec, &o, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    struct http_target_config *hc = &o.hc;
    const char *env_key = getenv("OPENAI_API_KEY");
    if (!o.key_given && env_key && strlen(env_key) > LIMIT_API_KEY_BYTES) {
        snprintf(err, sizeof err, "$OPENAI_API_KEY: %zu characters, more than the %d a key may "
                                  "have (give --api-key)", strlen(env_key), LIMIT_API_KEY_BYTES);
        return cli_bad("load", err);
    }
    if (!o.url_given || !o.run.trace || !o.run.out)
        return cli_bad("load", "--url, --trace and -o are required (see --help)");
    if (o.run.slo.n_objectives)
        return cli_bad("load", "--slo: percentile objectives are plan's; load takes per-request "
                               "limits (ttft=MS,tpot=MS,e2el=MS)");
    if (hc->prompt_mode == PROMPT_TOKENS && hc->endpoint != HTTP_EP_COMPLETIONS)
        return cli_bad("load", "--prompt-mode tokens needs --endpoint completions");
    if (!o.tp)
        o.tp = o.gpus;
    if (o.gpus % o.tp) {
        snprintf(err, sizeof err, "--gpus %d is not a multiple of --tp %d", o.gpus, o.tp);
        return cli_bad("load", err);
    }
    hc->seed = o.rc.seed;
    hc->gpus = o.gpus;

    struct run_trace tr;
    if ((rc = run_trace_load(&tr, o.run.trace, &o.run.tro, err))) {
        fprintf(stderr, "agentreplay load: %s\n", err);
        return rc;
    }
    replay_config_fit(&o.rc, tr.tr);
    bool lead = dist_env_rank() == 0; /* writes the result (rank 0 of a split run) */
    if (lead && results_prepare_dir(o.run.out, o.run.force, err)) {
        run_trace_free(&tr);
        return cli_bad("load", err);
    }
    if (!hc->model[0] && http_target_fetch_model(hc, hc->model, sizeof hc->model, err)) {
        fprintf(stderr, "agentreplay load: %s (give --model to skip this)\n", err);
        run_trace_free(&tr);
        return EXIT_FAIL;
    }
    struct load ld = {.o = &o};
    if (dist_env_size() > 1 && dist_begin(&ld, err)) {
        fprintf(stderr, "agentreplay load: %s\n", err);
        run_trace_free(&tr);
        return EXIT_FAIL;
    }
    ld.loop = loop_real_create();
    ld.tg = ld.loop ? http_target_create(hc, ld.loop, err) : NULL;
    if (!ld.tg) {
        cli_bad("load", err[0] ? err : "cannot create the event loop");
        if (ld.dl)
            dist_abort(EXIT_BADINPUT); /* the other ranks wait for this one */
        loop_destroy(ld.loop);
        run_trace_free(&tr);
        return EXIT_BADINPUT;
    }
    signal(SIGPIPE, SIG_IGN);
    if (!o.run.quiet && lead)
        fprintf(stderr, "load: %s (%s, model %s), %s, concurrency %d, duration %.0f s\n", hc->url,
                hc->endpoint == HTTP_EP_CHAT ? "chat" : "completions", hc->model, o.run.trace,
                o.rc.concurrency, (double)o.rc.duration_ns / 1e9);
    char *cmd = cli_command_line(argc, argv);
    char label[200];
    snprintf(label, sizeof label, "live %s", hc->model);
    struct run_spec s = {
        .kind = "load",
        .trace = &tr,
        .rc = &o.rc,
        .slo = &o.run.slo,
        .dir = lead ? o.run.out : NULL,
        .loop = ld.loop,
        .tg = ld.tg,
        .hold = ld.dl ? NULL : http_target_hold,
        .inflight = http_target_inflight,
        .progress = o.run.quiet || !lead ? RUN_PROGRESS_NONE : RUN_PROGRESS_LINES,
        .records_buffer = ld.dl ? 0 : RECORDS_BUFFER,
        .records_to = ld.dl ? dist_load_records_stream(ld.dl) : NULL,
        .timeline_to = ld.dl ? dist_load_timeline_stream(ld.dl) : NULL,
        .summarized = summarized,
        .observe = observe_record,
        .observe_arg = &ld,
        .info = {.command = cmd,
                 .label = label,
                 .gpus = o.gpus,
                 .tp = o.tp,
                 .replicas = o.gpus / o.tp,
                 .backend = "live",
                 .model = hc->model,
                 .seed = o.rc.seed,
                 .concurrency = o.rc.concurrency,
                 .duration_s = (double)o.rc.duration_ns / 1e9,
                 .config_json = config_json(&o)},
        .started = started,
        .stopped = stopped,
        .extend = extend,
        .hook_arg = &ld,
    };
    struct run_result res;
    void *run;
    rc = run_replay(&s, &res, &run, err);
    if (run && !o.run.quiet && lead)
        fprintf(stderr,
                "load: %s%llu calls (%llu errors, %llu cancelled); TTFT P90 %.1f ms, TPOT P90 %.2f ms, "
                "interactivity P90 %.1f tok/s/user; schedule lag P99 %.3f ms%s; %s/run.json\n",
                res.out.interrupted ? "INTERRUPTED: " : "", (unsigned long long)res.sum.records,
                (unsigned long long)res.sum.errors, (unsigned long long)res.sum.cancelled,
                res.sum.ttft_ms.p90, res.sum.tpot_ms.p90, res.sum.interactivity.p90, ld.lag_ms.p99,
                ld.degraded ? " (DEGRADED)" : "", o.run.out);
    /* A run of nothing but errors is no measurement (exit 1, like an
     * interrupted or failed run: traces/base/err.h). */
    if (rc == EXIT_OK && run && res.sum.completed == 0) {
        snprintf(err, sizeof err, "no call completed (%llu records, %llu errors): see %s/"
                                  "requests.jsonl", (unsigned long long)res.sum.records,
                 (unsigned long long)res.sum.errors, o.run.out);
        rc = EXIT_FAIL;
    }
    if (ld.mtl && fclose(ld.mtl) && !ld.mtl_err[0])
        snprintf(ld.mtl_err, sizeof ld.mtl_err, "metrics_timeline.jsonl: %s", strerror(errno));
    if (rc == EXIT_OK && ld.mtl_err[0]) {
        snprintf(err, sizeof err, "%s", ld.mtl_err);
        rc = EXIT_FAIL;
    }
    if (rc != EXIT_OK)
        fprintf(stderr, "agentreplay load: %s\n", err);
    json_decref(run);
    dvec_free(&ld.lags);
    target_destroy(ld.tg);
    loop_destroy(ld.loop);
    dist_load_destroy(ld.dl);
    run_trace_free(&tr);
    free(cmd);
    return rc;
}
