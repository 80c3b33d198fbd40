/* plan_msgs.c: the message deltas of a stream's prompts, as AIPerf 0.13.0
 * builds them from block ids (plan_internal.h pm_plan), counting tokens
 * instead of holding them: the turn-0 system/user split, the LCP-driven
 * truncation, assistant blocks taken from the next request's new region,
 * the two-pass assistant caps and the delta/reset rule
 * (aiperf/dataset/loader/weka_synth_buf.py:124-403, 431-476, 520-711).
 */
#include "traces/plan_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

#include <stdlib.h>
#include <string.h>

/* A role segment: block_count whole blocks, then (the last one only) an
 * overhang of synthetic tokens; tokens = its token count. */
struct seg {
    uint8_t role;
    int64_t blocks;
    int64_t tokens;
};

struct recon {
    int64_t bs, corpus;
    struct seg *s;
    uint32_t n, cap;
    uint32_t emitted;       /* segments sent so far */
    int64_t disturbed;      /* earliest disturbed segment, -1 none */
};

static void push(struct recon *rc, uint8_t role, int64_t blocks, int64_t tokens)
{
    if (rc->n == rc->cap) {
        rc->cap = rc->cap ? 2 * rc->cap : 16;
        rc->s = xrealloc(rc->s, rc->cap * sizeof *rc->s);
    }
    rc->s[rc->n++] = (struct seg){role, blocks, tokens};
}

/* Tokens of a synthetic tail of n: AIPerf slices its tokenized corpus and
 * so gives at most the corpus's length (hash_ids_synthesis.py:83-97). */
