/* k3ref.c: plain C references for every operation of one Kimi K3 decode
 * layer (see k3ref.h). Sums are accumulated in double, so these serve as
 * the higher-precision reference the GPU kernels are measured against. */
#include "kernels/k3ref.h"

#include <math.h>
#include <stddef.h>

#define BF(x) k3_bf16_to_f32(x)

void k3_add_rmsnorm_cpu(int B, int n, k3_bf16 *r, const k3_bf16 *d,
                        const float *w, float eps, k3_bf16 *out)
{
    for (int b = 0; b < B; b++) {
        k3_bf16 *rr = r + (size_t)b * n;
        if (d) {
            const k3_bf16 *dd = d + (size_t)b * n;
            for (int i = 0; i < n; i++)
                rr[i] = k3_f32_to_bf16(BF(rr[i]) + BF(dd[i]));
        }
        k3_rmsnorm_cpu(1, n, rr, n, w, eps, out + (size_t)b * n, n);
    }
}

void k3_rmsnorm_cpu(int B, int n, const k3_bf16 *in, int in_stride,
                    const float *w, float eps, k3_bf16 *out, int out_stride)
{
    for (int b = 0; b < B; b++) {
        const k3_bf16 *x = in + (size_t)b * in_stride;
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)BF(x[i]) * BF(x[i]);
        float inv = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++)
            out[(size_t)b * out_stride + i] = k3_f32_to_bf16(BF(x[i]) * inv * w[i]);
    }
}

static double dot_bf16(const k3_bf16 *a, const k3_bf16 *b, int K)
{
    double s = 0;
    for (int k = 0; k < K; k++)
        s += (double)BF(a[k]) * BF(b[k]);
    return s;
}

void k3_gemv_f32_cpu(int B, int N, int K, const k3_bf16 *x, const k3_bf16 *W,
                     float *y)
{
    for (int n = 0; n < N; n++)
        for (int b = 0; b < B; b++)
            y[(size_t)b * N + n] =
                (float)dot_bf16(x + (size_t)b * K, W + (size_t)n * K, K);
}

void k3_gemv_bf16_cpu(int B, int N, int K, const k3_bf16 *x, const k3_bf16 *W,
                      const k3_bf16 *acc, k3_bf16 *y)
{
    for (int n = 0; n < N; n++)
        for (int b = 0; b < B; b++) {
            double s = dot_bf16(x + (size_t)b * K, W + (size_t)n * K, K);
            if (acc)
                s += BF(acc[(size_t)b * N + n]);
            y[(size_t)b * N + n] = k3_f32_to_bf16((float)s);
        }
}

void k3_gemv_rows_cpu(int B, int n0, int n1, int K, const k3_bf16 *x, int ldx,
                      const k3_bf16 *W, const k3_bf16 *acc, k3_bf16 *y, int ldy)
{
    for (int n = n0; n < n1; n++)
        for (int b = 0; b < B; b++) {
            double s = dot_bf16(x + (size_t)b * ldx, W + (size_t)n * K, K);
            if (acc)
                s += BF(acc[(size_t)b * ldy + n]);
            y[(size_t)b * ldy + n] = k3_f32_to_bf16((float)s);
        }
}

void k3_gemv_xf32_cpu(int B, int N, int K, const float *x, int ldx,
                      const k3_bf16 *W, const k3_bf16 *acc, k3_bf16 *y)
{
    for (int n = 0; n < N; n++)
        for (int b = 0; b < B; b++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)x[(size_t)b * ldx + k] * BF(W[(size_t)n * K + k]);
            if (acc)
                s += BF(acc[(size_t)b * N + n]);
            y[(size_t)b * N + n] = k3_f32_to_bf16((float)s);
        }
}

