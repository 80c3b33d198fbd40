/* util.c: error buffers, checked allocation, arenas, random numbers,
 * hashing and small parsing helpers (see util.h). */
#include "traces/util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void util_assert_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, what);
    abort();
}

int err_set(char *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void oom(size_t n)
{
    fprintf(stderr, "agentreplay: out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    memcpy(d, s, n);
    return d;
}

/* Arena chunks grow geometrically from 4 KiB to 16 MiB so that a small
 * trace costs little (a few-line file, or a fuzzer's input, allocates
 * pages, not megabytes) and a large one makes few mallocs. */
struct arena_chunk {
    struct arena_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void arena_init(struct arena *a) { memset(a, 0, sizeof *a); }

void arena_free(struct arena *a)
{
    struct arena_chunk *c = a->head;
    while (c) {
        struct arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    memset(a, 0, sizeof *a);
}

void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct arena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = c ? c->size * 2 : 4 * 1024;
        if (size > 16u << 20)
            size = 16u << 20;
        if (size < n)
            size = n;
        c = xmalloc(sizeof *c + size);
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total_bytes += sizeof *c + size;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used_bytes += n;
    memset(p, 0, n);
    return p;
}

char *arena_strdup(struct arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = arena_alloc(a, n);
    memcpy(d, s, n);
    return d;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_init(struct rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t rng_below(struct rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x >= limit);
    return x % n;
}

double rng_exp(struct rng *r, double mean) { return -mean * log1p(-rng_uniform(r)); }

double rng_normal(struct rng *r)
{
    /* Box-Muller; one value per call keeps the stream simple. */
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double rng_lognormal(struct rng *r, double mu, double sigma)
{
    return exp(mu + sigma * rng_normal(r));
}

double rng_gamma(struct rng *r, double shape, double scale)
{
    /* Marsaglia-Tsang; shape < 1 via the boost U^(1/shape). */
    if (shape < 1.0) {
        double u = rng_uniform(r);
        return rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v * scale;
    }
}


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

char *util_read_file(const char *path, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (cap - n < 2) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        err_set(err, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

int64_t util_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

int util_parse_duration(const char *s, int64_t *ns, char *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || v > 1e9)
        return err_set(err, "bad duration '%s' (want e.g. 1800, 90s, 500ms, 2m, 1h)", s);
    double mul = 1e9;
    if (!strcmp(end, "") || !strcmp(end, "s"))
        mul = 1e9;
    else if (!strcmp(end, "ms"))
        mul = 1e6;
    else if (!strcmp(end, "us"))
        mul = 1e3;
    else if (!strcmp(end, "m"))
        mul = 60e9;
    else if (!strcmp(end, "h"))
        mul = 3600e9;
    else
        return err_set(err, "bad duration unit in '%s' (s, ms, us, m, h)", s);
    *ns = (int64_t)llround(v * mul);
    return 0;
}

#include <libgen.h>
#include <unistd.h>

#ifndef AGENTREPLAY_DATADIR
#define AGENTREPLAY_DATADIR "/usr/local/share/agentreplay"
#endif

int util_data_path(const char *rel, char *buf, size_t n)
{
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        /* The binary may be ./agentreplay or build/<variant>/agentreplay. */
        const char *ups[] = {"", "/../..", "/../../.."};
        for (size_t i = 0; i < ARRAY_LEN(ups); i++) {
            snprintf(buf, n, "%s%s/%s", dirname(exe), ups[i], rel);
            if (access(buf, R_OK) == 0)
                return 0;
            exe[k] = 0; /* dirname may have written into exe */
        }
    }
    snprintf(buf, n, "%s/%s", AGENTREPLAY_DATADIR, rel);
    if (access(buf, R_OK) == 0)
        return 0;
    snprintf(buf, n, "%s", rel);
    return access(buf, R_OK) == 0 ? 0 : -1;
}
