/* trace_stats.c: statistics of a trace (trace stats): counts, token sums,
 * percentiles, recorded duration and the theoretical prefix-cache hit rate.
 *
 * Theoretical hit rate: an infinite cache. Calls are taken in time order
 * on their file's timeline (a root call at its t; a subagent call at its
 * parent's fork time plus its own t; ties in storage order), and a call's
 * hit is the longest prefix of its block chain already seen in an earlier
 * call of the same id scope, counted in tokens as
 * min(matched blocks x block size, prompt tokens). Prefixes are kept as
 * chained 64-bit hashes seeded by the scope. The work grows with the
 * stored (new) block ids, not with every call's whole chain: 867k
 * generated calls (1.05e9 chain blocks, 3.8e7 stored) went from 85 s to
 * under 1 s (and the peak memory from 2 GB to the trace itself).
 */
#include "traces/trace_internal.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"
#include "traces/base/hmap.h"
#include "traces/base/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* p50, p90, p99 (stats.h: linear interpolation between closest ranks),
 * mean, max; v is sorted in place. */
static void percentiles(double *v, size_t n, double out[5])
{
    memset(out, 0, 5 * sizeof *out);
    if (!n)
        return;
    stats_sort(v, n);
    const double q[3] = {0.50, 0.90, 0.99};
    for (int i = 0; i < 3; i++)
        out[i] = stats_percentile_sorted(v, n, q[i]);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    out[3] = sum / (double)n;
    out[4] = v[n - 1];
}

struct order {
    int64_t t;
    uint32_t scope, i;
};

static int cmp_order(const void *a, const void *b)
{
    const struct order *x = a, *y = b;
    if (x->scope != y->scope)
        return x->scope < y->scope ? -1 : 1;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

void trace_stats_compute(const struct trace *t, struct trace_stats *s)
{
    memset(s, 0, sizeof *s);
    s->sessions = t->n_roots;
    s->subagents = t->n_sessions - t->n_roots;
    s->calls = t->n_calls;
    size_t n = t->n_calls;
    size_t nv = n > t->n_sessions ? n : t->n_sessions; /* sessions may have no calls */
    double *v = xmalloc((nv ? nv : 1) * sizeof *v);
    int64_t *abs_t = xmalloc((n ? n : 1) * sizeof *abs_t);
    trace_call_abs_times(t, abs_t);

    for (size_t i = 0; i < n; i++) {
        s->prompt_tokens += (uint64_t)t->calls[i].prompt_tokens;
        s->output_tokens += (uint64_t)t->calls[i].output_tokens;
        v[i] = (double)t->calls[i].prompt_tokens;
    }
    percentiles(v, n, s->prompt_p);
    for (size_t i = 0; i < n; i++)
        v[i] = (double)t->calls[i].output_tokens;
    percentiles(v, n, s->output_p);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (t->calls[i].think_ns >= 0)
            v[k++] = (double)t->calls[i].think_ns / 1e9;
    percentiles(v, k, s->think_p);
    s->think_samples = k;

    /* Calls per root tree, and the recorded duration: the span of the
     * timestamped calls, or the longest tree's span (trees replay side by
     * side from their own start). */
    uint64_t *per_root = xcalloc(t->n_sessions ? t->n_sessions : 1, sizeof *per_root);
    int64_t *root_end = xcalloc(t->n_sessions ? t->n_sessions : 1, sizeof *root_end);
    int64_t lo = INT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        const struct trace_call *c = &t->calls[i];
        uint32_t r = t->sessions[c->session].root;
        per_root[r]++;
        int64_t end = abs_t[i] + (c->api_ns > 0 ? c->api_ns : 0);
        if (end > root_end[r])
            root_end[r] = end;
        if (abs_t[i] < lo)
            lo = abs_t[i];
        if (end > hi)
            hi = end;
    }
    k = 0;
    int64_t longest = 0;
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        if (t->sessions[i].parent != TRACE_NONE)
            continue;
        v[k++] = (double)per_root[i];
        if (root_end[i] > longest)
            longest = root_end[i];
    }
    percentiles(v, k, s->calls_per_session_p);
    s->duration_ns = t->timestamped ? (n ? hi - lo : 0) : longest;
    free(per_root);
    free(root_end);

    /* Theoretical hit rate. Scope by scope (hits never cross scopes), so
     * the prefix set holds one scope at a time. A call whose chain is its
     * base's whole chain plus a suffix, with the base already counted,
     * starts from the base's full-chain hash: all shorter prefixes are in
     * the set already, and only the suffix is hashed. */
    struct order *ord = xmalloc((n ? n : 1) * sizeof *ord);
    uint32_t maxb = 0;
    for (size_t i = 0; i < n; i++) {
        ord[i] = (struct order){abs_t[i], t->sessions[t->calls[i].session].scope, (uint32_t)i};
        if (t->calls[i].n_blocks > maxb)
            maxb = t->calls[i].n_blocks;
    }
    qsort(ord, n, sizeof *ord, cmp_order);
    uint64_t *blk = xmalloc((maxb ? maxb : 1) * sizeof *blk);
    uint64_t *hfull = xmalloc((n ? n : 1) * sizeof *hfull);
    uint8_t *done = xcalloc(n ? n : 1, 1);
    struct hmap seen; /* prefix hashes of the current scope (a set: values unused) */
    hmap_init(&seen);
    double hit_tok = 0, hit_full = 0, tok = 0, hit_blk = 0, blks = 0;
    for (size_t o = 0; o < n; o++) {
        uint32_t ci = ord[o].i;
        const struct trace_call *c = &t->calls[ci];
        const struct trace_session *ss = &t->sessions[c->session];
        if (o > 0 && ord[o].scope != ord[o - 1].scope)
            hmap_clear(&seen);
        uint64_t h = hash_mix(0x5c09e, ss->scope);
        uint32_t m = 0, from = 0;
        bool run = true;
        if (c->n_shared && done[c->base] && t->calls[c->base].n_blocks == c->n_shared) {
            h = hfull[c->base];
            m = from = c->n_shared;
            for (uint32_t b = from; b < c->n_blocks; b++)
                blk[b] = c->suffix[b - from];
        } else {
            trace_call_blocks(t, c, blk, maxb);
        }
        for (uint32_t b = from; b < c->n_blocks; b++) {
            h = hash_mix(h, blk[b]);
            bool added;
            hmap_put(&seen, h, &added);
            if (run && !added)
                m = b + 1;
            else
                run = false;
        }
        hfull[ci] = h;
        done[ci] = 1;
        int64_t bs = ss->block_size;
        int64_t ht = (int64_t)m * bs;
        if (ht > c->prompt_tokens)
            ht = c->prompt_tokens;
        int64_t full = c->prompt_tokens / bs;
        int64_t hf = (m < full ? m : full) * bs;
        hit_tok += (double)ht;
        hit_full += (double)hf;
        tok += (double)c->prompt_tokens;
        hit_blk += m;
        blks += c->n_blocks;
    }
    free(hfull);
    free(done);
    s->hit_rate_tokens = tok > 0 ? hit_tok / tok : 0;
    s->hit_rate_full_blocks = tok > 0 ? hit_full / tok : 0;
    s->hit_rate_blocks = blks > 0 ? hit_blk / blks : 0;
    hmap_free(&seen);
    free(blk);
    free(ord);
    free(abs_t);
    free(v);
}

