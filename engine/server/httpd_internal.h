/* httpd_internal.h: the HTTP server's connection and server structs and
 * what httpd.c (input, connection life) and httpd_out.c (output) share. */
#ifndef HTTPD_INTERNAL_H
#define HTTPD_INTERNAL_H

#include <http_parser.h>
#include <stdbool.h>
#include <sys/uio.h>

#include "engine/server/httpd.h"
#include "traces/base/list.h"

#define PEND_READ_LIMIT (64 * 1024)  /* input queued behind a busy request */
#define STREAM_FLUSH_BYTES (64 * 1024) /* stream bytes queued before they are
                                          written without waiting for the
                                          end of the loop iteration */
#define MEDIA_MAX 128                /* Content-Type bytes kept */

struct httpd_conn {
    struct httpd *s;
    int fd;                  /* -1 for in-memory connections */
    int mem;
    struct loop_io io;
    int io_on;
    http_parser parser;
    struct loop_timer timer; /* header, body or idle deadline (arm_timer) */
    struct loop_timer resume_timer;
    /* The request being assembled. */
    char *url;
    size_t url_len;
    char *body;
    size_t body_len, body_cap;
    char auth[HTTPD_AUTH_MAX + 1];
    size_t auth_len;
    int has_auth, auth_overlong;
    char media[MEDIA_MAX + 1];
    size_t media_len;
    int media_overlong;
    char field[16];
    size_t field_len;
    int field_kind, in_value; /* field_kind: which header the value belongs to */
    int expect_continue;     /* "Expect: 100-continue" seen */
    size_t header_bytes;
    int err_status;          /* set by a parser callback: answer and close */
    int in_request;          /* a request's first byte has been parsed */
    int headers_done;        /* ... and its headers are complete */
    int64_t req_start_ns;    /* when its first byte was parsed */
    int64_t last_read_ns;    /* the last bytes read */
    int64_t n_requests;      /* requests dispatched on this connection */
    /* Input not yet parsed. */
    char *pend;
    size_t pend_len, pend_cap;
    /* Output not yet written. */
    char *out;
    size_t out_head, out_len, out_cap;
    /* State. */
    int busy;                /* a request is being answered */
    int head;                /* ... and it is a HEAD: no body goes out */
    int streaming;
    int keep_alive;
    int close_after_flush;
    int eof;                 /* the client shut down its sending side */
    int closed;
    int depth;               /* nesting of entry points (drain) */
    void (*on_close)(void *ctx);
    void *on_close_ctx;
    struct list_node node;   /* on the server's open list, then its graveyard */
    struct list_node dnode;  /* on the dirty list: stream chunks queued, to be
                                written by the flush timer */
    struct list_node qnode;  /* on the quiet list while no request is being
                                answered, most recently active last */
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
    struct list_node quiet;         /* open connections without a request
                                       being answered, least recently active
                                       first: eviction candidates */
    struct list_node graveyard;     /* closed, to be freed */
    struct loop_timer reap_timer;
    struct list_node dirty;         /* connections with chunks to write, newest first */
    struct loop_timer flush_timer;  /* writes them, due at once */
    http_parser_settings settings;
    struct httpd_stats st;
};

/* httpd.c */
void httpd_conn_close(struct httpd_conn *c);
void httpd_conn_update_io(struct httpd_conn *c);
/* The request is answered: the connection waits for the next one, or
 * closes (no keep-alive, client gone). */
void httpd_conn_finish(struct httpd_conn *c);

/* httpd_out.c */
void httpd_out_writev(struct httpd_conn *c, struct iovec *iov, int n);
void httpd_out_write(struct httpd_conn *c, const char *d, size_t n);
void httpd_flush(struct httpd_conn *c);
void httpd_flush_cb(struct loop *l, struct loop_timer *t);
static inline bool httpd_is_dirty(const struct httpd_conn *c) { return list_linked(&c->dnode); }
void httpd_dirty_unlink(struct httpd_conn *c);
/* Answers status with a small JSON error and closes after it (parse
 * errors, limits, timeouts). */
void httpd_respond_error_close(struct httpd_conn *c, int status);
const char *httpd_reason(int status);

#endif
