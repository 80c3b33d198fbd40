/* test_kernels_calib.c: the contract between the kernel benchmark and the
 * engine. A calibration file written by the benchmark's writer
 * (kernels/k3calib.c) for every kernel of both paths and layer kinds must
 * be accepted by the engine's loader, which then reports each of those
 * kernels as calibrated. The times here are an in-memory fixture for the
 * loader, not measurements (real files come only from a GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cost.h"
#include "engine/preset.h"
#include "kernels/k3calib.h"
#include "tests/testhelp.h"
#include "traces/base/err.h"

/* Writes every kernel of both paths for both layer kinds; returns the
 * number of distinct entries. */
static int write_all(FILE *f, int tp, const char *misspell)
{
    static const int batches[] = {1, 2, 4, 8, 16, 32, 64};
    int n = 0;
    k3_calib_begin(f, "h200", tp, "test fixture: loader contract, not a measurement");
    for (int p = 0; p < K3_PATH_COUNT; p++)
        for (int k = 0; k < K3_KIND_COUNT; k++) {
            const struct k3_op *ops;
            int nops = k3_path_ops((enum k3_path)p, (enum k3_kind)k, &ops);
            for (int i = 0; i < nops; i++)
                for (int large = 0; large < 2; large++) {
                    if (large && !ops[i].name_large)
                        continue;
                    int bs[14], cs[14], m = 0;
                    double us[14];
                    int attn = ops[i].id == K3_OP_MLA_ATTENTION || ops[i].id == K3_OP_F_MLA_ATTENTION;
                    for (int c = 0; c < (attn ? 2 : 1); c++)
                        for (int j = 0; j < 7; j++)
                            if ((batches[j] > K3_SMALL_BATCH) == large || !ops[i].name_large) {
                                bs[m] = batches[j];
                                cs[m] = c ? 16384 : 1024;
                                us[m++] = 2.0 + j + c;
                            }
                    const char *name = large ? ops[i].name_large : ops[i].name;
                    if (misspell && !strcmp(name, misspell))
                        name = "kda_recurent";
                    k3_calib_entry(f, n == 0, k3_calib_path_name((enum k3_path)p),
                                   k3_kind_name((enum k3_kind)k), name, bs, attn ? cs : NULL, us,
                                   m);
                    n++;
                }
        }
    k3_calib_end(f);
    return n;
}

int main(void)
{
    struct model_preset m;
    struct gpu_preset g;
    char err[ERR_LEN];
    if (preset_load_model("kimi-k3", &m, err) || preset_load_gpu("h200", &g, err)) {
        fprintf(stderr, "presets: %s\n", err);
        SKIP("engine presets not loadable here");
        return test_report();
    }
    char gname[64];
    k3_calib_gpu_name("NVIDIA H200", gname, sizeof gname);
    CHECK(!strcmp(gname, "h200"), "CUDA device name -> preset name");
    k3_calib_gpu_name("NVIDIA GB200", gname, sizeof gname);
    CHECK(!strcmp(gname, "gb200"), "GB200 is not B200");
    k3_calib_gpu_name("NVIDIA H100 80GB HBM3", gname, sizeof gname);
    CHECK(!strcmp(gname, "h100"), "H100 variants");

    for (int tp = 8; tp <= 16; tp *= 2) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        int n = write_all(f, tp, NULL);
        fclose(f);
        struct cost_model *c = cost_create(&m, &g, tp, ENGINE_BACKEND_AUTO, NULL, false, err);
        CHECKF(c != NULL, "cost model at tp %d: %s", tp, err);
        if (!c) {
            free(buf);
            continue;
        }
        int rc = cost_load_calibration_mem(c, buf, len, "fixture", false, err);
        CHECKF(rc == 0, "engine accepts every kernel name at tp %d: %s", tp, rc ? err : "");
        const char *names[256];
        int got = cost_calibrated_kernels(c, names, 256);
        CHECKF(got == n, "engine reports %d calibrated kernels, %d written", got, n);
        int has_fused = 0, has_std = 0;
        for (int i = 0; i < got && i < 256; i++) {
            has_fused += strstr(names[i], "latency_specialized/kda/kda_in_proj_small") != NULL;
            has_std += strstr(names[i], "auto/mla/mla_out_gate") != NULL;
        }
        CHECK(has_fused == 1 && has_std == 1, "names listed as path/layer_kind/kernel");
        cost_destroy(c);
        free(buf);
    }

    /* A name the engine does not use is refused, naming the entry. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    write_all(f, 16, "kda_recurrent");
    fclose(f);
    struct cost_model *c = cost_create(&m, &g, 16, ENGINE_BACKEND_AUTO, NULL, false, err);
    if (c) {
        int rc = cost_load_calibration_mem(c, buf, len, "fixture", false, err);
        CHECKF(rc != 0 && strstr(err, "kda_recurent"), "misspelled kernel refused: %s", err);
        cost_destroy(c);
    }
    free(buf);
    return test_report();
}
