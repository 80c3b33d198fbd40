/* openai_tokenize.c: POST /tokenize and /detokenize with the server's own
 * word tokenizer, in vLLM's request and answer shapes
 * (vllm/entrypoints/serve/tokenize/protocol.py:23-206, serving.py:57-160).
 *
 * The server counts one token per word, words being separated by space,
 * tab, CR or LF (traces/prompt.c prompt_blocks_text, the count every
 * prompt gets), and /tokenize counts with that very function, so its
 * "count" is what a completion's usage.prompt_tokens will say. Ids: 0 is
 * "<|endoftext|>", 1 "unk" (any word outside the vocabulary), then the
 * 256 words of the prompt vocabulary (traces/prompt.c) as 2..257, the
 * vocabulary tests/conformance/peers/make_tokenizer.py gives the peers'
 * local tokenizer. /detokenize joins the ids' words with single spaces
 * (ids past the vocabulary read as "unk"), so every id is one word again:
 * count(detokenize(ids)) == len(ids). The chat form of /tokenize counts
 * the messages' contents joined by spaces, as completions do. Answers are
 * written as text (no JSON tree), so a 64 MiB prompt costs its answer's
 * size and no more. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/server/openai_internal.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"
#include "traces/prompt.h"

#define TOK_EOS 0
#define TOK_UNK 1
#define TOK_FIRST_WORD 2
#define TOK_VOCAB (TOK_FIRST_WORD + PROMPT_VOCAB)

/* Word -> id: an open-addressed table of the vocabulary (512 slots). */
static struct {
    int ready;
    uint16_t slot[512]; /* id + 1, 0 empty */
} tab;

static const char *word_of(int id, size_t *len)
{
    if (id == TOK_EOS) {
        *len = 13;
        return "<|endoftext|>";
    }
    if (id < TOK_FIRST_WORD || id >= TOK_VOCAB) {
        *len = 3;
        return "unk";
    }
    const char *w = prompt_word((uint32_t)(id - TOK_FIRST_WORD), len);
    (*len)--; /* without its leading space */
    return w + 1;
}

static void tab_init(void)
{
    if (tab.ready)
        return;
    for (int id = 0; id < TOK_VOCAB; id++) {
        size_t n;
        const char *w = word_of(id, &n);
        uint32_t h = (uint32_t)hash64(w, n, 0x746f6bull) & 511;
        while (tab.slot[h])
            h = (h + 1) & 511;
        tab.slot[h] = (uint16_t)(id + 1);
    }
    tab.ready = 1;
}

static int word_id(const char *w, size_t n)
{
    uint32_t h = (uint32_t)hash64(w, n, 0x746f6bull) & 511;
    for (; tab.slot[h]; h = (h + 1) & 511) {
        size_t wl;
        const char *v = word_of(tab.slot[h] - 1, &wl);
        if (wl == n && !memcmp(v, w, n))
            return tab.slot[h] - 1;
    }
    return TOK_UNK;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* A JSON string of n bytes (words contain no control characters that
 * matter to the server, but any byte may come from a client). */
static void put_json_str(struct openai_buf *o, const char *s, size_t n)
{
    openai_buf_put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"' || ch == '\\') {
            e[0] = '\\';
            e[1] = (char)ch;
            openai_buf_put(o, e, 2);
        } else if (ch < 0x20) {
            int k = snprintf(e, sizeof e, "\\u%04x", ch);
            openai_buf_put(o, e, (size_t)k);
        } else {
            openai_buf_put(o, (const char *)&s[i], 1);
        }
    }
    openai_buf_put(o, "\"", 1);
}

void openai_handle_tokenize(struct openai_server *s, struct httpd_conn *c,
                            const struct httpd_request *r)
{
    json_t *req = openai_load_request(s, c, r, "tokenize");
    if (!req)
        return;
    struct openai_bad bad;
    int chat = json_object_get(req, "messages") != NULL;
    int strs = openai_req_bool(req, "return_token_strs", 0);
    size_t len;
    char *text = openai_req_text(req, chat, &len, &bad);
    json_decref(req);
    if (!text) {
        openai_respond_bad(c, &bad);
        return;
    }
    tab_init();
    uint32_t nb;
    int64_t count = prompt_blocks_text(text, len, 0, NULL, 0, &nb);
    struct openai_buf o = {0};
    char num[64];
    int k = snprintf(num, sizeof num, "{\"count\":%lld,\"max_model_len\":%lld,\"tokens\":[",
                     (long long)count, (long long)s->max_model_len);
    openai_buf_put(&o, num, (size_t)k);
    /* Ids, then (when asked) the words as they came. */
    for (int pass = 0; pass < 1 + strs; pass++) {
        if (pass)
            openai_buf_put(&o, "],\"token_strs\":[", 16);
        int64_t seen = 0;
        size_t i = 0;
        while (i < len) {
            while (i < len && is_space(text[i]))
                i++;
            size_t b = i;
            while (i < len && !is_space(text[i]))
                i++;
            if (i == b)
                break;
            if (seen++)
                openai_buf_put(&o, ",", 1);
            if (pass) {
                put_json_str(&o, text + b, i - b);
            } else {
                k = snprintf(num, sizeof num, "%d", word_id(text + b, i - b));
                openai_buf_put(&o, num, (size_t)k);
            }
        }
        ASSERT(seen == count);
    }
    openai_buf_put(&o, strs ? "]}" : "],\"token_strs\":null}", strs ? 2 : 20);
    httpd_respond(c, 200, "application/json", o.p, o.len);
    free(o.p);
    free(text);
}

void openai_handle_detokenize(struct openai_server *s, struct httpd_conn *c,
                              const struct httpd_request *r)
{
    json_t *req = openai_load_request(s, c, r, "detokenize");
    if (!req)
        return;
    json_t *ids = json_object_get(req, "tokens");
    struct openai_buf o = {0};
    openai_buf_put(&o, "{\"prompt\":\"", 11);
    for (size_t i = 0; i < json_array_size(ids); i++) {
        int64_t id = TOK_UNK;
        openai_req_intval(json_array_get(ids, i), &id); /* checked: an integer >= 0 */
        size_t wl;
        const char *w = word_of(id < 0 || id >= TOK_VOCAB ? TOK_UNK : (int)id, &wl);
        if (i)
            openai_buf_put(&o, " ", 1);
        openai_buf_put(&o, w, wl);
    }
    openai_buf_put(&o, "\"}", 2);
    json_decref(req);
    httpd_respond(c, 200, "application/json", o.p, o.len);
    free(o.p);
}
