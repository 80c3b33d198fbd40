/* test_lanes.c: the agentx rules (replay/lanes.c) on the virtual clock
 * against the fixed-rate fake target, on hand-built replay plans whose
 * timelines are known to the nanosecond. Each case cites the AIPerf 0.13.0
 * file it follows (under site-packages/aiperf/): delays never capped per
 * gap, the system-wide idle cap, branches at issue and at return with
 * their offsets, joins, background branches, happens-before gates,
 * context overflow, recycling from one cursor with a fresh marker and the
 * shared system prefix, the warm-up phase, a failed root warm-up, the
 * duration counted from the warm-up's end with its grace, validity, the
 * theoretical hit rate, --requests, no progress, 20,000 lanes, and the
 * shiftable timer queue. */
#include <jansson.h>
#include <time.h>

#include "engine/target.h"
#include "replay/replay.h"
#include "tests/testhelp.h"
#include "tests/testlanes.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "replay/timerq.h"
#include "traces/plan.h"


/* ---- a tiny trace: one session per stream, its calls the turns ---- */

/* A session for one stream (scope: its tree's). */
static uint32_t mini_session(struct mini_trace *b, const char *name, uint32_t scope)
{
    uint32_t i = b->t.n_sessions++;
    struct trace_session *s = &b->s[i];
    s->parent = TRACE_NONE;
    s->root = i;
    s->first_call = b->t.n_calls;
    s->first_child = s->next_sibling = s->fork_after = TRACE_NONE;
    s->duration_ns = -1;
    s->block_size = 64;
    s->scope = scope;
    s->name = b->t.n_strings;
    b->strs[b->t.n_strings++] = name;
    s->kind = s->status = s->file = TRACE_NONE;
    b->t.n_roots++;
    return i;
}

/* ---- a hand-built plan over it ---- */

struct mp {
    struct plan p;
    struct plan_tree tree[8];
    struct plan_stream st[32];
    struct plan_turn turn[256];
    struct plan_branch br[16];
    struct plan_ref ref[64];
    uint32_t bref[128];
    uint32_t child[32];
    int64_t coff[32];
    struct plan_msg msg[512];
    struct { uint32_t s, k, ps, pk; } gate[64];
    int n_gates;
    uint32_t nmsg, nchild;
};

static void mp_init(struct mp *m, const struct trace *t)
{
    memset(m, 0, sizeof *m);
    m->p.tr = t;
    m->p.trees = m->tree;
    m->p.streams = m->st;
    m->p.turns = m->turn;
    m->p.branches = m->br;
    m->p.refs = m->ref;
    m->p.branch_refs = m->bref;
    m->p.children = m->child;
    m->p.child_offset_ns = m->coff;
    m->p.msgs = m->msg;
}

static uint32_t mp_tree(struct mp *m, const char *id, uint32_t shared_blocks)
{
    uint32_t i = m->p.n_trees++;
    struct plan_tree *t = &m->tree[i];
    t->first_stream = m->p.n_streams;
    t->first_branch = m->p.n_branches;
    t->block_size = 64;
    t->shared_blocks = shared_blocks;
    t->trace_id = id;
    t->t_lo_ns = INT64_MAX;
    t->t_hi_ns = INT64_MIN;
    return i;
}

/* A stream of the last tree, its turns the calls of session `s` (the
 * root first): each turn's delay is its call's think_ns; one user
 * message; its theoretical hit half its blocks. */
static uint32_t mp_stream(struct mp *m, uint8_t kind, const char *id, uint32_t s)
{
    uint32_t i = m->p.n_streams++, tr = m->p.n_trees - 1;
    struct plan_stream *ps = &m->st[i];
    const struct trace *t = m->p.tr;
    ps->kind = kind;
    ps->tree = tr;
    ps->parent = PLAN_NONE;
    ps->scope = tr;
    ps->session = s;
    ps->first_turn = m->p.n_turns;
    ps->n_turns = t->sessions[s].n_calls;
    ps->id = id;
    if (kind == PLAN_STREAM_ROOT)
        m->tree[tr].root_session = s;
    for (uint32_t k = 0; k < ps->n_turns; k++) {
        uint32_t ci = t->sessions[s].first_call + k;
        const struct trace_call *c = &t->calls[ci];
        struct plan_turn *pt = &m->turn[m->p.n_turns++];
        pt->call = ci;
        pt->t_ns = c->t_ns;
        pt->t_ms = (double)c->t_ns / 1e6;
        pt->delay_ns = k ? c->think_ns : -1;
        pt->delay_ms = k ? (double)c->think_ns / 1e6 : NAN;
        pt->api_ms = NAN;
        pt->api_ns = -1;
        pt->max_tokens = c->output_tokens > 0 ? c->output_tokens : 1;
        pt->msgs = m->nmsg;
        pt->n_msgs = 1;
        m->msg[m->nmsg++] = (struct plan_msg){PLAN_ROLE_USER, c->prompt_tokens};
        pt->reset = true;
        pt->total_blocks = c->n_blocks;
        pt->hit_blocks = c->n_blocks / 2;
        struct plan_tree *tt = &m->tree[tr];
        if (c->t_ns < tt->t_lo_ns)
            tt->t_lo_ns = c->t_ns, tt->t_lo_ms = pt->t_ms;
        if (c->t_ns > tt->t_hi_ns)
            tt->t_hi_ns = c->t_ns, tt->t_hi_ms = pt->t_ms;
    }
    m->tree[tr].n_streams++;
    m->tree[tr].n_turns += ps->n_turns;
    return i;
}

