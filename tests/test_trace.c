/* test_trace.c: the trace model and its readers on the public traces
 * (counts, token sums and theoretical hit rates computed independently with
 * a short Python script over the same files), chain storage and access,
 * subagent fork points, native round trips for every format, and the
 * command line. Bad input has its own program (test_trace_bad.c).
 */
#include <jansson.h>
#include <stdint.h>
#include <sys/wait.h>

#include "tests/testhelp.h"
#include "traces/trace.h"
#include "traces/base/err.h"
#include "traces/base/time_ns.h"

static struct trace *rd(const char *path, enum trace_format f)
{
    struct trace_read_opts o = {.format = f};
    char err[ERR_LEN];
    struct trace *t = trace_read(path, &o, err);
    CHECKF(t != NULL, "read %s: %s", path, t ? "" : err);
    if (t) {
        CHECKF(trace_verify(t, err) == 0, "verify %s: %s", path, err);
    }
    return t;
}

/* Writes t as native, reads it back, compares everything visible. */
static void round_trip(const struct trace *t, const char *what)
{
    char path[] = "/tmp/test_trace_rtXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "temp file");
    if (fd < 0)
        return;
    close(fd);
    char err[ERR_LEN];
    CHECKF(trace_write_native(t, path, err) == 0, "%s: write native: %s", what, err);
    struct trace *u = trace_read(path, NULL, err);
    CHECKF(u != NULL, "%s: read native back: %s", what, u ? "" : err);
    unlink(path);
    if (!u)
        return;
    CHECKF(u->format == TRACE_FMT_NATIVE, "%s: detected as native", what);
    CHECKF(u->digest == t->digest, "%s: digest %016llx after round trip, was %016llx", what,
           (unsigned long long)u->digest, (unsigned long long)t->digest);
    CHECKF(u->n_calls == t->n_calls && u->n_sessions == t->n_sessions &&
               u->n_roots == t->n_roots && u->n_scopes == t->n_scopes &&
               u->timestamped == t->timestamped && u->global_scope == t->global_scope,
           "%s: shape kept", what);
    int bad = 0;
    uint64_t *a = malloc(1 << 20), *b = malloc(1 << 20);
    for (uint32_t i = 0; i < t->n_calls && !bad; i++) {
        const struct trace_call *x = &t->calls[i], *y = &u->calls[i];
        if (x->t_ns != y->t_ns || x->think_ns != y->think_ns || x->api_ns != y->api_ns ||
            x->ttft_ns != y->ttft_ns || x->prompt_tokens != y->prompt_tokens ||
            x->output_tokens != y->output_tokens || x->type != y->type ||
            x->n_blocks != y->n_blocks || x->session != y->session)
            bad = 1;
        const char *s1[] = {trace_str(t, x->model), trace_str(t, x->stop),
                            trace_str(t, x->input_types), trace_str(t, x->output_types)};
        const char *s2[] = {trace_str(u, y->model), trace_str(u, y->stop),
                            trace_str(u, y->input_types), trace_str(u, y->output_types)};
        for (int k = 0; k < 4; k++)
            if ((s1[k] == NULL) != (s2[k] == NULL) || (s1[k] && strcmp(s1[k], s2[k])))
                bad = 2;
        if (x->n_blocks <= (1 << 17)) {
            trace_call_blocks(t, x, a, 1 << 17);
            trace_call_blocks(u, y, b, 1 << 17);
            if (memcmp(a, b, x->n_blocks * sizeof *a))
                bad = 3;
        }
        if (bad)
            CHECKF(0, "%s: call %u differs after round trip (%d)", what, i, bad);
    }
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *x = &t->sessions[i], *y = &u->sessions[i];
        if (x->parent != y->parent || x->fork_after != y->fork_after ||
            x->fork_t_ns != y->fork_t_ns || x->fork_gap_ns != y->fork_gap_ns ||
            x->duration_ns != y->duration_ns || x->join != y->join || x->scope != y->scope ||
            x->block_size != y->block_size || x->start_ns != y->start_ns ||
            x->first_child != y->first_child || x->next_sibling != y->next_sibling ||
            (x->file == TRACE_NONE) != (y->file == TRACE_NONE) ||
            (x->file != TRACE_NONE && strcmp(trace_str(t, x->file), trace_str(u, y->file))) ||
            (x->name == TRACE_NONE) != (y->name == TRACE_NONE) ||
            (x->name != TRACE_NONE && strcmp(trace_str(t, x->name), trace_str(u, y->name)))) {
            CHECKF(0, "%s: session %u differs after round trip", what, i);
            break;
        }
    }
    free(a);
    free(b);
    struct trace_stats s1, s2;
    trace_stats_compute(t, &s1);
    trace_stats_compute(u, &s2);
    CHECKF(s1.hit_rate_tokens == s2.hit_rate_tokens && s1.prompt_tokens == s2.prompt_tokens,
           "%s: stats kept", what);
    trace_destroy(u);
}

