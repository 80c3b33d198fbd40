/* openai_gen.c: /v1/chat/completions and /v1/completions: the request's
 * limits, its choices submitted to the backend, and the answer, streamed
 * as server-sent events or whole, shaped as vLLM 0.33 shapes it:
 *   - output length: max_completion_tokens (chat) or max_tokens; absent:
 *     to the context limit for chat, 16 for completions (a null
 *     max_tokens on completions also means the context limit), as
 *     CompletionRequest's default and get_max_tokens have it
 *     (vllm/entrypoints/openai/completion/protocol.py:64;
 *     vllm/entrypoints/serve/utils/api_utils.py:234-270); a request
 *     over the context is clamped to context - prompt; max_tokens over
 *     the context, a prompt over it, or a prompt that fills it are 400
 *     with vLLM's messages (vllm/renderers/params.py:272-284, 531-550;
 *     vllm/v1/engine/input_processor.py:557-600); all of it is checked
 *     before anything is sized from the request;
 *   - n choices (1 to OPENAI_MAX_CHOICES over all prompts; vLLM's checks
 *     and messages, vllm/sampling_params.py:49-62, 769-773: n below 1,
 *     and n > 1 with greedy sampling, temperature 0, are 400), each its
 *     own call to the backend; streamed, each chunk carries one choice
 *     with its index, a role chunk first for each chat choice, and the
 *     last token chunk of each choice carries its finish_reason (no
 *     separate empty chunk: vLLM's chat serving.py:783-850, completion
 *     serving.py:437-486);
 *   - usage: a last chunk with "choices": [] when stream_options.
 *     include_usage; with continuous_usage_stats as well, every chunk
 *     carries the choice's running usage (api_utils.py:273-285); whole
 *     answers always carry it; prompt_tokens_details.cached_tokens as
 *     vLLM gives it with --enable-prompt-tokens-details.
 * The server always ignores end-of-sequence, so every choice produces its
 * max_tokens and ends with finish_reason "length". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/server/openai_internal.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"
#include "traces/prompt.h"

/* ---- text ---- */

/* The words of tokens [from, from + n) of choice `index` into buf (cap
 * bytes, at least 16 per token plus 1); returns the length. */
static size_t words(int index, int64_t from, int64_t n, char *buf, size_t cap)
{
    size_t k = 0;
    uint64_t seed = 0x6f7574ull + (uint64_t)index * 0x9e3779b97f4a7c15ull;
    for (int64_t i = from; i < from + n; i++) {
        size_t wl;
        const char *w = prompt_word((uint32_t)hash_mix(seed, (uint64_t)i), &wl);
        if (k + wl >= cap)
            break;
        memcpy(buf + k, w, wl);
        k += wl;
    }
    buf[k] = 0;
    return k;
}

/* ---- the request's life ---- */

static void request_free(struct openai_request *q)
{
    list_remove(&q->node);
    loop_cancel(q->s->loop, &q->stall_timer);
    loop_cancel(q->s->loop, &q->cancel_timer);
    for (int i = 0; i < q->n_choices; i++)
        free(q->ch[i].text);
    openai_prompts_free(q->prompts, q->n_prompts);
    free(q);
}

/* Cancels every choice in flight (their done may come at once, from
 * inside target_cancel); returns 1 when that ended the request, which is
 * then freed. */
static int cancel_all(struct openai_request *q)
{
    struct openai_server *s = q->s;
    q->in_cancel = 1;
    int fz = loop_scaled_freeze(s->tloop);
    for (int i = 0; i < q->n_choices; i++)
        if (q->ch[i].submitted && !q->ch[i].done)
            target_cancel(s->tg, &q->ch[i].call);
    loop_scaled_thaw(s->tloop, fz);
    q->in_cancel = 0;
    if (!q->finished)
        return 0;
    request_free(q);
    return 1;
}

static void cancel_cb(struct loop *l, struct loop_timer *t) { cancel_all(t->arg); }

/* Cancels the backend's work soon (never from inside its own callback). */
static void cancel_soon(struct openai_request *q)
{
    if (q->cancel_pending || q->n_done == q->n_choices)
        return;
    q->cancel_pending = 1;
    loop_at(q->s->loop, &q->cancel_timer, loop_now(q->s->loop), cancel_cb, q);
}

