/* fuzz_sse.c: the SSE parser fed arbitrary bytes in arbitrary pieces; its
 * buffer must stay within the limit and every event must be
 * NUL-terminated at its length. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replay/sse.h"
#include "traces/base/err.h"

static int on_event(void *arg, const char *event, const char *data, size_t n)
{
    ASSERT(data[n] == 0);
    ASSERT(strlen(event) < 32);
    (*(size_t *)arg) += n;
    return data[0] == 'S' && n == 1; /* a callback that stops, sometimes */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = 1 + data[0] % 64, total = 0;
    struct sse p;
    sse_init(&p, 512, on_event, &total);
    for (size_t i = 1; i < size; i += piece) {
        size_t n = size - i < piece ? size - i : piece;
        int rc = sse_feed(&p, (const char *)data + i, n);
        ASSERT(p.cap <= 514);
        if (rc)
            sse_reset(&p);
    }
    (void)sse_pending(&p);
    sse_free(&p);
    return 0;
}
