/* stats.c: percentiles and Student-t quantiles (stats.h). */
#include "traces/base/stats.h"

#include <math.h>
#include <stdlib.h>

#include "traces/base/err.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stats_sort(double *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_double);
}

double stats_percentile_sorted(const double *v, size_t n, double p)
{
    if (!n)
        return NAN;
    if (p <= 0)
        return v[0];
    if (p >= 1)
        return v[n - 1];
    double k = (double)(n - 1) * p;
    size_t lo = (size_t)k;
    if (lo + 1 >= n)
        return v[n - 1];
    return v[lo] + (v[lo + 1] - v[lo]) * (k - (double)lo);
}

double stats_t975(int df)
{
    static const double t[] = {0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                               2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110,
                               2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
                               2.052, 2.048, 2.045, 2.042};
    if (df < 1)
        return NAN;
    if (df < (int)ARRAY_LEN(t))
        return t[df];
    if (df <= 60)
        return 2.000 + (2.042 - 2.000) * (60 - df) / 30.0;
    return 1.960;
}
