/* preset.h: model and GPU presets, read from JSON data files in
 * engine/presets/ (models/<name>.json, gpus/<name>.json) with Jansson.
 * Each file cites its sources; the code holds formulas, not numbers.
 * The file formats are described in engine/presets/README.md.
 *
 * Derived sizes (per GPU at a tensor-parallel size) are functions here so
 * that the memory planner, the cost model and `engine info` agree. */
#ifndef PRESET_H
#define PRESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum layer_kind {
    LAYER_KDA = 0, /* linear attention with recurrent state (Kimi Delta Attention) */
    LAYER_MLA = 1, /* multi-head latent attention */
    LAYER_GQA = 2, /* grouped-query attention */
    LAYER_KIND_COUNT
};

#define PRESET_MAX_LAYERS 256

struct model_preset {
    char name[64];
    char source[512];           /* where the numbers come from */
    int n_layers;
    int n_layers_kind[LAYER_KIND_COUNT];
    uint8_t layer_kind[256];    /* per layer, 0-based */
    uint8_t layer_moe[256];     /* 1 if the layer has an MoE block */
    int hidden, vocab;
    int64_t max_position;
    /* Attention. */
    int n_heads, n_kv_heads, head_dim;
    int q_lora_rank, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
    int kda_heads, kda_head_dim, kda_conv;
    /* FFN / MoE. */
    int dense_intermediate;     /* dense FFN layers */
    int n_experts, experts_per_token, n_shared_experts;
    int expert_intermediate, expert_latent; /* latent 0: experts work at hidden */
    /* Precisions in bits. */
    double bits_trunk, bits_expert, bits_shared, bits_kv, bits_state;
    int expert_group;           /* scale group size for MXFP4 (0: none) */
    /* Speculative drafter (DSpark) as a small dense model. */
    double drafter_params;      /* parameters */
    int drafter_layers;
    double drafter_bits;
    /* Measured mean acceptance lengths: draft length -> tokens per step. */
    int n_accept_points;
    int accept_draft[8];
    double accept_len[8];
    /* Additions (cost model). */
    bool mla_output_gate;       /* gated MLA: hidden -> heads*v gate projection */
    bool kda_full_rank_gate;    /* full-rank forget/output gates in KDA */
    bool specialized_path;      /* a latency-specialized decode path exists */
    int n_moe_layers;           /* layers with an MoE block */
};

/* Kernel tables (engine/CALIBRATION.md "Kernel tables"): the achieved
 * efficiency of a kernel class, and the fixed time it adds beyond the
 * fitted per-kernel floor, as functions of a key, per decode path; each
 * point cites its source in the preset file. Interpolated piecewise
 * linearly in log2(key), held flat outside the points. The efficiency is
 * a fraction of HBM bandwidth, except for the `*_flops` classes, whose
 * efficiency is a fraction of the datasheet FLOP rate of the kernel's
 * weight precision (the compute-bound side of the same kernels). */
enum kt_class {
    KT_GEMM = 0,        /* "gemm": dense GEMMs of any precision */
    KT_GEMM_BF16,       /* "gemm_bf16": 16-bit weights (before "gemm") */
    KT_GEMM_FP8,        /* "gemm_fp8": 8-bit weights */
    KT_GROUPED,         /* "grouped": the routed experts' grouped GEMMs */
    KT_ATTENTION,       /* "attention": attention and recurrent state */
    KT_ATTENTION_GQA,   /* "attention_gqa" */
    KT_ATTENTION_MLA,   /* "attention_mla": one position per sequence */
    KT_ATTENTION_MLA_VERIFY, /* "attention_mla_verify": several (speculative
                                verification) */
    KT_STREAM,          /* "stream": weight-streaming kernels */
    KT_ELEMENTWISE,     /* "elementwise" */
    KT_GEMM_BF16_FLOPS, /* "gemm_bf16_flops": FLOP efficiency, 16-bit GEMMs */
    KT_GEMM_FP8_FLOPS,  /* "gemm_fp8_flops": FLOP efficiency, 8-bit GEMMs */
    KT_CLASS_COUNT
};
enum kt_key {
    KT_KEY_TOKENS = 0,  /* tokens through the layer in the step */
    KT_KEY_SEQS,        /* decoding sequences (at least 1) */
    KT_KEY_SHARD_MB,    /* one routed expert's shard per GPU, MB (1e6 B) */
};
#define KT_MAX_POINTS 16
#define KT_GFLOPS_MAX 8 /* grouped_flops tables (expert shards) per path */
#define KT_PATHS 2      /* 0: auto (standard), 1: latency_specialized */
struct kt_table {
    int n;              /* points; 0: no table (the flat efficiency) */
    int key;            /* enum kt_key */
    double x[KT_MAX_POINTS];        /* key, increasing, > 0 */
    double eff[KT_MAX_POINTS];      /* fraction of HBM bandwidth (of the
                                       FLOP rate: *_flops), (0, 1] */
    double extra_ns[KT_MAX_POINTS]; /* fixed time beyond the floor, ns */
};
/* Measured all-reduce latency against message size at one rank count. */
#define AR_MAX_POINTS 32
#define AR_MAX_RANKS 4
struct ar_table {
    int ranks;          /* tensor-parallel ranks measured */
    int n;
    double bytes[AR_MAX_POINTS];    /* increasing */
    double ns[AR_MAX_POINTS];
};
enum ar_kind { AR_TABLE_ONESHOT = 0, AR_TABLE_LIBRARY, AR_TABLE_KINDS };

