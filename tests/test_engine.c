/* test_engine.c: the engine as a target: closed-form runs give exactly
 * the records of one-by-one stepping on a random workload (sessions with
 * growing prefixes, think times, cancellations, preemptions, two
 * replicas); determinism; verify walkers after every step; decode speed
 * of a fixed batch equal to the cost model's bench-decode figure; bad
 * input; engine info; the Chrome trace. */
#include "engine/engine.h"

#include <jansson.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "engine/cost.h"
#include "engine/preset.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/time_ns.h"

/* ---- a random closed-loop workload ---- */

#define MAX_CALLS 8
#define MAX_BLOCKS 1024

struct wsession;

struct wcall {
    struct target_call r;
    struct wsession *s;
    struct loop_timer cancel_timer;
    char *log;
    size_t len, cap;
};

struct wsession {
    struct engine *e;
    struct loop *l;
    struct loop_timer timer;
    int index, n_calls, next;
    struct rng rng;
    uint64_t blocks[MAX_BLOCKS];
    uint32_t n_blocks;
    struct wcall calls[MAX_CALLS];
    int bad_time;
};

static void logf_(struct wcall *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(struct wcall *c, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->len + (size_t)n + 1 > c->cap) {
        c->cap = (c->cap + (size_t)n + 1) * 2;
        c->log = realloc(c->log, c->cap);
    }
    memcpy(c->log + c->len, buf, (size_t)n + 1);
    c->len += (size_t)n;
}

static void w_first(struct target_call *r, int64_t t)
{
    struct wcall *c = (struct wcall *)r;
    if (t > loop_now(c->s->l))
        c->s->bad_time++;
    logf_(c, "F%lld ", (long long)t);
}

static void w_chunk(struct target_call *r, int64_t t, int64_t n)
{
    struct wcall *c = (struct wcall *)r;
    if (t > loop_now(c->s->l))
        c->s->bad_time++;
    logf_(c, "C%lld+%lld ", (long long)t, (long long)n);
}

static void w_submit(struct loop *l, struct loop_timer *t);

static void w_done(struct target_call *r, int64_t t, enum target_status st)
{
    struct wcall *c = (struct wcall *)r;
    struct wsession *s = c->s;
    if (t != loop_now(s->l))
        s->bad_time++;
    loop_cancel(s->l, &c->cancel_timer);
    logf_(c, "D%lld st%d cached%lld pre%lld rep%d\n", (long long)t, st,
          (long long)r->cached_tokens, (long long)r->preemptions, r->replica);
    if (s->next < s->n_calls) {
        int64_t think = (int64_t)rng_below(&s->rng, 2000) * NS_PER_MS;
        loop_at(s->l, &s->timer, t + think, w_submit, s);
    }
}

static const struct target_cb WCB = {w_first, w_chunk, w_done};

static void w_cancel(struct loop *l, struct loop_timer *t)
{
    struct wcall *c = t->arg;
    engine_cancel(c->s->e, &c->r);
}

static void w_submit(struct loop *l, struct loop_timer *t)
{
    struct wsession *s = t->arg;
    struct wcall *c = &s->calls[s->next++];
    /* Each call extends the session's chain (previous output + new input). */
    uint32_t add = 1 + (uint32_t)rng_below(&s->rng, 120);
    if (s->n_blocks + add > MAX_BLOCKS)
        add = MAX_BLOCKS - s->n_blocks;
    for (uint32_t i = 0; i < add; i++)
        s->blocks[s->n_blocks + i] = rng_next(&s->rng);
    s->n_blocks += add;
    /* Sometimes a call branches: a new id in the middle of the chain. */
    if (s->n_blocks > 4 && rng_below(&s->rng, 6) == 0)
        s->blocks[s->n_blocks / 2] = rng_next(&s->rng);
    memset(&c->r, 0, sizeof c->r);
    c->r.id = (uint64_t)s->index * 100 + (uint64_t)s->next;
    c->r.session_key = (uint64_t)(s->index % 7); /* a few trees share prefixes */
    c->r.prompt_tokens = (int64_t)s->n_blocks * 64 + (int64_t)rng_below(&s->rng, 64);
    c->r.max_tokens = 1 + (int64_t)rng_below(&s->rng, rng_below(&s->rng, 4) ? 300 : 1500);
    c->r.blocks = s->blocks;
    c->r.n_blocks = s->n_blocks;
    c->r.trace_block_size = 64;
    c->r.cb = &WCB;
    c->s = s;
    char err[ERR_LEN];
    logf_(c, "S%lld p%lld m%lld: ", (long long)loop_now(l), (long long)c->r.prompt_tokens,
          (long long)c->r.max_tokens);
    if (engine_submit(s->e, &c->r, err) < 0) {
        logf_(c, "E %s\n", err);
        return;
    }
    if (rng_below(&s->rng, 12) == 0) {
        int64_t after = (int64_t)rng_below(&s->rng, 3000) * NS_PER_MS;
        loop_at(l, &c->cancel_timer, loop_now(l) + after, w_cancel, c);
    }
}

