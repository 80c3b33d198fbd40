/* k3_kernels.cu: CUDA kernels of the Kimi K3 decode layer, standard and
 * fused, one launcher per operation id (k3_gpu.cuh). Every kernel has its
 * C reference in k3layer.c / k3ref.c, which `agentreplay kernels check`
 * compares it with.
 *
 * Version 1 of each kernel (llm.c's numbering habit: later versions go
 * beside it, and only the one that wins stays in the path):
 * - projections: one generic BF16 GEMV (a warp per output row, 16-byte
 *   loads with 4 in flight per lane, a batch tile of up to 8 sequences in
 *   registers) with input modes (BF16, float, residual add + RMSNorm
 *   computed in the same pass) and epilogues (store, add, residual, gate,
 *   SiTU of a row pair);
 * - routed experts: one grouped MXFP4 GEMV (a block per active expert and
 *   row tile; each lane decodes one 32-value group with its E8M0 scale per
 *   16-byte load, the next group's load in flight; sub-warps of S lanes
 *   per row when K is short);
 * - KDA recurrence: a block per (sequence, head), a thread per value
 *   column of the 128 x 128 FP32 state;
 * - MLA decode attention: blocks per (head, context split, sequence),
 *   warps over cached positions with an online softmax, 16-byte row loads
 *   decoded through a shared FP8 table, splits combined by the last block.
 */
#include <math.h>
#include <stdint.h>

#include "kernels/k3_gpu.cuh"

#define WARP 32
#define GEMV_WARPS 8
#define FULL 0xffffffffu

/* ---- small device helpers ------------------------------------------- */

__device__ __forceinline__ void load8_bf16(const k3_bf16 *p, float *v)
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void store8_bf16(k3_bf16 *p, const float *v)
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)k3_f32_to_bf16(v[2 * i]) | ((uint32_t)k3_f32_to_bf16(v[2 * i + 1]) << 16);
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. red: 32 floats of shared memory. */
__device__ float block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    float t = 0;
    for (int i = 0; i < nw; i++)
        t += red[i];
    return t;
}

__device__ __forceinline__ float bfv(k3_bf16 h) { return k3_bf16_to_f32(h); }

/* ---- generic BF16 GEMV ---------------------------------------------- */

enum { IN_BF16, IN_F32, IN_NORM };
enum { OUT_BF16, OUT_F32, OUT_ADD, OUT_RESID, OUT_GATE, OUT_SITU };

struct GemvArgs {
    int B, K;
    const k3_bf16 *W; int N; void *y; int ldy;     /* rows 0..N of W -> y */
    const k3_bf16 *W2; int N2; void *y2; int ldy2; /* rows N..N+N2 -> y2 */
    int in_mode;
    const void *x; int ldx;   /* input rows */
    const k3_bf16 *d;         /* IN_NORM: added to x first (same ldx) */
    const float *gamma;       /* IN_NORM: norm weight */
    float eps;
    k3_bf16 *r_out; int ldr;  /* IN_NORM with d: where x + d is stored */
    int out_mode;
    const k3_bf16 *acc; int ldacc; /* OUT_ADD / OUT_RESID addend */
    k3_bf16 *aux; int ldaux;       /* OUT_GATE: the gate values */
    int pair_off; float beta, beta_lin; /* OUT_SITU: up row = gate row + pair_off */
    /* extra blocks writing the MLA cache (fused q_b projection) */
    int cache_blocks;
    const k3_bf16 *kv_src; int kv_ld; const float *kv_gamma; int kv, rope;
    uint8_t *cache; int ctx_max; const int32_t *pos;
};

__device__ void mla_cache_block(const GemvArgs &a, int b)
{
    __shared__ float red[32];
    const k3_bf16 *x = a.kv_src + (size_t)b * a.kv_ld;
    float ss = 0;
    for (int i = threadIdx.x; i < a.kv; i += blockDim.x)
        ss += bfv(x[i]) * bfv(x[i]);
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / a.kv + a.eps);
    uint8_t *row = a.cache + ((size_t)b * a.ctx_max + a.pos[b]) * (a.kv + a.rope);
    for (int i = threadIdx.x; i < a.kv + a.rope; i += blockDim.x)
        row[i] = i < a.kv ? k3_f32_to_fp8(bfv(x[i]) * inv * a.kv_gamma[i]) : k3_f32_to_fp8(bfv(x[i]));
}

