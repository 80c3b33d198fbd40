/* k3_main.cu: agentreplay-kernels, the standalone CUDA driver of the Kimi
 * K3 decode layer (run through `agentreplay kernels ...`).
 *
 *   agentreplay-kernels check [--tp T] [--batches 1,8] [--ctx N] [--seed S]
 *       every kernel of both paths against its C reference (k3layer.c) on
 *       fresh random inputs: each operation starts from the reference's
 *       inputs, its outputs are poisoned first (where it writes them
 *       whole) and compared by NMSE; exit status 1 on any failure.
 *   agentreplay-kernels bench --tp T [-o CALIBRATION.json] [--results FILE]
 *       [--batches 1,2,...,64] [--ctx N] [--contexts 1024,4096,16384]
 *       [--iters N] [--gpu-name NAME] [--with-local-reduction]
 *       times every kernel (a CUDA graph per kernel, replayed; the MLA
 *       attention kernels at each of --contexts, the rest at --ctx) and each
 *       path's whole layer (one graph, side stream overlapped) per batch,
 *       alternating two copies of the layer so the 50 MB L2 holds neither
 *       weights nor routing from the previous replay; measures the
 *       device-to-device copy bandwidth; with two or more GPUs, times the
 *       NCCL all-reduce of the layer's reductions. Writes the engine's
 *       calibration file (engine/CALIBRATION.md) and RESULTS.md-style text.
 *
 * On one GPU the layer runs at its tensor-parallel shard shape and the
 * reductions are local steps: they are neither timed nor written, and the
 * fused kernels that contain a reduction (o_proj_allreduce_residual,
 * moe_combine_allreduce_residual) are written only with
 * --with-local-reduction, since their time then lacks the communication.
 */
#include <cuda_runtime.h>
#include <math.h>
#ifndef K3_NO_NCCL
#include <nccl.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "kernels/k3_gpu.cuh"
#include "kernels/k3calib.h"

#ifndef K3_NO_NCCL
#define ncclCheck(call)                                                       \
    do {                                                                      \
        ncclResult_t r_ = (call);                                             \
        if (r_ != ncclSuccess) {                                              \
            fprintf(stderr, "%s:%d: NCCL error: %s\n", __FILE__, __LINE__,    \
                    ncclGetErrorString(r_));                                  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
#endif

struct opts {
    int tp = 8;
    std::vector<int> batches;
    int ctx = 4096;
    std::vector<int> contexts; /* bench: contexts for the attention kernels */
    int iters = 30;
    uint64_t seed = 0;
    const char *out = NULL;
    const char *results = NULL;
    const char *gpu_name = NULL;
    bool local_reduction = false;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: agentreplay-kernels check [--tp T] [--batches LIST] [--ctx N] [--seed S]\n"
            "       agentreplay-kernels bench --tp T [-o FILE] [--results FILE] [--batches LIST]\n"
            "                                 [--ctx N] [--contexts LIST] [--iters N]\n"
            "                                 [--gpu-name NAME]\n"
            "                                 [--with-local-reduction]\n");
}

static int parse_list(const char *s, std::vector<int> &v, long hi = 64)
{
    v.clear();
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > hi)
            return -1;
        v.push_back((int)x);
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return v.empty() ? -1 : 0;
}

static int parse(int argc, char **argv, opts &o)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--with-local-reduction")) {
            o.local_reduction = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "agentreplay-kernels: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--tp"))
            o.tp = atoi(v);
        else if (!strcmp(a, "--batches")) {
            if (parse_list(v, o.batches)) {
                fprintf(stderr, "agentreplay-kernels: --batches: a list of 1..64\n");
                return -1;
            }
        } else if (!strcmp(a, "--contexts")) {
            if (parse_list(v, o.contexts, 1 << 20)) {
                fprintf(stderr, "agentreplay-kernels: --contexts: a list of 1..1048576\n");
                return -1;
            }
        } else if (!strcmp(a, "--ctx"))
            o.ctx = atoi(v);
        else if (!strcmp(a, "--iters"))
            o.iters = atoi(v);
        else if (!strcmp(a, "--seed"))
            o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "-o"))
            o.out = v;
        else if (!strcmp(a, "--results"))
            o.results = v;
        else if (!strcmp(a, "--gpu-name"))
            o.gpu_name = v;
        else {
            fprintf(stderr, "agentreplay-kernels: unknown option %s\n", a);
            return -1;
        }
    }
    if (o.tp != 1 && o.tp != 2 && o.tp != 4 && o.tp != 8 && o.tp != 16) {
        fprintf(stderr, "agentreplay-kernels: --tp 1, 2, 4, 8 or 16\n");
        return -1;
    }
    if (o.ctx < 1 || o.ctx > 1 << 20 || o.iters < 3) {
        fprintf(stderr, "agentreplay-kernels: --ctx 1..1048576, --iters >= 3\n");
        return -1;
    }
    return 0;
}

