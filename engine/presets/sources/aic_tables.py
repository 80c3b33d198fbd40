#!/usr/bin/env python3
"""aic_tables.py: the kernel and all-reduce tables of the GPU presets, reduced
from NVIDIA's aiconfigurator performance database (engine/CALIBRATION.md,
"Kernel tables").

Source: github.com/ai-dynamo/aiconfigurator at commit
095f58a51c4ca8e61b66ec108d86f223f8d559ce (2026-08-21), files
aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/*.parquet
(per-op latencies, ms, timed under CUDA-graph replay by collector/helper.py
benchmark_with_power). Extract them flat into DIR as
<gpu>_<op>_<framework>_<version>_<table>.parquet, e.g.
    git show 095f58a5:aic-core/.../gb300/gemm/vllm/0.24.0/gemm_perf.parquet \
        > DIR/gb300_gemm_vllm_0.24.0_gemm_perf.parquet
then run:  python3 aic_tables.py DIR   (pandas + pyarrow; prints one JSON
object per GPU preset: "kernel_tables" and "allreduce_tables").
python3 aic_tables.py --dated DIR prints the validation variants
(h100-vllm0.14, h200-vllm0.14, b200-vllm0.19): gemm_bf16, gemm_fp8,
attention_gqa and the one-shot all-reduce by the same rules from the
earliest vLLM build the database measured on each GPU (DATED below; its
kernel_source is vllm_default for both GEMM precisions).

Reduction rules (the same for every GPU):
- Each table point is [key, eff, extra_us]: a kernel of the class costs
  floor + extra_us + bytes / (HBM peak x eff), where eff is the marginal
  (slope) efficiency of a least-squares fit time = c + bytes / (peak x eff)
  over the source's points and the floor is the engine's fitted per-kernel
  floor. The intercept c (the isolated kernel's fixed time) is not copied:
  the calibration point fixes what a kernel's fixed time is inside a real
  step (the isolated intercepts add up to more than the measured step);
  extra_us carries only what the source adds to it: the intercept of a
  variant beyond the calibrated variant on the same GPU (FP8 GEMMs, whose
  vLLM linear method adds a dynamic activation-quantisation kernel, over
  cuBLAS BF16).
- gemm_bf16 / gemm_fp8: vLLM 0.24.0 gemm_perf, torch.nn.functional.linear
  (cuBLAS) bfloat16 / CutlassFP8ScaledMMLinearKernel fp8; all shapes with
  4-400 MB of weights; one fit per token bucket (M = 1-64 together, 128).
  Bytes = N K bpp + M K act + M N 2.
- grouped: the whole MoE module (routing, grouped GEMMs, activation,
  finalize; collector/sglang/collect_moe.py) with balanced routing (each
  token its own top-k experts: min(E, M k) experts touched), EP 1, fit
  over M = 1..64 per tensor-parallel shard; key = one expert's shard
  (3 x hidden x inter / tp x bytes per parameter), MB. Blackwell: SGLang
  0.5.14 sglang_flashinfer_trtllm_moe, Kimi K3 shape (3584/3072, top-16 of
  896), w4a16_mxfp4 (0.5 + 1/32 B per parameter; B300, which has only the
  w4a8_mxfp4_mxfp8 lane, that one). Hopper: SGLang 0.5.9
  sglang_fused_moe_triton, DeepSeek-V3 shape (7168/2048, top-8 of 256),
  fp8_block (1 + 4/128^2 B per parameter).
- attention_gqa: vLLM 0.24.0 generation_attention, 8 query heads / 1 KV
  head / head dim 128 / FP8 KV (Llama 3.1 70B at TP8); one fit over batch
  1-128 and context 256-8192 (KV bytes = batch x context x 2 x 128 B).
- attention_mla: vLLM 0.24.0 mla_generation_module (FLASHINFER_MLA, 8
  heads, FP8 KV, BF16 GEMMs); per batch (key = decoding sequences), the
  slope of time against KV bytes (batch x context x 576 B) over contexts
  4k-128k: the module's GEMMs do not grow with context, so the slope is the
  attention kernel's marginal efficiency.
- gemm_bf16_flops / gemm_fp8_flops (the compute-bound side of the same
  kernels): from the same gemm_perf rows and shapes (4-400 MB of weights),
  at each measured M of 512 and more that is a power of two (512 .. 16384),
  eff = sum of FLOPs / (sum of times x the datasheet rate of the weights'
  precision), FLOPs = 2 M N K: the FLOP-weighted mean efficiency of the
  shapes run back to back, whole kernel times (no intercept dropped: at
  these M a kernel's time is not launch-dominated, and the FP8 path's
  activation quantisation, which grows with M, is part of it). Below 512
  the value at 512 holds (the memory term prices smaller M).
- grouped_flops: the same MoE module rows as grouped, at 256 tokens and
  more (powers of two to 16384), one table per measured TP shard (keyed by
  tokens, the shard in expert_shard_mb): eff = the experts' GEMM FLOPs
  (2 x tokens x top-k x 3 x hidden x inter / tp) / (time x the datasheet
  rate the engine gives the experts' precision: FP4 on Blackwell for the
  MXFP4 lanes, FP8 on Hopper), the whole module's time.
- allreduce oneshot: vLLM 0.24.0 custom all-reduce, CUDA-graph mode;
  library: NCCL 2.29.2 all_reduce (half). message_size is in elements
  (collector/network/collect_all_reduce.py), bytes = 2 x elements.
"""
import glob
import json
import os
import sys

