/* trace.c: the trace model's core: the builder every reader uses (string
 * interning, compact block chains), reading a file or a folder with format
 * detection, chain access, the verify walker and the content digest.
 *
 * Chains are stored as (base, n_shared, suffix). For traces with sessions
 * the base is the previous call of the same session (agentic calls almost
 * always extend it); for global-scope traces of one-call sessions
 * (Mooncake) a table of chained prefix hashes finds the earlier call with
 * the longest common prefix. Either way the shared part is checked block by
 * block, so a hash collision can only cost compression, never correctness.
 */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- Jansson allocations while parsing ----------------------------------
 * Jansson allocates every number and string of a document separately;
 * malloc and free were a fifth of the agentic folder's read time (perf).
 * While a reader parses (tb_json_begin .. tb_json_end, on its own thread),
 * Jansson allocates from a bump arena instead and frees nothing; the whole
 * document goes at once (tb_json_reset between lines, tb_json_end). The
 * allocation functions are installed once for the process; outside a
 * parse, and on every other thread, they are plain malloc and free.
 * Documents parsed in the window must not outlive it (never json_decref
 * them after tb_json_end). */
struct jchunk {
    struct jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};
static __thread struct jchunk *tj_head;
static __thread bool tj_on;

static void *tj_malloc(size_t n)
{
    if (!tj_on)
        return malloc(n);
    n = (n + 15) & ~(size_t)15;
    struct jchunk *c = tj_head;
    if (!c || c->size - c->used < n) {
        size_t size = c ? 2 * c->size : 16u << 10;
        if (size > 64u << 20)
            size = 64u << 20;
        if (size < n)
            size = n;
        c = malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->size = size;
        c->used = 0;
        c->next = tj_head;
        tj_head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static void tj_free(void *p)
{
    if (!tj_on)
        free(p);
}

static void tj_install(void) { json_set_alloc_funcs(tj_malloc, tj_free); }

void tb_json_begin(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tj_install);
    ASSERT(!tj_on);
    tj_on = true;
}

void tb_json_reset(void)
{
    /* Keep the newest (largest) chunk for the next document. */
    struct jchunk *c = tj_head;
    if (!c)
        return;
    struct jchunk *o = c->next;
    while (o) {
        struct jchunk *n = o->next;
        free(o);
        o = n;
    }
    c->next = NULL;
    c->used = 0;
}

void tb_json_end(void)
{
    struct jchunk *c = tj_head;
    while (c) {
        struct jchunk *n = c->next;
        free(c);
        c = n;
    }
    tj_head = NULL;
    tj_on = false;
}

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

/* ---- digest, verify ---------------------------------------------------- */

static uint64_t mix_str(const struct trace *t, uint64_t h, uint32_t i)
{
    const char *s = trace_str(t, i);
    return hash_mix(h, s ? hash64(s, strlen(s), 1) : 0);
}

/* Content digest: every field but file names; chains by their content, so
 * the same trace stored with other bases gives the same digest. */
static uint64_t trace_digest(const struct trace *t)
{
    uint64_t *chain = xmalloc((t->n_calls ? t->n_calls : 1) * sizeof *chain);
    uint64_t *buf = NULL;
    uint32_t cap = 0;
    uint64_t h = hash_mix(0xd16e57, t->n_calls);
    h = hash_mix(h, t->n_sessions);
    h = hash_mix(h, (uint64_t)t->timestamped << 1 | t->global_scope);
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *s = &t->sessions[i];
        h = hash_mix(h, s->parent);
        h = hash_mix(h, s->n_calls);
        h = hash_mix(h, s->fork_after);
        h = hash_mix(h, (uint64_t)s->fork_t_ns);
        h = hash_mix(h, (uint64_t)s->fork_gap_ns);
        h = hash_mix(h, (uint64_t)s->duration_ns);
        h = hash_mix(h, (uint64_t)s->start_ns);
        h = hash_mix(h, s->join);
        h = hash_mix(h, s->scope);
        h = hash_mix(h, (uint64_t)s->block_size);
        h = mix_str(t, h, s->name);
        h = mix_str(t, h, s->kind);
        h = mix_str(t, h, s->status);
    }
    for (uint32_t i = 0; i < t->n_calls; i++) {
        const struct trace_call *c = &t->calls[i];
        h = hash_mix(h, (uint64_t)c->t_ns);
        h = hash_mix(h, (uint64_t)c->think_ns);
        h = hash_mix(h, (uint64_t)c->api_ns);
        h = hash_mix(h, (uint64_t)c->ttft_ns);
        h = hash_mix(h, (uint64_t)c->prompt_tokens);
        h = hash_mix(h, (uint64_t)c->output_tokens);
        h = hash_mix(h, c->type);
        h = mix_str(t, h, c->model);
        h = mix_str(t, h, c->stop);
        h = mix_str(t, h, c->input_types);
        h = mix_str(t, h, c->output_types);
        /* The chain's content, not its storage: the whole-chain hash,
         * extended from the base's when the base's whole chain is shared. */
        uint64_t ch;
        if (c->n_shared && t->calls[c->base].n_blocks == c->n_shared) {
            ch = chain[c->base];
        } else {
            ch = hash_mix(0xc4a1, 0);
            if (c->n_shared) {
                if (c->n_shared > cap) {
                    cap = c->n_shared;
                    buf = xrealloc(buf, (size_t)cap * sizeof *buf);
                }
                trace_call_blocks(t, &t->calls[c->base], buf, c->n_shared);
                for (uint32_t k = 0; k < c->n_shared; k++)
                    ch = hash_mix(ch, buf[k]);
            }
        }
        for (uint32_t k = 0; k < c->n_blocks - c->n_shared; k++)
            ch = hash_mix(ch, c->suffix[k]);
        chain[i] = ch;
        h = hash_mix(h, c->n_blocks);
        h = hash_mix(h, ch);
    }
    free(chain);
    free(buf);
    return h;
}

