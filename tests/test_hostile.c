/* test_hostile.c: every known way to make agentreplay hang, spin, exhaust
 * memory, fill the disk or lie about its outcome, each as a test under caps
 * (tests/testproc.h: RLIMIT_FSIZE 100 MB, RLIMIT_AS 1 GB except under
 * AddressSanitizer, a wall-clock limit), so that a regression fails here
 * instead of taking the machine down. An impossible input must be refused
 * with a located message and exit 2; an extreme one must complete with a
 * valid result; a failed write or an interrupt must say so and exit 1
 * (traces/base/err.h's table). tests/RELIABILITY.md ("Hostile inputs and
 * limits") lists each class with its limit and these tests; the load
 * generator under hostile servers is test_hostile_load.c.
 *
 * Sections: inputs under which every call can only fail (spin triggers),
 * sizes from input (memory triggers), the engine's sizing of a request,
 * extreme but valid runs, a run whose every call fails at once, writes,
 * messages and progress, signals, and the flag parser's fuzz harness
 * replayed over its seeds. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "replay/replay.h"
#include "replay/run.h"
#include "tests/testhelp.h"
#include "tests/testproc.h"
#include "traces/base/err.h"
#include "traces/base/limits.h"
#include "traces/base/time_ns.h"

#define LLVMFuzzerTestOneInput fuzz_one_flags
#include "fuzz_flags.c"
#undef LLVMFuzzerTestOneInput

static char tmp[256];
static const char *bin;

/* ---- helpers ------------------------------------------------------------ */

static char *path_in(const char *name) { return tp_path(tmp, name); }

/* Triggers whose fix is another part's: their tests run and report here
 * (testproc.h: CHECK_TRIGGER) until that part is fixed; then their names
 * leave this list. None is left. */
static const char *const pending[] = {
    NULL,
};

static void write_file(const char *name, const char *text)
{
    FILE *f = fopen(path_in(name), "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}


static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Runs agentreplay ARGS... (NULL-terminated) under the default caps and a
 * time limit; stderr into err.txt, stdout into out.txt. */
static struct tp_result ar(double timeout_s, const char *a0, ...)
{
    char *argv[48];
    int n = 0;
    argv[n++] = (char *)bin;
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && n < 47; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    struct tp_caps c = {.timeout_s = timeout_s, .out = path_in("out.txt"),
                        .err = path_in("err.txt"), .err_fd = -1};
    return tp_run(argv, &c);
}

/* The check every refusal gets: exit 2 within max_s, the message naming
 * `names` (a flag, a file:line), no result folder left behind. */
static void refused(const char *what, struct tp_result r, double max_s, const char *names,
                    const char *no_dir)
{
    const char *err = tp_slurp(path_in("err.txt"));
    CHECKF(r.status == 2, "%s: refused with exit 2 (got %d; %s)", what, r.status, err);
    CHECKF(r.secs < max_s, "%s: refused within %.0f s (took %.2f s)", what, max_s, r.secs);
    CHECKF(strstr(err, names) != NULL, "%s: the message names %s: %s", what, names, err);
    if (no_dir)
        CHECKF(!exists(no_dir), "%s: no result folder %s is left behind", what, no_dir);
    int len = (int)strcspn(err, "\n");
    printf("NOTE %s: exit %d in %.2f s: %.*s\n", what, r.status, r.secs, len < 200 ? len : 200,
           err);
}

/* ---- 1. inputs under which every call can only fail ---------------------- */

/* An AgentX trace of 3 calls with the given block size. */
static void agentx_trace(const char *name, int block_size)
{
    char buf[4096];
    int n = snprintf(buf, sizeof buf, "{\"id\":\"bs%d\",\"block_size\":%d,\"hash_id_scope\":"
                     "\"local\",\"requests\":[", block_size, block_size);
    for (int c = 0; c < 3; c++) {
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "%s{\"t\":%d,\"type\":\"n\",\"in\":%d,\"out\":20,\"hash_ids\":[",
                      c ? "," : "", 10 * c, 64 * (c + 1));
        for (int i = 0; i < c + 1; i++)
            n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%d", i ? "," : "", i + 1);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "]}");
    }
    snprintf(buf + n, sizeof buf - (size_t)n, "]}\n");
    write_file(name, buf);
}

