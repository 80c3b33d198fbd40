/* hmap.c: the insertion-ordered hash map (hmap.h). */
#include "traces/base/hmap.h"

#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

void hmap_init(struct hmap *m) { memset(m, 0, sizeof *m); }

void hmap_free(struct hmap *m)
{
    free(m->e);
    free(m->idx);
    memset(m, 0, sizeof *m);
}

void hmap_clear(struct hmap *m)
{
    m->n = 0;
    if (m->idx)
        memset(m->idx, 0, ((size_t)m->mask + 1) * sizeof *m->idx);
}

static inline uint32_t slot_of(uint64_t key, uint32_t mask)
{
    return (uint32_t)hash_mix(key, 0x686d6170) & mask;
}

/* The index slot that holds key, or the empty slot where it would go. */
static uint32_t find(const struct hmap *m, uint64_t key)
{
    uint32_t i = slot_of(key, m->mask);
    while (m->idx[i] && m->e[m->idx[i] - 1].key != key)
        i = (i + 1) & m->mask;
    return i;
}

static void grow_index(struct hmap *m)
{
    uint32_t mask = m->idx ? 2 * m->mask + 1 : 15;
    ASSERT(mask < (1u << 31));
    free(m->idx);
    m->idx = xcalloc((size_t)mask + 1, sizeof *m->idx);
    m->mask = mask;
    for (uint32_t k = 0; k < m->n; k++) {
        uint32_t i = slot_of(m->e[k].key, mask);
        while (m->idx[i])
            i = (i + 1) & mask;
        m->idx[i] = k + 1;
    }
}

uint64_t *hmap_get(const struct hmap *m, uint64_t key)
{
    if (!m->n)
        return NULL;
    uint32_t i = find(m, key);
    return m->idx[i] ? &m->e[m->idx[i] - 1].val : NULL;
}

uint64_t *hmap_put(struct hmap *m, uint64_t key, bool *added)
{
    if (!m->idx || 2 * ((size_t)m->n + 1) > (size_t)m->mask + 1)
        grow_index(m);
    uint32_t i = find(m, key);
    if (m->idx[i]) {
        if (added)
            *added = false;
        return &m->e[m->idx[i] - 1].val;
    }
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 16;
        m->e = xrealloc(m->e, (size_t)m->cap * sizeof *m->e);
    }
    m->e[m->n] = (struct hmap_entry){.key = key, .val = 0};
    m->idx[i] = ++m->n;
    if (added)
        *added = true;
    return &m->e[m->n - 1].val;
}
