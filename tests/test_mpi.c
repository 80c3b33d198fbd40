/* test_mpi.c: runs split across MPI ranks (replay/dist.h, dist_load.h,
 * pool.h).
 *
 * In process, without MPI:
 *   - the launcher's environment: Open MPI's, PMI's and srun's pairs give
 *     the size and rank; a Slurm batch script's variables, bad values and
 *     nothing give a job of one;
 *   - the shares of a split run (replay_set_share) on the virtual clock:
 *     open-loop arrivals (Poisson, gamma, a Mooncake trace's timestamps)
 *     split into N shares are exactly the one run's calls at the same
 *     intended times; session lanes: each rank plays lanes i % N == rank,
 *     every lane starts its first tree as in the one run, no two ranks
 *     share a tree instance.
 * End to end, with `mpirun --oversubscribe -np 2` and `-np 4` on loopback
 * (skipped, with a SKIP line, where mpirun or the MPI build is missing):
 *   - load against `serve --fake`: one requests.jsonl holding every call
 *     exactly once (as many lines as run.json's calls and the ranks'
 *     calls, no (session, call) twice, ordered by intended start, as many
 *     completed as the server counted), run.json complete with a "ranks"
 *     entry per rank (calls, clock offset under a millisecond here);
 *   - sweep (and sim --repeats, plan) across ranks: the result folder and
 *     the printed table are byte for byte those of one process;
 *   - rank 1 killed (SIGKILL) in the middle of a load run: mpirun ends the
 *     job, and rank 0 leaves a valid result marked partial and interrupted
 *     whose every line is a record it counted, with no spool left.
 * Every child runs under a time limit; mpirun is stopped with its ranks. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "engine/clock/loop.h"
#include "engine/target.h"
#include "replay/dist.h"
#include "replay/records.h"
#include "replay/replay.h"
#include "replay/run.h"
#include "tests/testhelp.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* its spawn: ours keeps a process group */
#include "tests/testproc.h"
#pragma GCC diagnostic pop
#include "tests/testmpi.h"
#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

static char tmpdir[256];

/* ---- the launcher's environment ----------------------------------------- */

static void clear_env(void)
{
    const char *v[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK",
                       "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_NTASKS"};
    for (size_t i = 0; i < ARRAY_LEN(v); i++)
        unsetenv(v[i]);
}

static void test_env(void)
{
    clear_env();
    CHECK(dist_env_size() == 1 && dist_env_rank() == 0, "no launcher: a job of one");
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    CHECKF(dist_env_size() == 4 && dist_env_rank() == 2, "mpirun: %d/%d", dist_env_rank(),
           dist_env_size());
    clear_env();
    setenv("PMI_SIZE", "3", 1);
    setenv("PMI_RANK", "1", 1);
    CHECK(dist_env_size() == 3 && dist_env_rank() == 1, "PMI");
    clear_env();
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    setenv("SLURM_PROCID", "7", 1);
    CHECK(dist_env_size() == 8 && dist_env_rank() == 7, "srun");
    clear_env();
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_PROCID", "0", 1);
    CHECK(dist_env_size() == 1, "a batch script is not a job step");
    clear_env();
    setenv("OMPI_COMM_WORLD_SIZE", "4x", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    CHECK(dist_env_size() == 1, "a bad size is ignored");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    CHECK(dist_env_size() == 1, "a rank outside the job is ignored");
    clear_env();
    if (!dist_compiled()) {
        char err[ERR_LEN] = "";
        setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
        setenv("OMPI_COMM_WORLD_RANK", "0", 1);
        CHECK(dist_init(err) != 0 && strstr(err, "without MPI"), "no MPI: a job of two refused");
        clear_env();
    }
}

/* ---- shares on the virtual clock ---------------------------------------- */

struct rec {
    int64_t intended;
    char session[112];
    uint32_t call;
    int lane;
    int64_t tree;
};

struct recs {
    struct rec *v;
    size_t n, cap;
};

static void collect(void *arg, const struct replay_record *r)
{
    struct recs *rs = arg;
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? 2 * rs->cap : 1024;
        rs->v = xrealloc(rs->v, rs->cap * sizeof *rs->v);
    }
    struct rec *x = &rs->v[rs->n++];
    x->intended = r->intended_start_ns;
    snprintf(x->session, sizeof x->session, "%s", r->session);
    x->call = r->call;
    x->lane = r->lane;
    x->tree = r->tree;
}

