/* http_target.c: a live OpenAI-compatible endpoint as a target, on
 * libcurl's multi socket API and the loop (see http_target.h).
 *
 * Integration: curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION
 * -> one struct loop_io per socket) and when to call it back
 * (CURLMOPT_TIMERFUNCTION -> one loop timer); both call
 * curl_multi_socket_action and then collect finished transfers. Easy
 * handles are pooled and reused; connections live in the multi handle's
 * cache, so calls reuse keep-alive connections.
 *
 * Memory per call in flight: the easy handle (curl's receive buffer is cut
 * to 1 KiB, except on the first BIG_RECV_HANDLES handles, see easy_get;
 * its upload buffer, 16 KiB at the least, exists only for long bodies), the SSE parser's buffer (the largest event) and this file's
 * struct hcall (about 2 KiB). 10,000 streams of 1k-token prompts: 260 MB
 * resident before short bodies were sent whole.
 * Long request bodies are produced by CURLOPT_READFUNCTION as curl sends
 * them (Transfer-Encoding: chunked, so nothing is computed before the send
 * starts): a JSON head, the prompt from prompt_gen_read, a JSON tail.
 */
#define _GNU_SOURCE /* memmem */
#include "replay/http_target.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/sse.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/hash.h"
#include "traces/base/time_ns.h"

#define SSE_MAX_EVENT (1u << 20)
#define GET_MAX_BODY (4u << 20)
#define SHORT_BODY (32 * 1024) /* bodies up to this are sent whole */
/* Receive buffers: curl reads at most its buffer per recv(2), and libcurl
 * 7.88 polls the socket after each read, so a 16-token answer (~3.5 KB)
 * sent in one packet cost 4 recvfrom + 5 poll with 1 KiB, 1 + 2 with
 * 16 KiB. Big buffers on the first 256 handles only (4 MiB), small ones
 * beyond, so 10,000 streams stay small. */
#define BIG_RECV_BUF 16384L
#define SMALL_RECV_BUF 1024L
#define BIG_RECV_HANDLES 256

struct http_target;

enum hkind { HK_CALL = 0, HK_GET = 1 };

struct hcall {
    enum hkind kind;
    struct http_target *t;
    struct target_call *c;    /* HK_CALL */
    CURL *easy;
    /* Body. */
    struct prompt_gen gen;
    char head[512];
    size_t head_len, head_off;
    char tail[512];
    size_t tail_len, tail_off;
    /* Response. */
    struct sse sse;
    int64_t chunks;           /* content chunks received */
    int64_t held_t_ns;        /* time of the held (last) chunk, -1 none */
    int64_t delivered;        /* tokens delivered */
    int got_done;             /* [DONE] seen */
    int got_usage;
    int failed;               /* a malformed stream or an error event */
    char fail_msg[128];
    int64_t last_byte_ns;
    struct loop_timer read_timer;
    char curl_err[CURL_ERROR_SIZE];
    char *body;               /* a short body, whole (see http_submit) */
    int big;                  /* easy has a big receive buffer */
    /* The last content event Jansson parsed, as a template (see
     * tpl_match): bytes [0, tpl_pre) and [tpl_suf, tpl_len) are the fixed
     * parts around its content string. NULL: none. */
    struct http_tpl tpl;
    /* HK_GET */
    http_get_cb get_cb;
    void *get_arg;
    char *gbuf;
    size_t glen, gcap;
    struct hcall *prev, *next; /* calls in flight */
};

struct sockw {
    struct loop_io io;
    struct http_target *t;
};

struct http_target {
    struct target base;
    struct http_target_config cfg;
    CURLM *multi;
    struct curl_slist *headers;
    char model_json[300];     /* the model name as a JSON string */
    char url_call[640];
    struct loop_timer timer;
    CURL **pool;              /* idle call handles, small receive buffer */
    size_t pool_n, pool_cap;
    CURL **bpool;             /* idle call handles, big receive buffer */
    size_t bpool_n;
    size_t big_made;          /* handles made with a big buffer (at most
                                 BIG_RECV_HANDLES) */
    struct hcall *live;
    int64_t running;
    struct target_stats st;
    struct http_target_counts counts;
    int in_action;            /* inside curl_multi_socket_action */
    struct http_shape_set shapes; /* event shapes seen (see http_target.h) */
    int hold;                 /* http_target_hold() was called */
};

void http_target_config_defaults(struct http_target_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->url, sizeof c->url, "http://127.0.0.1:8000");
    c->endpoint = HTTP_EP_CHAT;
    c->prompt_mode = PROMPT_TEXT;
    c->connect_timeout_ns = 10 * NS_PER_S;
    c->read_timeout_ns = 600 * NS_PER_S;
    c->seed = 1;
    c->max_connections = 16384;
}

static void check_done(struct http_target *t);

/* ---- curl <-> loop ---- */

static void sock_cb_loop(struct loop *l, struct loop_io *io, int revents)
{
    struct sockw *w = io->arg;
    struct http_target *t = w->t;
    int flags = (revents & LOOP_READ ? CURL_CSELECT_IN : 0) | (revents & LOOP_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    t->in_action++;
    curl_multi_socket_action(t->multi, io->fd, flags, &running);
    t->in_action--;
    check_done(t);
}

static int socket_fn(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct http_target *t = userp;
    struct sockw *w = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (w) {
            loop_io_stop(t->base.loop, &w->io);
            free(w);
            curl_multi_assign(t->multi, s, NULL);
        }
        return 0;
    }
    if (!w) {
        w = xcalloc(1, sizeof *w);
        w->t = t;
        w->io.fd = s;
        w->io.cb = sock_cb_loop;
        w->io.arg = w;
        curl_multi_assign(t->multi, s, w);
    }
    w->io.events = (what & CURL_POLL_IN ? LOOP_READ : 0) | (what & CURL_POLL_OUT ? LOOP_WRITE : 0);
    loop_io_start(t->base.loop, &w->io);
    return 0;
}

