/* k3ref.h: plain C references (*_cpu) for every operation of one Kimi K3
 * decode layer at tensor-parallel shard shapes, the ground truth that the
 * CUDA kernels (kernels/k3_*.cu) are checked against and that the C versions
 * of both decode paths (k3layer.c) are built from.
 *
 * Conventions: B is the batch (sequences, one token each); activations
 * are row-major [B][width]; weights of a projection are row-major
 * [N outputs][K inputs] (each output row contiguous along K). BF16 values
 * are k3_bf16 bits (k3num.h), accumulation is in float, outputs stored in
 * BF16 are rounded once. No function allocates or fails: shapes are the
 * caller's contract (checked by k3_shape_verify in k3layer.h).
 */
#ifndef K3REF_H
#define K3REF_H

#include <stdint.h>

#include "kernels/k3num.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- generic pieces -------------------------------------------------- */

/* r[b] = bf16(r[b] + d[b]) when d != NULL; out[b] = bf16(rmsnorm(r[b]) * w).
 * r, d, out: [B][n] (out may not alias r). */
void k3_add_rmsnorm_cpu(int B, int n, k3_bf16 *r, const k3_bf16 *d,
                        const float *w, float eps, k3_bf16 *out);

/* RMSNorm of rows read at a stride: in[b*in_stride + i], i < n;
 * out[b*out_stride + i] = bf16(in * rsqrt(mean(in^2) + eps) * w[i]). */
void k3_rmsnorm_cpu(int B, int n, const k3_bf16 *in, int in_stride,
                    const float *w, float eps, k3_bf16 *out, int out_stride);

/* y[b][n] = sum_k x[b][k] * W[n][k] in float (x: [B][K], W: [N][K]). */
void k3_gemv_f32_cpu(int B, int N, int K, const k3_bf16 *x, const k3_bf16 *W,
                     float *y);
/* The same, stored as BF16; when acc != NULL, y = bf16(acc + W x) (acc and
 * y may alias). */
void k3_gemv_bf16_cpu(int B, int N, int K, const k3_bf16 *x, const k3_bf16 *W,
                      const k3_bf16 *acc, k3_bf16 *y);

/* Rows [n0, n1) of W applied to x rows read at ldx:
 *   y[b*ldy + n] = bf16((acc ? acc[b*ldy + n] : 0) + sum_k x[b*ldx + k] W[n][k]). */
void k3_gemv_rows_cpu(int B, int n0, int n1, int K, const k3_bf16 *x, int ldx,
                      const k3_bf16 *W, const k3_bf16 *acc, k3_bf16 *y, int ldy);
/* The same with a float input (x: [B][ldx]) and an optional BF16 addend
 * acc: [B][N]; y: [B][N]. */
void k3_gemv_xf32_cpu(int B, int N, int K, const float *x, int ldx,
                      const k3_bf16 *W, const k3_bf16 *acc, k3_bf16 *y);

/* ---- KDA (Kimi Delta Attention) -------------------------------------- */

/* Causal depthwise convolution of width `width` over C channels with the
 * per-sequence state of the last width-1 inputs, then SiLU.
 * in: [B][C] (the q|k|v projection), w: [C][width] (tap width-1 is the
 * newest input), state: [B][C][width-1] float (oldest first, updated),
 * out: [B][C]. */
void k3_kda_conv_cpu(int B, int C, int width, const k3_bf16 *in,
                     const float *w, float *state, k3_bf16 *out);

/* Gates from the gate projection gp: [B][gw] with gw = 2*H*d + H laid out
 * as a (decay logits, H*d) | b (beta logits, H) | o (output gate, H*d):
 *   g = lower * sigmoid(exp(A_log[h]) * (a + dt_bias))  (log decay, < 0)
 *   beta = sigmoid(b)
 * g: [B][H*d] float, beta: [B][H] float. */
void k3_kda_gates_cpu(int B, int H, int d, const k3_bf16 *gp,
                      const float *A_log, const float *dt_bias, float lower,
                      float *g, float *beta);

/* Gated delta rule, one step per sequence and head (state S [d_k][d_v]):
 *   q, k L2-normalized per head, q scaled by 1/sqrt(d);
 *   S = diag(exp(g)) S;  u = v - S^T k;  S = S + beta k u^T;  o = S^T q.
 * qkv: [B][3*H*d] (q | k | v after the convolution), S: [B][H][d][d]
 * float (updated), o: [B][H*d]. */
void k3_kda_recurrent_cpu(int B, int H, int d, const k3_bf16 *qkv,
                          const float *g, const float *beta, float *S,
                          k3_bf16 *o);

/* Output: per-head RMSNorm of o (weight w: [d]) times sigmoid of the
 * output gate; gate rows are read at gstride (the caller passes the gate
 * projection at its output-gate column, gp + H*d + H, with gstride gw). */
