/* bench/micro/wgmma_issue.cu - one warpgroup, the library's own wgmma wrappers: how long the
   d64 kernel's products take to issue and to complete. S = Q K^T is 4 x wgmma m64n128k16 with
   both operands in shared memory (SS); P V is 8 x m64n64k16 with P from registers (RS). After
   each issue the warpgroup spins x cycles, then waits. Prints clock64() deltas: the issue of
   the first group, the spin plus any later issues, the wait, the total. Build and run (sm_90a):
     nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a bench/micro/wgmma_issue.cu -o wgmma_issue
   H100, 2026-11-25: SS groups issue in 56 cycles and complete in the background; the RS
   group's issue stalls until most of it has run (bench/results/
   2026-11-25_NVIDIA-H100-80GB-HBM3_fwd-d64-pipeline-trials-0250.md). Data is constant (timing
   does not depend on it); the results are only kept live. */
#define FLASHATTN_HEAD_DIMS 64
#define FLASHATTN_IMPLEMENTATION
#include "../../flashattn.h"
#include <cstdio>
__device__ long long out_t[64];
__device__ __forceinline__ void spin(int n) { long long t = clock64(); while (clock64() - t < n) {} }
template <int MODE> __global__ void __launch_bounds__(128) k(int x)
{
#if FA__SM90A
    extern __shared__ __align__(1024) uint8_t sm[];
    uint32_t base = ((uint32_t)__cvta_generic_to_shared(sm) + 1023u) & ~1023u;
    for (int i = threadIdx.x; i < 40 * 1024 / 4; i += 128) ((uint32_t *)sm)[i] = 0x3f803f80u * (i & 1);
    __syncthreads();
    uint32_t sq = base, sk = base + 8192;
    float a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = 0.f;
    const uint64_t qd = fa__wg_desc(sq, 16, 1024);
    auto qk = [&](float (&acc)[64]) {
        fa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            fa__wgmma<128, true>::ss(acc, fa__wg_desc_step(qd, kk * 32), fa__wg_desc(sk + kk * 32, 16, 1024), kk > 0);
        fa__wgmma_commit();
    };
    float c[32];
    uint32_t pa[4][4];
    for (int i = 0; i < 32; i++) c[i] = 0.f;
    for (int i = 0; i < 16; i++) pa[i / 4][i % 4] = 0x3f803f80u;
    auto pv = [&]() {
        fa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
            fa__wgmma<64, true>::rs(c, pa[kk % 4], fa__wg_desc(sk + (kk % 4) * 2048, 128 * 128, 1024), 1);
        fa__wgmma_commit();
    };
    long long t0, t1, t2, t3;
    for (int rep = 0; rep < 3; rep++) {
        __syncthreads();
        t0 = clock64();
        qk(a);
        t1 = clock64();
        if (MODE == 1) spin(x);
        if (MODE == 2) { spin(x); qk(b); }
        if (MODE == 3) { spin(x); pv(); }
        if (MODE == 5) { spin(x); pv(); qk(b); }
        t2 = clock64();
        if (MODE == 2 || MODE == 3) fa__wgmma_wait<1>(); else if (MODE == 5) fa__wgmma_wait<2>(); else fa__wgmma_wait<0>();
        fa__fence_regs(a);
        t3 = clock64();
        if (MODE >= 2) { fa__wgmma_wait<0>(); fa__fence_regs(b); fa__fence_regs(c); }
    }
    if (threadIdx.x == 0) { out_t[0] = t1 - t0; out_t[1] = t2 - t1; out_t[2] = t3 - t2; out_t[3] = t3 - t0; }
    float s = 0; for (int i = 0; i < 64; i++) s += a[i] + b[i] + c[i % 32];
    if (s == 12345.f) out_t[9] = 1;
#endif
}
template <int MODE> void run(const char *name, int x)
{
    cudaFuncSetAttribute(k<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024);
    k<MODE><<<1, 128, 48 * 1024>>>(x);
    cudaError_t e = cudaDeviceSynchronize();
    long long h[4]; cudaMemcpyFromSymbol(h, out_t, sizeof h);
    printf("%-28s spin %5d: issue %5lld, spin+%5lld, wait %5lld, total %5lld %s\n", name, x, h[0], h[1], h[2], h[3], e ? cudaGetErrorString(e) : "");
}
int main()
{
    for (int x : {0, 300, 600, 1000, 2000, 4000}) run<1>("QK; spin; wait<0>", x);
    for (int x : {0, 300, 600, 1000, 2000, 4000}) run<2>("QK_a; spin; QK_b; wait<1>", x);
    for (int x : {0, 300, 600, 1000, 2000}) run<3>("QK_a; spin; PV; wait<1>", x);
    for (int x : {0, 300, 600, 1000, 2000}) run<5>("QK_a; spin; PV; QK_b; wait<2>", x);
}
