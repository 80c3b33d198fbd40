/* fuzz_trace_agentx.c: libFuzzer harness for the agentx reader, format forced
 * (the shared body is in fuzz_trace.h), and for the replay plan of what it
 * reads: any trace read either plans into a plan that passes plan_verify,
 * whose JSON and t* snapshots can be written and taken, or is refused with
 * a message; never a crash or a leak. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz_trace.h"
#include "traces/plan.h"

static void fuzz_plan(const uint8_t *data, size_t size)
{
    char err[ERR_LEN];
    struct trace_read_opts o = {.format = TRACE_FMT_AGENTX};
    struct trace *t = trace_read_mem((const char *)data, size, "fuzz", &o, err);
    if (!t)
        return;
    struct plan *p = plan_build(t, NULL, err);
    if (p) {
        ASSERT(plan_verify(p, err) == 0);
        static FILE *sink;
        if (!sink)
            sink = fopen("/dev/null", "w");
        struct plan_json_opts jo = {.lanes = 3, .ratio_lo = 0.5, .ratio_hi = 0.5, .seed = 1};
        ASSERT(!sink || plan_write_json(p, &jo, sink, err) == 0);
        for (uint32_t i = 0; i < p->n_trees; i++) {
            uint32_t n = p->trees[i].n_streams;
            struct plan_resume *st = calloc(n, sizeof *st);
            uint32_t *bd = calloc(n, sizeof *bd);
            for (int k = 0; k <= 4; k++) {
                int m = plan_snapshot_ms(p, i, plan_t_star_ms(p, i, k / 4.0), st, (int)n, bd);
                ASSERT(m >= 0 && (uint32_t)m <= n);
            }
            free(st);
            free(bd);
        }
        plan_destroy(p);
    }
    trace_destroy(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_trace_read(data, size, TRACE_FMT_AGENTX);
    fuzz_plan(data, size);
    return 0;
}
