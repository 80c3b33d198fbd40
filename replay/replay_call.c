/* replay_call.c: the call bookkeeping: a trace call made a target call,
 * sent, its tokens and chunk times gathered, its record written, its owner
 * told; the in-flight list and cancellation (replay_internal.h). */
#include "replay/replay_internal.h"

#include <stdlib.h>
#include <string.h>

#include "traces/base/err.h"
#include "traces/base/mem.h"

static const struct target_cb call_cb;

void replay_call_blocks(const struct trace *t, const struct trace_call *c, uint64_t *out)
{
    uint32_t hi = c->n_blocks;
    while (hi > 0) {
        uint32_t lo = c->n_shared;
        if (lo < hi)
            memcpy(out + lo, c->suffix, (size_t)(hi - lo) * sizeof *out);
        if (lo < hi)
            hi = lo;
        if (!hi || c->base == TRACE_NONE)
            break;
        c = &t->calls[c->base];
    }
}

struct replay_call *replay_call_new(struct replay *rp, const struct trace_call *c, uint32_t index,
                                    uint64_t cache_key, int64_t intended_ns)
{
    struct replay_call *k = xcalloc(1, sizeof *k);
    const struct trace_session *s = &rp->tr->sessions[c->session];
    k->rp = rp;
    k->call = c;
    k->call_index = index;
    k->intended_ns = intended_ns;
    k->first_ns = -1;
    k->blocks = xmalloc((c->n_blocks ? c->n_blocks : 1) * sizeof *k->blocks);
    replay_call_blocks(rp->tr, c, k->blocks);
    k->tc.id = ++rp->next_call_id;
    k->tc.session_key = cache_key;
    k->tc.prompt_tokens = c->prompt_tokens;
    k->tc.max_tokens = c->output_tokens > 0 ? c->output_tokens : 1;
    k->tc.ignore_eos = rp->cfg.ignore_eos;
    k->tc.blocks = k->blocks;
    k->tc.n_blocks = c->n_blocks;
    k->tc.trace_block_size = s->block_size > 0 ? s->block_size : 64;
    k->tc.model = trace_str(rp->tr, c->model);
    k->tc.cb = &call_cb;
    k->tc.arg = k;
    k->tc.replica = -1;
    k->tc.cached_tokens = -1;
    k->tc.server_prompt_tokens = k->tc.server_output_tokens = -1;
    k->lane_idx = -1;
    list_node_init(&k->node);
    if (!rp->cfg.measure_all_types && c->type != TRACE_CALL_NORMAL)
        k->warmup = true;
    return k;
}

static void call_free(struct replay_call *k)
{
    free(k->chunk_t);
    free(k->blocks);
    free(k);
}

static void write_record(struct replay *rp, const struct replay_record *rec)
{
    metrics_add(&rp->metrics, rec);
    if (rp->rec) {
        char err[ERR_LEN];
        if (records_write(rp->rec, rec, err) && !rp->io_error[0])
            snprintf(rp->io_error, sizeof rp->io_error, "%s", err);
    }
}

/* The end of a call, whatever it was: record it, then let its owner go on. */
static void call_end(struct replay_call *k, int64_t t, enum target_status st, const char *msg)
{
    struct replay *rp = k->rp;
    if (rp->destroying) {
        call_free(k);
        return;
    }
    if (k->in_target) {
        k->in_target = false;
        list_remove(&k->node);
        rp->n_inflight--;
    }
    struct replay_record r = {0};
    r.session = k->session_name;
    r.session_uid = k->session_uid;
    r.lane = k->lane_idx;
    r.call = k->call_index;
    r.tree = k->tree;
    r.intended_start_ns = k->intended_ns;
    r.start_ns = k->tc.start_ns;
    r.first_token_ns = k->first_ns;
    r.end_ns = k->chunks ? k->chunk_t[k->chunks - 1] : t;
    if (st != TARGET_OK)
        r.end_ns = t > r.end_ns ? t : r.end_ns;
    r.chunks = k->chunks;
    r.prompt_tokens = k->tc.prompt_tokens;
    r.cached_tokens = k->tc.cached_tokens;
    r.output_tokens = k->out;
    r.max_tokens = k->tc.max_tokens;
    r.replica = k->tc.replica;
    r.preemptions = k->tc.preemptions;
    r.warmup = k->warmup;
    r.model = k->tc.model;
    r.chunk_times_ns = k->chunk_t;
    r.http_status = k->tc.http_status;
    r.server_prompt_tokens = k->tc.server_prompt_tokens;
    r.server_output_tokens = k->tc.server_output_tokens;
    r.live = rp->tg->live || k->tc.http_status != 0;
    if (st == TARGET_ERR_CANCELLED || (k->cancel_requested && st != TARGET_OK)) {
        r.cancelled = true;
        r.error = "cancelled";
    } else if (st == TARGET_ERR_TOO_LONG) {
        r.overflow = true;
        r.error = "context overflow";
    } else if (st != TARGET_OK) {
        r.error = msg && *msg ? msg : target_status_name(st);
    }
    write_record(rp, &r);
    if (k->on_end)
        k->on_end(k->owner, k->call_index);
    call_free(k);
    replay_maybe_finish(rp);
}

