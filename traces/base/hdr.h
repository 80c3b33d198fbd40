/* hdr.h: a high-dynamic-range histogram of non-negative int64 values
 * (nanoseconds), for pooled inter-token latency over millions of gaps
 * without keeping them.
 *
 * Log-linear buckets: values below 2048 are counted exactly; above, each
 * power of two is split into 1024 equal buckets, so a bucket is at most
 * 1/1024 of its lower bound wide and the midpoint reported for it is
 * within 1/2048 (0.05 %) of any value in it (the bound asked for: 0.1 %).
 * Count, sum, min and max are exact. Fixed size (about 440 KiB) covering
 * 0 .. 2^62 ns; no allocation per value.
 *
 * Percentiles use the same rule as the exact ones (metrics.h): linear
 * interpolation between the closest ranks, k = (n - 1) * p, over bucket
 * midpoints (clamped to the exact min and max). */
#ifndef HDR_H
#define HDR_H

#include <stdint.h>

#define HDR_SUB_BITS 10                       /* 1024 buckets per octave */
#define HDR_SUB (1 << HDR_SUB_BITS)
#define HDR_OCTAVES 52                        /* octaves 2^11 .. 2^62 */
#define HDR_BUCKETS (2 * HDR_SUB + HDR_OCTAVES * HDR_SUB)

struct hdr {
    uint64_t *counts;   /* HDR_BUCKETS counters */
    uint64_t n;         /* values recorded */
    double sum;         /* exact to double precision */
    int64_t min, max;
};

void hdr_init(struct hdr *h);
void hdr_free(struct hdr *h);
void hdr_reset(struct hdr *h);
/* Records v (negative values are clamped to 0). */
void hdr_record(struct hdr *h, int64_t v);
void hdr_record_n(struct hdr *h, int64_t v, uint64_t count);
void hdr_merge(struct hdr *into, const struct hdr *from);
double hdr_mean(const struct hdr *h);
/* p in [0, 1]; 0 when empty. */
double hdr_percentile(const struct hdr *h, double p);

/* Bucket arithmetic, exposed for the tests. */
uint32_t hdr_index(int64_t v);
int64_t hdr_lower(uint32_t idx);   /* smallest value of the bucket */
int64_t hdr_width(uint32_t idx);   /* values in the bucket */

#endif