template <int BT, int NR>
__global__ void __launch_bounds__(256) gemv_kernel(GemvArgs a)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int rows = a.N + a.N2, gblocks = (rows + GEMV_WARPS - 1) / GEMV_WARPS;
    if ((int)blockIdx.x >= gblocks) {
        mla_cache_block(a, blockIdx.x - gblocks);
        return;
    }
    int n = blockIdx.x * GEMV_WARPS + warp;
    if (n >= rows)
        return;
    bool write_r = a.in_mode == IN_NORM && a.r_out && a.d && blockIdx.x == 0 && warp == 0;
    const k3_bf16 *w0;
    void *y;
    int ldy, col;
    if (n < a.N) {
        w0 = a.W + (size_t)n * a.K;
        y = a.y;
        ldy = a.ldy;
        col = n;
    } else {
        w0 = a.W2 + (size_t)(n - a.N) * a.K;
        y = a.y2;
        ldy = a.ldy2;
        col = n - a.N;
    }
    const k3_bf16 *w1 = w0 + (size_t)a.pair_off * a.K;
    for (int b0 = 0; b0 < a.B; b0 += BT) {
        float acc0[BT], acc1[BT], ss[BT];
#pragma unroll
        for (int t = 0; t < BT; t++)
            acc0[t] = acc1[t] = ss[t] = 0.0f;
        /* U weight loads in flight per lane before their first use */
        constexpr int U = NR == 1 ? 4 : 2;
        for (int k0 = lane * 8; k0 < a.K; k0 += WARP * 8 * U) {
            float wv0[U][8], wv1[U][8];
#pragma unroll
            for (int u = 0; u < U; u++) {
                int k = k0 + u * WARP * 8;
                if (k < a.K) {
                    load8_bf16(w0 + k, wv0[u]);
                    if (NR == 2)
                        load8_bf16(w1 + k, wv1[u]);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                int k = k0 + u * WARP * 8;
                if (k >= a.K)
                    continue;
#pragma unroll
                for (int t = 0; t < BT; t++) {
                    int b = b0 + t;
                    if (b >= a.B)
                        continue;
                    float xv[8];
                    if (a.in_mode == IN_F32) {
                        const float *xf = (const float *)a.x + (size_t)b * a.ldx + k;
                        float4 p = *reinterpret_cast<const float4 *>(xf);
                        float4 q = *reinterpret_cast<const float4 *>(xf + 4);
                        xv[0] = p.x; xv[1] = p.y; xv[2] = p.z; xv[3] = p.w;
                        xv[4] = q.x; xv[5] = q.y; xv[6] = q.z; xv[7] = q.w;
                    } else {
                        load8_bf16((const k3_bf16 *)a.x + (size_t)b * a.ldx + k, xv);
                        if (a.in_mode == IN_NORM) {
                            if (a.d) {
                                float dv[8];
                                load8_bf16(a.d + (size_t)b * a.ldx + k, dv);
#pragma unroll
                                for (int i = 0; i < 8; i++)
                                    xv[i] = k3_round_bf16(xv[i] + dv[i]);
                                if (write_r)
                                    store8_bf16(a.r_out + (size_t)b * a.ldr + k, xv);
                            }
#pragma unroll
                            for (int i = 0; i < 8; i++) {
                                ss[t] += xv[i] * xv[i];
                                xv[i] *= a.gamma[k + i];
                            }
                        }
                    }
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        acc0[t] += wv0[u][i] * xv[i];
                        if (NR == 2)
                            acc1[t] += wv1[u][i] * xv[i];
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < BT; t++) {
            acc0[t] = warp_sum(acc0[t]);
            if (NR == 2)
                acc1[t] = warp_sum(acc1[t]);
            if (a.in_mode == IN_NORM)
                ss[t] = warp_sum(ss[t]);
        }
        if (lane != 0)
            continue;
#pragma unroll
        for (int t = 0; t < BT; t++) {
            int b = b0 + t;
            if (b >= a.B)
                continue;
            float v0 = acc0[t], v1 = acc1[t];
            if (a.in_mode == IN_NORM) {
                float inv = 1.0f / sqrtf(ss[t] / a.K + a.eps);
                v0 *= inv;
                v1 *= inv;
            }
            size_t at = (size_t)b * ldy + col;
            k3_bf16 *yb = (k3_bf16 *)y;
            switch (a.out_mode) {
            case OUT_F32: ((float *)y)[at] = v0; break;
            case OUT_ADD: yb[at] = k3_f32_to_bf16(bfv(a.acc[(size_t)b * a.ldacc + col]) + v0); break;
            case OUT_RESID: {
                float s = v0 + (a.acc ? bfv(a.acc[(size_t)b * a.ldacc + col]) : 0.0f);
                yb[at] = k3_f32_to_bf16(bfv(yb[at]) + k3_round_bf16(s));
                break;
            }
            case OUT_GATE: {
                k3_bf16 g = k3_f32_to_bf16(v0);
                a.aux[(size_t)b * a.ldaux + col] = g;
                yb[at] = k3_f32_to_bf16(bfv(yb[at]) * k3_sigmoid(bfv(g)));
                break;
            }
            case OUT_SITU: yb[at] = k3_f32_to_bf16(k3_situ(v0, v1, a.beta, a.beta_lin)); break;
            default: yb[at] = k3_f32_to_bf16(v0); break;
            }
        }
    }
}

static GemvArgs gemv_args(int B, int K, const void *W, int N, void *y, int ldy)
{
    GemvArgs a;
    memset(&a, 0, sizeof a);
    a.B = B;
    a.K = K;
    a.W = (const k3_bf16 *)W;
    a.N = N;
    a.y = y;
    a.ldy = ldy;
    a.in_mode = IN_BF16;
    a.out_mode = OUT_BF16;
    return a;
}

static void gemv_launch(const GemvArgs &a, cudaStream_t s)
{
    int blocks = (a.N + a.N2 + GEMV_WARPS - 1) / GEMV_WARPS + a.cache_blocks;
    bool pair = a.out_mode == OUT_SITU;
    dim3 g(blocks), t(GEMV_WARPS * WARP);
#define GL(BT)                                                                 \
    do {                                                                       \
        if (pair)                                                              \
            gemv_kernel<BT, 2><<<g, t, 0, s>>>(a);                             \
        else                                                                   \
            gemv_kernel<BT, 1><<<g, t, 0, s>>>(a);                             \
    } while (0)
    if (a.B == 1)
        GL(1);
    else if (a.B == 2)
        GL(2);
    else if (a.B <= 4)
        GL(4);
    else
        GL(8);
#undef GL
    cudaCheck(cudaGetLastError());
}

/* ---- norms ----------------------------------------------------------- */

/* r_out = bf16(r_in + d) (d may be NULL); out = bf16(rmsnorm(r_out) * w).
 * One block per sequence; r_in may equal r_out. */
__global__ void add_rmsnorm_kernel(int n, const k3_bf16 *r_in, const k3_bf16 *d,
                                   k3_bf16 *r_out, const float *w, float eps, k3_bf16 *out)
{
    __shared__ float red[32];
    size_t base = (size_t)blockIdx.x * n;
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = bfv(r_in[base + i]);
        if (d)
            v = k3_round_bf16(v + bfv(d[base + i]));
        r_out[base + i] = k3_f32_to_bf16(v);
        ss += v * v;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[base + i] = k3_f32_to_bf16(bfv(r_out[base + i]) * inv * w[i]);
}

/* Row RMSNorm with strides; columns [n, n + copy) are copied unchanged. */
__device__ void rmsnorm_row(const k3_bf16 *x, int n, int copy, const float *w, float eps,
                            k3_bf16 *out, float *red)
{
    float ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += bfv(x[i]) * bfv(x[i]);
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / n + eps);
    for (int i = threadIdx.x; i < n + copy; i += blockDim.x)
        out[i] = i < n ? k3_f32_to_bf16(bfv(x[i]) * inv * w[i]) : x[i];
}

/* MLA: q part and kv part of the a-projection normalized (grid B x 2). */
__global__ void mla_qkv_a_norm_kernel(const k3_bf16 *ma, int aw, int q_lora, int kv, int rope,
                                      const float *wq, const float *wkv, float eps,
                                      k3_bf16 *qan, k3_bf16 *kvn)
{
    __shared__ float red[32];
    int b = blockIdx.x;
    if (blockIdx.y == 0)
        rmsnorm_row(ma + (size_t)b * aw, q_lora, 0, wq, eps, qan + (size_t)b * q_lora, red);
    else
        rmsnorm_row(ma + (size_t)b * aw + q_lora, kv, rope, wkv, eps,
                    kvn + (size_t)b * (kv + rope), red);
}

/* ---- KDA ------------------------------------------------------------- */

__device__ __forceinline__ void kda_conv_one(int b, int c, int C, int width, const k3_bf16 *in,
                                             const float *w, float *state, k3_bf16 *out)
{
    int hist = width - 1;
    float *st = state + ((size_t)b * C + c) * hist;
    const float *wc = w + (size_t)c * width;
    float x = bfv(in[(size_t)b * C + c]);
    float acc = wc[hist] * x;
    for (int t = 0; t < hist; t++)
        acc += wc[t] * st[t];
    for (int t = 0; t + 1 < hist; t++)
        st[t] = st[t + 1];
    st[hist - 1] = x;
    out[(size_t)b * C + c] = k3_f32_to_bf16(acc * k3_sigmoid(acc));
}

__device__ __forceinline__ void kda_gate_one(int b, int c, int H, int d, const k3_bf16 *gp,
                                             const float *A_log, const float *dtb, float lower,
                                             float *g, float *beta)
{
    int hd = H * d, gw = 2 * hd + H;
    const k3_bf16 *row = gp + (size_t)b * gw;
    if (c < hd)
        g[(size_t)b * hd + c] = lower * k3_sigmoid(expf(A_log[c / d]) * (bfv(row[c]) + dtb[c]));
    else
        beta[(size_t)b * H + (c - hd)] = k3_sigmoid(bfv(row[c]));
}

__global__ void kda_short_conv_kernel(int B, int C, int width, const k3_bf16 *in,
                                      const float *w, float *state, k3_bf16 *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * C)
        kda_conv_one(i / C, i % C, C, width, in, w, state, out);
}

__global__ void kda_gate_act_kernel(int B, int H, int d, const k3_bf16 *gp, const float *A_log,
                                    const float *dtb, float lower, float *g, float *beta)
{
    int n = H * d + H, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * n)
        kda_gate_one(i / n, i % n, H, d, gp, A_log, dtb, lower, g, beta);
}

/* Fused: convolution + SiLU for q|k|v and the decay/beta activations. */
__global__ void kda_conv_gate_kernel(int B, int H, int d, int width, const k3_bf16 *qkv,
                                     const float *w, float *state, k3_bf16 *out,
                                     const k3_bf16 *gp, const float *A_log, const float *dtb,
                                     float lower, float *g, float *beta)
{
    int C = 3 * H * d, n = C + H * d + H, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * n)
        return;
    int b = i / n, c = i % n;
    if (c < C)
        kda_conv_one(b, c, C, width, qkv, w, state, out);
    else
        kda_gate_one(b, c - C, H, d, gp, A_log, dtb, lower, g, beta);
}

