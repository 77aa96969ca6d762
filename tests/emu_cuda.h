/* tests/emu_cuda.h - run the GPU backward kernels on the CPU, for machines
   (CI, a laptop) without a GPU.

   A small emulation of exactly what flashattn_cuda.cuh's >>backward section
   uses: the CUDA runtime calls (host memory stands in for device memory),
   threadIdx/blockIdx, __syncthreads, __shfl_xor_sync, atomicAdd, and the
   warp-level instructions mma.sync m16n8k16, ldmatrix (.trans) and cp.async.
   Each CUDA thread is an OS thread; a CTA's threads run together (blocks one
   after another), warp-collective instructions meet at a per-warp barrier and
   exchange operands through a per-warp scratch area, so the fragment layouts,
   swizzles and index arithmetic of the real kernels are what gets tested.
   cp.async completes immediately, so missing waits are NOT detected here
   (compute-sanitizer racecheck on the device does that).

   At its end this header includes flashattn_cuda.cuh itself with
   FLASHATTN_CUDA_EMU defined: the header then compiles only the backward
   section and what it uses (>>gpu-smem, the checks), without its PTX
   wrappers (defined here) and with its launches going through
   FA__BWD_LAUNCH (emu_launch here).

   The sm_90a backward kernel runs too (FA_EMU_NO_SM90 leaves it out, as
   FLASHATTN_NO_HOPPER): its mbarriers (arrivals, transaction bytes and
   phases, waited on by parity), TMA box loads (the 128-byte swizzle, zeros
   outside the tensor), 1-d bulk loads and bulk reduce-adds complete at
   once; named barriers are real; wgmma is a warpgroup-collective product
   computed from the operands its descriptors address in the swizzled
   shared memory (K-major or MN-major) or from the threads' A fragments, its
   accumulators in the threads' registers in the instruction's layout. So
   the descriptors, swizzles, fragment layouts and the roles' handshakes
   are tested; timing (what wait_group and the fences order) is not.
   Build: make test-gpu-emu. */
#ifndef FLASHATTN_TESTS_EMU_CUDA_H
#define FLASHATTN_TESTS_EMU_CUDA_H

#include <vector_types.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

/* ---- runtime: definitions of the few calls used (host memory for device
   memory), against the toolkit's own declarations; link without libcudart. */
#include <cuda_runtime.h>

cudaError_t CUDARTAPI cudaMalloc(void **p, size_t n) {
    *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t CUDARTAPI cudaMallocAsync(void **p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t CUDARTAPI cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t CUDARTAPI cudaFreeAsync(void *p, cudaStream_t) { free(p); return cudaSuccess; }
cudaError_t CUDARTAPI cudaMemset(void *d, int v, size_t n) {
    memset(d, v, n);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { return cudaMemset(d, v, n); }
cudaError_t CUDARTAPI cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind) {
    memcpy(d, s, n);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *s) { *s = NULL; return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t CUDARTAPI cudaGetLastError(void) { return cudaSuccess; }
const char *CUDARTAPI cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }
const char *CUDARTAPI cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }
cudaError_t CUDARTAPI cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    strcpy(p->name, "CPU emulation");
    p->major = 9; p->minor = 0;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : 227 * 1024;
    return cudaSuccess;
}
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F *, enum cudaFuncAttribute, int) {
    return cudaSuccess;
}

/* ---- the thread model ------------------------------------------------------ */
#undef __global__
#undef __forceinline__
#undef __shared__
#define __global__
#define __launch_bounds__(...)
#define __forceinline__ inline
#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#define __shared__
#define __CUDA_ARCH__ 900

static thread_local dim3 threadIdx;
static dim3 blockIdx_g, blockDim, gridDim;
#define blockIdx blockIdx_g
static std::barrier<> *emu_block_bar;
static std::vector<std::barrier<> *> emu_warp_bar, emu_wg_bar; /* (warpgroups: 128 threads) */
static std::mutex emu_atomic_mu;
/* per-warp scratch for operand exchange: 32 lanes x 8 words */
static uint32_t emu_scratch[64][32][8];
alignas(1024) unsigned char fa__bwd_smem[256 * 1024];

