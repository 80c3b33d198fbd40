/* hash.h: 64-bit hashing of byte strings and of pairs of words. */
#ifndef BASE_HASH_H
#define BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a style mixing with a final avalanche. */
uint64_t hash64(const void *data, size_t n, uint64_t seed);

/* Mixes b into a (boost-style combine, then a 64-bit avalanche). Inline:
 * prompts of agentic traces take one mix a token, 100,000 tokens a call. */
static inline uint64_t hash_mix(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

#endif
