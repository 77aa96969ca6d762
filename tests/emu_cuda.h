/* tests/emu_cuda.h - run the GPU kernels on the CPU, for machines (CI, a
   laptop) without a GPU: the backward, and with FLASHATTN_CUDA_EMU_FWD
   defined first the forward (sm_80 and sm_90a kernels, FP8 included) and
   the FP8 quantizer, with FLASHATTN_CUDA_EMU_DEC decode (its kernel,
   split-KV combine and append).

   A small emulation of exactly what flashattn_cuda.cuh's kernels use: the
   CUDA runtime calls (host memory stands in for device memory),
   threadIdx/blockIdx, __syncthreads, the warp shuffles and votes, atomics,
   and the warp-level instructions mma.sync m16n8k16, ldmatrix (.trans),
   stmatrix and cp.async. Each CUDA thread is a fiber on the calling OS
   thread; a CTA's threads run together (blocks one after another), each
   until it waits, and warp-collective instructions meet at a per-warp
   barrier and exchange operands through a per-warp scratch area, so the
   fragment layouts, swizzles and index arithmetic of the real kernels are
   what gets tested. Asynchronous copies and products complete as late as
   their waits allow: cp.async at the wait_group retiring its group, TMA
   and bulk loads when a thread waits on their mbarrier, TMA and bulk
   stores at their thread's bulk wait, wgmma at its wait_group; so data
   read before its wait, or a buffer rewritten before the wait of what
   reads it, shows in the results. (Timing itself is not modelled: a race
   that needs a particular interleaving may pass; compute-sanitizer's
   racecheck on the device remains the check for those.)

   At its end this header includes flashattn_cuda.cuh itself with
   FLASHATTN_CUDA_EMU defined: the header then compiles only the backward
   section (and the forward's and decode's, FLASHATTN_CUDA_EMU_FWD / _DEC)
   and what they use (>>gpu-smem, the checks), without its PTX wrappers
   (defined here) and with its launches going through FA__LAUNCH
   (emu_launch here).

   The sm_90a kernels run too (FA_EMU_NO_SM90 leaves them out, as
   FLASHATTN_NO_HOPPER; tests/emu_cuda90.h): mbarriers (arrivals,
   transaction bytes and phases, waited on by parity), TMA box loads (the
   128-byte swizzle, zeros outside the tensor) and stores (clipped to it),
   1-d bulk loads and bulk reduce-adds; named barriers; wgmma (16-bit and
   e4m3) as a warpgroup-collective product computed from the operands its
   descriptors address in the swizzled shared memory (K-major or MN-major;
   the 128- or 64-byte swizzle) or from the threads' A fragments, its
   accumulators in the threads' registers in the instruction's layout. So
   the descriptors, swizzles, fragment layouts and the roles' handshakes
   are tested; the fences are no-ops.
   Build and run: make test-gpu-emu (make test and test-all also run them
   under AddressSanitizer and UBSan: the fibers' stack switches are
   announced to ASan). */
#ifndef FLASHATTN_TESTS_EMU_CUDA_H
#define FLASHATTN_TESTS_EMU_CUDA_H

#include <vector_types.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <chrono>
#include <functional>
#include <ucontext.h>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
    p->multiProcessorCount = 132;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return cudaSuccess; }
