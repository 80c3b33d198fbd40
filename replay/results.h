/* results.h: the result files of a run and of a sweep (replay/SCHEMA.md,
 * schema_version 1): run.json, summary.md, sweep.csv rows; reading them
 * back (compare, sweep, plan); result folders that refuse to be
 * overwritten without --force. The live load generator writes its
 * run.json through the same functions (kind "load"). */
#ifndef RESULTS_H
#define RESULTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "replay/metrics.h"
#include "replay/replay.h"

#define RESULTS_SCHEMA_VERSION 1
#define AGENTREPLAY_VERSION "0.1.0"

/* What makes a run comparable, and how it was made. Strings are borrowed;
 * the json_t* fields (typed void*) are stolen by results_run_json. */
struct run_info {
    const char *kind;           /* "sim" or "load" */
    const char *command;        /* the exact argv joined */
    const char *label;          /* e.g. "TP16x1 latency_specialized" */
    int gpus, tp, replicas;
    const char *backend;        /* "auto", "latency_specialized", "live" */
    const char *model, *gpu;
    uint64_t seed;
    int concurrency;
    double duration_s;
    bool spec;                  /* speculative decoding on */
    const char *spec_method;    /* "dspark" */
    int spec_draft;
    const char *spec_acceptance;
    const char *trace_path, *trace_format;
    uint64_t trace_digest;
    uint64_t trace_sessions, trace_calls;
    void *engine_json;          /* engine / target description, or NULL */
    void *config_json;          /* every flag, or NULL */
};

/* The whole run.json object (json_t*, caller owns). repeats may be NULL
 * (stolen otherwise). */
void *results_run_json(const struct run_info *ri, const struct metrics_summary *s,
                       const struct replay_outcome *o, void *repeats);
/* Writes a json_t* to DIR/NAME atomically (temp file + rename), indented,
 * keys in insertion order. */
int results_write_json(const char *dir, const char *name, const void *json, char *err);
/* DIR/summary.md: a human table. */
int results_write_summary(const char *dir, const struct run_info *ri,
                          const struct metrics_summary *s, const struct replay_outcome *o,
                          char *err);
/* Makes DIR (and parents). An existing non-empty DIR is refused unless
 * force (EXIT_BADINPUT-worthy error in err). */
int results_prepare_dir(const char *dir, bool force, char *err);
/* Reads DIR/run.json (or a run.json path): json_t*, caller owns; NULL with
 * err set. */
void *results_read_run(const char *dir_or_file, char *err);

/* sweep.csv (and confounded.csv). */
extern const char results_sweep_header[];
/* One row from a run.json object; dir relative to the sweep folder. */
void results_sweep_row(FILE *f, const void *run, const char *dir);

/* Number at a dotted path in a json_t* ("metrics.ttft_ms.p90"); NAN if
 * absent or null. */
double results_num(const void *json, const char *path);
const char *results_str(const void *json, const char *path);

/* The short table printed by sim and sweep: one line per run. */
void results_table_header(FILE *f);
void results_table_row(FILE *f, const void *run);


#endif
