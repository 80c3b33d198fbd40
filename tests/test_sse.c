/* test_sse.c: the SSE parser against split, merged, malformed and oversized
 * input; the live target's content-event templates (http_tpl_*) against
 * Jansson on crafted and randomly mutated events. */
#include "replay/sse.h"

#include <jansson.h>

#include "replay/http_target.h"
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

/* What Jansson says of an event: 1 if it is an object whose
 * choices[0].delta.content is a non-empty string and that has no usage and
 * no error (what a template match claims), 0 otherwise. */
static int jansson_says_chunk(const char *ev, size_t n)
{
    json_t *j = json_loadb(ev, n, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    json_t *c = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"),
                                "content");
    int r = json_is_string(c) && json_string_length(c) > 0 && !json_object_get(j, "usage") &&
            !json_object_get(j, "error");
    json_decref(j);
    return r;
}

static size_t mk(char *out, size_t cap, const char *id, const char *model, const char *content, const char *fin)
{
    int k = snprintf(out, cap,
                     "{\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"%s\","
                     "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"finish_reason\":%s}]}",
                     id, model, content, fin);
    return (size_t)k;
}

static void test_templates(void)
{
    char ev[1024];
    struct http_tpl t = {0};
    size_t n = mk(ev, sizeof ev, "chatcmpl-1", "fake", " place", "null");
    CHECK(http_tpl_learn(&t, ev, n, " place", 6) == 1, "template learned from a content event");
    CHECK(http_tpl_match(&t, ev, n) == 1, "the template matches itself");
    static const struct {
        const char *content, *id, *fin;
        int want;
    } cases[] = {
        {" also", "chatcmpl-1", "null", 1},
        {"x", "chatcmpl-1", "null", 1},
        {" caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "chatcmpl-1", "null", 1}, /* valid UTF-8 */
        {"", "chatcmpl-1", "null", 0},                                        /* empty content */
        {" a\\\"b", "chatcmpl-1", "null", 0},                                 /* escapes: parsed */
        {" a\\n", "chatcmpl-1", "null", 0},
        {"\xc3", "chatcmpl-1", "null", 0},             /* truncated sequence */
        {"\xc0\x80", "chatcmpl-1", "null", 0},         /* overlong */
        {"\xed\xa0\x80", "chatcmpl-1", "null", 0},     /* surrogate */
        {"\xf4\x90\x80\x80", "chatcmpl-1", "null", 0}, /* above U+10FFFF */
        {"\x01", "chatcmpl-1", "null", 0},             /* control character */
        {" also", "chatcmpl-2", "null", 0},            /* another call's id */
        {" also", "chatcmpl-1", "\"length\"", 0},      /* a finish event */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t m = mk(ev, sizeof ev, cases[i].id, "fake", cases[i].content, cases[i].fin);
        CHECKF(http_tpl_match(&t, ev, m) == cases[i].want, "case %zu: match %d", i, cases[i].want);
        if (cases[i].want)
            CHECKF(jansson_says_chunk(ev, m), "case %zu: Jansson agrees", i);
    }
    const char *usage = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,"
                        "\"model\":\"fake\",\"choices\":[],\"usage\":{\"prompt_tokens\":2}}";
    CHECK(!http_tpl_match(&t, usage, strlen(usage)), "a usage event does not match");
    /* The content also as the model name: ambiguous, no template. */
    n = mk(ev, sizeof ev, "chatcmpl-1", "fake", "fake", "null");
    CHECK(http_tpl_learn(&t, ev, n, "fake", 4) == 0 && !t.buf, "ambiguous content: no template");
    /* Content written with escapes: no template. */
    n = mk(ev, sizeof ev, "chatcmpl-1", "fake", "a\\/b", "null");
    CHECK(http_tpl_learn(&t, ev, n, "a/b", 3) == 0, "escaped content: no template");
    /* Whitespace after the colon: the content is not found, no template. */
    const char *sp = "{\"choices\": [{\"delta\": {\"content\": \" w\"}}]}";
    CHECK(http_tpl_learn(&t, sp, strlen(sp), " w", 2) == 0, "spaced JSON: no template");

    /* Random mutations of a templated event, anywhere in it: every event
     * the template accepts is one Jansson parses as a content chunk without
     * usage or error. */
    n = mk(ev, sizeof ev, "chatcmpl-7", "m", " word", "null");
    CHECK(http_tpl_learn(&t, ev, n, " word", 5) == 1, "template learned");
    static const char alphabet[] = "ab \"\\{}[],:0\x01\x7f\x80\xc3\xa9\xe2\x82\xac\xed\xf0\xff";
    uint64_t s = 12345;
    int accepted = 0, bad = 0;
    for (int it = 0; it < 20000; it++) {
        char m[1100];
        size_t len;
        if (it % 2 == 0) {
            /* a new content body */
            char body[40];
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t bl = (s >> 33) % 12;
            for (size_t i = 0; i < bl; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                body[i] = alphabet[(s >> 33) % (sizeof alphabet - 1)];
            }
            memcpy(m, ev, t.pre);
            memcpy(m + t.pre, body, bl);
            memcpy(m + t.pre + bl, ev + t.suf, n - t.suf);
            len = t.pre + bl + (n - t.suf);
        } else {
            /* one byte replaced, inserted or deleted anywhere */
            memcpy(m, ev, n);
            len = n;
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (s >> 33) % n;
            char b = alphabet[(s >> 20) % (sizeof alphabet - 1)];
            int op = (int)((s >> 10) % 3);
            if (op == 0) {
                m[at] = b;
            } else if (op == 1) {
                memmove(m + at + 1, m + at, n - at);
                m[at] = b;
                len++;
            } else {
                memmove(m + at, m + at + 1, n - at - 1);
                len--;
            }
        }
        if (http_tpl_match(&t, m, len)) {
            accepted++;
            if (!jansson_says_chunk(m, len))
                bad++;
        }
    }
    CHECKF(accepted > 1000, "mutations accepted: %d", accepted);
    CHECKF(bad == 0, "accepted mutations Jansson rejects: %d", bad);
    http_tpl_free(&t);
    CHECK(!t.buf && !http_tpl_match(&t, ev, n), "freed template matches nothing");
}

/* Events as serve writes them (chat and completions), plus variants. */
static const char *shape_events[] = {
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\" a\"},\"finish_reason\":null}]}",
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}",
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"length\"}]}",
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
    "\"choices\":[],\"usage\":{\"prompt_tokens\":128,\"completion_tokens\":16,\"total_tokens\":144,"
    "\"prompt_tokens_details\":{\"cached_tokens\":64}}}",
};

