/* fuzz_trace_agentx.c: libFuzzer harness for the agentx reader, format forced
 * (the shared body is in fuzz_trace.h). */
#include "tests/fuzz_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_trace_read(data, size, TRACE_FMT_AGENTX);
}
