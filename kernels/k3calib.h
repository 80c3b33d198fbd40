/* k3calib.h: writes the engine's calibration file (engine/CALIBRATION.md,
 * format "agentreplay-calibration/1") from measured kernel times; the
 * CUDA benchmark (k3_main.cu) is its only producer of real files, and
 * tests check with it that every kernel name of both paths is one the
 * engine accepts. Plain C, no allocation: entries are streamed to a FILE.
 */
#ifndef K3CALIB_H
#define K3CALIB_H

#include <stdio.h>

#include "kernels/k3layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's path names: "auto" and "latency_specialized". */
const char *k3_calib_path_name(enum k3_path p);

/* The engine's GPU preset name for a CUDA device name ("NVIDIA H200" ->
 * "h200"); unknown devices get their name lowercased without spaces. */
void k3_calib_gpu_name(const char *device, char *out, size_t n);

/* Opens the object; source is free text (escaped here). */
void k3_calib_begin(FILE *f, const char *gpu, int tp, const char *source);
/* One kernel: n points (batch[i], context[i], us[i]); context == NULL
 * omits the context (0 for the engine). Call with first = 1 for the first
 * entry. */
void k3_calib_entry(FILE *f, int first, const char *path, const char *kind,
                    const char *kernel, const int *batch, const int *context,
                    const double *us, int n);
void k3_calib_end(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