/* an H100 / H200 as the launch paths see it: 132 SMs, 227 KB of shared memory a block */
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9
         : a == cudaDevAttrComputeCapabilityMinor ? 0
         : a == cudaDevAttrMultiProcessorCount    ? 132
                                                   : 227 * 1024;
    return cudaSuccess;
}
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F *, enum cudaFuncAttribute, int) {
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) { *s = NULL; return cudaSuccess; }
/* (decode's setup) CTAs an SM holds: by shared memory alone (228 KB an SM, 1 KB
   reserved a CTA) and 2048 threads; every kernel compiled for sm_90 */
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *, int threads,
                                                                             size_t smem, unsigned int) {
    const int by_smem = (int)(228 * 1024 / (smem + 1024)), by_threads = 2048 / threads;
    *n = by_smem < by_threads ? by_smem : by_threads;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *) {
    memset(a, 0, sizeof *a);
    a->binaryVersion = a->ptxVersion = 90;
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

/* The running CUDA thread's index: set by the scheduler at every switch. */
static dim3 threadIdx;
static dim3 blockIdx_g, blockDim, gridDim;
#define blockIdx blockIdx_g

/* Each CUDA thread of a CTA is a fiber (its own stack) on the launching OS
   thread; a thread runs until it waits (a barrier, a warp-collective's
   meeting point, an mbarrier, a poll of global memory), where it yields to
   the next (round robin). (One OS thread a CUDA thread spent most of its
   time in the OS's scheduler: docs/NOTES.md [gpu-emu].) The switch saves the callee-saved registers
   on the old stack and takes the new one's: on x86-64 in a few
   instructions, elsewhere with ucontext (whose swapcontext makes a system
   call). */
#if defined(__x86_64__) && !defined(EMU_UCONTEXT) /* (EMU_UCONTEXT: the portable switch) */
extern "C" void emu_switch(void **save_sp, void *sp);
__asm__(".text\n.globl emu_switch\n.type emu_switch,@function\nemu_switch:\n"
        "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
        "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
        "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
        ".size emu_switch, .-emu_switch\n");
struct emu_ctx {
    void *sp;
};
static inline void emu_ctx_switch(emu_ctx *from, emu_ctx *to) { emu_switch(&from->sp, to->sp); }
/* a fresh stack whose first switch "returns" into entry (which never returns) */
static inline void emu_ctx_make(emu_ctx *c, char *stack, size_t size, void (*entry)(void)) {
    void **top = (void **)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
    *--top = nullptr; /* (entry's return address slot: it never returns) */
    *--top = (void *)entry;
    for (int i = 0; i < 6; i++) *--top = nullptr; /* rbp, rbx, r12-r15 */
    c->sp = top;
}
#else
struct emu_ctx {
    ucontext_t uc;
};
static inline void emu_ctx_switch(emu_ctx *from, emu_ctx *to) { swapcontext(&from->uc, &to->uc); }
static inline void emu_ctx_make(emu_ctx *c, char *stack, size_t size, void (*entry)(void)) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif
struct emu_fiber {
    emu_ctx ctx;
    char *stack;
    bool done;
    void *asan_fake; /* (AddressSanitizer's record of a stack it left) */
};
static std::vector<emu_fiber> emu_fibers;
static emu_ctx emu_sched_ctx;
static int emu_cur; /* the running fiber */
/* Under AddressSanitizer (make test-gpu-emu-san) every switch is announced,
   so that it knows which stack is live. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
static const void *emu_sched_bottom;
static size_t emu_sched_size;
static void *emu_sched_fake;
#define EMU_TO_FIBER(f, size) __sanitizer_start_switch_fiber(&emu_sched_fake, (f).stack, size)
#define EMU_IN_SCHED() __sanitizer_finish_switch_fiber(emu_sched_fake, nullptr, nullptr)
#define EMU_TO_SCHED(fake) __sanitizer_start_switch_fiber(fake, emu_sched_bottom, emu_sched_size)
#define EMU_IN_FIBER(fake) __sanitizer_finish_switch_fiber(fake, &emu_sched_bottom, &emu_sched_size)
#else
#define EMU_TO_FIBER(f, size) ((void)0)
#define EMU_IN_SCHED() ((void)0)
#define EMU_TO_SCHED(fake) ((void)0)
#define EMU_IN_FIBER(fake) ((void)0)
#endif
/* A wait that lasts this long is a hang (a barrier nobody completes): the
   test fails instead of stalling CI. */
#ifndef EMU_HANG_SECONDS
#define EMU_HANG_SECONDS 300
#endif
static inline void emu_hang(const char *what, unsigned id) {
    fprintf(stderr, "emulator: %s %u waited %d s: a hang, aborting\n", what, id, EMU_HANG_SECONDS);
    abort();
}
static inline void emu_yield() {
    emu_fiber &f = emu_fibers[(size_t)emu_cur];
    EMU_TO_SCHED(&f.asan_fake);
    emu_ctx_switch(&f.ctx, &emu_sched_ctx);
    EMU_IN_FIBER(emu_fibers[(size_t)emu_cur].asan_fake);
}
/* yield until ready() holds (the clock read every 4096 turns, from the 4096th) */
template <class F> static inline void emu_wait_until(F ready, const char *what, unsigned id) {
    std::chrono::steady_clock::time_point t0;
    for (unsigned n = 1; !ready(); n++) {
        emu_yield();
        if (n % 4096) continue;
        const auto now = std::chrono::steady_clock::now();
        if (n == 4096) t0 = now;
        else if (now - t0 > std::chrono::seconds(EMU_HANG_SECONDS)) emu_hang(what, id);
    }
}
struct emu_barrier {
    int n, arrived = 0;
    unsigned gen = 0;
    explicit emu_barrier(int threads) : n(threads) {}
    void arrive_and_wait() {
        const unsigned g = gen;
        if (++arrived == n) {
            arrived = 0;
            gen++;
        } else {
            emu_wait_until([&] { return gen != g; }, "barrier of threads", (unsigned)n);
        }
    }
};
static emu_barrier *emu_block_bar;
static std::vector<emu_barrier *> emu_warp_bar, emu_wg_bar; /* (warpgroups: 128 threads) */
/* per-warp scratch for operand exchange: 32 lanes x 8 words */
static uint32_t emu_scratch[64][32][8];
alignas(1024) unsigned char fa__bwd_smem[256 * 1024];

static inline int emu_lane() { return threadIdx.x % 32; }
static inline int emu_warp() { return threadIdx.x / 32; }
static inline void emu_warp_sync() { emu_warp_bar[emu_warp()]->arrive_and_wait(); }
static inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
/* lane src_lane's v: every lane writes its own, the warp meets, each reads */
static inline int emu_shfl(int v, int src_lane) {
    uint32_t *s = emu_scratch[emu_warp()][0];
    memcpy(&s[emu_lane()], &v, 4);
    emu_warp_sync();
    int r;
    memcpy(&r, &s[src_lane], 4);
    emu_warp_sync();
    return r;
}
static inline float __shfl_xor_sync(unsigned, float v, int m) {
    int u;
    memcpy(&u, &v, 4);
    u = emu_shfl(u, emu_lane() ^ m);
    memcpy(&v, &u, 4);
    return v;
}
static inline unsigned __shfl_xor_sync(unsigned, unsigned v, int m) {
    return (unsigned)emu_shfl((int)v, emu_lane() ^ m);
}
/* Atomics are plain read-modify-writes: the fibers switch only where they
   wait, never inside one. */
static inline float atomicAdd(float *p, float v) {
    float o = *p;
    *p = o + v;
    return o;
}
static inline int atomicAdd(int *p, int v) {
    int o = *p;
    *p = o + v;
    return o;
}
static inline float2 atomicAdd(float2 *p, float2 v) {
    float2 o = *p;
    p->x += v.x; p->y += v.y;
    return o;
}
/* what fa__bm_rows_kernel (a block mask's lists and bitmap) uses */
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_sync(); }
static inline unsigned atomicOr(unsigned *p, unsigned v) {
    unsigned o = *p;
    *p = o | v;
    return o;
}
static inline unsigned __ldcg(const unsigned *p) { return *p; }
/* what the FP8 quantizer uses */
static inline unsigned atomicMax(unsigned *p, unsigned v) {
    unsigned o = *p;
    if (v > o) *p = v;
    return o;
}
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
static inline float __fdividef(float a, float b) { return a / b; }
/* byte i of the result: byte s[i] of the pair (x the low four, y the high) */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = (uint64_t)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static inline int __ffs(int x) { return __builtin_ffs(x); }
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
static inline int __any_sync(unsigned, int pred) { return __ballot_sync(0xffffffffu, pred) != 0; }
static inline int __shfl_up_sync(unsigned, int v, int d) { return emu_shfl(v, emu_lane() >= d ? emu_lane() - d : emu_lane()); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline size_t __cvta_generic_to_shared(const void *p) {
    return (size_t)((const unsigned char *)p - fa__bwd_smem);
}

/* Run kernel k over the grid: blockDim.x fibers a CTA, the CTAs one after
   another. */
static std::function<void()> emu_body;
static void emu_cp_reset(int threads); /* (below) no cp.async pending */
static void emu_cta_begin(void); /* tests/emu_cuda90.h: the sm_90a state a CTA starts from */
static void emu_cta_end(void);   /* and what it must have finished */
static void emu_fiber_main() {
    EMU_IN_FIBER(nullptr);
    emu_body();
    emu_fibers[(size_t)emu_cur].done = true;
    EMU_TO_SCHED(nullptr); /* (this stack is done) */
    emu_ctx_switch(&emu_fibers[(size_t)emu_cur].ctx, &emu_sched_ctx); /* (never resumed) */
    abort();
}
template <typename K, typename... A>
static void emu_launch(K k, dim3 grid, dim3 block, size_t smem, cudaStream_t, const A &...arg) {
    enum { STACK = 512 * 1024 };
    (void)smem;
    gridDim = grid;
    blockDim = block;
    const int nt = block.x, nw = (nt + 31) / 32;
    const long nblocks = (long)grid.x * grid.y * grid.z;
    emu_barrier bb(nt);
    emu_block_bar = &bb;
    std::vector<emu_barrier *> wb;
    for (int w = 0; w < nw; w++) wb.push_back(new emu_barrier(32));
    emu_warp_bar = wb;
    std::vector<emu_barrier *> gb;
    for (int w = 0; w + 4 <= nw; w += 4) gb.push_back(new emu_barrier(128));
    emu_wg_bar = gb;
    if (emu_fibers.size() < (size_t)nt) emu_fibers.resize((size_t)nt, emu_fiber{});
    emu_body = [&] { k(arg...); };
    for (long i = 0; i < nblocks; i++) {
        blockIdx_g = dim3(i % grid.x, (i / grid.x) % grid.y, i / ((long)grid.x * grid.y));
        memset(fa__bwd_smem, 0xA5, sizeof fa__bwd_smem); /* garbage, like real smem */
        emu_cp_reset(nt);
        emu_cta_begin();
        for (int t = 0; t < nt; t++) {
            emu_fiber &f = emu_fibers[(size_t)t];
            if (!f.stack) f.stack = (char *)malloc(STACK);
            emu_ctx_make(&f.ctx, f.stack, STACK, emu_fiber_main);
            f.done = false;
        }
        for (int running = nt; running > 0;) {
            running = 0;
            for (int t = 0; t < nt; t++) {
                if (emu_fibers[(size_t)t].done) continue;
                emu_cur = t;
                threadIdx = dim3(t, 0, 0);
                EMU_TO_FIBER(emu_fibers[(size_t)t], STACK);
                emu_ctx_switch(&emu_sched_ctx, &emu_fibers[(size_t)t].ctx);
                EMU_IN_SCHED();
                running += !emu_fibers[(size_t)t].done;
            }
        }
        emu_cta_end();
    }
    for (auto *b : wb) delete b;
    for (auto *b : gb) delete b;
}

/* ---- the warp-level instructions ------------------------------------------ */
static inline float emu_lo(__half, uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u & 0xffff))); }
static inline float emu_hi(__half, uint32_t u) { return __half2float(__ushort_as_half((unsigned short)(u >> 16))); }
static inline float emu_lo(__nv_bfloat16, uint32_t u) { uint32_t x = u << 16; float f; memcpy(&f, &x, 4); return f; }
static inline float emu_hi(__nv_bfloat16, uint32_t u) { uint32_t x = u & 0xffff0000u; float f; memcpy(&f, &x, 4); return f; }