static void mp_branch(struct mp *m, uint32_t parent, uint32_t spawn_turn, uint32_t join_turn,
                      uint8_t dispatch, int64_t start_ns, uint32_t child, int64_t offset_ns)
{
    uint32_t i = m->p.n_branches++;
    struct plan_branch *b = &m->br[i];
    b->id = "b";
    b->parent = parent;
    b->spawn_turn = spawn_turn;
    b->join_turn = join_turn;
    b->dispatch = dispatch;
    b->start_ns = start_ns;
    b->start_ms = (double)start_ns / 1e6;
    b->children = m->nchild;
    b->n_children = 1;
    m->child[m->nchild] = child;
    m->coff[m->nchild++] = offset_ns;
    m->st[child].parent = parent;
    m->tree[m->p.n_trees - 1].n_branches++;
}

/* Turn k of stream s waits for turn pk of stream ps. */
static void mp_gate(struct mp *m, uint32_t s, uint32_t k, uint32_t ps, uint32_t pk)
{
    m->gate[m->n_gates].s = s, m->gate[m->n_gates].k = k;
    m->gate[m->n_gates].ps = ps, m->gate[m->n_gates].pk = pk;
    m->n_gates++;
}

/* The per-turn spawn, join and gate lists. */
static void mp_finish(struct mp *m)
{
    uint32_t nb = 0, nr = 0;
    for (uint32_t s = 0; s < m->p.n_streams; s++)
        for (uint32_t k = 0; k < m->st[s].n_turns; k++) {
            struct plan_turn *t = &m->turn[m->st[s].first_turn + k];
            t->n_spawn = t->n_join = t->n_after = 0;
            t->spawn = nb;
            for (uint32_t b = 0; b < m->p.n_branches; b++)
                if (m->br[b].parent == s && m->br[b].spawn_turn == k)
                    m->bref[nb++] = b, t->n_spawn++;
            t->join = nb;
            for (uint32_t b = 0; b < m->p.n_branches; b++)
                if (m->br[b].parent == s && m->br[b].join_turn == k)
                    m->bref[nb++] = b, t->n_join++;
            t->after = nr;
            for (int g = 0; g < m->n_gates; g++)
                if (m->gate[g].s == s && m->gate[g].k == k)
                    m->ref[nr++] = (struct plan_ref){m->gate[g].ps, m->gate[g].pk}, t->n_after++;
        }
}

/* ---- running a plan ---- */

struct run {
    struct metrics_summary sum;
    struct replay_outcome out;
    int verify_fail;
    double cpu_s;
};

static int run(const struct plan *p, const struct replay_config *cfg, const struct target_fake_config *fc,
               struct run *out)
{
    char path[256], err[ERR_LEN];
    snprintf(path, sizeof path, "/tmp/test_lanes_%d.jsonl", (int)getpid());
    struct loop *l = loop_virtual_create();
    struct target *tg = target_fake_create(fc, l);
    struct replay *r = replay_create_plan(cfg, p->tr, p, tg, l, err);
    memset(out, 0, sizeof *out);
    if (!r) {
        fprintf(stderr, "replay_create: %s\n", err);
        target_destroy(tg);
        loop_destroy(l);
        n_recs = 0;
        return -1;
    }
    struct records_writer *w = records_open(path, false, err);
    replay_set_outputs(r, w, NULL);
    replay_set_tick(r, tick_verify, NULL);
    verify_fails = 0;
    clock_t c0 = clock();
    replay_start(r);
    loop_run(l);
    out->cpu_s = (double)(clock() - c0) / CLOCKS_PER_SEC;
    out->verify_fail = verify_fails;
    if (!replay_finished(r) || replay_verify(r, err)) {
        out->verify_fail++;
        fprintf(stderr, "at the end: finished %d: %s\n", replay_finished(r), err);
    }
    replay_summarize(r, NULL, &out->sum, &out->out);
    replay_destroy(r);
    records_close(w, err);
    target_destroy(tg);
    loop_destroy(l);
    read_records(path);
    unlink(path);
    return 0;
}

static bool has_reason(const struct replay_outcome *o, const char *s)
{
    for (int i = 0; i < o->n_reasons; i++)
        if (strstr(o->reasons[i], s))
            return true;
    return false;
}

