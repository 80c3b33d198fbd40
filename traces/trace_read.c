/* trace_read.c: reading a trace: a file or a folder of files, the format
 * detected by content (or forced) and dispatched to its reader; the line
 * source the line-based readers share; Jansson's allocations while
 * parsing; format names (trace.h, trace_internal.h). */
#include "traces/trace_internal.h"
#include "traces/base/err.h"
#include "traces/base/file.h"
#include "traces/base/limits.h"
#include "traces/base/mem.h"

#include <dirent.h>
#include <errno.h>
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

/* ---- format detection ------------------------------------------------ */

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

/* Reads more of the file into the buffer, growing it when it is full, up
 * to max bytes and one chunk more (so that the caller sees a line or a
 * document longer than its limit without holding twice the limit). */
static void lines_fill(struct tb_lines *L, size_t max)
{
    if (L->eof)
        return;
    if (L->start > 0) {
        memmove(L->buf, L->buf + L->start, L->end - L->start);
        L->end -= L->start;
        L->start = 0;
    }
    if (L->end == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : LINES_CHUNK;
        if (cap > max + LINES_CHUNK)
            cap = max + LINES_CHUNK;
        if (cap <= L->cap)
            return; /* full at its limit: the caller refuses it */
        L->cap = cap;
        L->buf = xrealloc(L->buf, L->cap);
    }
    size_t got = fread(L->buf + L->end, 1, L->cap - L->end, L->f);
    L->end += got;
    L->bytes += got;
    if (got == 0) {
        L->eof = true;
        L->error = ferror(L->f) != 0;
    }
}

/* Fails the source: why, at line `line` (1-based), column col. */
static int lines_fail(struct tb_lines *L, int why, size_t line, size_t col)
{
    L->why = why;
    L->bad_line = line;
    L->bad_col = col;
    return -1;
}

int tb_lines_error(const struct tb_lines *L, const char *name, char *err)
{
    char lim[32];
    switch (L->why) {
    case TB_LINES_LONG:
        file_size_format(LIMIT_TRACE_LINE_BYTES, lim, sizeof lim);
        return err_set(err, "%s:%zu:1: a line longer than %s (the limit of a trace line)", name,
                       L->bad_line, lim);
    case TB_LINES_NUL:
        return err_set(err, "%s:%zu:%zu: a NUL byte: not a text trace (binary or sparse file?)",
                       name, L->bad_line, L->bad_col);
    default:
        return err_set(err, "%s: read error", name);
    }
}

