/* test_metrics.c: metric formulas against hand computation
 * (../shared/reference/metrics.md): TTFT, TPOT, E2EL, scheduled latency,
 * pooled ITL, interactivity = 1 / TPOT stat (P90 included), per-session
 * interactivity, throughput per GPU, hit rate, goodput, exclusions, and
 * AIPerf's theoretical prefix-cache hit rate over the measured requests
 * (aiperf/metrics/theoretical_prefix_cache.py: block-weighted, successful
 * requests only, a turn without blocks adds nothing). */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "replay/metrics.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"

#define MS 1000000LL

int main(void)
{
    struct metrics m;
    metrics_init(&m);
    /* Ten requests, TPOT 10, 20, ..., 100 ms; out = 11 tokens, in 1000;
     * request i starts at i s, TTFT (i+1) * 100 ms; chunks of one token. */
    int64_t chunks[11];
    for (int i = 0; i < 10; i++) {
        struct replay_record r = {0};
        r.session = i < 5 ? "a@0" : "b@0";
        r.session_uid = i < 5 ? 1 : 2;
        r.intended_start_ns = (int64_t)i * 1000 * MS - 5 * MS;
        r.start_ns = (int64_t)i * 1000 * MS;
        r.first_token_ns = r.start_ns + (i + 1) * 100 * MS;
        int64_t tpot = (i + 1) * 10 * MS;
        for (int c = 0; c < 11; c++)
            chunks[c] = r.first_token_ns + c * tpot;
        r.end_ns = chunks[10];
        r.chunks = 11;
        r.chunk_times_ns = chunks;
        r.prompt_tokens = 1000;
        r.cached_tokens = 600;
        r.output_tokens = 11;
        r.has_blocks = true;
        r.total_blocks = i == 9 ? 0 : 15;
        r.hit_blocks = i < 3 ? 15 : i < 9 ? 5 : 0;
        metrics_add(&m, &r);
    }
    /* Excluded: a warm-up, an error, a cancelled one. */
    struct replay_record w = {0};
    w.has_blocks = true;
    w.total_blocks = w.hit_blocks = 1000; /* never counted: not measured */
    w.warmup = true;
    w.start_ns = 0;
    w.end_ns = 100000 * MS;
    w.output_tokens = 5;
    metrics_add(&m, &w);
    struct replay_record e = w;
    e.warmup = false;
    e.error = "context overflow";
    e.overflow = true;
    metrics_add(&m, &e);
    struct replay_record c = w;
    c.warmup = false;
    c.cancelled = true;
    c.error = "cancelled";
    metrics_add(&m, &c);

    struct metrics_slo slo;
    char err[ERR_LEN];
    CHECK(metrics_slo_parse("ttft=500,tpot=55", &slo, err) == 0, "slo parses");
    CHECK(metrics_slo_parse("ttft=abc", &slo, err) < 0, "bad slo value refused");
    CHECK(metrics_slo_parse("latency=5", &slo, err) < 0, "unknown slo refused");
    metrics_slo_parse("ttft=500,tpot=55", &slo, err);
    struct metrics_summary s;
    metrics_summarize(&m, 4, &slo, &s);
    /* 3 x 15 + 6 x 5 = 75 hit of 9 x 15 = 135 blocks. */
    CHECK_NEAR(s.prefix_hit_rate_theoretical_measured, 75.0 / 135.0, 1e-12,
               "theoretical hit over the measured requests");

    CHECK(s.completed == 10 && s.warmup == 1 && s.errors == 1 && s.cancelled == 1 && s.overflow == 1,
          "counts");
    /* TPOT: 10..100 ms; P90 at k = 8.1: 90 + 0.1 * 10 = 91 ms. */
    CHECK_NEAR(s.tpot_ms.p90, 91.0, 1e-12, "P90 TPOT = 91 ms");
    CHECK_NEAR(s.tpot_ms.p50, 55.0, 1e-12, "P50 TPOT = 55 ms");
    CHECK_NEAR(s.tpot_ms.mean, 55.0, 1e-12, "mean TPOT");
    CHECK_NEAR(s.tpot_ms.p99, 99.1, 1e-12, "P99 TPOT = 99.1 ms");
    CHECK_NEAR(s.interactivity.p90, 1000.0 / 91.0, 1e-12, "P90 interactivity = 1 / P90 TPOT");
    CHECK_NEAR(s.interactivity.mean, 1000.0 / 55.0, 1e-12, "mean interactivity = 1 / mean TPOT");
    CHECK(s.interactivity.p90 < s.interactivity.p50, "P90 interactivity is the slow tail");
    /* TTFT 100..1000 ms. */
    CHECK_NEAR(s.ttft_ms.p90, 910.0, 1e-12, "P90 TTFT");
    CHECK_NEAR(s.ttft_ms.p75, 775.0, 1e-12, "P75 TTFT");
    /* E2EL = TTFT + 10 * TPOT = 200 (i+1) ms. */
    CHECK_NEAR(s.e2el_ms.p50, 1100.0, 1e-12, "P50 E2EL");
    CHECK_NEAR(s.sched_ms.p50, 1105.0, 1e-12, "scheduled latency adds the 5 ms of queueing");
    /* Pooled ITL: 10 gaps of each TPOT. */
    CHECK(s.itl_ms.n == 100, "100 pooled gaps");
    CHECK_NEAR(s.itl_ms.p50, 55.0, 1e-3, "pooled ITL P50 (HDR)");
    CHECK_NEAR(s.itl_ms.mean, 55.0, 1e-9, "pooled ITL mean");
    /* Per session: a = TPOT 10..50 -> 300 ms / 50 tokens = 30 ms;
     * b = 60..100 -> 800 / 50 = 80 ms. P90 of {30, 80} = 75 ms. */
    CHECK(s.session_interactivity.n == 2, "two sessions");
    CHECK_NEAR(s.session_interactivity.p90, 1000.0 / 75.0, 1e-12, "per-session P90 interactivity");
    CHECK_NEAR(s.session_interactivity.mean, 1000.0 / 55.0, 1e-12, "per-session mean");
    /* Duration: min start 0, max end 9 s + 1 s + 1 s = 11 s. */
    CHECK_NEAR(s.measured_duration_s, 11.0, 1e-12, "duration = max end - min start");
    CHECK_NEAR(s.total_tok_s_per_gpu, (10 * 1011.0) / 11.0 / 4, 1e-12, "total tok/s/GPU");
    CHECK_NEAR(s.output_tok_s_per_gpu, 110.0 / 11.0 / 4, 1e-12, "output tok/s/GPU");
    CHECK_NEAR(s.prefix_hit_rate, 0.6, 1e-12, "hit rate = cached / prompt");
    /* Goodput: TTFT <= 500 (i = 0..4) and TPOT <= 55 (i = 0..4): 5 / 11 s. */
    CHECK(s.slo_met == 5, "5 requests meet the SLO");
    CHECK_NEAR(s.goodput_req_s, 5.0 / 11.0, 1e-12, "goodput");
    /* The JSON carries it all. */
    json_t *j = metrics_summary_json(&s);
    json_t *p90 = json_object_get(json_object_get(j, "interactivity_tok_s"), "p90");
    CHECK(p90 && fabs(json_real_value(p90) - 1000.0 / 91.0) < 1e-12, "run.json value");
    CHECK(json_integer_value(json_object_get(json_object_get(j, "requests"), "cancelled")) == 1,
          "requests.cancelled");
    json_decref(j);
    metrics_free(&m);

    /* Empty runs. */
    metrics_init(&m);
    metrics_summarize(&m, 16, NULL, &s);
    CHECK(s.completed == 0 && s.interactivity.p90 == 0 && s.total_tok_s_per_gpu == 0 && !s.has_slo,
          "empty run: zeros, no SLO");
    metrics_free(&m);

    /* Percentile edge cases like numpy; an empty set is all zeros. */
    struct metrics_stat st;
    double one[] = {5};
    metrics_stat_compute(one, 1, &st);
    CHECK(st.p90 == 5 && st.n == 1, "one value");
    double two[] = {3, NAN, 1};
    metrics_stat_compute(two, 3, &st);
    CHECK_NEAR(st.p90, 2.8, 1e-12, "two values (NaN skipped)");
    metrics_stat_compute(NULL, 0, &st);
    CHECK(st.n == 0 && st.p90 == 0 && st.mean == 0, "empty: zeros");

    /* The one SLO grammar: per-request limits and percentile objectives. */
    CHECK(metrics_slo_parse("interactivity_p90=100,ttft_p90_ms=2000,e2el=9000", &slo, err) == 0 &&
              slo.n_objectives == 2 && slo.e2el_ms == 9000 && slo.objectives[0].at_least &&
              !strcmp(slo.objectives[0].path, "metrics.interactivity_tok_s.p90") &&
              !slo.objectives[1].at_least && !strcmp(slo.objectives[1].path, "metrics.ttft_ms.p90") &&
              slo.objectives[1].limit == 2000,
          "plan's spellings and goodput limits in one --slo");
    CHECK(metrics_slo_parse("tpot_p99_ms=40", &slo, err) == 0 && !metrics_slo_set(&slo) &&
              slo.n_objectives == 1, "objectives alone are not goodput limits");
    CHECK(metrics_slo_parse("interactivity_p80=100", &slo, err) < 0 && strstr(err, "interactivity_p80"),
          "percentile 80 refused, named");
    CHECK(metrics_slo_parse("ttft_p90=100", &slo, err) < 0, "a latency objective needs _ms");
    CHECK(metrics_slo_parse("interactivity_p90=0", &slo, err) < 0, "a limit must be > 0");
    CHECK(metrics_slo_parse("", &slo, err) < 0, "empty refused");
    return test_report();
}
