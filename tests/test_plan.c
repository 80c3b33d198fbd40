/* test_plan.c: the replay plan (traces/plan.h) on real inputs: the public
 * agentic traces (stream splits, joins, delays, prefix hits and t*
 * snapshots, each pinned to the value AIPerf 0.13.0's own plan gives,
 * `make conformance-plan`), AgentX subagent timing on small documents, the
 * built-in native sample, traces without sessions, the canonical JSON and
 * the invariant walker. Each check names the AIPerf file whose rule it
 * pins (paths under aiperf/).
 */
#include <stdint.h>

#include "tests/testhelp.h"
#include "traces/plan.h"
#include "traces/trace.h"
#include "traces/base/err.h"

static struct trace *rd(const char *path)
{
    char err[ERR_LEN];
    struct trace *t = trace_read(path, NULL, err);
    CHECKF(t != NULL, "read %s: %s", path, t ? "" : err);
    return t;
}

static struct trace *rd_mem(const char *doc)
{
    char err[ERR_LEN];
    struct trace_read_opts o = {.format = TRACE_FMT_AGENTX};
    struct trace *t = trace_read_mem(doc, strlen(doc), "doc.json", &o, err);
    CHECKF(t != NULL, "read doc: %s", t ? "" : err);
    return t;
}

static struct plan *build(const struct trace *t)
{
    char err[ERR_LEN];
    struct plan *p = plan_build(t, NULL, err);
    CHECKF(p != NULL, "plan_build: %s", p ? "" : err);
    if (p)
        CHECKF(plan_verify(p, err) == 0, "plan_verify: %s", err);
    return p;
}

static uint32_t tree_of(const struct plan *p, const char *id)
{
    for (uint32_t i = 0; i < p->n_trees; i++)
        if (!strcmp(p->trees[i].trace_id, id))
            return i;
    return PLAN_NONE;
}

static const struct plan_stream *stream_of(const struct plan *p, const char *id)
{
    for (uint32_t i = 0; i < p->n_streams; i++)
        if (!strcmp(p->streams[i].id, id))
            return &p->streams[i];
    return NULL;
}

static const struct plan_turn *turn(const struct plan *p, const struct plan_stream *s, uint32_t k)
{
    return &p->turns[s->first_turn + k];
}

/* The join turns of a tree's branches, in branch order, into out. */
static int joins(const struct plan *p, uint32_t tree, uint32_t *out, int cap)
{
    const struct plan_tree *tr = &p->trees[tree];
    int n = 0;
    for (uint32_t b = tr->first_branch; b < tr->first_branch + tr->n_branches && n < cap; b++)
        if (p->branches[b].join_turn != PLAN_NONE)
            out[n++] = p->branches[b].join_turn;
    return n;
}

