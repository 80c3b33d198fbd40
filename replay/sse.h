/* sse.h: an incremental parser for server-sent events (the text/event-stream
 * format OpenAI-compatible servers stream completions in).
 *
 * Feed it bytes as they arrive, split or merged anyhow; it calls back once
 * per complete event (a blank line ends an event) with the event's data:
 * the "data:" lines of the event joined with '\n' (one leading space after
 * the colon removed, as the WHATWG specification says). Lines may end in
 * "\n", "\r\n" or "\r". Comment lines (":...") and other fields (event:,
 * id:, retry:) are accepted and ignored, except that "event:" is passed to
 * the callback. An event larger than the limit is an error (a malformed or
 * hostile stream cannot make the parser grow without bound).
 *
 * The parser holds one buffer that grows to the largest event seen (at most
 * max_event_bytes); nothing is allocated per event.
 */
#ifndef SSE_H
#define SSE_H

#include <stddef.h>
#include <stdint.h>

/* Called per event. data is NUL-terminated (data_len excludes the NUL);
 * event is the "event:" field or "" when none. Return 0 to go on, non-zero
 * to stop (sse_feed then returns that value). */
typedef int (*sse_event_cb)(void *arg, const char *event, const char *data,
                            size_t data_len);

enum { SSE_ERR_TOO_BIG = -2 };

struct sse {
    sse_event_cb cb;
    void *arg;
    size_t max_event_bytes;  /* limit on one event's buffered bytes */
    char *buf;               /* the event being assembled: data, then line */
    size_t cap;              /* bytes allocated for buf */
    size_t data_len;         /* bytes of joined data so far */
    size_t line_len;         /* bytes of the current (unfinished) line,
                                stored after the data */
    int has_data;            /* a data: field was seen in this event */
    int skip_lf;             /* the previous line ended in '\r' */
    char event[32];          /* "event:" field (truncated) */
    uint64_t events;         /* events delivered */
    uint64_t bytes;          /* bytes fed */
};

void sse_init(struct sse *p, size_t max_event_bytes, sse_event_cb cb, void *arg);
void sse_free(struct sse *p);
/* Resets to the start of a new stream, keeping the buffer. */
void sse_reset(struct sse *p);
/* Feeds n bytes. Returns 0, SSE_ERR_TOO_BIG when an event exceeds the
 * limit (the parser must then be reset), or the callback's non-zero
 * return. */
int sse_feed(struct sse *p, const char *data, size_t n);
/* True if the stream ended in the middle of an event (bytes after the last
 * blank line). */
int sse_pending(const struct sse *p);

#endif