/* Samples the engine's counters every 250 ms into the log (they must be
 * the same in both advance modes). */
struct sampler {
    struct loop_timer timer;
    struct engine *e;
    struct loop *l;
    char *log;
    size_t len, cap;
    int n;
};

static void sample_cb(struct loop *l, struct loop_timer *t)
{
    struct sampler *sm = t->arg;
    struct target_stats st;
    engine_get_stats(sm->e, &st);
    char buf[160];
    int n = snprintf(buf, sizeof buf, "%lld %lld %lld %lld %lld %lld\n", (long long)loop_now(l),
                     (long long)st.output_tokens, (long long)st.steps, (long long)st.busy_ns,
                     (long long)st.running, (long long)st.waiting);
    if (sm->len + (size_t)n + 1 > sm->cap) {
        sm->cap = (sm->cap + (size_t)n + 1) * 2;
        sm->log = realloc(sm->log, sm->cap);
    }
    memcpy(sm->log + sm->len, buf, (size_t)n + 1);
    sm->len += (size_t)n;
    if (++sm->n < 400)
        loop_at(l, t, loop_now(l) + 250 * NS_PER_MS, sample_cb, sm);
}

struct hook_state {
    int64_t calls, bad;
    char first_err[ERR_LEN];
};

static void verify_hook(struct engine *e, int replica, void *arg)
{
    struct hook_state *h = arg;
    char err[ERR_LEN];
    h->calls++;
    if (engine_verify(e, err) < 0) {
        if (!h->bad)
            snprintf(h->first_err, sizeof h->first_err, "%s", err);
        h->bad++;
    }
}

struct wresult {
    char *text;
    char *samples;
    struct target_stats st;
    int64_t end_ns, runs;
    int bad_time;
    struct hook_state hook;
};

static void base_config(struct engine_config *c)
{
    engine_config_defaults(c);
    c->gpus = 32;
    c->tp = 16;
    /* A small KV pool (about 326k tokens per replica) so that preemption
     * and eviction happen. */
    c->gpu_memory_utilization = 0.41;
    c->max_model_len = 80000;
}

static void run_workload(const struct engine_config *cfg, int n_sessions, bool verify,
                         struct wresult *out)
{
    memset(out, 0, sizeof *out);
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    struct engine *e = engine_create(cfg, l, err);
    if (!e) {
        fprintf(stderr, "engine_create: %s\n", err);
        CHECK(0, "engine_create");
        loop_destroy(l);
        return;
    }
    if (verify)
        engine_set_step_hook(e, verify_hook, &out->hook);
    struct wsession *ss = calloc((size_t)n_sessions, sizeof *ss);
    for (int i = 0; i < n_sessions; i++) {
        struct wsession *s = &ss[i];
        s->e = e;
        s->l = l;
        s->index = i;
        rng_init(&s->rng, 1000 + (uint64_t)i, RNG_SYNTH);
        s->n_calls = 2 + (int)rng_below(&s->rng, MAX_CALLS - 1);
        /* Sessions of one tree start from the same system prompt. */
        struct rng tree;
        rng_init(&tree, 77 + (uint64_t)(i % 7), RNG_SYNTH);
        s->n_blocks = 20 + (uint32_t)rng_below(&tree, 100);
        for (uint32_t k = 0; k < s->n_blocks; k++)
            s->blocks[k] = rng_next(&tree);
        loop_at(l, &s->timer, (int64_t)rng_below(&s->rng, 5000) * NS_PER_MS, w_submit, s);
    }
    struct sampler sm = {.e = e, .l = l};
    loop_at(l, &sm.timer, 100 * NS_PER_MS + 7, sample_cb, &sm);
    loop_run(l);
    out->samples = sm.log;
    out->end_ns = loop_now(l);
    engine_get_stats(e, &out->st);
    json_t *d = engine_describe_json(e);
    out->runs = json_integer_value(json_object_get(json_object_get(d, "counts"), "closed_form_runs"));
    json_decref(d);
    size_t total = 1;
    for (int i = 0; i < n_sessions; i++)
        for (int k = 0; k < ss[i].n_calls; k++)
            total += ss[i].calls[k].len;
    out->text = malloc(total);
    size_t at = 0;
    for (int i = 0; i < n_sessions; i++) {
        out->bad_time += ss[i].bad_time;
        for (int k = 0; k < ss[i].n_calls; k++) {
            memcpy(out->text + at, ss[i].calls[k].log ? ss[i].calls[k].log : "", ss[i].calls[k].len);
            at += ss[i].calls[k].len;
            free(ss[i].calls[k].log);
        }
    }
    out->text[at] = 0;
    free(ss);
    engine_destroy(e);
    loop_destroy(l);
}