static int setup_layer(struct k3_layer *L, int tp, enum k3_kind kind, int batch, int ctx,
                       uint64_t seed, int ctx_max = 0)
{
    struct k3_shape s;
    char err[K3_ERR_LEN];
    if (k3_shape_full(&s, tp, ctx_max > ctx ? ctx_max : ctx, err) ||
        k3_layer_init(L, &s, kind, batch, err)) {
        fprintf(stderr, "agentreplay-kernels: %s\n", err);
        return -1;
    }
    k3_layer_randomize(L, seed, ctx);
    return 0;
}

/* ---- check ----------------------------------------------------------- */

/* Tensors an operation only partly writes or also reads: not poisoned. */
static bool read_modify_write(enum k3_op_id id, enum k3_tid t)
{
    switch (t) {
    case K3_S_KDA_STATE: case K3_S_KDA_CONV: case K3_S_MLA_CACHE: case K3_A_GP: case K3_A_MA:
    case K3_A_LAT: case K3_A_ALIGN: case K3_A_RACC:
        return true;
    case K3_IO_R_OUT:
        return id != K3_OP_INPUT_NORM && id != K3_OP_F_KDA_IN_PROJ && id != K3_OP_F_MLA_IN_PROJ;
    case K3_A_O:
        return id == K3_OP_MLA_OUT_GATE;
    default:
        return false;
    }
}

static double tol_of(enum k3_tid t)
{
    switch (t) {
    case K3_A_LOGITS: case K3_A_G: case K3_A_BETA: return 1e-5;
    case K3_S_KDA_STATE: case K3_S_KDA_CONV: return 1e-6;
    default: return 2e-4;
    }
}

static int compare(const struct k3_layer *L, enum k3_tid t, const void *gpu, double *nmse)
{
    const struct k3_tensor *x = &L->t[t];
    *nmse = 0;
    switch (x->dtype) {
    case K3_DT_BF16:
        *nmse = k3_nmse_bf16((const k3_bf16 *)gpu, (const k3_bf16 *)x->host, x->count);
        return *nmse <= tol_of(t);
    case K3_DT_F32:
        *nmse = k3_nmse_f32((const float *)gpu, (const float *)x->host, x->count);
        return *nmse <= tol_of(t);
    case K3_DT_I32: {
        const int32_t *g = (const int32_t *)gpu, *c = (const int32_t *)x->host;
        size_t n = x->count;
        if (t == K3_A_ALIGN) { /* the defined part only */
            int P = L->batch * L->sh.topk, na = c[0];
            if (g[0] != na)
                return 0;
            for (int i = 0; i < na; i++)
                if (g[1 + i] != c[1 + i] || g[P + 2 + i] != c[P + 2 + i])
                    return 0;
            return !memcmp(g + 2 * P + 3, c + 2 * P + 3, P * 4);
        }
        if (t == K3_A_IDS) /* the same experts, in any order */
            return k3_same_experts(L->batch, L->sh.topk, g, c);
        for (size_t i = 0; i < n; i++)
            *nmse += g[i] != c[i];
        return *nmse == 0;
    }
    default: { /* FP8 cache: decoded values */
        const uint8_t *g = (const uint8_t *)gpu, *c = (const uint8_t *)x->host;
        double num = 0, den = 0;
        for (size_t i = 0; i < x->count; i++) {
            double a = k3_fp8_to_f32(g[i]), b = k3_fp8_to_f32(c[i]);
            if (isnan(a) || isnan(b))
                return *nmse = INFINITY, 0;
            num += (a - b) * (a - b);
            den += b * b;
        }
        *nmse = den > 0 ? num / den : num;
        return *nmse <= 1e-4;
    }
    }
}

static int check_one(int tp, enum k3_kind kind, enum k3_path path, int batch, int ctx,
                     uint64_t seed)
{
    struct k3_layer L;
    if (setup_layer(&L, tp, kind, batch, ctx, seed))
        return -1;
    k3_gpu_upload(&L);
    const struct k3_op *ops;
    int n = k3_path_ops(path, kind, &ops), fails = 0;
    for (int i = 0; i < n; i++) {
        const struct k3_op *op = &ops[i];
        if (op->comm && (op->id == K3_OP_ATTN_ALLREDUCE || op->id == K3_OP_MOE_ALLREDUCE)) {
            op->cpu(&L);
            continue;
        }
        k3_gpu_put_state(&L);
        for (int j = 0; j < 4 && op->out[j] != K3_T_COUNT; j++)
            if (!read_modify_write(op->id, op->out[j]))
                cudaCheck(cudaMemset(L.t[op->out[j]].dev, 0xff,
                                     L.t[op->out[j]].count * k3_dtype_size(L.t[op->out[j]].dtype)));
        k3_gpu_launch(&L, op->id, 0);
        cudaCheck(cudaDeviceSynchronize());
        void *got[4] = {NULL, NULL, NULL, NULL};
        for (int j = 0; j < 4 && op->out[j] != K3_T_COUNT; j++) {
            const struct k3_tensor *t = &L.t[op->out[j]];
            got[j] = malloc(t->count * k3_dtype_size(t->dtype));
            cudaCheck(cudaMemcpy(got[j], t->dev, t->count * k3_dtype_size(t->dtype),
                                 cudaMemcpyDeviceToHost));
        }
        op->cpu(&L);
        for (int j = 0; j < 4 && op->out[j] != K3_T_COUNT; j++) {
            double e;
            int ok = compare(&L, op->out[j], got[j], &e);
            printf("%-8s %-4s B=%-2d %-32s %-14s nmse %-10.3g %s\n", k3_path_name(path),
                   k3_kind_name(kind), batch, k3_op_name(op, batch), L.t[op->out[j]].name, e,
                   ok ? "ok" : "FAIL");
            fails += !ok;
            free(got[j]);
        }
        /* the next operation starts from the reference's state: the CPU
         * op already advanced L's host tensors */
    }
    k3_gpu_free(&L);
    k3_layer_free(&L);
    return fails;
}