static void test_spin_triggers(void)
{
    /* Each of these made `sim` write requests.jsonl at 200+ MB/s forever:
     * every call failed at once, at no virtual time. */
    char *out = path_in("spin");
    refused("sim --max-model-len 10 (shorter than every call)",
            ar(10, "sim", "--max-model-len", "10", "--duration", "60", "-o", out, NULL), 5,
            "--max-model-len 10", out);
    refused("sim --block-size 3 (does not divide the trace's 64)",
            ar(10, "sim", "--block-size", "3", "--duration", "60", "-o", out, NULL), 5,
            "--block-size 3", out);
    agentx_trace("bs32.json", 32);
    agentx_trace("bs1.json", 1);
    refused("sim on an AgentX trace of block size 32 (engine 64)",
            ar(10, "sim", "--trace", path_in("bs32.json"), "--duration", "60", "-o", out, NULL),
            5, "bs32.json", out);
    refused("sim on an AgentX trace of block size 1 (engine 64)",
            ar(10, "sim", "--trace", path_in("bs1.json"), "--duration", "60", "-o", out, NULL), 5,
            "--block-size 64", out);
    refused("sweep --block-size 3",
            ar(10, "sweep", "--concurrency", "1,2", "--block-size", "3", "--duration", "60", "-o",
               path_in("spin-sweep"), NULL),
            5, "--block-size 3", NULL);
    refused("plan --max-model-len 10",
            ar(10, "plan", "--slo", "interactivity_p90=10", "--max-model-len", "10", NULL), 5,
            "--max-model-len 10", NULL);
    /* A block size the trace can use still runs. */
    struct tp_result r = ar(30, "sim", "--trace", path_in("bs32.json"), "--block-size", "32",
                            "--duration", "60", "--quiet", "-o", path_in("bs32-ok"), NULL);
    CHECKF(r.status == 0, "sim with --block-size 32 on the trace of block size 32 runs (exit %d)",
           r.status);

    /* Records that can only fail, refused by the readers with their line
     * (or skipped under --skip-bad). */
    write_file("mc0.jsonl",
               "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 5, \"hash_ids\": []}\n"
               "{\"timestamp\": 10, \"input_length\": 700, \"output_length\": 5, "
               "\"hash_ids\": [1, 2]}\n");
    refused("Mooncake input_length 0",
            ar(10, "sim", "--trace", path_in("mc0.jsonl"), "--mode", "timestamp", "--duration",
               "60", "-o", out, NULL),
            5, "mc0.jsonl:1:1: input_length", out);
    r = ar(30, "sim", "--trace", path_in("mc0.jsonl"), "--skip-bad", "--mode", "timestamp",
           "--duration", "60", "--quiet", "-o", path_in("mc0-skip"), NULL);
    CHECKF(r.status == 0 && strstr(tp_slurp(path_in("err.txt")), "skipped 1 bad record"),
           "Mooncake input_length 0 under --skip-bad: skipped and said, the rest runs (exit %d)",
           r.status);
    write_file("az0.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                          "2023-11-16 18:17:03.9799600,0,0\n"
                          "2023-11-16 18:17:04.0319600,3180,8\n");
    refused("Azure row 0,0",
            ar(10, "sim", "--trace", path_in("az0.csv"), "--mode", "timestamp", "--duration", "60",
               "-o", out, NULL),
            5, "az0.csv:2:", out);
    write_file("burst0.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,"
                             "Log Type\n5,ChatGPT,0,10,10,Conversation log\n");
    refused("BurstGPT Request tokens 0", ar(10, "trace", "stats", path_in("burst0.csv"), NULL), 5,
            "burst0.csv:2:", NULL);
    write_file("native0.jsonl",
               "{\"format\":\"agentreplay-trace\",\"version\":1,\"scopes\":1}\n"
               "{\"session\":0,\"scope\":0,\"block_size\":64}\n"
               "{\"t\":0,\"in\":0,\"out\":3,\"ids\":[]}\n");
    refused("native \"in\": 0", ar(10, "trace", "stats", path_in("native0.jsonl"), NULL), 5,
            "native0.jsonl:3:1: in", NULL);
    write_file("agentx0.json", "{\"id\":\"z\",\"block_size\":64,\"requests\":[{\"t\":0,\"type\":"
                               "\"n\",\"in\":0,\"out\":3,\"hash_ids\":[]}]}\n");
    refused("AgentX \"in\": 0", ar(10, "trace", "stats", path_in("agentx0.json"), NULL), 5,
            "agentx0.json: session 0", NULL);
}