static void first_diff(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] && a[i] == b[i])
        i++;
    size_t s = i > 80 ? i - 80 : 0;
    fprintf(stderr, "first difference at byte %zu:\n  A: %.160s\n  B: %.160s\n", i, a + s, b + s);
}

static void test_closed_form_identity(void)
{
    struct engine_config c;
    base_config(&c);
    struct wresult a, b;
    c.stepwise = true;
    run_workload(&c, 60, true, &a);
    c.stepwise = false;
    run_workload(&c, 60, false, &b);
    CHECK(a.text && b.text && strlen(a.text) > 1000, "workload produced records");
    bool same = a.text && b.text && !strcmp(a.text, b.text);
    if (!same && a.text && b.text)
        first_diff(a.text, b.text);
    CHECK(same, "closed-form runs and one-by-one stepping give byte-identical records");
    CHECK(a.samples && b.samples && !strcmp(a.samples, b.samples),
          "engine counters sampled during the run agree too");
    CHECK(a.st.steps == b.st.steps && a.st.output_tokens == b.st.output_tokens &&
              a.st.preemptions == b.st.preemptions && a.end_ns == b.end_ns,
          "and identical step counts, tokens, preemptions, end time");
    CHECKF(a.st.preemptions > 0, "the workload preempts (%lld)", (long long)a.st.preemptions);
    CHECKF(a.st.cached_tokens > a.st.prompt_tokens / 4, "prefix hits (%lld of %lld)",
           (long long)a.st.cached_tokens, (long long)a.st.prompt_tokens);
    CHECKF(b.runs > 0 && a.runs == 0, "closed form used runs (%lld), stepwise none (%lld)",
           (long long)b.runs, (long long)a.runs);
    CHECK(strstr(a.text, " st2 ") != NULL, "some calls were cancelled");
    CHECK(a.bad_time == 0 && b.bad_time == 0,
          "done at loop time; first token and chunks never after it");
    CHECKF(a.hook.calls > 1000 && a.hook.bad == 0, "verify walkers after %lld steps: %s",
           (long long)a.hook.calls, a.hook.bad ? a.hook.first_err : "ok");
    fprintf(stderr, "identity: %lld steps, %lld closed-form runs, %lld preemptions, "
                    "hit %.3f, %.1f s simulated\n",
            (long long)b.st.steps, (long long)b.runs, (long long)b.st.preemptions,
            (double)b.st.cached_tokens / (double)b.st.prompt_tokens, b.end_ns / 1e9);
    /* Parked prefixes only save work: with every block released and taken
     * one by one (and verify after every step), the same records. */
    struct wresult np;
    c.stepwise = true;
    c.no_parks = true;
    run_workload(&c, 60, true, &np);
    CHECK(np.text && !strcmp(a.text, np.text), "identical records without parks");
    CHECKF(np.hook.bad == 0, "verify without parks: %s", np.hook.bad ? np.hook.first_err : "ok");
    free(np.text);
    free(np.samples);
    c.no_parks = false;
    c.stepwise = false;
    /* Session hints only speed lookups up: without them, the same records. */
    struct wresult nh;
    c.hint_bytes = -1;
    run_workload(&c, 60, false, &nh);
    CHECK(nh.text && !strcmp(b.text, nh.text), "identical records without session hints");
    free(nh.text);
    free(nh.samples);
    c.hint_bytes = 0;
    /* Determinism: the same seed again, and another seed. */
    struct wresult d, f;
    run_workload(&c, 60, false, &d);
    CHECK(d.text && !strcmp(b.text, d.text), "same inputs and seed: identical records");
    c.seed = 2;
    run_workload(&c, 60, false, &f);
    CHECK(f.text && strcmp(b.text, f.text) != 0, "another seed: other acceptance draws");
    /* Other routers also hold identity. */
    c.seed = 1;
    c.router = ENGINE_ROUTER_LEAST_LOADED;
    c.spec = false;
    struct wresult g, h;
    c.stepwise = true;
    run_workload(&c, 40, false, &g);
    c.stepwise = false;
    run_workload(&c, 40, false, &h);
    CHECK(g.text && h.text && !strcmp(g.text, h.text),
          "identity without speculation, least-loaded router");
    struct wresult *all[] = {&a, &b, &d, &f, &g, &h};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        free(all[i]->text);
        free(all[i]->samples);
    }
}