/* mma.sync.m16n8k16.row.col: every lane publishes its A (4) and B (2)
   registers and its C; lane 0 computes all 32 x 4 sums into the others'. */
static float *emu_mma_c[64][32];
template <typename T>
static inline void emu_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    uint32_t(*s)[8] = emu_scratch[emu_warp()];
    const int l = emu_lane();
    for (int i = 0; i < 4; i++) s[l][i] = a[i];
    s[l][4] = b0;
    s[l][5] = b1;
    emu_mma_c[emu_warp()][l] = c;
    emu_warp_sync();
    if (l == 0) {
        float A[16][16], Bt[8][16]; /* A(row, k), B(k, n) by columns */
        for (int row = 0; row < 16; row++)
            for (int k = 0; k < 16; k++) { /* lane 4 (row % 8) + (k % 8) / 2, register row / 8 + 2 (k / 8), half k % 2 */
                const uint32_t u = s[4 * (row % 8) + (k % 8) / 2][(row / 8) + 2 * (k / 8)];
                A[row][k] = (k % 2) ? emu_hi(T(), u) : emu_lo(T(), u);
            }
        for (int n = 0; n < 8; n++)
            for (int k = 0; k < 16; k++) { /* lane 4 n + (k % 8) / 2, register 4 + k / 8, half k % 2 */
                const uint32_t u = s[4 * n + (k % 8) / 2][4 + k / 8];
                Bt[n][k] = (k % 2) ? emu_hi(T(), u) : emu_lo(T(), u);
            }
        for (int ln = 0; ln < 32; ln++)
            for (int e = 0; e < 4; e++) { /* lane ln's element e: row ln / 4 + 8 (e / 2), column 2 (ln % 4) + e % 2 */
                const int row = ln / 4 + (e / 2) * 8, col = 2 * (ln % 4) + (e % 2);
                float acc = emu_mma_c[emu_warp()][ln][e];
                for (int k = 0; k < 16; k++) acc += A[row][k] * Bt[col][k];
                emu_mma_c[emu_warp()][ln][e] = acc;
            }
    }
    emu_warp_sync();
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
/* stmatrix.x4 (ldmatrix.x4's inverse): lane l's r[i] is row l/4, elements
   2(l%4), 2(l%4)+1 of matrix i, whose row addresses lanes 8i..8i+7 give */
