/* trace.c: the trace model itself: its content digest, the verify
 * walker, chain access, absolute call times and destruction (trace.h).
 * The builder is trace_builder.c, reading trace_read.c and the readers
 * trace_<format>.c. */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"

#include <stdlib.h>
#include <string.h>

/* ---- digest, verify ---------------------------------------------------- */

static uint64_t mix_str(const struct trace *t, uint64_t h, uint32_t i)
{
    const char *s = trace_str(t, i);
    return hash_mix(h, s ? hash64(s, strlen(s), 1) : 0);
}

uint64_t trace_digest_compute(const struct trace *t)
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

/* ---- access ------------------------------------------------------------ */

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

uint32_t trace_call_blocks(const struct trace *t, const struct trace_call *c,
                           uint64_t *out, uint32_t cap)
{
    uint32_t total = c->n_blocks;
    uint32_t hi = total; /* blocks [lo, hi) still to fill, from c */
    while (hi > 0) {
        uint32_t lo = c->n_shared, end = hi < cap ? hi : cap;
        if (lo < end)
            memcpy(out + lo, c->suffix, (size_t)(end - lo) * sizeof *out);
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
        /* Saturating: deep nests of absurd offsets must not overflow. */
        if (s->parent == TRACE_NONE)
            soff[i] = 0;
        else if (__builtin_add_overflow(soff[s->parent], s->fork_t_ns, &soff[i]))
            soff[i] = INT64_MAX;
    }
    for (uint32_t i = 0; i < t->n_calls; i++)
        if (__builtin_add_overflow(soff[t->calls[i].session], t->calls[i].t_ns, &out[i]))
            out[i] = INT64_MAX;
    free(soff);
}
