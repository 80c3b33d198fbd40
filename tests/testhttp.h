/* testhttp.h: what the HTTP server's tests share: resource caps for tests
 * of hostile input, an HTTP/1.1 response parser (whole and chunked
 * bodies, HEAD answers), server-sent events split into their data, and
 * raw sockets to loopback (IPv4 and IPv6). */
#ifndef TESTHTTP_H
#define TESTHTTP_H
/* Needs _GNU_SOURCE (memmem) defined before the first include. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define TH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TH_SANITIZED 1
#endif
#endif
#ifndef TH_SANITIZED
#define TH_SANITIZED 0
#endif

/* Caps on this test process: output files (100 MB), time (alarm, s) and,
 * outside the sanitizers (their shadow memory needs address space), 2 GB
 * of address space. Children inherit them. */
static inline void th_caps(unsigned seconds)
{
    struct rlimit f = {100u << 20, 100u << 20};
    setrlimit(RLIMIT_FSIZE, &f);
#if !TH_SANITIZED
    struct rlimit a = {2ull << 30, 2ull << 30};
    setrlimit(RLIMIT_AS, &a);
#endif
    alarm(seconds);
}

static inline double th_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One parsed response. */
struct th_resp {
    int status;
    char head[4096];  /* status line and headers */
    char *body;       /* malloc'ed, NUL-terminated (dechunked) */
    size_t body_len;
    size_t consumed;  /* bytes of the input it took */
};

static inline void th_resp_free(struct th_resp *r)
{
    free(r->body);
    r->body = NULL;
}

/* A header's value (case-insensitive name) into buf, or NULL. */
static inline const char *th_header(const struct th_resp *r, const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2;
        if (!strncasecmp(l, name, n) && l[n] == ':') {
            const char *v = l + n + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t k = e ? (size_t)(e - v) : strlen(v);
            if (k >= cap)
                k = cap - 1;
            memcpy(buf, v, k);
            buf[k] = 0;
            return buf;
        }
    }
    return NULL;
}

/* Parses one response at data[0..n). head_req: it answers a HEAD (no body
 * whatever Content-Length says). 0, or -1 when incomplete or malformed. */
static inline int th_parse(const char *data, size_t n, int head_req, struct th_resp *r)
{
    memset(r, 0, sizeof *r);
    const char *e = NULL;
    for (size_t i = 0; i + 3 < n; i++)
        if (!memcmp(data + i, "\r\n\r\n", 4)) {
            e = data + i;
            break;
        }
    if (!e || n < 12 || memcmp(data, "HTTP/1.1 ", 9))
        return -1;
    size_t hl = (size_t)(e - data) + 2;
    if (hl >= sizeof r->head)
        return -1;
    memcpy(r->head, data, hl);
    r->head[hl] = 0;
    r->status = atoi(data + 9);
    size_t pos = hl + 2;
    char v[64];
    r->body = malloc(1);
    r->body[0] = 0;
    if (head_req || r->status == 100) {
        r->consumed = pos;
        return 0;
    }
    if (th_header(r, "Transfer-Encoding", v, sizeof v) && !strcmp(v, "chunked")) {
        for (;;) {
            char *x;
            if (pos >= n)
                return th_resp_free(r), -1;
            unsigned long cl = strtoul(data + pos, &x, 16);
            const char *crlf = memmem(data + pos, n - pos, "\r\n", 2);
            if (!crlf)
                return th_resp_free(r), -1;
            pos = (size_t)(crlf - data) + 2;
            if (cl == 0) {
                if (pos + 2 > n)
                    return th_resp_free(r), -1;
                r->consumed = pos + 2;
                return 0;
            }
            if (pos + cl + 2 > n)
                return th_resp_free(r), -1;
            r->body = realloc(r->body, r->body_len + cl + 1);
            memcpy(r->body + r->body_len, data + pos, cl);
            r->body_len += cl;
            r->body[r->body_len] = 0;
            pos += cl + 2;
        }
    }
    size_t cl = th_header(r, "Content-Length", v, sizeof v) ? strtoul(v, NULL, 10) : 0;
    if (pos + cl > n)
        return th_resp_free(r), -1;
    r->body = realloc(r->body, cl + 1);
    memcpy(r->body, data + pos, cl);
    r->body[cl] = 0;
    r->body_len = cl;
    r->consumed = pos + cl;
    return 0;
}

/* The data of each server-sent event in body, in order (up to max; the
 * pointers are into a copy the caller frees with free(ev[0]) when n > 0,
 * the copy starting at ev[0]'s allocation: use th_events_free). */
struct th_events {
    char *copy;
    char *ev[4096];
    int n;
};

static inline void th_events(const char *body, struct th_events *e)
{
    e->copy = strdup(body);
    e->n = 0;
    char *p = e->copy;
    while (p && *p && e->n < 4096) {
        char *end = strstr(p, "\n\n");
        if (end)
            *end = 0;
        if (!strncmp(p, "data: ", 6))
            e->ev[e->n++] = p + 6;
        p = end ? end + 2 : NULL;
    }
}

static inline void th_events_free(struct th_events *e) { free(e->copy); }

/* A TCP connection to loopback port (v6: ::1), with a receive timeout. */
static inline int th_dial(int port, int v6, double timeout_s)
{
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int rc;
    if (v6) {
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        a.sin6_addr = in6addr_loopback;
        rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int th_send(int fd, const char *d, size_t n)
{
    while (n) {
        ssize_t w = write(fd, d, n);
        if (w <= 0)
            return -1;
        d += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until the peer closes, the timeout, or one whole response parses
 * (stop_at_one); returns the bytes (malloc'ed, NUL-terminated). */
static inline char *th_read(int fd, int stop_at_one, int head_req, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 4096 > cap)
            b = realloc(b, cap *= 2);
        ssize_t r = read(fd, b + n, cap - n - 1);
        if (r <= 0)
            break;
        n += (size_t)r;
        b[n] = 0;
        struct th_resp x;
        if (stop_at_one && th_parse(b, n, head_req, &x) == 0) {
            th_resp_free(&x);
            break;
        }
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* One request on a new connection, one response back. 0, or -1. */
static inline int th_request(int port, int v6, const char *req, int head_req, struct th_resp *r)
{
    int fd = th_dial(port, v6, 5);
    if (fd < 0)
        return -1;
    int rc = th_send(fd, req, strlen(req));
    size_t n;
    char *b = th_read(fd, 1, head_req, &n);
    close(fd);
    rc = rc ? -1 : th_parse(b, n, head_req, r);
    free(b);
    return rc;
}

#endif
