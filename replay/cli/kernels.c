/* kernels.c: `agentreplay kernels ...`, the front of the Kimi K3
 * decode-layer kernels (kernels/README.md).
 *
 *   kernels list [--tp T] [--batch B] [--ctx N] [--bw GB/s]
 *                                the kernel sequence of each path and layer
 *                                kind (the names calibration files use),
 *                                with each kernel's least bytes and floor
 *   kernels cpu-check [--batch B] [--seed S] [--tp T]
 *                                both paths in C, at reduced shapes or
 *                                (--tp) the full shard shapes: the layer
 *                                output of each, compared (no GPU)
 *   kernels check | bench ...    run the CUDA driver
 *                                build/kernels/agentreplay-kernels (built
 *                                by `make kernels` where nvcc exists);
 *                                its options are passed through
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/k3calib.h"
#include "kernels/k3layer.h"
#include "replay/cli/cli.h"
#include "traces/base/err.h"
#include "traces/base/mem.h"
#include "traces/base/file.h"

#define DRIVER "build/kernels/agentreplay-kernels"

#define ABOUT                                                                              \
    "One Kimi K3 decode layer (KDA and MLA, each with its MoE block) at\n"                  \
    "tensor-parallel shard shapes, on the standard path and the fused one."

struct list_opts {
    int tp, batch, ctx, bw_gbs;
};

static void list_init(void *opts)
{
    *(struct list_opts *)opts = (struct list_opts){.tp = 8, .batch = 1, .ctx = 4096, .bw_gbs = 4300};
}

static const struct flag list_flags[] = {
    {"--tp", 0, FLAG_INT, FLAG_AT(struct list_opts, tp), "T", "tensor-parallel shard", .min = 1,
     .max = 16},
    {"--batch", 0, FLAG_INT, FLAG_AT(struct list_opts, batch), "B", "decoding requests", .min = 1,
     .max = 64},
    {"--ctx", 0, FLAG_INT, FLAG_AT(struct list_opts, ctx), "N", "context tokens", .min = 1,
     .max = 1 << 20},
    {"--bw", 0, FLAG_INT, FLAG_AT(struct list_opts, bw_gbs), "GB/s",
     "memory bandwidth of the floor (one H200's copy)", .min = 1, .max = 100000},
    FLAG_END,
};

const struct flag_spec kernels_list_spec = {
    .usage = "agentreplay kernels list [--tp T] [--batch B] [--ctx N] [--bw GB/s]",
    .about = ABOUT "\nThe kernel sequence of each path and layer kind (the names calibration\n"
                   "files use), with each kernel's least bytes and floor time.",
    .size = sizeof(struct list_opts),
    .init = list_init,
    .groups = {{"list", list_flags, 0}},
};

struct cpu_check_opts {
    int batch, seed, tp;
};

static void cpu_check_init(void *opts)
{
    *(struct cpu_check_opts *)opts = (struct cpu_check_opts){.batch = 4, .seed = 1, .tp = 0};
}

static const struct flag cpu_check_flags[] = {
    {"--batch", 0, FLAG_INT, FLAG_AT(struct cpu_check_opts, batch), "B", "decoding requests",
     .min = 1, .max = 64},
    {"--seed", 0, FLAG_INT, FLAG_AT(struct cpu_check_opts, seed), "S", "random weights' seed",
     .min = 0, .max = 1 << 30},
    {"--tp", 0, FLAG_INT, FLAG_AT(struct cpu_check_opts, tp), "T", "the full shard shapes of TP T",
     .def = "reduced shapes", .min = 1, .max = 16},
    FLAG_END,
};

const struct flag_spec kernels_cpu_check_spec = {
    .usage = "agentreplay kernels cpu-check [--batch B] [--seed S] [--tp T]",
    .about = ABOUT "\nBoth paths in C, at reduced shapes or the full shard shapes: the layer\n"
                   "output of each, compared (no GPU).",
    .size = sizeof(struct cpu_check_opts),
    .init = cpu_check_init,
    .groups = {{"cpu-check", cpu_check_flags, 0}},
};

/* check and bench pass their arguments to the CUDA driver, which parses
 * them; only --help is answered here. */
struct driver_opts {
    int unused;
};

