/* fuzz_external.c: libFuzzer harness for the external validation table
 * (engine/presets/validation/external.json's format, from memory): any
 * input is either parsed into rows whose fields are in range, or rejected
 * with a message; never a crash or a leak. Rows are not predicted here
 * (test_fidelity does that for the shipped table). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fidelity.h"
#include "traces/base/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[ERR_LEN];
    struct ext_row *r = NULL;
    int n = 0;
    if (ext_rows_parse((const char *)data, size, "fuzz", &r, &n, err) == 0) {
        ASSERT(n >= 1 && n <= EXT_MAX_ROWS && r);
        for (int i = 0; i < n; i++) {
            ASSERT(r[i].role >= EXT_VALIDATION && r[i].role <= EXT_EFFICIENCY);
            ASSERT(r[i].id[0] && memchr(r[i].id, 0, sizeof r[i].id));
            if (r[i].role == EXT_VALIDATION)
                ASSERT(r[i].concurrency >= 1 && r[i].osl >= 2 && r[i].published > 0 &&
                       r[i].band > 0);
        }
    } else {
        ASSERT(err[0]);
    }
    free(r);
    return 0;
}