static void test_agentic(void)
{
    const char *p = test_shared("traces/agentic-cc");
    if (!p) {
        SKIP("../shared/traces/agentic-cc absent");
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    struct trace *t = rd(dir, TRACE_FMT_AUTO);
    if (!t)
        return;
    struct trace_stats s;
    trace_stats_compute(t, &s);
    CHECKF(t->format == TRACE_FMT_AGENTX, "agentic: detected as agentx");
    CHECKF(s.calls == 967, "agentic: %llu calls, want 967", (unsigned long long)s.calls);
    CHECKF(s.sessions == 20, "agentic: %llu sessions", (unsigned long long)s.sessions);
    CHECKF(s.subagents == 7, "agentic: %llu subagents", (unsigned long long)s.subagents);
    CHECKF(t->n_scopes == 20, "agentic: one scope per file");
    /* Sums from python: sum of `in` / `out` over every call, nested too. */
    CHECKF(s.prompt_tokens == 78765910ULL, "agentic prompt tokens %llu",
           (unsigned long long)s.prompt_tokens);
    CHECKF(s.output_tokens == 401379ULL, "agentic output tokens %llu",
           (unsigned long long)s.output_tokens);
    CHECK_NEAR(s.hit_rate_tokens, 0.944561321, 1e-6, "agentic theoretical hit rate (0.945)");
    CHECK_NEAR(s.hit_rate_blocks, 0.944927819, 1e-6, "agentic block-weighted hit rate");
    CHECK_NEAR(s.prompt_p[0], 74985, 1e-9, "agentic prompt p50");
    CHECK_NEAR(s.prompt_p[1], 139128.4, 1e-9, "agentic prompt p90");
    CHECK_NEAR(s.output_p[0], 255, 1e-9, "agentic output p50");
    CHECK_NEAR(s.output_p[3], 415.076525336, 1e-9, "agentic output mean");
    CHECK_NEAR(s.think_p[0], 10, 1e-9, "agentic think p50");
    CHECK_NEAR(s.think_p[1], 126, 1e-9, "agentic think p90");
    CHECK_NEAR(s.calls_per_session_p[0], 28.5, 1e-9, "agentic calls per session p50");
    /* Compact chains: agentic calls extend their predecessor. */
    CHECKF(t->total_block_ids == 1230240, "agentic total block ids %llu",
           (unsigned long long)t->total_block_ids);
    CHECKF(t->stored_block_ids * 10 < t->total_block_ids,
           "agentic stored ids %llu of %llu (want < 10 %%)",
           (unsigned long long)t->stored_block_ids, (unsigned long long)t->total_block_ids);

    /* Subagents: t is the completion time; fork = t - duration_ms. */
    int found10 = 0, found14 = 0, found04 = 0;
    for (uint32_t i = 0; i < t->n_sessions; i++) {
        const struct trace_session *ss = &t->sessions[i];
        if (ss->parent == TRACE_NONE)
            continue;
        const char *file = trace_str(t, ss->file), *name = trace_str(t, ss->name);
        CHECK(ss->join == false, "subagent join=false");
        CHECK(ss->kind != TRACE_NONE && !strcmp(trace_str(t, ss->kind), "Explore"),
              "subagent kind Explore");
        CHECK(trace_str(t, t->calls[ss->first_call].model) &&
                  strstr(trace_str(t, t->calls[ss->first_call].model), "haiku"),
              "subagent calls keep their model");
        if (strstr(file, "trace_0010") && !strcmp(name, "agent_001")) {
            found10 = 1;
            CHECKF(ss->fork_t_ns == 9407000000LL, "0010 agent_001 fork at %lld ns",
                   (long long)ss->fork_t_ns);
            CHECKF(ss->fork_after == 0, "0010 agent_001 after call %u", ss->fork_after);
            CHECKF(ss->fork_gap_ns == 597000000LL, "0010 agent_001 gap %lld",
                   (long long)ss->fork_gap_ns);
            CHECKF(ss->duration_ns == 91243000000LL, "0010 agent_001 duration");
            CHECKF(ss->n_calls == 7, "0010 agent_001 calls %u", ss->n_calls);
        }
        if (strstr(file, "trace_0010") && !strcmp(name, "agent_004")) {
            /* launched with agent_002 and _003 after requests[9], the
             * parent's call 8 (ends 446.57 s) */
            CHECKF(ss->fork_after == 8, "0010 agent_004 after call %u", ss->fork_after);
            CHECKF(ss->fork_t_ns == 447555000000LL, "0010 agent_004 fork %lld",
                   (long long)ss->fork_t_ns);
        }
        if (strstr(file, "trace_0014")) {
            found14 = 1;
            CHECKF(ss->fork_after == 35, "0014 subagent after call %u", ss->fork_after);
            CHECKF(ss->fork_gap_ns == 220000000LL, "0014 gap %lld", (long long)ss->fork_gap_ns);
        }
        if (strstr(file, "trace_0004")) {
            found04++;
            CHECKF(ss->fork_after == 181, "0004 subagent after the last call (%u)",
                   ss->fork_after);
        }
    }
    CHECK(found10 && found14 && found04 == 2, "subagents of 0004, 0010, 0014 found");

    /* Chains read back equal to the file's hash_ids (root calls of 0010). */
    char f10[4200];
    snprintf(f10, sizeof f10, "%s/trace_0010.json", dir);
    json_error_t je;
    json_t *doc = json_load_file(f10, 0, &je);
    CHECK(doc != NULL, "load trace_0010 with jansson");
    uint32_t root10 = TRACE_NONE;
    for (uint32_t i = 0; i < t->n_sessions; i++)
        if (t->sessions[i].parent == TRACE_NONE &&
            strstr(trace_str(t, t->sessions[i].file), "trace_0010"))
            root10 = i;
    CHECK(root10 != TRACE_NONE, "trace_0010 root found");
    if (doc && root10 != TRACE_NONE) {
        json_t *reqs = json_object_get(doc, "requests");
        uint32_t k = 0, mism = 0;
        uint64_t *buf = malloc(8 * 4096);
        const struct trace_session *rs = &t->sessions[root10];
        for (size_t i = 0; i < json_array_size(reqs); i++) {
            json_t *r = json_array_get(reqs, i);
            if (!strcmp(json_string_value(json_object_get(r, "type")), "subagent"))
                continue;
            const struct trace_call *c = &t->calls[rs->first_call + k++];
            json_t *h = json_object_get(r, "hash_ids");
            uint32_t n = trace_call_blocks(t, c, buf, 4096);
            if (n != json_array_size(h))
                mism++;
            for (uint32_t b = 0; b < n && b < 4096; b++) {
                uint64_t want = (uint64_t)json_integer_value(json_array_get(h, b));
                if (buf[b] != want || trace_call_block(t, c, b) != want)
                    mism++;
            }
        }
        CHECKF(k == rs->n_calls && mism == 0, "0010 chains equal the file (%u mismatches)",
               mism);
        free(buf);
    }
    json_decref(doc);
    round_trip(t, "agentic");
    trace_destroy(t);
}

static void test_mooncake(const char *rel, uint32_t calls, uint64_t in, uint64_t out,
                          double hit, double hit_full)
{
    const char *p = test_shared(rel);
    if (!p) {
        SKIP("mooncake trace absent");
        return;
    }
    struct trace *t = rd(p, TRACE_FMT_AUTO);
    if (!t)
        return;
    struct trace_stats s;
    trace_stats_compute(t, &s);
    CHECKF(t->format == TRACE_FMT_MOONCAKE && t->timestamped && t->global_scope,
           "%s: mooncake, timestamped, global ids", rel);
    CHECKF(s.calls == calls && s.sessions == calls, "%s: %llu calls", rel,
           (unsigned long long)s.calls);
    CHECKF(s.prompt_tokens == in && s.output_tokens == out, "%s: token sums %llu %llu", rel,
           (unsigned long long)s.prompt_tokens, (unsigned long long)s.output_tokens);
    CHECK_NEAR(s.hit_rate_tokens, hit, 1e-6, "mooncake token hit rate");
    CHECK_NEAR(s.hit_rate_full_blocks, hit_full, 1e-6, "mooncake full-block hit rate");
    CHECKF(t->stored_block_ids < t->total_block_ids, "%s: shared prefixes stored once", rel);
    round_trip(t, rel);
    trace_destroy(t);
}

static void test_azure(const char *rel, uint32_t rows, uint64_t in, uint64_t out, int64_t t1)
{
    const char *p = test_shared(rel);
    if (!p) {
        SKIP("azure trace absent");
        return;
    }
    struct trace *t = rd(p, TRACE_FMT_AUTO);
    if (!t)
        return;
    struct trace_stats s;
    trace_stats_compute(t, &s);
    CHECKF(t->format == TRACE_FMT_AZURE && t->timestamped, "%s: azure, timestamped", rel);
    CHECKF(s.calls == rows, "%s: %llu rows", rel, (unsigned long long)s.calls);
    CHECKF(s.prompt_tokens == in && s.output_tokens == out, "%s: token sums %llu %llu", rel,
           (unsigned long long)s.prompt_tokens, (unsigned long long)s.output_tokens);
    CHECKF(t->calls[0].t_ns == 0 && t->calls[1].t_ns == t1,
           "%s: arrival offsets from the first row", rel);
    round_trip(t, rel);
    trace_destroy(t);
}

static const char burst_csv[] =
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5.0,s1,2.0,ChatGPT,100,20,120,Conversation log\n"
    "6.5,s2,1.0,GPT-4,50,10,60,Conversation log\n"
    "20.0,s1,3.0,ChatGPT,300,30,330,Conversation log\n"
    "21.0,,0.5,GPT-4,40,4,44,API log\n"
    "40.0,s1,1.5,ChatGPT,500,0,500,Conversation log\n";

static void test_burstgpt(void)
{
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(burst_csv, sizeof burst_csv - 1, "burst.csv", NULL, err);
    CHECKF(t != NULL, "burstgpt read: %s", t ? "" : err);
    if (!t)
        return;
    CHECK(t->format == TRACE_FMT_BURSTGPT, "burstgpt detected");
    CHECK(trace_verify(t, err) == 0, "burstgpt verify");
    CHECKF(t->n_roots == 3 && t->n_calls == 5, "burstgpt: %u sessions, %u calls", t->n_roots,
           t->n_calls);
    CHECK(!t->timestamped, "burstgpt with sessions is not timestamped");
    const struct trace_session *s1 = &t->sessions[0];
    CHECK(!strcmp(trace_str(t, s1->name), "s1") && s1->n_calls == 3, "session s1 has 3 calls");
    CHECK(s1->start_ns == 5 * NS_PER_S, "s1 starts at 5 s");
    const struct trace_call *c = &t->calls[s1->first_call];
    CHECK(c[0].t_ns == 0 && c[1].t_ns == 15 * NS_PER_S && c[2].t_ns == 35 * NS_PER_S,
          "s1 offsets");
    CHECK(c[1].think_ns == 13 * NS_PER_S && c[2].think_ns == 17 * NS_PER_S,
          "s1 think = gap from the previous call's end");
    CHECK(c[0].api_ns == 2 * NS_PER_S && c[0].prompt_tokens == 100 && c[0].output_tokens == 20,
          "s1 call 0 fields");
    CHECK(!strcmp(trace_str(t, c[0].model), "ChatGPT"), "model kept");
    round_trip(t, "burstgpt");
    trace_destroy(t);

    /* Without a Session ID column: timestamped one-call sessions. */
    const char *plain = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                        "0.5,ChatGPT,10,5,15,Conversation log\n"
                        "1.25,GPT-4,20,6,26,API log\n";
    t = trace_read_mem(plain, strlen(plain), "plain.csv", NULL, err);
    CHECKF(t != NULL, "burstgpt plain: %s", t ? "" : err);
    if (t) {
        CHECK(t->timestamped && t->n_roots == 2 && t->calls[1].t_ns == 1250000000LL,
              "plain BurstGPT: timestamped calls");
        round_trip(t, "burstgpt plain");
        trace_destroy(t);
    }
}

static void test_synth_round_trip(void)
{
    struct trace_synth_params p;
    trace_synth_defaults(&p);
    p.sessions = 12;
    p.seed = 7;
    p.subagent_p = 0.05;
    char err[ERR_LEN];
    struct trace *t = trace_synth(&p, err);
    CHECKF(t != NULL, "synth: %s", t ? "" : err);
    if (!t)
        return;
    CHECK(t->n_sessions > t->n_roots, "synth made subagents");
    round_trip(t, "synth");
    trace_destroy(t);
}

/* Nested subagents, listed out of time order: fork points from t -
 * duration, nested times relative to their own parent's start. */
static void test_nested(void)
{
    const char *doc =
        "{\"id\":\"n\",\"block_size\":4,\"requests\":["
        "{\"t\":0,\"type\":\"n\",\"in\":8,\"out\":1,\"api_time\":2,\"hash_ids\":[1,2]},"
        "{\"t\":30,\"type\":\"subagent\",\"duration_ms\":4000,\"agent_id\":\"late\",\"requests\":["
        "{\"t\":0,\"type\":\"n\",\"in\":4,\"out\":1,\"hash_ids\":[9]}]},"
        "{\"t\":10,\"type\":\"subagent\",\"duration_ms\":5000,\"agent_id\":\"early\",\"requests\":["
        "{\"t\":0,\"type\":\"n\",\"in\":4,\"out\":1,\"api_time\":1,\"hash_ids\":[7]},"
        "{\"t\":4,\"type\":\"subagent\",\"duration_ms\":1000,\"agent_id\":\"inner\",\"requests\":["
        "{\"t\":0.5,\"type\":\"n\",\"in\":4,\"out\":1,\"hash_ids\":[8]}]}]},"
        "{\"t\":20,\"type\":\"n\",\"in\":12,\"out\":1,\"api_time\":1,\"hash_ids\":[1,2,3]}]}";
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(doc, strlen(doc), "nested.json", NULL, err);
    CHECKF(t != NULL, "nested read: %s", t ? "" : err);
    if (!t)
        return;
    CHECK(t->n_sessions == 4 && t->n_roots == 1 && t->n_calls == 5, "nested shape");
    const struct trace_session *root = &t->sessions[0];
    CHECK(root->n_calls == 2 && t->calls[1].n_shared == 2 && t->calls[1].base == 0,
          "root calls grouped; the second extends the first");
    uint32_t a = root->first_child, b = a != TRACE_NONE ? t->sessions[a].next_sibling : TRACE_NONE;
    CHECK(a != TRACE_NONE && !strcmp(trace_str(t, t->sessions[a].name), "early"),
          "children in fork order: early first");
    CHECK(b != TRACE_NONE && !strcmp(trace_str(t, t->sessions[b].name), "late"), "then late");
    if (a != TRACE_NONE && b != TRACE_NONE) {
        const struct trace_session *e = &t->sessions[a], *l = &t->sessions[b];
        CHECK(e->fork_t_ns == 5 * NS_PER_S && e->fork_after == 0 && e->fork_gap_ns == 3 * NS_PER_S,
              "early: starts at 10 - 5 s, after call 0 (ends 2 s), gap 3 s");
        CHECK(l->fork_t_ns == 26 * NS_PER_S && l->fork_after == 1 && l->fork_gap_ns == 5 * NS_PER_S,
              "late: starts at 30 - 4 s, after call 1 (ends 21 s), gap 5 s");
        uint32_t in = e->first_child;
        CHECK(in != TRACE_NONE && t->sessions[in].parent == a && t->sessions[in].root == 0 &&
                  t->sessions[in].fork_t_ns == 3 * NS_PER_S && t->sessions[in].fork_after == 0 &&
                  t->sessions[in].fork_gap_ns == 2 * NS_PER_S && t->sessions[in].scope == root->scope,
              "inner: starts 4 - 1 s into early, after its call 0 (ends 1 s)");
        int64_t abs_t[5];
        trace_call_abs_times(t, abs_t);
        if (in != TRACE_NONE)
            CHECKF(abs_t[t->sessions[in].first_call] == 8500 * NS_PER_MS,
                   "inner call at 5 + 3 + 0.5 s on the file's clock (%lld)",
                   (long long)abs_t[t->sessions[in].first_call]);
    }
    /* The AgentX view (AIPerf's reading, weka_trace.py:99-111, 169-189):
     * t is the spawn; inner times before it are relative to it; the end is
     * spawn + duration; positions count each request list in the file. */
    if (a != TRACE_NONE && b != TRACE_NONE) {
        const struct trace_session *e = &t->sessions[a], *l = &t->sessions[b];
        uint32_t in = e->first_child;
        CHECK(e->spawn_s == 10.0 && e->end_s == 15.0 && e->pos == 2 && l->spawn_s == 30.0 &&
                  l->end_s == 34.0 && l->pos == 1 && root->pos == TRACE_NONE,
              "AgentX view: early spawns at 10 s, ends at 15 s; late at 30 s, 34 s");
        CHECK(in != TRACE_NONE && t->sessions[in].spawn_s == 14.0 && t->sessions[in].pos == 1 &&
                  t->calls[t->sessions[in].first_call].at_s == 14.5,
              "AgentX view: inner spawns 4 s into early (14 s), its call at 14.5 s");
        CHECK(t->calls[0].pos == 0 && t->calls[1].pos == 3 && t->calls[1].at_s == 20.0 &&
                  t->calls[e->first_call].at_s == 10.0 && t->calls[e->first_call].pos == 0 &&
                  t->calls[0].api_s == 2.0,
              "AgentX view: call positions and starts");
    }
    round_trip(t, "nested");
    trace_destroy(t);
}

/* What AIPerf's schema takes that the legacy reader refused: a negative
 * api_time (kept for the delays, not recorded for api_ns), a negative
 * duration (the subagent ends at its spawn; the legacy reading starts it
 * at t), a missing one (ends at its calls' latest end), declared prefixes. */
static void test_agentx_edges(void)
{
    const char *doc =
        "{\"id\":\"e\",\"block_size\":4,\"tool_tokens\":5,\"system_tokens\":3,\"requests\":["
        "{\"t\":0,\"type\":\"n\",\"in\":8,\"out\":1,\"api_time\":-0.5,\"think_time\":-1,"
        "\"hash_ids\":[1,2]},"
        "{\"t\":2,\"type\":\"subagent\",\"duration_ms\":-300,\"agent_id\":\"neg\",\"requests\":["
        "{\"t\":0.25,\"type\":\"n\",\"in\":4,\"out\":1,\"hash_ids\":[9]}]},"
        "{\"t\":2,\"type\":\"subagent\",\"agent_id\":\"none\",\"tool_tokens\":7,\"requests\":["
        "{\"t\":1,\"type\":\"n\",\"in\":4,\"out\":1,\"api_time\":0.5,\"hash_ids\":[8]},"
        "{\"t\":3,\"type\":\"n\",\"in\":4,\"out\":1,\"api_time\":4,\"hash_ids\":[8]}]}]}";
    char err[ERR_LEN];
    struct trace *t = trace_read_mem(doc, strlen(doc), "edges.json", NULL, err);
    CHECKF(t != NULL, "edges read: %s", t ? "" : err);
    if (!t)
        return;
    CHECK(t->calls[0].api_ns == -1 && t->calls[0].api_s == -0.5 && t->calls[0].think_ns == -1,
          "negative api_time: -0.5 s kept in api_s, not recorded in api_ns");
    CHECK(t->sessions[0].tool_tokens == 5 && t->sessions[0].system_tokens == 3,
          "declared prefix of the file");
    for (uint32_t s = 1; s < t->n_sessions; s++) {
        const struct trace_session *ss = &t->sessions[s];
        const char *nm = trace_str(t, ss->name);
        if (!strcmp(nm, "neg"))
            CHECK(ss->duration_ns == -1 && ss->fork_t_ns == 2 * NS_PER_S && ss->end_s == 2.0 &&
                      t->calls[ss->first_call].at_s == 2.25,
                  "negative duration: legacy start at t, AgentX end at the spawn");
        else
            CHECK(ss->end_s == 7.0 && ss->tool_tokens == 7 && ss->pos == 2,
                  "no duration: the calls' latest end, 3 + 4 s (3 s is after the spawn: absolute)");
    }
    round_trip(t, "edges");
    trace_destroy(t);
}

/* File reading in chunks: a line longer than the 1 MiB chunk, lines
 * across chunk ends, a last line without a newline. */
static void test_chunks(void)
{
    char path[] = "/tmp/test_trace_chunksXXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f != NULL, "temp file");
    if (!f)
        return;
    uint32_t big = 190000; /* ids of the long line: about 1.3 MB of text */
    uint64_t sum_in = 0;
    for (int i = 0; i < 3000; i++) {
        uint32_t k = i == 1500 ? big : 1 + (uint32_t)i % 7;
        fprintf(f, "{\"timestamp\": %d, \"input_length\": %u, \"output_length\": 1, \"hash_ids\": [",
                i, k * 512);
        for (uint32_t j = 0; j < k; j++)
            fprintf(f, j ? ", %u" : "%u", i == 1500 ? 1000000 + j : (uint32_t)(i % 13) * 10 + j);
        fprintf(f, i == 2999 ? "]}" : "]}\n");
        sum_in += (uint64_t)k * 512;
    }
    fclose(f);
    char err[ERR_LEN];
    struct trace *t = trace_read(path, NULL, err);
    unlink(path);
    CHECKF(t != NULL, "chunked read: %s", t ? "" : err);
    if (!t)
        return;
    struct trace_stats s;
    trace_stats_compute(t, &s);
    CHECKF(t->n_calls == 3000 && s.prompt_tokens == sum_in, "3000 calls, prompt sum (%u)",
           t->n_calls);
    const struct trace_call *c = &t->calls[1500];
    CHECK(c->n_blocks == big && trace_call_block(t, c, big - 1) == 1000000 + big - 1,
          "the long line's last id");
    CHECK(t->calls[2999].t_ns == 2999 * NS_PER_MS, "last line without a newline");
    trace_destroy(t);
}

/* The digest follows content, not storage: a chain written whole or as
 * base + suffix digests the same; another id does not. */
static void test_digest(void)
{
    const char *h = "{\"format\":\"agentreplay-trace\",\"version\":1,\"scopes\":1}\n"
                    "{\"session\":0,\"scope\":0,\"block_size\":4}\n"
                    "{\"t\":0,\"in\":8,\"out\":1,\"ids\":[1,2]}\n";
    char a[512], b[512], c[512], err[ERR_LEN];
    snprintf(a, sizeof a, "%s{\"t\":5,\"in\":12,\"out\":1,\"base\":0,\"shared\":2,\"ids\":[3]}\n", h);
    snprintf(b, sizeof b, "%s{\"t\":5,\"in\":12,\"out\":1,\"ids\":[1,2,3]}\n", h);
    snprintf(c, sizeof c, "%s{\"t\":5,\"in\":12,\"out\":1,\"ids\":[1,2,4]}\n", h);
    struct trace *x = trace_read_mem(a, strlen(a), "a", NULL, err);
    struct trace *y = trace_read_mem(b, strlen(b), "b", NULL, err);
    struct trace *z = trace_read_mem(c, strlen(c), "c", NULL, err);
    CHECK(x && y && z, "digest docs read");
    if (x && y && z) {
        CHECK(x->calls[1].n_shared == 2 && y->calls[1].n_shared == 0, "stored differently");
        CHECK(x->digest == y->digest, "same chains, same digest");
        CHECK(x->digest != z->digest, "another id, another digest");
    }
    trace_destroy(x);
    trace_destroy(y);
    trace_destroy(z);
}

static void test_cli(void)
{
    const char *p = test_shared("traces/agentic-cc");
    if (!p) {
        SKIP("../shared/traces absent");
        return;
    }
    if (access(test_bin(), X_OK) != 0) {
        SKIP("agentreplay binary not built");
        return;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s trace stats %s --json", test_bin(), p);
    FILE *f = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    int st = f ? pclose(f) : -1;
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "trace stats exit status");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    CHECKF(j != NULL, "stats --json is one JSON object: %s", out);
    if (j) {
        CHECK(json_integer_value(json_object_get(j, "calls")) == 967, "json calls 967");
        CHECK(json_integer_value(json_object_get(j, "sessions")) == 20, "json sessions 20");
        CHECK(json_integer_value(json_object_get(j, "subagents")) == 7, "json subagents 7");
        CHECK(fabs(json_real_value(json_object_get(j, "theoretical_hit_rate")) - 0.945) < 0.0005,
              "json theoretical_hit_rate 0.945");
        CHECK(json_is_integer(json_object_get(j, "prompt_tokens")) &&
                  json_is_integer(json_object_get(j, "output_tokens")),
              "json token sums");
        json_decref(j);
    }
    /* A malformed file: exit 2, location in the message. */
    char bad[] = "/tmp/test_trace_badXXXXXX";
    int fd = mkstemp(bad);
    const char *txt = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
                      "{\"timestamp\": 1, \"input_length\": -5, \"output_length\": 1, \"hash_ids\": []}\n";
    CHECK(fd >= 0 && write(fd, txt, strlen(txt)) == (ssize_t)strlen(txt), "write bad file");
    close(fd);
    snprintf(cmd, sizeof cmd, "%s trace stats %s 2>&1", test_bin(), bad);
    f = popen(cmd, "r");
    n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    st = f ? pclose(f) : -1;
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "malformed file exits 2");
    char loc[4200];
    snprintf(loc, sizeof loc, "%s:2:", bad);
    CHECKF(strstr(out, loc) && strstr(out, "input_length"), "message names the line: %s", out);
    snprintf(cmd, sizeof cmd, "%s trace stats --skip-bad --json %s 2>&1", test_bin(), bad);
    f = popen(cmd, "r");
    n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    st = f ? pclose(f) : -1;
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "skipped 1 bad record") &&
               strstr(out, "\"calls\":1"),
           "--skip-bad skips and says how many: %s", out);
    unlink(bad);
}