int trace_verify(const struct trace *t, char *err)
{
    uint32_t roots = 0, next = 0;
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *s = &t->sessions[i];
        if (s->first_call != next)
            return err_set(err, "session %u: calls start at %u, want %u", i, s->first_call, next);
        next += s->n_calls;
        if (next > t->n_calls)
            return err_set(err, "session %u: calls beyond the end", i);
        if (s->parent == TRACE_NONE) {
            roots++;
            if (s->root != i)
                return err_set(err, "session %u: root %u of a root", i, s->root);
        } else {
            if (s->parent >= i)
                return err_set(err, "session %u: parent %u not earlier", i, s->parent);
            const struct trace_session *p = &t->sessions[s->parent];
            if (s->root != p->root)
                return err_set(err, "session %u: root differs from its parent's", i);
            if (s->fork_after != TRACE_NONE && s->fork_after >= p->n_calls)
                return err_set(err, "session %u: fork_after %u beyond the parent's calls", i,
                               s->fork_after);
            if (s->scope != p->scope)
                return err_set(err, "session %u: scope differs from its parent's", i);
            if (s->fork_gap_ns < 0)
                return err_set(err, "session %u: negative fork gap", i);
        }
        if (s->block_size <= 0)
            return err_set(err, "session %u: block size %lld", i, (long long)s->block_size);
        if (s->scope >= t->n_scopes && t->n_sessions)
            return err_set(err, "session %u: scope %u of %u", i, s->scope, t->n_scopes);
        for (uint32_t c = s->first_child; c != TRACE_NONE; c = t->sessions[c].next_sibling)
            if (c >= t->n_sessions || t->sessions[c].parent != i)
                return err_set(err, "session %u: child %u does not name it", i, c);
    }
    if (next != t->n_calls)
        return err_set(err, "%u calls in sessions, %u in the trace", next, t->n_calls);
    if (roots != t->n_roots)
        return err_set(err, "%u roots counted, %u found", t->n_roots, roots);
    uint64_t stored = 0, total = 0;
    for (uint32_t i = 0; i < t->n_calls; i++) {
        const struct trace_call *c = &t->calls[i];
        if (c->session >= t->n_sessions)
            return err_set(err, "call %u: session %u", i, c->session);
        const struct trace_session *s = &t->sessions[c->session];
        if (i - s->first_call != c->index)
            return err_set(err, "call %u: index %u", i, c->index);
        if (c->n_shared > c->n_blocks)
            return err_set(err, "call %u: shared > blocks", i);
        if (c->n_shared) {
            if (c->base >= i)
                return err_set(err, "call %u: base %u not earlier", i, c->base);
            if (t->calls[c->base].n_blocks < c->n_shared)
                return err_set(err, "call %u: base too short", i);
        } else if (c->base != TRACE_NONE) {
            return err_set(err, "call %u: base without shared blocks", i);
        }
        if (c->n_blocks > c->n_shared && !c->suffix)
            return err_set(err, "call %u: missing suffix", i);
        if (c->prompt_tokens < 0 || c->output_tokens < 0)
            return err_set(err, "call %u: negative tokens", i);
        stored += c->n_blocks - c->n_shared;
        total += c->n_blocks;
    }
    if (stored != t->stored_block_ids || total != t->total_block_ids)
        return err_set(err, "block-id counts do not add up");
    return 0;
}

