/* bench/micro/ex2_packed.cu - exponentials per clock per SM: ex2.approx.ftz.f32 against the
   packed 16-bit forms, ex2.approx.ftz.bf16x2 and ex2.approx.f16x2 (two exponentials an
   instruction). 132 blocks of 128-1024 threads, 16 independent chains a thread.
     nvcc -O3 -gencode arch=compute_90a,code=sm_90a bench/micro/ex2_packed.cu -o ex2_packed && ./ex2_packed
   H200, 2026-11-28: 16.0 exponentials a clock for all three; the packed forms are two
   MUFU.EX2.BF16 / MUFU.EX2.F16 and a PRMT each in SASS
   (bench/results/2026-11-28_NVIDIA-H200_ex2-packed-micro-1641.txt). */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
__device__ __forceinline__ float ex2f(float x) { float y; asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ uint32_t ex2bf(uint32_t x) { uint32_t y; asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x)); return y; }
__device__ __forceinline__ uint32_t ex2h(uint32_t x) { uint32_t y; asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x)); return y; }
template <int MODE> __global__ void k(uint32_t *out, int iters, long long *cyc)
{
    uint32_t f[16];
    for (int i = 0; i < 16; i++) f[i] = MODE == 0 ? __float_as_uint(-0.001f * (threadIdx.x * 7 + i)) : 0xbc00bc00u ^ (threadIdx.x + i);
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int i = 0; i < 16; i++) {
            if (MODE == 0) f[i] = __float_as_uint(-ex2f(__uint_as_float(f[i])));
            else if (MODE == 1) f[i] = ex2bf(f[i]) | 0x80008000u; /* keep the arguments negative */
            else f[i] = ex2h(f[i]) | 0x80008000u;
        }
    }
    long long t1 = clock64();
    uint32_t s = 0;
    for (int i = 0; i < 16; i++) s ^= f[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x == 0 && blockIdx.x == 0) *cyc = t1 - t0;
}
template <int MODE> void run(const char *name, int threads, int per_instr)
{
    uint32_t *o; long long *c;
    cudaMalloc(&o, 132 * 1024 * 4); cudaMalloc(&c, 8);
    const int iters = 4096;
    k<MODE><<<132, threads>>>(o, iters, c);
    k<MODE><<<132, threads>>>(o, iters, c);
    cudaDeviceSynchronize();
    long long cy; cudaMemcpy(&cy, c, 8, cudaMemcpyDeviceToHost);
    const double per = (double)cy / iters;
    printf("%-14s threads %4d: %.1f clk/iter; instr %.2f/clk/SM, exponentials %.2f/clk/SM\n", name, threads, per,
           threads * 16 / per, threads * 16 * per_instr / per);
    cudaFree(o); cudaFree(c);
}
int main()
{
    for (int t : {128, 256, 512, 1024}) {
        run<0>("ex2 f32", t, 1);
        run<1>("ex2 bf16x2", t, 2);
        run<2>("ex2 f16x2", t, 2);
    }
}
