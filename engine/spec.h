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
    char desc[160];
};

/* draft 0: no speculation (every step emits 1). 0, or -1 with err. */
int spec_init(struct spec_model *s, int draft, const char *acceptance,
              uint64_t seed, char *err);

/* A request's draw key from its identity (once per request). */
uint64_t spec_key(const struct spec_model *s, uint64_t request_key);
/* Tokens emitted by verification step `step` (0-based) of the request
 * with draw key `skey` (splitmix64 of the key and the step). */
int spec_sample(const struct spec_model *s, uint64_t skey, int64_t step);

#endif
