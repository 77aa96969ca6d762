/* flashattn_cuda.cuh - the GPU half of flashattn.h (included by it when the
   implementation file is compiled by nvcc). See flashattn.h for the API.

   (The forward engineer owns this file's opening, tiling notes and shared
   primitives; the backward section below is self-contained until those land.)
*/
#ifndef FLASHATTN_CUDA_CUH
#define FLASHATTN_CUDA_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

#ifndef FLASHATTN_NO_BACKWARD
/* ============================================================================
   >>backward  GPU backward pass for sm_80+ (FlashAttention-2, seed 000 Alg. 4)
   ============================================================================

   What it computes. The forward kept only O and the log-sum-exp L of every
   query row, so the backward rebuilds each tile of P from scratch
   (recomputation, Alg. 4 line 13): P_ij = exp(S_ij - L_i). With
   D_i = rowsum(dO_i * O_i) (line 19; seed 001 derives why this equals
   rowsum(dP_i * P_i)), the gradients are

       dV = P^T dO                     (line 16)
       dP = dO V^T                     (line 17)
       dS = P * (dP - D)               (line 20, the softmax gradient)
       dQ = scale * dS K               (line 21)
       dK = scale * dS^T Q             (line 22)

   with, per feature: dropout multiplies P (for dV) and dP by Z (the kept mask
   over 1-p, lines 14-18); softcap s = c tanh(x/c) multiplies dS by its
   derivative 1 - tanh^2; ALiBi and the masks are constants and only decide
   which entries of P are zero.

   Three kernels, all on the caller's stream:
     1. fa__bwd_preprocess_kernel: D = rowsum(dO * O) per (row, head) into the
        workspace, and zero the fp32 dQ accumulator (non-deterministic mode).
     2. fa__bwd_kernel_sm80: one CTA per (K/V block j, KV head, batch) - the FA2
        loop order of the backward: K_j, V_j stay in shared memory, dK_j, dV_j
        stay in registers, and the CTA walks every Q block i (of every query
        head of the KV head's group, which is how GQA/MQA sums dK/dV without
        copies) that can see block j. dQ_i gets a partial sum from every j, so
        it goes to an fp32 accumulator: atomicAdd by default; in deterministic
        mode each j writes its own slice and kernel 3 sums them in order j = 0,
        1, 2, ... (bit-identical run to run).
     3. fa__bwd_dq_convert_kernel: dQ = scale * accumulator, in the output type.

   The tiles (Bc keys per CTA, Br queries per step), for 8 warps:
       d <= 64 : Bc 128, Br 64    d <= 128: Bc 128, Br 64    d <= 256: Bc 64, Br 32
   Other head dims run on the next larger kernel with zero-filled columns.

   Warp layout. Warp w owns 16 keys (rows 16*(w/WD) .. of K_j) and, when WD = 2
   (d = 256, where dK and dV of 16 x 256 would need 256 registers), half of the
   head dim of dK/dV. Each warp computes the TRANSPOSED scores
   S^T = K_j Q_i^T (16 keys x Br queries): the C fragments of S^T are then
   directly the A operand of dV += P^T dO and dK += dS^T Q (the C->A register
   identity of GPU.md), so P and dS never touch shared memory for dK/dV. Only
   dQ = dS K needs dS by query rows across all warps: dS^T goes to shared memory
   once, and the warps re-split as (Br/16 row strips) x (column groups).

   mma.sync m16n8k16 fragments (g = lane/4, t = lane%4): A 16x16 a0..a3 =
   (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B 16x8 b0,b1 =
   (k 2t..2t+1, n g), (k 2t+8.., n g); C 16x8 c0,c1 = (g, 2t..), c2,c3 =
   (g+8, 2t..). ldmatrix reads an operand stored with its K dimension
   contiguous as is, and one stored with M or N contiguous with .trans:
       operand            stored as           ldmatrix
       K_j  (A of S^T)    [key][d]            plain
       Q_i  (B of S^T)    [query][d]          plain
       dO_i (B of dV)     [query][d]          .trans  (k = query)
       V_j  (A of dP^T)   [key][d]            plain
       dO_i (B of dP^T)   [query][d]          plain
       Q_i  (B of dK)     [query][d]          .trans
       dS^T (A of dQ)     [key][query]        .trans  (k = key)
       K_j  (B of dQ)     [key][d]            .trans
   Shared rows are swizzled: 16-byte chunk c of row r lives at chunk
   c ^ (r % 8) (c ^ ((r/2) % 4) for 64-byte rows), the same on the cp.async
   store and the ldmatrix load, so the 8 row addresses of one ldmatrix matrix
   hit 8 different bank groups.
*/

/* ---- temporary primitives (to be replaced by the forward's shared ones) ---- */

#define FA__BWD_CUDA_TRY(call)                                                   \
    do {                                                                         \
        cudaError_t fa__e = (call);                                              \
        if (fa__e != cudaSuccess) return fa__bwd_cuda_fail(#call, fa__e);        \
    } while (0)

template <typename T> struct fa__bwd_type;
template <> struct fa__bwd_type<__half> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        __half2 h = *reinterpret_cast<__half2 *>(&u);
        return __half22float2(h);
    }
};
template <> struct fa__bwd_type<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float a, float b) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ float2 unpack(uint32_t u) {
        __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162 *>(&u);
        return __bfloat1622float2(h);
    }
};