/* Gated delta rule: block per (sequence, head), thread j owns column j of
 * the state (coalesced rows). */
__global__ void kda_recurrent_kernel(int H, int d, const k3_bf16 *qkv, const float *g,
                                     const float *beta, float *S, k3_bf16 *o)
{
    __shared__ float q[128], k[128], a[128], red[32];
    int b = blockIdx.x / H, h = blockIdx.x % H, j = threadIdx.x, hd = H * d;
    const k3_bf16 *row = qkv + (size_t)b * 3 * hd;
    float qj = bfv(row[h * d + j]), kj = bfv(row[hd + h * d + j]);
    float qs = block_sum(qj * qj, red);
    float ks = block_sum(kj * kj, red);
    q[j] = qj / sqrtf(qs + 1e-6f) / sqrtf((float)d);
    k[j] = kj / sqrtf(ks + 1e-6f);
    a[j] = expf(g[(size_t)b * hd + h * d + j]);
    __syncthreads();
    float *Sh = S + ((size_t)b * H + h) * d * d;
    float bt = beta[(size_t)b * H + h], acc = 0;
    for (int i = 0; i < d; i++)
        acc += a[i] * Sh[i * d + j] * k[i];
    float u = bfv(row[2 * hd + h * d + j]) - acc, out = 0;
    for (int i = 0; i < d; i++) {
        float s = a[i] * Sh[i * d + j] + bt * k[i] * u;
        Sh[i * d + j] = s;
        out += s * q[i];
    }
    o[(size_t)b * hd + h * d + j] = k3_f32_to_bf16(out);
}

__global__ void kda_out_norm_gate_kernel(int H, int d, const k3_bf16 *o, const k3_bf16 *gate,
                                         int gstride, const float *w, float eps, k3_bf16 *out)
{
    __shared__ float red[32];
    int b = blockIdx.x / H, h = blockIdx.x % H, j = threadIdx.x, hd = H * d;
    float x = bfv(o[(size_t)b * hd + h * d + j]);
    float ss = block_sum(x * x, red);
    float inv = 1.0f / sqrtf(ss / d + eps);
    float gt = bfv(gate[(size_t)b * gstride + h * d + j]);
    out[(size_t)b * hd + h * d + j] = k3_f32_to_bf16(x * inv * w[j] * k3_sigmoid(gt));
}

/* ---- MLA ------------------------------------------------------------- */

__global__ void mla_rope_cache_write_kernel(int B, int kvw, const k3_bf16 *kvn, uint8_t *cache,
                                            int ctx_max, const int32_t *pos)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * kvw)
        return;
    int b = i / kvw, c = i % kvw;
    cache[((size_t)b * ctx_max + pos[b]) * kvw + c] = k3_f32_to_fp8(bfv(kvn[i]));
}

/* Per-head GEMV: block per (sequence, head); x (K values at
 * src + (b*H + h)*ld_src) in shared memory, a warp per output row:
 *   out[(b*H + h)*R + r] = bf16(gate? sigmoid(gate) : 1) * sum_i W[h][r][i] x[i]). */
__global__ void head_gemv_kernel(int H, int R, int K, const k3_bf16 *src, int ld_src,
                                 const k3_bf16 *W, const k3_bf16 *gate, int gstride,
                                 k3_bf16 *out)
{
    __shared__ float x[1024];
    int b = blockIdx.x / H, h = blockIdx.x % H;
    const k3_bf16 *xs = src + ((size_t)b * H + h) * ld_src;
    for (int i = threadIdx.x; i < K; i += blockDim.x)
        x[i] = bfv(xs[i]);
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int r = warp; r < R; r += nw) {
        const k3_bf16 *w = W + ((size_t)h * R + r) * K;
        float s = 0;
        for (int i = lane; i < K; i += WARP)
            s += bfv(w[i]) * x[i];
        s = warp_sum(s);
        if (lane == 0) {
            float gs = gate ? k3_sigmoid(bfv(gate[(size_t)b * gstride + h * R + r])) : 1.0f;
            out[((size_t)b * H + h) * R + r] = k3_f32_to_bf16(s * gs);
        }
    }
}

#define ATT_WARPS 8
#define ATT_MAXC 32 /* kv_lora / 32 values per lane, kv_lora <= 1024 */

/* Context splits per (sequence, head): enough blocks to fill the GPU at
 * small batch (about 512 blocks), at least 64 positions each. */
static int att_splits(int B, int H, int ctx_max)
{
    int s = 512 / (B * H);
    int most = (ctx_max + 63) / 64;
    if (s > most)
        s = most;
    if (s > 64)
        s = 64;
    if (s < 1)
        s = 1;
    while (s > 1 && (long)B * H * s > (B * H > 4096 ? B * H : 4096))
        s--;
    return s;
}

/* Decode attention over the FP8 latent cache. Block (head, split,
 * sequence): heads vary fastest, so the blocks reading one stretch of a
 * sequence's cache run together and share it through L2. Each warp takes
 * every 8th position of the split with an online softmax; each lane holds
 * kv/32 consecutive latent values (one 16-byte load at kv = 512). With
 * W_uk given (fused path) the absorbed query is computed in the prologue
 * and kept in float; otherwise it is read from q_lat. With several splits
 * each block leaves (max, sum, numerators) in `part` and the last block
 * of a (sequence, head) to finish, counted in `cnt`, combines them and
 * resets the count. */