/* Share rank of ranks of cfg on t against the fake target; its records. */
static int run_share(const struct trace *t, const struct replay_config *cfg, int rank, int ranks,
                     struct recs *out)
{
    char err[ERR_LEN];
    struct target_fake_config fc = {.overhead_ns = 20 * NS_PER_MS, .prefill_ns_per_token = 2000,
                                    .tpot_ns = 5 * NS_PER_MS, .chunk_tokens = 1, .gpus = 1,
                                    .cache = true};
    struct loop *l = loop_virtual_create();
    struct target *tg = target_fake_create(&fc, l);
    struct replay *r = replay_create(cfg, t, tg, l, err);
    if (!r) {
        fprintf(stderr, "replay_create: %s\n", err);
        target_destroy(tg);
        loop_destroy(l);
        return -1;
    }
    replay_set_share(r, rank, ranks);
    FILE *null = fopen("/dev/null", "w");
    struct records_writer *w = records_from_stream(null, false);
    records_set_observer(w, collect, out);
    replay_set_outputs(r, w, NULL);
    replay_start(r);
    while (!replay_finished(r))
        if (loop_run(l), !replay_finished(r) && !l->stopped)
            break;
    int ok = replay_finished(r) ? 0 : -1;
    records_close(w, NULL);
    fclose(null);
    replay_destroy(r);
    target_destroy(tg);
    loop_destroy(l);
    return ok;
}

static int rec_cmp(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    if (x->intended != y->intended)
        return x->intended < y->intended ? -1 : 1;
    int c = strcmp(x->session, y->session);
    return c ? c : (int)x->call - (int)y->call;
}

/* Open-loop arrivals: the union of the shares is the one run. */
static void check_open_loop(const char *what, const struct trace *t, const struct replay_config *cfg,
                            int ranks)
{
    struct recs whole = {0}, parts = {0};
    CHECKF(run_share(t, cfg, 0, 1, &whole) == 0, "%s: the whole run", what);
    for (int r = 0; r < ranks; r++) {
        size_t before = parts.n;
        CHECKF(run_share(t, cfg, r, ranks, &parts) == 0, "%s: share %d of %d", what, r, ranks);
        CHECKF(parts.n > before, "%s: share %d of %d sends calls", what, r, ranks);
    }
    qsort(whole.v, whole.n, sizeof *whole.v, rec_cmp);
    qsort(parts.v, parts.n, sizeof *parts.v, rec_cmp);
    size_t diff = whole.n == parts.n ? 0 : 1;
    for (size_t i = 0; !diff && i < whole.n; i++)
        diff += rec_cmp(&whole.v[i], &parts.v[i]) != 0;
    CHECKF(whole.n > 10 && !diff, "%s: %d shares = the one run (%zu calls, %zu in shares)", what,
           ranks, whole.n, parts.n);
    free(whole.v);
    free(parts.v);
}

/* Session lanes: a rank's lanes, their first trees and calls, no tree
 * twice. */
static void check_sessions(const struct trace *t, const struct replay_config *cfg, int ranks)
{
    struct recs whole = {0};
    CHECK(run_share(t, cfg, 0, 1, &whole) == 0, "sessions: the whole run");
    int n_lanes = cfg->concurrency;
    struct rec *first = xcalloc((size_t)n_lanes, sizeof *first);
    for (size_t i = 0; i < whole.n; i++) {
        struct rec *x = &whole.v[i];
        if (x->lane >= 0 && x->lane < n_lanes && x->tree == x->lane &&
            (!first[x->lane].session[0] || rec_cmp(x, &first[x->lane]) < 0))
            first[x->lane] = *x;
    }
    int64_t *tree_rank = xcalloc(4096, sizeof *tree_rank);
    int wrong_lane = 0, same_start = 0, shared = 0, max_tree = 0;
    for (int r = 0; r < ranks; r++) {
        struct recs part = {0};
        CHECKF(run_share(t, cfg, r, ranks, &part) == 0, "sessions: share %d of %d", r, ranks);
        bool seen[64] = {0};
        for (size_t i = 0; i < part.n; i++) {
            struct rec *x = &part.v[i];
            wrong_lane += x->lane % ranks != r;
            if (x->tree >= 0 && x->tree < 4096) {
                shared += tree_rank[x->tree] && tree_rank[x->tree] != r + 1;
                tree_rank[x->tree] = r + 1;
                if (x->tree > max_tree)
                    max_tree = (int)x->tree;
            }
            if (x->lane >= 0 && x->lane < 64 && !seen[x->lane] && x->tree == x->lane) {
                /* its earliest call of the first tree */
                struct rec best = *x;
                for (size_t k = 0; k < part.n; k++)
                    if (part.v[k].tree == x->lane && rec_cmp(&part.v[k], &best) < 0)
                        best = part.v[k];
                /* The same call, not the same time: the system idle cap
                 * sees only its own rank's calls in flight, and a rank's
                 * measured phase starts when its own warm-up ends. */
                same_start += !strcmp(best.session, first[x->lane].session) &&
                              best.call == first[x->lane].call;
                seen[x->lane] = true;
            }
        }
        free(part.v);
    }
    CHECKF(wrong_lane == 0, "sessions: every call on its rank's lanes (%d not)", wrong_lane);
    CHECKF(same_start == n_lanes, "sessions: %d of %d lanes start as in the one run", same_start,
           n_lanes);
    CHECKF(shared == 0 && max_tree >= n_lanes, "sessions: %d tree instances shared by ranks "
           "(recycled up to %d)", shared, max_tree);
    free(tree_rank);
    free(first);
    free(whole.v);
}

