/* replay_call.c: the call bookkeeping: a trace call made a target call,
 * sent, its tokens and chunk times gathered, its record written, its owner
 * told; the in-flight list and cancellation (replay_internal.h). */
#include "replay/replay_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/mem.h"

static const struct target_cb call_cb;

/* Call ends in a row at one time of the clock after which the run has
 * made no progress (a run whose every call fails at once would otherwise
 * spin in zero virtual time), beyond what a concurrency could end at
 * once. */
#define NO_PROGRESS_ENDS 1000000
/* Calls failed in a row after which the target counts as down (a dead
 * server, a closed port: every call refused at once, in real time, would
 * write records as fast as they fail), beyond what a concurrency's calls
 * in flight could fail at once. */
#define FAILED_IN_A_ROW 1000

/* A server's error that means the prompt is over the context limit
 * (aiperf/common/scenario/context_overflow.py, the AgentX substrings). */
static bool overflow_message(const char *msg)
{
    static const char *const pats[] = {"context length", "maximum context",
                                       "context_length_exceeded", "prompt is too long"};
    if (!msg)
        return false;
    for (size_t i = 0; i < ARRAY_LEN(pats); i++) {
        size_t n = strlen(pats[i]);
        for (const char *p = msg; *p; p++)
            if (!strncasecmp(p, pats[i], n))
                return true;
    }
    return false;
}

void replay_call_blocks(const struct trace *t, const struct trace_call *c, uint64_t *out)
{
    trace_call_blocks(t, c, out, c->n_blocks);
}

/* The chain of trace call c salted as asked: the one in flight if there
 * is one, else made now. A call of another trace (never, in practice) or
 * salted otherwise gets a chain of its own. */
static struct replay_chain *chain_get(struct replay *rp, const struct trace_call *c,
                                      const uint64_t *salt)
{
    const struct trace *t = rp->tr;
    uint32_t slot = c >= t->calls && c < t->calls + t->n_calls ? (uint32_t)(c - t->calls)
                                                               : UINT32_MAX;
    if (slot != UINT32_MAX && !rp->chains)
        rp->chains = xcalloc(t->n_calls, sizeof *rp->chains);
    struct replay_chain *ch = slot != UINT32_MAX ? rp->chains[slot] : NULL;
    if (ch && ch->salted == (salt != NULL) && (!salt || ch->salt == *salt)) {
        ch->refs++;
        return ch;
    }
    ch = xmalloc(sizeof *ch + (c->n_blocks ? c->n_blocks : 1) * sizeof *ch->ids);
    ch->refs = 1;
    ch->n = c->n_blocks;
    ch->salted = salt != NULL;
    ch->salt = salt ? *salt : 0;
    replay_call_blocks(t, c, ch->ids);
    if (salt)
        for (uint32_t i = 0; i < ch->n; i++)
            ch->ids[i] = hash_mix(ch->ids[i], *salt);
    ch->slot = UINT32_MAX;
    if (slot != UINT32_MAX && !rp->chains[slot]) {
        ch->slot = slot;
        rp->chains[slot] = ch;
    }
    return ch;
}

static void chain_put(struct replay *rp, struct replay_chain *ch)
{
    if (--ch->refs)
        return;
    if (ch->slot != UINT32_MAX)
        rp->chains[ch->slot] = NULL;
    free(ch);
}

void replay_chains_free(struct replay *rp)
{
    free(rp->chains);
    rp->chains = NULL;
}

struct replay_call *replay_call_new(struct replay *rp, const struct trace_call *c, uint32_t index,
                                    uint64_t cache_key, int64_t intended_ns, const uint64_t *salt)
{
    struct replay_call *call = xcalloc(1, sizeof *call);
    const struct trace_session *s = &rp->tr->sessions[c->session];
    call->rp = rp;
    call->trace_call = c;
    call->call_index = index;
    call->intended_ns = intended_ns;
    call->first_ns = -1;
    call->chain = chain_get(rp, c, salt);
    call->tc.id = ++rp->next_call_id;
    call->tc.session_key = cache_key;
    call->tc.prompt_tokens = c->prompt_tokens;
    call->tc.max_tokens = c->output_tokens > 0 ? c->output_tokens : 1;
    call->tc.ignore_eos = rp->cfg.ignore_eos;
    call->tc.blocks = call->chain->ids;
    call->tc.n_blocks = c->n_blocks;
    call->tc.trace_block_size = s->block_size > 0 ? s->block_size : 64;
    call->tc.model = trace_str(rp->tr, c->model);
    call->tc.cb = &call_cb;
    call->tc.arg = call;
    call->tc.replica = -1;
    call->tc.cached_tokens = -1;
    call->tc.server_prompt_tokens = call->tc.server_output_tokens = -1;
    call->lane_idx = -1;
    call->hit_blocks = call->total_blocks = -1;
    list_node_init(&call->node);
    if (!rp->cfg.measure_all_types && c->type != TRACE_CALL_NORMAL)
        call->warmup = true;
    return call;
}

