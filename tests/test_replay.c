/* test_replay.c: the replayer's small parts: flag parsing (every switch,
 * bad values, the rules and their grace), records as JSON lines (the
 * theoretical blocks of the agentx rules), result folders (refusal without
 * force), run.json round trip, sweep.csv rows, the t quantiles of
 * --repeats, the fake target's own timeline and prefix cache, and the
 * shared system prefix of tree instances in the fake and the engine. */
#include <jansson.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "replay/records.h"
#include "replay/replay.h"
#include "replay/replay_flags.h"
#include "replay/results.h"
#include "engine/target.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"
#include "traces/base/stats.h"
#include "traces/base/time_ns.h"

static int parse(struct replay_config *c, const char *a, const char *b, char *err)
{
    char *argv[3] = {(char *)a, (char *)b, NULL};
    int i = 0;
    return flags_parse_one(replay_flags, c, b ? 2 : 1, argv, &i, err);
}

static int64_t ft_first, ft_end, ft_chunks, ft_tokens;
static enum target_status ft_st;
static void f_first(struct target_call *c, int64_t t) { ft_first = t; }
static void f_chunk(struct target_call *c, int64_t t, int64_t n)
{
    ft_chunks++;
    ft_tokens += n;
}
static void f_done(struct target_call *c, int64_t t, enum target_status st)
{
    ft_end = t;
    ft_st = st;
}