/* The built-in sample folder holds a native *.jsonl file: reading the
 * folder gives the same trace as reading the file. */
static void test_samples_folder(void)
{
    char err[ERR_LEN];
    struct trace *a = trace_read("traces/samples", NULL, err);
    struct trace *b = trace_read("traces/samples/agentic-synth.jsonl", NULL, err);
    CHECKF(a && b, "sample folder and file read: %s", err);
    if (a && b) {
        CHECK(a->n_calls == b->n_calls && a->n_sessions == b->n_sessions,
              "folder and file: same sessions and calls");
        CHECK(a->digest == b->digest, "folder and file: same digest");
        CHECK(a->format == TRACE_FMT_NATIVE, "folder of *.jsonl detected as native");
    }
    trace_destroy(a);
    trace_destroy(b);
}

int main(void)
{
    test_agentic();
    test_mooncake("traces/mooncake/conversation_trace.jsonl", 12031, 144793823ULL, 4122048ULL,
                  0.3736237491, 0.3733799059);
    test_mooncake("traces/mooncake/synthetic_trace.jsonl", 3993, 61194628ULL, 595432ULL,
                  0.6512444360, 0.6504309496);
    test_azure("traces/azure/AzureLLMInferenceTrace_code.csv", 8819, 18059974ULL, 245896ULL,
               52000000LL);
    test_azure("traces/azure/AzureLLMInferenceTrace_conv.csv", 19366, 22361870ULL, 4088665ULL,
               4314579000LL);
    test_burstgpt();
    test_synth_round_trip();
    test_nested();
    test_agentx_edges();
    test_chunks();
    test_digest();
    test_cli();
    test_samples_folder();
    return test_report();
}
