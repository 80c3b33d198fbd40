/* test_hostile_load.c: the load generator (`agentreplay load`) against
 * hostile servers, each a few lines of socket code here, under the caps of
 * tests/testproc.h (RLIMIT_FSIZE 100 MB, RLIMIT_AS 1 GB except under ASan,
 * a wall-clock limit):
 *   - a server that streams content forever (it once recorded 3 million
 *     tokens for 473 asked, and with --grace none never ended): the stream
 *     is read up to max_tokens plus a margin (limits.h) and the call ends
 *     as a protocol error; the run ends, exit 1 (no call completed);
 *   - one that streams events without content forever, and one that sends
 *     only SSE comments: the same, by the event and byte bounds;
 *   - one that accepts and never answers: the read timeout ends each call;
 *   - one that answers 500 to everything: exit 1, every record an error;
 *   - SIGTERM during a run against the endless server: exit 1 within one
 *     second, run.json partial;
 *   - a --url, an --api-key or an $OPENAI_API_KEY longer than its buffer:
 *     refused (exit 2), never cut. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/testhelp.h"
#include "tests/testproc.h"
#include "traces/base/limits.h"

static char tmp[256];
static const char *bin;

/* Triggers whose fix is another part's (testproc.h: CHECK_TRIGGER); none
 * now. */
static const char *const pending[] = {NULL};

enum mode { ENDLESS, ENDLESS_EMPTY, ENDLESS_COMMENTS, SILENT, ERROR_500 };

static const char *mode_name(enum mode m)
{
    static const char *const n[] = {"streams content forever", "streams empty events forever",
                                     "streams SSE comments forever", "never answers",
                                     "answers 500"};
    return n[m];
}

/* Reads a request's head and its body (by Content-Length) from fd. */
static void read_request(int fd)
{
    char buf[65536];
    size_t n = 0;
    long body = -1;
    for (;;) {
        ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
        if (k <= 0)
            return;
        n += (size_t)k;
        buf[n] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) {
            if (n >= sizeof buf - 1)
                return;
            continue;
        }
        if (body < 0) {
            char *cl = strcasestr(buf, "content-length:");
            body = cl ? atol(cl + 15) : 0;
        }
        size_t have = n - (size_t)(end + 4 - buf);
        while ((long)have < body) {
            k = read(fd, buf, sizeof buf);
            if (k <= 0)
                return;
            have += (size_t)k;
        }
        return;
    }
}

static void serve_one(int fd, enum mode m)
{
    read_request(fd);
    if (m == SILENT) {
        pause();
        _exit(0);
    }
    if (m == ERROR_500) {
        const char *r = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n"
                        "Connection: close\r\n\r\noops\n";
        ssize_t w = write(fd, r, strlen(r));
        (void)w;
        _exit(0);
    }
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                       "Connection: close\r\n\r\n";
    const char *ev =
        m == ENDLESS         ? "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
        : m == ENDLESS_EMPTY ? "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"
                             : ": keep-alive\n\n";
    if (write(fd, head, strlen(head)) < 0)
        _exit(0);
    char buf[16384];
    size_t k = strlen(ev), n = 0;
    while (n + k < sizeof buf) {
        memcpy(buf + n, ev, k);
        n += k;
    }
    while (write(fd, buf, n) > 0) {
    }
    _exit(0);
}

/* A server of mode m on 127.0.0.1 in its own process group (one child per
 * connection); its port into *port. */
static pid_t server_start(enum mode m, int *port)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 64) ||
        getsockname(ls, (struct sockaddr *)&a, &al))
        return -1;
    *port = ntohs(a.sin_port);
    pid_t p = fork();
    if (p == 0) {
        setpgid(0, 0);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_IGN);
        alarm(120);
        for (;;) {
            int fd = accept(ls, NULL, NULL);
            if (fd < 0)
                continue;
            if (fork() == 0) {
                close(ls);
                serve_one(fd, m);
            }
            close(fd);
        }
    }
    setpgid(p, p);
    close(ls);
    return p;
}

static void server_stop(pid_t p)
{
    if (p > 0) {
        kill(-p, SIGKILL);
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
    }
}

static char *path_in(const char *name) { return tp_path(tmp, name); }


