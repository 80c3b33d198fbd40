/* test_reliability.c: end-to-end reliability checks on the built binary.
 *
 *   1. Prefix hit rate: every timeline.csv row of a congested `sim` run has a
 *      hit rate in [0, 1], and run.json's achieved rate agrees with the
 *      timeline's token-weighted mean.
 *   2. Determinism: the same inputs and seed give byte-identical
 *      requests.jsonl, run.json and timeline.csv across runs and, when
 *      AGENTREPLAY_BIN2 names another build (e.g. the sanitizer build's
 *      binary), across builds.
 *   3. Faults soak: `serve --fake` with injected errors, disconnects and
 *      stalls on loopback, `load` against it for SOAK_SECONDS (default 40);
 *      the server is killed at 40 % of the run and restarted on the same
 *      port 3 s later. Checks: the generator keeps going, every call sent has
 *      exactly one record, injected errors and disconnects (the servers'
 *      /metrics, scraped just before the kill and at the end) equal the
 *      errors recorded by type, and the outage is recorded as connection
 *      errors after which calls succeed again.
 *
 * `test_reliability --soak` runs only the soak (tests/soak.sh, make soak:
 * SOAK_SECONDS=1800) and prints its figures.
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

static char tmpdir[256];

/* Waits for p up to timeout_s; kills it after that. Returns the exit status,
 * or -1 if it was killed or died of a signal. */
static int wait_for(pid_t p, double timeout_s)
{
    double end = mono_s() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(p, &st, WNOHANG);
        if (r == p)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0)
            return -1;
        if (mono_s() > end) {
            kill(p, SIGKILL);
            waitpid(p, &st, 0);
            return -1;
        }
        sleep_s(0.02);
    }
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *d = malloc(cap);
    size_t k;
    while ((k = fread(d + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) {
            cap *= 2;
            d = realloc(d, cap);
        }
    }
    fclose(f);
    d[n] = 0;
    if (len)
        *len = n;
    return d;
}

static bool same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

static int sim_run(const char *bin, const char *trace, const char *conc, const char *dur,
                   const char *out)
{
    char log[512];
    snprintf(log, sizeof log, "%s/sim.log", tmpdir);
    char *argv[] = {(char *)bin, "sim", "--trace", (char *)trace, "--concurrency", (char *)conc,
                    "--duration", (char *)dur, "--grace", "30", "--min-duration", "10",
                    "--seed", "7", "-o", (char *)out, "--force", "--quiet", NULL};
    return wait_for(spawn(argv, log), 120);
}

/* ---- 1. hit rate per timeline row ------------------------------------- */