/* Whole layers: both paths on the GPU (streams as in the benchmark)
 * against the C standard path from the same initial state. */
static int check_layer(int tp, enum k3_kind kind, int batch, int ctx, uint64_t seed)
{
    struct k3_layer L;
    if (setup_layer(&L, tp, kind, batch, ctx, seed))
        return -1;
    k3_gpu_upload(&L);
    size_t n = (size_t)batch * L.sh.hidden, nid = L.t[K3_A_IDS].count;
    std::vector<k3_bf16> r_std(n), d_std(n), r_fused(n);
    std::vector<int32_t> id_std(nid), id_fused(nid);
    cudaStream_t main_s, side;
    cudaEvent_t fork, join;
    cudaCheck(cudaStreamCreate(&main_s));
    cudaCheck(cudaStreamCreate(&side));
    cudaCheck(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    for (int p = 0; p < K3_PATH_COUNT; p++) {
        k3_gpu_put_state(&L);
        k3_gpu_run_path(&L, (enum k3_path)p, main_s, side, fork, join);
        cudaCheck(cudaStreamSynchronize(main_s));
        cudaCheck(cudaStreamSynchronize(side));
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaMemcpy(p ? r_fused.data() : r_std.data(), L.t[K3_IO_R_OUT].dev, n * 2,
                             cudaMemcpyDeviceToHost));
        if (!p)
            cudaCheck(cudaMemcpy(d_std.data(), L.t[K3_IO_D_OUT].dev, n * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(p ? id_fused.data() : id_std.data(), L.t[K3_A_IDS].dev, nid * 4,
                             cudaMemcpyDeviceToHost));
    }
    k3_layer_run_cpu(&L, K3_STANDARD);
    std::vector<k3_bf16> h(n), h_gpu(n);
    for (size_t i = 0; i < n; i++) {
        h[i] = k3_f32_to_bf16(k3_bf16_to_f32(K3_BF(&L, K3_IO_R_OUT)[i]) +
                              k3_bf16_to_f32(K3_BF(&L, K3_IO_D_OUT)[i]));
        h_gpu[i] = k3_f32_to_bf16(k3_bf16_to_f32(r_std[i]) + k3_bf16_to_f32(d_std[i]));
    }
    const int32_t *id_cpu = K3_I32(&L, K3_A_IDS);
    int fails = 0;
    struct {
        const char *what;
        const k3_bf16 *got;
        const k3_bf16 *want;
        bool same_routing;
    } cmp[3] = {
        {"GPU standard vs C standard", h_gpu.data(), h.data(),
         k3_same_experts(batch, L.sh.topk, id_std.data(), id_cpu) != 0},
        {"GPU fused vs C standard", r_fused.data(), h.data(),
         k3_same_experts(batch, L.sh.topk, id_fused.data(), id_cpu) != 0},
        {"GPU fused vs GPU standard", r_fused.data(), h_gpu.data(),
         k3_same_experts(batch, L.sh.topk, id_fused.data(), id_std.data()) != 0},
    };
    for (auto &c : cmp) {
        double e = k3_nmse_bf16(c.got, c.want, n);
        bool ok = c.same_routing ? e <= 1e-3 : std::isfinite(e);
        printf("layer    %-4s B=%-2d %-32s nmse %-10.3g %s%s\n", k3_kind_name(kind), batch, c.what, e,
               ok ? "ok" : "FAIL", c.same_routing ? "" : " (a near tie routed a token differently)");
        fails += !ok;
    }
    cudaCheck(cudaEventDestroy(fork));
    cudaCheck(cudaEventDestroy(join));
    cudaCheck(cudaStreamDestroy(main_s));
    cudaCheck(cudaStreamDestroy(side));
    k3_gpu_free(&L);
    k3_layer_free(&L);
    return fails;
}

static int cmd_check(const opts &o)
{
    std::vector<int> batches = o.batches.empty() ? std::vector<int>{1, 8} : o.batches;
    uint64_t seed = o.seed ? o.seed : (uint64_t)time(NULL);
    int ctx = o.ctx > 1024 ? 1024 : o.ctx;
    printf("check: tp %d, context %d, seed %llu (fresh inputs per case)\n", o.tp, ctx,
           (unsigned long long)seed);
    int fails = 0;
    for (int b : batches)
        for (int k = 0; k < K3_KIND_COUNT; k++)
            for (int p = 0; p < K3_PATH_COUNT; p++) {
                int f = check_one(o.tp, (enum k3_kind)k, (enum k3_path)p, b, ctx, seed++);
                if (f < 0)
                    return 2;
                fails += f;
            }
    for (int b : batches)
        for (int k = 0; k < K3_KIND_COUNT; k++) {
            int f = check_layer(o.tp, (enum k3_kind)k, b, ctx, seed++);
            if (f < 0)
                return 2;
            fails += f;
        }
    printf("%s: %d comparison(s) failed\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}

/* ---- bench ----------------------------------------------------------- */

#define NSETS 2

struct timing {
    std::vector<float> us;
    float median() const
    {
        std::vector<float> v = us;
        std::sort(v.begin(), v.end());
        return v.empty() ? 0 : v[v.size() / 2];
    }
};

/* Median microseconds of replaying graphs[i % NSETS]. */
static float time_graphs(cudaGraphExec_t *g, int iters, cudaStream_t s)
{
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) /* warm-up */
        cudaCheck(cudaGraphLaunch(g[i % NSETS], s));
    timing t;
    for (int i = 0; i < iters; i++) {
        cudaCheck(cudaEventRecord(a, s));
        cudaCheck(cudaGraphLaunch(g[i % NSETS], s));
        cudaCheck(cudaEventRecord(b, s));
        cudaCheck(cudaEventSynchronize(b));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        t.us.push_back(ms * 1000.0f);
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return t.median();
}

static double copy_bandwidth(void)
{
    size_t n = (size_t)2 << 30;
    void *a, *b;
    cudaCheck(cudaMalloc(&a, n));
    cudaCheck(cudaMalloc(&b, n));
    cudaCheck(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cudaCheck(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    timing t;
    for (int i = 0; i < 10; i++) {
        cudaCheck(cudaEventRecord(e0));
        cudaCheck(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice));
        cudaCheck(cudaEventRecord(e1));
        cudaCheck(cudaEventSynchronize(e1));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        t.us.push_back(ms * 1000.0f);
    }
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    return 2.0 * n / (t.median() * 1e-6); /* bytes read + written per second */
}

struct point {
    int batch, context;
    float us;
};

/* Sequence b's new token at position ctx - 1 - (b % 3), as
 * k3_layer_randomize places them: the batch's mean context is about ctx. */
static void set_context(struct k3_layer *L, int ctx)
{
    if (L->kind != K3_MLA)
        return;
    for (size_t b = 0; b < L->t[K3_S_MLA_POS].count; b++) {
        int p = ctx - 1 - (int)(b % 3);
        K3_I32(L, K3_S_MLA_POS)[b] = p < 0 ? 0 : p;
    }
    k3_gpu_put(L, K3_S_MLA_POS);
}
struct entry {
    const char *path, *kind, *kernel;
    bool attention; /* depends on the context */
    std::vector<point> pts;
};

static entry *find_entry(std::vector<entry> &es, const char *path, const char *kind,
                         const char *kernel)
{
    for (auto &e : es)
        if (!strcmp(e.path, path) && !strcmp(e.kind, kind) && !strcmp(e.kernel, kernel))
            return &e;
    es.push_back(entry{path, kind, kernel, false, {}});
    return &es.back();
}

#ifndef K3_NO_NCCL
/* NCCL all-reduce of B x hidden BF16 over n GPUs (median microseconds). */
static float nccl_allreduce_us(int ngpu, size_t count, int iters)
{
    std::vector<ncclComm_t> comms(ngpu);
    std::vector<int> devs(ngpu);
    std::vector<void *> buf(ngpu);
    std::vector<cudaStream_t> st(ngpu);
    for (int i = 0; i < ngpu; i++)
        devs[i] = i;
    ncclCheck(ncclCommInitAll(comms.data(), ngpu, devs.data()));
    for (int i = 0; i < ngpu; i++) {
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaMalloc(&buf[i], count * 2));
        cudaCheck(cudaMemset(buf[i], 0x3c, count * 2));
        cudaCheck(cudaStreamCreate(&st[i]));
    }
    timing t;
    cudaEvent_t a, b;
    cudaCheck(cudaSetDevice(0));
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    for (int it = 0; it < iters + 3; it++) {
        cudaCheck(cudaSetDevice(0));
        cudaCheck(cudaEventRecord(a, st[0]));
        ncclCheck(ncclGroupStart());
        for (int i = 0; i < ngpu; i++)
            ncclCheck(ncclAllReduce(buf[i], buf[i], count, ncclBfloat16, ncclSum, comms[i], st[i]));
        ncclCheck(ncclGroupEnd());
        cudaCheck(cudaSetDevice(0));
        cudaCheck(cudaEventRecord(b, st[0]));
        for (int i = 0; i < ngpu; i++) {
            cudaCheck(cudaSetDevice(i));
            cudaCheck(cudaStreamSynchronize(st[i]));
        }
        float ms;
        cudaCheck(cudaSetDevice(0));
        cudaCheck(cudaEventElapsedTime(&ms, a, b));
        if (it >= 3)
            t.us.push_back(ms * 1000.0f);
    }
    for (int i = 0; i < ngpu; i++) {
        cudaCheck(cudaSetDevice(i));
        cudaCheck(cudaFree(buf[i]));
        cudaCheck(cudaStreamDestroy(st[i]));
        ncclCheck(ncclCommDestroy(comms[i]));
    }
    cudaCheck(cudaSetDevice(0));
    return t.median();
}

/* ---- the layer across GPUs: reductions through NCCL ------------------ */

#define TP_MAX 16

/* n ranks, one per GPU, each with its own shard of the layer (weights
 * drawn per rank); reductions run through NCCL on the ranks' streams. */
struct tp_group {
    int n;
    ncclComm_t comm[TP_MAX];
    cudaStream_t st[TP_MAX], side[TP_MAX];
    cudaEvent_t fork[TP_MAX], join[TP_MAX], comm_ev[TP_MAX];
    struct k3_layer L[TP_MAX];
};

static void tp_allreduce(tp_group &g, enum k3_tid t, size_t count)
{
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < g.n; r++)
        ncclCheck(ncclAllReduce(g.L[r].t[t].dev, g.L[r].t[t].dev, count, ncclBfloat16, ncclSum,
                                g.comm[r], g.st[r]));
    ncclCheck(ncclGroupEnd());
}

/* In place, row by row: rank r's latent columns r*Ls.. to every rank. */
static void tp_latent_allgather(tp_group &g)
{
    const struct k3_shape *s = &g.L[0].sh;
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < g.n; r++)
        for (int b = 0; b < g.L[r].batch; b++) {
            k3_bf16 *row = (k3_bf16 *)g.L[r].t[K3_A_LAT].dev + (size_t)b * s->latent;
            ncclCheck(ncclAllGather(row + (size_t)r * s->latent_shard, row, s->latent_shard,
                                    ncclBfloat16, g.comm[r], g.st[r]));
        }
    ncclCheck(ncclGroupEnd());
}

/* In place, row by row: the experts' partial latent sums, each rank
 * keeping its columns r*Ls.. summed over ranks. */
static void tp_latent_reduce_scatter(tp_group &g)
{
    const struct k3_shape *s = &g.L[0].sh;
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < g.n; r++)
        for (int b = 0; b < g.L[r].batch; b++) {
            float *row = (float *)g.L[r].t[K3_A_RACC].dev + (size_t)b * s->latent;
            ncclCheck(ncclReduceScatter(row, row + (size_t)r * s->latent_shard, s->latent_shard,
                                        ncclFloat, ncclSum, g.comm[r], g.st[r]));
        }
    ncclCheck(ncclGroupEnd());
}

