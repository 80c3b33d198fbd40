/* util.h: small pieces every module uses.
 *
 * - Error buffers: library functions return 0 or a negative code and write
 *   a one-line message (with its location, "file:line:col: ..." for inputs)
 *   into a caller's buffer of ERR_LEN bytes. Only the command-line front
 *   prints and exits.
 * - Checked allocation (an out-of-memory is not recoverable here).
 * - An arena for data that lives as long as its owner (trace data).
 * - A seeded random generator with independent streams per purpose.
 * - Exit codes shared by every command.
 */
#ifndef UTIL_H
#define UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ERR_LEN 512

/* Exit codes of the command-line front. */
enum {
    EXIT_OK = 0,
    EXIT_FAIL = 1,     /* a run failed (I/O, target gone, test failure)   */
    EXIT_BADINPUT = 2, /* bad flags, bad input files, impossible layouts  */
    EXIT_REFUSED = 3,  /* a comparison refused as unfair (compare)        */
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NS_PER_S 1000000000LL
#define NS_PER_MS 1000000LL
#define NS_PER_US 1000LL

/* Invariants hold in every build (NDEBUG does not remove them). */
#define ASSERT(cond)                                                        \
    do {                                                                    \
        if (!(cond))                                                        \
            util_assert_fail(__FILE__, __LINE__, #cond);                    \
    } while (0)
void util_assert_fail(const char *file, int line, const char *what)
    __attribute__((noreturn));

/* printf into an error buffer (err may be NULL). Returns -1 so that
 * `return err_set(err, "...")` reads naturally. */
int err_set(char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* Arena: bump allocation in chunks; freed all at once. */
struct arena {
    struct arena_chunk *head;
    size_t used_bytes;  /* bytes handed out */
    size_t total_bytes; /* bytes reserved from malloc */
};
void arena_init(struct arena *a);
void arena_free(struct arena *a);
void *arena_alloc(struct arena *a, size_t n); /* 16-byte aligned, zeroed */
char *arena_strdup(struct arena *a, const char *s);

/* Random numbers: xoshiro256** seeded by splitmix64 from (seed, stream),
 * so that each purpose (trace sampling, acceptance, routing, faults) has
 * its own sequence and adding draws to one does not shift the others. */
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

/* 64-bit hashing (FNV-1a style mixing with a final avalanche). */
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

/* Reads a whole file (NUL-terminated; *len excludes the NUL). */
char *util_read_file(const char *path, size_t *len, char *err);

/* Monotonic wall clock, for progress bars and benchmarks only (never in
 * results). */
int64_t util_wall_ns(void);

/* Parses a duration such as "1800", "90s", "500ms", "2m", "1.5h" into ns. */
int util_parse_duration(const char *s, int64_t *ns, char *err);



/* Finds a data file shipped with the program (presets, plot scripts, the
 * sample trace) by its path relative to the repository root: first beside
 * the running binary (a build tree), then under the install prefix
 * (AGENTREPLAY_DATADIR), then relative to the current directory. Writes
 * the path into buf (size n); returns 0, or -1 if not found. */
int util_data_path(const char *rel, char *buf, size_t n);
#endif
