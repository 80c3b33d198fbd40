/* engine.c: the simulated serving engine (engine.h) and its target
 * wrapper (target.h): the deployment (G GPUs in G/T replicas of TP size T,
 * each GPU's memory budget), the router, the engine's events on the loop,
 * statistics, the run.json description and the Chrome trace.
 *
 * Events: the engine arms one loop timer. Each replica has the time of its
 * next step boundary; replicas due at the same time are processed in
 * replica order, so the order of same-time boundaries does not depend on
 * when the timer was armed (it differs between stepwise and closed-form
 * advance). A submit to a busy replica cuts its closed-form run at the
 * next boundary; a submit to an idle one makes it due now.
 *
 * Memory per GPU (engine_describe_json, `engine info`):
 *   usable      = HBM x gpu_memory_utilization (vLLM's knob, default 0.9)
 *   weights     = the model's shard at TP (preset.h)
 *   activations = reserve for one step of max_num_batched_tokens: residual
 *                 and layer buffers (12 x hidden x 2 B per token), MoE
 *                 dispatch (top-k x 2 x expert intermediate / TP x 2 B per
 *                 token), logits (max_num_seqs x (draft + 1) x vocab / TP x
 *                 4 B), plus 1 GiB of workspace (CUDA graphs, NCCL and
 *                 allocator pools). vLLM measures this with a profiling run;
 *                 this is the estimate of the same buffers.
 *   states      = max_num_seqs recurrent-state slots (KDA layers: one per
 *                 running sequence)
 *   KV pool     = the rest, in blocks of block_size tokens; recurrent-state
 *                 checkpoints for prefix hits are carved from it on demand
 *                 (sched.h says where they are placed).
 */
#include "engine/engine.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cost.h"
#include "engine/preset.h"
#include "engine/sched.h"
#include "engine/spec.h"
#include "traces/base/err.h"
#include "traces/base/hmap.h"
#include "traces/base/mem.h"
#include "traces/base/rng.h"

/* Checkpoints along a prompt every this many tokens (rounded to blocks):
 * 32k tokens keeps their memory near 3 % of the KV they cover on Kimi K3
 * (27 MB of state per GPU at TP16 against 884 KB per 64-token block). */
#define CKPT_INTERVAL_TOKENS 32768

struct engine_plan {
    double hbm, usable, weights, activations, state_per_seq, states, kv_pool;
    double kv_per_token, block_bytes;
    int64_t kv_blocks, kv_tokens, ckpt_blocks, max_ckpts;
};

struct engine {
    struct target base;    /* the engine as a target (target_engine_create) */
    struct engine_config c;
    struct loop *loop;
    struct model_preset m;
    struct gpu_preset g;
    struct cost_model *cost;
    struct pricer *pricer;
    struct spec_model spec;
    struct engine_plan plan;
    int n_rep;
    struct sched *rep;
    /* Replica event heap ordered by (next_ns, index). */
    int64_t *next_ns;
    int *heap, *pos;
    struct loop_timer timer;
    bool in_fire;
    int current;   /* replica in sched_boundary, -1 if none */
    /* Router. */
    struct hmap routes;  /* session_key -> replica (affinity) */
    uint64_t rr;         /* round-robin counter, and least-loaded's start */
    /* Hooks. */
    engine_step_hook_fn hook;
    void *hook_arg;
    FILE *trace;
    int64_t trace_kernel_step, trace_steps;
    bool trace_first;
};

static const struct target_ops engine_target_ops;

/* ---- deployment ---- */

static void preset_path(const char *dir, const char *kind, const char *name, char *buf,
                        size_t n)
{
    if (dir && *dir && !strchr(name, '/') && !strstr(name, ".json"))
        snprintf(buf, n, "%s/%s/%s.json", dir, kind, name);
    else
        snprintf(buf, n, "%s", name);
}

