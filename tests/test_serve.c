/* test_serve.c: `agentreplay serve` under hostile and careless clients,
 * over real sockets, with short limits set by its flags so each case
 * takes a second or less:
 *   - ten sockets that each sent one byte do not lock out a new client
 *     (--max-conns 4: the quietest is closed to make room);
 *   - a request whose headers do not arrive in --header-timeout gets 408;
 *     a quiet connection closes after --idle-timeout;
 *   - a client that half-closes after its request still gets the answer;
 *   - --max-conn-requests: the last answer says Connection: close;
 *   - the zero-timing fake: a request without max_tokens (to the 1M
 *     context) completes, /health answers meanwhile, memory stays small;
 *     max_tokens 1e12 is a 400 and the server lives on;
 *   - a client that leaves a stream stops the work (running back to 0,
 *     the choice counted as aborted);
 *   - [::1] is loopback (no key needed) and serves over IPv6; refusals at
 *     the start: a key over 1024 bytes, a public address without a key,
 *     an unwritable --port-file; --served-model-name A B C as vLLM takes it.
 * Every server runs under the test's caps and dies with the test. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "engine/server/httpd.h"
#include "tests/testhelp.h"
#include "tests/testhttp.h"
#include "traces/base/err.h"

static char tmpdir[256];
static int n_srv;

struct srv {
    pid_t pid;
    int port;
};

/* Starts `agentreplay serve ARGS...` (NULL-terminated); waits for its
 * port (0 when it exits first: *rc its status). */
static struct srv start(int *rc, ...)
{
    char pf[320], log[320];
    snprintf(pf, sizeof pf, "%s/s%d.port", tmpdir, n_srv);
    snprintf(log, sizeof log, "%s/s%d.log", tmpdir, n_srv++);
    char *argv[40] = {(char *)test_bin(), "serve", "--port-file", pf};
    int n = 4;
    va_list ap;
    va_start(ap, rc);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 38)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    struct srv s = {0, 0};
    s.pid = fork();
    if (s.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        test_output_to(log);
        execv(argv[0], argv);
        _exit(127);
    }
    if (rc)
        *rc = -1;
    for (int i = 0; i < 500 && !s.port; i++) {
        int st;
        if (waitpid(s.pid, &st, WNOHANG) == s.pid) {
            if (rc)
                *rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
            s.pid = 0;
            return s;
        }
        FILE *f = fopen(pf, "r");
        if (f) {
            if (fscanf(f, "%d", &s.port) != 1)
                s.port = 0;
            fclose(f);
        }
        if (!s.port)
            usleep(10000);
    }
    return s;
}

static void stop(struct srv *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGINT);
    int st;
    for (int i = 0; i < 300; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            return;
        }
        usleep(10000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    s->pid = 0;
}

static char rb[1 << 16];

static const char *post_req(const char *path, const char *body)
{
    snprintf(rb, sizeof rb,
             "POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", path,
             strlen(body), body);
    return rb;
}