static void client_gone(void *ctx)
{
    struct openai_request *q = ctx;
    q->c = NULL;
    q->s->client_gone++;
    if (!q->submitted) {
        q->s->completions_failed++;
        request_free(q);
        return;
    }
    cancel_soon(q);
}

/* ---- events ---- */

/* The server's scratch buffer with room for n bytes. */
static char *scratch(struct openai_server *s, size_t n)
{
    if (n > s->scratch_cap) {
        s->scratch_cap = n * 2;
        s->scratch = xrealloc(s->scratch, s->scratch_cap);
    }
    return s->scratch;
}

/* Writes "data: " + the event (fmt) + "\n\n" to the stream. */
static void emit(struct openai_request *q, const char *json, size_t n)
{
    if (!q->c)
        return;
    char stackbuf[1024];
    char *b = n + 10 <= sizeof stackbuf ? stackbuf : xmalloc(n + 10);
    memcpy(b, "data: ", 6);
    memcpy(b + 6, json, n);
    memcpy(b + 6 + n, "\n\n", 2);
    httpd_stream_write(q->c, b, n + 8);
    if (b != stackbuf)
        free(b);
}

/* ,"usage":{...} of one choice so far (continuous usage), into buf. */
static int usage_running(const struct openai_choice *ch, int64_t tokens, char *buf, size_t cap)
{
    const struct openai_request *q = ch->q;
    if (!q->continuous_usage)
        return buf[0] = 0, 0;
    int64_t p = q->prompts[ch->prompt].tokens;
    return snprintf(buf, cap, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld,"
                              "\"completion_tokens\":%lld}",
                    (long long)p, (long long)(p + tokens), (long long)tokens);
}

static const char *object_name(const struct openai_request *q, int chunk)
{
    if (q->chat)
        return chunk ? "chat.completion.chunk" : "chat.completion";
    return "text_completion";
}

/* A chat choice's role chunk (sent before its first token). */
static void emit_role(struct openai_choice *ch)
{
    struct openai_request *q = ch->q;
    char usage[160], buf[1024];
    usage_running(ch, 0, usage, sizeof usage);
    int n = snprintf(buf, sizeof buf,
                     "{\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%ld,\"model\":%s,"
                     "\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                     "\"logprobs\":null,\"finish_reason\":null}]%s}",
                     q->id, q->created, q->s->model_json, ch->index, usage);
    if (n > 0 && (size_t)n < sizeof buf)
        emit(q, buf, (size_t)n);
}

/* A token chunk of a choice: its words, and its finish_reason when it is
 * the last. */
static void emit_tokens(struct openai_choice *ch, int64_t tokens)
{
    struct openai_request *q = ch->q;
    struct openai_server *s = q->s;
    char small[1024];
    size_t cap = tokens <= 60 ? sizeof small : (size_t)tokens * 16 + 1;
    char *content = tokens <= 60 ? small : xmalloc(cap);
    words(ch->index, ch->emitted, tokens, content, cap);
    int last = ch->emitted + tokens >= ch->call.max_tokens;
    char usage[160];
    usage_running(ch, ch->emitted + tokens, usage, sizeof usage);
    const char *fin = last ? "\"length\",\"stop_reason\":null" : "null";
    size_t need = strlen(content) + 512 + strlen(s->model_json);
    char *buf = scratch(s, need);
    int n;
    if (q->chat)
        n = snprintf(buf, need,
                     "{\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%ld,\"model\":%s,"
                     "\"choices\":[{\"index\":%d,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,"
                     "\"finish_reason\":%s}]%s}",
                     q->id, q->created, s->model_json, ch->index, content, fin, usage);
    else
        n = snprintf(buf, need,
                     "{\"id\":\"%s\",\"object\":\"text_completion\",\"created\":%ld,\"model\":%s,"
                     "\"choices\":[{\"index\":%d,\"text\":\"%s\",\"logprobs\":null,"
                     "\"finish_reason\":%s%s}]%s}",
                     q->id, q->created, s->model_json, ch->index, content, fin,
                     last ? "" : ",\"stop_reason\":null", usage);
    if (n > 0 && (size_t)n < need)
        emit(q, buf, (size_t)n);
    if (tokens > 60)
        free(content);
}

/* ---- usage ---- */

