/* httpd.h: a small HTTP/1.1 server on the loop interface (engine/clock/loop.h,
 * real clock) with Node's http-parser, for `serve`.
 *
 * Keep-alive and pipelining (requests on one connection are answered in
 * order; parsing pauses while a response is in progress), fixed-length and
 * chunked (streaming) responses, and limits that keep a hostile or slow
 * client from hurting the others:
 *   - the request line and headers are capped (431), the body is capped
 *     (413), bad syntax gets 400; each of these closes the connection;
 *   - responses queue at most max_out_bytes per connection; a client that
 *     does not read is dropped when its queue would exceed that, so its
 *     buffer never grows without bound and nobody waits for it;
 *   - idle connections are closed after idle_timeout_ns; at most max_conns
 *     connections are open (extra ones are closed at accept).
 *
 * Ownership: the server owns connections. A handler gets a connection with
 * a complete request and must answer it, now or later, with
 * httpd_respond() or httpd_stream_begin/write/end(). If the connection goes
 * away first (client gone, dropped as slow, httpd_conn_abort), the
 * on_close callback set with httpd_conn_on_close() runs and the connection
 * pointer is invalid afterwards.
 *
 * For tests and fuzzing a connection can be fed from memory
 * (httpd_conn_mem_create/feed): the same parsing and handling path, its
 * output collected in memory.
 */
#ifndef HTTPD_H
#define HTTPD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/clock/loop.h"

struct httpd;
struct httpd_conn;

struct httpd_limits {
    size_t max_header_bytes;   /* request line + headers (default 16 KiB) */
    size_t max_body_bytes;     /* request body (default 64 MiB) */
    size_t max_out_bytes;      /* queued response bytes per connection
                                  (default 4 MiB) */
    int64_t idle_timeout_ns;   /* default 60 s */
    int max_conns;             /* default 16384 */
};

struct httpd_request {
    const char *method;        /* "GET", "POST", ... */
    const char *path;          /* the URL's path, query removed */
    const char *body;          /* NUL-terminated; body_len excludes the NUL */
    size_t body_len;
    const char *authorization; /* the Authorization header, or NULL */
    int keep_alive;            /* the connection stays open afterwards */
};

typedef void (*httpd_handler)(struct httpd_conn *c, const struct httpd_request *r,
                              void *arg);

struct httpd_stats {
    uint64_t conns_open, conns_total, requests, bad_requests, dropped_slow,
        refused_conns;
    uint64_t writes;           /* write/writev calls on sockets */
};

void httpd_limits_defaults(struct httpd_limits *lim);
/* A server on loop l (lim NULL: defaults). */
struct httpd *httpd_create(struct loop *l, const struct httpd_limits *lim,
                           httpd_handler h, void *arg);
/* Listens on host:port (port 0: any free port; see httpd_port). */
int httpd_listen(struct httpd *s, const char *host, int port, char *err);
int httpd_port(const struct httpd *s);
/* Closes every connection (their on_close callbacks run) and the socket. */
void httpd_destroy(struct httpd *s);
void httpd_get_stats(const struct httpd *s, struct httpd_stats *st);
/* Checks the connection list and every buffer against the limits;
 * 0 or -1 with err set (tests call it after each step). */
int httpd_verify(const struct httpd *s, char *err);

/* Answers with a whole body and Content-Length. */
void httpd_respond(struct httpd_conn *c, int status, const char *content_type,
                   const char *body, size_t len);
/* A chunked (streamed) response: begin once, write any number of times,
 * end once. Chunks written in one loop iteration leave in one write, at
 * the end of the iteration's due timers (or with the response's end). */
void httpd_stream_begin(struct httpd_conn *c, int status, const char *content_type);
void httpd_stream_write(struct httpd_conn *c, const char *data, size_t len);
void httpd_stream_end(struct httpd_conn *c);
/* The last chunk and the end in one write (one packet for a stream's
 * closing events instead of one each). */
void httpd_stream_end_with(struct httpd_conn *c, const char *data, size_t len);
/* Closes the connection at once (fault injection); on_close runs. */
void httpd_conn_abort(struct httpd_conn *c);
/* Called when the connection closes while its request is unanswered. */
void httpd_conn_on_close(struct httpd_conn *c, void (*fn)(void *ctx), void *ctx);
/* Bytes queued and not yet written. */
size_t httpd_conn_queued(const struct httpd_conn *c);

/* In-memory connections (tests, fuzzing). */
struct httpd_conn *httpd_conn_mem_create(struct httpd *s);
/* Parses and handles n bytes; returns 0, or -1 once the connection is
 * closed (bad request, limits, abort). */
int httpd_conn_mem_feed(struct httpd_conn *c, const char *data, size_t n);
/* The bytes written so far (and clears them). */
const char *httpd_conn_mem_output(struct httpd_conn *c, size_t *len);
void httpd_conn_mem_clear(struct httpd_conn *c);
int httpd_conn_mem_closed(const struct httpd_conn *c);
void httpd_conn_mem_destroy(struct httpd_conn *c);

#endif