/* One lane, no warm start, no recycling: the timeline of one tree. */
static void base_cfg(struct replay_config *c)
{
    replay_config_defaults(c);
    c->concurrency = 1;
    c->warm_start = false;
    c->recycle = false;
    c->duration_ns = 1000 * S;
}

/* The fake's first token for a prompt of `uncached` tokens after start. */
#define TTFT(uncached) (1 * MS + (uncached) * 10000LL)

/* Case 1: the recorded end-to-start delay after the previous turn of the
 * stream returns, never capped per gap (timing/strategies/agentic_replay.py
 * _dispatch_next_turn; dataset/loader/weka_trace.py _end_to_start_delay_ms;
 * common/scenario/inferencex_agentx_mvp.py forbids the inter-turn cap); the
 * marker is one more prompt token (timing/strategies/cache_bust.py); the
 * theoretical hit rate over the measured requests
 * (metrics/theoretical_prefix_cache.py); --think-cap (not AgentX). */
static void case_delays(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "A", 0);
    mini_call(b, 0, -1, 640, 11);
    mini_call(b, 50 * S, 5 * S, 1280, 11);
    mini_call(b, 100 * S, 30 * S, 1920, 1);
    struct mp *m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "A", 0);
    mp_stream(m, PLAN_STREAM_ROOT, "A", 0);
    mp_finish(m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    cfg.idle_cap_ns = -1;
    CHECK(run(&m->p, &cfg, &FAKE, &res) == 0 && res.verify_fail == 0, "delays: runs, invariants hold");
    struct rec *r0 = find("A@0", 0, 0), *r1 = find("A@0", 1, 0), *r2 = find("A@0", 2, 0);
    CHECK(n_recs == 3 && r0 && r1 && r2, "delays: three turns");
    if (r0 && r1 && r2) {
        CHECKF(r0->start == 0 && r0->prompt == 641 && r0->first == TTFT(641) && r0->end == TTFT(641) + 200 * MS,
               "turn 0: prompt %lld (in + marker), first %lld, end %lld", r0->prompt, r0->first, r0->end);
        CHECKF(r1->start == r0->end + 5 * S && r1->cached == 640 && r1->first == r1->start + TTFT(641),
               "turn 1 5 s after turn 0 returns (%lld), cached %lld", r1->start - r0->end, r1->cached);
        CHECKF(r2->start == r1->end + 30 * S, "turn 2: the whole 30 s gap (%lld)", r2->start - r1->end);
        CHECK(r0->hit == 5 && r0->blocks == 10 && r2->blocks == 30, "records carry the turn's blocks");
    }
    CHECK_NEAR(res.sum.prefix_hit_rate_theoretical_measured, 0.5, 1e-12,
               "theoretical hit: 30 of 60 blocks over the measured requests");
    CHECK(res.sum.theoretical, "run.json writes it");
    /* The system idle cap, one lane: nothing else in flight, so the 30 s
     * wait is cut to 10 s after the system went idle. */
    base_cfg(&cfg);
    run(&m->p, &cfg, &FAKE, &res);
    r1 = find("A@0", 1, 0), r2 = find("A@0", 2, 0);
    CHECK(r1 && r2 && r2->start == r1->end + 10 * S, "idle cap: 30 s idle becomes 10 s");
    CHECK(res.out.idle_jumps == 1 && res.out.idle_skipped_ns == 20 * S, "one jump of 20 s counted");
    /* --think-cap 2s: every delay at most 2 s; not AgentX. */
    cfg.think_cap_ns = 2 * S;
    run(&m->p, &cfg, &FAKE, &res);
    r0 = find("A@0", 0, 0), r1 = find("A@0", 1, 0), r2 = find("A@0", 2, 0);
    CHECK(r0 && r1 && r2 && r1->start == r0->end + 2 * S && r2->start == r1->end + 2 * S,
          "--think-cap caps each gap");
    CHECK(has_reason(&res.out, "--think-cap") && !res.out.agentx_valid, "--think-cap: not AgentX-valid");
    /* --requests 2: the second call is the last that starts. */
    base_cfg(&cfg);
    cfg.requests = 2;
    run(&m->p, &cfg, &FAKE, &res);
    CHECKF(n_recs == 2 && res.out.requests_limit_hit && res.sum.completed == 2,
           "--requests 2: two calls, both complete (%d)", n_recs);
    free(m);
    free(b);
}

/* Case 2: the idle cap shifts pending timers only when nothing is in
 * flight anywhere (agentic_replay.py enforce_system_idle_cap,
 * common/loop_scheduler.py cap_pending_delay). */
