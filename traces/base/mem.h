/* mem.h: checked allocation and arenas.
 *
 * - x* allocation: an out-of-memory is not recoverable here, so these
 *   print and abort instead of returning NULL. Sizes that come from input
 *   are checked against their limits before they reach these.
 * - An arena: bump allocation in chunks for data that lives as long as its
 *   owner (trace data), freed all at once.
 */
#ifndef BASE_MEM_H
#define BASE_MEM_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

struct arena {
    struct arena_chunk *head;
    size_t used_bytes;  /* bytes handed out */
    size_t total_bytes; /* bytes reserved from malloc */
};
void arena_init(struct arena *a);
void arena_free(struct arena *a);
void *arena_alloc(struct arena *a, size_t n); /* 16-byte aligned, zeroed */
char *arena_strdup(struct arena *a, const char *s);

#endif
