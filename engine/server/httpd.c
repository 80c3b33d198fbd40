/* httpd.c: HTTP/1.1 server on the loop interface with http-parser (see
 * httpd.h).
 *
 * Input is appended to a per-connection buffer and parsed from there; when
 * a request is complete the parser pauses, the handler runs, and the bytes
 * after it (pipelined requests) wait until the response is finished. While
 * a response is in progress the connection is still read (so a client that
 * goes away is noticed) until 64 KiB of further input has queued.
 * Output is written at once when the socket takes it; what it does not
 * take is queued (bounded by max_out_bytes) and flushed when writable.
 * Stream chunks (httpd_stream_begin/write) are the exception: they are
 * queued and the connection marked dirty, and a zero-delay timer writes
 * every dirty connection's queue in one write each, so chunks produced in
 * the same loop iteration (several tokens due at once, e.g. `serve --fake
 * --fake-tpot-ms 0` or a fast --time-scale) leave in one packet instead of
 * one write each (18 writev per 16-token call before, 1-2 after). Nothing
 * waits longer than the rest of the iteration: the timer is due at once,
 * and a response's end (or any other non-stream write) on a dirty
 * connection writes the queue at once with it. A chunk produced alone is
 * still written alone, when it is produced.
 * Closed connections are freed from a zero-delay timer, never inside a
 * call that may still use them. */
#define _GNU_SOURCE
#include "engine/server/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/list.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

#define PEND_READ_LIMIT (64 * 1024) /* input queued behind a busy request */
#define AUTH_MAX 1024

struct httpd_conn {
    struct httpd *s;
    int fd;                  /* -1 for in-memory connections */
    int mem;
    struct loop_io io;
    int io_on;
    http_parser parser;
    struct loop_timer idle_timer;
    struct loop_timer resume_timer;
    /* The request being assembled. */
    char *url;
    size_t url_len;
    char *body;
    size_t body_len, body_cap;
    char auth[AUTH_MAX];
    size_t auth_len;
    int has_auth;
    char field[16];
    size_t field_len;
    int field_is_auth, in_value;
    int expect_continue;     /* "Expect: 100-continue" seen */
    size_t header_bytes;
    int err_status;          /* set by a parser callback: answer and close */
    /* Input not yet parsed. */
    char *pend;
    size_t pend_len, pend_cap;
    /* Output not yet written. */
    char *out;
    size_t out_head, out_len, out_cap;
    /* State. */
    int busy;                /* a request is being answered */
    int streaming;
    int keep_alive;
    int close_after_flush;
    int closed;
    int depth;               /* nesting of entry points (drain) */
    void (*on_close)(void *ctx);
    void *on_close_ctx;
    struct list_node node;   /* on the server's open list, then its graveyard */
    struct list_node dnode;  /* on the dirty list: stream chunks queued, to be
                                written by the flush timer */
};

struct httpd {
    struct loop *loop;
    struct httpd_limits lim;
    httpd_handler handler;
    void *arg;
    int lfd;
    int port;
    struct loop_io lio;
    int lio_on;
    struct list_node conns;         /* open connections, newest first */
    struct list_node graveyard;     /* closed, to be freed */
    struct loop_timer reap_timer;
    struct list_node dirty;         /* connections with chunks to write, newest first */
    struct loop_timer flush_timer;  /* writes them, due at once */
    http_parser_settings settings;
    struct httpd_stats st;
};

void httpd_limits_defaults(struct httpd_limits *lim)
{
    lim->max_header_bytes = 16 * 1024;
    lim->max_body_bytes = 64u * 1024 * 1024;
    lim->max_out_bytes = 4u * 1024 * 1024;
    lim->idle_timeout_ns = 60 * NS_PER_S;
    lim->max_conns = 16384;
}

static void conn_update_io(struct httpd_conn *c);
static void conn_close(struct httpd_conn *c);
static void out_write(struct httpd_conn *c, const char *d, size_t n);
static void drain(struct httpd_conn *c);

/* ---- parser callbacks ---- */

static int on_message_begin(http_parser *p)
{
    struct httpd_conn *c = p->data;
    c->url_len = 0;
    c->body_len = 0;
    c->auth_len = 0;
    c->has_auth = 0;
    c->field_len = 0;
    c->in_value = 0;
    c->field_is_auth = 0;
    c->header_bytes = 0;
    c->expect_continue = 0;
    loop_cancel(c->s->loop, &c->idle_timer);
    return 0;
}