__global__ void __launch_bounds__(ATT_WARPS * WARP)
mla_attention_kernel(int H, int nope, int rope, int kv, const k3_bf16 *q_lat,
                     const k3_bf16 *qb, const k3_bf16 *W_uk, const uint8_t *cache,
                     int ctx_max, const int32_t *pos, float scale, int splits, float *part,
                     int *cnt, k3_bf16 *o_lat)
{
    __shared__ float ql[1024], qr[256], sm[ATT_WARPS], sl[ATT_WARPS], lut[256];
    __shared__ float sacc[ATT_WARPS][512];
    __shared__ int last;
    lut[threadIdx.x] = k3_fp8_to_f32((uint8_t)threadIdx.x); /* blockDim = 256 */
    int h = blockIdx.x, split = blockIdx.y, b = blockIdx.z, qw = nope + rope;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row_w = kv + rope, per = kv / WARP;
    const k3_bf16 *qh = qb + ((size_t)b * H + h) * qw;
    if (W_uk) {
        for (int c = warp; c < kv; c += ATT_WARPS) {
            const k3_bf16 *w = W_uk + ((size_t)h * kv + c) * nope;
            float s = 0;
            for (int i = lane; i < nope; i += WARP)
                s += bfv(w[i]) * bfv(qh[i]);
            s = warp_sum(s);
            if (lane == 0)
                ql[c] = s;
        }
    } else {
        for (int c = threadIdx.x; c < kv; c += blockDim.x)
            ql[c] = bfv(q_lat[((size_t)b * H + h) * kv + c]);
    }
    for (int j = threadIdx.x; j < rope; j += blockDim.x)
        qr[j] = bfv(qh[nope + j]);
    __syncthreads();
    int n = pos[b] + 1, chunk = (n + splits - 1) / splits;
    int t0 = split * chunk, t1 = min(n, t0 + chunk);
    float m = -INFINITY, l = 0, acc[ATT_MAXC];
#pragma unroll
    for (int i = 0; i < ATT_MAXC; i++)
        acc[i] = 0;
    for (int t = t0 + warp; t < t1; t += ATT_WARPS) {
        const uint8_t *row = cache + ((size_t)b * ctx_max + t) * row_w;
        float cv[ATT_MAXC];
        if (per == 16) {
            uint4 u = *reinterpret_cast<const uint4 *>(row + lane * 16);
            uint32_t w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int i = 0; i < 16; i++)
                cv[i] = lut[(w4[i / 4] >> (8 * (i % 4))) & 0xff];
        } else {
#pragma unroll
            for (int i = 0; i < ATT_MAXC; i++)
                cv[i] = i < per ? lut[row[lane * per + i]] : 0.0f;
        }
        float s = 0;
#pragma unroll
        for (int i = 0; i < ATT_MAXC; i++)
            if (i < per)
                s += ql[lane * per + i] * cv[i];
        for (int j = lane; j < rope; j += WARP)
            s += qr[j] * lut[row[kv + j]];
        s = warp_sum(s) * scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < ATT_MAXC; i++)
            if (i < per)
                acc[i] = acc[i] * corr + p * cv[i];
        m = mn;
    }
    /* merge the warps: numerators relative to the block's max */
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    __syncthreads();
    float M = -INFINITY, den = 0;
    for (int w = 0; w < ATT_WARPS; w++)
        M = fmaxf(M, sm[w]);
    for (int w = 0; w < ATT_WARPS; w++)
        if (sl[w] > 0)
            den += sl[w] * expf(sm[w] - M);
    float *pp = part + (((size_t)b * H + h) * splits + split) * (kv + 2);
    for (int c0 = 0; c0 < kv; c0 += 512) {
#pragma unroll
        for (int i = 0; i < ATT_MAXC; i++) {
            int c = lane * per + i;
            if (i < per && c >= c0 && c < c0 + 512)
                sacc[warp][c - c0] = l > 0 ? acc[i] * expf(m - M) : 0.0f;
        }
        __syncthreads();
        for (int c = c0 + threadIdx.x; c < kv && c < c0 + 512; c += blockDim.x) {
            float num = 0;
            for (int w = 0; w < ATT_WARPS; w++)
                num += sacc[w][c - c0];
            if (splits == 1)
                o_lat[((size_t)b * H + h) * kv + c] = k3_f32_to_bf16(num / den);
            else
                pp[c] = num;
        }
        __syncthreads();
    }
    if (splits == 1)
        return;
    if (threadIdx.x == 0) {
        pp[kv] = M;
        pp[kv + 1] = den;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&cnt[b * H + h], 1) == splits - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const float *p0 = part + ((size_t)b * H + h) * splits * (kv + 2);
    float MM = -INFINITY, dd = 0;
    for (int sp = 0; sp < splits; sp++)
        if (__ldcg(p0 + sp * (kv + 2) + kv + 1) > 0)
            MM = fmaxf(MM, __ldcg(p0 + sp * (kv + 2) + kv));
    for (int sp = 0; sp < splits; sp++) {
        float d = __ldcg(p0 + sp * (kv + 2) + kv + 1);
        if (d > 0)
            dd += d * expf(__ldcg(p0 + sp * (kv + 2) + kv) - MM);
    }
    for (int c = threadIdx.x; c < kv; c += blockDim.x) {
        float num = 0;
        for (int sp = 0; sp < splits; sp++) {
            const float *q = p0 + sp * (kv + 2);
            if (__ldcg(q + kv + 1) > 0)
                num += __ldcg(q + c) * expf(__ldcg(q + kv) - MM);
        }
        o_lat[((size_t)b * H + h) * kv + c] = k3_f32_to_bf16(num / dd);
    }
    if (threadIdx.x == 0)
        cnt[b * H + h] = 0;
}

/* ---- router ---------------------------------------------------------- */

/* Block per sequence: k rounds of a block-wide argmax of sigmoid + bias
 * (ties to the lower index), then renormalized weights. */
__global__ void router_topk_kernel(int E, int k, const float *logits, const float *bias,
                                   float scale, int32_t *ids, float *wts)
{
    __shared__ float key[4096];
    __shared__ float wv[ATT_WARPS * 4];
    __shared__ int wi[ATT_WARPS * 4];
    __shared__ float chosen[32];
    int b = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int nw = blockDim.x >> 5;
    const float *lg = logits + (size_t)b * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        key[e] = k3_sigmoid(lg[e]) + bias[e];
    __syncthreads();
    for (int s = 0; s < k; s++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            if (key[e] > bv || (key[e] == bv && e < bi)) {
                bv = key[e];
                bi = e;
            }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(FULL, bv, o);
            int oi = __shfl_xor_sync(FULL, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (lane == 0) {
            wv[warp] = bv;
            wi[warp] = bi;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float v = wv[0];
            int i = wi[0];
            for (int w = 1; w < nw; w++)
                if (wv[w] > v || (wv[w] == v && wi[w] < i)) {
                    v = wv[w];
                    i = wi[w];
                }
            ids[(size_t)b * k + s] = i;
            chosen[s] = k3_sigmoid(lg[i]);
            key[i] = -INFINITY;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float sum = 0;
        for (int s = 0; s < k; s++)
            sum += chosen[s];
        for (int s = 0; s < k; s++)
            wts[(size_t)b * k + s] = chosen[s] / sum * scale;
    }
}

/* ---- MoE ------------------------------------------------------------- */

__global__ void situ_kernel(int R, int N, const k3_bf16 *gu, float beta, float beta_lin,
                            k3_bf16 *out)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * N)
        return;
    size_t r = i / N, j = i % N;
    out[i] = k3_f32_to_bf16(
        k3_situ(bfv(gu[r * 2 * N + j]), bfv(gu[r * 2 * N + N + j]), beta, beta_lin));
}

/* Blocks 0..B-1: latent norm of one sequence; block B: the grouping of
 * (token, slot) pairs by expert (k3_moe_align_cpu's layout); every block
 * clears a share of the routed accumulator. */
__global__ void moe_align_kernel(int B, int k, int E, int Lt, const k3_bf16 *lat,
                                 const float *gamma, float eps, k3_bf16 *latn,
                                 const int32_t *ids, int32_t *align, float *racc)
{
    __shared__ int cnt[4096];
    __shared__ int part_pairs[256], part_act[256];
    __shared__ float red[32];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)B * Lt;
         i += (size_t)gridDim.x * blockDim.x)
        racc[i] = 0.0f;
    if ((int)blockIdx.x < B) {
        int b = blockIdx.x;
        rmsnorm_row(lat + (size_t)b * Lt, Lt, 0, gamma, eps, latn + (size_t)b * Lt, red);
        return;
    }
    int P = B * k, tid = threadIdx.x, nt = blockDim.x;
    int32_t *experts = align + 1, *offs = align + P + 2, *pairs = align + 2 * P + 3;
    for (int e = tid; e < E; e += nt)
        cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += nt)
        atomicAdd(&cnt[ids[p]], 1);
    __syncthreads();
    int chunk = (E + nt - 1) / nt, e0 = tid * chunk, e1 = min(E, e0 + chunk);
    int sp = 0, sa = 0;
    for (int e = e0; e < e1; e++) {
        sp += cnt[e];
        sa += cnt[e] > 0;
    }
    part_pairs[tid] = sp;
    part_act[tid] = sa;
    __syncthreads();
    if (tid == 0) {
        int ap = 0, aa = 0;
        for (int i = 0; i < nt; i++) {
            int p = part_pairs[i], a = part_act[i];
            part_pairs[i] = ap;
            part_act[i] = aa;
            ap += p;
            aa += a;
        }
        align[0] = aa;
        offs[aa] = ap;
    }
    __syncthreads();
    int at = part_pairs[tid], act = part_act[tid];
    for (int e = e0; e < e1; e++)
        if (cnt[e] > 0) {
            experts[act] = e;
            offs[act] = at;
            act++;
            int c = cnt[e];
            cnt[e] = at; /* now the expert's first slot */
            at += c;
        }
    __syncthreads();
    for (int p = tid; p < P; p += nt) {
        int e = ids[p], rank = 0;
        for (int q = 0; q < p; q++)
            rank += ids[q] == e;
        pairs[cnt[e] + rank] = p;
    }
}