import numpy as np
import pandas as pd

PEAK = {'gb300': 8e12, 'gb200': 8e12, 'b200_sxm': 8e12, 'b300_sxm': 8e12,
        'h200_sxm': 4.8e12, 'h100_sxm': 3.35e12}  # hardware.md
RATE = {  # dense FLOP/s by weight bits as the engine picks them (hardware.md)
    'gb300': {16: 2.5e15, 8: 5e15, 4: 15e15}, 'gb200': {16: 2.5e15, 8: 5e15, 4: 10e15},
    'b200_sxm': {16: 2.25e15, 8: 4.5e15, 4: 9e15}, 'b300_sxm': {16: 2.25e15, 8: 4.5e15, 4: 13.5e15},
    'h200_sxm': {16: 0.99e15, 8: 1.98e15, 4: 1.98e15}, 'h100_sxm': {16: 0.99e15, 8: 1.98e15, 4: 1.98e15}}
PRESET = {'gb300': 'gb300', 'gb200': 'gb200', 'b200_sxm': 'b200', 'b300_sxm': 'b300',
          'h200_sxm': 'h200', 'h100_sxm': 'h100'}
BPP = {'bfloat16': 2.0, 'fp8': 1.0, 'fp8_block': 1 + 4 / (128 * 128),
       'w4a16_mxfp4': 0.5 + 1 / 32, 'w4a8_mxfp4_mxfp8': 0.5 + 1 / 32}
COMMIT = 'ai-dynamo/aiconfigurator@095f58a5'


def read(d, gpu, op, fw, ver, table):
    f = os.path.join(d, f'{gpu}_{op}_{fw}_{ver}_{table}.parquet')
    return pd.read_parquet(f) if os.path.exists(f) else None


def affine(byts, us, peak):
    a = np.vstack([np.ones(len(byts)), byts]).T
    (c, s), *_ = np.linalg.lstsq(a, us, rcond=None)
    return c, 1 / (s * 1e-6 * peak)


def gemm_rows(d, gpu, dtype, kernel, ver):
    """The gemm_perf rows of one precision and kernel, 4-400 MB of weights."""
    t = read(d, gpu, 'gemm', 'vllm', ver, 'gemm_perf')
    if t is None:
        return None
    t = t[(t.gemm_dtype == dtype) & (t.kernel_source == kernel)].drop_duplicates(['m', 'n', 'k'])
    w = t.n * t.k * BPP[dtype]
    return t[(w >= 4e6) & (w <= 400e6)]


def gemm(d, gpu, dtype, kernel, ver='0.24.0'):
    t = gemm_rows(d, gpu, dtype, kernel, ver)
    if t is None:
        return None
    act = 1 if dtype == 'fp8' else 2
    t = t.assign(us=t.latency * 1e3, by=t.n * t.k * BPP[dtype] + t.m * t.k * act + t.m * t.n * 2)
    out = []
    for lo, hi, key in ((1, 64, 1), (1, 64, 64), (128, 128, 128)):
        g = t[(t.m >= lo) & (t.m <= hi)]
        c, e = affine(g.by.values, g.us.values, PEAK[gpu])
        out.append((key, e, c))
    return out


