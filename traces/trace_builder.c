/* trace_builder.c: the builder every trace reader uses: sessions and
 * calls appended to a trace, strings interned, block chains stored
 * compactly, small parsing helpers; the hand-over of the finished trace
 * (trace_internal.h).
 *
 * Chains are stored as (base, n_shared, suffix). For traces with sessions
 * the base is the previous call of the same session (agentic calls almost
 * always extend it); for global-scope traces of one-call sessions
 * (Mooncake) a table of chained prefix hashes finds the earlier call with
 * the longest common prefix. Either way the shared part is checked block by
 * block, so a hash collision can only cost compression, never correctness.
 */
#define _GNU_SOURCE /* qsort_r */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builder ---------------------------------------------------------- */

void tb_init(struct tb *b, enum trace_format f)
{
    memset(b, 0, sizeof *b);
    b->t = xcalloc(1, sizeof *b->t);
    arena_init(&b->t->arena);
    b->t->format = f;
    b->str_mask = 255;
    b->str_tab = xcalloc(b->str_mask + 1, sizeof *b->str_tab);
    b->last_call = TRACE_NONE;
    b->global_scope_id = TRACE_NONE;
}

static void tb_free_aux(struct tb *b)
{
    free(b->str_tab);
    free(b->pfx);
    free(b->last);
    free(b->scratch);
    b->str_tab = NULL;
    b->pfx = NULL;
    b->last = b->scratch = NULL;
}

void tb_abort(struct tb *b)
{
    tb_free_aux(b);
    trace_destroy(b->t);
    b->t = NULL;
}

static uint64_t str_hash(const char *s, size_t n) { return hash64(s, n, 0x5eed); }