enum { MOE_OUT_BF16, MOE_OUT_SITU, MOE_OUT_ATOMIC };

struct MoeArgs {
    int B, k, E, K;
    int rows;        /* output rows per expert computed (N) */
    int rows_w;      /* rows per expert in the weight tensor */
    const uint8_t *W, *S;
    const int32_t *align; /* grouped by moe_align, or NULL: group inline from ids */
    const int32_t *ids;
    const float *wts;
    const k3_bf16 *x; int x_per_pair; int ldx;
    const float *gamma; float eps; /* normalize x on the fly when set */
    int out_mode; void *y; int ldy; int pair_off; float beta, beta_lin;
    float *zero; size_t zero_n; /* cleared by the grid first (fused path) */
};

#define MOE_WARPS 8
#define MOE_CHUNK 8
#define MOE_MAXP 2048

__device__ __forceinline__ void decode_group(uint4 u, float scale, float *v)
{
    uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[i * 8 + j] = k3_e2m1_to_f32((q[i] >> (4 * j)) & 15u) * scale;
}

/* Grouped MXFP4 GEMV: block (j, row tile) serves the j-th active expert
 * for every pair routed to it; S lanes per row (S = groups per row,
 * rounded down to a power of two, at most 32). */
template <int NR>
__global__ void __launch_bounds__(MOE_WARPS * WARP) moe_gemv_kernel(MoeArgs a)
{
    __shared__ int s_pairs[MOE_MAXP];
    __shared__ unsigned s_bits[128];
    __shared__ int s_e, s_np;
    int P = a.B * a.k, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (a.zero) {
        size_t nb = (size_t)gridDim.x * gridDim.y, bid = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
        for (size_t i = bid * blockDim.x + tid; i < a.zero_n; i += nb * blockDim.x)
            a.zero[i] = 0.0f;
    }
    if (a.align) {
        if (tid == 0) {
            int n = a.align[0], j = blockIdx.x;
            s_e = j < n ? a.align[1 + j] : -1;
            s_np = j < n ? a.align[P + 3 + j] - a.align[P + 2 + j] : 0;
        }
        __syncthreads();
        if (s_e < 0)
            return;
        int start = a.align[P + 2 + blockIdx.x];
        for (int i = tid; i < s_np; i += blockDim.x)
            s_pairs[i] = a.align[2 * P + 3 + start + i];
    } else {
        for (int i = tid; i < 128; i += blockDim.x)
            s_bits[i] = 0;
        __syncthreads();
        for (int p = tid; p < P; p += blockDim.x)
            atomicOr(&s_bits[a.ids[p] >> 5], 1u << (a.ids[p] & 31));
        __syncthreads();
        if (tid == 0) {
            int j = blockIdx.x, e = -1;
            for (int wd = 0; wd < (a.E + 31) / 32 && e < 0; wd++) {
                int c = __popc(s_bits[wd]);
                if (j < c) {
                    unsigned bits = s_bits[wd];
                    for (int i = 0; i < j; i++)
                        bits &= bits - 1;
                    e = wd * 32 + __ffs(bits) - 1;
                } else {
                    j -= c;
                }
            }
            s_e = e;
        }
        __syncthreads();
        if (s_e < 0)
            return;
        if (warp == 0) {
            int n = 0;
            for (int base = 0; base < P; base += WARP) {
                int p = base + lane;
                bool hit = p < P && a.ids[p] == s_e;
                unsigned m = __ballot_sync(FULL, hit);
                if (hit)
                    s_pairs[n + __popc(m & ((1u << lane) - 1))] = p;
                n += __popc(m);
            }
            if (lane == 0)
                s_np = n;
        }
    }
    __syncthreads();
    int G = a.K / K3_MX_GROUP, S = 1;
    while (S * 2 <= G && S < WARP)
        S *= 2;
    int rpw = WARP / S, sub = lane % S;
    int r = (blockIdx.y * MOE_WARPS + warp) * rpw + lane / S;
    bool valid = r < a.rows;
    int rr = valid ? r : 0, e = s_e;
    constexpr bool pair = NR == 2; /* gate and up rows for SiTU */
    size_t row0 = (size_t)e * a.rows_w + rr, row1 = row0 + a.pair_off;
    for (int c0 = 0; c0 < s_np; c0 += MOE_CHUNK) {
        float acc0[MOE_CHUNK], acc1[MOE_CHUNK], ss[MOE_CHUNK];
#pragma unroll
        for (int i = 0; i < MOE_CHUNK; i++)
            acc0[i] = acc1[i] = ss[i] = 0;
        /* software pipeline: the next group's 16 bytes and scale are in
         * flight while this group is decoded and used */
        const uint4 *wr0 = reinterpret_cast<const uint4 *>(a.W + row0 * (a.K / 2));
        const uint4 *wr1 = reinterpret_cast<const uint4 *>(a.W + row1 * (a.K / 2));
        const uint8_t *sr0 = a.S + row0 * G, *sr1 = a.S + row1 * G;
        uint4 n0 = make_uint4(0, 0, 0, 0), n1 = n0;
        uint8_t ns0 = 127, ns1 = 127;
        if (sub < G) {
            n0 = wr0[sub];
            ns0 = sr0[sub];
            if (pair) {
                n1 = wr1[sub];
                ns1 = sr1[sub];
            }
        }
        for (int g = sub; g < G; g += S) {
            uint4 c0w = n0, c1w = n1;
            uint8_t cs0 = ns0, cs1 = ns1;
            if (g + S < G) {
                n0 = wr0[g + S];
                ns0 = sr0[g + S];
                if (pair) {
                    n1 = wr1[g + S];
                    ns1 = sr1[g + S];
                }
            }
            float w0[32], w1[32];
            decode_group(c0w, k3_e8m0_to_f32(cs0), w0);
            if (pair)
                decode_group(c1w, k3_e8m0_to_f32(cs1), w1);
#pragma unroll
            for (int i = 0; i < MOE_CHUNK; i++) {
                if (c0 + i >= s_np)
                    continue;
                int p = s_pairs[c0 + i], xb = a.x_per_pair ? p : p / a.k;
                const k3_bf16 *xr = a.x + (size_t)xb * a.ldx + g * K3_MX_GROUP;
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float xv[8];
                    load8_bf16(xr + q * 8, xv);
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        float x = xv[j];
                        if (a.gamma) {
                            ss[i] += x * x;
                            x *= a.gamma[g * K3_MX_GROUP + q * 8 + j];
                        }
                        acc0[i] += w0[q * 8 + j] * x;
                        if (pair)
                            acc1[i] += w1[q * 8 + j] * x;
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < MOE_CHUNK; i++)
            for (int o = S / 2; o > 0; o >>= 1) {
                acc0[i] += __shfl_xor_sync(FULL, acc0[i], o);
                acc1[i] += __shfl_xor_sync(FULL, acc1[i], o);
                ss[i] += __shfl_xor_sync(FULL, ss[i], o);
            }
        if (!valid || sub != 0)
            continue;
#pragma unroll
        for (int i = 0; i < MOE_CHUNK; i++) {
            if (c0 + i >= s_np)
                continue;
            int p = s_pairs[c0 + i];
            float v0 = acc0[i], v1 = acc1[i];
            if (a.gamma) {
                float inv = 1.0f / sqrtf(ss[i] / a.K + a.eps);
                v0 *= inv;
                v1 *= inv;
            }
            if (a.out_mode == MOE_OUT_ATOMIC)
                atomicAdd((float *)a.y + (size_t)(p / a.k) * a.ldy + r, a.wts[p] * v0);
            else if (pair)
                ((k3_bf16 *)a.y)[(size_t)p * a.ldy + r] =
                    k3_f32_to_bf16(k3_situ(v0, v1, a.beta, a.beta_lin));
            else
                ((k3_bf16 *)a.y)[(size_t)p * a.ldy + r] = k3_f32_to_bf16(v0);
        }
    }
}

static void moe_launch(const MoeArgs &a, cudaStream_t s)
{
    int P = a.B * a.k, G = a.K / K3_MX_GROUP, S = 1;
    while (S * 2 <= G && S < WARP)
        S *= 2;
    int rows_per_block = MOE_WARPS * (WARP / S);
    dim3 g(P < a.E ? P : a.E, (a.rows + rows_per_block - 1) / rows_per_block);
    if (a.out_mode == MOE_OUT_SITU)
        moe_gemv_kernel<2><<<g, MOE_WARPS * WARP, 0, s>>>(a);
    else
        moe_gemv_kernel<1><<<g, MOE_WARPS * WARP, 0, s>>>(a);
    cudaCheck(cudaGetLastError());
}

/* ---- residual add (multi-GPU fused path: after the NCCL reduction) ---- */

__global__ void residual_add_kernel(size_t n, k3_bf16 *r, const k3_bf16 *d)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        r[i] = k3_f32_to_bf16(bfv(r[i]) + bfv(d[i]));
}

