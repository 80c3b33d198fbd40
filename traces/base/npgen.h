/* npgen.h: the draws of NumPy's default generator, `np.random.default_rng
 * (seed)` for an integer seed, reproduced bit for bit: SeedSequence
 * (numpy/random/bit_generator.pyx) feeding PCG64 XSL-RR 128/64
 * (numpy/random/src/pcg64/pcg64.h), doubles as (next64 >> 11) * 2^-53
 * (numpy/random/src/distributions). For peers that draw with NumPy
 * (AIPerf's t*, replay/lanes_start.c); everything else uses rng.h. */
#ifndef BASE_NPGEN_H
#define BASE_NPGEN_H

#include <stdint.h>

struct npgen {
    unsigned __int128 state, inc;
};

/* np.random.default_rng(seed) for a seed in [0, 2^64). */
void npgen_init(struct npgen *g, uint64_t seed);
uint64_t npgen_next64(struct npgen *g);
/* rng.random(): [0, 1). */
double npgen_double(struct npgen *g);
/* rng.uniform(lo, hi): lo + (hi - lo) * random(). */
double npgen_uniform(struct npgen *g, double lo, double hi);

#endif
