/* k3layer.h: one Kimi K3 decode layer at tensor-parallel shard shapes:
 * its shapes, its tensors (weights, per-sequence state, inputs, outputs,
 * scratch), and the two decode paths as explicit kernel sequences with a C
 * implementation of each kernel, so that the CPU proves both paths compute
 * the same function and the CUDA driver (k3_main.cu) launches the same
 * sequence by operation id.
 *
 * Layer I/O follows vLLM's residual convention: the input is the residual
 * stream r_in and the previous block's output d_in (hidden = r_in + d_in);
 * the output is r_out (the residual after attention) and d_out (the MoE
 * block's output), so the next layer's first kernel adds them.
 *
 * Sharding at tensor-parallel size tp (shapes per GPU): KDA and MLA heads
 * 96/tp; attention output projection row-parallel (partial sums reduced);
 * the MLA latent projections (q_a, kv_a) replicated; shared experts and
 * every routed expert split along their intermediate width (3072/tp each);
 * the router replicated; the latent-MoE projections sharded along the
 * latent (7168 -> 3584/tp down, 3584/tp -> 7168 up): the latent is
 * all-gathered before the experts and the experts' partial latent output
 * reduce-scattered before the up-projection (two small collectives on
 * B x 3584 values; local steps on one rank), and the up-projection's
 * partial sums join the block's all-reduce. One GPU running tp=8 computes
 * one rank's share; its reductions are then local steps.
 */
#ifndef K3LAYER_H
#define K3LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/k3ref.h"