static void usage_totals(const struct openai_request *q, int64_t *prompt, int64_t *done,
                         int64_t *cached)
{
    *prompt = *done = *cached = 0;
    for (int p = 0; p < q->n_prompts; p++)
        *prompt += q->prompts[p].tokens;
    for (int i = 0; i < q->n_choices; i++) {
        const struct openai_choice *ch = &q->ch[i];
        *done += ch->emitted;
        if (i % (q->n_choices / q->n_prompts) == 0) /* once per prompt */
            *cached += ch->call.cached_tokens > 0 ? ch->call.cached_tokens : 0;
    }
}

static json_t *usage_json(const struct openai_request *q)
{
    int64_t p, c, k;
    usage_totals(q, &p, &c, &k);
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)p, "total_tokens",
                     (json_int_t)(p + c), "completion_tokens", (json_int_t)c, "prompt_tokens_details",
                     "cached_tokens", (json_int_t)k);
}

/* ---- the end of a request ---- */

static void finish_stream(struct openai_request *q)
{
    struct openai_server *s = q->s;
    struct httpd_conn *hc = q->c;
    if (q->failed) {
        json_t *j = json_pack("{s:{s:s,s:s,s:n,s:i}}", "error", "message", q->fail_msg, "type",
                              target_status_name(q->fail_st), "param", "code",
                              q->fail_st == TARGET_ERR_TOO_LONG || q->fail_st == TARGET_ERR_NO_SPACE
                                  ? 400 : 500);
        char *b = json_dumps(j, JSON_COMPACT);
        emit(q, b, strlen(b));
        free(b);
        json_decref(j);
        if (q->c)
            emit(q, "[DONE]", 6);
        if (q->c)
            httpd_stream_end(q->c);
        return;
    }
    /* Usage, [DONE] and the stream's end in one write. */
    char *u = NULL;
    if (q->include_usage) {
        json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", q->id, "object", object_name(q, 1),
                              "created", (json_int_t)q->created, "model", s->names[0], "choices",
                              "usage", usage_json(q));
        u = json_dumps(j, JSON_COMPACT);
        json_decref(j);
    }
    size_t un = u ? strlen(u) : 0, k = 0;
    char *tail = xmalloc(un + 32);
    if (u) {
        memcpy(tail, "data: ", 6);
        memcpy(tail + 6, u, un);
        memcpy(tail + 6 + un, "\n\n", 2);
        k = un + 8;
    }
    memcpy(tail + k, "data: [DONE]\n\n", 14);
    k += 14;
    httpd_stream_end_with(hc, tail, k);
    free(tail);
    free(u);
}

static void finish_whole(struct openai_request *q)
{
    struct openai_server *s = q->s;
    if (q->failed) {
        int status = q->fail_st == TARGET_ERR_TOO_LONG || q->fail_st == TARGET_ERR_NO_SPACE ? 400 : 500;
        openai_respond_error(q->c, status, target_status_name(q->fail_st), NULL, q->fail_msg);
        return;
    }
    json_t *choices = json_array();
    for (int i = 0; i < q->n_choices; i++) {
        struct openai_choice *ch = &q->ch[i];
        const char *t = ch->text ? ch->text : "";
        json_t *c;
        if (q->chat)
            c = json_pack("{s:i,s:{s:s,s:s%,s:n,s:[]},s:n,s:s,s:n}", "index", ch->index, "message",
                          "role", "assistant", "content", t, ch->text_len, "refusal", "tool_calls",
                          "logprobs", "finish_reason", "length", "stop_reason");
        else
            c = json_pack("{s:i,s:s%,s:n,s:s,s:n}", "index", ch->index, "text", t, ch->text_len,
                          "logprobs", "finish_reason", "length", "stop_reason");
        json_array_append_new(choices, c);
    }
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", q->id, "object", object_name(q, 0),
                          "created", (json_int_t)q->created, "model", s->names[0], "choices", choices,
                          "usage", usage_json(q));
    openai_respond_json(q->c, 200, j);
}

/* ---- backend callbacks ---- */

static void on_first(struct target_call *c, int64_t t) {}

