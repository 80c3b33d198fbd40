/* test_httpd.c: HTTP request handling against split, merged (pipelined),
 * malformed and oversized input, HEAD, Content-Type and overlong
 * Authorization headers (in memory), and on real sockets: a slow client is
 * dropped without holding up others, a dead client is noticed, sockets
 * that sent one byte are evicted at the connection limit and time out,
 * idle connections close, and stream chunks produced in one loop
 * iteration leave in one write while chunks produced apart leave apart.
 * httpd_verify runs every millisecond of the live part. */
#include "engine/server/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/time_ns.h"

struct seen {
    int n;
    char paths[8][64];
    char bodies[8][256];
    char auth[64];
    char media[64];
    int auth_overlong, head;
    int async;                 /* answer later instead of at once */
    struct httpd_conn *held;
    int closed_cb;
};

static void handler(struct httpd_conn *c, const struct httpd_request *r, void *arg)
{
    struct seen *s = arg;
    if (s->n < 8) {
        snprintf(s->paths[s->n], 64, "%s %s", r->method, r->path);
        snprintf(s->bodies[s->n], 256, "%.*s", (int)r->body_len, r->body);
    }
    if (r->authorization)
        snprintf(s->auth, sizeof s->auth, "%s", r->authorization);
    snprintf(s->media, sizeof s->media, "%s", r->media_type);
    s->auth_overlong = r->auth_overlong;
    s->head = r->head;
    s->n++;
    if (!strcmp(r->path, "/stream")) {
        httpd_stream_begin(c, 200, "text/event-stream");
        httpd_stream_write(c, "data: a\n\n", 9);
        httpd_stream_write(c, "data: [DONE]\n\n", 14);
        httpd_stream_end(c);
        return;
    }
    if (!strcmp(r->path, "/stream2")) { /* the end in one write */
        httpd_stream_begin(c, 200, "text/event-stream");
        httpd_stream_write(c, "data: a\n\n", 9);
        httpd_stream_end_with(c, "data: b\n\ndata: [DONE]\n\n", 23);
        return;
    }
    if (s->async) {
        s->held = c;
        return;
    }
    char body[64];
    int n = snprintf(body, sizeof body, "ok %d", s->n);
    httpd_respond(c, 200, "text/plain", body, (size_t)n);
}

static int count(const char *hay, size_t n, const char *needle)
{
    int k = 0;
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(hay + i, needle, m))
            k++;
    return k;
}

