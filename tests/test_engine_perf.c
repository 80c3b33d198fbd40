/* test_engine_perf.c: the engine's fast paths agree exactly with the
 * plain computations they replace: integer-threshold acceptance draws
 * against the floating-point inverse CDF walk, for the fitted curve and
 * per-position lists at every draft length, including probabilities 0
 * and 1. */
#include <string.h>

#include "engine/spec.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"

/* The draw as first written: u in [0, 1) from the top 53 bits, then the
 * first k with u < cdf[k]. */
static int sample_ref(const struct spec_model *s, uint64_t skey, int64_t step)
{
    uint64_t z = skey + (uint64_t)(step + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    int k = 1;
    while (k <= s->draft && u >= s->cdf[k])
        k++;
    return k;
}

static void check_model(const char *acc, int draft)
{
    struct spec_model s;
    char err[ERR_LEN];
    if (spec_init(&s, draft, acc, 42, err) < 0) {
        CHECKF(0, "spec_init %s draft %d: %s", acc, draft, err);
        return;
    }
    CHECKF(s.thr_monotone, "%s draft %d: thresholds monotone", acc, draft);
    int bad = 0;
    int64_t sum = 0;
    for (uint64_t r = 0; r < 200; r++) {
        uint64_t key = spec_key(&s, r * 7919);
        for (int64_t j = 0; j < 500; j++) {
            int a = spec_sample(&s, key, j), b = sample_ref(&s, key, j);
            bad += a != b;
            sum += a;
        }
    }
    CHECKF(bad == 0, "%s draft %d: %d of 100000 draws differ from the CDF walk", acc, draft, bad);
    CHECKF(sum >= 100000 && sum <= 100000LL * (draft + 1), "%s draft %d: draws in range", acc,
           draft);
    /* Draws right at the thresholds: x = thr[k] - 1, thr[k], thr[k] + 1
     * compare as the doubles do. */
    for (int k = 1; k <= draft; k++) {
        for (int d = -1; d <= 1; d++) {
            uint64_t x = s.thr[k] + (uint64_t)d;
            if (x >= (1ULL << 53))
                continue;
            double u = (double)x * (1.0 / 9007199254740992.0);
            CHECKF((u >= s.cdf[k]) == (x >= s.thr[k]), "%s draft %d: threshold %d%+d", acc,
                   draft, k, d);
        }
    }
}

int main(void)
{
    for (int d = 1; d <= 8; d++)
        check_model("curve", d);
    check_model("p:0.9,0.8,0.7,0.6,0.5", 5);
    check_model("p:1,1,0,1", 4);
    check_model("p:0,0.5,0.5", 3);
    check_model("p:1,1,1,1,1,1,1", 7);
    check_model("p:0.3333333333333333,0.1", 2);
    /* Fixed acceptance keeps its deterministic alternation. */
    struct spec_model f;
    char err[ERR_LEN];
    CHECK(spec_init(&f, 7, "fixed:3.5", 1, err) == 0, "fixed:3.5");
    int64_t tot = 0;
    for (int j = 0; j < 1000; j++)
        tot += spec_sample(&f, 5, j);
    CHECK(tot == 3500, "fixed 3.5 over 1000 steps: 3500 tokens");
    return test_report();
}