static void test_agentic_cc(void)
{
    const char *dir = test_shared("traces/agentic-cc");
    if (!dir) {
        SKIP("../shared/traces/agentic-cc not found");
        return;
    }
    struct trace *t = rd(dir);
    if (!t)
        return;
    struct plan *p = build(t);
    if (!p) {
        trace_destroy(t);
        return;
    }
    CHECKF(p->n_trees == 20 && p->n_streams == 31 && p->n_turns == 967,
           "20 trees, 31 streams, 967 turns: %u %u %u", p->n_trees, p->n_streams, p->n_turns);

    /* Flat chains split by LCP chain detection
     * (dataset/loader/weka_agent_chains.py:390-461, weka_trace.py:1344-1474). */
    static const struct {
        const char *id;
        uint32_t n;
    } split[] = {{"trace_0004", 38},          {"trace_0004::fa:000", 33},
                 {"trace_0004::fa:001", 69},  {"trace_0004::fa:002", 42},
                 {"trace_0004::sa:agent_001", 14}, {"trace_0004::sa:agent_002", 19},
                 {"trace_0014", 109},         {"trace_0014::fa:000", 12},
                 {"trace_0014::sa:agent_001", 2}};
    for (size_t i = 0; i < sizeof split / sizeof *split; i++) {
        const struct plan_stream *s = stream_of(p, split[i].id);
        CHECKF(s && s->n_turns == split[i].n, "%s: %u turns, want %u", split[i].id,
               s ? s->n_turns : 0, split[i].n);
    }
    CHECK(stream_of(p, "trace_0004::fa:000")->kind == PLAN_STREAM_FLAT &&
              stream_of(p, "trace_0004::sa:agent_001")->kind == PLAN_STREAM_SUBAGENT,
          "stream kinds");

    /* Joins: the first later root turn recorded at or after the subagent's
     * end, spawn + duration_ms (dataset/loader/weka_trace.py:1956-2088). */
    uint32_t j[8];
    int n = joins(p, tree_of(p, "trace_0010"), j, 8);
    CHECKF(n == 3 && j[0] == 4 && j[1] == 9 && j[2] == 14, "0010 joins at root turns 4, 9, 14");
    n = joins(p, tree_of(p, "trace_0014"), j, 8);
    CHECKF(n == 2 && j[0] == 37 && j[1] == 101, "0014 joins at root turns 37 and 101");
    n = joins(p, tree_of(p, "trace_0004"), j, 8);
    CHECKF(n == 0, "0004: its subagents and flat chains run in the background");
    /* Subagents grouped by (spawn, join): agent_002 and agent_003 share a
     * branch named after the first. */
    const struct plan_tree *t10 = &p->trees[tree_of(p, "trace_0010")];
    CHECKF(t10->n_branches == 3 && p->branches[t10->first_branch + 1].n_children == 2 &&
               !strcmp(p->branches[t10->first_branch + 1].id, "trace_0010:spawn:agent_002"),
           "0010: agent_002 and agent_003 share one branch");

    /* Delays: t_k - (t_{k-1} + api_{k-1}) after the previous turn of the
     * same stream, clamped at 0, never capped
     * (dataset/loader/weka_trace.py:131-157, 1874-1954). */
    int bad = 0, over60 = 0;
    double max_delay = 0;
    for (uint32_t s = 0; s < p->n_streams; s++) {
        const struct plan_stream *st = &p->streams[s];
        for (uint32_t k = 1; k < st->n_turns; k++) {
            const struct trace_call *c = &t->calls[turn(p, st, k)->call];
            const struct trace_call *q = &t->calls[turn(p, st, k - 1)->call];
            double want = c->at_s * 1000.0 - q->at_s * 1000.0 -
                          (isnan(q->api_s) ? 0.0 : q->api_s * 1000.0);
            want = want > 0 ? want : 0;
            double got = turn(p, st, k)->delay_ms;
            bad += fabs(got - want) > 1e-6;
            over60 += got > 60000.0;
            if (got > max_delay)
                max_delay = got;
        }
    }
    CHECKF(bad == 0, "%d delays differ from t_k - (t_{k-1} + api_{k-1}) clamped at 0", bad);
    /* AIPerf logs the same: "Authored inter-turn delay exceeds 60s on 152
     * turn(s) (max observed: 72,013,230.0 ms)". */
    CHECKF(over60 == 152 && fabs(max_delay - 72013230.0) < 0.5,
           "152 delays over 60 s, max 72013230 ms: %d, %.1f", over60, max_delay);
    const struct plan_stream *r10 = stream_of(p, "trace_0010");
    CHECKF(turn(p, r10, 1)->delay_ns == 98190000000LL && turn(p, r10, 0)->delay_ns == -1 &&
               turn(p, r10, 1)->api_ns == 7420000000LL,
           "0010 turn 1: 107 s - (0 + 8.81 s) = 98.19 s");

    /* Theoretical prefix hits: leading blocks seen earlier in the trace's
     * recorded order, one seen-set per trace (dataset/loader/
     * weka_metric_prepass.py:33-48, weka_trace.py:1477-1542). */
    uint64_t hit = 0, tot = 0;
    for (uint32_t i = 0; i < p->n_turns; i++) {
        hit += p->turns[i].hit_blocks;
        tot += p->turns[i].total_blocks;
    }
    CHECKF(hit == 1162488 && tot == 1230240, "hit blocks 1162488 of 1230240: %llu of %llu",
           (unsigned long long)hit, (unsigned long long)tot);
    CHECKF(turn(p, r10, 1)->hit_blocks == 268 && turn(p, r10, 1)->total_blocks == 344 &&
               turn(p, r10, 3)->hit_blocks == 441 && turn(p, r10, 3)->total_blocks == 2037,
           "0010 turns 1 and 3: 268 of 344, 441 of 2037");
    /* Message deltas (dataset/loader/weka_synth_buf.py:124-476): turn 0 is
     * the declared system prefix (ceil((12439 + 4283) / 64) = 262 blocks)
     * then user content. */
    const struct plan_turn *u0 = turn(p, r10, 0);
    CHECKF(u0->n_msgs == 2 && p->msgs[u0->msgs].role == PLAN_ROLE_SYSTEM &&
               p->msgs[u0->msgs].tokens == 16768 && p->msgs[u0->msgs + 1].tokens == 441 &&
               p->trees[tree_of(p, "trace_0010")].shared_blocks == 262,
           "0010 turn 0: system 16768 + user 441 tokens");

    /* t* snapshots at ratio 0.5 (timing/trajectory_source.py:602-621,
     * 695-805): offsets and leads as AIPerf gives them. */
    struct plan_resume st[8];
    uint32_t bd[8];
    uint32_t ti = tree_of(p, "trace_0014");
    double ts = plan_t_star_ms(p, ti, 0.5);
    int k = plan_snapshot_ms(p, ti, ts, st, 8, bd);
    CHECKF(floor(ts + 0.5) == 8835500 && k == 2, "0014 at 0.5: t* 8835500 ms, 2 live streams");
    if (k == 2) {
        CHECKF(st[0].stream == p->trees[ti].first_stream && st[0].next_turn == 101 &&
                   st[0].waiting && st[0].join_turn == 101 &&
                   floor(st[0].offset_ms + 0.5) == 8251500 && st[0].warm_turn == 100 &&
                   floor(st[0].lead_ms + 0.5) == 5751500,
               "0014 root waits on its join turn 101: offset 8251500, lead 5751500");
        CHECKF(!strcmp(p->streams[st[1].stream].id, "trace_0014::fa:000") &&
                   st[1].next_turn == 0 && floor(st[1].offset_ms + 0.5) == 5957500 &&
                   st[1].warm_turn == PLAN_NONE && st[1].lead_ns == -1,
               "0014 fa:000 live at its turn 0, offset 5957500");
        CHECKF(bd[0] == 101 && bd[1] == 2 && bd[2] == 0, "0014 resume boundaries 101, 2, 0");
    }
    ti = tree_of(p, "trace_0004");
    ts = plan_t_star_ms(p, ti, 0.5);
    k = plan_snapshot_ms(p, ti, ts, st, 8, NULL);
    CHECKF(floor(ts + 0.5) == 220191899 && k == 3, "0004 at 0.5: t* 220191899 ms, 3 live");
    if (k == 3)
        CHECKF(floor(st[0].offset_ms + 0.5) == 220051511 &&
                   floor(st[1].offset_ms + 0.5) == 220089899 && st[2].next_turn == 18 &&
                   floor(st[2].lead_ms + 0.5) == 749899 && st[2].branch != PLAN_NONE,
               "0004: both subagents after their spawn, fa:002 at turn 18");
    /* The ns form rounds the same instant. */
    int k2 = plan_snapshot(p, ti, (int64_t)llround(ts * 1e6), st, 8, NULL);
    CHECK(k2 == 3, "plan_snapshot in ns agrees");

    /* The legacy fields stay as the legacy lanes read them: agent_001 of
     * 0010 forks at t - duration = 9.407 s; the AgentX view spawns it at
     * its t, 100.65 s, ending 91.243 s later. */
    for (uint32_t s = 0; s < t->n_sessions; s++) {
        const char *nm = trace_str(t, t->sessions[s].name);
        const char *f = trace_str(t, t->sessions[t->sessions[s].root].file);
        if (nm && !strcmp(nm, "agent_001") && f && strstr(f, "trace_0010")) {
            CHECK(t->sessions[s].fork_t_ns == 9407000000LL, "legacy fork time kept");
            CHECK(t->sessions[s].spawn_s == 100.65 && t->sessions[s].end_s == 100.65 + 91.243,
                  "AgentX spawn 100.65 s, end 191.893 s");
        }
    }
    plan_destroy(p);
    trace_destroy(t);
}