/* ---- 2. sizes from input -------------------------------------------------- */

/* A FIFO fed by a child with `head`, then `unit` over and over (until the
 * reader goes): a file of unbounded size that takes no disk. */
static pid_t fifo_feed(const char *name, const char *head, const char *unit)
{
    char *p = path_in(name);
    unlink(p);
    if (mkfifo(p, 0600))
        return -1;
    pid_t w = fork();
    if (w == 0) {
        signal(SIGPIPE, SIG_DFL);
        alarm(60);
        int fd = open(p, O_WRONLY);
        if (fd < 0)
            _exit(1);
        if (write(fd, head, strlen(head)) < 0)
            _exit(1);
        char buf[65536];
        size_t k = strlen(unit), n = 0;
        while (n + k <= sizeof buf) {
            memcpy(buf + n, unit, k);
            n += k;
        }
        while (write(fd, buf, n) > 0) {
        }
        _exit(0);
    }
    return w;
}

static void fifo_done(pid_t w)
{
    if (w > 0) {
        kill(w, SIGKILL);
        waitpid(w, NULL, 0);
    }
}

static void test_memory_triggers(void)
{
    refused("trace stats /dev/zero", ar(10, "trace", "stats", "/dev/zero", NULL), 5,
            "/dev/zero:1:1", NULL);
    refused("trace stats --format mooncake /dev/zero",
            ar(10, "trace", "stats", "--format", "mooncake", "/dev/zero", NULL), 5,
            "/dev/zero:1:1: a NUL byte", NULL);
    refused("trace stats --format agentx /dev/zero",
            ar(10, "trace", "stats", "--format", "agentx", "/dev/zero", NULL), 5,
            "/dev/zero:1:1: a NUL byte", NULL);
    refused("sim --gpu /dev/zero", ar(10, "sim", "--gpu", "/dev/zero", "-o", path_in("m1"), NULL),
            5, "--gpu: /dev/zero: more than the 4 MiB", path_in("m1"));
    refused("sim --model /dev/zero",
            ar(10, "sim", "--model", "/dev/zero", "-o", path_in("m1"), NULL), 5,
            "--model: /dev/zero: more than the 4 MiB", path_in("m1"));
    refused("bench-decode --model /dev/zero", ar(10, "bench-decode", "--model", "/dev/zero", NULL),
            5, "--model: /dev/zero", NULL);
    refused("sim --arrival poisson:1e9",
            ar(10, "sim", "--arrival", "poisson:1e9", "--duration", "60", "-o", path_in("m1"),
               NULL),
            5, "--arrival", path_in("m1"));
    refused("sim --arrival poisson:1000 for a day (offered calls beyond the memory bound)",
            ar(10, "sim", "--arrival", "poisson:1000", "--duration", "86400", "-o", path_in("m1"),
               NULL),
            5, "--arrival 1000 calls/s over --duration 86400 s", path_in("m1"));
    refused("sim --concurrency 1000000 (waiting calls beyond the memory bound)",
            ar(10, "sim", "--concurrency", "1000000", "--duration", "60", "-o", path_in("m1"),
               NULL),
            5, "--concurrency 1000000", path_in("m1"));

    /* A 2 GB sparse Mooncake file: one good line, then zeros (it was
     * refused only after 2.1 GB had been read into memory). */
    char *sp = path_in("sparse.jsonl");
    write_file("sparse.jsonl", "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 5, "
                               "\"hash_ids\": [1, 2]}\n");
    CHECK(truncate(sp, 2LL << 30) == 0, "a 2 GB sparse file made");
    refused("trace stats on a 2 GB sparse Mooncake file", ar(10, "trace", "stats", sp, NULL), 5,
            "sparse.jsonl:2:1: a NUL byte", NULL);
    refused("sim --model on a 2 GB sparse file", ar(10, "sim", "--model", sp, "-o", path_in("m1"),
                                                     NULL),
            5, "2 GiB, more than the 4 MiB", path_in("m1"));
    refused("an AgentX document of 2 GB", ar(10, "trace", "stats", "--format", "agentx", sp, NULL),
            5, "more than the 256 MiB of one JSON trace document", NULL);
    unlink(sp);

    /* A line that never ends, from a pipe: refused at 64 MiB. */
    pid_t w = fifo_feed("endless.jsonl", "{\"timestamp\": 0, \"input_length\": 7, "
                                         "\"output_length\": 5, \"hash_ids\": [", " ");
    refused("a Mooncake line that never ends (a pipe)",
            ar(20, "trace", "stats", path_in("endless.jsonl"), NULL), 10,
            "endless.jsonl:1:1: a line longer than 64 MiB", NULL);
    fifo_done(w);

    /* Names stored in every record: bounded where they are read. */
    char name[600];
    memset(name, 'm', 300);
    name[300] = 0;
    refused("trace synth --model of 300 bytes",
            ar(10, "trace", "synth", "--sessions", "2", "--model", name, "-o", path_in("s.jsonl"),
               NULL),
            5, "--model", NULL);
    char doc[1024];
    snprintf(doc, sizeof doc, "{\"id\":\"n\",\"block_size\":64,\"requests\":[{\"t\":0,\"type\":"
             "\"n\",\"model\":\"%s\",\"in\":10,\"out\":3,\"hash_ids\":[]}]}\n", name);
    write_file("bigname.json", doc);
    refused("an AgentX call whose model name is 300 bytes",
            ar(10, "trace", "stats", path_in("bigname.json"), NULL), 5,
            "model: 300 bytes, more than the 256", NULL);
    refused("trace synth of 10 million sessions (calls beyond LIMIT_SYNTH_CALLS)",
            ar(10, "trace", "synth", "--sessions", "10000000", "-o", path_in("s.jsonl"), NULL), 5,
            "--sessions 10000000", NULL);
}

