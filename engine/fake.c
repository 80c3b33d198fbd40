/* fake.c: a fixed-rate target whose timelines are known exactly
 * (see target.h): no queueing, a per-session_key prefix cache over chained
 * block ids, a fixed prefill cost per uncached token and a fixed time per
 * output token, delivered in chunks. Tests use it to check the replayer's
 * schedule to the nanosecond; `sim --target fake` uses it for dry runs. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/target.h"
#include "traces/base/err.h"
#include "traces/base/hash.h"
#include "traces/base/hmap.h"
#include "traces/base/list.h"
#include "traces/base/mem.h"

struct fake_call {
    struct loop_timer timer;
    struct target_call *c;
    struct fake *f;
    int64_t emitted;     /* tokens delivered so far */
    struct list_node live; /* in fake.live */
};

struct fake {
    struct target base;
    struct target_fake_config cfg;
    struct hmap seen;        /* chained prefix hashes seen (values unused) */
    struct list_node live;   /* calls in flight (struct fake_call) */
    int64_t running;
    struct target_stats st;
};

static void unlink_call(struct fake *f, struct fake_call *fc)
{
    list_remove(&fc->live);
    f->running--;
}

static void finish(struct fake *f, struct fake_call *fc, int64_t t, enum target_status st)
{
    struct target_call *c = fc->c;
    unlink_call(f, fc);
    c->priv = NULL;
    free(fc);
    c->cb->done(c, t, st);
}

static void on_chunk(struct loop *l, struct loop_timer *tm)
{
    struct fake_call *fc = tm->arg;
    struct fake *f = fc->f;
    struct target_call *c = fc->c;
    int64_t now = loop_now(l);
    int64_t n;
    if (fc->emitted == 0) {
        n = 1;
        c->cb->first_token(c, now);
    } else {
        n = c->max_tokens - fc->emitted;
        if (n > f->cfg.chunk_tokens)
            n = f->cfg.chunk_tokens;
    }
    fc->emitted += n;
    f->st.output_tokens += n;
    c->cb->chunk(c, now, n);
    if (fc->emitted >= c->max_tokens) {
        finish(f, fc, now, TARGET_OK);
        return;
    }
    int64_t next_n = c->max_tokens - fc->emitted;
    if (next_n > f->cfg.chunk_tokens)
        next_n = f->cfg.chunk_tokens;
    loop_at(l, &fc->timer, now + next_n * f->cfg.tpot_ns, on_chunk, fc);
}

static void on_too_long(struct loop *l, struct loop_timer *tm)
{
    struct fake_call *fc = tm->arg;
    finish(fc->f, fc, loop_now(l), TARGET_ERR_TOO_LONG);
}

static int fake_submit(struct target *t, struct target_call *c, char *err)
{
    struct fake *f = (struct fake *)t;
    if (c->max_tokens < 1 || c->prompt_tokens < 0)
        return err_set(err, "call %llu: max_tokens %lld, prompt %lld",
                       (unsigned long long)c->id, (long long)c->max_tokens,
                       (long long)c->prompt_tokens);
    c->replica = 0;
    c->preemptions = 0;
    c->http_status = 0;
    c->server_prompt_tokens = c->server_output_tokens = -1;
    c->error[0] = 0;
    c->cached_tokens = 0;
    struct fake_call *fc = xcalloc(1, sizeof *fc);
    fc->c = c;
    fc->f = f;
    c->priv = fc;
    list_push_front(&f->live, &fc->live);
    f->running++;
    int64_t now = loop_now(t->loop);
    if (f->cfg.max_model_len > 0 && c->prompt_tokens + c->max_tokens > f->cfg.max_model_len) {
        snprintf(c->error, sizeof c->error, "prompt %lld + max_tokens %lld > max_model_len %lld",
                 (long long)c->prompt_tokens, (long long)c->max_tokens,
                 (long long)f->cfg.max_model_len);
        loop_at(t->loop, &fc->timer, now, on_too_long, fc);
        return 0;
    }
    /* Prefix cache: leading blocks whose chained hash was seen before
     * (every block's hash is remembered). */
    int64_t matched = 0;
    /* The first shared_blocks blocks under the shared key (target.h). */
    uint64_t h = hash_mix(c->shared_blocks ? c->shared_key : c->session_key, 0x9e3779b97f4a7c15ULL);
    for (uint32_t i = 0; f->cfg.cache && i < c->n_blocks; i++) {
        if (c->shared_blocks && i == c->shared_blocks)
            h = hash_mix(h, c->session_key);
        h = hash_mix(h, c->blocks[i]);
        bool added;
        hmap_put(&f->seen, h, &added);
        if (!added && matched == i)
            matched++;
    }
    int64_t cached = matched * c->trace_block_size;
    if (cached > c->prompt_tokens - 1)
        cached = c->prompt_tokens > 0 ? c->prompt_tokens - 1 : 0;
    c->cached_tokens = cached;
    f->st.prompt_tokens += c->prompt_tokens;
    f->st.cached_tokens += cached;
    int64_t first = now + f->cfg.overhead_ns + (c->prompt_tokens - cached) * f->cfg.prefill_ns_per_token;
    loop_at(t->loop, &fc->timer, first, on_chunk, fc);
    return 0;
}

static void fake_cancel(struct target *t, struct target_call *c)
{
    struct fake *f = (struct fake *)t;
    struct fake_call *fc = c->priv;
    if (!fc)
        return;
    loop_cancel(t->loop, &fc->timer);
    snprintf(c->error, sizeof c->error, "cancelled");
    finish(f, fc, loop_now(t->loop), TARGET_ERR_CANCELLED);
}

static void fake_stats(struct target *t, struct target_stats *s)
{
    struct fake *f = (struct fake *)t;
    *s = f->st;
    s->running = f->running;
    s->waiting = 0;
    s->kv_used_frac = -1;
}

static void *fake_describe(struct target *t)
{
    struct fake *f = (struct fake *)t;
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:i, s:b}", "target", "fake",
                     "overhead_ns", (json_int_t)f->cfg.overhead_ns,
                     "prefill_ns_per_token", (json_int_t)f->cfg.prefill_ns_per_token,
                     "tpot_ns", (json_int_t)f->cfg.tpot_ns,
                     "chunk_tokens", (json_int_t)f->cfg.chunk_tokens,
                     "max_model_len", (json_int_t)f->cfg.max_model_len,
                     "gpus", f->cfg.gpus, "cache", f->cfg.cache);
}

static void fake_destroy(struct target *t)
{
    struct fake *f = (struct fake *)t;
    LIST_FOR_EACH_SAFE(n, nx, &f->live) {
        struct fake_call *fc = LIST_ENTRY(n, struct fake_call, live);
        loop_cancel(t->loop, &fc->timer);
        unlink_call(f, fc);
        fc->c->priv = NULL;
        free(fc);
    }
    hmap_free(&f->seen);
    free(f);
}

static const struct target_ops fake_ops = {
    .submit = fake_submit, .cancel = fake_cancel, .stats = fake_stats,
    .describe_json = fake_describe, .destroy = fake_destroy,
};

struct target *target_fake_create(const struct target_fake_config *cfg, struct loop *l)
{
    struct fake *f = xcalloc(1, sizeof *f);
    f->base.ops = &fake_ops;
    f->base.loop = l;
    f->cfg = *cfg;
    if (f->cfg.chunk_tokens < 1)
        f->cfg.chunk_tokens = 1;
    f->base.gpus = cfg->gpus > 0 ? cfg->gpus : 1;
    hmap_init(&f->seen);
    list_init(&f->live);
    return &f->base;
}