/* ---- fixed-batch decode speed against the cost model ---- */

struct fb {
    int64_t first_min, last_max;
    int64_t tokens;
};
struct fb_req {
    struct target_call r;
    struct fb *b;
};
static void fb_first(struct target_call *r, int64_t t)
{
    struct fb *b = ((struct fb_req *)r)->b;
    if (b->first_min < 0 || t < b->first_min)
        b->first_min = t;
}
static void fb_chunk(struct target_call *r, int64_t t, int64_t n)
{
    struct fb *b = ((struct fb_req *)r)->b;
    if (t > b->last_max)
        b->last_max = t;
    b->tokens += n;
}
static void fb_done(struct target_call *r, int64_t t, enum target_status st) {}
static const struct target_cb FBCB = {fb_first, fb_chunk, fb_done};

static double engine_decode_tok_s(enum engine_backend be, int batch, int64_t osl, double *ref)
{
    struct engine_config c;
    engine_config_defaults(&c);
    c.backend = be;
    c.spec = false;
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    struct engine *e = engine_create(&c, l, err);
    if (!e) {
        fprintf(stderr, "%s\n", err);
        loop_destroy(l);
        return 0;
    }
    struct fb b = {.first_min = -1};
    struct fb_req *rs = calloc((size_t)batch, sizeof *rs);
    for (int i = 0; i < batch; i++) {
        rs[i].r.id = (uint64_t)i;
        rs[i].r.session_key = (uint64_t)i;
        rs[i].r.prompt_tokens = 1;
        rs[i].r.max_tokens = osl;
        rs[i].r.cb = &FBCB;
        rs[i].b = &b;
        engine_submit(e, &rs[i].r, err);
    }
    loop_run(l);
    free(rs);
    double tok_s = (double)batch * (double)(osl - 1) / ((b.last_max - b.first_min) / 1e9);
    /* The cost model's own fixed-batch run, as bench-decode computes it. */
    struct model_preset m;
    struct gpu_preset g;
    preset_load_model("kimi-k3", &m, err);
    preset_load_gpu("gb300", &g, err);
    struct cost_model *cm = cost_create(&m, &g, 16, be, NULL, false, err);
    struct cost_decode_run dr;
    *ref = 0;
    if (cm && cost_decode_run(cm, batch, 1, osl, 0, 0, &dr, err) == 0)
        *ref = dr.decode_tok_s;
    cost_destroy(cm);
    engine_destroy(e);
    loop_destroy(l);
    return tok_s;
}

static void test_decode_speed(void)
{
    static const int batches[] = {1, 8, 64};
    for (int be = 0; be < 2; be++)
        for (size_t i = 0; i < ARRAY_LEN(batches); i++) {
            double ref;
            double got = engine_decode_tok_s((enum engine_backend)be, batches[i], 1000, &ref);
            char what[128];
            snprintf(what, sizeof what, "%s batch %d: engine decode tok/s vs bench-decode",
                     engine_backend_name((enum engine_backend)be), batches[i]);
            CHECK_NEAR(got, ref, 0.01, what);
            if (batches[i] == 1)
                fprintf(stderr, "decode %s batch 1: engine %.1f tok/s, cost model %.1f\n",
                        engine_backend_name((enum engine_backend)be), got, ref);
        }
}

/* ---- bad input ---- */

static int g_status = -1;
static void st_done(struct target_call *r, int64_t t, enum target_status st) { g_status = st; }
static const struct target_cb STCB = {NULL, NULL, st_done};

