/* bench/bench_fp8_quant.cu - fa_quantize_cuda's bandwidth beside a
   device-to-device cudaMemcpy of the same input, in the same run.

   Bytes counted for the quantizer: the input read (2 bytes an element), the
   e4m3 written (1 byte) and the descales; for the copy: read + write (2 x
   its size). Each timing is the median of 7 runs of 20 back-to-back calls
   (cudaEvent), after a warm-up. Sizes: FlashAttention-3's accuracy shape
   (B2 H16 N4096 D128, 16M elements: short, launch overhead shows) and three
   larger ones, one each at d 128, 256 and 64; every variant: per block, per block + Hadamard, per tensor
   (two passes), per tensor + Hadamard.

   Build: make build/bench_fp8_quant
   Run:   build/bench_fp8_quant  (prints a markdown table) */
#define FLASHATTN_IMPLEMENTATION
#ifndef FLASHATTN_HEAD_DIMS
#define FLASHATTN_HEAD_DIMS 64 /* the forward kernels are not used here */
#endif
#include "../flashattn.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tests/cuda_check.h"

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median over 7 samples of the time of one call (ms); op(kind) does one call. */
typedef struct bench_ctx {
    fa_quant p;
    fa_tensor x, out;
    float *descale;
    void *copy_dst;
    size_t copy_bytes;
} bench_ctx;

static void one_call(const bench_ctx *c, int copy)
{
    if (copy)
        CK(cudaMemcpyAsync(c->copy_dst, c->x.data, c->copy_bytes, cudaMemcpyDeviceToDevice, 0));
    else if (fa_quantize_cuda(&c->p, c->x, c->out, c->descale, NULL) != FA_OK) {
        printf("fa_quantize_cuda: %s\n", fa_last_error());
        exit(2);
    }
}

static float time_ms(const bench_ctx *c, int copy)
{
    enum { SAMPLES = 7, CALLS = 20 };
    float t[SAMPLES];
    cudaEvent_t a, b;
    int s, i;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (i = 0; i < 3; i++) one_call(c, copy);
    for (s = 0; s < SAMPLES; s++) {
        CK(cudaEventRecord(a, 0));
        for (i = 0; i < CALLS; i++) one_call(c, copy);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[s], a, b));
        t[s] /= CALLS;
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    qsort(t, SAMPLES, sizeof t[0], cmp_float);
    return t[SAMPLES / 2];
}

int main(void)
{
    static const int shapes[4][4] = {{2, 4096, 16, 128}, {4, 16384, 32, 128}, {2, 16384, 16, 256}, {2, 16384, 32, 64}};
    static const char *variant[4] = {"per block", "per block + Hadamard", "per tensor", "per tensor + Hadamard"};
    cudaDeviceProp prop;
    int dev, si, v;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("# fa_quantize_cuda bandwidth, %s (bf16 -> e4m3, role K, FLASHATTN_FP8_BLOCK_K = %d)\n\n", prop.name,
           FLASHATTN_FP8_BLOCK_K);
    printf("| B | N | H | D | variant | time (us) | GB/s | copy GB/s | of copy |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (si = 0; si < 4; si++) {
        bench_ctx c;
        int64_t n = (int64_t)shapes[si][0] * shapes[si][1] * shapes[si][2] * shapes[si][3], count = 0;
        void *x, *out;
        float copy_ms, copy_gbs;
        memset(&c, 0, sizeof c);
        c.p.role = FA_QUANT_K;
        c.p.batch = shapes[si][0]; c.p.seqlen = shapes[si][1]; c.p.heads = shapes[si][2]; c.p.head_dim = shapes[si][3];
        c.p.seed = 42;
        c.p.per_tensor = 0;
        fa_quantize_descales(&c.p, &count);
        CK(cudaMalloc(&x, (size_t)n * 2));
        CK(cudaMalloc(&out, (size_t)n));
        CK(cudaMalloc((void **)&c.descale, (size_t)count * sizeof(float)));
        CK(cudaMalloc(&c.copy_dst, (size_t)n * 2));
        CK(cudaMemset(x, 0x3c, (size_t)n * 2)); /* bf16 0x3c3c: about 0.0115, every element */
        c.x.data = x; c.x.dtype = FA_BF16;
        c.out.data = out; c.out.dtype = FA_E4M3;
        c.copy_bytes = (size_t)n * 2;
        copy_ms = time_ms(&c, 1);
        copy_gbs = (float)(2.0 * (double)c.copy_bytes / (copy_ms * 1e-3) / 1e9);
        for (v = 0; v < 4; v++) {
            float ms, gbs;
            c.p.hadamard = v % 2;
            c.p.per_tensor = v / 2;
            ms = time_ms(&c, 0);
            gbs = (float)(((double)n * 3 + (double)count * 4) / (ms * 1e-3) / 1e9);
            printf("| %d | %d | %d | %d | %s | %.1f | %.0f | %.0f | %.0f%% |\n", shapes[si][0], shapes[si][1],
                   shapes[si][2], shapes[si][3], variant[v], ms * 1e3, gbs, copy_gbs, 100.0 * gbs / copy_gbs);
        }
        CK(cudaFree(x)); CK(cudaFree(out)); CK(cudaFree(c.descale)); CK(cudaFree(c.copy_dst));
    }
    return 0;
}
