/* fidelity.h: the cost model's predictions for every setup that
 * ../shared/reference/calibration.md lists as "must predict", next to the
 * calibration point, as data (for `agentreplay fidelity`, the main job and
 * the plots), and the per-kernel breakdown of both decode paths; and the
 * fixed-batch decode measurement they are made of. */
#ifndef FIDELITY_H
#define FIDELITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/accept.h"
#include "engine/cost.h"
#include "engine/engine.h"
#include "engine/preset.h"

/* A fixed-batch decode measurement (metrics.md), priced step by step with
 * the cost model: B requests of isl prompt tokens decode osl tokens
 * together on one replica. Used by bench-decode and the tables below. */
struct decode_opts {
    char model[256], gpu[256];      /* preset names or files */
    int gpus, tp;
    enum engine_backend backend;
    int batch;
    int64_t isl, osl;
    bool spec;
    int draft;
    char acceptance[128];
    char calibration[512];
    bool force;
};

void decode_opts_defaults(struct decode_opts *o); /* kimi-k3, gb300, 16 GPUs, TP16, auto, batch 1, isl 1, osl 1000 */

/* Everything a priced run needs, loaded and checked. */
struct decode_setup {
    struct model_preset m;
    struct gpu_preset g;
    struct cost_model *c;
    struct accept_model acc;
    double accept_len;       /* expected tokens per verification step */
};
/* Loads the presets and checks the layout (a located message on failure;
 * close the setup either way). */
int decode_setup_open(const struct decode_opts *o, struct decode_setup *s, char *err);
void decode_setup_close(struct decode_setup *s);
int decode_setup_run(const struct decode_opts *o, struct decode_setup *s,
                     struct cost_decode_run *r, char *err);
/* Open, run and close in one (the presets stay in *s; s->c is closed). */
int decode_measure(const struct decode_opts *o, struct decode_setup *s,
                   struct cost_decode_run *r, char *err);
/* The decode step the per-kernel breakdown shows: mid-run context. */
void decode_breakdown_batch(const struct decode_opts *o, const struct decode_setup *s,
                            struct cost_batch *b);
/* A layer kind's name, or "step" for the per-step kernels. */
const char *decode_scope_name(int k);

struct fidelity_row {
    char setup[48];          /* "calibration", "batch-sweep", "dspark", "gb200", ... */
    char model[64], gpu[64];
    int gpus, tp;
    char backend[24];        /* "auto" or "latency_specialized" */
    int batch;
    int draft;               /* 0: no speculation */
    double acceptance;       /* fixed tokens per verification step (0: none) */
    double predicted_tok_s;  /* aggregate decode tok/s */
    double published_tok_s;  /* 0 when not published here */
    double step_us, layer_us;
    double layer_us_kind[LAYER_KIND_COUNT];
    int kernels_per_layer;
    int64_t fallback_steps;
};

/* Computes the table (presets by name); returns the row count or -1. */
int fidelity_rows(struct fidelity_row *rows, int cap, char *err);

/* CSV, columns setup,gpu,gpus,tp,backend,batch,spec,acceptance,
 * predicted_tok_s,published_tok_s (plus step_us,layer_us). 0 or -1. */
int fidelity_write_csv(const char *path, char *err);

/* ---- external validation (fidelity_ext.c) ---- */

/* A closed-loop serving benchmark simulated with the engine: `concurrency`
 * clients each send a prompt of isl tokens (no shared prefixes) for osl
 * output tokens and send the next when it ends, four requests each, all
 * starting at time 0 (as a benchmark with --max-concurrency does). */
struct serve_result {
    double tpot_ms;          /* mean over requests of (end - first token) / (osl - 1) */
    double ttft_ms;          /* mean */
    int64_t requests, steps;
};
int fidelity_serve(const struct engine_config *ec, int concurrency, int64_t isl, int64_t osl,
                   struct serve_result *r, char *err);

/* One row of engine/presets/validation/external.json (format there and in
 * engine/CALIBRATION.md). */
enum ext_role { EXT_VALIDATION = 0, EXT_NOT_MODELLED, EXT_EFFICIENCY };
enum ext_kind { EXT_SERVING = 0, EXT_FIXED };
enum ext_metric { EXT_TPOT_MS = 0, EXT_TOK_S_USER, EXT_DECODE_TOK_S };
#define EXT_MAX_ROWS 256
struct ext_row {
    char id[48];
    int role;                /* enum ext_role */
    char source[400], setup[320];
    char model[64], gpu[32], framework[64];
    char why[400];           /* known_miss (validation), why (not_modelled),
                                sets (efficiency_source) */
    int gpus, tp, kind, metric;
    int concurrency;         /* clients (serving) or batch (fixed) */
    int64_t isl, osl;
    double published;
    double band;             /* the stated error band (fraction; default 0.10) */
    bool known_miss;         /* a miss the table explains */
    /* Filled by ext_rows_predict (validation rows). */
    double predicted, error; /* error = predicted / published - 1 */
    bool within;             /* |error| <= band */
};
struct ext_stats {
    int validation, within, known_misses;
    int gpu_kinds;           /* distinct preset names before any '-' */
    double median, worst;    /* |error| */
    int worst_row;
};
const char *ext_role_name(int role);
const char *ext_metric_name(int metric);
/* Reads the table (path NULL: the built-in one); *rows is the caller's to
 * free. 0 or -1 with a located message. */
int ext_rows_load(const char *path, struct ext_row **rows, int *n, char *err);
int ext_rows_parse(const char *text, size_t len, const char *label, struct ext_row **rows,
                   int *n, char *err);
/* Predicts every validation row (deterministic). 0 or -1. */
int ext_rows_predict(struct ext_row *rows, int n, char *err);
void ext_rows_stats(const struct ext_row *rows, int n, struct ext_stats *st);

/* ---- sensitivity (fidelity_sens.c) ---- */

/* One uncertain input moved to an end of its cited range. */
struct sens_variant {
    const char *name;        /* file-name-safe */
    const char *input;       /* what changes */
    const char *range;       /* the value and its source */
    int op;
    double value;
};
struct sens_fit {
    char path[1024];         /* the variant's GPU preset file */
    double floor_ns, overhead_ns; /* re-fitted to the calibration point */
    bool infeasible;         /* no floor >= 0 and overhead >= 0 fits */
};
int sens_variant_count(void);
const struct sens_variant *sens_variant_get(int i);
/* Writes variant i of the GB300 preset into dir, re-fitted (a variant the
 * fit cannot reproduce is returned with infeasible set). 0 or -1. */
int sens_variant_write(int i, const char *dir, struct sens_fit *out, char *err);

/* Per-kernel time per layer of both paths for Kimi K3 on 16 x GB300 TP16
 * at a decode batch (context 500): columns path,layer_kind,kernel,batch,
 * us_per_layer. 0 or -1. */
int breakdown_write_csv(const char *path, int batch, char *err);

#endif