static void test_bad_input(void)
{
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    struct engine_config c;
    struct engine *e;

    engine_config_defaults(&c);
    c.gpus = 24;
    e = engine_create(&c, l, err);
    CHECK(!e && strstr(err, "24") && strstr(err, "16"), "gpus not a multiple of tp");
    engine_config_defaults(&c);
    c.gpus = 16;
    c.tp = 8;
    snprintf(c.gpu, sizeof c.gpu, "h100");
    e = engine_create(&c, l, err);
    CHECK(!e && strstr(err, "does not fit") && strstr(err, "GB"), "model does not fit, with the numbers");
    engine_config_defaults(&c);
    c.tp = 16;
    snprintf(c.gpu, sizeof c.gpu, "h200");
    e = engine_create(&c, l, err);
    CHECK(!e && strstr(err, "NVLink"), "TP beyond the NVLink domain");
    engine_config_defaults(&c);
    c.draft = 3;
    snprintf(c.acceptance, sizeof c.acceptance, "fixed:5");
    e = engine_create(&c, l, err);
    CHECK(!e && strstr(err, "fixed:5") && strstr(err, "4"), "fixed acceptance above draft + 1");
    engine_config_defaults(&c);
    snprintf(c.model, sizeof c.model, "no-such-model");
    e = engine_create(&c, l, err);
    CHECK(!e, "unknown model preset");
    engine_config_defaults(&c);
    c.max_model_len = 1LL << 30;
    e = engine_create(&c, l, err);
    CHECK(!e && strstr(err, "max-model-len"), "max_model_len above the model's");

    char *argv1[] = {"x", "--block-size", "-16"};
    int i = 1;
    engine_config_defaults(&c);
    CHECK(flags_parse_one(engine_flags, &c, 3, argv1, &i, err) == -1 && strstr(err, "-16") &&
              strstr(err, "at least 1"), "negative block size names the value and the limit");
    char *argv2[] = {"x", "--gpus=32", "--unknown"};
    i = 1;
    CHECK(flags_parse_one(engine_flags, &c, 3, argv2, &i, err) == 1 && c.gpus == 32 && i == 2, "--gpus=32");
    CHECK(flags_parse_one(engine_flags, &c, 3, argv2, &i, err) == 0, "unknown flags are not consumed");

    /* A request that can never fit, and one too long. */
    engine_config_defaults(&c);
    c.max_model_len = 100000;
    e = engine_create(&c, l, err);
    CHECK(e != NULL, "engine with max_model_len 100000");
    if (e) {
        struct target_call r1;
        memset(&r1, 0, sizeof r1);
        r1.prompt_tokens = 99990;
        r1.max_tokens = 20;
        r1.cb = &STCB;
        CHECK(engine_submit(e, &r1, err) == 0, "too long: accepted, fails in done");
        loop_run(l);
        CHECK(g_status == TARGET_ERR_TOO_LONG, "done with TARGET_ERR_TOO_LONG");
        struct target_call r2 = {.prompt_tokens = 0, .max_tokens = 5, .cb = &STCB};
        CHECK(engine_submit(e, &r2, err) == -1 && strstr(err, "prompt_tokens"),
              "a zero-token prompt is refused");
        engine_destroy(e);
    }
    loop_destroy(l);
}

/* ---- the engine as a target (target.h) ---- */

struct tp_rec {
    struct target_call c;
    int n_first, n_chunks, n_done;
    int64_t tokens, done_t;
    enum target_status st;
};
static void tp_first(struct target_call *c, int64_t t) { ((struct tp_rec *)c)->n_first++; }
static void tp_chunk(struct target_call *c, int64_t t, int64_t n)
{
    struct tp_rec *r = (struct tp_rec *)c;
    r->n_chunks++;
    r->tokens += n;
}
static void tp_done(struct target_call *c, int64_t t, enum target_status st)
{
    struct tp_rec *r = (struct tp_rec *)c;
    r->n_done++;
    r->done_t = t;
    r->st = st;
}
static const struct target_cb TPCB = {tp_first, tp_chunk, tp_done};

