/* synth.c: the generator of AgentX-like agentic sessions (trace synth).
 *
 * Each root session: a first prompt (lognormal), then calls whose prompt
 * grows by the previous output plus a lognormal tool result; the chain keeps
 * the previous call's full blocks and adds new ids. Think times are
 * lognormal (heavy tail, capped). Now and then a call compacts the context
 * (the prompt shrinks to a fraction; only the system-prompt blocks stay, so
 * the chain breaks), and always when the prompt would pass the context
 * limit. A call may fork a subagent (fresh context that shares a
 * subagent system prompt with its siblings); as in the recorded traces, the
 * parent's next call comes after the subagent has finished, its think time
 * spanning the subagent's run. Each root tree has its own id scope.
 *
 * Defaults, from the 20 public agentic sessions (../shared/traces/README.md
 * and our own trace stats of that folder): output p50 255, mean 415 ->
 * lognormal(ln 255, 0.99); think p50 10 s, p90 127 s -> lognormal(ln 10,
 * 1.98); calls per session p50 28.5, mean 48 -> lognormal(ln 30, 1.0);
 * prompt p50 75k, p90 139k from a first prompt near 20k growing about 2k a
 * call; 7 subagents in 967 calls, 12 calls each on average, first prompt
 * near 10k; compactions seen a few times in 967 calls.
 * All draws come from the RNG_SYNTH stream of the seed, in a fixed order,
 * so a seed gives the same trace on every machine.
 */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"
#include "traces/base/time_ns.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void trace_synth_defaults(struct trace_synth_params *p)
{
    memset(p, 0, sizeof *p);
    p->sessions = 32;
    p->seed = 1;
    p->block_size = 64;
    p->initial_mu = log(20000.0);
    p->initial_sigma = 0.6;
    p->calls_mu = log(30.0);
    p->calls_sigma = 1.0;
    p->growth_mu = log(800.0);
    p->growth_sigma = 1.2;
    p->output_mu = log(255.0);
    p->output_sigma = 0.99;
    p->think_mu = log(10.0);
    p->think_sigma = 1.98;
    p->think_max_s = 3600;
    p->api_s_per_ktok = 20;
    p->subagent_p = 0.01;
    p->subagent_calls_mean = 12;
    p->subagent_initial = 10000;
    p->compact_p = 0.005;
    p->compact_keep = 0.3;
    p->max_prompt = 200000;
    p->model = "synth-main";
    p->subagent_model = "synth-sub";
}

struct gen {
    const struct trace_synth_params *p;
    struct tb *b;
    struct rng r;
    uint64_t next_id;      /* next fresh block id of the current scope */
    uint64_t *sub_sys;     /* the scope's subagent system-prompt ids */
    uint32_t n_sub_sys;
    uint32_t s_model, s_sub_model, s_text, s_tool, s_out, s_stop_tool, s_stop_end;
};

/* A generated call, held until its session is emitted (a session's calls
 * are stored together, and a parent's calls come before its subagents'). */
struct pcall {
    struct trace_call c;
    uint64_t *ids;
    uint32_t n;
};

struct pses {
    struct pcall *calls;
    uint32_t n_calls;
    int64_t span_ns;       /* first call's start to last call's end */
    /* subagents forked from it (roots only) */
    struct psub *subs;
    uint32_t n_subs;
};

struct psub {
    uint32_t after;        /* parent's call index */
    int64_t gap_ns;
    struct pses s;
};

struct chain {
    uint64_t *ids;
    uint32_t n, cap;
};

static int64_t clampi(double x, int64_t lo, int64_t hi)
{
    if (!(x >= (double)lo))
        return lo;
    if (x > (double)hi)
        return hi;
    return (int64_t)llround(x);
}

/* Keeps n_keep blocks of ch and extends it to floor(prompt / bs). */
static void fill_chain(struct gen *g, struct chain *ch, uint32_t n_keep, int64_t prompt)
{
    uint32_t n = (uint32_t)(prompt / g->p->block_size);
    if (n_keep > ch->n)
        n_keep = ch->n;
    if (n_keep > n)
        n_keep = n;
    if (n > ch->cap) {
        ch->cap = n + n / 2 + 64;
        ch->ids = xrealloc(ch->ids, (size_t)ch->cap * sizeof *ch->ids);
    }
    for (uint32_t i = n_keep; i < n; i++)
        ch->ids[i] = g->next_id++;
    ch->n = n;
}

static int64_t draw_think(struct gen *g)
{
    double s = rng_lognormal(&g->r, g->p->think_mu, g->p->think_sigma);
    if (s > g->p->think_max_s)
        s = g->p->think_max_s;
    return (int64_t)llround(s * 1e3) * NS_PER_MS;
}

static int64_t draw_api(struct gen *g, int64_t out)
{
    /* A fixed 1.5 s of prefill and queueing plus decode at the set pace,
     * with +-20 % jitter. */
    double s = (1.5 + (double)out / 1000.0 * g->p->api_s_per_ktok) *
               (0.8 + 0.4 * rng_uniform(&g->r));
    return (int64_t)llround(s * 1e3) * NS_PER_MS;
}