/* One layer on every rank. The fused path's reductions cannot live inside
 * its kernels here (NCCL is its own launch): its output projection and
 * MoE combine write their partials, NCCL reduces them, a residual add
 * follows; during the MoE reduction each rank prefetches the next
 * layer's first weights into L2 on its side stream. */
static void tp_run_path(tp_group &g, enum k3_path p)
{
    const struct k3_op *ops;
    enum k3_kind kind = g.L[0].kind;
    int nops = k3_path_ops(p, kind, &ops), B = g.L[0].batch;
    size_t BH = (size_t)B * g.L[0].sh.hidden;
    bool forked = false;
    for (int i = 0; i < nops; i++) {
        const struct k3_op *op = &ops[i];
        bool last = i == nops - 1;
        if (forked && last)
            for (int r = 0; r < g.n; r++) {
                cudaCheck(cudaSetDevice(r));
                cudaCheck(cudaEventRecord(g.join[r], g.side[r]));
                cudaCheck(cudaStreamWaitEvent(g.st[r], g.join[r], 0));
            }
        switch (op->id) {
        case K3_OP_ATTN_ALLREDUCE:
            tp_allreduce(g, K3_A_ATT, BH);
            break;
        case K3_OP_MOE_ALLREDUCE:
            tp_allreduce(g, K3_IO_D_OUT, BH);
            break;
        case K3_OP_F_O_PROJ_AR_RESIDUAL:
        case K3_OP_F_MOE_COMBINE_AR_RESIDUAL: {
            bool moe = op->id == K3_OP_F_MOE_COMBINE_AR_RESIDUAL;
            enum k3_tid part = moe ? K3_IO_D_OUT : K3_A_ATT;
            for (int r = 0; r < g.n; r++) {
                cudaCheck(cudaSetDevice(r));
                k3_gpu_launch(&g.L[r], moe ? K3_OP_MOE_COMBINE : K3_OP_ATTN_O_PROJ, g.st[r]);
                if (moe) { /* prefetch while the reduction runs */
                    enum k3_tid first = kind == K3_KDA ? K3_W_KDA_QKV : K3_W_MLA_A;
                    cudaCheck(cudaEventRecord(g.comm_ev[r], g.st[r]));
                    cudaCheck(cudaStreamWaitEvent(g.side[r], g.comm_ev[r], 0));
                    k3_gpu_prefetch_l2(g.L[r].t[first].dev,
                                       g.L[r].t[first].count * k3_dtype_size(g.L[r].t[first].dtype),
                                       g.side[r]);
                }
            }
            tp_allreduce(g, part, BH);
            for (int r = 0; r < g.n; r++) {
                cudaCheck(cudaSetDevice(r));
                k3_gpu_residual_add((k3_bf16 *)g.L[r].t[K3_IO_R_OUT].dev,
                                    (const k3_bf16 *)g.L[r].t[part].dev, BH, g.st[r]);
            }
            break;
        }
        default:
            for (int r = 0; r < g.n; r++) {
                cudaCheck(cudaSetDevice(r));
                k3_gpu_launch(&g.L[r], op->id, op->side_stream ? g.side[r] : g.st[r]);
            }
        }
        if (op->id == K3_OP_MOE_LATENT_DOWN || op->id == K3_OP_F_MOE_LATENT_DOWN)
            tp_latent_allgather(g);
        if (op->id == K3_OP_MOE_DOWN || op->id == K3_OP_F_MOE_DOWN)
            tp_latent_reduce_scatter(g);
        if (op->id == K3_OP_F_O_PROJ_AR_RESIDUAL && !forked) {
            for (int r = 0; r < g.n; r++) {
                cudaCheck(cudaSetDevice(r));
                cudaCheck(cudaEventRecord(g.fork[r], g.st[r]));
                cudaCheck(cudaStreamWaitEvent(g.side[r], g.fork[r], 0));
            }
            forked = true;
        }
    }
    /* the side streams end inside the layer (prefetch included) */
    for (int r = 0; r < g.n; r++) {
        cudaCheck(cudaSetDevice(r));
        cudaCheck(cudaEventRecord(g.join[r], g.side[r]));
        cudaCheck(cudaStreamWaitEvent(g.st[r], g.join[r], 0));
    }
    cudaCheck(cudaSetDevice(0));
}

