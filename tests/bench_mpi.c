/* bench_mpi.c: runs split across MPI ranks on this machine (README,
 * "Running across machines"), each configuration BENCH_RUNS times (3),
 * interleaved, medians reported:
 *   1. load, open loop (Poisson) of 128-token prompts / 16 output tokens
 *      against a fast `serve --fake` (every token due at once), at the same
 *      offered rate from `mpirun -np 1` and `-np 2`: calls sent per second
 *      of the schedule, schedule lag P50 / P99 / max, and whether the
 *      merged result holds exactly every call (records = calls sent =
 *      lines of requests.jsonl, completed records = the server's count of
 *      completions); then closed loop on 64 lanes (as many calls as the
 *      generator and the server, sharing the machine, get through);
 *   2. a CPU-bound sweep (8 points of about equal cost: concurrency 56 to
 *      70, three simulated hours each, on the built-in sample): wall time
 *      with one rank of one worker (-np 1 -j 1) and two ranks of one worker
 *      each (-np 2 -j 1), the speed-up (target >= 1.7x on two free cores),
 *      and the two sweep folders compared byte for byte.
 * The machine may be shared (here: two cores, five other engineers'
 * builds and tests), which is all of a lag P99 above a fraction of a
 * millisecond and most of a sweep's wall time; so, where permitted and
 * unless BENCH_PRIO=0, mpirun and its ranks run the load rows under
 * SCHED_FIFO (priority 10, as bench_load's BENCH_FIFO: it changes who gets
 * a core, not the work) and the sweep rows in a session of their own at
 * nice -10 (a larger share of the cores, for 1 and 2 ranks alike; with the
 * kernel's autogroups, as here, the share is per session, so the nice
 * value is the session's, /proc/self/autogroup); the header says which,
 * and the 1-minute load average is printed with each row. Skips where mpirun or
 * the MPI build is missing. BENCH_QUICK=1 shortens it (one run each, a
 * smaller sweep). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "replay/dist.h"
#include "tests/testhelp.h"
#include "tests/testmpi.h"
#include "traces/base/err.h"
#include "traces/base/stats.h"

static char dir[256];
static bool g_fifo, g_nice; /* the load rows under SCHED_FIFO; the sweep rows at nice -10 */

/* This process's nice value, and its autogroup's where the kernel has
 * them (each session is one group, and groups share the CPUs by their
 * own nice value); 0 or -1. */