struct trace *tb_finish(struct tb *b)
{
    struct trace *t = b->t;
    tb_free_aux(b);
    b->t = NULL;
    if (t->n_scopes == 0 && t->n_sessions)
        t->n_scopes = 1;
    t->digest = trace_digest(t);
    char err[ERR_LEN];
    if (trace_verify(t, err)) {
        fprintf(stderr, "trace: internal error: %s\n", err);
        ASSERT(!"trace_verify failed after reading");
    }
    return t;
}

/* ---- reading ----------------------------------------------------------- */

void trace_destroy(struct trace *t)
{
    if (!t)
        return;
    free(t->sessions);
    free(t->calls);
    free(t->strings);
    arena_free(&t->arena);
    free(t);
}

/* The first line (at most max bytes) contains needle. */
static bool first_line_has(const char *data, size_t len, const char *needle, size_t max)
{
    size_t n = len < max ? len : max;
    const char *nl = memchr(data, '\n', n);
    if (nl)
        n = (size_t)(nl - data);
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (data[i] == needle[0] && !memcmp(data + i, needle, k))
            return true;
    return false;
}

static enum trace_format detect(const char *data, size_t len)
{
    size_t i = 0;
    if (len >= 3 && !memcmp(data, "\xef\xbb\xbf", 3))
        i = 3;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n'))
        i++;
    const char *p = data + i;
    size_t n = len - i;
    if (n && p[0] == '{') {
        if (first_line_has(p, n, "\"agentreplay-trace\"", 4096))
            return TRACE_FMT_NATIVE;
        if (first_line_has(p, n, "\"input_length\"", 1 << 16) ||
            (first_line_has(p, n, "\"hash_ids\"", 1 << 16) &&
             !first_line_has(p, n, "\"requests\"", 1 << 20)))
            return TRACE_FMT_MOONCAKE;
        return TRACE_FMT_AGENTX;
    }
    if (first_line_has(p, n, "ContextTokens", 4096))
        return TRACE_FMT_AZURE;
    if (first_line_has(p, n, "Request tokens", 4096))
        return TRACE_FMT_BURSTGPT;
    return TRACE_FMT_AUTO;
}

/* ---- line source ------------------------------------------------------ */

#define LINES_CHUNK (1u << 20)

void tb_lines_mem(struct tb_lines *L, const char *data, size_t len)
{
    memset(L, 0, sizeof *L);
    L->mem = data;
    L->mem_len = len;
    L->size_hint = len;
}

void tb_lines_file(struct tb_lines *L, FILE *f, size_t size_hint)
{
    memset(L, 0, sizeof *L);
    L->f = f;
    L->size_hint = size_hint;
}

void tb_lines_free(struct tb_lines *L)
{
    free(L->buf);
    L->buf = NULL;
}

/* Reads more of the file into the buffer, growing it when it is full. */
static void lines_fill(struct tb_lines *L)
{
    if (L->eof)
        return;
    if (L->start > 0) {
        memmove(L->buf, L->buf + L->start, L->end - L->start);
        L->end -= L->start;
        L->start = 0;
    }
    if (L->end == L->cap) {
        L->cap = L->cap ? 2 * L->cap : LINES_CHUNK;
        L->buf = xrealloc(L->buf, L->cap);
    }
    size_t got = fread(L->buf + L->end, 1, L->cap - L->end, L->f);
    L->end += got;
    if (got == 0) {
        L->eof = true;
        L->error = ferror(L->f) != 0;
    }
}

int tb_lines_next(struct tb_lines *L, const char **line, size_t *n)
{
    if (!L->f) {
        if (L->mem_pos >= L->mem_len)
            return 0;
        const char *p = L->mem + L->mem_pos;
        const char *nl = memchr(p, '\n', L->mem_len - L->mem_pos);
        size_t k = nl ? (size_t)(nl - p) : L->mem_len - L->mem_pos;
        L->mem_pos += k + 1;
        L->lineno++;
        *line = p;
        *n = k;
        return 1;
    }
    size_t scanned = 0; /* bytes of the current line already searched */
    for (;;) {
        const char *p = L->buf ? L->buf + L->start : NULL;
        size_t avail = L->end - L->start;
        const char *nl = avail > scanned ? memchr(p + scanned, '\n', avail - scanned) : NULL;
        if (nl || (L->eof && avail)) {
            size_t k = nl ? (size_t)(nl - p) : avail;
            L->start += nl ? k + 1 : k;
            L->lineno++;
            *line = p;
            *n = k;
            return 1;
        }
        if (L->eof)
            return L->error ? -1 : 0;
        scanned = avail;
        lines_fill(L);
    }
}