static void test_hit_rate(const char *trace)
{
    char out[512], path[600];
    snprintf(out, sizeof out, "%s/hit", tmpdir);
    int rc = sim_run(test_bin(), trace, "64", "300", out);
    CHECKF(rc == 0, "sim for the hit-rate check exits 0 (got %d)", rc);
    snprintf(path, sizeof path, "%s/timeline.csv", out);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "timeline.csv written");
    if (!f)
        return;
    char line[1024];
    int rows = 0, bad = 0, defined = 0;
    double sum_c = 0, sum_p = 0, worst = 0;
    CHECK(fgets(line, sizeof line, f) && strstr(line, "prefix_hit_rate"), "timeline header");
    while (fgets(line, sizeof line, f)) {
        rows++;
        char *fld[8];
        int n = 0;
        for (char *s = line, *tok; n < 8 && (tok = strsep(&s, ",\n"));)
            fld[n++] = tok;
        if (n < 8) {
            bad++;
            continue;
        }
        if (!strcmp(fld[5], "nan"))
            continue;
        double hit = atof(fld[5]);
        double prompt = atof(fld[6]) - atof(fld[7]); /* per 1 s tick */
        defined++;
        if (hit < 0 || hit > 1) {
            bad++;
            if (hit > worst)
                worst = hit;
        }
        sum_c += hit * prompt;
        sum_p += prompt;
    }
    fclose(f);
    CHECKF(rows > 100 && defined > 50, "timeline rows (%d, %d with a hit rate)", rows, defined);
    CHECKF(bad == 0, "every timeline hit rate in [0, 1] (%d outside, worst %.3f)", bad, worst);
    snprintf(path, sizeof path, "%s/run.json", out);
    json_error_t je;
    json_t *run = json_load_file(path, 0, &je);
    CHECKF(run != NULL, "run.json parses: %s", run ? "" : je.text);
    double h = json_real_value(json_object_get(json_object_get(run, "metrics"), "prefix_hit_rate"));
    CHECKF(h > 0 && h <= 1, "run.json prefix_hit_rate %.4f in (0, 1]", h);
    double tl = sum_p > 0 ? sum_c / sum_p : -1;
    /* The records: run.json's rate is cached / prompt over the measured
     * records (warm-up calls excluded); the timeline counts every call when
     * first admitted, which is every record with a cached count. */
    snprintf(path, sizeof path, "%s/requests.jsonl", out);
    char *d = slurp(path, NULL);
    double all_c = 0, all_p = 0, m_c = 0, m_p = 0;
    for (char *ln = d, *nl; ln && *ln && (nl = strchr(ln, '\n')); ln = nl + 1) {
        *nl = 0;
        json_t *r = json_loads(ln, 0, &je);
        json_t *c = json_object_get(r, "cached_tokens");
        if (json_is_integer(c)) {
            double p = (double)json_integer_value(json_object_get(r, "prompt_tokens"));
            all_c += (double)json_integer_value(c);
            all_p += p;
            /* measured = not warm-up and no error (metrics.c counts a
             * call cut at the end of the run as an error) */
            json_t *e = json_object_get(r, "error");
            if (!json_is_true(json_object_get(r, "warmup")) && (!e || json_is_null(e))) {
                m_c += (double)json_integer_value(c);
                m_p += p;
            }
        }
        json_decref(r);
    }
    free(d);
    double all = all_p > 0 ? all_c / all_p : -1, meas = m_p > 0 ? m_c / m_p : -1;
    CHECKF(fabs(meas - h) < 1e-6, "run.json hit rate %.6f = measured records' %.6f", h, meas);
    CHECKF(fabs(tl - all) < 0.01, "timeline hit rate %.4f = all records' %.4f", tl, all);
    printf("NOTE hit rate: run.json %.4f (measured records), all records %.4f, "
           "timeline token-weighted %.4f, %d rows\n", h, all, tl, rows);
    json_decref(run);
}

/* ---- 2. determinism ---------------------------------------------------- */

static void test_determinism(const char *trace)
{
    /* Always the same output folder: run.json records the command line. */
    const char *files[] = {"requests.jsonl", "run.json", "timeline.csv"};
    const char *bins[2] = {test_bin(), getenv("AGENTREPLAY_BIN2")};
    char out[512], ref[512];
    snprintf(out, sizeof out, "%s/det", tmpdir);
    snprintf(ref, sizeof ref, "%s/det-ref", tmpdir);
    CHECK(sim_run(bins[0], trace, "16", "120", out) == 0, "determinism: first run");
    CHECK(rename(out, ref) == 0, "determinism: keep the first run");
    for (int k = 0; k < 2; k++) {
        const char *b = bins[k];
        if (!b || !*b) {
            printf("NOTE determinism across builds: set AGENTREPLAY_BIN2 to compare\n");
            continue;
        }
        CHECKF(sim_run(b, trace, "16", "120", out) == 0, "determinism: run with %s", b);
        for (int i = 0; i < 3; i++) {
            char a[700], c[700];
            snprintf(a, sizeof a, "%s/%s", ref, files[i]);
            snprintf(c, sizeof c, "%s/%s", out, files[i]);
            CHECKF(same_file(a, c), "%s byte-identical (%s vs %s)", files[i], bins[0], b);
        }
        if (k == 0) {
            char cmd[1200];
            snprintf(cmd, sizeof cmd, "rm -rf %s", out);
            CHECK(system(cmd) == 0, "determinism: clear the folder");
        }
    }
}