static int count_header(struct httpd_conn *c, size_t n)
{
    c->header_bytes += n;
    if (c->header_bytes > c->s->lim.max_header_bytes) {
        c->err_status = 431;
        return -1;
    }
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    struct httpd_conn *c = p->data;
    if (count_header(c, n))
        return -1;
    if (!c->url)
        c->url = xmalloc(c->s->lim.max_header_bytes + 1);
    memcpy(c->url + c->url_len, at, n);
    c->url_len += n;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    struct httpd_conn *c = p->data;
    if (count_header(c, n))
        return -1;
    if (c->in_value) {
        c->in_value = 0;
        c->field_len = 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (c->field_len < sizeof c->field)
            c->field[c->field_len] = (char)(at[i] | 0x20);
        c->field_len++;
    }
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct httpd_conn *c = p->data;
    if (count_header(c, n))
        return -1;
    if (!c->in_value) {
        c->in_value = 1;
        c->field_is_auth = c->field_len == 13 && !memcmp(c->field, "authorization", 13);
        if (c->field_len == 6 && !memcmp(c->field, "expect", 6) && n >= 4 && !memcmp(at, "100-", 4))
            c->expect_continue = 1;
        if (c->field_is_auth) {
            c->auth_len = 0;
            c->has_auth = 1;
        }
    }
    if (c->field_is_auth) {
        size_t k = n < AUTH_MAX - 1 - c->auth_len ? n : AUTH_MAX - 1 - c->auth_len;
        memcpy(c->auth + c->auth_len, at, k);
        c->auth_len += k;
    }
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    struct httpd_conn *c = p->data;
    if (p->content_length != ULLONG_MAX && p->content_length > c->s->lim.max_body_bytes) {
        c->err_status = 413;
        return -1;
    }
    if (c->expect_continue) /* the client waits for this before the body */
        out_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    struct httpd_conn *c = p->data;
    if (c->body_len + n > c->s->lim.max_body_bytes) {
        c->err_status = 413;
        return -1;
    }
    if (c->body_len + n + 1 > c->body_cap) {
        size_t cap = c->body_cap ? c->body_cap : 1024;
        while (cap < c->body_len + n + 1)
            cap *= 2;
        c->body = xrealloc(c->body, cap);
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, at, n);
    c->body_len += n;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    struct httpd_conn *c = p->data;
    c->keep_alive = http_should_keep_alive(p);
    http_parser_pause(p, 1);
    return 0;
}

/* ---- output ---- */

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
    }
}

static int out_reserve(struct httpd_conn *c, size_t add)
{
    if (c->out_len + add > c->s->lim.max_out_bytes) {
        c->s->st.dropped_slow++;
        conn_close(c);
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

/* Writes the pieces: straight to the socket when nothing is queued, the
 * rest (or all of it) to the queue. */
static void flush(struct httpd_conn *c);
static void dirty_unlink(struct httpd_conn *c);
static inline bool is_dirty(const struct httpd_conn *c) { return list_linked(&c->dnode); }

static void out_writev(struct httpd_conn *c, struct iovec *iov, int n)
{
    if (c->closed)
        return;
    size_t total = 0, done = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (is_dirty(c)) {
        /* Chunks wait in the queue for the flush timer: this goes after
         * them, and all of it is written now, in one write. */
        dirty_unlink(c);
        if (out_reserve(c, total))
            return;
        for (int i = 0; i < n; i++) {
            memcpy(c->out + c->out_head + c->out_len, iov[i].iov_base, iov[i].iov_len);
            c->out_len += iov[i].iov_len;
        }
        flush(c);
        if (!c->closed)
            conn_update_io(c);
        return;
    }
    if (!c->mem && c->out_len == 0) {
        ssize_t w = writev(c->fd, iov, n);
        c->s->st.writes++;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            conn_close(c);
            return;
        }
        done = w > 0 ? (size_t)w : 0;
        if (done == total)
            return;
    }
    if (out_reserve(c, total - done))
        return;
    size_t skip = done;
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
    conn_update_io(c);
}

static void out_write(struct httpd_conn *c, const char *d, size_t n)
{
    struct iovec iov = {(void *)d, n};
    out_writev(c, &iov, 1);
}

static void dirty_unlink(struct httpd_conn *c) { list_remove(&c->dnode); }

static void flush_cb(struct loop *l, struct loop_timer *t)
{
    struct httpd *s = t->arg;
    while (!list_empty(&s->dirty)) {
        struct httpd_conn *c = LIST_ENTRY(list_first(&s->dirty), struct httpd_conn, dnode);
        dirty_unlink(c);
        flush(c);
        if (!c->closed)
            conn_update_io(c);
    }
}

/* Queues stream bytes for the flush timer (in-memory connections: as
 * out_writev). */
static void out_queue(struct httpd_conn *c, struct iovec *iov, int n)
{
    if (c->closed)
        return;
    if (c->mem) {
        out_writev(c, iov, n);
        return;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (out_reserve(c, total))
        return;
    for (int i = 0; i < n; i++) {
        memcpy(c->out + c->out_head + c->out_len, iov[i].iov_base, iov[i].iov_len);
        c->out_len += iov[i].iov_len;
    }
    if (is_dirty(c))
        return;
    if (c->io_on && (c->io.events & LOOP_WRITE))
        return; /* the socket is full: written when it is writable */
    struct httpd *s = c->s;
    list_push_front(&s->dirty, &c->dnode);
    if (!loop_timer_armed(&s->flush_timer))
        loop_at(s->loop, &s->flush_timer, loop_now(s->loop), flush_cb, s);
}

static void flush(struct httpd_conn *c)
{
    while (c->out_len && !c->closed) {
        ssize_t w = write(c->fd, c->out + c->out_head, c->out_len);
        c->s->st.writes++;
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == EINTR)
                continue;
            conn_close(c);
            return;
        }
        c->out_head += (size_t)w;
        c->out_len -= (size_t)w;
    }
    if (!c->out_len)
        c->out_head = 0;
    if (!c->closed && !c->out_len && c->close_after_flush)
        conn_close(c);
}

