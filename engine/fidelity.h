/* fidelity.h: the cost model's predictions for every setup that
 * ../shared/reference/calibration.md lists as "must predict", next to the
 * calibration point, as data (for `agentreplay fidelity`, the main job and
 * the plots), and the per-kernel breakdown of both decode paths; and the
 * fixed-batch decode measurement they are made of. */
#ifndef FIDELITY_H
#define FIDELITY_H

#include <stdbool.h>

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

/* Per-kernel time per layer of both paths for Kimi K3 on 16 x GB300 TP16
 * at a decode batch (context 500): columns path,layer_kind,kernel,batch,
 * us_per_layer. 0 or -1. */
int breakdown_write_csv(const char *path, int batch, char *err);

#endif
