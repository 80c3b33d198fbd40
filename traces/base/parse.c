/* parse.c: numbers and durations given as text (parse.h). */
#include "traces/base/parse.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"

int parse_i64(const char *s, int64_t *v, char *err)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end)
        return err_set(err, "not an integer");
    if (errno)
        return err_set(err, "out of range");
    *v = x;
    return 0;
}

int parse_i64_pair(const char *s, int64_t *a, int64_t *b, char *err)
{
    const char *x = strpbrk(s, "xX");
    char first[32];
    if (!x || (size_t)(x - s) >= sizeof first)
        return err_set(err, "not two integers joined by x");
    memcpy(first, s, (size_t)(x - s));
    first[x - s] = 0;
    if (parse_i64(first, a, NULL) || parse_i64(x + 1, b, NULL))
        return err_set(err, "not two integers joined by x");
    return 0;
}

int parse_u64(const char *s, uint64_t *v, char *err)
{
    const char *p = s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '+')
        p++;
    if (*p == '-' || *p == '+' || *p == ' ' || *p == '\t')
        return err_set(err, "not a non-negative integer");
    bool hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    char *end;
    errno = 0;
    unsigned long long x = strtoull(p, &end, hex ? 16 : 10);
    if (end == p || *end)
        return err_set(err, "not a non-negative integer");
    if (errno)
        return err_set(err, "out of range");
    *v = x;
    return 0;
}

int parse_double(const char *s, double *v, char *err)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end)
        return err_set(err, "not a number");
    if (errno == ERANGE && fabs(x) > 1)
        return err_set(err, "out of range");
    if (!isfinite(x))
        return err_set(err, "not a finite number");
    *v = x;
    return 0;
}

int parse_duration(const char *s, int64_t *ns, char *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || v > 1e9)
        return err_set(err, "not a duration (e.g. 1800, 90s, 500ms, 2m, 1h; 0 to 1e9 s)");
    double mul;
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
        return err_set(err, "unknown unit '%s' (s, ms, us, m, h)", end);
    *ns = (int64_t)llround(v * mul);
    return 0;
}

void parse_duration_format(int64_t ns, char *buf, int n)
{
    static const struct {
        int64_t ns;
        const char *unit;
    } units[] = {{3600000000000LL, "h"}, {60000000000LL, "m"}, {1000000000LL, "s"},
                 {1000000LL, "ms"}, {1000LL, "us"}};
    if (ns < 0) {
        snprintf(buf, (size_t)n, "none");
        return;
    }
    if (ns == 0) {
        snprintf(buf, (size_t)n, "0s");
        return;
    }
    for (size_t i = 0; i < ARRAY_LEN(units); i++)
        if (ns % units[i].ns == 0) {
            snprintf(buf, (size_t)n, "%lld%s", (long long)(ns / units[i].ns), units[i].unit);
            return;
        }
    snprintf(buf, (size_t)n, "%gs", (double)ns / 1e9);
}