/* A Mooncake trace of 4 calls of 20 output tokens each. */
static void write_trace(void)
{
    FILE *f = fopen(path_in("t.jsonl"), "w");
    for (int i = 0; i < 4; i++)
        fprintf(f, "{\"timestamp\": %d, \"input_length\": 300, \"output_length\": 20, "
                   "\"hash_ids\": [%d]}\n", i * 100, i);
    fclose(f);
}

/* Every record of requests.jsonl ended with an error containing `want`,
 * with at most max_out output tokens; returns the number of records. */
static int check_records(const char *dir, const char *want, int64_t max_out, int *bad)
{
    char p[700];
    snprintf(p, sizeof p, "%s/requests.jsonl", dir);
    FILE *f = fopen(p, "r");
    int n = 0;
    *bad = 0;
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        const char *e = json_string_value(json_object_get(j, "error"));
        int64_t out = json_integer_value(json_object_get(j, "output_tokens"));
        if (!e || !strstr(e, want) || out > max_out)
            (*bad)++;
        json_decref(j);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

/* `load` against a server of mode m for 2 s with --grace none: it ends,
 * exit 1 (no call completed), each record the error `want`. */
static void against(enum mode m, const char *want, const char *extra)
{
    int port;
    pid_t srv = server_start(m, &port);
    CHECKF(srv > 0, "a server that %s", mode_name(m));
    if (srv <= 0)
        return;
    char url[64], out[600];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(out, sizeof out, "%s/load-%d", tmp, (int)m);
    char *argv[24] = {(char *)bin, "load", "--url", url, "--model", "m", "--trace",
                      path_in("t.jsonl"), "--mode", "timestamp", "--duration", "2", "--grace",
                      "none", "--quiet", "-o", out};
    int n = 17;
    if (extra) {
        argv[n++] = "--read-timeout";
        argv[n++] = (char *)extra;
    }
    argv[n] = NULL;
    struct tp_caps c = {.timeout_s = 30, .err = path_in("err.txt"), .err_fd = -1};
    struct tp_result r = tp_run(argv, &c);
    server_stop(srv);
    const char *err = tp_slurp(path_in("err.txt"));
    CHECKF(r.status == 1 && r.secs < 15,
           "load against a server that %s, --grace none: ends in under 15 s with exit 1 (exit %d, "
           "%.1f s: %s)", mode_name(m), r.status, r.secs, err);
    CHECKF(strstr(err, "no call completed") != NULL,
           "load against a server that %s: says no call completed (%s)", mode_name(m), err);
    int bad, recs = check_records(out, want, 20 + LIMIT_STREAM_MARGIN_MIN, &bad);
    CHECKF(recs == 4 && bad == 0,
           "load against a server that %s: 4 records, each ended by \"%s\" with at most %d output "
           "tokens (%d records, %d otherwise)", mode_name(m), want, 20 + LIMIT_STREAM_MARGIN_MIN,
           recs, bad);
    printf("NOTE load against a server that %s: exit %d in %.2f s, %d records\n", mode_name(m),
           r.status, r.secs, recs);
}

static void test_sigterm(void)
{
    int port;
    pid_t srv = server_start(SILENT, &port);
    char url[64], out[600], run[700];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(out, sizeof out, "%s/load-term", tmp);
    snprintf(run, sizeof run, "%s/run.json", out);
    char *argv[] = {(char *)bin, "load", "--url", url, "--model", "m", "--trace",
                    path_in("t.jsonl"), "--mode", "timestamp", "--duration", "600", "--grace",
                    "none", "--quiet", "-o", out, NULL};
    struct tp_caps c = {.timeout_s = 20, .err = path_in("err.txt"), .err_fd = -1};
    double t0 = mono_s();
    pid_t p = tp_spawn(argv, &c);
    sleep_s(1.5);
    double ts = mono_s();
    kill(p, SIGTERM);
    struct tp_result r = tp_wait(p, t0, 20);
    double after = mono_s() - ts;
    server_stop(srv);
    CHECKF(r.status == 1 && after < 1.0,
           "SIGTERM ends load (calls in flight, --grace none) within one second, exit 1 (exit %d, "
           "%.2f s; %s)", r.status, after, tp_slurp(path_in("err.txt")));
    json_t *j = json_load_file(run, 0, NULL);
    CHECKF(j && json_is_true(json_object_get(j, "partial")),
           "... and leaves a run.json that says partial");
    json_decref(j);
    printf("NOTE load, SIGTERM with calls in flight: exit %d, %.2f s after the signal\n", r.status,
           after);
}

static void test_too_long(void)
{
    char url[700], key[400];
    memset(url, 'a', sizeof url);
    memcpy(url, "http://", 7);
    url[600] = 0;
    memset(key, 'k', sizeof key);
    key[300] = 0;
    char *a1[] = {(char *)bin, "load", "--url", url, "--model", "m", "--trace", path_in("t.jsonl"),
                  "-o", path_in("l1"), NULL};
    struct tp_caps c = {.timeout_s = 10, .err = path_in("err.txt"), .err_fd = -1};
    struct tp_result r = tp_run(a1, &c);
    CHECKF(r.status == 2 && strstr(tp_slurp(path_in("err.txt")), "--url"),
           "a --url of 600 characters is refused, not cut (exit %d: %s)", r.status,
           tp_slurp(path_in("err.txt")));
    char *a2[] = {(char *)bin, "load", "--url", "http://127.0.0.1:9", "--api-key", key, "--model",
                  "m", "--trace", path_in("t.jsonl"), "-o", path_in("l2"), NULL};
    r = tp_run(a2, &c);
    CHECKF(r.status == 2 && strstr(tp_slurp(path_in("err.txt")), "--api-key"),
           "an --api-key of 300 characters is refused, not cut (exit %d: %s)", r.status,
           tp_slurp(path_in("err.txt")));
    static char env[420];
    snprintf(env, sizeof env, "OPENAI_API_KEY=%s", key);
    char *a3[] = {(char *)bin, "load", "--url", "http://127.0.0.1:9", "--model", "m", "--trace",
                  path_in("t.jsonl"), "-o", path_in("l3"), NULL};
    struct tp_caps c3 = c;
    c3.env = env;
    r = tp_run(a3, &c3);
    CHECKF(r.status == 2 && strstr(tp_slurp(path_in("err.txt")), "$OPENAI_API_KEY"),
           "an $OPENAI_API_KEY of 300 characters is refused, not cut (exit %d: %s)", r.status,
           tp_slurp(path_in("err.txt")));
}

/* Every call refused at once (nothing listens): the run must stop with a
 * message, not write records as fast as calls fail (700 KB/s here). */
static void test_closed_port(void)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    bind(ls, (struct sockaddr *)&a, sizeof a);
    getsockname(ls, (struct sockaddr *)&a, &al);
    close(ls); /* a port nobody listens on */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    char *argv[] = {(char *)bin, "load", "--url", url, "--model", "m", "--trace",
                    path_in("t.jsonl"), "--mode", "closed", "--duration", "120", "--quiet", "-o",
                    path_in("closed"), NULL};
    struct tp_caps c = {.timeout_s = 30, .err = path_in("err.txt"), .err_fd = -1};
    struct tp_result r = tp_run(argv, &c);
    CHECK_TRIGGER(pending, r.status == 1 && r.secs < 15, "load against a closed port",
                  "load against a closed port, every call refused at once: stops within 15 s with "
                  "exit 1 (exit %d, %.1f s: %s)", r.status, r.secs, tp_slurp(path_in("err.txt")));
    printf("NOTE load against a closed port: exit %d in %.2f s\n", r.status, r.secs);
}

int main(void)
{
    bin = test_bin();
    if (access(bin, X_OK)) {
        SKIP("the agentreplay binary is not built");
        return test_report();
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmp, sizeof tmp, "/tmp/test_hostile_load.XXXXXX");
    if (!mkdtemp(tmp)) {
        CHECK(0, "mkdtemp");
        return test_report();
    }
    write_trace();
    against(ENDLESS, "protocol error: over 84 content chunks for max_tokens 20", NULL);
    against(ENDLESS_EMPTY, "protocol error: over 336 events", NULL);
    against(ENDLESS_COMMENTS, "protocol error: over", NULL);
    against(SILENT, "read timeout", "1s");
    against(ERROR_500, "HTTP 500", NULL);
    test_sigterm();
    test_too_long();
    test_closed_port();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return test_report();
}