static json_t *pjson(const double p[5])
{
    return json_pack("{s:f,s:f,s:f,s:f,s:f}", "p50", p[0], "p90", p[1], "p99", p[2], "mean",
                     p[3], "max", p[4]);
}

json_t *trace_stats_json(const struct trace *t, const struct trace_stats *s)
{
    char dig[24];
    snprintf(dig, sizeof dig, "%016llx", (unsigned long long)t->digest);
    json_t *o = json_object();
    json_object_set_new(o, "format", json_string(trace_format_name(t->format)));
    json_object_set_new(o, "digest", json_string(dig));
    json_object_set_new(o, "calls", json_integer((json_int_t)s->calls));
    json_object_set_new(o, "sessions", json_integer((json_int_t)s->sessions));
    json_object_set_new(o, "subagents", json_integer((json_int_t)s->subagents));
    json_object_set_new(o, "prompt_tokens", json_integer((json_int_t)s->prompt_tokens));
    json_object_set_new(o, "output_tokens", json_integer((json_int_t)s->output_tokens));
    json_object_set_new(o, "duration_s", json_real((double)s->duration_ns / 1e9));
    json_object_set_new(o, "timestamped", json_boolean(t->timestamped));
    json_object_set_new(o, "scopes", json_integer(t->n_scopes));
    json_object_set_new(o, "theoretical_hit_rate", json_real(s->hit_rate_tokens));
    json_object_set_new(o, "theoretical_hit_rate_blocks", json_real(s->hit_rate_blocks));
    json_object_set_new(o, "theoretical_hit_rate_full_blocks",
                        json_real(s->hit_rate_full_blocks));
    json_object_set_new(o, "prompt_tokens_p", pjson(s->prompt_p));
    json_object_set_new(o, "output_tokens_p", pjson(s->output_p));
    json_object_set_new(o, "think_time_s_p", s->think_samples ? pjson(s->think_p) : json_null());
    json_object_set_new(o, "calls_per_session_p", pjson(s->calls_per_session_p));
    json_object_set_new(o, "block_ids_total", json_integer((json_int_t)t->total_block_ids));
    json_object_set_new(o, "block_ids_stored", json_integer((json_int_t)t->stored_block_ids));
    json_object_set_new(o, "skipped_records", json_integer((json_int_t)t->skipped_records));
    return o;
}