static void timer_cb_loop(struct loop *l, struct loop_timer *tm)
{
    struct http_target *t = tm->arg;
    int running;
    t->in_action++;
    curl_multi_socket_action(t->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    t->in_action--;
    check_done(t);
}

static int timer_fn(CURLM *m, long timeout_ms, void *userp)
{
    struct http_target *t = userp;
    if (timeout_ms < 0) {
        loop_cancel(t->base.loop, &t->timer);
        return 0;
    }
    loop_at(t->base.loop, &t->timer, loop_now(t->base.loop) + (int64_t)timeout_ms * NS_PER_MS,
            timer_cb_loop, t);
    return 0;
}

/* ---- per call ---- */

static size_t read_fn(char *buf, size_t size, size_t nitems, void *userp)
{
    struct hcall *h = userp;
    size_t n = size * nitems, k = 0;
    if (h->head_off < h->head_len) {
        size_t c = h->head_len - h->head_off;
        if (c > n)
            c = n;
        memcpy(buf, h->head + h->head_off, c);
        h->head_off += c;
        k += c;
    }
    if (k < n && h->head_off == h->head_len)
        k += prompt_gen_read(&h->gen, buf + k, n - k);
    if (k < n && h->gen.next >= h->gen.spec.tokens && h->gen.pend_off >= h->gen.pend_len &&
        h->tail_off < h->tail_len) {
        size_t c = h->tail_len - h->tail_off;
        if (c > n - k)
            c = n - k;
        memcpy(buf + k, h->tail + h->tail_off, c);
        h->tail_off += c;
        k += c;
    }
    h->t->counts.bytes_sent += k;
    return k;
}

/* Rewinds a streamed body to its start: curl asks when it resends a request
 * whose reused connection turned out closed (a server restarted between
 * calls); without it the call fails with "necessary data rewind wasn't
 * possible" although the server is up. */
static int seek_fn(void *userp, curl_off_t off, int origin)
{
    struct hcall *h = userp;
    if (off != 0 || origin != SEEK_SET)
        return CURL_SEEKFUNC_CANTSEEK;
    struct prompt_spec spec = h->gen.spec;
    prompt_gen_init(&h->gen, &spec, h->gen.mode);
    h->head_off = 0;
    h->tail_off = 0;
    return CURL_SEEKFUNC_OK;
}

static void deliver_held(struct hcall *h, int64_t tokens)
{
    if (h->held_t_ns < 0)
        return;
    struct target_call *c = h->c;
    if (tokens < 1)
        tokens = 1;
    h->delivered += tokens;
    h->t->st.output_tokens += tokens;
    c->cb->chunk(c, h->held_t_ns, tokens);
    h->held_t_ns = -1;
}

static void fail(struct hcall *h, const char *fmt, const char *detail)
{
    if (h->failed)
        return;
    h->failed = 1;
    snprintf(h->fail_msg, sizeof h->fail_msg, fmt, detail);
}

/* ---- content-event templates ----
 *
 * A streamed answer is mostly content events that differ from each other
 * only in the content string (OpenAI-compatible servers repeat the id,
 * model, index and finish_reason in every chunk). Parsing each with Jansson
 * cost about 35,000 instructions an event (most of the load generator's CPU
 * per call); so once Jansson has parsed a content event that carries no
 * usage and no error, that event is kept as a template: the bytes before
 * and after the unique `:"CONTENT"` in it. A later event of the form
 * prefix + S + suffix, where S is a non-empty JSON string body that needs
 * no escapes (no quote, backslash or control character; valid UTF-8), is
 * the same JSON document with one string value replaced by another: it
 * parses, has the same keys and structure, carries no usage and no error,
 * and its content is non-empty (S itself, or the template's own when the
 * replaced value lies elsewhere). Anything else goes to Jansson. */

/* 1 if s[0..n) is a JSON string body as is: no quote, backslash or control
 * character, valid UTF-8 (no overlong forms, surrogates or code points
 * above U+10FFFF), as Jansson's decoder requires. */
static int plain_json_string(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c < 0x20 || c == '"' || c == '\\')
                return 0;
            i++;
            continue;
        }
        size_t k;
        unsigned v;
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
            v = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            v = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            v = c & 0x07;
        } else {
            return 0;
        }
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if ((d & 0xc0) != 0x80)
                return 0;
            v = (v << 6) | (d & 0x3f);
        }
        if ((k == 2 && v < 0x800) || (k == 3 && (v < 0x10000 || v > 0x10ffff)) ||
            (v >= 0xd800 && v <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

int http_tpl_match(const struct http_tpl *t, const char *data, size_t n)
{
    if (!t->buf)
        return 0;
    size_t suf = t->len - t->suf;
    if (n <= t->pre + suf)
        return 0;
    if (memcmp(data, t->buf, t->pre) || memcmp(data + n - suf, t->buf + t->suf, suf))
        return 0;
    return plain_json_string((const unsigned char *)data + t->pre, n - t->pre - suf);
}

void http_tpl_free(struct http_tpl *t)
{
    free(t->buf);
    memset(t, 0, sizeof *t);
}

int http_tpl_learn(struct http_tpl *t, const char *data, size_t n, const char *content, size_t clen)
{
    http_tpl_free(t);
    if (!clen || clen + 3 > n || !plain_json_string((const unsigned char *)content, clen))
        return 0;
    const char *found = NULL, *p = data, *end = data + n;
    while (p + clen + 3 <= end) {
        const char *q = memmem(p, (size_t)(end - p), content, clen);
        if (!q)
            break;
        if (q - data >= 2 && q[-1] == '"' && q[-2] == ':' && q + clen < end && q[clen] == '"') {
            if (found)
                return 0; /* twice: ambiguous */
            found = q;
        }
        p = q + 1;
    }
    if (!found)
        return 0;
    t->buf = xmalloc(n);
    memcpy(t->buf, data, n);
    t->pre = (size_t)(found - data);
    t->suf = t->pre + clen;
    t->len = n;
    return 1;
}

/* ---- event shapes (see http_target.h) ---- */

enum { SHR_OTHER = 0, SHR_CONTENT, SHR_PROMPT, SHR_COMPLETION, SHR_CACHED };

void http_event_of(const void *json, int chat, struct http_event *ev)
{
    json_t *j = (json_t *)json;
    memset(ev, 0, sizeof *ev);
    ev->prompt_tokens = ev->completion_tokens = ev->cached_tokens = -1;
    json_t *choices = json_object_get(j, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (ch) {
        json_t *content = chat ? json_object_get(json_object_get(ch, "delta"), "content")
                               : json_object_get(ch, "text");
        ev->content = json_is_string(content) && json_string_length(content) > 0;
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        ev->usage = 1;
        json_t *pt = json_object_get(usage, "prompt_tokens");
        json_t *ct = json_object_get(usage, "completion_tokens");
        json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(pt))
            ev->prompt_tokens = json_integer_value(pt);
        if (json_is_integer(ct))
            ev->completion_tokens = json_integer_value(ct);
        if (json_is_integer(cached))
            ev->cached_tokens = json_integer_value(cached);
    }
}

/* The one place `key` (a quoted key and colon) occurs in ev[0..n): its
 * value's offset in *at; 0 if absent, 1 if once, 2 if more. */
static int find_key(const char *ev, size_t n, const char *key, size_t *at)
{
    size_t kl = strlen(key);
    int found = 0;
    const char *p = ev, *end = ev + n;
    while (p < end) {
        const char *q = memmem(p, (size_t)(end - p), key, kl);
        if (!q)
            break;
        if (found++)
            return 2;
        *at = (size_t)(q - ev) + kl;
        p = q + 1;
    }
    return found;
}

/* Digits at ev[at..n) as JSON writes a non-negative integer that fits in
 * 18 digits; their count, or 0. */
static size_t int_digits(const char *ev, size_t n, size_t at, int64_t *v)
{
    size_t k = 0;
    int64_t x = 0;
    while (at + k < n && ev[at + k] >= '0' && ev[at + k] <= '9') {
        if (k == 18)
            return 0;
        x = x * 10 + (ev[at + k] - '0');
        k++;
    }
    if (k > 1 && ev[at] == '0')
        return 0;
    *v = x;
    return k;
}

/* Adds a hole for the value after `key` to sh. want: the value Jansson
 * read at the key's path (NULL: the key is not a role's, any value);
 * returns 0 when fine (hole added, or none needed), -1 to give up. */
static int shape_hole(struct http_shape *sh, const char *ev, size_t n, const char *key, int is_int,
                      int role, json_t *want)
{
    size_t at = 0;
    int f = find_key(ev, n, key, &at);
    if (role != SHR_OTHER) {
        /* A role's key must be exactly where Jansson read the value, or
         * nowhere when there is none. */
        if (!want)
            return f == 0 ? 0 : -1;
        if (f != 1)
            return -1;
    } else if (f != 1) {
        return 0; /* absent or repeated: stays fixed */
    }
    size_t end;
    if (is_int) {
        int64_t v;
        size_t k = int_digits(ev, n, at, &v);
        if (!k)
            return role != SHR_OTHER ? -1 : 0;
        if (want && (!json_is_integer(want) || json_integer_value(want) != v))
            return -1;
        end = at + k;
    } else {
        const char *q = memchr(ev + at, '"', n - at);
        if (!q)
            return -1;
        end = (size_t)(q - ev);
        if (!plain_json_string((const unsigned char *)ev + at, end - at))
            return -1;
        if (want && (!json_is_string(want) || json_string_length(want) != end - at ||
                     memcmp(json_string_value(want), ev + at, end - at)))
            return -1;
    }
    if (sh->n_holes == HTTP_SHAPE_HOLES)
        return -1;
    sh->hole[sh->n_holes].at = at;
    sh->hole[sh->n_holes].end = end;
    sh->hole[sh->n_holes].is_int = (unsigned char)is_int;
    sh->hole[sh->n_holes].role = (unsigned char)role;
    sh->n_holes++;
    return 0;
}

static void shape_free(struct http_shape *sh)
{
    free(sh->buf);
    memset(sh, 0, sizeof *sh);
}

int http_shape_learn(struct http_shape_set *set, const char *ev, size_t n, const void *json, int chat)
{
    json_t *j = (json_t *)json;
    if (!json_is_object(j) || json_object_get(j, "error") || memchr(ev, '\\', n))
        return 0;
    struct http_shape sh;
    memset(&sh, 0, sizeof sh);
    json_t *choices = json_object_get(j, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    json_t *content = !ch ? NULL : chat ? json_object_get(json_object_get(ch, "delta"), "content")
                                        : json_object_get(ch, "text");
    json_t *usage = json_object_get(j, "usage");
    json_t *u = json_is_object(usage) ? usage : NULL;
    json_t *id = json_object_get(j, "id");
    json_t *created = json_object_get(j, "created");
    if (shape_hole(&sh, ev, n, "\"id\":\"", 0, SHR_OTHER, json_is_string(id) ? id : NULL) ||
        shape_hole(&sh, ev, n, "\"created\":", 1, SHR_OTHER, json_is_integer(created) ? created : NULL) ||
        shape_hole(&sh, ev, n, chat ? "\"content\":\"" : "\"text\":\"", 0, SHR_CONTENT,
                   json_is_string(content) ? content : NULL) ||
        shape_hole(&sh, ev, n, "\"prompt_tokens\":", 1, SHR_PROMPT,
                   u ? json_object_get(u, "prompt_tokens") : NULL) ||
        shape_hole(&sh, ev, n, "\"completion_tokens\":", 1, SHR_COMPLETION,
                   u ? json_object_get(u, "completion_tokens") : NULL) ||
        shape_hole(&sh, ev, n, "\"total_tokens\":", 1, SHR_OTHER, NULL) ||
        shape_hole(&sh, ev, n, "\"cached_tokens\":", 1, SHR_CACHED,
                   u ? json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")
                     : NULL))
        return 0;
    /* Holes in order of position (they never overlap: distinct values). */
    for (int a = 1; a < sh.n_holes; a++)
        for (int b = a; b > 0 && sh.hole[b].at < sh.hole[b - 1].at; b--) {
            __typeof__(sh.hole[0]) t = sh.hole[b];
            sh.hole[b] = sh.hole[b - 1];
            sh.hole[b - 1] = t;
        }
    for (int a = 1; a < sh.n_holes; a++)
        if (sh.hole[a].at < sh.hole[a - 1].end)
            return 0;
    sh.usage = u != NULL;
    sh.buf = xmalloc(n);
    memcpy(sh.buf, ev, n);
    sh.len = n;
    struct http_shape *slot = &set->s[set->next];
    set->next = (set->next + 1) % HTTP_SHAPES;
    shape_free(slot);
    *slot = sh;
    return 1;
}

static int shape_match1(const struct http_shape *sh, const char *ev, size_t n, struct http_event *out)
{
    size_t t = 0, d = 0;
    out->content = 0;
    out->usage = sh->usage;
    out->prompt_tokens = out->completion_tokens = out->cached_tokens = -1;
    for (int i = 0; i < sh->n_holes; i++) {
        size_t fixed = sh->hole[i].at - t;
        if (n - d < fixed || memcmp(ev + d, sh->buf + t, fixed))
            return 0;
        d += fixed;
        size_t k;
        int64_t v = 0;
        if (sh->hole[i].is_int) {
            k = int_digits(ev, n, d, &v);
            if (!k)
                return 0;
        } else {
            const char *q = memchr(ev + d, '"', n - d);
            if (!q)
                return 0;
            k = (size_t)(q - (ev + d));
            if (!plain_json_string((const unsigned char *)ev + d, k))
                return 0;
        }
        switch (sh->hole[i].role) {
        case SHR_CONTENT: out->content = k > 0; break;
        case SHR_PROMPT: out->prompt_tokens = v; break;
        case SHR_COMPLETION: out->completion_tokens = v; break;
        case SHR_CACHED: out->cached_tokens = v; break;
        default: break;
        }
        d += k;
        t = sh->hole[i].end;
    }
    return n - d == sh->len - t && !memcmp(ev + d, sh->buf + t, sh->len - t);
}

int http_shape_match(struct http_shape_set *set, const char *ev, size_t n, struct http_event *out)
{
    /* The shape that matched last first: content events come in runs. */
    for (int k = 0; k < HTTP_SHAPES; k++) {
        int i = (set->last + k) % HTTP_SHAPES;
        if (set->s[i].buf && shape_match1(&set->s[i], ev, n, out)) {
            set->last = i;
            return 1;
        }
    }
    return 0;
}

void http_shape_set_free(struct http_shape_set *set)
{
    for (int i = 0; i < HTTP_SHAPES; i++)
        shape_free(&set->s[i]);
    set->next = set->last = 0;
}

/* A content chunk arrived now. */
static void on_content(struct hcall *h)
{
    int64_t now = loop_now(h->t->base.loop);
    if (h->chunks == 0)
        h->c->cb->first_token(h->c, now);
    deliver_held(h, 1);
    h->held_t_ns = now;
    h->chunks++;
    h->t->counts.chunks++;
}

static int on_event(void *arg, const char *event, const char *data, size_t n)
{
    struct hcall *h = arg;
    struct target_call *c = h->c;
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        h->got_done = 1;
        return 0;
    }
    if (http_tpl_match(&h->tpl, data, n)) {
        h->t->counts.templated++;
        on_content(h);
        return 0;
    }
    int chat = h->t->cfg.endpoint == HTTP_EP_CHAT;
    struct http_event ev;
    if (http_shape_match(&h->t->shapes, data, n, &ev)) {
        h->t->counts.shaped++;
        if (ev.content)
            on_content(h);
        if (ev.usage) {
            if (ev.prompt_tokens >= 0)
                c->server_prompt_tokens = ev.prompt_tokens;
            if (ev.completion_tokens >= 0)
                c->server_output_tokens = ev.completion_tokens;
            if (ev.cached_tokens >= 0)
                c->cached_tokens = ev.cached_tokens;
            h->got_usage = 1;
        }
        return 0;
    }
    h->t->counts.parsed++;
    json_error_t je;
    json_t *j = json_loadb(data, n, 0, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        fail(h, "malformed stream: %.90s", j ? "event is not an object" : je.text);
        return 1;
    }
    json_t *err = json_object_get(j, "error");
    if (err) {
        json_t *m = json_is_object(err) ? json_object_get(err, "message") : err;
        fail(h, "error event: %.90s", json_is_string(m) ? json_string_value(m) : "(no message)");
        json_decref(j);
        return 1;
    }
    http_shape_learn(&h->t->shapes, data, n, j, chat);
    json_t *choices = json_object_get(j, "choices");
    json_t *ch = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (ch) {
        json_t *content = h->t->cfg.endpoint == HTTP_EP_CHAT
                              ? json_object_get(json_object_get(ch, "delta"), "content")
                              : json_object_get(ch, "text");
        if (json_is_string(content) && json_string_length(content) > 0) {
            on_content(h);
            if (!json_object_get(j, "usage"))
                http_tpl_learn(&h->tpl, data, n, json_string_value(content), json_string_length(content));
        }
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens");
        json_t *ct = json_object_get(usage, "completion_tokens");
        json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(pt))
            c->server_prompt_tokens = json_integer_value(pt);
        if (json_is_integer(ct))
            c->server_output_tokens = json_integer_value(ct);
        if (json_is_integer(cached))
            c->cached_tokens = json_integer_value(cached);
        h->got_usage = 1;
    }
    json_decref(j);
    return 0;
}

static size_t write_fn(char *ptr, size_t size, size_t nmemb, void *userp)
{
    struct hcall *h = userp;
    size_t n = size * nmemb;
    h->t->counts.bytes_received += n;
    h->last_byte_ns = loop_now(h->t->base.loop);
    if (h->kind == HK_GET) {
        if (h->glen + n + 1 > GET_MAX_BODY)
            return 0;
        if (h->glen + n + 1 > h->gcap) {
            h->gcap = (h->glen + n + 1) * 2;
            h->gbuf = xrealloc(h->gbuf, h->gcap);
        }
        memcpy(h->gbuf + h->glen, ptr, n);
        h->glen += n;
        h->gbuf[h->glen] = 0;
        return n;
    }
    if (h->body) {
        /* The whole request was sent and answered: curl no longer needs
         * it (no rewind once the response has begun). */
        curl_easy_setopt(h->easy, CURLOPT_POSTFIELDS, "");
        free(h->body);
        h->body = NULL;
    }
    long status = 0;
    curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
    if (status && (status < 200 || status > 299)) {
        /* Keep the start of the error body for the message. */
        if (!h->failed) {
            char msg[100];
            size_t k = n < sizeof msg - 1 ? n : sizeof msg - 1;
            memcpy(msg, ptr, k);
            msg[k] = 0;
            for (size_t i = 0; i < k; i++)
                if (msg[i] == '\n' || msg[i] == '\r')
                    msg[i] = ' ';
            fail(h, "%s", msg);
        }
        return n;
    }
    if (h->failed)
        return 0;
    int rc = sse_feed(&h->sse, ptr, n);
    if (rc == SSE_ERR_TOO_BIG)
        fail(h, "malformed stream: %s", "event over 1 MiB");
    return h->failed ? 0 : n;
}

static void read_timeout_cb(struct loop *l, struct loop_timer *tm);

static void link_call(struct http_target *t, struct hcall *h)
{
    h->next = t->live;
    h->prev = NULL;
    if (t->live)
        t->live->prev = h;
    t->live = h;
}

static void unlink_call(struct http_target *t, struct hcall *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        t->live = h->next;
    if (h->next)
        h->next->prev = h->prev;
}

/* Options every handle gets once, when created. */
static void easy_setup(struct http_target *t, CURL *e, int call, int big)
{
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_fn);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(t->cfg.connect_timeout_ns / NS_PER_MS));
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, big ? BIG_RECV_BUF : SMALL_RECV_BUF);
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 16384L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    if (call) {
        curl_easy_setopt(e, CURLOPT_URL, t->url_call);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, read_fn);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, seek_fn);
    }
}

