/* stats.h: order statistics and confidence intervals, one definition for
 * every report: percentiles by linear interpolation between closest
 * ranks, k = (n - 1) p (reference/metrics.md; numpy's default, and
 * InferenceX's), and the 95 % Student-t interval of a mean. */
#ifndef BASE_STATS_H
#define BASE_STATS_H

#include <stddef.h>

/* Sorts v ascending (NaNs are not expected). */
void stats_sort(double *v, size_t n);
/* The p-quantile (0 <= p <= 1) of sorted v; NaN when n is 0. */
double stats_percentile_sorted(const double *v, size_t n, double p);
/* Two-sided 97.5 % quantile of Student's t with df degrees of freedom
 * (table to 30, linear to 60, then the normal's 1.960); NaN for df < 1. */
double stats_t975(int df);

#endif
