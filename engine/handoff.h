/* handoff.h: a session's prefix kept between its calls and handed to the
 * next one: the finished call's hint and park, and the next call's prefix
 * match that adopts them.
 *
 * When a request ends, the scheduler keeps it as its session's hint: its
 * block hashes, blocks, their generations at release and its trace ids.
 * The blocks of its hashed prefix that it held alone are parked as one
 * unit (kvcache.h) instead of being released block by block. The
 * session's next call finds its prefix by comparing hashes with the hint
 * in order (copying them where the trace ids agree) instead of probing
 * the table block by block, adopts the park whole where it matches, and
 * takes the hint's other blocks where they still hold that content (same
 * generation); the table serves the rest. Once admitted, that call
 * supersedes the hint (and becomes the next one when it ends).
 *
 * None of this changes a result: a hint only speeds a lookup up (a block
 * counts only if it still holds the content), and a park materialises
 * exactly as a block-by-block release would have left its blocks
 * (sched_params.hint_budget 0 and no_parks turn them off, for checking).
 *
 * The scheduler calls, per request: handoff_init at submit; handoff_match
 * at each admission attempt, then handoff_unmatch (not admitted) or
 * handoff_admit and handoff_supersede (admitted); the inline notes below
 * as its blocks are committed, checkpointed, rolled back or preempted;
 * handoff_finish at its end. */
#ifndef HANDOFF_H
#define HANDOFF_H

#include <stdbool.h>
#include <stdint.h>

#include "traces/base/list.h"

struct sched;
struct sreq;

/* A request's part in the handoff (embedded in struct sreq). */
struct handoff {
    /* Its match at the last admission attempt (handoff_match). */
    uint32_t matched;        /* blocks matched: blk[0, matched) */
    int64_t match_epoch;     /* kv evictions + 1 then (0: none); while no block
                                was evicted since, the match still holds */
    uint32_t adopt_id;       /* the park it adopted then: blk[0, adopt_n) */
    uint32_t adopt_n;        /*   (0: none) */
    uint64_t adopt_serial;
    uint64_t src_serial;     /* the hint its trace ids were compared with (0: none) */
    uint32_t src_same;       /*   ids [0, src_same) equal that hint's */
    /* Parking at its end: blk[0, hashed) go to one park when each is held
     * by this request alone: it took none in use (no_park) and none got a
     * second holder since (kv_share_mark of its tag unchanged). */
    uint32_t hashed;         /* blocks [0, hashed) are hashed */
    uint32_t hashed_ck;      /* of them, blocks with a checkpoint */
    uint32_t tag;            /* marks the blocks it holds alone (kv_tag) */
    uint32_t share_mark;     /* kv_share_mark(tag) at admission */
    bool no_park;            /* it took a block in use, or rolled back a
                                hashed block (its checkpoints are unknown) */
    /* As a hint (after its end). */
    uint64_t key;            /* its session_key */
    uint64_t serial;         /* unique among the scheduler's hints */
    uint32_t hint_n;         /* full blocks [0, hint_n) were cached */
    uint32_t *gen;           /* gen[i]: generation of blk[i] at its release
                                (in the request's allocation) */
    uint64_t *ids;           /* its trace block ids (owned; a running request
                                may hold its superseded hint's, see src_same) */
    uint32_t n_ids, cap_ids;
    uint32_t park_id;        /* its park (live while park_serial matches) */
    uint64_t park_serial;
    int64_t bytes;           /* memory it holds as a hint */
    struct list_node link;   /* in handoff_hints.order while a hint */
};

/* A scheduler's hints (embedded in struct sched): the last finished
 * request of each session, direct-mapped by session key; a hint is
 * dropped once its session's next call is admitted, when another session
 * takes its slot, or, oldest first, when the hints hold more than
 * sched_params.hint_budget bytes; so the memory in use stays small and
 * warm. */
struct handoff_hints {
    struct sreq **slot;      /* HANDOFF_SLOTS, made at the first hint */
    struct list_node order;  /* hints, oldest first (struct handoff.link) */
    int64_t bytes;           /* memory the hints hold */
    uint64_t serials;        /* hint serials handed out */
};

void handoff_hints_init(struct handoff_hints *hs);
/* Frees every hint (their parks are left to the pool being freed). */
void handoff_hints_free(struct handoff_hints *hs);

/* A new request: gen is its generation array (cap_blk entries; NULL until
 * its arrays are made at its first admission attempt), bytes its
 * allocation. */
void handoff_init(struct handoff *ho, uint32_t *gen, int64_t bytes);
/* Frees what a request's handoff owns (before the request is freed). */
void handoff_release(struct handoff *ho);

/* The prefix match of waiting request q (holding no block): takes the
 * blocks of its prefix that the cache holds, blk[0, m) (kv_take, or a
 * park adopted whole), up to (tokens - 1) rounded down to full blocks.
 * Returns m; *usable receives the blocks whose KV the request may reuse
 * (up to the last checkpoint on a hybrid model). The blocks stay taken:
 * the caller admits q (handoff_admit) or gives them back
 * (handoff_unmatch). */
uint32_t handoff_match(struct sched *s, struct sreq *q, uint32_t *usable);
/* Gives back the m blocks handoff_match took (q is not admitted now). */
void handoff_unmatch(struct sched *s, struct sreq *q, uint32_t m);
/* q is admitted holding its m matched blocks: they carry its tag. */
void handoff_admit(struct sched *s, struct sreq *q, uint32_t m);
/* q, admitted, supersedes its session's hint (dropped; q may take over
 * its trace-id buffer). */
void handoff_supersede(struct sched *s, struct sreq *q);
/* q ends: releases its blocks (its hashed prefix as a park when it held
 * every block of it alone) and keeps q as its session's hint. Returns
 * whether q was kept (the hints own it now); else the caller frees it.
 * Call while q->c is valid. */
bool handoff_finish(struct sched *s, struct sreq *q);

/* Block i of the holder was committed (hashed: it is in the table). */
static inline void handoff_committed(struct handoff *ho, uint32_t i, bool hashed)
{
    if (i == ho->hashed && hashed)
        ho->hashed++;
}
/* Block i got a new checkpoint. */
static inline void handoff_checkpointed(struct handoff *ho, uint32_t i)
{
    if (i < ho->hashed)
        ho->hashed_ck++;
}
/* The holder rolled its blocks back to n (rejected draft slots). */
static inline void handoff_trimmed(struct handoff *ho, uint32_t n)
{
    if (ho->hashed > n) {
        ho->hashed = n;
        ho->no_park = true;
    }
}
/* The holder was preempted: its blocks are gone, so is its match. */
static inline void handoff_preempted(struct handoff *ho) { ho->match_epoch = 0; }
/* The tag for the blocks the holder allocates. */
static inline uint32_t handoff_tag(const struct handoff *ho) { return ho->tag; }

#endif