void k3_kda_conv_cpu(int B, int C, int width, const k3_bf16 *in,
                     const float *w, float *state, k3_bf16 *out)
{
    int hist = width - 1;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            float *st = state + ((size_t)b * C + c) * hist;
            const float *wc = w + (size_t)c * width;
            float x = BF(in[(size_t)b * C + c]);
            double acc = (double)wc[hist] * x;
            for (int t = 0; t < hist; t++)
                acc += (double)wc[t] * st[t];
            for (int t = 0; t + 1 < hist; t++)
                st[t] = st[t + 1];
            if (hist > 0)
                st[hist - 1] = x;
            float v = (float)acc;
            out[(size_t)b * C + c] = k3_f32_to_bf16(v * k3_sigmoid(v));
        }
}

void k3_kda_gates_cpu(int B, int H, int d, const k3_bf16 *gp,
                      const float *A_log, const float *dt_bias, float lower,
                      float *g, float *beta)
{
    int hd = H * d, gw = 2 * hd + H;
    for (int b = 0; b < B; b++) {
        const k3_bf16 *row = gp + (size_t)b * gw;
        for (int h = 0; h < H; h++) {
            float a_scale = expf(A_log[h]);
            for (int i = 0; i < d; i++) {
                int c = h * d + i;
                g[(size_t)b * hd + c] =
                    lower * k3_sigmoid(a_scale * (BF(row[c]) + dt_bias[c]));
            }
            beta[(size_t)b * H + h] = k3_sigmoid(BF(row[hd + h]));
        }
    }
}

void k3_kda_recurrent_cpu(int B, int H, int d, const k3_bf16 *qkv,
                          const float *g, const float *beta, float *S,
                          k3_bf16 *o)
{
    int hd = H * d;
    double q[256], k[256], u[256];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const k3_bf16 *row = qkv + (size_t)b * 3 * hd;
            double qs = 0, ks = 0;
            for (int i = 0; i < d; i++) {
                q[i] = BF(row[h * d + i]);
                k[i] = BF(row[hd + h * d + i]);
                qs += q[i] * q[i];
                ks += k[i] * k[i];
            }
            double qn = 1.0 / sqrt(qs + 1e-6) / sqrt((double)d);
            double kn = 1.0 / sqrt(ks + 1e-6);
            for (int i = 0; i < d; i++) {
                q[i] *= qn;
                k[i] *= kn;
            }
            float *Sh = S + ((size_t)b * H + h) * d * d;
            const float *gh = g + (size_t)b * hd + h * d;
            double bt = beta[(size_t)b * H + h];
            for (int i = 0; i < d; i++) {
                float a = expf(gh[i]);
                for (int j = 0; j < d; j++)
                    Sh[i * d + j] *= a;
            }
            for (int j = 0; j < d; j++) {
                double s = 0;
                for (int i = 0; i < d; i++)
                    s += (double)Sh[i * d + j] * k[i];
                u[j] = BF(row[2 * hd + h * d + j]) - s;
            }
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++)
                    Sh[i * d + j] = (float)(Sh[i * d + j] + bt * k[i] * u[j]);
            for (int j = 0; j < d; j++) {
                double s = 0;
                for (int i = 0; i < d; i++)
                    s += (double)Sh[i * d + j] * q[i];
                o[(size_t)b * hd + h * d + j] = k3_f32_to_bf16((float)s);
            }
        }
}

void k3_kda_out_norm_cpu(int B, int H, int d, const k3_bf16 *o,
                         const k3_bf16 *gate, int gstride, const float *w,
                         float eps, k3_bf16 *out)
{
    int hd = H * d;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const k3_bf16 *x = o + (size_t)b * hd + h * d;
            double ss = 0;
            for (int i = 0; i < d; i++)
                ss += (double)BF(x[i]) * BF(x[i]);
            float inv = (float)(1.0 / sqrt(ss / d + eps));
            for (int i = 0; i < d; i++) {
                float gt = BF(gate[(size_t)b * gstride + h * d + i]);
                out[(size_t)b * hd + h * d + i] =
                    k3_f32_to_bf16(BF(x[i]) * inv * w[i] * k3_sigmoid(gt));
            }
        }
}

