/* test_prompt.c: prompt synthesis from block chains (determinism, exact
 * lengths, shared prefixes where chains share blocks, streaming) and the
 * server's content-derived block ids. */
#include "traces/prompt.h"

#include <jansson.h>

#include "tests/testhelp.h"

static int64_t count_words(const char *s)
{
    int64_t n = 0;
    int in = 0;
    for (; *s; s++) {
        if (*s == ' ')
            in = 0;
        else if (!in)
            in = 1, n++;
    }
    return n;
}

int main(void)
{
    uint64_t a_blocks[] = {11, 12, 13, 14};
    uint64_t b_blocks[] = {11, 12, 13, 99, 100};
    struct prompt_spec a = {.session_salt = 7, .call_salt = 1, .scope = 3,
                            .blocks = a_blocks, .n_blocks = 4, .block_size = 64,
                            .tokens = 4 * 64 + 10};
    struct prompt_spec b = a;
    b.call_salt = 2;
    b.blocks = b_blocks;
    b.n_blocks = 5;
    b.tokens = 5 * 64;

    /* Determinism and sharing. */
    CHECK(prompt_token(&a, 5) == prompt_token(&a, 5), "deterministic");
    int same = 1;
    for (int64_t i = 0; i < 3 * 64; i++)
        same &= prompt_token(&a, i) == prompt_token(&b, i);
    CHECK(same, "shared blocks give the same tokens");
    int differ = 0;
    for (int64_t i = 3 * 64; i < 4 * 64; i++)
        differ += prompt_token(&a, i) != prompt_token(&b, i);
    CHECKF(differ > 50, "different blocks differ (%d of 64)", differ);
    struct prompt_spec c = a;
    c.session_salt = 8;
    differ = 0;
    for (int64_t i = 0; i < PROMPT_MARKER_TOKENS; i++)
        differ += prompt_token(&a, i) != prompt_token(&c, i);
    CHECK(differ >= PROMPT_MARKER_TOKENS - 1, "session markers differ");
    /* Unmarked (the agentx rules: the marker is a word of its own): the
     * first tokens are the first block's, whatever the session. */
    struct prompt_spec u = a, u2 = a;
    u.unmarked = u2.unmarked = true;
    u2.session_salt = 8;
    same = 1;
    for (int64_t i = 0; i < 64; i++)
        same &= prompt_token(&u, i) == prompt_token(&u2, i);
    struct prompt_spec u3 = b;
    u3.unmarked = true;
    for (int64_t i = 0; i < 64; i++)
        same &= prompt_token(&u, i) == prompt_token(&u3, i);
    CHECK(same, "unmarked: block 0 is the same text in every session (instances share it)");
    struct prompt_spec d = a;
    d.scope = 4;
    CHECK(prompt_token(&a, 100) != prompt_token(&d, 100) ||
          prompt_token(&a, 101) != prompt_token(&d, 101), "scopes differ");

    /* Text: one word per token; the bytes count matches; JSON-safe. */
    size_t len;
    char *t = prompt_render(&a, PROMPT_TEXT, &len);
    CHECK(count_words(t) == a.tokens, "text: one word per token");
    CHECK((int64_t)len == prompt_bytes(&a, PROMPT_TEXT), "text: byte count");
    json_t *js = json_stringn(t, len);
    char *dumped = json_dumps(js, JSON_ENCODE_ANY);
    CHECK(dumped && strlen(dumped) == len + 2, "text needs no JSON escaping");
    free(dumped);
    json_decref(js);

    /* Streaming through reads of every small size gives the same bytes. */
    int stream_ok = 1;
    for (size_t step = 1; step <= 40; step++) {
        struct prompt_gen g;
        prompt_gen_init(&g, &a, PROMPT_TEXT);
        char *buf = malloc(len + 64);
        size_t k = 0, r;
        while ((r = prompt_gen_read(&g, buf + k, step)) > 0)
            k += r;
        stream_ok &= k == len && !memcmp(buf, t, len);
        free(buf);
    }
    CHECK(stream_ok, "streamed reads equal the rendering");

    /* Tokens: a JSON array of exactly `tokens` ids. */
    size_t tlen;
    char *ids = prompt_render(&b, PROMPT_TOKENS, &tlen);
    char *arr = malloc(tlen + 3);
    snprintf(arr, tlen + 3, "[%s]", ids);
    json_error_t jerr;
    json_t *ja = json_loads(arr, 0, &jerr);
    CHECK(ja && json_is_array(ja) && (int64_t)json_array_size(ja) == b.tokens,
          "tokens: a JSON array of the exact length");
    int range_ok = 1;
    int64_t *vals = malloc(sizeof(int64_t) * (size_t)b.tokens);
    for (size_t i = 0; ja && i < json_array_size(ja); i++) {
        json_int_t v = json_integer_value(json_array_get(ja, i));
        range_ok &= v >= PROMPT_ID_BASE && v < PROMPT_ID_BASE + PROMPT_ID_RANGE;
        vals[i] = v;
    }
    CHECK(range_ok, "ids in range");
    json_decref(ja);

    /* Server side: content-derived ids share exactly the shared chunks. */
    uint64_t ba[16], bb[16];
    uint32_t na, nbb;
    char *tb = prompt_render(&b, PROMPT_TEXT, NULL);
    CHECK(prompt_blocks_text(t, len, 64, ba, 16, &na) == a.tokens, "server counts the words");
    CHECK(prompt_blocks_text(tb, strlen(tb), 64, bb, 16, &nbb) == b.tokens, "server counts b");
    CHECK(na == 4 && nbb == 5, "full chunks only");
    CHECK(ba[0] == bb[0] && ba[1] == bb[1] && ba[2] == bb[2] && ba[3] != bb[3],
          "text: ids equal for the shared blocks, then differ");
    char *tc = prompt_render(&c, PROMPT_TEXT, NULL);
    uint64_t bc[16];
    uint32_t nc;
    prompt_blocks_text(tc, strlen(tc), 64, bc, 16, &nc);
    CHECK(bc[0] != ba[0], "another session tree shares nothing");
    uint64_t bi[16];
    uint32_t ni;
    CHECK(prompt_blocks_ids(vals, (size_t)b.tokens, 64, bi, 2, &ni) == b.tokens && ni == 5,
          "ids: count, capped output");
    /* Whitespace variations do not change text ids. */
    uint64_t bw[4];
    uint32_t nw;
    const char *s1 = " a b  c\n d";
    const char *s2 = "a\tb c d ";
    uint64_t bw2[4];
    uint32_t nw2;
    prompt_blocks_text(s1, strlen(s1), 2, bw, 4, &nw);
    prompt_blocks_text(s2, strlen(s2), 2, bw2, 4, &nw2);
    CHECK(nw == 2 && nw2 == 2 && bw[0] == bw2[0] && bw[1] == bw2[1], "words, not spacing");

    free(t);
    free(tb);
    free(tc);
    free(ids);
    free(arr);
    free(vals);
    return test_report();
}