static void case_idle_cap(void)
{
    for (int v = 0; v < 2; v++) {
        struct mini_trace *b = xcalloc(1, sizeof *b);
        mini_init(b);
        mini_session(b, "A", 0);
        mini_call(b, 0, -1, 640, v ? 1501 : 501); /* 30.0074 s or 10.0074 s */
        mini_session(b, "B", 1);
        mini_call(b, 0, -1, 640, 11);
        mini_call(b, 40 * S, 30 * S, 1280, 11);
        struct mp *m = xcalloc(1, sizeof *m);
        mp_init(m, &b->t);
        mp_tree(m, "A", 0);
        mp_stream(m, PLAN_STREAM_ROOT, "A", 0);
        mp_tree(m, "B", 0);
        mp_stream(m, PLAN_STREAM_ROOT, "B", 1);
        mp_finish(m);
        struct replay_config cfg;
        struct run res;
        base_cfg(&cfg);
        cfg.concurrency = 2;
        run(&m->p, &cfg, &FAKE, &res);
        struct rec *a = find("A@0", 0, 0), *b0 = find("B@1", 0, 0), *b1 = find("B@1", 1, 0);
        CHECK(res.verify_fail == 0 && a && b0 && b1 && a->lane == 0 && b0->lane == 1,
              "idle cap: lanes take A and B in file order");
        if (!(a && b0 && b1)) {
            free(m), free(b);
            continue;
        }
        if (!v)
            CHECKF(b1->start == a->end + 10 * S && b1->start - b0->end > 10 * S,
                   "B waited %.3f s while A was in flight; then 10 s after the system went idle",
                   (double)(b1->start - b0->end) / 1e9);
        else
            CHECKF(b1->start == b0->end + 30 * S,
                   "A in flight until 0.2 s before B's turn: the 30 s gap is kept (%lld)",
                   b1->start - b0->end);
        free(m);
        free(b);
    }
}

/* Case 3: branches, offsets and joins (timing/branch_orchestrator.py:
 * intercept and on_credit_issued, _child_dispatch_offset_ms,
 * _start_delayed_first_turn (asyncio sleep: the idle cap does not shorten
 * it), _maybe_suspend_parent, _release_blocked_join (the joining turn
 * fires at once); timing/session_tree.py: background children hold the
 * tree). */
static void case_joins(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "R", 0);
    mini_call(b, 0, -1, 640, 11);
    mini_call(b, 40 * S, 1 * S, 1280, 11);
    mini_call(b, 50 * S, 1 * S, 1920, 11);
    mini_session(b, "S", 0);
    mini_call(b, 30 * S, -1, 640, 6);
    mini_call(b, 32 * S, 2 * S, 1280, 6);
    struct mp *m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "R", 0);
    uint32_t r = mp_stream(m, PLAN_STREAM_ROOT, "R", 0);
    uint32_t s = mp_stream(m, PLAN_STREAM_SUBAGENT, "R::sa:S", 1);
    mp_branch(m, r, 0, 1, PLAN_AT_RETURN, 30 * S, s, 30 * S);
    mp_finish(m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    run(&m->p, &cfg, &FAKE, &res);
    struct rec *r0 = find("R@0", 0, 0), *r1 = find("R@0", 1, 0), *r2 = find("R@0", 2, 0);
    struct rec *s0 = find("R::sa:S@0", 0, 0), *s1 = find("R::sa:S@0", 1, 0);
    CHECK(res.verify_fail == 0 && r0 && r1 && r2 && s0 && s1, "join: every turn sent");
    if (r0 && r1 && r2 && s0 && s1) {
        CHECKF(s0->start == r0->end + 30 * S, "the child after its 30 s offset, not cut by the idle cap (%lld)",
               s0->start - r0->end);
        CHECK(s1->start == s0->end + 2 * S && s0->lane == r0->lane && s0->tree == r0->tree,
              "the child's own delay; same lane and tree");
        CHECKF(r1->start == s1->end, "the joining turn fires when the child is done, its delay dropped (%lld)",
               r1->start - s1->end);
        CHECK(r2->start == r1->end + 1 * S, "then the root's delays again");
    }
    /* Background (no join): the root goes on; the tree holds the lane
     * until its child is done, then the lane recycles. */
    m->br[0].join_turn = PLAN_NONE;
    mp_finish(m);
    cfg.recycle = true;
    cfg.duration_ns = 40 * S;
    run(&m->p, &cfg, &FAKE, &res);
    r1 = find("R@0", 1, 0), r2 = find("R@0", 2, 0), s1 = find("R::sa:S@0", 1, 0);
    struct rec *n0 = find("R@1", 0, 0);
    r0 = find("R@0", 0, 0);
    CHECK(res.verify_fail == 0 && r0 && r1 && r2 && s1 && n0, "background: every turn, then the next tree");
    if (r0 && r1 && r2 && s1 && n0) {
        CHECK(r1->start == r0->end + 1 * S, "a background branch never gates");
        CHECKF(n0->start == s1->end && n0->lane == r0->lane, "the lane recycles when the child is done (%lld)",
               n0->start - s1->end);
    }
    free(m);
    free(b);

    /* At issue: a branch that began while its spawning turn was in flight
     * starts when it is sent; a child done before the parent returns does
     * not hold it (the parent's own delay). */
    b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "P", 0);
    mini_call(b, 0, -1, 640, 11);
    mini_call(b, 10 * S, 1 * S, 1280, 11);
    mini_session(b, "Q", 0);
    mini_call(b, 0, -1, 640, 2);
    m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "P", 0);
    r = mp_stream(m, PLAN_STREAM_ROOT, "P", 0);
    s = mp_stream(m, PLAN_STREAM_FLAT, "P::fa:000", 1);
    mp_branch(m, r, 0, 1, PLAN_AT_ISSUE, 0, s, 0);
    mp_finish(m);
    base_cfg(&cfg);
    run(&m->p, &cfg, &FAKE, &res);
    r0 = find("P@0", 0, 0), r1 = find("P@0", 1, 0), s0 = find("P::fa:000@0", 0, 0);
    CHECK(res.verify_fail == 0 && r0 && r1 && s0, "at issue: every turn sent");
    if (r0 && r1 && s0) {
        CHECK(s0->start == r0->start && s0->end < r0->end, "the child starts with its spawning turn");
        CHECK(r1->start == r0->end + 1 * S, "done before the parent returned: the parent's own delay");
    }
    free(m);
    free(b);
}