void k3_mla_kv_cache_cpu(int B, int kv, int rope, const k3_bf16 *a,
                         int a_stride, int kv_off, const float *w, float eps,
                         uint8_t *cache, int ctx_max, const int32_t *pos)
{
    int row_w = kv + rope;
    for (int b = 0; b < B; b++) {
        const k3_bf16 *x = a + (size_t)b * a_stride + kv_off;
        uint8_t *dst = cache + ((size_t)b * ctx_max + pos[b]) * row_w;
        double ss = 0;
        for (int i = 0; i < kv; i++)
            ss += (double)BF(x[i]) * BF(x[i]);
        float inv = (float)(1.0 / sqrt(ss / kv + eps));
        for (int i = 0; i < kv; i++)
            dst[i] = k3_f32_to_fp8(BF(x[i]) * inv * w[i]);
        for (int j = 0; j < rope; j++)
            dst[kv + j] = k3_f32_to_fp8(BF(x[kv + j]));
    }
}

void k3_mla_absorb_cpu(int B, int H, int nope, int rope, int kv,
                       const k3_bf16 *qb, const k3_bf16 *W_uk, k3_bf16 *q_lat)
{
    int qw = nope + rope;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const k3_bf16 *qn = qb + (size_t)b * H * qw + h * qw;
            for (int c = 0; c < kv; c++)
                q_lat[((size_t)b * H + h) * kv + c] = k3_f32_to_bf16(
                    (float)dot_bf16(W_uk + ((size_t)h * kv + c) * nope, qn, nope));
        }
}

void k3_mla_attn_cpu(int B, int H, int nope, int rope, int kv,
                     const k3_bf16 *q_lat, const k3_bf16 *qb,
                     const uint8_t *cache, int ctx_max, const int32_t *pos,
                     float scale, k3_bf16 *o_lat)
{
    int qw = nope + rope, row_w = kv + rope;
    double acc[1024];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const k3_bf16 *ql = q_lat + ((size_t)b * H + h) * kv;
            const k3_bf16 *qr = qb + (size_t)b * H * qw + h * qw + nope;
            double m = -INFINITY, l = 0;
            for (int c = 0; c < kv; c++)
                acc[c] = 0;
            for (int t = 0; t <= pos[b]; t++) {
                const uint8_t *row = cache + ((size_t)b * ctx_max + t) * row_w;
                double s = 0;
                for (int c = 0; c < kv; c++)
                    s += (double)BF(ql[c]) * k3_fp8_to_f32(row[c]);
                for (int j = 0; j < rope; j++)
                    s += (double)BF(qr[j]) * k3_fp8_to_f32(row[kv + j]);
                s *= scale;
                double mn = s > m ? s : m;
                double corr = exp(m - mn), p = exp(s - mn);
                l = l * corr + p;
                for (int c = 0; c < kv; c++)
                    acc[c] = acc[c] * corr + p * k3_fp8_to_f32(row[c]);
                m = mn;
            }
            for (int c = 0; c < kv; c++)
                o_lat[((size_t)b * H + h) * kv + c] = k3_f32_to_bf16((float)(acc[c] / l));
        }
}

void k3_mla_vup_cpu(int B, int H, int kv, int v, const k3_bf16 *o_lat,
                    const k3_bf16 *W_uv, const k3_bf16 *gate, int gstride,
                    k3_bf16 *o)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < v; j++) {
                double s = dot_bf16(W_uv + ((size_t)h * v + j) * kv,
                                    o_lat + ((size_t)b * H + h) * kv, kv);
                float gs = gate ? k3_sigmoid(BF(gate[(size_t)b * gstride + h * v + j])) : 1.0f;
                o[(size_t)b * H * v + h * v + j] = k3_f32_to_bf16((float)s * gs);
            }
}

