/* fuzz_trace_burstgpt.c: libFuzzer harness for the burstgpt reader (format forced):
 * any input is either read into a model that passes trace_verify() or
 * rejected with a message; never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>

#include "traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[ERR_LEN];
    for (int skip = 0; skip < 2; skip++) {
        struct trace_read_opts o = {.format = TRACE_FMT_BURSTGPT, .skip_bad = skip};
        struct trace *t = trace_read_mem((const char *)data, size, "fuzz", &o, err);
        if (t) {
            ASSERT(trace_verify(t, err) == 0);
            uint64_t buf[64];
            for (uint32_t i = 0; i < t->n_calls; i++)
                trace_call_blocks(t, &t->calls[i], buf, 64);
            struct trace_stats s;
            trace_stats_compute(t, &s);
        }
        trace_destroy(t);
    }
    return 0;
}