#define DRIVER_NOTES                                                                       \
    "The arguments go to the CUDA driver " DRIVER " (built by\n"                             \
    "`make kernels` where nvcc exists), which needs a GPU."

const struct flag_spec kernels_check_spec = {
    .usage = "agentreplay kernels check [--tp T] [--batches LIST] [--ctx N] [--seed S]",
    .about = ABOUT "\nThe CUDA kernels of both paths against the C reference.",
    .operands = "ARGS...",
    .max_operands = -1,
    .size = sizeof(struct driver_opts),
    .notes = DRIVER_NOTES,
};

const struct flag_spec kernels_bench_spec = {
    .usage = "agentreplay kernels bench --tp T [-o CALIBRATION.json] [--results FILE]\n"
             "    [--batches LIST] [--ctx N] [--contexts LIST] [--iters N]\n"
             "    [--gpu-name NAME] [--with-local-reduction]",
    .about = ABOUT "\nThe CUDA kernels timed: the calibration file the engine loads with\n"
                   "--calibration (engine/CALIBRATION.md).",
    .operands = "ARGS...",
    .max_operands = -1,
    .size = sizeof(struct driver_opts),
    .notes = DRIVER_NOTES,
};

/* The kernel lists with each kernel's least bytes and its floor time at a
 * bandwidth: the memory-bound roofline a measured time is judged against.
 * Default bandwidth 4300 GB/s: the device-to-device copy measured on one
 * H200 (../shared/reference/hardware.md). */
