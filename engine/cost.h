/* cost.h: the cost model of one engine step on one replica.
 *
 * A step is priced from the batch's actual composition. Per layer, each
 * kernel of the chosen decode path costs
 *     max(bytes / achieved bandwidth, FLOPs / achieved rate) + floor
 * and tensor-parallel reductions cost latency + bytes / link bandwidth
 * unless the path fuses or overlaps them; plus the per-step overhead and
 * the drafter. The kernel lists per path and layer kind are explicit
 * tables (cost.c); their names are the contract with calibration files
 * (engine/CALIBRATION.md). Measured times from --calibration replace the
 * analytic cost of the kernels they cover.
 *
 * The latency-specialized path applies only where the real one does
 * (decode-only steps up to batch 64, or speculative verification with 3-7
 * draft tokens; TP8/TP16 within one NVLink domain); elsewhere the standard
 * path prices the step and the result says it fell back.
 */
#ifndef COST_H
#define COST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/preset.h"

struct cost_model;

/* What one step computes. */
struct cost_batch {
    int n_decode;            /* sequences decoding this step */
    int decode_positions;    /* positions per decoding sequence: 1, or
                                draft + 1 under speculative verification */
    int draft;               /* draft tokens proposed (0: no speculation) */
    int n_prefill;           /* sequences with a prefill chunk this step */
    int64_t prefill_tokens;  /* sum of prefill chunk lengths */
    int64_t prefill_attn;    /* sum over chunks of chunk * (start + chunk / 2):
                                attention work of the chunks, in token pairs */
    int64_t sum_ctx;         /* sum of KV lengths read by decoding sequences
                                (tokens; attention layers only) */
};

struct cost_result {
    int64_t step_ns;         /* whole step, drafter included */
    int64_t layer_ns[LAYER_KIND_COUNT]; /* one layer of each kind */
    int64_t drafter_ns;
    int64_t overhead_ns;
    bool fallback;           /* specialized path asked, standard used */
    bool specialized;        /* the specialized path priced the step */
    int kernels_per_layer;   /* mean over layers */
};

/* One kernel's share in a breakdown. */
struct cost_kernel_time {
    const char *name;
    int layer_kind;
    int64_t ns;              /* per layer of that kind */
    bool calibrated;         /* from a calibration file */
};

struct cost_model *cost_create(const struct model_preset *m,
                               const struct gpu_preset *g, int tp,
                               enum engine_backend backend,
                               const char *calibration_path, bool force,
                               char *err);
void cost_destroy(struct cost_model *c);

/* Prices one step. Deterministic and allocation-free. */
void cost_step(const struct cost_model *c, const struct cost_batch *b,
               struct cost_result *out);

/* Per-kernel breakdown of a step (for --breakdown, the plots and the Chrome
 * trace). Writes up to cap entries; returns the count. */
int cost_breakdown(const struct cost_model *c, const struct cost_batch *b,
                   struct cost_kernel_time *out, int cap);

/* Names of kernels whose analytic cost a calibration file replaced. */
int cost_calibrated_kernels(const struct cost_model *c, const char **names, int cap);

#endif