/* ---- 3. the engine sizes nothing from prompt + max_tokens ------------------ */

static int done_status[8];
static void on_done(struct target_call *c, int64_t t, enum target_status st)
{
    done_status[c->id] = (int)st + 1;
}
static const struct target_cb cbs = {.done = on_done};

/* In a capped child: requests with max_tokens of 1e12, 5e11 and INT64_MAX
 * end as too long (serve aborted on them: sched_submit sized buffers from
 * prompt + max_tokens before the context check), and 100,000 waiting
 * requests of 100k tokens fit in 1 GB (they held 25 KB of arrays each). */
static void test_engine_sizing(void)
{
    pid_t p = fork();
    if (p == 0) {
        if (!TP_ASAN)
            tp_limit(RLIMIT_AS, 1024);
        alarm(60);
        char err[ERR_LEN];
        struct engine_config ec;
        engine_config_defaults(&ec);
        struct loop *l = loop_virtual_create();
        struct engine *e = engine_create(&ec, l, err);
        if (!e)
            _exit(10);
        const int64_t huge[] = {1000000000000LL, 500000000000LL, INT64_MAX};
        struct target_call c[3];
        for (int i = 0; i < 3; i++) {
            memset(&c[i], 0, sizeof c[i]);
            c[i].id = (uint64_t)i + 1;
            c[i].session_key = 7;
            c[i].prompt_tokens = 100;
            c[i].max_tokens = huge[i];
            c[i].cb = &cbs;
            if (engine_submit(e, &c[i], err))
                _exit(11);
        }
        loop_run(l);
        for (int i = 0; i < 3; i++)
            if (done_status[i + 1] != (int)TARGET_ERR_TOO_LONG + 1)
                _exit(12 + i);
        enum { N = 100000 };
        struct target_call *w = calloc(N, sizeof *w);
        if (!w)
            _exit(20);
        for (int i = 0; i < N; i++) {
            w[i].id = 0;
            w[i].session_key = (uint64_t)i + 100;
            w[i].prompt_tokens = 100000;
            w[i].max_tokens = 100;
            w[i].cb = &cbs;
            if (engine_submit(e, &w[i], err))
                _exit(21);
        }
        _exit(0); /* the submits are the test; the engine is dropped */
    }
    struct tp_result r = tp_wait(p, mono_s(), 90);
    CHECKF(r.status == 0, "max_tokens 1e12, 5e11 and INT64_MAX end as too long without an "
                          "allocation of their size, and 100,000 waiting requests of 100k "
                          "tokens fit in 1 GB (child exit %d)", r.status);
    printf("NOTE engine: huge max_tokens and 100,000 waiting requests: exit %d in %.2f s\n",
           r.status, r.secs);
}