void tb_lines_peek(struct tb_lines *L, size_t want, const char **p, size_t *n)
{
    if (!L->f) {
        *p = L->mem + L->mem_pos;
        *n = L->mem_len - L->mem_pos;
        return;
    }
    while (!L->eof && L->end - L->start < want)
        lines_fill(L);
    *p = L->buf ? L->buf + L->start : "";
    *n = L->end - L->start;
}

/* ---- reading ----------------------------------------------------------- */

/* The whole rest of a line source as one buffer (AgentX documents). */
static char *lines_slurp(struct tb_lines *L, size_t *len, const char *name, char *err)
{
    if (!L->f) {
        *len = L->mem_len - L->mem_pos;
        char *d = xmalloc(*len + 1);
        memcpy(d, L->mem + L->mem_pos, *len);
        d[*len] = 0;
        return d;
    }
    while (!L->eof)
        lines_fill(L);
    if (L->error) {
        err_set(err, "%s: read error", name);
        return NULL;
    }
    *len = L->end - L->start;
    char *d = xmalloc(*len + 1);
    memcpy(d, L->buf + L->start, *len);
    d[*len] = 0;
    return d;
}

static int read_one(struct tb *b, enum trace_format f, struct tb_lines *L, const char *name,
                    bool skip_bad, char *err)
{
    if (f == TRACE_FMT_AUTO) {
        const char *p;
        size_t n;
        tb_lines_peek(L, 1u << 20, &p, &n);
        f = detect(p, n);
    }
    if (b->t->format == TRACE_FMT_AUTO)
        b->t->format = f;
    switch (f) {
    case TRACE_FMT_AGENTX: {
        size_t len;
        char *d = lines_slurp(L, &len, name, err);
        if (!d)
            return -1;
        int rc = trace_read_agentx_doc(b, d, len, name, skip_bad, err);
        free(d);
        return rc;
    }
    case TRACE_FMT_MOONCAKE:
        return trace_read_mooncake(b, L, name, skip_bad, err);
    case TRACE_FMT_AZURE:
        return trace_read_azure(b, L, name, skip_bad, err);
    case TRACE_FMT_BURSTGPT:
        return trace_read_burstgpt(b, L, name, skip_bad, err);
    case TRACE_FMT_NATIVE:
        return trace_read_native(b, L, name, skip_bad, err);
    default: {
        const char *p;
        size_t n;
        tb_lines_peek(L, 1, &p, &n);
        if (n == 0)
            return err_set(err, "%s:1:1: empty file", name);
        return err_set(err, "%s:1:1: unknown trace format (not AgentX JSON, Mooncake "
                            "JSONL, Azure CSV, BurstGPT CSV or native JSONL)", name);
    }
    }
}

struct trace *trace_read_mem(const char *data, size_t len, const char *name,
                             const struct trace_read_opts *opts, char *err)
{
    struct trace_read_opts o = {0};
    if (opts)
        o = *opts;
    struct tb b;
    tb_init(&b, TRACE_FMT_AUTO);
    struct tb_lines L;
    tb_lines_mem(&L, data, len);
    int rc = read_one(&b, o.format, &L, name ? name : "(memory)", o.skip_bad, err);
    tb_lines_free(&L);
    if (rc) {
        tb_abort(&b);
        return NULL;
    }
    return tb_finish(&b);
}