#ifdef __cplusplus
extern "C" {
#endif

#define K3_ERR_LEN 512

struct k3_shape {
    int tp;           /* tensor-parallel size the shapes are sharded for */
    int hidden;       /* model width (7168) */
    int kda_heads;    /* KDA heads on this rank (96/tp) */
    int head_dim;     /* KDA head dim (128): state is head_dim^2 floats */
    int conv;         /* short convolution width (4) */
    int mla_heads;    /* MLA heads on this rank (96/tp) */
    int q_lora;       /* 1536 */
    int kv_lora;      /* 512 */
    int nope;         /* qk_nope_head_dim 128 */
    int rope;         /* qk_rope_head_dim 64 (carried, not rotated: NoPE) */
    int v_head;       /* 128 */
    int experts;      /* routed experts (896) */
    int topk;         /* experts per token (16) */
    int expert_inter; /* routed expert intermediate on this rank (3072/tp) */
    int shared_inter; /* both shared experts' intermediate on this rank (2*3072/tp) */
    int latent;       /* routed experts' latent width (3584) */
    int latent_shard; /* latent columns this rank projects (3584/tp) */
    int ctx_max;      /* MLA cache capacity per sequence, tokens */
    float eps;        /* RMSNorm epsilon (1e-5) */
    float situ_beta, situ_linear_beta; /* 4.0, 25.0 */
    float gate_lower; /* KDA log-decay lower bound (-5.0) */
    float route_scale;/* routed_scaling_factor (1.0) */
};

/* The published shapes sharded for tp (1, 2, 4, 8 or 16). */
int k3_shape_full(struct k3_shape *s, int tp, int ctx_max, char *err);
/* Reduced shapes with the same structure (fast enough for sanitizers). */
void k3_shape_small(struct k3_shape *s, int ctx_max);
int k3_shape_verify(const struct k3_shape *s, char *err);

enum k3_kind { K3_KDA = 0, K3_MLA = 1, K3_KIND_COUNT };
enum k3_path { K3_STANDARD = 0, K3_FUSED = 1, K3_PATH_COUNT };
const char *k3_kind_name(enum k3_kind k);   /* "kda", "mla" */
const char *k3_path_name(enum k3_path p);   /* "standard", "fused" */

enum k3_dtype { K3_DT_BF16, K3_DT_F32, K3_DT_U8, K3_DT_I32 };
size_t k3_dtype_size(enum k3_dtype t);

/* Every tensor of a layer. W_: weights; S_: per-sequence state (mutated
 * by a step); IO_: inputs and outputs; A_: scratch between kernels. */
enum k3_tid {
    /* weights, common */
    K3_W_ATTN_NORM, K3_W_MOE_NORM,          /* f32 [H] */
    K3_W_O,                                 /* bf16 [H][heads*128] attention output */
    K3_W_ROUTER,                            /* bf16 [E][H] */
    K3_W_ROUTER_BIAS,                       /* f32 [E] selection bias */
    K3_W_SH_GU,                             /* bf16 [2*SI][H]: gate rows then up rows */
    K3_W_SH_DOWN,                           /* bf16 [H][SI] */
    K3_W_LAT_IN,                            /* bf16 [Ls][H] */
    K3_W_LAT_NORM,                          /* f32 [L] */
    K3_W_RT_GU, K3_W_RT_GU_S,               /* mxfp4 [E][2I][L/2], e8m0 [E][2I][L/32] */
    K3_W_RT_DOWN, K3_W_RT_DOWN_S,           /* mxfp4 [E][L][I/2], e8m0 [E][L][I/32] */
    K3_W_LAT_OUT,                           /* bf16 [H][Ls] */
    /* weights, KDA */
    K3_W_KDA_QKV,                           /* bf16 [3*hd][H] */
    K3_W_KDA_GATE,                          /* bf16 [gw = 2*hd + nh][H] */
    K3_W_KDA_CONV,                          /* f32 [3*hd][conv] */
    K3_W_KDA_ALOG,                          /* f32 [nh] */
    K3_W_KDA_DTB,                           /* f32 [hd] */
    K3_W_KDA_ONORM,                         /* f32 [d] */
    /* weights, MLA */
    K3_W_MLA_A,                             /* bf16 [aw = q_lora + kv + rope + nh*v][H] */
    K3_W_MLA_QNORM,                         /* f32 [q_lora] */
    K3_W_MLA_KVNORM,                        /* f32 [kv] */
    K3_W_MLA_QB,                            /* bf16 [nh*(nope+rope)][q_lora] */
    K3_W_MLA_UK,                            /* bf16 [nh][kv][nope] */
    K3_W_MLA_UV,                            /* bf16 [nh][v][kv] */
    /* state */
    K3_S_KDA_STATE,                         /* f32 [B][nh][d][d] */
    K3_S_KDA_CONV,                          /* f32 [B][3*hd][conv-1] */
    K3_S_MLA_CACHE,                         /* fp8 [B][ctx_max][kv+rope] */
    K3_S_MLA_POS,                           /* i32 [B] position of the new token */
    /* inputs and outputs */
    K3_IO_R_IN, K3_IO_D_IN,                 /* bf16 [B][H] */
    K3_IO_R_OUT, K3_IO_D_OUT,               /* bf16 [B][H] */
    /* scratch */
    K3_A_XN,                                /* bf16 [B][H] attention norm */
    K3_A_QKV, K3_A_QKVC,                    /* bf16 [B][3*hd] projection, after conv */
    K3_A_GP,                                /* bf16 [B][gw] */
    K3_A_G,                                 /* f32 [B][hd] log decay */
    K3_A_BETA,                              /* f32 [B][nh] */
    K3_A_O,                                 /* bf16 [B][heads*128] attention output */
    K3_A_ON,                                /* bf16 [B][hd] KDA normed, gated */
    K3_A_MA,                                /* bf16 [B][aw] */
    K3_A_QAN,                               /* bf16 [B][q_lora] */
    K3_A_QB,                                /* bf16 [B][nh*(nope+rope)] */
    K3_A_QLAT, K3_A_OLAT,                   /* bf16 [B][nh][kv] */
    K3_A_ATT,                               /* bf16 [B][H] reduced attention output */
    K3_A_XN2,                               /* bf16 [B][H] MoE norm */
    K3_A_LOGITS,                            /* f32 [B][E] */
    K3_A_IDS,                               /* i32 [B][k] */
    K3_A_WTS,                               /* f32 [B][k] */
    K3_A_SHGU,                              /* bf16 [B][2*SI] */
    K3_A_SHH,                               /* bf16 [B][SI] */
    K3_A_SHOUT,                             /* bf16 [B][H] */
    K3_A_LAT,                               /* bf16 [B][L] latent (this rank: cols 0..Ls) */
    K3_A_LATN,                              /* bf16 [B][L] normalized latent */
    K3_A_ALIGN,                             /* i32 [3P+3], P = B*k: n_active, experts[P+1],
                                               offsets[P+1], pairs[P] (b*k+s by expert) */
    K3_A_RGU,                               /* bf16 [B*k][2I] */
    K3_A_RF32,                              /* f32 [B*k][2I] (pre-rounding scratch) */
    K3_A_RH,                                /* bf16 [B*k][I] */
    K3_A_RACC,                              /* f32 [B][L] weighted routed sum (partial) */
    K3_A_KVN,                               /* bf16 [B][kv+rope] normalized new latent row */
    K3_A_ATT_PART,                          /* f32 [max(4096, B*nh)][kv+2]: attention partials
                                               of the context splits (GPU only) */
    K3_A_ATT_CNT,                           /* i32 [B*nh] splits done (GPU only; zero) */
    K3_T_COUNT
};

struct k3_tensor {
    const char *name;
    enum k3_dtype dtype;
    size_t count;   /* elements (0: not used by this layer kind) */
    void *host;     /* owned by the layer */
    void *dev;      /* device copy, managed by the CUDA driver (NULL here) */
};

struct k3_layer {
    struct k3_shape sh;
    enum k3_kind kind;
    int batch;
    int rank;       /* tensor-parallel rank (0 on one GPU): this rank
                       projects latent columns rank*Ls .. (rank+1)*Ls */
    struct k3_tensor t[K3_T_COUNT];
};

/* Allocates every tensor this kind uses for `batch` sequences (zeroed).
 * Returns 0, or -1 with err filled. */
int k3_layer_init(struct k3_layer *L, const struct k3_shape *s,
                  enum k3_kind kind, int batch, char *err);
void k3_layer_free(struct k3_layer *L);
/* Deep copy of src into an uninitialized dst. */
int k3_layer_clone(struct k3_layer *dst, const struct k3_layer *src, char *err);
/* Fills weights, state and inputs with random values (never zeros) from
 * seed; sequence b's new token goes at position ctx_len - 1 - (b % 3)
 * (at least 0), so batches mix context lengths. */
void k3_layer_randomize(struct k3_layer *L, uint64_t seed, int ctx_len);
/* Checks tensor sizes against the shape; 0 or -1 with err. */
int k3_layer_verify(const struct k3_layer *L, char *err);

/* Typed views of a tensor's host data. */
#define K3_BF(L, id) ((k3_bf16 *)(L)->t[id].host)
#define K3_F32(L, id) ((float *)(L)->t[id].host)
#define K3_U8(L, id) ((uint8_t *)(L)->t[id].host)
#define K3_I32(L, id) ((int32_t *)(L)->t[id].host)

/* Widths derived from the shape. */
int k3_kda_hd(const struct k3_shape *s);       /* kda_heads * head_dim */
int k3_kda_gw(const struct k3_shape *s);       /* gate projection width */
int k3_mla_aw(const struct k3_shape *s);       /* MLA a-projection width */
int k3_mla_qw(const struct k3_shape *s);       /* nope + rope */
int k3_attn_width(const struct k3_shape *s, enum k3_kind k); /* o_proj input */

/* ---- the two paths --------------------------------------------------- */

/* Operation ids (each is one kernel launch on the GPU). The names are
 * the engine's (engine/cost_kernels.c, engine/CALIBRATION.md): the same name on
 * both paths may be a different kernel (the fused path's router GEMM also
 * normalizes its input, for instance); calibration entries are per path. */
enum k3_op_id {
    /* standard path ("auto") */
    K3_OP_INPUT_NORM, K3_OP_KDA_QKV_PROJ, K3_OP_KDA_SHORT_CONV,
    K3_OP_KDA_GATE_PROJ, K3_OP_KDA_GATE_ACT, K3_OP_KDA_RECURRENT,
    K3_OP_KDA_OUT_GATE_PROJ, K3_OP_KDA_OUT_NORM_GATE,
    K3_OP_MLA_QKV_A_PROJ, K3_OP_MLA_QKV_A_NORM, K3_OP_MLA_Q_B_PROJ,
    K3_OP_MLA_ROPE_CACHE_WRITE, K3_OP_MLA_Q_ABSORB, K3_OP_MLA_ATTENTION,
    K3_OP_MLA_V_UP, K3_OP_MLA_OUT_GATE,
    K3_OP_ATTN_O_PROJ, K3_OP_ATTN_ALLREDUCE, K3_OP_POST_ATTN_NORM,
    K3_OP_ROUTER_GEMM, K3_OP_ROUTER_TOPK, K3_OP_SHARED_GATE_UP,
    K3_OP_SHARED_ACT, K3_OP_SHARED_DOWN, K3_OP_MOE_LATENT_DOWN,
    K3_OP_MOE_ALIGN, K3_OP_MOE_GATE_UP, K3_OP_MOE_ACT, K3_OP_MOE_DOWN,
    K3_OP_MOE_COMBINE, K3_OP_MOE_ALLREDUCE,
    /* fused path ("latency_specialized") */
    K3_OP_F_KDA_IN_PROJ, K3_OP_F_KDA_CONV_GATE,
    K3_OP_F_MLA_IN_PROJ, K3_OP_F_MLA_Q_B_PROJ_ROPE, K3_OP_F_MLA_ATTENTION,
    K3_OP_F_MLA_V_UP_GATE, K3_OP_F_O_PROJ_AR_RESIDUAL, K3_OP_F_ROUTER_GEMM,
    K3_OP_F_SHARED_GATE_UP_ACT, K3_OP_F_SHARED_DOWN, K3_OP_F_MOE_LATENT_DOWN,
    K3_OP_F_MOE_GATE_UP_ACT, K3_OP_F_MOE_DOWN, K3_OP_F_MOE_COMBINE_AR_RESIDUAL,
    K3_OP_COUNT
};

#define K3_SMALL_BATCH 16 /* the fused path's small-batch projection variant */

struct k3_op {
    enum k3_op_id id;
    const char *name;       /* kernel name (the calibration contract) */
    const char *name_large; /* name above K3_SMALL_BATCH, if it differs */
    int side_stream;        /* 1: runs on the side stream, overlapped */
    int comm;               /* 1: a tensor-parallel reduction (local on one GPU) */
    void (*cpu)(struct k3_layer *L);
    enum k3_tid out[4];     /* tensors it writes (K3_T_COUNT: none), the
                               routed accumulator that some clear aside */
};

/* The kernel name of an operation at a batch size. */
const char *k3_op_name(const struct k3_op *op, int batch);

/* The kernel sequence of a path and layer kind; returns its length. */
int k3_path_ops(enum k3_path p, enum k3_kind k, const struct k3_op **ops);
const struct k3_op *k3_op_by_id(enum k3_op_id id);
/* Runs a whole path on the CPU: reads IO_R_IN, IO_D_IN and the state;
 * writes the state, scratch, IO_R_OUT and (standard path) IO_D_OUT. The
 * fused path adds the MoE output to the residual in its last kernel, so
 * its IO_R_OUT is the standard path's bf16(IO_R_OUT + IO_D_OUT) and it
 * leaves IO_D_OUT alone. */
void k3_layer_run_cpu(struct k3_layer *L, enum k3_path p);

/* Bytes an operation must move at least (weights actually read, given
 * the routing in A_IDS; activations; state; cache) and its FLOPs. */
void k3_op_cost(const struct k3_layer *L, enum k3_op_id id, double *bytes,
                double *flops);
/* The same from the shape alone: `experts` distinct routed experts read,
 * `ctx_tokens` cached positions attended over the batch (MLA). */
void k3_op_cost_shape(const struct k3_shape *s, enum k3_kind kind, int batch, double experts,
                      double ctx_tokens, enum k3_op_id id, double *bytes, double *flops);
/* Whether two routings choose the same experts for every token (in any
 * order): ids a, b: [B][k]. */
int k3_same_experts(int B, int k, const int32_t *a, const int32_t *b);

/* Expected distinct experts for `batch` tokens, uniform routing:
 * E (1 - (1 - k/E)^batch). */
double k3_experts_touched(const struct k3_shape *s, int batch);

#ifdef __cplusplus
}
#endif

#endif
