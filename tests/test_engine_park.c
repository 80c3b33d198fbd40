/* test_engine_park.c: parked prefixes (kvcache.h) change no result.
 *
 * Replays the public agentic-cc sessions (subagent sessions of one tree
 * share a session key, so blocks are shared between live requests) with a
 * closed loop of session slots through the engine with a small KV pool
 * (eviction), one step per event, and walks every
 * replica's scheduler and KV cache (engine_verify, which covers the parks)
 * after every step. The same run with parks off (every block released
 * and taken one by one) must give byte-identical records; the run with
 * parks on must have parked, adopted, materialised parks on eviction and
 * foreign lookup, and compacted or regrown the queue with parks live. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/clock/loop.h"
#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"
#include "traces/base/time_ns.h"

struct prun;

struct pslot {
    struct prun *p;
    struct target_call r;
    struct loop_timer timer;
    uint32_t session, call;
    uint64_t lap;
    uint64_t *blocks;
    uint32_t cap;
};

struct prun {
    const struct trace *t;
    struct engine *e;
    struct loop *l;
    uint32_t next_session;
    uint64_t lap;
    char *log;
    size_t len, cap;
    int64_t calls, hook_calls, hook_bad, preempt_with_parks, compact_with_parks;
    int64_t last_preemptions, last_compactions;
    char first_err[ERR_LEN];
};

static void logf_(struct prun *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(struct prun *p, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (p->len + (size_t)n + 1 > p->cap) {
        p->cap = p->cap ? p->cap * 2 : 1 << 16;
        p->log = realloc(p->log, p->cap);
    }
    memcpy(p->log + p->len, buf, (size_t)n + 1);
    p->len += (size_t)n;
}

static void slot_submit(struct loop *l, struct loop_timer *tm);

static void next_session(struct prun *p, struct pslot *s)
{
    do {
        s->session = p->next_session++;
        if (p->next_session >= p->t->n_sessions) {
            p->next_session = 0;
            p->lap++;
        }
    } while (p->t->sessions[s->session].n_calls == 0);
    s->lap = p->lap;
    s->call = 0;
}

static void on_first(struct target_call *r, int64_t t)
{
    struct pslot *s = r->arg;
    logf_(s->p, "%llu first %lld\n", (unsigned long long)r->id, (long long)t);
}

static void on_done(struct target_call *r, int64_t t, enum target_status st)
{
    struct pslot *s = r->arg;
    struct prun *p = s->p;
    logf_(p, "%llu done %lld st %d cached %lld preempted %lld replica %d\n",
          (unsigned long long)r->id, (long long)t, (int)st, (long long)r->cached_tokens,
          (long long)r->preemptions, r->replica);
    p->calls++;
    const struct trace_session *ts = &p->t->sessions[s->session];
    int64_t think = 0;
    if (++s->call >= ts->n_calls) {
        next_session(p, s);
    } else {
        think = p->t->calls[ts->first_call + s->call].think_ns;
        think = think < 0 ? 0 : think > 5 * NS_PER_S ? 5 * NS_PER_S : think;
    }
    loop_at(p->l, &s->timer, t + think, slot_submit, s);
}

static const struct target_cb CB = {on_first, NULL, on_done};

static void slot_submit(struct loop *l, struct loop_timer *tm)
{
    struct pslot *s = tm->arg;
    struct prun *p = s->p;
    const struct trace_session *ts = &p->t->sessions[s->session];
    const struct trace_call *c = &p->t->calls[ts->first_call + s->call];
    if (c->n_blocks > s->cap) {
        s->cap = c->n_blocks * 2;
        s->blocks = realloc(s->blocks, s->cap * sizeof *s->blocks);
    }
    uint32_t nb = trace_call_blocks(p->t, c, s->blocks, s->cap);
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
    if (engine_submit(p->e, &s->r, err) < 0) {
        logf_(p, "%llu rejected\n", (unsigned long long)s->r.id);
        on_done(&s->r, loop_now(l), TARGET_ERR_NO_SPACE);
    }
}

static void hook(struct engine *e, int replica, void *arg)
{
    struct prun *p = arg;
    char err[ERR_LEN];
    p->hook_calls++;
    if (engine_verify(e, err) < 0 && !p->hook_bad++)
        snprintf(p->first_err, sizeof p->first_err, "%s", err);
    struct target_stats st;
    struct engine_replica_stats rs;
    engine_get_stats(e, &st);
    engine_get_replica_stats(e, replica, &rs);
    if (st.preemptions > p->last_preemptions && rs.parks_live)
        p->preempt_with_parks++;
    int64_t cr = rs.queue_compactions + rs.queue_regrowths;
    if (cr > p->last_compactions && rs.parks_live)
        p->compact_with_parks++;
    p->last_preemptions = st.preemptions;
    p->last_compactions = cr;
}

static void stop_cb(struct loop *l, struct loop_timer *t) { loop_stop(l); }

static void run(const struct trace *t, bool no_parks, double util, int slots, double sim_s,
                struct prun *p, struct engine_replica_stats *rs)
{
    memset(p, 0, sizeof *p);
    memset(rs, 0, sizeof *rs);
    struct engine_config c;
    engine_config_defaults(&c);
    c.gpus = 16;
    c.tp = 16;
    c.gpu_memory_utilization = util;
    c.max_model_len = util < 0.44 ? 100000 : 200000;
    c.stepwise = true;
    c.no_parks = no_parks;
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    p->t = t;
    p->l = l;
    p->e = engine_create(&c, l, err);
    if (!p->e) {
        fprintf(stderr, "engine_create: %s\n", err);
        CHECK(0, "engine_create");
        loop_destroy(l);
        return;
    }
    engine_set_step_hook(p->e, hook, p);
    struct pslot *ss = calloc((size_t)slots, sizeof *ss);
    struct rng rg;
    rng_init(&rg, 11, RNG_TRACE);
    for (int i = 0; i < slots; i++) {
        ss[i].p = p;
        next_session(p, &ss[i]);
        loop_at(l, &ss[i].timer, (int64_t)rng_below(&rg, 5 * NS_PER_S), slot_submit, &ss[i]);
    }
    struct loop_timer stop = {0};
    loop_at(l, &stop, (int64_t)(sim_s * NS_PER_S), stop_cb, NULL);
    loop_run(l);
    struct target_stats st;
    engine_get_stats(p->e, &st);
    logf_(p, "end %lld steps %lld preemptions %lld cached %lld of %lld\n",
          (long long)loop_now(l), (long long)st.steps, (long long)st.preemptions,
          (long long)st.cached_tokens, (long long)st.prompt_tokens);
    engine_get_replica_stats(p->e, 0, rs);
    engine_destroy(p->e);
    for (int i = 0; i < slots; i++)
        free(ss[i].blocks);
    free(ss);
    loop_destroy(l);
}

static void check_pair(const struct trace *t, double util, int slots, double sim_s,
                       int64_t want_adopted)
{
    struct prun a, b;
    struct engine_replica_stats ra, rb;
    run(t, false, util, slots, sim_s, &a, &ra);
    run(t, true, util, slots, sim_s, &b, &rb);
    bool same = a.log && b.log && a.len == b.len && !memcmp(a.log, b.log, a.len);
    if (!same && a.log && b.log) {
        size_t i = 0;
        while (i < a.len && i < b.len && a.log[i] == b.log[i])
            i++;
        size_t s = i > 120 ? i - 120 : 0;
        fprintf(stderr, "first difference at byte %zu:\n  parks: %.240s\n  none:  %.240s\n", i,
                a.log + s, b.log + s);
    }
    CHECKF(same && a.calls > 100, "util %.2f, %d slots: parks on and off give byte-identical "
           "records (%lld calls)", util, slots, (long long)a.calls);
    CHECKF(a.hook_bad == 0 && b.hook_bad == 0 && a.hook_calls > 1000,
           "engine_verify after each of %lld steps: %s", (long long)a.hook_calls,
           a.hook_bad ? a.first_err : b.hook_bad ? b.first_err : "ok");
    fprintf(stderr, "util %.2f, %d slots: %lld calls, %lld parks, %lld adopted, %lld blocks "
                    "materialised, %lld preemptions and %lld queue compactions/regrowths "
                    "with parks live\n", util, slots, (long long)a.calls,
            (long long)ra.parks_made, (long long)ra.parks_adopted,
            (long long)ra.park_blocks_materialised, (long long)a.preempt_with_parks,
            (long long)a.compact_with_parks);
    CHECKF(ra.parks_made > 20 && ra.parks_adopted >= want_adopted &&
               ra.park_blocks_materialised > 0,
           "parks made (%lld), adopted (%lld), materialised (%lld blocks)",
           (long long)ra.parks_made, (long long)ra.parks_adopted,
           (long long)ra.park_blocks_materialised);
    CHECK(rb.parks_made == 0, "none with parks off");
    CHECKF(a.compact_with_parks > 0, "queue compacted or regrown with parks live (%lld)",
           (long long)a.compact_with_parks);
    free(a.log);
    free(b.log);
}

int main(void)
{
    const char *dir = test_shared("traces/agentic-cc");
    if (!dir) {
        SKIP("no ../shared/traces/agentic-cc");
        return test_report();
    }
    char err[ERR_LEN];
    struct trace_read_opts o = {0};
    struct trace *t = trace_read(dir, &o, err);
    CHECKF(t != NULL, "read agentic-cc: %s", t ? "ok" : err);
    if (!t)
        return test_report();
    /* A small pool (about 330k tokens; these prompts are 20k-120k):
     * eviction reaches parks before the next call. Then a roomier one,
     * where most next calls adopt their session's park. (Preemption with
     * parks live: test_engine.c.) */
    check_pair(t, 0.41, 16, 240, 0);
    check_pair(t, 0.45, 16, 240, 20);
    trace_destroy(t);
    return test_report();
}
