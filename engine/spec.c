/* spec.c: counter-based acceptance draws for speculative decoding
 * (see spec.h). */
#include "engine/spec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/rng.h"
#include "traces/base/hash.h"

int spec_init(struct spec_model *s, int draft, const char *acceptance,
              uint64_t seed, char *err)
{
    memset(s, 0, sizeof *s);
    s->draft = draft;
    struct rng r;
    rng_init(&r, seed, RNG_ACCEPT);
    s->base = rng_next(&r);
    if (draft <= 0) {
        s->mean = 1;
        snprintf(s->desc, sizeof s->desc, "none");
        return 0;
    }
    if (draft > ACCEPT_MAX_DRAFT)
        return err_set(err, "--draft %d: at most %d draft tokens", draft, ACCEPT_MAX_DRAFT);
    if (accept_parse(acceptance, draft, &s->accept, err) < 0)
        return -1;
    if (s->accept.kind == ACCEPT_FIXED) {
        double a = s->accept.fixed_len;
        if (!(a >= 1 && a <= draft + 1))
            return err_set(err, "--acceptance fixed:%g: must be between 1 and draft + 1 = %d",
                           a, draft + 1);
        s->fixed_floor = (int)floor(a);
        s->fixed_frac = a - s->fixed_floor;
        s->mean = a;
    } else {
        /* P(emitted >= k+1) = prod_{i<k} p[i]; cdf[k] = 1 - that. */
        double q = 1, mean = 1;
        s->cdf[0] = 0;
        for (int k = 1; k <= draft; k++) {
            double pk = s->accept.p[k - 1];
            if (!(pk >= 0 && pk <= 1))
                return err_set(err, "--acceptance %s: probability %g at position %d is "
                               "outside [0, 1]", acceptance, pk, k);
            s->cdf[k] = 1 - q * pk;  /* emitted <= k: rejected at position k or before */
            q *= pk;
            mean += q;
        }
        s->cdf[draft + 1] = 1;
        s->mean = mean;
        s->thr_monotone = true;
        for (int k = 1; k <= draft + 1; k++) {
            /* cdf * 2^53 is exact; its ceiling is the least draw at or
             * above it. */
            s->thr[k] = (uint64_t)ceil(s->cdf[k] * 9007199254740992.0);
            if (s->cdf[k] < s->cdf[k - 1] || !(s->cdf[k] >= 0 && s->cdf[k] <= 1))
                s->thr_monotone = false;
        }
    }
    accept_format(&s->accept, s->desc, sizeof s->desc);
    return 0;
}

uint64_t spec_key(const struct spec_model *s, uint64_t request_key)
{
    return hash_mix(s->base, request_key);
}

int spec_sample_slow(const struct spec_model *s, uint64_t skey, int64_t step)
{
    if (s->draft <= 0)
        return 1;
    if (s->accept.kind == ACCEPT_FIXED) {
        if (s->fixed_frac == 0)
            return s->fixed_floor;
        /* Alternate deterministically: the extra token comes every 1/frac
         * steps (both products are non-negative: truncation is floor). */
        int64_t a = (int64_t)((double)(step + 1) * s->fixed_frac);
        int64_t b = (int64_t)((double)step * s->fixed_frac);
        return s->fixed_floor + (int)(a - b);
    }
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
