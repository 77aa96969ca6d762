/* tests/test_nvcc_host_simd.cu - the implementation compiled by nvcc (the GPU
   half pulled in), as a user with a CUDA build and a CPU fallback has it:
   the CPU loops of nvcc's host pass must be the SIMD ones the host compiler
   targets (-Xcompiler -march=native), not the portable ones, and the CPU
   forward must still be right. Runs without a GPU (it makes no CUDA call).

       nvcc -O3 -Xcompiler -march=native -DFLASHATTN_HEAD_DIMS=64 \
            -gencode arch=compute_90a,code=sm_90a tests/test_nvcc_host_simd.cu */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h" /* rng_uniform */

/* What the host compiler's target allows (these macros are the host pass's). */
#if defined(FLASHATTN_NO_SIMD)
#define EXPECT "portable"
#elif defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define EXPECT "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define EXPECT "avx2"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define EXPECT "neon"
#else
#define EXPECT "portable"
#endif

enum { N = 100, H = 2, D = 64 };

int main(void)
{
    static float q[N * H * D], k[N * H * D], v[N * H * D], o[N * H * D];
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    double worst = 0.0;
    int i, h, j, c, passed = 0, failed = 0;
    uint64_t z = 1;
    for (i = 0; i < N * H * D; ++i) { /* values in [-1, 1) */
        q[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
        k[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
        v[i] = (float)(2.0 * rng_uniform(&z) - 1.0);
    }
    if (strcmp(fa_cpu_simd_path(), EXPECT) == 0)
        passed++;
    else {
        failed++;
        printf("FAIL: nvcc's host pass built the \"%s\" CPU loops; its host target allows \"%s\"\n",
               fa_cpu_simd_path(), EXPECT);
    }
    memset(&p, 0, sizeof p);
    memset(&tq, 0, sizeof tq);
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = N;
    p.heads_q = H;
    p.head_dim = D;
    p.causal = 1;
    tk = tv = to = tq;
    tq.data = q;
    tk.data = k;
    tv.data = v;
    to.data = o;
    if (fa_forward(&p, tq, tk, tv, to, NULL, NULL, 0) != FA_OK) {
        printf("FAIL: fa_forward: %s\n", fa_last_error());
        failed++;
    } else {
        /* fp64 softmax(q k^T / sqrt(d)) v, causal */
        for (h = 0; h < H; ++h)
            for (i = 0; i < N; ++i) {
                double s[N], m = -INFINITY, l = 0.0;
                for (j = 0; j <= i; ++j) {
                    double acc = 0.0;
                    for (c = 0; c < D; ++c)
                        acc += (double)q[(i * H + h) * D + c] * (double)k[(j * H + h) * D + c];
                    s[j] = acc / sqrt((double)D);
                    m = s[j] > m ? s[j] : m;
                }
                for (j = 0; j <= i; ++j)
                    l += (s[j] = exp(s[j] - m));
                for (c = 0; c < D; ++c) {
                    double ref = 0.0, err;
                    for (j = 0; j <= i; ++j)
                        ref += s[j] / l * (double)v[(j * H + h) * D + c];
                    err = fabs(ref - (double)o[(i * H + h) * D + c]);
                    worst = err > worst ? err : worst;
                }
            }
        if (worst <= 1e-5)
            passed++;
        else {
            failed++;
            printf("FAIL: CPU forward from the nvcc build: max abs error %.3g (tolerance 1e-5)\n", worst);
        }
    }
    printf("test_nvcc_host_simd: CPU path \"%s\" (host target allows \"%s\"), forward max abs error %.2g\n",
           fa_cpu_simd_path(), EXPECT, worst);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