/* Call handles are pooled with their options set (curl keeps options
 * across transfers; a reset and a dozen setopts per call cost more than
 * the few that change). GET handles (scrapes, a few a second at most) are
 * made and freed each time. */
static CURL *easy_get(struct http_target *t, int call, int *big)
{
    *big = 0;
    if (call && t->bpool_n) {
        *big = 1;
        return t->bpool[--t->bpool_n];
    }
    if (call && t->big_made < BIG_RECV_HANDLES)
        *big = 1;
    else if (call && t->pool_n)
        return t->pool[--t->pool_n];
    CURL *e = curl_easy_init();
    if (e) {
        easy_setup(t, e, call, *big);
        t->big_made += (size_t)*big;
    }
    return e;
}

static void easy_put(struct http_target *t, CURL *e, int call, int big)
{
    if (!call) {
        curl_easy_cleanup(e);
        return;
    }
    if (big) {
        if (!t->bpool)
            t->bpool = xmalloc(BIG_RECV_HANDLES * sizeof *t->bpool);
        t->bpool[t->bpool_n++] = e;
        return;
    }
    if (t->pool_n == t->pool_cap) {
        t->pool_cap = t->pool_cap ? t->pool_cap * 2 : 64;
        t->pool = xrealloc(t->pool, t->pool_cap * sizeof *t->pool);
    }
    t->pool[t->pool_n++] = e;
}

