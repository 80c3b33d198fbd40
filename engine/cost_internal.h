/* cost_internal.h: what the cost model's files share (cost.c, cost_kernels.c,
 * cost_calib.c, cost_memo.c): the kernel ids and lists, the model's
 * state and the evaluation helpers. Not for other modules (cost.h is the
 * interface). */
#ifndef COST_INTERNAL_H
#define COST_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/cost.h"

/* ---- kernel names (the contract with calibration files) ---- */

#define KERNELS(X)                                                        \
    X(INPUT_NORM, "input_norm")                                           \
    X(KDA_QKV_PROJ, "kda_qkv_proj")                                       \
    X(KDA_SHORT_CONV, "kda_short_conv")                                   \
    X(KDA_GATE_PROJ, "kda_gate_proj")                                     \
    X(KDA_GATE_ACT, "kda_gate_act")                                       \
    X(KDA_RECURRENT, "kda_recurrent")                                     \
    X(KDA_OUT_GATE_PROJ, "kda_out_gate_proj")                             \
    X(KDA_OUT_NORM_GATE, "kda_out_norm_gate")                             \
    X(MLA_QKV_A_PROJ, "mla_qkv_a_proj")                                   \
    X(MLA_QKV_A_NORM, "mla_qkv_a_norm")                                   \
    X(MLA_Q_B_PROJ, "mla_q_b_proj")                                       \
    X(MLA_ROPE_CACHE_WRITE, "mla_rope_cache_write")                       \
    X(MLA_Q_ABSORB, "mla_q_absorb")                                       \
    X(MLA_ATTENTION, "mla_attention")                                     \
    X(MLA_V_UP, "mla_v_up")                                               \
    X(MLA_OUT_GATE, "mla_out_gate")                                       \
    X(GQA_QKV_PROJ, "gqa_qkv_proj")                                       \
    X(GQA_ROPE_CACHE_WRITE, "gqa_rope_cache_write")                       \
    X(GQA_ATTENTION, "gqa_attention")                                     \
    X(ATTN_O_PROJ, "attn_o_proj")                                         \
    X(ATTN_ALLREDUCE, "attn_allreduce")                                   \
    X(POST_ATTN_NORM, "post_attn_norm")                                   \
    X(ROUTER_GEMM, "router_gemm")                                         \
    X(ROUTER_TOPK, "router_topk")                                         \
    X(SHARED_GATE_UP, "shared_gate_up")                                   \
    X(SHARED_ACT, "shared_act")                                           \
    X(SHARED_DOWN, "shared_down")                                         \
    X(MOE_LATENT_DOWN, "moe_latent_down")                                 \
    X(MOE_ALIGN, "moe_align")                                             \
    X(MOE_GATE_UP, "moe_gate_up")                                         \
    X(MOE_ACT, "moe_act")                                                 \
    X(MOE_DOWN, "moe_down")                                               \
    X(MOE_COMBINE, "moe_combine")                                         \
    X(MOE_ALLREDUCE, "moe_allreduce")                                     \
    X(FFN_GATE_UP, "ffn_gate_up")                                         \
    X(FFN_ACT, "ffn_act")                                                 \
    X(FFN_DOWN, "ffn_down")                                               \
    X(FFN_ALLREDUCE, "ffn_allreduce")                                     \
    X(KDA_IN_PROJ_SMALL, "kda_in_proj_small")                             \
    X(KDA_IN_PROJ_LARGE, "kda_in_proj_large")                             \
    X(KDA_CONV_GATE, "kda_conv_gate")                                     \
    X(MLA_IN_PROJ_SMALL, "mla_in_proj_small")                             \
    X(MLA_IN_PROJ_LARGE, "mla_in_proj_large")                             \
    X(MLA_Q_B_PROJ_ROPE, "mla_q_b_proj_rope")                             \
    X(MLA_V_UP_GATE, "mla_v_up_gate")                                     \
    X(O_PROJ_AR_RESIDUAL, "o_proj_allreduce_residual")                    \
    X(SHARED_GATE_UP_ACT, "shared_gate_up_act")                           \
    X(MOE_GATE_UP_ACT, "moe_gate_up_act")                                 \
    X(MOE_COMBINE_AR, "moe_combine_allreduce_residual")                   \
    X(FFN_GATE_UP_ACT, "ffn_gate_up_act")                                 \
    X(FFN_DOWN_AR, "ffn_down_allreduce_residual")                         \
    X(EMBED, "embed")                                                     \
    X(FINAL_NORM, "final_norm")                                           \
    X(LM_HEAD, "lm_head")                                                 \
    X(LOGITS_GATHER, "logits_gather")                                     \
    X(SAMPLER, "sampler")                                                 \
    X(DRAFTER, "drafter_pass")

