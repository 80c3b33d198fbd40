/* httpd.c: HTTP/1.1 server on the loop interface with http-parser (see
 * httpd.h): listening, accepting (and evicting quiet connections at the
 * limit), reading and parsing requests, deadlines, half-close, and the
 * connection's life; the output side is httpd_out.c.
 *
 * Input is appended to a per-connection buffer and parsed from there; when
 * a request is complete the parser pauses, the handler runs, and the bytes
 * after it (pipelined requests) wait until the response is finished. While
 * a response is in progress the connection is still read (so a client that
 * goes away is noticed) until 64 KiB of further input has queued.
 * Each connection has one deadline timer (arm_timer): header_timeout_ns
 * from a request's first byte until its headers are complete, then
 * idle_timeout_ns between reads of its body, none while the request is
 * answered, and idle_timeout_ns of quiet between requests.
 * Closed connections are freed from a zero-delay timer, never inside a
 * call that may still use them. */
#define _GNU_SOURCE
#include "engine/server/httpd_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

enum { FIELD_OTHER = 0, FIELD_AUTH, FIELD_CTYPE };

void httpd_limits_defaults(struct httpd_limits *lim)
{
    lim->max_header_bytes = 16 * 1024;
    lim->max_body_bytes = 64u * 1024 * 1024;
    lim->max_out_bytes = 4u * 1024 * 1024;
    lim->header_timeout_ns = 10 * NS_PER_S;
    lim->idle_timeout_ns = 60 * NS_PER_S;
    lim->max_conns = 16384;
    lim->max_requests_per_conn = 10000;
}

static void drain(struct httpd_conn *c);
static void arm_timer(struct httpd_conn *c);

/* ---- the quiet list (eviction candidates) ---- */

static void quiet_touch(struct httpd_conn *c)
{
    if (c->mem || c->closed || c->busy)
        return;
    list_remove(&c->qnode);
    list_push_back(&c->s->quiet, &c->qnode);
}

/* ---- parser callbacks ---- */