void replay_call_send(struct replay *rp, struct replay_call *k)
{
    int64_t now = loop_now(rp->loop);
    k->tc.start_ns = now;
    rp->calls_sent++;
    if (rp->cfg.max_model_len > 0 &&
        k->tc.prompt_tokens + k->tc.max_tokens > rp->cfg.max_model_len) {
        snprintf(k->tc.error, sizeof k->tc.error, "context overflow");
        call_end(k, now, TARGET_ERR_TOO_LONG, NULL);
        return;
    }
    k->in_target = true;
    list_push_front(&rp->inflight, &k->node);
    rp->n_inflight++;
    char err[ERR_LEN];
    err[0] = 0;
    if (target_submit(rp->tg, &k->tc, err)) {
        snprintf(k->tc.error, sizeof k->tc.error, "%.120s", err[0] ? err : "submit failed");
        call_end(k, loop_now(rp->loop), TARGET_ERR_OTHER, k->tc.error);
    }
}

static void on_first_token(struct target_call *c, int64_t t)
{
    struct replay_call *k = c->arg;
    if (k->first_ns < 0)
        k->first_ns = t;
}

static void on_chunk(struct target_call *c, int64_t t, int64_t n)
{
    struct replay_call *k = c->arg;
    if (n <= 0)
        return;
    if (k->first_ns < 0)
        k->first_ns = t;
    if ((size_t)k->chunks == k->chunk_cap) {
        k->chunk_cap = k->chunk_cap ? k->chunk_cap * 2 : 16;
        k->chunk_t = xrealloc(k->chunk_t, k->chunk_cap * sizeof *k->chunk_t);
    }
    k->chunk_t[k->chunks++] = t;
    k->out += n;
}

static void on_done(struct target_call *c, int64_t t, enum target_status st)
{
    call_end(c->arg, t, st, c->error);
}

static const struct target_cb call_cb = {
    .first_token = on_first_token, .chunk = on_chunk, .done = on_done,
};

/* Newest first, as the calls were sent. A call moves to the cancelling
 * list before the target hears of it, so whether its done comes at once
 * (from inside target_cancel) or later, each call is visited once. */
void replay_calls_cancel(struct replay *rp)
{
    struct list_node *n;
    while ((n = list_first(&rp->inflight))) {
        struct replay_call *k = LIST_ENTRY(n, struct replay_call, node);
        list_remove(n);
        list_push_back(&rp->cancelling, n);
        k->cancel_requested = true;
        target_cancel(rp->tg, &k->tc);
    }
}

void replay_calls_drop(struct replay *rp)
{
    ASSERT(rp->destroying);
    struct list_node *lists[2] = {&rp->inflight, &rp->cancelling};
    for (int i = 0; i < 2; i++) {
        struct list_node *n;
        while ((n = list_first(lists[i]))) {
            struct replay_call *k = LIST_ENTRY(n, struct replay_call, node);
            list_remove(n);
            target_cancel(rp->tg, &k->tc);
        }
    }
}

int replay_calls_verify(const struct replay *rp, char *err)
{
    int64_t n = 0;
    const struct list_node *lists[2] = {&rp->inflight, &rp->cancelling};
    for (int i = 0; i < 2; i++) {
        LIST_FOR_EACH(node, lists[i]) {
            const struct replay_call *k = LIST_ENTRY(node, struct replay_call, node);
            if (node->next->prev != node)
                return err_set(err, "in-flight list broken");
            if (!k->in_target)
                return err_set(err, "call %llu listed but not in the target",
                               (unsigned long long)k->tc.id);
            if (k->cancel_requested != (i == 1))
                return err_set(err, "call %llu on the wrong list (cancel requested %d)",
                               (unsigned long long)k->tc.id, k->cancel_requested);
            n++;
        }
    }
    if (n != rp->n_inflight)
        return err_set(err, "in-flight count %lld, listed %lld", (long long)rp->n_inflight, (long long)n);
    return 0;
}
