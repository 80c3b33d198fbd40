/* trace_mooncake.c: reader of Mooncake JSONL traces: one request a line
 * with `timestamp` (ms from the trace's start), `input_length`,
 * `output_length` and `hash_ids` (one id per 512-token block, the last one
 * usually partial; one global id space). Each request becomes a session of
 * one call with an absolute arrival time.
 */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MOONCAKE_BLOCK 512

static int mc_line(struct tb *b, const char *line, size_t n, const char *name, size_t lineno,
                   uint64_t **ids, uint32_t *cap, char *err)
{
    json_error_t je;
    json_t *r = json_loadb(line, n, 0, &je);
    if (!r)
        return err_set(err, "%s:%zu:%d: %s", name, lineno, je.column, je.text);
    int rc = 0;
    struct trace_call c;
    tb_call_init(&c);
    if (!json_is_object(r)) {
        rc = err_set(err, "%s:%zu:1: expected an object", name, lineno);
        goto out;
    }
    json_t *ts = json_object_get(r, "timestamp");
    json_t *in = json_object_get(r, "input_length");
    json_t *out = json_object_get(r, "output_length");
    json_t *h = json_object_get(r, "hash_ids");
    const char *miss = !ts ? "timestamp" : !in ? "input_length" : !out ? "output_length"
                                                  : !h         ? "hash_ids" : NULL;
    if (miss) {
        rc = err_set(err, "%s:%zu:1: %s: missing", name, lineno, miss);
        goto out;
    }
    double ms = json_number_value(ts);
    if (!json_is_number(ts) || !isfinite(ms) || ms < 0 || ms > TRACE_MAX_SECONDS * 1e3) {
        rc = err_set(err, "%s:%zu:1: timestamp: expected milliseconds (a number >= 0)", name,
                     lineno);
        goto out;
    }
    c.t_ns = llround(ms * 1e6);
    if (!json_is_integer(in) || json_integer_value(in) < 0 ||
        json_integer_value(in) > TRACE_MAX_TOKENS) {
        rc = err_set(err, "%s:%zu:1: input_length: expected a token count (0 .. 1e8)", name,
                     lineno);
        goto out;
    }
    if (!json_is_integer(out) || json_integer_value(out) < 0 ||
        json_integer_value(out) > TRACE_MAX_OUTPUT) {
        rc = err_set(err, "%s:%zu:1: output_length: expected a token count (0 .. 1e7)", name,
                     lineno);
        goto out;
    }
    c.prompt_tokens = json_integer_value(in);
    c.output_tokens = json_integer_value(out);
    if (c.prompt_tokens < 1) {
        rc = err_set(err, "%s:%zu:1: input_length: " TB_NO_PROMPT, name, lineno);
        goto out;
    }
    if (!json_is_array(h)) {
        rc = err_set(err, "%s:%zu:1: hash_ids: expected an array", name, lineno);
        goto out;
    }
    size_t k = json_array_size(h);
    int64_t maxk = (c.prompt_tokens + MOONCAKE_BLOCK - 1) / MOONCAKE_BLOCK;
    if ((int64_t)k > maxk) {
        rc = err_set(err, "%s:%zu:1: hash_ids: %zu block ids for %lld tokens (at most %lld)",
                     name, lineno, k, (long long)c.prompt_tokens, (long long)maxk);
        goto out;
    }
    if (k > *cap) {
        *cap = (uint32_t)k + 256;
        *ids = xrealloc(*ids, *cap * sizeof **ids);
    }
    for (size_t i = 0; i < k; i++) {
        json_t *e = json_array_get(h, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            rc = err_set(err, "%s:%zu:1: hash_ids[%zu]: expected a non-negative integer", name,
                         lineno, i);
            goto out;
        }
        (*ids)[i] = (uint64_t)json_integer_value(e);
    }
    uint32_t s = tb_session(b, TRACE_NONE);
    b->t->sessions[s].block_size = MOONCAKE_BLOCK;
    b->t->sessions[s].scope = 0;
    tb_call(b, s, &c, *ids, (uint32_t)k);
out:
    tb_json_reset(); /* frees the line's document */
    return rc;
}

int trace_read_mooncake(struct tb *b, struct tb_lines *L, const char *name, bool skip_bad,
                        char *err)
{
    struct trace *t = b->t;
    if (t->n_calls && !t->timestamped)
        return err_set(err, "%s: cannot mix a timestamped trace with session traces", name);
    t->timestamped = true;
    t->global_scope = true;
    t->n_scopes = 1;
    b->use_pfx = true;
    /* About one id per 10 bytes in Mooncake files, about 60 % distinct. The
     * file's size is only a hint (a sparse file may claim 2 GB of nothing):
     * at most 4 M slots (32 MiB) up front; the table grows as ids come. */
    size_t hint = L->size_hint / 16;
    tb_pfx_reserve(b, hint < (1u << 22) ? hint : (1u << 22));
    uint32_t name_s = tb_str(b, name);
    uint64_t *ids = NULL;
    uint32_t cap = 0;
    size_t lineno = 0, records = 0;
    int rc = 0;
    tb_json_begin();
    for (;;) {
        const char *line;
        size_t n;
        int got = tb_lines_next(L, &line, &n);
        if (got < 0) {
            rc = tb_lines_error(L, name, err);
            break;
        }
        if (got == 0)
            break;
        lineno = L->lineno;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k == n)
            continue; /* blank line: not a record */
        uint32_t before = t->n_sessions;
        rc = mc_line(b, line, n, name, lineno, &ids, &cap, err);
        if (rc && skip_bad) {
            t->skipped_records++;
            rc = 0;
        } else if (!rc) {
            records++;
            t->sessions[before].file = name_s;
        }
        if (rc)
            break;
    }
    tb_json_end();
    free(ids);
    if (!rc && records == 0 && !t->skipped_records)
        rc = err_set(err, "%s:1:1: no records", name);
    return rc;
}