static void test_target_protocol(void)
{
    struct engine_config c;
    engine_config_defaults(&c);
    c.gpus = 32;
    c.max_model_len = 100000;
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    struct target *tg = target_engine_create(&c, l, err);
    CHECK(tg && tg->gpus == 32 && !tg->live, "target_engine_create: 32 GPUs, not live");
    struct engine *e = target_engine_get(tg);
    CHECK(e && engine_replicas(e) == 2, "target_engine_get gives the engine (2 replicas)");
    struct tp_rec ok, big;
    memset(&ok, 0, sizeof ok);
    memset(&big, 0, sizeof big);
    ok.c = (struct target_call){.id = 1, .session_key = 5, .prompt_tokens = 500,
                                .max_tokens = 20, .cb = &TPCB, .cached_tokens = -1};
    snprintf(ok.c.error, sizeof ok.c.error, "stale");
    big.c = (struct target_call){.id = 2, .session_key = 6, .prompt_tokens = 99990,
                                 .max_tokens = 20, .cb = &TPCB};
    CHECK(target_submit(tg, &ok.c, err) == 0 && target_submit(tg, &big.c, err) == 0,
          "both calls accepted");
    CHECK(ok.c.priv && ok.c.replica >= 0 && ok.c.replica < 2 && ok.c.cached_tokens == 0 &&
              ok.c.http_status == 0 && ok.c.server_prompt_tokens == -1 &&
              ok.c.server_output_tokens == -1 && !ok.c.error[0],
          "at submit: routed, its state on priv, target fields reset");
    loop_run(l);
    CHECK(ok.n_done == 1 && ok.st == TARGET_OK && ok.n_first == 1 && ok.tokens == 20 &&
              !ok.c.priv && !ok.c.error[0], "a call runs to TARGET_OK with all its tokens");
    CHECK(big.n_done == 1 && big.st == TARGET_ERR_TOO_LONG && big.n_chunks == 0 &&
              !strcmp(big.c.error, target_status_name(TARGET_ERR_TOO_LONG)),
          "too long: TARGET_ERR_TOO_LONG with the status name as its error");
    struct target_stats ts, es;
    target_stats(tg, &ts);
    engine_get_stats(e, &es);
    CHECK(!memcmp(&ts, &es, sizeof ts) && ts.output_tokens == 20 && ts.steps > 0 &&
              ts.busy_ns > 0 && ts.running == 0 && ts.waiting == 0,
          "target_stats is engine_get_stats");
    struct tp_rec bad;
    memset(&bad, 0, sizeof bad);
    bad.c = (struct target_call){.id = 3, .prompt_tokens = 0, .max_tokens = 5, .cb = &TPCB};
    CHECK(target_submit(tg, &bad.c, err) == -1 && !bad.c.priv && bad.c.replica == -1 &&
              bad.n_done == 0, "an invalid call is refused at submit, no callback");
    target_cancel(tg, &bad.c); /* not in flight: nothing */
    target_destroy(tg);
    loop_destroy(l);
}

static int run_cmd(const char *args, char *out, size_t n)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", test_bin(), args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_info_cmd(void)
{
    if (access(test_bin(), X_OK) != 0) {
        SKIP("agentreplay binary not built");
        return;
    }
    static char out[65536];
    CHECK(run_cmd("engine info", out, sizeof out) == 0 && strstr(out, "KV tokens") &&
              strstr(out, "weights") && strstr(out, "recurrent-state slots"),
          "engine info prints the budget and capacity");
    CHECK(run_cmd("engine info --gpus 12 --tp 8", out, sizeof out) == 2 && strstr(out, "12"),
          "impossible layout: exit 2 naming the value");
    CHECK(run_cmd("engine info --gpu h100 --gpus 8 --tp 8", out, sizeof out) == 2 &&
              strstr(out, "does not fit"), "model that does not fit: exit 2");
    CHECK(run_cmd("engine info --draft 3 --acceptance fixed:6", out, sizeof out) == 2,
          "fixed acceptance above draft + 1: exit 2");
    CHECK(run_cmd("engine info --max-num-seqs -1", out, sizeof out) == 2, "negative size: exit 2");
    CHECK(run_cmd("engine info --json --model deepseek-v3 --gpus 8 --tp 8 --spec none", out,
                  sizeof out) == 0, "engine info --json");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CHECK(j && json_integer_value(json_object_get(json_object_get(j, "capacity"),
                                                  "kv_tokens_per_replica")) > 0 &&
              json_integer_value(json_object_get(json_object_get(j, "capacity"),
                                                 "state_slots_per_replica")) == 0,
          "JSON: KV capacity; no state slots for an MLA-only model");
    json_decref(j);
}

/* ---- Chrome trace ---- */

