/* bench_engine.c: simulation speed of the engine (make bench).
 *
 * Replays agentic sessions through the engine with a simple closed loop:
 * N live session slots; each replays one trace session's calls in order,
 * waiting the recorded think time (capped at 10 s) after each call ends,
 * then takes the next session (cycling through the trace, each lap with
 * its own session keys so laps do not share cache). Sessions come from
 * traces/samples/agentic-synth.jsonl, else the public agentic-cc traces.
 *
 * Prints simulated seconds per wall second, engine steps, wall time per
 * step and peak RSS for Kimi K3 / 16 x GB300 / TP16 at 64 live sessions
 * (the median of five runs),
 * then how that changes from 1 to 1,024 live sessions and from 16 to
 * 1,024 GPUs (64 live sessions in all, then 64 per replica). Speed is
 * simulated time over this process's CPU time (one core, whatever else
 * the machine runs), with wall-clock speed beside it. Deterministic.
 *
 *     bench_engine [SIM]                          the table
 *     bench_engine SIM GPUS SESSIONS [VARIANT]    one setup; VARIANT turns a
 *         design choice off to measure it: stepwise (no closed-form runs),
 *         no-parks (blocks released one by one), no-hints (no session
 *         hints, hence no parks either). Results are the same; speed is
 *         not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <jansson.h>

#include "engine/engine.h"
#include "engine/clock/loop.h"
#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"
#include "traces/base/file.h"
#include "traces/base/time_ns.h"

#define THINK_CAP_NS (10 * NS_PER_S)

struct bench;

struct slot {
    struct bench *b;
    struct target_call r;
    struct loop_timer timer;
    uint32_t session;   /* trace session */
    uint32_t call;      /* index within it */
    uint64_t lap;
    uint64_t *blocks;
    uint32_t cap;
    bool in_flight;
};

struct bench {
    const struct trace *t;
    struct engine *e;
    struct loop *l;
    struct slot *slots;
    int n_slots;
    uint32_t next_session;
    uint64_t lap;
    int64_t calls_done, tokens_out;
};

static void slot_submit(struct loop *l, struct loop_timer *tm);

static void next_session(struct bench *b, struct slot *s)
{
    do {
        s->session = b->next_session++;
        if (b->next_session >= b->t->n_sessions) {
            b->next_session = 0;
            b->lap++;
        }
    } while (b->t->sessions[s->session].n_calls == 0);
    s->lap = b->lap;
    s->call = 0;
}

static void on_done(struct target_call *r, int64_t t, enum target_status st)
{
    struct slot *s = r->arg;
    struct bench *b = s->b;
    const struct trace_session *ts = &b->t->sessions[s->session];
    s->in_flight = false;
    b->calls_done++;
    int64_t think = 0;
    s->call++;
    if (s->call >= ts->n_calls) {
        next_session(b, s);
    } else {
        const struct trace_call *c = &b->t->calls[ts->first_call + s->call];
        think = c->think_ns > 0 ? c->think_ns : 0;
        if (think > THINK_CAP_NS)
            think = THINK_CAP_NS;
    }
    loop_at(b->l, &s->timer, t + think, slot_submit, s);
}

static void on_chunk(struct target_call *r, int64_t t, int64_t n)
{
    struct slot *s = r->arg;
    s->b->tokens_out += n;
}

static const struct target_cb CB = {NULL, on_chunk, on_done};

static void slot_submit(struct loop *l, struct loop_timer *tm)
{
    struct slot *s = tm->arg;
    struct bench *b = s->b;
    const struct trace_session *ts = &b->t->sessions[s->session];
    const struct trace_call *c = &b->t->calls[ts->first_call + s->call];
    if (c->n_blocks > s->cap) {
        s->cap = c->n_blocks * 2;
        s->blocks = realloc(s->blocks, s->cap * sizeof *s->blocks);
    }
    uint32_t nb = trace_call_blocks(b->t, c, s->blocks, s->cap);
    memset(&s->r, 0, sizeof s->r);
    s->r.id = ((uint64_t)s->session << 20) ^ s->call ^ (s->lap << 40);
    s->r.session_key = hash_mix(ts->root, s->lap);
    s->r.prompt_tokens = c->prompt_tokens > 0 ? c->prompt_tokens : 1;
    s->r.max_tokens = c->output_tokens > 0 ? c->output_tokens : 1;
    s->r.blocks = s->blocks;
    s->r.n_blocks = nb;
    s->r.trace_block_size = ts->block_size;
    s->r.cb = &CB;
    s->r.arg = s;
    char err[ERR_LEN];
    if (engine_submit(b->e, &s->r, err) < 0) {
        fprintf(stderr, "submit: %s\n", err);
        on_done(&s->r, loop_now(l), TARGET_ERR_NO_SPACE);
        return;
    }
    s->in_flight = true;
}

