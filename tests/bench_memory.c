/* bench_memory.c: peak memory of `sim` on a generated trace of one million
 * calls (make bench). Target: under 2 GB.
 *
 * Writes a synthetic agentic trace (trace_synth, native format) of about
 * BENCH_MEMORY_CALLS calls (default 1,000,000) into /tmp, then runs the
 * binary on it as child processes and reads each one's peak RSS (wait4):
 *   - `trace stats`: reading the trace alone (what the trace model costs);
 *   - `sim` at 64 live sessions for 1800 s, and for 7200 s (four times the
 *     calls replayed): memory must not grow with the calls replayed, i.e.
 *     not with calls x prompt length (records stream to disk, ITL pools in
 *     an HDR histogram);
 *   - `sim` at 256 live sessions for 1800 s: growth per live session.
 * Fails (exit 1) when a peak is over 2 GB or the 4x-longer run's peak grows
 * by more than 25 % + 32 MiB.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* VmRSS of p in MiB from /proc (0 when unreadable). */
static double rss_now(pid_t p)
{
    char fn[64], line[256];
    snprintf(fn, sizeof fn, "/proc/%d/status", (int)p);
    FILE *f = fopen(fn, "r");
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atof(line + 6);
    if (f)
        fclose(f);
    return kb / 1024.0;
}

/* Runs argv; returns its peak RSS in MiB (negative on failure); *last is
 * its resident size at the last sample (every 20 ms) before it ended: the
 * replay's steady state, after the trace reader's buffers are gone. */
static double peak_rss(char *const argv[], double *secs, double *last)
{
    double t0 = wall_s();
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        if (!freopen("/dev/null", "w", stdout))
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    *last = 0;
    for (;;) {
        pid_t r = wait4(p, &st, WNOHANG, &ru);
        if (r == p)
            break;
        if (r < 0)
            return -1;
        double v = rss_now(p);
        if (v > 0)
            *last = v;
        usleep(20000);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    *secs = wall_s() - t0;
    return (double)ru.ru_maxrss / 1024.0;
}

struct sim_point {
    const char *conc, *dur;
    double rss, secs, last;
    long calls;
};

int main(void)
{
    const char *bin = test_bin();
    if (access(bin, X_OK) != 0) {
        fprintf(stderr, "bench_memory: no binary %s (AGENTREPLAY_BIN)\n", bin);
        return 1;
    }
    const char *env = getenv("BENCH_MEMORY_CALLS");
    double want = env && atof(env) > 0 ? atof(env) : 1e6;
    char dir[] = "/tmp/bench_memoryXXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[256], out[256], cmd[600];
    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    snprintf(out, sizeof out, "%s/out", dir);

    /* The trace: the default synthetic trees average ~55.8 calls. */
    struct trace_synth_params sp;
    trace_synth_defaults(&sp);
    sp.sessions = (uint32_t)(want / 55.8 + 1);
    sp.seed = 11;
    char err[ERR_LEN];
    struct trace *t = trace_synth(&sp, err);
    if (!t || trace_write_native(t, path, err)) {
        fprintf(stderr, "bench_memory: %s\n", err);
        return 1;
    }
    uint32_t n_calls = t->n_calls, n_sessions = t->n_sessions;
    double prompt_sum = 0;
    for (uint32_t i = 0; i < t->n_calls; i++)
        prompt_sum += (double)t->calls[i].prompt_tokens;
    size_t arena = t->arena.total_bytes;
    trace_destroy(t);
    struct stat sb;
    stat(path, &sb);
    printf("bench_memory: trace of %u calls, %u sessions, %.0f MB native file; "
           "model arena %.1f MiB; mean prompt %.0f tokens\n",
           n_calls, n_sessions, (double)sb.st_size / 1e6, (double)arena / 1048576.0,
           prompt_sum / n_calls);

    double secs, last_read;
    char *stats[] = {(char *)bin, "trace", "stats", path, NULL};
    double rss_read = peak_rss(stats, &secs, &last_read);
    printf("  trace stats (read only): peak RSS %7.1f MiB  %6.1f s\n", rss_read, secs);

    /* The bound: the million-call trace. Growth: the small built-in sample
     * trace, where the replay (not the trace reader) sets the peak. */
    const char *traces[2] = {path, "traces/samples/agentic-synth.jsonl"};
    struct sim_point pts[2][3];
    int fail = rss_read < 0;
    for (int k = 0; k < 2; k++) {
        const char *conc[3] = {"64", "64", "256"}, *dur[3] = {"1800", "7200", "1800"};
        printf("  %s\n", k == 0 ? "sim on the million-call trace:" : "sim on the sample trace (51 sessions, 2033 calls, recycled):");
        for (int i = 0; i < 3; i++) {
            struct sim_point *q = &pts[k][i];
            memset(q, 0, sizeof *q);
            q->conc = conc[i];
            q->dur = dur[i];
            char *argv[] = {(char *)bin, "sim", "--trace", (char *)traces[k], "--concurrency",
                            (char *)q->conc, "--duration", (char *)q->dur, "--grace", "60",
                            "--min-duration", "1", "--rules", "legacy", "-o", out, "--force",
                            "--quiet", NULL};
            q->rss = peak_rss(argv, &q->secs, &q->last);
            char rp[300];
            snprintf(rp, sizeof rp, "%s/requests.jsonl", out);
            q->calls = test_count_lines(rp);
            printf("    c=%-3s %5s s: %7ld calls  peak RSS %7.1f MiB  %6.1f s\n", q->conc, q->dur,
                   q->calls, q->rss, q->secs);
            if (q->rss < 0 || q->rss > 2048) {
                fprintf(stderr, "FAIL sim c=%s %s s: peak RSS %.1f MiB (bound 2048)\n", q->conc,
                        q->dur, q->rss);
                fail = 1;
            }
        }
    }
    struct sim_point *g = pts[1];
    double grow_calls = g[1].rss - g[0].rss;
    long more = g[1].calls - g[0].calls;
    double per_call_if_kept = prompt_sum / n_calls * 4 / 1048576.0; /* 4 B per token */
    printf("  4x the calls replayed (%ld more): peak %+.1f MiB (%.0f B per call); keeping each "
           "prompt's tokens would take ~%.0f MiB\n",
           more, grow_calls, more > 0 ? grow_calls * 1048576.0 / (double)more : 0,
           per_call_if_kept * (double)more);
    printf("  4x the live sessions (+192): peak %+.1f MiB (%.0f KiB per live session)\n",
           g[2].rss - g[0].rss, (g[2].rss - g[0].rss) * 1024 / 192);
    printf("  million-call trace: sim peak %.1f MiB = trace reading %.1f MiB (model arena %.1f MiB)\n",
           pts[0][0].rss, rss_read, (double)arena / 1048576.0);
    if (grow_calls > 0.25 * g[0].rss + 32) {
        fprintf(stderr, "FAIL memory grows with the calls replayed (%+.1f MiB)\n", grow_calls);
        fail = 1;
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_memory: could not remove %s\n", dir);
    printf("bench_memory: %s\n", fail ? "FAILED" : "ok (peak under 2 GB, flat in calls replayed)");
    return fail;
}
