/* parse.c: numbers and durations given as text (parse.h). */
#include "traces/base/parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"

int parse_duration(const char *s, int64_t *ns, char *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || v > 1e9)
        return err_set(err, "bad duration '%s' (want e.g. 1800, 90s, 500ms, 2m, 1h)", s);
    double mul = 1e9;
    if (!strcmp(end, "") || !strcmp(end, "s"))
        mul = 1e9;
    else if (!strcmp(end, "ms"))
        mul = 1e6;
    else if (!strcmp(end, "us"))
        mul = 1e3;
    else if (!strcmp(end, "m"))
        mul = 60e9;
    else if (!strcmp(end, "h"))
        mul = 3600e9;
    else
        return err_set(err, "bad duration unit in '%s' (s, ms, us, m, h)", s);
    *ns = (int64_t)llround(v * mul);
    return 0;
}