enum kid {
#define X(id, name) K_##id,
    KERNELS(X)
#undef X
    K_COUNT
};


/* Kernel names by id (cost_kernels.c). */
extern const char *const cost_kid_names[K_COUNT];

enum kclass { KC_STREAM, KC_GEMM, KC_GROUPED, KC_ATTN, KC_ELEM, KC_COMM };

enum kflag {
    KF_SIDE = 1,     /* runs on the side stream (overlapped) */
    KF_OVL = 2,      /* main-stream kernel inside the overlapped region */
    KF_PREFETCH = 4, /* the next layer's first weights load during its comm */
    KF_NOFLOOR = 8,  /* a pure communication kernel: its measured latency
                        already includes launch and tail */
};

/* The decode paths (cost.h's COST_PATH_*). */
enum { PATH_STANDARD = 0, PATH_SPECIALIZED = 1, PATH_COUNT };
#define SCOPE_STEP LAYER_KIND_COUNT /* step-level kernels (no layer) */
#define N_SCOPES (LAYER_KIND_COUNT + 1)
#define MAX_KERNELS 32


/* Where a kernel's efficiency and extra fixed time come from: its class,
 * refined by weight precision (GEMMs) or layer kind (attention); each
 * slot resolves to a preset table (engine/preset.h kt_table) or to the
 * flat efficiency of its class. */
enum kslot {
    SLOT_STREAM, SLOT_GEMM16, SLOT_GEMM8, SLOT_GEMM4, SLOT_GROUPED,
    SLOT_ATTN_KDA, SLOT_ATTN_MLA, SLOT_ATTN_GQA, SLOT_ELEM, N_SLOTS
};

#define KSLOT_NONE 0xff

struct kern {
    enum kid id;
    int klass;
    int flags;
    double bytes;    /* per GPU */
    double flops;    /* per GPU */
    double rate;     /* datasheet FLOP/s for the kernel's precision */
    double ceff;     /* achieved fraction of `rate`: the slot's FLOP table
                        at the step's tokens, or eff_compute */
    double comm_ns;  /* reduction time inside the kernel */
    double bw;       /* achieved bytes/s: HBM x the slot's efficiency */
    double fixed_ns; /* floor + the slot's extra fixed time (0 for
                        KF_NOFLOOR kernels) */
};

/* Calibration: measured times of one kernel, a grid in (batch, context). */
struct cal_entry {
    int n;           /* points, sorted by (context, batch) */
    double *batch, *ctx, *us;
};

struct cost_model {
    struct model_preset m;
    struct gpu_preset g;
    int tp;
    enum engine_backend backend;
    bool has_specialized;      /* the specialized path exists for this layout */
    double floor_ns, overhead_ns;
    struct cal_entry *cal[PATH_COUNT][N_SCOPES][K_COUNT];
    const char *cal_names[PATH_COUNT * N_SCOPES * K_COUNT];
    char cal_name_buf[PATH_COUNT * N_SCOPES * K_COUNT][80];
    int n_cal;
    /* Per path and slot: the table that prices it (NULL: the flat
     * efficiency), the verification table of MLA attention, and the flat
     * achieved bandwidth (hbm_bw x efficiency; for the grouped slot the
     * model's expert shard already looked up). */
    const struct kt_table *tab[PATH_COUNT][N_SLOTS];
    const struct kt_table *tab_mla_verify[PATH_COUNT];
    /* Per path and slot: the FLOP-efficiency table (NULL: the flat
     * eff_compute); for the grouped slot the table of the measured shard
     * nearest to the model's. */
    const struct kt_table *ctab[PATH_COUNT][N_SLOTS];
    double flat_bw[PATH_COUNT][N_SLOTS], flat_extra_ns[PATH_COUNT][N_SLOTS];
    bool any_table;
    /* The slot of each kernel by path and scope (a layer kind, or the step;
     * a kernel's class and precision are fixed by the model), found once at
     * creation so that pricing a list costs one load per kernel. */
    uint8_t kslot[PATH_COUNT][N_SCOPES][K_COUNT]; /* KSLOT_NONE: not met */
    bool kslot_ready;
    /* Measured all-reduce tables at this tp (NULL: the two-point figures). */
    const struct ar_table *art[3];
    /* The majority variant (MoE or dense) of each layer kind, and how many
     * layers of each (kind, moe). */
    int n_variant[LAYER_KIND_COUNT][2];
};