static inline int emu_lane() { return threadIdx.x % 32; }
static inline int emu_warp() { return threadIdx.x / 32; }
static inline void emu_warp_sync() { emu_warp_bar[emu_warp()]->arrive_and_wait(); }
static inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int m) {
    uint32_t *s = emu_scratch[emu_warp()][0];
    memcpy(&s[emu_lane()], &v, 4);
    emu_warp_sync();
    float r;
    memcpy(&r, &s[emu_lane() ^ m], 4);
    emu_warp_sync();
    return r;
}
static inline float atomicAdd(float *p, float v) {
    std::lock_guard<std::mutex> g(emu_atomic_mu);
    float o = *p;
    *p = o + v;
    return o;
}
static inline float2 atomicAdd(float2 *p, float2 v) {
    std::lock_guard<std::mutex> g(emu_atomic_mu);
    float2 o = *p;
    p->x += v.x; p->y += v.y;
    return o;
}
/* what fa__bm_rows_kernel (a block mask's lists and bitmap) uses */
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_sync(); }
static inline unsigned atomicOr(unsigned *p, unsigned v) {
    std::lock_guard<std::mutex> g(emu_atomic_mu);
    unsigned o = *p;
    *p = o | v;
    return o;
}
static inline unsigned __ldcg(const unsigned *p) {
    std::lock_guard<std::mutex> g(emu_atomic_mu); /* (the words the atomics wrote) */
    return *p;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int emu_shfl(int v, int src_lane) {
    uint32_t *s = emu_scratch[emu_warp()][0];
    memcpy(&s[emu_lane()], &v, 4);
    emu_warp_sync();
    int r;
    memcpy(&r, &s[src_lane], 4);
    emu_warp_sync();
    return r;
}
static inline int __shfl_sync(unsigned, int v, int src) { return emu_shfl(v, src % 32); }
static inline unsigned __ballot_sync(unsigned, int pred) {
    uint32_t *s = emu_scratch[emu_warp()][0];
    s[emu_lane()] = pred != 0;
    emu_warp_sync();
    unsigned r = 0;
    for (int l = 0; l < 32; l++) r |= s[l] << l;
    emu_warp_sync();
    return r;
}
static inline int __shfl_up_sync(unsigned, int v, int d) { return emu_shfl(v, emu_lane() >= d ? emu_lane() - d : emu_lane()); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline size_t __cvta_generic_to_shared(const void *p) {
    return (size_t)((const unsigned char *)p - fa__bwd_smem);
}

/* Run kernel k over the grid: blockDim.x OS threads, created once per launch,
   walk the CTAs one after another (all of a CTA's threads run together). */
template <typename K, typename... A>
static void emu_launch(K k, dim3 grid, dim3 block, size_t smem, cudaStream_t, const A &...arg) {
    (void)smem;
    gridDim = grid;
    blockDim = block;
    const int nt = block.x, nw = (nt + 31) / 32;
    const long nblocks = (long)grid.x * grid.y * grid.z;
    std::barrier<> bb(nt);
    emu_block_bar = &bb;
    std::vector<std::barrier<> *> wb;
    for (int w = 0; w < nw; w++) wb.push_back(new std::barrier<>(32));
    emu_warp_bar = wb;
    std::vector<std::barrier<> *> gb;
    for (int w = 0; w + 4 <= nw; w += 4) gb.push_back(new std::barrier<>(128));
    emu_wg_bar = gb;
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t] {
            threadIdx = dim3(t, 0, 0);
            for (long i = 0; i < nblocks; i++) {
                bb.arrive_and_wait(); /* everyone finished the previous CTA */
                if (t == 0) {
                    blockIdx_g = dim3(i % grid.x, (i / grid.x) % grid.y, i / ((long)grid.x * grid.y));
                    memset(fa__bwd_smem, 0xA5, sizeof fa__bwd_smem); /* garbage, like real smem */
                }
                bb.arrive_and_wait();
                k(arg...);
            }
        });
    for (auto &t : th) t.join();
    for (auto *b : wb) delete b;
    for (auto *b : gb) delete b;
}

/* ---- the warp-level instructions ------------------------------------------ */
static inline float emu_lo(__half, uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xffff))); }
static inline float emu_hi(__half, uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }
static inline float emu_lo(__nv_bfloat16, uint32_t u) { uint32_t x = u << 16; float f; memcpy(&f, &x, 4); return f; }
static inline float emu_hi(__nv_bfloat16, uint32_t u) { uint32_t x = u & 0xffff0000u; float f; memcpy(&f, &x, 4); return f; }

