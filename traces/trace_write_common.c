/* trace_write_common.c: what the Weka and Mooncake writers share: the
 * re-blocking of chains into another block size and id space
 * (trace_write.h), exact decimal seconds, JSON strings, and output files
 * written whole or not at all (a temporary file renamed into place, every
 * write checked).
 *
 * Re-blocking keeps two exact tables (keys compared whole, so a hash
 * collision costs a probe, never a wrong id): prefix nodes, one per
 * distinct (parent node, block id) of the trace's chains (the roots of
 * each scope are nodes of their own), and out ids, one per distinct
 * (node, out block index, out block size) of the current id space. */
#include "traces/trace_write_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

#define NODE_NONE UINT32_MAX

/* An exact open-addressed table: (a, b, c) -> value. Its own table, not
 * base/hmap.h: hmap keys are 64 bits; these keys are 128. */
struct xtab {
    struct xent {
        uint64_t a, b;
        uint32_t c, val; /* val + 1; 0: empty */
    } *e;
    size_t mask, used;
};

static void xtab_init(struct xtab *x, size_t cap)
{
    size_t n = 1024;
    while (n < cap * 2)
        n *= 2;
    x->e = xcalloc(n, sizeof *x->e);
    x->mask = n - 1;
    x->used = 0;
}

static void xtab_clear(struct xtab *x)
{
    memset(x->e, 0, (x->mask + 1) * sizeof *x->e);
    x->used = 0;
}

static uint32_t *xtab_put(struct xtab *x, uint64_t a, uint64_t b, uint32_t c, bool *added);

static void xtab_grow(struct xtab *x)
{
    struct xtab y;
    xtab_init(&y, (x->mask + 1));
    for (size_t i = 0; i <= x->mask; i++)
        if (x->e[i].val) {
            bool added;
            *xtab_put(&y, x->e[i].a, x->e[i].b, x->e[i].c, &added) = x->e[i].val;
        }
    free(x->e);
    *x = y;
}

/* The value slot of (a, b, c) (val + 1 semantics: 0 = new). */
static uint32_t *xtab_put(struct xtab *x, uint64_t a, uint64_t b, uint32_t c, bool *added)
{
    if ((x->used + 1) * 2 > x->mask + 1)
        xtab_grow(x);
    size_t i = (size_t)hash_mix(hash_mix(a, b), c) & x->mask;
    for (;; i = (i + 1) & x->mask) {
        struct xent *e = &x->e[i];
        if (!e->val) {
            e->a = a, e->b = b, e->c = c;
            x->used++;
            *added = true;
            return &e->val;
        }
        if (e->a == a && e->b == b && e->c == c) {
            *added = false;
            return &e->val;
        }
    }
}

struct trace_reblock {
    const struct trace *t;
    int64_t out_bs;
    bool per_root;
    struct xtab nodes;    /* (parent node or scope marker, block id, 0) -> node + 1 */
    uint32_t n_nodes;
    struct xtab outs;     /* (node, out index, out size) -> out id + 1 */
    uint64_t next_out;    /* next dense id of the current space */
    uint64_t *chain;      /* scratch: a call's native chain */
    uint32_t *pnode;      /* scratch: the node after each native block */
    uint32_t cap;
};

struct trace_reblock *trace_reblock_create(const struct trace *t, int64_t out_bs, bool per_root,
                                           char *err)
{
    if (out_bs < 1)
        return err_set(err, "re-blocking: block size %lld", (long long)out_bs), NULL;
    struct trace_reblock *r = xcalloc(1, sizeof *r);
    r->t = t;
    r->out_bs = out_bs;
    r->per_root = per_root;
    xtab_init(&r->nodes, (size_t)(t->stored_block_ids + t->n_scopes + 16));
    xtab_init(&r->outs, 4096);
    return r;
}

void trace_reblock_root(struct trace_reblock *r)
{
    ASSERT(r->per_root);
    xtab_clear(&r->outs);
    r->next_out = 0;
}