/* What a step computes, in the quantities the formulas need. */
struct shape {
    double M;        /* tokens through the layer */
    double n_dec;    /* decoding sequences */
    double P;        /* positions per decoding sequence */
    double n_pre, pre_tokens, pre_attn;
    double sum_ctx;  /* KV tokens read by decoding sequences */
    double n_seq;    /* sequences in the step */
    double experts;  /* distinct routed experts touched */
    double draft;
    /* Per path and slot, from the kernel tables at this step's keys: the
     * achieved bandwidth (bytes/s), and the fixed time of a kernel with a
     * floor (the floor plus the table's extra time, at least 0; ns). */
    double bw[PATH_COUNT][N_SLOTS], fixed_ns[PATH_COUNT][N_SLOTS];
    /* Per path and slot: the achieved fraction of the datasheet FLOP rate
     * at this step's tokens. */
    double ceff[PATH_COUNT][N_SLOTS];
};

/* ---- kernel lists (cost_kernels.c) ---- */

/* Achieved-rate basis: the datasheet FLOP/s for weights of `bits`. */
double cost_rate_for_bits(const struct gpu_preset *g, double bits);
/* A tensor-parallel all-reduce of `bytes` (ns); fused: the specialized
 * path's own one-shot kernel. */
double cost_allreduce_ns(const struct cost_model *c, double bytes, bool fused);
/* Append the kernels of one layer's attention part (of `kind`), its FFN
 * part (MoE or dense), or the per-step kernels to k[n ..); return the new
 * count (at most MAX_KERNELS). */
int cost_attn_kernels(const struct cost_model *c, int path, int kind, const struct shape *s,
                      struct kern *k, int n);
int cost_ffn_kernels(const struct cost_model *c, int path, bool moe, const struct shape *s,
                     struct kern *k, int n);
int cost_step_kernels(const struct cost_model *c, const struct shape *s, struct kern *k, int n);
/* A whole layer: attention then FFN. */
static inline int cost_layer_list(const struct cost_model *c, int path, int kind, bool moe,
                                  const struct shape *s, struct kern *k)
{
    return cost_ffn_kernels(c, path, moe, s, k, cost_attn_kernels(c, path, kind, s, k, 0));
}

/* ---- calibration (cost_calib.c) ---- */

/* A calibrated kernel's time (us) at a batch and mean context. */
double cost_cal_lookup_us(const struct cal_entry *e, double batch, double ctx);
/* Drops every calibration entry. */
void cost_cal_free(struct cost_model *c);

/* ---- evaluation (cost.c) ---- */

void cost_make_shape(const struct cost_model *c, const struct cost_batch *b, struct shape *s);
/* PATH_SPECIALIZED where the backend asks for it and it applies to b. */
int cost_step_path(const struct cost_model *c, const struct cost_batch *b);
/* A kernel list's time from its kernels' times tk[] (overlap and
 * prefetch applied), and the same from the kernels (no calibration). */
double cost_list_sum(const struct cost_model *c, const struct kern *k, const double *tk, int n);
double cost_list_ns_nocal(const struct cost_model *c, const struct kern *k, int n);
/* The drafter's time per step (ns). */
double cost_drafter_ns(const struct cost_model *c, const struct shape *s);

/* Sets bw and fixed_ns of kernels k[from .. n) (a layer of `kind`, or
 * the step's kernels with kind SCOPE_STEP) from the shape's slot values. */
void cost_kern_rates(const struct cost_model *c, int path, int kind, const struct shape *s,
                     struct kern *k, int from, int n);
/* Fills c->kslot (cost_create, once the tables are resolved). FFN kernels
 * are found under scope LAYER_KIND_COUNT with the step's (their ids are
 * distinct). */
void cost_kern_slots(struct cost_model *c);

/* kern_ns() for a model without calibration: the same arithmetic. */
static inline double kern_ns_nocal(const struct cost_model *c, const struct kern *x)
{
    double t = 0;
    if (x->klass != KC_COMM) {
        double tb = x->bytes / x->bw * 1e9;
        double tf = x->rate > 0 ? x->flops / (x->rate * x->ceff) * 1e9 : 0;
        t = tb > tf ? tb : tf;
    }
    return t + x->fixed_ns + x->comm_ns;
}

#endif
