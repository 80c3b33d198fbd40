/* target_engine.c: the simulated engine (engine/engine.h) as a replay
 * target (target.h). Each call gets an engine_request of its own; the
 * engine's callbacks are passed through unchanged (times are exact). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/target.h"
#include "traces/base/mem.h"

struct ecall {
    struct engine_request req;
    struct target_call *tc;
};

struct etarget {
    struct target base;
    struct engine *e;
    struct engine_config cfg;
};

static void e_first(struct engine_request *r, int64_t t)
{
    struct ecall *ec = r->arg;
    ec->tc->cb->first_token(ec->tc, t);
}

static void e_chunk(struct engine_request *r, int64_t t, int64_t n)
{
    struct ecall *ec = r->arg;
    ec->tc->cb->chunk(ec->tc, t, n);
}

static void e_done(struct engine_request *r, int64_t t, enum engine_status st)
{
    struct ecall *ec = r->arg;
    struct target_call *tc = ec->tc;
    tc->replica = r->replica;
    tc->cached_tokens = r->cached_tokens;
    tc->preemptions = r->preemptions;
    enum target_status ts = TARGET_OK;
    switch (st) {
    case ENGINE_OK: ts = TARGET_OK; break;
    case ENGINE_ERR_TOO_LONG: ts = TARGET_ERR_TOO_LONG; break;
    case ENGINE_ERR_CANCELLED: ts = TARGET_ERR_CANCELLED; break;
    case ENGINE_ERR_NO_SPACE: ts = TARGET_ERR_NO_SPACE; break;
    default: ts = TARGET_ERR_OTHER; break;
    }
    if (ts != TARGET_OK && !tc->error[0])
        snprintf(tc->error, sizeof tc->error, "%s", target_status_name(ts));
    tc->priv = NULL;
    free(ec);
    tc->cb->done(tc, t, ts);
}

static const struct engine_cb ecb = {.first_token = e_first, .chunk = e_chunk, .done = e_done};

static int et_submit(struct target *t, struct target_call *c, char *err)
{
    struct etarget *et = (struct etarget *)t;
    struct ecall *ec = xcalloc(1, sizeof *ec);
    ec->tc = c;
    ec->req.id = c->id;
    ec->req.session_key = c->session_key;
    ec->req.prompt_tokens = c->prompt_tokens;
    ec->req.max_tokens = c->max_tokens;
    ec->req.blocks = c->blocks;
    ec->req.n_blocks = c->n_blocks;
    ec->req.trace_block_size = c->trace_block_size;
    ec->req.cb = &ecb;
    ec->req.arg = ec;
    ec->req.replica = -1;
    c->priv = ec;
    c->error[0] = 0;
    c->replica = -1;
    c->http_status = 0;
    c->server_prompt_tokens = c->server_output_tokens = -1;
    if (engine_submit(et->e, &ec->req, err)) {
        c->priv = NULL;
        free(ec);
        return -1;
    }
    return 0;
}

static void et_cancel(struct target *t, struct target_call *c)
{
    struct etarget *et = (struct etarget *)t;
    struct ecall *ec = c->priv;
    if (ec)
        engine_cancel(et->e, &ec->req);
}

static void et_stats(struct target *t, struct target_stats *s)
{
    struct etarget *et = (struct etarget *)t;
    struct engine_stats es;
    memset(&es, 0, sizeof es);
    engine_get_stats(et->e, &es);
    memset(s, 0, sizeof *s);
    s->running = es.running;
    s->waiting = es.waiting;
    s->kv_used_frac = es.kv_used_frac;
    s->prompt_tokens = es.prompt_tokens;
    s->cached_tokens = es.cached_tokens;
    s->output_tokens = es.output_tokens;
    s->preemptions = es.preemptions;
    s->fallback_steps = es.fallback_steps;
    s->steps = es.steps;
}

static void *et_describe(struct target *t)
{
    return engine_describe_json(((struct etarget *)t)->e);
}

static void et_destroy(struct target *t)
{
    struct etarget *et = (struct etarget *)t;
    engine_destroy(et->e);
    free(et);
}

static const struct target_ops et_ops = {
    .submit = et_submit, .cancel = et_cancel, .stats = et_stats,
    .describe_json = et_describe, .destroy = et_destroy,
};

struct target *target_engine_create(const struct engine_config *cfg, struct loop *l, char *err)
{
    struct engine *e = engine_create(cfg, l, err);
    if (!e)
        return NULL;
    struct etarget *et = xcalloc(1, sizeof *et);
    et->base.ops = &et_ops;
    et->base.loop = l;
    et->base.gpus = cfg->gpus;
    et->e = e;
    et->cfg = *cfg;
    return &et->base;
}

struct engine *target_engine_get(struct target *t)
{
    return t && t->ops == &et_ops ? ((struct etarget *)t)->e : NULL;
}