/* Per-transfer options and the read timeout. */
static void easy_common(struct http_target *t, struct hcall *h)
{
    CURL *e = h->easy;
    curl_easy_setopt(e, CURLOPT_PRIVATE, h);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h->curl_err);
    curl_easy_setopt(e, CURLOPT_READDATA, h);
    curl_easy_setopt(e, CURLOPT_SEEKDATA, h);
    h->curl_err[0] = 0;
    h->last_byte_ns = loop_now(t->base.loop);
    loop_at(t->base.loop, &h->read_timer, h->last_byte_ns + t->cfg.read_timeout_ns, read_timeout_cb, h);
}

static void call_free(struct hcall *h)
{
    http_tpl_free(&h->tpl);
    free(h->body);
    sse_free(&h->sse);
    free(h->gbuf);
    free(h);
}

/* Ends a call: takes it off curl and the live list, reports done. */
static void finish(struct http_target *t, struct hcall *h, enum target_status st, const char *msg)
{
    loop_cancel(t->base.loop, &h->read_timer);
    if (h->easy && h->kind == HK_CALL && !h->c->http_status) {
        long status = 0;
        curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
        h->c->http_status = (int)status;
    }
    if (h->easy) {
        curl_multi_remove_handle(t->multi, h->easy);
        easy_put(t, h->easy, h->kind == HK_CALL, h->big);
        h->easy = NULL;
        if (h->kind == HK_CALL)
            t->running--;
    }
    unlink_call(t, h);
    if (h->kind == HK_GET) {
        h->get_cb(h->get_arg, st == TARGET_OK ? h->c ? 0 : (int)h->delivered : 0,
                  h->gbuf ? h->gbuf : "", h->glen);
        call_free(h);
        return;
    }
    struct target_call *c = h->c;
    if (st == TARGET_OK) {
        int64_t last = 1;
        if (c->server_output_tokens > 0 && c->server_output_tokens > h->delivered)
            last = c->server_output_tokens - h->delivered;
        deliver_held(h, last);
        t->counts.ok++;
    } else {
        deliver_held(h, 1);
        snprintf(c->error, sizeof c->error, "%s", msg ? msg : target_status_name(st));
    }
    t->st.prompt_tokens += c->prompt_tokens;
    if (c->cached_tokens > 0)
        t->st.cached_tokens += c->cached_tokens;
    c->priv = NULL;
    int64_t now = loop_now(t->base.loop);
    call_free(h);
    c->cb->done(c, now, st);
}