/* Subagent timing as AIPerf reads it (dataset/loader/weka_trace.py:99-111,
 * 169-189, 703-720). */
static void test_subagent_times(void)
{
    const char *doc =
        "{\"id\":\"x\",\"models\":[\"m\"],\"block_size\":4,\"hash_id_scope\":\"local\","
        "\"requests\":["
        "{\"type\":\"subagent\",\"t\":0,\"agent_id\":\"early\",\"subagent_type\":\"E\","
        "\"status\":\"completed\",\"models\":[\"m\"],\"duration_ms\":10,"
        "\"requests\":[{\"type\":\"n\",\"t\":0.1,\"model\":\"m\",\"in\":8,\"out\":1,\"hash_ids\":[9,10]}]},"
        "{\"type\":\"n\",\"t\":0,\"model\":\"m\",\"in\":8,\"out\":2,\"hash_ids\":[1,2],\"api_time\":1.0},"
        "{\"type\":\"subagent\",\"t\":2.5,\"agent_id\":\"rel\",\"subagent_type\":\"E\","
        "\"status\":\"completed\",\"models\":[\"m\"],"
        "\"requests\":[{\"type\":\"n\",\"t\":0.5,\"model\":\"m\",\"in\":8,\"out\":1,"
        "\"hash_ids\":[5,6],\"api_time\":2.0}]},"
        "{\"type\":\"subagent\",\"t\":2.5,\"agent_id\":\"neg\",\"subagent_type\":\"E\","
        "\"status\":\"completed\",\"models\":[\"m\"],\"duration_ms\":-40,"
        "\"requests\":[{\"type\":\"n\",\"t\":2.75,\"model\":\"m\",\"in\":8,\"out\":1,\"hash_ids\":[7,8]}]},"
        "{\"type\":\"n\",\"t\":3,\"model\":\"m\",\"in\":12,\"out\":2,\"hash_ids\":[1,2,3],"
        "\"api_time\":-0.5},"
        "{\"type\":\"n\",\"t\":6,\"model\":\"m\",\"in\":16,\"out\":2,\"hash_ids\":[1,2,3,4]}]}";
    struct trace *t = rd_mem(doc);
    if (!t)
        return;
    struct plan *p = build(t);
    if (p) {
        const struct plan_stream *rel = stream_of(p, "x::sa:rel"), *neg = stream_of(p, "x::sa:neg");
        CHECK(rel && neg && !stream_of(p, "x::sa:early"), "streams; 'early' dropped");
        const struct plan_tree *tr = &p->trees[0];
        CHECK(tr->n_dropped == 1 && !strcmp(p->strings[tr->dropped], "early"),
              "dropped: no root turn before it in the file");
        if (rel && neg) {
            /* Inner t earlier than the spawn is relative; later is absolute. */
            CHECKF(turn(p, rel, 0)->t_ms == 3000.0 && turn(p, neg, 0)->t_ms == 2750.0,
                   "inner starts 3.0 s (relative) and 2.75 s (absolute)");
            /* rel: no duration, ends at its last call's end 3.0 + 2.0 = 5.0:
             * joined by the root turn at 6; neg: negative duration, ends at
             * its spawn 2.5: joined by the turn at 3. */
            uint32_t b_rel = PLAN_NONE, b_neg = PLAN_NONE;
            for (uint32_t b = 0; b < p->n_branches; b++) {
                if (p->children[p->branches[b].children] == (uint32_t)(rel - p->streams))
                    b_rel = b;
                if (p->children[p->branches[b].children] == (uint32_t)(neg - p->streams))
                    b_neg = b;
            }
            CHECK(b_rel != PLAN_NONE && b_neg != PLAN_NONE && b_rel != b_neg &&
                      p->branches[b_rel].join_turn == 2 && p->branches[b_neg].join_turn == 1 &&
                      p->branches[b_rel].spawn_turn == 0,
                  "joins from spawn + duration, else the calls' end, negative: the spawn");
            /* Spawned at 2.5 after turn 0 ended at 1.0: at return, the child
             * 0.5 s after the branch start (branch_orchestrator.py:1277-1289). */
            if (b_rel != PLAN_NONE)
                CHECK(p->branches[b_rel].dispatch == PLAN_AT_RETURN &&
                          p->child_offset_ns[p->branches[b_rel].children] == 500000000,
                      "dispatched at return, child offset 0.5 s");
        }
        /* A negative api_time lengthens the next delay: 6 - (3 - 0.5). */
        const struct plan_stream *root = &p->streams[0];
        CHECKF(turn(p, root, 2)->delay_ms == 3500.0 && turn(p, root, 1)->api_ns == 0,
               "delay after a negative api_time: %.1f", turn(p, root, 2)->delay_ms);
        plan_destroy(p);
    }
    trace_destroy(t);
}