/* ---- 4. extreme but valid ------------------------------------------------- */

static void test_extreme(void)
{
    /* Depends on the replayer's O(1) per-call bookkeeping and on calls in
     * flight sharing their trace call's chain instead of a copy each
     * (replay/replay_call.c: chain_get): at 100,000 sessions the copies
     * were 690 MB. */
    char *out = path_in("c100k");
    struct tp_result r = ar(60, "sim", "--concurrency", "100000", "--duration", "120", "--quiet",
                            "-o", out, NULL);
    char run[600];
    snprintf(run, sizeof run, "%s/run.json", out);
    json_t *j = json_load_file(run, 0, NULL);
    CHECKF(r.status == 0 && r.secs < 60 && j,
           "sim --concurrency 100000 --duration 120 completes with a run.json in under a minute "
           "under 1 GB (exit %d, %.1f s)", r.status, r.secs);
    json_decref(j);
    printf("NOTE sim --concurrency 100000 --duration 120: exit %d in %.2f s\n", r.status, r.secs);

    /* Depends on the same: each run of the search holds 100,000 sessions
     * (five runs, 16 to 256 GPUs). Under AddressSanitizer, which lifts the
     * memory cap and runs several times slower, a fifth of the sessions
     * walks the same code. */
    const char *sessions = TP_ASAN ? "20000" : "100000";
    r = ar(120, "plan", "--sessions", sessions, "--tp", "16", "--slo", "interactivity_p90=100",
           "--duration", "120", "--max-gpus", "256", NULL);
    char want[64];
    snprintf(want, sizeof want, "%s sessions", sessions);
    bool answered = strstr(tp_slurp(path_in("out.txt")), want) != NULL;
    CHECKF(r.status == 0 && answered,
           "plan --sessions %s answers within two minutes under 1 GB (exit %d, %.1f s)", sessions,
           r.status, r.secs);
    printf("NOTE plan --sessions %s: exit %d in %.2f s\n", sessions, r.status, r.secs);
}

/* ---- 5. a run whose every call fails at once ------------------------------- */

/* A target that refuses every call at submit. */
static int fail_submit(struct target *t, struct target_call *c, char *err)
{
    return err_set(err, "refused");
}
static void fail_cancel(struct target *t, struct target_call *c) {}
static void fail_stats(struct target *t, struct target_stats *s) { memset(s, 0, sizeof *s); }
static void fail_destroy(struct target *t) {}
static const struct target_ops fail_ops = {.submit = fail_submit, .cancel = fail_cancel,
                                           .stats = fail_stats, .destroy = fail_destroy};

/* Depends on the replayer's progress guarantee (replay/replay.c): virtual
 * time must advance, and a run that makes none stops with a message. Run
 * in a child under 100 MB of output and 10 s. */
static void test_all_fail(void)
{
    pid_t p = fork();
    if (p == 0) {
        tp_limit(RLIMIT_FSIZE, 100);
        if (!TP_ASAN)
            tp_limit(RLIMIT_AS, 1024);
        alarm(10);
        char err[ERR_LEN] = "";
        struct run_trace tr;
        struct trace_read_opts o = {0};
        if (run_trace_load(&tr, NULL, &o, err))
            _exit(10);
        struct replay_config rc;
        replay_config_defaults(&rc);
        rc.duration_ns = 600 * NS_PER_S;
        struct loop *l = loop_virtual_create();
        struct target tg = {.ops = &fail_ops, .loop = l, .gpus = 1};
        char *dir = path_in("allfail");
        mkdir(dir, 0755);
        struct run_spec s = {.kind = "sim", .trace = &tr, .rc = &rc, .dir = dir, .loop = l,
                             .tg = &tg};
        struct run_result res;
        void *run;
        int rc2 = run_replay(&s, &res, &run, err);
        fprintf(stderr, "all-fail run: exit code %d: %s\n", rc2, err);
        _exit(rc2 != EXIT_OK && err[0] ? 0 : 30);
    }
    struct tp_result r = tp_wait(p, mono_s(), 15);
    CHECK_TRIGGER(pending, r.status == 0, "a run whose every call fails at once",
                  "a run whose every call fails at once stops with a message and a non-zero "
                  "code within 10 s, under 100 MB of output (child %d, %.1f s)",
                  r.status, r.secs);
    printf("NOTE a run whose every call fails: child exit %d in %.2f s\n", r.status, r.secs);
}

