/* test_interrupt.c: SIGINT or SIGTERM at random points (seeded) of `sim`,
 * `sweep` and `load` always leaves a result folder that `compare` and `plot`
 * can read and that says whether it is partial.
 *
 * Each trial starts the command, waits a random time drawn from the span the
 * command takes here, sends one signal to it (SIGINT or SIGTERM, also drawn)
 * and then checks:
 *   - the command exits (no hang) with a status, not killed by the signal;
 *   - the output folder holds a run.json (sim, load) or sweep.csv (sweep)
 *     that parses, whose every run is marked "partial": true when the
 *     command reported the interruption (and a run never finished unmarked
 *     when it ended early);
 *   - `agentreplay compare` of the folder with itself and `agentreplay plot`
 *     of it exit 0.
 * INTERRUPT_TRIALS (default 3 per command) and INTERRUPT_SEED (1) vary it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "testhelp.h"
#include "testproc.h"
#include "traces/base/rng.h"

static char tmpdir[256];

/* Exit status; -1 - signal when killed by a signal; -999 on timeout. */
static int wait_for(pid_t p, double timeout_s)
{
    double end = mono_s() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(p, &st, WNOHANG);
        if (r == p)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1 - WTERMSIG(st);
        if (r < 0)
            return -998;
        if (mono_s() > end) {
            kill(p, SIGKILL);
            waitpid(p, &st, 0);
            return -999;
        }
        sleep_s(0.01);
    }
}

static int run_quiet(char *const argv[], const char *log)
{
    return wait_for(spawn(argv, log), 120);
}

static bool log_says(const char *log, const char *what)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* Checks one run folder; returns 1 if it says partial, 0 if not, -1 if
 * unreadable. */
static int check_run(const char *dir, const char *what)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/run.json", dir);
    json_error_t je;
    json_t *run = json_load_file(path, 0, &je);
    CHECKF(run != NULL, "%s: %s parses (%s)", what, path, run ? "" : je.text);
    if (!run)
        return -1;
    json_t *p = json_object_get(run, "partial");
    CHECKF(json_is_boolean(p), "%s: run.json has a partial flag", what);
    int partial = json_is_true(p);
    json_decref(run);
    snprintf(path, sizeof path, "%s/requests.jsonl", dir);
    CHECKF(access(path, R_OK) == 0, "%s: requests.jsonl present", what);
    return partial;
}

static void check_readers(const char *dir, const char *what)
{
    char log[600], out[600];
    snprintf(log, sizeof log, "%s/readers.log", tmpdir);
    char *cmp[] = {(char *)test_bin(), "compare", (char *)dir, (char *)dir, NULL};
    int rc = run_quiet(cmp, log);
    CHECKF(rc == 0, "%s: compare reads %s (exit %d, see %s)", what, dir, rc, log);
    snprintf(out, sizeof out, "%s-plot", dir);
    char *plot[] = {(char *)test_bin(), "plot", (char *)dir, "-o", out, NULL};
    rc = run_quiet(plot, log);
    CHECKF(rc == 0, "%s: plot reads %s (exit %d, see %s)", what, dir, rc, log);
}

/* Sends sig to p after delay_s; returns the exit status and whether the
 * signal reached a running process. */
static int interrupt_after(pid_t p, double delay_s, int sig, bool *sent)
{
    sleep_s(delay_s);
    int st;
    *sent = waitpid(p, &st, WNOHANG) == 0 && kill(p, sig) == 0;
    if (!*sent) /* already over */
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1 - WTERMSIG(st);
    return wait_for(p, 90);
}

