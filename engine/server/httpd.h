/* httpd.h: a small HTTP/1.1 server on the loop interface (engine/clock/loop.h,
 * real clock) with Node's http-parser, for `serve`.
 *
 * Keep-alive and pipelining (requests on one connection are answered in
 * order; parsing pauses while a response is in progress), fixed-length and
 * chunked (streaming) responses, HEAD (the GET answer's head, never a
 * body), IPv4 and IPv6, and limits that keep a hostile or slow client from
 * hurting the others (engine/server/openai.h has the table of every limit):
 *   - the request line and headers are capped (431), the body is capped
 *     (413), bad syntax gets 400; each of these closes the connection;
 *   - a request's headers must arrive within header_timeout_ns of its
 *     first byte, and a body may not pause longer than idle_timeout_ns
 *     (408 and close); a connection idle between requests closes after
 *     idle_timeout_ns;
 *   - at most max_conns connections are open; when a new one arrives at
 *     the limit, the connection without a request in progress that has
 *     been quiet the longest is closed to make room (so idle sockets, or
 *     sockets that sent a few bytes, can never lock new clients out); only
 *     when every connection has a request in progress is the new one
 *     refused;
 *   - a connection serves at most max_requests_per_conn requests (the
 *     last answer says "Connection: close");
 *   - responses queue at most max_out_bytes per connection; a client that
 *     does not read is dropped when its queue would exceed that, so its
 *     buffer never grows without bound and nobody waits for it;
 *   - a client that half-closes (shuts down its sending side after its
 *     request) still gets its answers; the connection closes once they
 *     are written. A client that closed completely is noticed when a
 *     write to it fails (at once for a stream, which writes as it goes).
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/clock/loop.h"

struct httpd;
struct httpd_conn;

/* The Authorization header is kept up to this many bytes; a longer one is
 * flagged (auth_overlong), never cut. */
#define HTTPD_AUTH_MAX 4096
/* A whole (not streamed) answer may queue up to this many bytes whatever
 * max_out_bytes says (the handler bounds what it answers); the next
 * pipelined request is read only once the queue is back under
 * max_out_bytes. */
#define HTTPD_MAX_WHOLE (256u << 20)

struct httpd_limits {
    size_t max_header_bytes;   /* request line + headers (default 16 KiB) */
    size_t max_body_bytes;     /* request body (default 64 MiB) */
    size_t max_out_bytes;      /* queued stream bytes per connection
                                  (default 4 MiB) */
    int64_t header_timeout_ns; /* first byte of a request to the end of
                                  its headers (default 10 s) */
    int64_t idle_timeout_ns;   /* quiet time between requests, or inside a
                                  body (default 60 s) */
    int max_conns;             /* default 16384 */
    int64_t max_requests_per_conn; /* default 10000 */
};

struct httpd_request {
    const char *method;        /* "GET", "POST", "HEAD", ... */
    const char *path;          /* the URL's path, query removed */
    const char *body;          /* NUL-terminated; body_len excludes the NUL */
    size_t body_len;
    const char *authorization; /* the Authorization header, or NULL */
    bool auth_overlong;        /* it was longer than HTTPD_AUTH_MAX (then
                                  authorization is NULL) */
    const char *media_type;    /* Content-Type up to ';', lowercased and
                                  trimmed; "" when absent or over 127 bytes */
    bool head;                 /* a HEAD request: the answer's body is
                                  dropped by the server */
    int keep_alive;            /* the connection stays open afterwards */
    int64_t start_ns;          /* when its first byte was parsed (the
                                  server's loop; 0 in memory) */
};

typedef void (*httpd_handler)(struct httpd_conn *c, const struct httpd_request *r,
                              void *arg);

struct httpd_stats {
    uint64_t conns_open, conns_total, requests, bad_requests, dropped_slow,
        refused_conns;
    uint64_t evicted;          /* quiet connections closed to admit a new one */
    uint64_t header_timeouts;  /* 408: headers or body too slow */
    uint64_t idle_timeouts;    /* closed after idle_timeout_ns between requests */
    uint64_t half_closed;      /* clients that shut down their sending side
                                  with a request in progress or queued */
    uint64_t writes;           /* write/writev calls on sockets */
};

void httpd_limits_defaults(struct httpd_limits *lim);
/* A server on loop l (lim NULL: defaults). */
struct httpd *httpd_create(struct loop *l, const struct httpd_limits *lim,
                           httpd_handler h, void *arg);
/* Listens on host:port (port 0: any free port; see httpd_port). host is an
 * IPv4 or IPv6 address (brackets allowed: "[::1]"), "localhost" or "*"
 * (every IPv4 address). */
int httpd_listen(struct httpd *s, const char *host, int port, char *err);
int httpd_port(const struct httpd *s);
/* True for a loopback host: 127.0.0.0/8, ::1, ::ffff:127.x.y.z, "localhost"
 * (brackets allowed). */
bool httpd_host_is_loopback(const char *host);
/* Closes every connection (their on_close callbacks run) and the socket. */
void httpd_destroy(struct httpd *s);
void httpd_get_stats(const struct httpd *s, struct httpd_stats *st);
/* Checks the connection list and every buffer against the limits;
 * 0 or -1 with err set (tests call it after each step). */
int httpd_verify(const struct httpd *s, char *err);

/* Answers with a whole body and Content-Length (content_type NULL: no
 * Content-Type header). For HEAD the head goes out alone. */
void httpd_respond(struct httpd_conn *c, int status, const char *content_type,
                   const char *body, size_t len);
/* The same with extra header lines ("Allow: POST\r\n"; NULL: none). */
void httpd_respond_ex(struct httpd_conn *c, int status, const char *content_type,
                      const char *extra_headers, const char *body, size_t len);
/* A chunked (streamed) response: begin once, write any number of times,
 * end once. Chunks written in one loop iteration leave in one write, at
 * the end of the iteration's due timers (or with the response's end, or
 * as soon as 64 KiB are queued). */
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
/* The client has shut down its sending side (a half-close, or a close not
 * yet noticed by a failed write). */
bool httpd_conn_peer_closed(const struct httpd_conn *c);

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