/* c += a * b, one m16n8k16 tensor-core product, fp32 accumulate. */
__device__ __forceinline__ void fa__bwd_mma(__half, float c[4], const uint32_t a[4],
                                            uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void fa__bwd_mma(__nv_bfloat16, float c[4], const uint32_t a[4],
                                            uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void fa__bwd_ldsm_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void fa__bwd_ldsm_x4_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
/* 16 bytes global -> shared, asynchronously; src_bytes = 0 zero-fills. */
__device__ __forceinline__ void fa__bwd_cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void fa__bwd_cp_async4(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}

__device__ __forceinline__ void fa__bwd_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void fa__bwd_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
/* 2^x in one MUFU.EX2 (flushes denormal results to 0; 2^-inf = 0). */
__device__ __forceinline__ float fa__bwd_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ uint32_t fa__bwd_smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- parameters and per-sequence geometry ---------------------------------- */

/* One tensor view with its strides resolved (elements, never 0). */
typedef struct fa__bwd_view {
    const void *data;
    int64_t bs, ss, hs; /* batch, seq (row), head strides */
} fa__bwd_view;

typedef struct fa__bwd_params {
    fa__bwd_view q, k, v, o, dout, dq, dk, dv;
    const float *lse;      /* L, [b, hq, sq] or [hq, total_q] */
    float *dsum;           /* D = rowsum(dO * O), [hq][acc_rows] */
    float *lse2;           /* L * log2(e) (+inf where L = -inf), [hq][acc_rows] */
    float *dq_acc;         /* fp32 dQ accumulator [slices][hq][acc_rows][acc_d] */
    const int32_t *cu_q, *cu_k;
    const float *alibi;    /* [hq] or NULL */
    int batch, seqlen_q, seqlen_k, hq, hkv, group, d, acc_d;
    int64_t acc_rows;      /* batch * seqlen_q: an upper bound of total_q */
    int64_t acc_slice;     /* hq * acc_rows * acc_d: one j slice (deterministic) */
    float scale, scale_log2, softcap;
    int causal, window, wl, wr;
    float rp_drop;         /* 1 / (1 - p) */
    uint32_t drop_threshold;
    int dropout;
    uint64_t seed, offset;
    int deterministic;
    int br, bc;            /* the main kernel's tile, for the convert kernel */
} fa__bwd_params;

/* Where sequence b lives: rows sq x sk, and the element offset of its row 0
   (varlen: row cu[b] of the packed tensor; else batch b). */
typedef struct fa__bwd_seq {
    int sq, sk;
    int64_t q_tok0, k_tok0; /* first token's row in the packed/varlen view */
    int64_t lse0;           /* L index of (b, head 0, row 0); head stride lse_hs */
    int64_t lse_hs;
    int64_t acc_row0;       /* accumulator row of (b, row 0) */
} fa__bwd_seq;

__device__ __forceinline__ fa__bwd_seq fa__bwd_seq_info(const fa__bwd_params &p, int b) {
    fa__bwd_seq s;
    if (p.cu_q) {
        int q0 = p.cu_q[b], q1 = p.cu_q[b + 1];
        s.sq = q1 - q0;
        s.q_tok0 = q0;
        s.lse0 = q0;
        s.lse_hs = p.cu_q[p.batch];
        s.acc_row0 = q0;
    } else {
        s.sq = p.seqlen_q;
        s.q_tok0 = -1;
        s.lse0 = (int64_t)b * p.hq * p.seqlen_q;
        s.lse_hs = p.seqlen_q;
        s.acc_row0 = (int64_t)b * p.seqlen_q;
    }
    if (p.cu_k) {
        int k0 = p.cu_k[b];
        s.sk = p.cu_k[b + 1] - k0;
        s.k_tok0 = k0;
    } else {
        s.sk = p.seqlen_k;
        s.k_tok0 = -1;
    }
    return s;
}
/* Element offset of (b, token t, head h) in a view; tok0 < 0 means "not varlen". */
__device__ __forceinline__ int64_t fa__bwd_off(const fa__bwd_view &v, int b, int64_t tok0,
                                               int64_t t, int h) {
    return (tok0 >= 0 ? (tok0 + t) * v.ss : (int64_t)b * v.bs + t * v.ss) + (int64_t)h * v.hs;
}

/* Is key j visible to query row i (both within the sequence)? The mask of
   flashattn.h's Semantics, with i' = i + sk - sq (bottom-right alignment). */
__device__ __forceinline__ bool fa__bwd_visible(const fa__bwd_params &p, int sq, int sk, int i,
                                                int j) {
    int ii = i + sk - sq;
    if (j >= sk) return false;
    if (p.causal && j > ii) return false;
    if (p.window && (j < ii - p.wl || j > ii + p.wr)) return false;
    return true;
}

/* Query blocks [*ib0, *ib1) that may see some key of the block [j0, j0+bc):
   block skipping for causal and sliding-window masks. Conservative (a block
   inside the range may still be fully masked; the element mask handles it),
   and shared by the main kernel and the deterministic dQ sum, which must
   agree on exactly which (i, j) pairs wrote a partial dQ. */
__device__ __forceinline__ void fa__bwd_q_range(const fa__bwd_params &p, int sq, int sk, int j0,
                                                int br, int bc, int *ib0, int *ib1) {
    int off = sk - sq; /* i' = i + off */
    int lo = 0, hi = sq - 1;
    int jmax = min(j0 + bc, sk) - 1;
    if (p.causal) lo = max(lo, j0 - off);
    if (p.window) {
        lo = max(lo, j0 - p.wr - off);
        hi = min(hi, jmax + p.wl - off);
    }
    if (j0 >= sk || lo > hi) {
        *ib0 = *ib1 = 0;
        return;
    }
    *ib0 = lo / br;
    *ib1 = hi / br + 1;
}

/* ---- kernel 1: D = rowsum(dO * O), zero the dQ accumulator ----------------- */

/* One warp per (row, head); lane c holds 16-byte chunk c of the row (d <= 256). */
template <typename T>
__global__ void __launch_bounds__(256) fa__bwd_preprocess_kernel(const fa__bwd_params p) {
    typedef fa__bwd_type<T> TT;
    const int lane = threadIdx.x % 32;
    const int t = blockIdx.x * 8 + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
    fa__bwd_seq s = fa__bwd_seq_info(p, b);
    if (t >= s.sq) return;
    float acc = 0.f;
    if (lane * 8 < p.d) {
        const uint4 o4 = *reinterpret_cast<const uint4 *>(
            (const T *)p.o.data + fa__bwd_off(p.o, b, s.q_tok0, t, h) + lane * 8);
        const uint4 g4 = *reinterpret_cast<const uint4 *>(
            (const T *)p.dout.data + fa__bwd_off(p.dout, b, s.q_tok0, t, h) + lane * 8);
        const uint32_t ou[4] = {o4.x, o4.y, o4.z, o4.w}, gu[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float2 a = TT::unpack(ou[e]), c = TT::unpack(gu[e]);
            acc += a.x * c.x + a.y * c.y;
        }
    }
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (lane == 0) {
        /* Both indexed like the dQ accumulator rows, so the main kernel can
           cp.async them by query block. L becomes log2 units, and -inf (a row
           that sees no key) becomes +inf, so that exp2(x - L) is 0 there
           even for masked x = -inf (no NaN from -inf - -inf). */
        const int64_t r = (int64_t)h * p.acc_rows + s.acc_row0 + t;
        const float l = p.lse[s.lse0 + (int64_t)h * s.lse_hs + t];
        p.dsum[r] = acc;
        p.lse2[r] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
    }
    if (!p.deterministic && lane * 8 < p.acc_d) {
        float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
        float *a = p.dq_acc + ((int64_t)h * p.acc_rows + s.acc_row0 + t) * p.acc_d + lane * 8;
        reinterpret_cast<float4 *>(a)[0] = z;
        reinterpret_cast<float4 *>(a)[1] = z;
    }
}

/* ---- kernel 3: dQ = scale * accumulator (sum of slices in fixed order) ------ */

template <typename T>
__global__ void __launch_bounds__(256) fa__bwd_dq_convert_kernel(const fa__bwd_params p) {
    typedef fa__bwd_type<T> TT;
    const int lane = threadIdx.x % 32;
    const int t = blockIdx.x * 8 + threadIdx.x / 32, h = blockIdx.y, b = blockIdx.z;
    fa__bwd_seq s = fa__bwd_seq_info(p, b);
    if (t >= s.sq || lane * 8 >= p.d) return;
    const float *a = p.dq_acc + ((int64_t)h * p.acc_rows + s.acc_row0 + t) * p.acc_d + lane * 8;
    float x[8];
    if (!p.deterministic) {
        float4 u = reinterpret_cast<const float4 *>(a)[0], w = reinterpret_cast<const float4 *>(a)[1];
        x[0] = u.x; x[1] = u.y; x[2] = u.z; x[3] = u.w; x[4] = w.x; x[5] = w.y; x[6] = w.z; x[7] = w.w;
    } else {
        /* Sum the partial dQ of every K/V block j that wrote one for this row,
           always in the order j = 0, 1, 2, ...: the same rounding every run. */
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = 0.f;
        const int ib = t / p.br, nj = (s.sk + p.bc - 1) / p.bc;
        for (int j = 0; j < nj; ++j) {
            int ib0, ib1;
            fa__bwd_q_range(p, s.sq, s.sk, j * p.bc, p.br, p.bc, &ib0, &ib1);
            if (ib < ib0 || ib >= ib1) continue;
            const float *aj = a + (int64_t)j * p.acc_slice;
            float4 u = reinterpret_cast<const float4 *>(aj)[0], w = reinterpret_cast<const float4 *>(aj)[1];
            x[0] += u.x; x[1] += u.y; x[2] += u.z; x[3] += u.w;
            x[4] += w.x; x[5] += w.y; x[6] += w.z; x[7] += w.w;
        }
    }
    uint4 out;
    out.x = TT::pack(x[0] * p.scale, x[1] * p.scale);
    out.y = TT::pack(x[2] * p.scale, x[3] * p.scale);
    out.z = TT::pack(x[4] * p.scale, x[5] * p.scale);
    out.w = TT::pack(x[6] * p.scale, x[7] * p.scale);
    *reinterpret_cast<uint4 *>((T *)p.dq.data + fa__bwd_off(p.dq, b, s.q_tok0, t, h) + lane * 8) = out;
}

/* ---- kernel 2: the main loop over Q blocks for one K/V block --------------- */

/* Swizzled element index of (row r, column col) in a shared tile whose rows
   hold CH 16-byte chunks (the chunk is col / 8). */
template <int CH>
__device__ __forceinline__ int fa__bwd_swz(int r, int col) {
    int c = col >> 3;
    c = CH >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
    return r * CH * 8 + c * 8 + (col & 7);
}
/* Address of chunk cc (a compile-time constant) past a thread's swizzled base
   address `base` (whose own chunk bits are disjoint from cc's low bits, and
   whose row part is a multiple of the swizzle group): the swizzle is an XOR
   on address bits 4-6, so stepping along k is one XOR with a constant and an
   add - no per-step address registers. */
template <int CH>
__device__ __forceinline__ uint32_t fa__bwd_at(uint32_t base, int cc) {
    constexpr int G = CH >= 8 ? 8 : 4;
    return (base ^ (uint32_t)((cc % G) * 16)) + (uint32_t)((cc / G) * G * 16);
}

/* Copy rows [0, ROWS) x columns [0, D) of a tile from global memory (row r at
   g + r * row_stride) into swizzled shared memory with cp.async; rows at or past
   nrows and columns at or past d are zero-filled, reading nothing. */
template <typename T, int ROWS, int D, int NT>
__device__ __forceinline__ void fa__bwd_load_tile(T *s, const T *g, int64_t row_stride,
                                                  int nrows, int d, const void *safe) {
    constexpr int CH = D / 8;
#pragma unroll
    for (int x = threadIdx.x; x < ROWS * CH; x += NT) {
        const int r = x / CH, c = x % CH;
        const bool ok = r < nrows && c * 8 < d;
        const void *src = ok ? (const void *)(g + r * row_stride + c * 8) : safe;
        fa__bwd_cp_async16(fa__bwd_smem_u32(s + fa__bwd_swz<CH>(r, c * 8)), src, ok ? 16 : 0);
    }
}
template <int D, int BR, int BC>
struct fa__bwd_smem_layout {
    /* bytes: K, V [Bc][D]; Q, dO double-buffered [2][Br][D]; dS^T [Bc][Br];
       L (log2 units) and D double-buffered [2][Br] fp32 */
    static constexpr int k = 0, v = BC * D * 2, q = 2 * BC * D * 2, dout = q + 2 * BR * D * 2,
                         ds = dout + 2 * BR * D * 2, lse = ds + BC * BR * 2, dsum = lse + 2 * BR * 4,
                         total = dsum + 2 * BR * 4;
};

template <typename T, int D, int BR, int BC, int NWARPS, int WD, bool SOFTCAP>
__global__ void __launch_bounds__(NWARPS * 32, 1) fa__bwd_kernel_sm80(const fa__bwd_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    typedef fa__bwd_type<T> TT;
    constexpr int NT = NWARPS * 32;
    constexpr int CH = D / 8;           /* chunks per K/V/Q/dO row */
    constexpr int CHS = BR / 8;         /* chunks per dS^T row */
    constexpr int NQ = BR / 8;          /* n8 tiles of queries in S^T */
    constexpr int DW = D / WD;          /* dK/dV columns per warp */
    constexpr int STRIPS = BR / 16;     /* dQ: row strips ... */
    constexpr int NCG = NWARPS / STRIPS; /* ... times column groups */
    constexpr int QC = D / NCG;         /* dQ columns per warp */
    constexpr int QCH = QC < 64 ? QC : 64; /* dQ columns per pass (<= 32 registers) */
    static_assert(BC == 16 * NWARPS / WD, "each warp owns 16 keys");
    static_assert(NWARPS % STRIPS == 0 && QC % 16 == 0 && DW % 16 == 0, "warp split");
    typedef fa__bwd_smem_layout<D, BR, BC> L;
    const float LOG2E = 1.4426950408889634f;

    extern __shared__ __align__(1024) unsigned char fa__bwd_smem[];
    T *sK = (T *)(fa__bwd_smem + L::k), *sV = (T *)(fa__bwd_smem + L::v);
    T *sQ = (T *)(fa__bwd_smem + L::q), *sdO = (T *)(fa__bwd_smem + L::dout);
    T *sdS = (T *)(fa__bwd_smem + L::ds);
    float *sL = (float *)(fa__bwd_smem + L::lse), *sD = (float *)(fa__bwd_smem + L::dsum);

    const int jb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const fa__bwd_seq s = fa__bwd_seq_info(p, b);
    const int j0 = jb * BC;
    if (j0 >= s.sk) return; /* past this sequence's keys (varlen) */
    int ib0, ib1;
    fa__bwd_q_range(p, s.sq, s.sk, j0, BR, BC, &ib0, &ib1);
    const int nib = ib1 - ib0, iters = nib * p.group;

    const T *gq = (const T *)p.q.data, *gdo = (const T *)p.dout.data;
    /* K_j, V_j: loaded once, cp.async group 0 (waited for with step 0). */
    fa__bwd_load_tile<T, BC, D, NT>(sK, (const T *)p.k.data + fa__bwd_off(p.k, b, s.k_tok0, j0, hk),
                                    p.k.ss, s.sk - j0, p.d, p.k.data);
    fa__bwd_load_tile<T, BC, D, NT>(sV, (const T *)p.v.data + fa__bwd_off(p.v, b, s.k_tok0, j0, hk),
                                    p.v.ss, s.sk - j0, p.d, p.v.data);
    fa__bwd_cp_async_commit();
    /* Step it: query head h = hk*group + it / nib, query block ib0 + it % nib.
       Q_i, dO_i, and L, D of its rows (prepared by kernel 1, indexed like the
       dQ accumulator; rows past sq read as 0, harmless: their Q and dO are 0). */
#define FA__BWD_LOAD_STEP(it, buf)                                                             \
    do {                                                                                       \
        const int h_ = hk * p.group + (it) / nib, i0_ = (ib0 + (it) % nib) * BR;               \
        fa__bwd_load_tile<T, BR, D, NT>(sQ + (buf) * BR * D,                                   \
                                        gq + fa__bwd_off(p.q, b, s.q_tok0, i0_, h_), p.q.ss,   \
                                        s.sq - i0_, p.d, p.q.data);                            \
        fa__bwd_load_tile<T, BR, D, NT>(sdO + (buf) * BR * D,                                  \
                                        gdo + fa__bwd_off(p.dout, b, s.q_tok0, i0_, h_),       \
                                        p.dout.ss, s.sq - i0_, p.d, p.dout.data);              \
        if (tid < 2 * BR) {                                                                    \
            const int r_ = tid % BR;                                                           \
            const float *src_ = (tid < BR ? p.lse2 : p.dsum) + (int64_t)h_ * p.acc_rows +     \
                                s.acc_row0 + i0_ + r_;                                         \
            const bool ok_ = i0_ + r_ < s.sq;                                                  \
            fa__bwd_cp_async4(fa__bwd_smem_u32((tid < BR ? sL : sD) + (buf) * BR + r_),        \
                              ok_ ? (const void *)src_ : (const void *)p.lse2, ok_ ? 4 : 0);   \
        }                                                                                      \
    } while (0)
    if (iters > 0) FA__BWD_LOAD_STEP(0, 0);
    fa__bwd_cp_async_commit();

    /* This warp's 16 keys and dK/dV columns. */
    const int krow = (warp / WD) * 16, dcol0 = (warp % WD) * DW;
    float dk[DW / 8][4], dv[DW / 8][4];
#pragma unroll
    for (int n = 0; n < DW / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;

    /* Per-thread ldmatrix base addresses. "plain A" / "trans B" lanes give
       rows (lane%8) + 8*((lane/8)%2), chunk lane/16; "plain B" / "trans A"
       lanes give rows (lane%8) + 8*(lane/16), chunk (lane/8)%2. */
    const int rA = (lane & 7) + ((lane >> 3) & 1) * 8, cA = lane >> 4;
    const int rB = (lane & 7) + (lane >> 4) * 8, cB = (lane >> 3) & 1;
    const uint32_t smem_u = fa__bwd_smem_u32(fa__bwd_smem);
    const uint32_t aK = smem_u + L::k + 2 * fa__bwd_swz<CH>(krow + rA, cA * 8);
    const uint32_t aV = smem_u + L::v + 2 * fa__bwd_swz<CH>(krow + rA, cA * 8);
    const uint32_t aQB = smem_u + L::q + 2 * fa__bwd_swz<CH>(rB, cB * 8);     /* B of S^T */
    const uint32_t adOB = smem_u + L::dout + 2 * fa__bwd_swz<CH>(rB, cB * 8); /* B of dP^T */
    const uint32_t aQT = smem_u + L::q + 2 * fa__bwd_swz<CH>(rA, dcol0 + cA * 8);     /* B of dK */
    const uint32_t adOT = smem_u + L::dout + 2 * fa__bwd_swz<CH>(rA, dcol0 + cA * 8); /* B of dV */
    const int strip = warp / NCG, cg = warp % NCG;
    const uint32_t adS = smem_u + L::ds + 2 * fa__bwd_swz<CHS>(rB, strip * 16 + cB * 8); /* A of dQ */
    const uint32_t aKT = smem_u + L::k + 2 * fa__bwd_swz<CH>(rA, cg * QC + cA * 8);      /* B of dQ */
    constexpr uint32_t ROWB = CH * 16, QBUF = BR * D * 2; /* bytes per row, per Q buffer */

    for (int it = 0; it < iters; ++it) {
        const int buf = it & 1;
        const int h = hk * p.group + it / nib, i0 = (ib0 + it % nib) * BR;
        /* Prefetch step it+1 into the other buffer. Its last readers (step
           it-1's products and L/D reads) all passed step it-1's barrier 2. */
        if (it + 1 < iters) FA__BWD_LOAD_STEP(it + 1, buf ^ 1);
        fa__bwd_cp_async_commit(); /* possibly empty: keeps the group count uniform */
        fa__bwd_cp_async_wait<1>(); /* all but the newest group: K, V and step it */
        /* Barrier 1: every thread's copies of step it (and K, V) are visible,
           and every warp finished reading dS^T of step it-1 (the dQ product),
           so it may be overwritten below. */
        __syncthreads();
        const uint32_t bo = buf * QBUF;
        const float *sLb = sL + buf * BR, *sDb = sD + buf * BR;

        /* (1) S^T = K_j Q_i^T: 16 keys x Br queries for this warp (line 11). */
        float st[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t a[4];
            fa__bwd_ldsm_x4(a, fa__bwd_at<CH>(aK, 2 * kk));
#pragma unroll
            for (int np = 0; np < NQ / 2; ++np) {
                uint32_t bq[4];
                fa__bwd_ldsm_x4(bq, fa__bwd_at<CH>(aQB + bo + np * 16 * ROWB, 2 * kk));
                fa__bwd_mma(T(), st[2 * np], a, bq[0], bq[1]);
                fa__bwd_mma(T(), st[2 * np + 1], a, bq[2], bq[3]);
            }
        }

        /* (2) P^T = exp(S^T - L) with softcap, ALiBi and masks (lines 11-13).
           Element (n, e) is key kj = j0 + krow + g (+8 for e >= 2), query
           qi = i0 + 8n + 2*t4 + (e & 1). The element mask runs only on tiles
           that the mask cuts (or that reach past the last key). */
        const int off = s.sk - s.sq;
        const bool need_mask = (j0 + BC > s.sk) ||
                               (p.causal && j0 + BC - 1 > i0 + off) ||
                               (p.window && (j0 < i0 + BR - 1 + off - p.wl || j0 + BC - 1 > i0 + off + p.wr));
        const float slope = p.alibi ? p.alibi[h] * LOG2E : 0.f;
        float dcap[SOFTCAP ? NQ : 1][4]; /* 1 - tanh^2, softcap's derivative */
#pragma unroll
        for (int n = 0; n < NQ; ++n) {
            const float2 l2 = *reinterpret_cast<const float2 *>(sLb + n * 8 + 2 * t4);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int kj = j0 + krow + g + (e >> 1) * 8, qi = i0 + n * 8 + 2 * t4 + (e & 1);
                float x; /* the score in log2 units */
                if (SOFTCAP) {
                    const float th = tanhf(st[n][e] * p.scale / p.softcap);
                    dcap[SOFTCAP ? n : 0][e] = 1.f - th * th;
                    x = p.softcap * th * LOG2E;
                } else {
                    x = st[n][e] * p.scale_log2;
                }
                if (p.alibi) x -= slope * fabsf((float)(qi + off - kj));
                if (need_mask && !fa__bwd_visible(p, s.sq, s.sk, qi, kj)) x = -INFINITY;
                st[n][e] = fa__bwd_exp2(x - ((e & 1) ? l2.y : l2.x));
            }
        }
        /* Dropout keep bits Z (line 14), bit 4n+e; a plain loop: 10 Philox
           rounds per element would bloat the unrolled code. */
        uint32_t keep = 0xffffffffu;
        if (p.dropout) {
#pragma unroll 1
            for (int x = 0; x < NQ * 4; ++x) {
                const int n = x >> 2, e = x & 3;
                const int kj = j0 + krow + g + (e >> 1) * 8, qi = i0 + n * 8 + 2 * t4 + (e & 1);
                if (!fa__dropout_keep(p.seed, p.offset, b, h, p.hq, qi, kj, p.drop_threshold))
                    keep &= ~(1u << x);
            }
        }

        /* (3) dV += P_dropped^T dO (lines 15-16). The C fragments of S^T
           n-tiles 2kk, 2kk+1 are the A fragment of k-step kk (k = queries). */
#pragma unroll
        for (int kk = 0; kk < NQ / 2; ++kk) {
            uint32_t a[4];
#pragma unroll
            for (int hlf = 0; hlf < 2; ++hlf) {
                const int n = 2 * kk + hlf;
                float q0 = st[n][0], q1 = st[n][1], q2 = st[n][2], q3 = st[n][3];
                if (p.dropout) {
                    q0 = (keep >> (n * 4 + 0) & 1) ? q0 * p.rp_drop : 0.f;
                    q1 = (keep >> (n * 4 + 1) & 1) ? q1 * p.rp_drop : 0.f;
                    q2 = (keep >> (n * 4 + 2) & 1) ? q2 * p.rp_drop : 0.f;
                    q3 = (keep >> (n * 4 + 3) & 1) ? q3 * p.rp_drop : 0.f;
                }
                a[2 * hlf] = TT::pack(q0, q1);
                a[2 * hlf + 1] = TT::pack(q2, q3);
            }
#pragma unroll
            for (int np = 0; np < DW / 16; ++np) {
                uint32_t bb[4];
                fa__bwd_ldsm_x4_t(bb, fa__bwd_at<CH>(adOT + bo + kk * 16 * ROWB, 2 * np));
                fa__bwd_mma(T(), dv[2 * np], a, bb[0], bb[1]);
                fa__bwd_mma(T(), dv[2 * np + 1], a, bb[2], bb[3]);
            }
        }

        /* (4) dP^T = V_j dO_i^T (line 17). */
        float dpt[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dpt[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t a[4];
            fa__bwd_ldsm_x4(a, fa__bwd_at<CH>(aV, 2 * kk));
#pragma unroll
            for (int np = 0; np < NQ / 2; ++np) {
                uint32_t bb[4];
                fa__bwd_ldsm_x4(bb, fa__bwd_at<CH>(adOB + bo + np * 16 * ROWB, 2 * kk));
                fa__bwd_mma(T(), dpt[2 * np], a, bb[0], bb[1]);
                fa__bwd_mma(T(), dpt[2 * np + 1], a, bb[2], bb[3]);
            }
        }

        /* (5) dS = P * (dP * Z - D) (lines 18-20), times 1 - tanh^2 under
           softcap; dK += dS^T Q (line 22; the scale is applied once at the
           end); and dS^T to shared memory for dQ. */
#pragma unroll
        for (int n = 0; n < NQ; ++n) {
            const float2 d2 = *reinterpret_cast<const float2 *>(sDb + n * 8 + 2 * t4);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float dp = dpt[n][e];
                if (p.dropout) dp = (keep >> (n * 4 + e) & 1) ? dp * p.rp_drop : 0.f;
                float ds = st[n][e] * (dp - ((e & 1) ? d2.y : d2.x));
                if (SOFTCAP) ds *= dcap[SOFTCAP ? n : 0][e];
                dpt[n][e] = ds;
            }
        }
        const bool store_ds = (warp % WD) == 0;
        uint32_t *sdS32 = (uint32_t *)sdS;
#pragma unroll
        for (int kk = 0; kk < NQ / 2; ++kk) {
            uint32_t a[4];
            a[0] = TT::pack(dpt[2 * kk][0], dpt[2 * kk][1]);
            a[1] = TT::pack(dpt[2 * kk][2], dpt[2 * kk][3]);
            a[2] = TT::pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
            a[3] = TT::pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
            if (store_ds) {
                /* dS^T rows krow+g, krow+g+8; query columns 16kk + 2*t4 (+8). */
                sdS32[fa__bwd_swz<CHS>(krow + g, kk * 16 + 2 * t4) / 2] = a[0];
                sdS32[fa__bwd_swz<CHS>(krow + g + 8, kk * 16 + 2 * t4) / 2] = a[1];
                sdS32[fa__bwd_swz<CHS>(krow + g, kk * 16 + 8 + 2 * t4) / 2] = a[2];
                sdS32[fa__bwd_swz<CHS>(krow + g + 8, kk * 16 + 8 + 2 * t4) / 2] = a[3];
            }
#pragma unroll
            for (int np = 0; np < DW / 16; ++np) {
                uint32_t bb[4];
                fa__bwd_ldsm_x4_t(bb, fa__bwd_at<CH>(aQT + bo + kk * 16 * ROWB, 2 * np));
                fa__bwd_mma(T(), dk[2 * np], a, bb[0], bb[1]);
                fa__bwd_mma(T(), dk[2 * np + 1], a, bb[2], bb[3]);
            }
        }
        /* Barrier 2: dS^T of this step is complete in shared memory before
           any warp reads it for dQ; it also closes every read of this step's
           Q/dO/L/D buffer, which the next step's prefetch overwrites. */
        __syncthreads();

        /* (6) dQ_i += dS K_j (line 21): warp = (row strip) x (column group),
           in passes of at most 64 columns; the fp32 partial leaves by
           atomicAdd (deterministic: plain stores into block j's own slice). */
        {
            const int qa = i0 + strip * 16 + g, qb = qa + 8;
            float *acc = p.dq_acc + (p.deterministic ? (int64_t)jb * p.acc_slice : 0) +
                         ((int64_t)h * p.acc_rows + s.acc_row0) * p.acc_d;
#pragma unroll
            for (int c0 = 0; c0 < QC; c0 += QCH) {
                float dq[QCH / 8][4];
#pragma unroll
                for (int n = 0; n < QCH / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dq[n][e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < BC / 16; ++kk) {
                    uint32_t a[4];
                    fa__bwd_ldsm_x4_t(a, adS + kk * 16 * CHS * 16);
#pragma unroll
                    for (int np = 0; np < QCH / 16; ++np) {
                        uint32_t bb[4];
                        fa__bwd_ldsm_x4_t(bb, fa__bwd_at<CH>(aKT + kk * 16 * ROWB, (c0 + np * 16) / 8));
                        fa__bwd_mma(T(), dq[2 * np], a, bb[0], bb[1]);
                        fa__bwd_mma(T(), dq[2 * np + 1], a, bb[2], bb[3]);
                    }
                }
#pragma unroll
                for (int n = 0; n < QCH / 8; ++n) {
                    const int col = cg * QC + c0 + n * 8 + 2 * t4;
                    float *ra = acc + (int64_t)qa * p.acc_d + col, *rb = acc + (int64_t)qb * p.acc_d + col;
                    if (p.deterministic) {
                        if (qa < s.sq) *reinterpret_cast<float2 *>(ra) = make_float2(dq[n][0], dq[n][1]);
                        if (qb < s.sq) *reinterpret_cast<float2 *>(rb) = make_float2(dq[n][2], dq[n][3]);
                    } else {
#if __CUDA_ARCH__ >= 900
                        if (qa < s.sq) atomicAdd(reinterpret_cast<float2 *>(ra), make_float2(dq[n][0], dq[n][1]));
                        if (qb < s.sq) atomicAdd(reinterpret_cast<float2 *>(rb), make_float2(dq[n][2], dq[n][3]));
#else
                        if (qa < s.sq) { atomicAdd(ra, dq[n][0]); atomicAdd(ra + 1, dq[n][1]); }
                        if (qb < s.sq) { atomicAdd(rb, dq[n][2]); atomicAdd(rb + 1, dq[n][3]); }
#endif
                    }
                }
            }
        }
    }
#undef FA__BWD_LOAD_STEP
    fa__bwd_cp_async_wait<0>(); /* no copy may still be in flight at exit */

    /* (7) Write dK_j (times scale) and dV_j (line 24). Rows past the keys and
       columns past d are not written; a block that no query sees writes 0. */
    T *gdk = (T *)p.dk.data + fa__bwd_off(p.dk, b, s.k_tok0, j0, hk);
    T *gdv = (T *)p.dv.data + fa__bwd_off(p.dv, b, s.k_tok0, j0, hk);
#pragma unroll
    for (int n = 0; n < DW / 8; ++n) {
        const int col = dcol0 + n * 8 + 2 * t4;
        if (col >= p.d) continue;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = krow + g + hh * 8;
            if (j0 + r >= s.sk) continue;
            *reinterpret_cast<uint32_t *>(gdk + r * p.dk.ss + col) =
                TT::pack(dk[n][2 * hh] * p.scale, dk[n][2 * hh + 1] * p.scale);
            *reinterpret_cast<uint32_t *>(gdv + r * p.dv.ss + col) = TT::pack(dv[n][2 * hh], dv[n][2 * hh + 1]);
        }
    }
#endif
}

/* ---- host side: validation, workspace, launch ------------------------------ */

/* The problem resolved for the backward kernels. */
typedef struct fa__bwd_plan {
    int D, br, bc;          /* kernel head dim (d rounded up), tile */
    size_t smem;            /* dynamic shared memory of the main kernel */
    size_t dsum_bytes, acc_bytes, total_bytes;
} fa__bwd_plan;

static fa_status fa__bwd_cuda_fail(const char *what, cudaError_t e) {
    return fa__fail(e == cudaErrorMemoryAllocation ? FA_ERROR_OUT_OF_MEMORY : FA_ERROR_CUDA,
                    "fa_backward_cuda: %s: %s", what, cudaGetErrorString(e));
}

static size_t fa__bwd_round256(size_t x) { return (x + 255) & ~(size_t)255; }

/* r: the problem as fa__resolve filled it in (defaults resolved). */
static fa_status fa__bwd_make_plan(const char *fn, const fa_problem *r, fa__bwd_plan *pl) {
    const int d = r->head_dim;
    if (r->head_dim_v != d || d % 8)
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head_dim (%d) must equal head_dim_v (%d) and be a multiple of 8 on the GPU",
                        fn, d, r->head_dim_v);
    if (r->seqlens_k || r->block_table)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: seqlens_k / block_table are decode-only features", fn);
    if ((r->cu_seqlens_q == NULL) != (r->cu_seqlens_k == NULL))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: give both cu_seqlens_q and cu_seqlens_k, or neither", fn);
    pl->D = d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256;
    pl->br = pl->D <= 128 ? 64 : 32;
    pl->bc = pl->D <= 128 ? 128 : 64;
    pl->smem = (size_t)(2 * pl->bc * pl->D + 4 * pl->br * pl->D + pl->bc * pl->br) * 2 + 4 * pl->br * 4;
    const size_t rows = (size_t)r->batch * r->seqlen_q * r->heads_q;
    const size_t slices = r->deterministic ? (size_t)(r->seqlen_k + pl->bc - 1) / pl->bc : 1;
    pl->dsum_bytes = fa__bwd_round256(rows * sizeof(float));
    pl->acc_bytes = fa__bwd_round256(slices * rows * pl->D * sizeof(float));
    pl->total_bytes = 2 * pl->dsum_bytes + pl->acc_bytes;
    return FA_OK;
}

/* A view for the kernels, after fa__check_tensor resolved its strides: the
   kernels read and write 16 bytes at a time, so base and strides must be
   16-byte multiples. */
static fa_status fa__bwd_view_make(const char *fn, const char *name, const fa_tensor *t, fa_dtype dt,
                                   fa__bwd_view *v) {
    if (t->dtype != dt)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s.dtype differs from q.dtype", fn, name);
    v->data = t->data;
    v->hs = t->head_stride;
    v->ss = t->seq_stride;
    v->bs = t->batch_stride;
    if (((uintptr_t)t->data % 16) || (v->hs % 8) || (v->ss % 8) || (v->bs % 8))
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: %s must be 16-byte aligned with strides a multiple of 8 elements", fn, name);
    return FA_OK;
}

template <typename T, int D, int BR, int BC, bool SOFTCAP>
static fa_status fa__bwd_launch_main(const fa__bwd_params &kp, const fa__bwd_plan &pl,
                                     cudaStream_t st) {
    constexpr int NWARPS = 8, WD = D <= 128 ? 1 : 2;
    void (*kern)(const fa__bwd_params) = fa__bwd_kernel_sm80<T, D, BR, BC, NWARPS, WD, SOFTCAP>;
    FA__BWD_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem));
    dim3 grid((kp.seqlen_k + BC - 1) / BC, kp.hkv, kp.batch);
    kern<<<grid, NWARPS * 32, pl.smem, st>>>(kp);
    FA__BWD_CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

