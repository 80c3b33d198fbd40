/* hash.c: byte-string hashing (hash.h). */
#include "traces/base/hash.h"

uint64_t hash64(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return hash_mix(h, n);
}
