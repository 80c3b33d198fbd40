/* test_hdr.c: the HDR histogram's error bound (<= 0.1 % against exact
 * percentiles), its bucket arithmetic, merge and edge cases. */
#include "traces/base/hdr.h"
#include "replay/metrics.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"

int main(void)
{
    /* Bucket arithmetic: every value lies in its bucket; widths bounded. */
    int64_t probes[] = {0, 1, 2047, 2048, 2049, 4095, 4096, 123456789, 987654321012LL,
                        (int64_t)1 << 40, ((int64_t)1 << 62) - 1};
    bool ok = true;
    for (size_t i = 0; i < ARRAY_LEN(probes); i++) {
        uint32_t k = hdr_index(probes[i]);
        int64_t lo = hdr_lower(k), w = hdr_width(k);
        ok &= probes[i] >= lo && probes[i] < lo + w;
        ok &= w == 1 || (double)w / (double)lo <= 1.0 / 1024 + 1e-15;
    }
    CHECK(ok, "values fall in their buckets; width <= 1/1024 of the value");
    bool mono = true;
    for (uint32_t k = 1; k < HDR_BUCKETS; k++)
        mono &= hdr_lower(k) == hdr_lower(k - 1) + hdr_width(k - 1);
    CHECK(mono, "buckets tile the range");

    /* Error bound against exact percentiles on lognormal gaps (ITL-like). */
    struct rng g;
    rng_init(&g, 7, RNG_SYNTH);
    size_t n = 200000;
    double *v = xmalloc(n * sizeof *v);
    struct hdr h;
    hdr_init(&h);
    for (size_t i = 0; i < n; i++) {
        int64_t x = (int64_t)llround(rng_lognormal(&g, log(12e6), 0.8));
        v[i] = (double)x;
        hdr_record(&h, x);
    }
    struct metrics_stat st;
    metrics_stat_compute(v, n, &st);
    double ps[] = {0.5, 0.75, 0.9, 0.95, 0.99};
    double exact[] = {st.p50, st.p75, st.p90, st.p95, st.p99};
    for (size_t i = 0; i < ARRAY_LEN(ps); i++)
        CHECK_NEAR(hdr_percentile(&h, ps[i]), exact[i], 1e-3, "percentile within 0.1 %");
    CHECK_NEAR(hdr_mean(&h), st.mean, 1e-12, "mean exact");
    CHECK(h.n == n, "count");
    CHECK(hdr_percentile(&h, 0) == v[0] && hdr_percentile(&h, 1) == v[n - 1], "min and max exact");

    /* Small exact values and interpolation like numpy. */
    struct hdr s;
    hdr_init(&s);
    for (int i = 1; i <= 10; i++)
        hdr_record(&s, i * 100);
    CHECK_NEAR(hdr_percentile(&s, 0.9), 910, 1e-12, "P90 of 100..1000 = 910 (linear)");
    CHECK_NEAR(hdr_percentile(&s, 0.5), 550, 1e-12, "P50 = 550");
    hdr_merge(&h, &s);
    CHECK(h.n == n + 10 && h.min == 100, "merge");
    hdr_reset(&s);
    CHECK(hdr_percentile(&s, 0.9) == 0 && s.n == 0, "empty");
    hdr_record(&s, -5);
    CHECK(s.min == 0, "negative clamped");
    hdr_free(&s);
    hdr_free(&h);
    free(v);
    return test_report();
}