/* Median layer time (us) of both paths across n GPUs for each batch,
 * measured on rank 0's stream (the reductions tie the ranks together);
 * launched from the host, without CUDA graphs. */
static int tp_layer_bench(const opts &o, int n, const std::vector<int> &batches, uint64_t seed,
                          FILE *res)
{
    fprintf(res, "\nThe layer across %d GPUs (reductions through NCCL, host launches, no "
                 "graphs):\n\n| kind | batch | standard us | fused us |\n|---|---|---|---|\n", n);
    int bmax = *std::max_element(batches.begin(), batches.end());
    for (int k = 0; k < K3_KIND_COUNT; k++) {
        tp_group g;
        g.n = n;
        int devs[TP_MAX];
        for (int r = 0; r < n; r++)
            devs[r] = r;
        ncclCheck(ncclCommInitAll(g.comm, n, devs));
        for (int r = 0; r < n; r++) {
            cudaCheck(cudaSetDevice(r));
            if (setup_layer(&g.L[r], o.tp, (enum k3_kind)k, bmax, o.ctx, seed + 101 * r))
                return -1;
            g.L[r].rank = r;
            k3_gpu_upload(&g.L[r]);
            cudaCheck(cudaStreamCreateWithFlags(&g.st[r], cudaStreamNonBlocking));
            cudaCheck(cudaStreamCreateWithFlags(&g.side[r], cudaStreamNonBlocking));
            cudaCheck(cudaEventCreateWithFlags(&g.fork[r], cudaEventDisableTiming));
            cudaCheck(cudaEventCreateWithFlags(&g.join[r], cudaEventDisableTiming));
            cudaCheck(cudaEventCreateWithFlags(&g.comm_ev[r], cudaEventDisableTiming));
        }
        cudaEvent_t a, b;
        cudaCheck(cudaSetDevice(0));
        cudaCheck(cudaEventCreate(&a));
        cudaCheck(cudaEventCreate(&b));
        for (int bs : batches) {
            float med[K3_PATH_COUNT];
            for (int r = 0; r < n; r++) {
                cudaCheck(cudaSetDevice(r));
                g.L[r].batch = bs;
                k3_gpu_put_state(&g.L[r]);
            }
            for (int p = 0; p < K3_PATH_COUNT; p++) {
                timing t;
                for (int it = 0; it < o.iters + 3; it++) {
                    cudaCheck(cudaSetDevice(0));
                    cudaCheck(cudaEventRecord(a, g.st[0]));
                    tp_run_path(g, (enum k3_path)p);
                    cudaCheck(cudaEventRecord(b, g.st[0]));
                    for (int r = 0; r < n; r++) {
                        cudaCheck(cudaSetDevice(r));
                        cudaCheck(cudaStreamSynchronize(g.st[r]));
                    }
                    cudaCheck(cudaSetDevice(0));
                    float ms;
                    cudaCheck(cudaEventElapsedTime(&ms, a, b));
                    if (it >= 3)
                        t.us.push_back(ms * 1000.0f);
                }
                med[p] = t.median();
            }
            fprintf(res, "| %s | %d | %.2f | %.2f |\n", k3_kind_name((enum k3_kind)k), bs, med[0],
                    med[1]);
        }
        cudaCheck(cudaEventDestroy(a));
        cudaCheck(cudaEventDestroy(b));
        for (int r = 0; r < n; r++) {
            cudaCheck(cudaSetDevice(r));
            cudaCheck(cudaEventDestroy(g.fork[r]));
            cudaCheck(cudaEventDestroy(g.join[r]));
            cudaCheck(cudaEventDestroy(g.comm_ev[r]));
            cudaCheck(cudaStreamDestroy(g.st[r]));
            cudaCheck(cudaStreamDestroy(g.side[r]));
            k3_gpu_free(&g.L[r]);
            k3_layer_free(&g.L[r]);
            ncclCheck(ncclCommDestroy(g.comm[r]));
        }
        cudaCheck(cudaSetDevice(0));
    }
    return 0;
}
#endif