static inline void fa__stmatrix_x4(uint32_t addr, const uint32_t r[4]) {
    uint32_t(*s)[8] = emu_scratch[emu_warp()];
    const int l = emu_lane();
    s[l][0] = addr;
    for (int i = 0; i < 4; i++) s[l][1 + i] = r[i];
    emu_warp_sync();
    if (l == 0)
        for (int i = 0; i < 4; i++)
            for (int src = 0; src < 32; src++)
                memcpy(fa__bwd_smem + s[8 * i + src / 4][0] + 4 * (src % 4), &s[src][1 + i], 4);
    emu_warp_sync();
}
/* cp.async: a thread's copies land at its cp.async.wait_group that
   retires their commit group (shared memory read before it holds what
   was there before); copies no wait retired are dropped at the CTA's end. */
struct emu_cp {
    uint32_t dst, size;
    const void *src;
    int n;
};
struct emu_cp_queue {
    std::vector<emu_cp> cps;    /* issued, not yet landed */
    std::vector<size_t> groups; /* per commit still pending: how many of cps it closes */
};
static emu_cp_queue emu_cpq[1024];
static void emu_cp_reset(int threads) {
    for (int t = 0; t < threads; t++) emu_cpq[t] = emu_cp_queue();
}
static inline void emu_cp_issue(uint32_t dst, uint32_t size, const void *src, int n) {
    emu_cpq[threadIdx.x].cps.push_back({dst, size, src, n});
}
static inline void fa__cp_async16(uint32_t dst, const void *src, int n) { emu_cp_issue(dst, 16, src, n); }
static inline void fa__bwd_cp_async4(uint32_t dst, const void *src, int n) { emu_cp_issue(dst, 4, src, n); }
static inline void fa__cp_async_commit() {
    emu_cp_queue &q = emu_cpq[threadIdx.x];
    q.groups.push_back(q.cps.size());
}
template <int N> static inline void fa__cp_async_wait() {
    emu_cp_queue &q = emu_cpq[threadIdx.x];
    if (q.groups.size() <= (size_t)N) return;
    const size_t upto = q.groups[q.groups.size() - 1 - N]; /* the copies of every group but the newest N */
    for (size_t i = 0; i < upto; i++) {
        memset(fa__bwd_smem + q.cps[i].dst, 0, q.cps[i].size);
        memcpy(fa__bwd_smem + q.cps[i].dst, q.cps[i].src, (size_t)q.cps[i].n);
    }
    q.cps.erase(q.cps.begin(), q.cps.begin() + (long)upto);
    q.groups.erase(q.groups.begin(), q.groups.end() - N);
    for (auto &g : q.groups) g -= upto;
}
static inline float fa__exp2(float x) { return exp2f(x); }
static inline float fa__max_nan(float a, float b) { return a != a || b != b ? NAN : fmaxf(a, b); }
static inline float fa__lg2_ftz(float x) { return log2f(x); }
static inline float fa__rcp_ftz(float x) { return 1.0f / x; }
#define fa__smem fa__bwd_smem /* the sm_80 forward's extern shared array */
static inline uint32_t fa__bwd_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

