/* k3num.h: the number formats and scalar functions of the Kimi K3 decode
 * layer, shared by the C references (k3ref.c) and the CUDA kernels (*.cu),
 * so both sides decode weights and apply activations bit for bit alike.
 *
 * - BF16 (uint16_t bits): round to nearest even from float.
 * - FP8 E4M3 "fn" (uint8_t): 1-4-3, bias 7, no infinities, 0x7f/0xff NaN,
 *   largest finite 448; encoding rounds to nearest even and saturates.
 * - MXFP4 (OCP Microscaling): E2M1 4-bit codes, two per byte (low nibble
 *   first), values {0, .5, 1, 1.5, 2, 3, 4, 6} with a sign bit; one E8M0
 *   scale byte (2^(e-127)) per group of 32 consecutive values along K.
 * - SiTU, the expert activation (see k3_situ below for the formula).
 *
 * Header only; every function is static inline and, under nvcc, also a
 * device function.
 */
#ifndef K3NUM_H
#define K3NUM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define K3HD __host__ __device__ __forceinline__
#else
#define K3HD static inline
#endif

typedef uint16_t k3_bf16;

#define K3_MX_GROUP 32   /* values per E8M0 scale */
#define K3_FP8_MAX 448.0f

K3HD float k3_bits_to_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

K3HD uint32_t k3_f32_to_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

K3HD float k3_bf16_to_f32(k3_bf16 h) { return k3_bits_to_f32((uint32_t)h << 16); }

K3HD k3_bf16 k3_f32_to_bf16(float f)
{
    uint32_t u = k3_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (k3_bf16)0x7fc0; /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (k3_bf16)(u >> 16);
}

/* Rounds a float to the nearest bf16 value (as float). */
K3HD float k3_round_bf16(float f) { return k3_bf16_to_f32(k3_f32_to_bf16(f)); }

K3HD float k3_fp8_to_f32(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        return k3_bits_to_f32(0x7fc00000u);
    if (e == 0)
        v = (float)m * (1.0f / 512.0f);
    else
        v = ldexpf(1.0f + (float)m * 0.125f, e - 7);
    return s ? -v : v;
}

K3HD uint8_t k3_f32_to_fp8(float f)
{
    uint8_t s = f < 0.0f ? 0x80 : 0;
    float a = fabsf(f);
    if (a != a)
        return 0x7f;
    if (a >= K3_FP8_MAX)
        return (uint8_t)(s | 0x7e);
    int e;
    frexpf(a, &e);
    e -= 1; /* a = 1.f * 2^e */
    if (a == 0.0f || e < -6) {
        /* subnormal: multiples of 2^-9; q == 8 encodes 2^-6 exactly */
        float q = rintf(a * 512.0f);
        return (uint8_t)(s | (uint8_t)q);
    }
    float m = rintf((ldexpf(a, -e) - 1.0f) * 8.0f);
    if (m >= 8.0f) {
        m = 0.0f;
        e += 1;
    }
    if (e > 8 || (e == 8 && m > 6.0f))
        return (uint8_t)(s | 0x7e);
    return (uint8_t)(s | (uint8_t)((e + 7) << 3) | (uint8_t)m);
}

/* E2M1 code (low 4 bits) to float. */
K3HD float k3_e2m1_to_f32(unsigned code)
{
    unsigned mag = code & 7u;
    float v = mag < 2u ? 0.5f * (float)mag
              : mag < 4u ? 1.0f + 0.5f * (float)(mag - 2u)
              : mag < 6u ? 2.0f + (float)(mag - 4u)
                         : 4.0f + 2.0f * (float)(mag - 6u);
    return (code & 8u) ? -v : v;
}

/* E8M0 scale byte to float: 2^(b-127); 0xff is NaN. */
K3HD float k3_e8m0_to_f32(uint8_t b)
{
    if (b == 0xff)
        return k3_bits_to_f32(0x7fc00000u);
    return ldexpf(1.0f, (int)b - 127);
}

K3HD float k3_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

K3HD float k3_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* SiTU, the routed and shared experts' gated activation. The published
 * config names it with two parameters (activation_situ_beta 4.0,
 * activation_situ_linear_beta 25.0) and no formula; this code reads it as
 * a sigmoid-gated unit on the gate branch times a tanh-bounded linear
 * branch:
 *     situ(g, u) = g * sigmoid(beta * g) * beta_lin * tanh(u / beta_lin)
 * so small up-branch values pass linearly and outliers saturate at
 * +-beta_lin (the same role as the clamp limit in clamped SwiGLU). */
K3HD float k3_situ(float g, float u, float beta, float beta_lin)
{
    return g * k3_sigmoid(beta * g) * (beta_lin * tanhf(u / beta_lin));
}

#endif
