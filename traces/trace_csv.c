/* trace_csv.c: readers of the CSV trace formats.
 *
 * - Azure LLM inference traces: TIMESTAMP ("2023-11-16 18:17:03.9799600",
 *   UTC wall clock), ContextTokens, GeneratedTokens. Each row is a session
 *   of one call; arrival times are offsets from the first row's.
 * - BurstGPT: Timestamp (s from the trace's start), Session ID, Elapsed
 *   time (s, the response's latency), Model, Request tokens, Response
 *   tokens, Total tokens, Log Type. Rows with the same Session ID form a
 *   session (calls in time order; think time derived as the gap from the
 *   previous call's end); without a Session ID column every row is a
 *   timestamped session of one call.
 * Columns are found by their header names, in any order. Neither format
 * carries prefix information: chains are empty.
 */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/limits.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CSV_MAX_FIELDS 32

struct csv_line {
    char *f[CSV_MAX_FIELDS];   /* fields, unquoted, NUL-terminated */
    size_t col[CSV_MAX_FIELDS];/* 1-based column of each field */
    int n;
};

/* Splits line (n bytes, copied into buf of n + 1) into fields. Handles
 * double-quoted fields with "" escapes. Returns 0 or -1 (bad quoting or too
 * many fields; *badcol set). */
static int csv_split(const char *line, size_t n, char *buf, struct csv_line *out, size_t *badcol)
{
    out->n = 0;
    size_t i = 0, o = 0;
    if (n && line[n - 1] == '\r')
        n--;
    for (;;) {
        if (out->n == CSV_MAX_FIELDS) {
            *badcol = i + 1;
            return -1;
        }
        out->f[out->n] = buf + o;
        out->col[out->n] = i + 1;
        out->n++;
        if (i < n && line[i] == '"') {
            i++;
            for (;;) {
                if (i >= n) {
                    *badcol = i + 1;
                    return -1; /* unterminated quote */
                }
                if (line[i] == '"') {
                    if (i + 1 < n && line[i + 1] == '"') {
                        buf[o++] = '"';
                        i += 2;
                        continue;
                    }
                    i++;
                    break;
                }
                buf[o++] = line[i++];
            }
            if (i < n && line[i] != ',') {
                *badcol = i + 1;
                return -1;
            }
        } else {
            while (i < n && line[i] != ',')
                buf[o++] = line[i++];
        }
        buf[o++] = 0;
        if (i >= n)
            return 0;
        i++; /* the comma */
    }
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
    size_t k = 0;
    while (s[k] == ' ' || s[k] == '\t')
        k++;
    if (k)
        memmove(s, s + k, n - k + 1);
}

static int find_col(const struct csv_line *h, const char *name)
{
    for (int i = 0; i < h->n; i++)
        if (!strcasecmp(h->f[i], name))
            return i;
    return -1;
}

static int parse_count(const char *s, int64_t max, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || errno)
        return -1;
    /* Accept "123.0" written by some tools, nothing else after the digits. */
    if (*end == '.') {
        end++;
        while (*end == '0')
            end++;
    }
    if (*end || x < 0 || x > max)
        return -1;
    *v = x;
    return 0;
}

static int parse_secs(const char *s, int64_t *ns)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(x) || x < 0 || x > TRACE_MAX_SECONDS)
        return -1;
    *ns = llround(x * 1e9);
    return 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD HH:MM:SS[.fraction]" (or 'T' separator) -> ns since epoch. */