static void call_free(struct replay_call *call)
{
    free(call->chunk_t);
    chain_put(call->rp, call->chain);
    free(call);
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
static void call_end(struct replay_call *call, int64_t t_ns, enum target_status st, const char *msg)
{
    struct replay *rp = call->rp;
    if (rp->destroying) {
        call_free(call);
        return;
    }
    if (call->in_target) {
        call->in_target = false;
        list_remove(&call->node);
        rp->n_inflight--;
    }
    struct replay_record r = {0};
    r.session = call->session_name;
    r.session_uid = call->session_uid;
    r.lane = call->lane_idx;
    r.call = call->call_index;
    r.tree = call->tree;
    r.intended_start_ns = call->intended_ns;
    r.start_ns = call->tc.start_ns;
    r.first_token_ns = call->first_ns;
    r.end_ns = call->chunks ? call->chunk_t[call->chunks - 1] : t_ns;
    if (st != TARGET_OK)
        r.end_ns = t_ns > r.end_ns ? t_ns : r.end_ns;
    r.chunks = call->chunks;
    r.prompt_tokens = call->tc.prompt_tokens;
    r.cached_tokens = call->tc.cached_tokens;
    r.output_tokens = call->out;
    r.max_tokens = call->tc.max_tokens;
    r.replica = call->tc.replica;
    r.preemptions = call->tc.preemptions;
    r.warmup = call->warmup;
    r.model = call->tc.model;
    r.chunk_times_ns = call->chunk_t;
    r.http_status = call->tc.http_status;
    r.server_prompt_tokens = call->tc.server_prompt_tokens;
    r.server_output_tokens = call->tc.server_output_tokens;
    r.live = rp->tg->live || call->tc.http_status != 0;
    r.has_blocks = call->total_blocks >= 0;
    r.hit_blocks = call->hit_blocks;
    r.total_blocks = call->total_blocks;
    call->end = REPLAY_END_OK;
    if (st == TARGET_ERR_CANCELLED || (call->cancel_requested && st != TARGET_OK)) {
        r.cancelled = true;
        r.error = "cancelled";
        call->end = REPLAY_END_CANCELLED;
    } else if (st == TARGET_ERR_TOO_LONG) {
        r.overflow = true;
        r.error = "context overflow";
        call->end = REPLAY_END_OVERFLOW;
    } else if (st != TARGET_OK) {
        r.error = msg && *msg ? msg : target_status_name(st);
        r.overflow = overflow_message(msg);
        call->end = r.overflow ? REPLAY_END_OVERFLOW : REPLAY_END_ERROR;
    }
    write_record(rp, &r);
    if (call->on_end)
        call->on_end(call->owner, call->call_index);
    if (!r.cancelled) {
        if (t_ns != rp->same_end_ns) {
            rp->same_end_ns = t_ns;
            rp->same_ends = 0;
        }
        uint64_t limit = rp->cfg.no_progress_ends ? rp->cfg.no_progress_ends
                                                  : NO_PROGRESS_ENDS + 16 * (uint64_t)rp->cfg.concurrency;
        if (++rp->same_ends == limit)
            replay_abort(rp, "no progress: %llu calls ended at %.3f s without the clock advancing "
                             "(the last: %s); the run is stopped",
                         (unsigned long long)rp->same_ends, (double)t_ns / 1e9,
                         r.error ? r.error : "completed");
        if (call->end != REPLAY_END_ERROR)
            rp->failed_in_a_row = 0;
        else if (++rp->failed_in_a_row == FAILED_IN_A_ROW + 16 * (uint64_t)rp->cfg.concurrency)
            replay_abort(rp, "%llu calls failed in a row (the last: %s): the target looks down; "
                             "the run is stopped",
                         (unsigned long long)rp->failed_in_a_row, r.error);
    }
    call_free(call);
    replay_maybe_finish(rp);
}

void replay_call_send(struct replay *rp, struct replay_call *call)
{
    int64_t now = loop_now(rp->loop);
    call->tc.start_ns = now;
    rp->calls_sent++;
    if (!call->warmup && ++rp->measured_sent == (uint64_t)rp->cfg.requests && rp->cfg.requests > 0 &&
        !rp->stopping) {
        /* --requests: this is the last call that starts; the stop (and the
         * grace) follow at once, after this call is on its way. */
        replay_requests_reached(rp);
    }
    if (rp->cfg.max_model_len > 0 &&
        call->tc.prompt_tokens + call->tc.max_tokens > rp->cfg.max_model_len) {
        snprintf(call->tc.error, sizeof call->tc.error, "context overflow");
        call_end(call, now, TARGET_ERR_TOO_LONG, NULL);
        return;
    }
    call->in_target = true;
    list_push_front(&rp->inflight, &call->node);
    rp->n_inflight++;
    char err[ERR_LEN];
    err[0] = 0;
    if (target_submit(rp->tg, &call->tc, err)) {
        snprintf(call->tc.error, sizeof call->tc.error, "%.120s", err[0] ? err : "submit failed");
        call_end(call, loop_now(rp->loop), TARGET_ERR_OTHER, call->tc.error);
    }
}

static void on_first_token(struct target_call *tc, int64_t t_ns)
{
    struct replay_call *call = tc->arg;
    if (call->first_ns < 0)
        call->first_ns = t_ns;
}

static void on_chunk(struct target_call *tc, int64_t t_ns, int64_t n)
{
    struct replay_call *call = tc->arg;
    if (n <= 0)
        return;
    if (call->first_ns < 0)
        call->first_ns = t_ns;
    if ((size_t)call->chunks == call->chunk_cap) {
        call->chunk_cap = call->chunk_cap ? call->chunk_cap * 2 : 16;
        call->chunk_t = xrealloc(call->chunk_t, call->chunk_cap * sizeof *call->chunk_t);
    }
    call->chunk_t[call->chunks++] = t_ns;
    call->out += n;
}

static void on_done(struct target_call *tc, int64_t t_ns, enum target_status st)
{
    call_end(tc->arg, t_ns, st, tc->error);
}

static const struct target_cb call_cb = {
    .first_token = on_first_token, .chunk = on_chunk, .done = on_done,
};

/* Newest first, as the calls were sent. A call moves to the cancelling
 * list before the target hears of it, so whether its done comes at once
 * (from inside target_cancel) or later, each call is visited once. */
void replay_calls_cancel(struct replay *rp)
{
    ASSERT(rp->stopping); /* nothing new is sent: the loop ends */
    struct list_node *n;
    while ((n = list_first(&rp->inflight))) {
        struct replay_call *call = LIST_ENTRY(n, struct replay_call, node);
        list_remove(n);
        list_push_back(&rp->cancelling, n);
        call->cancel_requested = true;
        target_cancel(rp->tg, &call->tc);
    }
}

void replay_calls_drop(struct replay *rp)
{
    ASSERT(rp->destroying);
    struct list_node *lists[2] = {&rp->inflight, &rp->cancelling};
    for (int i = 0; i < 2; i++) {
        struct list_node *n;
        while ((n = list_first(lists[i]))) {
            struct replay_call *call = LIST_ENTRY(n, struct replay_call, node);
            list_remove(n);
            target_cancel(rp->tg, &call->tc);
        }
    }
}

int replay_calls_verify(const struct replay *rp, char *err)
{
    int64_t n = 0;
    const struct list_node *lists[2] = {&rp->inflight, &rp->cancelling};
    for (int i = 0; i < 2; i++) {
        LIST_FOR_EACH(node, lists[i]) {
            const struct replay_call *call = LIST_ENTRY(node, struct replay_call, node);
            if (node->next->prev != node)
                return err_set(err, "in-flight list broken");
            if (!call->in_target)
                return err_set(err, "call %llu listed but not in the target",
                               (unsigned long long)call->tc.id);
            if (call->cancel_requested != (i == 1))
                return err_set(err, "call %llu on the wrong list (cancel requested %d)",
                               (unsigned long long)call->tc.id, call->cancel_requested);
            const struct replay_chain *ch = call->chain;
            if (!ch->refs || ch->n != call->tc.n_blocks || call->tc.blocks != ch->ids ||
                (ch->slot != UINT32_MAX && rp->chains[ch->slot] != ch))
                return err_set(err, "call %llu: its block chain is not the one shared",
                               (unsigned long long)call->tc.id);
            n++;
        }
    }
    if (n != rp->n_inflight)
        return err_set(err, "in-flight count %lld, listed %lld", (long long)rp->n_inflight, (long long)n);
    return 0;
}