static void trial_sim(const char *trace, double delay, int sig, int k)
{
    char out[600], log[600], what[64];
    snprintf(out, sizeof out, "%s/sim-%d", tmpdir, k);
    snprintf(log, sizeof log, "%s/sim-%d.log", tmpdir, k);
    snprintf(what, sizeof what, "sim #%d (%s at %.2f s)", k, strsignal(sig), delay);
    char *argv[] = {(char *)test_bin(), "sim", "--trace", (char *)trace, "--concurrency", "64",
                    "--duration", "3600", "-o", out, "--quiet", NULL};
    bool sent;
    int rc = interrupt_after(spawn(argv, log), delay, sig, &sent);
    CHECKF(rc >= 0, "%s: exits with a status (got %d)", what, rc);
    int partial = check_run(out, what);
    bool said = log_says(log, "interrupted");
    if (said)
        CHECKF(partial == 1 && rc != 0, "%s: interruption reported: partial (%d) and exit %d", what,
               partial, rc);
    else
        CHECKF(partial == 0 && rc == 0, "%s: not reported interrupted: complete (partial %d, exit %d)",
               what, partial, rc);
    if (partial >= 0)
        check_readers(out, what);
    printf("NOTE %s: exit %d, %s\n", what, rc,
           !sent ? "finished first" : partial == 1 ? "partial" : "complete");
}

static void trial_sweep(const char *trace, double delay, int sig, int k)
{
    char out[600], log[600], what[64], path[700];
    snprintf(out, sizeof out, "%s/sweep-%d", tmpdir, k);
    snprintf(log, sizeof log, "%s/sweep-%d.log", tmpdir, k);
    snprintf(what, sizeof what, "sweep #%d (%s at %.2f s)", k, strsignal(sig), delay);
    char *argv[] = {(char *)test_bin(), "sweep", "--trace", (char *)trace, "--concurrency",
                    "8,32", "--layout", "16x1,8x2", "--duration", "1800", "-j", "2", "-o", out,
                    "--quiet", NULL};
    bool sent;
    int rc = interrupt_after(spawn(argv, log), delay, sig, &sent);
    CHECKF(rc >= 0, "%s: exits with a status (got %d)", what, rc);
    /* No worker left behind writing into the folder. */
    sleep_s(0.2);
    snprintf(path, sizeof path, "%s/sweep.csv", out);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "%s: sweep.csv written", what);
    int rows = 0, partial = 0;
    if (f) {
        char line[4096];
        CHECK(fgets(line, sizeof line, f) && !strncmp(line, "label,", 6), "sweep.csv header");
        while (fgets(line, sizeof line, f)) {
            char *dir = strrchr(line, ',');
            if (!dir)
                continue;
            dir++;
            dir[strcspn(dir, "\n")] = 0;
            char pd[1400];
            snprintf(pd, sizeof pd, "%s/%s", out, dir);
            rows++;
            int p = check_run(pd, what);
            partial += p == 1;
        }
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/sweep.json", out);
    json_t *sj = json_load_file(path, 0, NULL);
    bool said = log_says(log, "interrupted");
    if (said || rc != 0) {
        CHECKF(json_is_true(json_object_get(sj, "partial")),
               "%s: an interrupted sweep says so in sweep.json (exit %d, %d of 4 points, %d partial)",
               what, rc, rows, partial);
    } else {
        CHECKF(rows == 4 && partial == 0, "%s: a complete sweep has 4 complete points (%d, %d)", what,
               rows, partial);
    }
    json_decref(sj);
    if (rows > 0)
        check_readers(out, what);
    printf("NOTE %s: exit %d, %d points, %d partial%s\n", what, rc, rows, partial,
           !sent ? ", finished first" : "");
}

static pid_t start_server(const char *portfile, const char *log, int *port)
{
    unlink(portfile);
    char *argv[] = {(char *)test_bin(), "serve", "--fake", "--fake-ttft-ms", "20",
                    "--fake-tpot-ms", "4", "--listen", "127.0.0.1:0", "--port-file",
                    (char *)portfile, NULL};
    pid_t p = spawn(argv, log);
    *port = 0;
    for (int i = 0; i < 250 && *port <= 0; i++) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            if (fscanf(f, "%d", port) != 1)
                *port = 0;
            fclose(f);
        }
        if (*port <= 0)
            sleep_s(0.02);
    }
    return p;
}