static int cmd_bench(const opts &o)
{
    std::vector<int> batches =
        o.batches.empty() ? std::vector<int>{1, 2, 4, 8, 16, 32, 64} : o.batches;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    int ngpu = 0;
    cudaCheck(cudaGetDeviceCount(&ngpu));
    char gpu[64];
    if (o.gpu_name)
        snprintf(gpu, sizeof gpu, "%s", o.gpu_name);
    else
        k3_calib_gpu_name(prop.name, gpu, sizeof gpu);
    uint64_t seed = o.seed ? o.seed : (uint64_t)time(NULL);
    std::vector<int> contexts =
        o.contexts.empty() ? std::vector<int>{1024, 4096, 16384} : o.contexts;
    int ctx_max = *std::max_element(contexts.begin(), contexts.end());
    double bw = copy_bandwidth();
    FILE *res = o.results ? fopen(o.results, "w") : stdout;
    if (!res) {
        fprintf(stderr, "agentreplay-kernels: cannot write %s\n", o.results);
        return 2;
    }
    fprintf(res, "# Kimi K3 decode layer on %s (tp %d shard, context %d)\n\n", prop.name, o.tp,
            o.ctx);
    fprintf(res, "Device-to-device copy bandwidth: %.0f GB/s (read + write).\n", bw / 1e9);
    fprintf(res, "GPUs visible: %d; %s\n\n", ngpu,
            ngpu >= 2 ? "reductions timed through NCCL"
                      : "one GPU: the layer runs at its shard shape and reductions are local "
                        "steps (not timed)");
    std::vector<entry> entries;
    cudaStream_t main_s, side;
    cudaCheck(cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    cudaCheck(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    for (int k = 0; k < K3_KIND_COUNT; k++) {
        fprintf(res, "## %s layer\n\n", k3_kind_name((enum k3_kind)k));
        fprintf(res, "| path | kernel | batch | context | us | GB/s | %% of copy |\n"
                     "|---|---|---|---|---|---|---|\n");
        std::vector<float> layer_us[K3_PATH_COUNT];
        /* Two copies of the layer at the largest batch; a smaller batch
         * uses the leading rows of every [B][...] tensor. */
        int bmax = *std::max_element(batches.begin(), batches.end());
        struct k3_layer L[NSETS];
        for (int s = 0; s < NSETS; s++) {
            if (setup_layer(&L[s], o.tp, (enum k3_kind)k, bmax, o.ctx, seed + s, ctx_max))
                return 2;
            k3_gpu_upload(&L[s]);
        }
        for (int b : batches) {
            for (int s = 0; s < NSETS; s++) {
                L[s].batch = b;
                k3_gpu_put_state(&L[s]); /* fresh inputs and state per batch */
            }
            for (int p = 0; p < K3_PATH_COUNT; p++) {
                const struct k3_op *ops;
                int n = k3_path_ops((enum k3_path)p, (enum k3_kind)k, &ops);
                const char *pname = k3_calib_path_name((enum k3_path)p);
                for (int i = 0; i < n; i++) {
                    const struct k3_op *op = &ops[i];
                    if (op->id == K3_OP_ATTN_ALLREDUCE || op->id == K3_OP_MOE_ALLREDUCE)
                        continue;
                    bool attn = op->id == K3_OP_MLA_ATTENTION || op->id == K3_OP_F_MLA_ATTENTION;
                    /* attention at every context; the others at the default */
                    size_t nctx = attn ? contexts.size() : 1;
                    for (size_t c = 0; c < nctx; c++) {
                        int cx = attn ? contexts[c] : o.ctx;
                        if (attn)
                            for (int s = 0; s < NSETS; s++)
                                set_context(&L[s], cx);
                        cudaGraphExec_t g[NSETS];
                        for (int s = 0; s < NSETS; s++) {
                            cudaGraph_t gr;
                            cudaCheck(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal));
                            k3_gpu_launch(&L[s], op->id, main_s);
                            cudaCheck(cudaStreamEndCapture(main_s, &gr));
                            cudaCheck(cudaGraphInstantiate(&g[s], gr, 0));
                            cudaCheck(cudaGraphDestroy(gr));
                        }
                        float us = time_graphs(g, o.iters, main_s);
                        for (int s = 0; s < NSETS; s++)
                            cudaCheck(cudaGraphExecDestroy(g[s]));
                        k3_gpu_get(&L[0], K3_A_IDS);
                        double bytes, flops;
                        k3_op_cost(&L[0], op->id, &bytes, &flops);
                        double gbs = bytes / (us * 1e-6) / 1e9;
                        fprintf(res, "| %s | %s | %d | %d | %.2f | %.0f | %.0f |\n",
                                k3_path_name((enum k3_path)p), k3_op_name(op, b), b, cx, us, gbs,
                                100.0 * gbs * 1e9 / bw);
                        if (op->comm && !o.local_reduction)
                            continue;
                        entry *e = find_entry(entries, pname, k3_kind_name((enum k3_kind)k),
                                              k3_op_name(op, b));
                        e->attention = attn;
                        e->pts.push_back(point{b, cx, us});
                    }
                    if (attn)
                        for (int s = 0; s < NSETS; s++)
                            set_context(&L[s], o.ctx);
                }
                /* the whole layer as one graph, side stream overlapped */
                cudaGraphExec_t g[NSETS];
                for (int s = 0; s < NSETS; s++) {
                    cudaGraph_t gr;
                    cudaCheck(cudaStreamBeginCapture(main_s, cudaStreamCaptureModeGlobal));
                    k3_gpu_run_path(&L[s], (enum k3_path)p, main_s, side, fork, join);
                    cudaCheck(cudaStreamEndCapture(main_s, &gr));
                    cudaCheck(cudaGraphInstantiate(&g[s], gr, 0));
                    cudaCheck(cudaGraphDestroy(gr));
                }
                layer_us[p].push_back(time_graphs(g, o.iters, main_s));
                for (int s = 0; s < NSETS; s++)
                    cudaCheck(cudaGraphExecDestroy(g[s]));
            }
        }
        for (int s = 0; s < NSETS; s++) {
            k3_gpu_free(&L[s]);
            k3_layer_free(&L[s]);
        }
        fprintf(res, "\nPer-layer time (one graph per layer, reductions local):\n\n");
        fprintf(res, "| batch | standard us | fused us | speed-up |\n|---|---|---|---|\n");
        for (size_t i = 0; i < batches.size(); i++)
            fprintf(res, "| %d | %.2f | %.2f | %.2fx |\n", batches[i], layer_us[0][i],
                    layer_us[1][i], layer_us[0][i] / layer_us[1][i]);
        fprintf(res, "\n");
    }
#ifdef K3_NO_NCCL
    if (ngpu >= 2)
        fprintf(res, "%d GPUs present, but this build has no NCCL: reductions not timed.\n", ngpu);
#else
    if (ngpu >= 2) {
        int n = ngpu < o.tp ? ngpu : o.tp;
        fprintf(res, "NCCL all-reduce over %d GPUs (BF16, batch x 7168):\n\n| batch | us |\n|---|---|\n", n);
        for (int b : batches) {
            float us = nccl_allreduce_us(n, (size_t)b * 7168, o.iters);
            fprintf(res, "| %d | %.2f |\n", b, us);
            for (int k = 0; k < K3_KIND_COUNT; k++) {
                find_entry(entries, "auto", k3_kind_name((enum k3_kind)k), "attn_allreduce")
                    ->pts.push_back(point{b, 0, us});
                find_entry(entries, "auto", k3_kind_name((enum k3_kind)k), "moe_allreduce")
                    ->pts.push_back(point{b, 0, us});
            }
        }
        if (n != o.tp)
            fprintf(res, "\n(%d GPUs present: the all-reduce spans %d, not tp %d)\n", ngpu, n, o.tp);
        /* the whole layer across GPUs needs one GPU per rank */
        if (n == o.tp && n <= TP_MAX) {
            if (tp_layer_bench(o, n, batches, seed, res))
                return 2;
        } else {
            fprintf(res, "\nThe layer across GPUs needs tp = %d GPUs; %d present.\n", o.tp, ngpu);
        }
    }
#endif
    if (res != stdout)
        fclose(res);
    if (o.out) {
        FILE *f = fopen(o.out, "w");
        if (!f) {
            fprintf(stderr, "agentreplay-kernels: cannot write %s\n", o.out);
            return 2;
        }
        char source[512];
        snprintf(source, sizeof source,
                 "agentreplay-kernels bench on 1 x %s: tp %d shard shapes, context %d (attention "
                 "kernels: per point), median of "
                 "%d CUDA-graph replays alternating two layer copies; copy bandwidth %.0f GB/s",
                 prop.name, o.tp, o.ctx, o.iters, bw / 1e9);
        k3_calib_begin(f, gpu, o.tp, source);
        for (size_t i = 0; i < entries.size(); i++) {
            const entry &e = entries[i];
            std::vector<int> bs, cs;
            std::vector<double> us;
            for (const point &pt : e.pts) {
                bs.push_back(pt.batch);
                cs.push_back(pt.context);
                us.push_back(pt.us);
            }
            k3_calib_entry(f, i == 0, e.path, e.kind, e.kernel, bs.data(),
                           e.attention ? cs.data() : NULL, us.data(), (int)bs.size());
        }
        k3_calib_end(f);
        fclose(f);
        fprintf(stderr, "wrote %s (%zu kernels)\n", o.out, entries.size());
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "check") && strcmp(argv[1], "bench"))) {
        usage();
        return 2;
    }
    opts o;
    if (parse(argc, argv, o)) {
        usage();
        return 2;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "agentreplay-kernels: no CUDA GPU present\n");
        return 3;
    }
    return !strcmp(argv[1], "check") ? cmd_check(o) : cmd_bench(o);
}