/* ---- 6. writes ------------------------------------------------------------ */

static void test_writes(void)
{
    const struct {
        const char *what;
        char *argv[12];
    } to_full[] = {
        {"trace stats > /dev/full", {"trace", "stats", "traces/samples", NULL}},
        {"engine info > /dev/full", {"engine", "info", NULL}},
        {"--help > /dev/full", {"--help", NULL}},
        {"bench-decode > /dev/full", {"bench-decode", NULL}},
        {"fidelity > /dev/full", {"fidelity", NULL}},
    };
    for (size_t i = 0; i < ARRAY_LEN(to_full); i++) {
        char *argv[16] = {(char *)bin};
        int n = 1;
        for (int k = 0; to_full[i].argv[k]; k++)
            argv[n++] = to_full[i].argv[k];
        argv[n] = NULL;
        struct tp_caps c = {.timeout_s = 20, .out = "/dev/full", .err = path_in("err.txt"),
                            .err_fd = -1};
        struct tp_result r = tp_run(argv, &c);
        const char *err = tp_slurp(path_in("err.txt"));
        CHECKF(r.status == 1 && strstr(err, "No space left on device"),
               "%s: exit 1 with a message (got %d: %s)", to_full[i].what, r.status, err);
    }
    struct tp_result r = ar(20, "trace", "synth", "--sessions", "4", "-o", "/dev/full", NULL);
    CHECKF(r.status == 1, "trace synth -o /dev/full: exit 1 (got %d)", r.status);
    r = ar(30, "sim", "--duration", "120", "--quiet", "--chrome-trace", "/dev/full", "-o",
           path_in("w1"), NULL);
    CHECKF(r.status == 1 && strstr(tp_slurp(path_in("err.txt")), "--chrome-trace /dev/full"),
           "sim --chrome-trace /dev/full: exit 1 naming it (got %d: %s)", r.status,
           tp_slurp(path_in("err.txt")));
    /* A full disk under the records: 50 KB may be written, then EFBIG. */
    char *argv[] = {(char *)bin, "sim", "--duration", "600", "--quiet", "-o", path_in("w2"), NULL};
    struct tp_caps c = {.timeout_s = 30, .fsize_mb = 50e3 / TP_MB, .ignore_xfsz = true,
                        .err = path_in("err.txt"), .err_fd = -1};
    r = tp_run(argv, &c);
    char run[600];
    snprintf(run, sizeof run, "%s/run.json", path_in("w2"));
    json_t *j = json_load_file(run, 0, NULL);
    CHECKF(r.status == 1 && strstr(tp_slurp(path_in("err.txt")), "writing records"),
           "sim on a full disk: exit 1 with the records' write error (got %d: %s)", r.status,
           tp_slurp(path_in("err.txt")));
    CHECKF(j && json_is_true(json_object_get(j, "partial")),
           "sim on a full disk: run.json says partial");
    json_decref(j);
}

/* ---- 7. messages and progress -------------------------------------------- */

