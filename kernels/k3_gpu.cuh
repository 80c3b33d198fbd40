/* k3_gpu.cuh: the CUDA side of the Kimi K3 decode layer: device copies of
 * a layer's tensors and one launcher per operation id (k3layer.h), so the
 * driver (k3_main.cu) runs either path as the same sequence of operations
 * the C implementation runs.
 *
 * Ownership: k3_gpu_upload allocates a device buffer for every tensor of
 * the layer (t[i].dev) and k3_gpu_free releases them.
 */
#ifndef K3_GPU_CUH
#define K3_GPU_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/k3layer.h"

/* Checked CUDA calls for the standalone program (llm.c's cudaCheck). */
#define cudaCheck(call)                                                      \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            fprintf(stderr, "%s:%d: CUDA error: %s\n", __FILE__, __LINE__,   \
                    cudaGetErrorString(e_));                                 \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* Allocates and copies every tensor to the device. */
void k3_gpu_upload(struct k3_layer *L);
/* Copies host -> device (or back) for one tensor / every tensor. */
void k3_gpu_put(struct k3_layer *L, enum k3_tid t);
void k3_gpu_get(struct k3_layer *L, enum k3_tid t);
void k3_gpu_put_all(struct k3_layer *L);
/* Host -> device for everything but the weights (state, I/O, scratch). */
void k3_gpu_put_state(struct k3_layer *L);
void k3_gpu_free(struct k3_layer *L);

/* Launches operation `id` on `stream`. Reduction operations (comm) are
 * not launched here: on one GPU they are local steps, with several GPUs
 * the driver runs them through NCCL. */
void k3_gpu_launch(struct k3_layer *L, enum k3_op_id id, cudaStream_t stream);

/* Launches a whole path; side-stream kernels go to `side`, forked after
 * the residual they read is ready and joined before the kernel that
 * consumes their output (events ev_fork, ev_join). */
void k3_gpu_run_path(struct k3_layer *L, enum k3_path p, cudaStream_t main_s,
                     cudaStream_t side, cudaEvent_t ev_fork, cudaEvent_t ev_join);

/* r = bf16(r + d) over n values (the multi-GPU fused path's residual
 * after its NCCL reduction). */
void k3_gpu_residual_add(k3_bf16 *r, const k3_bf16 *d, size_t n, cudaStream_t stream);

/* Pulls `bytes` starting at p into L2 (prefetch while communication runs). */
void k3_gpu_prefetch_l2(const void *p, size_t bytes, cudaStream_t stream);

#endif
