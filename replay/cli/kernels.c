/* kernels_cmd.c: `agentreplay kernels ...`, the front of the Kimi K3
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

static void usage(FILE *f)
{
    fprintf(f,
            "usage: agentreplay kernels list [--tp T] [--batch B] [--ctx N] [--bw GB/s]\n"
            "       agentreplay kernels cpu-check [--batch B] [--seed S] [--tp T]\n"
            "       agentreplay kernels check [--tp T] [--batches LIST] [--ctx N] [--seed S]\n"
            "       agentreplay kernels bench --tp T [-o CALIBRATION.json] [--results FILE]\n"
            "                                 [--batches LIST] [--ctx N] [--contexts LIST]\n"
            "                                 [--iters N]\n"
            "                                 [--gpu-name NAME] [--with-local-reduction]\n\n"
            "One Kimi K3 decode layer (KDA and MLA, each with its MoE block) at\n"
            "tensor-parallel shard shapes, on the standard path and the fused one.\n"
            "check and bench need the CUDA driver (make kernels, where nvcc exists)\n"
            "and a GPU; bench writes the calibration file the engine loads with\n"
            "--calibration (engine/CALIBRATION.md).\n");
}

static int int_arg(const char *flag, const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < lo || x > hi) {
        fprintf(stderr, "agentreplay kernels: %s: an integer %d..%d\n", flag, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* The kernel lists with each kernel's least bytes and its floor time at a
 * bandwidth: the memory-bound roofline a measured time is judged against.
 * Default bandwidth 4300 GB/s: the device-to-device copy measured on one
 * H200 (../shared/reference/hardware.md). */
static int cmd_list(int argc, char **argv)
{
    int tp = 8, batch = 1, ctx = 4096, bw_gbs = 4300;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc;
        if (!strcmp(argv[i], "--tp"))
            rc = int_arg("--tp", v, 1, 16, &tp);
        else if (!strcmp(argv[i], "--batch"))
            rc = int_arg("--batch", v, 1, 64, &batch);
        else if (!strcmp(argv[i], "--ctx"))
            rc = int_arg("--ctx", v, 1, 1 << 20, &ctx);
        else if (!strcmp(argv[i], "--bw"))
            rc = int_arg("--bw", v, 1, 100000, &bw_gbs);
        else {
            fprintf(stderr, "agentreplay kernels list: unknown option %s\n", argv[i]);
            return EXIT_BADINPUT;
        }
        if (rc)
            return EXIT_BADINPUT;
        i++;
    }
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

static int cmd_cpu_check(int argc, char **argv)
{
    int batch = 4, seed = 1, tp = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--batch")) {
            if (int_arg("--batch", v, 1, 64, &batch))
                return EXIT_BADINPUT;
        } else if (!strcmp(argv[i], "--seed")) {
            if (int_arg("--seed", v, 0, 1 << 30, &seed))
                return EXIT_BADINPUT;
        } else if (!strcmp(argv[i], "--tp")) {
            if (int_arg("--tp", v, 1, 16, &tp))
                return EXIT_BADINPUT;
        } else {
            fprintf(stderr, "agentreplay kernels cpu-check: unknown option %s\n", argv[i]);
            return EXIT_BADINPUT;
        }
        i++;
    }
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

static int run_driver(int argc, char **argv)
{
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

int kernels_cmd(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_BADINPUT;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help") || !strcmp(sub, "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(sub, "list"))
        return cmd_list(argc - 1, argv + 1);
    if (!strcmp(sub, "cpu-check"))
        return cmd_cpu_check(argc - 1, argv + 1);
    if (!strcmp(sub, "check") || !strcmp(sub, "bench"))
        return run_driver(argc - 1, argv + 1);
    fprintf(stderr, "agentreplay kernels: unknown subcommand '%s'\n\n", sub);
    usage(stderr);
    return EXIT_BADINPUT;
}
