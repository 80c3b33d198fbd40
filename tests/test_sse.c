/* test_sse.c: the SSE parser against split, merged, malformed and oversized
 * input. */
#include "replay/sse.h"

#include "tests/testhelp.h"

struct got {
    char all[8192]; /* events joined with '|' */
    size_t len;
    int n;
};

static int on_event(void *arg, const char *event, const char *data, size_t n)
{
    struct got *g = arg;
    int k = snprintf(g->all + g->len, sizeof g->all - g->len, "%s%s%s%.*s|",
                     event, *event ? "=" : "", "", (int)n, data);
    if (k > 0)
        g->len += (size_t)k;
    g->n++;
    CHECK(strlen(data) == n, "data NUL-terminated at its length");
    return 0;
}

static const char openai[] =
    "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\" a\"}}]}\n\n"
    ": keep-alive comment\n\n"
    "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\" b\"}}]}\r\n\r\n"
    "event: usage\rdata: {\"usage\":{\"prompt_tokens\":3}}\r\r"
    "data:first\ndata: second\ndata\n\n"
    "id: 7\nretry: 10\nbogus line without colon\n\n"
    "data: [DONE]\n\n";

static const char want[] =
    "{\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\" a\"}}]}|"
    "{\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\" b\"}}]}|"
    "usage={\"usage\":{\"prompt_tokens\":3}}|"
    "first\nsecond\n|"
    "[DONE]|";

int main(void)
{
    struct sse p;
    struct got g;
    size_t n = strlen(openai);

    /* Whole at once. */
    memset(&g, 0, sizeof g);
    sse_init(&p, 4096, on_event, &g);
    CHECK(sse_feed(&p, openai, n) == 0, "feed whole");
    CHECKF(!strcmp(g.all, want), "whole: got %s", g.all);
    CHECK(g.n == 5, "five events");
    CHECK(!sse_pending(&p), "nothing pending");
    sse_free(&p);

    /* Split at every point, into two pieces, then one byte at a time. */
    int ok_split = 1;
    for (size_t cut = 0; cut <= n; cut++) {
        memset(&g, 0, sizeof g);
        sse_init(&p, 4096, on_event, &g);
        sse_feed(&p, openai, cut);
        sse_feed(&p, openai + cut, n - cut);
        if (strcmp(g.all, want))
            ok_split = 0;
        sse_free(&p);
    }
    CHECK(ok_split, "every two-piece split gives the same events");
    memset(&g, 0, sizeof g);
    sse_init(&p, 4096, on_event, &g);
    for (size_t i = 0; i < n; i++)
        sse_feed(&p, openai + i, 1);
    CHECKF(!strcmp(g.all, want), "byte at a time: got %s", g.all);
    sse_free(&p);

    /* Merged: the stream twice in one buffer. */
    char twice[2 * sizeof openai];
    memcpy(twice, openai, n);
    memcpy(twice + n, openai, n);
    memset(&g, 0, sizeof g);
    sse_init(&p, 4096, on_event, &g);
    CHECK(sse_feed(&p, twice, 2 * n) == 0, "feed merged");
    CHECK(g.n == 10, "ten events from two merged streams");
    sse_free(&p);

    /* Truncated: an unfinished event stays pending, not delivered. */
    memset(&g, 0, sizeof g);
    sse_init(&p, 4096, on_event, &g);
    sse_feed(&p, "data: {\"x\":1}\n", 14);
    CHECK(g.n == 0 && sse_pending(&p), "unfinished event pending");
    sse_reset(&p);
    CHECK(!sse_pending(&p), "reset clears it");
    sse_free(&p);

    /* Oversized: one long line, and many data lines in one event. */
    memset(&g, 0, sizeof g);
    sse_init(&p, 100, on_event, &g);
    char big[400];
    memset(big, 'x', sizeof big);
    memcpy(big, "data: ", 6);
    CHECK(sse_feed(&p, big, sizeof big) == SSE_ERR_TOO_BIG, "long line refused");
    CHECK(p.cap <= 102, "buffer bounded by the limit");
    sse_reset(&p);
    int rc = 0;
    for (int i = 0; i < 100 && !rc; i++)
        rc = sse_feed(&p, "data: 0123456789\n", 17);
    CHECK(rc == SSE_ERR_TOO_BIG, "many data lines refused");
    sse_reset(&p);
    CHECK(sse_feed(&p, "data: ok\n\n", 10) == 0 && g.n == 1, "usable after reset");
    sse_free(&p);

    /* Binary garbage never crashes and delivers only data events. */
    memset(&g, 0, sizeof g);
    sse_init(&p, 256, on_event, &g);
    uint64_t x = 88172645463325252ull;
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        junk[i] = "da:t \n\r\0x"[x % 9];
    }
    for (size_t i = 0; i < sizeof junk; i += 37) {
        if (sse_feed(&p, junk + i, sizeof junk - i < 37 ? sizeof junk - i : 37))
            sse_reset(&p);
    }
    CHECK(p.cap <= 258, "garbage: buffer bounded");
    sse_free(&p);

    return test_report();
}