void k3_router_topk_cpu(int B, int E, int k, const float *logits,
                        const float *bias, float scale, int32_t *ids,
                        float *wts)
{
    unsigned char taken[4096];
    for (int b = 0; b < B; b++) {
        const float *lg = logits + (size_t)b * E;
        for (int e = 0; e < E; e++)
            taken[e] = 0;
        double sum = 0;
        for (int s = 0; s < k; s++) {
            int best = -1;
            float best_key = 0;
            for (int e = 0; e < E; e++) {
                if (taken[e])
                    continue;
                float key = k3_sigmoid(lg[e]) + bias[e];
                if (best < 0 || key > best_key) {
                    best = e;
                    best_key = key;
                }
            }
            taken[best] = 1;
            ids[(size_t)b * k + s] = best;
            float sc = k3_sigmoid(lg[best]);
            wts[(size_t)b * k + s] = sc;
            sum += sc;
        }
        for (int s = 0; s < k; s++)
            wts[(size_t)b * k + s] = (float)(wts[(size_t)b * k + s] / sum * scale);
    }
}

void k3_situ_cpu(int R, int N, const k3_bf16 *gu, float beta, float beta_lin,
                 k3_bf16 *out)
{
    for (int r = 0; r < R; r++)
        for (int j = 0; j < N; j++)
            out[(size_t)r * N + j] = k3_f32_to_bf16(
                k3_situ(BF(gu[(size_t)r * 2 * N + j]),
                        BF(gu[(size_t)r * 2 * N + N + j]), beta, beta_lin));
}

void k3_moe_gemv_mxfp4_f32_cpu(int B, int k, int N, int K, const k3_bf16 *x,
                               int x_per_slot, const int32_t *ids,
                               const uint8_t *W, const uint8_t *scales,
                               float *y)
{
    int groups = K / K3_MX_GROUP;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < k; s++) {
            int e = ids[(size_t)b * k + s];
            const k3_bf16 *xr = x + (x_per_slot ? ((size_t)b * k + s) * K : (size_t)b * K);
            for (int n = 0; n < N; n++) {
                const uint8_t *wr = W + ((size_t)e * N + n) * (K / 2);
                const uint8_t *sr = scales + ((size_t)e * N + n) * groups;
                double acc = 0;
                for (int gi = 0; gi < groups; gi++) {
                    double part = 0;
                    for (int j = gi * K3_MX_GROUP; j < (gi + 1) * K3_MX_GROUP; j++) {
                        unsigned code = (wr[j / 2] >> ((j & 1) * 4)) & 15u;
                        part += (double)k3_e2m1_to_f32(code) * BF(xr[j]);
                    }
                    acc += part * k3_e8m0_to_f32(sr[gi]);
                }
                y[((size_t)b * k + s) * N + n] = (float)acc;
            }
        }
}

double k3_mxfp4_dot_cpu(const k3_bf16 *x, const uint8_t *w, const uint8_t *sc, int K)
{
    double acc = 0;
    for (int g = 0; g < K / K3_MX_GROUP; g++) {
        double part = 0;
        for (int j = g * K3_MX_GROUP; j < (g + 1) * K3_MX_GROUP; j++)
            part += (double)k3_e2m1_to_f32((w[j / 2] >> ((j & 1) * 4)) & 15u) * BF(x[j]);
        acc += part * k3_e8m0_to_f32(sc[g]);
    }
    return acc;
}

void k3_moe_align_cpu(int B, int k, int E, const int32_t *ids, int32_t *align)
{
    int P = B * k, n = 0, at = 0;
    int32_t *experts = align + 1, *offs = align + P + 2, *pairs = align + 2 * P + 3;
    for (int e = 0; e < E; e++) {
        int first = 1;
        for (int p = 0; p < P; p++)
            if (ids[p] == e) {
                if (first) {
                    experts[n] = e;
                    offs[n] = at;
                    n++;
                    first = 0;
                }
                pairs[at++] = p;
            }
    }
    offs[n] = at;
    align[0] = n;
}

double k3_nmse_f32(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0);
}

double k3_nmse_bf16(const k3_bf16 *a, const k3_bf16 *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float x = BF(a[i]), y = BF(b[i]);
        if (isnan(x) || isnan(y))
            return INFINITY;
        double d = (double)x - y;
        num += d * d;
        den += (double)y * y;
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0);
}
