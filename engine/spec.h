/* spec.h: the speculative-decoding runtime's sampling of acceptance.
 *
 * Each verification step of a request emits 1..draft+1 tokens (accepted
 * draft tokens plus the bonus token), drawn from the acceptance model
 * (engine/accept.h). Draws are counter-based: the draw for a request's
 * j-th verification step depends only on the seed (RNG_ACCEPT stream),
 * the request's key and j, never on the order in which steps are
 * simulated. That is what lets a closed-form run of decode steps and
 * one-by-one stepping give identical results.
 */
#ifndef SPEC_H
#define SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/accept.h"

struct spec_model {
    int draft;                       /* draft tokens per step (0: off) */
    struct accept_model accept;
    double cdf[ACCEPT_MAX_DRAFT + 2];/* cdf[k] = P(emitted <= k), k = 1..draft+1 */
    int fixed_floor;                 /* ACCEPT_FIXED: floor(A) */
    double fixed_frac;               /* and its fractional part */
    double mean;                     /* expected tokens per step */
    uint64_t base;                   /* from (seed, RNG_ACCEPT) */
    /* thr[k]: the least 53-bit draw x with x / 2^53 >= cdf[k], so that a
     * draw compares as an integer; monotone (cdf is), so the emitted
     * count is 1 + the number of thresholds at or below the draw. */
    uint64_t thr[ACCEPT_MAX_DRAFT + 2];
    bool thr_monotone;
    char desc[160];
};

/* draft 0: no speculation (every step emits 1). 0, or -1 with err. */
int spec_init(struct spec_model *s, int draft, const char *acceptance,
              uint64_t seed, char *err);

/* A request's draw key from its identity (once per request). */
uint64_t spec_key(const struct spec_model *s, uint64_t request_key);
/* Fixed acceptance and other cases outside the curve's fast path. */
int spec_sample_slow(const struct spec_model *s, uint64_t skey, int64_t step);

/* Tokens emitted by verification step `step` (0-based) of the request
 * with draw key `skey` (splitmix64 of the key and the step). Inline: one
 * call per decoding request per step. */
static inline int spec_sample(const struct spec_model *s, uint64_t skey, int64_t step)
{
    if (s->draft <= 0 || s->accept.kind == ACCEPT_FIXED || !s->thr_monotone)
        return spec_sample_slow(s, skey, step);
    uint64_t z = skey + (uint64_t)(step + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    uint64_t x = z >> 11;
    int k = 1;
    for (int j = 1; j <= s->draft; j++)
        k += x >= s->thr[j];
    return k;
}

#endif
