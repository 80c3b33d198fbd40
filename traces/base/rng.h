/* rng.h: seeded random numbers with independent streams per purpose.
 *
 * xoshiro256** seeded by splitmix64 from (seed, stream), so that each
 * purpose (trace sampling, acceptance, routing, faults) has its own
 * sequence and adding draws to one does not shift the others.
 */
#ifndef BASE_RNG_H
#define BASE_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};
enum rng_stream {
    RNG_TRACE = 1,   /* choosing traces and warm-start points */
    RNG_ACCEPT = 2,  /* speculative acceptance */
    RNG_ROUTE = 3,   /* router ties */
    RNG_ARRIVAL = 4, /* Poisson / gamma arrivals */
    RNG_FAULT = 5,   /* fault injection */
    RNG_SYNTH = 6,   /* trace generator */
};
void rng_init(struct rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(struct rng *r);
double rng_uniform(struct rng *r);            /* [0, 1) */
uint64_t rng_below(struct rng *r, uint64_t n); /* [0, n), unbiased */
double rng_exp(struct rng *r, double mean);
double rng_normal(struct rng *r);
double rng_lognormal(struct rng *r, double mu, double sigma);
double rng_gamma(struct rng *r, double shape, double scale);

#endif