static int set_nice(int v)
{
    if (setpriority(PRIO_PROCESS, 0, v))
        return -1;
    FILE *f = fopen("/proc/self/autogroup", "w");
    if (!f)
        return 0; /* no autogroups: the process's nice value is what counts */
    int rc = fprintf(f, "%d", v) < 0;
    return fclose(f) || rc ? -1 : 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double loadavg(void)
{
    double la[1] = {0};
    return getloadavg(la, 1) == 1 ? la[0] : -1;
}

/* CPU seconds (user + system) of the last run() and its descendants. */
static double g_cpu_s;

/* Runs argv in a session of its own (at nice -10 with nice), in cwd
 * (NULL: here) with output to log, within limit_s; returns the exit
 * status (-1 on timeout, after stopping it). */
static int run(char *const argv[], const char *cwd, const char *log, int limit_s, bool nice)
{
    pid_t p = fork();
    if (p == 0) {
        setsid();
        if (nice)
            set_nice(-10);
        test_output_to(log);
        if (cwd && chdir(cwd))
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    for (int i = 0; i < limit_s * 100; i++) {
        if (wait4(p, &st, WNOHANG, &ru) == p) {
            g_cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                      (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(-p, SIGTERM);
    sleep(2);
    kill(-p, SIGKILL);
    waitpid(p, &st, 0);
    return -1;
}

/* ---- load --------------------------------------------------------------- */

static pid_t g_srv;
static int g_port;

static int start_server(void)
{
    char pf[400], log[400];
    snprintf(pf, sizeof pf, "%s/serve.port", dir);
    snprintf(log, sizeof log, "%s/serve.log", dir);
    unlink(pf);
    g_srv = fork();
    if (g_srv == 0) {
        test_output_to(log);
        execl(test_bin(), test_bin(), "serve", "--fake", "--fake-ttft-ms", "0", "--fake-tpot-ms",
              "0", "--listen", "127.0.0.1:0", "--port-file", pf, "--max-conns", "19000",
              (char *)NULL);
        _exit(127);
    }
    return g_port = wait_port(pf);
}

static void stop_server(void)
{
    kill(g_srv, SIGINT);
    int st;
    for (int i = 0; i < 300; i++) {
        if (waitpid(g_srv, &st, WNOHANG) == g_srv)
            return;
        usleep(10000);
    }
    kill(g_srv, SIGKILL);
    waitpid(g_srv, &st, 0);
}

static void write_trace(const char *path, int n, int in, int out)
{
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) {
        fprintf(f, "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d, \"hash_ids\": [",
                i, in, out);
        for (int b = 0; b < (in + 511) / 512; b++)
            fprintf(f, "%s%d", b ? ", " : "", i * 16 + b + 1);
        fprintf(f, "]}\n");
    }
    fclose(f);
}

struct load_row {
    double calls_s, lag_p50, lag_p99, lag_max;
    bool exact;                  /* every call once */
};

/* One load run; rate: Poisson arrivals per second, or 0 for closed loop
 * on `lanes` lanes (never under SCHED_FIFO: a saturated generator would
 * starve the server). */
static int load_once(int np, const char *trace, int rate, int lanes, const char *dur, int k,
                     struct load_row *r)
{
    char url[64], out[400], log[420], arr[64], conc[16];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", g_port);
    snprintf(out, sizeof out, "%s/load-%d-%d-np%d-%d", dir, rate, lanes, np, k);
    snprintf(log, sizeof log, "%s.log", out);
    snprintf(arr, sizeof arr, "poisson:%d", rate);
    snprintf(conc, sizeof conc, "%d", lanes);
    char *args[] = {"load", "--url", url, "--trace", (char *)trace, "--duration", (char *)dur,
                    "--grace", "10", "--model", "fake", "--quiet", "-o", out,
                    rate ? "--arrival" : "--mode", rate ? arr : "closed",
                    rate ? NULL : "--concurrency", conc, NULL};
    char *argv[40], *fifo[] = {"chrt", "-f", "10", NULL};
    mpirun_argv(argv, g_fifo && rate ? fifo : NULL, np, args);
    long before = server_completed(g_port);
    int rc = run(argv, NULL, log, 120, false);
    long after = server_completed(g_port);
    char p[500];
    snprintf(p, sizeof p, "%s/run.json", out);
    json_error_t je;
    json_t *run_j = rc == 0 ? json_load_file(p, 0, &je) : NULL;
    if (!run_j)
        return -1;
    json_t *lag = json_object_get(json_object_get(run_j, "live"), "schedule_lag_ms");
    r->lag_p50 = json_number_value(json_object_get(lag, "p50"));
    r->lag_p99 = json_number_value(json_object_get(lag, "p99"));
    r->lag_max = json_number_value(json_object_get(lag, "max"));
    json_t *req = json_object_get(json_object_get(run_j, "metrics"), "requests");
    long total = (long)json_integer_value(json_object_get(req, "total"));
    long completed = (long)json_integer_value(json_object_get(req, "completed"));
    long warmup = (long)json_integer_value(json_object_get(req, "warmup"));
    long sent = (long)json_integer_value(json_object_get(json_object_get(run_j, "run"), "calls_sent"));
    r->calls_s = (double)sent / json_number_value(json_object_get(run_j, "duration_s"));
    snprintf(p, sizeof p, "%s/requests.jsonl", out);
    r->exact = total == sent && test_count_lines(p) == total && total > 0 &&
               (before < 0 || after - before == completed + warmup);
    if (!r->exact)
        fprintf(stderr, "np %d: records %ld, sent %ld, lines %ld, server %ld, completed %ld\n", np,
                total, sent, test_count_lines(p), after - before, completed + warmup);
    json_decref(run_j);
    return 0;
}

static double median(double *v, int n)
{
    stats_sort(v, (size_t)n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Both rank counts at one rate (0: closed loop on `lanes`), interleaved;
 * P99 of 1 and 2 ranks out. */
static void bench_load(const char *trace, int rate, int lanes, int runs, const char *dur,
                       double p99[2])
{
    char what[32];
    if (rate)
        snprintf(what, sizeof what, "poisson %d/s", rate);
    else
        snprintf(what, sizeof what, "closed x%d", lanes);
    double v[2][4][16];
    int ok[2] = {0, 0}, exact[2] = {0, 0};
    for (int k = 0; k < runs; k++)
        for (int x = 0; x < 2; x++) {
            struct load_row r;
            if (load_once(x + 1, trace, rate, lanes, dur, k, &r))
                continue;
            v[x][0][ok[x]] = r.calls_s;
            v[x][1][ok[x]] = r.lag_p50;
            v[x][2][ok[x]] = r.lag_p99;
            v[x][3][ok[x]] = r.lag_max;
            ok[x]++;
            exact[x] += r.exact;
        }
    for (int x = 0; x < 2; x++) {
        p99[x] = NAN;
        if (!ok[x]) {
            printf("%-17s %d rank(s)    failed\n", what, x + 1);
            CHECKF(0, "load %s on %d rank(s) ran", what, x + 1);
            continue;
        }
        double m[4];
        for (int q = 0; q < 4; q++)
            m[q] = median(v[x][q], ok[x]);
        p99[x] = m[2];
        printf("%-17s %d rank(s)   %9.0f %9.3f %9.3f %9.3f  %d/%d exact   %5.2f\n", what, x + 1,
               m[0], m[1], m[2], m[3], exact[x], ok[x], loadavg());
        CHECKF(exact[x] == ok[x], "load %s on %d rank(s): every call exactly once (%d of %d "
               "runs)", what, x + 1, exact[x], ok[x]);
    }
    fflush(stdout);
}

/* ---- sweep -------------------------------------------------------------- */

static int tree_same(const char *a, const char *b)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "diff -rq %s %s >/dev/null 2>&1", a, b);
    return system(cmd) == 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    bool quick = getenv("BENCH_QUICK") != NULL;
    int runs = getenv("BENCH_RUNS") ? atoi(getenv("BENCH_RUNS")) : quick ? 1 : 3;
    if (runs < 1 || runs > 15)
        runs = 3;
    if (system("command -v mpirun >/dev/null 2>&1") != 0 || !dist_compiled()) {
        SKIP("mpirun or the MPI build missing: no runs across ranks");
        return test_report();
    }
    snprintf(dir, sizeof dir, "/tmp/agentreplay-bench-mpi-%d", (int)getpid());
    mkdir(dir, 0755);
    if (!getenv("BENCH_PRIO") || atoi(getenv("BENCH_PRIO"))) {
        /* Permitted? Try on ourselves, then go back. */
        struct sched_param sp = {.sched_priority = 10}, zero = {.sched_priority = 0};
        g_fifo = sched_setscheduler(0, SCHED_FIFO, &sp) == 0 &&
                 sched_setscheduler(0, SCHED_OTHER, &zero) == 0 &&
                 system("command -v chrt >/dev/null 2>&1") == 0;
        g_nice = set_nice(-10) == 0 && set_nice(0) == 0;
    }
    printf("runs across MPI ranks on this machine (%ld CPUs), medians of %d run(s); load rows "
           "%s, sweep rows %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), runs, g_fifo ? "SCHED_FIFO 10" : "SCHED_OTHER",
           g_nice ? "own session at nice -10" : "nice 0");

    /* 1. load */
    printf("\n%-29s %9s %9s %9s %9s  %-11s %5s\n", "load, 128/16 tokens", "calls/s",
           "lagP50ms", "lagP99ms", "lagMaxms", "merged", "load");
    char trace[400];
    snprintf(trace, sizeof trace, "%s/short.jsonl", dir);
    write_trace(trace, 4000, 128, 16);
    if (start_server() < 0) {
        CHECK(0, "serve --fake started");
    } else {
        const int rates[] = {1000, 3000};
        for (int i = 0; i < (quick ? 1 : 2); i++) {
            double p99[2];
            bench_load(trace, rates[i], 0, runs, quick ? "2" : "4", p99);
            printf("NOTE load at %d calls/s: schedule lag P99 %.3f ms on 1 rank, %.3f ms on 2\n",
                   rates[i], p99[0], p99[1]);
        }
        double p99[2];
        bench_load(trace, 0, 64, runs, quick ? "2" : "4", p99);
        stop_server();
    }

    /* 2. sweep */
    const char *conc = quick ? "60,62,64,66" : "56,58,60,62,64,66,68,70";
    const char *dur = quick ? "3600" : "10800";
    printf("\nsweep --concurrency %s --duration %s (built-in sample), -j 1 per rank\n", conc, dur);
    printf("%-30s %9s %7s %5s\n", "ranks", "wall s", "CPU s", "load");
    double wall[2][16];
    int ok[2] = {0, 0};
    char d1[300], d2[300], *d[2] = {d1, d2};
    snprintf(d1, sizeof d1, "%s/sweep-np1", dir);
    snprintf(d2, sizeof d2, "%s/sweep-np2", dir);
    for (int k = 0; k < runs; k++)
        for (int x = 0; x < 2; x++) {
            char cmd[700];
            snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", d[x], d[x]);
            if (system(cmd))
                continue;
            char *args[] = {"sweep", "--concurrency", (char *)conc, "--duration", (char *)dur,
                            "--rules", "legacy", "-j", "1", "--quiet", "-o", "out", NULL};
            char *argv[40], log[320];
            mpirun_argv(argv, NULL, x + 1, args);
            snprintf(log, sizeof log, "%s.log", d[x]);
            double t0 = mono_s();
            int rc = run(argv, d[x], log, 600, g_nice);
            double t = mono_s() - t0;
            CHECKF(rc == 0, "sweep on %d rank(s) exits 0 (%d, see %s)", x + 1, rc, log);
            if (rc == 0)
                wall[x][ok[x]++] = t;
            printf("  run %d, %d rank(s) %17.2f %7.2f %5.2f\n", k + 1, x + 1, t, g_cpu_s, loadavg());
            fflush(stdout);
        }
    if (ok[0] && ok[1]) {
        double w1 = median(wall[0], ok[0]), w2 = median(wall[1], ok[1]);
        /* (median() sorted them: the least disturbed runs come first) */
        printf("%-30s %9.2f\n%-30s %9.2f\n", "1 rank x 1 worker (fastest)", wall[0][0],
               "2 ranks x 1 worker (fastest)", wall[1][0]);
        char a[500], b[500];
        snprintf(a, sizeof a, "%s/out", d[0]);
        snprintf(b, sizeof b, "%s/out", d[1]);
        bool same = tree_same(a, b);
        printf("%-30s %9.2f\n%-30s %9.2f\n", "1 rank x 1 worker (median)", w1,
               "2 ranks x 1 worker (median)", w2);
        printf("NOTE sweep speed-up on 2 ranks: %.2fx of the medians, %.2fx of the fastest (target "
               ">= 1.7x); folders %s\n", w1 / w2, wall[0][0] / wall[1][0],
               same ? "identical" : "DIFFER");
        CHECK(same, "the 2-rank sweep folder is the 1-rank one, byte for byte");
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!th_failed && system(cmd)) {
    }
    return test_report();
}
