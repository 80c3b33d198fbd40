/* fuzz_trace.h: the body every trace-reader fuzz harness shares. Any input
 * is either read into a model that passes trace_verify() (and whose chains
 * and statistics can be walked) or rejected with a message; never a crash
 * or a leak. Each reader is tried with and without skip_bad. */
#ifndef FUZZ_TRACE_H
#define FUZZ_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "traces/trace.h"
#include "traces/base/err.h"

static int fuzz_trace_read(const uint8_t *data, size_t size, enum trace_format f)
{
    char err[ERR_LEN];
    for (int skip = 0; skip < 2; skip++) {
        struct trace_read_opts o = {.format = f, .skip_bad = skip};
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

#endif