/* The built-in sample (native): positions from the native order, every
 * subagent joined by its parent's next call (the generator's parent waits). */
static void test_native_sample(void)
{
    struct trace *t = rd("traces/samples/agentic-synth.jsonl");
    if (!t)
        return;
    struct plan *p = build(t);
    if (p) {
        uint32_t subs = 0, joined = 0;
        for (uint32_t s = 0; s < p->n_streams; s++)
            subs += p->streams[s].kind == PLAN_STREAM_SUBAGENT;
        for (uint32_t b = 0; b < p->n_branches; b++)
            joined += p->branches[b].join_turn == p->branches[b].spawn_turn + 1;
        CHECKF(p->n_trees == 32 && p->n_turns == 2033 && subs == 19 && joined == 19,
               "sample: 32 trees, 2033 turns, 19 subagents each joined by the next call: "
               "%u %u %u %u",
               p->n_trees, p->n_turns, subs, joined);
        int posbad = 0;
        for (uint32_t s = 0; s < t->n_sessions; s++) {
            const struct trace_session *ss = &t->sessions[s];
            if (ss->parent != TRACE_NONE) {
                const struct trace_call *fc =
                    &t->calls[t->sessions[ss->parent].first_call + ss->fork_after];
                posbad += !(ss->pos > fc->pos);
            }
        }
        CHECK(posbad == 0, "a subagent's position follows the call it forks after");
        plan_destroy(p);
    }
    trace_destroy(t);
}