static void test_shares(void)
{
    char err[ERR_LEN];
    struct run_trace tr;
    struct trace_read_opts tro = {0};
    if (run_trace_load(&tr, NULL, &tro, err)) {
        CHECKF(0, "the built-in sample: %s", err);
        return;
    }
    struct replay_config c;
    replay_config_defaults(&c);
    c.duration_ns = 300 * NS_PER_S;
    c.mode = REPLAY_MODE_POISSON;
    c.rate = 2;
    check_open_loop("poisson", tr.tr, &c, 3);
    c.mode = REPLAY_MODE_GAMMA;
    c.gamma_cv = 2;
    check_open_loop("gamma", tr.tr, &c, 4);
    replay_config_defaults(&c);
    c.duration_ns = 600 * NS_PER_S;
    c.concurrency = 8;
    check_sessions(tr.tr, &c, 3);
    run_trace_free(&tr);

    const char *mc = test_shared("traces/mooncake/conversation_trace.jsonl");
    if (!mc) {
        SKIP("../shared/traces absent: timestamp shares not checked");
        return;
    }
    if (run_trace_load(&tr, mc, &tro, err)) {
        CHECKF(0, "%s: %s", mc, err);
        return;
    }
    replay_config_defaults(&c);
    c.duration_ns = 120 * NS_PER_S;
    c.mode = REPLAY_MODE_TIMESTAMP;
    check_open_loop("timestamp", tr.tr, &c, 2);
    run_trace_free(&tr);
}

/* ---- processes ---------------------------------------------------------- */

/* Starts argv in its own process group, in cwd (NULL: here), output to
 * log. */