static void mem_tests(void)
{
    struct loop *l = loop_virtual_create();
    struct seen s;
    struct httpd_limits lim;
    httpd_limits_defaults(&lim);
    lim.max_header_bytes = 1024;
    lim.max_body_bytes = 4096;
    lim.max_out_bytes = 1 << 16;

    const char req[] = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\n"
                       "authorization: Bearer k1\r\nContent-Length: 11\r\n\r\nhello world";
    size_t rn = strlen(req);
    /* Split at every point. */
    int split_ok = 1;
    for (size_t cut = 0; cut <= rn; cut++) {
        memset(&s, 0, sizeof s);
        struct httpd *h = httpd_create(l, &lim, handler, &s);
        struct httpd_conn *c = httpd_conn_mem_create(h);
        httpd_conn_mem_feed(c, req, cut);
        httpd_conn_mem_feed(c, req + cut, rn - cut);
        size_t on;
        const char *out = httpd_conn_mem_output(c, &on);
        split_ok &= s.n == 1 && !strcmp(s.paths[0], "POST /v1/completions") &&
                    !strcmp(s.bodies[0], "hello world") && !strcmp(s.auth, "Bearer k1") &&
                    on > 12 && !memcmp(out, "HTTP/1.1 200", 12);
        httpd_conn_mem_destroy(c);
        httpd_destroy(h);
    }
    CHECK(split_ok, "split anywhere: one request, path, body, auth, 200");

    /* Merged: three pipelined requests in one buffer, answered in order. */
    memset(&s, 0, sizeof s);
    struct httpd *h = httpd_create(l, &lim, handler, &s);
    struct httpd_conn *c = httpd_conn_mem_create(h);
    char three[1024];
    int tn = snprintf(three, sizeof three, "%s%s%s", req,
                      "GET /health HTTP/1.1\r\nHost: a\r\n\r\n",
                      "GET /stream HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "3\r\nabc\r\n0\r\n\r\n");
    CHECK(httpd_conn_mem_feed(c, three, (size_t)tn) == 0, "merged feed");
    size_t on;
    const char *out = httpd_conn_mem_output(c, &on);
    CHECKF(s.n == 3, "three requests (%d)", s.n);
    CHECK(!strcmp(s.paths[1], "GET /health") && !strcmp(s.bodies[2], "abc"),
          "pipelined paths and a chunked body");
    CHECK(count(out, on, "HTTP/1.1 200") == 3, "three responses");
    const char *ok1 = strstr(out, "ok 1"), *ok2 = strstr(out, "ok 2");
    CHECK(ok1 && ok2 && ok1 < ok2, "in order");
    CHECK(count(out, on, "Transfer-Encoding: chunked") == 1 &&
          strstr(out, "9\r\ndata: a\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"),
          "chunked stream framing");
    httpd_conn_mem_destroy(c);

    /* A stream ended with its last chunk (httpd_stream_end_with), then a
     * pipelined request on the same connection. */
    memset(&s, 0, sizeof s);
    c = httpd_conn_mem_create(h);
    const char *two_s = "GET /stream2 HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n";
    CHECK(httpd_conn_mem_feed(c, two_s, strlen(two_s)) == 0, "stream_end_with feed");
    out = httpd_conn_mem_output(c, &on);
    CHECKF(s.n == 2, "both requests answered (%d)", s.n);
    CHECK(strstr(out, "9\r\ndata: a\n\n\r\n17\r\ndata: b\n\ndata: [DONE]\n\n\r\n0\r\n\r\nHTTP/1.1 200") != NULL,
          "stream_end_with framing, then the next response");
    httpd_conn_mem_destroy(c);

    /* Async: the second pipelined request waits for the first's answer. */
    memset(&s, 0, sizeof s);
    s.async = 1;
    c = httpd_conn_mem_create(h);
    char two[512];
    tn = snprintf(two, sizeof two, "%s%s", "GET /a HTTP/1.1\r\n\r\n", "GET /b HTTP/1.1\r\n\r\n");
    httpd_conn_mem_feed(c, two, (size_t)tn);
    CHECK(s.n == 1, "second request waits");
    struct httpd_conn *held = s.held;
    s.async = 0;
    httpd_respond(held, 200, "text/plain", "x", 1);
    CHECK(s.n == 2, "then runs");
    httpd_conn_mem_destroy(c);

    /* HEAD: the head alone, for whole and streamed answers alike, and the
     * next request on the connection parses right after it. */
    memset(&s, 0, sizeof s);
    c = httpd_conn_mem_create(h);
    const char *heads = "HEAD /stream HTTP/1.1\r\nHost: a\r\n\r\nHEAD /x HTTP/1.1\r\nHost: a\r\n\r\n"
                        "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    CHECK(httpd_conn_mem_feed(c, heads, strlen(heads)) == 0, "HEAD feed");
    out = httpd_conn_mem_output(c, &on);
    char hout[1024];
    snprintf(hout, sizeof hout, "%.*s", (int)on, out); /* the output is not NUL-terminated */
    const char *third = strstr(hout, "\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n");
    CHECKF(s.n == 3 && s.head == 0 && count(out, on, "HTTP/1.1 200") == 3 && !strstr(hout, "data: a") &&
               count(out, on, "ok ") == 1 && third && strstr(third, "\r\n\r\nok 3") &&
               !memcmp(out + on - 4, "ok 3", 4),
           "HEAD: heads only (a stream's too), then the GET's body (%zu bytes)", on);
    httpd_conn_mem_destroy(c);
    /* Content-Type's media type, trimmed and lowercased; an Authorization
     * header past HTTPD_AUTH_MAX is flagged, never cut. */
    memset(&s, 0, sizeof s);
    struct httpd_limits big = lim;
    big.max_header_bytes = 16384;
    struct httpd *hb = httpd_create(l, &big, handler, &s);
    c = httpd_conn_mem_create(hb);
    const char *ct = "GET /x HTTP/1.1\r\nContent-Type:  Application/JSON ; charset=utf-8\r\n\r\n";
    httpd_conn_mem_feed(c, ct, strlen(ct));
    CHECKF(!strcmp(s.media, "application/json"), "media type '%s'", s.media);
    static char longauth[HTTPD_AUTH_MAX + 200];
    int la = snprintf(longauth, sizeof longauth, "GET /x HTTP/1.1\r\nAuthorization: Bearer ");
    memset(longauth + la, 'k', HTTPD_AUTH_MAX);
    strcpy(longauth + la + HTTPD_AUTH_MAX, "\r\n\r\n");
    s.auth[0] = 0;
    httpd_conn_mem_feed(c, longauth, strlen(longauth));
    CHECK(s.n == 2 && s.auth_overlong && !s.auth[0], "an overlong Authorization: flagged, not passed on");
    httpd_conn_mem_destroy(c);
    httpd_destroy(hb);

    /* Oversized headers, oversized body, malformed. */
    struct {
        const char *what;
        char data[8192];
        int status;
    } bad[4];
    memset(bad, 0, sizeof bad);
    bad[0].what = "long header";
    int k = snprintf(bad[0].data, sizeof bad[0].data, "GET / HTTP/1.1\r\nX-A: ");
    memset(bad[0].data + k, 'a', 2000);
    strcpy(bad[0].data + k + 2000, "\r\n\r\n");
    bad[0].status = 431;
    bad[1].what = "content-length over the limit";
    snprintf(bad[1].data, sizeof bad[1].data, "POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
    bad[1].status = 413;
    bad[2].what = "chunked body over the limit";
    k = snprintf(bad[2].data, sizeof bad[2].data,
                 "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1400\r\n");
    memset(bad[2].data + k, 'b', 5200);
    bad[2].status = 413;
    bad[3].what = "malformed";
    snprintf(bad[3].data, sizeof bad[3].data, "GET / HTTP/1.1\r\nBad Header\r\n\r\n");
    bad[3].status = 400;
    for (int i = 0; i < 4; i++) {
        memset(&s, 0, sizeof s);
        c = httpd_conn_mem_create(h);
        int rc = httpd_conn_mem_feed(c, bad[i].data, strlen(bad[i].data));
        out = httpd_conn_mem_output(c, &on);
        char want[32];
        snprintf(want, sizeof want, "HTTP/1.1 %d", bad[i].status);
        CHECKF(rc == -1 && s.n == 0 && on > 12 && !memcmp(out, want, 12) &&
                   strstr(out, "Connection: close") && httpd_conn_mem_closed(c),
               "%s: %s and closed (got %.12s)", bad[i].what, want, out);
        httpd_conn_mem_destroy(c);
    }
    /* Binary garbage fed in pieces: never crashes, stays bounded. */
    uint64_t x = 1234567;
    int closed = 0;
    for (int round = 0; round < 200; round++) {
        c = httpd_conn_mem_create(h);
        for (int i = 0; i < 20 && !httpd_conn_mem_closed(c); i++) {
            char junk[97];
            for (size_t j = 0; j < sizeof junk; j++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                junk[j] = "GET /HTP1.\r\n: a0"[x % 16];
            }
            httpd_conn_mem_feed(c, junk, sizeof junk);
        }
        closed += httpd_conn_mem_closed(c);
        httpd_conn_mem_destroy(c);
    }
    CHECK(closed > 0, "garbage closes connections");
    char verr[ERR_LEN];
    CHECKF(httpd_verify(h, verr) == 0, "httpd_verify after garbage: %s", verr);
    httpd_destroy(h);
    loop_destroy(l);
}

/* ---- real sockets ---- */

struct live {
    struct loop *l;
    struct httpd *h;
    struct loop_timer pump, stop;
    struct httpd_conn *big;    /* the slow client's stream */
    int big_closed;
    int big_chunks;
    struct loop_timer quit;
    /* /drip: chunks 2 ms apart; socket writes each response took. A
     * chunk is "apart" when what was queued before it (the head or the
     * previous chunk) had already been written: a loaded machine can
     * run two timers in one loop iteration, and then they share a write. */
    struct httpd_conn *drip;
    int drip_left, drip_apart;
    uint64_t drip_w0, drip_wlast;
    struct loop_timer drip_timer;
    int burst_writes, drip_writes; /* -1 until measured */
};

static uint64_t writes_now(struct httpd *h)
{
    struct httpd_stats st;
    httpd_get_stats(h, &st);
    return st.writes;
}

static void drip_cb(struct loop *l, struct loop_timer *t)
{
    struct live *v = t->arg;
    if (!v->drip)
        return;
    uint64_t w = writes_now(v->h);
    v->drip_apart += w > v->drip_wlast;
    v->drip_wlast = w;
    httpd_stream_write(v->drip, "data: t\n\n", 9);
    if (--v->drip_left > 0) {
        loop_at(l, t, loop_now(l) + 2 * NS_PER_MS, drip_cb, v);
        return;
    }
    httpd_stream_end_with(v->drip, "data: [DONE]\n\n", 14);
    v->drip = NULL;
    __atomic_store_n(&v->drip_writes, (int)(writes_now(v->h) - v->drip_w0), __ATOMIC_SEQ_CST);
}

static void big_closed(void *ctx)
{
    struct live *v = ctx;
    v->big_closed = 1;
    v->big = NULL;
    loop_cancel(v->l, &v->pump);
}

static void pump_cb(struct loop *l, struct loop_timer *t)
{
    struct live *v = t->arg;
    if (!v->big)
        return;
    static char chunk[32768];
    memset(chunk, 'z', sizeof chunk);
    httpd_stream_write(v->big, chunk, sizeof chunk);
    v->big_chunks++;
    if (v->big)
        loop_at(l, t, loop_now(l) + NS_PER_MS, pump_cb, v);
}

static void quit_cb(struct loop *l, struct loop_timer *t) { loop_stop(l); }

/* Runs httpd_verify every millisecond on the server's own thread. */
static int verify_fails;
static struct loop_timer verify_timer;
static void verify_cb(struct loop *l, struct loop_timer *t)
{
    char err[ERR_LEN];
    if (httpd_verify(t->arg, err)) {
        if (!verify_fails++)
            fprintf(stderr, "httpd_verify: %s\n", err);
    }
    loop_at(l, t, loop_now(l) + NS_PER_MS, verify_cb, t->arg);
}

static void live_handler(struct httpd_conn *c, const struct httpd_request *r, void *arg)
{
    struct live *v = arg;
    if (!strcmp(r->path, "/big")) {
        v->big = c;
        httpd_conn_on_close(c, big_closed, v);
        httpd_stream_begin(c, 200, "application/octet-stream");
        loop_at(v->l, &v->pump, loop_now(v->l), pump_cb, v);
        return;
    }
    if (!strcmp(r->path, "/burst")) { /* 16 chunks and the end at once */
        uint64_t w0 = writes_now(v->h);
        httpd_stream_begin(c, 200, "text/event-stream");
        for (int i = 0; i < 16; i++)
            httpd_stream_write(c, "data: t\n\n", 9);
        httpd_stream_end_with(c, "data: [DONE]\n\n", 14);
        __atomic_store_n(&v->burst_writes, (int)(writes_now(v->h) - w0), __ATOMIC_SEQ_CST);
        return;
    }
    if (!strcmp(r->path, "/drip")) { /* 4 chunks 2 ms apart */
        v->drip = c;
        v->drip_left = 4;
        v->drip_apart = 0;
        v->drip_w0 = v->drip_wlast = writes_now(v->h);
        httpd_stream_begin(c, 200, "text/event-stream");
        loop_at(v->l, &v->drip_timer, loop_now(v->l) + 2 * NS_PER_MS, drip_cb, v);
        return;
    }
    if (!strcmp(r->path, "/quit")) {
        httpd_respond(c, 200, "text/plain", "bye", 3);
        loop_at(v->l, &v->quit, loop_now(v->l) + 20 * NS_PER_MS, quit_cb, v);
        return;
    }
    httpd_respond(c, 200, "text/plain", "hello", 5);
}

static void *serve_thread(void *arg)
{
    struct live *v = arg;
    loop_run(v->l);
    return NULL;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int roundtrip(int port, const char *req, char *resp, size_t cap)
{
    int fd = dial(port);
    if (fd < 0)
        return -1;
    if (write(fd, req, strlen(req)) < 0) {
        close(fd);
        return -1;
    }
    size_t k = 0;
    ssize_t n;
    while (k + 1 < cap && (n = read(fd, resp + k, cap - 1 - k)) > 0) {
        k += (size_t)n;
        if (strstr(resp, "\r\n\r\n") && k > 0)
            break;
    }
    resp[k] = 0;
    close(fd);
    return (int)k;
}

/* Sends req and reads until the chunked body's end (or 2 s). */
static int stream_roundtrip(int port, const char *req, char *resp, size_t cap)
{
    int fd = dial(port);
    if (fd < 0)
        return -1;
    if (write(fd, req, strlen(req)) < 0) {
        close(fd);
        return -1;
    }
    size_t k = 0;
    ssize_t n;
    resp[0] = 0;
    while (k + 1 < cap && (n = read(fd, resp + k, cap - 1 - k)) > 0) {
        k += (size_t)n;
        resp[k] = 0;
        if (strstr(resp, "\r\n0\r\n\r\n"))
            break;
    }
    close(fd);
    return (int)k;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void live_tests(void)
{
    struct live v;
    memset(&v, 0, sizeof v);
    v.l = loop_real_create();
    struct httpd_limits lim;
    httpd_limits_defaults(&lim);
    lim.max_out_bytes = 256 * 1024;
    lim.idle_timeout_ns = 300 * NS_PER_MS;
    lim.header_timeout_ns = 200 * NS_PER_MS;
    lim.max_conns = 8;
    v.h = httpd_create(v.l, &lim, live_handler, &v);
    char err[ERR_LEN];
    CHECK(httpd_listen(v.h, "127.0.0.1", 0, err) == 0, "listen on a free port");
    int port = httpd_port(v.h);
    CHECK(port > 0, "port assigned");
    loop_at(v.l, &verify_timer, loop_now(v.l), verify_cb, v.h);
    pthread_t th;
    pthread_create(&th, NULL, serve_thread, &v);

    /* A slow client that never reads its stream. */
    int slow = dial(port);
    const char *big = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(slow >= 0 && write(slow, big, strlen(big)) > 0, "slow client sends");
    usleep(50 * 1000);
    /* Others are served meanwhile. */
    char resp[4096];
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        int n = roundtrip(port, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp);
        ok += n > 0 && !strncmp(resp, "HTTP/1.1 200", 12);
    }
    CHECKF(ok == 20, "others served while a client is slow (%d of 20)", ok);
    /* The slow one is dropped once its queue passes the limit. */
    for (int i = 0; i < 200 && !__atomic_load_n(&v.big_closed, __ATOMIC_SEQ_CST); i++)
        usleep(10 * 1000);
    CHECK(__atomic_load_n(&v.big_closed, __ATOMIC_SEQ_CST), "slow client dropped");
    close(slow);

    /* A dead client: connects, asks for a stream, goes away. */
    v.big_closed = 0;
    int dead = dial(port);
    CHECK(dead >= 0 && write(dead, big, strlen(big)) > 0, "dead client sends");
    usleep(20 * 1000);
    close(dead);
    for (int i = 0; i < 200 && !__atomic_load_n(&v.big_closed, __ATOMIC_SEQ_CST); i++)
        usleep(10 * 1000);
    CHECK(__atomic_load_n(&v.big_closed, __ATOMIC_SEQ_CST), "dead client noticed");

    /* Ten sockets that sent one byte each: the quietest make room for a
     * new client; each ends (408 or closed) by the header timeout. */
    int ones[10];
    for (int i = 0; i < 10; i++) {
        ones[i] = dial(port);
        if (ones[i] >= 0 && write(ones[i], "G", 1) != 1) {
            close(ones[i]);
            ones[i] = -1;
        }
    }
    usleep(20 * 1000);
    int n1 = roundtrip(port, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n", resp, sizeof resp);
    CHECK(n1 > 0 && !strncmp(resp, "HTTP/1.1 200", 12), "ten one-byte sockets at max_conns 8: a new client served");
    int gone = 0;
    for (int i = 0; i < 10; i++) {
        char junk[256];
        /* A 408, an end of stream, or a reset (closed before its byte was read). */
        if (ones[i] >= 0 && (read(ones[i], junk, sizeof junk) >= 0 || errno == ECONNRESET))
            gone++;
        if (ones[i] >= 0)
            close(ones[i]);
    }
    CHECKF(gone == 10, "every one-byte socket ended within the header timeout (%d of 10)", gone);
    struct httpd_stats st0;
    httpd_get_stats(v.h, &st0);
    CHECKF(st0.evicted >= 3 && st0.header_timeouts >= 1, "evicted %llu, header timeouts %llu",
           (unsigned long long)st0.evicted, (unsigned long long)st0.header_timeouts);

    /* Idle connections close after the timeout. */
    int idle = dial(port);
    usleep(600 * 1000);
    char b;
    ssize_t r = read(idle, &b, 1);
    CHECK(r == 0, "idle connection closed by the server");
    close(idle);

    /* Chunks due at once leave in one write; chunks produced apart, apart. */
    v.burst_writes = v.drip_writes = -1;
    char sresp[8192];
    int sn = stream_roundtrip(port, "GET /burst HTTP/1.1\r\nHost: x\r\n\r\n", sresp, sizeof sresp);
    CHECKF(sn > 0 && count_of(sresp, "data: t\n\n") == 16 && count_of(sresp, "[DONE]") == 1 &&
               strstr(sresp, "\r\n0\r\n\r\n"),
           "burst stream arrives whole (%d bytes)", sn);
    for (int i = 0; i < 100 && __atomic_load_n(&v.burst_writes, __ATOMIC_SEQ_CST) < 0; i++)
        usleep(1000); /* the server thread counts after its last write */
    CHECKF(__atomic_load_n(&v.burst_writes, __ATOMIC_SEQ_CST) == 1,
           "16 chunks and the end produced at once: one write (%d)", v.burst_writes);
    sn = stream_roundtrip(port, "GET /drip HTTP/1.1\r\nHost: x\r\n\r\n", sresp, sizeof sresp);
    CHECKF(sn > 0 && count_of(sresp, "data: t\n\n") == 4 && strstr(sresp, "\r\n0\r\n\r\n"),
           "drip stream arrives whole (%d bytes)", sn);
    for (int i = 0; i < 100 && __atomic_load_n(&v.drip_writes, __ATOMIC_SEQ_CST) < 0; i++)
        usleep(1000);
    /* The head alone, chunks 1-3 one each, chunk 4 with the end: five
     * writes, one fewer for each chunk a late timer ran together with the
     * one before it (drip_apart counts the chunks that were not). */
    CHECKF(__atomic_load_n(&v.drip_writes, __ATOMIC_SEQ_CST) == v.drip_apart + 1 && v.drip_apart >= 1,
           "chunks 2 ms apart: one write each (%d writes for head + 4 chunks + end; %d of 4 apart)",
           v.drip_writes, v.drip_apart);

    int n = roundtrip(port, "GET /quit HTTP/1.1\r\nConnection: close\r\n\r\n", resp, sizeof resp);
    CHECK(n > 0 && strstr(resp, "Connection: close"), "connection: close honoured");
    pthread_join(th, NULL);
    struct httpd_stats st;
    httpd_get_stats(v.h, &st);
    CHECKF(st.dropped_slow >= 1, "dropped_slow counted (%llu)", (unsigned long long)st.dropped_slow);
    CHECKF(verify_fails == 0, "httpd_verify held at every millisecond (%d failures)", verify_fails);
    loop_cancel(v.l, &verify_timer);
    httpd_destroy(v.h);
    loop_destroy(v.l);
}

int main(void)
{
    mem_tests();
    live_tests();
    return test_report();
}