static void on_chunk(struct target_call *c, int64_t t, int64_t tokens)
{
    struct openai_choice *ch = c->arg;
    struct openai_request *q = ch->q;
    struct openai_server *s = q->s;
    openai_metrics_chunk(s, ch, loop_now(s->loop), tokens);
    if (q->c) {
        if (q->stream) {
            if (q->chat && ch->emitted == 0)
                emit_role(ch);
            emit_tokens(ch, tokens);
        } else {
            size_t need = ch->text_len + (size_t)tokens * 16 + 1;
            if (need > ch->text_cap) {
                ch->text_cap = need * 2;
                ch->text = xrealloc(ch->text, ch->text_cap);
            }
            ch->text_len += words(ch->index, ch->emitted, tokens, ch->text + ch->text_len,
                                  ch->text_cap - ch->text_len);
        }
    }
    ch->emitted += tokens;
    q->emitted += tokens;
    if (q->c && q->disconnect_at >= 0 && q->emitted >= q->disconnect_at) {
        /* A client that has already closed its side (its own timeout) is
         * gone, not cut by the fault. */
        if (httpd_conn_peer_closed(q->c))
            s->client_gone++;
        else
            s->faults_disconnect++;
        httpd_conn_abort(q->c);
        q->c = NULL;
        cancel_soon(q);
    }
}

static void on_done(struct target_call *c, int64_t t, enum target_status st)
{
    struct openai_choice *ch = c->arg;
    struct openai_request *q = ch->q;
    struct openai_server *s = q->s;
    ch->done = 1;
    q->n_done++;
    openai_metrics_done(s, ch, loop_now(s->loop), st);
    if (st != TARGET_OK && !q->failed) {
        q->failed = 1;
        q->fail_st = st;
        snprintf(q->fail_msg, sizeof q->fail_msg, "%s", c->error[0] ? c->error : target_status_name(st));
        cancel_soon(q);
    }
    if (q->n_done < q->n_choices)
        return;
    s->running--;
    /* Served: the backend finished and the client is still there to get it. */
    if (!q->failed && q->c)
        s->completions_ok++;
    else
        s->completions_failed++;
    if (q->c) {
        if (q->stream)
            finish_stream(q);
        else
            finish_whole(q);
    }
    if (q->in_cancel)
        q->finished = 1; /* cancel_cb frees it */
    else
        request_free(q);
}

static const struct target_cb serve_cb = {on_first, on_chunk, on_done};

/* Submits every choice of q. A request submitted as it is parsed enters
 * the engine at the time its first byte arrived (loop_scaled_freeze_at),
 * so that the deployment's TTFT leaves out this server's own reading,
 * parsing and tokenizing (about 5 ms for a 100k-word prompt), which the
 * simulated deployment (`sim`) does not have either; a stalled one (an
 * injected fault) enters when its stall ends. */
static void submit_now(struct openai_request *q, bool at_arrival)
{
    char err[ERR_LEN];
    struct openai_server *s = q->s;
    int fz = at_arrival && q->received_ns > 0 ? loop_scaled_freeze_at(s->tloop, q->received_ns)
                                              : loop_scaled_freeze(s->tloop);
    int rc = 0;
    for (int i = 0; i < q->n_choices && !rc; i++) {
        struct openai_choice *ch = &q->ch[i];
        ch->call.start_ns = loop_now(s->tloop);
        rc = target_submit(s->tg, &ch->call, err);
        ch->submitted = !rc;
    }
    loop_scaled_thaw(s->tloop, fz);
    if (rc && !q->ch[0].submitted) {
        s->completions_failed++;
        if (q->c)
            openai_respond_error(q->c, 400, "BadRequestError", NULL, err);
        request_free(q);
        return;
    }
    q->submitted = 1;
    s->running++;
    openai_metrics_admit(s, q->n_choices, q->asked_max_tokens);
    if (rc) { /* a later choice refused: the others are cancelled */
        for (int i = 0; i < q->n_choices; i++)
            if (!q->ch[i].submitted) {
                q->ch[i].done = 1;
                q->n_done++;
            }
        q->failed = 1;
        q->fail_st = TARGET_ERR_OTHER;
        snprintf(q->fail_msg, sizeof q->fail_msg, "%.120s", err);
        cancel_soon(q);
    }
    if (q->stream && q->c)
        httpd_stream_begin(q->c, 200, "text/event-stream");
}

static void stall_cb(struct loop *l, struct loop_timer *t) { submit_now(t->arg, false); }

/* ---- admission ---- */

static void refuse(struct openai_server *s, struct httpd_conn *c, const char *param, const char *msg)
{
    s->completions_failed++;
    openai_respond_error(c, 400, "BadRequestError", param, msg);
}

/* The output length of each prompt into max_out; 0, or -1 after
 * answering 400. */