def gemm_flops(d, gpu, dtype, kernel, ver='0.24.0'):
    t = gemm_rows(d, gpu, dtype, kernel, ver)
    if t is None:
        return None
    rate = RATE[gpu][16 if dtype == 'bfloat16' else 8]
    out = []
    for m in (512, 1024, 2048, 4096, 8192, 16384):
        g = t[t.m == m]
        if len(g):
            out.append((m, float((2.0 * g.m * g.n * g.k).sum() / (g.latency.sum() * 1e-3) / rate), len(g)))
    return out


def moe_rows(d, gpu):
    hopper = gpu.startswith('h')
    if hopper:
        t = read(d, gpu, 'moe', 'sglang', '0.5.9', 'moe_perf')
        shape, dt, ks = (7168, 2048, 8, 256), 'fp8_block', 'sglang_fused_moe_triton'
    else:
        t = read(d, gpu, 'moe', 'sglang', '0.5.14', 'moe_perf')
        shape, dt, ks = (3584, 3072, 16, 896), 'w4a16_mxfp4', 'sglang_flashinfer_trtllm_moe'
    if t is None:
        return None, None, None, None
    if not hopper and not ((t.moe_dtype == dt) & (t.hidden_size == 3584)).any():
        dt = 'w4a8_mxfp4_mxfp8'  # B300: the only Kimi K3 lane measured there
    H, I, k, E = shape
    t = t[(t.hidden_size == H) & (t.inter_size == I) & (t.topk == k) & (t.num_experts == E) &
          (t.moe_ep_size == 1) & (t.distribution == 'balanced') & (t.moe_dtype == dt) &
          (t.kernel_source == ks)]
    return t, shape, dt, ks


def grouped_flops(d, gpu):
    t, (H, I, k, E), dt, ks = moe_rows(d, gpu)
    if t is None:
        return None, None
    rate = RATE[gpu][4 if BPP[dt] < 1 else 8]
    tabs = []
    for tp, g in t.groupby('moe_tp_size'):
        g = g.drop_duplicates('num_tokens').set_index('num_tokens')
        pts = [(T, 2.0 * T * k * 3 * H * I / tp / (g.latency[T] * 1e-3) / rate)
               for T in (256, 512, 1024, 2048, 4096, 8192, 16384) if T in g.index]
        tabs.append((3 * H * (I / tp) * BPP[dt] / 1e6, tp, pts))
    tabs.sort()
    return tabs, f'{ks} {dt}'


def grouped(d, gpu):
    t, shape, dt, ks = moe_rows(d, gpu)
    if t is None:
        return None, None
    H, I, k, E = shape
    t = t[t.num_tokens <= 64]
    pts = []
    for tp, g in t.groupby('moe_tp_size'):
        g = g.drop_duplicates('num_tokens')
        T = g.num_tokens.values
        bpe = 3 * H * (I / tp) * BPP[dt]
        by = np.minimum(E, T * k) * bpe + T * k * (H * 2 * 2 + 2 * (I / tp) * 2 * 2)
        c, e = affine(by, g.latency.values * 1e3, PEAK[gpu])
        pts.append((bpe / 1e6, e, c, tp))
    pts.sort()
    return pts, f'{ks} {dt}'


def attention_gqa(d, gpu, ver='0.24.0'):
    t = read(d, gpu, 'attention', 'vllm', ver, 'generation_attention_perf')
    if t is None:
        return None
    if 'window_size' in t:
        t = t[t.window_size == 0]
    t = t[(t.num_heads == 8) & (t.num_key_value_heads == 1) & (t.head_dim == 128) &
          (t.kv_cache_dtype == 'fp8')]
    t = t.assign(ctx=t.isl + t.step).drop_duplicates(['batch_size', 'ctx'])
    t = t[(t.ctx >= 256) & (t.ctx <= 8192) & (t.batch_size <= 128)]
    c, e = affine((t.batch_size * t.ctx * 2 * 128).values, t.latency.values * 1e3, PEAK[gpu])
    return c, e, t.kernel_source.iloc[0]