/* mma.sync.m16n8k16.row.col: every lane publishes its A (4) and B (2)
   registers; each lane then computes its own 4 C elements from the others'. */
template <typename T>
static inline void emu_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    uint32_t(*s)[8] = emu_scratch[emu_warp()];
    const int l = emu_lane(), g = l / 4, t = l % 4;
    for (int i = 0; i < 4; i++) s[l][i] = a[i];
    s[l][4] = b0;
    s[l][5] = b1;
    emu_warp_sync();
    /* A(row, k): held by lane 4*(row%8) + (k%8)/2, register (row/8) + 2*(k/8), half k%2 */
    auto A = [&](int row, int k) {
        uint32_t u = s[4 * (row % 8) + (k % 8) / 2][(row / 8) + 2 * (k / 8)];
        return (k % 2) ? emu_hi(T(), u) : emu_lo(T(), u);
    };
    /* B(k, n): lane 4*n + (k%8)/2, register 4 + k/8, half k%2 */
    auto B = [&](int k, int n) {
        uint32_t u = s[4 * n + (k % 8) / 2][4 + k / 8];
        return (k % 2) ? emu_hi(T(), u) : emu_lo(T(), u);
    };
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int row = g + (e / 2) * 8, col = 2 * t + (e % 2);
        float acc = c[e];
        for (int k = 0; k < 16; k++) acc += A(row, k) * B(k, col);
        out[e] = acc;
    }
    emu_warp_sync();
    for (int e = 0; e < 4; e++) c[e] = out[e];
}
template <bool BF16> static inline void fa__mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    if (BF16) emu_mma<__nv_bfloat16>(c, a, b0, b1);
    else emu_mma<__half>(c, a, b0, b1);
}

/* ldmatrix.x4: lanes 8i..8i+7 give the row addresses of matrix i. Plain:
   lane l gets row l/4, elements 2(l%4), 2(l%4)+1. Trans: elements
   (row 2(l%4), col l/4) and (row 2(l%4)+1, col l/4). */
static inline void emu_ldsm(uint32_t r[4], uint32_t addr, bool trans) {
    uint32_t(*s)[8] = emu_scratch[emu_warp()];
    const int l = emu_lane();
    s[l][0] = addr;
    emu_warp_sync();
    uint32_t out[4];
    for (int i = 0; i < 4; i++) {
        if (!trans) {
            memcpy(&out[i], fa__bwd_smem + s[8 * i + l / 4][0] + 4 * (l % 4), 4);
        } else {
            uint16_t lo, hi;
            memcpy(&lo, fa__bwd_smem + s[8 * i + 2 * (l % 4)][0] + 2 * (l / 4), 2);
            memcpy(&hi, fa__bwd_smem + s[8 * i + 2 * (l % 4) + 1][0] + 2 * (l / 4), 2);
            out[i] = lo | ((uint32_t)hi << 16);
        }
    }
    emu_warp_sync();
    for (int i = 0; i < 4; i++) r[i] = out[i];
}
static inline void fa__ldmatrix_x4(uint32_t r[4], uint32_t addr) { emu_ldsm(r, addr, false); }
static inline void fa__ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) { emu_ldsm(r, addr, true); }
static inline void fa__cp_async16(uint32_t dst, const void *src, int n) {
    memset(fa__bwd_smem + dst, 0, 16);
    memcpy(fa__bwd_smem + dst, src, n);
}
static inline void fa__bwd_cp_async4(uint32_t dst, const void *src, int n) {
    memset(fa__bwd_smem + dst, 0, 4);
    memcpy(fa__bwd_smem + dst, src, n);
}
static inline void fa__cp_async_commit() {}
template <int N> static inline void fa__cp_async_wait() {}
static inline float fa__exp2(float x) { return exp2f(x); }
static inline uint32_t fa__bwd_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

#define FA__BWD_LAUNCH(kern, grid, block, smem, stream, ...) emu_launch(kern, grid, block, smem, stream, __VA_ARGS__)

#ifdef FA_EMU_NO_SM90
#ifndef FLASHATTN_NO_HOPPER
#define FLASHATTN_NO_HOPPER
#endif
#else
#include "emu_cuda90.h"
#endif

/* the backward section itself */
#define FLASHATTN_CUDA_EMU
#include "../flashattn_cuda.cuh"

#endif
