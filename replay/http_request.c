/* http_request.c: the live target's requests: URLs and headers, and a
 * call's JSON body around its synthesized prompt (prompt.h), sent whole
 * when short or generated as curl sends it (http_internal.h).
 *
 * Long bodies are produced by CURLOPT_READFUNCTION as curl sends them
 * (Transfer-Encoding: chunked, so nothing is computed before the send
 * starts): the JSON head, the prompt from prompt_gen_read, the JSON tail.
 */
#include "replay/http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/hash.h"
#include "traces/base/mem.h"

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
    struct prompt_spec ps = {
        .session_salt = hash_mix(t->cfg.seed, c->session_key),
        .call_salt = hash_mix(t->cfg.seed ^ 0x63616c6cull, c->id),
        .scope = 0,
        .blocks = c->blocks,
        .n_blocks = c->n_blocks,
        .block_size = c->trace_block_size,
        .tokens = c->prompt_tokens,
    };
    prompt_gen_init(&x->gen, &ps, t->cfg.prompt_mode);
    int tokens = t->cfg.prompt_mode == PROMPT_TOKENS;
    if (t->cfg.endpoint == HTTP_EP_CHAT)
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
    if (c->prompt_tokens * 10 + (int64_t)(x->head_len + x->tail_len) <= SHORT_BODY) {
        /* A short body goes whole, in the same packet as the headers, and
         * spares curl's 16 KiB upload buffer; it is freed as soon as the
         * answer begins. */
        size_t cap = (size_t)c->prompt_tokens * 10 + x->head_len + x->tail_len + 1, k = 0, r;
        x->body = xmalloc(cap);
        memcpy(x->body, x->head, x->head_len);
        k = x->head_len;
        while ((r = prompt_gen_read(&x->gen, x->body + k, cap - k - x->tail_len)) > 0)
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
    if (x->head_off < x->head_len) {
        size_t c = x->head_len - x->head_off;
        if (c > n)
            c = n;
        memcpy(buf, x->head + x->head_off, c);
        x->head_off += c;
        k += c;
    }
    if (k < n && x->head_off == x->head_len)
        k += prompt_gen_read(&x->gen, buf + k, n - k);
    if (k < n && x->gen.next >= x->gen.spec.tokens && x->gen.pend_off >= x->gen.pend_len &&
        x->tail_off < x->tail_len) {
        size_t c = x->tail_len - x->tail_off;
        if (c > n - k)
            c = n - k;
        memcpy(buf + k, x->tail + x->tail_off, c);
        x->tail_off += c;
        k += c;
    }
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
    prompt_gen_init(&x->gen, &spec, x->gen.mode);
    x->head_off = 0;
    x->tail_off = 0;
    return CURL_SEEKFUNC_OK;
}