static int parse_datetime(const char *s, int64_t *ns)
{
    int y, mo, d, h, mi, se, used = 0;
    if (sscanf(s, "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &se, &used) != 6)
        return -1;
    if (y < 1970 || y > 2200 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
        se > 60 || h < 0 || mi < 0 || se < 0)
        return -1;
    const char *p = s + used;
    int64_t frac = 0, scale = NS_PER_S;
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9'))
            return -1;
        while (*p >= '0' && *p <= '9') {
            if (scale > 1) {
                scale /= 10;
                frac += (*p - '0') * scale;
            }
            p++;
        }
    }
    if (*p == 'Z')
        p++;
    if (*p)
        return -1;
    int64_t days = days_from_civil(y, mo, d);
    *ns = ((days * 24 + h) * 60 + mi) * 60 * NS_PER_S + (int64_t)se * NS_PER_S + frac;
    return 0;
}

struct csv_iter {
    struct tb_lines *L;
    size_t lineno;
    char *buf;
    size_t cap;
    struct csv_line l;
};

/* Next non-blank line split into fields: 1, 0 at the end, -1 bad (err). */
static int csv_next(struct csv_iter *it, const char *name, char *err)
{
    for (;;) {
        const char *line;
        size_t n;
        int got = tb_lines_next(it->L, &line, &n);
        if (got < 0)
            return tb_lines_error(it->L, name, err);
        if (got == 0)
            return 0;
        it->lineno = it->L->lineno;
        size_t w = 0;
        while (w < n && (line[w] == ' ' || line[w] == '\t' || line[w] == '\r'))
            w++;
        if (w == n)
            continue;
        if (n + 1 > it->cap) {
            it->cap = n + 1;
            it->buf = xrealloc(it->buf, it->cap);
        }
        size_t bad; /* (a NUL byte never gets here: tb_lines_next refuses it) */
        if (csv_split(line, n, it->buf, &it->l, &bad))
            return err_set(err, "%s:%zu:%zu: bad CSV quoting or too many fields", name,
                           it->lineno, bad);
        for (int i = 0; i < it->l.n; i++)
            trim(it->l.f[i]);
        return 1;
    }
}

int trace_read_azure(struct tb *b, struct tb_lines *L, const char *name, bool skip_bad,
                     char *err)
{
    struct trace *t = b->t;
    if (t->n_calls && !t->timestamped)
        return err_set(err, "%s: cannot mix a timestamped trace with session traces", name);
    t->timestamped = true;
    t->global_scope = true;
    t->n_scopes = 1;
    struct csv_iter it = {.L = L};
    int rc = csv_next(&it, name, err);
    if (rc <= 0) {
        free(it.buf);
        return rc < 0 ? rc : err_set(err, "%s:1:1: empty file", name);
    }
    int cts = find_col(&it.l, "TIMESTAMP"), cin = find_col(&it.l, "ContextTokens"),
        cout = find_col(&it.l, "GeneratedTokens");
    if (cts < 0 || cin < 0 || cout < 0) {
        free(it.buf);
        return err_set(err, "%s:%zu:1: header must name TIMESTAMP, ContextTokens and "
                            "GeneratedTokens", name, it.lineno);
    }
    int ncols = it.l.n;
    uint32_t file = tb_str(b, name);
    int64_t t0 = -1;
    rc = 0;
    uint64_t rows = 0;
    for (;;) {
        int r = csv_next(&it, name, err);
        if (r == 0)
            break;
        struct trace_call c;
        tb_call_init(&c);
        if (r > 0) {
            struct csv_line *l = &it.l;
            int64_t ts;
            if (l->n != ncols)
                r = err_set(err, "%s:%zu:%zu: %d fields, the header has %d", name, it.lineno,
                            l->col[l->n - 1], l->n, ncols);
            else if (parse_datetime(l->f[cts], &ts))
                r = err_set(err, "%s:%zu:%zu: TIMESTAMP: expected YYYY-MM-DD HH:MM:SS.frac",
                            name, it.lineno, l->col[cts]);
            else if (parse_count(l->f[cin], TRACE_MAX_TOKENS, &c.prompt_tokens))
                r = err_set(err, "%s:%zu:%zu: ContextTokens: expected a token count (0 .. 1e8)",
                            name, it.lineno, l->col[cin]);
            else if (c.prompt_tokens < 1)
                r = err_set(err, "%s:%zu:%zu: ContextTokens: " TB_NO_PROMPT, name, it.lineno,
                            l->col[cin]);
            else if (parse_count(l->f[cout], TRACE_MAX_OUTPUT, &c.output_tokens))
                r = err_set(err, "%s:%zu:%zu: GeneratedTokens: expected a token count (0 .. 1e7)",
                            name, it.lineno, l->col[cout]);
            else {
                if (t0 < 0)
                    t0 = ts;
                if (ts < t0)
                    r = err_set(err, "%s:%zu:%zu: TIMESTAMP before the first row's", name,
                                it.lineno, l->col[cts]);
                else if (ts - t0 > (int64_t)(TRACE_MAX_SECONDS * 1e9))
                    r = err_set(err, "%s:%zu:%zu: TIMESTAMP absurdly far from the first row's",
                                name, it.lineno, l->col[cts]);
                else
                    c.t_ns = ts - t0;
            }
            if (r > 0) {
                uint32_t s = tb_session(b, TRACE_NONE);
                t->sessions[s].file = file;
                tb_call(b, s, &c, NULL, 0);
                rows++;
                continue;
            }
        }
        if (!skip_bad || it.L->why != TB_LINES_OK) {
            rc = -1;
            break;
        }
        t->skipped_records++;
    }
    free(it.buf);
    if (!rc && rows == 0 && !t->skipped_records)
        rc = err_set(err, "%s:%zu:1: no rows", name, it.lineno);
    return rc;
}

struct brow {
    int64_t ts, elapsed, in, out;
    uint32_t sid, model; /* interned; TRACE_NONE if none */
    uint32_t order;      /* first appearance of its session */
    uint32_t seq;        /* row number */
};

static int cmp_brow(const void *x, const void *y)
{
    const struct brow *a = x, *b = y;
    if (a->order != b->order)
        return a->order < b->order ? -1 : 1;
    if (a->ts != b->ts)
        return a->ts < b->ts ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

int trace_read_burstgpt(struct tb *b, struct tb_lines *L, const char *name, bool skip_bad,
                        char *err)
{
    struct trace *t = b->t;
    if (t->n_calls)
        return err_set(err, "%s: a BurstGPT trace is read on its own", name);
    struct csv_iter it = {.L = L};
    int rc = csv_next(&it, name, err);
    if (rc <= 0) {
        free(it.buf);
        return rc < 0 ? rc : err_set(err, "%s:1:1: empty file", name);
    }
    int cts = find_col(&it.l, "Timestamp"), csid = find_col(&it.l, "Session ID"),
        cel = find_col(&it.l, "Elapsed time"), cmod = find_col(&it.l, "Model"),
        cin = find_col(&it.l, "Request tokens"), cout = find_col(&it.l, "Response tokens"),
        ctot = find_col(&it.l, "Total tokens");
    if (cts < 0 || cin < 0 || cout < 0) {
        free(it.buf);
        return err_set(err, "%s:%zu:1: header must name Timestamp, Request tokens and "
                            "Response tokens", name, it.lineno);
    }
    int ncols = it.l.n;
    bool sessions = csid >= 0;
    t->timestamped = !sessions;
    t->global_scope = true;
    t->n_scopes = 1;
    struct brow *rows = NULL;
    size_t n = 0, cap = 0;
    /* Session id -> order of first appearance, through the string table. */
    uint32_t *first_seen = NULL;
    size_t cap_seen = 0;
    uint32_t n_sess = 0;
    rc = 0;
    for (;;) {
        int r = csv_next(&it, name, err);
        if (r == 0)
            break;
        struct brow w = {.elapsed = -1, .sid = TRACE_NONE, .model = TRACE_NONE};
        if (r > 0) {
            struct csv_line *l = &it.l;
            int64_t tot;
            if (l->n != ncols)
                r = err_set(err, "%s:%zu:%zu: %d fields, the header has %d", name, it.lineno,
                            l->col[l->n - 1], l->n, ncols);
            else if (parse_secs(l->f[cts], &w.ts))
                r = err_set(err, "%s:%zu:%zu: Timestamp: expected seconds >= 0", name,
                            it.lineno, l->col[cts]);
            else if (parse_count(l->f[cin], TRACE_MAX_TOKENS, &w.in))
                r = err_set(err, "%s:%zu:%zu: Request tokens: expected a token count (0 .. 1e8)",
                            name, it.lineno, l->col[cin]);
            else if (w.in < 1)
                r = err_set(err, "%s:%zu:%zu: Request tokens: " TB_NO_PROMPT, name, it.lineno,
                            l->col[cin]);
            else if (cmod >= 0 && strlen(l->f[cmod]) > LIMIT_NAME_BYTES)
                r = err_set(err, "%s:%zu:%zu: Model: %zu bytes, more than the %d of a name",
                            name, it.lineno, l->col[cmod], strlen(l->f[cmod]), LIMIT_NAME_BYTES);
            else if (sessions && strlen(l->f[csid]) > LIMIT_NAME_BYTES)
                r = err_set(err, "%s:%zu:%zu: Session ID: %zu bytes, more than the %d of a name",
                            name, it.lineno, l->col[csid], strlen(l->f[csid]), LIMIT_NAME_BYTES);
            else if (parse_count(l->f[cout], TRACE_MAX_OUTPUT, &w.out))
                r = err_set(err, "%s:%zu:%zu: Response tokens: expected a token count (0 .. 1e7)",
                            name, it.lineno, l->col[cout]);
            else if (cel >= 0 && *l->f[cel] && parse_secs(l->f[cel], &w.elapsed))
                r = err_set(err, "%s:%zu:%zu: Elapsed time: expected seconds >= 0", name,
                            it.lineno, l->col[cel]);
            else if (ctot >= 0 && *l->f[ctot] &&
                     (parse_count(l->f[ctot], 2 * TRACE_MAX_TOKENS, &tot) || tot != w.in + w.out))
                r = err_set(err, "%s:%zu:%zu: Total tokens: expected Request + Response tokens",
                            name, it.lineno, l->col[ctot]);
            if (r > 0) {
                if (cmod >= 0 && *l->f[cmod])
                    w.model = tb_str(b, l->f[cmod]);
                if (sessions && *l->f[csid]) {
                    w.sid = tb_str(b, l->f[csid]);
                    if (w.sid >= cap_seen) {
                        size_t nc = (w.sid + 1) * 2;
                        first_seen = xrealloc(first_seen, nc * sizeof *first_seen);
                        for (size_t k = cap_seen; k < nc; k++)
                            first_seen[k] = UINT32_MAX;
                        cap_seen = nc;
                    }
                    if (first_seen[w.sid] == UINT32_MAX)
                        first_seen[w.sid] = n_sess++;
                    w.order = first_seen[w.sid];
                } else {
                    w.order = n_sess++;
                }
                w.seq = (uint32_t)n;
                if (n == cap) {
                    cap = cap ? 2 * cap : 1024;
                    rows = xrealloc(rows, cap * sizeof *rows);
                }
                rows[n++] = w;
                continue;
            }
        }
        if (!skip_bad || it.L->why != TB_LINES_OK) {
            rc = -1;
            break;
        }
        t->skipped_records++;
    }
    free(it.buf);
    free(first_seen);
    if (!rc && n == 0 && !t->skipped_records)
        rc = err_set(err, "%s:%zu:1: no rows", name, it.lineno);
    if (rc) {
        free(rows);
        return rc;
    }
    if (n > 1)
        qsort(rows, n, sizeof *rows, cmp_brow);
    uint32_t file = tb_str(b, name);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && rows[j].order == rows[i].order)
            j++;
        uint32_t s = tb_session(b, TRACE_NONE);
        struct trace_session *ss = &t->sessions[s];
        ss->file = file;
        ss->name = rows[i].sid;
        if (sessions)
            ss->start_ns = rows[i].ts;
        int64_t prev_end = -1;
        for (size_t k = i; k < j; k++) {
            struct trace_call c;
            tb_call_init(&c);
            c.t_ns = sessions ? rows[k].ts - rows[i].ts : rows[k].ts;
            c.api_ns = rows[k].elapsed;
            c.prompt_tokens = rows[k].in;
            c.output_tokens = rows[k].out;
            c.model = rows[k].model;
            if (prev_end >= 0)
                c.think_ns = c.t_ns > prev_end ? c.t_ns - prev_end : 0;
            prev_end = c.t_ns + (c.api_ns > 0 ? c.api_ns : 0);
            tb_call(b, s, &c, NULL, 0);
        }
        i = j;
    }
    free(rows);
    return 0;
}