/* ---- 3. faults soak ---------------------------------------------------- */

struct faults {
    long long error, disconnect, stall, ok;
};

/* Scrapes the server's /metrics; false when it does not answer. */
static bool scrape(int port, struct faults *f)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -s -m 5 http://127.0.0.1:%d/metrics", port);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char line[512];
    bool any = false;
    memset(f, 0, sizeof *f);
    while (fgets(line, sizeof line, p)) {
        long long v;
        if (sscanf(line, "agentreplay_faults_injected_total{kind=\"error\"} %lld", &v) == 1)
            f->error = v, any = true;
        else if (sscanf(line, "agentreplay_faults_injected_total{kind=\"disconnect\"} %lld", &v) == 1)
            f->disconnect = v;
        else if (sscanf(line, "agentreplay_faults_injected_total{kind=\"stall\"} %lld", &v) == 1)
            f->stall = v;
        else if (sscanf(line, "agentreplay_completions_total{status=\"ok\"} %lld", &v) == 1)
            f->ok = v;
    }
    pclose(p);
    return any;
}

static pid_t start_server(const char *listen, const char *portfile, const char *seed,
                          const char *log)
{
    unlink(portfile);
    char *argv[] = {(char *)test_bin(), "serve", "--fake", "--fake-ttft-ms", "20",
                    "--fake-tpot-ms", "1", "--listen", (char *)listen, "--port-file",
                    (char *)portfile, "--fault-error-rate", "0.03",
                    "--fault-disconnect-rate", "0.03", "--fault-stall-ms", "300",
                    "--fault-stall-rate", "0.05", "--fault-seed", (char *)seed, NULL};
    pid_t p = spawn(argv, log);
    for (int i = 0; i < 250; i++) {
        char *s = slurp(portfile, NULL);
        int port = s ? atoi(s) : 0;
        free(s);
        if (port > 0)
            return p;
        sleep_s(0.02);
    }
    return p;
}

static int read_port(const char *portfile)
{
    char *s = slurp(portfile, NULL);
    int port = s ? atoi(s) : 0;
    free(s);
    return port;
}