static int admit_lengths(struct openai_server *s, struct httpd_conn *c, json_t *req, int chat,
                             const struct openai_prompt *pr, int n_prompts, int64_t *asked,
                             int64_t *max_out)
{
    char msg[512];
    int64_t ctx = s->max_model_len;
    const char *name = chat && openai_req_has(req, "max_completion_tokens") ? "max_completion_tokens"
                                                                             : "max_tokens";
    int has = openai_req_has(req, name);
    *asked = has ? openai_req_int(req, name, 0) : 0;
    if (!chat && !json_object_get(req, "max_tokens")) /* absent; null means none */
        has = 1, *asked = 16;
    if (has && *asked < 1) {
        snprintf(msg, sizeof msg, "max_tokens must be at least 1, got %lld. (parameter=max_tokens, value=%lld)",
                 (long long)*asked, (long long)*asked);
        refuse(s, c, "max_tokens", msg);
        return -1;
    }
    if (has && *asked > ctx) {
        snprintf(msg, sizeof msg,
                 "%s=%lld cannot be greater than max_model_len=%lld. Please request fewer output tokens. "
                 "(parameter=%s, value=%lld)",
                 name, (long long)*asked, (long long)ctx, name, (long long)*asked);
        refuse(s, c, name, msg);
        return -1;
    }
    for (int p = 0; p < n_prompts; p++) {
        int64_t n = pr[p].tokens;
        if (n < 1) {
            refuse(s, c, NULL, "The decoder prompt cannot be empty");
            return -1;
        }
        if (n > ctx) {
            snprintf(msg, sizeof msg,
                     "This model's maximum context length is %lld tokens. However, your prompt contains "
                     "%lld input tokens, which exceeds this limit even without any output tokens. Please "
                     "reduce the length of the input prompt. (parameter=input_tokens, value=%lld)",
                     (long long)ctx, (long long)n, (long long)n);
            refuse(s, c, "input_tokens", msg);
            return -1;
        }
        if (n == ctx) {
            snprintf(msg, sizeof msg,
                     "The decoder prompt (length %lld) plus the number of requested output tokens (at "
                     "least 1) is longer than the maximum model length of %lld. Make sure that "
                     "`max_model_len` is no smaller than the number of text tokens (prompt + requested "
                     "output tokens).",
                     (long long)n, (long long)ctx);
            refuse(s, c, NULL, msg);
            return -1;
        }
        int64_t room = ctx - n, want = has ? *asked : s->default_max_tokens > 0 ? s->default_max_tokens : room;
        max_out[p] = want < room ? want : room;
    }
    if (!has)
        *asked = 0;
    return 0;
}