static int64_t tail_tokens(const struct recon *rc, int64_t n)
{
    if (n <= 0)
        return 0;
    return rc->corpus > 0 && n > rc->corpus ? rc->corpus : n;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* truncate_synth_buf_at_block: cut the segments to target blocks; the
 * earliest segment disturbed, or -1. */
static int64_t truncate_at(struct recon *rc, int64_t target)
{
    if (target <= 0) {
        int64_t had = rc->n > 0 ? 0 : -1;
        rc->n = 0;
        return had;
    }
    int64_t cursor = 0;
    for (uint32_t i = 0; i < rc->n; i++) {
        struct seg *g = &rc->s[i];
        if (cursor + g->blocks < target) {
            cursor += g->blocks;
            continue;
        }
        if (cursor + g->blocks == target) {
            int64_t disturbed = -1;
            if (g->tokens - g->blocks * rc->bs > 0) {
                g->tokens = g->blocks * rc->bs;
                disturbed = i;
            }
            bool past = i + 1 < rc->n;
            rc->n = i + 1;
            if (disturbed < 0 && past)
                disturbed = i + 1;
            return disturbed;
        }
        if (cursor == target) {
            rc->n = i;
            return i;
        }
        int64_t kept = target - cursor;
        g->blocks = kept;
        if (g->tokens > kept * rc->bs)
            g->tokens = kept * rc->bs;
        rc->n = i + 1;
        return i;
    }
    return -1;
}

static int init_turn0(struct recon *rc, const struct pm_turn *q, int64_t tool, int64_t system,
                      uint32_t *sys_blocks, char *err)
{
    int64_t bs = rc->bs, m_full = q->in / bs;
    int64_t tail = q->in - m_full * bs;
    int64_t covered = m_full < q->nh ? m_full : q->nh;
    int64_t missing = (m_full - covered) * bs, cursor = 0;
    rc->n = 0;
    *sys_blocks = 0;
    if (tool > 0 || system > 0) {
        int64_t pb = ceil_div(tool + system, bs);
        if (pb > 0) {
            if (pb > q->nh)
                return err_set(err,
                               "the declared tool + system prefix needs %lld blocks, turn 0 "
                               "records %u (AIPerf refuses such a trace)",
                               (long long)pb, q->nh);
            if (pb > covered)
                pb = covered;
        }
        if (pb > 0) {
            push(rc, PLAN_ROLE_SYSTEM, pb, pb * bs);
            cursor = pb;
            *sys_blocks = (uint32_t)pb;
        }
    }
    int64_t ub = covered - cursor;
    int64_t ut = ub * bs + tail_tokens(rc, missing + tail);
    if (ut > 0 || rc->n == 0)
        push(rc, PLAN_ROLE_USER, ub, ut);
    rc->emitted = 0;
    rc->disturbed = -1;
    return 0;
}

static void advance(struct recon *rc, const struct pm_turn *prev, const struct pm_turn *cur,
                    int64_t cap)
{
    int64_t bs = rc->bs, m_full = cur->in / bs;
    int64_t covered = cur->nh < m_full ? cur->nh : m_full;
    int64_t missing = m_full > cur->nh ? (m_full - cur->nh) * bs : 0;
    int64_t lcp = pc_lcp(prev->h, prev->nh, cur->h, cur->nh);
    int64_t nb = covered > lcp ? covered - lcp : 0;
    int64_t synth = cur->in % bs + missing;
    rc->disturbed = truncate_at(rc, lcp);
    int64_t region = nb * bs + tail_tokens(rc, synth);
    int64_t asst = prev->out > 0 ? ceil_div(prev->out, bs) : 0;
    bool user = false;
    for (uint32_t i = 0; i < rc->n && !user; i++)
        user = rc->s[i].role == PLAN_ROLE_USER;
    if (!user) /* context lost: the whole new region is user content */
        asst = 0;
    if (asst > nb)
        asst = nb;
    if (cap >= 0 && asst > cap)
        asst = cap;
    if (synth == 0 && asst == nb && asst > 0)
        asst--; /* a request ends with a user message */
    if (asst > 0)
        push(rc, PLAN_ROLE_ASSISTANT, asst, asst * bs);
    if (region - asst * bs > 0)
        push(rc, PLAN_ROLE_USER, nb - asst, region - asst * bs);
}

/* compute_asst_block_caps: per turn the most assistant blocks it may take
 * so that a later block-aligned pull-back cuts onto a user block; -1 for
 * no bound. */
static void asst_caps(const struct pm_turn *t, uint32_t n, int64_t bs, int64_t *caps)
{
    for (uint32_t k = 0; k < n; k++)
        caps[k] = -1;
    if (!n)
        return;
    uint32_t *tile = NULL, nt = 0, capt = 0;
    int64_t *eff = xcalloc(n, sizeof *eff);
    for (uint32_t k = 0; k < n; k++) {
        int64_t m_full = t[k].in / bs;
        int64_t covered = t[k].nh < m_full ? t[k].nh : m_full;
        int64_t missing = m_full > t[k].nh ? (m_full - t[k].nh) * bs : 0;
        int64_t synth = t[k].in % bs + missing;
        int64_t lcp = k ? pc_lcp(t[k - 1].h, t[k - 1].nh, t[k].h, t[k].nh) : 0;
        if (k == 0) {
            nt = 0;
        } else {
            int64_t e = lcp < nt ? lcp : nt;
            eff[k] = e;
            covered = covered > e ? covered - e : 0; /* new blocks */
            if (covered == 0 && synth == 0 && e >= 1) {
                uint32_t owner = tile[e - 1];
                if (owner != 0) {
                    int64_t bound = (e - 1) - eff[owner];
                    if (bound >= 0 && (caps[owner] < 0 || bound < caps[owner]))
                        caps[owner] = bound;
                }
            }
            nt = (uint32_t)e;
        }
        if (nt + (uint64_t)covered > capt) {
            capt = nt + (uint32_t)covered + 64;
            tile = xrealloc(tile, capt * sizeof *tile);
        }
        for (int64_t b = 0; b < covered; b++)
            tile[nt++] = k;
    }
    free(tile);
    free(eff);
}

int pm_plan(const struct pm_turn *turns, uint32_t n, int64_t bs, int64_t tool, int64_t system,
            int64_t corpus, struct plan_msg **msgs, uint32_t *n_msgs, uint32_t *cap_msgs,
            uint32_t *first, uint32_t *count, bool *reset, uint32_t *sys_blocks, char *err)
{
    struct recon rc = {.bs = bs, .corpus = corpus, .disturbed = -1};
    int64_t *caps = xmalloc((n ? n : 1) * sizeof *caps);
    asst_caps(turns, n, bs, caps);
    int rcode = 0;
    *sys_blocks = 0;
    for (uint32_t k = 0; k < n && !rcode; k++) {
        if (k == 0)
            rcode = init_turn0(&rc, &turns[0], tool, system, sys_blocks, err);
        else
            advance(&rc, &turns[k - 1], &turns[k], caps[k]);
        if (rcode)
            break;
        /* turn_delta */
        bool dist = rc.disturbed >= 0 && rc.disturbed < (int64_t)rc.emitted;
        uint32_t from = 0;
        reset[k] = false;
        if (rc.emitted == 0 || dist)
            reset[k] = rc.emitted != 0 && dist;
        else
            from = rc.emitted;
        first[k] = *n_msgs;
        count[k] = from < rc.n ? rc.n - from : 0;
        for (uint32_t i = from; i < rc.n; i++) {
            if (*n_msgs == *cap_msgs) {
                *cap_msgs = *cap_msgs ? 2 * *cap_msgs : 256;
                *msgs = xrealloc(*msgs, *cap_msgs * sizeof **msgs);
            }
            (*msgs)[(*n_msgs)++] = (struct plan_msg){rc.s[i].role, rc.s[i].tokens};
        }
        rc.emitted = rc.n;
        rc.disturbed = -1;
    }
    free(rc.s);
    free(caps);
    return rcode;
}
