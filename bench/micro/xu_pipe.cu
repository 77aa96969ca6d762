/* bench/micro/xu_pipe.cu - do the softmax's 16-bit packs (cvt.rn.bf16x2.f32, SASS F2FP) share
   the MUFU pipe with its exponentials (ex2.approx.ftz.f32, MUFU.EX2)? Throughput in results
   (instructions) per clock per SM of ex2 alone, packs alone, and both, 132 blocks of 128-1024
   threads, 16 independent chains a thread. Build and run (sm_90a, on the GPU):
     nvcc -O3 -gencode arch=compute_90a,code=sm_90a bench/micro/xu_pipe.cu -o xu_pipe && ./xu_pipe
   H100, 2026-11-25: ex2 16.0 a clock, packs 31.5, and ex2 still 15.9 with 8 packs per 16 ex2
   (bench/results/2026-11-25_NVIDIA-H100-80GB-HBM3_fwd-d64-pipeline-trials-0250.md). Modes 5 and
   6: the same for the FP8 kernel's pack of P to e4m3 (cvt.rn.satfinite.e4m3x2.f32); 7: e4m3x2
   from f16x2. */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
__device__ __forceinline__ float ex2(float x) { float y; asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
/* the 16-bit pack of two floats: bf16x2, or f16x2 when F16 */
template <bool F16 = false> __device__ __forceinline__ uint32_t pk(float a, float b)
{
    uint32_t r;
    if (F16) asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    else asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
}
/* two e4m3 codes (cvt.rn.satfinite.e4m3x2.f32, the FP8 kernel's P), lo in the low byte */
__device__ __forceinline__ uint32_t pk8(float lo, float hi)
{
    unsigned short r;
    asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}
/* two e4m3 codes from an f16x2 (cvt.rn.satfinite.e4m3x2.f16x2) */
__device__ __forceinline__ uint32_t pk8h(uint32_t h2)
{
    unsigned short r;
    asm volatile("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(h2));
    return r;
}
template <int MODE> __global__ void k(uint32_t *out, int iters, long long *cyc)
{
    float f[16];
    for (int i = 0; i < 16; i++) f[i] = 0.001f * (threadIdx.x * 7 + i);
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        if (MODE == 0) { // 16 ex2
#pragma unroll
            for (int i = 0; i < 16; i++) f[i] = ex2(f[i]) * -0.5f;
        } else if (MODE == 1 || MODE == 3) { // 8 packs (bf16; f16 for MODE 3)
#pragma unroll
            for (int i = 0; i < 8; i++) { uint32_t r = pk<MODE == 3>(f[2*i], f[2*i+1]); f[2*i] = __uint_as_float(r) ; f[2*i+1] = __uint_as_float(r ^ 0x10001u); }
        } else if (MODE == 2) { // 16 ex2 + 8 packs
#pragma unroll
            for (int i = 0; i < 8; i++) { float a = ex2(f[2*i]), b = ex2(f[2*i+1]); uint32_t r = pk(a, b); f[2*i] = __uint_as_float(r & 0xbf7fbf7fu); f[2*i+1] = a - b; }
        } else if (MODE == 5) { // 8 packs to e4m3x2 (the FP8 kernel's P)
#pragma unroll
            for (int i = 0; i < 8; i++) { uint32_t r = pk8(f[2*i], f[2*i+1]); f[2*i] = __uint_as_float(r | 0x3c000000u); f[2*i+1] = __uint_as_float((r << 8) | 0x3c000000u); }
        } else if (MODE == 6) { // 16 ex2 + 8 packs to e4m3x2
#pragma unroll
            for (int i = 0; i < 8; i++) { float a = ex2(f[2*i]), b = ex2(f[2*i+1]); uint32_t r = pk8(a, b); f[2*i] = __uint_as_float(r | 0xbc000000u); f[2*i+1] = a - b; }
        } else if (MODE == 7) { // 8 packs to e4m3x2 from f16x2
#pragma unroll
            for (int i = 0; i < 8; i++) { uint32_t r = pk8h(__float_as_uint(f[2*i])); f[2*i] = __uint_as_float(r | 0x3c000000u); f[2*i+1] = __uint_as_float((r << 8) ^ __float_as_uint(f[2*i+1])); }
        } else if (MODE == 4) { // 16 ex2 + 16 FMNMX-ish (fmaxf) + 16 FADD: ALU contention?
#pragma unroll
            for (int i = 0; i < 16; i++) { float a = ex2(f[i]); f[i] = fmaxf(a, f[(i+1)&15]) - 0.25f; }
        }
    }
    long long t1 = clock64();
    uint32_t s = 0; for (int i = 0; i < 16; i++) s ^= __float_as_uint(f[i]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x == 0 && blockIdx.x == 0) *cyc = t1 - t0;
}
template <int MODE> void run(const char *name, int threads, int ex2n, int pkn)
{
    uint32_t *o; long long *c; cudaMalloc(&o, 132 * 1024 * 4); cudaMalloc(&c, 8);
    int iters = 4096;
    k<MODE><<<132, threads>>>(o, iters, c);
    k<MODE><<<132, threads>>>(o, iters, c); cudaDeviceSynchronize();
    long long cy; cudaMemcpy(&cy, c, 8, cudaMemcpyDeviceToHost);
    double per = (double)cy / iters; // cycles per iteration
    double warps = threads / 32.0;
    printf("%-22s threads %4d: %.1f clk/iter; ex2 %.2f/clk/SM, pack instr %.2f/clk/SM; XU-model (ex2+pack)/clk/SM %.2f\n", name, threads, per,
           warps * 32 * ex2n / per, warps * 32 * pkn / per, warps * 32 * (ex2n + pkn) / per);
    cudaFree(o); cudaFree(c);
}
int main()
{
    for (int t : {128, 256, 512, 1024}) {
        run<0>("16 ex2", t, 16, 0); run<1>("8 cvt bf16x2", t, 0, 8); run<3>("8 cvt f16x2", t, 0, 8);
        run<2>("16 ex2 + 8 cvt bf16x2", t, 16, 8); run<4>("16 ex2 + 16 fmax/fadd", t, 16, 0);
        run<5>("8 cvt e4m3x2", t, 0, 8); run<6>("16 ex2 + 8 cvt e4m3x2", t, 16, 8);
        run<7>("8 cvt e4m3x2.f16x2", t, 0, 8);
    }
}
