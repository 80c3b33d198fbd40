/* fidelity.h: the cost model's predictions for every setup that
 * ../shared/reference/calibration.md lists as "must predict", next to the
 * calibration point, as data (for `agentreplay fidelity`, the main job and
 * the plots), and the per-kernel breakdown of both decode paths.
 * Implemented in engine/bench_cmd.c. */
#ifndef FIDELITY_H
#define FIDELITY_H

#include "engine/cost.h"

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