static void gen_session(struct gen *g, struct pses *ps, uint32_t n_calls, int64_t first_prompt,
                        bool sub);

static void gen_subagent(struct gen *g, struct pses *parent, uint32_t after)
{
    const struct trace_synth_params *p = g->p;
    parent->subs = xrealloc(parent->subs, (parent->n_subs + 1) * sizeof *parent->subs);
    struct psub *ps = &parent->subs[parent->n_subs++];
    memset(ps, 0, sizeof *ps);
    ps->after = after;
    ps->gap_ns = (int64_t)llround(rng_uniform(&g->r) * 500.0) * NS_PER_MS;
    double mean = p->subagent_calls_mean ? (double)p->subagent_calls_mean : 1.0;
    uint32_t n = (uint32_t)clampi(1.0 + rng_exp(&g->r, mean > 1.0 ? mean - 1.0 : 0.0), 1, 100000);
    int64_t first = clampi(p->subagent_initial * (0.9 + 0.2 * rng_uniform(&g->r)), 1,
                           p->max_prompt);
    gen_session(g, &ps->s, n, first, true);
}

static void gen_session(struct gen *g, struct pses *ps, uint32_t n_calls, int64_t first_prompt,
                        bool sub)
{
    const struct trace_synth_params *p = g->p;
    int64_t bs = p->block_size;
    int64_t prompt = first_prompt, t_ns = 0, prev_end = 0;
    struct chain ch = {0};
    /* The system prompt: a subagent's is shared with its siblings. */
    int64_t sys_tokens = sub ? (int64_t)(0.9 * p->subagent_initial) : 3000;
    uint32_t sys_blocks = (uint32_t)(sys_tokens / bs);
    if (sub) {
        if (!g->sub_sys || g->n_sub_sys != sys_blocks) {
            g->sub_sys = xrealloc(g->sub_sys, (sys_blocks ? sys_blocks : 1) * sizeof *g->sub_sys);
            for (uint32_t i = 0; i < sys_blocks; i++)
                g->sub_sys[i] = g->next_id++;
            g->n_sub_sys = sys_blocks;
        }
        ch.cap = sys_blocks + 64;
        ch.ids = xmalloc(ch.cap * sizeof *ch.ids);
        memcpy(ch.ids, g->sub_sys, sys_blocks * sizeof *ch.ids);
        ch.n = sys_blocks;
        fill_chain(g, &ch, sys_blocks, prompt);
    } else {
        fill_chain(g, &ch, 0, prompt);
    }
    ps->calls = xcalloc(n_calls, sizeof *ps->calls);
    int64_t pending_wait = 0; /* a subagent's run that the next think spans */
    for (uint32_t k = 0; k < n_calls; k++) {
        struct pcall *pc = &ps->calls[ps->n_calls++];
        struct trace_call *c = &pc->c;
        tb_call_init(c);
        c->prompt_tokens = prompt;
        c->output_tokens = clampi(rng_lognormal(&g->r, p->output_mu, p->output_sigma), 1,
                                  TRACE_MAX_OUTPUT);
        c->api_ns = draw_api(g, c->output_tokens);
        if (k == 0) {
            c->think_ns = 0;
        } else {
            c->think_ns = draw_think(g) + pending_wait;
            t_ns = prev_end + c->think_ns;
        }
        pending_wait = 0;
        c->t_ns = t_ns;
        c->model = sub ? g->s_sub_model : g->s_model;
        c->input_types = k == 0 ? g->s_text : g->s_tool;
        c->output_types = g->s_out;
        c->stop = k + 1 == n_calls ? g->s_stop_end : g->s_stop_tool;
        c->type = TRACE_CALL_NORMAL;
        pc->n = ch.n;
        pc->ids = xmalloc((ch.n ? ch.n : 1) * sizeof *pc->ids);
        if (ch.n)
            memcpy(pc->ids, ch.ids, ch.n * sizeof *ch.ids);
        prev_end = t_ns + c->api_ns;
        /* A fork after this call (roots only, not from the last call). */
        if (!sub && k + 1 < n_calls && rng_uniform(&g->r) < p->subagent_p) {
            gen_subagent(g, ps, k);
            const struct psub *sb = &ps->subs[ps->n_subs - 1];
            pending_wait = sb->gap_ns + sb->s.span_ns;
        }
        /* The next prompt: this one plus the output plus a tool result. */
        uint32_t keep = ch.n;
        int64_t next = prompt + c->output_tokens +
                       clampi(rng_lognormal(&g->r, p->growth_mu, p->growth_sigma), 0,
                              TRACE_MAX_TOKENS);
        bool compact = rng_uniform(&g->r) < p->compact_p || next > p->max_prompt;
        if (compact) {
            next = clampi((double)next * p->compact_keep, sys_tokens + bs, p->max_prompt);
            keep = sys_blocks;
        }
        prompt = next > p->max_prompt ? p->max_prompt : next;
        fill_chain(g, &ch, keep, prompt);
    }
    ps->span_ns = prev_end;
    free(ch.ids);
}