static pid_t start(char *const argv[], const char *cwd, const char *log)
{
    pid_t p = fork();
    if (p == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        test_output_to(log);
        if (cwd && chdir(cwd))
            _exit(126);
        /* Leak checks off in the ranks of a sanitizer build: Open MPI's
         * own allocations at exit are not ours. */
        if (!strcmp(argv[0], "mpirun"))
            setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    if (p > 0)
        setpgid(p, p);
    return p;
}

/* Exit status of p within timeout_s, else -999 after stopping its group
 * (SIGTERM, which mpirun passes to its ranks, then SIGKILL). */
static int finish(pid_t p, double timeout_s)
{
    double end = mono_s() + timeout_s;
    int st;
    for (;;) {
        pid_t r = waitpid(p, &st, WNOHANG);
        if (r == p)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1 - WTERMSIG(st);
        if (r < 0)
            return -998;
        if (mono_s() > end)
            break;
        sleep_s(0.02);
    }
    kill(-p, SIGTERM);
    sleep_s(3);
    kill(-p, SIGKILL);
    waitpid(p, &st, 0);
    return -999;
}

static int run_in(char *const argv[], const char *cwd, const char *log, double timeout_s)
{
    return finish(start(argv, cwd, log), timeout_s);
}

static bool have_mpirun(void) { return system("command -v mpirun >/dev/null 2>&1") == 0; }

/* ---- load across ranks -------------------------------------------------- */

struct server {
    pid_t pid;
    int port;
};

static int serve_start(struct server *s)
{
    char port_file[512], log[512];
    snprintf(port_file, sizeof port_file, "%s/serve.port", tmpdir);
    snprintf(log, sizeof log, "%s/serve.log", tmpdir);
    unlink(port_file);
    char *argv[] = {(char *)test_bin(), "serve", "--fake", "--fake-ttft-ms", "5", "--fake-tpot-ms",
                    "1", "--listen", "127.0.0.1:0", "--port-file", port_file, NULL};
    s->pid = start(argv, NULL, log);
    s->port = wait_port(port_file);
    return s->port > 0 ? 0 : -1;
}

static void serve_stop(struct server *s)
{
    kill(-s->pid, SIGTERM);
    finish(s->pid, 10);
}

/* Reads out/requests.jsonl: its lines (-1 if unreadable), the completed
 * ones, whether sorted by intended start, and repeated (session, call)
 * pairs. */
struct lines_check {
    long lines, completed, repeated;
    bool sorted, parse;
};

static int key_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void read_lines(const char *out, struct lines_check *lc)
{
    memset(lc, 0, sizeof *lc);
    lc->sorted = lc->parse = true;
    char path[600];
    snprintf(path, sizeof path, "%s/requests.jsonl", out);
    FILE *f = fopen(path, "r");
    if (!f) {
        lc->lines = -1;
        return;
    }
    char *line = NULL, **keys = NULL;
    size_t cap = 0, kcap = 0;
    int64_t last = INT64_MIN;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *r = json_loads(line, 0, &je);
        if (!r) {
            lc->parse = false;
            continue;
        }
        int64_t t = json_integer_value(json_object_get(r, "intended_start_ns"));
        lc->sorted &= t >= last;
        last = t;
        lc->completed += json_is_null(json_object_get(r, "error"));
        if ((size_t)lc->lines == kcap) {
            kcap = kcap ? 2 * kcap : 1024;
            keys = xrealloc(keys, kcap * sizeof *keys);
        }
        char k[256];
        snprintf(k, sizeof k, "%s#%lld", json_string_value(json_object_get(r, "session")),
                 (long long)json_integer_value(json_object_get(r, "call")));
        keys[lc->lines++] = xstrdup(k);
        json_decref(r);
    }
    qsort(keys, (size_t)lc->lines, sizeof *keys, key_cmp);
    for (long i = 1; i < lc->lines; i++)
        lc->repeated += !strcmp(keys[i], keys[i - 1]);
    for (long i = 0; i < lc->lines; i++)
        free(keys[i]);
    free(keys);
    free(line);
    fclose(f);
}

static json_t *read_run(const char *out)
{
    char path[600];
    snprintf(path, sizeof path, "%s/run.json", out);
    json_error_t je;
    return json_load_file(path, 0, &je);
}

/* The load tests start their trees at turn 0 with think times cut to
 * 0.2 s (--no-warm-start --think-cap 0.2): under the agentx rules the
 * sample trace's warm-up and recorded delays would hold the first
 * measured call back by tens of seconds. */