int kernels_cmd_list(int argc, char **argv)
{
    struct list_opts o;
    int rc = cli_parse("kernels list", &kernels_list_spec, &o, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    int tp = o.tp, batch = o.batch, ctx = o.ctx, bw_gbs = o.bw_gbs;
    struct k3_shape s;
    char err[K3_ERR_LEN];
    if (k3_shape_full(&s, tp, ctx, err)) {
        fprintf(stderr, "agentreplay kernels list: %s\n", err);
        return EXIT_BADINPUT;
    }
    double ue = k3_experts_touched(&s, batch), bw = bw_gbs * 1e9;
    printf("Kimi K3 decode layer, tp %d shard: %d KDA heads of %d, %d MLA heads, expert "
           "intermediate %d, latent %d (%d projected on this rank)\n",
           tp, s.kda_heads, s.head_dim, s.mla_heads, s.expert_inter, s.latent, s.latent_shard);
    printf("batch %d, context %d, %.0f distinct experts expected; floor = least bytes / %d GB/s\n\n",
           batch, ctx, ue, bw_gbs);
    for (int p = 0; p < K3_PATH_COUNT; p++)
        for (int k = 0; k < K3_KIND_COUNT; k++) {
            const struct k3_op *ops;
            int n = k3_path_ops((enum k3_path)p, (enum k3_kind)k, &ops);
            printf("%s (%s) %s: %d kernels\n", k3_path_name((enum k3_path)p),
                   k3_calib_path_name((enum k3_path)p), k3_kind_name((enum k3_kind)k), n);
            printf("  %2s %-34s %10s %9s\n", "#", "kernel", "MB", "floor us");
            double total = 0;
            for (int i = 0; i < n; i++) {
                double by, fl;
                k3_op_cost_shape(&s, (enum k3_kind)k, batch, ue, (double)batch * ctx, ops[i].id,
                                 &by, &fl);
                const char *flag = ops[i].side_stream ? "  side stream"
                                   : ops[i].comm      ? "  reduction (local on one GPU)"
                                                      : "";
                printf("  %2d %-34s %10.3f %9.2f%s\n", i + 1, k3_op_name(&ops[i], batch), by / 1e6,
                       by / bw * 1e6, flag);
                if (!(ops[i].id == K3_OP_ATTN_ALLREDUCE || ops[i].id == K3_OP_MOE_ALLREDUCE))
                    total += by;
            }
            printf("  %-37s %10.3f %9.2f\n\n", "layer (reductions excluded)", total / 1e6,
                   total / bw * 1e6);
        }
    return EXIT_OK;
}

int kernels_cmd_cpu_check(int argc, char **argv)
{
    struct cpu_check_opts o;
    int rc = cli_parse("kernels cpu-check", &kernels_cpu_check_spec, &o, argc, argv, NULL, NULL);
    if (rc >= 0)
        return rc;
    int batch = o.batch, seed = o.seed, tp = o.tp;
    int bad = 0;
    for (int k = 0; k < K3_KIND_COUNT; k++) {
        struct k3_shape s;
        struct k3_layer A, F;
        char err[K3_ERR_LEN];
        if (tp == 0)
            k3_shape_small(&s, 64);
        else if (k3_shape_full(&s, tp, 64, err)) {
            fprintf(stderr, "agentreplay kernels cpu-check: %s\n", err);
            return EXIT_BADINPUT;
        }
        if (k3_layer_init(&A, &s, (enum k3_kind)k, batch, err)) {
            fprintf(stderr, "agentreplay kernels cpu-check: %s\n", err);
            return EXIT_BADINPUT;
        }
        k3_layer_randomize(&A, (uint64_t)seed + k, 40);
        if (k3_layer_clone(&F, &A, err)) {
            fprintf(stderr, "agentreplay kernels cpu-check: %s\n", err);
            k3_layer_free(&A);
            return EXIT_FAIL;
        }
        k3_layer_run_cpu(&A, K3_STANDARD);
        k3_layer_run_cpu(&F, K3_FUSED);
        size_t n = (size_t)batch * s.hidden;
        k3_bf16 *h = xmalloc(n * sizeof *h);
        for (size_t i = 0; i < n; i++)
            h[i] = k3_f32_to_bf16(k3_bf16_to_f32(K3_BF(&A, K3_IO_R_OUT)[i]) +
                                  k3_bf16_to_f32(K3_BF(&A, K3_IO_D_OUT)[i]));
        double e = k3_nmse_bf16(K3_BF(&F, K3_IO_R_OUT), h, n);
        int same = k3_same_experts(batch, s.topk, K3_I32(&F, K3_A_IDS), K3_I32(&A, K3_A_IDS));
        int ok = same ? e < 1e-3 : isfinite(e);
        char shape[32];
        snprintf(shape, sizeof shape, tp ? "tp %d shard shapes" : "reduced shapes", tp);
        printf("%s layer, batch %d (%s): fused vs standard output nmse %.3g%s  %s\n",
               k3_kind_name((enum k3_kind)k), batch, shape, e,
               same ? "" : " (a near tie routed a token differently)", ok ? "ok" : "FAIL");
        bad += !ok;
        free(h);
        k3_layer_free(&A);
        k3_layer_free(&F);
    }
    return bad ? EXIT_FAIL : EXIT_OK;
}

int kernels_cmd_driver(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            flags_help(!strcmp(argv[0], "bench") ? &kernels_bench_spec : &kernels_check_spec,
                       stdout);
            return EXIT_OK;
        }
    char path[4096];
    const char *env = getenv("AGENTREPLAY_KERNELS_BIN");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else if (file_data_path(DRIVER, path, sizeof path) != 0) {
        fprintf(stderr,
                "agentreplay kernels %s: the CUDA driver is not built (%s); run "
                "`make kernels` on a machine with nvcc (CUDA toolkit)\n",
                argv[0], DRIVER);
        return EXIT_FAIL;
    }
    char **args = xcalloc((size_t)argc + 2, sizeof *args);
    args[0] = path;
    for (int i = 0; i < argc; i++)
        args[i + 1] = argv[i];
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "agentreplay kernels: fork: %s\n", strerror(errno));
        free(args);
        return EXIT_FAIL;
    }
    if (pid == 0) {
        execv(path, args);
        fprintf(stderr, "agentreplay kernels: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    free(args);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "agentreplay kernels: waitpid: %s\n", strerror(errno));
            return EXIT_FAIL;
        }
    if (!WIFEXITED(st)) {
        fprintf(stderr, "agentreplay kernels: %s stopped by signal %d\n", path,
                WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        return EXIT_FAIL;
    }
    int rc = WEXITSTATUS(st);
    if (rc == 3) {
        fprintf(stderr, "agentreplay kernels %s: no GPU present on this machine\n", argv[0]);
        return EXIT_FAIL;
    }
    return rc == EXIT_OK || rc == EXIT_BADINPUT ? rc : EXIT_FAIL;
}

int kernels_cmd(int argc, char **argv) { return cli_dispatch("kernels", argc, argv); }