#define FA__LAUNCH(kern, grid, block, smem, stream, ...) emu_launch(kern, grid, block, smem, stream, __VA_ARGS__)

/* Decode (FLASHATTN_CUDA_EMU_DEC): its launches with a configuration (the
   programmatic-dependent attribute means nothing here: grids run one after
   another), its shared memory, its static shared arrays (FA__SHARED: one per
   kernel instance, the CTAs running one at a time), its copies' L2 policy
   (none) and the grid-dependency waits (nothing to wait for). */
template <typename P> static cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *c, void (*k)(P), const P &p) {
    emu_launch(k, c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream, p);
    return cudaSuccess;
}
#define fa__dec_smem fa__bwd_smem
#define FA__SHARED static
static inline uint64_t fa__l2_evict_first(void) { return 0; }
static inline void fa__cp_async16_pol(uint32_t dst, const void *src, int n, uint64_t) { fa__cp_async16(dst, src, n); }
static inline void fa__grid_dep_wait(void) {}
static inline void fa__grid_dep_launch(void) {}
template <class T> static inline T __ldg(const T *p) { return *p; }
#define __log2f(x) log2f(x) /* (glibc declares a __log2f of its own) */

/* a block mask's unit order: most work first (the kernel's counting sort
   leaves equal counts in any order; this keeps them in item order) */
template <class Count> static void fa__bm_order_kernel(const Count count, int n, int nb, int32_t *order) {
    if (threadIdx.x != 0) return;
    std::vector<int> c((size_t)n);
    for (int t = 0; t < n; t++) c[(size_t)t] = count(t) < nb - 1 ? count(t) : nb - 1;
    int at = 0;
    for (int v = nb - 1; v >= 0; v--)
        for (int t = 0; t < n; t++)
            if (c[(size_t)t] == v) order[at++] = t;
}

#ifdef FA_EMU_NO_SM90
#ifndef FLASHATTN_NO_HOPPER
#define FLASHATTN_NO_HOPPER
#endif
static void emu_cta_begin(void) {}
static void emu_cta_end(void) {}
#else
#include "emu_cuda90.h"
#endif

/* the backward section itself */
#define FLASHATTN_CUDA_EMU
#include "../flashattn_cuda.cuh"

#endif