/* ---- connection life ---- */

static void idle_cb(struct loop *l, struct loop_timer *t)
{
    struct httpd_conn *c = t->arg;
    if (!c->busy)
        conn_close(c);
}

static void arm_idle(struct httpd_conn *c)
{
    if (!c->mem && !c->closed)
        loop_at(c->s->loop, &c->idle_timer, loop_now(c->s->loop) + c->s->lim.idle_timeout_ns,
                idle_cb, c);
}

static void conn_free(struct httpd_conn *c)
{
    free(c->url);
    free(c->body);
    free(c->pend);
    free(c->out);
    free(c);
}

static void reap_all(struct httpd *s)
{
    while (!list_empty(&s->graveyard)) {
        struct httpd_conn *c = LIST_ENTRY(list_first(&s->graveyard), struct httpd_conn, node);
        list_remove(&c->node);
        conn_free(c);
    }
}

static void reap_cb(struct loop *l, struct loop_timer *t) { reap_all(t->arg); }

static void conn_close(struct httpd_conn *c)
{
    if (c->closed)
        return;
    struct httpd *s = c->s;
    dirty_unlink(c);
    c->closed = 1;
    loop_cancel(s->loop, &c->idle_timer);
    loop_cancel(s->loop, &c->resume_timer);
    if (!c->mem) {
        if (c->io_on)
            loop_io_stop(s->loop, &c->io);
        c->io_on = 0;
        close(c->fd);
        c->fd = -1;
        /* Unlink and queue for freeing. */
        list_remove(&c->node);
        list_push_front(&s->graveyard, &c->node);
        if (!loop_timer_armed(&s->reap_timer))
            loop_at(s->loop, &s->reap_timer, loop_now(s->loop), reap_cb, s);
        s->st.conns_open--;
    }
    if (c->busy && c->on_close) {
        void (*fn)(void *) = c->on_close;
        c->on_close = NULL;
        fn(c->on_close_ctx);
    }
}

static void respond_error_close(struct httpd_conn *c, int status)
{
    char buf[256];
    const char *msg = reason(status);
    char body[128];
    int bl = snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"code\":%d}}", msg, status);
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n",
                     status, msg, bl);
    struct iovec iov[2] = {{buf, (size_t)n}, {body, (size_t)bl}};
    c->s->st.bad_requests++;
    c->close_after_flush = 1;
    out_writev(c, iov, 2);
    if (!c->closed && !c->out_len && !c->mem)
        conn_close(c);
    if (c->mem)
        c->closed = 1;
}