void k3_kda_out_norm_cpu(int B, int H, int d, const k3_bf16 *o,
                         const k3_bf16 *gate, int gstride, const float *w,
                         float eps, k3_bf16 *out);

/* ---- MLA (multi-head latent attention, absorbed decode form) --------- */

/* Normalizes the new latent row (the first kv_lora values; the rope part
 * is copied as is, no rotation: NoPE) and stores it as FP8 E4M3 at
 * position pos[b] of the cache. a: rows of the a-projection at a_stride,
 * the kv part starting at column kv_off; cache: [B][ctx_max][kv+rope]. */
void k3_mla_kv_cache_cpu(int B, int kv, int rope, const k3_bf16 *a,
                         int a_stride, int kv_off, const float *w, float eps,
                         uint8_t *cache, int ctx_max, const int32_t *pos);

/* Absorbs W_uk into the query: q_lat[b][h][c] = sum_i W_uk[h][c][i] *
 * q_nope[b][h][i], with q_nope at qb[b][h*(nope+rope) + i].
 * W_uk: [H][kv][nope]; q_lat: [B][H][kv]. */
void k3_mla_absorb_cpu(int B, int H, int nope, int rope, int kv,
                       const k3_bf16 *qb, const k3_bf16 *W_uk, k3_bf16 *q_lat);

/* Decode attention over positions 0..pos[b] (inclusive) of the FP8 latent
 * cache: score = (q_lat . c + q_rope . r) * scale, softmax, o_lat =
 * sum p c. q_rope at qb[b][h*(nope+rope) + nope + j]. o_lat: [B][H][kv]. */
void k3_mla_attn_cpu(int B, int H, int nope, int rope, int kv,
                     const k3_bf16 *q_lat, const k3_bf16 *qb,
                     const uint8_t *cache, int ctx_max, const int32_t *pos,
                     float scale, k3_bf16 *o_lat);

/* Value up-projection and output gate: o[b][h*v + j] = bf16(sigmoid(gate)
 * * sum_c W_uv[h][j][c] o_lat[b][h][c]); gate rows at gstride, or no gate
 * when gate == NULL. W_uv: [H][v][kv]. */
void k3_mla_vup_cpu(int B, int H, int kv, int v, const k3_bf16 *o_lat,
                    const k3_bf16 *W_uv, const k3_bf16 *gate, int gstride,
                    k3_bf16 *o);

/* ---- MoE ------------------------------------------------------------- */

/* Sigmoid router: s = sigmoid(logit); choose the k largest s + bias (ties
 * to the lower index); weights = s / sum(s over chosen) * scale.
 * logits: [B][E]; ids: [B][k] (descending by s + bias); wts: [B][k]. */
void k3_router_topk_cpu(int B, int E, int k, const float *logits,
                        const float *bias, float scale, int32_t *ids,
                        float *wts);

/* out[r][j] = bf16(situ(gu[r][j], gu[r][N + j])) for R rows of [2N]. */
void k3_situ_cpu(int R, int N, const k3_bf16 *gu, float beta, float beta_lin,
                 k3_bf16 *out);

/* Routed-expert GEMV with MXFP4 weights. For each b and slot s < k,
 * expert e = ids[b][s]:
 *   y[b][s][n] = sum_j x_row[j] * W_e[n][j]
 * with x_row = x[b] when x_per_slot == 0 (x: [B][K]) or x[b][s]
 * (x: [B][k][K]). W: packed [E][N][K/2] bytes, low nibble first;
 * scales: [E][N][K/32]. y: [B][k][N] float. */
void k3_moe_gemv_mxfp4_f32_cpu(int B, int k, int N, int K, const k3_bf16 *x,
                               int x_per_slot, const int32_t *ids,
                               const uint8_t *W, const uint8_t *scales,
                               float *y);

/* One MXFP4 row (K values, K/32 scales) times a BF16 vector, in double. */
double k3_mxfp4_dot_cpu(const k3_bf16 *x, const uint8_t *w, const uint8_t *sc, int K);

/* Groups the B*k (token, slot) pairs by expert for the grouped expert
 * kernels: align[0] = n active experts; align[1 + j] = j-th active expert
 * (ascending); align[P + 2 + j] = offset of its pairs (P + 1 entries);
 * align[2P + 3 + i] = pairs b*k + s, by expert then by pair index. */
void k3_moe_align_cpu(int B, int k, int E, const int32_t *ids, int32_t *align);

/* Normalized mean squared error sum (a-b)^2 / sum b^2 (b the reference);
 * NaN anywhere gives +inf. */
double k3_nmse_f32(const float *a, const float *b, size_t n);
double k3_nmse_bf16(const k3_bf16 *a, const k3_bf16 *b, size_t n);

#ifdef __cplusplus
}
#endif

#endif
