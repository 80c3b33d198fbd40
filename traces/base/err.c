/* err.c: error buffers and failed invariants (err.h). */
#include "traces/base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void err_assert_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, what);
    abort();
}

int err_set(char *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return -1;
}