int tb_lines_next(struct tb_lines *L, const char **line, size_t *n)
{
    if (L->poll && L->lineno % TB_LINES_POLL == 0 && L->lineno && !L->stopped &&
        L->poll(L->poll_arg, L->bytes))
        L->stopped = true;
    if (L->stopped)
        return 0;
    if (!L->f) {
        if (L->mem_pos >= L->mem_len)
            return 0;
        const char *p = L->mem + L->mem_pos;
        const char *nl = memchr(p, '\n', L->mem_len - L->mem_pos);
        size_t k = nl ? (size_t)(nl - p) : L->mem_len - L->mem_pos;
        const char *z = memchr(p, 0, k);
        if (z)
            return lines_fail(L, TB_LINES_NUL, L->lineno + 1, (size_t)(z - p) + 1);
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
        size_t upto = nl ? (size_t)(nl - p) : avail; /* the line's bytes seen so far */
        const char *z = upto > scanned ? memchr(p + scanned, 0, upto - scanned) : NULL;
        if (z)
            return lines_fail(L, TB_LINES_NUL, L->lineno + 1, (size_t)(z - p) + 1);
        if (upto > (size_t)LIMIT_TRACE_LINE_BYTES)
            return lines_fail(L, TB_LINES_LONG, L->lineno + 1, 1);
        if (nl || (L->eof && avail)) {
            size_t k = nl ? (size_t)(nl - p) : avail;
            L->start += nl ? k + 1 : k;
            L->lineno++;
            *line = p;
            *n = k;
            return 1;
        }
        if (L->eof)
            return L->error ? lines_fail(L, TB_LINES_READ, 0, 0) : 0;
        scanned = avail;
        lines_fill(L, LIMIT_TRACE_LINE_BYTES);
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
        lines_fill(L, want);
    *p = L->buf ? L->buf + L->start : "";
    *n = L->end - L->start;
}

/* ---- reading ----------------------------------------------------------- */

/* The whole rest of a line source as one buffer (AgentX documents), of at
 * most LIMIT_TRACE_DOC_BYTES and without NUL bytes. */
static char *lines_slurp(struct tb_lines *L, size_t *len, const char *name, char *err)
{
    char lim[32], size[32];
    file_size_format(LIMIT_TRACE_DOC_BYTES, lim, sizeof lim);
    if (L->size_hint > (size_t)LIMIT_TRACE_DOC_BYTES) {
        file_size_format((int64_t)L->size_hint, size, sizeof size);
        err_set(err, "%s: %s, more than the %s of one JSON trace document", name, size, lim);
        return NULL;
    }
    const char *src;
    if (!L->f) {
        *len = L->mem_len - L->mem_pos;
        src = L->mem + L->mem_pos;
    } else {
        size_t checked = 0; /* bytes searched for a NUL */
        while (!L->eof && L->end - L->start <= (size_t)LIMIT_TRACE_DOC_BYTES) {
            if (L->end - L->start > checked &&
                memchr(L->buf + L->start + checked, 0, L->end - L->start - checked))
                break; /* found below */
            checked = L->end - L->start;
            lines_fill(L, LIMIT_TRACE_DOC_BYTES);
        }
        if (L->error) {
            err_set(err, "%s: read error", name);
            return NULL;
        }
        *len = L->end - L->start;
        if (*len > (size_t)LIMIT_TRACE_DOC_BYTES && !memchr(L->buf + L->start, 0, *len)) {
            err_set(err, "%s: more than the %s of one JSON trace document", name, lim);
            return NULL;
        }
        src = L->buf ? L->buf + L->start : "";
    }
    const char *z = memchr(src, 0, *len);
    if (z) {
        size_t line, col;
        tb_line_col(src, (size_t)(z - src), &line, &col);
        err_set(err, "%s:%zu:%zu: a NUL byte: not a text trace (binary or sparse file?)", name,
                line, col);
        return NULL;
    }
    char *d = xmalloc(*len + 1);
    memcpy(d, src, *len);
    d[*len] = 0;
    return d;
}

static int read_any(struct tb *b, enum trace_format f, struct tb_lines *L, const char *name,
                    bool skip_bad, char *err);

/* A string field of at most max bytes; the message names it. */
static int check_str(const struct trace *t, uint32_t i, size_t max, const char *where,
                     const char *field, char *err)
{
    const char *v = trace_str(t, i);
    size_t n = v ? strlen(v) : 0;
    if (n > max)
        return err_set(err, "%s: %s: %zu bytes, more than the %zu it may hold", where, field, n,
                       max);
    return 0;
}

/* The limits every record obeys (limits.h), checked on the sessions and
 * calls one file added: names no longer than LIMIT_NAME_BYTES and a
 * prompt of at least one token. The line readers refuse such records
 * themselves (by line, or skip them under skip-bad); this catches the
 * others (AgentX documents), by session and call. */
static int check_added(const struct trace *t, uint32_t s0, uint32_t c0, const char *name,
                       char *err)
{
    char where[ERR_LEN];
    for (uint32_t s = s0; s < t->n_sessions; s++) {
        const struct trace_session *ss = &t->sessions[s];
        snprintf(where, sizeof where, "%s: session %u", name, s - s0);
        if (check_str(t, ss->name, LIMIT_NAME_BYTES, where, "name", err) ||
            check_str(t, ss->kind, LIMIT_NAME_BYTES, where, "kind", err) ||
            check_str(t, ss->status, LIMIT_NAME_BYTES, where, "status", err))
            return -1;
    }
    for (uint32_t i = c0; i < t->n_calls; i++) {
        const struct trace_call *c = &t->calls[i];
        const char *sn = trace_str(t, t->sessions[c->session].name);
        snprintf(where, sizeof where, "%s: session %u%s%.64s%s, call %u", name,
                 c->session - s0, sn ? " (" : "", sn ? sn : "", sn ? ")" : "", c->index);
        if (c->prompt_tokens < 1)
            return err_set(err, "%s: prompt: " TB_NO_PROMPT_WHY, where);
        if (check_str(t, c->model, LIMIT_NAME_BYTES, where, "model", err) ||
            check_str(t, c->stop, LIMIT_NAME_BYTES, where, "stop", err) ||
            check_str(t, c->input_types, LIMIT_TYPES_BYTES, where, "input_types", err) ||
            check_str(t, c->output_types, LIMIT_TYPES_BYTES, where, "output_types", err))
            return -1;
    }
    return 0;
}

static int read_one(struct tb *b, enum trace_format f, struct tb_lines *L, const char *name,
                    bool skip_bad, char *err)
{
    uint32_t s0 = b->t->n_sessions, c0 = b->t->n_calls;
    int rc = read_any(b, f, L, name, skip_bad, err);
    return rc ? rc : check_added(b->t, s0, c0, name, err);
}

static int read_any(struct tb *b, enum trace_format f, struct tb_lines *L, const char *name,
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

/* A read's progress: the caller's callback and what it is told. */
struct read_poll {
    const struct trace_read_opts *o;
    struct trace_read_progress p;
    bool stopped;
};

static int poll_lines(void *arg, uint64_t bytes)
{
    struct read_poll *rp = arg;
    rp->p.bytes = bytes;
    if (!rp->stopped && rp->o->progress(rp->o->progress_arg, &rp->p))
        rp->stopped = true;
    return rp->stopped;
}

static int read_path(struct tb *b, enum trace_format f, const char *path, bool skip_bad,
                     struct read_poll *rp, char *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return err_set(err, "%s: %s", path, strerror(errno));
    struct stat st;
    size_t hint = fstat(fileno(fp), &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
    struct tb_lines L;
    tb_lines_file(&L, fp, hint);
    if (rp->o->progress) {
        rp->p.path = path;
        L.poll = poll_lines;
        L.poll_arg = rp;
    }
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
    struct read_poll rp = {.o = &o, .p = {.path = path, .files_total = 1}};
    if (!S_ISDIR(st.st_mode)) {
        if (read_path(&b, o.format, path, o.skip_bad, &rp, err)) {
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
    rp.p.files_total = n;
    for (size_t i = 0; i < n && !rc && !rp.stopped; i++) {
        /* *.json files are AgentX session trees; *.jsonl files (native,
         * Mooncake) are detected by content, unless a format is forced. */
        size_t k = strlen(names[i]);
        enum trace_format f = o.format != TRACE_FMT_AUTO ? o.format
                              : !strcmp(names[i] + k - 5, ".json") ? TRACE_FMT_AGENTX
                                                                   : TRACE_FMT_AUTO;
        size_t plen = strlen(path) + strlen(names[i]) + 2;
        char *full = xmalloc(plen);
        snprintf(full, plen, "%s/%s", path, names[i]);
        rp.p = (struct trace_read_progress){.path = full, .files_done = i, .files_total = n};
        if (o.progress && o.progress(o.progress_arg, &rp.p)) {
            rp.stopped = true;
            free(full);
            break;
        }
        uint32_t before = b.t->n_sessions;
        rc = read_path(&b, f, full, o.skip_bad, &rp, err);
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

/* ---- format names ------------------------------------------------------ */

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