static void stop_cb(struct loop *l, struct loop_timer *t) { loop_stop(l); }

/* CPU time of this process: the speed on one core, whatever else the
 * machine runs. */
static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

struct result {
    double sim_s, wall_s, cpu_s, speed, wall_speed, us_per_step, closed_frac;
    int64_t steps, calls, tokens;
    double hit;
};

/* A design choice turned off (one-setup mode), or NULL. */
static const char *VARIANT;

static int run(const struct trace *t, int gpus, int tp, int sessions, double sim_s,
               struct result *out)
{
    struct engine_config c;
    engine_config_defaults(&c);
    c.gpus = gpus;
    c.tp = tp;
    if (VARIANT) {
        c.stepwise = !strcmp(VARIANT, "stepwise");
        c.no_parks = !strcmp(VARIANT, "no-parks");
        c.hint_bytes = !strcmp(VARIANT, "no-hints") ? -1 : 0;
    }
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    struct bench b = {.t = t, .l = l};
    b.e = engine_create(&c, l, err);
    if (!b.e) {
        fprintf(stderr, "engine: %s\n", err);
        loop_destroy(l);
        return -1;
    }
    b.slots = calloc((size_t)sessions, sizeof *b.slots);
    b.n_slots = sessions;
    struct rng rg;
    rng_init(&rg, 7, RNG_TRACE);
    for (int i = 0; i < sessions; i++) {
        struct slot *s = &b.slots[i];
        s->b = &b;
        next_session(&b, s);
        /* Staggered start over the first 10 s. */
        loop_at(l, &s->timer, (int64_t)rng_below(&rg, 10 * NS_PER_S), slot_submit, s);
    }
    struct loop_timer stop = {0};
    loop_at(l, &stop, (int64_t)(sim_s * NS_PER_S), stop_cb, NULL);
    int64_t w0 = wall_ns(), c0 = cpu_ns();
    loop_run(l);
    int64_t w1 = wall_ns(), c1 = cpu_ns();
    struct target_stats st;
    engine_get_stats(b.e, &st);
    json_t *d = engine_describe_json(b.e);
    json_t *counts = json_object_get(d, "counts");
    int64_t run_steps = json_integer_value(json_object_get(counts, "closed_form_steps"));
    json_decref(d);
    out->sim_s = loop_now(l) / 1e9;
    out->wall_s = (w1 - w0) / 1e9;
    out->cpu_s = (c1 - c0) / 1e9;
    out->speed = out->sim_s / out->cpu_s;
    out->wall_speed = out->sim_s / out->wall_s;
    out->steps = st.steps;
    out->us_per_step = st.steps ? out->cpu_s * 1e6 / (double)st.steps : 0;
    out->closed_frac = st.steps ? (double)run_steps / (double)st.steps : 0;
    out->calls = b.calls_done;
    out->tokens = b.tokens_out;
    out->hit = st.prompt_tokens ? (double)st.cached_tokens / (double)st.prompt_tokens : 0;
    engine_destroy(b.e);
    for (int i = 0; i < sessions; i++)
        free(b.slots[i].blocks);
    free(b.slots);
    loop_destroy(l);
    return 0;
}

