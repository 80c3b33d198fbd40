/* bench_trace.c: trace reading speed and memory. For the Mooncake
 * conversation trace, the agentic folder and a generated native trace of
 * about 100k calls (BENCH_TRACE_CALLS=N for another size): parse rate in
 * MB/s (median of 5 reads, by the reading thread's CPU time, so that a
 * loaded machine does not distort it; wall time beside it), peak RSS of a process that only
 * reads it, and the block-id storage: bytes per unique block id and per
 * call, against storing every call's whole chain.
 */
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>

#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/hmap.h"
#include "traces/base/time_ns.h"

static uint64_t path_bytes(const char *p)
{
    struct stat st;
    if (stat(p, &st))
        return 0;
    if (!S_ISDIR(st.st_mode))
        return (uint64_t)st.st_size;
    uint64_t n = 0;
    DIR *d = opendir(p);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t k = strlen(e->d_name);
        if (k > 5 && !strcmp(e->d_name + k - 5, ".json")) {
            char f[8192];
            snprintf(f, sizeof f, "%s/%s", p, e->d_name);
            if (!stat(f, &st))
                n += (uint64_t)st.st_size;
        }
    }
    if (d)
        closedir(d);
    return n;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Distinct (scope, id) pairs over all chains. */
static uint64_t unique_ids(const struct trace *t)
{
    struct hmap seen; /* a set of hashed (scope, id) pairs */
    hmap_init(&seen);
    for (uint32_t i = 0; i < t->n_calls; i++) {
        const struct trace_call *c = &t->calls[i];
        uint32_t scope = t->sessions[c->session].scope;
        for (uint32_t b = 0; b < c->n_blocks - c->n_shared; b++)
            hmap_put(&seen, hash_mix(hash_mix(0xb10c, scope), c->suffix[b]), NULL);
    }
    uint64_t n = hmap_size(&seen);
    hmap_free(&seen);
    return n;
}

static void bench_one(const char *what, const char *path)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid > 0) {
        int st;
        waitpid(pid, &st, 0);
        return;
    }
    /* Child: only this trace's reads count toward its peak RSS. */
    uint64_t bytes = path_bytes(path);
    int64_t ns[5], cpu[5];
    char err[ERR_LEN];
    struct trace *t = NULL;
    for (int r = 0; r < 5; r++) {
        trace_destroy(t);
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        int64_t t0 = wall_ns();
        t = trace_read(path, NULL, err);
        ns[r] = wall_ns() - t0;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        cpu[r] = (c1.tv_sec - c0.tv_sec) * NS_PER_S + (c1.tv_nsec - c0.tv_nsec);
        if (!t) {
            fprintf(stderr, "%s: %s\n", what, err);
            _exit(1);
        }
    }
    qsort(ns, 5, sizeof *ns, cmp_i64);
    qsort(cpu, 5, sizeof *cpu, cmp_i64);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t uniq = unique_ids(t);
    /* Chain storage: suffix ids plus the per-call chain fields (base,
     * n_shared, n_blocks, suffix pointer). */
    double per_call_fields = 3 * sizeof(uint32_t) + sizeof(void *);
    double stored = (double)t->stored_block_ids * 8 + per_call_fields * t->n_calls;
    double naive = (double)t->total_block_ids * 8;
    printf("%-24s %7.2f MB %6u calls: parse %6.1f MB/s on one core (CPU time, median of 5: "
           "%.3f s; wall %.3f s, %.1f MB/s), peak RSS %.1f MB\n",
           what, bytes / 1e6, t->n_calls, bytes / 1e6 / (cpu[2] / 1e9), cpu[2] / 1e9,
           ns[2] / 1e9, bytes / 1e6 / (ns[2] / 1e9), ru.ru_maxrss / 1024.0);
    printf("%-26s block ids: %llu in chains, %llu stored, %llu unique; %.2f bytes per unique id, "
           "%.1f bytes per call (whole chains: %.1f bytes per call)\n",
           "", (unsigned long long)t->total_block_ids, (unsigned long long)t->stored_block_ids,
           (unsigned long long)uniq, uniq ? stored / (double)uniq : 0,
           t->n_calls ? stored / t->n_calls : 0, t->n_calls ? naive / t->n_calls : 0);
    trace_destroy(t);
    fflush(stdout);
    _exit(0);
}

int main(void)
{
    const char *p = test_shared("traces/mooncake/conversation_trace.jsonl");
    if (p) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", p);
        bench_one("mooncake conversation", buf);
    }
    p = test_shared("traces/agentic-cc");
    if (p) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", p);
        bench_one("agentic-cc folder", buf);
    }
    /* A generated trace, written in the native format and read back. */
    const char *env = getenv("BENCH_TRACE_CALLS");
    double want = env ? atof(env) : 100000;
    struct trace_synth_params sp;
    trace_synth_defaults(&sp);
    sp.sessions = (uint32_t)(want / 63.5 + 1); /* the default trees average ~63 calls */
    sp.seed = 11;
    char err[ERR_LEN];
    struct trace *t = trace_synth(&sp, err);
    if (t) {
        char path[] = "/tmp/bench_traceXXXXXX";
        int fd = mkstemp(path);
        int ok = fd >= 0 && trace_write_native(t, path, err) == 0;
        if (fd >= 0)
            close(fd);
        trace_destroy(t); /* before the child forks: its RSS is its own */
        if (ok)
            bench_one("generated native", path);
        if (fd >= 0)
            unlink(path);
    }
    return 0;
}