static void read_timeout_cb(struct loop *l, struct loop_timer *tm)
{
    struct hcall *h = tm->arg;
    struct http_target *t = h->t;
    int64_t now = loop_now(l);
    if (now - h->last_byte_ns < t->cfg.read_timeout_ns) {
        loop_at(l, tm, h->last_byte_ns + t->cfg.read_timeout_ns, read_timeout_cb, h);
        return;
    }
    t->counts.timeouts++;
    char msg[96];
    snprintf(msg, sizeof msg, "read timeout: no data for %.3f s", (double)t->cfg.read_timeout_ns / 1e9);
    finish(t, h, TARGET_ERR_TIMEOUT, msg);
}

static void check_done(struct http_target *t)
{
    if (t->in_action)
        return;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(t->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct hcall *h = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&h);
        CURLcode res = m->data.result;
        long status = 0;
        curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
        if (h->kind == HK_GET) {
            h->delivered = res == CURLE_OK ? status : 0;
            h->c = NULL;
            finish(t, h, TARGET_OK, NULL);
            continue;
        }
        struct target_call *c = h->c;
        c->http_status = (int)status;
        char msg[200];
        if (status && (status < 200 || status > 299)) {
            t->counts.http_errors++;
            snprintf(msg, sizeof msg, "HTTP %ld: %s", status, h->fail_msg);
            finish(t, h, TARGET_ERR_HTTP, msg);
        } else if (h->failed) {
            t->counts.malformed++;
            finish(t, h, TARGET_ERR_HTTP, h->fail_msg);
        } else if (res == CURLE_OPERATION_TIMEDOUT) {
            t->counts.timeouts++;
            snprintf(msg, sizeof msg, "timeout: %.150s", h->curl_err[0] ? h->curl_err : curl_easy_strerror(res));
            finish(t, h, TARGET_ERR_TIMEOUT, msg);
        } else if (res != CURLE_OK) {
            t->counts.transport_errors++;
            snprintf(msg, sizeof msg, "transport: %.150s", h->curl_err[0] ? h->curl_err : curl_easy_strerror(res));
            finish(t, h, TARGET_ERR_OTHER, msg);
        } else if (!h->got_done || sse_pending(&h->sse)) {
            t->counts.malformed++;
            finish(t, h, TARGET_ERR_HTTP, "malformed stream: ended without [DONE]");
        } else if (h->chunks == 0) {
            t->counts.malformed++;
            finish(t, h, TARGET_ERR_HTTP, "malformed stream: no content");
        } else {
            finish(t, h, TARGET_OK, NULL);
        }
    }
}

