/* npgen.c: NumPy's SeedSequence and PCG64 (npgen.h). Constants from
 * numpy/random/bit_generator.pyx (SeedSequence) and
 * numpy/random/src/pcg64/pcg64.h (PCG64's multiplier). */
#include "traces/base/npgen.h"

/* SeedSequence's hash constants. */
#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_MULT_L 0xca01f9ddu
#define MIX_MULT_R 0x4973f715u
#define XSHIFT 16
#define POOL 4

static uint32_t hashmix(uint32_t v, uint32_t *hc)
{
    v ^= *hc;
    *hc *= MULT_A;
    v *= *hc;
    return v ^ v >> XSHIFT;
}

static uint32_t mix(uint32_t x, uint32_t y)
{
    uint32_t r = MIX_MULT_L * x - MIX_MULT_R * y;
    return r ^ r >> XSHIFT;
}

/* SeedSequence(seed).generate_state(4, np.uint64) into out. */
static void seed_state(uint64_t seed, uint64_t out[4])
{
    /* The entropy as 32-bit words, least significant first, as few as
     * hold it (one for 0). */
    uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int n_ent = seed >> 32 ? 2 : 1;
    uint32_t pool[POOL], hc = INIT_A;
    for (int i = 0; i < POOL; i++)
        pool[i] = hashmix(i < n_ent ? ent[i] : 0, &hc);
    for (int s = 0; s < POOL; s++)
        for (int d = 0; d < POOL; d++)
            if (s != d)
                pool[d] = mix(pool[d], hashmix(pool[s], &hc));
    uint32_t words[8], hb = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % POOL] ^ hb;
        hb *= MULT_B;
        v *= hb;
        words[i] = v ^ v >> XSHIFT;
    }
    for (int i = 0; i < 4; i++) /* little-endian pairs, as NumPy views them */
        out[i] = (uint64_t)words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
}

#define PCG_MULT ((unsigned __int128)2549297995355413924ull << 64 | 4865540595714422341ull)

static void step(struct npgen *g) { g->state = g->state * PCG_MULT + g->inc; }

void npgen_init(struct npgen *g, uint64_t seed)
{
    uint64_t v[4];
    seed_state(seed, v);
    unsigned __int128 s = (unsigned __int128)v[0] << 64 | v[1];
    unsigned __int128 i = (unsigned __int128)v[2] << 64 | v[3];
    /* pcg_setseq_128_srandom_r */
    g->state = 0;
    g->inc = i << 1 | 1;
    step(g);
    g->state += s;
    step(g);
}

uint64_t npgen_next64(struct npgen *g)
{
    step(g);
    uint64_t hi = (uint64_t)(g->state >> 64), lo = (uint64_t)g->state;
    unsigned rot = (unsigned)(hi >> 58);
    uint64_t x = hi ^ lo;
    return rot ? x >> rot | x << (64 - rot) : x;
}

double npgen_double(struct npgen *g) { return (double)(npgen_next64(g) >> 11) * (1.0 / 9007199254740992.0); }

double npgen_uniform(struct npgen *g, double lo, double hi) { return lo + (hi - lo) * npgen_double(g); }