static void emit(struct gen *g, uint32_t s, struct pses *ps)
{
    struct trace *t = g->b->t;
    for (uint32_t k = 0; k < ps->n_calls; k++) {
        tb_call(g->b, s, &ps->calls[k].c, ps->calls[k].ids, ps->calls[k].n);
        free(ps->calls[k].ids);
    }
    free(ps->calls);
    for (uint32_t i = 0; i < ps->n_subs; i++) {
        struct psub *sb = &ps->subs[i];
        uint32_t c = tb_session(g->b, s);
        struct trace_session *ss = &t->sessions[c];
        const struct trace_call *pc = &t->calls[t->sessions[s].first_call + sb->after];
        ss->fork_after = sb->after;
        ss->fork_gap_ns = sb->gap_ns;
        ss->fork_t_ns = pc->t_ns + pc->api_ns + sb->gap_ns;
        ss->duration_ns = sb->s.span_ns;
        ss->join = false;
        char name[32];
        snprintf(name, sizeof name, "agent_%03u", i + 1);
        ss->name = tb_str(g->b, name);
        ss->kind = tb_str(g->b, "Explore");
        ss->status = tb_str(g->b, "completed");
        emit(g, c, &sb->s);
    }
    free(ps->subs);
}

struct trace *trace_synth(const struct trace_synth_params *p, char *err)
{
    if (p->sessions == 0)
        return err_set(err, "--sessions must be at least 1"), NULL;
    if (p->block_size <= 0 || p->block_size > TRACE_MAX_BLOCK_SIZE)
        return err_set(err, "block size must be 1 .. %d", TRACE_MAX_BLOCK_SIZE), NULL;
    if (!(p->subagent_p >= 0 && p->subagent_p <= 1) || !(p->compact_p >= 0 && p->compact_p <= 1))
        return err_set(err, "probabilities must lie in [0, 1]"), NULL;
    if (!(p->compact_keep > 0 && p->compact_keep <= 1))
        return err_set(err, "compact keep fraction must lie in (0, 1]"), NULL;
    if (p->max_prompt < 4 * p->block_size || p->max_prompt > TRACE_MAX_TOKENS)
        return err_set(err, "max prompt must be 4 blocks .. 1e8 tokens"), NULL;
    const double sig[] = {p->initial_sigma, p->calls_sigma, p->growth_sigma, p->output_sigma,
                          p->think_sigma};
    for (size_t i = 0; i < ARRAY_LEN(sig); i++)
        if (!(sig[i] >= 0 && sig[i] <= 10))
            return err_set(err, "sigmas must lie in [0, 10]"), NULL;
    const double mus[] = {p->initial_mu, p->calls_mu, p->growth_mu, p->output_mu, p->think_mu};
    for (size_t i = 0; i < ARRAY_LEN(mus); i++)
        if (!(mus[i] >= -20 && mus[i] <= 20))
            return err_set(err, "mu values must lie in [-20, 20] (natural log)"), NULL;
    if (!(p->think_max_s >= 0 && p->think_max_s <= 1e6) ||
        !(p->api_s_per_ktok >= 0 && p->api_s_per_ktok <= 1e4) ||
        !(p->subagent_initial >= 1 && p->subagent_initial <= (double)p->max_prompt))
        return err_set(err, "think max, api pace or subagent first prompt out of range"), NULL;
    struct tb b;
    tb_init(&b, TRACE_FMT_NATIVE);
    struct gen g = {.p = p, .b = &b};
    rng_init(&g.r, p->seed, RNG_SYNTH);
    g.s_model = tb_str(&b, p->model ? p->model : "synth-main");
    g.s_sub_model = tb_str(&b, p->subagent_model ? p->subagent_model : "synth-sub");
    g.s_text = tb_str(&b, "text");
    g.s_tool = tb_str(&b, "tool_result");
    g.s_out = tb_str(&b, "text,tool_use");
    g.s_stop_tool = tb_str(&b, "tool_use");
    g.s_stop_end = tb_str(&b, "end_turn");
    uint32_t file = tb_str(&b, "synth");
    for (uint32_t i = 0; i < p->sessions; i++) {
        struct trace *t = b.t;
        uint32_t s = tb_session(&b, TRACE_NONE);
        struct trace_session *ss = &t->sessions[s];
        ss->scope = t->n_scopes++;
        ss->block_size = p->block_size;
        ss->file = file;
        char name[32];
        snprintf(name, sizeof name, "synth_%04u", i + 1);
        ss->name = tb_str(&b, name);
        g.next_id = 1;
        g.n_sub_sys = 0;
        uint32_t n = (uint32_t)clampi(rng_lognormal(&g.r, p->calls_mu, p->calls_sigma), 1,
                                      100000);
        int64_t first = clampi(rng_lognormal(&g.r, p->initial_mu, p->initial_sigma),
                               p->block_size, p->max_prompt);
        struct pses ps = {0};
        gen_session(&g, &ps, n, first, false);
        emit(&g, s, &ps);
    }
    free(g.sub_sys);
    return tb_finish(&b);
}
