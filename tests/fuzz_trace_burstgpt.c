/* fuzz_trace_burstgpt.c: libFuzzer harness for the burstgpt reader, format forced
 * (the shared body is in fuzz_trace.h). */
#include "tests/fuzz_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_trace_read(data, size, TRACE_FMT_BURSTGPT);
}
