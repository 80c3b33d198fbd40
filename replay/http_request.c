/* http_request.c: the live target's requests: URLs and headers, and a
 * call's JSON body around its synthesized prompt (prompt.h), sent whole
 * when short or generated as curl sends it (http_internal.h).
 *
 * Long bodies are produced by CURLOPT_READFUNCTION as curl sends them
 * (Transfer-Encoding: chunked, so nothing is computed before the send
 * starts): the JSON head, the prompt from prompt_gen_read, the JSON tail.
 * A call with a chat structure (the agentx rules: target.h msgs) becomes
 * its messages, as AIPerf sends them (aiperf/workers/worker.py): each a
 * role and its tokens (the chain's blocks, then the synthetic tail, in
 * order), the cache-bust marker one word at the start of the first user
 * message (aiperf/timing/strategies/cache_bust.py).
 */
#include "replay/http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/hash.h"
#include "traces/base/mem.h"
#include "traces/plan.h"

static const char *role_name(uint8_t r)
{
    return r == PLAN_ROLE_SYSTEM ? "system" : r == PLAN_ROLE_ASSISTANT ? "assistant" : "user";
}

/* Message m's role (a call without messages: one user message). */
static uint8_t msg_role(const struct target_call *c, uint32_t m)
{
    return c->n_msgs ? c->msgs[m].role : PLAN_ROLE_USER;
}

/* The token where message m ends, given where the one before ended (the
 * last one takes what is left). */
static int64_t msg_end(const struct http_xfer *x, uint32_t m, int64_t start)
{
    const struct target_call *c = x->c;
    if (!c->n_msgs || m + 1 >= c->n_msgs)
        return x->prompt_total;
    int64_t end = start + (c->msgs[m].tokens > 0 ? c->msgs[m].tokens : 0);
    return end < x->prompt_total ? end : x->prompt_total;
}

/* The marker word, when message m is the first user message. */
static size_t marker_text(const struct http_xfer *x, uint32_t m, char *out, size_t n)
{
    const struct target_call *c = x->c;
    if (!c->marker || msg_role(c, m) != PLAN_ROLE_USER)
        return 0;
    for (uint32_t i = 0; i < m; i++)
        if (msg_role(c, i) == PLAN_ROLE_USER)
            return 0;
    return (size_t)snprintf(out, n, "[rid:%012llx]\\n\\n",
                            (unsigned long long)(c->marker & 0xffffffffffffull));
}

/* Starts message m: its opening (after the previous one's closing) and
 * marker go to the pending text; its tokens end at msg_end. */
static void msg_open(struct http_xfer *x, uint32_t m)
{
    x->msg = m;
    size_t k = 0;
    if (m > 0)
        k += (size_t)snprintf(x->sep + k, sizeof x->sep - k, "\"},");
    k += (size_t)snprintf(x->sep + k, sizeof x->sep - k, "{\"role\":\"%s\",\"content\":\"",
                          role_name(msg_role(x->c, m)));
    k += marker_text(x, m, x->sep + k, sizeof x->sep - k);
    x->sep_len = k;
    x->sep_off = 0;
    x->msg_tok_end = msg_end(x, m, m ? x->msg_tok_end : 0);
    x->gen.spec.tokens = x->msg_tok_end;
}

static uint32_t n_messages(const struct target_call *c) { return c->n_msgs ? c->n_msgs : 1; }

/* Copies what is left of src[*off .. len) into dst (room bytes at most),
 * advancing *off; returns the bytes copied. */
static size_t copy_rest(char *dst, size_t room, const char *src, size_t len, size_t *off)
{
    size_t c = len - *off;
    if (c > room)
        c = room;
    memcpy(dst, src + *off, c);
    *off += c;
    return c;
}

/* The prompt part of the body: the generator's text, with the messages'
 * boundaries written in between (chat structure). 0 at its end. */
static size_t content_read(struct http_xfer *x, char *buf, size_t n)
{
    if (!x->chat_msgs)
        return prompt_gen_read(&x->gen, buf, n);
    size_t k = 0;
    while (k < n) {
        if (x->sep_off < x->sep_len) {
            k += copy_rest(buf + k, n - k, x->sep, x->sep_len, &x->sep_off);
            continue;
        }
        size_t r = prompt_gen_read(&x->gen, buf + k, n - k);
        k += r;
        if (r || k == n)
            continue;
        if (x->msg + 1 >= n_messages(x->c))
            break;
        msg_open(x, x->msg + 1);
    }
    return k;
}

static bool content_done(const struct http_xfer *x)
{
    bool gen_done = x->gen.next >= x->gen.spec.tokens && x->gen.pend_off >= x->gen.pend_len;
    if (!x->chat_msgs)
        return gen_done;
    return gen_done && x->sep_off >= x->sep_len && x->msg + 1 >= n_messages(x->c);
}

void http_url_join(char *out, size_t n, const char *base, const char *path)
{
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/')
        bl--;
    /* A base that already ends in /v1 keeps it once. */
    if (bl >= 3 && !strncmp(base + bl - 3, "/v1", 3) && !strncmp(path, "/v1", 3))
        path += 3;
    snprintf(out, n, "%.*s%s", (int)bl, base, path);
}

