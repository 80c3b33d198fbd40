/* test_trace_synth.c: the generator's statistics match its parameters
 * (first prompt, calls per session, growth, output, think time, subagent
 * and compaction rates), its structure is sound (chains of floor(prompt /
 * block) ids, fork points, the parent's next call after the subagent's
 * end), it is deterministic per seed, and the shipped sample reads back.
 */
#include <stdint.h>

#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/time_ns.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void test_stats(void)
{
    struct trace_synth_params p;
    trace_synth_defaults(&p);
    p.sessions = 400;
    p.seed = 3;
    p.compact_p = 0.05;
    p.max_prompt = 5000000; /* no forced compactions here */
    char err[ERR_LEN];
    struct trace *t = trace_synth(&p, err);
    CHECKF(t != NULL, "synth: %s", t ? "" : err);
    if (!t)
        return;
    CHECK(trace_verify(t, err) == 0, "verify");
    CHECK(t->n_roots == 400 && t->n_scopes == 400, "400 roots, one scope each");
    size_t n = t->n_calls;
    double *v = malloc(n * sizeof *v);
    size_t k = 0;
    for (uint32_t i = 0; i < t->n_sessions; i++)
        if (t->sessions[i].parent == TRACE_NONE)
            v[k++] = t->sessions[i].n_calls;
    CHECK_NEAR(median(v, k), exp(p.calls_mu), 0.2, "calls per root session median");
    k = 0;
    for (uint32_t i = 0; i < t->n_sessions; i++)
        if (t->sessions[i].parent == TRACE_NONE)
            v[k++] = (double)t->calls[t->sessions[i].first_call].prompt_tokens;
    CHECK_NEAR(median(v, k), exp(p.initial_mu), 0.1, "first prompt median");
    for (k = 0; k < n; k++)
        v[k] = (double)t->calls[k].output_tokens;
    CHECK_NEAR(median(v, n), exp(p.output_mu), 0.06, "output median");
    /* Think times of root calls that follow no fork. */
    k = 0;
    uint64_t root_calls = 0, transitions = 0, compactions = 0;
    double growth = 0;
    uint64_t growth_n = 0;
    int chain_ok = 1, order_ok = 1;
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *s = &t->sessions[i];
        for (uint32_t c = 0; c < s->n_calls; c++) {
            const struct trace_call *x = &t->calls[s->first_call + c];
            if (x->n_blocks != (uint32_t)(x->prompt_tokens / p.block_size))
                chain_ok = 0;
        }
        if (s->parent != TRACE_NONE) {
            /* fork just after the parent's call; the parent's next call
             * comes after the subagent's end */
            const struct trace_session *ps = &t->sessions[s->parent];
            const struct trace_call *pc = &t->calls[ps->first_call + s->fork_after];
            if (s->fork_t_ns != pc->t_ns + pc->api_ns + s->fork_gap_ns ||
                s->fork_gap_ns > 500 * NS_PER_MS || s->join)
                order_ok = 0;
            if (s->fork_after + 1 < ps->n_calls &&
                t->calls[ps->first_call + s->fork_after + 1].t_ns < s->fork_t_ns + s->duration_ns)
                order_ok = 0;
            continue;
        }
        root_calls += s->n_calls;
        for (uint32_t c = 1; c < s->n_calls; c++) {
            const struct trace_call *a = &t->calls[s->first_call + c - 1];
            const struct trace_call *b = &t->calls[s->first_call + c];
            bool forked = false;
            for (uint32_t ch = s->first_child; ch != TRACE_NONE; ch = t->sessions[ch].next_sibling)
                forked |= t->sessions[ch].fork_after == c - 1;
            if (!forked)
                v[k++] = (double)b->think_ns / 1e9;
            transitions++;
            if (b->n_shared < a->n_blocks) { /* the chain broke: a compaction */
                compactions++;
                if (b->n_shared > 3000 / 64)
                    chain_ok = 0; /* only the system blocks stay */
            } else {
                growth += (double)(b->prompt_tokens - a->prompt_tokens - a->output_tokens);
                growth_n++;
            }
        }
    }
    CHECK(chain_ok, "chains: floor(prompt / block) ids; compactions keep the system blocks");
    CHECK(order_ok, "subagents fork after their call; the parent resumes after them");
    CHECK_NEAR(median(v, k), exp(p.think_mu), 0.12, "think time median");
    CHECK_NEAR((double)compactions / (double)transitions, p.compact_p, 0.2, "compaction rate");
    CHECK_NEAR(growth / (double)growth_n, exp(p.growth_mu + p.growth_sigma * p.growth_sigma / 2),
               0.1, "mean growth per call");
    double subs = (double)(t->n_sessions - t->n_roots);
    CHECK_NEAR(subs / (double)root_calls, p.subagent_p, 0.3, "subagents per root call");
    uint64_t d1 = t->digest;
    trace_destroy(t);
    free(v);

    t = trace_synth(&p, err);
    CHECK(t && t->digest == d1, "same seed, same trace");
    trace_destroy(t);
    p.seed = 4;
    t = trace_synth(&p, err);
    CHECK(t && t->digest != d1, "another seed, another trace");
    trace_destroy(t);

    p.block_size = 32;
    p.sessions = 5;
    t = trace_synth(&p, err);
    CHECK(t && t->calls[3].n_blocks == (uint32_t)(t->calls[3].prompt_tokens / 32),
          "block size flag");
    trace_destroy(t);

    p.compact_p = 2;
    t = trace_synth(&p, err);
    CHECK(t == NULL && strstr(err, "probabilit"), "bad parameters rejected");
}

static void test_sample(void)
{
    char path[4096];
    if (file_data_path("traces/samples/agentic-synth.jsonl", path, sizeof path)) {
        CHECK(0, "traces/samples/agentic-synth.jsonl present");
        return;
    }
    char err[ERR_LEN];
    struct trace *t = trace_read(path, NULL, err);
    CHECKF(t != NULL, "sample reads: %s", t ? "" : err);
    if (!t)
        return;
    CHECK(t->n_roots >= 24 && t->n_sessions > t->n_roots, "sample: a few dozen sessions, subagents");
    /* The sample is what its README's command makes. */
    struct trace_synth_params p;
    trace_synth_defaults(&p);
    p.sessions = t->n_roots;
    p.seed = 1;
    struct trace *u = trace_synth(&p, err);
    CHECKF(u && u->digest == t->digest, "sample equals trace synth --sessions %u --seed 1",
           t->n_roots);
    trace_destroy(u);
    trace_destroy(t);
}

int main(void)
{
    test_stats();
    test_sample();
    return test_report();
}
