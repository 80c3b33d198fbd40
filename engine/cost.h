/* cost.h: the cost model of one engine step on one replica.
 *
 * A step is priced from the batch's actual composition. Per layer, each
 * kernel of the chosen decode path costs
 *     max(bytes / achieved bandwidth, FLOPs / achieved rate) + floor
 * and tensor-parallel reductions cost latency + bytes / link bandwidth
 * unless the path fuses or overlaps them; plus the per-step overhead and
 * the drafter. The kernel lists per path and layer kind are explicit
 * tables (cost_kernels.c); their names are the contract with calibration
 * files (engine/CALIBRATION.md, cost_calib.c). Measured times from
 * --calibration replace the analytic cost of the kernels they cover.
 *
 * The latency-specialized path applies only where the real one does
 * (decode-only steps up to batch 64, or speculative verification with 3-7
 * draft tokens; TP8/TP16 within one NVLink domain); elsewhere the standard
 * path prices the step and the result says it fell back.
 */
#ifndef COST_H
#define COST_H

#include <stdbool.h>
#include <stddef.h>
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
    int64_t layers_ns;       /* all layers together (addition) */
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

/* A memo of cost_step() for one model over batches that differ only in
 * sum_ctx (the pricer's grid points): the kernels that do not read
 * sum_ctx are priced once per batch shape. cost_step_memo() gives exactly
 * cost_step()'s result (calibrated models go straight to cost_step). The
 * memo refers to the model, which must outlive it. */
struct cost_memo;
struct cost_memo *cost_memo_create(const struct cost_model *c);
void cost_memo_destroy(struct cost_memo *m);
void cost_step_memo(struct cost_memo *m, const struct cost_batch *b, struct cost_result *out);

/* Per-kernel breakdown of a step (for --breakdown, the plots and the Chrome
 * trace). Writes up to cap entries; returns the count. */
int cost_breakdown(const struct cost_model *c, const struct cost_batch *b,
                   struct cost_kernel_time *out, int cap);

/* Names of kernels whose analytic cost a calibration file replaced. */
int cost_calibrated_kernels(const struct cost_model *c, const char **names, int cap);

/* ---- kernel names, calibration files, the fit, the decode measurement ---- */

/* Paths and scopes as numbers: path 0 = auto (standard), 1 =
 * latency_specialized; scope = a layer kind, or COST_SCOPE_STEP for the
 * per-step kernels (embedding, LM head, sampler, drafter). */
#define COST_PATH_AUTO 0
#define COST_PATH_SPECIALIZED 1
#define COST_SCOPE_STEP LAYER_KIND_COUNT

/* Kernel names of one path and scope (MoE or dense FFN variant) at a
 * decode batch; returns the count. */
int cost_kernel_names(const struct cost_model *c, int path, int scope, bool moe,
                      int batch, const char **names, int cap);

/* Whether the specialized path would price this batch (for the layout the
 * model was created with, whatever its backend). */
bool cost_specialized_applies(const struct cost_model *c, const struct cost_batch *b);

/* Bytes one GPU reads and writes in the step (all kernels, drafter
 * weights included): step_ns can never be below bytes / HBM bandwidth. */
double cost_step_bytes(const struct cost_model *c, const struct cost_batch *b);

/* Loads a calibration file from memory (format: engine/CALIBRATION.md). */
int cost_load_calibration_mem(struct cost_model *c, const char *text, size_t len,
                              const char *label, bool force, char *err);

/* Overrides the fitted per-kernel floor and per-step overhead (ns); used
 * by the fit itself and by tests. */
void cost_set_fit(struct cost_model *c, double floor_ns, double overhead_ns);

/* Fits the floor and overhead to the calibration point (kimi-k3, GB300,
 * TP16, batch 1, isl 1, osl 1000: 256.4 tok/s specialized, 136.4 auto)
 * for the given presets; returns 0 or -1 with err set. */
int cost_fit(const struct model_preset *m, const struct gpu_preset *g, int tp,
             double specialized_tok_s, double auto_tok_s, double *floor_ns,
             double *overhead_ns, char *err);

/* The fixed-batch decode measurement (metrics.md): prefill of `batch`
 * prompts of isl tokens, then decode steps until each request has osl
 * tokens. With draft > 0, each verification step emits accept_len tokens
 * per request on average (fractional lengths alternate deterministically)
 * and verifies draft + 1 positions. */
struct cost_decode_run {
    double decode_tok_s;     /* aggregate: B * (osl - 1) / decode wall time */
    double decode_s;         /* decode phase wall time */
    double prefill_s;
    double step_us;          /* mean decode step */
    double layer_us;         /* mean per layer of a decode step (drafter,
                                overhead and per-step kernels excluded) */
    double layer_us_kind[LAYER_KIND_COUNT];
    double drafter_us, overhead_us;
    int kernels_per_layer;
    int64_t steps, fallback_steps;
};
int cost_decode_run(const struct cost_model *c, int batch, int64_t isl, int64_t osl,
                    int draft, double accept_len, struct cost_decode_run *out, char *err);

#endif