static int plan_memory(const struct engine_config *c, const struct model_preset *m,
                       const struct gpu_preset *g, struct engine_plan *p, char *err)
{
    memset(p, 0, sizeof *p);
    int tp = c->tp;
    int draft = c->spec ? c->draft : 0;
    p->hbm = g->hbm_bytes;
    p->usable = g->hbm_bytes * c->gpu_memory_utilization;
    p->weights = model_weight_bytes_per_gpu(m, tp);
    double tok = (double)c->max_num_batched_tokens;
    p->activations = tok * 12.0 * m->hidden * 2 +
                     tok * m->experts_per_token * 2.0 * m->expert_intermediate / tp * 2 +
                     (double)c->max_num_seqs * (draft + 1) * m->vocab / tp * 4 +
                     1024.0 * 1024 * 1024;
    p->state_per_seq = model_state_bytes_per_seq_per_gpu(m, tp);
    p->states = p->state_per_seq * c->max_num_seqs;
    p->kv_pool = p->usable - p->weights - p->activations - p->states;
    p->kv_per_token = model_kv_bytes_per_token_per_gpu(m, tp);
    p->block_bytes = p->kv_per_token * c->block_size;
    const double GB = 1e9;
    if (p->kv_pool <= 0)
        return err_set(err, "%s does not fit on %d x %s at TP%d: per GPU, weights %.1f GB + "
                       "activations %.1f GB + %d state slots %.1f GB = %.1f GB > %.1f GB usable "
                       "(%.1f GB HBM x %.2f)", m->name, c->gpus, g->name, tp, p->weights / GB,
                       p->activations / GB, c->max_num_seqs, p->states / GB,
                       (p->weights + p->activations + p->states) / GB, p->usable / GB,
                       p->hbm / GB, c->gpu_memory_utilization);
    if (p->block_bytes <= 0)
        return err_set(err, "%s: no KV cache per token", m->name);
    p->kv_blocks = (int64_t)floor(p->kv_pool / p->block_bytes);
    p->kv_tokens = p->kv_blocks * c->block_size;
    p->ckpt_blocks = p->state_per_seq > 0 ? (int64_t)ceil(p->state_per_seq / p->block_bytes) : 0;
    p->max_ckpts = p->ckpt_blocks ? p->kv_blocks / p->ckpt_blocks : 0;
    return 0;
}