static int http_submit(struct target *tg, struct target_call *c, char *err)
{
    struct http_target *t = (struct http_target *)tg;
    if (c->max_tokens < 1 || c->prompt_tokens < 1)
        return err_set(err, "call %llu: prompt %lld, max_tokens %lld", (unsigned long long)c->id,
                       (long long)c->prompt_tokens, (long long)c->max_tokens);
    struct hcall *h = xcalloc(1, sizeof *h);
    h->kind = HK_CALL;
    h->t = t;
    h->c = c;
    h->held_t_ns = -1;
    c->priv = h;
    c->replica = -1;
    c->cached_tokens = -1;
    c->http_status = 0;
    c->server_prompt_tokens = c->server_output_tokens = -1;
    c->error[0] = 0;
    struct prompt_spec ps = {
        .session_salt = hash_mix(t->cfg.seed, c->session_key),
        .call_salt = hash_mix(t->cfg.seed ^ 0x63616c6cull, c->id),
        .scope = 0,
        .blocks = c->blocks,
        .n_blocks = c->n_blocks,
        .block_size = c->trace_block_size,
        .tokens = c->prompt_tokens,
    };
    prompt_gen_init(&h->gen, &ps, t->cfg.prompt_mode);
    int tokens = t->cfg.prompt_mode == PROMPT_TOKENS;
    if (t->cfg.endpoint == HTTP_EP_CHAT)
        h->head_len = (size_t)snprintf(h->head, sizeof h->head,
                                       "{\"model\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"",
                                       t->model_json);
    else
        h->head_len = (size_t)snprintf(h->head, sizeof h->head, "{\"model\":%s,\"prompt\":%s",
                                       t->model_json, tokens ? "[" : "\"");
    h->tail_len = (size_t)snprintf(
        h->tail, sizeof h->tail,
        "%s,\"max_tokens\":%lld,%s\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"temperature\":0}",
        t->cfg.endpoint == HTTP_EP_CHAT ? "\"}]" : tokens ? "]" : "\"", (long long)c->max_tokens,
        c->ignore_eos ? "\"ignore_eos\":true," : "");
    sse_init(&h->sse, SSE_MAX_EVENT, on_event, h);
    if (t->hold) {
        link_call(t, h);
        t->counts.held++;
        return 0;
    }
    h->easy = easy_get(t, 1, &h->big);
    if (!h->easy) {
        free(h);
        c->priv = NULL;
        return err_set(err, "curl: cannot create a handle");
    }
    easy_common(t, h);
    if (c->prompt_tokens * 10 + (int64_t)(h->head_len + h->tail_len) <= SHORT_BODY) {
        /* A short body goes whole, in the same packet as the headers, and
         * spares curl's 16 KiB upload buffer; it is freed as soon as the
         * answer begins. */
        size_t cap = (size_t)c->prompt_tokens * 10 + h->head_len + h->tail_len + 1, k = 0, r;
        h->body = xmalloc(cap);
        memcpy(h->body, h->head, h->head_len);
        k = h->head_len;
        while ((r = prompt_gen_read(&h->gen, h->body + k, cap - k - h->tail_len)) > 0)
            k += r;
        memcpy(h->body + k, h->tail, h->tail_len);
        k += h->tail_len;
        curl_easy_setopt(h->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)k);
        curl_easy_setopt(h->easy, CURLOPT_POSTFIELDS, h->body);
        t->counts.bytes_sent += k;
    } else {
        curl_easy_setopt(h->easy, CURLOPT_POSTFIELDS, NULL);
        curl_easy_setopt(h->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)-1);
        /* No length: curl sends the body chunked as read_fn produces it,
         * so a long prompt costs nothing before the send starts and is
         * never held whole. */
    }
    link_call(t, h);
    t->running++;
    t->counts.submitted++;
    c->start_ns = loop_now(tg->loop);
    curl_multi_add_handle(t->multi, h->easy);
    return 0;
}