static void dispatch(struct httpd_conn *c)
{
    struct httpd *s = c->s;
    c->busy = 1;
    c->streaming = 0;
    c->on_close = NULL;
    s->st.requests++;
    if (!c->url)
        c->url = xmalloc(s->lim.max_header_bytes + 1);
    c->url[c->url_len] = 0;
    char *q = strchr(c->url, '?');
    if (q)
        *q = 0;
    if (!c->body) {
        c->body = xmalloc(64);
        c->body_cap = 64;
    }
    c->body[c->body_len] = 0;
    c->auth[c->auth_len] = 0;
    struct httpd_request r = {
        .method = http_method_str((enum http_method)c->parser.method),
        .path = c->url,
        .body = c->body,
        .body_len = c->body_len,
        .authorization = c->has_auth ? c->auth : NULL,
        .keep_alive = c->keep_alive,
    };
    s->handler(c, &r, s->arg);
}

/* Parses queued input while no request is being answered. */
static void drain(struct httpd_conn *c)
{
    c->depth++;
    while (!c->closed && !c->busy && c->pend_len > 0) {
        size_t n = http_parser_execute(&c->parser, &c->s->settings, c->pend, c->pend_len);
        if (n > c->pend_len)
            n = c->pend_len;
        memmove(c->pend, c->pend + n, c->pend_len - n);
        c->pend_len -= n;
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            dispatch(c);
            continue;
        }
        if (e != HPE_OK) {
            respond_error_close(c, c->err_status ? c->err_status : 400);
            break;
        }
        if (c->parser.upgrade) {
            respond_error_close(c, 400);
            break;
        }
    }
    c->depth--;
    if (!c->closed)
        conn_update_io(c);
}

static void resume_cb(struct loop *l, struct loop_timer *t) { drain(t->arg); }

static void finish(struct httpd_conn *c)
{
    c->busy = 0;
    c->streaming = 0;
    c->on_close = NULL;
    if (!c->keep_alive) {
        c->close_after_flush = 1;
        if (!c->out_len && !c->mem)
            conn_close(c);
        if (c->mem)
            c->closed = 1;
        return;
    }
    arm_idle(c);
    if (c->depth == 0 && c->pend_len && c->mem) {
        drain(c);
        return;
    }
    if (c->depth == 0 && c->pend_len && !c->mem)
        loop_at(c->s->loop, &c->resume_timer, loop_now(c->s->loop), resume_cb, c);
    conn_update_io(c);
}

static void pend_append(struct httpd_conn *c, const char *d, size_t n)
{
    if (!n)
        return;
    if (c->pend_len + n > c->pend_cap) {
        size_t cap = c->pend_cap ? c->pend_cap : 4096;
        while (cap < c->pend_len + n)
            cap *= 2;
        c->pend = xrealloc(c->pend, cap);
        c->pend_cap = cap;
    }
    memcpy(c->pend + c->pend_len, d, n);
    c->pend_len += n;
}

static void conn_update_io(struct httpd_conn *c)
{
    if (c->mem || c->closed)
        return;
    int ev = 0;
    if (!c->close_after_flush && c->pend_len < PEND_READ_LIMIT)
        ev |= LOOP_READ;
    if (c->out_len && !is_dirty(c))
        ev |= LOOP_WRITE;
    if (c->io_on && ev == c->io.events)
        return;
    if (!ev) {
        if (c->io_on)
            loop_io_stop(c->s->loop, &c->io);
        c->io_on = 0;
        return;
    }
    c->io.events = ev;
    loop_io_start(c->s->loop, &c->io);
    c->io_on = 1;
}

static void conn_io_cb(struct loop *l, struct loop_io *io, int revents)
{
    struct httpd_conn *c = io->arg;
    if (revents & LOOP_WRITE) {
        flush(c);
        if (c->closed)
            return;
        conn_update_io(c);
    }
    if (revents & LOOP_READ) {
        char buf[65536];
        ssize_t n = read(c->fd, buf, sizeof buf);
        if (n == 0) {
            conn_close(c);
            return;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                conn_close(c);
            return;
        }
        pend_append(c, buf, (size_t)n);
        if (!c->busy)
            arm_idle(c);
        drain(c);
    }
}

static struct httpd_conn *conn_new(struct httpd *s, int fd)
{
    struct httpd_conn *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->fd = fd;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    c->io.fd = fd;
    c->io.cb = conn_io_cb;
    c->io.arg = c;
    list_node_init(&c->node);
    list_node_init(&c->dnode);
    return c;
}