static double scrape(int port, const char *line_start)
{
    struct th_resp r;
    if (th_request(port, 0, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", 0, &r))
        return -1;
    const char *p = strstr(r.body, line_start);
    double v = p ? strtod(p + strlen(line_start), NULL) : -1;
    th_resp_free(&r);
    return v;
}

static int health(int port, int v6)
{
    struct th_resp r;
    if (th_request(port, v6, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n", 0, &r))
        return -1;
    int st = r.status;
    th_resp_free(&r);
    return st;
}

/* Reads until EOF or the timeout; the seconds it took, -1 on timeout. */
static double wait_eof(int fd, double limit, char *got, size_t cap)
{
    double t0 = th_now();
    size_t k = 0;
    for (;;) {
        char b[4096];
        ssize_t n = read(fd, b, sizeof b);
        if (n == 0)
            return th_now() - t0;
        if (n < 0) {
            if ((errno == EAGAIN || errno == EINTR) && th_now() - t0 < limit)
                continue;
            return errno == ECONNRESET ? th_now() - t0 : -1;
        }
        if (k + (size_t)n < cap) {
            memcpy(got + k, b, (size_t)n);
            k += (size_t)n;
            got[k] = 0;
        }
    }
}

static void test_conns(void)
{
    int rc;
    struct srv s = start(&rc, "--listen", "127.0.0.1:0", "--fake", "--fake-ttft-ms", "1", "--fake-tpot-ms", "1",
                         "--max-conns", "4", "--header-timeout", "0.5", "--idle-timeout", "1",
                         "--max-conn-requests", "3", NULL);
    CHECK(s.port > 0, "serve with short limits started");
    if (!s.port)
        return;
    /* Ten sockets, one byte each. */
    int fds[10];
    for (int i = 0; i < 10; i++) {
        fds[i] = th_dial(s.port, 0, 3);
        if (fds[i] >= 0 && write(fds[i], "G", 1) != 1) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
    usleep(50 * 1000);
    double t0 = th_now();
    int st = health(s.port, 0);
    CHECKF(st == 200 && th_now() - t0 < 1, "ten one-byte sockets with --max-conns 4: a new client is served (%d)", st);
    /* Each of them got a 408 or was closed to make room, within the
     * header timeout. */
    int ended = 0;
    for (int i = 0; i < 10; i++) {
        char got[512] = "";
        if (fds[i] >= 0 && wait_eof(fds[i], 2, got, sizeof got) >= 0)
            ended++;
        if (fds[i] >= 0)
            close(fds[i]);
    }
    CHECKF(ended == 10, "every one-byte socket was closed within 2 s (%d of 10)", ended);
    /* Header timeout: 408 after about 0.5 s. */
    int fd = th_dial(s.port, 0, 3);
    th_send(fd, "GET /health HTTP/1.1\r\nHost: t\r\n", 31);
    char got[1024] = "";
    double t = wait_eof(fd, 3, got, sizeof got);
    CHECKF(t > 0.3 && t < 1.5 && !strncmp(got, "HTTP/1.1 408", 12), "headers too slow: 408 after %.2f s", t);
    close(fd);
    /* Idle timeout: closed after about 1 s. */
    fd = th_dial(s.port, 0, 3);
    t = wait_eof(fd, 3, got, sizeof got);
    CHECKF(t > 0.7 && t < 2, "a quiet connection closes after %.2f s (--idle-timeout 1)", t);
    close(fd);
    /* A body that pauses past the idle timeout: 408. */
    fd = th_dial(s.port, 0, 3);
    th_send(fd, "POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"pro",
            strlen("POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"pro"));
    got[0] = 0;
    t = wait_eof(fd, 3, got, sizeof got);
    CHECKF(t > 0.7 && !strncmp(got, "HTTP/1.1 408", 12), "a body that stops: 408 after %.2f s", t);
    close(fd);
    /* Half-close: the answer still comes. */
    fd = th_dial(s.port, 0, 3);
    const char *r = post_req("/v1/completions", "{\"prompt\":\"a b c\",\"max_tokens\":5}");
    th_send(fd, r, strlen(r));
    shutdown(fd, SHUT_WR);
    size_t n;
    char *b = th_read(fd, 0, 0, &n);
    struct th_resp x;
    int ok = th_parse(b, n, 0, &x) == 0 && x.status == 200 && strstr(x.body, "\"completion_tokens\":5");
    CHECK(ok, "a client that half-closes after its request gets the answer");
    if (ok)
        th_resp_free(&x);
    free(b);
    close(fd);
    /* Three requests per connection. */
    fd = th_dial(s.port, 0, 3);
    const char *h = "GET /health HTTP/1.1\r\nHost: t\r\n\r\n";
    char four[256];
    snprintf(four, sizeof four, "%s%s%s%s", h, h, h, h);
    th_send(fd, four, strlen(four));
    b = th_read(fd, 0, 0, &n);
    int answers = 0, closes = 0;
    size_t off = 0;
    while (off < n && th_parse(b + off, n - off, 0, &x) == 0) {
        char v[32];
        answers++;
        closes += th_header(&x, "Connection", v, sizeof v) && !strcmp(v, "close");
        off += x.consumed;
        th_resp_free(&x);
    }
    CHECKF(answers == 3 && closes == 1, "--max-conn-requests 3: three answers, the last closing (%d, %d)", answers,
           closes);
    free(b);
    close(fd);
    stop(&s);
}

static long rss_peak_kb(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

static void test_fake_zero(void)
{
    int rc;
    struct srv s = start(&rc, "--listen", "127.0.0.1:0", "--fake", "--fake-ttft-ms", "0", "--fake-tpot-ms", "0", NULL);
    CHECK(s.port > 0, "zero-timing fake started");
    if (!s.port)
        return;
    struct th_resp r;
    double t0 = th_now();
    int rq = th_request(s.port, 0,
                        post_req("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                                         "\"max_tokens\":1000000000000}"),
                        0, &r);
    CHECKF(rq == 0 && r.status == 400 && strstr(r.body, "cannot be greater than max_model_len=1048576") &&
               th_now() - t0 < 2,
           "max_tokens 1e12: 400 at once (%d)", rq ? -1 : r.status);
    if (!rq)
        th_resp_free(&r);
    /* A whole answer to the 1M context, with /health asked meanwhile. */
    int fd = th_dial(s.port, 0, 30);
    const char *big = post_req("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    th_send(fd, big, strlen(big));
    int hst = health(s.port, 0);
    size_t n;
    char *b = th_read(fd, 1, 0, &n);
    int ok = th_parse(b, n, 0, &r) == 0 && r.status == 200 && strstr(r.body, "\"completion_tokens\":1048575");
    CHECKF(ok && hst == 200 && th_now() - t0 < 20,
           "no max_tokens: 1048575 tokens (the context), /health answered meanwhile (%d), %.1f s", hst,
           th_now() - t0);
    if (ok)
        th_resp_free(&r);
    free(b);
    close(fd);
    long kb = rss_peak_kb(s.pid);
    CHECKF(kb > 0 && kb < 400 * 1024, "peak memory of the zero-timing fake %ld KB (under 400 MB)", kb);
    CHECK(health(s.port, 0) == 200, "still serving");
    stop(&s);
}

static void test_client_leaves(void)
{
    int rc;
    struct srv s = start(&rc, "--listen", "127.0.0.1:0", "--fake", "--fake-ttft-ms", "1", "--fake-tpot-ms", "2", NULL);
    CHECK(s.port > 0, "fake started");
    if (!s.port)
        return;
    int fd = th_dial(s.port, 0, 3);
    const char *r = post_req("/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":100000,\"stream\":true}");
    th_send(fd, r, strlen(r));
    char b[4096];
    ssize_t got = read(fd, b, sizeof b);
    double running = scrape(s.port, "vllm:num_requests_running{engine=\"0\",model_name=\"fake\"} ");
    close(fd);
    double t0 = th_now(), ab = 0;
    while (th_now() - t0 < 2 &&
           (ab = scrape(s.port, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"fake\"} ")) < 1)
        usleep(20000);
    double after = scrape(s.port, "vllm:num_requests_running{engine=\"0\",model_name=\"fake\"} ");
    double gen = scrape(s.port, "vllm:generation_tokens_total{engine=\"0\",model_name=\"fake\"} ");
    usleep(200000);
    double gen2 = scrape(s.port, "vllm:generation_tokens_total{engine=\"0\",model_name=\"fake\"} ");
    CHECKF(got > 0 && running == 1 && ab == 1 && after == 0 && gen == gen2 && gen < 100000,
           "a client leaving a stream stops its work (running %g -> %g, aborted %g, tokens %g then %g)", running,
           after, ab, gen, gen2);
    stop(&s);
}

static int loopback_names_ok(void)
{
    const char *yes[] = {"127.0.0.1", "127.1.2.3", "[::1]", "::1", "localhost", "[localhost]",
                         "::ffff:127.0.0.1", "[::ffff:127.0.0.2]"};
    const char *no[] = {"0.0.0.0", "10.0.0.1", "::", "[::2]", "example.com", "", "128.0.0.1", "[::1", "*"};
    int ok = 1;
    for (size_t i = 0; i < ARRAY_LEN(yes); i++)
        if (!httpd_host_is_loopback(yes[i]))
            ok = 0, fprintf(stderr, "  %s should be loopback\n", yes[i]);
    for (size_t i = 0; i < ARRAY_LEN(no); i++)
        if (httpd_host_is_loopback(no[i]))
            ok = 0, fprintf(stderr, "  %s should not be loopback\n", no[i]);
    return ok;
}

static void test_start(void)
{
    int rc;
    struct srv s = start(&rc, "--listen", "[::1]:0", "--fake", "--served-model-name", "a", "b/c", "d:e", NULL);
    CHECK(s.port > 0, "[::1] is loopback: no key needed");
    if (s.port) {
        CHECK(health(s.port, 1) == 200, "served over IPv6");
        struct th_resp r;
        if (th_request(s.port, 1, "GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n", 0, &r) == 0) {
            json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
            json_t *d = json_object_get(j, "data");
            CHECK(json_array_size(d) == 3 && !strcmp(json_string_value(json_object_get(json_array_get(d, 2), "id")), "d:e"),
                  "--served-model-name a b/c d:e: three names");
            json_decref(j);
            th_resp_free(&r);
        } else {
            CHECK(0, "/v1/models over IPv6");
        }
        stop(&s);
    }
    static char key[1100];
    memset(key, 'k', 1025);
    s = start(&rc, "--listen", "127.0.0.1:0", "--fake", "--api-key", key, NULL);
    CHECKF(!s.port && rc == 2, "a key of 1025 bytes: refused at the start (%d)", rc);
    stop(&s);
    s = start(&rc, "--listen", "0.0.0.0:0", "--fake", NULL);
    CHECKF(!s.port && rc == 2, "a public address without --api-key: refused (%d)", rc);
    stop(&s);
    s = start(&rc, "--listen", "::1:0", "--fake", NULL);
    CHECKF(!s.port && rc == 2, "an IPv6 host without brackets: refused (%d)", rc);
    stop(&s);
    char pf[400];
    snprintf(pf, sizeof pf, "%s/no/such/dir/port", tmpdir);
    char *argv[] = {(char *)test_bin(), "serve", "--listen", "127.0.0.1:0", "--fake", "--port-file", pf, NULL};
    pid_t p = fork();
    if (p == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    double t0 = th_now();
    while (waitpid(p, &st, WNOHANG) != p && th_now() - t0 < 5)
        usleep(10000);
    if (th_now() - t0 >= 5) {
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
    }
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 1, "an unwritable --port-file: exit 1 (%d)", WEXITSTATUS(st));
    CHECK(loopback_names_ok(), "loopback: 127/8, ::1, v4-mapped 127, localhost; nothing else");
}

int main(void)
{
    th_caps(120);
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_serve.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_conns();
    test_fake_zero();
    test_client_leaves();
    test_start();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report();
}