int main(void)
{
    char err[ERR_LEN];
    struct replay_config c;
    replay_config_defaults(&c);
    CHECK(c.mode == REPLAY_MODE_SESSIONS && c.warm_start && c.warmup_call && c.recycle &&
              c.cache_isolation && c.subagents && c.think_end_to_start && c.measure_all_types &&
              c.ignore_eos && c.idle_cap_ns == 10 * NS_PER_S && c.min_measured_ns == 900 * NS_PER_S &&
              c.duration_ns == 1800 * NS_PER_S && c.overflow_limit == 0.01,
          "defaults are AgentX's");
    CHECK(c.rules == REPLAY_RULES_AGENTX && c.think_cap_ns < 0 && c.start_min_ratio == 0 &&
              c.start_max_ratio == 1 && c.requests == 0 && replay_config_grace(&c) == 30 * NS_PER_S,
          "the agentx rules by default: no per-gap cap, t* over the whole span, 30 s grace");
    CHECK(parse(&c, "--rules", "legacy", err) == 1 && c.rules == REPLAY_RULES_LEGACY &&
              replay_config_grace(&c) == 300 * NS_PER_S,
          "--rules legacy: its 300 s grace");
    CHECK(parse(&c, "--rules", "aiperf", err) == -1, "unknown rules refused");
    CHECK(parse(&c, "--rules", "agentx", err) == 1 && parse(&c, "--grace", "45", err) == 1 &&
              replay_config_grace(&c) == 45 * NS_PER_S,
          "a given grace stands");
    CHECK(parse(&c, "--think-cap", "10s", err) == 1 && c.think_cap_ns == 10 * NS_PER_S, "--think-cap");
    CHECK(parse(&c, "--start-min-ratio", "0.25", err) == 1 && parse(&c, "--start-max-ratio", "0.75", err) == 1 &&
              c.start_min_ratio == 0.25 && c.start_max_ratio == 0.75,
          "--start-min-ratio, --start-max-ratio");
    CHECK(parse(&c, "--start-max-ratio", "2", err) == -1, "a ratio above 1 refused");
    CHECK(parse(&c, "--requests", "100", err) == 1 && c.requests == 100, "--requests");
    json_t *aj = replay_config_json(&c);
    CHECK(aj && !strcmp(json_string_value(json_object_get(aj, "rules")), "agentx") &&
              json_real_value(json_object_get(aj, "think_cap_s")) == 10 &&
              json_real_value(json_object_get(aj, "grace_s")) == 45 &&
              json_integer_value(json_object_get(aj, "requests")) == 100,
          "config JSON of the agentx rules");
    json_decref(aj);
    replay_config_defaults(&c);
    replay_config_legacy(&c);
    aj = replay_config_json(&c);
    CHECK(aj && !json_object_get(aj, "rules") && json_object_get(aj, "think") &&
              json_real_value(json_object_get(aj, "grace_s")) == 300,
          "config JSON of the legacy rules: as before them");
    json_decref(aj);
    replay_config_defaults(&c);
    CHECK(parse(&c, "--concurrency", "64", err) == 1 && c.concurrency == 64, "--concurrency");
    CHECK(parse(&c, "--concurrency", "0", err) == -1, "--concurrency 0 refused");
    CHECK(parse(&c, "--concurrency", NULL, err) == -1, "missing value refused");
    CHECK(parse(&c, "--duration", "30m", err) == 1 && c.duration_ns == 1800 * NS_PER_S, "--duration 30m");
    CHECK(parse(&c, "--duration", "soon", err) == -1, "bad duration");
    CHECK(parse(&c, "--idle-cap", "none", err) == 1 && c.idle_cap_ns < 0, "--idle-cap none");
    CHECK(parse(&c, "--grace", "5s", err) == 1 && c.grace_ns == 5 * NS_PER_S, "--grace");
    CHECK(parse(&c, "--seed", "42", err) == 1 && c.seed == 42, "--seed");
    CHECK(parse(&c, "--max-model-len", "131072", err) == 1 && c.max_model_len == 131072, "--max-model-len");
    CHECK(parse(&c, "--think", "start-to-start", err) == 1 && !c.think_end_to_start, "--think");
    CHECK(parse(&c, "--measure", "normal", err) == 1 && !c.measure_all_types, "--measure");
    const char *sw[] = {"--no-warm-start", "--no-warmup-call", "--keep-early-subagents", "--no-recycle",
                        "--no-cache-isolation", "--no-subagents", "--no-join", "--honour-eos",
                        "--chunk-times"};
    for (size_t i = 0; i < ARRAY_LEN(sw); i++)
        CHECKF(parse(&c, sw[i], NULL, err) == 1, "%s", sw[i]);
    CHECK(!c.warm_start && !c.warmup_call && !c.skip_early_subagents && !c.recycle && !c.cache_isolation &&
              !c.subagents && !c.honour_join && !c.ignore_eos && c.chunk_times,
          "every switch turns its rule off");
    CHECK(parse(&c, "--gpus", "8", err) == 0, "engine flags are not the replayer's");
    replay_config_defaults(&c);
    CHECK(parse(&c, "--arrival", "poisson:2.5", err) == 1 && c.mode == REPLAY_MODE_POISSON && c.rate == 2.5,
          "--arrival poisson");
    CHECK(parse(&c, "--mode", "closed", err) == -1 && strstr(err, "conflicting"), "conflicting modes refused");
    replay_config_defaults(&c);
    CHECK(parse(&c, "--arrival", "gamma:4:2", err) == 1 && c.mode == REPLAY_MODE_GAMMA && c.gamma_cv == 2,
          "--arrival gamma");
    CHECK(parse(&c, "--arrival", "gamma:4", err) == -1, "gamma needs a CV");
    CHECK(parse(&c, "--arrival", "uniform:4", err) == -1, "unknown arrival");
    CHECK(parse(&c, "--time-scale", "-1", err) == -1, "bad time scale");
    json_t *cj = replay_config_json(&c);
    CHECK(cj && !strcmp(json_string_value(json_object_get(cj, "mode")), "gamma"), "config JSON");
    json_decref(cj);

    /* Records: one line each, null for unknowns, extras for live targets. */
    char path[256];
    snprintf(path, sizeof path, "/tmp/test_replay_%d.jsonl", (int)getpid());
    struct records_writer *w = records_open(path, true, err);
    CHECK(w != NULL, "records_open");
    int64_t ct[2] = {100, 150};
    struct replay_record r = {.session = "a@1", .lane = 3, .call = 7, .tree = 1, .intended_start_ns = 5,
                              .start_ns = 10, .first_token_ns = 100, .end_ns = 150, .chunks = 2,
                              .prompt_tokens = 640, .cached_tokens = -1, .output_tokens = 3,
                              .max_tokens = 3, .replica = 1, .chunk_times_ns = ct, .model = "m"};
    records_write(w, &r, err);
    r.first_token_ns = -1;
    r.error = "context overflow";
    r.overflow = true;
    r.live = true;
    r.http_status = 400;
    r.server_prompt_tokens = r.server_output_tokens = -1;
    r.chunk_times_ns = NULL;
    records_write(w, &r, err);
    r.has_blocks = true;
    r.hit_blocks = 3;
    r.total_blocks = 10;
    records_write(w, &r, err);
    CHECK(records_count(w) == 3, "three records");
    records_close(w, err);
    FILE *f = fopen(path, "r");
    char line[2048];
    json_t *a = NULL, *b = NULL, *bb = NULL;
    if (f && fgets(line, sizeof line, f))
        a = json_loads(line, 0, NULL);
    if (f && fgets(line, sizeof line, f))
        b = json_loads(line, 0, NULL);
    if (f && fgets(line, sizeof line, f))
        bb = json_loads(line, 0, NULL);
    if (f)
        fclose(f);
    CHECK(a && !json_object_get(a, "hit_blocks") && bb &&
              json_integer_value(json_object_get(bb, "hit_blocks")) == 3 &&
              json_integer_value(json_object_get(bb, "blocks")) == 10,
          "the theoretical blocks only where the record has them");
    json_decref(bb);
    CHECK(a && json_integer_value(json_object_get(a, "first_token_ns")) == 100 &&
              json_is_null(json_object_get(a, "cached_tokens")) && json_is_null(json_object_get(a, "error")) &&
              json_array_size(json_object_get(a, "chunk_times_ns")) == 2 &&
              !json_object_get(a, "http_status"),
          "record 1 fields");
    CHECK(b && json_is_null(json_object_get(b, "first_token_ns")) &&
              !strcmp(json_string_value(json_object_get(b, "error")), "context overflow") &&
              json_is_true(json_object_get(b, "overflow")) &&
              json_integer_value(json_object_get(b, "http_status")) == 400,
          "record 2 fields (live extras)");
    json_decref(a);
    json_decref(b);
    unlink(path);

    /* Result folders. */
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/test_replay_%d/a/b", (int)getpid());
    CHECK(results_prepare_dir(dir, false, err) == 0, "creates nested folders");
    CHECK(results_prepare_dir(dir, false, err) == 0, "an empty folder is fine");
    struct metrics m;
    metrics_init(&m);
    struct replay_record mr = {.session = "s", .session_uid = 1, .start_ns = 0, .intended_start_ns = 0,
                               .first_token_ns = 50 * NS_PER_MS, .end_ns = 1050 * NS_PER_MS, .chunks = 0,
                               .prompt_tokens = 1000, .cached_tokens = 900, .output_tokens = 101};
    metrics_add(&m, &mr);
    struct metrics_summary s;
    metrics_summarize(&m, 16, NULL, &s);
    struct replay_outcome o = {0};
    o.agentx_valid = false;
    o.n_reasons = 1;
    snprintf(o.reasons[0], sizeof o.reasons[0], "short");
    struct run_info ri = {.kind = "sim", .label = "TP8x2 auto", .gpus = 16, .tp = 8, .replicas = 2,
                          .backend = "auto", .model = "kimi-k3", .gpu = "gb300", .seed = 3, .concurrency = 4,
                          .duration_s = 60, .trace_digest = 0xabcdef};
    json_t *run = results_run_json(&ri, &s, &o, NULL);
    CHECK(results_write_json(dir, "run.json", run, err) == 0, "run.json written");
    CHECK(results_prepare_dir(dir, false, err) < 0 && strstr(err, "--force"), "non-empty folder refused");
    CHECK(results_prepare_dir(dir, true, err) == 0, "--force accepts it");
    json_t *back = results_read_run(dir, err);
    CHECK(back && json_equal(back, run), "run.json round trip");
    CHECK(back && results_num(back, "metrics.interactivity_tok_s.p90") == 100.0 &&
              results_num(back, "metrics.tpot_ms.p90") == 10.0,
          "TPOT 10 ms -> interactivity 100 tok/s/user");
    CHECK(back && !strcmp(results_str(back, "trace.digest"), "0000000000abcdef"), "digest as hex");
    CHECK(back && isnan(results_num(back, "metrics.goodput_req_s")), "no goodput without SLO");
    FILE *csv = tmpfile();
    fputs(results_sweep_header, csv);
    results_sweep_row(csv, back, "TP8x2_auto-c4");
    rewind(csv);
    char h[1024], row[1024];
    CHECK(fgets(h, sizeof h, csv) && fgets(row, sizeof row, csv), "sweep.csv lines");
    int ncol_h = 1, ncol_r = 1;
    for (char *q = h; *q; q++)
        ncol_h += *q == ',';
    for (char *q = row; *q; q++)
        ncol_r += *q == ',';
    CHECKF(ncol_h == 19 && ncol_r == 19 && !strncmp(row, "\"TP8x2 auto\",16,8,2,auto,4,3,100,", 33),
           "sweep row matches the header: %s", row);
    fclose(csv);
    json_decref(run);
    json_decref(back);
    metrics_free(&m);
    CHECK(results_read_run("/nonexistent/run.json", err) == NULL, "missing run.json");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/test_replay_%d", (int)getpid());
    CHECK(system(cmd) == 0, "cleanup");
    CHECK_NEAR(stats_t975(1), 12.706, 1e-9, "t(0.975, 1)");
    CHECK_NEAR(stats_t975(9), 2.262, 1e-9, "t(0.975, 9)");
    CHECK_NEAR(stats_t975(1000), 1.96, 1e-9, "t -> normal");

    /* The fake target: exact timeline and its prefix cache. */
    struct loop *l = loop_virtual_create();
    struct target_fake_config fc = {.overhead_ns = 1000, .prefill_ns_per_token = 10, .tpot_ns = 100,
                                    .chunk_tokens = 4, .gpus = 2, .cache = true};
    struct target *tg = target_fake_create(&fc, l);
    static const struct target_cb cb = {f_first, f_chunk, f_done};
    uint64_t blocks[4] = {1, 2, 3, 4};
    struct target_call call = {.id = 1, .session_key = 9, .prompt_tokens = 256, .max_tokens = 10,
                               .blocks = blocks, .n_blocks = 4, .trace_block_size = 64, .cb = &cb};
    CHECK(target_submit(tg, &call, err) == 0, "submit");
    loop_run(l);
    CHECK(ft_first == 1000 + 2560 && ft_end == ft_first + 900 && ft_tokens == 10 && ft_chunks == 4 &&
              ft_st == TARGET_OK,
          "first at overhead + prefill; 1 + 4 + 4 + 1 tokens; end = first + 9 x TPOT");
    ft_chunks = ft_tokens = 0;
    CHECK(target_submit(tg, &call, err) == 0, "resubmit");
    loop_run(l);
    CHECK(call.cached_tokens == 255, "same chain, same key: cached, capped at prompt - 1");
    call.session_key = 10;
    target_submit(tg, &call, err);
    loop_run(l);
    CHECK(call.cached_tokens == 0, "another key: isolated");
    call.max_tokens = 1000;
    target_submit(tg, &call, err);
    target_cancel(tg, &call);
    CHECK(ft_st == TARGET_ERR_CANCELLED, "cancel delivers done at once");
    loop_run(l);
    struct target_stats st;
    target_stats(tg, &st);
    CHECK(st.running == 0 && st.prompt_tokens == 4 * 256 && st.cached_tokens == 2 * 255, "stats");
    call.max_tokens = 0;
    CHECK(target_submit(tg, &call, err) == -1, "max_tokens 0 refused");
    /* Tree instances (other session keys) share the first shared_blocks
     * blocks under the trace's shared key, and nothing after them. */
    call.max_tokens = 4;
    call.session_key = 20;
    call.shared_key = 77;
    call.shared_blocks = 2;
    target_submit(tg, &call, err);
    loop_run(l);
    call.session_key = 21;
    target_submit(tg, &call, err);
    loop_run(l);
    CHECK(call.cached_tokens == 128, "fake: another instance shares the 2 system blocks only");
    target_destroy(tg);
    loop_destroy(l);

    /* The same in the engine (a model with full attention everywhere: a
     * hybrid one reuses a prefix only up to a state checkpoint). */
    struct engine_config ec;
    engine_config_defaults(&ec);
    snprintf(ec.model, sizeof ec.model, "llama-3.1-70b");
    l = loop_virtual_create();
    tg = target_engine_create(&ec, l, err);
    CHECK(tg != NULL, "engine target");
    if (tg) {
        uint64_t chain[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        int64_t cached[3];
        uint64_t keys[3] = {31, 32, 33};
        for (int i = 0; i < 3; i++) {
            struct target_call ecall = {.id = 100 + (uint64_t)i, .session_key = keys[i], .prompt_tokens = 513,
                                        .max_tokens = 2, .blocks = chain, .n_blocks = 8,
                                        .trace_block_size = 64, .cb = &cb, .replica = -1,
                                        .shared_key = i < 2 ? 5 : 0, .shared_blocks = i < 2 ? 3 : 0};
            ecall.start_ns = loop_now(l);
            CHECK(target_submit(tg, &ecall, err) == 0, "engine submit");
            loop_run(l);
            cached[i] = ecall.cached_tokens;
        }
        CHECKF(cached[0] == 0 && cached[1] == 3 * 64 && cached[2] == 0,
               "engine: the second instance reuses the 3 shared blocks (%lld), a third without them "
               "nothing (%lld)", (long long)cached[1], (long long)cached[2]);
        target_destroy(tg);
    }
    loop_destroy(l);
    return test_report();
}