static int read_path(struct tb *b, enum trace_format f, const char *path, bool skip_bad,
                     char *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return err_set(err, "%s: %s", path, strerror(errno));
    struct stat st;
    size_t hint = fstat(fileno(fp), &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
    struct tb_lines L;
    tb_lines_file(&L, fp, hint);
    int rc = read_one(b, f, &L, path, skip_bad, err);
    tb_lines_free(&L);
    fclose(fp);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct trace *trace_read(const char *path, const struct trace_read_opts *opts, char *err)
{
    struct trace_read_opts o = {0};
    if (opts)
        o = *opts;
    struct stat st;
    if (stat(path, &st)) {
        err_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct tb b;
    tb_init(&b, TRACE_FMT_AUTO);
    if (!S_ISDIR(st.st_mode)) {
        if (read_path(&b, o.format, path, o.skip_bad, err)) {
            tb_abort(&b);
            return NULL;
        }
        return tb_finish(&b);
    }
    /* A folder: its *.json (one session tree each) and *.jsonl files, in
     * name order. */
    DIR *d = opendir(path);
    if (!d) {
        err_set(err, "%s: %s", path, strerror(errno));
        tb_abort(&b);
        return NULL;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t k = strlen(e->d_name);
        bool json = k > 5 && !strcmp(e->d_name + k - 5, ".json");
        bool jsonl = k > 6 && !strcmp(e->d_name + k - 6, ".jsonl");
        if (e->d_name[0] == '.' || !(json || jsonl))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = xrealloc(names, cap * sizeof *names);
        }
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    int rc = 0;
    if (n == 0)
        rc = err_set(err, "%s: no *.json or *.jsonl trace files in this folder", path);
    else
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !rc; i++) {
        /* *.json files are AgentX session trees; *.jsonl files (native,
         * Mooncake) are detected by content, unless a format is forced. */
        size_t k = strlen(names[i]);
        enum trace_format f = o.format != TRACE_FMT_AUTO ? o.format
                              : !strcmp(names[i] + k - 5, ".json") ? TRACE_FMT_AGENTX
                                                                   : TRACE_FMT_AUTO;
        size_t plen = strlen(path) + strlen(names[i]) + 2;
        char *full = xmalloc(plen);
        snprintf(full, plen, "%s/%s", path, names[i]);
        uint32_t before = b.t->n_sessions;
        rc = read_path(&b, f, full, o.skip_bad, err);
        /* Under skip_bad a file that is bad as a whole (its JSON does not
         * parse, no requests[]) is one skipped record; such errors come
         * before any of its sessions is made. */
        if (rc && o.skip_bad && b.t->n_sessions == before) {
            b.t->skipped_records++;
            rc = 0;
        }
        free(full);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc) {
        tb_abort(&b);
        return NULL;
    }
    return tb_finish(&b);
}

/* ---- access ------------------------------------------------------------ */

uint32_t trace_call_blocks(const struct trace *t, const struct trace_call *c,
                           uint64_t *out, uint32_t cap)
{
    uint32_t total = c->n_blocks;
    uint32_t hi = total; /* blocks [lo, hi) still to fill, from c */
    while (hi > 0) {
        uint32_t lo = c->n_shared;
        for (uint32_t i = lo; i < hi; i++)
            if (i < cap)
                out[i] = c->suffix[i - lo];
        if (lo == 0)
            break;
        if (lo < hi)
            hi = lo;
        c = &t->calls[c->base];
    }
    return total;
}

uint64_t trace_call_block(const struct trace *t, const struct trace_call *c, uint32_t i)
{
    ASSERT(i < c->n_blocks);
    while (i < c->n_shared)
        c = &t->calls[c->base];
    return c->suffix[i - c->n_shared];
}

void trace_call_abs_times(const struct trace *t, int64_t *out)
{
    /* Session offsets: parents precede their subagents. */
    int64_t *soff = xmalloc((t->n_sessions ? t->n_sessions : 1) * sizeof *soff);
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *s = &t->sessions[i];
        soff[i] = s->parent == TRACE_NONE ? 0 : soff[s->parent] + s->fork_t_ns;
    }
    for (uint32_t i = 0; i < t->n_calls; i++)
        out[i] = soff[t->calls[i].session] + t->calls[i].t_ns;
    free(soff);
}

static const char *const fmt_names[] = {
    [TRACE_FMT_AUTO] = "auto",         [TRACE_FMT_AGENTX] = "agentx",
    [TRACE_FMT_MOONCAKE] = "mooncake", [TRACE_FMT_AZURE] = "azure",
    [TRACE_FMT_BURSTGPT] = "burstgpt", [TRACE_FMT_NATIVE] = "native",
};

const char *trace_format_name(enum trace_format f)
{
    return (unsigned)f < ARRAY_LEN(fmt_names) ? fmt_names[f] : "unknown";
}

int trace_format_parse(const char *name, enum trace_format *f)
{
    for (size_t i = 0; i < ARRAY_LEN(fmt_names); i++)
        if (!strcmp(name, fmt_names[i])) {
            *f = (enum trace_format)i;
            return 0;
        }
    if (!strcmp(name, "weka")) {
        *f = TRACE_FMT_AGENTX;
        return 0;
    }
    return -1;
}