static void accept_cb(struct loop *l, struct loop_io *io, int revents)
{
    struct httpd *s = io->arg;
    for (int k = 0; k < 256; k++) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if ((int)s->st.conns_open >= s->lim.max_conns) {
            s->st.refused_conns++;
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct httpd_conn *c = conn_new(s, fd);
        list_push_front(&s->conns, &c->node);
        s->st.conns_open++;
        s->st.conns_total++;
        arm_idle(c);
        conn_update_io(c);
    }
}

/* ---- public ---- */

struct httpd *httpd_create(struct loop *l, const struct httpd_limits *lim,
                           httpd_handler h, void *arg)
{
    struct httpd *s = xcalloc(1, sizeof *s);
    s->loop = l;
    if (lim)
        s->lim = *lim;
    else
        httpd_limits_defaults(&s->lim);
    s->handler = h;
    s->arg = arg;
    s->lfd = -1;
    list_init(&s->conns);
    list_init(&s->graveyard);
    list_init(&s->dirty);
    http_parser_settings_init(&s->settings);
    s->settings.on_message_begin = on_message_begin;
    s->settings.on_url = on_url;
    s->settings.on_header_field = on_header_field;
    s->settings.on_header_value = on_header_value;
    s->settings.on_headers_complete = on_headers_complete;
    s->settings.on_body = on_body;
    s->settings.on_message_complete = on_message_complete;
    return s;
}

int httpd_listen(struct httpd *s, const char *host, int port, char *err)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!strcmp(host, "localhost"))
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return err_set(err, "listen: '%s' is not an IPv4 address", host);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4096)) {
        err_set(err, "listen on %s:%d: %s", host, port, strerror(errno));
        close(fd);
        return -1;
    }
    socklen_t al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    s->lfd = fd;
    s->lio.fd = fd;
    s->lio.events = LOOP_READ;
    s->lio.cb = accept_cb;
    s->lio.arg = s;
    if (loop_io_start(s->loop, &s->lio)) {
        close(fd);
        s->lfd = -1;
        return err_set(err, "listen: the loop has no I/O (virtual clock)");
    }
    s->lio_on = 1;
    return 0;
}

int httpd_port(const struct httpd *s) { return s->port; }

void httpd_get_stats(const struct httpd *s, struct httpd_stats *st) { *st = s->st; }

int httpd_verify(const struct httpd *s, char *err)
{
    uint64_t n = 0;
    for (const struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next, n++) {
        const struct httpd_conn *c = LIST_ENTRY(ln, struct httpd_conn, node);
        if (ln->next->prev != ln || ln->prev->next != ln)
            return err_set(err, "connection %llu: broken link", (unsigned long long)n);
        if (c->closed || c->mem || c->fd < 0)
            return err_set(err, "connection %llu: closed or in-memory on the open list",
                           (unsigned long long)n);
        if (c->out_len > s->lim.max_out_bytes)
            return err_set(err, "connection %llu: %zu bytes queued over the limit %zu",
                           (unsigned long long)n, c->out_len, s->lim.max_out_bytes);
        if (c->out_head + c->out_len > c->out_cap)
            return err_set(err, "connection %llu: output queue past its buffer", (unsigned long long)n);
        if (c->pend_len > c->pend_cap || c->pend_len > PEND_READ_LIMIT + 65536)
            return err_set(err, "connection %llu: %zu bytes of input queued", (unsigned long long)n,
                           c->pend_len);
        if (c->body_len > s->lim.max_body_bytes || c->header_bytes > s->lim.max_header_bytes)
            return err_set(err, "connection %llu: request over the limits", (unsigned long long)n);
        if (c->streaming && !c->busy)
            return err_set(err, "connection %llu: streaming without a request", (unsigned long long)n);
    }
    if (n != s->st.conns_open)
        return err_set(err, "%llu connections listed, %llu counted open", (unsigned long long)n,
                       (unsigned long long)s->st.conns_open);
    LIST_FOR_EACH(ln, &s->graveyard)
        if (!LIST_ENTRY(ln, struct httpd_conn, node)->closed)
            return err_set(err, "an open connection among the closed ones");
    LIST_FOR_EACH(ln, &s->dirty) {
        const struct httpd_conn *c = LIST_ENTRY(ln, struct httpd_conn, dnode);
        if (ln->next->prev != ln || ln->prev->next != ln || c->closed || c->mem)
            return err_set(err, "dirty list: broken link, or a closed connection on it");
        if (!c->out_len)
            return err_set(err, "dirty list: a connection with nothing queued");
    }
    if (!list_empty(&s->dirty) && !loop_timer_armed(&s->flush_timer))
        return err_set(err, "dirty connections and no flush timer");
    return 0;
}