static void http_cancel(struct target *tg, struct target_call *c)
{
    struct http_target *t = (struct http_target *)tg;
    struct hcall *h = c->priv;
    if (!h)
        return;
    t->counts.cancelled++;
    finish(t, h, TARGET_ERR_CANCELLED, "cancelled");
}

int http_target_get(struct target *tg, const char *url, http_get_cb cb, void *arg)
{
    struct http_target *t = (struct http_target *)tg;
    struct hcall *h = xcalloc(1, sizeof *h);
    h->kind = HK_GET;
    h->t = t;
    h->get_cb = cb;
    h->get_arg = arg;
    h->held_t_ns = -1;
    h->easy = easy_get(t, 0, &h->big);
    if (!h->easy) {
        free(h);
        return -1;
    }
    easy_common(t, h);
    curl_easy_setopt(h->easy, CURLOPT_URL, url);
    curl_easy_setopt(h->easy, CURLOPT_TIMEOUT_MS, 5000L);
    link_call(t, h);
    curl_multi_add_handle(t->multi, h->easy);
    return 0;
}

static void http_stats(struct target *tg, struct target_stats *s)
{
    struct http_target *t = (struct http_target *)tg;
    *s = t->st;
    s->running = 0;
    for (struct hcall *h = t->live; h; h = h->next)
        s->running += h->kind == HK_CALL && h->easy;
    s->waiting = -1;
    s->kv_used_frac = -1;
}

static void *http_describe(struct target *tg)
{
    struct http_target *t = (struct http_target *)tg;
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:b,s:I,s:f,s:f}", "backend", "http", "url", t->cfg.url,
                     "endpoint", t->cfg.endpoint == HTTP_EP_CHAT ? "/v1/chat/completions" : "/v1/completions",
                     "prompt_mode", t->cfg.prompt_mode == PROMPT_TOKENS ? "tokens" : "text", "model",
                     t->cfg.model, "api_key", t->cfg.api_key[0] != 0, "gpus", (json_int_t)t->cfg.gpus,
                     "connect_timeout_s", (double)t->cfg.connect_timeout_ns / 1e9, "read_timeout_s",
                     (double)t->cfg.read_timeout_ns / 1e9);
}

