/* http_target.c: the live target's driver: libcurl's multi socket API
 * on the loop, the pool of easy handles, a call's or a scrape's transfer
 * from start to finish, the target's operations (http_target.h).
 *
 * Integration: curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION
 * -> one struct loop_io per socket) and when to call it back
 * (CURLMOPT_TIMERFUNCTION -> one loop timer); both call
 * curl_multi_socket_action and then collect finished transfers. Easy
 * handles are pooled and reused; connections live in the multi handle's
 * cache, so calls reuse keep-alive connections. Requests are built in
 * http_request.c, answers read in http_response.c.
 *
 * Memory per call in flight: the easy handle (curl's receive buffer is cut
 * to 1 KiB, except on the first BIG_RECV_HANDLES handles, see easy_get;
 * its upload buffer, 16 KiB at the least, exists only for long bodies),
 * the SSE parser's buffer (the largest event) and the struct http_xfer
 * (about 2 KiB). 10,000 streams of 1k-token prompts: 260 MB resident
 * before short bodies were sent whole.
 */
#include "replay/http_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/time_ns.h"

/* Receive buffers: curl reads at most its buffer per recv(2), and libcurl
 * 7.88 polls the socket after each read, so a 16-token answer (~3.5 KB)
 * sent in one packet cost 4 recvfrom + 5 poll with 1 KiB, 1 + 2 with
 * 16 KiB. Big buffers on the first 256 handles only (4 MiB), small ones
 * beyond, so 10,000 streams stay small. */
#define BIG_RECV_BUF 16384L
#define SMALL_RECV_BUF 1024L
#define BIG_RECV_HANDLES 256

/* A socket curl asked us to watch. */
struct sockw {
    struct loop_io io;
    struct http_target *t;
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
    int handles; /* curl's count of transfers in progress (unused) */
    t->in_action++;
    curl_multi_socket_action(t->multi, io->fd, flags, &handles);
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
    int handles;
    t->in_action++;
    curl_multi_socket_action(t->multi, CURL_SOCKET_TIMEOUT, 0, &handles);
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

/* ---- easy handles ---- */

/* Options every handle gets once, when created. */
static void easy_setup(struct http_target *t, CURL *e, int call, int big)
{
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_response_write);
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
        curl_easy_setopt(e, CURLOPT_READFUNCTION, http_request_read);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, http_request_seek);
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

/* ---- transfers ---- */

/* Per-transfer options and the read timeout. */
static void xfer_arm(struct http_target *t, struct http_xfer *x)
{
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(e, CURLOPT_READDATA, x);
    curl_easy_setopt(e, CURLOPT_SEEKDATA, x);
    x->curl_err[0] = 0;
    x->last_byte_ns = loop_now(t->base.loop);
    loop_at(t->base.loop, &x->read_timer, x->last_byte_ns + t->cfg.read_timeout_ns,
            http_response_read_timeout, x);
}

static void xfer_free(struct http_xfer *x)
{
    http_tpl_free(&x->tpl);
    free(x->body);
    sse_free(&x->sse);
    free(x->gbuf);
    free(x);
}

void http_xfer_finish(struct http_target *t, struct http_xfer *x, enum target_status st,
                      const char *msg)
{
    loop_cancel(t->base.loop, &x->read_timer);
    if (x->easy && x->kind == XFER_CALL && !x->c->http_status) {
        long status = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        x->c->http_status = (int)status;
    }
    if (x->easy) {
        curl_multi_remove_handle(t->multi, x->easy);
        easy_put(t, x->easy, x->kind == XFER_CALL, x->big);
        x->easy = NULL;
        if (x->kind == XFER_CALL)
            t->running--;
    }
    list_remove(&x->node);
    if (x->kind == XFER_GET) {
        x->get_cb(x->get_arg, st == TARGET_OK ? x->get_status : 0, x->gbuf ? x->gbuf : "",
                  x->glen);
        xfer_free(x);
        return;
    }
    struct target_call *c = x->c;
    if (st == TARGET_OK) {
        int64_t last = 1;
        if (c->server_output_tokens > 0 && c->server_output_tokens > x->delivered)
            last = c->server_output_tokens - x->delivered;
        http_response_deliver_deferred(x, last);
        t->counts.ok++;
    } else {
        http_response_deliver_deferred(x, 1);
        snprintf(c->error, sizeof c->error, "%s", msg ? msg : target_status_name(st));
    }
    t->stats.prompt_tokens += c->prompt_tokens;
    if (c->cached_tokens > 0)
        t->stats.cached_tokens += c->cached_tokens;
    c->priv = NULL;
    int64_t now = loop_now(t->base.loop);
    xfer_free(x);
    c->cb->done(c, now, st);
}