static void test_load(struct server *s, int np)
{
    char out[512], log[512], url[64], what[32];
    snprintf(what, sizeof what, "load -np %d", np);
    snprintf(out, sizeof out, "%s/load-%d", tmpdir, np);
    snprintf(log, sizeof log, "%s/load-%d.log", tmpdir, np);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    long before = server_completed(s->port);
    char *args[] = {"load", "--url", url, "--trace", "traces/samples/agentic-synth.jsonl",
                    "--concurrency", "8", "--duration", "2", "--no-warm-start", "--think-cap",
                    "0.2", "--quiet", "-o", out, NULL};
    char *argv[40];
    mpirun_argv(argv, NULL, np, args);
    int rc = run_in(argv, NULL, log, 60);
    CHECKF(rc == 0, "%s: exit %d (see %s)", what, rc, log);
    json_t *run = read_run(out);
    CHECKF(run != NULL, "%s: run.json", what);
    if (!run)
        return;
    long total = (long)json_integer_value(json_object_get(
        json_object_get(json_object_get(run, "metrics"), "requests"), "total"));
    CHECKF(json_is_false(json_object_get(run, "partial")), "%s: complete", what);
    json_t *ranks = json_object_get(run, "ranks");
    CHECKF(json_array_size(ranks) == (size_t)np, "%s: %zu ranks in run.json", what,
           json_array_size(ranks));
    long sum = 0;
    int idle = 0, far = 0, ended = 0;
    size_t i;
    json_t *r;
    json_array_foreach(ranks, i, r) {
        long c = (long)json_integer_value(json_object_get(r, "calls"));
        sum += c;
        idle += c == 0;
        far += llabs(json_integer_value(json_object_get(r, "clock_offset_ns"))) > NS_PER_MS;
        ended += json_is_true(json_object_get(r, "ended"));
    }
    CHECKF(sum == total && total > 20, "%s: ranks' calls %ld = run's %ld", what, sum, total);
    CHECKF(idle == 0 && ended == np, "%s: every rank called (%d idle) and ended (%d)", what, idle,
           ended);
    CHECKF(far == 0, "%s: clock offsets under 1 ms on one machine (%d not)", what, far);
    struct lines_check lc;
    read_lines(out, &lc);
    CHECKF(lc.lines == total && lc.parse, "%s: %ld lines for %ld calls", what, lc.lines, total);
    CHECKF(lc.repeated == 0, "%s: %ld (session, call) twice", what, lc.repeated);
    CHECKF(lc.sorted, "%s: ordered by intended start", what);
    long after = server_completed(s->port);
    if (before >= 0 && after >= 0)
        CHECKF(after - before == lc.completed, "%s: server completed %ld, records %ld", what,
               after - before, lc.completed);
    char spool[600];
    snprintf(spool, sizeof spool, "%s/requests.jsonl.spool", out);
    CHECKF(access(spool, F_OK) != 0, "%s: no spool left", what);
    json_decref(run);
}

/* The pid of a process of rank `rank` (< 0: any rank) of the job marked
 * with tag (a rank or a worker it forked), or -1. */
static pid_t find_rank(const char *tag, int rank)
{
    char want_tag[128], want_rank[64];
    snprintf(want_tag, sizeof want_tag, "AGENTREPLAY_TEST_JOB=%s", tag);
    snprintf(want_rank, sizeof want_rank, rank < 0 ? "OMPI_COMM_WORLD_RANK=" :
             "OMPI_COMM_WORLD_RANK=%d", rank);
    DIR *d = opendir("/proc");
    pid_t found = -1;
    struct dirent *e;
    while (d && found < 0 && (e = readdir(d))) {
        pid_t p = (pid_t)atoi(e->d_name);
        if (p <= 0 || p == getpid())
            continue;
        char path[64], buf[65536];
        snprintf(path, sizeof path, "/proc/%d/environ", p);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        bool has_tag = false, has_rank = false;
        buf[n] = 0;
        for (char *q = buf; q < buf + n; q += strlen(q) + 1) {
            has_tag |= !strcmp(q, want_tag);
            has_rank |= rank < 0 ? !strncmp(q, want_rank, strlen(want_rank)) : !strcmp(q, want_rank);
        }
        if (has_tag && has_rank)
            found = p;
    }
    if (d)
        closedir(d);
    return found;
}

static void test_kill_rank(struct server *s)
{
    const char *what = "rank 1 killed";
    char out[512], log[512], url[64], spool[600];
    snprintf(out, sizeof out, "%s/load-kill", tmpdir);
    snprintf(log, sizeof log, "%s/load-kill.log", tmpdir);
    snprintf(spool, sizeof spool, "%s/requests.jsonl.spool", out);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", s->port);
    char *args[] = {"load", "--url", url, "--trace", "traces/samples/agentic-synth.jsonl",
                    "--concurrency", "8", "--duration", "30", "--no-warm-start", "--think-cap",
                    "0.2", "--quiet", "-o", out, NULL};
    char *argv[40];
    mpirun_argv(argv, NULL, 2, args);
    pid_t mp = start(argv, NULL, log);
    /* Until rank 0 has spooled records of both ranks for a while. */
    struct stat st;
    double t0 = mono_s();
    while (mono_s() - t0 < 20 && (stat(spool, &st) || st.st_size < 4096))
        sleep_s(0.05);
    sleep_s(0.5);
    pid_t victim = find_rank(getenv("AGENTREPLAY_TEST_JOB"), 1);
    CHECKF(victim > 0, "%s: rank 1 found", what);
    if (victim > 0)
        kill(victim, SIGKILL);
    double t1 = mono_s();
    int rc = finish(mp, 20);
    CHECKF(rc != 0 && rc != -999, "%s: mpirun ends the job with a failure (exit %d)", what, rc);
    CHECKF(mono_s() - t1 < 10, "%s: within 10 s (%.1f s)", what, mono_s() - t1);
    json_t *run = read_run(out);
    CHECKF(run != NULL, "%s: run.json written (see %s)", what, log);
    if (!run)
        return;
    CHECKF(json_is_true(json_object_get(run, "partial")) &&
               json_is_true(json_object_get(run, "interrupted")),
           "%s: marked partial and interrupted", what);
    json_t *r1 = json_array_get(json_object_get(run, "ranks"), 1);
    CHECKF(json_is_false(json_object_get(r1, "ended")) &&
               json_integer_value(json_object_get(r1, "calls")) > 0,
           "%s: rank 1's received calls kept, it did not end", what);
    long total = (long)json_integer_value(json_object_get(
        json_object_get(json_object_get(run, "metrics"), "requests"), "total"));
    struct lines_check lc;
    read_lines(out, &lc);
    CHECKF(lc.lines == total && total > 0 && lc.parse && lc.repeated == 0 && lc.sorted,
           "%s: %ld valid lines for %ld calls", what, lc.lines, total);
    CHECKF(access(spool, F_OK) != 0, "%s: the spool became requests.jsonl", what);
    json_decref(run);
}