void openai_handle_completion(struct openai_server *s, struct httpd_conn *c,
                              const struct httpd_request *r, int chat)
{
    s->completions++;
    /* Four fault draws per request, always. */
    double u_err = rng_uniform(&s->fault_rng), u_disc = rng_uniform(&s->fault_rng);
    double u_stall = rng_uniform(&s->fault_rng);
    uint64_t cut = rng_next(&s->fault_rng);
    json_t *req = openai_load_request(s, c, r, chat ? "chat" : "completions");
    if (!req) {
        s->completions_failed++;
        return;
    }
    struct openai_bad bad;
    char msg[256];
    int64_t n = openai_req_int(req, "n", 1);
    if (n < 1 || n > OPENAI_MAX_CHOICES) {
        if (n < 1)
            snprintf(msg, sizeof msg, "n must be at least 1, got %lld.", (long long)n);
        else
            snprintf(msg, sizeof msg, "n must be at most %d, got %lld.", OPENAI_MAX_CHOICES, (long long)n);
        refuse(s, c, NULL, msg);
        json_decref(req);
        return;
    }
    if (n > 1 && openai_req_has(req, "temperature") && openai_req_num(req, "temperature", 1) < 1e-5) {
        snprintf(msg, sizeof msg, "n must be 1 when using greedy sampling, got %lld.", (long long)n);
        refuse(s, c, NULL, msg);
        json_decref(req);
        return;
    }
    struct openai_prompt *pr;
    int n_prompts;
    if (openai_req_prompts(req, chat, &pr, &n_prompts, &bad)) {
        s->completions_failed++;
        openai_respond_bad(c, &bad);
        json_decref(req);
        return;
    }
    int n_choices = n_prompts * (int)n;
    if (n_choices > OPENAI_MAX_CHOICES) {
        snprintf(msg, sizeof msg, "n x prompts is %d; at most %d choices per request", n_choices,
                 OPENAI_MAX_CHOICES);
        refuse(s, c, "n", msg);
        openai_prompts_free(pr, n_prompts);
        json_decref(req);
        return;
    }
    int64_t asked, max_out[OPENAI_MAX_CHOICES];
    if (admit_lengths(s, c, req, chat, pr, n_prompts, &asked, max_out)) {
        openai_prompts_free(pr, n_prompts);
        json_decref(req);
        return;
    }
    struct openai_request *q = xcalloc(1, sizeof *q + (size_t)n_choices * sizeof q->ch[0]);
    q->s = s;
    list_push_front(&s->live, &q->node);
    q->c = c;
    q->chat = chat;
    q->prompts = pr;
    q->n_prompts = n_prompts;
    q->n_choices = n_choices;
    q->asked_max_tokens = asked;
    q->disconnect_at = -1;
    q->created = (long)time(NULL);
    q->arrival_ns = loop_now(s->loop);
    q->received_ns = r->start_ns;
    uint64_t num = ++s->next_id;
    snprintf(q->id, sizeof q->id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)num);
    q->stream = openai_req_bool(req, "stream", 0);
    json_t *so = json_object_get(req, "stream_options");
    q->include_usage = q->stream && json_is_object(so) && openai_req_bool(so, "include_usage", 0);
    q->continuous_usage = q->include_usage && openai_req_bool(so, "continuous_usage_stats", 0);
    json_t *user = json_object_get(req, "user");
    uint64_t user_key = json_is_string(user) ? hash64(json_string_value(user), json_string_length(user),
                                                      0x75736572ull)
                                             : 0;
    json_decref(req);
    for (int i = 0; i < n_choices; i++) {
        struct openai_choice *ch = &q->ch[i];
        const struct openai_prompt *p = &pr[i / n];
        ch->q = q;
        ch->index = i;
        ch->prompt = (int)(i / n);
        ch->t_first = ch->t_last = -1;
        /* Without a "user", the first chunk's id is the cache key: two
         * prompts can share a prefix only if their first chunks are
         * equal, so keying by it loses no hit, and the affinity router
         * keeps a conversation (whose prompts start alike) on one
         * replica. */
        ch->call.session_key = user_key ? user_key : p->n_blocks ? p->blocks[0] : 0;
        ch->call.id = i ? ++s->next_id : num;
        ch->call.prompt_tokens = p->tokens;
        ch->call.max_tokens = max_out[ch->prompt];
        ch->call.ignore_eos = true;
        ch->call.blocks = p->blocks;
        ch->call.n_blocks = p->n_blocks;
        ch->call.trace_block_size = SERVE_CHUNK_TOKENS;
        ch->call.cb = &serve_cb;
        ch->call.arg = ch;
    }
    if (u_err < s->fault_error_rate) {
        s->faults_error++;
        s->completions_failed++;
        openai_respond_error(c, 500, "injected_fault", NULL, "injected fault: internal error");
        request_free(q);
        return;
    }
    if (u_disc < s->fault_disconnect_rate) {
        int64_t mt = max_out[0];
        if (!q->stream) {
            s->faults_disconnect++;
            s->completions_failed++;
            httpd_conn_abort(c);
            request_free(q);
            return;
        }
        q->disconnect_at = 1 + (int64_t)(cut % (uint64_t)mt);
        if (q->disconnect_at >= mt)
            q->disconnect_at = mt > 1 ? mt - 1 : 1;
    }
    httpd_conn_on_close(c, client_gone, q);
    if (s->fault_stall_ns > 0 && u_stall < s->fault_stall_rate) {
        s->faults_stall++;
        loop_at(s->loop, &q->stall_timer, loop_now(s->loop) + s->fault_stall_ns, stall_cb, q);
        return;
    }
    submit_now(q, true);
}

void openai_requests_destroy(struct openai_server *s)
{
    /* Requests still live: cancel what the backend holds, free the rest. */
    while (!list_empty(&s->live)) {
        struct openai_request *q = LIST_ENTRY(list_first(&s->live), struct openai_request, node);
        q->c = NULL;
        loop_cancel(s->loop, &q->cancel_timer);
        if (q->submitted && q->n_done < q->n_choices && cancel_all(q))
            continue;
        request_free(q); /* a done the backend did not deliver at once never comes */
    }
}