static void http_destroy(struct target *tg)
{
    struct http_target *t = (struct http_target *)tg;
    while (t->live) {
        struct hcall *h = t->live;
        if (h->kind == HK_CALL)
            http_cancel(tg, h->c);
        else
            finish(t, h, TARGET_ERR_CANCELLED, NULL);
    }
    for (size_t i = 0; i < t->pool_n; i++)
        curl_easy_cleanup(t->pool[i]);
    for (size_t i = 0; i < t->bpool_n; i++)
        curl_easy_cleanup(t->bpool[i]);
    free(t->pool);
    free(t->bpool);
    http_shape_set_free(&t->shapes);
    curl_multi_cleanup(t->multi);
    loop_cancel(t->base.loop, &t->timer);
    curl_slist_free_all(t->headers);
    free(t);
}

static const struct target_ops http_ops = {
    .submit = http_submit, .cancel = http_cancel, .stats = http_stats,
    .describe_json = http_describe, .destroy = http_destroy,
};

static void url_join(char *out, size_t n, const char *base, const char *path)
{
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/')
        bl--;
    /* A base that already ends in /v1 keeps it once. */
    if (bl >= 3 && !strncmp(base + bl - 3, "/v1", 3) && !strncmp(path, "/v1", 3))
        path += 3;
    snprintf(out, n, "%.*s%s", (int)bl, base, path);
}

static struct curl_slist *make_headers(const struct http_target_config *cfg)
{
    struct curl_slist *hl = NULL;
    hl = curl_slist_append(hl, "Content-Type: application/json");
    hl = curl_slist_append(hl, "Accept: text/event-stream");
    hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
    if (cfg->api_key[0]) {
        char h[300];
        snprintf(h, sizeof h, "Authorization: Bearer %s", cfg->api_key);
        hl = curl_slist_append(hl, h);
    }
    return hl;
}

struct target *http_target_create(const struct http_target_config *cfg, struct loop *l, char *err)
{
    if (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8)) {
        err_set(err, "--url: '%s' is not an http:// or https:// URL", cfg->url);
        return NULL;
    }
    if (cfg->prompt_mode == PROMPT_TOKENS && cfg->endpoint != HTTP_EP_COMPLETIONS) {
        err_set(err, "--prompt-mode tokens needs --endpoint completions");
        return NULL;
    }
    static int curl_ready;
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = 1;
    }
    struct http_target *t = xcalloc(1, sizeof *t);
    t->base.ops = &http_ops;
    t->base.loop = l;
    t->base.gpus = cfg->gpus;
    t->base.live = true;
    t->cfg = *cfg;
    json_t *m = json_string(cfg->model[0] ? cfg->model : "default");
    char *ms = json_dumps(m, JSON_ENCODE_ANY);
    snprintf(t->model_json, sizeof t->model_json, "%s", ms ? ms : "\"default\"");
    free(ms);
    json_decref(m);
    url_join(t->url_call, sizeof t->url_call, cfg->url,
             cfg->endpoint == HTTP_EP_CHAT ? "/v1/chat/completions" : "/v1/completions");
    t->headers = make_headers(cfg);
    t->multi = curl_multi_init();
    curl_multi_setopt(t->multi, CURLMOPT_SOCKETFUNCTION, socket_fn);
    curl_multi_setopt(t->multi, CURLMOPT_SOCKETDATA, t);
    curl_multi_setopt(t->multi, CURLMOPT_TIMERFUNCTION, timer_fn);
    curl_multi_setopt(t->multi, CURLMOPT_TIMERDATA, t);
    curl_multi_setopt(t->multi, CURLMOPT_MAXCONNECTS, (long)(cfg->max_connections > 0 ? cfg->max_connections : 16384));
    curl_multi_setopt(t->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    return &t->base;
}

void http_target_hold(struct target *tg) { ((struct http_target *)tg)->hold = 1; }

int64_t http_target_inflight(const struct target *tg)
{
    return ((const struct http_target *)tg)->running;
}

void http_target_counts(const struct target *tg, struct http_target_counts *out)
{
    *out = ((const struct http_target *)tg)->counts;
}

struct membuf {
    char *p;
    size_t n;
};

static size_t mem_write(char *ptr, size_t size, size_t nmemb, void *userp)
{
    struct membuf *b = userp;
    size_t n = size * nmemb;
    if (b->n + n > (1u << 20))
        return 0;
    b->p = xrealloc(b->p, b->n + n + 1);
    memcpy(b->p + b->n, ptr, n);
    b->n += n;
    b->p[b->n] = 0;
    return n;
}

int http_target_fetch_model(const struct http_target_config *cfg, char *model, size_t n, char *err)
{
    char url[700];
    url_join(url, sizeof url, cfg->url, "/v1/models");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *e = curl_easy_init();
    struct membuf b = {0};
    struct curl_slist *hl = make_headers(cfg);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(cfg->connect_timeout_ns / NS_PER_MS));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 30000L);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    curl_slist_free_all(hl);
    int ret = -1;
    if (rc != CURLE_OK) {
        err_set(err, "GET %s: %s", url, curl_easy_strerror(rc));
    } else if (status != 200) {
        err_set(err, "GET %s: HTTP %ld", url, status);
    } else {
        json_error_t je;
        json_t *j = json_loadb(b.p ? b.p : "", b.n, 0, &je);
        json_t *id = json_object_get(json_array_get(json_object_get(j, "data"), 0), "id");
        if (json_is_string(id)) {
            snprintf(model, n, "%s", json_string_value(id));
            ret = 0;
        } else {
            err_set(err, "GET %s: no data[0].id in the answer", url);
        }
        json_decref(j);
    }
    free(b.p);
    return ret;
}