struct curl_slist *http_request_headers(const struct http_target_config *cfg)
{
    struct curl_slist *hl = NULL;
    hl = curl_slist_append(hl, "Content-Type: application/json");
    hl = curl_slist_append(hl, "Accept: text/event-stream");
    hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
    if (cfg->api_key[0]) {
        char line[300];
        snprintf(line, sizeof line, "Authorization: Bearer %s", cfg->api_key);
        hl = curl_slist_append(hl, line);
    }
    return hl;
}

void http_request_init(struct http_target *t, struct http_xfer *x)
{
    struct target_call *c = x->c;
    /* The chat structure of the agentx rules: messages, and the marker as
     * one word of its own instead of the first tokens. */
    x->chat_msgs = t->cfg.endpoint == HTTP_EP_CHAT && t->cfg.prompt_mode == PROMPT_TEXT &&
                   (c->n_msgs || c->marker);
    x->prompt_total = c->prompt_tokens - (x->chat_msgs && c->marker ? 1 : 0);
    if (x->prompt_total < 0)
        x->prompt_total = 0;
    struct prompt_spec ps = {
        .session_salt = hash_mix(t->cfg.seed, c->session_key),
        .call_salt = hash_mix(t->cfg.seed ^ 0x63616c6cull, c->id),
        .scope = 0,
        .blocks = c->blocks,
        .n_blocks = c->n_blocks,
        .block_size = c->trace_block_size,
        .tokens = x->prompt_total,
        .unmarked = x->chat_msgs,
    };
    prompt_gen_init(&x->gen, &ps, t->cfg.prompt_mode);
    int tokens = t->cfg.prompt_mode == PROMPT_TOKENS;
    if (x->chat_msgs) {
        x->head_len = (size_t)snprintf(x->head, sizeof x->head, "{\"model\":%s,\"messages\":[",
                                       t->model_json);
        msg_open(x, 0);
    } else if (t->cfg.endpoint == HTTP_EP_CHAT)
        x->head_len = (size_t)snprintf(x->head, sizeof x->head,
                                       "{\"model\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"",
                                       t->model_json);
    else
        x->head_len = (size_t)snprintf(x->head, sizeof x->head, "{\"model\":%s,\"prompt\":%s",
                                       t->model_json, tokens ? "[" : "\"");
    x->tail_len = (size_t)snprintf(
        x->tail, sizeof x->tail,
        "%s,\"max_tokens\":%lld,%s\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"temperature\":0}",
        t->cfg.endpoint == HTTP_EP_CHAT ? "\"}]" : tokens ? "]" : "\"", (long long)c->max_tokens,
        c->ignore_eos ? "\"ignore_eos\":true," : "");
}

void http_request_attach(struct http_target *t, struct http_xfer *x)
{
    struct target_call *c = x->c;
    int64_t seps = x->chat_msgs ? (int64_t)n_messages(c) * (int64_t)sizeof x->sep : 0;
    if (c->prompt_tokens * 10 + seps + (int64_t)(x->head_len + x->tail_len) <= SHORT_BODY) {
        /* A short body goes whole, in the same packet as the headers, and
         * spares curl's 16 KiB upload buffer; it is freed as soon as the
         * answer begins. */
        size_t cap = (size_t)(c->prompt_tokens * 10 + seps) + x->head_len + x->tail_len + 1, k = 0, r;
        x->body = xmalloc(cap);
        memcpy(x->body, x->head, x->head_len);
        k = x->head_len;
        while ((r = content_read(x, x->body + k, cap - k - x->tail_len)) > 0)
            k += r;
        memcpy(x->body + k, x->tail, x->tail_len);
        k += x->tail_len;
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)k);
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->body);
        t->counts.bytes_sent += k;
    } else {
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)-1);
        /* No length: curl sends the body chunked as http_request_read
         * produces it, so a long prompt costs nothing before the send
         * starts and is never held whole. */
    }
}

void http_request_answered(struct http_xfer *x)
{
    if (x->body) {
        /* The whole request was sent and answered: curl no longer needs
         * it (no rewind once the response has begun). */
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, "");
        free(x->body);
        x->body = NULL;
    }
}

size_t http_request_read(char *buf, size_t size, size_t nitems, void *userp)
{
    struct http_xfer *x = userp;
    size_t n = size * nitems, k = 0;
    if (x->head_off < x->head_len)
        k += copy_rest(buf, n, x->head, x->head_len, &x->head_off);
    if (k < n && x->head_off == x->head_len)
        k += content_read(x, buf + k, n - k);
    if (k < n && content_done(x) && x->tail_off < x->tail_len)
        k += copy_rest(buf + k, n - k, x->tail, x->tail_len, &x->tail_off);
    x->t->counts.bytes_sent += k;
    return k;
}

/* Rewinds a streamed body to its start: curl asks when it resends a request
 * whose reused connection turned out closed (a server restarted between
 * calls); without it the call fails with "necessary data rewind wasn't
 * possible" although the server is up. */
int http_request_seek(void *userp, curl_off_t off, int origin)
{
    struct http_xfer *x = userp;
    if (off != 0 || origin != SEEK_SET)
        return CURL_SEEKFUNC_CANTSEEK;
    struct prompt_spec spec = x->gen.spec;
    spec.tokens = x->prompt_total;
    prompt_gen_init(&x->gen, &spec, x->gen.mode);
    if (x->chat_msgs)
        msg_open(x, 0);
    x->head_off = 0;
    x->tail_off = 0;
    return CURL_SEEKFUNC_OK;
}
