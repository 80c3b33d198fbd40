/* testlanes.h: what the lane tests share (test_lanes.c, the agentx rules;
 * test_lanes_legacy.c, the legacy rules): a tiny trace built in memory,
 * requests.jsonl read back into records, finding one, the fake target
 * they run on, and the invariant walk on every tick. Include after
 * testhelp.h. */
#ifndef TESTLANES_H
#define TESTLANES_H

#include <jansson.h>
#include <stdbool.h>

#include "engine/target.h"
#include "replay/replay.h"
#include "traces/base/err.h"

#include "traces/trace.h"

#define MS (1000000LL)
#define S (1000000000LL)

struct rec {
    char session[64];
    int lane, call;
    long long tree, start, first, end, cached, out, prompt, max_tokens, hit, blocks;
    bool warmup, cancelled, overflow;
    char error[128];
};
static struct rec recs[8192];
static int n_recs;

static void read_records(const char *path)
{
    n_recs = 0;
    FILE *f = fopen(path, "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f) && n_recs < (int)ARRAY_LEN(recs)) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o)
            continue;
        struct rec *r = &recs[n_recs++];
        memset(r, 0, sizeof *r);
        snprintf(r->session, sizeof r->session, "%s", json_string_value(json_object_get(o, "session")));
        r->lane = (int)json_integer_value(json_object_get(o, "lane"));
        r->call = (int)json_integer_value(json_object_get(o, "call"));
        r->tree = json_integer_value(json_object_get(o, "tree"));
        r->start = json_integer_value(json_object_get(o, "start_ns"));
        json_t *ft = json_object_get(o, "first_token_ns");
        r->first = json_is_null(ft) ? -1 : json_integer_value(ft);
        r->end = json_integer_value(json_object_get(o, "end_ns"));
        r->cached = json_integer_value(json_object_get(o, "cached_tokens"));
        r->out = json_integer_value(json_object_get(o, "output_tokens"));
        r->prompt = json_integer_value(json_object_get(o, "prompt_tokens"));
        r->max_tokens = json_integer_value(json_object_get(o, "max_tokens"));
        r->hit = json_integer_value(json_object_get(o, "hit_blocks"));
        r->blocks = json_integer_value(json_object_get(o, "blocks"));
        r->warmup = json_is_true(json_object_get(o, "warmup"));
        r->cancelled = json_is_true(json_object_get(o, "cancelled"));
        r->overflow = json_is_true(json_object_get(o, "overflow"));
        json_t *e = json_object_get(o, "error");
        if (json_is_string(e))
            snprintf(r->error, sizeof r->error, "%s", json_string_value(e));
        json_decref(o);
    }
    if (f)
        fclose(f);
}

/* The nth record of a session (its name as a prefix) and call. */
static struct rec *find(const char *session, int call, int nth)
{
    for (int i = 0; i < n_recs; i++)
        if (!strncmp(recs[i].session, session, strlen(session)) && recs[i].call == call && nth-- == 0)
            return &recs[i];
    return NULL;
}

static const struct target_fake_config FAKE = {
    .overhead_ns = 1 * MS, .prefill_ns_per_token = 10000, .tpot_ns = 20 * MS,
    .chunk_tokens = 1, .gpus = 8, .cache = true,
};

static int verify_fails;
static void tick_verify(void *arg, struct replay *r, int64_t now)
{
    char err[ERR_LEN];
    if (replay_verify(r, err)) {
        verify_fails++;
        fprintf(stderr, "verify at %lld: %s\n", (long long)now, err);
    }
}

/* A tiny trace built in memory. */
struct mini_trace {
    struct trace t;
    struct trace_session s[32];
    struct trace_call c[256];
    uint64_t blk[256][64];
    const char *strs[32];
};

static void mini_init(struct mini_trace *b)
{
    memset(b, 0, sizeof *b);
    b->t.sessions = b->s;
    b->t.calls = b->c;
    b->t.strings = b->strs;
    b->t.format = TRACE_FMT_AGENTX;
    b->t.n_scopes = 1;
}

/* A call of the last session: t, the recorded think time (the agentx
 * tests keep their plan's delay there), in, out; its chain is blocks
 * 1..in/64 (each call extends the one before). */
static void mini_call(struct mini_trace *b, int64_t t_ns, int64_t delay_ns, int64_t in, int64_t out)
{
    uint32_t si = b->t.n_sessions - 1, i = b->t.n_calls++;
    struct trace_call *c = &b->c[i];
    c->t_ns = t_ns;
    c->think_ns = delay_ns;
    c->api_ns = c->ttft_ns = -1;
    c->prompt_tokens = in;
    c->output_tokens = out;
    c->session = si;
    c->index = b->s[si].n_calls++;
    c->model = c->stop = c->input_types = c->output_types = TRACE_NONE;
    c->base = TRACE_NONE;
    c->n_blocks = (uint32_t)(in / 64);
    for (uint32_t k = 0; k < c->n_blocks; k++)
        b->blk[i][k] = k + 1;
    c->suffix = b->blk[i];
}

#endif