uint32_t tb_str_n(struct tb *b, const char *s, size_t n)
{
    if (!s)
        return TRACE_NONE;
    struct trace *t = b->t;
    size_t i = str_hash(s, n) & b->str_mask;
    for (;; i = (i + 1) & b->str_mask) {
        uint32_t v = b->str_tab[i];
        if (!v)
            break;
        const char *o = t->strings[v - 1];
        if (!strncmp(o, s, n) && o[n] == 0)
            return v - 1;
    }
    if (t->n_strings == b->cap_strings) {
        b->cap_strings = b->cap_strings ? 2 * b->cap_strings : 16;
        t->strings = xrealloc(t->strings, b->cap_strings * sizeof *t->strings);
    }
    char *d = arena_alloc(&t->arena, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    t->strings[t->n_strings] = d;
    b->str_tab[i] = ++t->n_strings;
    if (2 * (size_t)t->n_strings > b->str_mask) { /* rehash at half load */
        size_t mask = 2 * b->str_mask + 1;
        uint32_t *tab = xcalloc(mask + 1, sizeof *tab);
        for (uint32_t k = 0; k < t->n_strings; k++) {
            const char *o = t->strings[k];
            size_t j = str_hash(o, strlen(o)) & mask;
            while (tab[j])
                j = (j + 1) & mask;
            tab[j] = k + 1;
        }
        free(b->str_tab);
        b->str_tab = tab;
        b->str_mask = mask;
    }
    return t->n_strings - 1;
}

uint32_t tb_str(struct tb *b, const char *s) { return s ? tb_str_n(b, s, strlen(s)) : TRACE_NONE; }

uint32_t tb_session(struct tb *b, uint32_t parent)
{
    struct trace *t = b->t;
    if (t->n_sessions == b->cap_sessions) {
        b->cap_sessions = b->cap_sessions ? 2 * b->cap_sessions : 64;
        t->sessions = xrealloc(t->sessions, b->cap_sessions * sizeof *t->sessions);
    }
    uint32_t i = t->n_sessions++;
    struct trace_session *s = &t->sessions[i];
    memset(s, 0, sizeof *s);
    s->parent = parent;
    s->root = parent == TRACE_NONE ? i : t->sessions[parent].root;
    s->first_call = t->n_calls;
    s->first_child = s->next_sibling = TRACE_NONE;
    s->fork_after = TRACE_NONE;
    s->fork_t_ns = s->fork_gap_ns = 0;
    s->duration_ns = -1;
    s->start_ns = -1;
    s->name = s->kind = s->status = s->file = TRACE_NONE;
    s->block_size = 64;
    s->pos = TRACE_NONE;
    s->spawn_s = s->end_s = NAN; /* NAN: left to tb_finish */
    if (parent == TRACE_NONE) {
        t->n_roots++;
    } else {
        struct trace_session *p = &t->sessions[parent];
        s->scope = p->scope;
        s->block_size = p->block_size;
        s->file = p->file;
        if (p->first_child == TRACE_NONE) {
            p->first_child = i;
        } else {
            uint32_t c = p->first_child;
            while (t->sessions[c].next_sibling != TRACE_NONE)
                c = t->sessions[c].next_sibling;
            t->sessions[c].next_sibling = i;
        }
    }
    return i;
}

void tb_call_init(struct trace_call *c)
{
    memset(c, 0, sizeof *c);
    c->think_ns = c->api_ns = c->ttft_ns = -1;
    c->model = c->stop = c->input_types = c->output_types = TRACE_NONE;
    c->base = TRACE_NONE;
    c->at_s = c->api_s = NAN; /* NAN at_s: the AgentX view is left to tb_finish */
    c->pos = TRACE_NONE;
}

static uint64_t pfx_seed(uint32_t scope) { return hash_mix(0x70726566ULL, scope); }

static void pfx_grow(struct tb *b)
{
    size_t mask = b->pfx_mask ? 2 * b->pfx_mask + 1 : (1u << 10) - 1;
    if (mask >= (1u << 30)) /* 32-bit keys: the table stops growing */
        return;
    struct tb_pfx *tab = xcalloc(mask + 1, sizeof *tab);
    for (size_t i = 0; b->pfx && i <= b->pfx_mask; i++) {
        uint32_t k = b->pfx[i].key;
        if (!k)
            continue;
        size_t j = k & mask;
        while (tab[j].key)
            j = (j + 1) & mask;
        tab[j] = b->pfx[i];
    }
    free(b->pfx);
    b->pfx = tab;
    b->pfx_mask = mask;
}

void tb_pfx_reserve(struct tb *b, size_t n)
{
    if (b->pfx)
        return;
    /* Small inputs start small: a fresh table is zeroed pages, which cost
     * more than the parse itself on a few-kilobyte file. */
    size_t mask = (1u << 10) - 1;
    while (mask < 2 * n && mask < (1u << 29))
        mask = 2 * mask + 1;
    b->pfx_mask = mask;
    b->pfx = xcalloc(mask + 1, sizeof *b->pfx);
}

/* The entry for key k; when absent, claims a slot for it if insert is set
 * (else returns NULL). */
static uint32_t *pfx_slot(struct tb *b, uint32_t k, bool insert, bool *found)
{
    size_t j = k & b->pfx_mask;
    while (b->pfx[j].key && b->pfx[j].key != k)
        j = (j + 1) & b->pfx_mask;
    *found = b->pfx[j].key == k;
    if (!*found) {
        if (!insert)
            return NULL;
        b->pfx[j].key = k;
    }
    return &b->pfx[j].call;
}

static void ensure_u64(uint64_t **p, uint32_t *cap, uint32_t n)
{
    if (n > *cap) {
        *cap = n + n / 2 + 64;
        *p = xrealloc(*p, (size_t)*cap * sizeof **p);
    }
}

static uint32_t lcp(const uint64_t *a, uint32_t na, const uint64_t *c, uint32_t nc)
{
    uint32_t n = na < nc ? na : nc, i = 0;
    while (i < n && a[i] == c[i])
        i++;
    return i;
}

/* Shortens the base chain: an ancestor that holds the whole shared part
 * serves as well and is fewer hops away. */
static uint32_t shallow_base(const struct trace *t, uint32_t base, uint32_t n_shared)
{
    while (base != TRACE_NONE && t->calls[base].n_shared >= n_shared &&
           t->calls[base].base != TRACE_NONE)
        base = t->calls[base].base;
    return base;
}

static uint32_t push_call(struct tb *b, uint32_t s, const struct trace_call *proto)
{
    struct trace *t = b->t;
    struct trace_session *ss = &t->sessions[s];
    ASSERT(ss->first_call + ss->n_calls == t->n_calls);
    ASSERT(t->n_calls < UINT32_MAX - 1);
    if (t->n_calls == b->cap_calls) {
        b->cap_calls = b->cap_calls ? 2 * b->cap_calls : 256;
        t->calls = xrealloc(t->calls, b->cap_calls * sizeof *t->calls);
    }
    uint32_t ci = t->n_calls++;
    struct trace_call *c = &t->calls[ci];
    *c = *proto;
    c->session = s;
    c->index = ss->n_calls++;
    return ci;
}

uint32_t tb_call(struct tb *b, uint32_t s, const struct trace_call *proto,
                 const uint64_t *ids, uint32_t n)
{
    struct trace *t = b->t;
    uint32_t ci = push_call(b, s, proto);
    uint32_t base = TRACE_NONE, n_shared = 0;
    if (b->use_pfx && n) {
        if (!b->pfx)
            pfx_grow(b);
        uint64_t h = pfx_seed(t->sessions[s].scope);
        uint32_t best = TRACE_NONE, best_n = 0;
        for (uint32_t i = 0; i < n; i++) {
            h = hash_mix(h, ids[i]);
            uint32_t k = (uint32_t)(h >> 32) ? (uint32_t)(h >> 32) : 1;
            bool found;
            if (2 * (b->pfx_used + 1) > b->pfx_mask)
                pfx_grow(b);
            /* A full table (over 2^29 prefixes) only answers lookups. */
            bool room = 2 * (b->pfx_used + 1) <= b->pfx_mask;
            uint32_t *v = pfx_slot(b, k, room, &found);
            if (found) {
                if (best_n == i) {
                    best = *v;
                    best_n = i + 1;
                }
            } else if (v) {
                *v = ci;
                b->pfx_used++;
            }
        }
        if (best_n) {
            /* Check the claimed shared part against the real blocks. */
            ensure_u64(&b->scratch, &b->cap_scratch, t->calls[best].n_blocks);
            trace_call_blocks(t, &t->calls[best], b->scratch, best_n);
            n_shared = lcp(b->scratch, best_n, ids, best_n);
            base = n_shared ? best : TRACE_NONE;
        }
    } else if (b->last_call != TRACE_NONE && t->calls[b->last_call].session == s) {
        n_shared = lcp(b->last, b->n_last, ids, n);
        base = n_shared ? b->last_call : TRACE_NONE;
    }
    if (n_shared)
        base = shallow_base(t, base, n_shared);
    struct trace_call *c = &t->calls[ci];
    c->base = base;
    c->n_shared = n_shared;
    c->n_blocks = n;
    c->suffix = NULL;
    if (n > n_shared) {
        uint64_t *suf = arena_alloc(&t->arena, (size_t)(n - n_shared) * sizeof *suf);
        memcpy(suf, ids + n_shared, (size_t)(n - n_shared) * sizeof *suf);
        c->suffix = suf;
    }
    t->stored_block_ids += n - n_shared;
    t->total_block_ids += n;
    if (!b->use_pfx) {
        ensure_u64(&b->last, &b->cap_last, n);
        if (n)
            memcpy(b->last, ids, (size_t)n * sizeof *ids);
        b->n_last = n;
        b->last_call = ci;
    }
    return ci;
}

int tb_call_compact(struct tb *b, uint32_t s, const struct trace_call *proto,
                    uint32_t base, uint32_t n_shared, const uint64_t *suffix,
                    uint32_t n_suffix, char *err)
{
    struct trace *t = b->t;
    if (n_shared) {
        if (base == TRACE_NONE || base >= t->n_calls)
            return err_set(err, "base %u is not an earlier call", base);
        if (n_shared > t->calls[base].n_blocks)
            return err_set(err, "shared %u exceeds the %u blocks of call %u", n_shared,
                           t->calls[base].n_blocks, base);
    } else if (base != TRACE_NONE) {
        return err_set(err, "base given with shared 0");
    }
    if ((uint64_t)n_shared + n_suffix > UINT32_MAX / 2)
        return err_set(err, "chain too long");
    uint32_t ci = push_call(b, s, proto);
    struct trace_call *c = &t->calls[ci];
    c->base = n_shared ? base : TRACE_NONE;
    c->n_shared = n_shared;
    c->n_blocks = n_shared + n_suffix;
    c->suffix = NULL;
    if (n_suffix) {
        uint64_t *suf = arena_alloc(&t->arena, (size_t)n_suffix * sizeof *suf);
        memcpy(suf, suffix, (size_t)n_suffix * sizeof *suf);
        c->suffix = suf;
    }
    t->stored_block_ids += n_suffix;
    t->total_block_ids += c->n_blocks;
    return 0;
}

int tb_json_str_list(struct tb *b, json_t *a, uint32_t *out)
{
    if (!json_is_array(a))
        return -1;
    char buf[1024];
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_string(e))
            return -1;
        const char *v = json_string_value(e);
        size_t k = json_string_length(e);
        if (memchr(v, ',', k) || n + k + 2 > sizeof buf)
            return -1;
        if (i)
            buf[n++] = ',';
        memcpy(buf + n, v, k);
        n += k;
    }
    *out = tb_str_n(b, buf, n);
    return 0;
}