/* Case 4: happens-before gates between streams of one scope: a turn is
 * held until its predecessors completed in its tree instance
 * (timing/replay_dependencies.py ReplayBarrierCoordinator). */
static void case_gates(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "R", 0);
    mini_call(b, 0, -1, 640, 11);
    mini_call(b, 5 * S, 1 * S, 1280, 101);
    mini_session(b, "F", 0);
    mini_call(b, 0, -1, 640, 2);
    mini_call(b, 1 * S, S / 2, 1280, 2);
    struct mp *m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "R", 0);
    uint32_t r = mp_stream(m, PLAN_STREAM_ROOT, "R", 0);
    uint32_t f = mp_stream(m, PLAN_STREAM_FLAT, "R::fa:000", 1);
    mp_branch(m, r, 0, PLAN_NONE, PLAN_AT_RETURN, 0, f, 0);
    mp_gate(m, f, 1, r, 1);
    mp_finish(m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    run(&m->p, &cfg, &FAKE, &res);
    struct rec *r0 = find("R@0", 0, 0), *r1 = find("R@0", 1, 0);
    struct rec *f0 = find("R::fa:000@0", 0, 0), *f1 = find("R::fa:000@0", 1, 0);
    CHECK(res.verify_fail == 0 && r0 && r1 && f0 && f1, "gates: every turn sent");
    if (r0 && r1 && f0 && f1) {
        CHECK(f0->start == r0->end, "the flat chain starts when its spawning turn returns");
        CHECKF(f1->start == r1->end && f1->start > f0->end + S / 2,
               "held until its predecessor completed (%lld after it)", f1->start - r1->end);
    }
    m->turn[m->st[f].first_turn + 1].n_after = 0;
    run(&m->p, &cfg, &FAKE, &res);
    f0 = find("R::fa:000@0", 0, 0), f1 = find("R::fa:000@0", 1, 0);
    CHECK(f0 && f1 && f1->start == f0->end + S / 2, "without the gate: its own delay");
    free(m);
    free(b);
}

/* Case 5: a context overflow ends that stream, a root's as its terminal
 * turn, a child's as done for its join; its records are counted, not
 * measured, and over 1 % makes the run invalid
 * (credit/callback_handler.py on_credit_return, agentic_replay.py
 * handle_credit_return, common/scenario/context_overflow.py,
 * exporters/aggregate/aggregate_base_exporter.py). */