static void test_messages(void)
{
    refused("plan --sessions x", ar(10, "plan", "--slo", "interactivity_p90=1", "--sessions", "x",
                                    NULL),
            5, "--sessions 'x'", NULL);
    refused("bench-decode --isl beyond the model's context",
            ar(10, "bench-decode", "--isl", "100000000", "--osl", "10", NULL), 5,
            "--isl 100000000 + --osl 10", NULL);
    refused("bench-decode --batch whose state slots do not fit",
            ar(10, "bench-decode", "--batch", "100000", "--isl", "100000", "--osl", "1000", NULL),
            5, "--batch 100000", NULL);
    refused("bench-decode --batch beyond the KV cache",
            ar(10, "bench-decode", "--batch", "200", "--isl", "100000", "--osl", "1000", NULL), 5,
            "needs 20211200 KV tokens", NULL);
    struct tp_result r = ar(10, "bench-decode", "--batch", "32", "--isl", "8000", "--osl", "500",
                            NULL);
    CHECKF(r.status == 0, "bench-decode of a setup that fits still runs (exit %d)", r.status);

    /* `plot results/demo` on a fresh clone (only the README's chart). */
    char *demo = path_in("fresh/results/demo");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp results/demo/pareto.png %s/ 2>/dev/null; true",
             demo, demo);
    CHECK(system(cmd) == 0, "a fresh results/demo");
    refused("plot results/demo before make run", ar(10, "plot", demo, "-o", path_in("pp"), NULL),
            5, "make run", NULL);

    /* Progress on a terminal while reading 60 trace files (a pty as
     * stderr). */
    char *many = path_in("many");
    mkdir(many, 0755);
    for (int i = 0; i < LIMIT_PROGRESS_FILES + 10; i++) {
        char name[64];
        snprintf(name, sizeof name, "many/t%03d.json", i);
        agentx_trace(name, 64);
    }
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    bool tty = m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0;
    int s = tty ? open(ptsname(m), O_RDWR | O_NOCTTY) : -1;
    if (s < 0) {
        SKIP("no pseudo-terminal here");
    } else {
        char *argv[] = {(char *)bin, "trace", "stats", many, NULL};
        struct tp_caps c = {.timeout_s = 20, .err_fd = s};
        r = tp_run(argv, &c);
        close(s);
        char buf[8192];
        ssize_t n = 0, k;
        int fl = fcntl(m, F_GETFL);
        fcntl(m, F_SETFL, fl | O_NONBLOCK);
        while (n < (ssize_t)sizeof buf - 1 &&
               (k = read(m, buf + n, sizeof buf - 1 - (size_t)n)) > 0)
            n += k;
        buf[n > 0 ? n : 0] = 0;
        CHECKF(r.status == 0 && strstr(buf, "reading traces:"),
               "trace stats of %d files on a terminal shows progress on stderr (exit %d)",
               LIMIT_PROGRESS_FILES + 10, r.status);
        r = ar(20, "trace", "stats", many, NULL);
        CHECKF(r.status == 0 && !strstr(tp_slurp(path_in("err.txt")), "reading traces"),
               "... and none when stderr is not a terminal");
    }
    if (m >= 0)
        close(m);
}

/* ---- 8. signals ------------------------------------------------------------ */

/* Starts argv, sends sig after delay_s, and checks it ends within one
 * second of the signal with exit 1 and a partial run.json in dir. */
static void signal_ends(const char *what, char *argv[], double delay_s, int sig,
                        const char *run_json)
{
    struct tp_caps c = {.timeout_s = delay_s + 10, .err = path_in("err.txt"), .err_fd = -1,
                        .out = path_in("out.txt")};
    double t0 = mono_s();
    pid_t p = tp_spawn(argv, &c);
    sleep_s(delay_s);
    double ts = mono_s();
    kill(p, sig);
    struct tp_result r = tp_wait(p, t0, delay_s + 10);
    double after = mono_s() - ts;
    CHECKF(r.status == 1 && after < 1.0,
           "%s: %s ends it within one second with exit 1 (exit %d, %.2f s after the signal; %s)",
           what, strsignal(sig), r.status, after, tp_slurp(path_in("err.txt")));
    if (run_json) {
        json_t *j = json_load_file(run_json, 0, NULL);
        CHECKF(j && json_is_true(json_object_get(j, "partial")),
               "%s: a valid run.json that says partial", what);
        json_decref(j);
    }
    printf("NOTE %s: %s: exit %d, %.2f s after the signal\n", what, strsignal(sig), r.status,
           after);
}

