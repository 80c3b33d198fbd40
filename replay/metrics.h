/* metrics.h: the run's statistics, exactly as
 * ../shared/reference/metrics.md defines them (replay/SCHEMA.md says which
 * peer each agrees with).
 *
 * Per measured request (not warm-up, not cancelled, no error), kept as
 * compact arrays of numbers (a few doubles per request; the records
 * themselves stream to disk): TTFT, E2EL, scheduled latency, TPOT (for
 * output > 1). Pooled inter-chunk gaps go to an HDR histogram (hdr.h).
 * Per-session sums give per-session interactivity.
 *
 * Percentiles are exact, by linear interpolation between closest ranks
 * (k = (n - 1) * p; numpy's default). Interactivity follows InferenceX:
 * interactivity_<stat> = 1 / TPOT_<stat> (so P90 interactivity is
 * 1 / P90 TPOT, the slow tail, and the mean is 1 / mean TPOT). */
#ifndef METRICS_H
#define METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "traces/base/hdr.h"
#include "replay/records.h"

struct metrics_stat {
    double mean, p50, p75, p90, p95, p99;
    uint64_t n;                  /* values; all fields 0 when n == 0 */
};

/* One objective on a run's statistics (plan): a percentile of a metric at
 * least (interactivity) or at most (latencies) a limit. */
struct metrics_objective {
    char name[48];               /* as given: "interactivity_p90", "ttft_p90_ms" */
    char path[64];               /* its number in run.json: "metrics.ttft_ms.p90" */
    double limit;
    bool at_least;               /* >= limit (interactivity); else <= limit */
};
#define METRICS_SLO_OBJECTIVES 8

/* Service-level objectives: per-request limits for goodput (a limit <= 0
 * is not set) and objectives on percentiles of the run (plan). */
struct metrics_slo {
    double ttft_ms, tpot_ms, e2el_ms;
    int n_objectives;
    struct metrics_objective objectives[METRICS_SLO_OBJECTIVES];
};
/* The one SLO grammar: comma-separated NAME=VALUE terms (VALUE > 0),
 *   ttft=MS, tpot=MS, e2el=MS          per request (goodput)
 *   interactivity_pXX=TOK_S             percentile XX of the run, at least
 *   ttft_pXX_ms=MS, tpot_pXX_ms=MS,
 *   e2el_pXX_ms=MS                      percentile XX of the run, at most
 * with XX one of 50, 75, 90, 95, 99. Replaces *slo. */
int metrics_slo_parse(const char *s, struct metrics_slo *slo, char *err);
static inline bool metrics_slo_set(const struct metrics_slo *s)
{
    return s && (s->ttft_ms > 0 || s->tpot_ms > 0 || s->e2el_ms > 0);
}

struct dvec {
    double *v;
    size_t n, cap;
};

struct metrics_session {
    uint64_t uid;                /* 0: empty slot */
    int64_t decode_tokens;       /* sum of (output - 1) */
    int64_t decode_ns;           /* sum of (E2EL - TTFT) */
};

struct metrics {
    /* Aligned per measured request. */
    struct dvec ttft_ms, e2el_ms, sched_ms, tpot_ms; /* tpot NaN if output <= 1 */
    struct hdr itl_ns;           /* pooled chunk gaps */
    struct metrics_session *sessions; /* open addressing by uid */
    size_t sess_cap, sess_n;
    uint64_t records, completed, errors, warmup, cancelled, overflow;
    int64_t preemptions;
    int64_t input_tokens, output_tokens;  /* measured requests */
    int64_t cached_tokens, cached_prompt_tokens; /* where cached is known */
    int64_t min_start_ns, max_end_ns;     /* measured requests */
    /* The theoretical prefix hit over the measured requests (agentx:
     * records carry their turn's blocks): hit and total blocks. */
    bool theoretical;
    int64_t theo_hit_blocks, theo_blocks;
};

struct metrics_summary {
    struct metrics_stat ttft_ms, tpot_ms, itl_ms, e2el_ms, sched_ms;
    struct metrics_stat interactivity;         /* tok/s/user = 1000 / tpot_ms */
    struct metrics_stat session_interactivity; /* 1000 / per-session TPOT stat */
    double total_tok_s_per_gpu, output_tok_s_per_gpu;
    double goodput_req_s;        /* 0 without an SLO */
    uint64_t slo_met;
    struct metrics_slo slo;
    bool has_slo;
    double prefix_hit_rate;      /* achieved; NaN when unknown */
    double prefix_hit_rate_theoretical; /* NaN when not computed */
    /* AIPerf's theoretical prefix-cache hit rate (block-weighted, leading
     * hits from the plan) over the measured requests
     * (aiperf/metrics/theoretical_prefix_cache.py); NaN when none. */
    double prefix_hit_rate_theoretical_measured;
    bool theoretical;            /* the agentx rules: the line above is written */
    uint64_t records, completed, errors, warmup, cancelled, overflow;
    int64_t preemptions, fallback_steps;
    double measured_duration_s;
    int64_t input_tokens, output_tokens, cached_tokens;
    int gpus;
};

void metrics_init(struct metrics *m);
void metrics_free(struct metrics *m);
void metrics_add(struct metrics *m, const struct replay_record *r);
/* Computes the summary (the metrics are not changed). gpus: the whole
 * deployment. slo may be NULL. */
void metrics_summarize(const struct metrics *m, int gpus, const struct metrics_slo *slo,
                       struct metrics_summary *s);
/* The "metrics" object of run.json (json_t*, caller owns). */
void *metrics_summary_json(const struct metrics_summary *s);

/* Exact statistics of v[0..n) (sorted in place; NaNs skipped; all zero
 * when no value is left); percentiles as traces/base/stats.h. */
void metrics_stat_compute(double *v, size_t n, struct metrics_stat *s);
void dvec_push(struct dvec *d, double x);
void dvec_free(struct dvec *d);

#endif