static void case_overflow(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "O", 0);
    mini_call(b, 0, -1, 640, 11);
    mini_call(b, 1 * S, 1 * S, 1920, 11);
    mini_call(b, 2 * S, 1 * S, 640, 11);
    mini_session(b, "C", 0);
    mini_call(b, 0, -1, 640, 11);
    mini_call(b, 1 * S, 1 * S, 1920, 11);
    mini_call(b, 2 * S, 1 * S, 640, 11);
    struct mp *m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "O", 0);
    mp_stream(m, PLAN_STREAM_ROOT, "O", 0);
    mp_finish(m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    cfg.max_model_len = 1500;
    run(&m->p, &cfg, &FAKE, &res);
    struct rec *o1 = find("O@0", 1, 0);
    CHECKF(n_recs == 2 && o1 && o1->overflow && !find("O@0", 2, 0),
           "the overflowing turn is the stream's last (%d records)", n_recs);
    CHECK(res.sum.overflow == 1 && res.sum.completed == 1 && res.out.streams_overflowed == 1,
          "counted, not measured");
    CHECK(has_reason(&res.out, "overflow the context"), "50 % overflows: not AgentX-valid");
    /* The same from the target (its error, not the client's limit). */
    struct target_fake_config fc = FAKE;
    fc.max_model_len = 1500;
    cfg.max_model_len = 0;
    run(&m->p, &cfg, &fc, &res);
    CHECK(n_recs == 2 && res.sum.overflow == 1, "the target's overflow ends the stream too");
    free(m);

    /* A child's overflow: done, and the join fires. */
    m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "O", 0);
    uint32_t r = mp_stream(m, PLAN_STREAM_ROOT, "O", 0);
    uint32_t c = mp_stream(m, PLAN_STREAM_SUBAGENT, "O::sa:C", 1);
    mp_branch(m, r, 0, 1, PLAN_AT_RETURN, 0, c, 0);
    mp_finish(m);
    base_cfg(&cfg);
    fc.max_model_len = 1800; /* only the 1920-token turns overflow */
    run(&m->p, &cfg, &fc, &res);
    struct rec *c1 = find("O::sa:C@0", 1, 0), *j = find("O@0", 1, 0);
    CHECK(res.verify_fail == 0 && c1 && c1->overflow && !find("O::sa:C@0", 2, 0), "the child stops");
    CHECK(j && c1 && j->start == c1->end && j->overflow, "its join fires at once (and overflows itself)");
    free(m);
    free(b);
}

/* Case 6: lanes take trees from one sequential cursor in file order, a
 * drained lane the next one at turn 0 (dataset/dataset_samplers.py,
 * timing/trajectory_source.py next_recycle_conversation_id); a fresh
 * cache-bust marker per instance, after the shared system prefix
 * (timing/strategies/cache_bust.py, workers/worker.py). */
static void case_recycle(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "X", 0);
    mini_call(b, 0, -1, 640, 51);
    mini_session(b, "Y", 1);
    mini_call(b, 0, -1, 640, 11);
    mini_session(b, "Z", 2);
    mini_call(b, 0, -1, 640, 21);
    struct mp *m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "X", 2);
    mp_stream(m, PLAN_STREAM_ROOT, "X", 0);
    mp_tree(m, "Y", 0);
    mp_stream(m, PLAN_STREAM_ROOT, "Y", 1);
    mp_tree(m, "Z", 0);
    mp_stream(m, PLAN_STREAM_ROOT, "Z", 2);
    mp_finish(m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    cfg.concurrency = 2;
    cfg.recycle = true;
    cfg.duration_ns = 1500 * MS;
    run(&m->p, &cfg, &FAKE, &res);
    const char *order[] = {"X@0", "Y@1", "Z@2", "X@3", "Y@4"};
    int lanes[] = {0, 1, 1, 1, 0};
    bool ok = n_recs >= 5;
    for (int i = 0; ok && i < 5; i++) {
        struct rec *x = find(order[i], 0, 0);
        ok = x && x->lane == lanes[i];
    }
    CHECK(ok && res.verify_fail == 0, "X, Y on lanes 0 and 1; then Z, X, Y as lanes free up");
    struct rec *x0 = find("X@0", 0, 0), *x3 = find("X@3", 0, 0), *y4 = find("Y@4", 0, 0);
    struct rec *z2 = find("Z@2", 0, 0), *y1 = find("Y@1", 0, 0);
    CHECK(z2 && y1 && z2->start == y1->end, "a drained lane recycles at once");
    CHECKF(x0 && x3 && x0->cached == 0 && x3->cached == 128,
           "a new instance shares only the system prefix (2 blocks): cached %lld",
           x3 ? x3->cached : -1LL);
    CHECK(y4 && y4->cached == 0, "no shared prefix: nothing cached across instances");
    cfg.cache_isolation = false;
    run(&m->p, &cfg, &FAKE, &res);
    x3 = find("X@3", 0, 0);
    CHECK(x3 && x3->cached == 639 && x3->prompt == 640 && has_reason(&res.out, "--no-cache-isolation"),
          "--no-cache-isolation: no marker, instances share the cache; not AgentX");
    free(m);
    free(b);
}

/* The warm-start tree: a root at 0, 20, ..., 100 s and a child spawned by
 * its turn 1 at 25, 30, 55, 70 s. */
static void warm_tree(struct mini_trace *b, struct mp *m)
{
    mini_init(b);
    mini_session(b, "W", 0);
    for (int k = 0; k < 6; k++)
        mini_call(b, (int64_t)k * 20 * S, k ? 19 * S : -1, 640 * (k + 1), 11);
    mini_session(b, "C", 0);
    int64_t ct[] = {25, 30, 55, 70};
    for (int j = 0; j < 4; j++)
        mini_call(b, ct[j] * S, j ? 4 * S : -1, 640 * (j + 1), 11);
    mp_init(m, &b->t);
    mp_tree(m, "W", 0);
    uint32_t r = mp_stream(m, PLAN_STREAM_ROOT, "W", 0);
    uint32_t c = mp_stream(m, PLAN_STREAM_SUBAGENT, "W::sa:C", 1);
    mp_branch(m, r, 1, PLAN_NONE, PLAN_AT_RETURN, 25 * S, c, 5 * S);
    mp_finish(m);
}