static void test_chrome_trace(void)
{
    struct engine_config c;
    base_config(&c);
    struct loop *l = loop_virtual_create();
    char err[ERR_LEN];
    struct engine *e = engine_create(&c, l, err);
    char path[] = "/tmp/agentreplay-trace-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(engine_trace_open(e, path, 5, err) == 0, "trace open");
    struct fb b = {.first_min = -1};
    struct fb_req rs[4];
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < 4; i++) {
        rs[i].r.id = (uint64_t)i;
        rs[i].r.prompt_tokens = 3000;
        rs[i].r.max_tokens = 50;
        rs[i].r.cb = &FBCB;
        rs[i].b = &b;
        engine_submit(e, &rs[i].r, err);
    }
    loop_run(l);
    engine_trace_close(e);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECKF(j != NULL, "trace is JSON (%s)", j ? "" : je.text);
    json_t *ev = json_object_get(j, "traceEvents");
    size_t n_step = 0, n_kernel = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *x = json_array_get(ev, i);
        const char *ph = json_string_value(json_object_get(x, "ph"));
        if (!ph || strcmp(ph, "X"))
            continue;
        if (!strcmp(json_string_value(json_object_get(x, "name")), "step"))
            n_step++;
        else if (json_integer_value(json_object_get(x, "tid")) == 1)
            n_kernel++;
    }
    struct target_stats st;
    engine_get_stats(e, &st);
    CHECKF((int64_t)n_step == st.steps, "one event per step (%zu of %lld)", n_step, (long long)st.steps);
    CHECKF(n_kernel > 93 * 10, "kernels of the chosen step, layer by layer (%zu)", n_kernel);
    json_decref(j);
    unlink(path);
    engine_destroy(e);
    loop_destroy(l);
}

/* ---- router ---- */

static void test_router(void)
{
    static const enum engine_router rs[] = {ENGINE_ROUTER_AFFINITY, ENGINE_ROUTER_ROUND_ROBIN,
                                            ENGINE_ROUTER_LEAST_LOADED};
    for (size_t k = 0; k < ARRAY_LEN(rs); k++) {
        struct engine_config c;
        engine_config_defaults(&c);
        c.gpus = 64;
        c.router = rs[k];
        struct loop *l = loop_virtual_create();
        char err[ERR_LEN];
        struct engine *e = engine_create(&c, l, err);
        CHECK(e && engine_replicas(e) == 4, "64 GPUs at TP16: 4 replicas");
        struct fb b = {.first_min = -1};
        struct fb_req rq[12];
        memset(rq, 0, sizeof rq);
        int per[4] = {0};
        for (int i = 0; i < 12; i++) {
            rq[i].r.id = (uint64_t)i;
            rq[i].r.session_key = (uint64_t)(i % 3); /* 3 sessions, 4 calls each */
            rq[i].r.prompt_tokens = 100;
            rq[i].r.max_tokens = 10;
            rq[i].r.cb = &FBCB;
            rq[i].b = &b;
            engine_submit(e, &rq[i].r, err);
            per[rq[i].r.replica]++;
        }
        if (rs[k] == ENGINE_ROUTER_AFFINITY) {
            bool same = true;
            for (int i = 3; i < 12; i++)
                same &= rq[i].r.replica == rq[i % 3].r.replica;
            CHECK(same, "affinity: a session's calls go to one replica");
            CHECK(rq[0].r.replica != rq[1].r.replica && rq[1].r.replica != rq[2].r.replica &&
                      rq[0].r.replica != rq[2].r.replica,
                  "affinity: new sessions go to the least loaded replica");
        } else {
            CHECKF(per[0] == 3 && per[1] == 3 && per[2] == 3 && per[3] == 3,
                   "%s spreads 12 calls 3 per replica", engine_router_name(rs[k]));
        }
        struct engine_replica_stats rst;
        engine_get_replica_stats(e, rq[0].r.replica, &rst);
        CHECK(rst.waiting + rst.running >= 1, "replica stats count its requests");
        loop_run(l);
        engine_get_replica_stats(e, rq[0].r.replica, &rst);
        CHECK(rst.running == 0 && rst.waiting == 0 && rst.steps > 0, "all done");
        engine_destroy(e);
        loop_destroy(l);
    }
}

int main(void)
{
    test_router();
    test_bad_input();
    test_target_protocol();
    test_closed_form_identity();
    test_decode_speed();
    test_info_cmd();
    test_chrome_trace();
    return test_report();
}