struct gpu_preset {
    char name[64];
    char source[512];
    double hbm_bytes;           /* usable HBM */
    double hbm_bw;              /* datasheet bytes/s */
    double flops_fp4, flops_fp8, flops_bf16; /* dense FLOP/s, 0 = unsupported */
    double link_bw;             /* scale-up bytes/s each way */
    int nvlink_domain;          /* GPUs in one NVLink domain */
    char family[32];            /* "blackwell", "hopper" */
    /* Additions (cost model). Fractions of the datasheet figure that each
     * kernel class achieves (engine/CALIBRATION.md says why). */
    double eff_stream;          /* weight-streaming GEMV/GEMM, tuned small-M */
    double eff_gemm;            /* generic tiled GEMM at small M (standard path) */
    double eff_grouped;         /* grouped MoE GEMM over scattered experts */
    double eff_attention;       /* attention / recurrent-state kernels */
    double eff_elementwise;     /* norms, activations, copies */
    double eff_compute;         /* tensor-core FLOP rate */
    /* Small all-reduce latency in one NVLink domain, ns, at 16 KiB and at
     * 1 MiB: a one-shot custom kernel, symmetric-memory multimem and the
     * library (NCCL) path. */
    double ar_oneshot_ns, ar_oneshot_1m_ns;
    double ar_library_ns, ar_library_1m_ns;
    double ar_multimem_ns, ar_multimem_1m_ns; /* symmetric-memory multimem;
                                                 0 = not available */
    /* Fitted to the calibration point (engine/CALIBRATION.md). */
    double kernel_floor_ns;     /* per kernel ramp-up/tail */
    double step_overhead_ns;    /* per engine step (scheduling, launch, sampling) */
    /* Optional measured tables ("kernel_tables", "allreduce_tables"):
     * per path and class, and per all-reduce implementation and rank
     * count; where absent the flat values above apply. */
    struct kt_table kt[KT_PATHS][KT_CLASS_COUNT];
    /* "grouped_flops": the routed experts' FLOP efficiency against tokens,
     * one table per measured expert shard (MB, increasing); the cost model
     * takes the shard nearest to its own (in log). */
    struct kt_table kt_gflops[KT_PATHS][KT_GFLOPS_MAX];
    double kt_gflops_mb[KT_PATHS][KT_GFLOPS_MAX];
    int n_gflops[KT_PATHS];
    struct ar_table ar[AR_TABLE_KINDS][AR_MAX_RANKS];
    int n_ar[AR_TABLE_KINDS];
};

/* The table's value at key x (x <= 0 is taken as the smallest point):
 * efficiency and extra fixed time (ns). The table must have points. */
void kt_lookup(const struct kt_table *t, double x, double *eff, double *extra_ns);
/* Names of the classes and keys as preset files write them. */
const char *kt_class_name(int cls);
const char *kt_key_name(int key);

/* Loads by name (engine/presets/...) or by path. 0 or -1 with err set. */
int preset_load_model(const char *name_or_path, struct model_preset *m, char *err);
int preset_load_gpu(const char *name_or_path, struct gpu_preset *g, char *err);
/* Parses from memory; label names the input in messages. */
int preset_parse_model(const char *text, size_t len, const char *label,
                       struct model_preset *m, char *err);
int preset_parse_gpu(const char *text, size_t len, const char *label,
                     struct gpu_preset *g, char *err);

/* Parameter counts of one layer, split by where the weights live. */
struct layer_params {
    double attn_sharded;        /* attention weights split across TP ranks */
    double attn_replicated;     /* attention weights every rank holds */
    double router;              /* router (replicated) */
    double shared;              /* shared experts (sharded) */
    double latent_proj;         /* hidden <-> expert latent projections */
    double expert_each;         /* one routed expert */
    double n_experts;           /* routed experts in the layer (0: dense) */
    double dense_ffn;           /* dense FFN (sharded) */
};
void model_layer_params(const struct model_preset *m, int layer,
                        struct layer_params *p);

/* Per GPU at tensor-parallel size tp. */
double model_weight_bytes_per_gpu(const struct model_preset *m, int tp);
double model_kv_bytes_per_token_per_gpu(const struct model_preset *m, int tp);
double model_state_bytes_per_seq_per_gpu(const struct model_preset *m, int tp);
double model_total_params(const struct model_preset *m);
double model_active_params(const struct model_preset *m);

/* Distinct routed experts touched by `tokens` tokens under uniform
 * routing: E * (1 - (1 - k/E)^tokens). */
double model_experts_touched(const struct model_preset *m, double tokens);

const char *layer_kind_name(int kind); /* "kda", "mla", "gqa" */

#endif