/* Case 7: warm start at t* (timing/trajectory_source.py _snapshot_for,
 * _replay_resume_boundaries): a separate warm-up phase of the turn before
 * t* of every live stream, max_tokens 1, unmeasured, each at (max lead -
 * lead) so t* falls at its end (agentic_replay.py _execute_warmup); then
 * each stream's next turn after its offset from t*
 * (_dispatch_snapshot_for_profiling); the duration counts from there
 * (timing/phase/runner.py). A failed root warm-up aborts the run
 * (credit/callback_handler.py _handle_warmup_failure). */
static void case_warm(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    struct mp *m = xcalloc(1, sizeof *m);
    warm_tree(b, m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    cfg.warm_start = true;
    cfg.start_min_ratio = cfg.start_max_ratio = 0.5; /* t* = 50 s */
    cfg.duration_ns = 100 * S;
    run(&m->p, &cfg, &FAKE, &res);
    struct rec *cw = find("W::sa:C@0", 1, 0), *rw = find("W@0", 2, 0);
    struct rec *c2 = find("W::sa:C@0", 2, 0), *r3 = find("W@0", 3, 0);
    CHECK(res.verify_fail == 0 && cw && rw && c2 && r3, "warm start: the warm-up, then turns from t*");
    if (cw && rw && c2 && r3) {
        CHECK(cw->warmup && rw->warmup && cw->max_tokens == 1 && rw->max_tokens == 1 && cw->out == 1,
              "the turns before t* (child 1, root 2) as unmeasured one-token requests");
        CHECKF(cw->start == 0 && rw->start == 10 * S,
               "spread by lead: the child (20 s before t*) at once, the root (10 s) at 10 s (%lld)",
               rw->start);
        int64_t t0 = res.out.measure_start_ns;
        CHECKF(t0 == rw->end, "the measured phase starts when the warm-up ends (%lld)", (long long)t0);
        CHECKF(c2->start == t0 + 5 * S && r3->start == t0 + 10 * S && !c2->warmup,
               "each next turn after its offset from t* (%lld, %lld)", c2->start - t0, r3->start - t0);
        CHECK(rw->cached == 1280, "the warm-up primes the tree's cache");
    }
    CHECK(!find("W::sa:C@0", 0, 0) && !find("W@0", 1, 0), "nothing before the warm turns is sent");
    CHECK(res.out.warmup_calls == 2 && res.sum.warmup == 2, "two warm-up requests, not measured");
    /* The duration counts from the end of the warm-up. */
    cfg.duration_ns = 3 * S;
    run(&m->p, &cfg, &FAKE, &res);
    CHECKF(n_recs == 2 && res.out.end_ns == res.out.measure_start_ns + 3 * S,
           "no turn starts after warm-up + 3 s (%d records)", n_recs);
    /* A root warm-up that fails aborts the run. */
    struct target_fake_config fc = FAKE;
    fc.max_model_len = 1500;
    cfg.duration_ns = 100 * S;
    run(&m->p, &cfg, &fc, &res);
    CHECKF(strstr(res.out.aborted, "warm-up") && res.out.partial && res.sum.completed == 0 &&
               !res.out.agentx_valid,
           "a failed root warm-up aborts the run: %s", res.out.aborted);
    /* Validity: 900 s with AgentX's settings. */
    cfg.duration_ns = 900 * S;
    cfg.recycle = true;
    run(&m->p, &cfg, &FAKE, &res);
    CHECKF(res.out.agentx_valid && res.verify_fail == 0, "900 s, warm start, recycling: AgentX-valid (%s)",
           res.out.n_reasons ? res.out.reasons[0] : "");
    cfg.duration_ns = 899 * S;
    run(&m->p, &cfg, &FAKE, &res);
    CHECK(has_reason(&res.out, "configured duration"), "a configured duration under 900 s: invalid");
    free(m);
    free(b);
}

/* Case 8: the duration and the grace: no call starts after the duration;
 * calls in flight at duration + grace are cancelled, not measured
 * (timing/phase/runner.py, config/flags/cli_config.py
 * --benchmark-grace-period); a run where every call fails at once stops
 * on no progress instead of spinning in zero virtual time. */
static void case_end(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    mini_init(b);
    mini_session(b, "E", 0);
    mini_call(b, 0, -1, 640, 1001); /* 20 s */
    mini_call(b, 30 * S, 1 * S, 640, 11);
    struct mp *m = xcalloc(1, sizeof *m);
    mp_init(m, &b->t);
    mp_tree(m, "E", 0);
    mp_stream(m, PLAN_STREAM_ROOT, "E", 0);
    mp_finish(m);
    struct replay_config cfg;
    struct run res;
    base_cfg(&cfg);
    cfg.duration_ns = 5 * S;
    cfg.grace_ns = 2 * S;
    cfg.grace_set = true;
    run(&m->p, &cfg, &FAKE, &res);
    CHECKF(n_recs == 1 && recs[0].cancelled && recs[0].end == 7 * S && res.sum.cancelled == 1 &&
               res.sum.completed == 0,
           "cancelled at duration + grace (%d, %lld)", n_recs, n_recs ? recs[0].end : -1LL);
    base_cfg(&cfg);
    cfg.duration_ns = 5 * S;
    run(&m->p, &cfg, &FAKE, &res);
    CHECK(n_recs == 1 && !recs[0].cancelled && res.sum.completed == 1 && res.out.end_ns == recs[0].end,
          "the default grace of the agentx rules (30 s): completes at 20 s, measured");
    m->turn[0].max_tokens = 2001; /* 40 s */
    run(&m->p, &cfg, &FAKE, &res);
    CHECKF(n_recs == 1 && recs[0].cancelled && recs[0].end == 35 * S, "cancelled at 5 + 30 s (%lld)",
           n_recs ? recs[0].end : -1LL);
    /* Every call overflows at once and the tree recycles at once. */
    struct target_fake_config fc = FAKE;
    fc.max_model_len = 100;
    base_cfg(&cfg);
    cfg.recycle = true;
    cfg.no_progress_ends = 5000;
    run(&m->p, &cfg, &fc, &res);
    CHECKF(strstr(res.out.aborted, "no progress") && res.out.end_ns == 0 && res.out.calls_sent < 6000,
           "no progress: stopped with its cause (%s)", res.out.aborted);
    free(m);
    free(b);
}

/* Case 9: 20,000 lanes: O(1) work per call, no rescans. */
static void case_scale(void)
{
    struct mini_trace *b = xcalloc(1, sizeof *b);
    struct mp *m = xcalloc(1, sizeof *m);
    warm_tree(b, m);
    struct replay_config cfg;
    struct run res;
    replay_config_defaults(&cfg);
    cfg.concurrency = 20000;
    cfg.duration_ns = 60 * S;
    run(&m->p, &cfg, &FAKE, &res);
    CHECKF(res.verify_fail == 0 && res.sum.completed > 20000 && res.out.warmup_calls > 10000,
           "20,000 lanes: %llu measured, %llu warm-up", (unsigned long long)res.sum.completed,
           (unsigned long long)res.out.warmup_calls);
    CHECKF(res.cpu_s < 20, "in %.2f s CPU", res.cpu_s);
    free(m);
    free(b);
}

/* Case 10: the shiftable queue (the LoopScheduler's pending timers,
 * common/loop_scheduler.py cap_pending_delay): a shift moves every pending
 * timer by one amount, keeps their order, ties in arming order. */
static int64_t fired_at[8];
static int fired_id[8], n_fired, batches;
static void tq_cb(struct loop *l, struct loop_timer *t)
{
    fired_at[n_fired] = loop_now(l);
    fired_id[n_fired++] = (int)(intptr_t)t->arg;
}
static void tq_after(void *arg) { batches++; }

static void case_timerq(void)
{
    struct loop *l = loop_virtual_create();
    struct timerq q;
    timerq_init(&q, l, tq_after, NULL);
    struct loop_timer t[4] = {{0}};
    timerq_at(&q, &t[0], 20 * S, tq_cb, (void *)(intptr_t)0);
    timerq_at(&q, &t[1], 10 * S, tq_cb, (void *)(intptr_t)1);
    timerq_at(&q, &t[2], 20 * S, tq_cb, (void *)(intptr_t)2);
    timerq_at(&q, &t[3], 30 * S, tq_cb, (void *)(intptr_t)3);
    timerq_shift(&q, 5 * S);
    CHECK(timerq_next(&q) == 5 * S && timerq_when(&q, &t[3]) == 25 * S && timerq_verify(&q) == 0,
          "timerq: a shift moves every pending timer");
    timerq_cancel(&q, &t[3]);
    loop_run(l);
    CHECK(n_fired == 3 && fired_id[0] == 1 && fired_id[1] == 0 && fired_id[2] == 2 &&
              fired_at[0] == 5 * S && fired_at[1] == 15 * S && fired_at[2] == 15 * S && batches == 2,
          "timerq: in time order, ties in arming order, one batch per moment, the cancelled one not");
    timerq_at(&q, &t[0], 50 * S, tq_cb, NULL);
    timerq_clear(&q, NULL);
    CHECK(timerq_pending(&q) == 0 && !loop_timer_armed(&q.fire), "timerq: cleared");
    timerq_free(&q);
    loop_destroy(l);
}

int main(void)
{
    case_timerq();
    case_delays();
    case_idle_cap();
    case_joins();
    case_gates();
    case_overflow();
    case_recycle();
    case_warm();
    case_end();
    case_scale();
    return test_report();
}
