/* sha256.h: SHA-256 (FIPS 180-4), for seeds that must equal a peer's
 * (AIPerf derives its per-lane t* seeds from SHA-256 digests; npgen.h). */
#ifndef BASE_SHA256_H
#define BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* The digest of the n bytes at p. */
void sha256(const void *p, size_t n, uint8_t out[32]);

#endif