/* A sweep whose rank 1 is killed: rank 0 still writes sweep.csv and a
 * sweep.json marked partial, and no worker of the job lives on. */
static void test_kill_sweep(void)
{
    const char *what = "sweep, rank 1 killed";
    char cwd[512], log[600], tmp[600], path[700];
    snprintf(cwd, sizeof cwd, "%s/sweep-kill", tmpdir);
    snprintf(tmp, sizeof tmp, "%s/tmp", cwd);
    mkdir(cwd, 0755);
    mkdir(tmp, 0755);
    snprintf(log, sizeof log, "%s/log", cwd);
    setenv("TMPDIR", tmp, 1); /* rank 1's private folders, gone with the test (local ranks
                                 inherit mpirun's environment) */
    char *args[] = {"sweep", "--concurrency", "32,40,48,56,64,72,80,88", "--duration", "288000",
                    "-j", "1", "--quiet", "-o", "out", NULL};
    char *argv[40];
    mpirun_argv(argv, NULL, 2, args);
    pid_t mp = start(argv, cwd, log);
    unsetenv("TMPDIR");
    /* Until rank 1 is at work. */
    pid_t victim = -1;
    for (double t0 = mono_s(); mono_s() - t0 < 20 && victim < 0; sleep_s(0.05))
        victim = find_rank(getenv("AGENTREPLAY_TEST_JOB"), 1);
    sleep_s(1.0);
    CHECKF(victim > 0, "%s: rank 1 found", what);
    if (victim > 0)
        kill(victim, SIGKILL);
    int rc = finish(mp, 30);
    CHECKF(rc != 0 && rc != -999, "%s: the job ends with a failure (exit %d)", what, rc);
    snprintf(path, sizeof path, "%s/out/sweep.json", cwd);
    json_error_t je;
    json_t *sj = json_load_file(path, 0, &je);
    CHECKF(sj && json_is_true(json_object_get(sj, "partial")),
           "%s: sweep.json written and marked partial (see %s)", what, log);
    json_decref(sj);
    snprintf(path, sizeof path, "%s/out/sweep.csv", cwd);
    CHECKF(access(path, R_OK) == 0, "%s: sweep.csv written", what);
    pid_t left = 0;
    for (double t0 = mono_s(); mono_s() - t0 < 10; sleep_s(0.1))
        if ((left = find_rank(getenv("AGENTREPLAY_TEST_JOB"), -1)) < 0)
            break;
    CHECKF(left < 0, "%s: no process of the job left (%d)", what, (int)left);
}

/* ---- sweeps across ranks ------------------------------------------------ */

static int slurp(const char *path, char **buf, size_t *len)
{
    char err[ERR_LEN];
    *buf = file_read(path, len, err);
    return *buf ? 0 : -1;
}

/* Differences between the trees a and b (names and bytes); the first is
 * printed. */