struct engine *engine_create(const struct engine_config *cfg, struct loop *l, char *err)
{
    struct engine_config c = *cfg;
    if (c.gpus < 1)
        return err_set(err, "--gpus %d: must be at least 1", c.gpus), NULL;
    if (c.tp < 1)
        return err_set(err, "--tp %d: must be at least 1", c.tp), NULL;
    if (c.gpus % c.tp)
        return err_set(err, "--gpus %d is not a multiple of --tp %d (replicas = gpus / tp)",
                       c.gpus, c.tp), NULL;
    if (c.block_size < 1)
        return err_set(err, "--block-size %d: must be at least 1", c.block_size), NULL;
    if (c.max_num_seqs < 1)
        return err_set(err, "--max-num-seqs %d: must be at least 1", c.max_num_seqs), NULL;
    if (c.max_model_len < 0)
        return err_set(err, "--max-model-len %lld: must be positive",
                       (long long)c.max_model_len), NULL;
    if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1))
        return err_set(err, "--gpu-memory-utilization %g: must be in (0, 1]",
                       c.gpu_memory_utilization), NULL;
    int draft = c.spec ? c.draft : 0;
    if (c.spec && (c.draft < 1 || c.draft > ACCEPT_MAX_DRAFT))
        return err_set(err, "--draft %d: must be between 1 and %d", c.draft, ACCEPT_MAX_DRAFT),
               NULL;
    if (c.max_num_batched_tokens < draft + 1)
        return err_set(err, "--max-num-batched-tokens %lld: must be at least draft + 1 = %d",
                       (long long)c.max_num_batched_tokens, draft + 1), NULL;
    struct engine *e = xcalloc(1, sizeof *e);
    e->base = (struct target){.ops = &engine_target_ops, .loop = l, .gpus = c.gpus};
    e->c = c;
    e->loop = l;
    e->current = -1;
    char path[1024];
    preset_path(c.presets_dir, "models", c.model, path, sizeof path);
    if (preset_load_model(path, &e->m, err) < 0)
        goto fail;
    preset_path(c.presets_dir, "gpus", c.gpu, path, sizeof path);
    if (preset_load_gpu(path, &e->g, err) < 0)
        goto fail;
    if (c.tp > e->g.nvlink_domain) {
        err_set(err, "--tp %d exceeds the %s NVLink domain of %d GPUs (tensor parallelism "
                "across domains is not modelled)", c.tp, e->g.name, e->g.nvlink_domain);
        goto fail;
    }
    if (!e->c.max_model_len)
        e->c.max_model_len = e->m.max_position;
    if (e->c.max_model_len > e->m.max_position) {
        err_set(err, "--max-model-len %lld exceeds %s's maximum %lld",
                (long long)e->c.max_model_len, e->m.name, (long long)e->m.max_position);
        goto fail;
    }
    if (plan_memory(&e->c, &e->m, &e->g, &e->plan, err) < 0)
        goto fail;
    if (e->plan.kv_tokens < e->c.max_model_len) {
        err_set(err, "KV cache of %lld tokens per replica (%lld blocks of %d) cannot hold one "
                "request of --max-model-len %lld; lower --max-model-len or add memory",
                (long long)e->plan.kv_tokens, (long long)e->plan.kv_blocks, c.block_size,
                (long long)e->c.max_model_len);
        goto fail;
    }
    e->cost = cost_create(&e->m, &e->g, c.tp, c.backend, c.calibration, c.force_calibration,
                          err);
    if (!e->cost)
        goto fail;
    if (spec_init(&e->spec, draft, c.acceptance, c.seed, err) < 0)
        goto fail;
    e->pricer = pricer_create(e->cost);
    e->n_rep = c.gpus / c.tp;
    e->rep = xcalloc((size_t)e->n_rep, sizeof *e->rep);
    struct sched_params sp = {
        .block_size = c.block_size,
        .max_num_batched_tokens = c.max_num_batched_tokens,
        .max_num_seqs = c.max_num_seqs,
        .max_model_len = e->c.max_model_len,
        .prefix_caching = c.prefix_caching,
        .hybrid = e->m.n_layers_kind[LAYER_KDA] > 0,
        .ckpt_interval = CKPT_INTERVAL_TOKENS / c.block_size > 0
                             ? CKPT_INTERVAL_TOKENS / c.block_size : 1,
        .ckpt_units = e->plan.ckpt_blocks,
        .kv_units = e->plan.kv_blocks,
        .stepwise = c.stepwise,
        .no_parks = c.no_parks,
        .spec = &e->spec,
        /* Session hints: 64 MB over the deployment, at least 2 MB a replica. */
        .hint_budget = c.hint_bytes < 0 ? 0
                     : c.hint_bytes > 0 ? (c.hint_bytes / e->n_rep > 1 ? c.hint_bytes / e->n_rep : 1)
                     : (64 << 20) / e->n_rep > (2 << 20) ? (64 << 20) / e->n_rep : (2 << 20),
    };
    e->next_ns = xmalloc((size_t)e->n_rep * sizeof *e->next_ns);
    e->heap = xmalloc((size_t)e->n_rep * sizeof *e->heap);
    e->pos = xmalloc((size_t)e->n_rep * sizeof *e->pos);
    for (int i = 0; i < e->n_rep; i++) {
        sched_init(&e->rep[i], i, &sp, e->pricer, l);
        e->next_ns[i] = INT64_MAX;
        e->heap[i] = i;
        e->pos[i] = i;
    }
    memset(&e->timer, 0, sizeof e->timer);
    hmap_init(&e->routes);
    struct rng r;
    rng_init(&r, c.seed, RNG_ROUTE);
    e->rr = rng_below(&r, (uint64_t)e->n_rep);
    return e;