void k3_gpu_residual_add(k3_bf16 *r, const k3_bf16 *d, size_t n, cudaStream_t stream)
{
    residual_add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(n, r, d);
    cudaCheck(cudaGetLastError());
}

/* ---- L2 prefetch ----------------------------------------------------- */

__global__ void prefetch_l2_kernel(const char *p, size_t bytes)
{
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 128; i < bytes;
         i += (size_t)gridDim.x * blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i));
}

void k3_gpu_prefetch_l2(const void *p, size_t bytes, cudaStream_t stream)
{
    prefetch_l2_kernel<<<132, 256, 0, stream>>>((const char *)p, bytes);
    cudaCheck(cudaGetLastError());
}

/* ---- tensors --------------------------------------------------------- */

static size_t tbytes(const struct k3_layer *L, int i)
{
    return L->t[i].count * k3_dtype_size(L->t[i].dtype);
}

void k3_gpu_upload(struct k3_layer *L)
{
    for (int i = 0; i < K3_T_COUNT; i++) {
        L->t[i].dev = NULL;
        if (!L->t[i].count)
            continue;
        cudaCheck(cudaMalloc(&L->t[i].dev, tbytes(L, i)));
        k3_gpu_put(L, (enum k3_tid)i);
    }
}

void k3_gpu_put(struct k3_layer *L, enum k3_tid t)
{
    if (L->t[t].count)
        cudaCheck(cudaMemcpy(L->t[t].dev, L->t[t].host, tbytes(L, t), cudaMemcpyHostToDevice));
}

void k3_gpu_get(struct k3_layer *L, enum k3_tid t)
{
    if (L->t[t].count)
        cudaCheck(cudaMemcpy(L->t[t].host, L->t[t].dev, tbytes(L, t), cudaMemcpyDeviceToHost));
}

void k3_gpu_put_all(struct k3_layer *L)
{
    for (int i = 0; i < K3_T_COUNT; i++)
        k3_gpu_put(L, (enum k3_tid)i);
}

void k3_gpu_put_state(struct k3_layer *L)
{
    for (int i = K3_S_KDA_STATE; i < K3_T_COUNT; i++)
        k3_gpu_put(L, (enum k3_tid)i);
}

void k3_gpu_free(struct k3_layer *L)
{
    for (int i = 0; i < K3_T_COUNT; i++) {
        if (L->t[i].dev)
            cudaCheck(cudaFree(L->t[i].dev));
        L->t[i].dev = NULL;
    }
}

/* ---- launchers ------------------------------------------------------- */

#define D(id) (L->t[id].dev)
#define DB(id) ((k3_bf16 *)L->t[id].dev)
#define DF(id) ((float *)L->t[id].dev)
#define DI(id) ((int32_t *)L->t[id].dev)
#define DU(id) ((uint8_t *)L->t[id].dev)

static int cdiv(long a, long b) { return (int)((a + b - 1) / b); }

/* Input mode: the block's own RMSNorm of x (+ d) with weight gamma. */
static void in_norm(GemvArgs &a, const void *x, int ldx, const k3_bf16 *d, const float *gamma,
                    float eps, k3_bf16 *r_out)
{
    a.in_mode = IN_NORM;
    a.x = x;
    a.ldx = ldx;
    a.d = d;
    a.gamma = gamma;
    a.eps = eps;
    a.r_out = r_out;
    a.ldr = ldx;
}