static int on_message_begin(http_parser *p)
{
    struct httpd_conn *c = p->data;
    c->url_len = 0;
    c->body_len = 0;
    c->auth_len = 0;
    c->has_auth = 0;
    c->auth_overlong = 0;
    c->media_len = 0;
    c->media_overlong = 0;
    c->field_len = 0;
    c->in_value = 0;
    c->field_kind = FIELD_OTHER;
    c->header_bytes = 0;
    c->expect_continue = 0;
    c->in_request = 1;
    c->headers_done = 0;
    c->req_start_ns = c->mem ? 0 : loop_now(c->s->loop);
    arm_timer(c);
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

static void keep_value(char *buf, size_t *len, int *overlong, size_t cap, const char *at, size_t n)
{
    if (*len + n > cap) {
        *overlong = 1;
        return;
    }
    memcpy(buf + *len, at, n);
    *len += n;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    struct httpd_conn *c = p->data;
    if (count_header(c, n))
        return -1;
    if (!c->in_value) {
        c->in_value = 1;
        c->field_kind = FIELD_OTHER;
        if (c->field_len == 13 && !memcmp(c->field, "authorization", 13)) {
            c->field_kind = FIELD_AUTH;
            c->auth_len = 0;
            c->auth_overlong = 0;
            c->has_auth = 1;
        } else if (c->field_len == 12 && !memcmp(c->field, "content-type", 12)) {
            c->field_kind = FIELD_CTYPE;
            c->media_len = 0;
            c->media_overlong = 0;
        }
        if (c->field_len == 6 && !memcmp(c->field, "expect", 6) && n >= 4 && !memcmp(at, "100-", 4))
            c->expect_continue = 1;
    }
    if (c->field_kind == FIELD_AUTH)
        keep_value(c->auth, &c->auth_len, &c->auth_overlong, HTTPD_AUTH_MAX, at, n);
    else if (c->field_kind == FIELD_CTYPE)
        keep_value(c->media, &c->media_len, &c->media_overlong, MEDIA_MAX, at, n);
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    struct httpd_conn *c = p->data;
    c->headers_done = 1;
    arm_timer(c);
    if (p->content_length != ULLONG_MAX && p->content_length > c->s->lim.max_body_bytes) {
        c->err_status = 413;
        return -1;
    }
    if (c->expect_continue) /* the client waits for this before the body */
        httpd_out_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
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

/* ---- deadlines ---- */

static void timer_cb(struct loop *l, struct loop_timer *t)
{
    struct httpd_conn *c = t->arg;
    if (c->busy || c->closed)
        return;
    if (c->in_request) {
        c->s->st.header_timeouts++;
        httpd_respond_error_close(c, 408);
        return;
    }
    c->s->st.idle_timeouts++;
    httpd_conn_close(c);
}

/* Sets the connection's one deadline from its state (see the top). */
static void arm_timer(struct httpd_conn *c)
{
    if (c->mem || c->closed)
        return;
    struct httpd *s = c->s;
    if (c->busy) {
        loop_cancel(s->loop, &c->timer);
        return;
    }
    int64_t at;
    if (c->in_request && !c->headers_done)
        at = c->req_start_ns + s->lim.header_timeout_ns;
    else
        at = c->last_read_ns + s->lim.idle_timeout_ns;
    if (!loop_timer_armed(&c->timer) || c->timer.at_ns != at)
        loop_at(s->loop, &c->timer, at, timer_cb, c);
}

/* ---- connection life ---- */

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

void httpd_conn_close(struct httpd_conn *c)
{
    if (c->closed)
        return;
    struct httpd *s = c->s;
    httpd_dirty_unlink(c);
    list_remove(&c->qnode);
    c->closed = 1;
    loop_cancel(s->loop, &c->timer);
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

static void dispatch(struct httpd_conn *c)
{
    struct httpd *s = c->s;
    c->busy = 1;
    c->streaming = 0;
    c->on_close = NULL;
    c->in_request = 0;
    c->n_requests++;
    list_remove(&c->qnode);
    arm_timer(c);
    s->st.requests++;
    if (c->n_requests >= s->lim.max_requests_per_conn)
        c->keep_alive = 0;
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
    /* The media type: up to ';', trimmed, lowercased. */
    char media[MEDIA_MAX + 1];
    size_t ml = 0;
    if (!c->media_overlong) {
        size_t i = 0;
        while (i < c->media_len && (c->media[i] == ' ' || c->media[i] == '\t'))
            i++;
        for (; i < c->media_len && c->media[i] != ';'; i++)
            media[ml++] = (char)(c->media[i] >= 'A' && c->media[i] <= 'Z' ? c->media[i] | 0x20
                                                                          : c->media[i]);
        while (ml && (media[ml - 1] == ' ' || media[ml - 1] == '\t'))
            ml--;
    }
    media[ml] = 0;
    c->head = c->parser.method == HTTP_HEAD;
    struct httpd_request r = {
        .method = http_method_str((enum http_method)c->parser.method),
        .path = c->url,
        .body = c->body,
        .body_len = c->body_len,
        .authorization = c->has_auth && !c->auth_overlong ? c->auth : NULL,
        .auth_overlong = c->has_auth && c->auth_overlong,
        .media_type = media,
        .head = c->head,
        .keep_alive = c->keep_alive,
        .start_ns = c->req_start_ns,
    };
    s->handler(c, &r, s->arg);
}

/* Parses queued input while no request is being answered. */
static void drain(struct httpd_conn *c)
{
    c->depth++;
    /* A whole answer queued past max_out_bytes holds the next request
     * back until the client has read it down (conn_io_cb resumes). */
    while (!c->closed && !c->busy && c->pend_len > 0 && c->out_len <= c->s->lim.max_out_bytes) {
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
            httpd_respond_error_close(c, c->err_status ? c->err_status : 400);
            break;
        }
        if (c->parser.upgrade) {
            httpd_respond_error_close(c, 400);
            break;
        }
    }
    c->depth--;
    if (c->closed)
        return;
    /* The client sent all it will: once nothing is left to answer, close. */
    if (c->eof && !c->busy && !c->mem) {
        c->close_after_flush = 1;
        if (!c->out_len) {
            httpd_conn_close(c);
            return;
        }
    }
    httpd_conn_update_io(c);
}

static void resume_cb(struct loop *l, struct loop_timer *t) { drain(t->arg); }

void httpd_conn_finish(struct httpd_conn *c)
{
    c->busy = 0;
    c->streaming = 0;
    c->head = 0;
    c->on_close = NULL;
    if (!c->keep_alive) {
        c->close_after_flush = 1;
        if (!c->out_len && !c->mem)
            httpd_conn_close(c);
        if (c->mem)
            c->closed = 1;
        return;
    }
    if (!c->mem) {
        c->last_read_ns = loop_now(c->s->loop); /* quiet from now on */
        list_push_back(&c->s->quiet, &c->qnode);
    }
    arm_timer(c);
    if (c->depth == 0 && c->pend_len && c->mem) {
        drain(c);
        return;
    }
    if (c->depth == 0 && (c->pend_len || c->eof) && !c->mem)
        loop_at(c->s->loop, &c->resume_timer, loop_now(c->s->loop), resume_cb, c);
    httpd_conn_update_io(c);
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

void httpd_conn_update_io(struct httpd_conn *c)
{
    if (c->mem || c->closed)
        return;
    int ev = 0;
    if (!c->close_after_flush && !c->eof && c->pend_len < PEND_READ_LIMIT)
        ev |= LOOP_READ;
    if (c->out_len && !httpd_is_dirty(c))
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
        httpd_flush(c);
        if (c->closed)
            return;
        if (!c->busy && c->pend_len && c->out_len <= c->s->lim.max_out_bytes)
            drain(c);
        if (c->closed)
            return;
        httpd_conn_update_io(c);
    }
    if ((revents & LOOP_READ) && !c->eof) {
        char buf[65536];
        ssize_t n = read(c->fd, buf, sizeof buf);
        if (n == 0) {
            /* End of the client's input: a half-close keeps the answers
             * owed (the request in progress and complete ones queued);
             * with nothing owed the connection closes. */
            c->eof = 1;
            if (c->busy || c->pend_len)
                c->s->st.half_closed++;
            if (!c->busy)
                drain(c);
            else
                httpd_conn_update_io(c);
            return;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                httpd_conn_close(c);
            return;
        }
        pend_append(c, buf, (size_t)n);
        c->last_read_ns = loop_now(l);
        quiet_touch(c);
        if (!c->busy)
            arm_timer(c);
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
    list_node_init(&c->qnode);
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
            /* Make room by closing the quietest connection that has no
             * request being answered; refuse only when there is none. */
            struct list_node *q = list_first(&s->quiet);
            if (!q) {
                s->st.refused_conns++;
                close(fd);
                continue;
            }
            s->st.evicted++;
            httpd_conn_close(LIST_ENTRY(q, struct httpd_conn, qnode));
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct httpd_conn *c = conn_new(s, fd);
        list_push_front(&s->conns, &c->node);
        list_push_back(&s->quiet, &c->qnode);
        s->st.conns_open++;
        s->st.conns_total++;
        c->last_read_ns = loop_now(l);
        arm_timer(c);
        httpd_conn_update_io(c);
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
    list_init(&s->quiet);
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

/* host without brackets into buf; 0, or -1 when it does not fit. */
static int unbracket(const char *host, char *buf, size_t cap)
{
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n >= cap)
        return -1;
    memcpy(buf, host, n);
    buf[n] = 0;
    return 0;
}

bool httpd_host_is_loopback(const char *host)
{
    char h[INET6_ADDRSTRLEN + 8];
    if (unbracket(host, h, sizeof h))
        return false;
    if (!strcmp(h, "localhost"))
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, h, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return false;
}

int httpd_listen(struct httpd *s, const char *host, int port, char *err)
{
    char h[INET6_ADDRSTRLEN + 8];
    if (unbracket(host, h, sizeof h))
        return err_set(err, "listen: '%.64s' is not an IP address", host);
    if (!strcmp(h, "localhost"))
        snprintf(h, sizeof h, "127.0.0.1");
    if (!strcmp(h, "*"))
        snprintf(h, sizeof h, "0.0.0.0");
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t al;
    int fam;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1) {
        fam = a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        al = sizeof *a4;
    } else if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        fam = a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        al = sizeof *a6;
    } else {
        return err_set(err, "listen: '%s' is not an IPv4 or IPv6 address", host);
    }
    int fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fam == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, al) || listen(fd, 4096)) {
        err_set(err, "listen on %s port %d: %s", host, port, strerror(errno));
        close(fd);
        return -1;
    }
    socklen_t gl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &gl);
    s->port = ntohs(fam == AF_INET ? a4->sin_port : a6->sin6_port);
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
    uint64_t n = 0, quiet = 0;
    for (const struct list_node *ln = s->conns.next; ln != &s->conns; ln = ln->next, n++) {
        const struct httpd_conn *c = LIST_ENTRY(ln, struct httpd_conn, node);
        if (ln->next->prev != ln || ln->prev->next != ln)
            return err_set(err, "connection %llu: broken link", (unsigned long long)n);
        if (c->closed || c->mem || c->fd < 0)
            return err_set(err, "connection %llu: closed or in-memory on the open list",
                           (unsigned long long)n);
        size_t out_max = c->streaming ? s->lim.max_out_bytes : HTTPD_MAX_WHOLE;
        if (c->out_len > out_max)
            return err_set(err, "connection %llu: %zu bytes queued over the limit %zu",
                           (unsigned long long)n, c->out_len, out_max);
        if (c->out_head + c->out_len > c->out_cap)
            return err_set(err, "connection %llu: output queue past its buffer", (unsigned long long)n);
        if (c->pend_len > c->pend_cap || c->pend_len > PEND_READ_LIMIT + 65536)
            return err_set(err, "connection %llu: %zu bytes of input queued", (unsigned long long)n,
                           c->pend_len);
        if (c->body_len > s->lim.max_body_bytes || c->header_bytes > s->lim.max_header_bytes)
            return err_set(err, "connection %llu: request over the limits", (unsigned long long)n);
        if (c->streaming && !c->busy)
            return err_set(err, "connection %llu: streaming without a request", (unsigned long long)n);
        if (c->busy == list_linked(&c->qnode) && !c->close_after_flush)
            return err_set(err, "connection %llu: %s", (unsigned long long)n,
                           c->busy ? "answering a request yet on the quiet list"
                                   : "quiet yet not on the quiet list");
        if (!c->busy && !c->close_after_flush && !loop_timer_armed(&c->timer))
            return err_set(err, "connection %llu: no request being answered and no deadline",
                           (unsigned long long)n);
        quiet += list_linked(&c->qnode);
    }
    if (n != s->st.conns_open)
        return err_set(err, "%llu connections listed, %llu counted open", (unsigned long long)n,
                       (unsigned long long)s->st.conns_open);
    uint64_t nq = 0;
    LIST_FOR_EACH(ln, &s->quiet) {
        const struct httpd_conn *c = LIST_ENTRY(ln, struct httpd_conn, qnode);
        if (c->closed || c->busy)
            return err_set(err, "quiet list: a closed or busy connection on it");
        nq++;
    }
    if (nq != quiet)
        return err_set(err, "quiet list: %llu entries, %llu open connections on it",
                       (unsigned long long)nq, (unsigned long long)quiet);
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
        httpd_conn_close(LIST_ENTRY(list_first(&s->conns), struct httpd_conn, node));
    if (s->lio_on)
        loop_io_stop(s->loop, &s->lio);
    if (s->lfd >= 0)
        close(s->lfd);
    loop_cancel(s->loop, &s->reap_timer);
    loop_cancel(s->loop, &s->flush_timer);
    reap_all(s);
    free(s);
}

void httpd_conn_abort(struct httpd_conn *c)
{
    if (c->mem) {
        c->closed = 1;
        return;
    }
    c->on_close = NULL; /* the caller knows */
    httpd_conn_close(c);
}

void httpd_conn_on_close(struct httpd_conn *c, void (*fn)(void *ctx), void *ctx)
{
    c->on_close = fn;
    c->on_close_ctx = ctx;
}

/* ---- in-memory connections ---- */

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