static void row(const char *label, const struct result *r)
{
    printf("%-26s %9.0fx %9.0fx %7.0f %7.3f %9lld %7.2f %6.0f%% %7lld %6.3f\n", label,
           r->speed, r->wall_speed, r->sim_s, r->cpu_s, (long long)r->steps, r->us_per_step,
           100 * r->closed_frac, (long long)r->calls, r->hit);
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

int main(int argc, char **argv)
{
    char err[ERR_LEN];
    char path[4096] = "";
    const char *src = NULL;
    if (file_data_path("traces/samples/agentic-synth.jsonl", path, sizeof path) == 0)
        src = path;
    else if ((src = test_shared("traces/agentic-cc")) == NULL) {
        printf("bench_engine: no sample trace and no ../shared/traces/agentic-cc; skipped\n");
        return 0;
    }
    struct trace_read_opts o = {0};
    struct trace *t = trace_read(src, &o, err);
    if (!t && src == path && (src = test_shared("traces/agentic-cc")) != NULL)
        t = trace_read(src, &o, err);
    if (!t) {
        fprintf(stderr, "bench_engine: %s\n", err);
        return 1;
    }
    double sim = argc > 1 ? atof(argv[1]) : 600;
    if (argc > 3) { /* one setup: SIM GPUS SESSIONS [VARIANT] */
        struct result r;
        VARIANT = argc > 4 ? argv[4] : NULL;
        if (VARIANT && strcmp(VARIANT, "stepwise") && strcmp(VARIANT, "no-parks") &&
            strcmp(VARIANT, "no-hints")) {
            fprintf(stderr, "bench_engine: variant %s: stepwise, no-parks or no-hints\n",
                    VARIANT);
            trace_destroy(t);
            return 2;
        }
        if (run(t, atoi(argv[2]), 16, atoi(argv[3]), sim, &r) == 0)
            row("one setup", &r);
        trace_destroy(t);
        return 0;
    }
    printf("engine simulation speed: Kimi K3, GB300, TP16, DSpark draft 7 (curve), "
           "affinity router; sessions from %s (%u sessions, %u calls), think time capped at "
           "10 s, %.0f s simulated per row\n\n", src, t->n_sessions, t->n_calls, sim);
    printf("%-26s %10s %10s %7s %7s %9s %7s %7s %7s %6s\n", "setup", "speed(cpu)",
           "speed(wall)", "sim s", "cpu s", "steps", "us/step", "closed", "calls", "hit");
    struct result r;
    /* The headline: the median of HEADLINE_RUNS runs by CPU speed (the
     * first run of a process also pays for growing its memory). */
    enum { HEADLINE_RUNS = 5 };
    struct result hr[HEADLINE_RUNS];
    int n_hr = 0;
    for (int i = 0; i < HEADLINE_RUNS; i++)
        if (run(t, 16, 16, 64, sim, &hr[n_hr]) == 0)
            n_hr++;
    for (int i = 1; i < n_hr; i++) /* insertion sort by speed */
        for (int j = i; j > 0 && hr[j].speed < hr[j - 1].speed; j--) {
            struct result x = hr[j];
            hr[j] = hr[j - 1];
            hr[j - 1] = x;
        }
    if (n_hr) {
        printf("%-26s", "16 GPUs, 64 sessions");
        printf("  (median of %d runs; slowest %.0fx, fastest %.0fx)\n", n_hr, hr[0].speed,
               hr[n_hr - 1].speed);
        row("  median", &hr[n_hr / 2]);
    }
    long rss = peak_rss_kb();
    printf("peak RSS after the headline runs: %.1f MB\n\n", rss / 1024.0);
    static const int sess[] = {1, 4, 16, 64, 256, 1024};
    for (size_t i = 0; i < ARRAY_LEN(sess); i++) {
        char label[64];
        snprintf(label, sizeof label, "16 GPUs, %d sessions", sess[i]);
        if (run(t, 16, 16, sess[i], sim, &r) == 0)
            row(label, &r);
    }
    printf("\n");
    static const int gpus[] = {16, 64, 256, 1024};
    for (size_t i = 1; i < ARRAY_LEN(gpus); i++) {
        char label[64];
        snprintf(label, sizeof label, "%d GPUs, 64 sessions", gpus[i]);
        if (run(t, gpus[i], 16, 64, sim, &r) == 0)
            row(label, &r);
    }
    printf("\n");
    for (size_t i = 0; i < ARRAY_LEN(gpus); i++) {
        char label[64];
        int s = 64 * gpus[i] / 16;
        snprintf(label, sizeof label, "%d GPUs, %d sessions", gpus[i], s);
        if (run(t, gpus[i], 16, s, sim, &r) == 0)
            row(label, &r);
    }
    printf("\npeak RSS: %.1f MB\n", peak_rss_kb() / 1024.0);
    trace_destroy(t);
    return 0;
}