static void trial_load(int port, double delay, int sig, int k)
{
    char out[600], log[600], what[64], url[64];
    snprintf(out, sizeof out, "%s/load-%d", tmpdir, k);
    snprintf(log, sizeof log, "%s/load-%d.log", tmpdir, k);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(what, sizeof what, "load #%d (%s at %.2f s)", k, strsignal(sig), delay);
    char *argv[] = {(char *)test_bin(), "load", "--url", url, "--model", "fake", "--trace",
                    "traces/samples/agentic-synth.jsonl", "-o", out, "--quiet", "--duration",
                    "6", "--concurrency", "8", "--idle-cap", "0.2", "--think-cap", "0.2", "--grace", "5",
                    "--min-duration", "1", NULL};
    bool sent;
    int rc = interrupt_after(spawn(argv, log), delay, sig, &sent);
    CHECKF(rc >= 0, "%s: exits with a status (got %d)", what, rc);
    int partial = check_run(out, what);
    if (sent)
        CHECKF(partial == 1, "%s: an interrupted load says partial (%d, exit %d)", what, partial,
               rc);
    if (partial >= 0)
        check_readers(out, what);
    printf("NOTE %s: exit %d, %s\n", what, rc,
           !sent ? "finished first" : partial == 1 ? "partial" : "complete");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/agentreplay-test-interrupt-%d", (int)getpid());
    mkdir(tmpdir, 0755);
    if (access(test_bin(), X_OK) != 0) {
        SKIP("no agentreplay binary (AGENTREPLAY_BIN)");
        return test_report();
    }
    const char *e = getenv("INTERRUPT_TRIALS");
    int trials = e && atoi(e) > 0 ? atoi(e) : 3;
    e = getenv("INTERRUPT_SEED");
    struct rng r;
    rng_init(&r, e ? strtoull(e, NULL, 10) : 1, 0x696e7472);
    const int sigs[2] = {SIGINT, SIGTERM};

    const char *t = test_shared("traces/agentic-cc");
    char trace[4096];
    snprintf(trace, sizeof trace, "%s", t ? t : "traces/samples/agentic-synth.jsonl");
    /* Spans: how long each command takes here; points drawn within them.
     * The first trial of each command lands just after the program's start
     * (1.5 x the time `sim --help` takes, plus up to 50 ms), while it parses
     * its flags or reads its trace: a signal before main() runs (the loader,
     * the sanitizer runtime starting) is beyond any program's reach. */
    char hlog[600];
    snprintf(hlog, sizeof hlog, "%s/help.log", tmpdir);
    char *help[] = {(char *)test_bin(), "sim", "--help", NULL};
    double h0 = mono_s();
    run_quiet(help, hlog);
    double t_start = 1.5 * (mono_s() - h0);
    printf("NOTE start-up %.0f ms: first points from there\n", t_start * 1e3);
    for (int k = 0; k < trials; k++) {
        double d = k == 0 ? t_start + 0.05 * rng_uniform(&r) : 3.0 * rng_uniform(&r);
        trial_sim(trace, d, sigs[rng_below(&r, 2)], k);
    }
    for (int k = 0; k < trials; k++) {
        double d = k == 0 ? t_start + 0.05 * rng_uniform(&r) : 2.5 * rng_uniform(&r);
        trial_sweep(trace, d, sigs[rng_below(&r, 2)], k);
    }
    char portfile[600], slog[600];
    snprintf(portfile, sizeof portfile, "%s/port", tmpdir);
    snprintf(slog, sizeof slog, "%s/serve.log", tmpdir);
    int port;
    pid_t srv = start_server(portfile, slog, &port);
    CHECKF(port > 0, "fake server listening (%d)", port);
    if (port > 0)
        for (int k = 0; k < trials; k++) {
            double d = k == 0 ? t_start + 0.05 * rng_uniform(&r) : 0.3 + 5.0 * rng_uniform(&r);
            trial_load(port, d, sigs[rng_below(&r, 2)], k);
        }
    kill(srv, SIGTERM);
    wait_for(srv, 20);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (!getenv("KEEP_TMP") && th_failed == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report();
}