fail:
    engine_destroy(e);
    return NULL;
}

void engine_destroy(struct engine *e)
{
    if (!e)
        return;
    engine_trace_close(e);
    if (e->loop && loop_timer_armed(&e->timer))
        loop_cancel(e->loop, &e->timer);
    for (int i = 0; e->rep && i < e->n_rep; i++)
        sched_free(&e->rep[i]);
    free(e->rep);
    free(e->next_ns);
    free(e->heap);
    free(e->pos);
    hmap_free(&e->routes);
    pricer_destroy(e->pricer);
    cost_destroy(e->cost);
    free(e);
}

int engine_replicas(const struct engine *e) { return e->n_rep; }

/* ---- the replica heap ---- */

static inline bool rep_before(const struct engine *e, int a, int b)
{
    return e->next_ns[a] < e->next_ns[b] || (e->next_ns[a] == e->next_ns[b] && a < b);
}

static void heap_swap(struct engine *e, int i, int j)
{
    int a = e->heap[i], b = e->heap[j];
    e->heap[i] = b;
    e->heap[j] = a;
    e->pos[b] = i;
    e->pos[a] = j;
}

static void heap_fix(struct engine *e, int r)
{
    int i = e->pos[r];
    while (i > 0 && rep_before(e, e->heap[i], e->heap[(i - 1) / 2])) {
        heap_swap(e, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        int c = 2 * i + 1;
        if (c >= e->n_rep)
            break;
        if (c + 1 < e->n_rep && rep_before(e, e->heap[c + 1], e->heap[c]))
            c++;
        if (!rep_before(e, e->heap[c], e->heap[i]))
            break;
        heap_swap(e, i, c);
        i = c;
    }
}

static void set_next(struct engine *e, int r, int64_t t)
{
    if (e->next_ns[r] == t)
        return;
    e->next_ns[r] = t;
    heap_fix(e, r);
}

static void on_timer(struct loop *l, struct loop_timer *t);

static void rearm(struct engine *e)
{
    if (e->in_fire)
        return;
    int64_t t = e->next_ns[e->heap[0]];
    if (t == INT64_MAX) {
        loop_cancel(e->loop, &e->timer);
        return;
    }
    if (loop_timer_armed(&e->timer) && e->timer.at_ns == t)
        return;
    loop_at(e->loop, &e->timer, t, on_timer, e);
}

static void on_timer(struct loop *l, struct loop_timer *tm)
{
    struct engine *e = tm->arg;
    int64_t now = loop_now(l);
    e->in_fire = true;
    while (e->next_ns[e->heap[0]] <= now) {
        int r = e->heap[0];
        /* The boundary's own time: on the virtual clock it is now; on the
         * real clock the timer may fire late, and the simulated timeline
         * stays exact (callbacks then carry times slightly in the past). */
        int64_t t = e->next_ns[r];
        e->current = r;
        int64_t next = sched_boundary(&e->rep[r], t);
        e->current = -1;
        ASSERT(next > t);
        set_next(e, r, next);
        if (e->hook)
            e->hook(e, r, e->hook_arg);
    }
    e->in_fire = false;
    rearm(e);
}

/* ---- router ---- */

static int least_loaded(struct engine *e)
{
    int best = -1;
    int n = e->n_rep;
    int start = (int)(e->rr++ % (uint64_t)n);
    for (int k = 0; k < n; k++) {
        int i = (start + k) % n;
        if (best < 0 || e->rep[i].outstanding < e->rep[best].outstanding)
            best = i;
    }
    return best;
}

static int route(struct engine *e, const struct target_call *c)
{
    if (e->n_rep == 1)
        return 0;
    switch (e->c.router) {
    case ENGINE_ROUTER_ROUND_ROBIN:
        return (int)(e->rr++ % (uint64_t)e->n_rep);
    case ENGINE_ROUTER_LEAST_LOADED:
        return least_loaded(e);
    case ENGINE_ROUTER_AFFINITY:
    default: {
        /* A session's first call goes to the least loaded replica, the
         * rest follow it. */
        bool added;
        uint64_t *rep = hmap_put(&e->routes, c->session_key, &added);
        if (added)
            *rep = (uint64_t)least_loaded(e);
        return (int)*rep;
    }
    }
}

/* ---- requests ---- */

int engine_submit(struct engine *e, struct target_call *c, char *err)
{
    c->priv = NULL;
    c->replica = -1;
    c->http_status = 0;
    c->server_prompt_tokens = c->server_output_tokens = -1;
    c->error[0] = 0;
    if (!c->cb || !c->cb->done)
        return err_set(err, "call %llu: no callbacks", (unsigned long long)c->id);
    int rep = route(e, c);
    struct sched *s = &e->rep[rep];
    if (sched_submit(s, c, err) < 0)
        return -1;
    if (e->current == rep)
        return 0;  /* inside its boundary: the next step sees it */
    int64_t now = loop_now(e->loop);
    int64_t t = s->busy ? sched_cut(s, now) : now;
    set_next(e, rep, t);
    rearm(e);
    return 0;
}

void engine_cancel(struct engine *e, struct target_call *c)
{
    if (!c->priv)
        return;
    int rep = c->replica;
    struct sched *s = &e->rep[rep];
    sched_cancel(s, c);
    if (e->current == rep)
        return;
    int64_t now = loop_now(e->loop);
    set_next(e, rep, s->busy ? sched_cut(s, now) : now);
    rearm(e);
}

void engine_set_step_hook(struct engine *e, engine_step_hook_fn fn, void *arg)
{
    e->hook = fn;
    e->hook_arg = arg;
}

int engine_verify(const struct engine *e, char *err)
{
    for (int i = 0; i < e->n_rep; i++)
        if (sched_verify(&e->rep[i], err) < 0)
            return -1;
    for (int i = 0; i < e->n_rep; i++) {
        if (e->heap[e->pos[i]] != i)
            return err_set(err, "engine: replica heap position of %d", i);
        int p = e->pos[i];
        if (p > 0 && rep_before(e, i, e->heap[(p - 1) / 2]))
            return err_set(err, "engine: replica heap order at %d", i);
        if (e->rep[i].busy && e->current != i && e->next_ns[i] != e->rep[i].step_end_ns)
            return err_set(err, "engine: replica %d next event %lld, its step ends at %lld", i,
                           (long long)e->next_ns[i], (long long)e->rep[i].step_end_ns);
    }
    return 0;
}

void engine_get_stats(const struct engine *e, struct target_stats *st)
{
    memset(st, 0, sizeof *st);
    double used = 0, total = 0;
    for (int i = 0; i < e->n_rep; i++) {
        const struct sched *s = &e->rep[i];
        st->running += s->n_running;
        st->waiting += s->n_waiting;
        used += (double)(s->kv.total_units - s->kv.free_units - s->kv.lru_units);
        total += (double)s->kv.total_units;
        st->prompt_tokens += s->prompt_tokens;
        st->cached_tokens += s->cached_tokens;
        st->output_tokens += s->output_tokens;
        st->steps += s->steps;
        st->fallback_steps += s->fallback_steps;
        st->preemptions += s->preemptions;
        st->busy_ns += s->busy_ns;
        /* Steps of a closed-form run that have ended by now count as they
         * would stepping one by one (the run is applied at its end). */
        if (s->busy && s->run_k > 1) {
            int64_t now = loop_now(e->loop), start = s->step_start_ns;
            for (int k = 0; k < s->run_k - 1 && s->run_end[k] <= now; k++) {
                const uint8_t *em = s->run_emit + (size_t)k * s->n_batch;
                for (int j = 0; j < s->n_batch; j++)
                    st->output_tokens += em[j];
                st->steps++;
                st->fallback_steps += s->run_fb[k];
                st->busy_ns += s->run_end[k] - start;
                start = s->run_end[k];
            }
        }
    }
    st->kv_used_frac = total > 0 ? used / total : 0;
}

void engine_get_replica_stats(const struct engine *e, int replica, struct engine_replica_stats *st)
{
    const struct sched *s = &e->rep[replica];
    memset(st, 0, sizeof *st);
    st->running = s->n_running;
    st->waiting = s->n_waiting;
    st->kv_blocks = s->kv.total_units;
    st->kv_blocks_used = s->kv.total_units - s->kv.free_units - s->kv.lru_units;
    st->kv_blocks_cached = s->kv.n_lru;
    st->checkpoints = s->kv.n_ckpt;
    st->evictions = s->kv.evictions;
    st->steps = s->steps;
    st->closed_form_runs = s->runs;
    st->closed_form_steps = s->run_steps;
    st->parks_made = s->kv.parks_made;
    st->parks_adopted = s->kv.parks_adopted;
    st->parks_live = s->kv.n_parks_live;
    st->park_blocks_materialised = s->kv.park_blocks_materialised;
    st->queue_compactions = s->kv.compactions;
    st->queue_regrowths = s->kv.regrowths;
}

/* ---- description ---- */

void *engine_describe_json(const struct engine *e)
{
    const struct engine_plan *p = &e->plan;
    struct target_stats st;
    engine_get_stats(e, &st);
    json_t *o = json_object();
    json_object_set_new(o, "model", json_pack("{s:s, s:s, s:f, s:f}", "name", e->m.name,
                                              "source", e->m.source, "total_params",
                                              model_total_params(&e->m), "active_params",
                                              model_active_params(&e->m)));
    json_object_set_new(o, "gpu", json_pack("{s:s, s:s}", "name", e->g.name, "source",
                                            e->g.source));
    json_object_set_new(o, "layout",
                        json_pack("{s:i, s:i, s:i, s:s, s:s}", "gpus", e->c.gpus, "tp", e->c.tp,
                                  "replicas", e->n_rep, "backend",
                                  engine_backend_name(e->c.backend), "router",
                                  engine_router_name(e->c.router)));
    json_object_set_new(o, "scheduler",
                        json_pack("{s:i, s:I, s:i, s:I, s:b, s:b}", "block_size",
                                  e->c.block_size, "max_num_batched_tokens",
                                  (json_int_t)e->c.max_num_batched_tokens, "max_num_seqs",
                                  e->c.max_num_seqs, "max_model_len",
                                  (json_int_t)e->c.max_model_len, "prefix_caching",
                                  e->c.prefix_caching, "stepwise", e->c.stepwise));
    json_t *mem = json_object();
    json_object_set_new(mem, "hbm_bytes", json_real(p->hbm));
    json_object_set_new(mem, "gpu_memory_utilization", json_real(e->c.gpu_memory_utilization));
    json_object_set_new(mem, "usable_bytes", json_real(p->usable));
    json_object_set_new(mem, "weights_bytes", json_real(p->weights));
    json_object_set_new(mem, "activations_bytes", json_real(p->activations));
    json_object_set_new(mem, "state_slot_bytes", json_real(p->state_per_seq));
    json_object_set_new(mem, "state_slots", json_integer(p->state_per_seq > 0 ? e->c.max_num_seqs : 0));
    json_object_set_new(mem, "states_bytes", json_real(p->states));
    json_object_set_new(mem, "kv_pool_bytes", json_real(p->kv_pool));
    json_object_set_new(mem, "kv_bytes_per_token", json_real(p->kv_per_token));
    json_object_set_new(mem, "kv_block_bytes", json_real(p->block_bytes));
    json_object_set_new(o, "memory_per_gpu", mem);
    json_t *cap = json_object();
    json_object_set_new(cap, "kv_blocks_per_replica", json_integer(p->kv_blocks));
    json_object_set_new(cap, "kv_tokens_per_replica", json_integer(p->kv_tokens));
    json_object_set_new(cap, "kv_tokens_total", json_integer(p->kv_tokens * e->n_rep));
    json_object_set_new(cap, "sequences_per_replica", json_integer(e->c.max_num_seqs));
    json_object_set_new(cap, "state_slots_per_replica",
                        json_integer(p->state_per_seq > 0 ? e->c.max_num_seqs : 0));
    json_object_set_new(cap, "checkpoint_blocks", json_integer(p->ckpt_blocks));
    json_object_set_new(cap, "checkpoints_max_per_replica", json_integer(p->max_ckpts));
    json_object_set_new(cap, "checkpoint_interval_tokens",
                        json_integer(e->rep[0].p.ckpt_interval * e->c.block_size));
    json_object_set_new(o, "capacity", cap);
    json_t *spec = json_object();
    json_object_set_new(spec, "method", json_string(e->c.spec ? "dspark" : "none"));
    json_object_set_new(spec, "draft", json_integer(e->spec.draft));
    json_object_set_new(spec, "acceptance", json_string(e->c.spec ? e->c.acceptance : "none"));
    json_object_set_new(spec, "model", json_string(e->spec.desc));
    json_object_set_new(spec, "expected_tokens_per_step", json_real(e->spec.mean));
    json_object_set_new(o, "speculative", spec);
    json_t *cal = json_array();
    const char *names[256];
    int nc = cost_calibrated_kernels(e->cost, names, 256);
    for (int i = 0; i < nc; i++)
        json_array_append_new(cal, json_string(names[i]));
    json_object_set_new(o, "calibration",
                        json_pack("{s:s, s:o}", "file", e->c.calibration, "kernels", cal));
    json_object_set_new(o, "seed", json_integer((json_int_t)e->c.seed));
    int64_t runs = 0, run_steps = 0, evictions = 0;
    for (int i = 0; i < e->n_rep; i++) {
        runs += e->rep[i].runs;
        run_steps += e->rep[i].run_steps;
        evictions += e->rep[i].kv.evictions;
    }
    json_object_set_new(o, "counts",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "steps",
                                  (json_int_t)st.steps, "fallback_steps",
                                  (json_int_t)st.fallback_steps, "preemptions",
                                  (json_int_t)st.preemptions, "closed_form_runs",
                                  (json_int_t)runs, "closed_form_steps", (json_int_t)run_steps,
                                  "evictions", (json_int_t)evictions));
    return o;
}