static int tree_diff(const char *a, const char *b)
{
    int diffs = 0, na = 0, nb = 0;
    DIR *d = opendir(a);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        na++;
        char pa[1200], pb[1200];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        struct stat sa, sb;
        if (lstat(pa, &sa) || lstat(pb, &sb) || S_ISDIR(sa.st_mode) != S_ISDIR(sb.st_mode)) {
            if (!diffs++)
                fprintf(stderr, "  %s: missing or of another kind\n", pb);
            continue;
        }
        if (S_ISDIR(sa.st_mode)) {
            diffs += tree_diff(pa, pb);
            continue;
        }
        char *x = NULL, *y = NULL;
        size_t lx = 0, ly = 0;
        if (slurp(pa, &x, &lx) || slurp(pb, &y, &ly) || lx != ly || memcmp(x, y, lx)) {
            if (!diffs++)
                fprintf(stderr, "  %s and %s differ\n", pa, pb);
        }
        free(x);
        free(y);
    }
    if (d)
        closedir(d);
    d = opendir(b);
    while (d && (e = readdir(d)))
        nb += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    if (na != nb && !diffs++)
        fprintf(stderr, "  %s holds %d entries, %s %d\n", a, na, b, nb);
    return diffs;
}

/* cmd args in tmpdir/one and, across np ranks, in tmpdir/<name>-np; the
 * folders and what was printed must be the same. */
static void check_same(const char *name, char *const args[], int np, const char *out_name)
{
    char one[512], many[512], log1[600], logn[600], a[600], b[600], what[64];
    snprintf(what, sizeof what, "%s -np %d", name, np);
    snprintf(one, sizeof one, "%s/%s-1", tmpdir, name);
    snprintf(many, sizeof many, "%s/%s-%d", tmpdir, name, np);
    mkdir(one, 0755);
    mkdir(many, 0755);
    snprintf(log1, sizeof log1, "%s/printed", one);
    snprintf(logn, sizeof logn, "%s/printed", many);
    struct stat st;
    if (stat(log1, &st)) {
        char *argv[40] = {(char *)test_bin()};
        int n = 1;
        for (int i = 0; args[i]; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        int rc = run_in(argv, one, log1, 120);
        CHECKF(rc == 0, "%s: one process exits 0 (%d)", name, rc);
    }
    char *argv[40];
    mpirun_argv(argv, NULL, np, args);
    int rc = run_in(argv, many, logn, 120);
    CHECKF(rc == 0, "%s: exit %d (see %s)", what, rc, logn);
    snprintf(a, sizeof a, "%s/%s", one, out_name);
    snprintf(b, sizeof b, "%s/%s", many, out_name);
    int d = tree_diff(a, b);
    CHECKF(d == 0, "%s: the result folder is the one process's, byte for byte (%d differences)",
           what, d);
    char *x = NULL, *y = NULL;
    size_t lx = 0, ly = 0;
    CHECKF(!slurp(log1, &x, &lx) && !slurp(logn, &y, &ly) && lx == ly && !memcmp(x, y, lx),
           "%s: the same printed output", what);
    free(x);
    free(y);
}

static void test_sweeps(void)
{
    char *sweep[] = {"sweep", "--concurrency", "1,4,8", "--backend", "auto,latency_specialized",
                     "--duration", "300", "-j", "1", "-o", "out", NULL};
    check_same("sweep", sweep, 2, "out");
    check_same("sweep", sweep, 4, "out");
    char *sim[] = {"sim", "--concurrency", "8", "--duration", "300", "--repeats", "3", "-o", "out",
                   NULL};
    check_same("sim", sim, 2, "out");
    char *plan[] = {"plan", "--slo", "interactivity_p90=100", "--duration", "120", "--layout",
                    "16x1,8x2", "--max-concurrency", "64", "-o", "out", NULL};
    check_same("plan", plan, 4, "out");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/agentreplay-test-mpi-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_env();
    test_shares();
    if (!have_mpirun()) {
        SKIP("mpirun not found: the runs across ranks are not tested");
    } else if (!dist_compiled()) {
        SKIP("built without MPI (no mpicc): the runs across ranks are not tested");
    } else {
        /* A tag to find this job's ranks by. */
        char tag[64];
        snprintf(tag, sizeof tag, "%d", (int)getpid());
        setenv("AGENTREPLAY_TEST_JOB", tag, 1);
        test_sweeps();
        struct server s;
        if (serve_start(&s)) {
            CHECK(0, "serve --fake started");
        } else {
            test_load(&s, 2);
            test_load(&s, 4);
            test_kill_rank(&s);
            serve_stop(&s);
        }
        test_kill_sweep();
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (!th_failed && system(cmd)) {
    }
    return test_report();
}
