/* fuzz_trace_azure.c: libFuzzer harness for the azure reader, format forced
 * (the shared body is in fuzz_trace.h). */
#include "tests/fuzz_trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_trace_read(data, size, TRACE_FMT_AZURE);
}