void k3_gpu_launch(struct k3_layer *L, enum k3_op_id id, cudaStream_t s)
{
    const struct k3_shape *sh = &L->sh;
    int B = L->batch, H = sh->hidden, hd = k3_kda_hd(sh), gw = k3_kda_gw(sh);
    int nh = sh->kda_heads, d = sh->head_dim, aw = k3_mla_aw(sh), mh = sh->mla_heads;
    int qw = k3_mla_qw(sh), kv = sh->kv_lora, rope = sh->rope, ql = sh->q_lora;
    int gate_off = ql + kv + rope, Lt = sh->latent, Ls = sh->latent_shard;
    int k = sh->topk, I = sh->expert_inter, SI = sh->shared_inter, E = sh->experts;
    int aow = k3_attn_width(sh, L->kind);
    const k3_bf16 *att_in = L->kind == K3_KDA ? DB(K3_A_ON) : DB(K3_A_O);
    float scale = 1.0f / sqrtf((float)(sh->nope + rope));
    GemvArgs g;
    MoeArgs m;
    memset(&m, 0, sizeof m);
    m.B = B;
    m.k = k;
    m.E = E;
    m.ids = DI(K3_A_IDS);
    m.wts = DF(K3_A_WTS);
    m.eps = sh->eps;
    m.beta = sh->situ_beta;
    m.beta_lin = sh->situ_linear_beta;
    switch (id) {
    case K3_OP_INPUT_NORM:
        add_rmsnorm_kernel<<<B, 256, 0, s>>>(H, DB(K3_IO_R_IN), DB(K3_IO_D_IN), DB(K3_IO_R_OUT),
                                            DF(K3_W_ATTN_NORM), sh->eps, DB(K3_A_XN));
        break;
    case K3_OP_POST_ATTN_NORM:
        add_rmsnorm_kernel<<<B, 256, 0, s>>>(H, DB(K3_IO_R_OUT), DB(K3_A_ATT), DB(K3_IO_R_OUT),
                                            DF(K3_W_MOE_NORM), sh->eps, DB(K3_A_XN2));
        break;
    case K3_OP_KDA_QKV_PROJ:
        g = gemv_args(B, H, D(K3_W_KDA_QKV), 3 * hd, D(K3_A_QKV), 3 * hd);
        g.x = D(K3_A_XN);
        g.ldx = H;
        gemv_launch(g, s);
        return;
    case K3_OP_KDA_GATE_PROJ:
        g = gemv_args(B, H, D(K3_W_KDA_GATE), hd + nh, D(K3_A_GP), gw);
        g.x = D(K3_A_XN);
        g.ldx = H;
        gemv_launch(g, s);
        return;
    case K3_OP_KDA_OUT_GATE_PROJ:
        g = gemv_args(B, H, DB(K3_W_KDA_GATE) + (size_t)(hd + nh) * H, hd,
                      DB(K3_A_GP) + hd + nh, gw);
        g.x = D(K3_A_XN);
        g.ldx = H;
        gemv_launch(g, s);
        return;
    case K3_OP_KDA_SHORT_CONV:
        kda_short_conv_kernel<<<cdiv((long)B * 3 * hd, 256), 256, 0, s>>>(
            B, 3 * hd, sh->conv, DB(K3_A_QKV), DF(K3_W_KDA_CONV), DF(K3_S_KDA_CONV), DB(K3_A_QKVC));
        break;
    case K3_OP_KDA_GATE_ACT:
        kda_gate_act_kernel<<<cdiv((long)B * (hd + nh), 256), 256, 0, s>>>(
            B, nh, d, DB(K3_A_GP), DF(K3_W_KDA_ALOG), DF(K3_W_KDA_DTB), sh->gate_lower,
            DF(K3_A_G), DF(K3_A_BETA));
        break;
    case K3_OP_F_KDA_CONV_GATE:
        kda_conv_gate_kernel<<<cdiv((long)B * (4 * hd + nh), 256), 256, 0, s>>>(
            B, nh, d, sh->conv, DB(K3_A_QKV), DF(K3_W_KDA_CONV), DF(K3_S_KDA_CONV), DB(K3_A_QKVC),
            DB(K3_A_GP), DF(K3_W_KDA_ALOG), DF(K3_W_KDA_DTB), sh->gate_lower, DF(K3_A_G),
            DF(K3_A_BETA));
        break;
    case K3_OP_KDA_RECURRENT:
        kda_recurrent_kernel<<<B * nh, d, 0, s>>>(nh, d, DB(K3_A_QKVC), DF(K3_A_G), DF(K3_A_BETA),
                                                   DF(K3_S_KDA_STATE), DB(K3_A_O));
        break;
    case K3_OP_KDA_OUT_NORM_GATE:
        kda_out_norm_gate_kernel<<<B * nh, d, 0, s>>>(nh, d, DB(K3_A_O), DB(K3_A_GP) + hd + nh, gw,
                                                       DF(K3_W_KDA_ONORM), sh->eps, DB(K3_A_ON));
        break;
    case K3_OP_F_KDA_IN_PROJ:
        g = gemv_args(B, H, D(K3_W_KDA_QKV), 3 * hd, D(K3_A_QKV), 3 * hd);
        g.W2 = DB(K3_W_KDA_GATE);
        g.N2 = gw;
        g.y2 = D(K3_A_GP);
        g.ldy2 = gw;
        in_norm(g, D(K3_IO_R_IN), H, DB(K3_IO_D_IN), DF(K3_W_ATTN_NORM), sh->eps, DB(K3_IO_R_OUT));
        gemv_launch(g, s);
        return;
    case K3_OP_MLA_QKV_A_PROJ:
        g = gemv_args(B, H, D(K3_W_MLA_A), gate_off, D(K3_A_MA), aw);
        g.x = D(K3_A_XN);
        g.ldx = H;
        gemv_launch(g, s);
        return;
    case K3_OP_MLA_QKV_A_NORM:
        mla_qkv_a_norm_kernel<<<dim3(B, 2), 256, 0, s>>>(DB(K3_A_MA), aw, ql, kv, rope,
                                                          DF(K3_W_MLA_QNORM), DF(K3_W_MLA_KVNORM),
                                                          sh->eps, DB(K3_A_QAN), DB(K3_A_KVN));
        break;
    case K3_OP_MLA_Q_B_PROJ:
        g = gemv_args(B, ql, D(K3_W_MLA_QB), mh * qw, D(K3_A_QB), mh * qw);
        g.x = D(K3_A_QAN);
        g.ldx = ql;
        gemv_launch(g, s);
        return;
    case K3_OP_MLA_ROPE_CACHE_WRITE:
        mla_rope_cache_write_kernel<<<cdiv((long)B * (kv + rope), 256), 256, 0, s>>>(
            B, kv + rope, DB(K3_A_KVN), DU(K3_S_MLA_CACHE), sh->ctx_max, DI(K3_S_MLA_POS));
        break;
    case K3_OP_MLA_Q_ABSORB:
        head_gemv_kernel<<<B * mh, 256, 0, s>>>(mh, kv, sh->nope, DB(K3_A_QB), qw, DB(K3_W_MLA_UK),
                                                 NULL, 0, DB(K3_A_QLAT));
        break;
    case K3_OP_MLA_ATTENTION:
    case K3_OP_F_MLA_ATTENTION:
        mla_attention_kernel<<<dim3(mh, att_splits(B, mh, sh->ctx_max), B), ATT_WARPS * WARP, 0, s>>>(
            mh, sh->nope, rope, kv, DB(K3_A_QLAT), DB(K3_A_QB),
            id == K3_OP_F_MLA_ATTENTION ? DB(K3_W_MLA_UK) : NULL, DU(K3_S_MLA_CACHE), sh->ctx_max,
            DI(K3_S_MLA_POS), scale, att_splits(B, mh, sh->ctx_max), DF(K3_A_ATT_PART),
            DI(K3_A_ATT_CNT), DB(K3_A_OLAT));
        break;
    case K3_OP_MLA_V_UP:
    case K3_OP_F_MLA_V_UP_GATE:
        head_gemv_kernel<<<B * mh, 256, 0, s>>>(
            mh, sh->v_head, kv, DB(K3_A_OLAT), kv, DB(K3_W_MLA_UV),
            id == K3_OP_F_MLA_V_UP_GATE ? DB(K3_A_MA) + gate_off : NULL, aw, DB(K3_A_O));
        break;
    case K3_OP_MLA_OUT_GATE:
        g = gemv_args(B, H, DB(K3_W_MLA_A) + (size_t)gate_off * H, mh * sh->v_head, D(K3_A_O),
                      mh * sh->v_head);
        g.x = D(K3_A_XN);
        g.ldx = H;
        g.out_mode = OUT_GATE;
        g.aux = DB(K3_A_MA) + gate_off;
        g.ldaux = aw;
        gemv_launch(g, s);
        return;
    case K3_OP_F_MLA_IN_PROJ:
        g = gemv_args(B, H, D(K3_W_MLA_A), aw, D(K3_A_MA), aw);
        in_norm(g, D(K3_IO_R_IN), H, DB(K3_IO_D_IN), DF(K3_W_ATTN_NORM), sh->eps, DB(K3_IO_R_OUT));
        gemv_launch(g, s);
        return;
    case K3_OP_F_MLA_Q_B_PROJ_ROPE:
        g = gemv_args(B, ql, D(K3_W_MLA_QB), mh * qw, D(K3_A_QB), mh * qw);
        in_norm(g, D(K3_A_MA), aw, NULL, DF(K3_W_MLA_QNORM), sh->eps, NULL);
        g.cache_blocks = B;
        g.kv_src = DB(K3_A_MA) + ql;
        g.kv_ld = aw;
        g.kv_gamma = DF(K3_W_MLA_KVNORM);
        g.kv = kv;
        g.rope = rope;
        g.cache = DU(K3_S_MLA_CACHE);
        g.ctx_max = sh->ctx_max;
        g.pos = DI(K3_S_MLA_POS);
        gemv_launch(g, s);
        return;
    case K3_OP_ATTN_O_PROJ:
        g = gemv_args(B, aow, D(K3_W_O), H, D(K3_A_ATT), H);
        g.x = att_in;
        g.ldx = aow;
        gemv_launch(g, s);
        return;
    case K3_OP_F_O_PROJ_AR_RESIDUAL:
        g = gemv_args(B, aow, D(K3_W_O), H, D(K3_IO_R_OUT), H);
        g.x = att_in;
        g.ldx = aow;
        g.out_mode = OUT_RESID;
        gemv_launch(g, s);
        return;
    case K3_OP_ROUTER_GEMM:
        g = gemv_args(B, H, D(K3_W_ROUTER), E, D(K3_A_LOGITS), E);
        g.x = D(K3_A_XN2);
        g.ldx = H;
        g.out_mode = OUT_F32;
        gemv_launch(g, s);
        return;
    case K3_OP_F_ROUTER_GEMM:
        g = gemv_args(B, H, D(K3_W_ROUTER), E, D(K3_A_LOGITS), E);
        in_norm(g, D(K3_IO_R_OUT), H, NULL, DF(K3_W_MOE_NORM), sh->eps, NULL);
        g.out_mode = OUT_F32;
        gemv_launch(g, s);
        return;
    case K3_OP_ROUTER_TOPK:
        router_topk_kernel<<<B, 256, 0, s>>>(E, k, DF(K3_A_LOGITS), DF(K3_W_ROUTER_BIAS),
                                             sh->route_scale, DI(K3_A_IDS), DF(K3_A_WTS));
        break;
    case K3_OP_SHARED_GATE_UP:
        g = gemv_args(B, H, D(K3_W_SH_GU), 2 * SI, D(K3_A_SHGU), 2 * SI);
        g.x = D(K3_A_XN2);
        g.ldx = H;
        gemv_launch(g, s);
        return;
    case K3_OP_SHARED_ACT:
        situ_kernel<<<cdiv((long)B * SI, 256), 256, 0, s>>>(B, SI, DB(K3_A_SHGU), sh->situ_beta,
                                                             sh->situ_linear_beta, DB(K3_A_SHH));
        break;
    case K3_OP_F_SHARED_GATE_UP_ACT:
        g = gemv_args(B, H, D(K3_W_SH_GU), SI, D(K3_A_SHH), SI);
        in_norm(g, D(K3_IO_R_OUT), H, NULL, DF(K3_W_MOE_NORM), sh->eps, NULL);
        g.out_mode = OUT_SITU;
        g.pair_off = SI;
        g.beta = sh->situ_beta;
        g.beta_lin = sh->situ_linear_beta;
        gemv_launch(g, s);
        return;
    case K3_OP_SHARED_DOWN:
    case K3_OP_F_SHARED_DOWN:
        g = gemv_args(B, SI, D(K3_W_SH_DOWN), H, D(K3_A_SHOUT), H);
        g.x = D(K3_A_SHH);
        g.ldx = SI;
        gemv_launch(g, s);
        return;
    case K3_OP_MOE_LATENT_DOWN:
        g = gemv_args(B, H, D(K3_W_LAT_IN), Ls, DB(K3_A_LAT) + (size_t)L->rank * Ls, Lt);
        g.x = D(K3_A_XN2);
        g.ldx = H;
        gemv_launch(g, s);
        return;
    case K3_OP_F_MOE_LATENT_DOWN:
        g = gemv_args(B, H, D(K3_W_LAT_IN), Ls, DB(K3_A_LAT) + (size_t)L->rank * Ls, Lt);
        in_norm(g, D(K3_IO_R_OUT), H, NULL, DF(K3_W_MOE_NORM), sh->eps, NULL);
        gemv_launch(g, s);
        return;
    case K3_OP_MOE_ALIGN:
        moe_align_kernel<<<B + 1, 256, 0, s>>>(B, k, E, Lt, DB(K3_A_LAT), DF(K3_W_LAT_NORM),
                                               sh->eps, DB(K3_A_LATN), DI(K3_A_IDS),
                                               DI(K3_A_ALIGN), DF(K3_A_RACC));
        break;
    case K3_OP_MOE_GATE_UP:
        m.K = Lt;
        m.rows = 2 * I;
        m.rows_w = 2 * I;
        m.W = DU(K3_W_RT_GU);
        m.S = DU(K3_W_RT_GU_S);
        m.align = DI(K3_A_ALIGN);
        m.x = DB(K3_A_LATN);
        m.ldx = Lt;
        m.out_mode = MOE_OUT_BF16;
        m.y = D(K3_A_RGU);
        m.ldy = 2 * I;
        moe_launch(m, s);
        return;
    case K3_OP_F_MOE_GATE_UP_ACT:
        m.K = Lt;
        m.rows = I;
        m.rows_w = 2 * I;
        m.W = DU(K3_W_RT_GU);
        m.S = DU(K3_W_RT_GU_S);
        m.x = DB(K3_A_LAT);
        m.ldx = Lt;
        m.gamma = DF(K3_W_LAT_NORM);
        m.out_mode = MOE_OUT_SITU;
        m.pair_off = I;
        m.y = D(K3_A_RH);
        m.ldy = I;
        m.zero = DF(K3_A_RACC);
        m.zero_n = (size_t)B * Lt;
        moe_launch(m, s);
        return;
    case K3_OP_MOE_ACT:
        situ_kernel<<<cdiv((long)B * k * I, 256), 256, 0, s>>>(B * k, I, DB(K3_A_RGU), sh->situ_beta,
                                                                sh->situ_linear_beta, DB(K3_A_RH));
        break;
    case K3_OP_MOE_DOWN:
    case K3_OP_F_MOE_DOWN:
        m.K = I;
        m.rows = Lt;
        m.rows_w = Lt;
        m.W = DU(K3_W_RT_DOWN);
        m.S = DU(K3_W_RT_DOWN_S);
        m.align = id == K3_OP_MOE_DOWN ? DI(K3_A_ALIGN) : NULL;
        m.x = DB(K3_A_RH);
        m.x_per_pair = 1;
        m.ldx = I;
        m.out_mode = MOE_OUT_ATOMIC;
        m.y = D(K3_A_RACC);
        m.ldy = Lt;
        moe_launch(m, s);
        return;
    case K3_OP_MOE_COMBINE:
        g = gemv_args(B, Ls, D(K3_W_LAT_OUT), H, D(K3_IO_D_OUT), H);
        g.in_mode = IN_F32;
        g.x = DF(K3_A_RACC) + (size_t)L->rank * Ls;
        g.ldx = Lt;
        g.out_mode = OUT_ADD;
        g.acc = DB(K3_A_SHOUT);
        g.ldacc = H;
        gemv_launch(g, s);
        return;
    case K3_OP_F_MOE_COMBINE_AR_RESIDUAL:
        g = gemv_args(B, Ls, D(K3_W_LAT_OUT), H, D(K3_IO_R_OUT), H);
        g.in_mode = IN_F32;
        g.x = DF(K3_A_RACC) + (size_t)L->rank * Ls;
        g.ldx = Lt;
        g.out_mode = OUT_RESID;
        g.acc = DB(K3_A_SHOUT);
        g.ldacc = H;
        gemv_launch(g, s);
        return;
    case K3_OP_ATTN_ALLREDUCE:
    case K3_OP_MOE_ALLREDUCE:
    default:
        return; /* reductions: local on one GPU, NCCL in the driver */
    }
    cudaCheck(cudaGetLastError());
}