int tb_seconds_ns(json_t *v, int64_t *ns)
{
    if (!json_is_number(v))
        return -1;
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0 || x > TRACE_MAX_SECONDS)
        return -1;
    *ns = (int64_t)llround(x * 1e9);
    return 0;
}

void tb_line_col(const char *data, size_t off, size_t *line, size_t *col)
{
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (data[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* ---- the AgentX view of readers that do not fill it ------------------- */

/* Fork slot of a subagent: 0 at its parent's start, k + 1 after call k. */
static uint32_t fork_slot(const struct trace_session *s)
{
    return s->fork_after == TRACE_NONE ? 0 : s->fork_after + 1;
}

/* (fork slot, session) order of two subagents. */
static int cmp_slot(const void *x, const void *y, void *ctx)
{
    const struct trace *t = ctx;
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    uint32_t sa = fork_slot(&t->sessions[a]), sb = fork_slot(&t->sessions[b]);
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Positions of one session's request list as the native order implies
 * them: subagents forked at the session's start first, then each call
 * followed by the subagents forked after it, in session order. kids has
 * room for every child. */
static void native_positions(struct trace *t, uint32_t si, uint32_t *kids)
{
    const struct trace_session *s = &t->sessions[si];
    uint32_t nk = 0;
    for (uint32_t c = s->first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling)
        kids[nk++] = c;
    qsort_r(kids, nk, sizeof *kids, cmp_slot, t);
    uint32_t pos = 0, k = 0;
    for (uint32_t slot = 0; slot <= s->n_calls; slot++) {
        while (k < nk && fork_slot(&t->sessions[kids[k]]) == slot)
            t->sessions[kids[k++]].pos = pos++;
        if (slot < s->n_calls)
            t->calls[s->first_call + slot].pos = pos++;
    }
    ASSERT(k == nk);
}

/* Fills what a reader left unset: positions (native order), start times
 * on the root's clock from the session offsets, api_s from api_ns, spawn
 * times from fork_t_ns, ends from duration_ns or else the calls. */
static void fill_agentx_view(struct trace *t)
{
    int64_t *soff = xmalloc((t->n_sessions ? t->n_sessions : 1) * sizeof *soff);
    uint32_t *kids = xmalloc((t->n_sessions ? t->n_sessions : 1) * sizeof *kids);
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        struct trace_session *s = &t->sessions[i];
        /* Saturating: nested offsets of absurd inputs must not overflow. */
        if (s->parent == TRACE_NONE)
            soff[i] = 0;
        else if (__builtin_add_overflow(soff[s->parent], s->fork_t_ns, &soff[i]))
            soff[i] = INT64_MAX;
        bool set = s->n_calls && t->calls[s->first_call].pos != TRACE_NONE;
        for (uint32_t c = s->first_child; c != TRACE_NONE && !set; c = t->sessions[c].next_sibling)
            set = t->sessions[c].pos != TRACE_NONE;
        if (!set)
            native_positions(t, i, kids);
        for (uint32_t k = 0; k < s->n_calls; k++) {
            struct trace_call *c = &t->calls[s->first_call + k];
            if (!isnan(c->at_s))
                continue;
            int64_t at;
            if (__builtin_add_overflow(soff[i], c->t_ns, &at))
                at = INT64_MAX;
            c->at_s = (double)at / 1e9;
            c->api_s = c->api_ns >= 0 ? (double)c->api_ns / 1e9 : NAN;
        }
        if (isnan(s->spawn_s))
            s->spawn_s = s->parent == TRACE_NONE ? 0.0 : (double)soff[i] / 1e9;
        if (isnan(s->end_s)) {
            double end = s->spawn_s;
            if (s->duration_ns >= 0) {
                end = s->spawn_s + (double)s->duration_ns / 1e9;
            } else {
                for (uint32_t k = 0; k < s->n_calls; k++) {
                    const struct trace_call *c = &t->calls[s->first_call + k];
                    double e = c->at_s + (c->api_s > 0 ? c->api_s : 0.0);
                    if (k == 0 || e > end)
                        end = e;
                }
            }
            s->end_s = end;
        }
    }
    free(soff);
    free(kids);
}

struct trace *tb_finish(struct tb *b)
{
    struct trace *t = b->t;
    tb_free_aux(b);
    b->t = NULL;
    if (t->n_scopes == 0 && t->n_sessions)
        t->n_scopes = 1;
    fill_agentx_view(t);
    t->digest = trace_digest_compute(t);
    char err[ERR_LEN];
    if (trace_verify(t, err)) {
        fprintf(stderr, "trace: internal error: %s\n", err);
        ASSERT(!"trace_verify failed after reading");
    }
    return t;
}