int64_t trace_reblock_call(struct trace_reblock *r, uint32_t ci, bool full_only, uint32_t *out,
                           int64_t cap, char *err)
{
    const struct trace *t = r->t;
    const struct trace_call *c = &t->calls[ci];
    const struct trace_session *s = &t->sessions[c->session];
    int64_t bs = s->block_size > 0 ? s->block_size : 64, P = c->prompt_tokens;
    int64_t m = full_only ? P / r->out_bs : (P + r->out_bs - 1) / r->out_bs;
    if (m > cap)
        return err_set(err, "call %u: %lld blocks", ci, (long long)m);
    if (c->n_blocks > r->cap) {
        r->cap = c->n_blocks + 1024;
        r->chain = xrealloc(r->chain, r->cap * sizeof *r->chain);
        r->pnode = xrealloc(r->pnode, r->cap * sizeof *r->pnode);
    }
    uint32_t n = trace_call_blocks(t, c, r->chain, r->cap);
    /* The prefix node after each native block: its identity is the
     * scope and every block id up to it. */
    bool added;
    uint32_t *v = xtab_put(&r->nodes, UINT64_MAX, s->scope, 1, &added);
    if (added)
        *v = ++r->n_nodes;
    uint32_t node = *v - 1;
    for (uint32_t i = 0; i < n; i++) {
        v = xtab_put(&r->nodes, node, r->chain[i], 0, &added);
        if (added)
            *v = ++r->n_nodes;
        node = r->pnode[i] = *v - 1;
    }
    for (int64_t j = 0; j < m; j++) {
        int64_t end = (j + 1) * r->out_bs < P ? (j + 1) * r->out_bs : P;
        int64_t size = end - j * r->out_bs, e = (end - 1) / bs;
        uint64_t id;
        if (e < n) {
            v = xtab_put(&r->outs, r->pnode[e], (uint64_t)j, (uint32_t)size, &added);
            if (added)
                *v = (uint32_t)++r->next_out;
            id = *v - 1;
        } else {
            id = r->next_out++; /* past the chain: the call's own tokens */
        }
        if (id >= (UINT64_C(1) << 31) || r->next_out >= (UINT64_C(1) << 31))
            return err_set(err, "call %u: more than 2^31 distinct blocks in one id space", ci);
        out[j] = (uint32_t)id;
    }
    return m;
}

void trace_reblock_destroy(struct trace_reblock *r)
{
    if (!r)
        return;
    free(r->nodes.e);
    free(r->outs.e);
    free(r->chain);
    free(r->pnode);
    free(r);
}

/* ---- writing ---- */

void tw_seconds(FILE *f, int64_t ns)
{
    if (ns < 0) {
        fputs("null", f);
        return;
    }
    int64_t s = ns / 1000000000, frac = ns % 1000000000;
    if (!frac) {
        fprintf(f, "%" PRId64 ".0", s);
        return;
    }
    char d[16];
    snprintf(d, sizeof d, "%09" PRId64, frac);
    for (int k = 8; k > 0 && d[k] == '0'; k--)
        d[k] = 0;
    fprintf(f, "%" PRId64 ".%s", s, d);
}

void tw_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else if (*p >= 0x80 && !(*p >= 0xc2 && *p <= 0xf4))
            fputc('?', f); /* not UTF-8 (the readers accept any bytes) */
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void tw_str_list(FILE *f, const char *comma_joined)
{
    fputc('[', f);
    if (comma_joined && *comma_joined) {
        const char *p = comma_joined;
        for (int k = 0;; k++) {
            const char *e = strchr(p, ',');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            char *one = xmalloc(n + 1);
            memcpy(one, p, n);
            one[n] = 0;
            if (k)
                fputc(',', f);
            tw_str(f, one);
            free(one);
            if (!e)
                break;
            p = e + 1;
        }
    }
    fputc(']', f);
}

int tw_open(struct tw_file *w, const char *path, char *err)
{
    memset(w, 0, sizeof *w);
    w->path = path;
    if (!strcmp(path, "-")) {
        w->f = stdout;
        return 0;
    }
    if (snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof w->tmp)
        return err_set(err, "%s: path too long", path);
    w->f = fopen(w->tmp, "w");
    if (!w->f)
        return err_set(err, "%s: %s", w->tmp, strerror(errno));
    return 0;
}

int tw_close(struct tw_file *w, int failed, char *err)
{
    if (!w->f) /* tw_open failed and said why */
        return -1;
    if (w->f == stdout) {
        if (fflush(stdout) || ferror(stdout) || failed)
            return failed ? -1 : err_set(err, "%s: write failed", w->path);
        return 0;
    }
    int bad = ferror(w->f) != 0;
    bad |= fclose(w->f) != 0;
    if (bad || failed || rename(w->tmp, w->path)) {
        int e = errno;
        unlink(w->tmp);
        if (failed)
            return -1;
        return err_set(err, "%s: write failed (%s)", w->path, strerror(e));
    }
    return 0;
}

int64_t *tw_session_starts(const struct trace *t)
{
    int64_t *st = xmalloc((t->n_sessions ? t->n_sessions : 1) * sizeof *st);
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *s = &t->sessions[i];
        st[i] = s->parent == TRACE_NONE ? 0 : st[s->parent] + (s->fork_t_ns > 0 ? s->fork_t_ns : 0);
    }
    return st;
}
