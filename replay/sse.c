/* sse.c: incremental server-sent-events parser (see sse.h). */
#include "replay/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/mem.h"

void sse_init(struct sse *p, size_t max_event_bytes, sse_event_cb cb, void *arg)
{
    memset(p, 0, sizeof *p);
    p->cb = cb;
    p->arg = arg;
    p->max_event_bytes = max_event_bytes ? max_event_bytes : (1u << 20);
}

void sse_free(struct sse *p)
{
    free(p->buf);
    p->buf = NULL;
    p->cap = 0;
}

void sse_reset(struct sse *p)
{
    p->data_len = p->line_len = 0;
    p->has_data = p->skip_lf = 0;
    p->event[0] = 0;
}

int sse_pending(const struct sse *p) { return p->has_data || p->line_len > 0; }

static int reserve(struct sse *p, size_t need)
{
    if (need > p->max_event_bytes + 2)
        return SSE_ERR_TOO_BIG;
    if (need <= p->cap)
        return 0;
    size_t cap = p->cap ? p->cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > p->max_event_bytes + 2)
        cap = p->max_event_bytes + 2;
    p->buf = xrealloc(p->buf, cap);
    p->cap = cap;
    return 0;
}

/* A complete line sits at buf[data_len .. data_len + line_len). */
static int end_line(struct sse *p)
{
    char *line = p->buf + p->data_len;
    size_t n = p->line_len;
    p->line_len = 0;
    if (n == 0) { /* blank line: dispatch */
        int rc = 0;
        if (p->has_data) {
            p->buf[p->data_len] = 0;
            p->events++;
            rc = p->cb(p->arg, p->event, p->buf, p->data_len);
        }
        p->data_len = 0;
        p->has_data = 0;
        p->event[0] = 0;
        return rc;
    }
    if (line[0] == ':')
        return 0; /* comment */
    char *colon = memchr(line, ':', n);
    size_t name_len = colon ? (size_t)(colon - line) : n;
    const char *val = colon ? colon + 1 : line + n;
    size_t val_len = n - (size_t)(val - line);
    if (val_len && *val == ' ') {
        val++;
        val_len--;
    }
    if (name_len == 4 && !memcmp(line, "data", 4)) {
        size_t at = p->data_len;
        if (p->has_data)
            p->buf[at++] = '\n'; /* safe: the line holds at least "data" */
        memmove(p->buf + at, val, val_len);
        p->data_len = at + val_len;
        p->has_data = 1;
    } else if (name_len == 5 && !memcmp(line, "event", 5)) {
        size_t k = val_len < sizeof p->event - 1 ? val_len : sizeof p->event - 1;
        memcpy(p->event, val, k);
        p->event[k] = 0;
    }
    return 0;
}

/* The first '\n' or '\r' in s[i..n), or n: eight bytes a step while none
 * is in them (a zero byte of w ^ pattern marks a match; the test below
 * has no false positives), then byte by byte. About 1.5 instructions a
 * byte instead of 5 on event data. */
static size_t line_end(const char *s, size_t i, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t a = w ^ (ones * '\n'), b = w ^ (ones * '\r');
        if (((a - ones) & ~a & highs) | ((b - ones) & ~b & highs))
            break;
        i += 8;
    }
    while (i < n && s[i] != '\n' && s[i] != '\r')
        i++;
    return i;
}

int sse_feed(struct sse *p, const char *data, size_t n)
{
    size_t i = 0;
    p->bytes += n;
    while (i < n) {
        if (p->skip_lf) {
            p->skip_lf = 0;
            if (data[i] == '\n') {
                i++;
                continue;
            }
        }
        /* The longest run without a line end. */
        size_t j = line_end(data, i, n);
        if (j > i) {
            size_t len = j - i;
            int rc = reserve(p, p->data_len + p->line_len + len + 2);
            if (rc)
                return rc;
            memcpy(p->buf + p->data_len + p->line_len, data + i, len);
            p->line_len += len;
        }
        if (j == n)
            break;
        if (data[j] == '\r')
            p->skip_lf = 1;
        i = j + 1;
        if (!p->buf) {
            int rc = reserve(p, 2);
            if (rc)
                return rc;
        }
        int rc = end_line(p);
        if (rc)
            return rc;
    }
    return 0;
}