static void test_signals(void)
{
    char run[600];
    char *out = path_in("sig1");
    snprintf(run, sizeof run, "%s/run.json", out);
    const char *cc = test_shared("traces/agentic-cc");
    char shared[4096];
    snprintf(shared, sizeof shared, "%s", cc ? cc : "");
    char *a1[] = {(char *)bin, "sim", "--trace", shared, "--concurrency", "64", "--duration",
                  "1000000", "--quiet", "-o", out, NULL};
    if (cc)
        signal_ends("a long sim", a1, 1.0, SIGTERM, run);
    else
        SKIP("../shared/traces absent");
    out = path_in("sig2");
    snprintf(run, sizeof run, "%s/run.json", out);
    char *a2[] = {(char *)bin, "sim", "--concurrency", "16", "--duration", "1000000", "--quiet",
                  "-o", out, NULL};
    signal_ends("a long sim", a2, 1.0, SIGINT, run);
    char *a3[] = {(char *)bin, "plan", "--slo", "interactivity_p90=1", "--duration", "100000",
                  "--max-concurrency", "64", NULL};
    signal_ends("plan", a3, 1.0, SIGINT, NULL);
    /* A trace that never ends (a pipe of Mooncake lines): the signal stops
     * the read, and the run of what was read is interrupted at once. */
    pid_t w = fifo_feed("endless-trace.jsonl", "",
                        "{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 5, "
                        "\"hash_ids\": [1, 2]}\n");
    out = path_in("sig4");
    snprintf(run, sizeof run, "%s/run.json", out);
    char *a4[] = {(char *)bin, "sim", "--trace", path_in("endless-trace.jsonl"), "--duration",
                  "60", "--quiet", "-o", out, NULL};
    signal_ends("sim reading a trace that never ends", a4, 0.5, SIGINT, run);
    fifo_done(w);
}

/* ---- 9. the flag parser's fuzz harness over its seeds --------------------- */

static void test_flag_fuzz_seeds(void)
{
#define E(lit) {lit, sizeof(lit) - 1}
    static const struct {
        const char *s;
        size_t n;
    } edge[] = {
        E(""), E("\x00"), E("\x00--"), E("\x00-"), E("\x00--help"), E("\x00-h\n--x"),
        E("\x00--concurrency"), E("\x00--concurrency="), E("\x00--concurrency\n-1"),
        E("\x00--concurrency\n99999999999999999999"), E("\x00--duration\n1e400"),
        E("\x00--grace\nnone\n--grace\n-1"), E("\x01--layout\n16x"), E("\x01--backend\n,,,"),
        E("\x02--slo\n=,=,="), E("\x00--arrival\npoisson:"), E("\x00--arrival\n:::"),
        E("\x00-o"), E("\x00--quiet=1"), E("\x00\xff\xfe"), E("\x0b--format\n"), E("\x05--url\n"),
    };
#undef E
    int n = 0;
    for (size_t i = 0; i < ARRAY_LEN(edge); i++) {
        uint8_t *b = malloc(edge[i].n + 1); /* exact size: overreads show */
        memcpy(b, edge[i].s, edge[i].n);
        fuzz_one_flags(b, edge[i].n);
        free(b);
        n++;
    }
    /* Its seeds, and the inputs it once failed on. */
    static const char *const dirs[] = {"tests/fuzz/seeds/fuzz_flags",
                                       "tests/fuzz/regressions/fuzz_flags"};
    for (size_t di = 0; di < ARRAY_LEN(dirs); di++) {
        DIR *d = opendir(dirs[di]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", dirs[di], e->d_name);
            FILE *f = fopen(p, "rb");
            if (!f)
                continue;
            uint8_t buf[4096];
            size_t k = fread(buf, 1, sizeof buf, f);
            fclose(f);
            fuzz_one_flags(buf, k);
            n++;
        }
        if (d)
            closedir(d);
    }
    CHECKF(n > 20, "the flag parser's harness over %d seeds, regressions and edge cases (it "
                   "asserts)", n);
}

int main(void)
{
    bin = test_bin();
    if (access(bin, X_OK)) {
        SKIP("the agentreplay binary is not built");
        return test_report();
    }
    snprintf(tmp, sizeof tmp, "/tmp/test_hostile.XXXXXX");
    if (!mkdtemp(tmp)) {
        CHECK(0, "mkdtemp");
        return test_report();
    }
    test_flag_fuzz_seeds();
    test_spin_triggers();
    test_memory_triggers();
    test_engine_sizing();
    test_all_fail();
    test_writes();
    test_messages();
    test_signals();
    test_extreme();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return test_report();
}