/* ---- Chrome trace ---- */

static void trace_step(void *arg, int replica, int64_t start, int64_t end,
                       const struct cost_batch *b, bool fallback)
{
    struct engine *e = arg;
    FILE *f = e->trace;
    if (!f)
        return;
    fprintf(f, "%s{\"name\":\"step\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
               "\"dur\":%.3f,\"args\":{\"index\":%lld,\"decode\":%d,\"positions\":%d,"
               "\"prefill\":%d,\"prefill_tokens\":%lld,\"sum_ctx\":%lld,\"fallback\":%s}}",
            e->trace_first ? "\n" : ",\n", replica, start / 1e3, (end - start) / 1e3,
            (long long)e->trace_steps, b->n_decode, b->decode_positions, b->n_prefill,
            (long long)b->prefill_tokens, (long long)b->sum_ctx, fallback ? "true" : "false");
    e->trace_first = false;
    if (e->trace_steps == e->trace_kernel_step) {
        struct cost_kernel_time k[512];
        int n = cost_breakdown(e->cost, b, k, 512);
        struct cost_result r;
        cost_step(e->cost, b, &r);
        double t = start / 1e3;
        /* Per-layer kernels in model order, then the drafter and the
         * per-step overhead. */
        for (int layer = 0; layer < e->m.n_layers; layer++) {
            int kind = e->m.layer_kind[layer];
            for (int i = 0; i < n; i++) {
                if (k[i].layer_kind != kind)
                    continue;
                double d = k[i].ns / 1e3;
                json_t *nm = json_string(k[i].name);
                char *s = json_dumps(nm, JSON_ENCODE_ANY);
                fprintf(f, ",\n{\"name\":%s,\"ph\":\"X\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,"
                           "\"dur\":%.3f,\"args\":{\"layer\":%d,\"kind\":\"%s\",\"calibrated\":%s}}",
                        s, replica, t, d, layer, layer_kind_name(kind),
                        k[i].calibrated ? "true" : "false");
                free(s);
                json_decref(nm);
                t += d;
            }
        }
        if (r.drafter_ns) {
            fprintf(f, ",\n{\"name\":\"drafter\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,\"ts\":%.3f,"
                       "\"dur\":%.3f}", replica, t, r.drafter_ns / 1e3);
            t += r.drafter_ns / 1e3;
        }
        if (r.overhead_ns)
            fprintf(f, ",\n{\"name\":\"step_overhead\",\"ph\":\"X\",\"pid\":%d,\"tid\":1,"
                       "\"ts\":%.3f,\"dur\":%.3f}", replica, t, r.overhead_ns / 1e3);
    }
    e->trace_steps++;
}