def attention_mla(d, gpu):
    t = read(d, gpu, 'mla', 'vllm', '0.24.0', 'mla_generation_module_perf')
    if t is None:
        return None
    t = t[(t.num_heads == 8) & (t.kv_cache_dtype == 'fp8') & (t.gemm_type == 'bfloat16')]
    t = t.drop_duplicates(['batch_size', 'step'])
    pts = []
    for b in (1, 2, 4, 8, 16, 32, 64):
        g = t[(t.batch_size == b) & (t.step >= 4096)]
        if len(g) < 3:
            continue
        s, c = np.polyfit((g.batch_size * g.step * 576).values, g.latency.values * 1e3, 1)
        pts.append((b, 1 / (s * 1e-6 * PEAK[gpu])))
    return pts


def allreduce(d, gpu, ver='0.24.0'):
    out = {}
    sizes = [2 ** i for i in range(10, 26)]  # elements: 2 KiB .. 64 MiB
    t = read(d, gpu, 'comm', 'vllm', ver, 'custom_allreduce_perf')
    if t is not None:
        t = t[(t.allreduce_dtype == 'bfloat16') & (t.kernel_source == 'vLLM_custom_graph')]
        out['oneshot'] = (t, f'vLLM {ver} custom all-reduce, CUDA graph')
    f = glob.glob(os.path.join(d, f'{gpu}_comm_nccl_2.29.2_nccl_perf.parquet'))
    if f:
        t = pd.read_parquet(f[0])
        t = t[(t.op_name == 'all_reduce') & (t.nccl_dtype == 'half')]
        out['library'] = (t, 'NCCL 2.29.2 all_reduce, half')
    res = {}
    for impl, (t, what) in out.items():
        lst = []
        for n, g in t.groupby('num_gpus'):
            g = g.drop_duplicates('message_size').set_index('message_size')
            pts = [[2 * m, round(float(g.latency[m]) * 1e3, 2)] for m in sizes if m in g.index]
            lst.append({'ranks': int(n), 'points': pts,
                        'source': f'{COMMIT} data/{gpu}/comm: {what}, {n} GPUs; bytes, us'})
        res[impl] = lst
    return res


def r3(x):
    return round(float(x), 3)


def r4(x):
    return round(float(x), 4)


def flops_table(fl, what):
    n = min(c for _, _, c in fl)
    return {'key': 'tokens', 'points': [[m, r3(e), 0] for m, e, _ in fl],
            'source': f'{what}, {n} shapes of 4-400 MB: sum FLOPs / (sum time x datasheet rate)'}


def main(d):
    ref = {}
    for gpu in PEAK:
        tabs, notes = {}, {}
        bf = gemm(d, gpu, 'bfloat16', 'torch.nn.functional.linear')
        f8 = gemm(d, gpu, 'fp8', 'CutlassFP8ScaledMMLinearKernel')
        if bf:
            tabs['gemm_bf16'] = {'key': 'tokens', 'points': [[k, r3(e), 0] for k, e, c in bf],
                                 'source': f'{COMMIT} data/{gpu}/gemm/vllm/0.24.0 cuBLAS bfloat16, '
                                           f'4-400 MB shapes; intercept {bf[0][2]:.2f} us (M 1-64)'}
        if f8 and bf:
            tabs['gemm_fp8'] = {'key': 'tokens',
                                'points': [[k, r3(e), round(c - cb, 2)]
                                           for (k, e, c), (_, _, cb) in zip(f8, bf)],
                                'source': f'{COMMIT} data/{gpu}/gemm/vllm/0.24.0 CUTLASS fp8 '
                                          f'(dynamic activation quantisation included), 4-400 MB '
                                          f'shapes; extra_us = its intercept - cuBLAS bf16\'s'}
        for name, dt, kern in (('gemm_bf16_flops', 'bfloat16', 'torch.nn.functional.linear'),
                               ('gemm_fp8_flops', 'fp8', 'CutlassFP8ScaledMMLinearKernel')):
            fl = gemm_flops(d, gpu, dt, kern)
            if fl:
                tabs[name] = flops_table(fl, f'{COMMIT} data/{gpu}/gemm/vllm/0.24.0 {kern} {dt}')
        gf, gwhat = grouped_flops(d, gpu)
        if gf:
            tabs['grouped_flops'] = [
                {'expert_shard_mb': r3(mb), 'key': 'tokens', 'points': [[T, r4(e), 0] for T, e in pts],
                 'source': f'{COMMIT} data/{gpu}/moe, {gwhat}, balanced, EP1, TP {tp}: expert GEMM '
                           f'FLOPs / (module time x {RATE[gpu][4 if gpu[0] != "h" else 8] / 1e15:g} PFLOP/s)'}
                for mb, tp, pts in gf]
        gp, what = grouped(d, gpu)
        if gp:
            tabs['grouped'] = {'key': 'expert_shard_mb',
                               'points': [[r3(mb), r3(e), 0] for mb, e, c, tp in gp],
                               'source': f'{COMMIT} data/{gpu}/moe, {what}, balanced, EP1, '
                                         f'TP ' + ','.join(str(tp) for *_, tp in gp) +
                                         '; intercepts ' + ','.join(f'{c:.1f}' for _, _, c, _ in gp) + ' us'}
        ga = attention_gqa(d, gpu)
        if ga:
            tabs['attention_gqa'] = {'key': 'seqs', 'points': [[1, r3(ga[1]), 0]],
                                     'source': f'{COMMIT} data/{gpu}/attention/vllm/0.24.0 '
                                               f'{ga[2]}, 8/1 heads, FP8 KV; intercept {ga[0]:.1f} us'}
        ml = attention_mla(d, gpu)
        if ml:
            tabs['attention_mla'] = {'key': 'seqs', 'points': [[b, r3(e), 0] for b, e in ml],
                                     'source': f'{COMMIT} data/{gpu}/mla/vllm/0.24.0 FLASHINFER_MLA '
                                               f'module, 8 heads, FP8 KV: slope against KV bytes, '
                                               f'contexts 4k-128k'}
        out = {'kernel_tables': {'auto': tabs}, 'allreduce_tables': allreduce(d, gpu)}
        print(f'== {PRESET[gpu]}')
        print(json.dumps(out, indent=1))


