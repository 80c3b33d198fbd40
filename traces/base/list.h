/* list.h: the intrusive doubly linked list every non-hot path uses.
 *
 * A list is a circular ring through a sentinel head, so insertion and
 * removal are O(1) without special cases; an owner embeds a struct
 * list_node in its object and gets the object back with LIST_ENTRY. A
 * node that is in no list points to itself (list_node_init, and after
 * list_remove), so removing twice is harmless and list_linked() says
 * whether it is in one.
 *
 *     struct call { ...; struct list_node live; };
 *     struct list_node calls;                     // the head
 *     list_init(&calls);
 *     list_push_back(&calls, &c->live);
 *     LIST_FOR_EACH_SAFE(n, next, &calls) { struct call *c = LIST_ENTRY(n, struct call, live); ... }
 *     list_remove(&c->live);
 */
#ifndef BASE_LIST_H
#define BASE_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
    struct list_node *prev, *next;
};

/* A head, or a node that is in no list. */
static inline void list_init(struct list_node *h) { h->prev = h->next = h; }
#define list_node_init list_init

static inline bool list_empty(const struct list_node *h) { return h->next == h; }
static inline bool list_linked(const struct list_node *n) { return n->next != n; }

static inline void list_insert_between(struct list_node *n, struct list_node *prev,
                                       struct list_node *next)
{
    n->prev = prev;
    n->next = next;
    prev->next = n;
    next->prev = n;
}
static inline void list_push_back(struct list_node *h, struct list_node *n)
{
    list_insert_between(n, h->prev, h);
}
static inline void list_push_front(struct list_node *h, struct list_node *n)
{
    list_insert_between(n, h, h->next);
}
/* Unlinks n from its list (a no-op for a node in none). */
static inline void list_remove(struct list_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* First and last node, or NULL when empty. */
static inline struct list_node *list_first(const struct list_node *h)
{
    return h->next == h ? NULL : h->next;
}
static inline struct list_node *list_last(const struct list_node *h)
{
    return h->prev == h ? NULL : h->prev;
}

#define LIST_ENTRY(node, type, member) ((type *)(void *)((char *)(node) - offsetof(type, member)))
/* Walks h front to back; the body must not remove n (use the _SAFE form). */
#define LIST_FOR_EACH(n, h) for (struct list_node *n = (h)->next; n != (h); n = n->next)
/* The same, allowing the body to remove (or free) n. */
#define LIST_FOR_EACH_SAFE(n, nx, h)                                        \
    for (struct list_node *n = (h)->next, *nx = n->next; n != (h); n = nx, nx = n->next)

#endif