static void test_no_sessions(void)
{
    const char *mc = test_shared("traces/mooncake/conversation_trace.jsonl");
    if (!mc) {
        SKIP("mooncake trace not found");
        return;
    }
    struct trace *t = rd(mc);
    if (!t)
        return;
    struct plan *p = build(t);
    CHECK(p && p->n_trees == 0 && p->n_streams == 0, "a timestamped trace has an empty plan");
    plan_destroy(p);
    trace_destroy(t);
}

/* The canonical JSON: Python's float repr and ASCII escapes, sorted keys. */
static void test_json(void)
{
    const char *doc = "{\"id\":\"d\\u00e9j\\u00e0 \\ud83d\\ude00\",\"block_size\":2,\"requests\":["
                      "{\"type\":\"n\",\"t\":0,\"model\":\"m\",\"in\":4,\"out\":0,\"hash_ids\":[1,2]},"
                      "{\"type\":\"n\",\"t\":0.0005,\"model\":\"m\",\"in\":5,\"out\":1,\"hash_ids\":[1,2]}]}";
    struct trace *t = rd_mem(doc);
    if (!t)
        return;
    struct plan *p = build(t);
    if (p) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        char err[ERR_LEN];
        struct plan_json_opts jo = {.lanes = 2, .ratio_lo = 1e-05, .ratio_hi = 1e-05, .seed = 3};
        CHECK(plan_write_json(p, &jo, f, err) == 0, "plan_write_json");
        fclose(f);
        CHECK(!strncmp(buf, "{\"aiperf_version\":\"0.13.0\",\"lanes\":{\"concurrency\":2,", 52),
              "keys sorted");
        CHECK(strstr(buf, "\"ratio\":[1e-05,1e-05],\"seed\":3}") != NULL, "repr(1e-05)");
        CHECK(strstr(buf, "\"WEKA_AUX_ISL_RATIO\":0.1,") &&
                  strstr(buf, "\"WEKA_SEAM_MAX_GAP_SECONDS\":3600.0,") &&
                  strstr(buf, "\"WEKA_AUX_REDUCTION_RATIO\":20.0,"),
              "repr of 0.1, 3600.0, 20.0");
        CHECK(strstr(buf, "\"trace_id\":\"d\\u00e9j\\u00e0 \\ud83d\\ude00\"}") != NULL,
              "non-ASCII as \\u escapes, surrogate pairs");
        /* 0.5 ms rounds half up; max_tokens is at least 1. */
        CHECK(strstr(buf, "\"t_ms\":1}") && strstr(buf, "\"max_tokens\":1,"), "ms half up");
        CHECK(len > 0 && buf[len - 1] == '\n' && !memchr(buf, '\n', len - 1), "one line");
        free(buf);
        /* The walker catches a gate on a turn that had not completed. */
        p->turns[0].after = 0;
        p->turns[0].n_after = 1;
        struct plan_ref r = {0, 1};
        struct plan_ref *old = p->refs;
        uint32_t old_n = p->n_refs;
        p->refs = &r;
        p->n_refs = 1;
        CHECK(plan_verify(p, err) != 0, "plan_verify refuses a gate on its own stream");
        p->refs = old;
        p->n_refs = old_n;
        plan_destroy(p);
    }
    trace_destroy(t);
}

/* AIPerf refuses duplicate ids and so does the plan (weka_trace.py:1134-1138). */
static void test_refusals(void)
{
    const char *doc =
        "{\"id\":\"y\",\"block_size\":4,\"requests\":["
        "{\"type\":\"n\",\"t\":0,\"in\":4,\"out\":1,\"hash_ids\":[1]},"
        "{\"type\":\"subagent\",\"t\":1,\"agent_id\":\"a\",\"requests\":[]},"
        "{\"type\":\"subagent\",\"t\":1,\"agent_id\":\"a\",\"requests\":[]}]}";
    struct trace *t = rd_mem(doc);
    if (!t)
        return;
    char err[ERR_LEN];
    struct plan *p = plan_build(t, NULL, err);
    CHECKF(!p && strstr(err, "'a'"), "duplicate agent_id refused: %s", p ? "built" : err);
    plan_destroy(p);
    trace_destroy(t);
}

int main(void)
{
    test_agentic_cc();
    test_subagent_times();
    test_native_sample();
    test_no_sessions();
    test_json();
    test_refusals();
    return test_report();
}