void k3_gpu_run_path(struct k3_layer *L, enum k3_path p, cudaStream_t main_s, cudaStream_t side,
                     cudaEvent_t ev_fork, cudaEvent_t ev_join)
{
    const struct k3_op *ops;
    int n = k3_path_ops(p, L->kind, &ops);
    bool forked = false, has_side = false;
    for (int i = 0; i < n; i++)
        has_side |= ops[i].side_stream != 0;
    for (int i = 0; i < n; i++) {
        const struct k3_op *op = &ops[i];
        if (op->id == K3_OP_ATTN_ALLREDUCE || op->id == K3_OP_MOE_ALLREDUCE)
            continue; /* local on one GPU */
        if (forked && i == n - 1) { /* the consumer of the side stream's output */
            cudaCheck(cudaEventRecord(ev_join, side));
            cudaCheck(cudaStreamWaitEvent(main_s, ev_join, 0));
        }
        k3_gpu_launch(L, op->id, op->side_stream ? side : main_s);
        /* The side stream (shared experts) starts as soon as the residual
         * it normalizes is complete, overlapping router and routed experts. */
        if (has_side && !forked && op->id == K3_OP_F_O_PROJ_AR_RESIDUAL) {
            cudaCheck(cudaEventRecord(ev_fork, main_s));
            cudaCheck(cudaStreamWaitEvent(side, ev_fork, 0));
            forked = true;
        }
    }
}
