/* test_sim.c: the replayer's commands end to end through the binary:
 * `sim` on the public agentic traces (files, an independent recomputation
 * of P90 interactivity by tests/recompute_p90.py to 4 significant digits,
 * byte-identical reruns), every public trace format, --repeats, `sweep`,
 * `compare` refusing different GPU counts (exit 3), bad input (exit 2),
 * and SIGINT (partial results marked interrupted). */
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "replay/results.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/file.h"

static char tmpdir[256];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = file_read(a, &na, NULL), *y = file_read(b, &nb, NULL);
    bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

static json_t *run_json(const char *dir)
{
    char err[ERR_LEN];
    return results_read_run(dir, err);
}

static bool exists(const char *dir, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, R_OK) == 0;
}

int main(void)
{
    const char *bin = test_bin();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_sim_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    const char *cc = test_shared("traces/agentic-cc");
    char dir[512], dir2[512];

    if (!cc) {
        SKIP("../shared/traces/agentic-cc absent");
    } else {
        /* The command. */
        snprintf(dir, sizeof dir, "%s/r", tmpdir);
        int rc = sh("%s sim --trace %s --concurrency 8 --duration 1800 -o %s >%s/out.txt 2>&1", bin, cc,
                    dir, tmpdir);
        CHECKF(rc == 0, "sim exits 0 (got %d)", rc);
        CHECK(exists(dir, "run.json") && exists(dir, "requests.jsonl") && exists(dir, "timeline.csv") &&
                  exists(dir, "summary.md"),
              "run folder files");
        /* The legacy rules, parents waiting for every subagent: the run
         * ends (a parent resuming after its last subagent once ended its
         * lane twice). */
        snprintf(dir2, sizeof dir2, "%s/join", tmpdir);
        rc = sh("timeout -s KILL 120 %s sim --trace %s --concurrency 8 --duration 1800 "
                "--rules legacy --join-subagents --quiet -o %s >%s/out-join.txt 2>&1",
                bin, cc, dir2, tmpdir);
        CHECKF(rc == 0 && exists(dir2, "run.json"), "sim --join-subagents finishes (got %d)", rc);
        json_t *r = run_json(dir);
        CHECK(r != NULL, "run.json reads back");
        if (r) {
            CHECK(results_num(r, "schema_version") == 1 && results_num(r, "gpus") == 16 &&
                      results_num(r, "tp") == 16 && results_num(r, "replicas") == 1 &&
                      results_str(r, "model") && results_str(r, "gpu") && results_num(r, "seed") == 1,
                  "run.json identity fields");
            const char *keys[] = {"metrics.ttft_ms.p90", "metrics.tpot_ms.p50", "metrics.e2el_ms.p99",
                                  "metrics.interactivity_tok_s.p90", "metrics.interactivity_tok_s.mean",
                                  "metrics.throughput_tok_s_per_gpu.total",
                                  "metrics.throughput_tok_s_per_gpu.output", "metrics.prefix_hit_rate",
                                  "metrics.requests.completed", "metrics.requests.errors",
                                  "metrics.requests.warmup", "metrics.requests.cancelled"};
            bool all = true;
            for (size_t i = 0; i < ARRAY_LEN(keys); i++)
                all &= isfinite(results_num(r, keys[i]));
            CHECK(all, "every metric named by the issue is present");
            /* Every recorded gap replayed (AgentX): about 350 in 1800 s. */
            CHECK(results_num(r, "metrics.requests.completed") > 200, "hundreds of calls measured");
            CHECK(results_num(r, "run.agentx.warmup_calls") == 8 &&
                      results_num(r, "run.agentx.measure_start_s") > 0,
                  "run.json: the warm-up phase and when the measured phase began");
            double thm = results_num(r, "metrics.prefix_hit_rate_theoretical_measured");
            CHECKF(thm > 0.5 && thm <= 1, "the theoretical hit rate over the measured requests (%.3f)", thm);
            CHECK(results_num(r, "metrics.requests.warmup") == 8, "8 lanes, 8 warm-up calls");
            CHECK(json_is_true(json_object_get(r, "agentx_valid")), "1800 s run is AgentX-valid");
            CHECK(json_is_false(json_object_get(r, "interrupted")), "not interrupted");
            double hit = results_num(r, "metrics.prefix_hit_rate");
            double th = results_num(r, "metrics.prefix_hit_rate_theoretical");
            CHECKF(hit > 0.5 && hit <= th + 0.02 && fabs(th - 0.945) < 0.01,
                   "hit rate %.3f near the theoretical %.3f", hit, th);
            json_decref(r);
        }
        if (sh("command -v python3 >/dev/null") == 0) {
            rc = sh("python3 tests/recompute_p90.py --check %s >%s/recompute.txt 2>&1", dir, tmpdir);
            CHECKF(rc == 0, "recompute_p90.py matches run.json to 4 significant digits (see %s/recompute.txt)",
                   tmpdir);
        } else {
            SKIP("python3 absent: no independent recomputation");
        }
        /* Determinism: the same command again gives the same bytes. */
        snprintf(dir2, sizeof dir2, "%s/r-first", tmpdir);
        sh("cp -r %s %s", dir, dir2);
        rc = sh("%s sim --trace %s --concurrency 8 --duration 1800 -o %s --force >/dev/null 2>&1", bin, cc,
                dir);
        char a[600], b[600];
        snprintf(a, sizeof a, "%s/requests.jsonl", dir);
        snprintf(b, sizeof b, "%s/requests.jsonl", dir2);
        bool s1 = same_file(a, b);
        snprintf(a, sizeof a, "%s/timeline.csv", dir);
        snprintf(b, sizeof b, "%s/timeline.csv", dir2);
        bool s3 = same_file(a, b);
        /* run.json carries the command, which has --force the second time. */
        json_t *x = run_json(dir), *y = run_json(dir2);
        bool s2 = x && y && json_equal(json_object_get(x, "metrics"), json_object_get(y, "metrics"));
        json_decref(x);
        json_decref(y);
        CHECK(rc == 0 && s1 && s2 && s3, "byte-identical requests.jsonl, timeline and metrics on a rerun");
        /* The same argv twice (both with --force): byte-identical run.json. */
        snprintf(dir2, sizeof dir2, "%s/r-again", tmpdir);
        sh("%s sim --trace %s --concurrency 8 --duration 1800 -o %s --force >/dev/null 2>&1", bin, cc, dir);
        sh("cp -r %s %s", dir, dir2);
        sh("%s sim --trace %s --concurrency 8 --duration 1800 -o %s --force >/dev/null 2>&1", bin, cc, dir);
        snprintf(a, sizeof a, "%s/run.json", dir);
        snprintf(b, sizeof b, "%s/run.json", dir2);
        bool s4 = same_file(a, b);
        snprintf(a, sizeof a, "%s/requests.jsonl", dir);
        snprintf(b, sizeof b, "%s/requests.jsonl", dir2);
        CHECK(s4 && same_file(a, b), "byte-identical run.json and requests.jsonl for the same command");

        /* Another seed changes the sample. */
        snprintf(dir2, sizeof dir2, "%s/seed2", tmpdir);
        sh("%s sim --trace %s --concurrency 8 --duration 1800 --seed 2 -o %s >/dev/null 2>&1", bin, cc, dir2);
        x = run_json(dir);
        y = run_json(dir2);
        CHECK(x && y && results_num(x, "metrics.interactivity_tok_s.p90") !=
                            results_num(y, "metrics.interactivity_tok_s.p90"),
              "a different seed gives a different run");
        json_decref(x);
        json_decref(y);

        /* An existing folder is not overwritten without --force. */
        rc = sh("%s sim --trace %s --duration 60 -o %s >/dev/null 2>&1", bin, cc, dir);
        CHECKF(rc == 2, "existing folder refused (exit %d)", rc);

        /* Short runs run but are not valid. */
        snprintf(dir2, sizeof dir2, "%s/short", tmpdir);
        rc = sh("%s sim --trace %s --concurrency 2 --duration 120 -o %s --slo ttft=2000,tpot=20 >/dev/null 2>&1",
                bin, cc, dir2);
        x = run_json(dir2);
        CHECK(rc == 0 && x && json_is_false(json_object_get(x, "agentx_valid")) &&
                  json_array_size(json_object_get(x, "invalid_reasons")) >= 1,
              "120 s run: not AgentX-valid, with a reason");
        CHECK(x && isfinite(results_num(x, "metrics.goodput_req_s")), "goodput with --slo");
        json_decref(x);

        /* compare: equal GPU counts fine; 8 vs 16 refused with exit 3. */
        snprintf(dir2, sizeof dir2, "%s/g8", tmpdir);
        rc = sh("%s sim --trace %s --concurrency 2 --duration 120 --gpus 8 --tp 8 -o %s >/dev/null 2>&1", bin,
                cc, dir2);
        CHECKF(rc == 0, "8-GPU run (exit %d)", rc);
        char d16[512];
        snprintf(d16, sizeof d16, "%s/short", tmpdir);
        rc = sh("%s compare %s %s >%s/cmp.txt 2>&1", bin, dir2, d16, tmpdir);
        CHECKF(rc == 3, "compare 8 vs 16 GPUs exits 3 (got %d)", rc);
        char p[600];
        snprintf(p, sizeof p, "%s/cmp.txt", tmpdir);
        char *txt = file_read(p, NULL, NULL);
        CHECK(txt && strstr(txt, "8 GPUs") && strstr(txt, "16"), "the refusal explains the GPU counts");
        free(txt);
        rc = sh("%s compare --per-gpu %s %s >%s/cmp.txt 2>&1", bin, dir2, d16, tmpdir);
        txt = file_read(p, NULL, NULL);
        CHECK(rc == 0 && txt && strstr(txt, "PER-GPU"), "--per-gpu compares and says so loudly");
        free(txt);
        rc = sh("%s compare %s %s >%s/cmp.txt 2>&1", bin, dir, d16, tmpdir);
        txt = file_read(p, NULL, NULL);
        CHECK(rc == 0 && txt && strstr(txt, "B/A") && strstr(txt, "differs: concurrency"),
              "same GPU count: side by side, confounders flagged");
        free(txt);

        /* --repeats: mean and CI. */
        snprintf(dir2, sizeof dir2, "%s/rep", tmpdir);
        rc = sh("%s sim --trace %s --concurrency 2 --duration 300 --repeats 3 -o %s >/dev/null 2>&1", bin, cc,
                dir2);
        x = run_json(dir2);
        json_t *e = x ? json_object_get(json_object_get(json_object_get(x, "repeats"), "metrics"),
                                        "interactivity_tok_s.p90")
                      : NULL;
        CHECK(rc == 0 && e && json_is_number(json_object_get(e, "ci95")) &&
                  json_array_size(json_object_get(e, "values")) == 3,
              "--repeats 3: mean, 95 % CI and the values");
        json_decref(x);

        /* sweep */
        snprintf(dir2, sizeof dir2, "%s/sw", tmpdir);
        rc = sh("%s sweep --trace %s --concurrency 1,4 --layout 16x1,8x2 --backend auto --duration 120 -o %s "
                ">/dev/null 2>&1",
                bin, cc, dir2);
        snprintf(p, sizeof p, "%s/sweep.csv", dir2);
        txt = file_read(p, NULL, NULL);
        int lines = 0;
        for (char *q = txt; q && *q; q++)
            lines += *q == '\n';
        CHECKF(rc == 0 && txt && lines == 5 && !strncmp(txt, results_sweep_header, strlen(results_sweep_header)),
               "sweep.csv: header + 4 points (exit %d, %d lines)", rc, lines);
        CHECK(txt && strstr(txt, "TP8x2_auto-c4"), "one folder per point");
        free(txt);
        rc = sh("%s sweep --trace %s --layout 16x1,8x1 -o %s/sw2 >/dev/null 2>&1", bin, cc, tmpdir);
        CHECKF(rc == 2, "sweep across GPU counts refused (exit %d)", rc);
        rc = sh("%s sweep --trace %s --concurrency 1,2 --gpus 8 --tp 8 --duration 60 -o %s/sw8 >/dev/null 2>&1",
                bin, cc, tmpdir);
        CHECKF(rc == 0, "8-GPU sweep (exit %d)", rc);
        rc = sh("%s compare %s %s/sw8 >/dev/null 2>&1", bin, dir2, tmpdir);
        CHECKF(rc == 3, "compare of sweeps on 16 and 8 GPUs refused (exit %d)", rc);
        rc = sh("%s compare --per-gpu %s %s/sw8 >%s/cmp2.txt 2>&1", bin, dir2, tmpdir, tmpdir);
        snprintf(p, sizeof p, "%s/cmp2.txt", tmpdir);
        txt = file_read(p, NULL, NULL);
        CHECK(rc == 0 && txt && strstr(txt, "PER-GPU") && strstr(txt, "tok/s/GPU"),
              "--per-gpu compares sweeps' throughput per GPU at equal interactivity");
        free(txt);

        /* Bad input: exit 2 with a message. */
        CHECK(sh("%s sim --trace %s --bogus -o %s/b1 >/dev/null 2>&1", bin, cc, tmpdir) == 2, "unknown flag");
        CHECK(sh("%s sim --trace %s --slo ttft=x -o %s/b2 >/dev/null 2>&1", bin, cc, tmpdir) == 2, "bad SLO");
        CHECK(sh("%s sim --trace %s --join-subagents -o %s/b3 >/dev/null 2>&1", bin, cc, tmpdir) == 2,
              "a switch of the legacy rules under the agentx rules");
        CHECK(sh("%s sim --trace %s --mode timestamp -o %s/b4 >/dev/null 2>&1", bin, cc, tmpdir) == 2,
              "timestamp mode on a session trace");
        CHECK(sh(": > %s/empty.jsonl; %s sim --trace %s/empty.jsonl --format mooncake -o %s/b5 >/dev/null 2>&1",
                 tmpdir, bin, tmpdir, tmpdir) == 2,
              "empty trace");
        CHECK(sh("%s sim --trace %s --duration -5 -o %s/b6 >/dev/null 2>&1", bin, cc, tmpdir) == 2, "bad duration");
        CHECK(sh("%s sim --trace %s >/dev/null 2>&1", bin, cc) == 2, "no -o");

        CHECK(sh("%s sim --trace %s --mode closed --arrival poisson:3 -o %s/b7 >/dev/null 2>&1", bin, cc, tmpdir) == 2,
              "conflicting modes");
        CHECK(sh("%s sim --trace %s --arrival poisson:3 --concurrency 4 -o %s/b8 >/dev/null 2>&1", bin, cc, tmpdir) == 2,
              "concurrency with open-loop arrivals");
        CHECK(sh("%s compare %s >/dev/null 2>&1", bin, dir) == 2, "compare needs two results");

        /* plan: an answer bracketed by a passing and a failing run. */
        rc = sh("%s plan --trace %s --slo interactivity_p90=250,ttft_p90_ms=2000 --duration 120 "
                "--max-concurrency 256 >%s/plan.txt 2>&1", bin, cc, tmpdir);
        snprintf(p, sizeof p, "%s/plan.txt", tmpdir);
        txt = file_read(p, NULL, NULL);
        CHECK(rc == 0 && txt && strstr(txt, "live sessions") && strstr(txt, "pass") && strstr(txt, "FAIL"),
              "plan prints the answer and its bracketing runs");
        free(txt);
        CHECK(sh("%s plan --trace %s --slo speed=3 >/dev/null 2>&1", bin, cc) == 2, "plan: bad SLO term");

        /* Chrome trace of the engine's steps. */
        snprintf(dir2, sizeof dir2, "%s/ct", tmpdir);
        rc = sh("%s sim --trace %s --concurrency 2 --duration 60 -o %s --chrome-trace %s/ct.json "
                "--chrome-trace-kernels 20 >/dev/null 2>&1",
                bin, cc, dir2, tmpdir);
        snprintf(p, sizeof p, "%s/ct.json", tmpdir);
        json_error_t je;
        x = json_load_file(p, 0, &je);
        CHECK(rc == 0 && x, "--chrome-trace writes JSON");
        /* Steps on one track, the chosen step's kernels on another. */
        json_t *evs = json_is_object(x) ? json_object_get(x, "traceEvents") : x;
        size_t n_steps = 0, n_kernels = 0, i_ev;
        json_t *ev;
        json_array_foreach(evs, i_ev, ev) {
            if (!json_is_string(json_object_get(ev, "ph")) ||
                strcmp(json_string_value(json_object_get(ev, "ph")), "X"))
                continue;
            if (json_integer_value(json_object_get(ev, "tid")) == 0)
                n_steps++;
            else
                n_kernels++;
        }
        CHECKF(n_steps > 20 && n_kernels > 100, "steps (%zu) and one step's kernels (%zu) in the trace",
               n_steps, n_kernels);
        json_decref(x);

        /* SIGINT: stops, writes what was measured, marks it. */
        snprintf(dir2, sizeof dir2, "%s/int", tmpdir);
        rc = sh("%s sim --trace %s --concurrency 64 --duration 400000 -o %s >/dev/null 2>&1 & pid=$!; "
                "sleep 1; kill -INT $pid; wait $pid",
                bin, cc, dir2);
        x = run_json(dir2);
        CHECKF(x && json_is_true(json_object_get(x, "interrupted")) && json_is_true(json_object_get(x, "partial")),
               "interrupted run marked (exit %d)", rc);
        CHECK(x && results_num(x, "metrics.requests.completed") > 0, "and keeps what it measured");
        json_decref(x);
    }

    /* Every public format. */
    struct {
        const char *rel, *flags;
    } fm[] = {
        {"traces/mooncake/conversation_trace.jsonl", "--mode timestamp --duration 120"},
        {"traces/mooncake/synthetic_trace.jsonl", "--arrival poisson:2 --duration 120"},
        {"traces/azure/AzureLLMInferenceTrace_code.csv", "--mode timestamp --duration 120"},
        {"traces/azure/AzureLLMInferenceTrace_conv.csv", "--mode closed --concurrency 4 --duration 60"},
        {"traces/agentic-cc/trace_0004.json", "--concurrency 2 --duration 300"},
    };
    for (size_t i = 0; i < ARRAY_LEN(fm); i++) {
        const char *path = test_shared(fm[i].rel);
        if (!path) {
            SKIP(fm[i].rel);
            continue;
        }
        snprintf(dir, sizeof dir, "%s/fmt%zu", tmpdir, i);
        int rc = sh("%s sim --trace %s %s -o %s >/dev/null 2>%s/fmt%zu.err", bin, path, fm[i].flags, dir, tmpdir,
                    i);
        json_t *x = run_json(dir);
        CHECKF(rc == 0 && x && results_num(x, "metrics.requests.completed") > 0 &&
                   results_num(x, "metrics.requests.errors") == 0,
               "%s replays (exit %d)", fm[i].rel, rc);
        json_decref(x);
    }
    sh("rm -rf %s", tmpdir);
    return test_report();
}