# The validation presets (engine/CALIBRATION.md, "External validation"): the
# GPU's dense-model tables from the earliest vLLM build the database measured
# on it, the closest to the external rows' measurement date (2025-10-29).
DATED = {'h100_sxm': '0.14.0', 'h200_sxm': '0.14.0', 'b200_sxm': '0.19.0'}


def dated(d):
    for gpu, ver in DATED.items():
        tabs = {}
        bf = gemm(d, gpu, 'bfloat16', 'vllm_default', ver)
        f8 = gemm(d, gpu, 'fp8', 'vllm_default', ver)
        tabs['gemm_bf16'] = {'key': 'tokens', 'points': [[k, r3(e), 0] for k, e, c in bf],
                             'source': f'{COMMIT} data/{gpu}/gemm/vllm/{ver} bfloat16 (vllm_default), '
                                       f'4-400 MB shapes; intercept {bf[0][2]:.2f} us (M 1-64)'}
        tabs['gemm_fp8'] = {'key': 'tokens',
                            'points': [[k, r3(e), round(c - cb, 2)] for (k, e, c), (_, _, cb) in zip(f8, bf)],
                            'source': f'{COMMIT} data/{gpu}/gemm/vllm/{ver} fp8 (vllm_default, dynamic '
                                      f'activation quantisation included), 4-400 MB shapes; extra_us = '
                                      f'its intercept - bfloat16\'s'}
        for name, dt in (('gemm_bf16_flops', 'bfloat16'), ('gemm_fp8_flops', 'fp8')):
            tabs[name] = flops_table(gemm_flops(d, gpu, dt, 'vllm_default', ver),
                                     f'{COMMIT} data/{gpu}/gemm/vllm/{ver} vllm_default {dt}')
        ga = attention_gqa(d, gpu, ver)
        tabs['attention_gqa'] = {'key': 'seqs', 'points': [[1, r3(ga[1]), 0]],
                                 'source': f'{COMMIT} data/{gpu}/attention/vllm/{ver} '
                                           f'{ga[2]}, 8/1 heads, FP8 KV; intercept {ga[0]:.1f} us'}
        out = {'kernel_tables': {'auto': tabs}, 'allreduce_tables': allreduce(d, gpu, ver)}
        print(f'== {PRESET[gpu]}-vllm{ver.rsplit(".", 1)[0]}')
        print(json.dumps(out, indent=1))


if __name__ == '__main__':
    if len(sys.argv) > 2 and sys.argv[1] == '--dated':
        dated(sys.argv[2])
    else:
        main(sys.argv[1])
