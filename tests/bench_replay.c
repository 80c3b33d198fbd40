/* bench_replay.c: the replayer's own cost. Replays the public agentic
 * traces (or the built-in sample) at concurrency 8, 64 and 512 for 1800 s
 * of virtual time against the fixed-rate fake target without its prefix
 * cache (no engine, no cache lookups: the
 * replayer, records and metrics alone) and against the engine, with
 * records written to /dev/null: calls and chunks per second of CPU time,
 * and the replayer's memory held per call (metrics arrays; records are
 * streamed, not held). */
#include <sys/resource.h>
#include <time.h>

#include "engine/engine.h"
#include "replay/replay.h"
#include "engine/target.h"
#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench(const struct trace *t, int conc, bool engine)
{
    char err[ERR_LEN];
    struct loop *l = loop_virtual_create();
    struct target *tg;
    if (engine) {
        struct engine_config ec;
        engine_config_defaults(&ec);
        tg = target_engine_create(&ec, l, err);
    } else {
        struct target_fake_config fc = {.overhead_ns = 20000000, .prefill_ns_per_token = 20000,
                                        .tpot_ns = 10000000, .chunk_tokens = 3, .gpus = 16,
                                        .cache = false};
        tg = target_fake_create(&fc, l);
    }
    if (!tg) {
        printf("  engine: %s\n", err);
        loop_destroy(l);
        return;
    }
    struct replay_config rc;
    replay_config_defaults(&rc);
    rc.concurrency = conc;
    struct replay *r = replay_create(&rc, t, tg, l, err);
    FILE *devnull = fopen("/dev/null", "w");
    struct records_writer *w = records_from_stream(devnull, false);
    replay_set_outputs(r, w, devnull);
    double c0 = cpu_s();
    replay_start(r);
    loop_run(l);
    double dt = cpu_s() - c0;
    struct metrics_summary s;
    struct replay_outcome o;
    replay_summarize(r, NULL, &s, &o);
    const struct metrics *m = replay_metrics(r);
    double held = (double)(m->ttft_ms.cap + m->tpot_ms.cap + m->e2el_ms.cap + m->sched_ms.cap) * 8 +
                  (double)m->sess_cap * sizeof(struct metrics_session);
    printf("  %-6s c=%-4d %7llu calls %9llu chunks  %6.3f s CPU  %9.0f calls/s  %10.0f chunks/s  "
           "%5.1f B/call held\n",
           engine ? "engine" : "fake", conc, (unsigned long long)s.records,
           (unsigned long long)s.itl_ms.n, dt, (double)s.records / dt, (double)s.itl_ms.n / dt,
           held / (double)(s.records ? s.records : 1));
    replay_destroy(r);
    records_close(w, NULL);
    fclose(devnull);
    target_destroy(tg);
    loop_destroy(l);
}

int main(void)
{
    char err[ERR_LEN];
    const char *p = test_shared("traces/agentic-cc");
    struct trace_read_opts o = {0};
    struct trace *t = trace_read(p ? p : "traces/samples/agentic-synth.jsonl", &o, err);
    if (!t) {
        printf("bench_replay: %s\n", err);
        return 1;
    }
    printf("bench_replay: %s, 1800 s virtual, records to /dev/null\n", p ? p : "sample trace");
    int cs[] = {8, 64, 512};
    for (size_t i = 0; i < ARRAY_LEN(cs); i++)
        bench(t, cs[i], false);
    for (size_t i = 0; i < 2; i++)
        bench(t, cs[i], true);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("  peak RSS %.1f MiB\n", (double)ru.ru_maxrss / 1024);
    trace_destroy(t);
    return 0;
}