void httpd_destroy(struct httpd *s)
{
    if (!s)
        return;
    while (!list_empty(&s->conns))
        conn_close(LIST_ENTRY(list_first(&s->conns), struct httpd_conn, node));
    if (s->lio_on)
        loop_io_stop(s->loop, &s->lio);
    if (s->lfd >= 0)
        close(s->lfd);
    loop_cancel(s->loop, &s->reap_timer);
    loop_cancel(s->loop, &s->flush_timer);
    reap_all(s);
    free(s);
}

static void head(struct httpd_conn *c, int status, const char *ctype, int chunked,
                 size_t len, char *buf, size_t cap, int *n)
{
    if (chunked)
        *n = snprintf(buf, cap,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
                      "Cache-Control: no-cache\r\nConnection: %s\r\n\r\n",
                      status, reason(status), ctype, c->keep_alive ? "keep-alive" : "close");
    else
        *n = snprintf(buf, cap,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: %s\r\n\r\n",
                      status, reason(status), ctype, len, c->keep_alive ? "keep-alive" : "close");
}

void httpd_respond(struct httpd_conn *c, int status, const char *content_type,
                   const char *body, size_t len)
{
    if (c->closed || !c->busy || c->streaming)
        return;
    char buf[512];
    int n;
    head(c, status, content_type, 0, len, buf, sizeof buf, &n);
    struct iovec iov[2] = {{buf, (size_t)n}, {(void *)body, len}};
    out_writev(c, iov, 2);
    if (!c->closed)
        finish(c);
}

void httpd_stream_begin(struct httpd_conn *c, int status, const char *content_type)
{
    if (c->closed || !c->busy || c->streaming)
        return;
    char buf[512];
    int n;
    head(c, status, content_type, 1, 0, buf, sizeof buf, &n);
    c->streaming = 1;
    struct iovec iov = {buf, (size_t)n};
    out_queue(c, &iov, 1);
}

void httpd_stream_write(struct httpd_conn *c, const char *data, size_t len)
{
    if (c->closed || !c->streaming || !len)
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
    if (!len) {
        httpd_stream_end(c);
        return;
    }
    char hdr[24];
    int n = snprintf(hdr, sizeof hdr, "%zx\r\n", len);
    struct iovec iov[3] = {{hdr, (size_t)n}, {(void *)data, len}, {"\r\n0\r\n\r\n", 7}};
    out_writev(c, iov, 3);
    if (!c->closed)
        finish(c);
}

void httpd_stream_end(struct httpd_conn *c)
{
    if (c->closed || !c->streaming)
        return;
    out_write(c, "0\r\n\r\n", 5);
    if (!c->closed)
        finish(c);
}

void httpd_conn_abort(struct httpd_conn *c)
{
    if (c->mem) {
        c->closed = 1;
        return;
    }
    c->on_close = NULL; /* the caller knows */
    conn_close(c);
}

void httpd_conn_on_close(struct httpd_conn *c, void (*fn)(void *ctx), void *ctx)
{
    c->on_close = fn;
    c->on_close_ctx = ctx;
}

size_t httpd_conn_queued(const struct httpd_conn *c) { return c->out_len; }

struct httpd_conn *httpd_conn_mem_create(struct httpd *s)
{
    struct httpd_conn *c = conn_new(s, -1);
    c->mem = 1;
    return c;
}

int httpd_conn_mem_feed(struct httpd_conn *c, const char *data, size_t n)
{
    if (c->closed)
        return -1;
    pend_append(c, data, n);
    drain(c);
    return c->closed ? -1 : 0;
}

const char *httpd_conn_mem_output(struct httpd_conn *c, size_t *len)
{
    *len = c->out_len;
    return c->out ? c->out + c->out_head : "";
}

void httpd_conn_mem_clear(struct httpd_conn *c) { c->out_head = c->out_len = 0; }

int httpd_conn_mem_closed(const struct httpd_conn *c) { return c->closed; }

void httpd_conn_mem_destroy(struct httpd_conn *c)
{
    if (c->busy && c->on_close) {
        void (*fn)(void *) = c->on_close;
        c->on_close = NULL;
        fn(c->on_close_ctx);
    }
    conn_free(c);
}
