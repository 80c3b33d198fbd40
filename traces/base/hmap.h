/* hmap.h: the hash map every non-hot path uses: 64-bit keys to 64-bit
 * values (a number, an index into the owner's array, or a pointer cast to
 * uintptr_t).
 *
 * Entries live in a dense array in insertion order, so iterating a map
 * (for i < hmap_size: hmap_key(m, i), hmap_val(m, i)) is deterministic
 * whatever the hashing; an open-addressed index of positions at most half
 * full finds them. There is no removal (the users build sets and
 * dictionaries that only grow, or clear them whole). Keys may be any
 * value, 0 included.
 *
 * The hot paths keep their own tables, each with a comment saying why:
 * the KV cache's block index and park tags (engine/kvcache.c), the grid
 * prices (engine/pricer.c), the per-shape memo (engine/cost_memo.c), the
 * session hints (engine/handoff.c) and the trace builder's string and
 * prefix tables (traces/trace_builder.c).
 */
#ifndef BASE_HMAP_H
#define BASE_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hmap_entry {
    uint64_t key;
    uint64_t val;
};

struct hmap {
    struct hmap_entry *e; /* n entries, insertion order */
    uint32_t n, cap;
    uint32_t *idx;        /* mask + 1 slots: entry position + 1, 0 empty */
    uint32_t mask;
};

void hmap_init(struct hmap *m);
void hmap_free(struct hmap *m);
/* Forgets every entry, keeping the memory. */
void hmap_clear(struct hmap *m);
/* The value of key, or NULL when absent. The pointer is valid until the
 * next insertion. */
uint64_t *hmap_get(const struct hmap *m, uint64_t key);
/* The value of key, inserted as 0 when absent (*added says which). */
uint64_t *hmap_put(struct hmap *m, uint64_t key, bool *added);

static inline size_t hmap_size(const struct hmap *m) { return m->n; }
static inline uint64_t hmap_key(const struct hmap *m, size_t i) { return m->e[i].key; }
static inline uint64_t hmap_val(const struct hmap *m, size_t i) { return m->e[i].val; }

#endif
