/* mem.c: checked allocation and arenas (mem.h). */
#include "traces/base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
