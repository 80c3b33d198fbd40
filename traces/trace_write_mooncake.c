/* trace_write_mooncake.c: a trace as Mooncake JSONL: one line per call,
 * {"timestamp": ms, "input_length", "output_length", "hash_ids"}, in
 * arrival order, with 512-token blocks in one id space for the whole file
 * (trace_write.h: each scope of the trace keeps ids of its own).
 *
 * What the three readers need (their source, under site-packages/):
 * timestamps in integer milliseconds, never decreasing (AIPerf's
 * MooncakeTrace, aiperf/dataset/loader/models.py:250-358; vLLM's
 * timed_trace, vllm/benchmarks/datasets/datasets.py:1417-1576);
 * exactly ceil(input_length / 512) ids per line
 * (guidellm/data/deserializers/trace_common.py:272-304), each below 2^31
 * (read as int32 there).
 *
 * Arrival: a call's start on its root's timeline (a subagent call at its
 * session's spawn time plus its own t), plus the root's recorded start
 * where there is one (BurstGPT sessions); a timestamped trace keeps its
 * timestamps. Ties keep the trace's call order. Sessions, think times,
 * models and subagent structure have no place in the format; api times
 * go out as "duration" when every call has one. */
#include "traces/trace_write_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"

#define MOONCAKE_BS 512

struct arr {
    int64_t t_ns;
    uint32_t call;
};

static int cmp_arr(const void *a, const void *b)
{
    const struct arr *x = a, *y = b;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    return x->call < y->call ? -1 : x->call > y->call;
}

int trace_write_mooncake(const struct trace *t, const char *path, char *err)
{
    struct trace_reblock *rb = trace_reblock_create(t, MOONCAKE_BS, false, err);
    int64_t *starts = tw_session_starts(t);
    struct arr *a = xmalloc((t->n_calls ? t->n_calls : 1) * sizeof *a);
    for (uint32_t i = 0; i < t->n_calls; i++) {
        const struct trace_call *c = &t->calls[i];
        const struct trace_session *root = &t->sessions[t->sessions[c->session].root];
        int64_t base = root->start_ns > 0 ? root->start_ns : 0;
        a[i] = (struct arr){base + starts[c->session] + c->t_ns, i};
    }
    qsort(a, t->n_calls, sizeof *a, cmp_arr);
    /* "duration" (s, the recorded api time) when every call has one:
     * GuideLLM's idle_gap schedule reads it and warns when it is absent
     * (guidellm/data/deserializers/trace_common.py:466-483); the other
     * readers ignore keys they do not know. */
    bool durations = t->n_calls > 0;
    for (uint32_t i = 0; i < t->n_calls && durations; i++)
        durations = t->calls[i].api_ns >= 0;
    /* Ids are made in file order, so the file's first blocks get the
     * smallest ids. */
    uint32_t *ids = NULL;
    int64_t cap = 0;
    struct tw_file w;
    int rc = tw_open(&w, path, err);
    for (uint32_t k = 0; k < t->n_calls && !rc; k++) {
        const struct trace_call *c = &t->calls[a[k].call];
        int64_t need = c->prompt_tokens / MOONCAKE_BS + 2;
        if (need > cap) {
            cap = need + 1024;
            ids = xrealloc(ids, (size_t)cap * sizeof *ids);
        }
        int64_t n = trace_reblock_call(rb, a[k].call, false, ids, cap, err);
        if (n < 0) {
            rc = -1;
            break;
        }
        fprintf(w.f, "{\"timestamp\":%" PRId64 ",\"input_length\":%" PRId64 ",\"output_length\":%" PRId64
                     ",\"hash_ids\":[",
                (a[k].t_ns + 500000) / 1000000, c->prompt_tokens, c->output_tokens);
        for (int64_t j = 0; j < n; j++)
            fprintf(w.f, j ? ",%u" : "%u", ids[j]);
        fputc(']', w.f);
        if (durations) {
            fputs(",\"duration\":", w.f);
            tw_seconds(w.f, c->api_ns);
        }
        fputs("}\n", w.f);
    }
    rc = tw_close(&w, rc, err);
    free(ids);
    free(a);
    free(starts);
    trace_reblock_destroy(rb);
    return rc;
}
