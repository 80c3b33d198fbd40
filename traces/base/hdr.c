/* hdr.c: the log-linear histogram of hdr.h. */
#include "traces/base/hdr.h"

#include <stdlib.h>
#include <string.h>

#include "traces/base/mem.h"

uint32_t hdr_index(int64_t v)
{
    if (v < 0)
        v = 0;
    if (v < 2 * HDR_SUB)
        return (uint32_t)v;
    /* k such that v >> k is in [HDR_SUB, 2 * HDR_SUB). */
    int msb = 63 - __builtin_clzll((uint64_t)v);
    int k = msb - HDR_SUB_BITS;
    uint32_t sub = (uint32_t)(v >> k) - HDR_SUB;
    uint32_t idx = 2 * HDR_SUB + (uint32_t)(k - 1) * HDR_SUB + sub;
    return idx < HDR_BUCKETS ? idx : HDR_BUCKETS - 1;
}

int64_t hdr_lower(uint32_t idx)
{
    if (idx < 2 * HDR_SUB)
        return idx;
    uint32_t k = (idx - 2 * HDR_SUB) / HDR_SUB + 1;
    uint32_t sub = (idx - 2 * HDR_SUB) % HDR_SUB;
    return (int64_t)(HDR_SUB + sub) << k;
}

int64_t hdr_width(uint32_t idx)
{
    if (idx < 2 * HDR_SUB)
        return 1;
    return (int64_t)1 << ((idx - 2 * HDR_SUB) / HDR_SUB + 1);
}

void hdr_init(struct hdr *h)
{
    h->counts = xcalloc(HDR_BUCKETS, sizeof *h->counts);
    h->n = 0;
    h->sum = 0;
    h->min = INT64_MAX;
    h->max = 0;
}

void hdr_free(struct hdr *h)
{
    free(h->counts);
    h->counts = NULL;
}

void hdr_reset(struct hdr *h)
{
    memset(h->counts, 0, HDR_BUCKETS * sizeof *h->counts);
    h->n = 0;
    h->sum = 0;
    h->min = INT64_MAX;
    h->max = 0;
}

void hdr_record_n(struct hdr *h, int64_t v, uint64_t count)
{
    if (!count)
        return;
    if (v < 0)
        v = 0;
    h->counts[hdr_index(v)] += count;
    h->n += count;
    h->sum += (double)v * (double)count;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void hdr_record(struct hdr *h, int64_t v) { hdr_record_n(h, v, 1); }

void hdr_merge(struct hdr *into, const struct hdr *from)
{
    for (uint32_t i = 0; i < HDR_BUCKETS; i++)
        into->counts[i] += from->counts[i];
    into->n += from->n;
    into->sum += from->sum;
    if (from->n) {
        if (from->min < into->min)
            into->min = from->min;
        if (from->max > into->max)
            into->max = from->max;
    }
}

double hdr_mean(const struct hdr *h) { return h->n ? h->sum / (double)h->n : 0; }

/* Representative value of the bucket holding rank r (0-based). */
static double value_at_rank(const struct hdr *h, uint64_t r, uint32_t *cursor, uint64_t *below)
{
    /* Walks forward from the cursor; ranks are asked in increasing order. */
    while (*below + h->counts[*cursor] <= r) {
        *below += h->counts[*cursor];
        (*cursor)++;
    }
    uint32_t i = *cursor;
    double v = (double)hdr_lower(i) + (double)(hdr_width(i) - 1) / 2.0;
    if (v < (double)h->min)
        v = (double)h->min;
    if (v > (double)h->max)
        v = (double)h->max;
    return v;
}

double hdr_percentile(const struct hdr *h, double p)
{
    if (!h->n)
        return 0;
    if (p <= 0)
        return (double)h->min;
    if (p >= 1)
        return (double)h->max;
    double k = (double)(h->n - 1) * p;
    uint64_t lo = (uint64_t)k;
    double frac = k - (double)lo;
    uint32_t cursor = 0;
    uint64_t below = 0;
    double a = value_at_rank(h, lo, &cursor, &below);
    if (frac == 0 || lo + 1 >= h->n)
        return a;
    double b = value_at_rank(h, lo + 1, &cursor, &below);
    return a + (b - a) * frac;
}