static void test_soak(double secs)
{
    char portfile[512], slog[512], llog[512], out[512], listen[64], dur[32], path[600];
    snprintf(portfile, sizeof portfile, "%s/port", tmpdir);
    snprintf(slog, sizeof slog, "%s/serve.log", tmpdir);
    snprintf(llog, sizeof llog, "%s/load.log", tmpdir);
    snprintf(out, sizeof out, "%s/soak", tmpdir);
    snprintf(dur, sizeof dur, "%.0f", secs);

    pid_t s1 = start_server("127.0.0.1:0", portfile, "1", slog);
    int port = read_port(portfile);
    CHECKF(port > 0, "server 1 listening (port %d)", port);
    if (port <= 0) {
        kill(s1, SIGKILL);
        waitpid(s1, NULL, 0);
        return;
    }
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    char *largv[] = {(char *)test_bin(), "load", "--url", url, "--model", "fake", "--trace",
                     "traces/samples/agentic-synth.jsonl", "-o", out, "--force", "--quiet",
                     "--duration", dur, "--concurrency", "24", "--idle-cap", "0.2", "--think-cap", "0.2", "--grace",
                     "20", "--read-timeout", "30", "--connect-timeout", "2", "--min-duration",
                     "1", NULL};
    double t0 = mono_s();
    pid_t ld = spawn(largv, llog);

    /* Outage at 40 % of the run: scrape, kill, 3 s down, restart. */
    sleep_s(0.4 * secs);
    struct faults f1, f2;
    bool ok1 = scrape(port, &f1);
    kill(s1, SIGKILL);
    double t_kill = mono_s() - t0;
    waitpid(s1, NULL, 0);
    CHECK(ok1, "server 1 /metrics answered before the kill");
    sleep_s(3);
    pid_t s2 = start_server(listen, portfile, "2", slog);
    double t_up = mono_s() - t0;
    CHECKF(read_port(portfile) == port, "server 2 listening on the same port %d", port);

    int rc = wait_for(ld, secs + 120);
    CHECKF(rc == 0, "load exits 0 after the outage (got %d; log %s)", rc, llog);
    bool ok2 = scrape(port, &f2);
    CHECK(ok2, "server 2 /metrics answered at the end");
    kill(s2, SIGTERM);
    if (wait_for(s2, 20) != 0)
        CHECK(0, "server 2 stops cleanly on SIGTERM");

    snprintf(path, sizeof path, "%s/run.json", out);
    json_error_t je;
    json_t *run = json_load_file(path, 0, &je);
    CHECKF(run != NULL, "soak run.json parses (%s)", run ? "" : je.text);
    long long sent = json_integer_value(json_object_get(json_object_get(run, "run"), "calls_sent"));
    CHECK(!json_is_true(json_object_get(run, "partial")), "soak run not partial");
    json_decref(run);

    snprintf(path, sizeof path, "%s/requests.jsonl", out);
    size_t len;
    char *d = slurp(path, &len);
    CHECK(d != NULL, "requests.jsonl written");
    if (!d)
        return;
    long long records = 0, dup = 0, err500 = 0, cut = 0, refused = 0, outage_cut = 0,
              ok_after = 0, other = 0, okn = 0, stalled = 0, n_cut = 0, cap_cut = 0, cancelled = 0;
    double first_refused = -1, *cut_end = NULL;
    double last_start = 0;
    size_t kcap = 1 << 16, kn = 0;
    uint64_t *keys = calloc(kcap, sizeof *keys);
    for (char *line = d, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = 0;
        json_t *r = json_loads(line, 0, &je);
        if (!r) {
            CHECKF(0, "record %lld parses: %s", records + 1, je.text);
            continue;
        }
        records++;
        /* Key: session instance, call index, tree. */
        const char *sess = json_string_value(json_object_get(r, "session"));
        uint64_t h = 1469598103934665603ULL;
        for (const char *c = sess ? sess : ""; *c; c++)
            h = (h ^ (uint8_t)*c) * 1099511628211ULL;
        h = (h ^ (uint64_t)json_integer_value(json_object_get(r, "call"))) * 1099511628211ULL;
        h = (h ^ (uint64_t)json_integer_value(json_object_get(r, "tree"))) * 1099511628211ULL;
        h |= 1;
        if (2 * (kn + 1) > kcap) {
            uint64_t *nk = calloc(2 * kcap, sizeof *nk);
            for (size_t i = 0; i < kcap; i++)
                if (keys[i]) {
                    size_t j = keys[i] & (2 * kcap - 1);
                    while (nk[j])
                        j = (j + 1) & (2 * kcap - 1);
                    nk[j] = keys[i];
                }
            free(keys);
            keys = nk;
            kcap *= 2;
        }
        size_t j = h & (kcap - 1);
        while (keys[j] && keys[j] != h)
            j = (j + 1) & (kcap - 1);
        if (keys[j])
            dup++;
        else
            keys[j] = h, kn++;

        double start = (double)json_integer_value(json_object_get(r, "start_ns")) / 1e9;
        double end = (double)json_integer_value(json_object_get(r, "end_ns")) / 1e9;
        json_t *ft = json_object_get(r, "first_token_ns");
        if (start > last_start)
            last_start = start;
        const char *e = json_string_value(json_object_get(r, "error"));
        if (!e) {
            okn++;
            if (start > t_up)
                ok_after++;
            if (json_is_integer(ft) &&
                (double)json_integer_value(ft) / 1e9 - start >= 0.3)
                stalled++;
        } else if (json_is_true(json_object_get(r, "cancelled"))) {
            cancelled++; /* a long call cut at the end of the grace period */
        } else if (!strncmp(e, "HTTP 500", 8)) {
            err500++;
        } else if (strstr(e, "connect") || strstr(e, "Connection refused")) {
            refused++;
            if (first_refused < 0 || start < first_refused)
                first_refused = start;
        } else if (!strncmp(e, "transport", 9) || !strncmp(e, "malformed", 9)) {
            if (n_cut == cap_cut)
                cut_end = realloc(cut_end, (cap_cut = 2 * cap_cut + 16) * sizeof *cut_end);
            cut_end[n_cut++] = end;
        } else {
            other++;
            if (other <= 3)
                fprintf(stderr, "soak: unexpected error: %s\n", e);
        }
        json_decref(r);
    }
    free(keys);
    /* Streams cut by the kill end at the kill, all within a few ms, just
     * before the first refused connection starts (times in the load's own
     * clock): the latest cut ending by then marks the kill; cuts within
     * 50 ms before it are the outage's, the others injected disconnects. */
    double kill_end = -1;
    for (long long i = 0; i < n_cut; i++)
        if (first_refused >= 0 && cut_end[i] <= first_refused + 0.01 && cut_end[i] > kill_end)
            kill_end = cut_end[i];
    for (long long i = 0; i < n_cut; i++) {
        if (kill_end >= 0 && cut_end[i] >= kill_end - 0.05 && cut_end[i] <= first_refused + 0.01)
            outage_cut++;
        else
            cut++;
    }
    free(cut_end);
    free(d);
    long long inj_err = f1.error + f2.error, inj_disc = f1.disconnect + f2.disconnect,
              inj_stall = f1.stall + f2.stall;
    CHECKF(records > 0 && records == sent, "one record per call sent (%lld records, %lld sent)",
           records, sent);
    CHECKF(dup == 0, "no call recorded twice (%lld duplicates)", dup);
    CHECKF(last_start > 0.9 * secs, "the generator kept going to the end (last start %.1f s of %.0f)",
           last_start, secs);
    CHECKF(err500 == inj_err, "HTTP 500 records %lld = errors injected %lld", err500, inj_err);
    CHECKF(cut == inj_disc, "cut-stream records %lld = disconnects injected %lld", cut, inj_disc);
    CHECKF(inj_err > 0 && inj_disc > 0 && inj_stall > 0, "every fault kind injected (%lld, %lld, %lld)",
           inj_err, inj_disc, inj_stall);
    CHECKF(stalled >= inj_stall / 2, "stalled calls seen as slow first tokens (%lld for %lld stalls)",
           stalled, inj_stall);
    CHECKF(refused > 0, "outage recorded as connection errors (%lld)", refused);
    CHECKF(ok_after > 0, "calls succeed again after the restart (%lld)", ok_after);
    CHECKF(other == 0, "no other kind of error (%lld)", other);
    CHECKF(cancelled <= 8, "at most one call per lane cut by the grace period (%lld)", cancelled);
    printf("NOTE soak %.0f s: %lld calls, %lld ok, %lld cut at the grace end; injected: %lld errors, %lld disconnects, "
           "%lld stalls; recorded: %lld HTTP 500, %lld cut streams, %lld slow first tokens; "
           "outage %.1f-%.1f s: %lld refused, %lld cut by the kill, %lld ok after\n",
           secs, records, okn, cancelled, inj_err, inj_disc, inj_stall, err500, cut, stalled, t_kill, t_up,
           refused, outage_cut, ok_after);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/agentreplay-test-reliability-%d", (int)getpid());
    mkdir(tmpdir, 0755);
    const char *s = getenv("SOAK_SECONDS");
    double secs = s && atof(s) > 0 ? atof(s) : 40;
    bool soak_only = argc > 1 && !strcmp(argv[1], "--soak");
    if (access(test_bin(), X_OK) != 0) {
        SKIP("no agentreplay binary (AGENTREPLAY_BIN)");
        return test_report();
    }
    if (!soak_only) {
        const char *trace = test_shared("traces/agentic-cc");
        if (trace) {
            char t[4096];
            snprintf(t, sizeof t, "%s", trace);
            test_hit_rate(t);
            test_determinism(t);
        } else {
            SKIP("no shared traces: hit-rate and determinism checks");
        }
    }
    if (system("curl --version >/dev/null 2>&1") != 0)
        SKIP("no curl: soak skipped");
    else
        test_soak(secs);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (!getenv("KEEP_TMP") && th_failed == 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report();
}
