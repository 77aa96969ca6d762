/* gpu_simple.cu - the smallest complete use of flashattn on an NVIDIA GPU.

   Build and run (from this folder; sm_80 code for Ampere and later, sm_90a
   for Hopper's own path; -t 0 compiles the two targets side by side and
   --split-compile=0 spreads their kernels over the cores):
       nvcc -O2 -t 0 --split-compile=0 -I.. -gencode arch=compute_80,code=sm_80 \
            -gencode arch=compute_90a,code=sm_90a gpu_simple.cu -o gpu_simple && ./gpu_simple

   Because this file is compiled by nvcc, defining FLASHATTN_IMPLEMENTATION
   compiles both halves: the CPU code of flashattn.h and the GPU kernels of
   flashattn_cuda.cuh. The GPU call takes device pointers and a stream, both
   as void *, and is stream-ordered: it returns before the GPU is done.
   The CPU fa_forward on the same inputs serves as the check. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 2, SEQ = 512, HEADS = 8, DIM = 128 };

#define CUDA_CHECK(call)                                                        \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
                    cudaGetErrorString(e_));                                    \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static float rand_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

int main(void) {
    const size_t n = (size_t)BATCH * SEQ * HEADS * DIM, bytes = n * sizeof(__half);
    __half *hQ = (__half *)malloc(bytes), *hK = (__half *)malloc(bytes);
    __half *hV = (__half *)malloc(bytes), *hO = (__half *)malloc(bytes);
    __half *hO_cpu = (__half *)malloc(bytes);
    void *dQ, *dK, *dV, *dO;
    uint64_t seed = 1;
    double err = 0.0;
    size_t i;
    fa_status s;
    if (!hQ || !hK || !hV || !hO || !hO_cpu) { fprintf(stderr, "out of memory\n"); return 1; }
    for (i = 0; i < n; i++) {
        hQ[i] = __float2half(rand_uniform(&seed));
        hK[i] = __float2half(rand_uniform(&seed));
        hV[i] = __float2half(rand_uniform(&seed));
    }

    CUDA_CHECK(cudaMalloc(&dQ, bytes));
    CUDA_CHECK(cudaMalloc(&dK, bytes));
    CUDA_CHECK(cudaMalloc(&dV, bytes));
    CUDA_CHECK(cudaMalloc(&dO, bytes));
    CUDA_CHECK(cudaMemcpy(dQ, hQ, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dK, hK, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dV, hV, bytes, cudaMemcpyHostToDevice));

    fa_problem p = {};             /* zero = full attention, scale 1/sqrt(head_dim) */
    p.batch = BATCH;
    p.seqlen_q = p.seqlen_k = SEQ;
    p.heads_q = HEADS;
    p.head_dim = DIM;
    p.causal = 1;

    fa_tensor q = {}, k = {}, v = {}, o = {}; /* strides 0 = packed */
    q.data = dQ; k.data = dK; v.data = dV; o.data = dO;
    q.dtype = k.dtype = v.dtype = o.dtype = FA_F16;
    /* No lse, no workspace (allocated stream-ordered), default stream. */
    s = fa_forward_cuda(&p, q, k, v, o, NULL, NULL, 0, NULL);
    if (s != FA_OK) {
        fprintf(stderr, "fa_forward_cuda: %s: %s\n", fa_status_string(s), fa_last_error());
        return 1;
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(hO, dO, bytes, cudaMemcpyDeviceToHost)); /* waits for the GPU */

    /* The same problem on the CPU, host pointers. */
    fa_tensor qh = q, kh = k, vh = v, oh = o;
    qh.data = hQ; kh.data = hK; vh.data = hV; oh.data = hO_cpu;
    s = fa_forward(&p, qh, kh, vh, oh, NULL, NULL, 0);
    if (s != FA_OK) {
        fprintf(stderr, "fa_forward: %s: %s\n", fa_status_string(s), fa_last_error());
        return 1;
    }
    for (i = 0; i < n; i++)
        err = fmax(err, fabs((double)__half2float(hO[i]) - (double)__half2float(hO_cpu[i])));
    printf("O[0, 0, 0, 0:4] GPU = %+.4f %+.4f %+.4f %+.4f\n", __half2float(hO[0]),
           __half2float(hO[1]), __half2float(hO[2]), __half2float(hO[3]));
    printf("max |O_gpu - O_cpu| = %.2e %s\n", err, err < 4e-3 ? "(ok)" : "(TOO LARGE)");

    CUDA_CHECK(cudaFree(dQ));
    CUDA_CHECK(cudaFree(dK));
    CUDA_CHECK(cudaFree(dV));
    CUDA_CHECK(cudaFree(dO));
    free(hQ); free(hK); free(hV); free(hO); free(hO_cpu);
    return err < 4e-3 ? 0 : 1;
}