int engine_trace_open(struct engine *e, const char *path, int64_t kernel_step, char *err)
{
    engine_trace_close(e);
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(err, "%s: %s", path, strerror(errno));
    e->trace = f;
    e->trace_kernel_step = kernel_step;
    e->trace_steps = 0;
    e->trace_first = true;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
    for (int i = 0; i < e->n_rep; i++) {
        fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":"
                   "\"replica %d\"}}", e->trace_first ? "\n" : ",\n", i, i);
        e->trace_first = false;
        e->rep[i].on_step = trace_step;
        e->rep[i].on_step_arg = e;
    }
    return 0;
}

int engine_trace_close(struct engine *e)
{
    if (!e->trace)
        return 0;
    fprintf(e->trace, "\n]}\n");
    /* A write that failed on the way (a full disk) leaves the stream's
     * error flag; the last flush sets errno. */
    errno = 0;
    int bad = fflush(e->trace) != 0 || ferror(e->trace);
    int saved = errno ? errno : EIO;
    bad |= fclose(e->trace) != 0;
    e->trace = NULL;
    for (int i = 0; i < e->n_rep; i++)
        e->rep[i].on_step = NULL;
    if (bad) {
        errno = saved;
        return -1;
    }
    return 0;
}

/* ---- the engine as a target ---- */

static int et_submit(struct target *t, struct target_call *c, char *err)
{
    return engine_submit((struct engine *)t, c, err);
}

static void et_cancel(struct target *t, struct target_call *c)
{
    engine_cancel((struct engine *)t, c);
}

static void et_stats(struct target *t, struct target_stats *s)
{
    engine_get_stats((struct engine *)t, s);
}

static void *et_describe(struct target *t)
{
    return engine_describe_json((struct engine *)t);
}

static void et_destroy(struct target *t)
{
    engine_destroy((struct engine *)t);
}

static const struct target_ops engine_target_ops = {
    .submit = et_submit, .cancel = et_cancel, .stats = et_stats,
    .describe_json = et_describe, .destroy = et_destroy,
};

struct target *target_engine_create(const struct engine_config *cfg, struct loop *l, char *err)
{
    struct engine *e = engine_create(cfg, l, err);
    return e ? &e->base : NULL;
}

struct engine *target_engine_get(struct target *t)
{
    return t && t->ops == &engine_target_ops ? (struct engine *)t : NULL;
}
