/* httpd_out.c: the HTTP server's output side (httpd.h): response heads,
 * whole and streamed bodies, HEAD answers, the per-connection queue and
 * its flushing.
 *
 * Output is written at once when the socket takes it; what it does not
 * take is queued (bounded by max_out_bytes) and flushed when writable.
 * Stream chunks (httpd_stream_begin/write) are the exception: they are
 * queued and the connection marked dirty, and a zero-delay timer writes
 * every dirty connection's queue in one write each, so chunks produced in
 * the same loop iteration (several tokens due at once, e.g. `serve --fake
 * --fake-tpot-ms 0` or a fast --time-scale) leave in one packet instead of
 * one write each (18 writev per 16-token call before, 1-2 after). Nothing
 * waits longer than the rest of the iteration: the timer is due at once,
 * a response's end (or any other non-stream write) on a dirty connection
 * writes the queue at once with it, and so does a queue past
 * STREAM_FLUSH_BYTES (a long burst, e.g. thousands of tokens due at once,
 * would otherwise reach max_out_bytes before the iteration ends and drop
 * a client that reads as fast as it can). A chunk produced alone is still
 * written alone, when it is produced. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/server/httpd_internal.h"
#include "traces/base/mem.h"

const char *httpd_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

/* Room for add more bytes; a whole answer may go past max_out_bytes up to
 * HTTPD_MAX_WHOLE. */
static int out_reserve(struct httpd_conn *c, size_t add, int whole)
{
    size_t limit = whole ? HTTPD_MAX_WHOLE : c->s->lim.max_out_bytes;
    if (c->out_len + add > limit) {
        c->s->st.dropped_slow++;
        httpd_conn_close(c);
        return -1;
    }
    if (c->out_head && c->out_head + c->out_len + add > c->out_cap) {
        memmove(c->out, c->out + c->out_head, c->out_len);
        c->out_head = 0;
    }
    if (c->out_head + c->out_len + add > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + add)
            cap *= 2;
        c->out = xrealloc(c->out, cap);
        c->out_cap = cap;
    }
    return 0;
}

static void out_append(struct httpd_conn *c, const struct iovec *iov, int n, size_t skip)
{
    for (int i = 0; i < n; i++) {
        size_t len = iov[i].iov_len;
        const char *b = iov[i].iov_base;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy(c->out + c->out_head + c->out_len, b + skip, len - skip);
        c->out_len += len - skip;
        skip = 0;
    }
}

void httpd_dirty_unlink(struct httpd_conn *c) { list_remove(&c->dnode); }

static void out_writev(struct httpd_conn *c, struct iovec *iov, int n, int whole);

/* Writes the pieces: straight to the socket when nothing is queued, the
 * rest (or all of it) to the queue. */
void httpd_out_writev(struct httpd_conn *c, struct iovec *iov, int n)
{
    out_writev(c, iov, n, 0);
}

static void out_writev(struct httpd_conn *c, struct iovec *iov, int n, int whole)
{
    if (c->closed)
        return;
    size_t total = 0, done = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (httpd_is_dirty(c)) {
        /* Chunks wait in the queue for the flush timer: this goes after
         * them, and all of it is written now, in one write. */
        httpd_dirty_unlink(c);
        if (out_reserve(c, total, whole))
            return;
        out_append(c, iov, n, 0);
        httpd_flush(c);
        if (!c->closed)
            httpd_conn_update_io(c);
        return;
    }
    if (!c->mem && c->out_len == 0) {
        ssize_t w = writev(c->fd, iov, n);
        c->s->st.writes++;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            httpd_conn_close(c);
            return;
        }
        done = w > 0 ? (size_t)w : 0;
        if (done == total)
            return;
    }
    if (out_reserve(c, total - done, whole))
        return;
    out_append(c, iov, n, done);
    httpd_conn_update_io(c);
}

void httpd_out_write(struct httpd_conn *c, const char *d, size_t n)
{
    struct iovec iov = {(void *)d, n};
    httpd_out_writev(c, &iov, 1);
}

void httpd_flush(struct httpd_conn *c)
{
    while (c->out_len && !c->closed) {
        ssize_t w = write(c->fd, c->out + c->out_head, c->out_len);
        c->s->st.writes++;
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            httpd_conn_close(c);
            return;
        }
        c->out_head += (size_t)w;
        c->out_len -= (size_t)w;
    }
    if (!c->out_len)
        c->out_head = 0;
    if (!c->closed && !c->out_len && c->close_after_flush)
        httpd_conn_close(c);
}

void httpd_flush_cb(struct loop *l, struct loop_timer *t)
{
    struct httpd *s = t->arg;
    while (!list_empty(&s->dirty)) {
        struct httpd_conn *c = LIST_ENTRY(list_first(&s->dirty), struct httpd_conn, dnode);
        httpd_dirty_unlink(c);
        httpd_flush(c);
        if (!c->closed)
            httpd_conn_update_io(c);
    }
}

/* Queues stream bytes for the flush timer (in-memory connections: as
 * httpd_out_writev). */