template <typename T>
static fa_status fa__bwd_run(const fa__bwd_params &kp, const fa__bwd_plan &pl, cudaStream_t st) {
    dim3 rows_grid((kp.seqlen_q + 7) / 8, kp.hq, kp.batch);
    fa__bwd_preprocess_kernel<T><<<rows_grid, 256, 0, st>>>(kp);
    FA__BWD_CUDA_TRY(cudaGetLastError());
    fa_status s;
    const bool sc = kp.softcap > 0.f;
    switch (pl.D) {
    case 32: s = sc ? fa__bwd_launch_main<T, 32, 64, 128, true>(kp, pl, st)
                    : fa__bwd_launch_main<T, 32, 64, 128, false>(kp, pl, st); break;
    case 64: s = sc ? fa__bwd_launch_main<T, 64, 64, 128, true>(kp, pl, st)
                    : fa__bwd_launch_main<T, 64, 64, 128, false>(kp, pl, st); break;
    case 128: s = sc ? fa__bwd_launch_main<T, 128, 64, 128, true>(kp, pl, st)
                     : fa__bwd_launch_main<T, 128, 64, 128, false>(kp, pl, st); break;
    default: s = sc ? fa__bwd_launch_main<T, 256, 32, 64, true>(kp, pl, st)
                    : fa__bwd_launch_main<T, 256, 32, 64, false>(kp, pl, st); break;
    }
    if (s != FA_OK) return s;
    fa__bwd_dq_convert_kernel<T><<<rows_grid, 256, 0, st>>>(kp);
    FA__BWD_CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_backward_cuda_workspace_size(const fa_problem *p, size_t *bytes) {
    const char *fn = "fa_backward_cuda_workspace_size";
    fa_problem r;
    fa__bwd_plan pl;
    fa_status s = fa__resolve(fn, p, &r, 0);
    if (s != FA_OK || (s = fa__bwd_make_plan(fn, &r, &pl)) != FA_OK) return s;
    if (!bytes) return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    *bytes = pl.total_bytes;
    return FA_OK;
}

/* Shapes: q, dq [b, sq, hq, d]; k, v, dk, dv [b, sk, hkv, d]; o, dout
   [b, sq, hq, d]; lse [b, hq, sq] (varlen: [hq, total_q]). Three launches on
   `stream`, no host synchronization. */
FLASHATTN_DEF fa_status fa_backward_cuda(const fa_problem *p, fa_tensor q, fa_tensor k,
                                                    fa_tensor v, fa_tensor o, fa_tensor dout,
                                                    const float *lse, fa_tensor dq, fa_tensor dk,
                                                    fa_tensor dv, void *workspace,
                                                    size_t workspace_size, void *stream) {
    const char *fn = "fa_backward_cuda";
    fa_problem r;
    fa__bwd_plan pl;
    fa_status s = fa__check_backward(fn, p, &r, &q, &k, &v, &o, &dout, lse, &dq, &dk, &dv, 0);
    if (s != FA_OK || (s = fa__bwd_make_plan(fn, &r, &pl)) != FA_OK) return s;
    if (q.dtype != FA_F16 && q.dtype != FA_BF16)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: q.dtype must be f16 or bf16 on the GPU", fn);
    fa__bwd_params kp;
    memset(&kp, 0, sizeof kp);
    if ((s = fa__bwd_view_make(fn, "q", &q, q.dtype, &kp.q)) || (s = fa__bwd_view_make(fn, "k", &k, q.dtype, &kp.k)) ||
        (s = fa__bwd_view_make(fn, "v", &v, q.dtype, &kp.v)) || (s = fa__bwd_view_make(fn, "o", &o, q.dtype, &kp.o)) ||
        (s = fa__bwd_view_make(fn, "dout", &dout, q.dtype, &kp.dout)) ||
        (s = fa__bwd_view_make(fn, "dq", &dq, q.dtype, &kp.dq)) ||
        (s = fa__bwd_view_make(fn, "dk", &dk, q.dtype, &kp.dk)) ||
        (s = fa__bwd_view_make(fn, "dv", &dv, q.dtype, &kp.dv)))
        return s;
    if (workspace && (workspace_size < pl.total_bytes || (uintptr_t)workspace % 16))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: workspace (%zu bytes) is smaller than fa_backward_cuda_workspace_size (%zu) "
                        "or not 16-byte aligned", fn, workspace_size, pl.total_bytes);
    int dev = 0, major = 0, smem_optin = 0;
    FA__BWD_CUDA_TRY(cudaGetDevice(&dev));
    FA__BWD_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FA__BWD_CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (major < 8 || (size_t)smem_optin < pl.smem)
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: needs sm_80+ with %zu bytes of shared memory per block for head_dim %d", fn,
                        pl.smem, r.head_dim);
    const int hkv = r.heads_kv, d = r.head_dim;
    p = &r;
    kp.lse = lse;
    kp.cu_q = p->cu_seqlens_q;
    kp.cu_k = p->cu_seqlens_k;
    kp.alibi = p->alibi_slopes;
    kp.batch = p->batch;
    kp.seqlen_q = p->seqlen_q;
    kp.seqlen_k = p->seqlen_k;
    kp.hq = p->heads_q;
    kp.hkv = hkv;
    kp.group = p->heads_q / hkv;
    kp.d = d;
    kp.acc_d = pl.D;
    kp.acc_rows = (int64_t)p->batch * p->seqlen_q;
    kp.acc_slice = (int64_t)p->heads_q * kp.acc_rows * pl.D;
    kp.scale = p->scale;
    kp.scale_log2 = kp.scale * 1.4426950408889634f;
    kp.softcap = p->softcap;
    kp.causal = p->causal != 0;
    kp.window = p->sliding_window != 0;
    kp.wl = p->window_left;
    kp.wr = p->window_right;
    kp.dropout = p->dropout_p > 0.f;
    kp.rp_drop = kp.dropout ? 1.f / (1.f - p->dropout_p) : 1.f;
    kp.drop_threshold = fa__dropout_threshold(p->dropout_p);
    kp.seed = p->dropout_seed;
    kp.offset = p->dropout_offset;
    kp.deterministic = p->deterministic != 0;
    kp.br = pl.br;
    kp.bc = pl.bc;

    cudaStream_t st = (cudaStream_t)stream;
    void *ws = workspace;
    if (!ws) {
        cudaError_t e = cudaMallocAsync(&ws, pl.total_bytes, st);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return fa__bwd_cuda_fail("cudaMallocAsync (workspace)", e);
        }
    }
    kp.dsum = (float *)ws;
    kp.lse2 = (float *)((char *)ws + pl.dsum_bytes);
    kp.dq_acc = (float *)((char *)ws + 2 * pl.dsum_bytes);
    s = q.dtype == FA_F16 ? fa__bwd_run<__half>(kp, pl, st) : fa__bwd_run<__nv_bfloat16>(kp, pl, st);
    if (!workspace) {
        cudaError_t e = cudaFreeAsync(ws, st);
        if (s == FA_OK && e != cudaSuccess) return fa__bwd_cuda_fail("cudaFreeAsync", e);
    }
    return s;
}
#endif /* FLASHATTN_NO_BACKWARD */

#endif /* FLASHATTN_CUDA_CUH */