static int same_event(const struct http_event *a, const struct http_event *b)
{
    return a->content == b->content && a->usage == b->usage && a->prompt_tokens == b->prompt_tokens &&
           a->completion_tokens == b->completion_tokens && a->cached_tokens == b->cached_tokens;
}

/* Jansson's reading of ev; 0 if it does not parse to an object without
 * an error. */
static int jansson_event(const char *ev, size_t n, int chat, struct http_event *out)
{
    json_t *j = json_loadb(ev, n, 0, NULL);
    int ok = json_is_object(j) && !json_object_get(j, "error");
    if (ok)
        http_event_of(j, chat, out);
    json_decref(j);
    return ok;
}

static void test_shapes(void)
{
    struct http_shape_set set;
    memset(&set, 0, sizeof set);
    int n_ev = (int)(sizeof shape_events / sizeof shape_events[0]);
    for (int i = 0; i < n_ev; i++) {
        const char *e = shape_events[i];
        json_t *j = json_loads(e, 0, NULL);
        CHECKF(http_shape_learn(&set, e, strlen(e), j, 1) == 1, "shape %d learned", i);
        json_decref(j);
    }
    /* Another call, another second, other counts: recognised, and read as
     * Jansson reads them. */
    const char *later[] = {
        "{\"id\":\"chatcmpl-99\",\"object\":\"chat.completion.chunk\",\"created\":1796033999,\"model\":\"fake\","
        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\" caf\xc3\xa9\"},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-99\",\"object\":\"chat.completion.chunk\",\"created\":1796033999,\"model\":\"fake\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":null}]}",
        "{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"fake\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"length\"}]}",
        "{\"id\":\"chatcmpl-99\",\"object\":\"chat.completion.chunk\",\"created\":1796033999,\"model\":\"fake\","
        "\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":100,\"total_tokens\":107,"
        "\"prompt_tokens_details\":{\"cached_tokens\":0}}}",
    };
    for (int i = 0; i < 4; i++) {
        struct http_event a, b;
        size_t n = strlen(later[i]);
        CHECKF(http_shape_match(&set, later[i], n, &a) == 1, "later event %d recognised", i);
        CHECKF(jansson_event(later[i], n, 1, &b) && same_event(&a, &b), "later event %d read as Jansson does", i);
    }
    struct http_event ev;
    const char *no[] = {
        /* escapes, a leading zero, a float, spaces, an extra key, an error */
        "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\\\"b\"},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
        "\"choices\":[],\"usage\":{\"prompt_tokens\":0128,\"completion_tokens\":16,\"total_tokens\":144,"
        "\"prompt_tokens_details\":{\"cached_tokens\":64}}}",
        "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
        "\"choices\":[],\"usage\":{\"prompt_tokens\":12.5,\"completion_tokens\":16,\"total_tokens\":144,"
        "\"prompt_tokens_details\":{\"cached_tokens\":64}}}",
        "{\"id\": \"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}",
        "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1796033644,\"model\":\"fake\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}],\"error\":1}",
    };
    for (int i = 0; i < 5; i++)
        CHECKF(http_shape_match(&set, no[i], strlen(no[i]), &ev) == 0, "variant %d not recognised", i);
    /* Not learned: escapes anywhere, a role key twice, a role key where
     * Jansson reads none. */
    const char *bad[] = {
        "{\"id\":\"a\\/b\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}",
        "{\"id\":\"a\",\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"other\":{\"content\":\"y\"}}",
        "{\"id\":\"a\",\"choices\":[],\"other\":{\"prompt_tokens\":5}}",
    };
    struct http_shape_set one;
    memset(&one, 0, sizeof one);
    for (int i = 0; i < 3; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        CHECKF(j && http_shape_learn(&one, bad[i], strlen(bad[i]), j, 1) == 0, "bad shape %d not learned", i);
        json_decref(j);
    }
    /* Completions events. */
    const char *comp = "{\"id\":\"cmpl-3\",\"object\":\"text_completion\",\"created\":5,\"model\":\"m\","
                       "\"choices\":[{\"index\":0,\"text\":\" hi\",\"finish_reason\":null}]}";
    json_t *cj = json_loads(comp, 0, NULL);
    CHECK(http_shape_learn(&one, comp, strlen(comp), cj, 0) == 1, "completions shape learned");
    json_decref(cj);
    const char *comp2 = "{\"id\":\"cmpl-4\",\"object\":\"text_completion\",\"created\":6,\"model\":\"m\","
                        "\"choices\":[{\"index\":0,\"text\":\" yo\",\"finish_reason\":null}]}";
    CHECK(http_shape_match(&one, comp2, strlen(comp2), &ev) == 1 && ev.content && !ev.usage,
          "completions content recognised");

    /* Random mutations of every shape's event: whatever a shape accepts,
     * Jansson parses to the same meaning. */
    static const char alphabet[] = "ab \"\\{}[],:0123456789.e-\x01\x7f\x80\xc3\xa9\xe2\x82\xac\xed\xf0\xff";
    uint64_t s = 777;
    int accepted = 0, wrong = 0;
    for (int it = 0; it < 40000; it++) {
        const char *e = shape_events[it % n_ev];
        size_t n = strlen(e);
        char m[1200];
        memcpy(m, e, n);
        size_t len = n;
        int edits = 1 + (int)(it % 3);
        for (int k = 0; k < edits; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (s >> 33) % len;
            char b = alphabet[(s >> 20) % (sizeof alphabet - 1)];
            int op = (int)((s >> 10) % 3);
            if (op == 0) {
                m[at] = b;
            } else if (op == 1 && len + 1 < sizeof m) {
                memmove(m + at + 1, m + at, len - at);
                m[at] = b;
                len++;
            } else if (len > 1) {
                memmove(m + at, m + at + 1, len - at - 1);
                len--;
            }
        }
        struct http_event a, b;
        if (http_shape_match(&set, m, len, &a)) {
            accepted++;
            if (!jansson_event(m, len, 1, &b) || !same_event(&a, &b)) {
                if (!wrong++)
                    fprintf(stderr, "shape accepted, Jansson disagrees: %.*s\n", (int)len, m);
            }
        }
    }
    CHECKF(accepted > 1000, "mutations accepted: %d", accepted);
    CHECKF(wrong == 0, "accepted mutations Jansson reads otherwise: %d", wrong);
    http_shape_set_free(&set);
    http_shape_set_free(&one);
    CHECK(http_shape_match(&set, shape_events[1], strlen(shape_events[1]), &ev) == 0,
          "freed shapes match nothing");
}

int main(void)
{
    test_templates();
    test_shapes();
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