static void out_queue(struct httpd_conn *c, struct iovec *iov, int n)
{
    if (c->closed)
        return;
    if (c->mem) {
        httpd_out_writev(c, iov, n);
        return;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (c->out_len + total > STREAM_FLUSH_BYTES && c->out_len) {
        /* A long burst: write what is queued now rather than let it grow. */
        if (httpd_is_dirty(c))
            httpd_dirty_unlink(c);
        httpd_flush(c);
        if (c->closed)
            return;
        httpd_conn_update_io(c);
    }
    if (out_reserve(c, total, 0))
        return;
    out_append(c, iov, n, 0);
    if (httpd_is_dirty(c))
        return;
    if (c->io_on && (c->io.events & LOOP_WRITE))
        return; /* the socket is full: written when it is writable */
    struct httpd *s = c->s;
    list_push_front(&s->dirty, &c->dnode);
    if (!loop_timer_armed(&s->flush_timer))
        loop_at(s->loop, &s->flush_timer, loop_now(s->loop), httpd_flush_cb, s);
}

void httpd_respond_error_close(struct httpd_conn *c, int status)
{
    char buf[256];
    const char *msg = httpd_reason(status);
    char body[128];
    int bl = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"code\":%d}}", msg, status);
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n",
                     status, msg, bl);
    struct iovec iov[2] = {{buf, (size_t)n}, {body, (size_t)bl}};
    c->s->st.bad_requests++;
    c->close_after_flush = 1;
    out_writev(c, iov, 2, 1);
    if (!c->closed && !c->out_len && !c->mem)
        httpd_conn_close(c);
    if (c->mem)
        c->closed = 1;
}

/* The status line and headers into buf (cap bytes); returns the length. */
static size_t head(struct httpd_conn *c, int status, const char *ctype, const char *extra,
                   int chunked, size_t len, char *buf, size_t cap)
{
    char ct[160] = "";
    if (ctype)
        snprintf(ct, sizeof ct, "Content-Type: %s\r\n", ctype);
    int n;
    if (chunked)
        n = snprintf(buf, cap,
                     "HTTP/1.1 %d %s\r\n%sTransfer-Encoding: chunked\r\n"
                     "Cache-Control: no-cache\r\n%sConnection: %s\r\n\r\n",
                     status, httpd_reason(status), ct, extra ? extra : "",
                     c->keep_alive ? "keep-alive" : "close");
    else
        n = snprintf(buf, cap, "HTTP/1.1 %d %s\r\n%sContent-Length: %zu\r\n%sConnection: %s\r\n\r\n",
                     status, httpd_reason(status), ct, len, extra ? extra : "",
                     c->keep_alive ? "keep-alive" : "close");
    return n > 0 && (size_t)n < cap ? (size_t)n : cap - 1;
}

void httpd_respond_ex(struct httpd_conn *c, int status, const char *content_type,
                      const char *extra_headers, const char *body, size_t len)
{
    if (c->closed || !c->busy || c->streaming)
        return;
    char buf[1024];
    size_t n = head(c, status, content_type, extra_headers, 0, len, buf, sizeof buf);
    struct iovec iov[2] = {{buf, n}, {(void *)body, c->head ? 0 : len}};
    out_writev(c, iov, 2, 1);
    if (!c->closed)
        httpd_conn_finish(c);
}

void httpd_respond(struct httpd_conn *c, int status, const char *content_type,
                   const char *body, size_t len)
{
    httpd_respond_ex(c, status, content_type, NULL, body, len);
}

void httpd_stream_begin(struct httpd_conn *c, int status, const char *content_type)
{
    if (c->closed || !c->busy || c->streaming)
        return;
    char buf[512];
    size_t n = head(c, status, content_type, NULL, 1, 0, buf, sizeof buf);
    c->streaming = 1;
    struct iovec iov = {buf, n};
    out_queue(c, &iov, 1);
}

void httpd_stream_write(struct httpd_conn *c, const char *data, size_t len)
{
    if (c->closed || !c->streaming || !len || c->head)
        return;
    char hdr[24];
    int n = snprintf(hdr, sizeof hdr, "%zx\r\n", len);
    struct iovec iov[3] = {{hdr, (size_t)n}, {(void *)data, len}, {"\r\n", 2}};
    out_queue(c, iov, 3);
}

void httpd_stream_end_with(struct httpd_conn *c, const char *data, size_t len)
{
    if (c->closed || !c->streaming)
        return;
    if (!len || c->head) {
        httpd_stream_end(c);
        return;
    }
    char hdr[24];
    int n = snprintf(hdr, sizeof hdr, "%zx\r\n", len);
    struct iovec iov[3] = {{hdr, (size_t)n}, {(void *)data, len}, {"\r\n0\r\n\r\n", 7}};
    httpd_out_writev(c, iov, 3);
    if (!c->closed)
        httpd_conn_finish(c);
}

void httpd_stream_end(struct httpd_conn *c)
{
    if (c->closed || !c->streaming)
        return;
    if (c->head)
        httpd_out_writev(c, NULL, 0); /* writes what is queued (the head) */
    else
        httpd_out_write(c, "0\r\n\r\n", 5);
    if (!c->closed)
        httpd_conn_finish(c);
}

size_t httpd_conn_queued(const struct httpd_conn *c) { return c->out_len; }

bool httpd_conn_peer_closed(const struct httpd_conn *c) { return c->eof; }