/* Finishes the transfers curl has completed (not from inside a
 * curl_multi_socket_action: curl calls back into this file). */
static void check_done(struct http_target *t)
{
    if (t->in_action)
        return;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(t->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct http_xfer *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        CURLcode res = m->data.result;
        long status = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        if (x->kind == XFER_GET) {
            x->get_status = res == CURLE_OK ? (int)status : 0;
            http_xfer_finish(t, x, TARGET_OK, NULL);
            continue;
        }
        x->c->http_status = (int)status;
        char msg[200];
        enum target_status st = http_response_outcome(t, x, res, status, msg, sizeof msg);
        http_xfer_finish(t, x, st, st == TARGET_OK ? NULL : msg);
    }
}

static int http_submit(struct target *tg, struct target_call *c, char *err)
{
    struct http_target *t = (struct http_target *)tg;
    if (c->max_tokens < 1 || c->prompt_tokens < 1)
        return err_set(err, "call %llu: prompt %lld, max_tokens %lld", (unsigned long long)c->id,
                       (long long)c->prompt_tokens, (long long)c->max_tokens);
    struct http_xfer *x = xcalloc(1, sizeof *x);
    x->kind = XFER_CALL;
    x->t = t;
    x->c = c;
    x->deferred_t_ns = -1;
    list_node_init(&x->node);
    c->priv = x;
    c->replica = -1;
    c->cached_tokens = -1;
    c->http_status = 0;
    c->server_prompt_tokens = c->server_output_tokens = -1;
    c->error[0] = 0;
    http_request_init(t, x);
    http_response_init(x);
    if (t->hold) {
        list_push_front(&t->xfers, &x->node);
        t->counts.held++;
        return 0;
    }
    x->easy = easy_get(t, 1, &x->big);
    if (!x->easy) {
        free(x);
        c->priv = NULL;
        return err_set(err, "curl: cannot create a handle");
    }
    xfer_arm(t, x);
    http_request_attach(t, x);
    list_push_front(&t->xfers, &x->node);
    t->running++;
    t->counts.submitted++;
    c->start_ns = loop_now(tg->loop);
    curl_multi_add_handle(t->multi, x->easy);
    return 0;
}

static void http_cancel(struct target *tg, struct target_call *c)
{
    struct http_target *t = (struct http_target *)tg;
    struct http_xfer *x = c->priv;
    if (!x)
        return;
    t->counts.cancelled++;
    http_xfer_finish(t, x, TARGET_ERR_CANCELLED, "cancelled");
}

int http_target_get(struct target *tg, const char *url, http_get_cb cb, void *arg)
{
    struct http_target *t = (struct http_target *)tg;
    struct http_xfer *x = xcalloc(1, sizeof *x);
    x->kind = XFER_GET;
    x->t = t;
    x->get_cb = cb;
    x->get_arg = arg;
    x->deferred_t_ns = -1;
    list_node_init(&x->node);
    x->easy = easy_get(t, 0, &x->big);
    if (!x->easy) {
        free(x);
        return -1;
    }
    xfer_arm(t, x);
    curl_easy_setopt(x->easy, CURLOPT_URL, url);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, 5000L);
    list_push_front(&t->xfers, &x->node);
    curl_multi_add_handle(t->multi, x->easy);
    return 0;
}

/* ---- the target ---- */

static void http_stats(struct target *tg, struct target_stats *s)
{
    struct http_target *t = (struct http_target *)tg;
    *s = t->stats;
    s->running = t->running;
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
    struct list_node *n;
    while ((n = list_first(&t->xfers))) {
        struct http_xfer *x = LIST_ENTRY(n, struct http_xfer, node);
        if (x->kind == XFER_CALL)
            http_cancel(tg, x->c);
        else
            http_xfer_finish(t, x, TARGET_ERR_CANCELLED, NULL);
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
    list_init(&t->xfers);
    json_t *m = json_string(cfg->model[0] ? cfg->model : "default");
    char *ms = json_dumps(m, JSON_ENCODE_ANY);
    snprintf(t->model_json, sizeof t->model_json, "%s", ms ? ms : "\"default\"");
    free(ms);
    json_decref(m);
    http_url_join(t->url_call, sizeof t->url_call, cfg->url,
             cfg->endpoint == HTTP_EP_CHAT ? "/v1/chat/completions" : "/v1/completions");
    t->headers = http_request_headers(cfg);
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

/* ---- before a run: the served model ---- */

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
    http_url_join(url, sizeof url, cfg->url, "/v1/models");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *e = curl_easy_init();
    struct membuf b = {0};
    struct curl_slist *hl = http_request_headers(cfg);
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
