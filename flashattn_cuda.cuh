/* flashattn_cuda.cuh - the GPU half of flashattn.h (sm_80 and later).

   Do not include this file yourself: flashattn.h pulls it in when the file
   that defines FLASHATTN_IMPLEMENTATION is compiled by nvcc. It needs the
   helpers of flashattn.h's implementation (fa__fail, fa__check_forward,
   fa__dropout_keep, ...), which are defined just before the #include.

   ============================================================================
   CONTENTS (search for the tag; each is one jump)
   ============================================================================
   The four kernels, each one search away:
     sm_80 forward   >>sm80-kernel    fa__fwd_kernel_sm80 (FlashAttention-2)
     sm_90a forward  >>hopper         fa__fwd_kernel_sm90 (FlashAttention-3)
     decode          >>decode-kernel  fa__decode_kernel (Flash-Decoding)
     backward        >>backward       fa__bwd_kernel_sm80, fa__bwd_kernel_sm90
   Every section, in file order:
     >>gpu-course     how the forward kernel works, read this first
     >>gpu-config     macros: head dims, block sizes, warps, what to leave out
     >>gpu-ptx        the PTX instructions the sm_80 kernel uses, wrapped
     >>gpu-smem       the swizzled shared-memory layout
     >>gpu-fwd        the forward's parameters, shared by both forward kernels
     >>gpu-tile       per-tile steps (masks, online softmax, P, epilogue), shared
                      by the sm_80 and sm_90a kernels
       >>sm80-kernel  the sm_80 kernel itself, the loop of course item 3
     >>hopper         the sm_90a forward: TMA, mbarriers, wgmma, warp
                      specialization (FlashAttention-3; FLASHATTN_NO_HOPPER
                      leaves it out)
       >>hopper-ptx   mbarrier, TMA, wgmma and setmaxnreg wrapped
       >>hopper-fp8   the FP8 (e4m3) forward's own steps: the V transpose,
                      P's fragments, the descales (FLASHATTN_NO_FP8 leaves
                      it out)
     >>gpu-host       choosing a configuration, checks, the forward's launch
       >>hopper-host  the sm_90a kernel's shapes, tensor maps and launch
     >>decode         Flash-Decoding: split-KV, GQA packing, paged KV
                      (fa_decode_cuda)
       >>decode-prims    the few PTX wrappers decode adds
       >>decode-params   what the kernels see
       >>decode-kernel   one CTA = (sequence, KV heads, row block, split)
       >>decode-combine  merge the splits by log-sum-exp
       >>decode-append   k_new / v_new into the cache
       >>decode-host     split count, validation, launch
     >>fp8-quant      fa_quantize_cuda: f16 / bf16 -> e4m3 and per-block
                      descales in one pass, with the Hadamard rotation
     >>backward       the backward pass (FlashAttention Alg. 4 in
                      FlashAttention-2 form): three kernels, a deterministic
                      mode, fa_backward_cuda (FLASHATTN_NO_BACKWARD leaves it
                      out)
   Measurements behind design choices are in docs/NOTES.md, under the tag the
   comment names (e.g. [gpu-tile-shape]); the README has the current tables.

   ============================================================================
   >>gpu-course  HOW THE FORWARD KERNEL WORKS
   ============================================================================
   The algorithm is FlashAttention-2 (Dao 2023, Algorithm 1): for one
   block of Br query rows, walk over the key/value blocks of Bc rows, keep
   the running row maximum m and row sum l (ell) of exp(S - m), and an
   UNSCALED output accumulator O~ that is multiplied by exp(m_old - m_new)
   whenever m grows. Only at the very end is O = O~ / l written, with
   L = m + log(l). Here Br = BLOCK_M and Bc = BLOCK_N.

   1. Work split (the grid). One thread block (CTA) per (query block, query
      head, sequence): blockIdx.x = query block (issued last-first so the
      longest causal blocks start first), blockIdx.y = head, blockIdx.z =
      sequence. Blocks never talk to each other, so there are no atomics and
      the result is bit-identical run to run.

   2. Inside the block. W warps; the query rows are split among them in tiles
      of 16 rows (the M of one tensor-core instruction): warp w owns MT =
      BLOCK_M / (16 W) row tiles. Warps NEVER split the keys (that was
      FlashAttention-1's "split-K" scheme, which needed a reduction through
      shared memory): every warp sees the whole K/V block, so each row's m, l
      and O~ live in one warp's registers from start to finish.

   3. Shared memory. Q [BLOCK_M x D] once; K and V in TWO stages each
      [2][BLOCK_N x D]: while the warps multiply with stage s, cp.async
      (asynchronous global -> shared copies that bypass registers) fills
      stage s^1 with the next block. The loop per key block j:

        wait(K_j landed); barrier .......... K_j visible to every warp
        S = Q K_j^T ....................... tensor cores, S in registers
        issue cp.async K_{j+1} -> other stage (its last reader, S_{j-1},
                                           finished before the barrier above)
        mask, online softmax, P = exp2(...) in registers
        wait(V_j landed); barrier .......... V_j visible to every warp
        O~ += P V_j ....................... tensor cores, P straight from registers
        issue cp.async V_{j+1} -> other stage (its last reader, P V_{j-1},
                                           finished before this iteration's first barrier)

      So two barriers per block, each there to publish data another thread's
      cp.async wrote; no barrier is needed to protect a buffer from being
      overwritten, because each is refilled only after a barrier that all of
      its readers have passed.

   4. Swizzle. A row of D bf16 is D/8 chunks of 16 bytes. ldmatrix (below)
      reads one 16-byte chunk from each of 8 consecutive rows; with plain
      row-major storage those 8 chunks sit in the same 4 banks whenever the
      row length is a multiple of 128 bytes: an 8-way bank conflict. So chunk
      c of row r is stored at chunk c ^ (r % 8) (rows of 8k chunks), or at
      c ^ ((r / 2) % 4) when D/8 is 4 mod 8 (D = 32, 96: two rows share each
      128-byte line). Either way the 8 chunks an ldmatrix reads land in 8
      different groups of 4 banks. cp.async writes with the same formula.

   5. The tensor-core instruction: mma.sync.aligned.m16n8k16.row.col with
      f16 or bf16 inputs and fp32 accumulators, D = A B + C, A 16x16, B 16x8.
      A warp holds each fragment spread over its 32 lanes. With g = lane / 4
      (the "group", 0..7) and t = lane % 4 (the "thread in group", 0..3):

        A (16 x 16, row major), 4 registers of 2 halves each:
          a0: row g,   cols 2t, 2t+1        a2: row g,   cols 2t+8, 2t+9
          a1: row g+8, cols 2t, 2t+1        a3: row g+8, cols 2t+8, 2t+9
        B (16 x 8, "col" = stored as 8 columns of 16):
          b0: rows (k) 2t, 2t+1 of col g    b1: rows 2t+8, 2t+9 of col g
        C/D (16 x 8), 4 floats:
          c0, c1: row g,   cols 2t, 2t+1    c2, c3: row g+8, cols 2t, 2t+1

      So a row of S lives in the 4 lanes of one group (a "quad"): row
      reductions are 2 in-thread steps then __shfl_xor_sync with 1 and 2.

   6. ldmatrix.x4 loads four 8x8 b16 matrices; lanes 8i..8i+7 give the row
      addresses of matrix i and every lane receives, for matrix i, register i
      = (row g, cols 2t, 2t+1): exactly one A/B fragment register. With
      .trans it receives (rows 2t, 2t+1 of col g) instead.
        Q (A of S = Q K^T): matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15)
          -> a0..a3; lane l addresses row l % 16, chunk l / 16.
        K (B of S): K is stored [key][d], and B wants consecutive d for one
          key: that IS a row of K, so no transpose; one x4 gives b0, b1 of
          two 8-key tiles.
        V (B of O~ += P V): V is stored [key][d] but B wants consecutive keys
          for one d column: .trans; one x4 gives b0, b1 of two 8-wide d tiles.

   7. P never leaves registers. The C fragments of S tiles 2j and 2j+1
      (keys 16j .. 16j+15), rounded to f16/bf16 and packed in pairs, are
      exactly the A fragment of k-step j of P V:
        a0 = pack(S[2j].c0, c1), a1 = pack(S[2j].c2, c3),
        a2 = pack(S[2j+1].c0, c1), a3 = pack(S[2j+1].c2, c3).

   8. Softmax in base 2. exp(x) = exp2(x log2 e): with scale_log2 = scale *
      log2(e), p = exp2(s * scale_log2 - m * scale_log2), one FFMA and one
      MUFU.EX2 per score, where s is the raw dot product and m its running
      maximum (kept in base-2 units). With softcap, ALiBi or dropout (the
      "extras") or a negative scale, each score is first transformed in
      natural units and then multiplied by log2 e; the same code then runs
      with a multiplier of 1. A row whose maximum is still -infinity (no
      visible key yet) uses 0 in place of m so exp2(-inf - 0) = 0, never NaN.

   9. Masks. Query row i sits at key position i' = i + sk - sq (bottom-right
      alignment). Key j is visible when j < sk, and (causal) j <= i', and
      (window) i' - left <= j <= i' + right. Whole key blocks outside every
      row's range are never loaded (the loop bounds); blocks cut by a mask
      boundary or by sk are masked element by element; the rest (most of
      them) skip the mask code entirely.

   10. Dropout. P_ij is kept when fa__dropout_keep(seed, offset, b, h, i, j)
       says so (the Philox rule of flashattn.h, shared with the CPU path, so
       both drop the same elements). l sums the undropped P (L is the
       undropped log-sum-exp); the final 1 / (1 - p) is folded into 1 / l.

   11. Sizes that are not tile multiples. cp.async's src-size operand copies
       fewer than 16 bytes and zero-fills the rest, so K/V rows past sk and
       head-dim columns past d/dv read as 0 (finite, so 0 * P stays 0); those
       keys are masked, those output columns and rows are not written. A
       head dim between instantiated sizes runs in the next one up.

   12. One kernel template, fa__fwd_kernel_sm80<BF16, D, BLOCK_M, BLOCK_N,
       WARPS, EXTRAS>. EXTRAS (softcap, ALiBi, dropout, negative scale) is a
       template flag rather than a run-time branch because the extra per-score
       work and Philox state cost registers the plain path needs: with it as
       a run-time flag the d128 kernel spilled ~900 bytes. Masks are run-time
       (they touch only a few blocks per row).

   How fast it is beside FlashAttention-2 and cuDNN, and its registers and
   spills: [gpu-sm80-fwd] (on Hopper the sm_90a kernel of >>hopper runs
   instead where it applies).
*/

#ifndef FLASHATTN_CUDA_CUH
#define FLASHATTN_CUDA_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

/* ============================================================================
   >>gpu-config  CONFIGURATION MACROS (define before the implementation include)
   ============================================================================
     FLASHATTN_HEAD_DIMS   (32, 64, 96, 128, 192, 256) the head dims compiled,
                           a comma-separated list in increasing order, each a
                           multiple of 32 (#define it in the source: nvcc's
                           -D splits values at commas). A
                           problem runs in the smallest listed size >=
                           max(head_dim, head_dim_v); none: FA_ERROR_UNSUPPORTED.
                           The backward runs on the smallest of its kernels
                           (32, 64, 128, 256) >= head_dim that a listed size
                           rounds up to; decode (64, 128, 256 only) on the
                           listed size equal to head_dim. Each size costs
                           compile time (README.md, "Quick start").
     FLASHATTN_NO_DECODE   (undefined) leave out the decode kernels (>>decode);
     FLASHATTN_NO_BACKWARD (undefined) leave out the backward (>>backward).
                           Their entry points then return FA_ERROR_UNSUPPORTED.
                           Compile time: nvcc's --split-compile=0 (all cores)
                           cuts the wall time of one architecture's compile;
                           some kernels then get other code [ctime-split].
     FLASHATTN_BLOCK_M     (per head dim and GPU, see fa__default_config)
                           query rows per thread block, a multiple of 16*WARPS.
     FLASHATTN_BLOCK_N     (likewise) keys per K/V block, a multiple of 16.
     FLASHATTN_WARPS       (likewise) warps per thread block.
     FLASHATTN_NO_HOPPER   (undefined) leave out the sm_90a forward kernel
                           (>>hopper); the sm_80 kernel then runs on H100 too.
                           The sm_90a kernel needs the sm_90a target in the
                           nvcc command: -gencode arch=compute_90a,code=sm_90a.
     FLASHATTN_NO_L2_HINT  (undefined) the decode kernel's K / V copies carry
                           no L2 evict-first policy (fa__cp_async16_pol). For
                           a ptxas that miscompiles the policy: a kernel so
                           built stops with "an illegal instruction"
                           (>>decode-prims).
     FLASHATTN_NO_FP8      (undefined) leave out the FP8 forward (>>hopper-fp8):
                           fa_forward_cuda then refuses e4m3 inputs.
     FLASHATTN_TRACE(ev, tile, it), FLASHATTN_TRACE_PV_FIRST
                           (empty, 0) trace points of the sm_90a forward: event
                           ev of tile `tile`, key block `it`, at each phase of
                           a warpgroup; bench/sm90_trace/trace.cu defines them
                           to record clock() timestamps (see there). The sm_90a
                           backward's deterministic dQ path has events 40-46
                           (bench/sm90_trace/trace_bwd.cu). For measuring, not
                           for use.
     FLASHATTN_TEST_HOOKS  (undefined) FOR THE TESTS ONLY, not an API: file-
                           level counters of sm_90a launches and switches that
                           send every case to the sm_80 kernel, cap the
                           persistent grid, pick a tile shape or decode's
                           head-pair kernel, so that one GPU tests every
                           path (tests/test_gpu*.cu). Not thread-safe.
     FLASHATTN_CUDA_EMU    (undefined; tests only) compile only what the
                           backward needs, without PTX or launches of its
                           own: tests/emu_cuda.h defines it, the wrappers of
                           >>gpu-ptx and >>hopper-ptx and FA__LAUNCH, and
                           runs the backward's kernels, sm_80 and sm_90a, on
                           the CPU (make test-gpu-emu). With
                           FLASHATTN_CUDA_EMU_FWD the forward's kernels,
                           fa_forward_cuda and the FP8 quantizer too; with
                           FLASHATTN_CUDA_EMU_DEC decode's (and the
                           forward's, whose helpers it uses).
   Names that begin FA__ or fa__ are internal: not configuration, and not
   stable (the sm_90a ablation switches FA__SM90_* included).
   Setting FLASHATTN_BLOCK_M, _BLOCK_N or _WARPS applies it to every head
   dim and GPU of the sm_80 kernel (the sm_90a kernel keeps its own shapes,
   >>hopper-host); a shape whose shared memory exceeds the device's limit is
   refused at run time with FA_ERROR_UNSUPPORTED.
   Tensors on the GPU must be f16 or bf16 (all four the same type), or, for
   the forward on compute capability 9.0, e4m3 q, k and v with an f16 / bf16
   o (FP8, >>hopper-fp8); f32 gives FA_ERROR_UNSUPPORTED: convert first (the
   tensor cores take 16- or 8-bit inputs, and a hidden conversion would need
   a workspace as big as Q, K and V).
*/
#ifndef FLASHATTN_HEAD_DIMS
#define FLASHATTN_HEAD_DIMS 32, 64, 96, 128, 192, 256
#endif

/* The device-side rounding helpers and the FLASHATTN_HD qualifier come from
   flashattn.h's implementation. */

/* What the CPU emulator (FLASHATTN_CUDA_EMU) leaves out: the FP8 quantizer
   unless FLASHATTN_CUDA_EMU_FWD, decode unless FLASHATTN_CUDA_EMU_DEC, and the
   forward unless either (decode uses the forward's tile helpers). */
#if defined(FLASHATTN_CUDA_EMU) && !defined(FLASHATTN_CUDA_EMU_FWD)
#define FA__EMU_NO_QUANT 1
#else
#define FA__EMU_NO_QUANT 0
#endif
#if defined(FLASHATTN_CUDA_EMU) && !defined(FLASHATTN_CUDA_EMU_DEC)
#define FA__EMU_NO_DEC 1
#else
#define FA__EMU_NO_DEC 0
#endif
#define FA__EMU_NO_FWD (FA__EMU_NO_QUANT && FA__EMU_NO_DEC)
/* A launch of kern(args): the emulator (tests/emu_cuda.h) defines its own. */
#ifndef FA__LAUNCH
#define FA__LAUNCH(kern, grid, block, smem, stream, ...) kern<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif
/* A kernel's static shared array: the emulator makes it a static variable
   (its CTAs run one at a time, each CTA's threads sharing it). */
#ifndef FA__SHARED
#define FA__SHARED __shared__
#endif

/* Two e4m3 codes, lo in the low byte, for the FP8 forward's P and the
   quantizer (>>fp8-quant): the hardware's round-to-nearest-even, saturating
   (sm_89+), which gives fa__f32_to_e4m3's bits; elsewhere (older targets,
   the host, the CPU emulator, whose __CUDA_ARCH__ is 900) that function
   itself. */
static __device__ __forceinline__ uint32_t fa__cvt_e4m3x2(float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890 && !defined(FLASHATTN_CUDA_EMU)
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (uint32_t)fa__f32_to_e4m3(lo) | (uint32_t)fa__f32_to_e4m3(hi) << 8;
#endif
}

/* ============================================================================
   >>gpu-ptx  THE PTX WE USE
   ============================================================================ */

#ifndef FLASHATTN_CUDA_EMU /* the emulator defines these wrappers (tests/emu_cuda.h) */
/* 16-byte asynchronous copy global -> shared; bytes in [0, 16] are read and
   the rest of the 16 is zero-filled. .cg: cache in L2 only (each tile is read
   once per block, no point polluting L1). */
static __device__ __forceinline__ void fa__cp_async16(uint32_t smem_addr, const void *gmem,
                                                      int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr),
                 "l"(gmem), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void fa__cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void fa__cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void fa__ldmatrix_x4(uint32_t r[4], uint32_t smem_addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr)
                 : "memory");
}
static __device__ __forceinline__ void fa__ldmatrix_x4_trans(uint32_t r[4], uint32_t smem_addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr)
                 : "memory");
}
/* stmatrix.x4, ldmatrix.x4's inverse: lanes 8i..8i+7 give the rows of
   matrix i, and each thread's r[i] holds its two elements of matrix i
   (row lane / 4, columns 2 (lane % 4) and + 1: an mma accumulator's place) */
static __device__ __forceinline__ void fa__stmatrix_x4(uint32_t smem_addr, const uint32_t r[4])
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

/* D = A B + D for one 16x8x16 tile, fp32 accumulate. BF16 selects the input type. */
template <bool BF16>
static __device__ __forceinline__ void fa__mma16816(float d[4], const uint32_t a[4],
                                                    uint32_t b0, uint32_t b1)
{
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif /* FLASHATTN_CUDA_EMU */

/* Two floats -> one register of two 16-bit values (lo in the low half), RNE. */
template <bool BF16> static __device__ __forceinline__ uint32_t fa__pack2(float lo, float hi)
{
    uint32_t r;
    if (BF16) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        memcpy(&r, &v, 4);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        memcpy(&r, &v, 4);
    }
    return r;
}

/* P rounded to 16 bits as the A fragments of P V (course item 7): k-step ks
   takes 8-key tiles 2 ks and 2 ks + 1. */
template <bool BF16, int MT, int NS>
static __device__ __forceinline__ void fa__pack_p(const float (&s)[MT][NS][4], uint32_t (&pa)[NS / 2][MT][4])
{
#pragma unroll
    for (int ks = 0; ks < NS / 2; ks++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            pa[ks][mt][0] = fa__pack2<BF16>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
            pa[ks][mt][1] = fa__pack2<BF16>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
            pa[ks][mt][2] = fa__pack2<BF16>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
            pa[ks][mt][3] = fa__pack2<BF16>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
        }
}

/* Byte offset of 16-byte chunk c (columns 8c .. 8c + 7) of row r in a tile
   laid out as TMA's 128-byte swizzle leaves it (>>hopper, "Shared memory
   layout"): 64-column blocks `blk` bytes apart, 128-byte rows,
   chunk c % 8 of a row stored at chunk (c % 8) ^ (r % 8). */
static __device__ __forceinline__ uint32_t fa__sm90_chunk(int r, int c, uint32_t blk)
{
    return (uint32_t)(c / 8) * blk + (uint32_t)r * 128 + ((uint32_t)((c % 8) ^ (r % 8)) << 4);
}
/* A producer warp's cp.async copies (16 bytes a lane, all issued at once,
   not committed) of an R x D tile's first `valid` rows and `cols` columns
   from g (rows g_seq elements apart) into that layout at dst, the rest
   zero-filled: the tails of the sm_90a kernels' tiles. */
template <int R, int D>
static __device__ __forceinline__ void fa__sm90_copy_rows(uint32_t dst, int valid, int cols, const uint16_t *g,
                                                          int64_t g_seq, int lane)
{
    /* (not unrolled: the producer warp has only 24 registers) */
#pragma unroll 1
    for (int c = lane; c < R * (D / 8); c += 32) {
        const int r = c / (D / 8), col = (c % (D / 8)) * 8; /* row, first column of the chunk */
        const int bytes = (r < valid && col < cols) ? 2 * min(8, cols - col) : 0;
        /* rows are 16-byte aligned and col % 8 == 0; a zero-byte copy reads nothing */
        fa__cp_async16(dst + fa__sm90_chunk(r, col / 8, R * 128), bytes ? g + (int64_t)r * g_seq + col : g, bytes);
    }
}
/* wgmma's shared-memory matrix descriptor for that layout: start address,
   leading and stride byte offsets, 128-byte swizzle. (These two and
   fa__pack_p are here, not with the kernels that use them, so that the
   emulated backward, tests/emu_cuda.h, has them too.) */
static __device__ __forceinline__ uint64_t fa__wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

/* 2^x on the special-function unit (one MUFU.EX2); ex2(-inf) = 0. The
   16-bit kernels take every exponential there: a share of them on the FMA
   pipe instead (fa__exp2_fma) made the sm_90a forward slower at every share
   tried, its softmax waiting on instruction issue, not on the MUFU. The
   FP8 kernel at d 128, whose products take half the time, gains from one
   tile in 16 (fa__sm90_cfg's EXP_FMA). The packed 16-bit forms are no faster
   on sm_90a [gpu-exp2]. max_nan: the larger of a and b, NaN if either is. */
#ifndef FLASHATTN_CUDA_EMU
static __device__ __forceinline__ float fa__exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ float fa__max_nan(float a, float b)
{
    float y;
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
    return y;
}
#endif /* FLASHATTN_CUDA_EMU */
/* 2^x on the FMA pipe, as the CPU's fa__exp2_row: x = k + f, k = round(x),
   |f| <= 1/2, from t = x + c with c = 1.5 2^23 + 127, where floats are the
   integers, so t's low bits hold 127 + k (no rounding instruction); 2^f by
   a degree-3 polynomial (minimax: relative error 7.5e-5), times 2^k built
   from those bits. x is raised to -127 first: -inf (a masked score) and
   anything as small give 2^k = 0, so exactly 0; a NaN stays NaN. Nine
   instructions for one MUFU.EX2; x below 127.5 (k <= 127: 2^k finite). */
static __device__ __forceinline__ float fa__exp2_fma(float x)
{
    const float c = 12582912.0f + 127.0f;
    x = fa__max_nan(x, -127.0f);
    const float t = x + c, f = x - (t - c);
    const float p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.242611125f), f, 0.693260968f), f, 0.999928057f);
    return p * __uint_as_float(__float_as_uint(t) << 23);
}

/* ============================================================================
   >>gpu-smem  SWIZZLED TILES
   ============================================================================
   A tile of ROWS x D 16-bit elements, row-major, D/8 chunks of 16 bytes per
   row, chunk c of row r stored at chunk fa__swizzle<D>(r, c) (see course
   item 4). Returns the element offset of the chunk's first element. */
template <int D> static __device__ __forceinline__ int fa__swizzle(int r, int c)
{
    constexpr int C = D / 8; /* chunks per row */
    static_assert(C % 4 == 0, "head dim must be a multiple of 32");
    int cs = (C % 8 == 0) ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
    return r * D + cs * 8;
}

/* Copy rows [0, rows) x columns [0, cols) of a global tile (row stride
   `stride` elements) into a swizzled ROWS x D shared tile; rows >= rows and
   columns >= cols are zero-filled. All NT threads take part, one 16-byte
   cp.async each per step. Thread `tid` always copies chunk c = tid % C of
   rows tid / C, tid / C + NT / C, ...: so its column, its byte count and
   (when NT / C is a multiple of 8) its swizzle are fixed, and the addresses
   of the steps differ by constants. */
template <int ROWS, int D, int NT>
static __device__ __forceinline__ void fa__load_tile(uint32_t smem_base, const uint16_t *g,
                                                     int64_t stride, int rows, int cols)
{
    constexpr int C = D / 8;       /* chunks per row */
    if constexpr (NT % C != 0) {   /* D = 96, 192: each step's chunk differs */
#pragma unroll
        for (int it = 0; it < (ROWS * C + NT - 1) / NT; it++) {
            const int idx = it * NT + (int)threadIdx.x;
            if ((ROWS * C) % NT != 0 && idx >= ROWS * C) break;
            const int r = idx / C, c = idx % C, left = (cols - c * 8) * 2;
            const int bytes = r < rows ? (left >= 16 ? 16 : (left > 0 ? left : 0)) : 0;
            fa__cp_async16(smem_base + 2u * (uint32_t)fa__swizzle<D>(r, c),
                           bytes ? g + (int64_t)r * stride + c * 8 : g, bytes);
        }
        return;
    }
    constexpr int RPS = NT % C == 0 ? NT / C : 1; /* rows per step */
    const int r0 = (int)threadIdx.x / C, c = (int)threadIdx.x % C;
    const int left = (cols - c * 8) * 2;
    const int bytes = left >= 16 ? 16 : (left > 0 ? left : 0);
    const uint16_t *src = g + (int64_t)r0 * stride + c * 8;
#pragma unroll
    for (int it = 0; it < (ROWS + RPS - 1) / RPS; it++) {
        const int r = r0 + it * RPS;
        if (ROWS % RPS != 0 && r >= ROWS) break;
        const bool in = r < rows && bytes > 0;
        /* src-size 0 reads nothing; the address must still be a valid one */
        fa__cp_async16(smem_base + 2u * (uint32_t)fa__swizzle<D>(r, c), in ? src : g, in ? bytes : 0);
        src += RPS * stride;
    }
}

/* ldmatrix addresses. Every ldmatrix below reads rows R + (lane % 8) with R a
   multiple of 8, and chunks 2k + e with e a per-thread bit (which half of the
   16 columns this lane addresses). So the swizzle key (row % 8, or (row / 2)
   % 4) is the per-thread constant lane-derived x, and the swizzled chunk of
   2k + e is (2k with its low bits XOR-ed by (e ^ x)): precompute, per thread,
   the byte offsets of the few distinct low-bit patterns; the rest of the
   address is a compile-time constant. */
template <int D> struct fa__ldsm_addr {
    static constexpr int C = D / 8;
    static constexpr int M = (C % 8 == 0) ? 7 : 3; /* chunk bits the swizzle touches */
    uint32_t off[(M + 1) / 2];                      /* bytes, for (2k & M) = 0, 2, 4, 6 */
    __device__ __forceinline__ fa__ldsm_addr(int lane, int e)
    {
        const int x = (M == 7) ? (lane & 7) : ((lane >> 1) & 3);
#pragma unroll
        for (int m = 0; m < (M + 1) / 2; m++) off[m] = (uint32_t)(((2 * m) | e) ^ x) * 16u;
    }
    /* byte offset of (row base `row`, whose low 3 bits are lane & 7, chunk 2k + e) */
    __device__ __forceinline__ uint32_t at(int row, int k) const
    {
        return (uint32_t)row * (2u * D) + (uint32_t)((2 * k) & ~M) * 16u + off[k % ((M + 1) / 2)];
    }
};

/* A block mask as the kernels read it (>>gpu-bsparse): per (mask, query
   block) row, its key blocks in ascending order, the caller's two lists
   merged by fa__bm_rows_kernel into the workspace, and the same set as a
   bitmap, bit J % 32 of word J / 32 of the row (the backward's test, one
   load: fa__bm_visited). Row of query head h, sequence b, query block I:
   ((batch1 ? 0 : b) heads + h / hdiv) q_blocks + I. idx NULL: no block
   mask. (Outside the forward's section: the emulated backward reads it.) */
typedef struct fa__bmask {
    const int32_t *cnt;   /* [rows] */
    const int32_t *idx;   /* [rows][k_blocks] */
    const int32_t *order; /* the sm_90a forward's tiles, most blocks first (fa__bm_order_kernel) */
    int q_blocks, k_blocks, batch1, heads, hdiv;
    const uint32_t *bits; /* [rows][words] */
    int words;            /* (k_blocks + 31) / 32 */
    /* the same bits by key block: [masks][k_blocks][qwords], bit I % 32 of
       word I / 32 set when query block I lists the key block (the
       backward's walk over a key block's query blocks: fa__bm_next_q) */
    const uint32_t *cbits;
    int qwords; /* (q_blocks + 31) / 32 */
} fa__bmask;

/* The mask query head h of sequence b reads (flashattn.h section 5) */
static __device__ __forceinline__ int64_t fa__bm_mask(const fa__bmask &m, int b, int h)
{
    return (int64_t)(m.batch1 ? 0 : b) * m.heads + h / m.hdiv;
}
/* Does the mask list key block J (128 keys) for query block I (128 rows)
   of query head h, sequence b? */
static __device__ __forceinline__ bool fa__bm_visited(const fa__bmask &m, int b, int h, int I, int J)
{
    const int64_t row = fa__bm_mask(m, b, h) * m.q_blocks + I;
    return (m.bits[row * m.words + J / 32] >> (J % 32)) & 1u;
}
/* The first query block I' >= I of query head h, sequence b, that lists
   key block J (INT_MAX: none): 32 query blocks a load. */
static __device__ __forceinline__ int fa__bm_next_q(const fa__bmask &m, int b, int h, int J, int I)
{
    const int64_t col = fa__bm_mask(m, b, h) * m.k_blocks + J;
    const uint32_t *w = m.cbits + col * m.qwords;
    for (int i = I / 32; i < m.qwords; i++) {
        const uint32_t x = i == I / 32 ? w[i] & (~0u << (I % 32)) : w[i];
        if (x) return 32 * i + __ffs((int)x) - 1;
    }
    return INT_MAX;
}

#if !FA__EMU_NO_FWD /* (the emulated backward needs none of the forward) */
/* ============================================================================
   >>gpu-fwd  THE FORWARD KERNEL
   ============================================================================ */


/* Everything the kernel needs, resolved on the host (strides in elements). */
typedef struct fa__fwd_params {
    const uint16_t *q, *k, *v;
    uint16_t *o;
    float *lse;
    int64_t q_batch, q_seq, q_head;
    int64_t k_batch, k_seq, k_head;
    int64_t v_batch, v_seq, v_head;
    int64_t o_batch, o_seq, o_head;
    int seqlen_q, seqlen_k, heads_q, group; /* group = heads_q / heads_kv */
    int d, dv;
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqlens_k;
    float scale;      /* natural units */
    float scale_log2; /* scale * log2(e) */
    float softcap;    /* 0 = off */
    float scale_cap;  /* scale / softcap (softcap > 0): the extras' tanh argument is s scale_cap */
    const float *alibi_slopes;
    int has_left, has_right; /* window / causal bounds active */
    int left, right;         /* visible keys: i' - left <= j <= i' + right */
    int extras;              /* softcap, ALiBi, dropout or scale < 0 */
    int dropout;
    uint32_t dropout_threshold;
    uint64_t dropout_seed, dropout_offset;
    float out_scale; /* 1 / (1 - dropout_p) */
    int o_bf16;      /* O is bf16: read by the FP8 kernel only, one kernel for both O types */
    /* FP8 (the sm_90a kernel's FP8; section 5 of flashattn.h): Q, K and V
       are e4m3, seen by the copies as rows of 16-bit words (d and the
       strides above count words, v_words V's row), and their descales,
       per block ([batch][heads][blocks], blk_q / blk_k blocks per (b, h))
       or, where a block array is NULL, per tensor (ds_q, ds_k, ds_v). */
    const float *dsb_q, *dsb_k, *dsb_v;
    float ds_q, ds_k, ds_v;
    int blk_q, blk_k, v_words;
    fa__bmask bm; /* block-sparse attention: the key blocks to walk */
} fa__fwd_params;

#define FA__GPU_LOG2E 1.4426950408889634f
#define FA__GPU_LN2 0.6931471805599453f

/* ---- >>gpu-tile  per-tile steps, shared by the sm_80 and the sm_90a kernels.
   A thread's scores s[MT][NS][4] and output O~ acc_o[MT][NO][4] are in the
   C-fragment layout of course item 5 (the wgmma accumulator of a warpgroup
   is the same layout, warp w owning rows 16w..16w+15): element e of 8-column
   tile j of row tile mt is row wrow0 + 16 mt + g + 8 (e / 2), column
   8 j + 2 t + e % 2. Each thread holds two rows per row tile (hf = e / 2). */

/* One (query block, sequence) pair's extent: its lengths (variable length,
   KV-cache lengths), first token rows with cu_seqlens, the bottom-right shift
   i' = i + shift, and the key blocks [n_begin, n_end) that any of its rows
   [row0, row0 + bm) can see (causal / window bounds; blocks outside are never
   loaded). PLAIN: the caller knows at compile time that the problem has no
   cu_seqlens, no seqlens_k and no mask (the sm_90a kernel's flat walk,
   fa__sm90_flat), and none of those cases is compiled: about 80
   instructions a tile on a path where each costs a warpgroup about 5
   cycles (>>hopper). */
typedef struct fa__extent {
    int sq, sk, row0, n_begin, n_end;
    int64_t q_tok0, k_tok0, shift;
} fa__extent;

template <bool PLAIN = false>
static __device__ __forceinline__ fa__extent fa__fwd_extent(const fa__fwd_params &p, int b, int row0,
                                                            int bm, int bn)
{
    fa__extent x;
    x.sq = p.seqlen_q; x.sk = p.seqlen_k; x.row0 = row0;
    x.q_tok0 = x.k_tok0 = 0;
    if (!PLAIN && p.cu_seqlens_q) { x.q_tok0 = p.cu_seqlens_q[b]; x.sq = (int)(p.cu_seqlens_q[b + 1] - x.q_tok0); }
    if (!PLAIN && p.cu_seqlens_k) { x.k_tok0 = p.cu_seqlens_k[b]; x.sk = (int)(p.cu_seqlens_k[b + 1] - x.k_tok0); }
    if (!PLAIN && p.seqlens_k) x.sk = p.seqlens_k[b];
    x.shift = (int64_t)x.sk - x.sq;
    x.n_end = (x.sk + bn - 1) / bn;
    x.n_begin = 0;
    if (!PLAIN && p.has_right) {
        int64_t last_row = (int64_t)(row0 + bm < x.sq ? row0 + bm : x.sq) - 1;
        int64_t lim = last_row + x.shift + p.right + 1; /* keys < lim */
        int64_t nb = lim > 0 ? (lim + bn - 1) / bn : 0;
        if (nb < x.n_end) x.n_end = (int)nb;
    }
    if (!PLAIN && p.has_left) {
        int64_t lo = (int64_t)row0 + x.shift - p.left; /* smallest key any row sees */
        if (lo > 0) x.n_begin = (int)(lo / bn);
    }
    return x;
}

/* Which key blocks need element masks for query rows [first, last]: only
   those cut by sk or by a window / causal boundary. Block [k0, k0 + bn)
   does when k0 + bn > hi (keys past sk or past the right edge of the
   first row) or k0 < lo (keys left of the last row's window). The limits
   are clamped to [0, sk], which keeps every answer, so that they fit 32
   bits (64-bit limits cost register spills): the sm_90a kernel finds them
   once per tile and a block's test is two compares. The sm_80 kernel asks
   per block and leaves the hoisting to ptxas, which spills less. For one
   row the limits are that row's visible keys, which fa__mask_scores finds
   in its own lines (fewer spills than through this helper) [gpu-mask-cut].
   PLAIN as fa__fwd_extent's: no mask, keys past sk only. */
typedef struct fa__mask_cut { int lo, hi; } fa__mask_cut;
template <bool PLAIN = false>
static __device__ __forceinline__ fa__mask_cut fa__mask_cut_for(const fa__fwd_params &p, int sk, int first,
                                                               int last, int64_t shift)
{
    if (PLAIN) return fa__mask_cut{0, sk};
    int64_t hi = sk, lo = 0;
    if (p.has_right && (int64_t)first + shift + p.right + 1 < hi) hi = (int64_t)first + shift + p.right + 1;
    if (p.has_left) lo = (int64_t)last + shift - p.left;
    fa__mask_cut c;
    c.hi = (int)(hi > 0 ? hi : 0);
    c.lo = (int)(lo < 0 ? 0 : lo > sk ? sk : lo);
    return c;
}
static __device__ __forceinline__ bool fa__block_needs_mask(fa__mask_cut c, int k0, int bn)
{
    return k0 + bn > c.hi || k0 < c.lo;
}

/* ---- >>gpu-bsparse  block-sparse attention (Block-Sparse FlashAttention,
   FlashAttention §3.3): a query block walks only the key blocks its row
   of the block mask lists, in ascending order. Sorted, the blocks that
   the tile's causal / window bounds and length let through
   ([n_begin, n_end) of fa__fwd_extent) are one run of the list, and the
   kernel walks that run: no copy, no product and no softmax for any other
   block. The run is found by the whole warp at once: each lane compares
   32 entries a round against both ends, and ballots count them. */
typedef struct fa__bm_run {
    const int32_t *at; /* the run's first entry */
    int count;
} fa__bm_run;
/* The run of query block qb of (b, h) in key blocks [n0, n1) (block_k units).
   Every lane of the warp calls it and gets the same answer. */
static __device__ __forceinline__ fa__bm_run fa__bm_find(const fa__bmask &m, int b, int h, int qb, int n0, int n1)
{
    const int64_t row = fa__bm_mask(m, b, h) * m.q_blocks + qb;
    const int32_t *l = m.idx + row * m.k_blocks;
    const int n = m.cnt[row], lane = (int)(threadIdx.x % 32);
    int below0 = 0, below1 = 0; /* entries < n0, < n1 */
    for (int j0 = 0; j0 < n; j0 += 32) {
        const int e = j0 + lane < n ? l[j0 + lane] : INT_MAX;
        below0 += __popc(__ballot_sync(0xffffffffu, e < n0));
        const uint32_t in1 = __ballot_sync(0xffffffffu, e < n1);
        below1 += __popc(in1);
        if (in1 != 0xffffffffu) break; /* (ascending: the rest are >= n1) */
    }
    return fa__bm_run{l + below0, below1 - below0};
}

/* f(i, kj, x) for every score x (by reference) that this thread holds, with
   its query row i and key kj: the layout above, for the key block at k0. */
template <int MT, int NS, class F>
static __device__ __forceinline__ void fa__each_score(float (&s)[MT][NS][4], int wrow0, int k0, int g, int t,
                                                      F f)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                f(wrow0 + mt * 16 + g + (e >> 1) * 8, k0 + j * 8 + 2 * t + (e & 1), s[mt][j][e]);
}

/* Raw dot products -> scores: -inf where key kj is not visible from row i
   (course item 9); with EXTRAS also scale, softcap and ALiBi, in natural
   units, then x log2(e) (course item 8). The visible keys of a row are one
   range, [lo, hi): found once per row in 64-bit arithmetic, then made
   relative to the thread's first column (k0 + 2 t) and clamped to the
   block, so that each score costs two 32-bit compares against constants
   (its column offset j * 8 + (e & 1) is known at compile time); a 64-bit
   compare per key made the masked diagonal block cost more than the rest
   of the tile [gpu-mask].
   LEFT = false: the caller knows there is no left bound (p.has_left is
   false, as under a plain causal mask), so lo_c is 0 and a score costs
   one compare and a select instead of two compares and a select (c >= 0
   always holds); the compares were about half of a masked block's
   instructions [gpu-mask]. The sm_90a kernel picks LEFT at run time. */
template <bool EXTRAS, bool LEFT = true, int MT, int NS>
static __device__ __forceinline__ void fa__mask_scores(float (&s)[MT][NS][4], const fa__fwd_params &p,
                                                       int wrow0, int k0, int sk, int64_t shift,
                                                       int h, int g, int t)
{
    const int first = k0 + 2 * t; /* the key of this thread's column offset 0 */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int64_t ip = (int64_t)wrow0 + mt * 16 + g + half * 8 + shift; /* the row's key position */
            int64_t hi = sk, lo = 0;
            if (p.has_right && ip + p.right + 1 < hi) hi = ip + p.right + 1;
            if (LEFT && p.has_left && ip - p.left > lo) lo = ip - p.left;
            /* offsets c from `first` with lo_c <= c < hi_c are visible (c < 8 NS) */
            const int hi_c = (int)(hi - first < 0 ? 0 : hi - first > 8 * NS ? 8 * NS : hi - first);
            const int lo_c = LEFT ? (int)(lo - first < 0 ? 0 : lo - first > 8 * NS ? 8 * NS : lo - first) : 0;
            /* ALiBi's distance ip - key in 32 bits: exact for every visible
               key (0 <= key < sk and sk - sq <= ip < sk); the others become
               -inf below whatever it is */
            const int dist0 = (int)(ip - first);
#pragma unroll
            for (int j = 0; j < NS; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int c = j * 8 + e;
                    float x = s[mt][j][half * 2 + e];
                    if (EXTRAS) { /* softcap: c tanh(x (scale / c)), no division [ctime-softcap] */
                        x = p.softcap > 0.0f ? p.softcap * tanhf(x * p.scale_cap) : x * p.scale;
                        if (p.alibi_slopes) x -= p.alibi_slopes[h] * (float)abs(dist0 - c);
                        x *= FA__GPU_LOG2E;
                    }
                    s[mt][j][half * 2 + e] = c >= lo_c && c < hi_c ? x : -INFINITY;
                }
        }
}

/* The largest of the N values v[0..N-1], as a tree of depth log2 N (for
   fa__softmax_tile's TREE). A recursive template, not a loop: with an array
   halved in a loop whose bounds nvcc did not unroll, the kernels got a
   stack frame and ran at half speed. */
template <int N> struct fa__max_tree {
    static __device__ __forceinline__ float of(const float *v)
    {
        return fmaxf(fa__max_tree<N / 2>::of(v), fa__max_tree<N - N / 2>::of(v + N / 2));
    }
};
template <> struct fa__max_tree<1> {
    static __device__ __forceinline__ float of(const float *v) { return v[0]; }
};

/* Online softmax for one tile (FlashAttention-2): new running max m, the factor
   alpha = exp2(m_old - m_new) by which O~ and l must shrink, l rescaled and
   grown by this tile's sum, and s overwritten by P = exp2(s mul - m). O~ is
   NOT rescaled here: the sm_90a kernel must wait for its in-flight P V
   product first (fa__rescale_o does it). l stays a per-lane partial sum (a
   quarter of the row) until the epilogue.
   LAZY: a row keeps its old maximum unless the tile's exceeds it by more
   than 8 (in log2 units), and its alpha is then exactly 1. Any reference
   value at or below the true maximum gives the same O~ / l and L = m + log l,
   and one at most 8 below it keeps every P <= 2^8: no overflow, and the
   16-bit P has the same relative precision. The caller skips the rescale of
   O~ where every alpha of a warp is 1 (the sm_90a kernel at d 256).
   TREE: each row's maximum as a tree (fa__max_tree) instead of a chain of
   fmaxf. Every exponential waits for that maximum: the chain puts 2 NS
   dependent instructions in front of the first one, the tree log2(2 NS).
   (Where it pays: the sm_90a kernel's SHORT_PATH.)
   mul_lo, mul_hi: the multiplier (> 0) of the lane's first and second row of
   each 16-row tile: the same but in the FP8 kernel, whose rows have their
   own descales. LIFT: P is 2^LIFT exp2(s mul - m), and l sums those (the
   FP8 kernel's e4m3 P is 256 P: LIFT 8 makes it with no multiply).
   EXP_FMA: the columns of every EXP_FMA-th 8-key tile take fa__exp2_fma
   (0: none). */
template <int MT, int NS, bool LAZY = false, bool TREE = false, int LIFT = 0, int EXP_FMA = 0>
static __device__ __forceinline__ void fa__softmax_tile(float (&s)[MT][NS][4], float (&m_run)[MT][2],
                                                        float (&l_run)[MT][2], float (&alpha)[MT][2],
                                                        float mul_lo, float mul_hi)
{
    constexpr int EVERY = EXP_FMA > 0 ? EXP_FMA : NS + 1; /* (tile j takes fa__exp2_fma at j % EVERY = EVERY - 1) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const float mul = hf ? mul_hi : mul_lo;
            float mx = -INFINITY, part[NS];
#pragma unroll
            for (int j = 0; j < NS; j++)
                if (TREE) part[j] = fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]);
                else mx = fmaxf(mx, fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]));
            if (TREE) mx = fa__max_tree<NS>::of(part);
            /* the row's other 3 quarters are in the quad's other lanes */
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float m_new = fmaxf(m_run[mt][hf], mx * mul);
            const bool keep = LAZY && m_new <= m_run[mt][hf] + 8.0f;
            if (keep) m_new = m_run[mt][hf];
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            alpha[mt][hf] = keep ? 1.0f : fa__exp2(m_run[mt][hf] - m_use);
            m_run[mt][hf] = m_new;
            const float bias = LIFT ? (float)LIFT - m_use : -m_use;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < NS; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float x = fmaf(s[mt][j][2 * hf + e], mul, bias);
                    float pe = j % EVERY == EVERY - 1 ? fa__exp2_fma(x) : fa__exp2(x);
                    sum += pe;
                    s[mt][j][2 * hf + e] = pe;
                }
            l_run[mt][hf] = l_run[mt][hf] * alpha[mt][hf] + sum;
        }
}

/* O~ *= alpha, row by row: O~ was relative to the old maximum. */
template <int MT, int NO>
static __device__ __forceinline__ void fa__rescale_o(float (&acc_o)[MT][NO][4], const float (&alpha)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int c = 0; c < NO; c++) {
            acc_o[mt][c][0] *= alpha[mt][0];
            acc_o[mt][c][1] *= alpha[mt][0];
            acc_o[mt][c][2] *= alpha[mt][1];
            acc_o[mt][c][3] *= alpha[mt][1];
        }
}

/* The sum of a row from its quad: each of the 4 lanes holds a quarter. */
static __device__ __forceinline__ float fa__quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* lg2.approx.ftz (abs error 2^-22) and rcp.approx.ftz (rel error 2^-23)
   of a row's sum l, which is 0 or at least 1 (its largest term is 2^0), so
   flushing subnormals to 0 changes nothing. __log2f and __fdividef are
   the same instructions without ftz, and each adds a test for subnormals
   and a rescale around it: 3 to 5 instructions a row on the epilogue's
   path, where every instruction counts (fa__finish_rows). */
#ifndef FLASHATTN_CUDA_EMU
static __device__ __forceinline__ float fa__lg2_ftz(float x)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
static __device__ __forceinline__ float fa__rcp_ftz(float x)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
#endif
/* L = m ln 2 + ln l of query row i (natural log; -inf for a row that saw no
   key), when the caller asked for L: its [b, h, i] slot, or [h, token] with
   cu_seqlens. l is the row's whole sum (the quad already reduced). */
static __device__ __forceinline__ void fa__store_lse(const fa__fwd_params &p, float m, float l, int i, int h,
                                                     int b, int64_t q_tok0, int nbatch)
{
    if (!p.lse) return;
    const int64_t li = p.cu_seqlens_q ? (int64_t)h * p.cu_seqlens_q[nbatch] + q_tok0 + i
                                      : ((int64_t)b * p.heads_q + h) * p.seqlen_q + i;
    p.lse[li] = l > 0.0f ? (m + fa__lg2_ftz(l)) * FA__GPU_LN2 : -INFINITY;
}

/* The epilogue, in steps. fa__finish_rows needs no O: per row of this
   thread, l summed over the quad (in place: l_run becomes the rows' whole
   sums) and O's factor inv = 1 / l (and the output scale; 0 for a row that
   saw no key). The sm_90a kernel runs it while the tile's last P V is
   still computing (its epilogue_begin). Then fa__store_lse_rows writes L
   and fa__store_o_rows O = O~ inv; rows past sq are not written. */
template <int MT>
static __device__ __forceinline__ void fa__finish_rows(const fa__fwd_params &p, float (&l_run)[MT][2],
                                                       float (&inv)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            l_run[mt][hf] = fa__quad_sum(l_run[mt][hf]);
            /* rcp.approx, not '/': the IEEE division and its slow-path
               branch sat on the sm_90a epilogue's critical path (and
               __fdividef, the same rcp without ftz, on a shorter one:
               fa__rcp_ftz). A row that saw a key has 1 <= l <= its key
               count (the maximum's own term is 2^0). */
            inv[mt][hf] = l_run[mt][hf] > 0.0f ? p.out_scale * fa__rcp_ftz(l_run[mt][hf]) : 0.0f;
        }
}
template <int MT>
static __device__ __forceinline__ void fa__store_lse_rows(const fa__fwd_params &p, const float (&m_run)[MT][2],
                                                          const float (&l_run)[MT][2], int wrow0, int sq, int h,
                                                          int b, int64_t q_tok0, int nbatch, int g, int t)
{
    /* Every lane of a quad holds its two rows' whole m and l: lane t = 0
       stores row g, t = 1 row g + 8, one store each (lane 0 storing both
       was twice the instructions on the epilogue's path) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) { /* (selects by hf, not an index: the arrays stay in registers) */
        const int hf = t & 1, i = wrow0 + mt * 16 + g + hf * 8;
        if (t < 2 && (unsigned)i < (unsigned)sq) /* (0 <= i < sq) */
            fa__store_lse(p, hf ? m_run[mt][1] : m_run[mt][0], hf ? l_run[mt][1] : l_run[mt][0], i, h, b, q_tok0,
                          nbatch);
    }
}
template <bool BF16, int MT, int NO>
static __device__ __forceinline__ void fa__store_o_rows(const fa__fwd_params &p, const float (&acc_o)[MT][NO][4],
                                                        const float (&inv)[MT][2], uint16_t *go, int wrow0, int sq,
                                                        int g, int t)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int i = wrow0 + mt * 16 + g + hf * 8;
            if ((unsigned)i >= (unsigned)sq) continue; /* (and rows below 0: the sm_90a kernel's tile_row0) */
            uint16_t *orow = go + (int64_t)i * p.o_seq;
#pragma unroll
            for (int c = 0; c < NO; c++) {
                const int col = c * 8 + 2 * t;
                const uint32_t v2 = fa__pack2<BF16>(acc_o[mt][c][2 * hf] * inv[mt][hf],
                                                    acc_o[mt][c][2 * hf + 1] * inv[mt][hf]);
                if (col + 1 < p.dv)
                    *(uint32_t *)(orow + col) = v2; /* 4-byte aligned: even col, aligned rows */
                else if (col < p.dv)
                    orow[col] = (uint16_t)(v2 & 0xffffu);
            }
        }
}
template <bool BF16, int MT, int NO>
static __device__ __forceinline__ void fa__store_o_lse(const fa__fwd_params &p,
                                                       const float (&acc_o)[MT][NO][4],
                                                       const float (&m_run)[MT][2], float (&l_run)[MT][2],
                                                       uint16_t *go, int wrow0, int sq, int h, int b,
                                                       int64_t q_tok0, int nbatch, int g, int t)
{
    float inv[MT][2];
    fa__finish_rows<MT>(p, l_run, inv); /* (l_run: the rows' whole sums from here) */
    fa__store_lse_rows<MT>(p, m_run, l_run, wrow0, sq, h, b, q_tok0, nbatch, g, t);
    fa__store_o_rows<BF16, MT, NO>(p, acc_o, inv, go, wrow0, sq, g, t);
}

/* on_sm90: whether a GPU of compute capability 9.0 or later launches this
   tile shape; sm90_kernel: whether it takes the sm_90a kernel for head dim
   D's plain work (>>gpu-host, after the shapes' table). */
template <int D, int BM, int BN, int WARPS> struct fa__sm80_shape_used;

/* FA__SM80_PLAIN_STUB: in an sm_90a pass, the plain kernel (EXTRAS =
   false) of a head dim the sm_90a kernel runs (fa__sm90_dim) is a marked
   empty body. Compute capability 9.0 takes that kernel there; what it
   declines (a view TMA cannot describe, 2^31 tiles) runs the EXTRAS kernel
   (fa__sm80_plain_stubbed): less to compile [ctime-sm90]. Kept with
   FLASHATTN_TEST_HOOKS, whose tests run it on the H100 (fa__sm90_disable). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL) && \
    !defined(FLASHATTN_NO_HOPPER) && !defined(FLASHATTN_TEST_HOOKS)
#define FA__SM80_PLAIN_STUB 1
#else
#define FA__SM80_PLAIN_STUB 0
#endif

/* ---- >>sm80-kernel  the sm_80 forward kernel: course items 1-3 in code ----
   S, O~: per warp, MT row tiles of 16; per thread, [MT][tiles][4] floats in
   the C-fragment layout (course item 5). */

/* m = -inf, l = 0, O~ = 0: the rows before their first key block. */
template <int MT, int NO>
static __device__ __forceinline__ void fa__sm80_init_rows(float (&m_run)[MT][2], float (&l_run)[MT][2],
                                                          float (&acc_o)[MT][NO][4])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m_run[mt][0] = m_run[mt][1] = -INFINITY;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < NO; n++) acc_o[mt][n][0] = acc_o[mt][n][1] = acc_o[mt][n][2] = acc_o[mt][n][3] = 0.0f;
    }
}

/* S = Q K_n^T, raw dot products, for the warp's MT row tiles: Q at sQ, the
   stage of K_n at sK, through the ldmatrix offsets aq, ak (course item 6);
   qa, kb: the fragments of Q and K (the arrays of these steps are the
   kernel's [sm80-split]). */
template <bool BF16, int D, int MT, int NS>
static __device__ __forceinline__ void fa__sm80_qk(float (&s)[MT][NS][4], uint32_t (&qa)[MT][4], uint32_t (&kb)[4],
                                                   uint32_t sQ, uint32_t sK, const fa__ldsm_addr<D> &aq,
                                                   const fa__ldsm_addr<D> &ak, int warp, int lane)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < NS; j++) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            fa__ldmatrix_x4(qa[mt], sQ + aq.at(warp * 16 * MT + mt * 16 + (lane & 15), ks));
#pragma unroll
        for (int np = 0; np < NS / 2; np++) {
            fa__ldmatrix_x4(kb, sK + ak.at(np * 16 + ((lane >> 4) << 3) + (lane & 7), ks));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                fa__mma16816<BF16>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
                fa__mma16816<BF16>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
            }
        }
    }
}

/* O~ += P V_n, P = s from registers (course item 7), the stage of V_n at sV
   read transposed through the offsets av; pa, vb: the fragments of P and V. */
template <bool BF16, int D, int MT, int NS, int NO>
static __device__ __forceinline__ void fa__sm80_pv(float (&acc_o)[MT][NO][4], const float (&s)[MT][NS][4],
                                                   uint32_t (&pa)[NS / 2][MT][4], uint32_t (&vb)[4], uint32_t sV,
                                                   const fa__ldsm_addr<D> &av, int lane)
{
    /* Round P to 16 bits once, up front: half the registers of S. */
    fa__pack_p<BF16>(s, pa);
#pragma unroll
    for (int ks = 0; ks < NS / 2; ks++) {
#pragma unroll
        for (int dp = 0; dp < NO / 2; dp++) {
            fa__ldmatrix_x4_trans(vb, sV + av.at(ks * 16 + (lane & 15), dp));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                fa__mma16816<BF16>(acc_o[mt][2 * dp], pa[ks][mt], vb[0], vb[1]);
                fa__mma16816<BF16>(acc_o[mt][2 * dp + 1], pa[ks][mt], vb[2], vb[3]);
            }
        }
    }
}

/* Dropout (course item 10): zero the P_ij that fa__dropout_keep drops, with
   one Philox call per lane and (row tile, 8-key tile) instead of one per
   score. A call gives the words of 4 keys (fa__dropout_bits); lanes t and
   t ^ 1 of a quad hold keys 2t, 2t + 1 of the same 4, in rows g and g + 8:
   lane t computes row g + 8 (t & 1). Per row tile the NS calls' verdicts
   are gathered as bits first, the lane's own keys and its partner's, and
   the partner's go over in one shuffle: no words live across the calls,
   which then overlap (EXTRAS spills [sm80-dropout]). The same bits as
   fa__dropout_keep's. */
template <int MT, int NS>
static __device__ __forceinline__ void fa__sm80_dropout(float (&s)[MT][NS][4], const fa__fwd_params &p, int b,
                                                        int h, int wrow0, int k0, int g, int t)
{
    static_assert(NS <= 16, "2 NS keep bits in a word");
    const bool odd = t & 1; /* computes row g + 8; its keys are words 2, 3 of the call */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        uint32_t own = 0, give = 0; /* bit 2 j + c: key 2t + c of tile j kept, in the computed row / for the partner */
#pragma unroll
        for (int j = 0; j < NS; j++) {
            uint32_t r[4];
            fa__dropout_bits(p.dropout_seed, p.dropout_offset, b, h, p.heads_q, wrow0 + mt * 16 + g + (odd ? 8 : 0),
                             k0 + j * 8 + 2 * t, r);
#pragma unroll
            for (int c = 0; c < 2; c++) { /* fa__dropout_keep's rule */
                own |= (uint32_t)((odd ? r[2 + c] : r[c]) >= p.dropout_threshold) << (2 * j + c);
                give |= (uint32_t)((odd ? r[c] : r[2 + c]) >= p.dropout_threshold) << (2 * j + c);
            }
        }
        const uint32_t got = __shfl_xor_sync(0xffffffffu, give, 1);
        const uint32_t row_g = odd ? got : own, row_g8 = odd ? own : got;
        /* element e: row g + 8 (e >> 1), key 2t + (e & 1) (fa__each_score) */
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (!((e >> 1 ? row_g8 : row_g) >> (2 * j + (e & 1)) & 1u)) s[mt][j][e] = 0.0f;
    }
}

/* The kernel: one block of BM query rows of head h, batch b, walking its key
   blocks through two K / V stages. */
template <bool BF16, int D, int BM, int BN, int WARPS, bool EXTRAS>
__global__ void __launch_bounds__(WARPS * 32)
fa__fwd_kernel_sm80(const fa__fwd_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* a shape only sm_80 / sm_86 / sm_89 launch: no code for sm_90 and later
       (a third of the sm_80 kernels' compile time for sm_90a; if constexpr:
       the body below is not even instantiated) */
    if constexpr (!fa__sm80_shape_used<D, BM, BN, WARPS>::on_sm90) return; else
#endif
    if constexpr (!EXTRAS && FA__SM80_PLAIN_STUB && fa__sm80_shape_used<D, BM, BN, WARPS>::sm90_kernel) {
        __shared__ volatile int fa__sm80_stub; /* the marker: static shared memory */
        fa__sm80_stub = 0;
        (void)p;
    } else
    { /* (the body, for that else) */
    constexpr int NT = WARPS * 32;     /* threads */
    constexpr int MT = BM / (16 * WARPS); /* 16-row tiles per warp */
    constexpr int NS = BN / 8;          /* 8-key tiles of S per row tile */
    constexpr int NO = D / 8;           /* 8-column tiles of O~ per row tile */
    static_assert(BM % (16 * WARPS) == 0, "BLOCK_M must be a multiple of 16 * WARPS");
    static_assert(BN % 16 == 0 && D % 32 == 0, "BLOCK_N % 16, head dim % 32");

    extern __shared__ __align__(128) uint8_t fa__smem[];
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(fa__smem);
    const uint32_t sK = sQ + 2u * BM * D;          /* two stages of BN x D */
    const uint32_t sV = sK + 2u * 2u * BN * D;     /* two stages of BN x D */
    constexpr uint32_t KV_STAGE_BYTES = 2u * BN * D;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int m_block = gridDim.x - 1 - blockIdx.x; /* heavy causal blocks first */
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;

    /* ---- this sequence's extent and the key blocks its rows can see ---- */
    const fa__extent x = fa__fwd_extent(p, b, m_block * BM, BM, BN);
    if (x.row0 >= x.sq) return; /* whole block past this sequence's end */
    const int sq = x.sq, sk = x.sk, row0 = x.row0, n_begin = x.n_begin, n_end = x.n_end;
    const int64_t q_tok0 = x.q_tok0, shift = x.shift;

    const uint16_t *gq = p.q + (p.cu_seqlens_q ? q_tok0 * p.q_seq : b * p.q_batch) +
                         h * p.q_head + (int64_t)row0 * p.q_seq;
    const uint16_t *gk = p.k + (p.cu_seqlens_k ? x.k_tok0 * p.k_seq : b * p.k_batch) + hk * p.k_head;
    const uint16_t *gv = p.v + (p.cu_seqlens_k ? x.k_tok0 * p.v_seq : b * p.v_batch) + hk * p.v_head;
    uint16_t *go = p.o + (p.cu_seqlens_q ? q_tok0 * p.o_seq : b * p.o_batch) + h * p.o_head;

    /* Row indices (within the sequence) of this thread's rows: tile mt, half hf. */
    const int wrow0 = row0 + warp * 16 * MT;

    float m_run[MT][2], l_run[MT][2]; /* running max (base-2 units) and partial sum */
    float acc_o[MT][NO][4];           /* O~, unscaled */
    fa__sm80_init_rows(m_run, l_run, acc_o);

    /* The key blocks walked, block_of(0 .. count - 1): n_begin .. n_end - 1,
       or with a block mask the listed ones among them (>>gpu-bsparse; the
       launch sends block masks to the EXTRAS kernels, so the plain ones
       keep their code), each 128-key block of the list as R of ours (one
       partly outside [n_begin, n_end) is walked whole: the element mask
       clears the rest, and the copies zero-fill rows past sk) */
    constexpr int R = BN <= 128 ? 128 / BN : 1;
    static_assert(BN > 128 || 128 % BN == 0, "a 128-key block of a block mask is R of ours");
    const bool sparse = EXTRAS && p.bm.idx;
    fa__bm_run run = {NULL, n_end - n_begin};
    if (sparse) {
        run = fa__bm_find(p.bm, b, h, row0 / 128, n_begin / R, (n_end + R - 1) / R);
        run.count *= R;
    }
    auto block_of = [&](int it) { return sparse ? run.at[it / R] * R + it % R : n_begin + it; };
    const int count = run.count;

    if (count > 0) {
        /* Prologue: Q and K_{n_begin} in group 1, V_{n_begin} in group 2. */
        fa__load_tile<BM, D, NT>(sQ, gq, p.q_seq, sq - row0, p.d);
        {
            int k0 = block_of(0) * BN;
            fa__load_tile<BN, D, NT>(sK, gk + (int64_t)k0 * p.k_seq, p.k_seq, sk - k0, p.d);
            fa__cp_async_commit();
            fa__load_tile<BN, D, NT>(sV, gv + (int64_t)k0 * p.v_seq, p.v_seq, sk - k0, p.dv);
            fa__cp_async_commit();
        }
        /* Per-thread ldmatrix offsets (course item 6): lane l addresses
           Q row l % 16, chunk half l / 16; K row (l / 16) * 8 + l % 8, chunk
           half (l / 8) % 2; V (trans) row l % 16, chunk half l / 16. */
        const fa__ldsm_addr<D> aq(lane, lane >> 4), ak(lane, (lane >> 3) & 1), av(lane, lane >> 4);
        /* The multiplier that takes a score in S to base-2 units (course item 8). */
        const float mul = EXTRAS ? 1.0f : p.scale_log2;

        for (int it = 0; it < count; it++) {
            const uint32_t stage = (uint32_t)(it & 1) * KV_STAGE_BYTES;
            const int k0 = block_of(it) * BN, k1 = it + 1 < count ? block_of(it + 1) * BN : 0;

            /* K_n (and, first time, Q) has landed for this thread's copies;
               the barrier makes every thread's copies visible to all warps. */
            fa__cp_async_wait<1>();
            __syncthreads();

            /* ---- S = Q K_n^T (raw dot products) ---- */
            float s[MT][NS][4];
            uint32_t qa[MT][4], kb[4];
            fa__sm80_qk<BF16, D>(s, qa, kb, sQ, sK + stage, aq, ak, warp, lane);

            /* Prefetch the next block's K into the other stage (its readers, the previous block's S,
               all passed this iteration's first barrier). Always commit, so
               the group count the waits rely on stays the same at the end. */
            if (it + 1 < count)
                fa__load_tile<BN, D, NT>(sK + (stage ^ KV_STAGE_BYTES), gk + (int64_t)k1 * p.k_seq, p.k_seq,
                                         sk - k1, p.d);
            fa__cp_async_commit();

            /* ---- masks and extras, element by element, only where needed ---- */
            if (EXTRAS || fa__block_needs_mask(fa__mask_cut_for(p, sk, row0, row0 + BM - 1, shift), k0, BN))
                fa__mask_scores<EXTRAS>(s, p, wrow0, k0, sk, shift, h, g, t);

            /* ---- online softmax (FlashAttention-2: m, l, unscaled O~) ---- */
            {
                float alpha[MT][2];
                fa__softmax_tile(s, m_run, l_run, alpha, mul, mul);
                fa__rescale_o(acc_o, alpha);
            }

            if (EXTRAS && p.dropout) fa__sm80_dropout(s, p, b, h, wrow0, k0, g, t);

            /* V_n has landed (only K_{n+1} may still be in flight); the
               barrier publishes every thread's copies. */
            fa__cp_async_wait<1>();
            __syncthreads();

            /* ---- O~ += P V_n, P from registers (course item 7) ---- */
            uint32_t pa[BN / 16][MT][4], vb[4];
            fa__sm80_pv<BF16, D>(acc_o, s, pa, vb, sV + stage, av, lane);

            /* Prefetch the next block's V into the other stage (its readers, the previous block's P V,
               all passed this iteration's first barrier). */
            if (it + 1 < count)
                fa__load_tile<BN, D, NT>(sV + (stage ^ KV_STAGE_BYTES), gv + (int64_t)k1 * p.v_seq, p.v_seq,
                                         sk - k1, p.dv);
            fa__cp_async_commit();
        }
        /* Nothing may be left in flight when the block exits (the last two
           groups are empty, but say so). */
        fa__cp_async_wait<0>();
    }

    /* ---- epilogue: the one final rescale, O = O~ / l, and L = m + log l ---- */
    fa__store_o_lse<BF16>(p, acc_o, m_run, l_run, go, wrow0, sq, h, b, q_tok0, gridDim.z, g, t);
    }
}

/* ============================================================================
   >>hopper  THE sm_90a FORWARD KERNEL (FlashAttention-3)
   ============================================================================
   The sm_80 kernel above feeds the tensor cores with mma.sync: every warp
   loads its fragments from shared memory with ldmatrix and issues 16x8x16
   products one by one, and the same warps also run the softmax and issue
   the copies. On an H100 that tops out near half of the chip (about what
   FlashAttention-2 gets). Hopper has three things that lift the ceiling
   (FlashAttention-3):

   1. wgmma. A WARPGROUP (4 consecutive warps, 128 threads) issues one
      asynchronous 64xNx16 product whose B operand (and, optionally, A) the
      tensor cores read straight from shared memory through a 64-bit
      DESCRIPTOR; no ldmatrix, no register staging. The accumulator is
      spread over the warpgroup in the mma.sync C layout (warp w owns rows
      16w..16w+15), so the softmax code of the sm_80 kernel (>>gpu-tile)
      runs on it unchanged. S = Q K^T takes A = Q and B = K from shared
      memory ("SS"); O~ += P V takes A = P from registers ("RS", P never
      leaves registers, as in course item 7) and B = V, read transposed.
      fence / commit_group / wait_group bracket the asynchronous products.

   2. TMA. One thread describes a whole tile copy (a tensor map made on the
      host by cuTensorMapEncodeTiled, plus coordinates); the copy engine
      moves it into shared memory, already in the 128-byte swizzle wgmma
      reads, and counts the bytes on an MBARRIER. Consumers wait on the
      barrier's phase bit. No thread spends registers or issue slots on
      addresses.

   3. Warp specialization and setmaxnreg. The block has 3 warpgroups:
      warpgroup 0 is the PRODUCER (one warp issues TMA copies; it gives its
      registers back with setmaxnreg.dec to 24), warpgroups 1 and 2 are
      CONSUMERS (64 query rows each, BLOCK_M = 128; setmaxnreg.inc to 240
      registers for S, P and O~; d 64 mostly has a third consumer, BLOCK_M
      = 192, at 160 registers: see fa__sm90_shape). Q is
      loaded once; K and V go through a ring of STAGES shared-memory
      stages, each guarded by four barriers:
        k_full[s], v_full[s]    the producer's copies have landed (TMA bytes);
        k_empty[s], v_empty[s]  all 8 consumer warps are done reading K (V)
                                of stage s.
      K and V are released separately: K as soon as S = Q K^T is done, so
      the next K copy starts a whole softmax earlier (with one release for
      both, the overlap of item 4 left a 2-stage ring only one tile ahead).
      Stage s is used for the it-th time at iteration it = s + STAGES * u,
      and every barrier's phase bit flips once per use: waiting for use u
      means waiting for parity u & 1. (FA__SM90_WARPSPEC = 0, for the
      ablation, leaves the producer out: the block is the consumers alone,
      without setmaxnreg, and consumer warpgroup 0's first warp issues the
      copies between its own products, each stage's refill once every
      consumer has released it.)

   4. Overlap inside a warpgroup (FlashAttention-3, Alg. 2). wgmma is asynchronous,
      so a consumer issues S_{j+1} = Q K_{j+1}^T and O~ += P_j V_j in one
      turn, waits for S_{j+1} alone, computes its softmax, and only then
      waits for P_j V_j, rescales O~ (the factor comes from the new
      maximum) and packs P_{j+1}. ptxas 13.0 puts the wait for P_j V_j
      before the softmax, so what overlaps is the two products and one
      warpgroup's softmax with the other's products (item 5); forcing the
      Alg. 2 order measured slower [sm90-overlap]. (FA__SM90_OVERLAP = 0
      issues the products in separate turns, for the ablation.)
      Outside the key loop a warpgroup runs one chain of mostly dependent
      instructions, and each one there lengthens the tile. Hence the short
      epilogue: 1 / l and log2 l with ftz (fa__rcp_ftz), one L row a lane
      (fa__store_lse_rows), O staged by stmatrix (fa__sm90_store_o), K and
      V descriptors stepped (issue_qk), and the flat walk's extent without
      the general cases (FLAT) [sm90-epilogue].

   5. Pingpong between the consumer warpgroups (FlashAttention-3, §3.1): a
      warpgroup issues its products only in its turn, kept by one named
      barrier per consumer (ids 1 .. WG, 256 threads: its 128 that wait +
      the 128 of the warpgroup before it, which arrive when their turn
      ends), so the turns go round and one warpgroup's softmax runs while
      another's products occupy the tensor cores. (FA__SM90_PINGPONG = 0
      turns it off, for the ablation.) Not in d 64's four-warpgroup shape,
      whose warpgroups issue as soon as they are ready: see PINGPONG in
      the kernel.

   6. Persistent blocks. With more tiles (query block, head, batch) than
      SMs and one length for all sequences, the grid has one block per SM
      and each block walks its share of the tiles (d 64 and 128; d 256
      and d 64's three- and four-warpgroup shapes where it measured
      faster, fa__sm90_persist_d256 / _d64). The tiles go out in pairs, query
      blocks M - 1 - i and i of one head (M query blocks): under a causal
      mask they see M - i and i + 1 key blocks, M + 1 together whatever i
      is, so every pair is the same work and static rounds keep every SM
      equally busy (unit() in the kernel; the three-warpgroup shape walks
      single tiles where there is no mask). The barriers and ring carry
      on from tile to tile: the
      producer copies the next tile's Q as soon as the last S = Q K^T of
      the current one is done (a Q-empty barrier; with the three-warpgroup
      shape's two Q tiles, once the tile before has let go of the other,
      fa__sm90_q_bufs), and the next K and V as
      stages free up, while the consumers still finish P V and store O; a
      block per tile would start each tile with an empty pipeline, which
      short causal tiles (one to four key blocks at 512 tokens) feel most.
      Unequal lengths (cu_seqlens, seqlens_k) get a block per tile, which
      the hardware balances as it goes. (FA__SM90_PERSISTENT = 0 turns
      persistence off, for the ablation.)

   Shared memory layout (every region 1024-byte aligned, the swizzle's
   period): a tile of R rows x D columns is stored as D / 64 column blocks
   of [R][64] 16-bit elements, 128 bytes a row; inside each 8-row, 1024-byte
   atom, 16-byte chunk c of row r sits at chunk c ^ (r % 8) (TMA's
   SWIZZLE_128B, which is what wgmma's 128B-swizzle descriptor expects).
   Descriptors:
     K-major (Q and K; the k16 step walks along d): start = block + 32 bytes
       per k16 step inside the block, stride byte offset (SBO) = 1024 (the
       next 8 rows), leading byte offset unused for this swizzle (1).
     MN-major (V read transposed: k runs over keys = rows, n over d): start
       = block + 2048 bytes per k16 step (16 rows), SBO = 1024 (next 8 keys),
       LBO = R * 128 (the next 64-column block along n).

   Tails. A tile that runs past the sequence (rows >= sq or sk) must read
   zeros there. When the tensor map's rows end exactly where the sequence
   does (no cu_seqlens, no seqlens_k) TMA does it: the copy engine fills
   every element of the box outside the map with zeros (and the columns
   past the head dim too), and still counts the whole box's bytes. Else
   past the sequence lies the next sequence's rows (variable length),
   unused cache slots (seqlens_k) or the end of the buffer, and the
   producer warp copies the tile itself with cp.async, which zero-fills
   what it is told not to read, in the same swizzled layout; then it fences
   (the tensor cores read through the async proxy) and arrives on the
   barrier. Zero rows keep P V exact (0 * finite = 0) whatever lies past
   the end. (The copies are all issued before one wait: one latency, not one
   per row; every d 256 problem has a tail tile, as 80 keys divide no power
   of two [sm90-tail].)

   Coverage. f16 / bf16, head dims up to 256 in D = 64, 128 or 256 (head_dim
   and head_dim_v up to D; 32, 96 and 192 run the next D up when it is
   compiled in, fa__sm90_dim), causal / sliding window, GQA / MQA, variable
   length, KV-cache lengths, L. Softcap, ALiBi, dropout and a negative scale
   (the "extras"), strides TMA cannot describe, and GPUs other than compute
   capability 9.0 run the sm_80 kernel. The kernel needs
   the sm_90a target (-gencode arch=compute_90a,code=sm_90a); without it, or
   with FLASHATTN_NO_HOPPER defined, the sm_80 kernel runs everywhere.
*/
#ifndef FLASHATTN_NO_HOPPER
#include <cudaTypedefs.h> /* CUtensorMap, PFN_cuTensorMapEncodeTiled_v12000: types only,
                             the driver function is looked up at run time */

#ifndef FA__SM90_OVERLAP
#define FA__SM90_OVERLAP 1 /* 0: no intra-warpgroup overlap (ablation only) */
#endif
#ifndef FA__SM90_PERSISTENT
#define FA__SM90_PERSISTENT 1 /* 0: a block per tile at every head dim (ablation only) */
#endif
#ifndef FA__SM90_PINGPONG
#define FA__SM90_PINGPONG 1 /* 0: the consumer warpgroups issue products whenever ready (ablation only) */
#endif
#ifndef FA__SM90_WARPSPEC
#define FA__SM90_WARPSPEC 1 /* 0: no producer warpgroup, the consumers copy (ablation only) */
#endif
#ifndef FA__SM90_FP8_EXP_FMA
#define FA__SM90_FP8_EXP_FMA 16 /* the FP8 kernel's share at d 128, fa__sm90_cfg's EXP_FMA (0: none; measuring only) */
#endif
/* trace points (>>gpu-config; bench/sm90_trace/trace.cu records them) */
#ifndef FLASHATTN_TRACE
#define FLASHATTN_TRACE(ev, tile, it) ((void)0)
#endif
#ifndef FLASHATTN_TRACE_PV_FIRST
#define FLASHATTN_TRACE_PV_FIRST 0
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA__SM90A 1 /* this device pass can assemble wgmma, setmaxnreg */
#else
#define FA__SM90A 0
#endif

/* The tensor maps, passed by value as one __grid_constant__ kernel
   parameter (TMA reads the map from the parameter space): Q, K, V read, O
   written by the forward's epilogue (o_ok: O's map could be made; the
   backward leaves it unset). */
typedef struct fa__tma_maps { CUtensorMap q, k, v, o; int o_ok; } fa__tma_maps;

/* Dynamic shared memory of the sm_90a kernel: 1 KB of alignment slack, Q
   (BM rows), STAGES K and V tiles, the O staging tile when it has its own
   (o_own), the barriers. O gets its own tile (fa__sm90_store_o) when that
   still fits the 227 KB an H100 block may have (d 64, and d 128 with 128-key
   blocks). Else, at d 256, each consumer warpgroup stages its O in its own
   64 rows of the Q tile, which its last S = Q K^T has finished with. With
   a block per tile no later tile refills them; a persistent block copies
   the next tile's Q only once the O stores have read them (Q_AFTER_O in
   the kernel): the copy waits for the epilogue, but the block still skips
   the launch and set-up of a new one and has the next K and V in flight,
   and that measured faster than a block per tile, or than stores straight
   from the registers [sm90-o-staging]. A persistent block at d 128 with 176-key
   blocks stores O straight from the registers: staged in Q, the wait
   measured slower [sm90-o-staging]. */
/* bytes of one tile slot (HANDOFF in the kernel: the producer hands each
   tile over in the slot beside its Q; one per Q tile when there are two) */
#define FA__SM90_SLOT_BYTES 128u
__host__ __device__ constexpr size_t fa__sm90_smem(int D, int BM, int BN, int ST, bool o_own, int qb = 1)
{
    return 1024 + 2u * (size_t)D * (qb * BM + 2 * ST * BN + (o_own ? BM : 0)) + 8u * (2 * qb + 4 * ST) +
           (qb == 2 ? qb * FA__SM90_SLOT_BYTES : 0u);
}
__host__ __device__ constexpr bool fa__sm90_o_own(int D, int BM, int BN, int ST)
{
    return fa__sm90_smem(D, BM, BN, ST, true) <= 227u * 1024u;
}
/* The same for the FP8 kernel (>>hopper-fp8): Q, K and V tiles of DW
   16-bit words a row (fa__sm90_dw8), O's tile in 16 bits, a transposed V
   tile (D x BN bytes) per stage, and the FP8 barriers (fa__sm90_bufs).
   At d 256 there is no room for O's tile: O is stored
   straight from the registers. A d 64 row's 64 bytes are zero-filled to
   the 128-byte swizzle's row; S's products read only the first 64
   (fa__sm90_cfg's KW: half the k steps, which measured faster [sm90-fp8]). */
__host__ __device__ constexpr int fa__sm90_dw8(int D) { return D < 128 ? 64 : D / 2; }
__host__ __device__ constexpr size_t fa__sm90_smem8(int D, int BM, int BN, int ST, bool o_own)
{
    /* (the barriers: Q full and empty, and per stage K, V, Vt full and empty) */
    return 1024 + 2u * (size_t)fa__sm90_dw8(D) * (BM + 2 * ST * BN) + (o_own ? 2u * (size_t)D * BM : 0u) +
           (size_t)ST * D * BN + 8u * (2 + 6 * ST);
}
__host__ __device__ constexpr bool fa__sm90_o_own8(int D, int BM, int BN, int ST)
{
    return fa__sm90_smem8(D, BM, BN, ST, true) <= 227u * 1024u;
}
/* Q tiles in shared memory: two for the persistent three- (and four-) warpgroup blocks
   of the 16-bit kernel (the FP8 kernel keeps one: fa__sm90_smem8),
   so that the producer copies the next tile's Q while the current tile's
   last key blocks run instead of after its last S = Q K^T (169 KB at d 64
   with the O tile): otherwise each warpgroup waited for Q at a tile's
   start [sm90-q-bufs]. */
__host__ __device__ constexpr int fa__sm90_q_bufs(int WG, bool persist, bool o_own)
{
    return WG >= 3 && persist && o_own ? 2 : 1;
}
/* Does a persistent block of WG consumer warpgroups walk single tiles
   (else pairs of tiles; the kernel's unit())? The three- (and four-) warpgroup shapes
   without a causal / window mask, and the block-sparse kernel (sparse,
   in the order of fa__bm_order_kernel). The kernel walks and the launch
   sizes the grid by it. */
__host__ __device__ inline bool fa__sm90_walk1(int WG, const fa__fwd_params &p, bool sparse = false)
{
    return sparse || (WG >= 3 && !p.has_left && !p.has_right);
}
/* Division by a number fixed at launch without the division's instruction
   sequence, whose reciprocal waits on the MUFU pipe that the softmax's
   exponentials keep busy: for 0 <= n < 2^31, n / d = (hi32(n mul) + n) >>
   shift, with shift = ceil(log2 d) and mul = floor(2^32 (2^shift - d) / d)
   + 1 (the round-up method for invariant divisors, Granlund and
   Montgomery 1994; the sum fits 32 bits as n < 2^31). The persistent
   single-tile walk (fa__sm90_walk1) finds each tile's coordinates with it,
   and a block's one tile in its producer alone (the kernel's EARLY); in
   the walk of pairs and the consumers of a block's one tile it measured
   slower, cause not found [sm90-fastdiv]. */
typedef struct fa__fastdiv {
    uint32_t mul, shift;
} fa__fastdiv;
static fa__fastdiv fa__fastdiv_for(uint32_t d)
{
    fa__fastdiv f;
    f.shift = 0;
    while ((1ull << f.shift) < d) f.shift++;
    f.mul = (uint32_t)((((1ull << f.shift) - d) << 32) / d + 1);
    return f;
}
__host__ __device__ inline int fa__fastdiv_q(const fa__fastdiv &f, int n)
{
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi((uint32_t)n, f.mul);
#else
    const uint32_t hi = (uint32_t)(((uint64_t)(uint32_t)n * f.mul) >> 32);
#endif
    return (int)((hi + (uint32_t)n) >> f.shift);
}
/* What the kernel's walk over the tiles needs besides the problem: the
   divisors m_blocks and heads_q, and pad, the rows by which the first tile
   starts before row 0.
   pad: under a causal / window bound, in the three- and four-warpgroup
   shapes (192- and 256-row tiles) with 4 query blocks or more, the tiles
   end where the sequence ends: tile m_block holds rows m_block BM - pad ..
   + BM - 1, pad = M BM - sq, so that when BM does not divide the sequence
   the short tile is the first, which sees the fewest keys, not the last, which sees the most. Its
   rows below 0 are padding: their Q rows come from TMA's load of a box that
   starts outside the tensor (which it clips; a row's scores and output
   depend on its own Q row alone), their O and L are never written
   (fa__sm90_store_o, fa__store_lse_rows), and a warpgroup with no row at or
   above 0 is idle. At 1k tokens the tiles' key blocks (the most any of
   their warpgroups sees) go from 2, 3, 5, 6, 8, 8 to 1, 2, 4, 5, 7, 8, and
   the walk's pairs become the same work; from 4 query blocks, as with 3 it
   measured slower [sm90-pad]. Sequences of their own lengths
   (cu_seqlens_q) start at row 0: their rows below 0 would be the sequence
   before.
   Without a mask pad is 64 where the sequence's 64-row warpgroup rows
   leave one over (ceil(sq / 64) % WG == 1, the three-warpgroup shape at
   1k tokens: 16 in 6 tiles of 192), so that the two short tiles, the
   first and the last, hold two warpgroups' rows each instead of the
   last holding one: a tile's time is mostly its warpgroups' own chains,
   and one working warpgroup alone leaves the tensor cores idle under
   its softmax [sm90-pad]. The host finds pad: as a kernel parameter it
   costs no register (computed in the kernel, the persistent kernel
   spilled 4 bytes, ptxas 13.0).
   tail: with a block per tile under a causal mask, the tiles of the last
   `tail` heads (x batches) go out heaviest first across those heads (all their last
   query blocks, then all the ones before, ...) instead of head by head,
   so that the blocks the GPU starts last are the lightest and the SMs
   run out of work together [sm90-tail-order]. The kernel maps block t >=
   tail_t0, i = t - tail_t0, to tile tail_t0 + (i % tail) m_blocks + i /
   tail of the head-by-head order. tail is FA__TAIL_PCT percent of a
   wave's heads (sms / m_blocks), the best share measured. */
#ifndef FA__TAIL_PCT
#define FA__TAIL_PCT 85
#endif
typedef struct fa__sm90_walk {
    fa__fastdiv m, heads;
    int pad;
    int tail_t0, tail; /* (tail_t0 = INT32_MAX: no tail) */
} fa__sm90_walk;
/* (host) the walk of WG consumer warpgroups' tiles of 64 WG rows, m_blocks
   of them per sequence, batch sequences; one_tile: a block per tile, on
   sms SMs; flat: the kernel's FLAT walk, where m_blocks counts a
   sequence's warpgroup rows and no tile needs a pad */
static fa__sm90_walk fa__sm90_walk_for(int WG, const fa__fwd_params &p, int m_blocks, int batch, bool one_tile, bool flat,
                                       int sms)
{
    fa__sm90_walk w;
    w.m = fa__fastdiv_for((uint32_t)m_blocks);
    w.heads = fa__fastdiv_for((uint32_t)p.heads_q);
    const int wg_rows = (p.seqlen_q + 63) / 64; /* the sequence's warpgroup rows of 64 */
    if (WG >= 3 && p.has_right && !p.cu_seqlens_q && m_blocks >= 4) w.pad = m_blocks * 64 * WG - p.seqlen_q;
    else if (WG >= 3 && !p.has_right && !p.cu_seqlens_q && m_blocks >= 2 && wg_rows % WG == 1 && !flat) w.pad = 64;
    else w.pad = 0; /* (m_blocks covers the rows either way: with wg_rows % WG == 1, M BM >= sq + 128) */
    const int hb = p.heads_q * batch, want = FA__TAIL_PCT * ((sms + m_blocks - 1) / m_blocks) / 100;
    w.tail = want < hb ? want : hb; /* (heads x batches) */
    w.tail_t0 = one_tile && p.has_right && m_blocks > 1 && w.tail >= 1 ? (hb - w.tail) * m_blocks : INT32_MAX;
    return w;
}

/* setmaxnreg's count for the consumer warpgroups. The registers a block
   holds are fixed at launch: with __launch_bounds__(128 (wg + 1), 1) each
   thread gets the 64K register file divided among the block's threads,
   rounded down to a multiple of 8 (ptxas takes all of it, as -Xptxas -v
   reports: 168, 128, 96 for wg = 2, 3, 4). The producer
   warpgroup keeps 24 and the consumers share what it gives back: 240, 160,
   112. Asking for more than the block holds hangs setmaxnreg.inc. */
__host__ __device__ constexpr int fa__sm90_consumer_regs(int wg, int producer = 24)
{
    return (65536 / (128 * (wg + 1)) / 8 * 8 * (wg + 1) - producer) / wg / 8 * 8;
}
/* The producer warpgroup's registers: 24, or 56 where its warps 1-3
   transpose V (FP8: with 24, 32, 40 or 48 the kernel spilled, even with
   the transpose's body left out, ptxas 13.0) */
__host__ __device__ constexpr int fa__sm90_producer_regs(bool fp8) { return fp8 ? 56 : 24; }

#if FA__SM90A
/* ---- >>hopper-ptx  mbarrier, TMA, wgmma, setmaxnreg ---- */
#ifndef FLASHATTN_CUDA_EMU /* (tests/emu_cuda90.h defines these wrappers) */
static __device__ __forceinline__ void fa__mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
/* One arrival that also tells the barrier how many bytes TMA will deliver;
   the phase completes when both the arrivals and the bytes are in. */
static __device__ __forceinline__ void fa__mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void fa__mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* The barrier's memory is free for other uses again (compute-sanitizer
   keeps tracking an mbarrier that a CTA leaves without this). */
static __device__ __forceinline__ void fa__mbar_inval(uint32_t bar)
{
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* n arrivals at once (one thread standing for n) */
static __device__ __forceinline__ void fa__mbar_arrive_n(uint32_t bar, uint32_t n)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(n) : "memory");
}
/* Spin until the phase with this parity has completed (acquire: the data it
   guards is then visible to this thread). */
static __device__ __forceinline__ void fa__mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
/* A box of the 4-d map [b][h][row][col] (coordinates innermost first) into
   shared memory, completing on bar. */
static __device__ __forceinline__ void fa__tma_load(uint32_t dst, const CUtensorMap *map, int col,
                                                    int row, int head, int batch, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(col), "r"(row), "r"(head), "r"(batch), "r"(bar)
                 : "memory");
}
/* A contiguous run of `bytes` (a multiple of 16, both addresses 16-byte
   aligned) into shared memory, completing on bar: the 1-d bulk copy. */
static __device__ __forceinline__ void fa__bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
/* The other direction: a box of shared memory (laid out as the loads leave
   it) to the map's [b][h][row][col] box, in the bulk group of the thread
   for which `issue` is true (every thread calls it: a branch on the thread
   made ptxas keep the kernel's tile and ring counters in per-thread
   registers instead of uniform ones, 5% slower a key block). The map's
   bounds clip it: rows past the map's rows and columns past its columns
   are not written. */
static __device__ __forceinline__ void fa__tma_store(const CUtensorMap *map, uint32_t src, int col, int row,
                                                     int head, int batch, bool issue)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %6, 0;\n"
                 "@p cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n}\n"
                 ::"l"((uint64_t)map), "r"(src), "r"(col), "r"(row), "r"(head), "r"(batch), "r"((int)issue) : "memory");
}
/* `bytes` of fp32 in shared memory added to global memory (done in L2) or,
   !ADD, copied there, in this thread's bulk group (a multiple of 16 bytes,
   both addresses 16-byte aligned). */
template <bool ADD>
static __device__ __forceinline__ void fa__bulk_store(float *dst, uint32_t src, uint32_t bytes)
{
    if (ADD)
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                     ::"l"(dst), "r"(src), "r"(bytes) : "memory");
    else
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                     ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void fa__bulk_commit(void)
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* This thread's bulk stores have read their shared memory (READ) or are
   done writing global memory too. */
template <bool READ> static __device__ __forceinline__ void fa__bulk_wait(void)
{
    if (READ) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
static __device__ __forceinline__ void fa__wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void fa__wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void fa__wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* The compiler must not read (or move) accumulator registers across a
   wait_group it cannot see into: route each through an empty asm. */
template <int N> static __device__ __forceinline__ void fa__fence_regs(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> static __device__ __forceinline__ void fa__setmaxnreg_inc(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> static __device__ __forceinline__ void fa__setmaxnreg_dec(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
/* Named barrier id among `threads` threads: wait (bar.sync) or only arrive. */
static __device__ __forceinline__ void fa__named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
static __device__ __forceinline__ void fa__named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* Fences. async_shared: this thread's shared-memory writes (generic proxy)
   become visible to the async proxy (wgmma operands, bulk copies);
   async_global: the same between global memory and bulk copies; mbar_init:
   the barriers just initialized are visible before their first use. */
static __device__ __forceinline__ void fa__fence_async_shared(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
static __device__ __forceinline__ void fa__fence_async_global(void)
{
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
static __device__ __forceinline__ void fa__fence_mbar_init(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* A counter in global memory read with acquire, or added to with release
   (device scope): what one thread's release wrote is seen after the
   acquire that reads it. */
static __device__ __forceinline__ int fa__ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void fa__red_release_add(int *p, int v)
{
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
/* Ordinary (generic-proxy) shared-memory accesses by address: 4 bytes in,
   16 bytes out. */
static __device__ __forceinline__ void fa__st_shared32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
static __device__ __forceinline__ void fa__st_shared_f4(uint32_t addr, float x, float y, float z, float w)
{
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(x), "f"(y), "f"(z), "f"(w)
                 : "memory");
}
static __device__ __forceinline__ uint32_t fa__ld_shared32(uint32_t addr)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
static __device__ __forceinline__ uint4 fa__ld_shared128(uint32_t addr)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}
#endif /* FLASHATTN_CUDA_EMU */
/* The descriptor of the matrix `bytes` (a multiple of 16) further on: the
   start address is the low 14 bits, in 16-byte units, and a shared-memory
   address (< 228 KB) never carries out of them, so one 32-bit add of the
   low word does it, where fa__wg_desc(addr + bytes, ...) takes about four
   instructions. The forward uses it for Q, whose rows depend on the
   warpgroup (see issue_qk there). */
static __device__ __forceinline__ uint64_t fa__wg_desc_step(uint64_t desc, uint32_t bytes)
{
    return (desc & 0xFFFFFFFF00000000ull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

#ifndef FLASHATTN_CUDA_EMU
/* wgmma m64nNk16 with fp32 accumulators d[N / 2] per thread. The asm needs
   one operand per accumulator register, so the register lists are spelled
   out: mechanical text, the same instruction for every N. acc = 0 on the
   first k-step overwrites d instead of adding (scale-d). ss: A and B from
   shared memory, both K-major (TR = 0) or both MN-major (TR = 1,
   transposed; the backward's dQ = dS K). rs: A from registers (4 per thread, the
   mma.sync A fragment of this warp's 16 rows), B MN-major (transposed). */
#define FA__WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FA__WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FA__WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define FA__WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FA__WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FA__WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FA__WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define FA__WG_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FA__WG_ACC16 "{" FA__WG_R0 "}"
#define FA__WG_ACC32 "{" FA__WG_R0 ", " FA__WG_R1 "}"
#define FA__WG_ACC40 "{" FA__WG_R0 ", " FA__WG_R1 ", %32, %33, %34, %35, %36, %37, %38, %39}"
#define FA__WG_ACC64 "{" FA__WG_R0 ", " FA__WG_R1 ", " FA__WG_R2 ", " FA__WG_R3 "}"
#define FA__WG_ACC88 "{" FA__WG_R0 ", " FA__WG_R1 ", " FA__WG_R2 ", " FA__WG_R3 ", " FA__WG_R4 ", %80, %81, %82, %83, %84, %85, %86, %87}"
#define FA__WG_ACC128                                                                         \
    "{" FA__WG_R0 ", " FA__WG_R1 ", " FA__WG_R2 ", " FA__WG_R3 ", " FA__WG_R4 ", " FA__WG_R5 \
    ", " FA__WG_R6 ", " FA__WG_R7 "}"
#define FA__WG_O8(d, i)                                                                    \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define FA__WG_O32(d, i) FA__WG_O8(d, i), FA__WG_O8(d, i + 8), FA__WG_O8(d, i + 16), FA__WG_O8(d, i + 24)
#define FA__WG_OUT16(d) FA__WG_O8(d, 0), FA__WG_O8(d, 8)
#define FA__WG_OUT32(d) FA__WG_O32(d, 0)
#define FA__WG_OUT40(d) FA__WG_O32(d, 0), FA__WG_O8(d, 32)
#define FA__WG_OUT64(d) FA__WG_O32(d, 0), FA__WG_O32(d, 32)
#define FA__WG_OUT88(d) FA__WG_O32(d, 0), FA__WG_O32(d, 32), FA__WG_O8(d, 64), FA__WG_O8(d, 72), FA__WG_O8(d, 80)
#define FA__WG_OUT128(d) FA__WG_O32(d, 0), FA__WG_O32(d, 32), FA__WG_O32(d, 64), FA__WG_O32(d, 96)
/* the instruction text: SHAPE "k16.f32.bf16.bf16" and the like, TAIL the
   immediates after the scales (16 bits: the transposes; FP8 takes none:
   both operands K-major); A0.. are the operand numbers that follow the NR
   accumulators */
#define FA__WG_SS(N, SHAPE, ACC, A0, A1, A2, TAIL)                                              \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %" A2 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N SHAPE \
    " " ACC ", %" A0 ", %" A1 ", p, 1, 1" TAIL ";\n}\n"
#define FA__WG_RS(N, SHAPE, ACC, A0, A1, A2, A3, A4, A5, TAIL)                                  \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %" A5 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N SHAPE \
    " " ACC ", {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" A4 ", p, 1, 1" TAIL ";\n}\n"
/* TY: 0 f16, 1 bf16 (k16), 2 e4m3 (the FP8 kernel, k32: A in registers
   is 4 e4m3 a register, row g cols 4t .. 4t + 3, row g + 8 the same, then
   both 16 columns on: the mma.sync m16n8k32 A fragment of the warp's 16
   rows; no transpose, so V is transposed in shared memory, fa__sm90_v8) */
template <int N, int TY> struct fa__wgmma;
#define FA__WGMMA_N(N, NR, A0, A1, A2, A3, A4, A5)                                              \
    template <int TY> struct fa__wgmma<N, TY> {                                                 \
        template <int TR = 0, int TRB = TR>                                                     \
        static __device__ __forceinline__ void ss(float (&d)[NR], uint64_t a, uint64_t b, int acc) \
        {                                                                                       \
            if (TY == 2)                                                                        \
                asm volatile(FA__WG_SS(N, "k32.f32.e4m3.e4m3", FA__WG_ACC##NR, A0, A1, A2, "") \
                             : FA__WG_OUT##NR(d) : "l"(a), "l"(b), "r"(acc));                   \
            else if (TY == 1)                                                                   \
                asm volatile(FA__WG_SS(N, "k16.f32.bf16.bf16", FA__WG_ACC##NR, A0, A1, A2,      \
                                       ", %" A3 ", %" A4)                                       \
                             : FA__WG_OUT##NR(d) : "l"(a), "l"(b), "r"(acc), "n"(TR), "n"(TRB)); \
            else                                                                                \
                asm volatile(FA__WG_SS(N, "k16.f32.f16.f16", FA__WG_ACC##NR, A0, A1, A2,        \
                                       ", %" A3 ", %" A4)                                       \
                             : FA__WG_OUT##NR(d) : "l"(a), "l"(b), "r"(acc), "n"(TR), "n"(TRB)); \
        }                                                                                       \
        static __device__ __forceinline__ void rs(float (&d)[NR], const uint32_t (&a)[4],       \
                                                  uint64_t b, int acc)                          \
        {                                                                                       \
            if (TY == 2)                                                                        \
                asm volatile(FA__WG_RS(N, "k32.f32.e4m3.e4m3", FA__WG_ACC##NR, A0, A1, A2, A3,  \
                                       A4, A5, "")                                              \
                             : FA__WG_OUT##NR(d)                                                \
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));   \
            else if (TY == 1)                                                                   \
                asm volatile(FA__WG_RS(N, "k16.f32.bf16.bf16", FA__WG_ACC##NR, A0, A1, A2, A3,  \
                                       A4, A5, ", 1")                                           \
                             : FA__WG_OUT##NR(d)                                                \
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));   \
            else                                                                                \
                asm volatile(FA__WG_RS(N, "k16.f32.f16.f16", FA__WG_ACC##NR, A0, A1, A2, A3,    \
                                       A4, A5, ", 1")                                           \
                             : FA__WG_OUT##NR(d)                                                \
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc));   \
        }                                                                                       \
    };
FA__WGMMA_N(32, 16, "16", "17", "18", "19", "20", "21")
FA__WGMMA_N(64, 32, "32", "33", "34", "35", "36", "37")
FA__WGMMA_N(80, 40, "40", "41", "42", "43", "44", "45")
FA__WGMMA_N(128, 64, "64", "65", "66", "67", "68", "69")
FA__WGMMA_N(176, 88, "88", "89", "90", "91", "92", "93")
FA__WGMMA_N(256, 128, "128", "129", "130", "131", "132", "133")
#endif /* FLASHATTN_CUDA_EMU */

/* Copy one R x D tile (rows [row, row + R) of a [b][h][row][col] tensor)
   into shared memory at dst in the swizzled layout, signalling bar. Run by
   the 32 lanes of the producer warp. TMA (lane 0, one box per 64 columns)
   takes a whole tile, and a tail tile whose map ends where the sequence
   does (exact: TMA zero-fills rows past the map, and columns past the head
   dim). Any other tail tile (valid < R; see Tails above) is copied by the
   lanes with cp.async, 16 bytes each, all in flight at once, reading only
   `valid` rows and `cols` columns and zero-filling the rest; each lane
   waits for its copies and fences them for the tensor cores' async proxy
   before lane 0 arrives. */
template <int R, int D>
static __device__ __forceinline__ void fa__sm90_load(uint32_t dst, uint32_t bar, const CUtensorMap *map,
                                                     int row, int head, int batch, int valid, bool exact,
                                                     int cols, const uint16_t *g, int64_t g_seq,
                                                     int lane)
{
    if (valid >= R || exact) {
        if (lane == 0) {
            fa__mbar_expect_tx(bar, R * D * 2);
#pragma unroll
            for (int j = 0; j < D / 64; j++) fa__tma_load(dst + j * R * 128, map, 64 * j, row, head, batch, bar);
        }
        return;
    }
    fa__sm90_copy_rows<R, D>(dst, valid, cols, g, g_seq, lane);
    fa__cp_async_commit();
    fa__cp_async_wait<0>();
    fa__fence_async_shared();
    __syncwarp();
    if (lane == 0) fa__mbar_arrive(bar);
}

/* A warpgroup's O = O~ inv into its staging tile st as 16-bit BF16 values,
   rs its row (fa__sm90_store_o) */
template <bool BF16, int D>
static __device__ __forceinline__ void fa__sm90_stage_o(const float (&acc_o)[1][D / 8][4], const float (&inv)[1][2],
                                                        uint32_t st, uint32_t blk, int rs, int lane)
{
#pragma unroll
    for (int j = 0; j < D / 16; j++) {
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int hf = q % 2, c = 2 * j + q / 2;
            w[q] = fa__pack2<BF16>(acc_o[0][c][2 * hf] * inv[0][hf], acc_o[0][c][2 * hf + 1] * inv[0][hf]);
        }
        fa__stmatrix_x4(st + fa__sm90_chunk(rs, 2 * j + lane / 16, blk), w);
    }
}
/* The epilogue of one consumer warpgroup: its 64 rows of O = O~ / l (and
   L), staged through shared memory. Stored straight from the accumulator
   fragments, as the sm_80 kernel does, each store instruction of a warp
   writes 16 bytes into each of 8 rows: partial lines, 16 instructions a
   thread at d 64, 32 at d 128. Staged, each thread writes its fragments as
   16-bit pairs into the rows of `st` (the swizzled layout of every tile
   here: D / 64 column blocks `blk` bytes apart, 16-byte chunk c of row r at
   chunk c ^ (r % 8), so the 8 rows a store instruction covers fall in 8
   different bank groups), and then one thread hands the rows to TMA (one
   64 x 64 box per 64 columns, O's map `tm.o`) and the warpgroup goes on to
   its next tile without waiting: the copy has to have read the staging
   only before the next tile's epilogue writes it again. Where TMA cannot
   clip the rows right (see by_tma) each warp copies whole rows out itself,
   16 bytes a thread. Rows past the sequence and columns past head_dim_v
   are not written. Named barrier `bar` (the warpgroup's 128 threads)
   orders the two phases; wtid is the thread's index in the warpgroup, row0
   the warpgroup's first row. Staged and stored by TMA, the epilogue
   measured faster than straight stores from the fragments
   [sm90-o-staging].
   The rows' factors 1 / l come first (fa__finish_rows, in the shadow of
   the last P V: see the kernel's epilogue_begin), and `inv` brings them
   here. Before any row is written, the kernel has waited for
   the staging to be free (every thread of the warpgroup has read the
   previous tile's rows out, and the previous TMA store, thread 0's bulk
   group, has too; staging in Q: there is no previous tile). */
template <bool BF16, int D, bool O_RT>
static __device__ __forceinline__ void fa__sm90_store_o(const fa__fwd_params &p, const float (&acc_o)[1][D / 8][4],
                                                        const float (&inv)[1][2], uint32_t st, uint32_t blk,
                                                        uint16_t *go, int row0, int sq, int h, int b,
                                                        int64_t q_tok0, int wtid, int bar, const fa__tma_maps &tm)
{
    constexpr int CH = D / 8; /* 16-byte chunks per row */
    const int lane = wtid % 32;
    /* By TMA when O's map exists and clips the rows right: with cu_seqlens
       its rows run on into the next sequence, so a warpgroup whose rows
       pass the end of its sequence copies them out itself, and so does one
       whose rows start below 0 (fa__sm90_walk's pad): a TMA store of a box
       that started at row -63 stopped the kernel with an illegal
       instruction in the tests, where the loads of such boxes ran right
       [sm90-o-staging]. */
    const bool by_tma = tm.o_ok && row0 >= 0 && (!p.cu_seqlens_q || row0 + 64 <= sq);
    /* The warp's 16 rows, O = O~ inv in 16 bits, by stmatrix: four 8 x 8
       matrices (8 rows x one 16-byte chunk) a store, (rows 0-7, chunk 2j),
       (8-15, 2j), (0-7, 2j + 1), (8-15, 2j + 1); lane l gives row l % 8 of
       matrix l / 8. A 32-bit store per row and chunk took 16 stores and
       their addresses at d 64 [sm90-epilogue] */
    const int rs = 16 * (wtid / 32) + lane % 8 + 8 * ((lane / 8) % 2);
    if constexpr (O_RT) { /* (the FP8 kernel: O's type at run time, one branch) */
        if (p.o_bf16) fa__sm90_stage_o<true, D>(acc_o, inv, st, blk, rs, lane);
        else fa__sm90_stage_o<false, D>(acc_o, inv, st, blk, rs, lane);
    } else {
        fa__sm90_stage_o<BF16, D>(acc_o, inv, st, blk, rs, lane);
    }
    /* the rows written above, made visible to the copy engine (the async
       proxy) before thread 0 hands them to it */
    fa__fence_async_shared();
    fa__named_sync(bar, 128); /* every row of the staging is written */
    /* No waiting for the TMA copy: the next tile's staging waits for it at
       the top. (One path through the barriers for both ways out: with a
       barrier on each side of the branch ptxas moved the tile and ring
       counters from uniform to per-thread registers, 5% slower a key
       block.) */
    const int orow = (int)q_tok0 + row0, ob = p.cu_seqlens_q ? 0 : b;
    for (int j = 0; j < D / 64 && 64 * j < p.dv; j++)
        fa__tma_store(&tm.o, st + j * blk, 64 * j, orow, h, ob, by_tma && wtid == 0);
    fa__bulk_commit();
    if (!by_tma) {
#pragma unroll
        for (int j = 0; j < 64 * CH / 128; j++) {
            const int x = wtid + 128 * j, r = x / CH, c = x % CH, col = 8 * c;
            if ((unsigned)(row0 + r) >= (unsigned)sq || col >= p.dv) continue; /* (rows below 0 too) */
            const uint4 v = fa__ld_shared128(st + fa__sm90_chunk(r, c, blk));
            uint16_t *dst = go + (int64_t)(row0 + r) * p.o_seq + col;
            if (col + 8 <= p.dv) {
                *(uint4 *)dst = v; /* rows start on 16-byte boundaries (checked on the host) */
            } else { /* the last, partial chunk of a head_dim_v that is no multiple of 8 */
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const uint32_t w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
                    if (col + e < p.dv) dst[e] = (uint16_t)(w >> (16 * (e % 2)));
                }
            }
        }
    }
}
/* A tile handed over (the kernel's HANDOFF): its coordinates (the consumers
   find its extent from them: handed over whole, the extent's values stayed
   live in ordinary registers and the consumers spilled 104 bytes, ptxas
   13.0), done (no tile: the walk is over), and count_w of each consumer
   warpgroup (WG_STOP). Every consumer thread reads the slot (and so
   releases it: q_empty) and takes each word from lane 0, so that ptxas
   knows it is warp-uniform. */
struct fa__tile_slot {
    int m_block, h, b, done, count_w[4];
    int split, row0, h1, b1, row0_1; /* (FLAT, below: h, b, row0 the first segment's, h1, b1, row0_1 the second's) */
};
static_assert(sizeof(fa__tile_slot) <= FA__SM90_SLOT_BYTES, "tile slot");

/* The sm_90a block's dynamic shared memory */
extern __shared__ uint8_t fa__smem90[];

/* Its layout (from fa__smem90 rounded up to 1024 bytes): Q's tile,
   STAGES K tiles, STAGES V tiles, O's staging tile (O_OWN; else O is
   staged in Q's tile), Q's second tile (QB = 2), then the barriers, 8 bytes
   each: Q full, Q empty, per stage K full, V full, K empty, V empty, the
   second Q tile's full and empty, then the tile slots (QB = 2). The
   kernel's q_tile, q_full, q_empty, q_phase and slot find the u-th tile's
   Q and slot from sQ, sQ1 and bars.
   FP8 (VT_BYTES > 0, one Q tile): the O tile is O_BYTES (O is 16-bit, Q
   e4m3), STAGES transposed V tiles (sVt, fa__sm90_v8) sit before the
   barriers, and after Q's and the stages' come each stage's Vt full, then
   each stage's Vt empty. */
template <uint32_t Q_BYTES, uint32_t KV_BYTES, int STAGES, int QB, bool O_OWN, uint32_t O_BYTES = Q_BYTES,
          uint32_t VT_BYTES = 0>
struct fa__sm90_bufs {
    uint32_t sQ, sK, sV, sO, sQ1, sVt, bars;
    __device__ __forceinline__ explicit fa__sm90_bufs()
    {
        sQ = ((uint32_t)__cvta_generic_to_shared(fa__smem90) + 1023u) & ~1023u;
        sK = sQ + Q_BYTES, sV = sK + STAGES * KV_BYTES;
        /* O's staging tile (laid out as Q's), or Q's tile itself */
        sO = O_OWN ? sV + STAGES * KV_BYTES : sQ;
        sQ1 = sV + STAGES * KV_BYTES + (O_OWN ? O_BYTES : 0u); /* Q's second tile (QB = 2) */
        sVt = sQ1 + (QB - 1) * Q_BYTES;
        bars = sVt + STAGES * VT_BYTES;
    }
    __device__ __forceinline__ uint32_t k_full(int s) const { return bars + 8u * (2 + s); }
    __device__ __forceinline__ uint32_t v_full(int s) const { return bars + 8u * (2 + STAGES + s); }
    __device__ __forceinline__ uint32_t k_empty(int s) const { return bars + 8u * (2 + 2 * STAGES + s); }
    __device__ __forceinline__ uint32_t v_empty(int s) const { return bars + 8u * (2 + 3 * STAGES + s); }
    /* (FP8) */
    __device__ __forceinline__ uint32_t vt_full(int s) const { return bars + 8u * (2 + 4 * STAGES + s); }
    __device__ __forceinline__ uint32_t vt_empty(int s) const { return bars + 8u * (2 + 5 * STAGES + s); }
};


/* The sm_90a kernel's tile scheduler: which tiles block blockIdx.x walks,
   in which order, and how many key blocks each consumer warpgroup's rows
   of a tile see. Tiles are (query block of BM rows, head, batch), m_blocks
   query blocks per (head, batch); FLAT: WG warpgroup rows of the list of
   every sequence's rows (the kernel's FLAT). */
template <int WG, int BM, int BN, bool PERSIST, bool FLAT, bool WG_STOP, bool SPARSE = false>
struct fa__sm90_sched {
    const fa__fwd_params &p;
    const fa__sm90_walk &wk;
    int m_blocks, batch, tiles;
    bool one_tile, walk1;
    int pairs_m, pairs, rounds;
    __device__ __forceinline__ fa__sm90_sched(const fa__fwd_params &p_, const fa__sm90_walk &wk_, int m_blocks_,
                                              int batch_)
        : p(p_), wk(wk_), m_blocks(m_blocks_), batch(batch_)
    {
        tiles = FLAT ? (m_blocks * p.heads_q * batch + WG - 1) / WG : m_blocks * p.heads_q * batch;
        one_tile = !PERSIST || (int)gridDim.x >= tiles;
        walk1 = fa__sm90_walk1(WG, p, SPARSE);
        pairs_m = (m_blocks + 1) / 2, pairs = pairs_m * p.heads_q * batch;
        /* (a block per tile: one unit, known at compile time without PERSIST,
           so no state is carried in registers from tile to tile) */
        rounds = one_tile ? 1
                 : walk1  ? (tiles + (int)gridDim.x - 1) / (int)gridDim.x
                          : 2 * ((pairs + (int)gridDim.x - 1) / (int)gridDim.x);
    }
    /* Tile order: the query block runs fastest, so the blocks running at
       once share a head's K and V in L2, and last first: the heaviest under
       a causal mask [sm90-tile-order]. */
    __device__ __forceinline__ void tile_coords(int tile, int &m_block, int &h, int &b, bool fast = false) const
    {
        if (fast) { /* (fa__fastdiv) */
            const int hb = fa__fastdiv_q(wk.m, tile); /* tile / m_blocks */
            m_block = m_blocks - 1 - (tile - hb * m_blocks);
            b = fa__fastdiv_q(wk.heads, hb);
            h = hb - b * p.heads_q;
            return;
        }
        m_block = m_blocks - 1 - tile % m_blocks;
        h = (tile / m_blocks) % p.heads_q;
        b = tile / m_blocks / p.heads_q;
    }
    /* A persistent block (gridDim.x < tiles) walks PAIRS of tiles: pair j
       is query blocks M - 1 - i and i (i = j % ceil(M / 2), M = m_blocks)
       of one head and batch, the heaviest and the lightest left under a
       causal mask, so every pair is the same work (M + 1 key blocks: the
       causal block count grows by one per query block) and a block that
       takes pairs j = blockIdx.x, + G, + 2 G, ... (G = gridDim.x) is as
       busy as every other, mask or not (up to one pair in the last round).
       Unit k of the block is the heavy (k even) or light (k odd) tile of
       pair (k / 2) G + blockIdx.x. Without a mask the three-warpgroup
       shape (and the four-warpgroup one) walks single tiles instead, k G +
       blockIdx.x in tile_coords' order (WALK1): its 192-row tiles rarely
       divide the sequence, so its pairs would not be the same work (at 512
       tokens pairs of 192 + 128
       rows and single middle tiles of 192). For that shape the launch
       makes G coprime to the tiles or pairs of a head, so that no block
       gets the short ones every time. A block per
       tile (gridDim.x >= tiles) takes tile blockIdx.x in tile_coords'
       order. False: no tile (past the last pair, or the second half of the
       middle pair when M is odd). */
    __device__ __forceinline__ bool unit(int k, int &m_block, int &h, int &b, bool fast = false) const
    {
        if (SPARSE) {
            /* (a block mask) the tiles in the order of p.bm.order, most key
               blocks first, dealt out as a snake (round k runs the blocks
               forward when even, backward when odd), so that the blocks' sums
               of key blocks come out close: the longest-first rule of list
               scheduling (Graham 1969) with the pairing of sorted lists */
            const int G = (int)gridDim.x, bx = (int)blockIdx.x;
            const int u = one_tile ? bx : k * G + (k % 2 ? G - 1 - bx : bx);
            if (u >= tiles) return false;
            tile_coords(p.bm.order[u], m_block, h, b, true);
            return true;
        }
        if (one_tile) {
            /* (the last heads' tiles heaviest first: fa__sm90_walk's tail) */
            int tile = (int)blockIdx.x;
            if (tile >= wk.tail_t0) {
                const int i = tile - wk.tail_t0;
                tile = wk.tail_t0 + i % wk.tail * m_blocks + i / wk.tail;
            }
            tile_coords(tile, m_block, h, b, fast);
            return (int)blockIdx.x < tiles;
        }
        if (walk1) {
            const int t1 = k * (int)gridDim.x + (int)blockIdx.x;
            tile_coords(t1, m_block, h, b, true);
            return t1 < tiles;
        }
        const int j = (k / 2) * (int)gridDim.x + (int)blockIdx.x, i = j % pairs_m;
        h = (j / pairs_m) % p.heads_q;
        b = j / pairs_m / p.heads_q;
        m_block = k % 2 ? i : m_blocks - 1 - i;
        return j < pairs && !(k % 2 && i == m_blocks - 1 - i);
    }
    /* tile m_block's first row (wk.pad: fa__sm90_walk) */
    __device__ __forceinline__ int tile_row0(int m_block) const { return m_block * BM - wk.pad; }
    /* count_w (WG_STOP, the kernel's): the key blocks warpgroup w's own rows
       of tile x (batch b) see; 0 for a warpgroup with no row in the sequence.
       (Without a right bound every row sees the tile's last block, and
       fa__fwd_extent is not asked [sm90-wg-stop].) */
    __device__ __forceinline__ int warpgroup_blocks(const fa__extent &x, int b, int w) const
    {
        const int count = x.n_end - x.n_begin, wfirst = x.row0 + 64 * w;
        if (!WG_STOP) return count;
        const bool idle = wfirst >= x.sq || wfirst + 64 <= 0;
        const int seen = idle ? 0 : !p.has_right ? count : fa__fwd_extent(p, b, wfirst, 64, BN).n_end - x.n_begin;
        return min(max(seen, 0), count);
    }
};

/* The sm_90a consumer's softmax step (item 4): S of key block n (keys
   from k0 = n BN) is complete: the mask where the block needs it, then the
   online softmax (alpha for O~). needs_mask: fa__block_needs_mask's answer,
   asked before the wait for S under SHORT_PATH (the kernel's), else here.
   ds: the thread's two rows' descale products s_q s_k (FP8; else 1), which
   join the multiplier; LIFT, EXP_FMA: fa__softmax_tile's. */
template <int NS, int BN, bool LAZY_MAX, bool SHORT_PATH, int LIFT = 0, int EXP_FMA = 0>
static __device__ __forceinline__ void fa__sm90_softmax_step(float (&s)[1][NS][4], float (&m_run)[1][2],
                                                             float (&l_run)[1][2], float (&alpha)[1][2],
                                                             const fa__fwd_params &p, const fa__extent &x,
                                                             const fa__mask_cut &cut, int n, bool early_mask,
                                                             int wrow0, int h, int g, int t, const float (&ds)[2])
{
    const int k0 = n * BN;
    /* the mask without a left bound (causal) compares each score
       once, not twice (fa__mask_scores' LEFT) [gpu-mask]. The
       sm_80 kernel keeps both compares. */
    if (SHORT_PATH ? early_mask : fa__block_needs_mask(cut, k0, BN)) {
        if (p.has_left)
            fa__mask_scores<false>(s, p, wrow0, k0, x.sk, x.shift, h, g, t);
        else
            fa__mask_scores<false, false>(s, p, wrow0, k0, x.sk, x.shift, h, g, t);
    }
    float mul[2] = {p.scale_log2 * ds[0], p.scale_log2 * ds[1]};
    if (LIFT) { /* (FP8) kept above 0: a descale of 0 would make the masked
                   -inf scores NaN; FLT_MIN gives S = 0 to fp32's precision */
        mul[0] = fmaxf(mul[0], FLT_MIN);
        mul[1] = fmaxf(mul[1], FLT_MIN);
    }
    fa__softmax_tile<1, NS, LAZY_MAX, SHORT_PATH, LIFT, EXP_FMA>(s, m_run, l_run, alpha, mul[0], mul[1]);
}

/* The sm_90a consumer's epilogue (item 7), in two parts. The first needs
   no O: the rows' sums l and 1 / l (fa__finish_rows), L where LSE_EARLY,
   and with O staged (O_STAGED), the staging free: the previous tile's rows
   read out (its TMA store, thread 0's bulk group, and every thread's own
   copies; the warpgroup's named barrier 1 + WG + cw). */
template <bool LSE_EARLY, bool O_STAGED, int WG>
static __device__ __forceinline__ void fa__sm90_epilogue_begin(const fa__fwd_params &p, float (&m_run)[1][2],
                                                               float (&l_run)[1][2], float (&inv)[1][2],
                                                               const fa__extent &x, int wrow0, int h, int b,
                                                               int batch, int g, int t, int cw)
{
    fa__finish_rows<1>(p, l_run, inv);
    if (LSE_EARLY) fa__store_lse_rows<1>(p, m_run, l_run, wrow0, x.sq, h, b, x.q_tok0, batch, g, t);
    if (O_STAGED) {
        fa__bulk_wait<true>();
        fa__named_sync(1 + WG + cw, 128);
    }
}

/* The second, after the last P V: L (unless LSE_EARLY), then O scaled by
   1 / l and stored, staged in shared memory at sO (O_STAGED) or straight.
   (Staged only in a tile of its own, or in Q's tile once this tile's keys
   have run: a tile without keys stores its zeros straight, as a copy may
   be landing in Q's tile, the next tile's (Q_AFTER_O) or its own, sent
   before its keys were known (EARLY). count is never below 0, windows
   being >= 0.) release_q: the arrival on the tile's Q empty barrier
   (Q_AFTER_O); tk: the tile, for FLASHATTN_TRACE. */
template <bool BF16, bool O_RT, int D, int BM, int WG, bool LSE_EARLY, bool O_STAGED, bool O_OWN, bool Q_AFTER_O,
          class QRelease>
static __device__ __forceinline__ void fa__sm90_epilogue_end(int tk, const fa__fwd_params &p, const fa__tma_maps &tm,
                                                             float (&acc_o)[1][D / 8][4], float (&m_run)[1][2],
                                                             float (&l_run)[1][2], float (&inv)[1][2],
                                                             const fa__extent &x, int wrow0, int h, int b,
                                                             int batch, int g, int t, int cw, int tid, int count,
                                                             uint32_t sO, const QRelease &release_q)
{
    if (!LSE_EARLY) fa__store_lse_rows<1>(p, m_run, l_run, wrow0, x.sq, h, b, x.q_tok0, batch, g, t);
    FLASHATTN_TRACE(21, tk, 0);
    FLASHATTN_TRACE(16, tk, 0);
    uint16_t *go = p.o + (p.cu_seqlens_q ? x.q_tok0 * p.o_seq : b * p.o_batch) + h * p.o_head;
    if (O_STAGED && (O_OWN || count > 0)) {
        fa__sm90_store_o<BF16, D, O_RT>(p, acc_o, inv, sO + (uint32_t)cw * 64 * 128, BM * 128, go,
                                        x.row0 + 64 * cw, x.sq, h, b, x.q_tok0, tid % 128, 1 + WG + cw, tm);
        if (Q_AFTER_O) {
            /* Q's rows are free once the TMA store (thread 0's bulk
               group) has read them, and every thread its own staging
               writes and row copies (the !by_tma way out): each
               thread arrives for its own accesses */
            if (tid % 128 == 0) fa__bulk_wait<true>();
            release_q();
        }
    } else if constexpr (O_RT) { /* (the FP8 kernel: O's type at run time, one branch) */
        if (p.o_bf16) fa__store_o_rows<true>(p, acc_o, inv, go, wrow0, x.sq, g, t);
        else fa__store_o_rows<false>(p, acc_o, inv, go, wrow0, x.sq, g, t);
    } else
        fa__store_o_rows<BF16>(p, acc_o, inv, go, wrow0, x.sq, g, t);
    FLASHATTN_TRACE(17, tk, 0);
}

/* Where a tile's copies read from (fa__sm90_producer's tile_src, the
   kernel's): its first query and key rows in the maps, the maps' batch
   coordinates, the K / V head, whether a map's rows end where the sequence
   does, and the global pointers for copies without TMA. */
struct fa__src {
    int qrow, krow, qb, kb, hk;
    bool q_exact, kv_exact;
    const uint16_t *gq, *gk, *gv;
    int tk;                 /* (FLASHATTN_TRACE) the walk's tile */
};

/* The sm_90a producer (item 2), run by one warp (lane: its lane): walks
   the block's tiles (sched) in the consumers' order and, for each tile
   with rows and keys, copies its Q (copy_q) and its key blocks' K and V
   through the ring of stages (copy_kv); with HANDOFF it publishes each
   tile's slot first, and a done slot after the last; FLAT: a tile's one or
   two segments. q_tile .. slot: the kernel's Q buffers, barriers and slots;
   tile_src, copy_q, copy_kv: the kernel's copies (shared with the loader
   of FA__SM90_WARPSPEC = 0). */
template <int D, int BM, int BN, int WG, int QB, bool HANDOFF, bool FLAT, bool EARLY, bool SPARSE, class Sched,
          class Bufs, class QTile, class QFull, class QEmpty, class QPhase, class Slot, class TileSrc, class CopyQ, class CopyKV>
static __device__ __forceinline__ void
fa__sm90_producer(const fa__fwd_params &p, const fa__tma_maps &tm, const fa__sm90_walk &wk, int m_blocks, int batch,
                  const Sched &sched, const Bufs &sm, bool early_ok, int lane, const QTile &q_tile,
                  const QFull &q_full, const QEmpty &q_empty, const QPhase &q_phase, const Slot &slot,
                  const TileSrc &tile_src, const CopyQ &copy_q, const CopyKV &copy_kv)
{
    int q_uses = 0, ring = 0, tk = 0; /* (tk: the tile, for FLASHATTN_TRACE) */
    /* (HANDOFF) slot q_uses: the tile's (or done), once the tile
       before the last in it has been released (the Q empty
       barrier); the Q copy's arrival publishes it, or, with no Q,
       an arrival of its own */
    auto slot_free = [&]() {
        if (q_uses >= QB) fa__mbar_wait(q_empty(q_uses), q_phase(q_uses - QB));
        FLASHATTN_TRACE(1, tk, 0);
    };
    auto publish = [&](const fa__extent &x, int m_block, int h, int b, bool done) {
        slot_free();
        if (lane == 0) {
            fa__tile_slot *t = slot(q_uses);
            t->m_block = m_block;
            t->h = h;
            t->b = b;
            t->done = done;
            for (int w = 0; w < WG; w++) t->count_w[w] = sched.warpgroup_blocks(x, b, w);
            if (done || x.n_end <= x.n_begin) fa__mbar_arrive(q_full(q_uses));
        }
    };
    /* (FLAT) tile k G + blockIdx.x, its one or two segments (rows
       from row0 of head h, batch b; the second starts at the next
       sequence's row 0, so its row0 is -64 split): the slot, Q in
       64-row boxes (this launch's Q map has them), and the key
       blocks, both segments' block n in turn. False past the last
       tile. */
    auto flat_tile = [&](int k) {
        const int u = k * (int)gridDim.x + (int)blockIdx.x;
        if (u >= sched.tiles) return false;
        const int a = u * WG, hb = fa__fastdiv_q(wk.m, a), r0 = a - hb * m_blocks;
        const int split = min(WG, m_blocks - r0);
        const bool two = split < WG && hb + 1 < p.heads_q * batch;
        const int b0 = fa__fastdiv_q(wk.heads, hb), h0 = hb - b0 * p.heads_q;
        const int b1 = fa__fastdiv_q(wk.heads, hb + 1), h1 = hb + 1 - b1 * p.heads_q;
        const fa__extent x0 = fa__fwd_extent(p, b0, 64 * r0, BM, BN);
        const fa__extent x1 = fa__fwd_extent(p, b1, -64 * split, BM, BN);
        const bool keys = x0.n_end > x0.n_begin; /* (the same blocks for both) */
        const int working = two ? WG : split;    /* warpgroups with rows */
        slot_free();
        if (lane == 0) {
            fa__tile_slot *t = slot(q_uses);
            t->h = h0, t->b = b0, t->row0 = x0.row0;
            t->h1 = h1, t->b1 = b1, t->row0_1 = x1.row0;
            t->split = two ? split : WG;
            t->done = 0;
            for (int w = 0; w < WG; w++)
                t->count_w[w] = w < split ? sched.warpgroup_blocks(x0, b0, w)
                                : two     ? sched.warpgroup_blocks(x1, b1, w)
                                          : 0;
            if (!keys) {
                fa__mbar_arrive(q_full(q_uses));
            } else {
                fa__mbar_expect_tx(q_full(q_uses), (uint32_t)working * 64 * D * 2);
                for (int w = 0; w < working; w++)
                    for (int j = 0; j < D / 64; j++)
                        fa__tma_load(q_tile(q_uses) + (uint32_t)(j * BM + 64 * w) * 128, &tm.q, 64 * j,
                                     (w < split ? x0.row0 : x1.row0) + 64 * w, w < split ? h0 : h1,
                                     w < split ? b0 : b1, q_full(q_uses));
            }
        }
        q_uses++;
        if (!keys) return true;
        /* (whole boxes: one length for all, no cu_seqlens, TMA clips) */
        fa__src c0 = {}, c1 = {};
        c0.tk = c1.tk = tk;
        c0.hk = h0 / p.group, c0.kb = b0, c0.kv_exact = true;
        c1.hk = h1 / p.group, c1.kb = b1, c1.kv_exact = true;
        for (int n = x0.n_begin; n < x0.n_end; n++) {
            copy_kv(c0, x0, n, ring++);
            if (two) copy_kv(c1, x1, n, ring++);
        }
        return true;
    };
    for (int k = 0; k < sched.rounds; k++) {
        tk = k;
        if constexpr (FLAT) {
            if (!flat_tile(k)) break;
            continue;
        }
        int m_block, h, b;
        if (!sched.unit(k, m_block, h, b, EARLY)) continue;
        const int hk = h / p.group;
        /* (early: a tile with rows; its Q the first, K_0 and V_0 ring position 0) */
        const int row0 = sched.tile_row0(m_block);
        const bool early = early_ok && row0 < p.seqlen_q;
        if (early) {
            fa__sm90_load<BM, D>(q_tile(0), q_full(0), &tm.q, row0, h, b, BM, true, p.d, p.q, 0, lane);
            fa__sm90_load<BN, D>(sm.sK, sm.k_full(0), &tm.k, 0, hk, b, BN, true, p.d, p.k, 0, lane);
            fa__sm90_load<BN, D>(sm.sV, sm.v_full(0), &tm.v, 0, hk, b, BN, true, p.dv, p.v, 0, lane);
        }
        const fa__extent x = fa__fwd_extent(p, b, row0, BM, BN);
        /* (x.row0 < x.sq asked twice: a tile without rows skipped first,
           then publish and the test for keys, spilled 56 bytes in
           the HANDOFF kernels, ptxas 13.0) */
        if (HANDOFF && x.row0 < x.sq) publish(x, m_block, h, b, false);
        /* (SPARSE: the listed blocks among them, as the consumers find them) */
        fa__bm_run run = {NULL, x.n_end - x.n_begin};
        if (SPARSE && x.row0 < x.sq) run = fa__bm_find(p.bm, b, h, x.row0 / 128, x.n_begin, x.n_end);
        if (x.row0 >= x.sq || run.count <= 0) {
            if (early) { /* (no key: nothing may be in flight at the block's end) */
                fa__mbar_wait(q_full(0), 0);
                fa__mbar_wait(sm.k_full(0), 0);
                fa__mbar_wait(sm.v_full(0), 0);
            }
            if (HANDOFF && x.row0 < x.sq) q_uses++;
            continue;
        }
        fa__src c = tile_src(x, h, hk, b);
        c.tk = k;
        if (!early) copy_q(c, x, h, q_uses);
        q_uses++;
        if constexpr (SPARSE) { /* (the run read 32 entries at a time, one a lane) */
            int mine = 0;
            for (int it = 0; it < run.count; it++, ring++) {
                if (it % 32 == 0) mine = it + lane < run.count ? run.at[it + lane] : 0;
                copy_kv(c, x, __shfl_sync(0xffffffffu, mine, it % 32), ring);
            }
        } else {
            int n = x.n_begin;
            if (early) n++, ring++; /* (n_begin = 0: no left bound) */
            for (; n < x.n_end; n++, ring++) copy_kv(c, x, n, ring);
        }
    }
    if (HANDOFF) publish(fa__extent(), 0, 0, 0, true);
}

/* The sm_90a consumer's loop over its key blocks 0 .. count_w - 1 (items
   4 and 5): with FA__SM90_OVERLAP, S_it = Q K_it^T issued beside O~ +=
   P_{it-1} V_{it-1}, the softmax of S_it under the product, and the last
   P V beside the epilogue's first part; else S and P V in turns of their
   own. The callables are fa__sm90_consumer_mainloop's, bound to the
   tile: the turns (my_turn, end_turn), the products (issue_qk,
   issue_pv), the stages' releases (release_k, release_v), needs_mask,
   softmax (fa__sm90_softmax_step), pack (P as the A fragments of P V)
   and epilogue_begin (fa__sm90_epilogue_begin). LATE_TURN: each step
   (key block it > 0) gives the other warpgroup its turn after its softmax
   instead of right after its products (fa__sm90_cfg's); first() passes it
   right after S_0's product either way. tk: the tile, for FLASHATTN_TRACE
   (the events: bench/sm90_trace/trace.cu). */
template <bool BF16, bool LAZY_MAX, bool SHORT_PATH, bool LATE_TURN, int NS, int NO, class MyTurn, class EndTurn,
          class IssueQK, class IssuePV, class NeedsMask, class ReleaseK, class ReleaseV, class Softmax, class Pack,
          class EpilogueBegin>
static __device__ __forceinline__ void
fa__sm90_key_loop(int tk, int count_w, float (&s)[1][NS][4], uint32_t (&pa)[NS / 2][1][4], float (&acc_o)[1][NO][4],
                  float (&alpha)[1][2], const MyTurn &my_turn, const EndTurn &end_turn, const IssueQK &issue_qk,
                  const IssuePV &issue_pv, const NeedsMask &needs_mask, const ReleaseK &release_k,
                  const ReleaseV &release_v, const Softmax &softmax, const Pack &pack,
                  const EpilogueBegin &epilogue_begin)
{
    float(&s_flat)[4 * NS] = reinterpret_cast<float(&)[4 * NS]>(s);
    float(&o_flat)[4 * NO] = reinterpret_cast<float(&)[4 * NO]>(acc_o);
    if (FA__SM90_OVERLAP) {
        /* the first key block: S_0 alone */
        auto first = [&]() {
            my_turn();
            issue_qk(0);
            end_turn();
            const bool early_mask = SHORT_PATH && needs_mask(0);
            fa__wgmma_wait<0>();
            fa__fence_regs(s_flat);
            FLASHATTN_TRACE(13, tk, 0);
            release_k(0);
            softmax(0, early_mask); /* O~ is still 0: nothing to rescale */
            FLASHATTN_TRACE(14, tk, 0);
            pack();
        };
        /* key block it > 0 */
        auto step = [&](int it) {
            my_turn();
            issue_qk(it);     /* S_it ...                       */
            issue_pv(it - 1); /* ... and O~ += P_{it-1} V_{it-1} */
            if (!LATE_TURN) end_turn();
            const bool early_mask = SHORT_PATH && needs_mask(it);
            fa__wgmma_wait<1>(); /* groups retire in order: S_it is done */
            fa__fence_regs(s_flat);
            FLASHATTN_TRACE(13, tk, it);
            release_k(it);
            if (FLASHATTN_TRACE_PV_FIRST) { /* (the trace: P V's wait where ptxas 13.0 puts it) */
                fa__wgmma_wait<0>();
                fa__fence_regs(o_flat);
                FLASHATTN_TRACE(15, tk, it);
            }
            softmax(it, early_mask);
            if (LATE_TURN) end_turn(); /* (the other's products, then its softmax, start now) */
            FLASHATTN_TRACE(14, tk, it);
            fa__wgmma_wait<0>();
            fa__fence_regs(o_flat);
            release_v(it - 1);
            /* O~ now relative to the new maximum */
            if (!LAZY_MAX || __any_sync(0xffffffffu, alpha[0][0] != 1.0f || alpha[0][1] != 1.0f))
                fa__rescale_o(acc_o, alpha);
            pack();
        };
        /* the last P V. (The next tile's S_0 issued here, so that it
           computes under the epilogue, measured slower in the
           HANDOFF kernels [sm90-handoff].) */
        auto finish = [&]() {
            my_turn();
            issue_pv(count_w - 1);
            end_turn();
            epilogue_begin(); /* l and m are final: the last softmax is done */
            FLASHATTN_TRACE(20, tk, 0);
            fa__wgmma_wait<0>();
            fa__fence_regs(o_flat);
            FLASHATTN_TRACE(15, tk, count_w);
            release_v(count_w - 1);
        };
        first();
        for (int it = 1; it < count_w; it++) step(it);
        finish();
    } else {
        for (int it = 0; it < count_w; it++) {
            my_turn();
            issue_qk(it);
            end_turn();
            fa__wgmma_wait<0>();
            fa__fence_regs(s_flat);
            release_k(it);
            softmax(it, SHORT_PATH && needs_mask(it));
            fa__rescale_o(acc_o, alpha);
            pack();
            my_turn();
            issue_pv(it);
            end_turn();
            fa__wgmma_wait<0>();
            fa__fence_regs(o_flat);
            release_v(it);
        }
    }
}

/* The block's barriers, set up by one thread: Q full (one arrival, the
   copy's bytes) and Q empty (each consumer warp's lane 0, or every consumer
   thread: Q_RELEASE_ALL) per Q tile, K / V full (the copy) and empty (each
   consumer warp's lane 0) per stage. q_full, q_empty: the kernel's. */
template <int QB, int STAGES, int WG, bool Q_RELEASE_ALL, class Bufs, class QFull, class QEmpty, int V_FULL = 1,
          int V_EMPTY = 4 * WG>
static __device__ __forceinline__ void fa__sm90_init_barriers(const Bufs &sm, const QFull &q_full, const QEmpty &q_empty)
{
    for (int u = 0; u < QB; u++) {
        fa__mbar_init(q_full(u), 1);
        fa__mbar_init(q_empty(u), Q_RELEASE_ALL ? 128 * WG : 4 * WG);
    }
    for (int s = 0; s < STAGES; s++) {
        fa__mbar_init(sm.k_full(s), 1);
        fa__mbar_init(sm.v_full(s), V_FULL); /* (FP8: 32, fa__sm90_v8) */
        fa__mbar_init(sm.k_empty(s), 4 * WG);
        fa__mbar_init(sm.v_empty(s), V_EMPTY); /* (FP8's V_EARLY: 3, the transposers) */
    }
    /* make the initialized barriers visible to the copy engine */
    fa__fence_mbar_init();
}

/* S = Q K^T of one key block, issued by the warpgroup (no wait for the
   result): D / 16 products over Q's descriptor qd, stepped
   (fa__wg_desc_step), and K's, kd(offset) (the kernel's kv_descs). */
template <int D, int BN, int BM, bool BF16, class KDesc, bool FP8 = false>
static __device__ __forceinline__ void fa__sm90_issue_qk(float (&s_flat)[BN / 2], uint64_t qd, const KDesc &kd)
{
    fa__wgmma_fence(); /* the softmax's accesses to S before the products write it */
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        /* (D: 16-bit words a row; FP8: a k32 step is 32 bytes too) */
        const uint64_t a = fa__wg_desc_step(qd, (kk / 4) * BM * 128 + (kk % 4) * 32);
        const uint64_t b = kd((kk / 4) * BN * 128 + (kk % 4) * 32);
        if constexpr (FP8) fa__wgmma<BN, 2>::ss(s_flat, a, b, kk > 0);
        else fa__wgmma<BN, BF16>::ss(s_flat, a, b, kk > 0);
    }
    fa__wgmma_commit();
}

/* O~ += P V of one key block: BN / 16 products, P from registers (pa), V's
   descriptor vd(offset). */
template <int D, int BN, bool BF16, class VDesc>
static __device__ __forceinline__ void fa__sm90_issue_pv(float (&o_flat)[D / 2], uint32_t (&pa)[BN / 16][1][4],
                                                         const VDesc &vd)
{
    fa__wgmma_fence(); /* O~'s rescale and P's writes before the products read them */
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        fa__wgmma<D, BF16>::rs(o_flat, pa[kk][0], vd(kk * 2048), 1);
    fa__wgmma_commit();
}

/* ---- >>hopper-fp8  the FP8 kernel's own steps (the kernel's FP8) ----
   FlashAttention-3, section 3.3. Q, K and V arrive as e4m3 rows, which the
   copies take as rows of 16-bit words (d bytes = d / 2 words), so the
   copies, the swizzle and S's descriptors are the 16-bit kernel's. What
   differs:
   1. S = Q K^T: FP8 products (fa__wgmma<N, 2>), k32 a step: 32 bytes of a row,
      as k16 is for 16 bits, so the descriptors step as they do.
   2. P V: FP8 products take B K-major only, and V's rows are keys. The
      producer warpgroup's three idle warps transpose each V stage into Vt,
      D rows of BN key bytes (fa__sm90_v8), while the consumers compute.
   3. P keeps the accumulator's layout. A thread holds, per row and 16-key
      group, keys 2t, 2t + 1, 2t + 8, 2t + 9 of S, and the FP8 A fragment
      wants k columns 4t .. 4t + 3. k is summed over, so Vt's key columns
      are stored in the accumulator's order instead (column 4t + j holds
      key 2t + j % 2 + 8 (j / 2)), and P's fragment is the accumulator
      packed as it stands, 4 floats to 4 bytes (fa__pack_p8): no shuffles.
   4. The exponentials: with products half as long as the 16-bit ones, the
      two warpgroups' softmaxes meet on each sub-partition's MUFU, so at d
      128 one 8-key tile in 16 of each row takes the FMA pipe instead
      (fa__exp2_fma, fa__sm90_cfg's EXP_FMA), and a warpgroup passes the
      pingpong turn only after its softmax (LATE_TURN), which keeps the
      two softmaxes apart.
   Scales (section 5's descales s, >= 0): S's element is Ŝ s_q(row)
   s_k(block). The softmax multiplies each score once anyway (by scale
   log2 e), so s_q s_k joins that multiplier, row by row (the ds of
   fa__sm90_softmax_step), and a max of the unscaled row is the max of the
   scaled one times it: no multiply an element. V's block descale joins
   O~'s rescale: O~ is kept in units of c, the current key block's s_v.
   P is quantized as e4m3(256 P), the top of e4m3's range (448) above P's
   (<= 1): the exponential's argument lifted by 8 makes 256 P directly
   (fa__softmax_tile's LIFT), and l sums those. The step to the next block
   multiplies O~ by alpha c_old / c_new beside the softmax's alpha; the
   epilogue divides by that l (a sum of 256 P, as O~ is) and multiplies by
   c, and takes m - 8 for L. */
#define FA__P8_LIFT 8 /* log2 256 */

/* P (256 P, LIFT) as the FP8 A fragments of P V: k-step ks (32 keys) packs
   the 8-key tiles 4 ks .. 4 ks + 3 as they are (register q: row half
   q % 2, tiles 4 ks + 2 (q / 2) and the next), in Vt's key order (above).
   zero: the key block's s_v is 0, so its V adds nothing (P's codes 0). */
template <int NS>
static __device__ __forceinline__ void fa__pack_p8(const float (&s)[1][NS][4], uint32_t (&pa)[NS / 2][1][4],
                                                   bool zero)
{
#pragma unroll
    for (int ks = 0; ks < NS / 4; ks++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int hf = q % 2, j = 4 * ks + 2 * (q / 2);
            pa[ks][0][q] = zero ? 0u
                                : fa__cvt_e4m3x2(s[0][j][2 * hf], s[0][j][2 * hf + 1]) |
                                      fa__cvt_e4m3x2(s[0][j + 1][2 * hf], s[0][j + 1][2 * hf + 1]) << 16;
        }
}

/* Vt's layout: D rows of BN key bytes, K-major for the B operand of P V.
   BN = 128: 128-byte rows, the 128-byte swizzle of every tile here
   (fa__sm90_chunk); BN = 64: 64-byte rows and the 64-byte swizzle (16-byte
   chunk c of row r at c ^ (r / 2) % 4, 8 rows a 512-byte atom). The byte
   offset of key byte k of row r, and the stage's descriptor. */
template <int BN> static __device__ __forceinline__ uint32_t fa__vt_at(int r, int k)
{
    if (BN == 128) return fa__sm90_chunk(r, k / 16, 0) + k % 16;
    return (uint32_t)r * 64 + ((uint32_t)((k / 16) ^ ((r / 2) % 4)) << 4) + k % 16;
}
template <int BN> static __device__ __forceinline__ uint64_t fa__vt_desc(uint32_t addr)
{
    if (BN == 128) return fa__wg_desc(addr, 16, 1024);
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((uint64_t)(512 >> 4) << 32) | (2ull << 62);
}

/* O~ += P V of one key block in FP8: BN / 32 products, P from registers,
   Vt's descriptor vd(offset) (K-major: 32 bytes a k-step). */
template <int D, int BN, class VDesc>
static __device__ __forceinline__ void fa__sm90_issue_pv8(float (&o_flat)[D / 2], uint32_t (&pa)[BN / 16][1][4],
                                                          const VDesc &vd)
{
    fa__wgmma_fence(); /* O~'s rescale and P's writes before the products read them */
#pragma unroll
    for (int kk = 0; kk < BN / 32; kk++)
        fa__wgmma<D, 2>::rs(o_flat, pa[kk][0], vd(kk * 32), 1);
    fa__wgmma_commit();
}

#define FA__SM90_V8_WARPS 3 /* the transposers: the producer warpgroup's warps 1-3 */

/* One transposer warp's share W of a stage (fa__sm90_v8), unrolled: the
   steps u = W, W + 3, ... of the (BN / 16) x (D / 32) grid, key group g =
   u % (BN / 16), d block db = u / (BN / 16). A key group is 16 rows of V
   (2048 bytes) whose swizzle is that of its lane's row key (16 g + key =
   key mod 8), and a d block 32 rows of Vt whose swizzle is that of drow, so
   each address is a lane's offset (src_off[db], dst_off[g]) plus a
   constant. */
template <int W, int D, int BN>
static __device__ __forceinline__ void fa__sm90_v8_share(uint32_t src, uint32_t dst, const uint32_t (&src_off)[D / 32],
                                                         const uint32_t (&dst_off)[BN / 16], uint32_t sel0,
                                                         uint32_t sel1)
{
#pragma unroll
    for (int u = W; u < (BN / 16) * (D / 32); u += FA__SM90_V8_WARPS) {
        const int g = u % (BN / 16), db = u / (BN / 16);
        uint32_t v[4], o[4];
        fa__ldmatrix_x4_trans(v, src + 2048u * g + src_off[db]);
        o[0] = __byte_perm(v[0], v[1], sel0);
        o[1] = __byte_perm(v[0], v[1], sel1);
        o[2] = __byte_perm(v[2], v[3], sel0);
        o[3] = __byte_perm(v[2], v[3], sel1);
        fa__stmatrix_x4(dst + 32u * BN * db + dst_off[g], o);
    }
}

/* The V transpose (FP8), run by warps 1-3 of the producer warpgroup (w:
   the warp, 0 .. 2): for each ring position, once its V has landed
   (v_full), Vt[d][k'] = V[key(k')][d] for the stage's BN keys, k' in P's
   order (above); then each thread fences its writes for the tensor cores
   (the async proxy), and lane 0 of each warp arrives on the stage's Vt
   full barrier (3 arrivals). Vt's stage must be free: with V_EARLY the
   warps wait for the consumers' release of it (Vt empty, after their P V
   of its last use) and then release V's stage themselves (V empty, 3
   arrivals): the consumers read only Vt, so the next V copy need not wait
   for them. Without, the consumers release V's stage after P V, so V
   landing means Vt is free too.
   positions: the ring positions the producer fills (fa__sm90_positions).
   V full counts 32 arrivals here, one from each lane of the producer warp
   after its own copies (TMA's lane 0 or every lane's cp.async of a tail
   tile), so that each copy's writer releases what the transposers read.
   A warp's step: 16 keys (group g) x 32 bytes of d (block db). ldmatrix
   .trans, V seen as 16-bit words (two d bytes), gives lane (r = lane / 4,
   c = lane % 4), per 8 x 8 matrix of 8 keys x 8 words, the word r of keys
   2c and 2c + 1: bytes V[2c][2r], V[2c][2r + 1], V[2c + 1][2r],
   V[2c + 1][2r + 1]. With the same of keys 8 + 2c, 9 + 2c, two byte
   permutes make rows 2r and 2r + 1 of Vt at k' = 4c .. 4c + 3 (keys 2c,
   2c + 1, 2c + 8, 2c + 9: P's order), and stmatrix stores them, a
   thread's word at (row r, word c) of each 8 x 8 output matrix, whose
   rows the lanes address one by one: the even rows of the 16 in one
   matrix, the odd in another, the two swapped for r >= 4 (rows 0, 2, 4,
   6, 9, 11, 13, 15), so that the 8 rows fall in 8 different 16-byte bank
   groups of the 128-byte swizzle (the lane's selectors sel0, sel1 put
   its even or odd row first). Every address is a lane's base plus a
   constant (fa__sm90_v8_share): about eight instructions move 512
   bytes. With the addresses computed in the loop (about 30 integer
   instructions a step), and with a 4 x 4 block of bytes a thread, it
   was slower [sm90-fp8]. */
template <int D, int DW, int BN, int STAGES, bool V_EARLY, class Bufs>
static __device__ __forceinline__ void fa__sm90_v8(const Bufs &sm, int w, int lane, int positions)
{
    constexpr uint32_t KV_BYTES = BN * DW * 2, VT_BYTES = D * BN;
    const int m = lane / 8, i = lane % 8; /* the matrix and row this lane addresses */
    const int key = 8 * (m % 2) + i, dsub = 16 * (m / 2);                    /* ldmatrix: V's row */
    const int drow = 2 * i + (i < 4 ? m % 2 : 1 - m % 2) + 16 * (m / 2);      /* stmatrix: Vt's row */
    const bool swap = lane / 4 >= 4;
    const uint32_t sel0 = swap ? 0x7531u : 0x6420u, sel1 = swap ? 0x6420u : 0x7531u;
    uint32_t src_off[D / 32], dst_off[BN / 16];
#pragma unroll
    for (int db = 0; db < D / 32; db++) src_off[db] = fa__sm90_chunk(key, (32 * db + dsub) / 16, BN * 128);
#pragma unroll
    for (int g = 0; g < BN / 16; g++) dst_off[g] = fa__vt_at<BN>(drow, 16 * g);
#pragma unroll 1
    for (int r = 0; r < positions; r++) {
        const int st = r % STAGES;
        fa__mbar_wait(sm.v_full(st), (uint32_t)((r / STAGES) & 1));
        if (V_EARLY && r >= STAGES) fa__mbar_wait(sm.vt_empty(st), (uint32_t)((r / STAGES - 1) & 1));
        const uint32_t src = sm.sV + st * KV_BYTES, dst = sm.sVt + st * VT_BYTES;
        static_assert(FA__SM90_V8_WARPS == 3, "one share a transposer warp");
        if (w == 0) fa__sm90_v8_share<0, D, BN>(src, dst, src_off, dst_off, sel0, sel1);
        else if (w == 1) fa__sm90_v8_share<1, D, BN>(src, dst, src_off, dst_off, sel0, sel1);
        else fa__sm90_v8_share<2, D, BN>(src, dst, src_off, dst_off, sel0, sel1);
        fa__fence_async_shared();
        __syncwarp(); /* (the warp's writes and reads, before its lane 0 speaks for it) */
        if (lane == 0) {
            fa__mbar_arrive(sm.vt_full(st));
            if (V_EARLY) fa__mbar_arrive(sm.v_empty(st));
        }
    }
}

/* The ring positions the producer fills (FP8, whose walk has neither
   HANDOFF, FLAT nor EARLY): the key blocks of the block's tiles with rows,
   in fa__sm90_producer's walk. */
template <int BM, int BN, class Sched>
static __device__ __forceinline__ int fa__sm90_positions(const fa__fwd_params &p, const Sched &sched)
{
    int n = 0;
    for (int k = 0; k < sched.rounds; k++) {
        int m_block, h, b;
        if (!sched.unit(k, m_block, h, b)) continue;
        const fa__extent x = fa__fwd_extent(p, b, sched.tile_row0(m_block), BM, BN);
        if (x.row0 < x.sq && x.n_end > x.n_begin) n += x.n_end - x.n_begin;
    }
    return n;
}

/* The FP8 barriers (before fa__sm90_init_barriers' fence): Vt full, one
   arrival from each transposer warp, and Vt empty, one from each consumer
   warp. */
template <int STAGES, int WG, class Bufs> static __device__ __forceinline__ void fa__sm90_init_v8(const Bufs &sm)
{
    for (int s = 0; s < STAGES; s++) {
        fa__mbar_init(sm.vt_full(s), FA__SM90_V8_WARPS);
        fa__mbar_init(sm.vt_empty(s), 4 * WG);
    }
}

/* The descale of the thread's query row `row` (FP8): per tensor, or its
   block's ([b][h][row / FLASHATTN_FP8_BLOCK_Q]); 0 for rows outside the
   sequence, which are never stored. */
static __device__ __forceinline__ float fa__ds_q8(const fa__fwd_params &p, int b, int h, int row, int sq)
{
    if (!p.dsb_q) return p.ds_q;
    if (row < 0 || row >= sq) return 0.0f;
    return p.dsb_q[((int64_t)b * p.heads_q + h) * p.blk_q + row / FLASHATTN_FP8_BLOCK_Q];
}

/* A consumer thread (fa__sm90_consumer): tid, warp, lane (consumers
   numbered from 128), its warpgroup cw, the fragment coordinates g =
   lane / 4 and t = lane % 4, and its warpgroup's rows in a Q tile, qw
   bytes in (qw0: their address in the first tile), all found once before
   the tiles' loop. Functions take it by reference [sm90-split]. */
struct fa__sm90_cthread {
    int tid, warp, lane, cw, g, t;
    uint32_t qw, qw0;
};

/* A consumer warpgroup's tile (fa__sm90_consumer_next): tile k of its
   walk, rows from m_block's (FLAT: from frow0) of head h, batch b; (FLAT)
   this warpgroup's segment seg of the tile, their number nseg, and mult,
   the arrivals it makes on each stage's empty barriers: its own, and the
   other segment's warpgroups' when it is the first of its own; (HANDOFF)
   count_pub, the key blocks its own rows see, as the producer published
   them. */
struct fa__sm90_ctile {
    int k, m_block, h, b, count_pub, seg, nseg, frow0;
    uint32_t mult;
};

/* (FP8, >>hopper-fp8) a consumer's descales in a tile: its rows' Q
   descales dq8, the current key block's K and V descales dk8, dv8 (read by
   issue_qk), O~'s unit c8, and K's and V's block descales of
   (b, h / group), dk_row and dv_row (NULL: per tensor). */
struct fa__sm90_scales8 {
    float dq8[2], dk8, dv8, c8;
    const float *dk_row, *dv_row;
};

/* Tile k of a consumer warpgroup's walk: with HANDOFF the producer's slot
   q_uses, once it and the tile's Q have landed (the slot comes alone when
   the tile has no keys, or with done after the last); else sched's unit
   k. Sets m_block .. mult (fa__sm90_ctile's, for the defaults the caller
   gives); returns 1 for a tile, 0 for none this round, -1 after the
   last. */
template <class C, class Sched, class QFull, class QPhase, class Slot>
static __device__ __forceinline__ int
fa__sm90_consumer_next(const Sched &sched, const QFull &q_full, const QPhase &q_phase, const Slot &slot, int k,
                       int q_uses, const fa__sm90_cthread &th, int &m_block, int &h, int &b, int &count_pub, int &seg,
                       int &nseg, int &frow0, uint32_t &mult)
{
    constexpr bool FLAT = C::FLAT, HANDOFF = C::HANDOFF;
    constexpr int WG = C::WG;
    const int cw = th.cw;
    if (HANDOFF) {
        FLASHATTN_TRACE(22, k, 0);
        fa__mbar_wait(q_full(q_uses), q_phase(q_uses));
        FLASHATTN_TRACE(19, k, 0);
        const fa__tile_slot *t = slot(q_uses);
        auto word = [&](const int &v) { return __shfl_sync(0xffffffffu, v, 0); };
        if (word(t->done)) return -1;
        if constexpr (FLAT) {
            const int split = word(t->split);
            seg = cw >= split;
            nseg = split < WG ? 2 : 1;
            mult = nseg == 1 ? 1u : cw == 0 ? 1u + WG - split : cw == split ? 1u + split : 1u;
            h = word(seg ? t->h1 : t->h);
            b = word(seg ? t->b1 : t->b);
            frow0 = word(seg ? t->row0_1 : t->row0);
        } else {
            m_block = word(t->m_block);
            h = word(t->h);
            b = word(t->b);
        }
        count_pub = word(t->count_w[cw]);
        return 1;
    }
    return sched.unit(k, m_block, h, b) ? 1 : 0;
}

/* The descriptors of a K or V stage at `base`: d(off), the one `off` bytes
   in (KV_STEP: stepped from the first, fa__wg_desc_step) */
template <bool KV_STEP> static __device__ __forceinline__ auto fa__sm90_kv_descs(uint32_t base, uint32_t lbo)
{
    const uint64_t d0 = fa__wg_desc(base, lbo, 1024);
    return [=](uint32_t off) { return KV_STEP ? fa__wg_desc_step(d0, off) : fa__wg_desc(base + off, lbo, 1024); };
}

/* (FP8) after the softmax of key block it: O~ into units of its V descale
   (a zero descale: V is 0, P V adds nothing (fa__pack_p8's zero), c8
   stays) */
static __device__ __forceinline__ void fa__sm90_unit8(float (&alpha)[1][2], fa__sm90_scales8 &f8, int it)
{
    const float c_new = f8.dv8 > 0.0f ? f8.dv8 : f8.c8, r = it == 0 ? 1.0f : __fdividef(f8.c8, c_new);
    alpha[0][0] *= r;
    alpha[0][1] *= r;
    f8.c8 = c_new;
}

/* (FA__SM90_WARPSPEC = 0) the loader's first copies of tile k (head h,
   batch b): where they read from (src), the tile's Q, the q_uses-th, and
   its first STAGES key blocks from ring position ring */
template <int STAGES, class BlockOf, class TileSrc, class CopyQ, class CopyKV>
static __device__ __forceinline__ void fa__sm90_load_first(fa__src &src, const fa__extent &x, int k, int h, int b,
                                                           int group, int q_uses, int ring, int count,
                                                           const BlockOf &block_of, const TileSrc &tile_src,
                                                           const CopyQ &copy_q, const CopyKV &copy_kv)
{
    src = tile_src(x, h, h / group, b);
    src.tk = k;
    copy_q(src, x, h, q_uses);
    for (int it = 0; it < count && it < STAGES; it++) copy_kv(src, x, block_of(it), ring + it);
}

/* A consumer warpgroup's key blocks of tile tl, then its epilogue (items
   4, 5 and 7): the first count_w blocks through fa__sm90_key_loop, S =
   Q K^T, the softmax and O~ += P V, and the rest, past its rows, only
   their turns and stages (pass); the ring's stages from position ring,
   the tile's Q the q_uses-th. x, wrow0, count, count_w, idle, block_of:
   the tile's (fa__sm90_consumer_tile); s: S; m_run, l_run, alpha, acc_o:
   m, l, alpha and O~ (fa__softmax_tile); f8: the FP8 descales;
   epilogue_begin, epilogue: the epilogue's two parts. Advances q_uses and
   ring past the tile. An idle warpgroup stores nothing. */
template <class C, class Bufs, class BlockOf, class EpilogueBegin, class Epilogue, class QTile, class QFull,
          class QEmpty, class QPhase, class TileSrc, class CopyQ, class CopyKV>
static __device__ __forceinline__ void
fa__sm90_consumer_mainloop(const fa__fwd_params &p, const Bufs &sm, const fa__sm90_cthread &th,
                           const fa__sm90_ctile &tl, const fa__extent &x, int wrow0, int count, int count_w,
                           bool idle, int &q_uses, int &ring, const BlockOf &block_of, float (&s)[1][C::NS][4],
                           float (&m_run)[1][2], float (&l_run)[1][2], float (&alpha)[1][2],
                           float (&acc_o)[1][C::NO][4], fa__sm90_scales8 &f8, const EpilogueBegin &epilogue_begin,
                           const Epilogue &epilogue, const QTile &q_tile, const QFull &q_full, const QEmpty &q_empty,
                           const QPhase &q_phase, const TileSrc &tile_src, const CopyQ &copy_q, const CopyKV &copy_kv)
{
    constexpr bool BF16 = C::BF16, FLAT = C::FLAT, FP8 = C::FP8, KV_STEP = C::KV_STEP, HANDOFF = C::HANDOFF;
    constexpr int D = C::D, BN = C::BN, STAGES = C::STAGES, WG = C::WG, BM = C::BM;
    constexpr uint32_t VT_BYTES = C::VT_BYTES, KV_BYTES = C::KV_BYTES;
    constexpr bool Q_AFTER_O = C::Q_AFTER_O, Q_RELEASE_ALL = C::Q_RELEASE_ALL, WG_STOP = C::WG_STOP;
    constexpr bool PINGPONG = C::PINGPONG, LAZY_MAX = C::LAZY_MAX, SHORT_PATH = C::SHORT_PATH;
    const int lane = th.lane, cw = th.cw, k = tl.k, h = tl.h, b = tl.b, seg = tl.seg, nseg = tl.nseg;
    if (count > 0) {
        float(&s_flat)[BN / 2] = reinterpret_cast<float(&)[BN / 2]>(s);
        float(&o_flat)[D / 2] = reinterpret_cast<float(&)[D / 2]>(acc_o);
        uint32_t pa[C::NS / 2][1][4]; /* P as the A fragments of P V */
        /* Without the producer (FA__SM90_WARPSPEC = 0, the ablation) the
           loader (warp 4) copies Q and the first STAGES key blocks here
           (fa__sm90_load_first), and block it + STAGES once it has
           released block it (release_v). */
        const bool loader = !FA__SM90_WARPSPEC && th.warp == 4;
        fa__src src = {};
        if (loader) fa__sm90_load_first<STAGES>(src, x, k, h, b, p.group, q_uses, ring, count, block_of, tile_src,
                                                copy_q, copy_kv);
        /* Iteration it (0 .. count - 1) of this tile is ring position
           at(it): ring + it (FLAT: ring + it nseg + seg). Wait until its
           K or V (full barrier bar) has landed; the byte offset of its
           stage. */
        auto at = [&](int it) { return FLAT ? ring + it * nseg + seg : ring + it; };
        auto landed = [&](uint32_t bar, int it) {
            fa__mbar_wait(bar, (uint32_t)((at(it) / STAGES) & 1));
            return (uint32_t)(at(it) % STAGES) * KV_BYTES;
        };
        auto arrive_kv = [&](uint32_t bar) {
            if (FLAT) fa__mbar_arrive_n(bar, tl.mult);
            else fa__mbar_arrive(bar);
        };
        /* issue S = Q K_it^T once K_it has landed (no wait for the
           result) */
        auto issue_qk = [&](int it) {
            /* Q's and K's descriptors (K-major), one built and then
               stepped a product (fa__wg_desc_step; K's where KV_STEP),
               which measured faster than each built whole [sm90-desc-step] */
            const uint64_t qd = fa__wg_desc(C::QB == 1 ? th.qw0 : q_tile(q_uses) + th.qw, 16, 1024);
            const auto kd = fa__sm90_kv_descs<KV_STEP>(sm.sK + landed(sm.k_full(at(it) % STAGES), it), 16);
            if constexpr (FP8) { /* (read here, used by the softmax after S) */
                const int blk = block_of(it) * BN / FLASHATTN_FP8_BLOCK_K;
                f8.dk8 = f8.dk_row ? f8.dk_row[blk] : p.ds_k;
                f8.dv8 = f8.dv_row ? f8.dv_row[blk] : p.ds_v;
            }
            fa__sm90_issue_qk<C::KW, BN, BM, BF16, decltype(kd), FP8>(s_flat, qd, kd);
        };
        /* V_it ready for P V: landed, and in FP8 transposed (Vt) */
        auto v_ready = [&](int it) {
            if constexpr (FP8) fa__mbar_wait(sm.vt_full(at(it) % STAGES), (uint32_t)((at(it) / STAGES) & 1));
            else landed(sm.v_full(at(it) % STAGES), it);
        };
        /* issue O~ += P V_it once V_it has landed */
        auto issue_pv = [&](int it) {
            if constexpr (FP8) {
                v_ready(it);
                const uint64_t v0 = fa__vt_desc<BN>(sm.sVt + (uint32_t)(at(it) % STAGES) * VT_BYTES);
                fa__sm90_issue_pv8<D, BN>(o_flat, pa, [=](uint32_t off) { return fa__wg_desc_step(v0, off); });
            } else {
                const auto vd = fa__sm90_kv_descs<KV_STEP>(sm.sV + landed(sm.v_full(at(it) % STAGES), it), BN * 128);
                fa__sm90_issue_pv<D, BN, BF16>(o_flat, pa, vd);
            }
        };
        const fa__mask_cut cut = fa__mask_cut_for<FLAT>(p, x.sk, x.row0 + 64 * cw, x.row0 + 64 * cw + 63, x.shift);
        auto needs_mask = [&](int it) { return fa__block_needs_mask(cut, block_of(it) * BN, BN); };
        /* S_it is complete: masks, then the online softmax (alpha for O~).
           early_mask: needs_mask(it), asked before the wait under
           SHORT_PATH (else unused: asked here) */
        auto softmax = [&](int it, bool early_mask) {
            float ds[2] = {1.0f, 1.0f}; /* S = Ŝ s_q s_k */
            if constexpr (FP8) ds[0] = f8.dq8[0] * f8.dk8, ds[1] = f8.dq8[1] * f8.dk8;
            fa__sm90_softmax_step<C::NS, BN, LAZY_MAX, SHORT_PATH, FP8 ? FA__P8_LIFT : 0, C::EXP_FMA>(
                s, m_run, l_run, alpha, p, x, cut, block_of(it), early_mask, wrow0, h, th.g, th.t, ds);
            if constexpr (FP8) fa__sm90_unit8(alpha, f8, it);
        };
        /* P as the A fragments of P V */
        auto pack = [&]() {
            if constexpr (FP8) fa__pack_p8(s, pa, !(f8.dv8 > 0.0f));
            else fa__pack_p<BF16>(s, pa);
        };
        /* S_it is done: K_it may be overwritten, and after the tile's
           last S, Q too (the next tile's Q copy overlaps this tile's end;
           with Q_AFTER_O, after the epilogue instead) */
        auto release_k = [&](int it) {
            if (lane == 0) {
                arrive_kv(sm.k_empty(at(it) % STAGES));
                if (it == count - 1 && !Q_RELEASE_ALL) fa__mbar_arrive(q_empty(q_uses));
            }
            /* (HANDOFF: every thread read the tile's slot, and each
               releases it after its own reads) */
            if (HANDOFF && it == count - 1) fa__mbar_arrive(q_empty(q_uses));
        };
        /* O~ += P_it V_it is done: V_it (FP8: Vt_it) may be overwritten */
        auto release_v = [&](int it) {
            if (lane == 0) arrive_kv(C::V_EARLY ? sm.vt_empty(at(it) % STAGES) : sm.v_empty(at(it) % STAGES));
            if (loader && it + STAGES < count) copy_kv(src, x, block_of(it + STAGES), ring + it + STAGES);
        };
        auto my_turn = [&]() {
            FLASHATTN_TRACE(18, k, 0);
            if (PINGPONG) fa__named_sync(1 + cw, 256);
            FLASHATTN_TRACE(12, k, 0);
        };
        auto end_turn = [&]() { if (PINGPONG) fa__named_arrive(1 + (cw + 1) % WG, 256); };

        /* key block it >= count_w, past this warpgroup's rows: its
           turn(s) and its stages, released once landed */
        auto pass = [&](int it) {
            my_turn();
            end_turn();
            if (!FA__SM90_OVERLAP) { my_turn(); end_turn(); } /* S and P V in turns of their own */
            landed(sm.k_full(at(it) % STAGES), it);
            release_k(it);
            v_ready(it);
            release_v(it);
        };
        if (WG_STOP && count_w == 0) { /* idle, or rows that see none of the tile's keys */
            for (int it = 0; it < count; it++) pass(it);
            if (FA__SM90_OVERLAP) { my_turn(); end_turn(); } /* the last P V's turn */
            q_uses++;
            ring += FLAT ? count * nseg : count;
            if (idle) {
                if (Q_AFTER_O) fa__mbar_arrive(q_empty(q_uses - 1)); /* (d 256) */
                return;
            }
            /* O = 0 and L = -inf below; staged in Q's rows (Q_AFTER_O)
               only once this tile's Q has landed there */
            if (Q_AFTER_O) fa__mbar_wait(q_full(q_uses - 1), q_phase(q_uses - 1));
        } else {
            if (!HANDOFF) fa__mbar_wait(q_full(q_uses), q_phase(q_uses));
            FLASHATTN_TRACE(11, k, 0);
            fa__sm90_key_loop<BF16, LAZY_MAX, SHORT_PATH, C::LATE_TURN>(k, count_w, s, pa, acc_o, alpha, my_turn,
                                                                        end_turn, issue_qk, issue_pv, needs_mask,
                                                                        release_k, release_v, softmax, pack,
                                                                        epilogue_begin);
            if (WG_STOP)
                for (int it = count_w; it < count; it++) pass(it); /* (WG_STOP) */
            q_uses++;
            ring += FLAT ? count * nseg : count;
        }
    }
    epilogue();
}

/* A consumer warpgroup's tile tl (fa__sm90_consumer_next): its rows' extent,
   m = -inf, l = 0 and O~ = 0, the FP8 descales, its key blocks (block_of,
   count_w), then fa__sm90_consumer_mainloop: the key blocks and the
   epilogue (item 7). alpha, inv, s: alpha, 1 / l and S (the consumer's
   [sm90-split]); q_uses, ring: the consumer's running counts; the rest as
   fa__sm90_consumer's. */
template <class C, class Sched, class Bufs, class QTile, class QFull, class QEmpty, class QPhase, class TileSrc,
          class CopyQ, class CopyKV>
static __device__ __forceinline__ void
fa__sm90_consumer_tile(const fa__sm90_cthread &th, const fa__sm90_ctile &tl, const fa__tma_maps &tm,
                       const fa__fwd_params &p, int batch, const Sched &sched, const Bufs &sm, int &q_uses, int &ring,
                       float (&alpha)[1][2], float (&inv)[1][2], float (&s)[1][C::NS][4], const QTile &q_tile,
                       const QFull &q_full, const QEmpty &q_empty, const QPhase &q_phase, const TileSrc &tile_src,
                       const CopyQ &copy_q, const CopyKV &copy_kv)
{
    constexpr bool BF16 = C::BF16, FLAT = C::FLAT, FP8 = C::FP8;
    constexpr int D = C::D, BN = C::BN, WG = C::WG, BM = C::BM, NO = C::NO;
    constexpr bool O_OWN = C::O_OWN, O_STAGED = C::O_STAGED, Q_AFTER_O = C::Q_AFTER_O, HANDOFF = C::HANDOFF;
    constexpr bool WG_STOP = C::WG_STOP, LSE_EARLY = C::LSE_EARLY, SPARSE = C::SPARSE;
    const int tid = th.tid, warp = th.warp, lane = th.lane, cw = th.cw, g = th.g, t = th.t;
    const int k = tl.k, h = tl.h, b = tl.b;
    /* (FLAT: no mask and one length, fa__fwd_extent's PLAIN) */
    const fa__extent x = fa__fwd_extent<FLAT>(p, b, FLAT ? tl.frow0 : sched.tile_row0(tl.m_block), BM, BN);
    if (!HANDOFF && x.row0 >= x.sq) return; /* (the producer hands over only tiles with rows) */
    const int wrow0 = x.row0 + 64 * cw + 16 * (warp % 4); /* this warp's first row */
    FLASHATTN_TRACE(10, k, x.n_end - x.n_begin);
    float m_run[1][2] = {{-INFINITY, -INFINITY}}, l_run[1][2] = {{0.0f, 0.0f}};
    float acc_o[1][NO][4];
#pragma unroll
    for (int c = 0; c < NO; c++) acc_o[0][c][0] = acc_o[0][c][1] = acc_o[0][c][2] = acc_o[0][c][3] = 0.0f;
    fa__sm90_scales8 f8 = {{1.0f, 1.0f}, 1.0f, 1.0f, 1.0f, NULL, NULL};
    if constexpr (FP8) {
        f8.dq8[0] = fa__ds_q8(p, b, h, wrow0 + g, x.sq);
        f8.dq8[1] = fa__ds_q8(p, b, h, wrow0 + g + 8, x.sq);
        const int64_t row = ((int64_t)b * (p.heads_q / p.group) + h / p.group) * p.blk_k;
        f8.dk_row = p.dsb_k ? p.dsb_k + row : NULL;
        f8.dv_row = p.dsb_v ? p.dsb_v + row : NULL;
    }
    /* The epilogue's first part, which needs no O (fa__sm90_epilogue_begin),
       in the shadow of the tile's last P V, where the warpgroup would
       only wait [sm90-epilogue]. */
    auto epilogue_begin = [&]() {
        if constexpr (FP8) { /* l_run sums 256 P (LIFT): L = m - 8 + log2 l_run */
            m_run[0][0] -= FA__P8_LIFT;
            m_run[0][1] -= FA__P8_LIFT;
        }
        fa__sm90_epilogue_begin<LSE_EARLY, O_STAGED, WG>(p, m_run, l_run, inv, x, wrow0, h, b, batch, g, t, cw);
        if constexpr (FP8) { /* O = c8 O~ / l_run: O~ sums 256 P V too */
            inv[0][0] *= f8.c8;
            inv[0][1] *= f8.c8;
        }
    };

    /* the key blocks walked, block_of(0 .. count - 1): n_begin ..
       n_end - 1, or (SPARSE) the run of them the block mask lists
       (fa__bm_find; the producer finds the same) */
    fa__bm_run run = {NULL, x.n_end - x.n_begin};
    int chunk = 0, mine = 0; /* (SPARSE) entry 32 chunk + lane of the run, this lane's */
    if constexpr (SPARSE) {
        run = fa__bm_find(p.bm, b, h, x.row0 / 128, x.n_begin, x.n_end);
        mine = lane < run.count ? run.at[lane] : 0;
    }
    /* (SPARSE: from the lanes, not from global memory, whose latency
       fell in the softmax's path; `it` is warp-uniform) */
    auto block_of = [&](int it) {
        if constexpr (!SPARSE) return x.n_begin + it;
        if (it / 32 != chunk) {
            chunk = it / 32;
            mine = 32 * chunk + lane < run.count ? run.at[32 * chunk + lane] : 0;
        }
        return __shfl_sync(0xffffffffu, mine, it % 32);
    };
    const int count = run.count;
    /* count_w: the key blocks this warpgroup's own rows see (WG_STOP;
       else count). A warpgroup with no row in the sequence (idle)
       computes and stores nothing; one whose rows end before the
       tile's last blocks (a causal diagonal) stops after its count_w-th
       and only takes its turns and releases the stages of the rest
       (pass, fa__sm90_consumer_mainloop): the turns must still go round
       [sm90-wg-stop]. */
    const int wfirst = x.row0 + 64 * cw; /* this warpgroup's first row */
    const bool idle = WG_STOP && (wfirst >= x.sq || wfirst + 64 <= 0); /* (rows below 0: tile_row0) */
    int count_w = count;
    if (HANDOFF) {
        count_w = tl.count_pub;
        if (count <= 0) { /* a slot without Q: released here */
            fa__mbar_arrive(q_empty(q_uses));
            q_uses++;
        }
    } else if (WG_STOP) {
        count_w = __shfl_sync(0xffffffffu, sched.warpgroup_blocks(x, b, cw), 0); /* warp-uniform, as cw */
    }
    if (idle && count <= 0) return;
    /* The epilogue: its first part unless the key loop ran it, then the
       second (no key block: O = 0, L = -inf) */
    auto epilogue = [&]() {
        if (!FA__SM90_OVERLAP || count_w == 0) epilogue_begin();
        fa__sm90_epilogue_end<BF16, FP8, D, BM, WG, LSE_EARLY, O_STAGED, O_OWN, Q_AFTER_O>(
            k, p, tm, acc_o, m_run, l_run, inv, x, wrow0, h, b, batch, g, t, cw, tid, count, sm.sO,
            [&]() { fa__mbar_arrive(q_empty(q_uses - 1)); });
    };
    fa__sm90_consumer_mainloop<C>(p, sm, th, tl, x, wrow0, count, count_w, idle, q_uses, ring, block_of, s, m_run,
                                  l_run, alpha, acc_o, f8, epilogue_begin, epilogue, q_tile, q_full, q_empty, q_phase,
                                  tile_src, copy_q, copy_kv);
}

/* A consumer warpgroup of the sm_90a forward (items 4, 5 and 7), C its
   configuration (fa__sm90_cfg): walks the block's tiles (sched) as the
   producer does (fa__sm90_consumer_next), and for each its key blocks and
   the epilogue (fa__sm90_consumer_tile), with the kernel's buffers and
   barriers (sm, q_tile .. slot) and, without the producer
   (FA__SM90_WARPSPEC = 0), its copies (tile_src, copy_q, copy_kv). tid,
   warp, lane: the thread's, consumers numbered from 128. */
template <class C, class Sched, class Bufs, class QTile, class QFull, class QEmpty, class QPhase, class Slot,
          class TileSrc, class CopyQ, class CopyKV>
static __device__ __forceinline__ void
fa__sm90_consumer(const fa__tma_maps &tm, const fa__fwd_params &p, int batch, const Sched &sched, const Bufs &sm,
                  int tid, int warp, int lane, const QTile &q_tile, const QFull &q_full, const QEmpty &q_empty,
                  const QPhase &q_phase, const Slot &slot, const TileSrc &tile_src, const CopyQ &copy_q,
                  const CopyKV &copy_kv)
{
    constexpr bool FP8 = C::FP8, O_STAGED = C::O_STAGED, PINGPONG = C::PINGPONG, CW_UNIFORM = C::CW_UNIFORM;
    constexpr int WG = C::WG, NS = C::NS;
    if (FA__SM90_WARPSPEC) fa__setmaxnreg_inc<fa__sm90_consumer_regs(WG, fa__sm90_producer_regs(FP8))>();
    /* cw, the consumer warpgroup (from lane 0 where CW_UNIFORM) */
    const int cw = CW_UNIFORM ? __shfl_sync(0xffffffffu, warp / 4 - 1, 0) : warp / 4 - 1;
    const int g = lane / 4, t = lane % 4;
    const uint32_t qw = (uint32_t)cw * 64 * 128; /* this warpgroup's rows of each Q tile */
    const uint32_t qw0 = sm.sQ + qw; /* with one Q tile (QB = 1): found once, before the tiles' loop */
    const fa__sm90_cthread th = {tid, warp, lane, cw, g, t, qw, qw0};
    int q_uses = 0, ring = 0;
    /* Pingpong turns (item 5): barrier 1 + cw is this warpgroup's turn, and
       ending a turn arrives on the next one's (cw + 1, round the WG
       warpgroups). The turns go round from tile to tile (every warpgroup
       takes the same number in each): the last warpgroup lets warpgroup 0
       go first, once, and warpgroup 0 takes the arrival of the last one's
       last turn at the end. (Per tile, the last warpgroup could arrive for
       the next tile before warpgroup 0 took its last arrival, and two
       arrivals of one warpgroup would complete the barrier.) */
    if (PINGPONG && cw == WG - 1) fa__named_arrive(1, 256);
    /* (HANDOFF: at most one tile a round, and the slot after the last says
       done; bounded by rounds all the same: unbounded, ptxas spilled 108
       bytes) */
    for (int k = 0; k < sched.rounds; k++) {
        int m_block = 0, h, b, count_pub = 0;
        int seg = 0, nseg = 1, frow0 = 0; /* (FLAT) */
        uint32_t mult = 1;
        const int next = fa__sm90_consumer_next<C>(sched, q_full, q_phase, slot, k, q_uses, th, m_block, h, b,
                                                   count_pub, seg, nseg, frow0, mult);
        if (next < 0) break;
        if (next == 0) continue;
        const fa__sm90_ctile tl = {k, m_block, h, b, count_pub, seg, nseg, frow0, mult};
        /* alpha, 1 / l and S of the tile, declared in this loop as before
           the split into functions: the compiler carries them from tile
           to tile [sm90-split] */
        float alpha[1][2], inv[1][2], s[1][NS][4];
        fa__sm90_consumer_tile<C>(th, tl, tm, p, batch, sched, sm, q_uses, ring, alpha, inv, s, q_tile, q_full,
                                  q_empty, q_phase, tile_src, copy_q, copy_kv);
    }
    if (PINGPONG && cw == 0) fa__named_sync(1, 256);
    /* the last TMA store of O has written global memory (and read the
       staging, which must outlive it) before the block exits */
    if (O_STAGED) fa__bulk_wait<false>();
}

#endif /* FA__SM90A */

/* The sm_90a forward's compile-time configuration: the launch
   (>>hopper-host) picks the first nine parameters (the tile shape: head
   dim D, BN keys a block, a ring of STAGES stages, WG consumer warpgroups;
   PERSIST, FLAT, FP8, SPARSE: items 6, the flat walk, >>hopper-fp8,
   >>gpu-bsparse); the rest
   follows from them, each with why. The kernel takes them as constants of
   the same names. The ablation switches FA__SM90_WARPSPEC, _PINGPONG,
   _OVERLAP and _PERSISTENT (0: leave out items 3, 5, 4's overlap, 6) are
   for measuring, not for use. */
template <bool BF16_, int D_, int BN_, int STAGES_, bool PERSIST_, int WG_, bool FLAT_, bool FP8_, bool SPARSE_>
struct fa__sm90_cfg {
    static constexpr bool BF16 = BF16_, PERSIST = PERSIST_, FLAT = FLAT_, FP8 = FP8_, SPARSE = SPARSE_;
    static constexpr int D = D_, BN = BN_, STAGES = STAGES_, WG = WG_;
    static constexpr int BM = 64 * WG, NS = BN / 8, NO = D / 8;
    /* FP8 (>>hopper-fp8): e4m3 Q, K and V, copied as rows of DW 16-bit
       words (at least 64: d 64's 64 bytes are zero-filled to the swizzle's
       128-byte row), O in 16 bits; Vt, the transposed V stages. KW: the
       words of a row that S = Q K^T sums over, the data's (D bytes in FP8),
       not the zeros that fill d 64's copy to 128 bytes */
    static constexpr int DW = FP8 ? fa__sm90_dw8(D) : D, KW = FP8 ? D / 2 : D;
    static constexpr uint32_t Q_BYTES = BM * DW * 2, KV_BYTES = BN * DW * 2, VT_BYTES = FP8 ? D * BN : 0;
    static constexpr bool O_OWN = FP8 ? fa__sm90_o_own8(D, BM, BN, STAGES) : fa__sm90_o_own(D, BM, BN, STAGES);
    /* (FP8) V_EARLY: the transposers release each V stage once transposed
       (the consumers then release Vt's), rather than the consumers both
       after P V. As measured: early below d 256, the consumers' at d 256
       (two 64-key stages) [sm90-fp8]. */
    static constexpr bool V_EARLY = FP8 && D < 256;
    /* (FP8 at d 256: no room for an O tile, and Q's is too small) */
    static constexpr bool O_STAGED = O_OWN || (!FP8 && (!PERSIST || D == 256));
    /* O staged in Q by a persistent block: Q is free for the next tile's
       copy once the O stores have read it, not after the last S */
    static constexpr bool Q_AFTER_O = O_STAGED && !O_OWN && PERSIST;
    static constexpr int QB = FP8 ? 1 : fa__sm90_q_bufs(WG, PERSIST, O_OWN); /* (FP8: one, fa__sm90_smem8) */
    /* HANDOFF: with two Q tiles (the persistent three- and four-warpgroup blocks) the
       producer finds each tile once, its coordinates and the key blocks
       each consumer warpgroup's rows see, and hands them over in a slot
       beside the tile's Q, published by the same barrier (fa__tile_slot,
       below). Each of the twelve consumer warps found them itself before:
       the walk's divisions (the pairs of the causal walk) and the
       warpgroup's own extent in 64-bit arithmetic, in front of every
       tile's first S, which measured slower [sm90-handoff]. */
    static constexpr bool HANDOFF = QB == 2 && FA__SM90_WARPSPEC;
    /* FLAT: the tiles are WG warpgroup rows (64 query rows each) of the
       list of every (head, batch) sequence's rows, one sequence after the
       other, m_blocks warpgroup rows each (the launch passes that count as
       m_blocks): tile u is rows u WG .. u WG + WG - 1 of the list. Only
       without a mask and with one length for every sequence
       (fa__sm90_flat). So every tile is full but the very last, and a
       tile may hold the end of one sequence and the start of the next:
       two segments, warpgroups 0 .. split - 1 on the first and split ..
       WG - 1 on the second. Then the ring carries the two segments' key
       blocks in turn (block n of the first, then of the second), each
       warpgroup takes every second position (at(), below), and the first
       warpgroup of each segment also arrives on the stages' empty
       barriers for the warpgroups of the other, which never read them
       (arrive_kv), so the barriers keep their count of 4 WG warps. Why:
       with tiles of one sequence the 8 warpgroup rows of 512 tokens made
       tiles of 3, 3 and 2, and a tile's time is mostly each warpgroup's
       own chain, so the short tile took about as long as a full one: 9
       warpgroups' time for 8 rows [sm90-flat]. */
    static_assert(!FLAT || (HANDOFF && PERSIST), "FLAT hands its tiles over");
    /* Who releases a tile's Q (its empty barrier): lane 0 of each consumer
       warp after the tile's last S; every consumer thread where each has
       its own accesses to Q's buffer to release (Q_AFTER_O: its O staging
       writes there, after the epilogue; HANDOFF: its reads of the tile's
       slot, after the last S) */
    static constexpr bool Q_RELEASE_ALL = Q_AFTER_O || HANDOFF;
    /* WG_STOP: a warpgroup stops at the last key block its own rows see
       (count_w in the kernel): in d 64's three- and four-warpgroup shapes and at d 256, whose 80-key
       blocks do not divide the 64 rows of a warpgroup */
    static constexpr bool WG_STOP = WG >= 3 || D == 256;
    /* PINGPONG: the turns of item 5, but for four consumer warpgroups (d
       64's QUAD shape, fa__sm90_shape). There a round of turns has each
       warpgroup wait for three others' products, and its 64-key blocks'
       products are short, so the tensor cores' queue stays fed without
       them; the three- and two-warpgroup shapes keep them, where they
       measured faster [sm90-pingpong]. */
    static constexpr bool PINGPONG = FA__SM90_PINGPONG && WG != 4;
    static_assert(D % 64 == 0 && BN % 16 == 0 && BN <= 256, "sm_90a tile shape");
    static_assert(!FP8 || ((BN == 128 || BN == 64) && QB == 1 && !FLAT && FA__SM90_WARPSPEC), "the FP8 kernel's shape");
    /* SPARSE: a block mask's key blocks (>>gpu-bsparse), a 128 x 128
       block one tile and one key block, each warpgroup walking all of
       the tile's blocks (no WG_STOP, no HANDOFF), persistent */
    static_assert(!SPARSE || (BN == 128 && WG == 2 && QB == 1 && PERSIST && !FLAT && !FP8 && D != 256),
                  "the block-sparse kernel's shape");

    /* EARLY: a block's one tile (no PERSIST) copies Q, K_0 and V_0 first,
       before it finds the tile's extent and sources (fa__fwd_extent,
       tile_src), where their coordinates do not depend on them: no
       cu_seqlens or seqlens_k (the maps' rows are the sequence's, a copy
       is whole and TMA clips it) and no left bound (the first key block
       is 0): the producer's first copy otherwise waited on the walk's
       divisions and the extent's arithmetic [sm90-early]. If the tile then
       turns out to hold no key, the producer waits for the three copies to
       land, so that no copy is in flight when the block ends, and its
       consumers store their zeros straight, not through Q's tile (where O
       is staged in it), which the copy may still be filling. A PERSIST
       kernel is built without it. The producer's walk there divides by
       fa__fastdiv (the consumers' does not: see fa__fastdiv). */
    static constexpr bool EARLY = !PERSIST;
    /* CW_UNIFORM: cw, the consumer warpgroup, is read from lane 0
       (__shfl_sync): ptxas then knows it is the same in every lane of the
       warp and keeps it, and what is derived from it (the warpgroup's rows
       and mask limits, its Q descriptor, its barrier ids), in uniform
       registers, which do not count against a thread's registers. With 3
       consumer warpgroups (160 registers a thread) it has to: computed in
       each thread those values spilled 16 bytes (ptxas 13.0). Elsewhere it
       changes only ptxas's schedule, and it is used where that measured
       faster: d 256 and d 128 with 128-key blocks [sm90-cw-uniform]. */
    static constexpr bool CW_UNIFORM = WG >= 3 || D == 256 || (D == 128 && BN == 128);
    /* LSE_EARLY: L stored in the epilogue's first part too (in the shadow
       of the last P V), at d 128 and 256; at d 64 (FLAT's kernel too)
       after the P V: in the shadow it was slower, left too few registers
       (ptxas C7511) or spilled [sm90-epilogue]. */
    static constexpr bool LSE_EARLY = D >= 128;
    /* KV_STEP: K's and V's descriptors stepped (fa__wg_desc_step) rather
       than built whole, but in d 128's 176-key kernels (issue_qk's notes) */
    static constexpr bool KV_STEP = !(D == 128 && BN == 176);
    /* LAZY_MAX (fa__softmax_tile): rows keep their maximum while it
       grows by 8 or less, and a warp whose rows all kept theirs skips
       the rescale of O~: faster at d 256, where that rescale is
       128 multiplies a thread per key block, slower at d 64 and 128
       [sm90-lazy-max]. */
    static constexpr bool LAZY_MAX = D == 256 && !FP8; /* (FP8: P, scaled by 256, must stay <= 1) */
    /* EXP_FMA (fa__softmax_tile): in the FP8 kernel at d 128 one 8-key
       tile in FA__SM90_FP8_EXP_FMA (16: the block's last) of each row's
       exponentials on the FMA pipe (fa__exp2_fma), beside the MUFU's: the
       softmax of 64 x 128 scores takes longer than the block's products
       there, and the two consumer warpgroups' softmaxes meet on each
       sub-partition's MUFU. One tile in 16 measured faster than one in
       8, 3 in 16 or one in 4 (the last slower than none); d 64 and 256 do
       not gain [sm90-fp8]. */
    static constexpr int EXP_FMA = FP8 && D == 128 ? FA__SM90_FP8_EXP_FMA : 0;
    /* LATE_TURN (fa__sm90_key_loop): for the same reason, there a
       warpgroup passes the pingpong turn only once its softmax is done, so
       that the other's softmax starts after it rather than beside it on
       the MUFU: faster from 2k keys, as fast below [sm90-fp8]. */
    static constexpr bool LATE_TURN = FP8 && D == 128;
    /* SHORT_PATH: a shorter path from S to the first exponential at
       d 64, whose softmax is what a key block waits on (item 4): the
       rows' maxima as trees (fa__softmax_tile's TREE), and the test
       whether the block needs the mask (needs_mask, which needs no
       S) made before the wait for S: faster at d 64; at d 128 and
       256 slower at the longest rows, so they keep the chain and
       test after the wait [sm90-short-path]. */
    static constexpr bool SHORT_PATH = D == 64;
};

/* The kernel: 128 (WG + 1) threads a block (128 WG without the producer,
   FA__SM90_WARPSPEC = 0), the producer warpgroup and WG
   consumer warpgroups (2, or 3 in d 64's shape for long rows: fa__sm90_shape).
   Tiles are (query block of 64 WG rows, head, batch), m_blocks query blocks
   per (head, batch). PERSIST: at most one block per SM, each walking many
   tiles (item 6); else a block per tile. */
template <bool BF16, int D, int BN, int STAGES, bool PERSIST, int WG, bool FLAT = false, bool FP8 = false,
          bool SPARSE = false>
__global__ void __launch_bounds__(128 * (WG + FA__SM90_WARPSPEC), 1)
fa__fwd_kernel_sm90(const __grid_constant__ fa__tma_maps tm, const fa__fwd_params p, int m_blocks, int batch,
                    const fa__sm90_walk wk)
{
#if FA__SM90A
    /* the configuration (fa__sm90_cfg), by name */
    typedef fa__sm90_cfg<BF16, D, BN, STAGES, PERSIST, WG, FLAT, FP8, SPARSE> C;
    constexpr int BM = C::BM, DW = C::DW, QB = C::QB;
    constexpr uint32_t Q_BYTES = C::Q_BYTES, KV_BYTES = C::KV_BYTES, VT_BYTES = C::VT_BYTES;
    constexpr bool O_OWN = C::O_OWN, HANDOFF = C::HANDOFF, Q_RELEASE_ALL = C::Q_RELEASE_ALL, EARLY = C::EARLY;

    /* the block's buffers and barriers (fa__sm90_bufs; a tile handed over: fa__tile_slot) */
    const fa__sm90_bufs<Q_BYTES, KV_BYTES, STAGES, QB, O_OWN, (uint32_t)BM * D * 2, VT_BYTES> sm;
    const uint32_t sQ = sm.sQ, sQ1 = sm.sQ1, bars = sm.bars;
    /* the u-th tile's Q: its buffer and barriers (as lambdas: as methods of
       fa__sm90_bufs, forceinline or not, the HANDOFF kernels' code changed) */
    auto q_tile = [&](int u) { return u % QB ? sQ1 : sQ; };
    auto q_full = [&](int u) { return u % QB ? bars + 8u * (2 + 4 * STAGES) : bars; };
    auto q_empty = [&](int u) { return q_full(u) + 8u; };
    auto q_phase = [&](int u) { return (uint32_t)((u / QB) & 1); };
    /* the u-th tile's slot (HANDOFF), a generic pointer into shared memory */
    auto slot = [&](int u) {
        const uint32_t at = bars + 8u * (2 * QB + 4 * STAGES) + FA__SM90_SLOT_BYTES * (u % QB);
        return reinterpret_cast<fa__tile_slot *>(fa__smem90 + (at - (uint32_t)__cvta_generic_to_shared(fa__smem90)));
    };

    /* (without the producer, FA__SM90_WARPSPEC = 0, the consumers keep
       their numbers: warps 4 and up) */
    const int tid = threadIdx.x + (FA__SM90_WARPSPEC ? 0 : 128), warp = tid / 32, lane = tid % 32;
    FLASHATTN_TRACE(0, 0, 0);
    /* the tiles this block walks, in order (fa__sm90_sched) */
    const fa__sm90_sched<WG, BM, BN, PERSIST, FLAT, C::WG_STOP, SPARSE> sched(p, wk, m_blocks, batch);

    if (threadIdx.x == 0) {
        if constexpr (FP8) fa__sm90_init_v8<STAGES, WG>(sm);
        fa__sm90_init_barriers<QB, STAGES, WG, Q_RELEASE_ALL, decltype(sm), decltype(q_full), decltype(q_empty),
                               FP8 ? 32 : 1, C::V_EARLY ? FA__SM90_V8_WARPS : 4 * WG>(sm, q_full, q_empty);
    }
    __syncthreads(); /* the last block-wide barrier: the roles part here */

    /* Both roles walk the same tiles and skip the same empty ones, so they
       agree on two running counts: q_uses, the tiles whose Q was loaded (the
       Q barriers' phase), and ring, the K/V tiles through the ring so far
       (stage ring % STAGES, used for the (ring / STAGES)-th time). With
       HANDOFF the consumers walk the producer's slots instead, and q_uses
       counts the slots: a tile whose rows see no key has a slot (its O = 0
       and L = -inf are the consumers' to write) but no Q. */

    /* The copies, issued by one warp (lane: its lane). Where tile x (head
       h, K / V head hk = h / p.group, batch b) reads from (hk is the
       caller's: the producer divides before its tile checks, as it always
       did, which keeps the default build's code as it was): */
    /* (fa__src) */
    auto tile_src = [&](const fa__extent &x, int h, int hk, int b) {
        fa__src c;
        c.hk = hk;
        /* with cu_seqlens the maps are [1][h][token][col] */
        c.qrow = (int)x.q_tok0 + x.row0;
        c.krow = (int)x.k_tok0;
        c.qb = p.cu_seqlens_q ? 0 : b;
        c.kb = p.cu_seqlens_k ? 0 : b;
        /* without cu_seqlens / seqlens_k a map's rows end where the sequence does */
        c.q_exact = !p.cu_seqlens_q;
        c.kv_exact = !p.cu_seqlens_k && !p.seqlens_k;
        c.gq = p.q + (p.cu_seqlens_q ? x.q_tok0 * p.q_seq : b * p.q_batch) + h * p.q_head + (int64_t)x.row0 * p.q_seq;
        c.gk = p.k + (p.cu_seqlens_k ? x.k_tok0 * p.k_seq : b * p.k_batch) + c.hk * p.k_head;
        c.gv = p.v + (p.cu_seqlens_k ? x.k_tok0 * p.v_seq : b * p.v_batch) + c.hk * p.v_head;
        return c;
    };
    /* Q of the tile whose Q is the q_uses-th loaded (the previous tile's Q
       is free once its last S = Q K^T is done) */
    auto copy_q = [&](const fa__src &c, const fa__extent &x, int h, int q_uses) {
        if (q_uses >= QB && !HANDOFF) fa__mbar_wait(q_empty(q_uses), q_phase(q_uses - QB));
        fa__sm90_load<BM, DW>(q_tile(q_uses), q_full(q_uses), &tm.q, c.qrow, h, c.qb, x.sq - x.row0, c.q_exact, p.d, c.gq, p.q_seq, lane);
    };
    /* K and V of key block n, ring position r */
    auto copy_kv = [&](const fa__src &c, const fa__extent &x, int n, int r) {
        const int s = r % STAGES, k0 = n * BN;
        /* stage s was last used by ring position r - STAGES: wait for its release */
        const uint32_t use = (uint32_t)((r / STAGES - 1) & 1);
        if (r >= STAGES) fa__mbar_wait(sm.k_empty(s), use);
        FLASHATTN_TRACE(2, c.tk, n - x.n_begin);
        fa__sm90_load<BN, DW>(sm.sK + s * KV_BYTES, sm.k_full(s), &tm.k, c.krow + k0, c.hk, c.kb, x.sk - k0, c.kv_exact,
                              p.d, c.gk + (int64_t)k0 * p.k_seq, p.k_seq, lane);
        if (r >= STAGES) fa__mbar_wait(sm.v_empty(s), use);
        FLASHATTN_TRACE(3, c.tk, n - x.n_begin);
        fa__sm90_load<BN, DW>(sm.sV + s * KV_BYTES, sm.v_full(s), &tm.v, c.krow + k0, c.hk, c.kb, x.sk - k0, c.kv_exact,
                              FP8 ? p.v_words : p.dv, c.gv + (int64_t)k0 * p.v_seq, p.v_seq, lane);
        if constexpr (FP8)
            if (lane != 0) fa__mbar_arrive(sm.v_full(s)); /* (each lane after its copies: fa__sm90_v8) */
    };

    /* (EARLY: the first copies before the tile's extent, where they can be) */
    const bool early_ok = EARLY && !p.cu_seqlens_q && !p.cu_seqlens_k && !p.seqlens_k && !p.has_left;

    if (FA__SM90_WARPSPEC && warp < 4) {
        /* ---- producer warpgroup: one warp copies, the rest idle ---- */
        fa__setmaxnreg_dec<fa__sm90_producer_regs(FP8)>();
        if (warp == 0) {
            fa__sm90_producer<DW, BM, BN, WG, QB, HANDOFF, FLAT, EARLY, C::SPARSE>(
                p, tm, wk, m_blocks, batch, sched, sm, early_ok, lane, q_tile, q_full, q_empty, q_phase, slot,
                tile_src, copy_q, copy_kv);
        } else if constexpr (FP8) { /* (warps 1-3: the V transpose) */
            fa__sm90_v8<D, DW, BN, STAGES, C::V_EARLY>(sm, warp - 1, lane, fa__sm90_positions<BM, BN>(p, sched));
        }
        return;
    }

    /* ---- consumer warpgroups 1 .. WG: query rows 64 * cw .. + 63 of each tile ---- */
    fa__sm90_consumer<C>(tm, p, batch, sched, sm, tid, warp, lane, q_tile, q_full, q_empty, q_phase, slot, tile_src,
                         copy_q, copy_kv);
#else
    /* Compiled for a target without wgmma: a marker the host can see
       (cudaFuncGetAttributes reports static shared memory), so it never
       launches this empty body. */
    __shared__ volatile int fa__sm90_missing;
    fa__sm90_missing = 0;
    (void)tm; (void)p; (void)m_blocks; (void)batch; (void)wk;
#endif
}
#endif /* FLASHATTN_NO_HOPPER */

/* ============================================================================
   >>gpu-host  CONFIGURATION, CHECKS, LAUNCH
   ============================================================================ */

/* Tile shape (BLOCK_M x BLOCK_N, warps) per head dim and GPU family; shared
   bytes = 2 * D * (BLOCK_M + 4 * BLOCK_N) (Q once, K and V twice).
     family 0: sm_90 (H100/H200, 227 KB per block) and later
     family 3: compute capability 9.0 exactly: the sm_90a kernel (>>hopper)
               where it applies, else family 0's shapes
     family 1: sm_86 / sm_89 (99 KB per block)
     family 2: sm_80 / sm_87 (A100, 163 KB per block)
   BLOCK_M = 128 with 4 warps gives each warp two 16-row tiles, so every K and
   V fragment read from shared memory feeds two MMAs, faster than one tile
   per warp at d 64 / 128 [gpu-tile-shape]. At d 192 / 256 the O~
   accumulator (D / 2 floats per row tile per thread) leaves room for one
   row tile per warp only, hence 8 warps. Families 1 and 2 are
   FlashAttention-2's shapes fitted to our shared-memory budget, untimed. */
typedef struct fa__config { int bm, bn, warps; } fa__config;

static constexpr fa__config fa__default_config(int d, int family)
{
    return d <= 96    ? fa__config{128, 64, 4}
           : d <= 128 ? fa__config{128, 32, 4}
           : family == 1 ? fa__config{64, 32, 4}
           : (d <= 192 || family == 0) ? fa__config{128, 64, 8}
                                       : fa__config{64, 64, 4};
}

static constexpr fa__config fa__config_for(int d, int family)
{
    return fa__config{
#ifdef FLASHATTN_BLOCK_M
        FLASHATTN_BLOCK_M,
#else
        fa__default_config(d, family).bm,
#endif
#ifdef FLASHATTN_BLOCK_N
        FLASHATTN_BLOCK_N,
#else
        fa__default_config(d, family).bn,
#endif
#ifdef FLASHATTN_WARPS
        FLASHATTN_WARPS,
#else
        fa__default_config(d, family).warps,
#endif
    };
}

#endif /* !FA__EMU_NO_FWD */

/* The head dims compiled (FLASHATTN_HEAD_DIMS); the backward's dispatch reads
   them too, so they stand outside the emulator's fence. */
static constexpr int fa__head_dims[] = {FLASHATTN_HEAD_DIMS};
static constexpr int fa__n_head_dims = (int)(sizeof(fa__head_dims) / sizeof(fa__head_dims[0]));

static constexpr bool fa__head_dim_compiled(int d)
{
    for (int i = 0; i < fa__n_head_dims; i++)
        if (fa__head_dims[i] == d) return true;
    return false;
}

/* The sm_90a forward kernel's head dim for head dim d: d itself at 64, 128
   and 256; else the next of those if it is compiled in (its columns past the
   head dim are zeros; on the H200 it outruns the sm_80 kernel of d
   [sm90-dims]); 0 where there is none. */
static constexpr int fa__sm90_dim(int d)
{
    const int k = d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
    return k != 0 && (k == d || fa__head_dim_compiled(k)) ? k : 0;
}

static fa_status fa__cuda_fail(const char *fn, cudaError_t e, const char *what)
{
    return fa__fail(FA_ERROR_CUDA, "%s: %s: %s (%s)", fn, what, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

/* A workspace the caller did not give, allocated stream-ordered (no
   device-wide synchronization), and freed after the call's last kernel:
   fa__ws_free returns s, the call's status, or the free's error after a
   call that succeeded. */
static fa_status fa__ws_alloc(const char *fn, void **ws, size_t bytes, cudaStream_t st)
{
    const cudaError_t e = cudaMallocAsync(ws, bytes, st);
    if (e == cudaSuccess) return FA_OK;
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation
               ? fa__fail(FA_ERROR_OUT_OF_MEMORY, "%s: cudaMallocAsync of %zu workspace bytes failed", fn, bytes)
               : fa__cuda_fail(fn, e, "cudaMallocAsync (workspace)");
}
static fa_status fa__ws_free(const char *fn, void *ws, cudaStream_t st, fa_status s)
{
    const cudaError_t e = cudaFreeAsync(ws, st);
    return s == FA_OK && e != cudaSuccess ? fa__cuda_fail(fn, e, "cudaFreeAsync (workspace)") : s;
}

/* What fa_forward_cuda learns of the device, once a call, for the dispatch
   below: its family (the table above), the shared-memory opt-in limit per
   block, and the SM count (the persistent sm_90a grid); (fa_backward_cuda)
   whether it takes cooperative launches (the deterministic kernels'
   rotated walks, fa__bwd_rot); fa_quantize_cuda's ring kernel reads the
   family, the opt-in limit and the SMs too. */
typedef struct fa__gpu {
    int family, smem_optin, sms, coop;
} fa__gpu;
/* The current device as fa__gpu, and its compute capability (major.minor;
   family 0 for what the table above does not name). */
static fa_status fa__gpu_query(const char *fn, fa__gpu *g, int *major, int *minor)
{
    int dev = 0;
    cudaError_t e;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return fa__cuda_fail(fn, e, "cudaGetDevice");
    if ((e = cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&g->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&g->coop, cudaDevAttrCooperativeLaunch, dev)) != cudaSuccess)
        return fa__cuda_fail(fn, e, "cudaDeviceGetAttribute");
    g->family = *major == 8 ? ((*minor == 6 || *minor == 9) ? 1 : 2) : (*major == 9 && *minor == 0) ? 3 : 0;
    return FA_OK;
}
#ifndef FLASHATTN_NO_HOPPER
/* The sm_90a kernels' tensor maps (the forward's and the backward's) */
#ifndef FLASHATTN_CUDA_EMU /* (tests/emu_cuda90.h has its own maps) */
/* cuTensorMapEncodeTiled is a driver function; looking it up through the
   runtime avoids linking libcuda. Looked up once (a benign race: every
   thread stores the same pointer). */
static PFN_cuTensorMapEncodeTiled_v12000 fa__tma_encoder(void)
{
    static PFN_cuTensorMapEncodeTiled_v12000 enc = NULL;
    if (!enc) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            enc = (PFN_cuTensorMapEncodeTiled_v12000)f;
        else
            (void)cudaGetLastError();
    }
    return enc;
}

/* A map of a [batches][heads][rows][cols] view of 16-bit elements (strides
   in elements), read in boxes of 64 columns x box_rows rows with the 128-byte
   swizzle. Nonzero when TMA cannot describe the view (strides must be
   multiples of 16 bytes below 2^40, coordinates 32-bit). */
static int fa__tma_map(CUtensorMap *m, const void *base, int bf16, int cols, int64_t rows, int heads,
                       int64_t batches, int64_t s_seq, int64_t s_head, int64_t s_batch, int box_rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = fa__tma_encoder();
    cuuint64_t dim[4] = {(cuuint64_t)cols, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)batches};
    cuuint64_t stride[3] = {(cuuint64_t)s_seq * 2, (cuuint64_t)s_head * 2, (cuuint64_t)s_batch * 2};
    cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1}, step[4] = {1, 1, 1, 1};
    if (!enc || rows > INT32_MAX || batches > INT32_MAX) return 1;
    for (int i = 0; i < 3; i++)
        if (stride[i] == 0 || stride[i] % 16 || stride[i] >= (1ull << 40)) return 1;
    return enc(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
               (void *)base, dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS;
}
#endif /* FLASHATTN_CUDA_EMU */
/* The map of `seqs` sequences of `seqlen` rows ([seqs][heads][rows][cols],
   strides s_seq, s_head, s_batch), or, packed (cu_seqlens: the batch stride
   unused), of one [1][heads][token][cols] view over seqs x seqlen tokens,
   whose rows do not end where a sequence does. */
static int fa__tma_map_seqs(CUtensorMap *m, const void *base, int bf16, int cols, int64_t seqlen, int heads,
                            int64_t seqs, bool packed, int64_t s_seq, int64_t s_head, int64_t s_batch, int box_rows)
{
    return fa__tma_map(m, base, bf16, cols, packed ? seqs * seqlen : seqlen, heads, packed ? 1 : seqs, s_seq, s_head,
                       packed ? s_seq : s_batch, box_rows);
}
#endif /* FLASHATTN_NO_HOPPER */
#if !FA__EMU_NO_FWD

/* (for fa__fwd_kernel_sm80: a device of compute capability 9.0 or later
   runs family 0's shapes, see fa__gpu's family in fa_forward_cuda) */
template <int D, int BM, int BN, int WARPS> struct fa__sm80_shape_used {
    static constexpr bool on_sm90 =
        fa__config_for(D, 0).bm == BM && fa__config_for(D, 0).bn == BN && fa__config_for(D, 0).warps == WARPS;
    static constexpr bool sm90_kernel = fa__sm90_dim(D) != 0; /* its plain work runs the sm_90a kernel */
};

/* Is the plain kernel of head dim D an empty body in the code this device
   runs (FA__SM80_PLAIN_STUB)? Its marker, static shared memory, says so. */
template <bool BF16, int D, int BM, int BN, int WARPS> static bool fa__sm80_plain_stubbed()
{
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, fa__fwd_kernel_sm80<BF16, D, BM, BN, WARPS, false>) != cudaSuccess) {
        (void)cudaGetLastError();
        return false; /* (the launch reports it) */
    }
    return fa.sharedSizeBytes != 0;
}

/* Launch one instantiation: check its shared memory against the device's
   opt-in limit, raise the kernel's own limit (needed above 48 KB), launch.
   The work is a plain function of the kernel and its shape; the template
   only names the kernel, so its body is compiled once, not once per
   kernel [ctime-host]. */
static fa_status fa__launch_fwd_kernel(const char *fn, const fa__fwd_params &p, int batch, int smem_optin,
                                       cudaStream_t stream, void (*kern)(const fa__fwd_params), int D, int BM,
                                       int BN, int WARPS)
{
    const size_t smem = 2u * (size_t)D * (BM + 4 * BN); /* Q + 2 stages of K and V */
    const dim3 grid((unsigned)((p.seqlen_q + BM - 1) / BM), (unsigned)p.heads_q, (unsigned)batch);
    cudaError_t e;
    if (smem > (size_t)smem_optin)
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head dim %d with tiles %dx%d needs %zu bytes of shared memory, the "
                        "device allows %d per block (see FLASHATTN_BLOCK_M / FLASHATTN_BLOCK_N)",
                        fn, D, BM, BN, smem, smem_optin);
    /* Idempotent and cheap; set on every call rather than cached per device. */
    e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return fa__cuda_fail(fn, e, "cudaFuncSetAttribute");
    FA__LAUNCH(kern, grid, WARPS * 32, smem, stream, p);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fa__cuda_fail(fn, e, "kernel launch");
    return FA_OK;
}
template <bool BF16, int D, int BM, int BN, int WARPS, bool EXTRAS>
static fa_status fa__launch_fwd(const char *fn, const fa__fwd_params &p, int batch,
                                int smem_optin, cudaStream_t stream)
{
    return fa__launch_fwd_kernel(fn, p, batch, smem_optin, stream, fa__fwd_kernel_sm80<BF16, D, BM, BN, WARPS, EXTRAS>,
                                 D, BM, BN, WARPS);
}

#ifndef FLASHATTN_NO_HOPPER
/* ---- >>hopper-host  the sm_90a kernel's shapes, tensor maps and launch ----
   BLOCK_M is 128 (two consumer warpgroups of 64 rows; wgs; 192 in d 64's
   shape for long rows, LONG below); BLOCK_N and the ring
   depth per head dim fill the 227 KB of shared memory (fa__sm90_smem: 1 KB
   alignment slack + 2 D (128 + 2 STAGES BLOCK_N) bytes + barriers, plus
   2 D 128 bytes for the O staging tile where it fits)
     d 64: 128 keys, 3 stages (129 KB with the O tile); d 128: 128 keys,
     2 stages (193 KB with the O tile; 3 stages, before there was one,
     measured slower); d 256: 80 keys, 2 stages (225 KB; FlashAttention-3's
     128 x 80).
   Persistent blocks (item 6) for d 64 and 128, and for d 256 and d 64's
   shape for long rows where they measured faster (fa__sm90_persist_d256,
   fa__sm90_persist_d64; there the launch chooses between the kernel with
   PERSIST and the one without).
   LONG: the shape for many keys per query row (fa__sm90_long_rows).
     d 128: wider key blocks, 176 keys, 2 stages (209 KB, no room for an O
     tile; FlashAttention-3's 128 x 176): a third fewer iterations, each
     with its barrier waits and row max / sum reductions, for the same
     products. Short or causal rows lose by it (the diagonal block wastes
     more, and fewer blocks means less to overlap) [sm90-shapes]. Hence
     from 8192 keys.
     d 64: a third consumer warpgroup, BLOCK_M 192 with 128-key blocks, 3
     stages (FlashAttention-3's d 64 tile; 145 KB with the O tile, 169 KB
     with a second Q tile when persistent, fa__sm90_q_bufs): with
     persistent blocks at any length below 4096 keys (8192 under a causal
     / window mask) where the grid can be persistent
     (fa__sm90_persist_d64), else a block per tile from 2048 keys (8192
     masked).
     Why: at d 64 the softmax, not the tensor cores, sets the pace (a tile
     at 512 tokens spends about 40% of its time in it, its warps mostly
     waiting on dependent instructions [sm90-shapes]), and a third
     warpgroup gives each SM sub-partition another warp to hide that
     latency with, at 160 registers a thread instead of 240.
     Where: its 192-row tiles waste rows at short lengths and on causal
     diagonals, which the kernel's IDLE and WG_STOP no longer compute;
     with them, and persistent, three won or tied at every point below
     4096 keys (8192 masked): fa__sm90_persist_d64 [sm90-shapes].
     A block per tile from 4096 keys (8192 masked): the hardware hands
     single tiles out as SMs free up, where the last round of persistent
     pairs leaves SMs idle [sm90-shapes]. The three-warpgroup kernel walks
     single tiles without a mask, the two-warpgroup ones do not.
     Registers: until the mask limits became 32-bit (fa__mask_cut) and cw
     warp-uniform (CW_UNIFORM in the kernel), this shape spilled 24 bytes.
     Persistent and without a mask it walks flat tiles, with a ring of 4
     stages (FLAT in the kernel, fa__sm90_flat).
   QUAD: d 64's four consumer warpgroups, BLOCK_M 256 with 64-key blocks
     (112 registers a consumer thread leave no room for 128 keys), 6
     stages (194 KB with the O tile and two Q tiles), persistent as the
     three-warpgroup shape (the kernel's rules for three hold for four),
     taken where its tiles fit the rows better (fa__sm90_quad_d64). At 256
     rows three warpgroups need two tiles, the second with one warpgroup
     working, and every warpgroup's own chain of dependent instructions
     sets a tile's time at these lengths, so a tile of one warpgroup takes
     about as long as a full one [sm90-shapes]. It is the fourth
     warpgroup, not the narrow blocks. It issues its products without
     pingpong turns (the kernel's PINGPONG) and is taken under a causal
     mask up to 1024 rows too.
   wgs: consumer warpgroups. Fewer: d 256 with one consumer warpgroup and two
   blocks an SM measured slower [sm90-shapes]. */
/* A shape as a row of this table. wgs, bn, stages: consumer warpgroups,
   BLOCK_N, ring depth. persist: persistent blocks allowed (item 6; at
   d 256 fa__sm90_persist_d256 also decides, for d 64's long rows
   fa__sm90_persist_d64). keys, keys_masked (the
   shapes for long rows): the fewest keys from which fa__sm90_long_rows
   takes the shape, without and with a causal / window mask. */
template <int WGS, int BN, int STAGES, bool PERSIST, int KEYS = 0, int KEYS_MASKED = 0> struct fa__sm90_shape_row {
    static constexpr int wgs = WGS, bn = BN, stages = STAGES, keys = KEYS, keys_masked = KEYS_MASKED;
    static constexpr bool persist = PERSIST;
};
/* SH: 0 the base shape, 1 the shape for long rows (LONG above), 2 d 64's
   four-warpgroup shape for short rows (QUAD above) */
template <int D, int SH> struct fa__sm90_shape;
template <> struct fa__sm90_shape<64, 0> : fa__sm90_shape_row<2, 128, 3, true> {};
template <> struct fa__sm90_shape<64, 1> : fa__sm90_shape_row<3, 128, 3, true, 2048, 8192> {};
template <> struct fa__sm90_shape<64, 2> : fa__sm90_shape_row<4, 64, 6, true> {};
template <> struct fa__sm90_shape<128, 0> : fa__sm90_shape_row<2, 128, 2, true> {};
template <> struct fa__sm90_shape<128, 1> : fa__sm90_shape_row<2, 176, 2, true, 8192, 8192> {};
template <> struct fa__sm90_shape<256, 0> : fa__sm90_shape_row<2, 80, 2, true> {};
/* The FP8 kernel's one shape per head dim (>>hopper-fp8): 128-key blocks
   (64 at d 256, where 128 spilled; a key block lies within one of FP8's key
   descale blocks, FLASHATTN_FP8_BLOCK_K, a multiple of 128), persistent, 3
   stages below d 256; two consumer warpgroups, three at d 64. Why three
   there: a warpgroup's own chain a key block (S's wait, the softmax, the
   rescale and pack) sets the pace, not the tensor cores, and a third
   warpgroup gives each SM sub-partition another such chain, as in the
   16-bit kernel's d 64 shape for long rows; 152 registers a consumer
   thread hold d 64's S, P and O~ [sm90-fp8]. */
template <int D, int SH, bool FP8> struct fa__sm90_shape_of { typedef fa__sm90_shape<D, SH> type; };
template <int D, int SH> struct fa__sm90_shape_of<D, SH, true> {
    typedef fa__sm90_shape_row<D == 64 ? 3 : 2, D == 256 ? 64 : 128, D == 256 ? 2 : 3, true> type;
};

#ifdef FLASHATTN_TEST_HOOKS
/* tests only: how many forwards took the sm_90a kernel, a switch that
   sends every forward to the sm_80 kernel so both are tested on one GPU,
   and a cap on the persistent grid (0: none) so that small problems too
   walk several tiles per block, and a choice of shape (-1: by the rules
   of fa__sm90_shape_for, else SH of fa__sm90_shape where the head dim
   has that shape, and the base shape where not) */
static int fa__sm90_launches, fa__sm90_disable, fa__sm90_grid_cap, fa__sm90_shape_sel = -1;
#define FA__SM90_OFF fa__sm90_disable
#else
#define FA__SM90_OFF 0
#endif


/* Take head dim D's shape for long rows (see fa__sm90_shape)? From its
   keys / keys_masked: d 64 from 2048 keys, or 8192 under a causal / window
   mask; d 128 from 8192 keys. And d 64 at any length where that shape's
   grid is persistent (persist64, fa__sm90_persist_d64). */
template <int D> static bool fa__sm90_long_rows(const fa__fwd_params &p, bool persist64)
{
    typedef fa__sm90_shape<D, 1> S;
    return persist64 || p.seqlen_k >= (p.has_left || p.has_right ? S::keys_masked : S::keys);
}

/* d 64's four-warpgroup shape (QUAD in fa__sm90_shape's notes), where its
   256-row tiles measured faster than the 192-row ones: 193-256 rows, and
   449-1024 under a causal mask (a right bound without a left one). Both
   lengths at most that (measured only with as many keys as rows). Up to
   512 with turns (item 5); 1024 once the shape went without them (the
   kernel's PINGPONG) [sm90-shapes]. */
static bool fa__sm90_quad_d64(const fa__fwd_params &p)
{
    const int n = p.seqlen_q > p.seqlen_k ? p.seqlen_q : p.seqlen_k;
    return (n > 192 && n <= 256) || (p.has_right && !p.has_left && n > 448 && n <= 1024);
}

/* fa__sm90_shape's SH for head dim D (persist64: fa__sm90_persist_d64) */
template <int D> static int fa__sm90_shape_for(const fa__fwd_params &p, bool persist64)
{
#ifdef FLASHATTN_TEST_HOOKS
    if (fa__sm90_shape_sel >= 0) return D == 64 || fa__sm90_shape_sel < 2 ? fa__sm90_shape_sel : 0;
#endif
    if (D == 64 && persist64 && fa__sm90_quad_d64(p)) return 2;
    return fa__sm90_long_rows<D>(p, persist64) ? 1 : 0;
}

/* greatest common divisor (the persistent grid's size, below) */
static int fa__gcd(int a, int b)
{
    while (b) {
        const int r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Can the grid be persistent (one block per SM, or per pair when there are
   fewer pairs)? When there are more tiles than SMs and every pair of tiles
   (see unit() in the kernel) is the same work: one length for all
   sequences (no cu_seqlens, no seqlens_k); causal and window masks are
   fine, pairing balances them. Unequal lengths take a block per tile,
   which the hardware's block scheduler balances as it goes (before the
   pairs, persistent causal blocks in straight rounds measured slower than
   a block per tile [sm90-persist]). */
static bool fa__sm90_can_persist(const fa__fwd_params &p, int64_t tiles, int sms)
{
    return tiles > sms && !p.cu_seqlens_q && !p.cu_seqlens_k && !p.seqlens_k;
}
/* the tiles of BM query rows of a problem (batch sequences) */
static int64_t fa__sm90_tiles(const fa__fwd_params &p, int batch, int bm)
{
    return (int64_t)((p.seqlen_q + bm - 1) / bm) * p.heads_q * batch;
}
/* the tests' persistent walks (a grid cap): at any mask or length */
static bool fa__sm90_tests_persist(void)
{
#ifdef FLASHATTN_TEST_HOOKS
    return fa__sm90_grid_cap > 0;
#else
    return false;
#endif
}

/* d 256 runs persistent only where that measured faster: under a causal /
   window bound, from 1024 to 8192 query rows, where the grid can be
   persistent at all (fa__sm90_can_persist); elsewhere a block per tile,
   from a kernel compiled without PERSIST, was faster [sm90-persist]. */
static bool fa__sm90_persist_d256(const fa__fwd_params &p, int batch, int sms)
{
    constexpr int BM = 64 * fa__sm90_shape<256, 0>::wgs;
    return fa__sm90_tests_persist() || (p.has_right && p.seqlen_q >= 1024 && p.seqlen_q <= 8192 &&
                                        fa__sm90_can_persist(p, fa__sm90_tiles(p, batch, BM), sms));
}

/* d 64's shape for long rows (three consumer warpgroups) runs persistent
   where that measured faster: below 4096 keys, or 8192 under a causal /
   window mask, where the grid can be persistent at all
   (fa__sm90_can_persist); there it is taken at any length, in place of
   the two-warpgroup shape (but for the lengths of the four-warpgroup
   shape, fa__sm90_quad_d64, persistent there too) [sm90-persist]. */
static bool fa__sm90_persist_d64(const fa__fwd_params &p, int batch, int sms)
{
    constexpr int BM = 64 * fa__sm90_shape<64, 1>::wgs;
    return fa__sm90_tests_persist() || (p.seqlen_k < (p.has_left || p.has_right ? 8192 : 4096) &&
                                        fa__sm90_can_persist(p, fa__sm90_tiles(p, batch, BM), sms));
}

/* The flat walk (FLAT in the kernel; the launch has it for the
   three-warpgroup shape): persistent blocks (more than sms tiles of one
   sequence each, tiles0, or the tests' grid cap), no causal / window mask
   (fa__sm90_walk1), one length for every sequence, and at least WG
   warpgroup rows in a sequence, so that a tile holds rows of at most two.
   FA__SM90_FLAT=0 leaves it out (the tiles of one sequence each).
   Its ring has 4 stages, where the walk of one sequence's tiles has 3 (201
   KB with the O tile and two Q tiles): a tile of two segments has half of
   them for each [sm90-flat]. */
#ifndef FA__SM90_FLAT
#define FA__SM90_FLAT 1
#endif
#define FA__SM90_FLAT_STAGES 4
static bool fa__sm90_flat(int WG, const fa__fwd_params &p, int64_t tiles0, int sms)
{
    return FA__SM90_FLAT && fa__sm90_walk1(WG, p) && !p.cu_seqlens_q && !p.cu_seqlens_k && !p.seqlens_k &&
           (fa__sm90_can_persist(p, tiles0, sms) || fa__sm90_tests_persist()) && (p.seqlen_q + 63) / 64 >= WG;
}

/* One sm_90a kernel's compile-time shape, as values, and its kernels: the
   launch below is a plain function of them, compiled once rather than once
   per kernel [ctime-host]. */
typedef void (*fa__sm90_kern)(const fa__tma_maps, const fa__fwd_params, int, int, const fa__sm90_walk);
typedef struct fa__sm90_launch {
    fa__sm90_kern kern, kern_flat; /* kern_flat: the FLAT kernel (flat_stages), or 0 */
    int d, bn, stages, flat_stages, wg, bm;
    bool bf16, persist, o_own, can_flat, fp8, sparse;
} fa__sm90_launch;

/* Run the problem on the sm_90a kernel when it can: *ran = 0 (and FA_OK)
   sends it to the sm_80 kernel instead: a binary without sm_90a code, a
   view TMA cannot describe, or too little shared memory. */
static fa_status fa__launch_fwd_sm90_kernel(const char *fn, const fa__fwd_params &p, int batch, const fa__gpu &gpu,
                                            cudaStream_t stream, int *ran, const fa__sm90_launch &k)
{
    const int D = k.d, BN = k.bn, ST = k.stages, FST = k.flat_stages, WG = k.wg, BM = k.bm;
    const bool BF16 = k.bf16, PERSIST = k.persist, O_OWN = k.o_own, FP8 = k.fp8, SPARSE = k.sparse;
    const int64_t tiles0 = fa__sm90_tiles(p, batch, BM);
    const bool flat = k.can_flat && !SPARSE && fa__sm90_flat(WG, p, tiles0, gpu.sms);
    const size_t smem = FP8 ? fa__sm90_smem8(D, BM, BN, ST, O_OWN)
                            : fa__sm90_smem(D, BM, BN, flat ? FST : ST, O_OWN, fa__sm90_q_bufs(WG, PERSIST, O_OWN));
    const fa__sm90_kern kern = flat ? k.kern_flat : k.kern;
    const bool vq = p.cu_seqlens_q != NULL, vk = p.cu_seqlens_k != NULL; /* packed maps (fa__tma_map_seqs) */
    cudaFuncAttributes fa;
    fa__tma_maps tm;
    cudaError_t e;
    *ran = 0;
    if (smem > (size_t)gpu.smem_optin) return FA_OK;
    if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_OK;
    }
    if (fa.binaryVersion != 90 || fa.sharedSizeBytes != 0) return FA_OK; /* the stub body */
    memset(&tm, 0, sizeof tm);
    if (fa__tma_map_seqs(&tm.q, p.q, BF16, p.d, p.seqlen_q, p.heads_q, batch, vq, p.q_seq, p.q_head, p.q_batch,
                         flat ? 64 : BM) ||
        fa__tma_map_seqs(&tm.k, p.k, BF16, p.d, p.seqlen_k, p.heads_q / p.group, batch, vk, p.k_seq, p.k_head,
                         p.k_batch, BN) ||
        fa__tma_map_seqs(&tm.v, p.v, BF16, FP8 ? p.v_words : p.dv, p.seqlen_k, p.heads_q / p.group, batch, vk,
                         p.v_seq, p.v_head, p.v_batch, BN))
        return FA_OK;
    /* O's map, the epilogue's TMA stores of one warpgroup's 64 rows (else
       the warpgroups copy O out themselves). Only for a head_dim_v that is
       a multiple of 8: TMA clips a store to the map's columns in 16-byte
       pieces, and at head_dim_v 100 it wrote columns 100-103 of every row
       (into the stride gap a test checks). */
    tm.o_ok = p.dv % 8 == 0 && !fa__tma_map_seqs(&tm.o, p.o, FP8 ? p.o_bf16 : BF16, p.dv, p.seqlen_q, p.heads_q,
                                                 batch, vq, p.o_seq, p.o_head, p.o_batch, 64);
    e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return fa__cuda_fail(fn, e, "cudaFuncSetAttribute");
    /* (FLAT: m_blocks counts a sequence's warpgroup rows, and a tile is WG of
       them anywhere in the list of all sequences' rows) */
    const int m_blocks = flat ? (p.seqlen_q + 63) / 64 : (p.seqlen_q + BM - 1) / BM;
    const int64_t tiles = flat ? ((int64_t)m_blocks * p.heads_q * batch + WG - 1) / WG
                               : (int64_t)m_blocks * p.heads_q * batch;
    if ((flat ? tiles * WG : tiles) > INT32_MAX - 1024) return FA_OK; /* tile indexes are int: the sm_80 grid takes it */
    /* persistent where it can be (fa__sm90_can_persist; the shared memory
       allows no second block on an SM) */
    /* what a persistent block walks (the kernel's unit()): single tiles
       or pairs of them, per_head of them per (head, batch) */
    const bool walk1 = fa__sm90_walk1(WG, p, SPARSE);
    const int per_head = walk1 ? m_blocks : (m_blocks + 1) / 2;
    const int64_t units = flat ? tiles : (int64_t)per_head * p.heads_q * batch;
    const bool persistent = PERSIST && fa__sm90_can_persist(p, tiles0, gpu.sms);
    int blocks = persistent ? (int)(units < gpu.sms ? units : gpu.sms) : (int)tiles;
    if (WG >= 3 && persistent && units > blocks && !flat) { /* (FLAT: all tiles alike) */
        /* A block takes every G-th unit, the query block running fastest:
           when G is a multiple of per_head, a block gets the same query
           block or pair every time. The 192-row tiles are not all the
           same work: the last of a sequence is short (64 or 128 rows at
           512-4k tokens), and under a causal mask the block count grows
           by 1.5 a query block and the middle pair is one tile when M is
           odd. With G = 132 the blocks of the short tiles idled while the
           others ran full ones; with G coprime to per_head each block goes
           round all the shapes: 131 blocks on 132 SMs at 512-4k tokens
           [sm90-persist]. (The two-warpgroup kernels' pairs are the same
           work when M is even.) */
        while (blocks > 1 && fa__gcd(blocks, per_head) > 1) blocks--;
    }
#ifdef FLASHATTN_TEST_HOOKS
    if (PERSIST && fa__sm90_grid_cap > 0 && blocks > fa__sm90_grid_cap) blocks = fa__sm90_grid_cap; /* any mask */
#endif
    FA__LAUNCH(kern, blocks, 128 * (WG + FA__SM90_WARPSPEC), smem, stream, tm, p, m_blocks, batch,
               fa__sm90_walk_for(WG, p, m_blocks, batch, blocks >= tiles, flat, gpu.sms));
    e = cudaGetLastError();
    if (e != cudaSuccess) return fa__cuda_fail(fn, e, "kernel launch");
#ifdef FLASHATTN_TEST_HOOKS
    fa__sm90_launches++;
#endif
    *ran = 1;
    return FA_OK;
}

template <bool BF16, int D, int SH, bool ALLOW_PERSIST, bool FP8 = false, bool SPARSE = false>
static fa_status fa__launch_fwd_sm90(const char *fn, const fa__fwd_params &p, int batch,
                                     const fa__gpu &gpu, cudaStream_t stream, int *ran)
{
    typedef typename fa__sm90_shape_of<D, SH, FP8>::type S;
    constexpr int BN = S::bn, ST = S::stages, WG = S::wgs, BM = 64 * WG;
    constexpr bool PERSIST = ALLOW_PERSIST && S::persist; /* the shape may rule it out */
    constexpr bool O_OWN = FP8 ? fa__sm90_o_own8(D, BM, BN, ST) : fa__sm90_o_own(D, BM, BN, ST);
    /* the flat walk (FLAT in the kernel) where it applies: the three-warpgroup
       shape, persistent, no mask, one length for all (fa__sm90_flat) */
    constexpr bool CAN_FLAT = PERSIST && WG == 3 && FA__SM90_WARPSPEC && O_OWN && !FP8;
    constexpr int FST = CAN_FLAT ? FA__SM90_FLAT_STAGES : ST;
    fa__sm90_launch k;
    if constexpr (FP8)
        k.kern = fa__fwd_kernel_sm90<BF16, D, BN, ST, PERSIST, WG, false, true>;
    else if constexpr (SPARSE)
        k.kern = fa__fwd_kernel_sm90<BF16, D, BN, ST, PERSIST, WG, false, false, true>;
    else
        k.kern = fa__fwd_kernel_sm90<BF16, D, BN, ST, PERSIST, WG>;
    if constexpr (CAN_FLAT && !FP8 && !SPARSE)
        k.kern_flat = fa__fwd_kernel_sm90<BF16, D, BN, FST, PERSIST, WG, CAN_FLAT>;
    else
        k.kern_flat = 0;
    k.d = D; k.bn = BN; k.stages = ST; k.flat_stages = FST; k.wg = WG; k.bm = BM;
    k.bf16 = BF16; k.persist = PERSIST; k.o_own = O_OWN; k.can_flat = CAN_FLAT; k.fp8 = FP8; k.sparse = SPARSE;
    return fa__launch_fwd_sm90_kernel(fn, p, batch, gpu, stream, ran, k);
}

/* The sm_90a kernel of head dim D (64, 128 or 256), with its shape and grid
   for this problem; *ran = 0 where it declines. */
template <bool BF16, int D>
static fa_status fa__try_sm90(const char *fn, const fa__fwd_params &p, int batch, const fa__gpu &gpu,
                              cudaStream_t stream, int *ran)
{
    constexpr bool P = FA__SM90_PERSISTENT;
    const bool persist64 = D == 64 && P && fa__sm90_persist_d64(p, batch, gpu.sms);
    if (p.bm.idx) { /* a block mask (>>gpu-bsparse): the base shape's, d 64 and 128 */
        if constexpr (D != 256 && P)
            return fa__launch_fwd_sm90<BF16, D, 0, true, false, true>(fn, p, batch, gpu, stream, ran);
        else
            return FA_OK;
    } else if constexpr (D == 256) {
        if (P && fa__sm90_persist_d256(p, batch, gpu.sms))
            return fa__launch_fwd_sm90<BF16, D, 0, P>(fn, p, batch, gpu, stream, ran);
        else
            return fa__launch_fwd_sm90<BF16, D, 0, false>(fn, p, batch, gpu, stream, ran);
    } else {
        const int sh = fa__sm90_shape_for<D>(p, persist64);
        if (sh == 2) /* (only at d 64, the one head dim with that shape: D == 64 ? 2 : 0) */
            return fa__launch_fwd_sm90<BF16, D, D == 64 ? 2 : 0, P>(fn, p, batch, gpu, stream, ran);
        else if (sh == 1 && D == 64 && !persist64) {
            /* (if constexpr: d 128's long-row shape runs with PERSIST only, so no kernel without it) */
            if constexpr (D == 64) return fa__launch_fwd_sm90<BF16, D, 1, false>(fn, p, batch, gpu, stream, ran);
            else return FA_OK;
        } else if (sh == 1)
            return fa__launch_fwd_sm90<BF16, D, 1, P>(fn, p, batch, gpu, stream, ran);
        else
            return fa__launch_fwd_sm90<BF16, D, 0, P>(fn, p, batch, gpu, stream, ran);
    }
}
#endif /* FLASHATTN_NO_HOPPER */

/* Pick the family's tile shape for head dim D at compile time. */
template <bool BF16, int D>
static fa_status fa__dispatch_family(const char *fn, const fa__fwd_params &p, int batch,
                                     const fa__gpu &gpu, cudaStream_t stream)
{
    const int family = gpu.family, smem_optin = gpu.smem_optin;
    constexpr fa__config c0 = fa__config_for(D, 0), c1 = fa__config_for(D, 1), c2 = fa__config_for(D, 2);
#ifndef FLASHATTN_NO_HOPPER
    /* compute capability 9.0, no extras: the sm_90a kernel first */
    constexpr int DH = fa__sm90_dim(D);
    if constexpr (DH != 0) {
        if (family == 3 && !p.extras && !FA__SM90_OFF) {
            int ran = 0;
            const fa_status s = fa__try_sm90<BF16, DH>(fn, p, batch, gpu, stream, &ran);
            if (s != FA_OK || ran) return s;
        }
    }
#endif
    /* (identical shapes are one instantiation: templates are deduplicated;
       a block mask takes the EXTRAS kernel, the one that walks its lists;
       so does what the sm_90a kernel declined, where the plain kernel has
       no sm_90a code) */
    bool extras = p.extras || p.bm.idx;
#if !defined(FLASHATTN_NO_HOPPER) && !defined(FLASHATTN_TEST_HOOKS)
    if constexpr (fa__sm90_dim(D) != 0)
        if (family == 3 && !extras) extras = fa__sm80_plain_stubbed<BF16, D, c0.bm, c0.bn, c0.warps>();
#endif
    if (family == 1) {
        if (extras)
            return fa__launch_fwd<BF16, D, c1.bm, c1.bn, c1.warps, true>(fn, p, batch, smem_optin, stream);
        return fa__launch_fwd<BF16, D, c1.bm, c1.bn, c1.warps, false>(fn, p, batch, smem_optin, stream);
    }
    if (family == 2) {
        if (extras)
            return fa__launch_fwd<BF16, D, c2.bm, c2.bn, c2.warps, true>(fn, p, batch, smem_optin, stream);
        return fa__launch_fwd<BF16, D, c2.bm, c2.bn, c2.warps, false>(fn, p, batch, smem_optin, stream);
    }
    if (extras)
        return fa__launch_fwd<BF16, D, c0.bm, c0.bn, c0.warps, true>(fn, p, batch, smem_optin, stream);
    return fa__launch_fwd<BF16, D, c0.bm, c0.bn, c0.warps, false>(fn, p, batch, smem_optin, stream);
}

/* The smallest compiled head dim >= need (index I onwards), then the dtype. */
template <int I>
static fa_status fa__dispatch_head_dim(const char *fn, const fa__fwd_params &p, int batch, int need,
                                       int bf16, const fa__gpu &gpu, cudaStream_t stream)
{
    if constexpr (I >= fa__n_head_dims) {
        (void)p; (void)batch; (void)bf16; (void)gpu; (void)stream;
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head dim %d is larger than every head dim compiled in "
                        "(FLASHATTN_HEAD_DIMS)", fn, need);
    } else {
        constexpr int D = fa__head_dims[I];
        static_assert(D % 32 == 0 && D >= 32 && D <= 256,
                      "FLASHATTN_HEAD_DIMS: each must be 32, 64, ..., 256 (a multiple of 32)");
        if (need > D)
            return fa__dispatch_head_dim<I + 1>(fn, p, batch, need, bf16, gpu, stream);
        if (bf16) return fa__dispatch_family<true, D>(fn, p, batch, gpu, stream);
        return fa__dispatch_family<false, D>(fn, p, batch, gpu, stream);
    }
}

#if !defined(FLASHATTN_NO_HOPPER) && !defined(FLASHATTN_NO_FP8)
/* The FP8 forward (e4m3 Q, K and V; >>hopper-fp8): the sm_90a kernel's
   FP8 at the smallest of the compiled head dims 64, 128 and 256 that holds
   need. It has no sm_80 twin: where it cannot run, a named error. One
   kernel for both O types (BF16 false; p.o_bf16 picks O's at run time, in
   the epilogue only): 3 kernels fewer to compile [ctime-fp8-o]. */
template <int I>
static fa_status fa__dispatch_fp8(const char *fn, const fa__fwd_params &p, int batch, int need,
                                  const fa__gpu &gpu, cudaStream_t stream)
{
    if constexpr (I >= fa__n_head_dims) {
        (void)p; (void)batch; (void)gpu; (void)stream;
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8: no head dim 64, 128 or 256 of at least %d is compiled "
                        "in (FLASHATTN_HEAD_DIMS)", fn, need);
    } else {
        constexpr int D = fa__head_dims[I];
        if constexpr ((D == 64 || D == 128 || D == 256) && FA__SM90_WARPSPEC) { /* (its V transpose is the producer's) */
            if (need <= D) {
                int ran = 0;
                const fa_status s = fa__launch_fwd_sm90<false, D, 0, true, true>(fn, p, batch, gpu, stream, &ran);
                if (s != FA_OK || ran) return s;
                return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8: the sm_90a kernel cannot run here (this binary "
                                "needs -gencode arch=compute_90a,code=sm_90a, and q, k, v and o views that TMA "
                                "can describe)", fn);
            }
        }
        return fa__dispatch_fp8<I + 1>(fn, p, batch, need, gpu, stream);
    }
}
#endif

#endif /* !FA__EMU_NO_FWD */

/* A tensor the kernel reads or writes with 16-byte accesses: its rows must
   start on 16-byte boundaries. */
static fa_status fa__check_rows_aligned(const char *fn, const char *name, const fa_tensor *t,
                                        int varlen)
{
    if (((uintptr_t)t->data & 15u) != 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: %s.data must be 16-byte aligned on the GPU (cp.async copies 16 bytes)",
                        fn, name);
    const int64_t m = t->dtype == FA_E4M3 ? 15 : 7; /* 16 bytes in elements, less 1 */
    if ((t->seq_stride & m) || (t->head_stride & m) || (!varlen && (t->batch_stride & m)))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: %s strides (batch %lld, seq %lld, head %lld) must be multiples of %d "
                        "elements on the GPU so every row starts on a 16-byte boundary",
                        fn, name, (long long)t->batch_stride, (long long)t->seq_stride,
                        (long long)t->head_stride, (int)m + 1);
    return FA_OK;
}

/* ---- >>gpu-bsparse-host  a block mask's lists, sorted on the device ----
   (fa_forward_cuda and fa_backward_cuda; outside the forward's section:
   the emulated backward, tests/emu_cuda.h, runs it too.)
   The caller's lists (any order, two of them, device memory the host never
   reads) become one ascending list per row in the workspace: a warp per
   (mask, query block) row sets the row's key blocks in a bitmap (repeats
   merge; entries outside [0, k_blocks) and counts outside [0, k_blocks]
   are dropped or clamped, so no list can send a kernel out of bounds),
   then writes the set bits out in order; the same bits go by key block
   into a second bitmap (the backward's walk). Workspace: the counts, the
   lists, the bitmaps by query block, the bitmaps by key block, and the
   order an sm_90a kernel deals its work in (fa__bm_order_kernel: the
   forward's tiles, the backward's units), each 256-byte aligned. */
typedef struct fa__bm_src {
    const int32_t *cnt[2], *idx[2]; /* kv_*, full_kv_* (NULL: not given) */
    int k_blocks;
    int64_t rows;
    int32_t *out_cnt, *out_idx; /* the workspace's counts, lists, bitmaps */
    uint32_t *bits, *cbits;     /* (cbits zeroed before the kernel) */
    int q_blocks;
} fa__bm_src;
static size_t fa__bm_align(size_t n) { return (n + 255) & ~(size_t)255; }
/* bytes of: the counts, the lists, the bitmaps, the bitmaps by key block;
   rows and k_blocks of resolved r (the work order follows them) */
static void fa__bm_sizes(const fa_problem *r, size_t sz[4], int64_t *rows, int *k_blocks)
{
    const fa_block_mask *m = &r->block_mask;
    const int q_blocks = fa__blocks(r->seqlen_q, m->block_q);
    *rows = (int64_t)m->batch * m->heads * q_blocks;
    *k_blocks = fa__blocks(r->seqlen_k, m->block_k);
    sz[0] = fa__bm_align((size_t)*rows * 4);
    sz[1] = fa__bm_align((size_t)*rows * (size_t)*k_blocks * 4);
    sz[2] = fa__bm_align((size_t)*rows * (size_t)((*k_blocks + 31) / 32) * 4);
    sz[3] = fa__bm_align((size_t)m->batch * m->heads * (size_t)*k_blocks * (size_t)((q_blocks + 31) / 32) * 4);
}
__global__ void __launch_bounds__(256) fa__bm_rows_kernel(const fa__bm_src src)
{
    int32_t *cnt = src.out_cnt, *idx = src.out_idx;
    uint32_t *bits = src.bits;
    const int64_t row = ((int64_t)blockIdx.x * 256 + threadIdx.x) / 32; /* (the same for the whole warp) */
    const int lane = (int)threadIdx.x % 32, kb = src.k_blocks, words = (kb + 31) / 32;
    if (row >= src.rows) return;
    uint32_t *w = bits + row * words;
    for (int i = lane; i < words; i += 32) w[i] = 0u;
    __syncwarp(); /* (orders the lanes' stores before the atomics below) */
    for (int l = 0; l < 2; l++) {
        if (!src.cnt[l]) continue;
        const int n = min(max(src.cnt[l][row], 0), kb);
        for (int j = lane; j < n; j += 32) {
            const int e = src.idx[l][row * kb + j];
            if (e < 0 || e >= kb) continue;
            atomicOr(w + e / 32, 1u << (e % 32));
            /* (by key block: mask row / q_blocks, query block row % q_blocks) */
            const int64_t mask = row / src.q_blocks, I = row % src.q_blocks;
            atomicOr(src.cbits + (mask * kb + e) * ((src.q_blocks + 31) / 32) + I / 32, 1u << (I % 32));
        }
    }
    __syncwarp(); /* every lane's bits are set before any lane reads a word */
    int total = 0;
    for (int i0 = 0; i0 < words; i0 += 32) {
        uint32_t word = i0 + lane < words ? __ldcg(w + i0 + lane) : 0u; /* (L2: where the atomics were) */
        const int mine = __popc(word);
        int upto = mine; /* inclusive prefix over the lanes */
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, upto, o);
            if (lane >= o) upto += v;
        }
        int32_t *out = idx + row * kb + total + upto - mine;
        for (; word; word &= word - 1) *out++ = (i0 + lane) * 32 + __ffs((int)word) - 1;
        total += __shfl_sync(0xffffffffu, upto, 31);
    }
    if (lane == 0) cnt[row] = total;
}
#ifndef FLASHATTN_CUDA_EMU /* (the sm_90a kernels' alone) */
/* Work items (n of them, item t's work count(t)) in the order a persistent
   sm_90a kernel deals them out under a block mask: most work first, a
   counting sort in one block (counts past the last of nb bins share it).
   The forward's items are its tiles, the backward's its units (causal
   masks above D 64: fa__bwd_bm_sorted). A count
   stands for the item's work: a causal or window bound may cut it, which a
   mask built for that bound already leaves out. */
#define FA__BM_ORDER_BINS 4096
#ifndef FA__BM_ORDER
#define FA__BM_ORDER 1 /* (0: the items in their own order, for measuring) */
#endif
template <class Count>
__global__ void __launch_bounds__(1024) fa__bm_order_kernel(const Count count, int n, int nb, int32_t *order)
{
    __shared__ int bin[FA__BM_ORDER_BINS];
    const int tid = (int)threadIdx.x;
    if (!FA__BM_ORDER) {
        for (int t = tid; t < n; t += 1024) order[t] = t;
        return;
    }
    nb = min(nb, FA__BM_ORDER_BINS);
    auto bin_of = [&](int t) { return nb - 1 - min(count(t), nb - 1); }; /* 0: the most work */
    for (int i = tid; i < nb; i += 1024) bin[i] = 0;
    __syncthreads(); /* the bins are clear */
    for (int t = tid; t < n; t += 1024) atomicAdd(&bin[bin_of(t)], 1);
    __syncthreads(); /* every item counted */
    if (tid < 32) { /* the bins' starts: an exclusive scan, a chunk of bins a lane */
        const int chunk = (nb + 31) / 32, lo = min(tid * chunk, nb), hi = min(lo + chunk, nb);
        int sum = 0, upto;
        for (int i = lo; i < hi; i++) sum += bin[i];
        upto = sum;
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, upto, o);
            if (tid >= o) upto += v;
        }
        for (int i = lo, at = upto - sum; i < hi; i++) {
            const int c = bin[i];
            bin[i] = at;
            at += c;
        }
    }
    __syncthreads(); /* the starts are in place */
    for (int t = tid; t < n; t += 1024) order[atomicAdd(&bin[bin_of(t)], 1)] = t;
}
#endif /* FLASHATTN_CUDA_EMU */
/* The forward's tiles (m_block, h, b; fa__sm90_sched's tile_coords
   numbering, 128-row tiles): the count of their row's listed blocks. */
struct fa__bm_tile_count {
    fa__bmask m;
    int heads_q;
    __device__ int operator()(int t) const
    {
        const int I = m.q_blocks - 1 - t % m.q_blocks, hb = t / m.q_blocks, h = hb % heads_q, b = hb / heads_q;
        return m.cnt[fa__bm_mask(m, b, h) * m.q_blocks + I];
    }
};
/* Bytes of workspace a block mask of resolved r needs (0 without one):
   the sorted lists and bitmaps, and the order of `items` work items */
static size_t fa__bm_workspace(const fa_problem *r, int64_t items)
{
    size_t sz[4];
    int64_t rows;
    int kb;
    if (!fa__has_block_mask(r)) return 0;
    fa__bm_sizes(r, sz, &rows, &kb);
    return sz[0] + sz[1] + sz[2] + sz[3] + fa__bm_align((size_t)items * 4);
}
/* fa_forward_cuda's: its work items are the sm_90a kernel's 128-row tiles */
static size_t fa__fwd_workspace(const fa_problem *r)
{
    if (!fa__has_block_mask(r)) return 0; /* (block_q is 0 then) */
    return fa__bm_workspace(r, (int64_t)fa__blocks(r->seqlen_q, r->block_mask.block_q) * r->heads_q * r->batch);
}
/* The block mask's checks fa_forward_cuda makes (resolved r, e4m3 or not). */
static fa_status fa__check_bm_cuda(const char *fn, const fa_problem *r, int fp8)
{
    const fa_block_mask *m = &r->block_mask;
    if (!fa__has_block_mask(r)) return FA_OK;
    if (fp8)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: block_mask is set: the FP8 (e4m3) forward does not take "
                        "block masks", fn);
    if (m->block_q != 128 || m->block_k != 128)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: block_mask.%s is %d: the GPU kernels take 128 x 128 blocks "
                        "(0 = 128)", fn, m->block_q != 128 ? "block_q" : "block_k",
                        m->block_q != 128 ? m->block_q : m->block_k);
    return FA_OK;
}
/* Sort r's lists into the workspace at ws (fa__bm_workspace bytes) on
   stream st; the kernels' view of them into *bm (the lists for the
   forward, the bitmap for the backward). The order the sm_90a kernels
   deal their work in is each entry point's own (fa__fwd_bm_order,
   fa__bwd_bm_order). */
static cudaError_t fa__bm_prepare(const fa_problem *r, void *ws, cudaStream_t st, fa__bmask *bm)
{
    const fa_block_mask *m = &r->block_mask;
    size_t sz[4];
    fa__bm_src src;
    cudaError_t e;
    fa__bm_sizes(r, sz, &src.rows, &src.k_blocks);
    src.cnt[0] = m->kv_num_blocks; src.idx[0] = m->kv_indices;
    src.cnt[1] = m->full_kv_num_blocks; src.idx[1] = m->full_kv_indices;
    src.out_cnt = (int32_t *)ws;
    src.out_idx = (int32_t *)((char *)ws + sz[0]);
    src.bits = (uint32_t *)((char *)src.out_idx + sz[1]);
    src.cbits = (uint32_t *)((char *)ws + sz[0] + sz[1] + sz[2]);
    src.q_blocks = fa__blocks(r->seqlen_q, m->block_q);
    if ((e = cudaMemsetAsync(src.cbits, 0, sz[3], st)) != cudaSuccess) return e;
    FA__LAUNCH(fa__bm_rows_kernel, (unsigned)((src.rows * 32 + 255) / 256), 256, 0, st, src);
    bm->cnt = src.out_cnt;
    bm->idx = src.out_idx;
    bm->order = (int32_t *)((char *)src.cbits + sz[3]);
    bm->bits = src.bits;
    bm->words = (src.k_blocks + 31) / 32;
    bm->cbits = src.cbits;
    bm->qwords = (src.q_blocks + 31) / 32;
    bm->q_blocks = src.q_blocks;
    bm->k_blocks = src.k_blocks;
    bm->batch1 = m->batch == 1;
    bm->heads = m->heads;
    bm->hdiv = r->heads_q / m->heads;
    return cudaGetLastError();
}

#if !FA__EMU_NO_FWD /* (the emulated backward needs none of the forward's API) */

/* The sm_90a forward's tiles under a block mask, most listed blocks first,
   into the workspace's tile order (bm->order, after fa__bm_prepare). */
static cudaError_t fa__fwd_bm_order(const fa_problem *r, const fa__bmask *bm, cudaStream_t st)
{
    /* (more tiles than an int holds never reach the sm_90a kernel: fa__launch_fwd_sm90) */
    const int64_t tiles = (int64_t)bm->q_blocks * r->heads_q * r->batch;
    const fa__bm_tile_count count = {*bm, r->heads_q};
    FA__LAUNCH(fa__bm_order_kernel<fa__bm_tile_count>, 1, 1024, 0, st, count,
               tiles <= INT32_MAX ? (int)tiles : 0, bm->k_blocks + 1, (int32_t *)bm->order);
    return cudaGetLastError();
}

/* What the GPU's FP8 forward takes beyond fa__check_fp8 (e4m3 q, k, v): an
   f16 / bf16 o, none of the extras, even head dims (rows are copied as
   16-bit words), key block descales of whole 128-key blocks, and the
   kernel in this build. Strides and alignment: fa__check_rows_aligned. */
static fa_status fa__check_fp8_cuda(const char *fn, const fa_problem *r, const fa_tensor *o)
{
#if defined(FLASHATTN_NO_HOPPER) || defined(FLASHATTN_NO_FP8)
    (void)r; (void)o;
    return fa__fail(FA_ERROR_UNSUPPORTED, "%s: q.dtype FA_E4M3: the FP8 GPU kernel is not in this build "
                    "(FLASHATTN_NO_FP8 or FLASHATTN_NO_HOPPER; fa_forward takes e4m3 on the CPU)", fn);
#else
    if (o->dtype != FA_F16 && o->dtype != FA_BF16)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8: o.dtype is %s; the GPU writes FA_F16 or FA_BF16", fn,
                        fa__dtype_name(o->dtype));
    if (r->softcap > 0.0f || r->alibi_slopes || r->dropout_p > 0.0f || r->scale < 0.0f)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8 on the GPU takes no softcap, alibi_slopes, dropout_p or "
                        "negative scale (the f16 / bf16 kernels do)", fn);
    if ((r->head_dim | r->head_dim_v) & 1)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8 on the GPU needs even head_dim and head_dim_v (%d, %d)", fn,
                        r->head_dim, r->head_dim_v);
    if ((r->descale_k_block || r->descale_v_block) && FLASHATTN_FP8_BLOCK_K % 128)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8 on the GPU: descale_k_block / descale_v_block need "
                        "FLASHATTN_FP8_BLOCK_K a multiple of 128 (the kernel's key block); it is %d", fn,
                        FLASHATTN_FP8_BLOCK_K);
    return FA_OK;
#endif
}

#if !defined(FLASHATTN_NO_HOPPER) && !defined(FLASHATTN_NO_FP8)
/* The FP8 kernel's view of e4m3 q, k, v: rows of 16-bit words (the copies'
   unit), so head dims and strides halve; and the descales. */
static void fa__fwd_params_fp8(fa__fwd_params *kp, const fa_problem *r)
{
    kp->q_batch /= 2; kp->q_seq /= 2; kp->q_head /= 2;
    kp->k_batch /= 2; kp->k_seq /= 2; kp->k_head /= 2;
    kp->v_batch /= 2; kp->v_seq /= 2; kp->v_head /= 2;
    kp->d = r->head_dim / 2;
    kp->v_words = r->head_dim_v / 2;
    kp->dsb_q = r->descale_q_block; kp->dsb_k = r->descale_k_block; kp->dsb_v = r->descale_v_block;
    kp->ds_q = r->descale_q; kp->ds_k = r->descale_k; kp->ds_v = r->descale_v;
    kp->blk_q = (int)FA__FP8_BLOCKS(r->seqlen_q, 0);
    kp->blk_k = (int)FA__FP8_BLOCKS(r->seqlen_k, 1);
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

FLASHATTN_DEF fa_status fa_forward_cuda_workspace_size(const fa_problem *p, size_t *bytes)
{
    static const char fn[] = "fa_forward_cuda_workspace_size";
    fa_problem r;
    if (!bytes) return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    /* host_arrays = 0: alibi_slopes, cu_seqlens, seqlens_k and the block mask's lists are device memory */
    fa_status s = fa__resolve(fn, p, &r, 0);
    if (s != FA_OK || (s = fa__no_block_table(fn, &r)) != FA_OK) return s;
    *bytes = fa__fwd_workspace(&r); /* only a block mask needs scratch */
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_forward_cuda(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v,
                                        fa_tensor o, float *lse, void *workspace,
                                        size_t workspace_size, void *stream)
{
    static const char fn[] = "fa_forward_cuda";
    fa_problem r;
    fa__fwd_params kp;
    fa_status s;
    int major = 0, minor = 0, need, varlen_q, varlen_k, fp8;
    fa__gpu gpu = {};
    cudaError_t e;
    size_t ws_need;
    void *ws = workspace;
    memset(&r, 0, sizeof r);

    /* ---- 1. arguments, before anything touches the device ---- */
    s = fa__check_forward(fn, p, &r, &q, &k, &v, &o, lse, 0);
    if (s != FA_OK) return s;
    if (q.dtype == FA_F32)
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: f32 tensors are not supported on the GPU (the tensor cores take f16 or "
                        "bf16); convert q, k, v and o to FA_F16 or FA_BF16", fn);
    if ((s = fa__check_fp8(fn, p, &r, &q, &k, &v, &o, 0)) != FA_OK) return s;
    fp8 = q.dtype == FA_E4M3;
    if (fp8 && (s = fa__check_fp8_cuda(fn, &r, &o)) != FA_OK) return s;
    if (!fp8 && q.dtype != FA_F16 && q.dtype != FA_BF16)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: q dtype %d is not supported by the GPU forward "
                        "(f16, bf16, or e4m3 with an f16 / bf16 o)", fn, (int)q.dtype);
    if (!fp8 && (k.dtype != q.dtype || v.dtype != q.dtype || o.dtype != q.dtype))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: q, k, v and o must have the same dtype", fn);
    varlen_q = r.cu_seqlens_q != NULL;
    varlen_k = r.cu_seqlens_k != NULL;
    if ((s = fa__check_rows_aligned(fn, "q", &q, varlen_q)) != FA_OK) return s;
    if ((s = fa__check_rows_aligned(fn, "k", &k, varlen_k)) != FA_OK) return s;
    if ((s = fa__check_rows_aligned(fn, "v", &v, varlen_k)) != FA_OK) return s;
    if ((s = fa__check_rows_aligned(fn, "o", &o, varlen_q)) != FA_OK) return s;
    if (lse && ((uintptr_t)lse & 3u))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: lse must be 4-byte aligned", fn);
    if (r.heads_q > 65535 || r.batch > 65535)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: heads_q (%d) and batch (%d) must be <= 65535 "
                        "(CUDA grid limits)", fn, r.heads_q, r.batch);
    if ((s = fa__check_bm_cuda(fn, &r, fp8)) != FA_OK) return s;
    ws_need = fa__fwd_workspace(&r);
    if (workspace && workspace_size < ws_need)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: workspace_size (%zu bytes) is less than the %zu bytes "
                        "needed (fa_forward_cuda_workspace_size: the block mask's sorted lists)", fn,
                        workspace_size, ws_need);
    if (ws_need && ((uintptr_t)workspace & 3u))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: workspace must be 4-byte aligned", fn);
    need = r.head_dim > r.head_dim_v ? r.head_dim : r.head_dim_v;
    if (r.seqlen_q == 0) return FA_OK; /* no query rows: nothing to write */

    /* ---- 2. the device: family, shared-memory limit, SMs ---- */
    if ((s = fa__gpu_query(fn, &gpu, &major, &minor)) != FA_OK) return s;
    if (major < 8)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: needs compute capability 8.0 or newer (this "
                        "device is %d.%d)", fn, major, minor);
    if (fp8 && gpu.family != 3)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: FP8 (e4m3) runs on compute capability 9.0 (H100 / H200) "
                        "only; this device is %d.%d", fn, major, minor);

    /* ---- 3. kernel parameters ---- */
    kp.q = (const uint16_t *)q.data; kp.k = (const uint16_t *)k.data;
    kp.v = (const uint16_t *)v.data; kp.o = (uint16_t *)o.data;
    kp.lse = lse;
    kp.q_batch = q.batch_stride; kp.q_seq = q.seq_stride; kp.q_head = q.head_stride;
    kp.k_batch = k.batch_stride; kp.k_seq = k.seq_stride; kp.k_head = k.head_stride;
    kp.v_batch = v.batch_stride; kp.v_seq = v.seq_stride; kp.v_head = v.head_stride;
    kp.o_batch = o.batch_stride; kp.o_seq = o.seq_stride; kp.o_head = o.head_stride;
    kp.seqlen_q = r.seqlen_q; kp.seqlen_k = r.seqlen_k;
    kp.heads_q = r.heads_q; kp.group = r.heads_q / r.heads_kv;
    kp.d = r.head_dim; kp.dv = r.head_dim_v;
    kp.cu_seqlens_q = r.cu_seqlens_q; kp.cu_seqlens_k = r.cu_seqlens_k; kp.seqlens_k = r.seqlens_k;
    kp.scale = r.scale;
    kp.scale_log2 = r.scale * FA__GPU_LOG2E;
    kp.softcap = r.softcap > 0.0f ? r.softcap : 0.0f;
    kp.scale_cap = kp.softcap > 0.0f ? r.scale / kp.softcap : 0.0f;
    kp.alibi_slopes = r.alibi_slopes;
    kp.has_right = r.causal || r.sliding_window;
    kp.right = r.causal ? 0 : r.window_right; /* causal within a window: j <= i' */
    kp.has_left = r.sliding_window;
    kp.left = r.window_left;
    kp.dropout = r.dropout_p > 0.0f;
    kp.dropout_threshold = kp.dropout ? fa__dropout_threshold(r.dropout_p) : 0u;
    kp.dropout_seed = r.dropout_seed; kp.dropout_offset = r.dropout_offset;
    kp.out_scale = kp.dropout ? 1.0f / (1.0f - r.dropout_p) : 1.0f;
    kp.o_bf16 = o.dtype == FA_BF16;
    kp.extras = kp.softcap > 0.0f || kp.alibi_slopes != NULL || kp.dropout || r.scale < 0.0f;
    kp.dsb_q = kp.dsb_k = kp.dsb_v = NULL;
    kp.ds_q = kp.ds_k = kp.ds_v = 1.0f;
    kp.blk_q = kp.blk_k = kp.v_words = 0;
    memset(&kp.bm, 0, sizeof kp.bm);

    /* ---- 4. launch ---- */
#if !defined(FLASHATTN_NO_HOPPER) && !defined(FLASHATTN_NO_FP8)
    if (fp8) {
        fa__fwd_params_fp8(&kp, &r);
        return fa__dispatch_fp8<0>(fn, kp, r.batch, need, gpu, (cudaStream_t)stream);
    }
#endif
    if (!ws_need)
        return fa__dispatch_head_dim<0>(fn, kp, r.batch, need, q.dtype == FA_BF16, gpu, (cudaStream_t)stream);
    /* a block mask: its lists sorted into the workspace first (>>gpu-bsparse-host;
       one not given is allocated and freed stream-ordered) */
    if (!ws && (s = fa__ws_alloc(fn, &ws, ws_need, (cudaStream_t)stream)) != FA_OK) return s;
    if ((e = fa__bm_prepare(&r, ws, (cudaStream_t)stream, &kp.bm)) != cudaSuccess ||
        (e = fa__fwd_bm_order(&r, &kp.bm, (cudaStream_t)stream)) != cudaSuccess)
        s = fa__cuda_fail(fn, e, "the block mask's sorting kernel");
    else
        s = fa__dispatch_head_dim<0>(fn, kp, r.batch, need, q.dtype == FA_BF16, gpu, (cudaStream_t)stream);
    return workspace ? s : fa__ws_free(fn, ws, (cudaStream_t)stream, s);
}

#ifdef __cplusplus
}
#endif
#endif /* !FA__EMU_NO_FWD */

#if !FA__EMU_NO_DEC
#ifndef FLASHATTN_NO_DECODE
/* ============================================================================
   >>decode  flash-decoding: split-KV, GQA packing, paged KV caches
   ============================================================================

   The problem. Decode runs a few new query tokens (sq = 1..16, usually 1)
   against a KV cache of thousands of tokens. Per sequence and KV head, the
   whole job is: read K and V once (2 * sk * d * 2 bytes) and do 4 * sk * d
   flops per query row. With sq * group query rows (group = heads_q/heads_kv)
   that is a few flops per byte: decode is bound by memory bandwidth, never by
   arithmetic, and every design choice below serves one goal, keep enough
   bytes in flight to saturate HBM while reading each K/V byte once.

   1. GQA packing. The `group` query heads that share a KV head, times the sq
      new tokens, are packed into the rows of ONE tile:
          row r = t * group + hh   (token t, head hq = hk * group + hh)
      so a CTA streams the K/V of head hk once for all of them. With Q rows
      [b, t, hq, d] in memory, rows of one token are adjacent heads.

   2. Tensor cores, even for 1 row. Rows are padded up to the m16n8k16 MMA's
      16. That wastes up to 15/16 of the MMA work, and it does not matter: the
      tensor cores do ~1000 TFLOP/s while bandwidth asks for ~12 TFLOP/s at
      4 rows, so the padded MMAs still take a few percent of the time the
      bytes take. In exchange K and V go from shared memory to the MMA by
      ldmatrix, with no per-element bf16->fp32 conversion and no FMA loop
      (a CUDA-core path would spend 2 instructions per K/V element per row
      on that, and at group = 8 or sq = 16 it would become compute bound).

   3. Warps split the KEYS when rows are few. A CTA has 4 warps; warp (wm, wn)
      owns query rows 16*wm..16*wm+15 of the CTA and the key slice wn of every
      K/V tile. WARPS_M = 1 (<= 16 rows: each warp takes 16 of the tile's 64
      keys), 2 (<= 32 rows; faster here than 4 [ctime-dec-wm]) or 4 (> 32
      rows: the FlashAttention-2 layout, each warp all 64 keys).
      Each warp keeps its own online-softmax state (m, l, O)
      and the warps of one row block merge at the end through shared memory,
      by the same log-sum-exp rule the splits use.

   4. Split-KV (flash-decoding). batch * heads_kv CTAs rarely fill 132 SMs,
      so the keys of each sequence are cut into num_splits ranges, one CTA
      each. Every split writes its normalized partial O (fp32) and its
      log-sum-exp; fa__decode_combine_kernel merges them, a CTA per output
      row, launched as a programmatic dependent of the decode grid (sm_90+)
      so its launch overlaps the decode's tail; the decode grid is itself a
      programmatic dependent of the kernel before it (it waits before its
      first global access). The split count follows
      FlashAttention-2's wave-efficiency rule, with the tile rounding
      counted too (fa__decode_num_splits).

   5. The memory pipeline. K/V tiles of BN = 64 keys go global -> shared by
      cp.async (16-byte copies, zero-fill past the end), STAGES tiles in
      flight (3 at d128: 96 KB of shared memory), one barrier per tile,
      each copy marked L2 evict-first (read once: fa__cp_async16_pol).
      A contiguous cache mostly runs one CTA per SM, a paged one two:
      measured, see fa__decode_setup and fa__decode_grid. Shared rows are swizzled (16-byte chunk index
      XOR row % 8) so ldmatrix reads are free of bank conflicts.

   6. Paged caches. Token n of sequence b lives in page block_table[b][n / P]
      at row n % P; the gather is per key row, so any page size works (P = 1
      too; n / P and n % P are a shift and a mask when P is a power of two).
      The page numbers of the next tile are fetched one tile ahead so their
      latency hides behind the current tile's copies. A paged cache runs a
      kernel instance of its own (fa__dec_kv) whose threads copy rows that
      lie close together, so that a page of 16 rows or more needs one table
      read a thread and tile.

   7. Appending. When k_new / v_new are given, a small copy kernel first
      writes them into the cache slots seqlens_k[b] .. + sq - 1 (stream
      ordered, so the attention kernel then reads them from the cache).

   8. The grid. How many CTAs share an SM and how many splits follow from
      how many CTAs stream at once all the way to the end, since a few
      CTAs left alone at the end stream at a fraction of the rate
      (fa__decode_grid).

   9. Head pairs (d64). A CTA of 4 warps at d64 spends more of its time
      on the math of each byte than one at d128 and streams slower. Where
      batch * heads_kv CTAs need two waves of one CTA per SM and half as
      many still fill one, a CTA of 8 warps takes two KV heads: a tile row
      is key n of both heads, and each warp row computes its own head
      (fa__decode_pairs).

   Log base. Inside the kernels every score is kept in base 2 (s * log2(e)),
   so each exponential is one MUFU.EX2; partial log-sum-exps are base 2 as
   well, and only the final L is converted to the natural log the API
   promises. One base throughout: never mix exp and exp2 on the same value.
*/

/* ---- >>decode-prims  the forward section's PTX wrappers (>>gpu-ptx) and
   swizzle (>>gpu-smem) are used as they are; only these are new (the
   emulator, tests/emu_cuda.h, defines its own). */
__device__ __forceinline__ uint32_t fa__dec_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
#ifndef FLASHATTN_CUDA_EMU
/* Programmatic dependent launch (sm_90+, [decode-pdl]): wait until the grid
   before this one in the stream is done and its writes are visible; let the
   grid after this one start placing its CTAs. */
static __device__ __forceinline__ void fa__grid_dep_wait(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
static __device__ __forceinline__ void fa__grid_dep_launch(void)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
/* fa__cp_async16 with an L2 cache policy: K and V stream through once, so
   their lines are marked the first to evict (createpolicy's evict_first
   for the whole access), and whatever else the GPU keeps in L2 stays:
   faster than plain copies at most measured points. [decode-l2-hint] */
__device__ __forceinline__ uint64_t fa__l2_evict_first(void)
{
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
/* A ptxas bug to know of: nvcc 13.0 (and 13.1, reported elsewhere) can lose
   the definition of the uniform register that holds the policy, and the
   copies then read an undefined one: "an illegal instruction" at run time.
   The kernels of this file as they are compile correctly with nvcc 13.0
   (cuobjdump -sass: every desc[URn] a copy reads is written first;
   tests/check_sass.py); a thread copying 8 consecutive rows of a tile at
   d128 did not, hence RS in fa__dec_traits. [decode-ptxas-policy]
   FLASHATTN_NO_L2_HINT drops the policy (1-4% slower where measured). */
__device__ __forceinline__ void fa__cp_async16_pol(uint32_t smem_addr, const void *gmem, int bytes, uint64_t pol)
{
#ifdef FLASHATTN_NO_L2_HINT
    (void)pol;
    fa__cp_async16(smem_addr, gmem, bytes);
#else
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_addr),
                 "l"(gmem), "r"(bytes), "l"(pol)
                 : "memory");
#endif
}
#endif /* FLASHATTN_CUDA_EMU */

/* ---- >>decode-params  what the kernels see ---------------------------------
   Strides are in elements and already resolved (no zeros). */
typedef struct fa__decode_params {
    const void *q;            /* [b, sq, hq, d] */
    const void *k, *v;        /* cache: [b, cap, hkv, d] or pages [np, P, hkv, d] */
    const void *k_new, *v_new;/* [b, sq, hkv, d] or NULL */
    void *o;                  /* [b, sq, hq, d] */
    float *lse;               /* [b, hq, sq] natural log, or NULL */
    float *o_part;            /* [splits, b*hq*sq, d] fp32 (splits > 1) */
    float *lse_part;          /* [splits, b*hq*sq] base-2 log-sum-exp */
    int64_t q_bs, q_ss, q_hs, o_bs, o_ss, o_hs;
    int64_t k_bs, k_ss, k_hs, v_bs, v_ss, v_hs;
    int64_t kn_bs, kn_ss, kn_hs, vn_bs, vn_ss, vn_hs;
    const int32_t *seqlens_k; /* [b] cache length before the new tokens, or NULL */
    const int32_t *block_table;
    int page_size, pages_per_seq;
    int page_shift;           /* log2(page_size) when it is a power of two, else -1 */
    int capacity;             /* tokens a sequence may hold (contiguous: seqlen_k) */
    int seqlen_k;             /* length when seqlens_k is NULL */
    int batch, sq, hq, hkv, group, rows; /* rows = sq * group */
    int sq_new;               /* sq when k_new was appended, else 0 */
    int row_blocks, num_splits;
    float scale_log2;         /* scale * log2(e) */
    float softcap_pre;        /* scale / softcap (softcap > 0) */
    float softcap_post;       /* softcap * log2(e) */
    int softcap;
    const float *alibi;       /* [hq] slopes or NULL */
    int causal, window, window_left, window_right;
} fa__decode_params;

#define FA__DEC_BN 64       /* keys per K/V tile */
#define FA__DEC_THREADS 128 /* 4 warps */
#define FA__DEC_LOG2E 1.4426950408889634f
#define FA__DEC_LN2 0.6931471805599453f

/* Pipeline depth by head dim (a head pair's CTA, HP = 2, has tiles of twice
   the bytes, fa__decode_kernel): enough bytes in flight per SM (Little's law:
   ~3 TB/s * ~1 us / 132 SMs = ~25 KB) with room for two CTAs per SM at
   d <= 128 (a paged cache runs two, a contiguous one one: fa__decode_setup).
   A stage is 64 keys of K and V: 16 KB (d64), 32 KB (d128), 64 KB (d256:
   two stages, one CTA per SM, and it still fits the 163 KB an A100 allows a
   CTA). At d128, 2 and 4 stages measured slower than 3. [decode-stages] */
__host__ __device__ constexpr int fa__dec_stages(int D) { return D <= 64 ? 5 : D <= 128 ? 3 : 2; }
__host__ __device__ constexpr int fa__dec_tile_bytes(int D) { return FA__DEC_BN * D * 2; }
/* At d256 the O accumulator alone is 128 registers per thread, and a warp
   that owns 32 or 64 keys of a tile (WARPS_M > 1) spills: keep 16-row CTAs
   there (more rows = more CTAs reading the same K/V, mostly from L2). */
__host__ __device__ constexpr int fa__dec_max_warps_m(int D) { return D <= 128 ? 4 : 1; }
template <int D, int WARPS_M, int HP>
__host__ __device__ constexpr int fa__dec_smem_bytes()
{
    /* K stages + V stages (HP heads a row) + Q (16 * WARPS_M rows). The
       epilogue reuses the K/V stages for the warps' fp32 O (4 HP warps x 16
       rows of D + 8 floats), which always fits: HP 64 (D + 8) 4 < 2 stages
       HP tile bytes. */
    return 2 * fa__dec_stages(D) * HP * fa__dec_tile_bytes(D) + 16 * WARPS_M * D * 2;
}

/* Byte offset of 16-byte chunk c of row r in a swizzled tile of D-element
   rows: the forward's fa__swizzle (chunk index XOR row % 8, >>gpu-smem), so the
   8 rows an ldmatrix reads at one logical chunk hit 8 different bank groups. */
template <int D>
__device__ __forceinline__ uint32_t fa__dec_swz(int r, int c)
{
    return (uint32_t)(2 * fa__swizzle<D>(r, c));
}

/* n / P and n % P for the page size P: a shift and a mask when P is a power
   of two (the usual 16, 64, 256), else the division, which costs about 20
   instructions, twice for every row of every tile: with the division for
   every page size, paged caches ran far below the contiguous rate.
   [decode-page-shift] */
__device__ __forceinline__ int fa__dec_page_index(const fa__decode_params &p, int n)
{
    return p.page_shift >= 0 ? n >> p.page_shift : n / p.page_size;
}
__device__ __forceinline__ int fa__dec_page_row(const fa__decode_params &p, int n)
{
    return p.page_shift >= 0 ? n & (p.page_size - 1) : n % p.page_size;
}

/* Element offset of token n of sequence b (head 0) in the cache, for K (kv=0)
   or V (kv=1). `page` is block_table[b][n / P], looked up by the caller. */
__device__ __forceinline__ int64_t fa__dec_cache_offset(const fa__decode_params &p, int b,
                                                        int n, int page, int64_t bs, int64_t ss)
{
    if (p.block_table) return (int64_t)page * bs + (int64_t)fa__dec_page_row(p, n) * ss;
    return (int64_t)b * bs + (int64_t)n * ss;
}

/* Which caches a kernel instance serves (its KV parameter, fa__dec_kv).
   A paged cache runs an instance of its own at every head dim, whose
   threads copy rows that lie close together (PAGED_ONLY in the kernel): at
   page 16 and up one table read per thread and tile. A contiguous cache
   runs one without the paged code at d64 and d256; at d128 it runs the
   instance compiled for both kinds (EITHER: the block table decides at
   run time), because the same kernel compiled without the paged code ran
   batch 32 slightly slower. The separate instances measured faster than
   one for both (one query row block of 16: WM = 1, or a head pair). More
   rows (WM > 1, one head a CTA: several query tokens, or large groups)
   run the instance for both kinds at every head dim: four fewer kernels a
   dtype and head dim to compile, where more math per byte read hides the
   copy's extra instructions [decode-kv-instances]. */
enum { FA__DEC_EITHER = 0, FA__DEC_CONTIG = 1, FA__DEC_PAGED = 2 };
__host__ __device__ constexpr int fa__dec_kv(int D, int WM, int HP, bool paged)
{
    return WM > 1 && HP == 1 ? FA__DEC_EITHER : paged ? FA__DEC_PAGED : D == 128 ? FA__DEC_EITHER : FA__DEC_CONTIG;
}

/* ---- >>decode-kernel  one CTA = (sequence b, KV heads, row block, split) --
   Grid: x = row block + row_blocks * split, y = KV head / HP, z = b.

   HP = KV heads per CTA. HP = 1: 4 warps; the CTA's rows are one KV head's
   packed rows (row block rb of them). HP = 2 (a head pair; rows <= 16, so
   one row block, and WARPS_M = 2): 8 warps, warp row wm holds the 16-row
   block of KV head 2 * blockIdx.y + wm, and a K/V tile row is key n of
   BOTH heads, 2 * D elements (512 contiguous bytes at d128 when the heads
   are adjacent): each warp reads its own head's half of the row, 16 keys
   of the 64, as in the single-head CTA. Why pairs: a batch of 32 x 8 KV
   heads is 256 CTAs, two waves of one CTA per SM; paired, 128 CTAs of
   twice the bytes run in one wave, and each SM has 8 warps to hide the
   latency of its math instead of 4. The plan pairs d64 heads only
   (fa__decode_pairs). Why 8 warps: with 4 (two heads' keys, 16 a warp)
   the issue rate, not memory, bound the kernel. [decode-pairs] */
/* The compile-time shape of one kernel instance, from its parameters: head
   dim D, WARPS_M warp rows of 16 query rows, HP KV heads a CTA, KV the
   caches it serves (fa__dec_kv). */
template <int D_, int WARPS_M_, int HP_, int KV_> struct fa__dec_traits {
    static constexpr int D = D_, WARPS_M = WARPS_M_, HP = HP_, KV = KV_;
    static constexpr int NT = FA__DEC_THREADS * HP, NW = NT / 32; /* threads, warps */
    static constexpr int BN = FA__DEC_BN;            /* keys per tile */
    static constexpr int RW = HP * D;                /* elements per K/V tile row */
    static constexpr int STAGES = fa__dec_stages(D);
    static constexpr int WARPS_N = NW / WARPS_M;
    static constexpr int KW = BN / WARPS_N;          /* keys per warp per tile */
    static constexpr int NK = KW / 16;               /* 16-key MMA steps per warp per tile */
    static constexpr int NS = D <= 128 ? NK : 1;     /* 16-key steps per softmax update */
    static constexpr int ROWS = 16 * WARPS_M;        /* query rows of this CTA */
    static constexpr int CH = RW / 8;                /* 16-byte chunks per tile row */
    static constexpr int RSTEP = NT / CH;            /* rows one pass of the CTA copies */
    static constexpr int RPT = BN / RSTEP;           /* K (or V) rows each thread copies per tile */
    static constexpr bool PAGED_ONLY = KV == FA__DEC_PAGED; /* a thread's rows of a tile close together */
    /* rows between a thread's rows of a tile: RSTEP, or PAGED_ONLY 1, but 2
       at d128, whose kernels ptxas 13.0 miscompiles with 1 (>>decode-prims) */
    static constexpr int RS = PAGED_ONLY ? (D == 128 ? 2 : 1) : RSTEP;
    static constexpr int SPAN = RS * RPT;            /* PAGED_ONLY: a thread's rows lie within SPAN rows */
    static constexpr int TILE = HP * fa__dec_tile_bytes(D);
    static constexpr bool Q_IN_REGS = D <= 128;      /* d256: Q fragments would cost 64 registers */
    static constexpr int QF = Q_IN_REGS ? D / 16 : 1; /* Q fragments held in registers */
    static constexpr int OPAD = D + 8;               /* fp32 row stride of the epilogue's O */
    static_assert(HP == 1 || (HP == 2 && WARPS_M == 2), "a head pair gives each head one warp row");
    static_assert(BN * RW * 2 == TILE && KW % 16 == 0, "tile bytes; 16-key steps");
};

/* Where a CTA sits (grid x = row block + row_blocks * split, y = KV head /
   HP, z = b), and CTA row r (0..ROWS-1)'s KV head and packed row. */
template <class T> struct fa__dec_cta {
    int rb, split, hk0, b; /* row block, split, first KV head, sequence */
    __device__ __forceinline__ int head_of(int r) const { return T::HP == 1 ? hk0 : hk0 + r / 16; }
    __device__ __forceinline__ int row_of(int r) const { return T::HP == 1 ? rb * T::ROWS + r : r % 16; }
};

/* A thread's place in the MMA fragments and its ldmatrix rows and chunks. */
struct fa__dec_lane {
    int g, tq;        /* MMA fragment coordinates: row g (and g + 8), column pair tq */
    int qa_row, qa_c; /* A of Q K^T from Q [row][d]: (rows 0-7, k 0-7), (8-15, 0-7),
                         (0-7, 8-15), (8-15, 8-15); lane L gives row L % 8 of matrix L / 8 */
    int kb_row, kb_c; /* B of Q K^T from K [key][d] (plain): (keys 0-7, d 0-7), (0-7, 8-15),
                         (8-15, 0-7), (8-15, 8-15) -> b0, b1 of n-tile 0, then of n-tile 1 */
    int vb_row, vb_c; /* B of P V from V [key][d] (.trans): (keys 0-7, d 0-7), (8-15, 0-7),
                         (0-7, 8-15), (8-15, 8-15) -> b0, b1 of d-tile 2j, then of 2j + 1 */
    int kc0;          /* the warp's half of a head pair's tile row, in 16-byte chunks */
};

/* The keys this CTA's split reads: sk keys in the sequence, my_tiles tiles
   of BN from key n_first. */
struct fa__dec_keys {
    int sk, sq, my_tiles, n_first; /* (sq: the new tokens, p.sq) */
};
template <class T>
__device__ __forceinline__ fa__dec_keys fa__dec_split_keys(const fa__decode_params &p, const fa__dec_cta<T> &c)
{
    constexpr int BN = T::BN;
    fa__dec_keys k;
    /* Keys this sequence attends to: the cache plus the appended tokens,
       clamped to the capacity so a bad length cannot read outside. */
    int sk = (p.seqlens_k ? p.seqlens_k[c.b] : p.seqlen_k) + p.sq_new;
    sk = min(sk, p.capacity);
    const int sq = p.sq;
    /* Keys left of every row's window are never loaded. With PAGED_ONLY
       the first key loaded is a multiple of BN, so a thread's rows lie within
       an aligned block of SPAN rows (one_page, fa__dec_kv_copy); keys of that
       first tile left of the window are masked like any other. */
    const int lo = p.window ? max(0, sk - sq - p.window_left) & (T::PAGED_ONLY ? ~(BN - 1) : ~0) : 0;
    const int n_tiles = sk > lo ? (sk - lo + BN - 1) / BN : 0;
    const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
    const int t_begin = c.split * per_split;
    k.sk = sk;
    k.sq = sq;
    k.my_tiles = max(0, min(n_tiles, t_begin + per_split) - t_begin);
    k.n_first = lo + t_begin * BN; /* first key of this split */
    return k;
}

/* Q: the CTA's ROWS packed rows -> shared (zero rows past the real ones),
   one cp.async group. */
template <class T>
__device__ __forceinline__ void fa__dec_load_q(const fa__decode_params &p, const fa__dec_cta<T> &c,
                                               unsigned char *qs, int tid)
{
    constexpr int D = T::D;
    for (int i = tid; i < T::ROWS * (D / 8); i += T::NT) {
        int r = i / (D / 8), ch = i % (D / 8), row = c.row_of(r);
        int ok = row < p.rows;
        int t = ok ? row / p.group : 0, hh = ok ? row % p.group : 0;
        const uint16_t *src = (const uint16_t *)p.q + (int64_t)c.b * p.q_bs + (int64_t)t * p.q_ss +
                       (int64_t)(c.head_of(r) * p.group + hh) * p.q_hs + ch * 8;
        fa__cp_async16(fa__dec_smem_addr(qs + fa__dec_swz<D>(r, ch)), src, ok ? 16 : 0);
    }
    fa__cp_async_commit();
}

/* ---- the copy of one K/V tile: thread copies chunk tid % CH of rows
   my_r + RS * i, i < RPT (a chunk of head hk0 + my_c / (D / 8) when the
   row holds a pair): rows RSTEP apart from my_r = tid / CH, or with
   PAGED_ONLY (an instance for paged caches only, fa__dec_kv) rows within
   one block of SPAN = RS * RPT: thread group q = tid / CH takes block
   q / RS, rows q % RS, q % RS + RS, ... of it (RS = 1: RPT consecutive
   rows; RS = 2, d128: the even or the odd rows of 16). Those lie in ONE
   page when pages hold SPAN rows or more (a power of two: 16, 64, 256
   and every larger one): one_page, a table read and a 64-bit offset a
   tile instead of one a row. Page numbers come from `pages`, fetched one
   tile ahead (fetch_pages) so the issue never waits on the table; `pages`
   is the caller's array (as a member, it would keep the whole struct out of
   registers until the loops are unrolled). */
template <class T> struct fa__dec_kv_copy {
    static constexpr int D = T::D, BN = T::BN, RPT = T::RPT, RS = T::RS;
    const uint16_t *kbase, *vbase; /* head hk0 of the K, V caches */
    const int32_t *btab;           /* sequence b's block table, or 0 */
    int b, sk, my_tiles, n_first;
    int my_c, my_r;
    bool one_page;                 /* pages[0] serves every row */
    uint64_t kv_policy;            /* the K / V copies' L2 policy */
    int64_t k_col, v_col, k_rstep, v_rstep;
    const uint16_t *k_row0, *v_row0; /* contiguous: this thread's first row of the split */

    /* the CTA's caches: its first KV head, its sequence's block table */
    __device__ __forceinline__ void bind(const fa__decode_params &p, const fa__dec_cta<T> &c)
    {
        kbase = (const uint16_t *)p.k + (int64_t)c.hk0 * p.k_hs;
        vbase = (const uint16_t *)p.v + (int64_t)c.hk0 * p.v_hs;
        btab = T::KV != FA__DEC_CONTIG && p.block_table ? p.block_table + (int64_t)c.b * p.pages_per_seq : 0;
        b = c.b;
    }
    /* this thread's rows and chunk of the split's tiles; no pages yet */
    __device__ __forceinline__ void init(const fa__decode_params &p, const fa__dec_keys &k, int (&pages)[RPT], int tid)
    {
        sk = k.sk; my_tiles = k.my_tiles; n_first = k.n_first;
        my_c = tid % T::CH;
        const int my_q = tid / T::CH;
        my_r = T::PAGED_ONLY ? T::SPAN * (my_q / RS) + my_q % RS : my_q;
        one_page = T::PAGED_ONLY && p.page_shift >= 0 && p.page_size >= T::SPAN;
        kv_policy = fa__l2_evict_first();
        k_col = (int64_t)(my_c / (D / 8)) * p.k_hs + (my_c % (D / 8)) * 8;
        v_col = (int64_t)(my_c / (D / 8)) * p.v_hs + (my_c % (D / 8)) * 8;
#pragma unroll
        for (int i = 0; i < RPT; i++) pages[i] = 0;
        k_rstep = RS * p.k_ss;
        v_rstep = RS * p.v_ss;
        k_row0 = kbase + (int64_t)b * p.k_bs + (int64_t)(n_first + my_r) * p.k_ss + k_col;
        v_row0 = vbase + (int64_t)b * p.v_bs + (int64_t)(n_first + my_r) * p.v_ss + v_col;
    }

    __device__ __forceinline__ void fetch_pages(const fa__decode_params &p, int (&pages)[RPT], int tile) const
    {
        if (!btab) return;
        if (one_page) {
            const int n = n_first + tile * BN + my_r;
            pages[0] = (tile < my_tiles && n < sk) ? __ldg(btab + (n >> p.page_shift)) : 0;
            return;
        }
        if (p.page_shift >= 0) { /* the usual power-of-two page: a shift a row */
#pragma unroll
            for (int i = 0; i < RPT; i++) {
                int n = n_first + tile * BN + my_r + RS * i;
                pages[i] = (tile < my_tiles && n < sk) ? __ldg(btab + (n >> p.page_shift)) : 0;
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            int n = n_first + tile * BN + my_r + RS * i;
            pages[i] = (tile < my_tiles && n < sk) ? __ldg(btab + fa__dec_page_index(p, n)) : 0;
        }
    }

    /* The copy of a tile whose rows all exist (every tile but a split's
       last), in as few instructions as the cache allows. A contiguous cache:
       this thread's first row of the split as a pointer (k_row0, v_row0;
       used only then), stepped by RS rows within a tile and by BN rows a
       tile, an add and a copy per row. one_page: the same from the row's
       place in pages[0]. Pages of a power-of-two size: the page from
       `pages`, the row within it by a mask. The general path after them
       (the last tile, any page size) pays a bounds check and the cache
       offset's multiplies and page arithmetic per row. [decode-copy] */
    __device__ __forceinline__ void issue(const fa__decode_params &p, const int (&pages)[RPT], int tile,
                                          unsigned char *ks, unsigned char *vs) const
    {
        constexpr int TILE = T::TILE, RW = T::RW;
        const int stage = tile % T::STAGES;
        const uint32_t kdst = fa__dec_smem_addr(ks + stage * TILE);
        const uint32_t vdst = fa__dec_smem_addr(vs + stage * TILE);
        const int nb = n_first + tile * BN + my_r; /* this thread's first row of the tile */
        const bool whole = nb + RS * (RPT - 1) < sk; /* every row of this thread exists */
        if (whole && ((!T::PAGED_ONLY && !btab) || one_page)) {
            /* the thread's first row of the tile, then a step of RS rows */
            const uint16_t *kq, *vq;
            if (T::PAGED_ONLY) { /* (so one_page: this instance has no contiguous path) */
                const int row = nb & (p.page_size - 1);
                kq = kbase + (int64_t)pages[0] * p.k_bs + (int64_t)row * p.k_ss + k_col;
                vq = vbase + (int64_t)pages[0] * p.v_bs + (int64_t)row * p.v_ss + v_col;
            } else {
                kq = k_row0 + (int64_t)tile * BN * p.k_ss;
                vq = v_row0 + (int64_t)tile * BN * p.v_ss;
            }
#pragma unroll
            for (int i = 0; i < RPT; i++, kq += k_rstep, vq += v_rstep) {
                const uint32_t so = fa__dec_swz<RW>(my_r + RS * i, my_c);
                fa__cp_async16_pol(kdst + so, kq, 16, kv_policy);
                fa__cp_async16_pol(vdst + so, vq, 16, kv_policy);
            }
            return;
        }
        if (btab && p.page_shift >= 0 && whole) {
            /* pages of a power-of-two size: the row within its page by a mask */
            const int pmask = p.page_size - 1;
#pragma unroll
            for (int i = 0; i < RPT; i++) {
                const int row = (nb + RS * i) & pmask;
                const uint32_t so = fa__dec_swz<RW>(my_r + RS * i, my_c);
                fa__cp_async16_pol(kdst + so, kbase + (int64_t)pages[i] * p.k_bs + (int64_t)row * p.k_ss + k_col, 16,
                                   kv_policy);
                fa__cp_async16_pol(vdst + so, vbase + (int64_t)pages[i] * p.v_bs + (int64_t)row * p.v_ss + v_col, 16,
                                   kv_policy);
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            int r = my_r + RS * i, n = n_first + tile * BN + r;
            int ok = n < sk;
            int nn = ok ? n : 0; /* a valid address even when nothing is read */
            int page = ok ? (one_page ? pages[0] : pages[i]) : 0;
            int64_t ko = fa__dec_cache_offset(p, b, nn, page, p.k_bs, p.k_ss);
            int64_t vo = fa__dec_cache_offset(p, b, nn, page, p.v_bs, p.v_ss);
            uint32_t so = fa__dec_swz<RW>(r, my_c);
            /* zero-fill past the end: masked P is 0, and 0 * garbage could be NaN */
            fa__cp_async16_pol(kdst + so, kbase + ko + k_col, ok ? 16 : 0, kv_policy);
            fa__cp_async16_pol(vdst + so, vbase + vo + v_col, ok ? 16 : 0, kv_policy);
        }
    }
};

/* S = Q K^T for the warp's 16 rows x 16 NS keys from tile row kr of the K
   tile at kt (fp32). Q comes from registers (qf) or, at d256, shared memory. */
template <class T, bool BF16>
__device__ __forceinline__ void fa__dec_qk(float (&s)[2 * T::NS][4], const uint32_t (&qf)[T::QF][4],
                                           uint32_t q_addr, uint32_t kt, int kr, const fa__dec_lane &ln)
{
    constexpr int D = T::D, NS = T::NS;
#pragma unroll
    for (int j = 0; j < 2 * NS; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        if (T::Q_IN_REGS) {
            a[0] = qf[T::Q_IN_REGS ? kk : 0][0]; a[1] = qf[T::Q_IN_REGS ? kk : 0][1];
            a[2] = qf[T::Q_IN_REGS ? kk : 0][2]; a[3] = qf[T::Q_IN_REGS ? kk : 0][3];
        } else {
            fa__ldmatrix_x4(a, q_addr + fa__dec_swz<D>(ln.qa_row, 2 * kk + ln.qa_c));
        }
#pragma unroll
        for (int c = 0; c < NS; c++) {
            uint32_t bk[4];
            fa__ldmatrix_x4(bk, kt + fa__dec_swz<T::RW>(kr + 16 * c + ln.kb_row, ln.kc0 + 2 * kk + ln.kb_c));
            fa__mma16816<BF16>(s[2 * c], a, bk[0], bk[1]);
            fa__mma16816<BF16>(s[2 * c + 1], a, bk[2], bk[3]);
        }
    }
}

/* Scores in base 2, then softcap, ALiBi and masks. Element e of s[j] is
   row g + 8 * (e >> 1), key key0 + 8 * j + 2 * tq + (e & 1); ip and slope2
   are the rows' key positions and ALiBi slopes (the kernel's per-row constants). */
template <int NS>
__device__ __forceinline__ void fa__dec_scores(const fa__decode_params &p, float (&s)[2 * NS][4], int key0,
                                               const int (&ip)[2], const float (&slope2)[2], int sk, bool need_mask,
                                               int tq)
{
#pragma unroll
    for (int j = 0; j < 2 * NS; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = e >> 1, key = key0 + 8 * j + 2 * tq + (e & 1);
            float x = s[j][e];
            if (p.softcap) x = p.softcap_post * tanhf(x * p.softcap_pre);
            else x *= p.scale_log2;
            if (p.alibi) x -= slope2[h] * fabsf((float)(ip[h] - key));
            if (need_mask) {
                bool vis = key < sk;
                if (p.causal) vis = vis && key <= ip[h];
                if (p.window) vis = vis && key >= ip[h] - p.window_left && key <= ip[h] + p.window_right;
                if (!vis) x = -INFINITY;
            }
            s[j][e] = x;
        }
    }
}

/* Online softmax (online softmax; FlashAttention-2 Alg. 1 line 9), base 2:
   the new max, the old sum and accumulator rescaled by 2^(m_old - m_new),
   and s turned into P = 2^(s - m_new), whose sum joins l. */
template <int NS, int D>
__device__ __forceinline__ void fa__dec_softmax(float (&s)[2 * NS][4], float (&m)[2], float (&l)[2],
                                                float (&o)[D / 8][4])
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 2 * NS; j++) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        /* a row lives in one quad (4 lanes): reduce across it */
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[h], mx);
        /* A row that has seen only masked keys has m = -inf: use 0 as
           the reference so 2^(-inf - 0) = 0 instead of 2^(-inf + inf) = NaN. */
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fa__exp2(m[h] - m_ref); /* rescale of the old state */
        m[h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < 2 * NS; j++) {
            s[j][2 * h] = fa__exp2(s[j][2 * h] - m_ref);
            s[j][2 * h + 1] = fa__exp2(s[j][2 * h + 1] - m_ref);
            sum += s[j][2 * h] + s[j][2 * h + 1];
        }
        l[h] = l[h] * alpha + sum;
#pragma unroll
        for (int j = 0; j < D / 8; j++) { o[j][2 * h] *= alpha; o[j][2 * h + 1] *= alpha; }
    }
}

/* O += P V for the 16 NS keys from tile row kr of the V tile at vt. The C
   fragments of n-tiles 2c, 2c + 1 of S, rounded to f16/bf16, are exactly
   the A fragment of the 16-key step c: no shuffles. */
template <class T, bool BF16>
__device__ __forceinline__ void fa__dec_pv(float (&o)[T::D / 8][4], const float (&s)[2 * T::NS][4], uint32_t vt,
                                           int kr, const fa__dec_lane &ln)
{
#pragma unroll
    for (int c = 0; c < T::NS; c++) {
        uint32_t a[4];
        a[0] = fa__pack2<BF16>(s[2 * c][0], s[2 * c][1]);
        a[1] = fa__pack2<BF16>(s[2 * c][2], s[2 * c][3]);
        a[2] = fa__pack2<BF16>(s[2 * c + 1][0], s[2 * c + 1][1]);
        a[3] = fa__pack2<BF16>(s[2 * c + 1][2], s[2 * c + 1][3]);
#pragma unroll
        for (int j = 0; j < T::D / 16; j++) {
            uint32_t bv[4];
            fa__ldmatrix_x4_trans(bv, vt + fa__dec_swz<T::RW>(kr + 16 * c + ln.vb_row, ln.kc0 + 2 * j + ln.vb_c));
            fa__mma16816<BF16>(o[2 * j], a, bv[0], bv[1]);
            fa__mma16816<BF16>(o[2 * j + 1], a, bv[2], bv[3]);
        }
    }
}

/* The epilogue: merge the WARPS_N key slices of each row block through
   shared memory (the K/V stages, no longer read), by the same log-sum-exp
   rule the splits use, then write O and L (one split) or the split's
   partial O and base-2 L (fa__decode_combine_kernel merges those). */
template <class T, bool BF16>
__device__ __forceinline__ void fa__dec_epilogue(const fa__decode_params &p, const fa__dec_cta<T> &c,
                                                 unsigned char *smem, const float (&m)[2], const float (&l)[2],
                                                 const float (&o)[T::D / 8][4], int sq, int tid, int warp,
                                                 const fa__dec_lane &ln)
{
    constexpr int D = T::D, OPAD = T::OPAD, NW = T::NW, WARPS_N = T::WARPS_N;
    const int g = ln.g, tq = ln.tq;
    fa__cp_async_wait<0>(); /* no copy may still be writing the stages we reuse */
    __syncthreads();            /* and every warp is done reading K/V from them */
    float *os = (float *)smem;                  /* [NW warps][16][OPAD] */
    float *ms = os + NW * 16 * OPAD;            /* [NW warps][16] */
    float *ls = ms + NW * 16;                   /* [NW warps][16] */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float lsum = fa__quad_sum(l[h]);
        if (tq == 0) { ms[warp * 16 + g + 8 * h] = m[h]; ls[warp * 16 + g + 8 * h] = lsum; }
    }
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        float *r0 = os + (warp * 16 + g) * OPAD + 8 * j + 2 * tq;
        *reinterpret_cast<float2 *>(r0) = make_float2(o[j][0], o[j][1]);
        *reinterpret_cast<float2 *>(r0 + 8 * OPAD) = make_float2(o[j][2], o[j][3]);
    }
    __syncthreads(); /* all warps' partial (m, l, O) are in shared memory */

    /* Thread per (row, 4 columns): O = sum_w 2^(m_w - M) O_w / l with
       l = sum_w 2^(m_w - M) l_w, the same log-sum-exp merge as the splits. */
    const bool final_out = p.num_splits == 1;
    for (int i = tid; i < T::ROWS * (D / 4); i += T::NT) {
        const int r = i / (D / 4), c4 = (i % (D / 4)) * 4;
        const int row = c.row_of(r), hk = c.head_of(r);
        if (row >= p.rows) continue;
        const int rwm = r / 16, r16 = r % 16;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < WARPS_N; w++) M = fmaxf(M, ms[(rwm * WARPS_N + w) * 16 + r16]);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        float lsum = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < WARPS_N; w++) {
                const int ww = rwm * WARPS_N + w;
                const float f = fa__exp2(ms[ww * 16 + r16] - M); /* 0 for an empty slice */
                const float4 v4 = *reinterpret_cast<const float4 *>(os + (ww * 16 + r16) * OPAD + c4);
                lsum += f * ls[ww * 16 + r16];
                acc.x += f * v4.x; acc.y += f * v4.y; acc.z += f * v4.z; acc.w += f * v4.w;
            }
        }
        /* a row that saw no key: O = 0, L = -inf (never 0/0) */
        const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
        const float lse2 = lsum > 0.f ? M + __log2f(lsum) : -INFINITY;
        acc.x *= inv; acc.y *= inv; acc.z *= inv; acc.w *= inv;
        const int t = row / p.group, h = hk * p.group + row % p.group;
        const int64_t orow = ((int64_t)c.b * p.hq + h) * sq + t; /* index in L's layout */
        if (final_out) {
            uint16_t *dst = (uint16_t *)p.o + (int64_t)c.b * p.o_bs + (int64_t)t * p.o_ss + (int64_t)h * p.o_hs + c4;
            /* 4 values, 8 bytes: aligned, since strides are multiples of 8 elements */
            *reinterpret_cast<uint2 *>(dst) = make_uint2(fa__pack2<BF16>(acc.x, acc.y), fa__pack2<BF16>(acc.z, acc.w));
            if (p.lse && c4 == 0) p.lse[orow] = lse2 * FA__DEC_LN2;
        } else {
            const int64_t prow = (int64_t)c.split * p.batch * p.hq * sq + orow;
            *reinterpret_cast<float4 *>(p.o_part + prow * D + c4) = acc;
            if (c4 == 0) p.lse_part[prow] = lse2;
        }
    }
}

/* The kernel: Flash-Decoding's split of the keys, FlashAttention-2's loop
   over K/V tiles within it (Alg. 1), the warps' slices merged at the end. */
template <int D, int WARPS_M, bool BF16, int HP, int KV>
__global__ void __launch_bounds__(FA__DEC_THREADS * HP)
fa__decode_kernel(const fa__decode_params p)
{
    typedef fa__dec_traits<D, WARPS_M, HP, KV> T;
    constexpr int BN = T::BN, STAGES = T::STAGES, TILE = T::TILE;

    extern __shared__ __align__(128) unsigned char fa__dec_smem[];
    unsigned char *ks = fa__dec_smem;                     /* STAGES K tiles */
    unsigned char *vs = fa__dec_smem + STAGES * TILE;     /* STAGES V tiles */
    unsigned char *qs = fa__dec_smem + 2 * STAGES * TILE; /* ROWS x D */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
    fa__dec_lane ln;
    ln.g = lane >> 2; ln.tq = lane & 3;
    fa__dec_cta<T> cta;
    cta.rb = blockIdx.x % p.row_blocks; cta.split = blockIdx.x / p.row_blocks;
    cta.hk0 = HP * blockIdx.y; cta.b = blockIdx.z;
    ln.kc0 = HP == 1 ? 0 : wm * (D / 8);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* This grid is launched as a programmatic dependent of whatever ran
       before it in the stream (fa__decode_launch_t): its CTAs may be placed
       while that grid is still finishing. Nothing global is touched before
       this wait, which returns once that grid is done and its writes are
       visible (seqlens_k, the cache, q may all come from it); it hides the
       launch gap between the two kernels. [decode-pdl] */
    fa__grid_dep_wait();
#endif
    const fa__dec_keys keys = fa__dec_split_keys(p, cta);
    const int sk = keys.sk, sq = keys.sq, my_tiles = keys.my_tiles;
    fa__dec_kv_copy<T> kv;
    kv.bind(p, cta);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Let our dependent (the combine kernel, or the next call) start its
       CTAs now: they wait in griddepcontrol.wait until this whole grid has
       finished, so the launch gap between the two kernels is hidden. */
    fa__grid_dep_launch();
#endif
    fa__dec_load_q(p, cta, qs, tid);
    int pages[T::RPT]; /* block-table entries of this thread's rows of the next tile */
    kv.init(p, keys, pages, tid);

    /* ---- prologue: STAGES - 1 tiles in flight before any math (a loop,
       not unrolled: each copy of fetch_pages and issue is large, and it
       runs once a CTA [ctime-dec-prologue]) ---- */
#pragma unroll 1
    for (int s = 0; s < STAGES - 1; s++) {
        kv.fetch_pages(p, pages, s);
        if (s < my_tiles) kv.issue(p, pages, s, ks, vs);
        fa__cp_async_commit(); /* empty groups keep the group count uniform */
    }
    kv.fetch_pages(p, pages, STAGES - 1);

    /* ---- per-row constants: this thread holds rows g and g + 8 of its warp ---- */
    int ip[2];        /* bottom-right aligned key position of the row's query */
    float slope2[2];  /* ALiBi slope * log2(e) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = wm * 16 + ln.g + 8 * h;
        int rr = min(cta.row_of(r), p.rows - 1);
        int t = rr / p.group;
        ip[h] = t + sk - sq;
        slope2[h] = p.alibi ? p.alibi[cta.head_of(r) * p.group + rr % p.group] * FA__DEC_LOG2E : 0.f;
    }

    /* Online-softmax state (FlashAttention-2 Alg. 1 lines 5-10), base 2:
       m = running max of the scores, l = this thread's share of the running
       sum of 2^(s - m) (the quad is summed once, at the end), o = unscaled
       accumulator of P V for rows g (o[j][0..1]) and g + 8 (o[j][2..3]). */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    /* Q lands first (it was the first commit group). */
    fa__cp_async_wait<STAGES - 1>();
    __syncthreads(); /* every thread's Q chunks are visible to every warp */
    uint32_t qf[T::QF][4];
    const uint32_t q_addr_lane = fa__dec_smem_addr(qs); /* + swizzle per k-step */
    ln.qa_row = wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8; ln.qa_c = lane >> 4;
    if (T::Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < T::QF; kk++)
            fa__ldmatrix_x4(qf[kk], q_addr_lane + fa__dec_swz<D>(ln.qa_row, 2 * kk + ln.qa_c));
    }
    ln.kb_row = (lane & 7) + (lane >> 4) * 8; ln.kb_c = (lane >> 3) & 1;
    ln.vb_row = (lane & 7) + ((lane >> 3) & 1) * 8; ln.vb_c = lane >> 4;

    for (int it = 0; it < my_tiles; it++) {
        fa__cp_async_wait<STAGES - 2>(); /* this thread's copies of tile `it` are done */
        __syncthreads(); /* (1) everyone's copies of tile `it` are visible;
                            (2) every warp finished tile it - 1, so its stage,
                                (it - 1) % STAGES = (it + STAGES - 1) % STAGES,
                                may be overwritten by the issue just below. */
        if (it + STAGES - 1 < my_tiles) kv.issue(p, pages, it + STAGES - 1, ks, vs);
        fa__cp_async_commit();
        kv.fetch_pages(p, pages, it + STAGES); /* used one iteration from now */

        const int stage = it % STAGES;
        const uint32_t kt = fa__dec_smem_addr(ks + stage * TILE);
        const uint32_t vt = fa__dec_smem_addr(vs + stage * TILE);
        const int n0 = keys.n_first + it * BN; /* first key of the tile */
        const int kw0 = wn * T::KW;             /* this warp's first key within the tile */

        /* Does any key of this tile need a mask (past the end, causal, window)? */
        const bool need_mask = n0 + BN > sk ||
                               (p.causal && n0 + BN - 1 > sk - sq) ||
                               (p.window && (n0 < sk - 1 - p.window_left ||
                                             n0 + BN - 1 > sk - sq + p.window_right));

        /* The warp's KW keys in steps of 16 * NS: the whole slice at once at
           d <= 128 (one max/rescale per tile), 16 keys at a time at d256,
           where the S fragments of a whole slice would not fit the registers. */
#pragma unroll
        for (int c0 = 0; c0 < T::NK; c0 += T::NS) {
            const int kr = kw0 + 16 * c0; /* the step's first key row in the tile */
            float s[2 * T::NS][4];
            fa__dec_qk<T, BF16>(s, qf, q_addr_lane, kt, kr, ln);
            fa__dec_scores<T::NS>(p, s, n0 + kr, ip, slope2, sk, need_mask, ln.tq);
            fa__dec_softmax<T::NS, D>(s, m, l, o);
            fa__dec_pv<T, BF16>(o, s, vt, kr, ln);
        }
    }

    fa__dec_epilogue<T, BF16>(p, cta, fa__dec_smem, m, l, o, sq, tid, warp, ln);
}

/* ---- >>decode-combine  merge the splits by log-sum-exp ----------------------
   One CTA per output row (b, h, t), for any number of splits S:
     L = log2 sum_s 2^LSE_s,   O = sum_s 2^(LSE_s - L) O_s   (Flash-Decoding)
   The cost is latency, not bytes: at batch 1 there are only b * hq * sq rows
   (32 in the benchmark) and each reads S partial rows that the decode kernel
   has just written to L2. So every read is issued as early as possible and
   the whole merge is ONE round trip for up to 32 splits: warp w takes splits
   w, w + 4, ... in batches of 8, loading each split's LSE and its partial
   row (lane = D/32 columns) together, and folds a batch into a running
   (m, l, acc) the way the decode kernel folds key tiles:
     m' = max(m, LSE_s),  l' = 2^(m - m') l + sum_s 2^(LSE_s - m'),
     acc' = 2^(m - m') acc + sum_s 2^(LSE_s - m') O_s;
   then warp 0 merges the 4 warps' (m, l, acc) by the same rule.
   (The first version, a warp per row walking the splits one dependent load at
   a time, cost batch 1 with a 4k cache a fifth of its time.) */
template <int D, bool BF16>
__global__ void __launch_bounds__(128)
fa__decode_combine_kernel(const fa__decode_params p)
{
    constexpr int PER = D / 32; /* columns per lane: 2, 4 or 8 */
    constexpr int BATCH = 8;    /* splits a warp loads before it adds */
    FA__SHARED float part[4][D];
    FA__SHARED float part_m[4], part_l[4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t R = (int64_t)p.batch * p.hq * p.sq;
    const int64_t row = blockIdx.x;
    const int S = p.num_splits;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    /* Launched as a programmatic dependent of the decode kernel (see
       fa__decode_launch_t): this CTA may start while that grid still runs,
       and waits here until all of its writes are visible. The next kernel
       in the stream may start its CTAs from here on too. */
    fa__grid_dep_launch();
    fa__grid_dep_wait();
#endif

    float m = -INFINITY, l = 0.f, acc[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) acc[i] = 0.f;
    for (int s0 = warp; s0 < S; s0 += 4 * BATCH) {
        float w[BATCH], v[BATCH][PER];
#pragma unroll
        for (int k = 0; k < BATCH; k++) { /* issue all loads of the batch first */
            const int s = s0 + 4 * k;
            const float *src = p.o_part + (s * R + row) * D + lane * PER;
            w[k] = -INFINITY;
#pragma unroll
            for (int i = 0; i < PER; i++) v[k][i] = 0.f;
            if (s < S) {
                w[k] = p.lse_part[s * R + row];
#pragma unroll
                for (int i = 0; i < PER; i += 2) {
                    const float2 t = *reinterpret_cast<const float2 *>(src + i);
                    v[k][i] = t.x; v[k][i + 1] = t.y;
                }
            }
        }
        float m_new = m;
#pragma unroll
        for (int k = 0; k < BATCH; k++) m_new = fmaxf(m_new, w[k]);
        /* all seen so far empty (-inf): 0 as the reference, never -inf - -inf */
        const float m_ref = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fa__exp2(m - m_ref);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < PER; i++) acc[i] *= alpha;
#pragma unroll
        for (int k = 0; k < BATCH; k++) {
            const float wk = fa__exp2(w[k] - m_ref); /* 0 for an empty split or past S */
            l += wk;
#pragma unroll
            for (int i = 0; i < PER; i++) acc[i] += wk * v[k][i];
        }
        m = m_new;
    }
#pragma unroll
    for (int i = 0; i < PER; i++) part[warp][lane * PER + i] = acc[i];
    if (lane == 0) { part_m[warp] = m; part_l[warp] = l; }
    __syncthreads(); /* the 4 warps' (m, l, acc) are in shared memory */
    if (warp != 0) return;
    float M = fmaxf(fmaxf(part_m[0], part_m[1]), fmaxf(part_m[2], part_m[3]));
    const float M_ref = M == -INFINITY ? 0.f : M;
    float f[4], lsum = 0.f;
#pragma unroll
    for (int w = 0; w < 4; w++) { f[w] = fa__exp2(part_m[w] - M_ref); lsum += f[w] * part_l[w]; }
    /* a row that saw no key in any split: O = 0, L = -inf (never 0/0) */
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    const float L2 = lsum > 0.f ? M_ref + __log2f(lsum) : -INFINITY;
#pragma unroll
    for (int i = 0; i < PER; i++)
        acc[i] = (f[0] * part[0][lane * PER + i] + f[1] * part[1][lane * PER + i] +
                  f[2] * part[2][lane * PER + i] + f[3] * part[3][lane * PER + i]) * inv;
    /* row = (b * hq + h) * sq + t */
    const int t = (int)(row % p.sq), h = (int)((row / p.sq) % p.hq), b = (int)(row / ((int64_t)p.sq * p.hq));
    uint16_t *dst = (uint16_t *)p.o + (int64_t)b * p.o_bs + (int64_t)t * p.o_ss + (int64_t)h * p.o_hs + lane * PER;
#pragma unroll
    for (int i = 0; i < PER; i += 2) {
        const uint32_t two = fa__pack2<BF16>(acc[i], acc[i + 1]);
        *reinterpret_cast<uint32_t *>(dst + i) = two;
    }
    if (p.lse && lane == 0) p.lse[row] = L2 * FA__DEC_LN2;
}

/* ---- >>decode-append  k_new / v_new -> cache slots seqlens_k[b] + t ---------
   One thread per 16-byte chunk; grid covers (b, t, hk, chunk). */
template <int D>
__global__ void fa__decode_append_kernel(const fa__decode_params p)
{
    constexpr int CH = D / 8;
    const int64_t total = (int64_t)p.batch * p.sq * p.hkv * CH;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int c = (int)(i % CH), hk = (int)((i / CH) % p.hkv);
    const int t = (int)((i / CH / p.hkv) % p.sq), b = (int)(i / CH / p.hkv / p.sq);
    const int n = (p.seqlens_k ? p.seqlens_k[b] : p.seqlen_k) + t;
    if (n < 0 || n >= p.capacity) return; /* a bad length never writes outside */
    const int page = p.block_table ? p.block_table[(int64_t)b * p.pages_per_seq + fa__dec_page_index(p, n)] : 0;
    const int64_t ko = fa__dec_cache_offset(p, b, n, page, p.k_bs, p.k_ss) + (int64_t)hk * p.k_hs;
    const int64_t vo = fa__dec_cache_offset(p, b, n, page, p.v_bs, p.v_ss) + (int64_t)hk * p.v_hs;
    const int64_t kn = (int64_t)b * p.kn_bs + (int64_t)t * p.kn_ss + (int64_t)hk * p.kn_hs;
    const int64_t vn = (int64_t)b * p.vn_bs + (int64_t)t * p.vn_ss + (int64_t)hk * p.vn_hs;
    /* 2-byte elements: chunk c is elements 8c .. 8c + 7 */
    *reinterpret_cast<uint4 *>((uint16_t *)p.k + ko + c * 8) =
        *reinterpret_cast<const uint4 *>((const uint16_t *)p.k_new + kn + c * 8);
    *reinterpret_cast<uint4 *>((uint16_t *)p.v + vo + c * 8) =
        *reinterpret_cast<const uint4 *>((const uint16_t *)p.v_new + vn + c * 8);
}

/* ---- >>decode-host  split count, validation, launch ------------------------ */

/* The number of splits. `ctas` = CTAs without splitting, `slots` = CTAs the
   GPU runs at once (SMs x CTAs per SM), `tiles` = K/V tiles of the longest
   sequence. FlashAttention-2's rule, with a sharper efficiency:
   - No split if the CTAs already fill >= 80% of a wave.
   - Else for each count s the efficiency is the useful share of the slots'
     time, ctas * tiles / (slots * ceil(waves) * ceil(tiles / s)) with
     waves = ctas * s / slots: the last wave's empty slots AND the rounding
     of tiles per split both count. Take the SMALLEST s within 95% of the
     best (fewer splits = less partial output to write and merge). Counts
     that leave tiles-per-split unchanged from s - 1 are skipped: they add
     CTAs without shortening the longest one.
   FlashAttention-2 counts waves alone and accepts 85% of the best, which
   measured slower at long caches. A split has at least 2 tiles: a split of
   one is all start-up and merge, which the efficiency does not count.
   [decode-splits] */
static int fa__decode_num_splits(int64_t ctas, int slots, int tiles, int max_splits)
{
    float eff[129], best = 0.f;
    int s, prev_per = -1;
    if (ctas >= (int64_t)(0.8f * (float)slots) || tiles <= 3) return 1;
    if (max_splits > tiles / 2) max_splits = tiles / 2;
    if (max_splits > 128) max_splits = 128;
    for (s = 1; s <= max_splits; s++) {
        const float waves = ceilf((float)(ctas * s) / (float)slots);
        const int per = (tiles + s - 1) / s;
        eff[s] = (float)(ctas * tiles) / ((float)slots * waves * (float)per);
        if (eff[s] > best) best = eff[s];
    }
    for (s = 1; s <= max_splits; s++) {
        int per = (tiles + s - 1) / s;
        int eligible = s == 1 || per != prev_per;
        prev_per = per;
        if (eligible && eff[s] >= 0.95f * best) return s;
    }
    return 1;
}

/* A CTA of 4 warps at d64 spends more of its time on the math of each
   byte than one at d128 and streams slower (>>decode 9): the grid splits
   it sooner (fa__decode_grid) and pairs its heads (fa__decode_pairs). */
static constexpr int fa__dec_light_cta(int d) { return d < 128; }

/* The grid: how many CTAs share an SM (*cps: 1, or `blocks`, what fits)
   and the split count, from `units` = CTAs of one KV head (row block) each
   without splitting, the SM count, the head dim and `tiles` = K/V tiles of
   the longest sequence. What decides is how many CTAs stream at once all
   the way to the end: a few CTAs left alone at the end stream at a
   fraction of the rate. The rule (each case measured against the one
   before it, [decode-grid]):
   - Fewer units than 70% of the SMs: split (fa__decode_num_splits).
   - Up to one a SM: no split, `blocks` a SM allowed.
   - More: one CTA a SM when the last wave is at least 65% full, split in
     2 or 3 if that makes it so. A contiguous cache streams fastest that
     way (fa__decode_setup).
   - Else `blocks` a SM and enough CTAs for 1.5 waves of them (split if
     need be), which the scheduler evens out.
   At d64 (fa__dec_light_cta) the split starts below 80% of the SMs.
   A paged cache runs `blocks` CTAs a SM throughout (fa__decode_setup),
   split for 1.5 waves of them past one wave. */
static int fa__decode_last_wave_full(int64_t ctas, int slots)
{
    const int64_t r = ctas % slots;
    return r == 0 || (float)r >= 0.65f * (float)slots;
}
/* the smallest split count that makes 1.5 waves of `slots` CTAs */
static int fa__decode_splits_for_waves(int64_t units, int64_t slots, int tiles)
{
    int s = 1;
    while (units * s < (int64_t)(1.5f * (float)slots) && s < tiles && s < 128) s++;
    return s;
}
static void fa__decode_grid(int64_t units, int sms, int blocks, int paged, int d, int tiles, int *cps, int *splits)
{
    const int64_t slots = (int64_t)sms * blocks; /* at `blocks` CTAs a SM */
    const float split_below = fa__dec_light_cta(d) ? 0.8f : 0.7f;
    int s;
    *splits = 1;
    *cps = paged ? blocks : 1;
    if (paged) { /* (fa__decode_num_splits keeps whole units from 80% of the slots) */
        *splits = units > slots ? fa__decode_splits_for_waves(units, slots, tiles)
                                : fa__decode_num_splits(units, (int)slots, tiles, 128);
        return;
    }
    if (units < (int64_t)(split_below * (float)sms)) {
        *splits = fa__decode_num_splits(units, sms, tiles, 128);
        return;
    }
    if (units <= sms) { *cps = blocks; return; }
    for (s = 1; s <= 3 && s <= tiles; s++)
        if (fa__decode_last_wave_full(units * s, sms)) { *splits = s; return; }
    if (blocks < 2) return; /* one CTA a SM is all that fits (d256): whole units */
    *cps = blocks;
    *splits = fa__decode_splits_for_waves(units, slots, tiles);
}

/* KV heads per CTA (HP of fa__decode_kernel): 2 at d64 when a pair fits
   (rows <= 16, an even heads_kv), the cache is contiguous and the grid
   runs whole units one CTA a SM (fa__decode_grid), and pairing costs no
   wave: with `units` CTAs of one head each and `slots` of them at once,
   ceil(units / slots) waves of one head's keys against ceil(units / 2 /
   slots) waves of two, the pairs filling 80% of a wave. d128 keeps one
   head a CTA (as fast or faster there). [decode-pairs] */
#ifdef FLASHATTN_TEST_HOOKS
/* tests only: -1 by the rule, 0 never, 1 wherever a pair fits; and how many
   calls ran pairs */
static int fa__dec_pairs = -1, fa__dec_pair_launches;
#endif
static int fa__decode_pairs(const fa_problem *r, int rows, int64_t units, int slots, int cps, int splits)
{
    const int fits = rows <= 16 && fa__dec_max_warps_m(r->head_dim) >= 2 && r->heads_kv % 2 == 0;
#ifdef FLASHATTN_TEST_HOOKS
    if (fa__dec_pairs >= 0) return fits && fa__dec_pairs ? 2 : 1;
#endif
    if (!fits || !fa__dec_light_cta(r->head_dim) || r->block_table || cps != 1 || splits != 1 ||
        units / 2 < (int64_t)(0.8f * (float)slots))
        return 1;
    return 2 * ((units / 2 + slots - 1) / slots) <= (units + slots - 1) / slots ? 2 : 1;
}

/* The launch plan for one problem: derived from p alone and the device. */
typedef struct fa__decode_plan {
    int d, warps_m, row_blocks, num_splits;
    int hp;           /* KV heads per CTA (fa__decode_pairs) */
    int threads;      /* the kernel's block size */
    int smem;         /* dynamic shared memory per CTA, bytes (see fa__decode_setup) */
    int pdl;          /* launch both kernels as programmatic dependents (fa__decode_launch_pdl) */
    size_t workspace; /* bytes of o_part + lse_part */
    void (*kernel)(fa__decode_params); /* the instance fa__decode_setup prepared (its d, warps_m, dtype) */
} fa__decode_plan;

/* What fa__decode_setup finds out once per device and kernel. */
typedef struct fa__dec_setup {
    int blocks;   /* CTAs per SM at the kernel's own shared memory */
    int smem;     /* the kernel's own dynamic shared memory */
    int smem_one; /* the dynamic shared memory that keeps a CTA alone on its SM */
    int pdl;      /* 1: the device runs sm_90+ code of these kernels (griddepcontrol) */
    int threads;  /* the kernel's block size */
    void (*kernel)(fa__decode_params); /* the instance this setup is for, to launch */
} fa__dec_setup;

/* How many CTAs share an SM: one for a contiguous cache where the grid
   allows (fa__decode_grid), two (or what fits) for a paged one: a
   contiguous cache streams faster with fewer concurrent streams (longer
   runs of neighbouring rows for the DRAM); pages in random order need the
   second CTA (the rows of a tile lie in unrelated pages, each request
   waits longer, and more of them must be in flight). [decode-setup]
   A CTA is held alone on its SM by asking for more than half of the SM's
   shared memory; the extra half is never touched.

   fa__decode_setup opts the kernel in to that much dynamic shared memory
   (once per device; the attribute belongs to the device's context) and
   fills *out (fa__dec_setup). The cache is a plain array: two threads
   racing on it both store the same numbers. */
template <int D, int WM, bool BF16, int HP, int KV>
static cudaError_t fa__decode_setup(int dev, fa__dec_setup *out)
{
    static fa__dec_setup cached[64]; /* per device; blocks == 0: not yet */
    const int need = fa__dec_smem_bytes<D, WM, HP>();
    cudaFuncAttributes fa;
    cudaError_t e;
    int n = 0, n1 = 0, per_sm = 0, optin = 0, one;
    if (dev >= 0 && dev < 64 && cached[dev].blocks) { *out = cached[dev]; return cudaSuccess; }
    if ((e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
        return e;
    one = per_sm / 2 + 1;
    if (one > optin) one = optin;
    if (one < need) one = need;
    e = cudaFuncSetAttribute(fa__decode_kernel<D, WM, BF16, HP, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize, one);
    if (e != cudaSuccess) return e;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fa__decode_kernel<D, WM, BF16, HP, KV>, FA__DEC_THREADS * HP, need);
    if (e != cudaSuccess) return e;
    if (n < 1) return cudaErrorInvalidConfiguration; /* does not fit this device's shared memory */
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n1, fa__decode_kernel<D, WM, BF16, HP, KV>, FA__DEC_THREADS * HP, one);
    if (e != cudaSuccess) return e;
    if (n1 != 1) one = need; /* cannot be held alone this way: leave it as it is */
    if ((e = cudaFuncGetAttributes(&fa, fa__decode_combine_kernel<D, BF16>)) != cudaSuccess) return e;
    out->blocks = n;
    out->smem = need;
    out->smem_one = one;
    out->pdl = fa.binaryVersion >= 90;
    out->kernel = fa__decode_kernel<D, WM, BF16, HP, KV>;
    out->threads = FA__DEC_THREADS * HP;
    if (dev >= 0 && dev < 64) cached[dev] = *out;
    return cudaSuccess;
}

/* Is head dim d's head-pair kernel (HP = 2) for a paged / contiguous cache
   compiled? Where fa__decode_pairs can take it (a light CTA, a contiguous
   cache); with FLASHATTN_TEST_HOOKS wherever a pair fits (fa__dec_pairs). */
static constexpr bool fa__dec_pair_kernel(int d, bool paged)
{
#ifdef FLASHATTN_TEST_HOOKS
    return (void)paged, fa__dec_max_warps_m(d) >= 2;
#else
    return fa__dec_max_warps_m(d) >= 2 && fa__dec_light_cta(d) && !paged;
#endif
}
/* Set up the kernel this problem will use (fa__decode_setup): hp = 2 only
   where fa__dec_max_warps_m allows two warp rows (d <= 128),
   and its kernel only where fa__dec_pair_kernel says. Only the head
   dims FLASHATTN_HEAD_DIMS lists are compiled (if constexpr). */
static cudaError_t fa__decode_setup_any(int dev, int d, int wm, int hp, int bf16, int paged, fa__dec_setup *out)
{
#define FA__DEC_SETUP(D_, T_, P_)                                                   \
    if constexpr (fa__head_dim_compiled(D_))                                        \
    if (d == D_ && !paged == !P_) {                                                 \
        constexpr int M2_ = fa__dec_max_warps_m(D_) < 2 ? 1 : 2, MX_ = fa__dec_max_warps_m(D_); \
        if (hp == 2) {                                                              \
            if constexpr (fa__dec_pair_kernel(D_, P_))                              \
                return fa__decode_setup<D_, M2_, T_, M2_, fa__dec_kv(D_, M2_, M2_, P_)>(dev, out); \
            return cudaErrorInvalidDeviceFunction; /* (fa__decode_pairs: never) */  \
        }                                                                           \
        if (wm == 2) return fa__decode_setup<D_, M2_, T_, 1, fa__dec_kv(D_, M2_, 1, P_)>(dev, out); \
        if (wm > 2) return fa__decode_setup<D_, MX_, T_, 1, fa__dec_kv(D_, MX_, 1, P_)>(dev, out); \
        return fa__decode_setup<D_, 1, T_, 1, fa__dec_kv(D_, 1, 1, P_)>(dev, out);  \
    }
#define FA__DEC_SETUP_D(T_, P_) FA__DEC_SETUP(64, T_, P_) FA__DEC_SETUP(128, T_, P_) FA__DEC_SETUP(256, T_, P_)
    if (bf16) { FA__DEC_SETUP_D(true, false) FA__DEC_SETUP_D(true, true) }
    else { FA__DEC_SETUP_D(false, false) FA__DEC_SETUP_D(false, true) }
#undef FA__DEC_SETUP_D
#undef FA__DEC_SETUP
    return cudaErrorInvalidDeviceFunction; /* unreachable: d was checked */
}

static int fa__dec_aligned16(const fa_tensor *t)
{
    return ((uintptr_t)t->data % 16) == 0 && t->batch_stride % 8 == 0 &&
           t->seq_stride % 8 == 0 && t->head_stride % 8 == 0;
}

/* Validates (the API's rules through fa__check_decode, which also resolves
   zero strides, then what the GPU path needs) and plans the launch.
   have_tensors = 0: only the problem is known (the workspace-size query). */
static fa_status fa__decode_cuda_prepare(const char *fn, const fa_problem *p, fa_tensor q,
                                         fa_tensor kc, fa_tensor vc, fa_tensor kn,
                                         fa_tensor vn, fa_tensor o, float *lse,
                                         int have_tensors, fa__decode_params *kp,
                                         fa__decode_plan *plan)
{
    fa__decode_params z;
    fa_problem r;
    memset(&r, 0, sizeof r);
    int hq, hkv, d, group, dev = 0, sms = 0, rows, append;
    fa__dec_setup ks;
    cudaError_t e;
    fa_status st;
    /* device arrays (seqlens_k, block_table, alibi_slopes): host_arrays = 0 */
    st = have_tensors ? fa__check_decode(fn, p, &r, &q, &kc, &vc, &kn, &vn, &o, lse, 0)
                      : fa__resolve(fn, p, &r, 0);
    if (st != FA_OK || (st = fa__no_block_mask(fn, &r)) != FA_OK) return st;
    hq = r.heads_q; hkv = r.heads_kv; d = r.head_dim; group = hq / hkv;
    append = have_tensors && kn.data != NULL;
    if (r.head_dim_v != d || (d != 64 && d != 128 && d != 256))
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head_dim %d / head_dim_v %d: the GPU decode kernels exist for head_dim "
                        "64, 128 and 256 with head_dim_v == head_dim", fn, d, r.head_dim_v);
    if (!fa__head_dim_compiled(d))
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head_dim %d is not among the head dims compiled in (FLASHATTN_HEAD_DIMS)", fn, d);
    if (r.batch > 65535 || hkv > 65535)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: batch (%d) and heads_kv (%d) must be <= 65535 on the GPU "
                        "(grid dimensions)", fn, r.batch, hkv);
    if (!r.seqlens_k && append)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: without seqlens_k the cache is full (seqlen_k tokens); nowhere to append k_new", fn);
    if (have_tensors) {
        if (q.dtype != FA_F16 && q.dtype != FA_BF16)
            return fa__fail(FA_ERROR_UNSUPPORTED, "%s: q.dtype must be f16 or bf16 on the GPU", fn);
        if (kc.dtype != q.dtype || vc.dtype != q.dtype || o.dtype != q.dtype ||
            (append && (kn.dtype != q.dtype || vn.dtype != q.dtype)))
            return fa__fail(FA_ERROR_UNSUPPORTED,
                            "%s: q, k_cache, v_cache, k_new, v_new and o must share one dtype on the GPU", fn);
        /* 16-byte copies: every view starts on 16 bytes and steps by 8 elements */
        if (!fa__dec_aligned16(&q) || !fa__dec_aligned16(&o) || !fa__dec_aligned16(&kc) ||
            !fa__dec_aligned16(&vc) || (append && (!fa__dec_aligned16(&kn) || !fa__dec_aligned16(&vn))))
            return fa__fail(FA_ERROR_UNSUPPORTED,
                            "%s: q, k_cache, v_cache, k_new, v_new and o must be 16-byte aligned with "
                            "strides that are multiples of 8 elements on the GPU", fn);
    }

    memset(&z, 0, sizeof z);
    z.q = q.data; z.k = kc.data; z.v = vc.data; z.k_new = kn.data; z.v_new = vn.data;
    z.o = o.data; z.lse = lse;
    /* strides: fa__check_decode replaced the zeros by the packed ones */
    z.q_bs = q.batch_stride; z.q_ss = q.seq_stride; z.q_hs = q.head_stride;
    z.o_bs = o.batch_stride; z.o_ss = o.seq_stride; z.o_hs = o.head_stride;
    z.k_bs = kc.batch_stride; z.k_ss = kc.seq_stride; z.k_hs = kc.head_stride;
    z.v_bs = vc.batch_stride; z.v_ss = vc.seq_stride; z.v_hs = vc.head_stride;
    z.kn_bs = kn.batch_stride; z.kn_ss = kn.seq_stride; z.kn_hs = kn.head_stride;
    z.vn_bs = vn.batch_stride; z.vn_ss = vn.seq_stride; z.vn_hs = vn.head_stride;
    z.seqlens_k = r.seqlens_k;
    z.block_table = r.block_table;
    z.page_size = r.block_table ? r.page_size : 1;
    z.page_shift = -1;
    for (int sh = 0; sh < 31; sh++)
        if (z.page_size == 1 << sh) z.page_shift = sh;
    z.pages_per_seq = r.pages_per_seq;
    z.capacity = r.seqlen_k; /* the cache capacity, contiguous or paged */
    z.seqlen_k = r.seqlen_k;
    z.batch = r.batch; z.sq = r.seqlen_q; z.hq = hq; z.hkv = hkv; z.group = group;
    z.rows = rows = r.seqlen_q * group;
    z.sq_new = append ? r.seqlen_q : 0;
    z.scale_log2 = r.scale * FA__DEC_LOG2E; /* r.scale: the default resolved */
    z.softcap = r.softcap > 0.f;
    z.softcap_pre = z.softcap ? r.scale / r.softcap : 0.f;
    z.softcap_post = z.softcap ? r.softcap * FA__DEC_LOG2E : 0.f;
    z.alibi = r.alibi_slopes;
    z.causal = r.causal != 0;
    z.window = r.sliding_window != 0;
    z.window_left = r.window_left; z.window_right = r.window_right;

    /* Plan: rows per CTA, then splits from the SM count and the work. */
    plan->d = d;
    plan->warps_m = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
    if (plan->warps_m > fa__dec_max_warps_m(d)) plan->warps_m = fa__dec_max_warps_m(d);
    plan->row_blocks = (rows + 16 * plan->warps_m - 1) / (16 * plan->warps_m);
    const int bf16 = !have_tensors || q.dtype == FA_BF16;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (e = fa__decode_setup_any(dev, d, plan->warps_m, 1, bf16, r.block_table != 0, &ks)) != cudaSuccess)
        return fa__fail(FA_ERROR_CUDA, "%s: %s", fn, cudaGetErrorString(e));
    {
        int64_t ctas = (int64_t)r.batch * hkv * plan->row_blocks;
        int longest = r.seqlen_k; /* device lengths are unknown on the host: plan for the capacity */
        int tiles = (longest + FA__DEC_BN - 1) / FA__DEC_BN;
        int cps, splits;
        fa__decode_grid(ctas, sms, ks.blocks, r.block_table != 0, d, tiles, &cps, &splits);
        if (r.num_splits) splits = r.num_splits; /* the caller's count; CTAs per SM as planned */
        const int slots = sms * cps;
        plan->hp = fa__decode_pairs(&r, rows, ctas, slots, cps, splits);
        if (plan->hp == 2) { /* one row block; the pair kernel */
            if ((e = fa__decode_setup_any(dev, d, 2, 2, bf16, r.block_table != 0, &ks)) != cudaSuccess)
                return fa__fail(FA_ERROR_CUDA, "%s: %s", fn, cudaGetErrorString(e));
            plan->warps_m = 2;
            if (!r.num_splits && splits > 1) /* (hook-forced pairs only) */
                splits = fa__decode_num_splits(ctas / 2, slots, tiles, 128);
        }
        if (splits > 65535 / plan->row_blocks) splits = 65535 / plan->row_blocks;
        if (splits < 1) splits = 1;
        plan->num_splits = splits;
        plan->smem = cps > 1 ? ks.smem : ks.smem_one;
        plan->pdl = ks.pdl;
        plan->kernel = ks.kernel;
        plan->threads = ks.threads;
    }
    z.row_blocks = plan->row_blocks;
    z.num_splits = plan->num_splits;
    {
        size_t R = (size_t)r.batch * hq * r.seqlen_q;
        plan->workspace = plan->num_splits > 1
            ? (size_t)plan->num_splits * R * (size_t)(d + 1) * sizeof(float) + 256 : 0;
    }
    *kp = z;
    return FA_OK;
}

/* A decode or combine kernel, launched as a programmatic dependent of the
   kernel before it in the stream (PDL) where its code for this device waits
   for that grid before touching memory (pdl: griddepcontrol.wait exists
   from sm_90, and fa__decode_setup read which code the device runs), else
   as a plain stream-ordered launch. Either way it reads its inputs only
   after the kernel before it has finished. */
static cudaError_t fa__decode_launch_pdl(void (*kernel)(fa__decode_params), const fa__decode_params &kp,
                                         dim3 grid, int threads, int smem, int pdl, cudaStream_t st)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cudaError_t e;
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = st;
    if (pdl) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    if ((e = cudaLaunchKernelEx(&cfg, kernel, kp)) != cudaSuccess) return e;
    return cudaGetLastError();
}

template <int D, bool BF16>
static cudaError_t fa__decode_launch_t(const fa__decode_params &kp, const fa__decode_plan &plan,
                                       cudaStream_t st)
{
    dim3 grid((unsigned)(plan.row_blocks * plan.num_splits), (unsigned)(kp.hkv / plan.hp), (unsigned)kp.batch);
    cudaError_t e;
    if (kp.k_new) {
        int64_t total = (int64_t)kp.batch * kp.sq * kp.hkv * (D / 8);
        FA__LAUNCH(fa__decode_append_kernel<D>, (unsigned)((total + 255) / 256), 256, 0, st, kp);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    /* plan.kernel: the instance fa__decode_setup_any chose for plan.warps_m
       and opted in to its shared memory */
    if ((e = fa__decode_launch_pdl(plan.kernel, kp, grid, plan.threads, plan.smem, plan.pdl, st)) != cudaSuccess)
        return e;
    if (plan.num_splits > 1) /* a CTA per output row */
        return fa__decode_launch_pdl(fa__decode_combine_kernel<D, BF16>, kp,
                                     dim3((unsigned)((int64_t)kp.batch * kp.hq * kp.sq)), 128, 0, plan.pdl, st);
    return cudaSuccess;
}

static cudaError_t fa__decode_launch(const fa__decode_params &kp, const fa__decode_plan &plan,
                                     int bf16, cudaStream_t st)
{
#define FA__DEC_LAUNCH(D_)                                                          \
    if constexpr (fa__head_dim_compiled(D_))                                        \
        if (plan.d == D_) return bf16 ? fa__decode_launch_t<D_, true>(kp, plan, st) \
                                      : fa__decode_launch_t<D_, false>(kp, plan, st);
    FA__DEC_LAUNCH(64) FA__DEC_LAUNCH(128) FA__DEC_LAUNCH(256)
#undef FA__DEC_LAUNCH
    return cudaErrorInvalidDeviceFunction; /* unreachable: d was checked */
}

#ifdef __cplusplus
extern "C" {
#endif

FLASHATTN_DEF fa_status fa_decode_cuda_workspace_size(const fa_problem *p, size_t *bytes)
{
    fa__decode_params kp;
    fa__decode_plan plan;
    fa_tensor t;
    fa_status s;
    if (!bytes) return fa__fail(FA_ERROR_INVALID_ARGUMENT, "fa_decode_cuda_workspace_size: bytes is NULL");
    memset(&t, 0, sizeof t); /* no tensors: only the plan is wanted */
    s = fa__decode_cuda_prepare("fa_decode_cuda_workspace_size", p, t, t, t, t, t, t, NULL, 0, &kp, &plan);
    if (s != FA_OK) return s;
    *bytes = plan.workspace;
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_decode_cuda(const fa_problem *p, fa_tensor q, fa_tensor k_cache,
                                       fa_tensor v_cache, fa_tensor k_new, fa_tensor v_new,
                                       fa_tensor o, float *lse, void *workspace,
                                       size_t workspace_size, void *stream)
{
    fa__decode_params kp;
    fa__decode_plan plan;
    cudaStream_t st = (cudaStream_t)stream;
    void *ws = workspace, *owned = NULL;
    cudaError_t e;
    fa_status s = fa__decode_cuda_prepare("fa_decode_cuda", p, q, k_cache, v_cache, k_new, v_new, o,
                                          lse, 1, &kp, &plan);
    if (s != FA_OK) return s;
    if (plan.workspace) {
        if (workspace && workspace_size < plan.workspace)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "fa_decode_cuda: workspace_size (%zu) is less than fa_decode_cuda_workspace_size (%zu)",
                            workspace_size, plan.workspace);
        if (!workspace) {
            /* stream-ordered: no device-wide synchronization, freed after the combine */
            if (cudaMallocAsync(&owned, plan.workspace, st) != cudaSuccess) {
                (void)cudaGetLastError();
                return fa__fail(FA_ERROR_OUT_OF_MEMORY,
                                "fa_decode_cuda: cudaMallocAsync of %zu bytes (split-KV workspace) failed",
                                plan.workspace);
            }
            ws = owned;
        }
        {
            /* o_part first (256-byte aligned), lse_part after it */
            size_t R = (size_t)kp.batch * kp.hq * kp.sq;
            uintptr_t base = ((uintptr_t)ws + 255) & ~(uintptr_t)255;
            kp.o_part = (float *)base;
            kp.lse_part = kp.o_part + (size_t)plan.num_splits * R * plan.d;
        }
    }
    e = fa__decode_launch(kp, plan, q.dtype == FA_BF16, st);
#ifdef FLASHATTN_TEST_HOOKS
    fa__dec_pair_launches += plan.hp == 2;
#endif
    if (owned) {
        cudaError_t e2 = cudaFreeAsync(owned, st);
        if (e == cudaSuccess) e = e2;
    }
    if (e != cudaSuccess) return fa__fail(FA_ERROR_CUDA, "fa_decode_cuda: %s", cudaGetErrorString(e));
    return FA_OK;
}

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_NO_DECODE */
#endif /* !FA__EMU_NO_DEC */

#if !FA__EMU_NO_QUANT

/* ============================================================================
   >>fp8-quant  fa_quantize_cuda: f16 / bf16 -> e4m3 with per-block descales
   ============================================================================
   The GPU twin of fa_quantize (flashattn.h, >>impl-fp8), bit for bit: the
   same conversions, the same Hadamard stages in the same order, the same
   fa__fp8_scale. One pass over memory: one CTA per (block of B rows, head,
   sequence) holds its B rows in registers, finds their amax, and writes
   them as e4m3 with the block's descale. 16 warps of B / 16 rows each.
   A row lives in a group of LPR lanes, E elements per lane in chunks of C
   neighbouring ones (fa__quant_elem), so that the Hadamard's stages within
   a chunk, and those across chunks of a lane, need no shuffle; only
   log2(LPR) stages do (shuffles, not memory, would otherwise bound it). A
   lane loads 16 bytes at a time where the strides allow (VEC). With the
   Hadamard on sm_90a, persistent CTAs take the rows from a ring of shared
   memory that TMA fills ahead of them instead (fa__quantize_ring_kernel).
   Per tensor it takes two passes (the tensor's amax must be known before
   anything is rounded): pass 1 atomicMax-es every block's amax into
   descale[0] (non-negative floats order as their bits), pass 2 rounds,
   then one thread turns the amax into the descale. */
#define FA__QUANT_WARPS 16

struct fa__quant_params {
    const uint16_t *x;
    uint8_t *out;
    float *descale;
    int64_t x_batch, x_seq, x_head, o_batch, o_seq, o_head;
    const int32_t *cu_seqlens;
    int seqlen, heads, d, nblk;
    int hadamard;
    uint64_t seed;
    float inv_sqrt_d;
    int mode; /* 0: per block; per tensor: 1 the amax pass, 2 the rounding pass */
    int bf16; /* x is bf16 (else f16) */
    int vec;  /* 16-byte accesses: aligned, d % 16 == 0 (fa_quantize_cuda) */
    int batch; /* sequences (the ring kernel's walk) */
};
#ifndef FA__QUANT_RING
#define FA__QUANT_RING 1 /* 0: no ring kernel (fa__quantize_ring_launch; measuring only) */
#endif
#ifndef FA__QUANT_RING_CTAS
#define FA__QUANT_RING_CTAS 0 /* the ring kernel's grid, if not 0 (tests: several blocks a CTA) */
#endif

template <bool BF16>
static __device__ __forceinline__ float fa__quant_widen(uint32_t u)
{
    return BF16 ? __uint_as_float(u << 16) : __half2float(__ushort_as_half((unsigned short)u));
}

/* Where a lane's elements sit in its row: lane s of a row's LPR lanes
   holds chunks of C elements s, s + LPR, s + 2 LPR, ..., chunk m of them in
   y[C m .. C m + C - 1]. C = E: one chunk, E neighbouring elements a lane;
   C = 8 (past d 128): a row's lanes read and write neighbouring 16 bytes,
   which the wider rows need (fa__quantize_launch). */
template <int C, int LPR>
static __device__ __forceinline__ int fa__quant_elem(int sub, int i)
{
    return C * (sub + LPR * (i / C)) + i % C;
}

/* One Hadamard stage within a lane: y[i], y[i + h] <- a + b, a - b. */
template <int E>
static __device__ __forceinline__ void fa__hadamard_pairs(float (&y)[E], int h)
{
#pragma unroll
    for (int i = 0; i < E; ++i)
        if (!(i & h)) {
            const float a = y[i], b = y[i + h];
            y[i] = a + b;
            y[i + h] = a - b;
        }
}

/* y <- y M for one row held by a group of LPR lanes (fa__quant_elem):
   fa__hadamard_row's stages h = 1, 2, .. d/2 in its order. A stage pairs
   the elements whose index differs in bit h: for h < C (within a chunk) and
   h >= C LPR (chunk m's bit h / (C LPR)) both are in the same lane, y[i]
   and y[i ^ h'] (h' = h, or h / LPR); for C <= h < C LPR the other is y[i]
   of lane s ^ (h / C), and the lane whose bit h / C is set keeps a - b. */
template <int E, int LPR, int C>
static __device__ __forceinline__ void fa__hadamard_lanes(float (&y)[E], const float *mul, int sub, int d)
{
#pragma unroll
    for (int h = 1; h < C; h <<= 1) /* within a chunk */
        if (h < d) /* d < E LPR: the stages of a d-wide row (the padding stays 0) */
            fa__hadamard_pairs<E>(y, h);
#pragma unroll
    for (int g = 1; g < LPR; g <<= 1) { /* h = g C: across lanes (E LPR / 2 < d: every such stage is there) */
        const float sg = (sub & g) ? -1.0f : 1.0f; /* o - y or o + y, rounded once either way */
#pragma unroll
        for (int i = 0; i < E; ++i)
            y[i] = fmaf(sg, y[i], __shfl_xor_sync(0xffffffffu, y[i], g));
    }
#pragma unroll
    for (int h = C * LPR; h < E * LPR; h <<= 1) /* across a lane's chunks: y[i ^ h / LPR] */
        fa__hadamard_pairs<E>(y, h / LPR);
#pragma unroll
    for (int i = 0; i < E; ++i) { /* mul[j] sits at j + j / 32: lanes of other groups, other banks */
        const int j = fa__quant_elem<C, LPR>(sub, i);
        y[i] *= mul[j + j / 32];
    }
}

/* 8 neighbouring 16-bit elements (one 16-byte word) widened to fp32. */
template <bool BF16> static __device__ __forceinline__ void fa__quant_widen8(float *y, uint4 v)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        y[2 * t] = fa__quant_widen<BF16>(w[t] & 0xffffu);
        y[2 * t + 1] = fa__quant_widen<BF16>(w[t] >> 16);
    }
}

/* A lane's E elements of a row (fa__quant_elem; 0 past d, or for a row not
   there), 8 neighbouring elements (16 bytes) a load. */
template <int E, int LPR, int C, bool BF16, bool VEC>
static __device__ __forceinline__ void fa__quant_load(float (&y)[E], const uint16_t *src, bool live, int sub, int d)
{
#pragma unroll
    for (int c = 0; c < E; c += 8) {
        const int j0 = fa__quant_elem<C, LPR>(sub, c);
        if (VEC) { /* d % 16 == 0, so the 8 are all in or all out */
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (live && j0 < d) v = *(const uint4 *)(const void *)(src + j0);
            fa__quant_widen8<BF16>(y + c, v);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i)
                y[c + i] = fa__quant_widen<BF16>(live && j0 + i < d ? src[j0 + i] : 0u);
        }
    }
}

/* A lane's E elements of a row (fa__quant_elem) as e4m3(y * inv), W
   neighbouring codes a store (16 bytes, or 8 for 8-element chunks). */
template <int E, int LPR, int C, bool VEC>
static __device__ __forceinline__ void fa__quant_store(uint8_t *dst, const float (&y)[E], float inv, int sub, int d)
{
    constexpr int W = C < 16 ? 8 : 16;
#pragma unroll
    for (int c = 0; c < E; c += W) {
        const int j0 = fa__quant_elem<C, LPR>(sub, c);
        if (VEC) { /* d % 16 == 0, so the W are all in or all out */
            uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
            for (int t = 0; t < W / 4; ++t)
                w[t] = fa__cvt_e4m3x2(y[c + 4 * t] * inv, y[c + 4 * t + 1] * inv) |
                       fa__cvt_e4m3x2(y[c + 4 * t + 2] * inv, y[c + 4 * t + 3] * inv) << 16;
            if (j0 < d) {
                if (W == 16) *(uint4 *)(void *)(dst + j0) = make_uint4(w[0], w[1], w[2], w[3]);
                else *(uint2 *)(void *)(dst + j0) = make_uint2(w[0], w[1]);
            }
        } else {
#pragma unroll
            for (int i = 0; i < W; ++i)
                if (j0 + i < d) dst[j0 + i] = (uint8_t)fa__cvt_e4m3x2(y[c + i] * inv, 0.0f);
        }
    }
}

/* Every row slot's E elements of a lane (G slots, R rows a warp, RPG of
   them side by side), all loads in flight at once. */
template <int E, int LPR, int C, int R, int G, bool BF16, bool VEC>
static __device__ __forceinline__ void fa__quant_load_rows(float (&y)[G][E], const fa__quant_params &p,
                                                           const uint16_t *x0, int rbase, int lane, int len)
{
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int r = g * (32 / LPR) + lane / LPR, n = rbase + r;
        fa__quant_load<E, LPR, C, BF16, VEC>(y[g], x0 + n * p.x_seq, r < R && n < len, lane % LPR, p.d);
    }
}

/* Where block (k, h, b) lives: the sequence's first row and batch index
   in x and out (packed with cu_seqlens: batch index 0), and its length. */
struct fa__quant_blk {
    int k, h, b, len;
    int64_t row0, bi;
};
static __device__ __forceinline__ fa__quant_blk fa__quant_where(const fa__quant_params &p, int k, int h, int b)
{
    fa__quant_blk w;
    w.k = k, w.h = h, w.b = b;
    w.row0 = p.cu_seqlens ? p.cu_seqlens[b] : 0;
    w.bi = p.cu_seqlens ? 0 : b;
    w.len = p.cu_seqlens ? p.cu_seqlens[b + 1] - (int)w.row0 : p.seqlen;
    return w;
}

/* The block's rows in y: rotated (p.hadamard: mul written and seen), and
   the block's amax: each warp's by butterfly into warp_amax[warp], a
   barrier, the max over the CTA's W warps. */
template <int E, int LPR, int C, int G, int W = FA__QUANT_WARPS>
static __device__ __forceinline__ float fa__quant_amax(float (&y)[G][E], const fa__quant_params &p, const float *mul,
                                                       float *warp_amax, int lane, int warp)
{
    float amax = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (p.hadamard) /* uniform: every lane takes part in the shuffles */
            fa__hadamard_lanes<E, LPR, C>(y[g], mul, lane % LPR, p.d);
#pragma unroll
        for (int i = 0; i < E; ++i) /* the comparison as on the CPU: NaN never wins */
            amax = fabsf(y[g][i]) > amax ? fabsf(y[g][i]) : amax;
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, amax, m);
        amax = o > amax ? o : amax;
    }
    if (lane == 0) warp_amax[warp] = amax;
    __syncthreads(); /* every warp's amax is in shared memory */
#pragma unroll
    for (int w = 0; w < W; ++w)
        amax = warp_amax[w] > amax ? warp_amax[w] : amax;
    return amax;
}

/* What the block's amax gives: in the per-tensor amax pass, its share of
   the tensor's amax; else the descale (written per block) and the rows,
   stored as e4m3(y * inv). rbase: the warp's first row of the sequence. */
template <int E, int LPR, int C, int R, int G>
static __device__ __forceinline__ void fa__quant_finish(const float (&y)[G][E], const fa__quant_params &p, float amax,
                                                        const fa__quant_blk &w, int rbase, int lane)
{
    float s, inv;
    if (p.mode == 1) {
        if (threadIdx.x == 0 && amax > 0.0f)
            atomicMax((unsigned int *)p.descale, __float_as_uint(amax));
        return;
    }
    if (p.mode == 2)
        amax = __uint_as_float(*(const unsigned int *)p.descale);
    fa__fp8_scale(amax, &s, &inv);
    if (p.mode == 0 && threadIdx.x == 0)
        p.descale[((int64_t)w.b * p.heads + w.h) * p.nblk + w.k] = s;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int r = g * (32 / LPR) + lane / LPR, n = rbase + r;
        if (r < R && n < w.len) {
            uint8_t *dst = p.out + w.bi * p.o_batch + (w.row0 + n) * p.o_seq + (int64_t)w.h * p.o_head;
            if (p.vec) fa__quant_store<E, LPR, C, true>(dst, y[g], inv, lane % LPR, p.d);
            else fa__quant_store<E, LPR, C, false>(dst, y[g], inv, lane % LPR, p.d);
        }
    }
}

/* CTAs an SM holds (the launch bound): two while a lane holds one row slot
   (d <= 128 with 16 warps), so that one loads while the other stores; else
   one (with more than 16 warps, two would leave under 64 registers a thread). */
__host__ __device__ constexpr int fa__quant_ctas(int B, int LPR, int W = FA__QUANT_WARPS)
{
    return W <= 16 && (B / W) * LPR <= 32 ? 2 : 1;
}

/* B rows per block, each in LPR lanes of E elements (E LPR >= d). A CTA a
   block: its loads, then the rotation, then its stores. x's type and the
   access width are run-time values (p.bf16, p.vec), a branch around the
   loads and the stores: 5 kernels instead of 20 to compile [ctime-quant]. */
template <int E, int LPR, int C, int B>
__global__ void __launch_bounds__(FA__QUANT_WARPS * 32, fa__quant_ctas(B, LPR))
fa__quantize_kernel(const fa__quant_params p)
{
    constexpr int R = B / FA__QUANT_WARPS; /* rows per warp */
    constexpr int RPG = 32 / LPR;          /* rows side by side in a warp */
    constexpr int G = (R + RPG - 1) / RPG; /* row slots per lane */
    FA__SHARED float warp_amax[FA__QUANT_WARPS];
    FA__SHARED float mul[256 + 8]; /* sign[j] / sqrt(d) at j + j / 32 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const fa__quant_blk w = fa__quant_where(p, blockIdx.x, blockIdx.y, blockIdx.z);
    const int rbase = w.k * B + warp * R; /* the warp's first row */
    const uint16_t *x0 = p.x + w.bi * p.x_batch + w.row0 * p.x_seq + (int64_t)w.h * p.x_head;
    float y[G][E];
    if (p.hadamard && (int)threadIdx.x < p.d)
        mul[threadIdx.x + threadIdx.x / 32] = fa__hadamard_mul(p.seed, (int)threadIdx.x, p.inv_sqrt_d);
    if (p.bf16) {
        if (p.vec) fa__quant_load_rows<E, LPR, C, R, G, true, true>(y, p, x0, rbase, lane, w.len);
        else fa__quant_load_rows<E, LPR, C, R, G, true, false>(y, p, x0, rbase, lane, w.len);
    } else {
        if (p.vec) fa__quant_load_rows<E, LPR, C, R, G, false, true>(y, p, x0, rbase, lane, w.len);
        else fa__quant_load_rows<E, LPR, C, R, G, false, false>(y, p, x0, rbase, lane, w.len);
    }
    if (p.hadamard)
        __syncthreads(); /* mul is written */
    const float amax = fa__quant_amax<E, LPR, C, G>(y, p, mul, warp_amax, lane, warp);
    fa__quant_finish<E, LPR, C, R, G>(y, p, amax, w, rbase, lane);
}

/* Per tensor, after both passes: descale[0] holds the amax's bits. */
__global__ void fa__quantize_finish_kernel(float *descale)
{
    float s, inv;
    fa__fp8_scale(__uint_as_float(*(const unsigned int *)descale), &s, &inv);
    descale[0] = s;
}

#ifndef FLASHATTN_NO_HOPPER
/* ---- the rotating quantizer through a ring in shared memory (sm_90a) ----
   Above, a CTA's loads, its rotation and its stores follow one another,
   and the two CTAs of an SM seem to run those phases together: the
   Hadamard's arithmetic (about a third of the time the bytes take at
   d 128) adds to the memory time instead of hiding under it. With the
   Hadamard (d 64, 128, 256) a persistent CTA instead walks blocks
   blockIdx.x, + gridDim.x, ...: one thread asks for the blocks S steps
   ahead (TMA boxes of 64 columns x B rows, the 128-byte swizzle, into a
   stage of the ring, completing on the stage's mbarrier) while the CTA's
   warps rotate and store the current block from its stage. Without the
   Hadamard there is little arithmetic to hide and the plain kernel, whose
   loads go straight to registers, moves the bytes faster.
   A lane's chunks (fa__quant_elem) are chosen against the swizzle, which
   moves 16-byte chunk c of row r to c ^ (r % 8): 32 (d 64), 16 (d 128) or
   8 (d 256) elements, so the 8 lanes of a quarter warp read 8 distinct
   chunk positions, i.e. distinct banks. */
__host__ __device__ constexpr int fa__quant_ring_c(int LPR) { return LPR == 2 ? 32 : LPR == 4 ? 16 : 8; }

/* The ring kernel's warps: enough that a lane holds one row slot (B LPR /
   32 warps of 32 / LPR rows; 32 warps at d 256), so a thread keeps E
   elements, not 2 E: 64 registers at every head dim. At least 16, at most
   32 (1024 threads). */
#define FA__QUANT_RING_MAXW 32
__host__ __device__ constexpr int fa__quant_ring_warps(int B, int LPR)
{
    return B * LPR / 32 < FA__QUANT_WARPS      ? FA__QUANT_WARPS
           : B * LPR / 32 > FA__QUANT_RING_MAXW ? FA__QUANT_RING_MAXW
                                                : B * LPR / 32;
}

/* Shared memory: the stages' mbarriers (64 bytes), the multipliers (264
   floats), warp_amax twice (block i uses set i % 2, so a warp that runs
   ahead never overwrites what another still reads), then the stages from
   the next 1024-byte boundary (the swizzle's period), B 2 E LPR bytes each
   (E LPR / 64 boxes of B rows of 128 bytes). */
#define FA__QUANT_RING_HEAD ((264u + 2u * FA__QUANT_RING_MAXW) * 4u + 64u)
__host__ __device__ constexpr uint32_t fa__quant_stage_bytes(int E, int LPR, int B) { return 2u * (uint32_t)(E * LPR * B); }
/* The dynamic shared memory of S stages (the head, then up to 1023 bytes
   to the boundary, and 8 for the head's own alignment). */
__host__ __device__ constexpr uint32_t fa__quant_ring_smem(int S, int E, int LPR, int B)
{
    return (uint32_t)S * fa__quant_stage_bytes(E, LPR, B) + FA__QUANT_RING_HEAD + 1024u + 8u;
}
/* Stages of the ring: the most, up to 4, that fit beside the SM's other CTA
   where there are two (compute capability 9.0's 228 KB an SM, 1 KB of it
   each CTA's; the host checks the opt-in limit a block); fewer than 2: no
   ring kernel. */
__host__ __device__ constexpr int fa__quant_stages(int E, int LPR, int B, int S = 4)
{
    return S < 2 || (uint32_t)fa__quant_ctas(B, LPR, fa__quant_ring_warps(B, LPR)) * (fa__quant_ring_smem(S, E, LPR, B) + 1024u) <=
                        228u * 1024u
               ? S
               : fa__quant_stages(E, LPR, B, S - 1);
}

/* Block blk of the walk: k fastest, then the head, then the sequence. */
static __device__ __forceinline__ fa__quant_blk fa__quant_where_blk(const fa__quant_params &p, int blk)
{
    return fa__quant_where(p, blk % p.nblk, (blk / p.nblk) % p.heads, blk / (p.nblk * p.heads));
}

#if FA__SM90A /* (the mbarrier, TMA and shared-memory wrappers exist in sm_90a device passes only) */
/* Every row slot's E elements of a lane from the block's rows in a stage
   (the warp's from row r0), as fa__quant_load_rows reads them from x: row
   r's 8 elements from j0 (a multiple of 8) are the 16-byte chunk
   (j0 % 64) / 8 ^ r % 8 of row r of box j0 / 64. Rows past the sequence
   came as zeros (outside the tensor map), and d = E LPR here. */
template <int E, int LPR, int C, int R, int G, int B, bool BF16>
static __device__ __forceinline__ void fa__quant_load_stage(float (&y)[G][E], uint32_t stage, int r0, int lane)
{
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int r = g * (32 / LPR) + lane / LPR;
        const uint32_t row = (uint32_t)(r0 + r);
#pragma unroll
        for (int c = 0; c < E; c += 8) {
            const uint32_t j0 = (uint32_t)fa__quant_elem<C, LPR>(lane % LPR, c);
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < R) /* (RPG > R rows side by side at d 64) */
                v = fa__ld_shared128(stage + j0 / 64u * (128u * B) + row * 128u + ((j0 % 64u / 8u ^ row % 8u) << 4));
            fa__quant_widen8<BF16>(y[g] + c, v);
        }
    }
}
#endif /* FA__SM90A */

template <int E, int LPR, int B>
__global__ void __launch_bounds__(fa__quant_ring_warps(B, LPR) * 32, fa__quant_ctas(B, LPR, fa__quant_ring_warps(B, LPR)))
fa__quantize_ring_kernel(const __grid_constant__ CUtensorMap map, const fa__quant_params p)
{
#if FA__SM90A
    constexpr int W = fa__quant_ring_warps(B, LPR), C = fa__quant_ring_c(LPR), R = B / W, G = (R + 32 / LPR - 1) / (32 / LPR);
    constexpr int S = fa__quant_stages(E, LPR, B), BOXES = E * LPR / 64;
    constexpr uint32_t STAGE = fa__quant_stage_bytes(E, LPR, B);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, total = p.nblk * p.heads * p.batch;
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(fa__smem90), bars = (base + 7u) & ~7u;
    const uint32_t ring = (bars + FA__QUANT_RING_HEAD + 1023u) & ~1023u;
    float *const mul = (float *)(void *)(fa__smem90 + (bars - base) + 64u);
    /* One thread asks for block blk into stage st (rows past the tensor come as zeros). */
    auto ask = [&](int blk, int st) {
        const fa__quant_blk w = fa__quant_where_blk(p, blk);
        fa__mbar_expect_tx(bars + 8u * st, STAGE);
        for (int i = 0; i < BOXES; ++i)
            fa__tma_load(ring + st * STAGE + i * (128u * B), &map, 64 * i, w.k * B, w.h, w.b, bars + 8u * st);
    };
    if (threadIdx.x == 0) {
        for (int j = 0; j < S; ++j) fa__mbar_init(bars + 8u * j, 1);
        fa__fence_mbar_init();
    }
    __syncthreads(); /* the mbarriers are initialized before anyone uses them */
    if (threadIdx.x == 0)
        for (int j = 0; j < S && (int)blockIdx.x + j * (int)gridDim.x < total; ++j) ask((int)blockIdx.x + j * (int)gridDim.x, j);
    if ((int)threadIdx.x < p.d)
        mul[threadIdx.x + threadIdx.x / 32] = fa__hadamard_mul(p.seed, (int)threadIdx.x, p.inv_sqrt_d);
    __syncthreads(); /* mul is written */
    int st = 0, it = 0;
    for (int blk = (int)blockIdx.x; blk < total; blk += (int)gridDim.x, ++it) {
        float y[G][E];
        fa__mbar_wait(bars + 8u * st, (uint32_t)(it / S) & 1u); /* the block's rows have landed */
        if (p.bf16) fa__quant_load_stage<E, LPR, C, R, G, B, true>(y, ring + st * STAGE, warp * R, lane);
        else fa__quant_load_stage<E, LPR, C, R, G, B, false>(y, ring + st * STAGE, warp * R, lane);
        const float amax = fa__quant_amax<E, LPR, C, G, W>(y, p, mul, mul + 264 + W * (it & 1), lane, warp);
        const fa__quant_blk w = fa__quant_where_blk(p, blk);
        fa__quant_finish<E, LPR, C, R, G>(y, p, amax, w, w.k * B + warp * R, lane);
        /* Past fa__quant_amax's barrier every warp has read the stage: it
           takes the block S steps on. */
        if (threadIdx.x == 0 && blk + S * (int)gridDim.x < total) ask(blk + S * (int)gridDim.x, st);
        st = st + 1 == S ? 0 : st + 1;
    }
    if (threadIdx.x == 0) /* past the last block's barrier: no thread waits any more */
        for (int j = 0; j < S; ++j) fa__mbar_inval(bars + 8u * j);
#else
    /* Compiled for a target without TMA: a marker the host can see (static
       shared memory), so it never launches this empty body. */
    __shared__ volatile int fa__quant_ring_missing;
    fa__quant_ring_missing = 0;
    (void)p;
    (void)map;
#endif
}

/* Launch the ring kernel when it can run: the Hadamard at d 64, 128 or
   256, compute capability 9.0 with its sm_90a code in the binary, a view
   TMA can describe (16-byte strides; not packed with cu_seqlens, whose
   rows the host cannot see), the stages fit the device's shared memory.
   False sends the call to fa__quantize_kernel. */
template <int B>
static bool fa__quantize_ring_launch(fa__quant_params kp, int batch, const fa__gpu &g, cudaStream_t st)
{
    const int lpr = kp.d == 64 ? 2 : kp.d == 128 ? 4 : 8, warps = fa__quant_ring_warps(B, lpr);
    const int ctas = fa__quant_ctas(B, lpr, warps);
    const int stages = fa__quant_stages(32, lpr, B);
    void (*kernel)(const CUtensorMap, fa__quant_params) = lpr == 2   ? fa__quantize_ring_kernel<32, 2, B>
                                                          : lpr == 4 ? fa__quantize_ring_kernel<32, 4, B>
                                                                     : fa__quantize_ring_kernel<32, 8, B>;
    const int64_t total = (int64_t)kp.nblk * kp.heads * batch, grid = FA__QUANT_RING_CTAS ? FA__QUANT_RING_CTAS
                                                                                          : (int64_t)ctas * g.sms;
    const size_t smem = fa__quant_ring_smem(stages, 32, lpr, B);
    cudaFuncAttributes fa;
    CUtensorMap map;
    if (!FA__QUANT_RING || !kp.hadamard || (kp.d != 64 && kp.d != 128 && kp.d != 256) || g.family != 3 ||
        !kp.vec || kp.cu_seqlens || stages < 2 || total > INT_MAX / 8 || (int64_t)smem > g.smem_optin)
        return false;
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    if (fa.binaryVersion != 90 || fa.sharedSizeBytes != 0) return false; /* the stub body */
    memset(&map, 0, sizeof map);
    if (fa__tma_map(&map, kp.x, kp.bf16, kp.d, kp.seqlen, kp.heads, batch, kp.x_seq, kp.x_head, kp.x_batch, B))
        return false;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    kp.batch = batch;
    FA__LAUNCH(kernel, (unsigned)(total < grid ? total : grid), warps * 32, smem, st, map, kp);
    return true;
}
#endif /* FLASHATTN_NO_HOPPER */

/* The row layout for d (E LPR = d rounded up to a power of two, at least 16;
   chunks of C = E, except past d 128, where 8-element chunks let a row's
   eight lanes read 128 neighbouring bytes a load). */
template <int B>
static void fa__quantize_launch(const fa__quant_params &kp, int batch, const fa__gpu &g, cudaStream_t st)
{
    const dim3 grid((unsigned)kp.nblk, (unsigned)kp.heads, (unsigned)batch), block(FA__QUANT_WARPS * 32);
    void (*kernel)(fa__quant_params) = kp.d <= 16    ? fa__quantize_kernel<16, 1, 16, B>
                                       : kp.d <= 32  ? fa__quantize_kernel<32, 1, 32, B>
                                       : kp.d <= 64  ? fa__quantize_kernel<32, 2, 32, B>
                                       : kp.d <= 128 ? fa__quantize_kernel<32, 4, 32, B>
                                                     : fa__quantize_kernel<32, 8, 8, B>;
#ifndef FLASHATTN_NO_HOPPER
    if (fa__quantize_ring_launch<B>(kp, batch, g, st)) return;
#else
    (void)g;
#endif
    FA__LAUNCH(kernel, grid, block, 0, st, kp);
}

#ifdef __cplusplus
extern "C" {
#endif

FLASHATTN_DEF fa_status fa_quantize_cuda(const fa_quant *p, fa_tensor x, fa_tensor out, float *descale,
                                         void *stream)
{
    static const char fn[] = "fa_quantize_cuda";
    const cudaStream_t st = (cudaStream_t)stream;
    fa__quant_params kp;
    fa__gpu g = {}; /* (family 3: compute capability 9.0, the ring kernel's) */
    cudaError_t e = cudaSuccess;
    int mode, major, minor;
    fa_status s = fa__check_quant(fn, p, &x, &out, descale, 0);
    if (s != FA_OK) return s;
    if (x.dtype != FA_F16 && x.dtype != FA_BF16)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: x.dtype is %s: the GPU quantizer takes FA_F16 or FA_BF16", fn,
                        fa__dtype_name(x.dtype));
    if (p->heads > 65535 || p->batch > 65535 || FA__FP8_BLOCKS(p->seqlen, p->role) > INT_MAX)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: heads (%d) and batch (%d) must be <= 65535 (CUDA grid limits)",
                        fn, p->heads, p->batch);
    memset(&kp, 0, sizeof kp);
    kp.x = (const uint16_t *)x.data; kp.out = (uint8_t *)out.data; kp.descale = descale;
    kp.x_batch = x.batch_stride; kp.x_seq = x.seq_stride; kp.x_head = x.head_stride;
    kp.o_batch = out.batch_stride; kp.o_seq = out.seq_stride; kp.o_head = out.head_stride;
    kp.cu_seqlens = p->cu_seqlens; kp.seqlen = p->seqlen; kp.heads = p->heads; kp.d = p->head_dim;
    kp.nblk = (int)FA__FP8_BLOCKS(p->seqlen, p->role);
    kp.hadamard = p->hadamard; kp.seed = p->seed;
    kp.inv_sqrt_d = (float)(1.0 / sqrt((double)p->head_dim)); /* as fa_quantize computes it */
    kp.bf16 = x.dtype == FA_BF16;
    kp.vec = p->head_dim % 16 == 0 && ((uintptr_t)x.data & 15u) == 0 && ((uintptr_t)out.data & 15u) == 0 &&
          (x.batch_stride | x.seq_stride | x.head_stride) % 8 == 0 &&
          (out.batch_stride | out.seq_stride | out.head_stride) % 16 == 0;
    if ((s = fa__gpu_query(fn, &g, &major, &minor)) != FA_OK) return s;
    if (p->per_tensor) e = cudaMemsetAsync(descale, 0, sizeof(float), st); /* amax 0, as bits */
    for (mode = p->per_tensor ? 1 : 0; e == cudaSuccess && mode <= (p->per_tensor ? 2 : 0); ++mode) {
        kp.mode = mode;
        if (p->role == FA_QUANT_Q) fa__quantize_launch<FLASHATTN_FP8_BLOCK_Q>(kp, p->batch, g, st);
        else fa__quantize_launch<FLASHATTN_FP8_BLOCK_K>(kp, p->batch, g, st);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess && p->per_tensor) {
        FA__LAUNCH(fa__quantize_finish_kernel, 1, 1, 0, st, descale);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) return fa__cuda_fail(fn, e, "quantize launch");
    return FA_OK;
}

#ifdef __cplusplus
}
#endif
#endif /* !FA__EMU_NO_QUANT */

#ifndef FLASHATTN_NO_BACKWARD
/* ============================================================================
   >>backward  GPU backward pass for sm_80+ (FlashAttention-2; FlashAttention Alg. 4)
   ============================================================================

   What it computes. The forward kept only O and the log-sum-exp L of every
   query row, so the backward rebuilds each tile of P from scratch
   (recomputation, Alg. 4 line 13): P_ij = exp(S_ij - L_i). With
   D_i = rowsum(dO_i * O_i) (line 19; FlashAttention derives why this equals
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
        workspace, and zero the fp32 dQ accumulator (its first slice), but
        before the sm_90a deterministic kernels, whose first add of a tile
        copies it (p.det_store).
     2. fa__bwd_kernel_sm80 (or, on an H100 at D = 64 / 128 / 256 without
        cu_seqlens, its wgmma twin fa__bwd_kernel_sm90, below): one CTA per
        (K/V block j, KV head, batch) - the FA2
        loop order of the backward: K_j, V_j stay in shared memory, dK_j, dV_j
        stay in registers, and the CTA walks every Q block i (of every query
        head of the KV head's group, which is how GQA/MQA sums dK/dV without
        copies) that can see block j. dQ_i gets a partial sum from every j, so
        it goes to an fp32 accumulator: added (atomics; the sm_90a kernel a
        tile at a time, as a bulk reduce-add) by default; in deterministic
        mode the sm_90a kernel makes each tile's adds in a fixed
        order (fa__bwd_sm90_send_dq, _send_dq256), and elsewhere each j writes its own
        slice and kernel 3 sums them in order j = 0, 1, 2, ... (bit-identical
        run to run either way). With a block mask the CTA
        visits only the (query head, query block) steps whose 128 x 128
        block the mask lists (>>bwd-bsparse; its bitmap, built first by
        fa__bm_rows_kernel).
     3. fa__bwd_dq_convert_kernel: dQ = scale * accumulator, in the output type
        (det_store: zero where no key block added to the tile, by its count;
        the chains' slices summed in order where the adds went in chains,
        fa__bwd_det_chained).

   The tiles (Bc keys per CTA, Br queries per step), for 8 warps:
       d <= 64 : Bc 128, Br 64    d <= 128: Bc 128, Br 64    d <= 256: Bc 64, Br 32
   Other head dims (96, 192, any multiple of 8) run on the next larger kernel
   with zero-filled columns: correct, not tuned. (FLASHATTN_HEAD_DIMS selects
   these sizes too: fa__bwd_kernel_dim.) Each warp of a CTA: 16 keys; 1 CTA per SM.

   Workspace (fa_backward_cuda_workspace_size): L and D, 4 bytes per query
   row and head each, plus the fp32 dQ accumulator, 4 * D bytes per query row
   and head (rows per sequence rounded up to 64 without cu_seqlens) - times
   ceil(seqlen_k / Bc) in deterministic mode, where every K/V block of the
   sm_80 kernel owns a slice (large for long sequences: 16k x 16 heads x
   d128 is 4 GB; the default atomic mode needs 1/128 of that), plus a count
   per 64-row tile. The size does not depend on the GPU, so it covers the
   sm_80 path even where the sm_90a kernel, whose ordered adds use the first
   slice only, runs.

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

/* ---- what the forward's primitives (>>gpu-ptx, >>gpu-smem) do not cover --- */

/* Two 16-bit values of one register -> two floats (the inverse of fa__pack2). */
template <bool BF16> static __device__ __forceinline__ float2 fa__bwd_unpack2(uint32_t u)
{
    if (BF16) {
        __nv_bfloat162 v;
        memcpy(&v, &u, 4);
        return __bfloat1622float2(v);
    }
    __half2 v;
    memcpy(&v, &u, 4);
    return __half22float2(v);
}
#ifndef FLASHATTN_CUDA_EMU /* the emulator defines these two (and FA__LAUNCH, before >>gpu-ptx) */
/* 4-byte asynchronous copy (L and D of a query block); src_bytes 0 zero-fills. */
static __device__ __forceinline__ void fa__bwd_cp_async4(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ uint32_t fa__bwd_smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif /* FLASHATTN_CUDA_EMU */

/* ---- parameters and per-sequence geometry ---------------------------------- */

/* (fa__bwd_sm90_klayout's; the accumulator's layout and the host's plan read it in every build) */
#ifndef FA__BWD_SM90_WIDE
#define FA__BWD_SM90_WIDE 1 /* 0: 64-row steps at D = 64 too (ablation only) [bwd-wide] */
#endif
#ifndef FA__BWD_DET_CHAINS
#define FA__BWD_DET_CHAINS 2 /* the deterministic sm_90a kernels' chains of dQ adds a tile, at most (>= 1) */
#endif
/* Every sequence's accumulator rows start at a multiple of the sm_90a
   kernel's largest step (its L, D loads and dQ adds take whole steps) */
#define FA__BWD_ACC_ALIGN (FA__BWD_SM90_WIDE ? 128 : 64)
/* n rounded up to a multiple of FA__BWD_ACC_ALIGN */
template <class T> static __host__ __device__ __forceinline__ T fa__bwd_acc_pad(T n)
{
    return (n + FA__BWD_ACC_ALIGN - 1) / FA__BWD_ACC_ALIGN * FA__BWD_ACC_ALIGN;
}
/* Query rows a step of the sm_90a backward kernel at head dim D, with
   softcap or the extras (ALiBi, dropout) or without: the one place they
   are chosen (fa__bwd_sm90_klayout says why; kernel 3 finds a step's
   dQ count by them) */
static __host__ __device__ constexpr int fa__bwd_sm90_step_rows(int D, bool extras)
{
    return FA__BWD_SM90_WIDE && D == 64 && !extras ? 128 : 64;
}

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
    int *dq_sem;           /* deterministic: adds done per 64-row tile and chain [hq][acc_rows / 64][FA__BWD_DET_CHAINS]
                              (the sm_90a kernel's ordered adds, fa__bwd_sm90_send_dq) */
    const int32_t *cu_q, *cu_k;
    const float *alibi;    /* [hq] or NULL */
    int batch, seqlen_q, seqlen_k, hq, hkv, group, d, acc_d;
    int acc_sq;            /* accumulator rows per sequence: seqlen_q rounded up to
                              FA__BWD_ACC_ALIGN (0 with cu_seqlens: fa__bwd_seq_info) */
    int64_t acc_rows;      /* rows per head: batch * acc_sq (cu_seqlens: an upper bound,
                              FA__BWD_ACC_ALIGN (ceil(batch seqlen_q / FA__BWD_ACC_ALIGN) + batch)) */
    int64_t acc_slice;     /* hq * acc_rows * acc_d: one j slice (deterministic) */
    float scale, scale_log2, softcap;
    int causal, window, wl, wr;
    float rp_drop;         /* 1 / (1 - p) */
    uint32_t drop_threshold;
    int dropout;
    uint64_t seed, offset;
    int deterministic;
    int br, bc;            /* the main kernel's tile, for the convert kernel */
    int acc_tiled;         /* the accumulator's 64-row blocks in the sm_90a kernel's
                              order (fa__bwd_acc_place), for the convert kernel */
    fa__bmask bm;          /* a block mask (bits NULL: none), >>bwd-bsparse */
    float scale_cap;       /* scale / softcap (softcap > 0): tanh's factor in fa__bwd_score */
    int det_rot;           /* the sm_90a DET kernels on a cooperative grid, rotated walks (fa__bwd_rotates) */
    int *det_next;         /* the sm_90a DET kernels on a persistent grid: the next unit to take, after
                              the tile counts in the workspace (kernel 1 zeroes it); NULL: a block a unit
                              (fa__bwd_sm90_take) */
    int det_store;         /* the sm_90a DET kernels: a tile's first adder copies its partial dQ instead of
                              adding it (fa__bwd_sm90_dq_writer), so kernel 1 zeroes no accumulator, and
                              kernel 3 takes a tile whose count in p.dq_sem is 0 (no adder) as zeros */
    int det_chains;        /* the sm_90a DET kernels: a tile's adders take turns between this many
                              accumulators (slices; FA__BWD_DET_CHAINS where the workspace has them, else 1),
                              each its own ordered chain; kernel 3 sums them in order (fa__bwd_sm90_dq_writer) */
} fa__bwd_params;

/* Tile `tile`'s counts in p.dq_sem (64-row tiles, flat over the heads), one
   a chain: adds done in each */
template <class I> static __device__ __forceinline__ int *fa__bwd_tile_counts(const fa__bwd_params &p, I tile)
{
    return p.dq_sem + FA__BWD_DET_CHAINS * tile;
}

/* Where sequence b lives: rows sq x sk, and the element offset of its row 0
   (varlen: row cu[b] of the packed tensor; else batch b). */
typedef struct fa__bwd_seq {
    int sq, sk;
    int sq_pad;             /* accumulator rows of the sequence (>= sq) */
    int64_t q_tok0, k_tok0; /* first token's row in the packed/varlen view */
    int64_t lse0;           /* L index of (b, head 0, row 0); head stride lse_hs */
    int64_t lse_hs;
    int64_t acc_row0;       /* accumulator row of (b, row 0) */
} fa__bwd_seq;

__device__ __forceinline__ fa__bwd_seq fa__bwd_seq_info(const fa__bwd_params &p, int b) {
    fa__bwd_seq s;
    if (p.cu_q) {
        /* (accumulator rows: each sequence from a multiple of A = FA__BWD_ACC_ALIGN,
           A (ceil(q0 / A) + b), for A rows; they do not overlap, as
           ceil(x / A) + ceil(y / A) <= ceil((x + y) / A) + 1) */
        const int A = FA__BWD_ACC_ALIGN, q0 = p.cu_q[b], q1 = p.cu_q[b + 1];
        s.sq = q1 - q0;
        s.q_tok0 = q0;
        s.lse0 = q0;
        s.lse_hs = p.cu_q[p.batch];
        s.acc_row0 = (int64_t)A * ((q0 + A - 1) / A + b);
        s.sq_pad = fa__bwd_acc_pad(s.sq);
    } else {
        s.sq = p.seqlen_q;
        s.q_tok0 = -1;
        s.lse0 = (int64_t)b * p.hq * p.seqlen_q;
        s.lse_hs = p.seqlen_q;
        s.acc_row0 = (int64_t)b * p.acc_sq;
        s.sq_pad = p.acc_sq;
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

/* fa__bwd_visible for a fixed key j as a range of queries: j is visible to
   query i exactly when lo <= i <= hi (empty when j >= sk) */
__device__ __forceinline__ void fa__bwd_key_queries(const fa__bwd_params &p, int sq, int sk, int j, int &lo,
                                                    int &hi) {
    const int c = j - (sk - sq); /* j <= i' = i + sk - sq: i >= c */
    lo = p.causal ? c : -(1 << 30);
    hi = 1 << 30;
    if (p.window) { /* i' - wl <= j <= i' + wr */
        lo = max(lo, c - p.wr);
        hi = c + p.wl;
    }
    if (j >= sk) lo = 1 << 30, hi = -(1 << 30);
}

/* Does the tile (queries i0 .. i0+br-1, keys j0 .. j0+bc-1) need the element
   mask: does it reach past the last key, or does a causal or window edge
   cross it? (Rows past sq need none: their L = +inf makes P = 0.) */
__device__ __forceinline__ bool fa__bwd_tile_needs_mask(const fa__bwd_params &p, const fa__bwd_seq &s,
                                                        int i0, int j0, int br, int bc) {
    const int off = s.sk - s.sq;
    return (j0 + bc > s.sk) || (p.causal && j0 + bc - 1 > i0 + off) ||
           (p.window && (j0 < i0 + br - 1 + off - p.wl || j0 + bc - 1 > i0 + off + p.wr));
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

/* ---- >>bwd-bsparse  block masks (Block-Sparse FlashAttention) in the
   backward: a unit (key block from j0, KV head hk, sequence b) walks the
   steps it = 0 .. iters - 1, step it being query head hk group + it / nib
   and query block ib0 + it % nib, and with a block mask visits only the
   steps whose 128 x 128 block (I = ib br / 128, J = j0 / 128) the mask
   lists: the rest get no copy, no product and no dQ partial. Br and Bc
   divide 128 (asserted by each kernel), so a tile lies in one mask block.
   Every role of a kernel (the sm_90a producer and consumers, the sm_80
   kernel's prefetch) finds the same next step, and the deterministic dQ
   sum (kernel 3) adds exactly the slices of the visited steps. A unit with
   no visited step writes dK = dV = 0, as one that no query sees. The
   persistent sm_90a kernel deals its units as a snake, in their own order
   or, under a causal mask above D 64, most work first (fa__bwd_sm90_sched,
   fa__bwd_bm_sorted). */

/* The first step >= it that the block mask lets through (it itself
   without one; iters or more: none). br: rows per query block. Every
   caller asks for 0 or for the step after one it walked, so step it lies
   in a listed block when step it - 1 did and both are of one head and one
   128-row block (br < 128): no load then. */
__device__ __forceinline__ int fa__bwd_next_step(const fa__bwd_params &p, int b, int hk, int j0, int ib0, int nib,
                                                 int iters, int br, int it) {
    if (!p.bm.bits) return it;
    if (it > 0 && it < iters && it % nib != 0 && (ib0 + it % nib) * br / 128 == (ib0 + it % nib - 1) * br / 128)
        return it;
    /* step it is head it / nib of the group, query block row ib0 + it % nib
       (br rows): from the key block's column of bits, 32 query blocks a
       load (fa__bm_next_q), not a load a step */
    while (it < iters) {
        const int hh = it / nib, ib = ib0 + it % nib, I = ib * br / 128;
        const int next = fa__bm_next_q(p.bm, b, hk * p.group + hh, j0 / 128, I);
        if (next == I) return it;
        const int64_t ib_next = (int64_t)next * 128 / br; /* that block's first step (INT_MAX: none) */
        if (ib_next < ib0 + nib) return hh * nib + (int)(ib_next - ib0);
        it = (hh + 1) * nib; /* none left for this head: the next one's first step */
    }
    return iters;
}

/* ---- kernel 1: D = rowsum(dO * O), zero the dQ accumulator ----------------- */

/* A row of a head takes acc_d / 8 lanes, each 8 columns from c0 (fa__bwd_run's grid).
   Rows sq .. sq_pad - 1 (the padding that makes every sequence a whole number
   of FA__BWD_ACC_ALIGN-row blocks) get
   D = 0, L = +inf and a zero accumulator: a query block that reaches past
   the sequence then computes P = 0 there, and its dQ rows land in the
   padding. */
template <bool BF16>
__global__ void __launch_bounds__(256) fa__bwd_preprocess_kernel(const fa__bwd_params p) {
    /* acc_d / 8 lanes a row (8 columns each), 32 / that rows a warp (fa__bwd_run's grid) */
    const int lpr = p.acc_d / 8, lane = threadIdx.x % 32, c0 = lane % lpr * 8;
    const int t = (blockIdx.x * 8 + threadIdx.x / 32) * (32 / lpr) + lane / lpr, h = blockIdx.y, b = blockIdx.z;
    fa__bwd_seq s = fa__bwd_seq_info(p, b);
    if (p.det_next && (blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x) == 0) *p.det_next = 0;
    if (t - lane / lpr >= s.sq_pad) return; /* (the warp's rows all past the padding; the rest stay for the sum) */
    const bool real = t < s.sq;
    float acc = 0.f;
    if (real && c0 < p.d) {
        const uint4 o4 = *reinterpret_cast<const uint4 *>(
            (const uint16_t *)p.o.data + fa__bwd_off(p.o, b, s.q_tok0, t, h) + c0);
        const uint4 g4 = *reinterpret_cast<const uint4 *>(
            (const uint16_t *)p.dout.data + fa__bwd_off(p.dout, b, s.q_tok0, t, h) + c0);
        const uint32_t ou[4] = {o4.x, o4.y, o4.z, o4.w}, gu[4] = {g4.x, g4.y, g4.z, g4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float2 a = fa__bwd_unpack2<BF16>(ou[e]), c = fa__bwd_unpack2<BF16>(gu[e]);
            acc += a.x * c.x + a.y * c.y;
        }
    }
    for (int m = lpr / 2; m >= 1; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m); /* the row's lanes */
    if (t >= s.sq_pad) return;
    if (c0 == 0) {
        /* Both indexed like the dQ accumulator rows, so the main kernel can
           cp.async them by query block. L becomes log2 units, and -inf (a row
           that sees no key) becomes +inf, so that exp2(x - L) is 0 there
           even for masked x = -inf (no NaN from -inf - -inf). */
        const int64_t r = (int64_t)h * p.acc_rows + s.acc_row0 + t;
        const float l = real ? p.lse[s.lse0 + (int64_t)h * s.lse_hs + t] : -INFINITY;
        p.dsum[r] = acc;
        p.lse2[r] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
    }
    /* (deterministic: slice 0 and the tile counts too, every chain's, for the
       sm_90a kernel's ordered adds; the sm_80 kernel overwrites its slices) */
    if (p.deterministic && c0 == 0 && t % 64 == 0)
        for (int c = 0; c < FA__BWD_DET_CHAINS; c++)
            fa__bwd_tile_counts(p, ((int64_t)h * p.acc_rows + s.acc_row0 + t) / 64)[c] = 0;
    if (!p.det_store) {
        float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
        float *a = p.dq_acc + ((int64_t)h * p.acc_rows + s.acc_row0 + t) * p.acc_d + c0;
        reinterpret_cast<float4 *>(a)[0] = z;
        reinterpret_cast<float4 *>(a)[1] = z;
    }
}

/* ---- kernel 3: dQ = scale * accumulator (sum of slices in fixed order) ------ */

/* The accumulator's order: each sequence's rows from a multiple of 64
   (fa__bwd_seq_info), each 64-row block contiguous, in it row-major, or
   (acc_tiled 1: the sm_90a kernel at D = 64 and 128; 2: at D = 256) as that
   kernel's consumer threads hold it, so that a block leaves shared memory
   as one contiguous bulk add. acc_tiled 1: float4 256 i + T of the block
   is float4 i of consumer thread T = 128 cw + 32 wq + 4 g + t, which holds
   rows 16 wq + g (elements 0, 1) and 16 wq + g + 8 (2, 3), columns
   cw D/2 + 8 i + 2 t (+1) (wgmma's accumulator fragment, fa__bwd_sm90_stage_dq).
   acc_tiled 2: its 16 float4s n as float4 n / 8 * 2048 + w * 1024 +
   128 (n % 8) + T of warpgroup w's thread T, columns 128 w + 8 n + 2 t (+1)
   (fa__bwd_sm90_send_dq256). fa__bwd_acc_place: where elements e and
   e + 1 (e = 0 or 2: two adjacent columns of one row) of float4 f of a
   block go, row and column in the block. */
static __device__ __forceinline__ void fa__bwd_acc_place(const fa__bwd_params &p, int f, int e, int &row, int &col)
{
    if (!p.acc_tiled) {
        row = f / (p.acc_d / 4), col = f % (p.acc_d / 4) * 4 + e;
        return;
    }
    const int T = f % 128; /* the thread's fragment: rows g, g + 8, columns 2 t, 2 t + 1 */
    row = T / 32 * 16 + T % 32 / 4 + e / 2 * 8;
    col = T % 4 * 2 + (p.acc_tiled == 2 ? f % 2048 / 1024 * 128 + (f / 2048 * 8 + f % 1024 / 128) * 8
                                         : f % 256 / 128 * (p.acc_d / 2) + f / 256 * 8);
}

/* Float4 f of the accumulator block at a (rows t0 ..): as it lies, or
   (deterministic, the sm_80 kernel's slices, row-major) the partial dQ of
   every K/V block j that wrote one for its row, summed in the order
   j = 0, 1, 2, ...: the same rounding every run. */
static __device__ __forceinline__ float4 fa__bwd_acc_read(const fa__bwd_params &p, const fa__bwd_seq &s,
                                                         const float *a, int f, int t0, int b, int h)
{
    if (!p.deterministic) return reinterpret_cast<const float4 *>(a)[f];
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    const int ib = (t0 + f / (p.acc_d / 4)) / p.br, nj = (s.sk + p.bc - 1) / p.bc;
    for (int j = 0; j < nj; ++j) {
        int ib0, ib1;
        fa__bwd_q_range(p, s.sq, s.sk, j * p.bc, p.br, p.bc, &ib0, &ib1);
        if (ib < ib0 || ib >= ib1) continue;
        /* a step the block mask skips wrote no slice (>>bwd-bsparse) */
        if (p.bm.bits && !fa__bm_visited(p.bm, b, h, ib * p.br / 128, j * p.bc / 128)) continue;
        const float4 y = reinterpret_cast<const float4 *>(a + (int64_t)j * p.acc_slice)[f];
        x.x += y.x, x.y += y.y, x.z += y.z, x.w += y.w;
    }
    return x;
}

/* A block: 64 accumulator rows of one head. Its float4s are read in the
   order they lie (float4 f = 256 k + thread: a warp reads 512 contiguous
   bytes whatever the layout), scaled, converted and put in place in a
   row-major tile in shared memory (rows padded by 16 bytes: the 8 rows of a
   fragment land on different banks), then written as 16-byte row pieces. */
template <bool BF16>
__global__ void __launch_bounds__(256) fa__bwd_dq_convert_kernel(const fa__bwd_params p) {
    extern __shared__ __align__(1024) unsigned char fa__bwd_smem[]; /* (the main kernel's name) */
    uint32_t *tile = reinterpret_cast<uint32_t *>(fa__bwd_smem); /* 64 x (acc_d + 8) halves, as pairs */
    const int h = blockIdx.y, b = blockIdx.z, t0 = blockIdx.x * 64, pitch = p.acc_d / 2 + 4; /* (pairs) */
    fa__bwd_seq s = fa__bwd_seq_info(p, b);
    if (t0 >= s.sq) return;
    const int64_t row0 = (int64_t)h * p.acc_rows + s.acc_row0 + t0;
    const float *a = p.dq_acc + row0 * p.acc_d; /* the block */
    const int n4 = 16 * p.acc_d; /* the block's float4s */
    /* det_store: no key block added to the block's step (counted at its first
       64 rows; the deterministic kernels take no extras), which is zero; and
       how many chains added to it (p.det_chains; chain c has an adder only
       if chain c - 1 has), whose slices are added here in order */
    const int *sem =
        fa__bwd_tile_counts(p, (fa__bwd_sm90_step_rows(p.acc_d, false) == 128 ? row0 & ~(int64_t)127 : row0) / 64);
    const bool none = p.det_store && !sem[0];
    int chains = 1;
    while (p.det_store && chains < p.det_chains && sem[chains]) chains++;
    for (int f0 = threadIdx.x; f0 < n4; f0 += 1024) {
        float4 x[4]; /* (four loads in flight before the first is placed) */
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (f0 + 256 * u < n4)
                x[u] = none ? make_float4(0.f, 0.f, 0.f, 0.f) : fa__bwd_acc_read(p, s, a, f0 + 256 * u, t0, b, h);
        for (int c = 1; c < chains; c++) /* (chain 0's sum, then 1's, ...: the same order every run) */
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (f0 + 256 * u < n4) {
                    const float4 y = reinterpret_cast<const float4 *>(a + c * p.acc_slice)[f0 + 256 * u];
                    x[u].x += y.x, x[u].y += y.y, x[u].z += y.z, x[u].w += y.w;
                }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int row, col;
            if (f0 + 256 * u >= n4) break;
            fa__bwd_acc_place(p, f0 + 256 * u, 0, row, col);
            tile[row * pitch + col / 2] = fa__pack2<BF16>(x[u].x * p.scale, x[u].y * p.scale);
            fa__bwd_acc_place(p, f0 + 256 * u, 2, row, col);
            tile[row * pitch + col / 2] = fa__pack2<BF16>(x[u].z * p.scale, x[u].w * p.scale);
        }
    }
    __syncthreads(); /* the tile is whole: its rows are read by other threads than wrote them */
    const int pieces = p.acc_d / 8; /* 16-byte pieces a row */
    for (int q = threadIdx.x; q < 64 * pieces; q += 256) {
        const int r = q / pieces, c0 = q % pieces * 8;
        if (t0 + r >= s.sq || c0 >= p.d) continue;
        *reinterpret_cast<uint4 *>((uint16_t *)p.dq.data + fa__bwd_off(p.dq, b, s.q_tok0, t0 + r, h) + c0) =
            *reinterpret_cast<const uint4 *>(tile + r * pitch + c0 / 2);
    }
}

/* ---- kernel 2: the main loop over Q blocks for one K/V block --------------- */

/* Four 4-byte values a[0..3] of each of the quad's lanes (t = lane % 4) as
   a 4 x 4 matrix, lane t's row t, transposed: lane t ends with column t
   (a[k] from lane k), in two exchanges of two values (lanes t ^ 2, t ^ 1). */
static __device__ __forceinline__ void fa__quad_transpose(uint32_t (&a)[4], int t)
{
    const bool hi = t & 2, odd = t & 1;
    uint32_t y0 = __shfl_xor_sync(0xffffffffu, hi ? a[0] : a[2], 2);
    uint32_t y1 = __shfl_xor_sync(0xffffffffu, hi ? a[1] : a[3], 2);
    if (hi) a[0] = y0, a[1] = y1;
    else a[2] = y0, a[3] = y1;
    y0 = __shfl_xor_sync(0xffffffffu, odd ? a[0] : a[1], 1);
    y1 = __shfl_xor_sync(0xffffffffu, odd ? a[2] : a[3], 1);
    if (odd) a[0] = y0, a[2] = y1;
    else a[1] = y0, a[3] = y1;
}

/* The end of kernel 2 (line 24): write a thread's dK_j (times scale) and dV_j
   fragments, NT 8-column tiles from column col0 + 2 t4 of key rows r, r + 8
   of block j0 (the mma C layout). Rows past the keys and columns past d are
   not written; a block that no query sees writes 0. Each quad's fragments
   of four column blocks are transposed first (fa__quad_transpose), so that
   lane t4 holds all 8 columns of block 4 m + t4 and stores them as 16
   bytes: a warp writes whole 64-byte row pieces (a fragment's own 4 bytes
   a lane would fill half sectors). */
template <bool BF16, int NT>
static __device__ __forceinline__ void fa__bwd_store_dkdv(const fa__bwd_params &p, const fa__bwd_seq &s, int b,
                                                          int hk, int j0, int r, int col0, int t4,
                                                          const float (&dk)[NT][4], const float (&dv)[NT][4]) {
    static_assert(NT % 4 == 0, "whole groups of four column blocks");
    uint16_t *gdk = (uint16_t *)p.dk.data + fa__bwd_off(p.dk, b, s.k_tok0, j0, hk);
    uint16_t *gdv = (uint16_t *)p.dv.data + fa__bwd_off(p.dv, b, s.k_tok0, j0, hk);
#pragma unroll
    for (int m = 0; m < NT / 4; ++m) {
        const int col = col0 + (4 * m + t4) * 8; /* (d is a multiple of 8: a block is in or out) */
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int rr = r + hh * 8;
            uint32_t k4[4], v4[4];
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                k4[x] = fa__pack2<BF16>(dk[4 * m + x][2 * hh] * p.scale, dk[4 * m + x][2 * hh + 1] * p.scale);
                v4[x] = fa__pack2<BF16>(dv[4 * m + x][2 * hh], dv[4 * m + x][2 * hh + 1]);
            }
            fa__quad_transpose(k4, t4);
            fa__quad_transpose(v4, t4);
            if (col >= p.d || j0 + rr >= s.sk) continue;
            *reinterpret_cast<uint4 *>(gdk + rr * p.dk.ss + col) = make_uint4(k4[0], k4[1], k4[2], k4[3]);
            *reinterpret_cast<uint4 *>(gdv + rr * p.dv.ss + col) = make_uint4(v4[0], v4[1], v4[2], v4[3]);
        }
    }
}

/* Swizzled element index of (row r, column col) in a shared tile whose rows
   hold CH 16-byte chunks: the forward's fa__swizzle (>>gpu-smem) plus the
   column within the chunk (the 4-byte dS^T stores address inside chunks). */
template <int CH>
static __device__ __forceinline__ int fa__bwd_swz(int r, int col) {
    return fa__swizzle<CH * 8>(r, col >> 3) + (col & 7);
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

/* acc = A B^T for one warp: A is the warp's 16 rows (K_j or V_j) at swizzled
   address aA, B is NQ * 8 rows (Q_i or dO_i) at aB, ROWB bytes apart, both
   [rows][D] in shared memory. Used for S^T = K_j Q_i^T and dP^T = V_j dO_i^T,
   which differ only in their operands. */
template <bool BF16, int D, int NQ, int CH, uint32_t ROWB>
static __device__ __forceinline__ void fa__bwd_mma_abt(float (&acc)[NQ][4], uint32_t aA, uint32_t aB) {
#pragma unroll
    for (int n = 0; n < NQ; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        fa__ldmatrix_x4(a, fa__bwd_at<CH>(aA, 2 * kk));
#pragma unroll
        for (int np = 0; np < NQ / 2; ++np) {
            uint32_t b[4];
            fa__ldmatrix_x4(b, fa__bwd_at<CH>(aB + np * 16 * ROWB, 2 * kk));
            fa__mma16816<BF16>(acc[2 * np], a, b[0], b[1]);
            fa__mma16816<BF16>(acc[2 * np + 1], a, b[2], b[3]);
        }
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

/* The compile-time shape of the sm_80 kernel: Bc = BC keys a CTA, Br = BR
   queries a step, NWARPS warps, WD warps sharing a key row's dK/dV columns
   (2 at d256). */
template <int D_, int BR_, int BC_, int NWARPS_, int WD_> struct fa__bwd_traits {
    static constexpr int D = D_, BR = BR_, BC = BC_, NWARPS = NWARPS_, WD = WD_;
    static constexpr int NT = NWARPS * 32;
    static constexpr int CH = D / 8;           /* chunks per K/V/Q/dO row */
    static constexpr int CHS = BR / 8;         /* chunks per dS^T row */
    static constexpr int NQ = BR / 8;          /* n8 tiles of queries in S^T */
    static constexpr int DW = D / WD;          /* dK/dV columns per warp */
    static constexpr int STRIPS = BR / 16;     /* dQ: row strips ... */
    static constexpr int NCG = NWARPS / STRIPS; /* ... times column groups */
    static constexpr int QC = D / NCG;         /* dQ columns per warp */
    static constexpr int QCH = QC < 64 ? QC : 64; /* dQ columns per pass (<= 32 registers) */
    static constexpr uint32_t ROWB = CH * 16, QBUF = BR * D * 2; /* bytes per row, per Q buffer */
    static_assert(BC == 16 * NWARPS / WD, "each warp owns 16 keys");
    static_assert(NWARPS % STRIPS == 0 && QC % 16 == 0 && DW % 16 == 0, "warp split");
};

/* A thread's fragment coordinates (g, t4), its warp's keys and columns, and
   its ldmatrix base addresses. "plain A" / "trans B" lanes give rows
   (lane%8) + 8*((lane/8)%2), chunk lane/16; "plain B" / "trans A" lanes give
   rows (lane%8) + 8*(lane/16), chunk (lane/8)%2. */
struct fa__bwd_lane {
    int g, t4;
    int krow, dcol0;   /* the warp's 16 keys and first dK/dV column */
    int strip, cg;     /* dQ: the warp's row strip and column group */
    uint32_t aK, aV;   /* A of S^T, dP^T */
    uint32_t aQB, adOB; /* B of S^T, dP^T */
    uint32_t aQT, adOT; /* B of dK, dV */
    uint32_t adS, aKT; /* A, B of dQ */
};
/* (g and t4 are set by the caller) */
template <class T>
__device__ __forceinline__ void fa__bwd_lane_addrs(fa__bwd_lane &a, uint32_t smem_u, int warp, int lane)
{
    typedef fa__bwd_smem_layout<T::D, T::BR, T::BC> L;
    constexpr int CH = T::CH, CHS = T::CHS;
    a.krow = (warp / T::WD) * 16; a.dcol0 = (warp % T::WD) * T::DW;
    const int rA = (lane & 7) + ((lane >> 3) & 1) * 8, cA = lane >> 4;
    const int rB = (lane & 7) + (lane >> 4) * 8, cB = (lane >> 3) & 1;
    a.aK = smem_u + L::k + 2 * fa__bwd_swz<CH>(a.krow + rA, cA * 8);
    a.aV = smem_u + L::v + 2 * fa__bwd_swz<CH>(a.krow + rA, cA * 8);
    a.aQB = smem_u + L::q + 2 * fa__bwd_swz<CH>(rB, cB * 8);
    a.adOB = smem_u + L::dout + 2 * fa__bwd_swz<CH>(rB, cB * 8);
    a.aQT = smem_u + L::q + 2 * fa__bwd_swz<CH>(rA, a.dcol0 + cA * 8);
    a.adOT = smem_u + L::dout + 2 * fa__bwd_swz<CH>(rA, a.dcol0 + cA * 8);
    a.strip = warp / T::NCG; a.cg = warp % T::NCG;
    a.adS = smem_u + L::ds + 2 * fa__bwd_swz<CHS>(rB, a.strip * 16 + cB * 8);
    a.aKT = smem_u + L::k + 2 * fa__bwd_swz<CH>(rA, a.cg * T::QC + cA * 8);
}

/* Step it's loads into buffer buf: query head h = hk*group + it / nib, query
   block ib0 + it % nib. Q_i, dO_i, and L, D of its rows (prepared by kernel
   1, indexed like the dQ accumulator; rows past sq read as 0, harmless:
   their Q and dO are 0). gq, gdo: p.q.data, p.dout.data. */
template <class T>
__device__ __forceinline__ void fa__bwd_load_step(const fa__bwd_params &p, const fa__bwd_seq &s, const uint16_t *gq,
                                                  const uint16_t *gdo, int b, int hk, int ib0, int nib, int it,
                                                  int buf, uint32_t smem_u, float *sL, float *sD, int tid)
{
    typedef fa__bwd_smem_layout<T::D, T::BR, T::BC> L;
    constexpr int BR = T::BR, D = T::D, NT = T::NT;
    const int h = hk * p.group + it / nib, i0 = (ib0 + it % nib) * BR;
    fa__load_tile<BR, D, NT>(smem_u + L::q + buf * T::QBUF, gq + fa__bwd_off(p.q, b, s.q_tok0, i0, h), p.q.ss,
                             s.sq - i0, p.d);
    fa__load_tile<BR, D, NT>(smem_u + L::dout + buf * T::QBUF, gdo + fa__bwd_off(p.dout, b, s.q_tok0, i0, h),
                             p.dout.ss, s.sq - i0, p.d);
    if (tid < 2 * BR) {
        const int r = tid % BR;
        const float *src = (tid < BR ? p.lse2 : p.dsum) + (int64_t)h * p.acc_rows + s.acc_row0 + i0 + r;
        const bool ok = i0 + r < s.sq;
        fa__bwd_cp_async4(fa__bwd_smem_u32((tid < BR ? sL : sD) + buf * BR + r),
                          ok ? (const void *)src : (const void *)p.lse2, ok ? 4 : 0);
    }
}

/* The score in log2 units of query qi and key kj from their dot product x
   (Alg. 4 line 11): times the scale, softcap's c tanh(x scale / c) with its
   derivative 1 - tanh^2 into dcap, minus ALiBi's slope2 |qi + off - kj|
   (slope2: the slope times log2(e); off = sk - sq). The per-element step
   of both backward kernels (and the sm_80 forward's, fa__mask_scores):
   tanh's argument as x times scale / c (p.scale_cap), as a division per
   score cost the sm_90a kernel registers it does not have (its slow path
   spilled at D = 128). */
template <bool SOFTCAP>
__device__ __forceinline__ float fa__bwd_score(const fa__bwd_params &p, float x, float slope2, int qi, int kj, int off,
                                               float &dcap)
{
    const float LOG2E = 1.4426950408889634f;
    float y;
    if (SOFTCAP) {
        const float th = tanhf(x * p.scale_cap);
        dcap = 1.f - th * th;
        y = th * p.softcap * LOG2E;
    } else {
        y = x * p.scale_log2;
    }
    if (p.alibi) y -= slope2 * fabsf((float)(qi + off - kj));
    return y;
}
/* Dropout (lines 14-18): x / (1 - p) where bit `bit` of the keep bits Z is
   set, else 0. */
__device__ __forceinline__ float fa__bwd_drop(const fa__bwd_params &p, uint32_t keep, int bit, float x)
{
    return (keep >> bit & 1) ? x * p.rp_drop : 0.f;
}

/* (2) P^T = exp(S^T - L) with softcap, ALiBi and masks (Alg. 4 lines 11-13),
   in place of S^T; dcap = 1 - tanh^2, softcap's derivative. Element (n, e)
   is key kj = j0 + krow + g (+8 for e >= 2), query qi = i0 + 8n + 2*t4 +
   (e & 1). The element mask runs only on tiles that the mask cuts (or that
   reach past the last key). */
template <class T, bool SOFTCAP>
__device__ __forceinline__ void fa__bwd_recompute_p(const fa__bwd_params &p, const fa__bwd_seq &s,
                                                    float (&st)[T::NQ][4], float (&dcap)[SOFTCAP ? T::NQ : 1][4],
                                                    const float *sLb, int h, int i0, int j0, const fa__bwd_lane &ln)
{
    const float LOG2E = 1.4426950408889634f;
    const int off = s.sk - s.sq;
    const bool need_mask = fa__bwd_tile_needs_mask(p, s, i0, j0, T::BR, T::BC);
    const float slope = p.alibi ? p.alibi[h] * LOG2E : 0.f;
#pragma unroll
    for (int n = 0; n < T::NQ; ++n) {
        const float2 l2 = *reinterpret_cast<const float2 *>(sLb + n * 8 + 2 * ln.t4);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int kj = j0 + ln.krow + ln.g + (e >> 1) * 8, qi = i0 + n * 8 + 2 * ln.t4 + (e & 1);
            float x = fa__bwd_score<SOFTCAP>(p, st[n][e], slope, qi, kj, off, dcap[SOFTCAP ? n : 0][e]);
            if (need_mask && !fa__bwd_visible(p, s.sq, s.sk, qi, kj)) x = -INFINITY;
            st[n][e] = fa__exp2(x - ((e & 1) ? l2.y : l2.x));
        }
    }
}

/* Dropout keep bits Z (line 14) of the thread's elements, bit 4n+e; a plain
   loop: 10 Philox rounds per element would bloat the unrolled code. */
template <class T>
__device__ __forceinline__ uint32_t fa__bwd_keep_bits(const fa__bwd_params &p, int b, int h, int i0, int j0,
                                                      const fa__bwd_lane &ln)
{
    uint32_t keep = 0xffffffffu;
    if (p.dropout) {
#pragma unroll 1
        for (int x = 0; x < T::NQ * 4; ++x) {
            const int n = x >> 2, e = x & 3;
            const int kj = j0 + ln.krow + ln.g + (e >> 1) * 8, qi = i0 + n * 8 + 2 * ln.t4 + (e & 1);
            if (!fa__dropout_keep(p.seed, p.offset, b, h, p.hq, qi, kj, p.drop_threshold))
                keep &= ~(1u << x);
        }
    }
    return keep;
}

/* (3) dV += P_dropped^T dO (lines 15-16). The C fragments of S^T n-tiles
   2kk, 2kk+1 are the A fragment of k-step kk (k = queries). bo: this step's
   dO buffer; a, bb: the operands' registers (the arrays of this step and
   dQ's are the kernel's [bwd-codegen]). */
template <class T, bool BF16>
__device__ __forceinline__ void fa__bwd_dv_step(float (&dv)[T::DW / 8][4], uint32_t (&a)[4], uint32_t (&bb)[4],
                                                const fa__bwd_params &p, const float (&st)[T::NQ][4], uint32_t keep,
                                                uint32_t bo, const fa__bwd_lane &ln)
{
#pragma unroll
    for (int kk = 0; kk < T::NQ / 2; ++kk) {
#pragma unroll
        for (int hlf = 0; hlf < 2; ++hlf) {
            const int n = 2 * kk + hlf;
            float q0 = st[n][0], q1 = st[n][1], q2 = st[n][2], q3 = st[n][3];
            if (p.dropout) {
                q0 = fa__bwd_drop(p, keep, n * 4 + 0, q0);
                q1 = fa__bwd_drop(p, keep, n * 4 + 1, q1);
                q2 = fa__bwd_drop(p, keep, n * 4 + 2, q2);
                q3 = fa__bwd_drop(p, keep, n * 4 + 3, q3);
            }
            a[2 * hlf] = fa__pack2<BF16>(q0, q1);
            a[2 * hlf + 1] = fa__pack2<BF16>(q2, q3);
        }
#pragma unroll
        for (int np = 0; np < T::DW / 16; ++np) {
            fa__ldmatrix_x4_trans(bb, fa__bwd_at<T::CH>(ln.adOT + bo + kk * 16 * T::ROWB, 2 * np));
            fa__mma16816<BF16>(dv[2 * np], a, bb[0], bb[1]);
            fa__mma16816<BF16>(dv[2 * np + 1], a, bb[2], bb[3]);
        }
    }
}

/* (5) dS = P * (dP * Z - D) (lines 18-20), times 1 - tanh^2 under softcap,
   in place of dP^T. */
template <class T, bool SOFTCAP>
__device__ __forceinline__ void fa__bwd_ds(const fa__bwd_params &p, float (&dpt)[T::NQ][4],
                                           const float (&st)[T::NQ][4], const float (&dcap)[SOFTCAP ? T::NQ : 1][4],
                                           uint32_t keep, const float *sDb, int t4)
{
#pragma unroll
    for (int n = 0; n < T::NQ; ++n) {
        const float2 d2 = *reinterpret_cast<const float2 *>(sDb + n * 8 + 2 * t4);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float dp = dpt[n][e];
            if (p.dropout) dp = fa__bwd_drop(p, keep, n * 4 + e, dp);
            float ds = st[n][e] * (dp - ((e & 1) ? d2.y : d2.x));
            if (SOFTCAP) ds *= dcap[SOFTCAP ? n : 0][e];
            dpt[n][e] = ds;
        }
    }
}

/* dK += dS^T Q (line 22; the scale is applied once at the end), and dS^T to
   shared memory for dQ (by one warp of each key row). bo: this step's Q
   buffer. */
template <class T, bool BF16>
__device__ __forceinline__ void fa__bwd_dk_step(float (&dk)[T::DW / 8][4], const float (&ds)[T::NQ][4],
                                                uint16_t *sdS, bool store_ds, uint32_t bo, const fa__bwd_lane &ln)
{
    constexpr int CHS = T::CHS;
    const int krow = ln.krow, g = ln.g, t4 = ln.t4;
    uint32_t *sdS32 = (uint32_t *)sdS;
#pragma unroll
    for (int kk = 0; kk < T::NQ / 2; ++kk) {
        uint32_t a[4];
        a[0] = fa__pack2<BF16>(ds[2 * kk][0], ds[2 * kk][1]);
        a[1] = fa__pack2<BF16>(ds[2 * kk][2], ds[2 * kk][3]);
        a[2] = fa__pack2<BF16>(ds[2 * kk + 1][0], ds[2 * kk + 1][1]);
        a[3] = fa__pack2<BF16>(ds[2 * kk + 1][2], ds[2 * kk + 1][3]);
        if (store_ds) {
            /* dS^T rows krow+g, krow+g+8; query columns 16kk + 2*t4 (+8). */
            sdS32[fa__bwd_swz<CHS>(krow + g, kk * 16 + 2 * t4) / 2] = a[0];
            sdS32[fa__bwd_swz<CHS>(krow + g + 8, kk * 16 + 2 * t4) / 2] = a[1];
            sdS32[fa__bwd_swz<CHS>(krow + g, kk * 16 + 8 + 2 * t4) / 2] = a[2];
            sdS32[fa__bwd_swz<CHS>(krow + g + 8, kk * 16 + 8 + 2 * t4) / 2] = a[3];
        }
#pragma unroll
        for (int np = 0; np < T::DW / 16; ++np) {
            uint32_t bb[4];
            fa__ldmatrix_x4_trans(bb, fa__bwd_at<T::CH>(ln.aQT + bo + kk * 16 * T::ROWB, 2 * np));
            fa__mma16816<BF16>(dk[2 * np], a, bb[0], bb[1]);
            fa__mma16816<BF16>(dk[2 * np + 1], a, bb[2], bb[3]);
        }
    }
}

/* (6) dQ_i += dS K_j (line 21), dS^T from shared memory: warp = (row strip)
   x (column group), in passes of at most 64 columns; the fp32 partial
   leaves by atomicAdd (deterministic: plain stores into block jb's own
   slice). dq, a, bb: the product's registers (the kernel's). */
template <class T, bool BF16>
__device__ __forceinline__ void fa__bwd_dq_step(float (&dq)[T::QCH / 8][4], uint32_t (&a)[4], uint32_t (&bb)[4],
                                                const fa__bwd_params &p, const fa__bwd_seq &s, const fa__bwd_lane &ln,
                                                int h, int i0, int jb)
{
    constexpr int CH = T::CH, CHS = T::CHS, QC = T::QC, QCH = T::QCH, BC = T::BC;
    const int qa = i0 + ln.strip * 16 + ln.g, qb = qa + 8;
    float *acc = p.dq_acc + (p.deterministic ? (int64_t)jb * p.acc_slice : 0) +
                 ((int64_t)h * p.acc_rows + s.acc_row0) * p.acc_d;
#pragma unroll
    for (int c0 = 0; c0 < QC; c0 += QCH) {
#pragma unroll
        for (int n = 0; n < QCH / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dq[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            fa__ldmatrix_x4_trans(a, ln.adS + kk * 16 * CHS * 16);
#pragma unroll
            for (int np = 0; np < QCH / 16; ++np) {
                fa__ldmatrix_x4_trans(bb, fa__bwd_at<CH>(ln.aKT + kk * 16 * T::ROWB, (c0 + np * 16) / 8));
                fa__mma16816<BF16>(dq[2 * np], a, bb[0], bb[1]);
                fa__mma16816<BF16>(dq[2 * np + 1], a, bb[2], bb[3]);
            }
        }
#pragma unroll
        for (int n = 0; n < QCH / 8; ++n) {
            const int col = ln.cg * QC + c0 + n * 8 + 2 * ln.t4;
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

/* Kernel 2 on sm_80: for key block j (K_j, V_j in shared memory, dK_j, dV_j
   in registers), every query block i and head of the group that sees it:
   Alg. 4 lines 8-22, in the FlashAttention-2 loop order. */
template <bool BF16, int D, int BR, int BC, int NWARPS, int WD, bool SOFTCAP>
__global__ void __launch_bounds__(NWARPS * 32, 1) fa__bwd_kernel_sm80(const fa__bwd_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    typedef fa__bwd_traits<D, BR, BC, NWARPS, WD> T;
    constexpr int NT = T::NT, CH = T::CH, NQ = T::NQ, DW = T::DW, QCH = T::QCH;
    typedef fa__bwd_smem_layout<D, BR, BC> L;
    static_assert(128 % BR == 0 && 128 % BC == 0, "a tile lies in one 128 x 128 block of a block mask");

    extern __shared__ __align__(1024) unsigned char fa__bwd_smem[];
    uint16_t *sdS = (uint16_t *)(fa__bwd_smem + L::ds);
    float *sL = (float *)(fa__bwd_smem + L::lse), *sD = (float *)(fa__bwd_smem + L::dsum);
    const uint32_t smem_u = fa__bwd_smem_u32(fa__bwd_smem);

    const int jb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    fa__bwd_lane ln; /* the thread's fragment coordinates, keys, columns and addresses */
    ln.g = lane / 4; ln.t4 = lane % 4;
    const fa__bwd_seq s = fa__bwd_seq_info(p, b);
    const int j0 = jb * BC;
    if (j0 >= s.sk) return; /* past this sequence's keys (varlen) */
    int ib0, ib1;
    fa__bwd_q_range(p, s.sq, s.sk, j0, BR, BC, &ib0, &ib1);
    const int nib = ib1 - ib0, iters = nib * p.group;

    const uint16_t *gq = (const uint16_t *)p.q.data, *gdo = (const uint16_t *)p.dout.data;
    /* K_j, V_j: loaded once, cp.async group 0 (waited for with step 0). */
    fa__load_tile<BC, D, NT>(smem_u + L::k, (const uint16_t *)p.k.data + fa__bwd_off(p.k, b, s.k_tok0, j0, hk),
                             p.k.ss, s.sk - j0, p.d);
    fa__load_tile<BC, D, NT>(smem_u + L::v, (const uint16_t *)p.v.data + fa__bwd_off(p.v, b, s.k_tok0, j0, hk),
                             p.v.ss, s.sk - j0, p.d);
    fa__cp_async_commit();
    /* the steps walked: it, then next, ... (with a block mask the visited
       ones, >>bwd-bsparse; the buffers alternate by walked step, n) */
    const int first = fa__bwd_next_step(p, b, hk, j0, ib0, nib, iters, BR, 0);
    if (first < iters) fa__bwd_load_step<T>(p, s, gq, gdo, b, hk, ib0, nib, first, 0, smem_u, sL, sD, tid);
    fa__cp_async_commit();

    /* This warp's 16 keys and dK/dV columns, and the thread's addresses. */
    float dk[DW / 8][4], dv[DW / 8][4];
#pragma unroll
    for (int n = 0; n < DW / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;
    fa__bwd_lane_addrs<T>(ln, smem_u, warp, lane);

    /* walk = 2 it + buf: the step and its buffer in one register (the
       kernel is at its register limit: each value live across a step
       adds to its spills) */
    for (int walk = 2 * first; walk < 2 * iters;) {
        const int it = walk >> 1, buf = walk & 1;
        const int h = hk * p.group + it / nib, i0 = (ib0 + it % nib) * BR;
        /* Prefetch the next step walked into the other buffer. Its last
           readers (the previous step's products and L/D reads) all passed
           that step's barrier 2. (The next step is found again at the end
           of the loop: one more live register spilled here.) */
        {
            const int next = fa__bwd_next_step(p, b, hk, j0, ib0, nib, iters, BR, it + 1);
            if (next < iters)
                fa__bwd_load_step<T>(p, s, gq, gdo, b, hk, ib0, nib, next, buf ^ 1, smem_u, sL, sD, tid);
        }
        fa__cp_async_commit(); /* possibly empty: keeps the group count uniform */
        fa__cp_async_wait<1>(); /* all but the newest group: K, V and this step */
        /* Barrier 1: every thread's copies of this step (and K, V) are visible,
           and every warp finished reading dS^T of the previous step (the dQ product),
           so it may be overwritten below. */
        __syncthreads();
        const uint32_t bo = buf * T::QBUF;
        const float *sLb = sL + buf * BR, *sDb = sD + buf * BR;

        /* (1) S^T = K_j Q_i^T: 16 keys x Br queries for this warp (line 11). */
        float st[NQ][4];
        fa__bwd_mma_abt<BF16, D, NQ, CH, T::ROWB>(st, ln.aK, ln.aQB + bo);
        /* (2) P^T, recomputed from L */
        float dcap[SOFTCAP ? NQ : 1][4];
        fa__bwd_recompute_p<T, SOFTCAP>(p, s, st, dcap, sLb, h, i0, j0, ln);
        const uint32_t keep = fa__bwd_keep_bits<T>(p, b, h, i0, j0, ln);
        /* (3) dV += P_dropped^T dO (lines 15-16) */
        {
            uint32_t a[4], bb[4];
            fa__bwd_dv_step<T, BF16>(dv, a, bb, p, st, keep, bo, ln);
        }
        /* (4) dP^T = V_j dO_i^T (line 17). */
        float dpt[NQ][4];
        fa__bwd_mma_abt<BF16, D, NQ, CH, T::ROWB>(dpt, ln.aV, ln.adOB + bo);
        /* (5) dS, then dK += dS^T Q and dS^T to shared memory */
        fa__bwd_ds<T, SOFTCAP>(p, dpt, st, dcap, keep, sDb, ln.t4);
        fa__bwd_dk_step<T, BF16>(dk, dpt, sdS, (warp % WD) == 0, bo, ln);
        /* Barrier 2: dS^T of this step is complete in shared memory before
           any warp reads it for dQ; it also closes every read of this step's
           Q/dO/L/D buffer, which the next step's prefetch overwrites. */
        __syncthreads();
        /* (6) dQ_i += dS K_j (line 21) */
        {
            float dq[QCH / 8][4];
            uint32_t a[4], bb[4];
            fa__bwd_dq_step<T, BF16>(dq, a, bb, p, s, ln, h, i0, jb);
        }
        walk = 2 * fa__bwd_next_step(p, b, hk, j0, ib0, nib, iters, BR, it + 1) + (buf ^ 1);
    }
    fa__cp_async_wait<0>(); /* no copy may still be in flight at exit */

    /* (7) Write dK_j (times scale) and dV_j (line 24). */
    fa__bwd_store_dkdv<BF16, DW / 8>(p, s, b, hk, j0, ln.krow + ln.g, ln.dcol0, ln.t4, dk, dv);
#endif
}

/* ---- the sm_90a kernel's per-element steps (below), on the sm_80 kernel's
   helpers. A consumer thread holds S^T and dP^T as 8 n8-tiles of the wgmma
   accumulator: element (n, e) is key kj + 8 (e >> 1), query i0 + 8n + 2t +
   (e & 1), with kj = j0 + krow its first key (g = lane / 4, t = lane % 4).
   (Plain CUDA, outside the Hopper guard: tests/test_gpu_backward.cu checks
   them in the emulator too.) */

/* Dropout keep bits Z of those elements (line 14), bit 4n + e, the Philox
   rule of fa__dropout_keep: one Philox call gives the words of 4 keys
   4m .. 4m + 3, which here belong to 4 lanes (g % 4 = 0..3, the same t).
   So lane r = g % 4 makes the calls of element e = r only (key half r / 2,
   query parity r % 2) for every n, keeps all 4 keys' bits of each (bit
   4n + key % 4), and each lane gathers its key's bits from the 4: a quarter
   of the Philox work of a call per element. */
template <int NQ>
__device__ __forceinline__ uint32_t fa__bwd_sm90_keep(const fa__bwd_params &p, int b, int h, int i0, int kj, int t,
                                                      int lane)
{
    static_assert(NQ <= 8, "up to 32 elements, one bit each");
    if (!p.dropout) return 0xffffffffu;
    const int r = (lane >> 2) & 3; /* = kj % 4: kj - r is the first key of the call */
    uint32_t mine = 0, keep = 0;
#pragma unroll 1 /* (10 rounds a call: unrolled, 8 calls bloat the code) */
    for (int n = 0; n < NQ; n++) {
        uint32_t z[4];
        fa__dropout_bits(p.seed, p.offset, b, h, p.hq, i0 + 8 * n + 2 * t + (r & 1), kj - r + 8 * (r >> 1), z);
#pragma unroll
        for (int c = 0; c < 4; c++) mine |= (uint32_t)(z[c] >= p.drop_threshold) << (4 * n + c);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) { /* element e's calls were made by lane r = e of the four */
        const uint32_t m = (uint32_t)__shfl_sync(0xffffffffu, (int)mine, (lane & ~12) | (e << 2));
        keep |= ((m >> r) & 0x11111111u) << e;
    }
    return keep;
}

#ifndef FA__BWD_SM90_PVER
#define FA__BWD_SM90_PVER 1 /* 0: the mask's test in every tile's P loop (ablation only) [bwd-stalls] */
#endif

/* (2) without the extras: P^T = exp2(S^T scale - L), the exponent's
   argument one FFMA ahead of the mask's select (a multiply, the select,
   then the subtract took two instructions an element); MASK: the mask's
   test compiled in, taken where need_mask */
template <bool BF16, bool MASK, int NQ>
__device__ __forceinline__ void fa__bwd_sm90_p_plain(const fa__bwd_params &p, const fa__bwd_seq &s,
                                                     const float (&sT)[NQ][4], float (&pT)[NQ][4],
                                                     uint32_t (&pa)[NQ / 2][1][4], const float *sL, bool need_mask,
                                                     int i0, int kj, int t)
{
    /* the mask: this thread's two keys' visible queries, relative to its
       first query i0 + 2t, so that element (n, e) tests 8n + (e & 1), a
       constant, against them (no mask: every query) */
    int lo[2] = {-(1 << 30), -(1 << 30)}, hi[2] = {1 << 30, 1 << 30};
    if (MASK && need_mask)
#pragma unroll
        for (int kh = 0; kh < 2; kh++) {
            fa__bwd_key_queries(p, s.sq, s.sk, kj + 8 * kh, lo[kh], hi[kh]);
            lo[kh] -= i0 + 2 * t, hi[kh] -= i0 + 2 * t;
        }
#pragma unroll
    for (int n = 0; n < NQ; n++) {
        const float2 l2 = *reinterpret_cast<const float2 *>(sL + 8 * n + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = fmaf(sT[n][e], p.scale_log2, -((e & 1) ? l2.y : l2.x));
            const int q = 8 * n + (e & 1);
            if (MASK && (q < lo[e >> 1] || q > hi[e >> 1])) x = -INFINITY;
            pT[n][e] = fa__exp2(x);
        }
    }
#pragma unroll
    for (int n = 0; n < NQ; n++) { /* (fa__pack_p's order) */
        pa[n / 2][0][2 * (n % 2)] = fa__pack2<BF16>(pT[n][0], pT[n][1]);
        pa[n / 2][0][2 * (n % 2) + 1] = fa__pack2<BF16>(pT[n][2], pT[n][3]);
    }
}
/* (2) P^T = exp2(score - L) (lines 11-13): the score from S^T by
   fa__bwd_score (EXTRAS: softcap, ALiBi), masked on tiles that need it;
   P^T (dropped: dV's A operand) packed into pa. pT keeps the undropped
   P^T, times softcap's derivative 1 - tanh^2 under SOFTCAP: dS^T =
   P^T dcap (dP^T - D) needs only the product, so dcap takes no registers
   of its own. */
template <bool BF16, bool EXTRAS, bool SOFTCAP, int NQ>
__device__ __forceinline__ void fa__bwd_sm90_p(const fa__bwd_params &p, const fa__bwd_seq &s, const float (&sT)[NQ][4],
                                               float (&pT)[NQ][4], uint32_t (&pa)[NQ / 2][1][4], const float *sL,
                                               uint32_t keep, bool need_mask, int h, int i0, int kj, int t)
{
    if (!EXTRAS) {
        /* tiles without the mask take a copy without its test and select
           (FA__BWD_SM90_PVER) */
        if (FA__BWD_SM90_PVER && !need_mask)
            fa__bwd_sm90_p_plain<BF16, false, NQ>(p, s, sT, pT, pa, sL, false, i0, kj, t);
        else
            fa__bwd_sm90_p_plain<BF16, true, NQ>(p, s, sT, pT, pa, sL, need_mask, i0, kj, t);
        return;
    }
    const float slope2 = p.alibi ? p.alibi[h] * 1.4426950408889634f : 0.f;
#pragma unroll
    for (int n = 0; n < NQ; n++) {
        const float2 l2 = *reinterpret_cast<const float2 *>(sL + 8 * n + 2 * t);
        float q[4]; /* P^T dropped */
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int qi = i0 + 8 * n + 2 * t + (e & 1), kje = kj + (e >> 1) * 8;
            float dcap = 1.f;
            float x = fa__bwd_score<SOFTCAP>(p, sT[n][e], slope2, qi, kje, s.sk - s.sq, dcap);
            if (need_mask && !fa__bwd_visible(p, s.sq, s.sk, qi, kje)) x = -INFINITY;
            const float pe = fa__exp2(x - ((e & 1) ? l2.y : l2.x));
            q[e] = p.dropout ? fa__bwd_drop(p, keep, 4 * n + e, pe) : pe;
            pT[n][e] = SOFTCAP ? pe * dcap : pe;
        }
        pa[n / 2][0][2 * (n % 2)] = fa__pack2<BF16>(q[0], q[1]);
        pa[n / 2][0][2 * (n % 2) + 1] = fa__pack2<BF16>(q[2], q[3]);
    }
}

/* (5) dS^T = P^T (dP^T Z / (1 - p) - D) (lines 18-20), pT from
   fa__bwd_sm90_p (with softcap's derivative in it). */
template <bool EXTRAS, int NQ>
__device__ __forceinline__ void fa__bwd_sm90_ds(const fa__bwd_params &p, const float (&dpT)[NQ][4],
                                                const float (&pT)[NQ][4], float (&dsT)[NQ][4], const float *sD,
                                                uint32_t keep, int t)
{
#pragma unroll
    for (int n = 0; n < NQ; n++) {
        const float2 d2 = *reinterpret_cast<const float2 *>(sD + 8 * n + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float dp = dpT[n][e];
            if (EXTRAS && p.dropout) dp = fa__bwd_drop(p, keep, 4 * n + e, dp);
            dsT[n][e] = pT[n][e] * (dp - ((e & 1) ? d2.y : d2.x));
        }
    }
}

#ifndef FA__BWD_SM90_DQ_LATE
#define FA__BWD_SM90_DQ_LATE 1 /* 0: each step's dQ tile sent at its own end (ablation only) [bwd-stalls] */
#endif
#ifndef FA__BWD_SM90_BULK256
#define FA__BWD_SM90_BULK256 1 /* 0: D 256's dQ by atomics (ablation only) [bwd-d256] */
#endif
#ifndef FLASHATTN_NO_HOPPER
/* ---- kernel 2 on sm_90a: the same loop with wgmma (>>hopper) ------------

   The FA2 loop order above, rebuilt on Hopper's tools (>>hopper items 1-3):
   a producer warp copies Q_i, dO_i and their L, D with TMA into a 2-stage
   ring, and two consumer warpgroups (WG 0, WG 1) each own 64 of the
   Bc = 128 keys of K_j, V_j. Per step, for one query block of Br = 64 rows,
   a consumer warpgroup issues

       S^T  = K_w Q_i^T        ss     A = K  (K-major), B = Q  (K-major)
       dP^T = V_w dO_i^T       ss     A = V,            B = dO
       dV  += P^T dO_i         rs     A = P^T (registers), B = dO (MN-major)
       dK  += dS^T Q_i         rs     A = dS^T (registers), B = Q (MN-major)
       dQ_i = dS K_j[:, half]  ss<1>  A = dS (MN-major), B = K (MN-major)

   where w is the warpgroup's 64 keys. S^T and dP^T have keys as rows, so
   their accumulators are directly the A operands of dV and dK (the C -> A
   register identity that the forward uses for P V), and P, dS never touch
   shared memory for dK, dV. dQ needs dS with queries as rows, over all 128
   keys: each warpgroup writes its dS^T rows to shared memory ([key][query],
   128-byte rows, the swizzle TMA would give), the two warpgroups meet at a
   named barrier, and each computes half of dQ's columns (64 queries x D/2,
   wgmma reading dS^T transposed). The dS buffer alternates with the step,
   so a warpgroup that runs ahead never overwrites dS that the other is
   still reading: at step it + 2 both have passed the barrier of step it + 1,
   after their dQ of step it was done.

   dQ_i's partial sums go to the fp32 accumulator as a whole 64 x D tile:
   the consumers store their fragments into shared memory in the order they
   hold them, which is the accumulator's order (fa__bwd_acc_place), and one
   thread sends the tile with one bulk reduce-add (cp.reduce.async.bulk),
   summed in L2. A thread's 16 fp32 atomics a step instead held a quarter of
   the consumers' time, and the same sums sent as a bulk add a row were
   little faster: [bwd-dq]. The tile is stored at the step's end but sent
   once the next step's S^T and dP^T are issued, so that its fence and the
   warpgroups' barrier wait under the tensor cores' work [bwd-stalls]. (At
   D = 256 the tile has no room of its own: it leaves through the step's Q
   and dO buffers, fa__bwd_sm90_send_dq256.)

   Products of one step are issued as soon as their inputs exist and waited
   for only when their result is needed: S^T and dP^T together, P (softmax
   recomputation) while dP^T still runs, dV issued before waiting for dP^T,
   dK and dQ issued back to back. (Issuing step it + 1's S^T and dP^T before
   step it's dQ is done was tried: at D = 128 the extra 64 accumulators
   spill, and at both head dims ptxas serialized the wgmmas, C7512/C7514.)

   Persistent blocks. With more units (key block, KV head, batch) than SMs
   the grid is one block per SM and each walks pairs of units, key blocks
   i and nblk - 1 - i of one head (equal work under a causal mask, as the
   forward pairs its query blocks). At D = 64 K and V have two buffers, so
   the next unit's K_j, V_j land while the current unit finishes (at D = 128
   the dQ tile takes that room, and in the deterministic wide layout its
   second dQ tile), and the Q/dO ring
   runs on across units: a block per unit would start every unit with an
   empty pipeline and one CTA per SM to hide it (at 512 tokens a unit is 2
   to 8 steps): faster at short causal sequences, the long ones unchanged.
   [bwd-sm90-persistent]

   At D = 256 the block is 64 keys and the warpgroups split the columns of
   dK, dV and dQ instead of the keys (see `split` below). At D = 64 the
   plain and deterministic kernels' step is 128 query rows (fa__bwd_sm90_klayout, FA__BWD_SM90_WIDE),
   each warpgroup computing all of dQ's columns for its 64 of them.

   Covered: f16 / bf16, D = 64, 128 and 256 (head dims 33 .. 256, zero-filled
   columns past the head dim), causal / sliding window, GQA / MQA, arbitrary
   16-byte-aligned strides, deterministic mode, block masks (both roles
   walk the visited steps only, >>bwd-bsparse), softcap, ALiBi and dropout.
   The last three take kernels of their own, EXTRAS (ALiBi and dropout
   switched at run time, as in the sm_80 kernel) and SOFTCAP (tanh and its
   derivative), so that the plain kernels keep their code: the P and dS
   steps run the sm_80 kernel's per-element helpers (fa__bwd_sm90_p, _ds),
   and the dropout keep bits are made while S^T and dP^T run, one Philox
   call per 4 elements (fa__bwd_sm90_keep) [bwd-sm90-extras]. The
   deterministic mode takes DET kernels (ordered dQ adds,
   fa__bwd_sm90_send_dq, _send_dq256); with the extras it runs the sm_80 kernel. Variable
   length (cu_seqlens) runs here too, the plain and DET kernels as a twin of
   their own (VARLEN, fa__bwd_sm90_pick_kernel). Rows past seqlen_q / seqlen_k read as zeros (TMA
   fills a box outside the tensor with zeros; with cu_seqlens, where the
   next sequence lies past the end, the producer copies such a tile
   itself), and the padded L = +inf (kernel 1) makes P = 0 on query rows
   past the sequence. */
typedef struct fa__bwd_maps { CUtensorMap q, k, v, dout; } fa__bwd_maps;

/* Its shared memory, byte offsets from a 1024-byte aligned base (every tile
   on the swizzle's period): kv_bufs K, V buffers (with two, a persistent
   block loads its next unit's while it finishes one), Q[2], dO[2], dS^T[2],
   the dQ tile (D <= 128), then L and D of each stage, then (deterministic
   kernels) the second dQ tile: `tiles` bytes without it, `det_tiles`
   with it, `end` this layout's. The barriers and mailboxes follow
   (fa__bwd_sm90_bars_at). The host asks for `request` bytes.

   split (D = 256): a warpgroup owning 64 keys would hold dK and dV of
   64 x 256, all 256 of its registers per thread. So the block takes 64 keys
   and the warpgroups split the COLUMNS instead: warpgroup cw keeps dK, dV
   columns cw D/2 .. + D/2 - 1 (64 + 64 registers, as at D = 128). The
   step's queries are split too: warpgroup cw computes S^T and dP^T of the
   64 keys for queries 32 cw .. + 31 only (no product is computed twice),
   makes its half of P^T and dS^T, adds it into its dV and dK at once
   (A from registers), and writes it into the P^T and dS^T tiles; after
   the barrier it adds the other warpgroup's half (A from shared memory).
   The tiles (K, V 32 KB each, Q, dO 32 KB per stage, dS^T and P^T 8 KB)
   leave room for one K/V buffer only. */
template <int D, int BR = 64, bool DET = false> struct fa__bwd_sm90_layout {
    static constexpr bool split = D > 128;
    static constexpr bool dq_tile = !split; /* dQ leaves as one bulk add a step (fa__bwd_acc_place) */
    static constexpr bool wide = BR == 128; /* 128 query rows a step (fa__bwd_sm90_klayout) */
    /* two K/V buffers at D 64 but in the deterministic wide layout, whose
       second dQ tile takes that room */
    static constexpr int bc = split ? 64 : 128, br = BR, kv_bufs = D == 64 && !(wide && DET) ? 2 : 1;
    static constexpr int dkv = split ? D / 2 : D; /* the dK, dV columns of a warpgroup */
    static constexpr uint32_t kv_bytes = bc * D * 2, q_bytes = br * D * 2, ds_bytes = bc * br * 2,
                              ld_bytes = 2 * br * 4, dq_bytes = dq_tile ? br * D * 4 : 0,
                              pt_bytes = split ? ds_bytes : 0; /* split: P^T, as dS^T */
    static constexpr uint32_t kv = 0, q = 2 * kv_bufs * kv_bytes, dout = q + 2 * q_bytes, ds = dout + 2 * q_bytes,
                              dq = ds + 2 * ds_bytes, pt = dq + dq_bytes, ld = pt + 2 * pt_bytes,
                              tiles = ld + 2 * ld_bytes, dq2 = tiles, det_tiles = dq2 + dq_bytes;
    /* The barrier block, offsets from its start: 8 mbarriers (K/V full and
       empty per buffer, Q/dO full and empty per stage), then in the
       deterministic kernels per dQ buffer b a full and an empty mbarrier
       (+ 8 b), a 32-byte mailbox (+ 32 b) and, split, an mbarrier for the
       mailbox posted ahead of the tile (+ 8 b) (fa__bwd_sm90_dq_writer);
       then per unit slot b a full and an empty mbarrier (+ 8 b) and the
       unit taken (+ 4 b) (fa__bwd_sm90_take). */
    static constexpr uint32_t kv_full = 0, kv_empty = 16, full = 32, empty = 48, dq_full = 64, dq_empty = 80,
                              mail = 96, dq_ann = 160, unit_full = 176, unit_empty = 192, unit_slot = 208;
    static constexpr uint32_t bar_bytes = DET ? unit_slot + 16 : dq_full, end = DET ? det_tiles : tiles;
    /* Whether the barrier block has room of its own after the tiles, beside
       the 1023 bytes the 1024-byte alignment may skip (every layout but the
       wide ones at D 64: there it goes into the skipped bytes where it
       fits, fa__bwd_sm90_bars_at); and what the host asks for */
    static constexpr bool block_after = end + bar_bytes + 1023 <= 227 * 1024;
    static constexpr uint32_t request = end + (block_after ? bar_bytes : 0) + 1023;
    static_assert(tiles % 16 == 0 && dq2 % 16 == 0 && mail % 16 == 0,
                  "the barrier block and the mailbox's vectors, the bulk copy's source: 16-aligned");
    static_assert(2 * bar_bytes <= 1024, "the barrier block and a slack too small for it: 1023 bytes");
    static_assert(!wide || (D == 64 && !split), "128-row steps: D 64 only");
    static_assert(request <= 227 * 1024, "the block's shared memory");
};
/* Where the barrier block of layout L lies for a dynamic shared array at
   `base` (its alignment is not promised): after the tiles where it has
   room of its own there (L::block_after); else in the bytes below the
   1024-aligned tiles that the alignment skips where it fits there, and
   after the tiles where it does not. That stays within L::request bytes
   of base: in the skipped bytes the block costs nothing, and after the
   tiles the skipped bytes are fewer than the block's, the two together
   under 2 x 512. (The deterministic kernel at D 64 with 128-row steps fits
   so with a byte to spare.) */
template <class L>
static __host__ __device__ __forceinline__ uint32_t fa__bwd_sm90_bars_at(uint32_t base, uint32_t aligned)
{
    const uint32_t after = aligned + L::end; /* (aligned: base rounded up to 1024) */
    if (L::block_after || aligned - base < L::bar_bytes) return after;
    return aligned - L::bar_bytes;
}
/* Query rows a step of the sm_90a backward: 64, but 128 in the plain and
   deterministic kernels at D 64 (FA__BWD_SM90_WIDE), where a 64-row step's fixed costs (the
   stage's waits, the two barriers, dQ's wait and bulk add) were about as
   long as its products [bwd-wide]; then dQ is split by rows between the
   warpgroups (64 rows each, all D columns) instead of by columns (and the
   deterministic kernel's K, V have one buffer). fa__bwd_sm90_klayout:
   the layout of kernel fa__bwd_kernel_sm90<., D, EXTRAS, SOFTCAP, DET, .>,
   its step rows those of fa__bwd_sm90_step_rows. */
template <int D, bool EXTRAS, bool SOFTCAP, bool DET>
using fa__bwd_sm90_klayout = fa__bwd_sm90_layout<D, fa__bwd_sm90_step_rows(D, EXTRAS || SOFTCAP), DET>;

/* Unit u of the sm_90a backward: key block jb, KV head hk, batch b, with
   u = jb + nblk (hk + hkv b); descending: key block nblk - 1 - jb instead. */
static __device__ __forceinline__ void fa__bwd_unit_of(int u, int nblk, int hkv, int &jb, int &hk, int &b,
                                                       bool descending = false)
{
    jb = descending ? nblk - 1 - u % nblk : u % nblk;
    hk = u / nblk % hkv;
    b = u / nblk / hkv;
}

/* The units of work and who takes which: (key block jb, KV head hk, batch
   b). A block per unit when the grid has one (gridDim.x = units). The
   deterministic kernels on a persistent grid (p.det_next) take the units
   in that grid's order from a counter (fa__bwd_sm90_take). Else
   persistent (the grid is the SM count) and block c takes PAIRS of units
   c, c + G, c + 2G, ...: pair j is key blocks i and nblk - 1 - i of one
   head, which under a causal mask see nblk - i and i + 1 query blocks, the
   same work for every pair (as in the forward's unit(): static rounds stay
   balanced). Unit k of the block is the heavy (k even) or light (k odd)
   half of pair (k / 2) G + c; false: no unit (past the last pair, or the
   second half of the middle pair when nblk is odd). Under a block mask the
   units' work differs with their key block's listed query blocks, and
   they are dealt as a snake (round k takes entry k G + c, or
   (k + 1) G - 1 - c when k is odd) of one of two orders
   [bwd-bsparse-order]. Mostly their own (the key blocks of a head
   together): the units that run at once visit the query blocks of a few
   heads, whose Q, dO and dQ accumulator rows stay in L2. Under a causal
   mask above D 64 sorted by that count, most first (p.bm.order,
   fa__bm_order_kernel), so that every block's sum of work comes out about
   even: that mixes all heads, and a step's dQ add and Q, dO copies wait
   for HBM, but there the even sums measured faster (fa__bwd_bm_sorted). */
struct fa__bwd_sm90_sched {
    int nblk, pairs_j, units, pairs, rounds;
    bool one_unit, descending; /* descending: the deterministic kernel's order (fa__bwd_sm90_send_dq) */
    bool det_rounds;           /* the rotated walks' persistent grid (fa__bwd_rot): unit k G + c at round k */
    bool snake;                /* a block mask's units dealt as a snake (persistent grid only) */
    bool dyn;                  /* DET on a persistent grid: units taken from p.det_next (fa__bwd_sm90_take) */
    const int32_t *order;      /* their order (fa__bwd_bm_sorted), or NULL: their own */
    __device__ __forceinline__ void init(const fa__bwd_params &p, int bc, bool det)
    {
        descending = det;
        nblk = (p.seqlen_k + bc - 1) / bc;
        pairs_j = (nblk + 1) / 2;
        units = nblk * p.hkv * p.batch;
        pairs = pairs_j * p.hkv * p.batch;
        dyn = det && p.det_next != NULL;
        one_unit = !dyn && (int)gridDim.x >= units;
        det_rounds = det && p.det_rot && !one_unit;
        snake = !det && !one_unit && p.bm.bits; /* (det: a block per unit, rounds, or the counter) */
        order = snake ? p.bm.order : NULL;
        rounds = one_unit             ? 1
               : dyn                 ? units /* (at most; the taker's u >= units ends the walk) */
               : snake || det_rounds ? (units + (int)gridDim.x - 1) / (int)gridDim.x
                                      : 2 * ((pairs + (int)gridDim.x - 1) / (int)gridDim.x);
    }
    __device__ __forceinline__ bool unit(const fa__bwd_params &p, int k, int u, int &jb, int &hk, int &b) const
    {
        if (dyn) { /* (u: the unit taken, fa__bwd_sm90_take) */
            if (u >= units) return false;
            fa__bwd_unit_of(u, nblk, p.hkv, jb, hk, b, true);
            return true;
        }
        if (one_unit) {
            fa__bwd_unit_of((int)blockIdx.x, nblk, p.hkv, jb, hk, b, descending);
            return true;
        }
        if (det_rounds) { /* (a sequence's units may straddle two rounds: fa__bwd_rotates) */
            const int u = k * (int)gridDim.x + (int)blockIdx.x;
            if (u >= units) return false;
            fa__bwd_unit_of(u, nblk, p.hkv, jb, hk, b, descending);
            return true;
        }
        if (snake) {
            const int G = (int)gridDim.x, c = (int)blockIdx.x, at = k % 2 ? (k + 1) * G - 1 - c : k * G + c;
            if (at >= units) return false;
            fa__bwd_unit_of(order ? order[at] : at, nblk, p.hkv, jb, hk, b);
            return true;
        }
        const int j = (k / 2) * (int)gridDim.x + (int)blockIdx.x, i = j % pairs_j;
        hk = j / pairs_j % p.hkv;
        b = j / pairs_j / p.hkv;
        jb = k % 2 ? nblk - 1 - i : i;
        return j < pairs && !(k % 2 && i == nblk - 1 - i);
    }
};

/* Unit k of this block and what both roles derive from it: its sequence s,
   first key j0, the query blocks [ib0, ib0 + nib) that see key block jb,
   the steps, iters = nib times the heads of the group, and the first step
   walked (0, or with a block mask the first visited: iters or more if
   none; the next ones by fa__bwd_next_step, >>bwd-bsparse). */
struct fa__bwd_work {
    int jb, hk, b, j0, ib0, nib, iters, first, rot;
    fa__bwd_seq s;
};
/* The deterministic kernels without a mask (p.det_rot): every key block
   sees every query block, and walking them all in one order made each
   tile's ordered adds a chain, key block j waiting for j + 1's add of the
   same step. So key block jb of nk starts its walk at query block
   jb nq / nk and wraps around (rot), and a tile's adds go in the order the
   walks reach it (fa__bwd_det_rank): each add's predecessors came at
   earlier steps. A unit then waits for units of its sequence and KV head
   that may have a higher block index, so they must all be resident at
   once: the host launches such a grid cooperatively (all blocks resident,
   or no launch), G blocks taking the units in rounds (fa__bwd_sm90_sched's
   det_rounds: unit k G + c at round k). A sequence whose nk units fall in
   one round rotates; one split between rounds k and k + 1 walks in one
   order, so that its units wait only for its higher key blocks, which
   come first (round k). Either way no unit waits for a later round's.
   [bwd-det] */
__device__ __forceinline__ int fa__bwd_rot(int jb, int nk, int nq) { return jb * nq / nk; } /* (nk nq < 2^31) */
/* Whether sequence (KV head hk, batch b) rotates its walks: its units
   u0 .. u0 + nblk - 1 in one round of the grid, numbered as the scheduler
   numbers them (fa__bwd_sm90_sched's nblk, fa__bwd_unit_of) */
__device__ __forceinline__ bool fa__bwd_rotates(const fa__bwd_params &p, int bc, int hk, int b)
{
    const int G = (int)gridDim.x, nblk = (p.seqlen_k + bc - 1) / bc, u0 = (hk + p.hkv * b) * nblk;
    return p.det_rot && u0 / G == (u0 + nblk - 1) / G;
}
/* The query block of step it: ib0 + it % nib, in the DET kernels rotated by rot */
template <bool DET> __device__ __forceinline__ int fa__bwd_qblock(const fa__bwd_work &w, int it)
{
    int q = it % w.nib;
    if (DET) q = q + w.rot >= w.nib ? q + w.rot - w.nib : q + w.rot;
    return w.ib0 + q;
}
/* False: no unit k (u: the unit taken, where the units are taken from a
   counter: fa__bwd_sm90_take). */
template <int BR, int BC, bool DET>
__device__ __forceinline__ bool fa__bwd_sm90_work(const fa__bwd_params &p, const fa__bwd_sm90_sched &sc, int k,
                                                  int u, fa__bwd_work &w)
{
    if (!sc.unit(p, k, u, w.jb, w.hk, w.b)) return false;
    int ib1;
    w.s = fa__bwd_seq_info(p, w.b);
    w.j0 = w.jb * BC;
    fa__bwd_q_range(p, w.s.sq, w.s.sk, w.j0, BR, BC, &w.ib0, &ib1);
    w.nib = ib1 - w.ib0;
    w.iters = w.nib * p.group;
    w.first = fa__bwd_next_step(p, w.b, w.hk, w.j0, w.ib0, w.nib, w.iters, BR, 0);
    const int nk = (w.s.sk + BC - 1) / BC;
    w.rot = DET && fa__bwd_rotates(p, BC, w.hk, w.b) ? fa__bwd_rot(w.jb, nk, w.nib) : 0;
    return true;
}

/* The shared-memory addresses both roles use (fa__bwd_sm90_layout). */
struct fa__bwd_sm90_smem {
    uint32_t sKV, sQ, sdO, sdS, sdQ, sLD;   /* K/V buffers, Q, dO, dS^T, dQ tile, L and D stages */
    uint32_t sPT;                            /* split: the P^T stages */
    uint32_t kv_full, kv_empty, full, empty; /* mbarriers: K/V buffers, Q/dO stages */
    const float *gLD;                        /* the L, D stages as a generic pointer */
    uint32_t sdQ2, dq_full, dq_empty, mail;  /* DET: dQ buffer 1; per buffer b (+ 8 b, mail + 32 b) its
                                                tile handed to its writer and back, and the step that
                                                made it (fa__bwd_sm90_post) */
    uint32_t dq_ann;                         /* DET split: buffer b's mailbox posted (+ 8 b) */
    uint32_t unit_full, unit_empty, unit_slot; /* DET, p.det_next: unit slot b's mbarriers (+ 8 b), its unit (+ 4 b) */
};

#if FA__SM90A /* (the wgmma, mbarrier and TMA wrappers exist in sm_90a device passes only) */
/* Warp 3's copies (fa__bwd_sm90_copy_tail) have landed and are visible to
   the tensor cores' async proxy, in every lane (as fa__sm90_load's, which
   the emulated backward does not compile) */
__device__ __forceinline__ void fa__bwd_sm90_copied(void)
{
    fa__cp_async_commit();
    fa__cp_async_wait<0>();
    fa__fence_async_shared();
    __syncwarp();
}
/* Warp 3's copy of a tile that runs past its sequence: rows t0 .. t0 +
   valid - 1 of view v (sequence b from token tok0, head h) into an R-row
   tile at dst, the rest zero-filled (fa__sm90_copy_rows) */
template <int R, int D>
__device__ __forceinline__ void fa__bwd_sm90_copy_tail(uint32_t dst, const fa__bwd_view &v, int b, int64_t tok0,
                                                       int t0, int h, int valid, int d, int lane)
{
    fa__sm90_copy_rows<R, D>(dst, valid, d, (const uint16_t *)v.data + fa__bwd_off(v, b, tok0, t0, h), v.ss, lane);
}

/* Deterministic, on a persistent grid (p.det_next): the units in the
   one-unit grid's order (fa__bwd_sm90_sched, descending key blocks) taken
   from a counter, so that a unit waits only for units taken before it,
   which are running or done (no co-residency needed), and no block is
   launched and started per unit. Producer thread 0 takes the block's k-th
   unit and posts it in slot k & 1 once every reader has read the slot's
   unit k - 2 (a unit with no step loads nothing, so the K, V buffer's
   release cannot stand in for that); the readers (the consumers and the
   tails' warp 3) wait for it, read it and give the slot back. */
__device__ __forceinline__ int fa__bwd_sm90_take(const fa__bwd_params &p, const fa__bwd_sm90_smem &sm, int k)
{
    const int b = k & 1;
    if (k >= 2) fa__mbar_wait(sm.unit_empty + 8 * b, (uint32_t)((k / 2 - 1) & 1));
    const int u = atomicAdd(p.det_next, 1);
    fa__st_shared32(sm.unit_slot + 4 * b, (uint32_t)u);
    fa__mbar_arrive(sm.unit_full + 8 * b); /* (release: the slot is seen with it) */
    return u;
}
__device__ __forceinline__ int fa__bwd_sm90_taken(const fa__bwd_sm90_smem &sm, int k)
{
    const int b = k & 1;
    fa__mbar_wait(sm.unit_full + 8 * b, (uint32_t)((k / 2) & 1));
    const int u = (int)fa__ld_shared32(sm.unit_slot + 4 * b);
    fa__mbar_arrive(sm.unit_empty + 8 * b);
    return u;
}
/* The producer (TAILS false): lane 0 of warp 0 issues every copy but a
   tail's. Both roles walk the same units and skip the same empty ones, so
   they agree on two running counts: ring, the steps so far (stage ring % 2,
   its (ring / 2)-th use), and kv_uses, the units whose K, V were loaded
   (buffer kv_uses % KVB, its (kv_uses / KVB)-th use). A barrier's phase bit
   flips once per use: waiting for use u means waiting for parity u & 1.
   With cu_seqlens the maps' rows do not end where a sequence does, so a
   tile that runs past its sequence is copied by warp 3 (TAILS true) with
   cp.async, rows past the end zero-filled (where the next sequence or the
   end of the buffer lies): it walks the same way and arrives on every K/V
   and stage barrier as their second party; the producer's arrival then
   brings L, D and the whole tiles' bytes. (The tails' walk on the
   producer's own warp spilled its 24 registers in every kernel.) */
template <int D, int BR_, bool DET, bool VARLEN, bool TAILS>
__device__ __forceinline__ void fa__bwd_sm90_producer(const fa__bwd_maps &tm, const fa__bwd_params &p,
                                                      const fa__bwd_sm90_sched &sc, const fa__bwd_sm90_smem &sm,
                                                      int lane)
{
    typedef fa__bwd_sm90_layout<D, BR_, DET> L;
    constexpr int BR = L::br, BC = L::bc, KVB = L::kv_bufs;
    constexpr uint32_t KV_BYTES = L::kv_bytes, Q_BYTES = L::q_bytes, LD_BYTES = L::ld_bytes;
    static_assert(VARLEN || !TAILS, "tails only in a kernel that takes cu_seqlens");
    const bool varlen = VARLEN && p.cu_q != NULL; /* (the maps are then [1][h][token][col]: fa__bwd_launch_sm90) */
    int ring = 0, kv_uses = 0;
    for (int k = 0; k < sc.rounds; k++) {
        fa__bwd_work w;
        const int u = DET && sc.dyn ? (TAILS ? fa__bwd_sm90_taken(sm, k) : fa__bwd_sm90_take(p, sm, k)) : 0;
        if (DET && sc.dyn && u >= sc.units) break;
        /* (a unit without a step walked loads nothing, as the consumers expect) */
        if (!fa__bwd_sm90_work<BR, BC, DET>(p, sc, k, u, w) || w.first >= w.iters) continue;
        const int kb = kv_uses % KVB, mb = varlen ? 0 : w.b;
        const uint32_t sK = sm.sKV + kb * 2 * KV_BYTES, kv_bar = sm.kv_full + 8 * kb;
        /* buffer kb was last read by unit kv_uses - KVB: wait for its release */
        if (kv_uses >= KVB) fa__mbar_wait(sm.kv_empty + 8 * kb, (uint32_t)((kv_uses / KVB - 1) & 1));
        const bool kv_tail = varlen && w.j0 + BC > w.s.sk;
        if (TAILS) {
            if (kv_tail) {
                fa__bwd_sm90_copy_tail<BC, D>(sK, p.k, w.b, w.s.k_tok0, w.j0, w.hk, w.s.sk - w.j0, p.d, lane);
                fa__bwd_sm90_copy_tail<BC, D>(sK + KV_BYTES, p.v, w.b, w.s.k_tok0, w.j0, w.hk, w.s.sk - w.j0, p.d,
                                              lane);
                fa__bwd_sm90_copied();
            }
            if (lane == 0) fa__mbar_arrive(kv_bar);
        } else {
            const int row = varlen ? (int)w.s.k_tok0 + w.j0 : w.j0;
            fa__mbar_expect_tx(kv_bar, kv_tail ? 0 : 2 * KV_BYTES);
            for (int c = 0; c < D / 64 && !kv_tail; c++) {
                fa__tma_load(sK + c * BC * 128, &tm.k, 64 * c, row, w.hk, mb, kv_bar);
                fa__tma_load(sK + KV_BYTES + c * BC * 128, &tm.v, 64 * c, row, w.hk, mb, kv_bar);
            }
        }
        for (int it = w.first; it < w.iters;
             it = fa__bwd_next_step(p, w.b, w.hk, w.j0, w.ib0, w.nib, w.iters, BR, it + 1), ring++) {
            const int st = ring & 1, h = w.hk * p.group + it / w.nib, i0 = fa__bwd_qblock<DET>(w, it) * BR;
            const uint32_t bar = sm.full + 8 * st, sQ = sm.sQ + st * Q_BYTES, sdO = sm.sdO + st * Q_BYTES;
            /* stage st was last read at step ring - 2: wait for its release */
            if (ring >= 2) fa__mbar_wait(sm.empty + 8 * st, (uint32_t)((ring / 2 - 1) & 1));
            const bool tail = varlen && i0 + BR > w.s.sq;
            if (TAILS) {
                if (tail) {
                    fa__bwd_sm90_copy_tail<BR, D>(sQ, p.q, w.b, w.s.q_tok0, i0, h, w.s.sq - i0, p.d, lane);
                    fa__bwd_sm90_copy_tail<BR, D>(sdO, p.dout, w.b, w.s.q_tok0, i0, h, w.s.sq - i0, p.d, lane);
                    fa__bwd_sm90_copied();
                }
                if (lane == 0) fa__mbar_arrive(bar);
                continue;
            }
            const int qrow = varlen ? (int)w.s.q_tok0 + i0 : i0;
            fa__mbar_expect_tx(bar, (tail ? 0 : 2 * Q_BYTES) + LD_BYTES);
            for (int c = 0; c < D / 64 && !tail; c++) {
                fa__tma_load(sQ + c * BR * 128, &tm.q, 64 * c, qrow, h, mb, bar);
                fa__tma_load(sdO + c * BR * 128, &tm.dout, 64 * c, qrow, h, mb, bar);
            }
            const int64_t r = (int64_t)h * p.acc_rows + w.s.acc_row0 + i0; /* BR-row aligned */
            fa__bulk_load(sm.sLD + st * LD_BYTES, p.lse2 + r, BR * 4, bar);
            fa__bulk_load(sm.sLD + st * LD_BYTES + BR * 4, p.dsum + r, BR * 4, bar);
        }
        kv_uses++;
    }
}


/* A step's (1) S^T = K_w Q^T and (4) dP^T = V_w dO^T, issued as two commit
   groups (S^T's first: its wait can retire it alone): kw, vw the warpgroup's
   K and V rows, q_s, do_s the stage's Q and dO, from query q0 (split: the
   warpgroup's half), each 64 columns of a row block BR (Q, dO) or BC (K, V)
   rows on. */
template <int QW, bool BF16, int D, int BR, int BC>
__device__ __forceinline__ void fa__bwd_sm90_issue_sdp(float (&s_flat)[QW / 2], float (&dp_flat)[QW / 2],
                                                       uint32_t kw, uint32_t vw, uint32_t q_s, uint32_t do_s, int q0)
{
    fa__wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        fa__wgmma<QW, BF16>::ss(s_flat, fa__wg_desc(kw + (kk / 4) * BC * 128 + (kk % 4) * 32, 16, 1024),
                                fa__wg_desc(q_s + (q0 + (kk / 4) * BR) * 128 + (kk % 4) * 32, 16, 1024), kk > 0);
    fa__wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        fa__wgmma<QW, BF16>::ss(dp_flat, fa__wg_desc(vw + (kk / 4) * BC * 128 + (kk % 4) * 32, 16, 1024),
                                fa__wg_desc(do_s + (q0 + (kk / 4) * BR) * 128 + (kk % 4) * 32, 16, 1024), kk > 0);
    fa__wgmma_commit();
}

/* (7) dQ = dS K over the step's BC keys: A dS, read MN-major from the dS^T
   tile at a_s, B K_j's columns at kq (MN-major); one commit group. */
template <int DQ, int BC, int BR, bool BF16>
__device__ __forceinline__ void fa__bwd_sm90_issue_dq(float (&dq_flat)[DQ / 2], uint32_t a_s, uint32_t kq)
{
    fa__wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++)
        fa__wgmma<DQ, BF16>::template ss<1>(dq_flat, fa__wg_desc(a_s + kk * 2048, BR * 128, 1024),
                                            fa__wg_desc(kq + kk * 2048, BC * 128, 1024), kk > 0);
    fa__wgmma_commit();
}

/* (3) dV += P^T dO or (6) dK += dS^T Q over this warpgroup's queries q0 ..:
   A (P^T or dS^T) from registers, B the stage's dO or Q at b_s (its dK / dV
   columns); one commit group. */
template <int DKV, int QW, int BR, bool BF16>
__device__ __forceinline__ void fa__bwd_sm90_issue_rs(float (&acc)[DKV / 2], const uint32_t (&a)[QW / 16][1][4],
                                                      uint32_t b_s, int q0)
{
    fa__wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QW / 16; kk++)
        fa__wgmma<DKV, BF16>::rs(acc, a[kk][0], fa__wg_desc(b_s + (q0 / 16 + kk) * 2048, BR * 128, 1024), 1);
    fa__wgmma_commit();
}

/* (3) dV += P^T dO and (6) dK += dS^T Q over the other warpgroup's queries
   o0 .. of a split step, A from its halves of the P^T and dS^T tiles
   (K-major), B as in the rs form; one commit group. */
template <int DKV, int QW, int BR, bool BF16>
__device__ __forceinline__ void fa__bwd_sm90_issue_other(float (&dv_flat)[DKV / 2], float (&dk_flat)[DKV / 2],
                                                         uint32_t pt_s, uint32_t ds_s, uint32_t do_s, uint32_t q_s,
                                                         uint32_t kvcol, int o0)
{
#pragma unroll
    for (int kk = 0; kk < QW / 16; kk++) {
        const uint32_t a = (o0 / 16 + kk) * 32, b = kvcol + (o0 / 16 + kk) * 2048;
        fa__wgmma<DKV, BF16>::template ss<0, 1>(dv_flat, fa__wg_desc(pt_s + a, 16, 1024),
                                                fa__wg_desc(do_s + b, BR * 128, 1024), 1);
        fa__wgmma<DKV, BF16>::template ss<0, 1>(dk_flat, fa__wg_desc(ds_s + a, 16, 1024),
                                                fa__wg_desc(q_s + b, BR * 128, 1024), 1);
    }
    fa__wgmma_commit();
}

/* dS^T (or, split, P^T) of a step into its shared-memory buffer ds_s: this
   thread's rows krow, krow + 8, query pairs q0 + 16 kk + 2t (+8), chunk c
   of row r at c ^ (r % 8) (q0: split, the warpgroup's half of the queries;
   128 queries: the second 64 in a block of their own, BC rows on). */
template <int NQ, int BC>
__device__ __forceinline__ void fa__bwd_sm90_store_ds(const uint32_t (&da)[NQ / 2][1][4], uint32_t ds_s, int krow,
                                                      int q0, int t)
{
#pragma unroll
    for (int kk = 0; kk < NQ / 2; kk++)
#pragma unroll
        for (int x = 0; x < 4; x++) {
            const int r = krow + (x & 1) * 8, c = q0 + 16 * kk + (x >> 1) * 8;
            fa__st_shared32(ds_s + fa__sm90_chunk(r, c / 8, BC * 128) + 4 * t, da[kk][0][x]);
        }
}

/* This thread's part of a step's fp32 partial dQ (rows g, g + 8 of its
   warp's 16, column pairs 8n + 2t) added at acc, its first element: atomics,
   or plain stores into the key block's own slice (deterministic). */
template <int N>
__device__ __forceinline__ void fa__bwd_sm90_add_dq(const fa__bwd_params &p, const float (&dq)[N][4], float *acc)
{
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float2 *a = reinterpret_cast<float2 *>(acc + hh * 8 * p.acc_d + 8 * n);
            const float2 v2 = make_float2(dq[n][2 * hh], dq[n][2 * hh + 1]);
            if (p.deterministic) *a = v2;
            else atomicAdd(a, v2);
        }
}

/* Deterministic mode: the key blocks that add to a dQ tile (query head h,
   query block ib) add in a fixed order, descending key block, counted by
   the tile's p.dq_sem. Descending, because under a causal or window mask
   key block j + 1 reaches the tile's query block two steps before j does
   (its first query block is two further on), so in the usual case the
   count is already there; and the one-unit grid puts key block j + 1
   first (fa__bwd_sm90_sched; the counter of a persistent grid hands the
   units out in that order, fa__bwd_sm90_take), so a unit only ever waits
   for units that started before it: no deadlock. Its place: how many
   key blocks above jb
   add to the tile (the rule of fa__bwd_q_range and the block mask, as the
   sm_80 path's sum of slices in fa__bwd_dq_convert_kernel), a warp's
   ballot per 32 key blocks. With rotated walks (fa__bwd_rotates)
   the order is that of the walks instead: the key blocks whose walk
   reaches query block ib at an earlier step (at the same step: the
   higher key block) add first. [bwd-det] */
template <int BR, int BC>
__device__ __forceinline__ int fa__bwd_det_rank(const fa__bwd_params &p, const fa__bwd_seq &s, int b, int h,
                                                int jb, int ib, int lane)
{
    const int nblk = (s.sk + BC - 1) / BC;
    int rank = 0;
    if (fa__bwd_rotates(p, BC, h / p.group, b)) {
        const int nq = (s.sq + BR - 1) / BR;
        auto step = [&](int j) { const int a = ib - fa__bwd_rot(j, nblk, nq); return a < 0 ? a + nq : a; };
        const int mine = step(jb);
        for (int j0 = 0; j0 < nblk; j0 += 32) {
            const int j = j0 + lane, sj = j < nblk ? step(j) : 0;
            rank += __popc(__ballot_sync(0xffffffffu, j < nblk && j != jb && (sj < mine || (sj == mine && j > jb))));
        }
        return rank;
    }
    for (int j0 = jb + 1; j0 < nblk; j0 += 32) {
        const int j = j0 + lane;
        bool adds = false;
        if (j < nblk) {
            int ib0, ib1;
            fa__bwd_q_range(p, s.sq, s.sk, j * BC, BR, BC, &ib0, &ib1);
            adds = ib >= ib0 && ib < ib1 && (!p.bm.bits || fa__bm_visited(p.bm, b, h, ib * BR / 128, j * BC / 128));
        }
        rank += __popc(__ballot_sync(0xffffffffu, adds));
    }
    return rank;
}

/* The deterministic kernels' mailbox (32 bytes a dQ buffer, 16-aligned):
   the tile's count in p.dq_sem, the step that made it (key block jb, query
   block ib, query head h; sequence b at +16) and the tile's address at +24
   (blk < 0: no more tiles). (The vector access wants its 16-byte alignment.) */
#ifndef FLASHATTN_CUDA_EMU /* (tests/emu_cuda.h has its own mailbox) */
__device__ __forceinline__ void fa__bwd_sm90_post(uint32_t mail, int64_t blk, int tile, int jb, int ib, int h, int b)
{
    asm volatile("st.shared.v4.u32 [%0], {%2, %3, %4, %5};\nst.shared.u32 [%0+16], %6;\nst.shared.u64 [%0+24], %1;\n"
                 ::"r"(mail), "l"(blk), "r"(tile), "r"(jb), "r"(ib), "r"(h), "r"(b) : "memory");
}
/* ... and its reading by a dQ writer warp: lane 0 loads it, the shuffles
   hand it to the other lanes. (Every lane loading it, racecheck does not
   count the warp's __syncwarp and lane 0's arrive on dq_empty as ordering
   their loads before the next post [bwd-det].) */
__device__ __forceinline__ void fa__bwd_sm90_fetch(uint32_t mail, int lane, int64_t &blk, int &tile, int &jb, int &ib,
                                                   int &h, int &b)
{
    blk = 0;
    tile = jb = ib = h = b = 0;
    if (lane == 0)
        asm volatile("ld.shared.v4.u32 {%1, %2, %3, %4}, [%6];\nld.shared.u32 %5, [%6+16];\nld.shared.u64 %0, [%6+24];\n"
                     : "=l"(blk), "=r"(tile), "=r"(jb), "=r"(ib), "=r"(h), "=r"(b) : "r"(mail) : "memory");
    blk = __shfl_sync(0xffffffffu, blk, 0);
    tile = __shfl_sync(0xffffffffu, tile, 0);
    jb = __shfl_sync(0xffffffffu, jb, 0);
    ib = __shfl_sync(0xffffffffu, ib, 0);
    h = __shfl_sync(0xffffffffu, h, 0);
    b = __shfl_sync(0xffffffffu, b, 0);
}
#endif /* FLASHATTN_CUDA_EMU */
/* The deterministic kernels: waits until its writer has given back dQ
   buffer sends & 1, the buffer of the consumers' hand-over number `sends`
   (buffers in turn; on first use the phase before, which counts as done). */
__device__ __forceinline__ void fa__bwd_sm90_dq_wait(const fa__bwd_sm90_smem &sm, int sends)
{
    fa__mbar_wait(sm.dq_empty + 8 * (sends & 1), (uint32_t)((sends >> 1 & 1) ^ 1));
}
/* The step (tile at p.dq_acc + blk, its count's index, jb, ib, h, bt)
   posted in writer sends & 1's mailbox, then an arrival on that buffer's
   mbarrier `bar` (release: the mailbox is seen with it) */
__device__ __forceinline__ void fa__bwd_sm90_mail(const fa__bwd_params &p, const fa__bwd_sm90_smem &sm, uint32_t bar,
                                                  int64_t blk, int sends, int jb, int ib, int h, int bt)
{
    const int b = sends & 1;
    fa__bwd_sm90_post(sm.mail + 32 * b, blk, (int)(blk / (64 * p.acc_d)), jb, ib, h, bt);
    fa__mbar_arrive(bar + 8 * b);
}
/* Deterministic: hand the staged tile (at p.dq_acc + blk; key block jb,
   query block ib, head h, sequence bt made it) to writer sends & 1: the
   first thread posts it in the writer's mailbox with its count and
   arrives (release: the mailbox is seen with it); every thread counts it. */
__device__ __forceinline__ void fa__bwd_sm90_hand_over(const fa__bwd_params &p, const fa__bwd_sm90_smem &sm,
                                                       bool first, int64_t blk, int &sends, int jb, int ib, int h,
                                                       int bt)
{
    if (first) fa__bwd_sm90_mail(p, sm, sm.dq_full, blk, sends, jb, ib, h, bt);
    sends++;
}
/* Split (D 256), consumer thread 0 at the start of the step whose tile will
   be hand-over number `sends`: the step is posted in writer sends & 1's
   mailbox ahead of the tile (dq_ann), so that the writer finds the unit's
   place and waits for the tile's count while the consumers compute it; the
   tile itself follows with dq_full (fa__bwd_sm90_send_dq256). At D 256 the
   tile leaves from the stage's Q and dO buffers, so every clock the writer
   spends between dq_full and its add holds the stage from the producer.
   (The mailbox is free once the writer has read the buffer's last tile.) */
__device__ __forceinline__ void fa__bwd_sm90_announce(const fa__bwd_params &p, const fa__bwd_sm90_smem &sm,
                                                      int64_t blk, int sends, int jb, int ib, int h, int bt)
{
    fa__bwd_sm90_dq_wait(sm, sends);
    fa__bwd_sm90_mail(p, sm, sm.dq_ann, blk, sends, jb, ib, h, bt);
}
/* A step's fp32 partial dQ, the 64-row tile at p.dq_acc + blk, as one bulk
   add: each consumer thread T's fragments into shared memory at sdq in the
   accumulator's order (fa__bwd_acc_place, fa__bwd_sm90_stage_dq), then thread
   0 sends the whole tile, added in L2: no atomics in the consumers' loop
   (fa__bwd_sm90_flush_dq). Deterministic: the tile goes to a dQ writer
   instead (fa__bwd_sm90_dq_writer), in two buffers taken in turn (a writer
   each), with the step that made it (key block jb, query block ib, head h,
   sequence b); the consumers wait only for a writer to have read a buffer's
   last tile before they rewrite it. `sends` counts the tiles handed over
   (the buffer and the barriers' parity). */
template <int N, bool DET, bool WIDE>
__device__ __forceinline__ void fa__bwd_sm90_stage_dq(const float (&dq)[N][4], const fa__bwd_sm90_smem &sm, int T,
                                                      int sends, int ib, int jb)
{
    const int b = sends & 1; /* DET: buffers in turn */
    const uint32_t sdq = DET && b ? sm.sdQ2 : sm.sdQ;
    if (DET) {
        FLASHATTN_TRACE(43, ib, jb); /* (the trace: the wait for the writer) */
        fa__bwd_sm90_dq_wait(sm, sends);
        FLASHATTN_TRACE(44, ib, jb);
    }
    /* (in 16-byte units) WIDE: warpgroup T / 128 holds all 64 columns of
       its own 64 rows, the row block 1024 units on, so its fragment n is
       column half n / 4's fragment n % 4 there (fa__bwd_acc_place's order) */
#pragma unroll
    for (int n = 0; n < N; n++) {
        const int at = WIDE ? T / 128 * 1024 + 256 * (n % 4) + 128 * (n / 4) + T % 128 : 256 * n + T;
        fa__st_shared_f4(sdq + at * 16, dq[n][0], dq[n][1], dq[n][2], dq[n][3]);
    }
}
/* The staged tile sent: the fence makes every thread's stores visible to
   the bulk copy; the barrier has them all done before thread 0 sends
   (deterministic: before the tile is handed over). (Thread 0 waits for the
   copy to have read the tile before a step's barrier 1 lets anyone rewrite
   it.) */
template <bool DET>
__device__ __forceinline__ void fa__bwd_sm90_flush_dq(const fa__bwd_params &p, const fa__bwd_sm90_smem &sm, int T,
                                                      int64_t blk, uint32_t bytes, int &sends, int jb, int ib, int h,
                                                      int bt)
{
    fa__fence_async_shared();
    fa__named_sync(2, 256);
    if (DET) {
        fa__bwd_sm90_hand_over(p, sm, T == 0, blk, sends, jb, ib, h, bt);
        return;
    }
    if (T != 0) return;
    fa__bulk_store<true>(p.dq_acc + blk, sm.sdQ, bytes);
    fa__bulk_commit();
}
template <int N, bool DET, bool WIDE>
__device__ __forceinline__ void fa__bwd_sm90_send_dq(const fa__bwd_params &p, const float (&dq)[N][4],
                                                     const fa__bwd_sm90_smem &sm, int T, int64_t blk,
                                                     uint32_t bytes, int &sends, int jb, int ib, int h, int bt)
{
    fa__bwd_sm90_stage_dq<N, DET, WIDE>(dq, sm, T, sends, ib, jb);
    fa__bwd_sm90_flush_dq<DET>(p, sm, T, blk, bytes, sends, jb, ib, h, bt);
}

/* The split tile's dQ (D 256): its 64 x 256 fp32 tile in the accumulator's
   order (fa__bwd_acc_place, acc_tiled 2) leaves from the step's own Q_i and
   dO_i buffers, which hold its first and second 32 KB: the dQ tile has no
   room of its own beside the P^T and dS^T tiles. Warpgroup cw stores its
   64 x 128 into its own column halves of them (offset kvcol), which only
   its own products read after barrier 1, all done. Not deterministic: each
   warpgroup's thread 0 adds its two 16 KB halves once the warpgroup's
   barrier has every part in, and returns true: it owes the stage's release
   until the copies have read it. Deterministic (DET): the whole tile goes
   to writer st of the stage (fa__bwd_sm90_dq_writer, which adds it in
   order and releases the stage for consumer thread 0); false. */
template <int N, bool DET>
__device__ __forceinline__ bool fa__bwd_sm90_send_dq256(const fa__bwd_params &p, const float (&dq)[N][4],
                                                        const fa__bwd_sm90_smem &sm, uint32_t q_s, uint32_t do_s,
                                                        int cw, int T, int64_t blk, int &sends)
{
    static_assert(N == 16, "a thread's 64 accumulators: 8 float4 in each buffer");
#pragma unroll
    for (int n = 0; n < N; n++)
        fa__st_shared_f4((n < 8 ? q_s : do_s) + (128 * (n % 8) + T) * 16, dq[n][0], dq[n][1], dq[n][2], dq[n][3]);
    fa__fence_async_shared();
    if (DET) { /* (the step was posted at its start: fa__bwd_sm90_announce) */
        fa__named_sync(2, 256);
        if (cw == 0 && T == 0) fa__mbar_arrive(sm.dq_full + 8 * (sends & 1));
        sends++;
        return false;
    }
    fa__named_sync(2 + cw, 128);
    if (T != 0) return false;
    float *acc = p.dq_acc + blk + cw * 4096;
    fa__bulk_store<true>(acc, q_s, 128 * 8 * 16);
    fa__bulk_store<true>(acc + 8192, do_s, 128 * 8 * 16);
    fa__bulk_commit();
    return true;
}

/* The deterministic kernels' dQ writers, the producer's warps 1 and 2, one
   per buffer b: per tile the consumers hand over in it (dq_full), the
   writer finds the unit's place among the tile's adders (fa__bwd_det_rank,
   the warp's ballot), and lane 0 waits for the tile's count in p.dq_sem to
   reach it, adds the tile, gives the buffer back (dq_empty) once the copy
   has read it, and counts the add (release) once it is done in memory, so
   that the next adder's add comes after it. Two writers, so that one add's
   round trip does not hold back the next tile's (a different tile: a unit
   adds to each once). The consumers meanwhile go on with the next steps:
   they wait for a writer only before they rewrite its buffer (its last
   tile not yet read: the tile's previous adder more than a step late),
   never for an add's round trip or the place. The proxy fences order the
   bulk copies (async proxy) with the count (generic proxy). The first
   adder (rank 0) copies its tile instead of adding it, so that kernel 1
   need not zero the accumulator (p.det_store): 134 MB of writes at 16k
   tokens and hidden 2048. [bwd-det]
   Chains (p.det_chains = C, the deterministic mode where the workspace
   has the slices): the adder at place r adds into slice r % C, the
   chains counted apart, so an add waits for the one C places before it,
   not the one just before; kernel 3 sums the slices in order, the same
   every run.
   Split (D 256): buffer b is stage b's Q and dO buffers (each step hands
   over one tile, so the consumers' b = sends & 1 is the step's stage), the
   step's mail comes at its start (dq_ann, fa__bwd_sm90_announce) so that
   the place and the spin are done before the tile is, and the writer makes
   consumer thread 0's arrival on the stage's release. */
template <int D, int BR>
__device__ __forceinline__ void fa__bwd_sm90_dq_writer(const fa__bwd_params &p, const fa__bwd_sm90_smem &sm,
                                                       uint32_t b, int lane)
{
    typedef fa__bwd_sm90_layout<D, BR, true> L;
    for (uint32_t k = 0;; k++) { /* (the buffer's k-th tile: the barriers' parity k & 1) */
        int64_t blk;
        int tile, jb, ib, h, bt;
        fa__mbar_wait((L::split ? sm.dq_ann : sm.dq_full) + 8 * b, k & 1); /* (split: the step, ahead of its tile) */
        fa__bwd_sm90_fetch(sm.mail + 32 * b, lane, blk, tile, jb, ib, h, bt);
        if (blk < 0) return;
        const int rank = fa__bwd_det_rank<L::br, L::bc>(p, fa__bwd_seq_info(p, bt), bt, h, jb, ib, lane);
        const int chain = rank % p.det_chains, nth = rank / p.det_chains; /* (chain's nth add) */
        if (lane == 0) {
            int *const sem = fa__bwd_tile_counts(p, tile) + chain;
            float *const acc = p.dq_acc + chain * p.acc_slice + blk;
            int n;
            FLASHATTN_TRACE(40, tile, rank); /* (the trace: the spin, the add's round trip) */
            do n = fa__ld_acquire(sem);
            while (n < nth);
            FLASHATTN_TRACE(41, tile, rank);
            if (L::split) fa__mbar_wait(sm.dq_full + 8 * b, k & 1); /* (the tile itself) */
            fa__fence_async_global();
            /* (the tile, split: in stage b's Q and dO buffers, fa__bwd_sm90_send_dq256;
               the first adder copies it: p.det_store) */
            for (int x = 0; x < (L::split ? 2 : 1); x++) {
                const uint32_t from = L::split ? (x ? sm.sdO : sm.sQ) + b * L::q_bytes : b ? sm.sdQ2 : sm.sdQ,
                               bytes = L::split ? L::q_bytes : L::dq_bytes;
                if (nth == 0 && p.det_store) fa__bulk_store<false>(acc + x * (bytes / 4), from, bytes);
                else fa__bulk_store<true>(acc + x * (bytes / 4), from, bytes);
            }
            fa__bulk_commit();
            fa__bulk_wait<true>();
            fa__mbar_arrive(sm.dq_empty + 8 * b);
            if (L::split) fa__mbar_arrive(sm.empty + 8 * b); /* (consumer thread 0's arrival: the stage is read) */
            fa__bulk_wait<false>();
            fa__fence_async_global();
            fa__red_release_add(sem, 1);
            FLASHATTN_TRACE(42, tile, rank);
        }
        __syncwarp();
    }
}

/* A step's barrier 1: both warpgroups' dS^T (split: and P^T) are in shared
   memory (the fence: visible to wgmma's async proxy). It also waits for the
   last dQ tile's bulk add (thread 0's, lead) to have read the tile, which is
   rewritten; a split step's thread 0 that owes the stage before its release
   (owe, after a bulk step) gives it once the adds have read it. */
template <bool DQ_TILE, bool SPLIT>
__device__ __forceinline__ void fa__bwd_sm90_barrier1(bool lead, bool &owe, uint32_t empty_before)
{
    fa__fence_async_shared();
    if (DQ_TILE && lead) fa__bulk_wait<true>();
    if (SPLIT && owe) {
        fa__bulk_wait<true>();
        fa__mbar_arrive(empty_before);
        owe = false;
    }
    fa__named_sync(1, 256);
}

/* Deterministic mode, consumer thread 0 at the end: each dQ writer's last
   message (block -1: no more tiles). */
template <bool SPLIT> __device__ __forceinline__ void fa__bwd_sm90_last_posts(const fa__bwd_sm90_smem &sm, int sends)
{
    for (int x = 0; x < 2; x++, sends++) {
        const int b = sends & 1;
        fa__bwd_sm90_dq_wait(sm, sends);
        fa__bwd_sm90_post(sm.mail + 32 * b, -1, 0, 0, 0, 0, 0);
        fa__mbar_arrive((SPLIT ? sm.dq_ann : sm.dq_full) + 8 * b); /* (split: the writer waits there first) */
    }
}

/* The consumers: warpgroup cw owns keys j0 + 64 cw .. + 63 (split: all 64
   keys of the block, and dK, dV columns cw D/2 .. + D/2 - 1), walks the
   block's units as the producer does, and writes dK_j, dV_j of each.
   Products of a step are issued as soon as their inputs exist and waited
   for only when their result is needed. (The step stays in this loop: as
   a function of its own it changed the code nvcc makes.) */
template <bool BF16, int D, bool EXTRAS, bool SOFTCAP, bool DET>
__device__ __forceinline__ void fa__bwd_sm90_consumer(const fa__bwd_params &p, const fa__bwd_sm90_sched &sc,
                                                      const fa__bwd_sm90_smem &sm, int warp, int lane)
{
    typedef fa__bwd_sm90_klayout<D, EXTRAS, SOFTCAP, DET> L;
    constexpr bool SPLIT = L::split, WIDE = L::wide;
    /* dQ's columns a warpgroup: half of them, or WIDE all of its own 64 rows;
       QW the step's queries in its S^T and dP^T: split, its half of them */
    constexpr int BC = L::bc, BR = L::br, QW = SPLIT ? BR / 2 : BR, NQ = QW / 8, DQ = WIDE ? D : D / 2,
                  DKV = L::dkv, KVB = L::kv_bufs;
    constexpr uint32_t KV_BYTES = L::kv_bytes, Q_BYTES = L::q_bytes, DS_BYTES = L::ds_bytes;
    const uint32_t sKV = sm.sKV, sQ = sm.sQ, sdO = sm.sdO, sdS = sm.sdS, kv_full = sm.kv_full,
                   kv_empty = sm.kv_empty, full = sm.full, empty = sm.empty;
    const int cw = warp / 4 - 1, wq = warp % 4, g = lane / 4, t = lane % 4;
    const int kw0 = SPLIT ? 0 : 64 * cw;   /* the warpgroup's first key row */
    const int krow = kw0 + 16 * wq + g;    /* this thread's key rows krow, krow + 8 */
    const uint32_t kvcol = SPLIT ? cw * (DKV / 64) * BR * 128 : 0; /* its dK/dV columns in Q, dO */
    const int q0 = SPLIT ? QW * cw : 0, o0 = QW - q0; /* split: its first query of a step, the other's */
    float dk[1][DKV / 8][4], dv[1][DKV / 8][4];
    float(&dk_flat)[DKV / 2] = reinterpret_cast<float(&)[DKV / 2]>(dk);
    float(&dv_flat)[DKV / 2] = reinterpret_cast<float(&)[DKV / 2]>(dv);
    int ring = 0, kv_uses = 0, sends = 0;
    /* split, not DET: dQ's tile leaves through the stage's Q and dO buffers
       as bulk adds, and each warpgroup's thread 0 releases the stage (owes
       its arrival) only once they have read it, at the next step's barrier 1
       (a run-time choice here, p.deterministic, spilled 44 bytes more) */
    constexpr bool bulk = SPLIT && !DET && FA__BWD_SM90_BULK256; /* (deterministic: DET, fa__bwd_sm90_pick) */
    bool owe = false; /* (the stage of the step before: st ^ 1) */
    /* LATE: a step's dQ tile is staged at its end and sent once the next
       step's S^T and dP^T are issued, so that the fence, barrier 2 and the
       bulk add (deterministic: the hand-over to a writer) wait under the
       tensor cores' work instead of between steps; late_blk: the staged
       tile's place (-1: none) */
    constexpr bool LATE = FA__BWD_SM90_DQ_LATE && L::dq_tile;
    const int T = 128 * cw + 32 * wq + lane;
    int64_t late_blk = -1;
    int late_jb = 0, late_ib = 0, late_h = 0, late_b = 0; /* (DET: the step that made it) */
    for (int k = 0; k < sc.rounds; k++) {
        fa__bwd_work w;
        const int u = DET && sc.dyn ? fa__bwd_sm90_taken(sm, k) : 0;
        if (DET && sc.dyn && u >= sc.units) break;
        if (!fa__bwd_sm90_work<BR, BC, DET>(p, sc, k, u, w)) continue; /* (a unit no query sees still writes dK = dV = 0) */
        FLASHATTN_TRACE(45, w.jb, w.hk); /* (the trace: the unit's start and end) */
        const int kb = kv_uses % KVB;
        const uint32_t sK = sKV + kb * 2 * KV_BYTES, sV = sK + KV_BYTES;
        const uint32_t kw = sK + kw0 * 128, vw = sV + kw0 * 128; /* this warpgroup's keys */
        /* B of dQ: K_j's columns cw * D/2 .. (a column block, or half of one at D = 64; WIDE: all) */
        const uint32_t kq = WIDE ? sK : sK + (cw * DQ / 64) * BC * 128 + (cw * DQ % 64) * 2;
#pragma unroll
        for (int c = 0; c < DKV / 2; c++) dk_flat[c] = dv_flat[c] = 0.f;
        /* the steps walked, as the producer walks them (>>bwd-bsparse) */
        if (w.first < w.iters) fa__mbar_wait(kv_full + 8 * kb, (uint32_t)((kv_uses / KVB) & 1));
        FLASHATTN_TRACE(47, w.jb, w.hk); /* (the trace: K_j, V_j are in) */
        for (int it = w.first; it < w.iters;
             it = fa__bwd_next_step(p, w.b, w.hk, w.j0, w.ib0, w.nib, w.iters, BR, it + 1), ring++) {
            const int st = ring & 1, h = w.hk * p.group + it / w.nib, i0 = fa__bwd_qblock<DET>(w, it) * BR;
            const uint32_t q_s = sQ + st * Q_BYTES, do_s = sdO + st * Q_BYTES, ds_s = sdS + st * DS_BYTES;
            const float *sL = sm.gLD + st * 2 * BR + q0, *sD = sL + BR;
            /* the step's 64-row block of the fp32 partial dQ (deterministic: in order; without
               FA__BWD_SM90_BULK256, block j's own slice at D = 256). A function, evaluated where
               each use is: computed once at the step's start it stays live through the step, and
               the EXTRAS kernels spilled up to 16 bytes more at D 64 and 256. */
            auto dq_blk = [&]() {
                return (p.deterministic && !L::dq_tile && !DET ? (int64_t)w.jb * p.acc_slice : 0) +
                       ((int64_t)h * p.acc_rows + w.s.acc_row0 + i0) * p.acc_d;
            };
            if (SPLIT && DET && T == 0) fa__bwd_sm90_announce(p, sm, dq_blk(), sends, w.jb, i0 / BR, h, w.b);
            /* (1) S^T = K_w Q_i^T and (4) dP^T = V_w dO_i^T, issued together
               (split: queries q0 .. q0 + QW - 1 of the step) */
            float sT[1][NQ][4], dpT[1][NQ][4];
            float(&s_flat)[QW / 2] = reinterpret_cast<float(&)[QW / 2]>(sT);
            float(&dp_flat)[QW / 2] = reinterpret_cast<float(&)[QW / 2]>(dpT);
            FLASHATTN_TRACE(49, w.jb, it); /* (the trace: the wait for Q_i, dO_i) */
            fa__mbar_wait(full + 8 * st, (uint32_t)((ring / 2) & 1));
            FLASHATTN_TRACE(50, w.jb, it);
            fa__bwd_sm90_issue_sdp<QW, BF16, D, BR, BC>(s_flat, dp_flat, kw, vw, q_s, do_s, q0);
            if (LATE && late_blk >= 0) { /* the step before's dQ tile */
                FLASHATTN_TRACE(53, w.jb, it); /* (the trace: its send) */
                fa__bwd_sm90_flush_dq<DET>(p, sm, T, late_blk, BR * D * 4, sends, late_jb, late_ib, late_h, late_b);
                FLASHATTN_TRACE(54, w.jb, it);
                late_blk = -1;
            }
            /* the dropout keep bits while S^T and dP^T run (they need neither) */
            uint32_t keep = 0u;
            if constexpr (EXTRAS) keep = fa__bwd_sm90_keep<NQ>(p, w.b, h, i0 + q0, w.j0 + krow, t, lane);
            fa__wgmma_wait<1>(); /* groups retire in order: S^T is done (dP^T may run) */
            fa__fence_regs(s_flat);

            /* (2) P^T from S^T and L, P^T dropped packed as dV's A operand
               (P and dS in registers of their own: the accumulators are
               written by wgmma only) */
            float pT[1][NQ][4], dsT[1][NQ][4];
            uint32_t pa[NQ / 2][1][4], da[NQ / 2][1][4];
            fa__bwd_sm90_p<BF16, EXTRAS, SOFTCAP, NQ>(p, w.s, sT[0], pT[0], pa, sL, keep,
                                                      fa__bwd_tile_needs_mask(p, w.s, i0, w.j0, BR, BC), h,
                                                      i0 + q0, w.j0 + krow, t);
            /* split: the other warpgroup reads this half of P^T for its dV */
            if constexpr (SPLIT) fa__bwd_sm90_store_ds<NQ, BC>(pa, sm.sPT + st * L::pt_bytes, krow, q0, t);

            /* (3) dV += P^T dO_i (split: over this warpgroup's queries; the
               other half after the barrier) */
            fa__bwd_sm90_issue_rs<DKV, QW, BR, BF16>(dv_flat, pa, do_s + kvcol, q0);
            fa__wgmma_wait<1>(); /* dP^T is done (dV may still run) */
            fa__fence_regs(dp_flat);

            /* (5) dS^T = P^T * (dP^T - D) (dropout: dP^T Z / (1 - p)) */
            fa__bwd_sm90_ds<EXTRAS, NQ>(p, dpT[0], pT[0], dsT[0], sD, keep, t);
            fa__pack_p<BF16>(dsT, da);
            fa__bwd_sm90_store_ds<NQ, BC>(da, ds_s, krow, q0, t);

            /* (6) dK += dS^T Q_i (the scale is applied once at the end) */
            fa__bwd_sm90_issue_rs<DKV, QW, BR, BF16>(dk_flat, da, q_s + kvcol, q0);

            FLASHATTN_TRACE(51, w.jb, it); /* (the trace: barrier 1, with its wait for the dQ tile) */
            fa__bwd_sm90_barrier1<L::dq_tile, SPLIT>(T == 0, owe, empty + 8 * (st ^ 1));
            FLASHATTN_TRACE(52, w.jb, it);

            /* (7) dQ_i[:, cw D/2 ..] = dS K_j[:, cw D/2 ..], k running over all BC keys
               (WIDE: dQ_i's rows 64 cw .., all columns, = dS[64 cw .., :] K_j: A from the
               dS^T tile's query block cw) */
            float dq[1][DQ / 8][4];
            float(&dq_flat)[DQ / 2] = reinterpret_cast<float(&)[DQ / 2]>(dq);
            /* (split DET: with 232 registers a thread, dQ's 64 beside dK and dV
               and dK's A operand in flight serialized the wgmmas, C7512) */
            if (SPLIT && DET) fa__wgmma_wait<0>();
            fa__bwd_sm90_issue_dq<DQ, BC, BR, BF16>(dq_flat, ds_s + (WIDE ? cw * BC * 128 : 0), kq);
            if constexpr (SPLIT) {
                /* (3), (6) over the other warpgroup's queries */
                fa__bwd_sm90_issue_other<DKV, QW, BR, BF16>(dv_flat, dk_flat, sm.sPT + st * L::pt_bytes, ds_s, do_s,
                                                            q_s, kvcol, o0);
                if (FA__BWD_SM90_BULK256) fa__wgmma_wait<0>(); /* (Q_i and dO_i are read: dQ's tile goes there) */
                else fa__wgmma_wait<1>(); /* dQ is done; dK, dV run on under its adds */
            } else {
                fa__wgmma_wait<0>();
            }
            fa__fence_regs(dq_flat);
            /* Q_i, dO_i, L, D of this stage are read: the producer may refill
               it. Every thread arrives: each read L and D itself, and an
               arrival orders only its own thread's reads (racecheck flagged
               the refill when lane 0 arrived for its warp). (split: once dK
               and dV are done, below) */
            if constexpr (!SPLIT) fa__mbar_arrive(empty + 8 * st);

            const int64_t blk = dq_blk(); /* the fp32 partial dQ */
            if constexpr (LATE) {
                fa__bwd_sm90_stage_dq<DQ / 8, DET, WIDE>(dq[0], sm, T, sends, i0 / BR, w.jb);
                late_blk = blk;
                late_jb = w.jb, late_ib = i0 / BR, late_h = h, late_b = w.b;
            } else if constexpr (L::dq_tile) {
                fa__bwd_sm90_send_dq<DQ / 8, DET, WIDE>(p, dq[0], sm, T, blk, BR * D * 4, sends, w.jb, i0 / BR, h,
                                                        w.b);
            } else if constexpr (bulk || (SPLIT && DET)) {
                if (fa__bwd_sm90_send_dq256<DQ / 8, DET>(p, dq[0], sm, q_s + kvcol, do_s + kvcol, cw, 32 * wq + lane,
                                                         blk, sends))
                    owe = true;
                else if (!DET || T != 0) /* (DET: the writer releases for thread 0) */
                    fa__mbar_arrive(empty + 8 * st);
            } else {
                fa__bwd_sm90_add_dq<DQ / 8>(p, dq[0], p.dq_acc + blk + (int64_t)(16 * wq + g) * p.acc_d + cw * DQ + 2 * t);
                if constexpr (SPLIT) {
                    fa__wgmma_wait<0>();
                    fa__mbar_arrive(empty + 8 * st);
                }
            }
        }
        FLASHATTN_TRACE(48, w.jb, w.hk); /* (the trace: the steps are done) */
        if (w.first < w.iters) {
            /* every product that reads K_j, V_j is done: the buffer may be refilled */
            __syncwarp();
            if (lane == 0) fa__mbar_arrive(kv_empty + 8 * kb);
            kv_uses++;
        }
        fa__fence_regs(dk_flat);
        fa__fence_regs(dv_flat);

        fa__bwd_store_dkdv<BF16, DKV / 8>(p, w.s, w.b, w.hk, w.j0, krow, SPLIT ? cw * DKV : 0, t, dk[0], dv[0]);
        FLASHATTN_TRACE(46, w.jb, w.hk);
    }
    if (LATE && late_blk >= 0) /* (the last tile) */
        fa__bwd_sm90_flush_dq<DET>(p, sm, T, late_blk, BR * D * 4, sends, late_jb, late_ib, late_h, late_b);
    if ((L::dq_tile || bulk) && (bulk ? T % 128 == 0 : T == 0))
        fa__bulk_wait<false>(); /* (done: smem goes) */
    if (DET && T == 0) fa__bwd_sm90_last_posts<SPLIT>(sm, sends);
}

#endif /* FA__SM90A */

/* Kernel 2 on sm_90a: a producer warpgroup and two consumer warpgroups
   (FlashAttention-3's warp specialization) over the block's units. DET:
   deterministic mode (the ordered dQ adds of fa__bwd_sm90_send_dq and
   _send_dq256; without FA__BWD_SM90_BULK256, D 256 writes each key block's
   slice in the plain kernel, p.deterministic). VARLEN: cu_seqlens may be set
   (fa__bwd_sm90_pick_kernel). */
template <bool BF16, int D, bool EXTRAS, bool SOFTCAP, bool DET, bool VARLEN>
__global__ void __launch_bounds__(384, 1)
fa__bwd_kernel_sm90(const __grid_constant__ fa__bwd_maps tm, const fa__bwd_params p)
{
#if FA__SM90A
    typedef fa__bwd_sm90_klayout<D, EXTRAS, SOFTCAP, DET> L;
    static_assert(D % 64 == 0 && D <= 256, "sm_90a backward tile");
    static_assert(128 % L::br == 0 && 128 % L::bc == 0, "a tile lies in one 128 x 128 block of a block mask");
    extern __shared__ uint8_t fa__smem90b[];
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(fa__smem90b), aligned = (base + 1023u) & ~1023u;
    fa__bwd_sm90_smem sm;
    sm.sKV = aligned + L::kv; sm.sQ = aligned + L::q; sm.sdO = aligned + L::dout; sm.sdS = aligned + L::ds; sm.sdQ = aligned + L::dq;
    sm.sLD = aligned + L::ld; sm.sPT = aligned + L::pt;
    const uint32_t bars = fa__bwd_sm90_bars_at<L>(base, aligned);
    sm.kv_full = bars + L::kv_full; sm.kv_empty = bars + L::kv_empty; sm.full = bars + L::full; sm.empty = bars + L::empty;
    sm.gLD = (const float *)(fa__smem90b + (sm.sLD - base));
    if (DET) {
        sm.sdQ2 = aligned + L::dq2; sm.dq_full = bars + L::dq_full; sm.dq_empty = bars + L::dq_empty;
        sm.mail = bars + L::mail;
        sm.dq_ann = bars + L::dq_ann;
        sm.unit_full = bars + L::unit_full; sm.unit_empty = bars + L::unit_empty; sm.unit_slot = bars + L::unit_slot;
    }
    const uint32_t kv_full = sm.kv_full, kv_empty = sm.kv_empty, full = sm.full, empty = sm.empty;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    fa__bwd_sm90_sched sc;
    sc.init(p, L::bc, DET);

    if (tid == 0) {
        for (int x = 0; x < 2; x++) {
            fa__mbar_init(kv_full + 8 * x, VARLEN && p.cu_q ? 2 : 1); /* the producer (and the tails' warp 3) */
            fa__mbar_init(kv_empty + 8 * x, 8); /* lane 0 of each consumer warp */
            fa__mbar_init(full + 8 * x, VARLEN && p.cu_q ? 2 : 1);
            fa__mbar_init(empty + 8 * x, 256); /* every consumer thread (each read L, D) */
        }
        if (DET) {
            for (int x = 0; x < 2; x++) {
                fa__mbar_init(sm.dq_full + 8 * x, 1);  /* consumer thread 0, the tile's mail posted */
                fa__mbar_init(sm.dq_empty + 8 * x, 1); /* a writer: the copy has read the tile */
                fa__mbar_init(sm.dq_ann + 8 * x, 1);   /* split: consumer thread 0, the mail posted */
                fa__mbar_init(sm.unit_full + 8 * x, 1); /* p.det_next: producer thread 0, the unit taken */
                fa__mbar_init(sm.unit_empty + 8 * x, VARLEN && p.cu_q ? 256 + 32 : 256); /* its readers */
            }
        }
        fa__fence_mbar_init();
    }
    __syncthreads(); /* the barriers exist before anyone uses them; the roles part here */

    /* the producer needs few registers: the consumers take them. The block
       holds 384 x 168 = 64512 (launch bounds): 128 x 24 + 256 x 240, and
       DET's 128 x 40 (the dQ writers' place and order: with 32 they
       spilled) + 256 x 232. But a DET wide step's consumers spill at 232
       (156 bytes), none at 240: there the writers spill instead, off the
       consumers' path. (More than the block holds would hang.) */
    constexpr int PRODUCER_REGS = DET && !L::wide ? 40 : 24, CONSUMER_REGS = DET && !L::wide ? 232 : 240;
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 384 * 168, "the block's registers");
    if (warp < 4) {
        fa__setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) fa__bwd_sm90_producer<D, L::br, DET, VARLEN, false>(tm, p, sc, sm, lane);
        else if (DET && (warp == 1 || warp == 2)) fa__bwd_sm90_dq_writer<D, L::br>(p, sm, warp - 1, lane);
        else if (VARLEN && warp == 3 && p.cu_q) fa__bwd_sm90_producer<D, L::br, DET, true, true>(tm, p, sc, sm, lane);
        return;
    }

    fa__setmaxnreg_inc<CONSUMER_REGS>();
    fa__bwd_sm90_consumer<BF16, D, EXTRAS, SOFTCAP, DET>(p, sc, sm, warp, lane);
#else
    /* no wgmma in this device pass: the host's marker (see the forward) */
    __shared__ volatile int fa__sm90_missing;
    fa__sm90_missing = 0;
    (void)tm; (void)p;
#endif
}
#endif /* FLASHATTN_NO_HOPPER (backward kernel) */

/* ---- host side: validation, workspace, launch ------------------------------ */

/* The problem resolved for the backward kernels. */
typedef struct fa__bwd_plan {
    int D, br, bc;          /* kernel head dim (d rounded up), tile */
    int acc_sq;             /* fa__bwd_params.acc_sq, acc_rows */
    int64_t acc_rows;
    size_t smem;            /* dynamic shared memory of the main kernel */
    size_t dsum_bytes, acc_bytes, sem_bytes, total_bytes;
    int det_chains;         /* fa__bwd_params.det_chains: the most the accumulator's slices allow */
} fa__bwd_plan;

#define FA__BWD_CUDA_TRY(call)                                                        \
    do {                                                                              \
        cudaError_t fa__e = (call);                                                   \
        if (fa__e != cudaSuccess) return fa__cuda_fail("fa_backward_cuda", fa__e, #call); \
    } while (0)

static size_t fa__bwd_round256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The kernels' head dims are 32, 64, 128 and 256; a FLASHATTN_HEAD_DIMS
   entry h compiles the smallest of them >= h, and head dim d runs on the
   smallest one compiled >= d (0: none). */
static constexpr int fa__bwd_round_dim(int d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256; }
static constexpr bool fa__bwd_dim_compiled(int D)
{
    for (int i = 0; i < fa__n_head_dims; i++)
        if (fa__bwd_round_dim(fa__head_dims[i]) == D) return true;
    return false;
}
static constexpr int fa__bwd_kernel_dim(int d)
{
    for (int D = 32; D <= 256; D *= 2)
        if (D >= d && fa__bwd_dim_compiled(D)) return D;
    return 0;
}

/* The workspace's counts: FA__BWD_DET_CHAINS per 64-row dQ tile, one a
   chain (fa__bwd_params.dq_sem; rows = acc_rows x heads_q), then one int,
   the DET kernels' unit counter (fa__bwd_params.det_next). */
static int64_t fa__bwd_sem_ints(int64_t rows) { return FA__BWD_DET_CHAINS * ((rows + 63) / 64); }

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
    pl->D = fa__bwd_kernel_dim(d);
    if (!pl->D)
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head_dim %d is larger than every head dim compiled in (FLASHATTN_HEAD_DIMS)", fn, d);
    pl->br = pl->D <= 128 ? 64 : 32;
    pl->bc = pl->D <= 128 ? 128 : 64;
    pl->smem = (size_t)(2 * pl->bc * pl->D + 4 * pl->br * pl->D + pl->bc * pl->br) * 2 + 4 * pl->br * 4;
    /* accumulator rows per head (see fa__bwd_params.acc_rows) */
    pl->acc_sq = r->cu_seqlens_q ? 0 : fa__bwd_acc_pad(r->seqlen_q);
    pl->acc_rows = r->cu_seqlens_q
                       ? fa__bwd_acc_pad((int64_t)r->batch * r->seqlen_q) + (int64_t)FA__BWD_ACC_ALIGN * r->batch
                       : (int64_t)r->batch * pl->acc_sq;
    const size_t rows = (size_t)pl->acc_rows * r->heads_q;
    const size_t slices = r->deterministic ? (size_t)(r->seqlen_k + pl->bc - 1) / pl->bc : 1;
    pl->dsum_bytes = fa__bwd_round256(rows * sizeof(float));
    pl->acc_bytes = fa__bwd_round256(slices * rows * pl->D * sizeof(float));
    pl->det_chains = !r->deterministic ? 1 : slices < (size_t)FA__BWD_DET_CHAINS ? (int)slices : FA__BWD_DET_CHAINS;
    /* (the default mode may run the deterministic kernels too: fa__bwd_det_pays) */
    pl->sem_bytes = fa__bwd_round256((size_t)(fa__bwd_sem_ints((int64_t)rows) + 1) * sizeof(int));
    pl->total_bytes = 2 * pl->dsum_bytes + pl->acc_bytes + pl->sem_bytes;
    return FA_OK;
}

/* Whether the sm_90a backward takes a block mask's units sorted by their
   work (fa__bwd_sm90_sched) at kernel head dim D: measured both ways
   [bwd-bsparse-order], their own order won at D 64 and at D 128 without
   a causal bound, and lost at D 128 under long causal masks. */
static bool fa__bwd_bm_sorted(int D, int causal) { return D > 64 && causal; }
/* Workspace bytes of a block mask's lists and bitmaps and, where they are
   sorted, the sm_90a kernel's unit order (fa__bm_workspace; 0 without a
   mask): its work items are the units of fa__bwd_sm90_sched. */
static size_t fa__bwd_bm_workspace(const fa_problem *r, const fa__bwd_plan *pl) {
    const int64_t units = (int64_t)((r->seqlen_k + pl->bc - 1) / pl->bc) * r->heads_kv * r->batch;
    return fa__bm_workspace(r, fa__bwd_bm_sorted(pl->D, r->causal) ? units : 0);
}

/* A view for the kernels, after fa__check_tensor resolved its strides: the
   kernels read and write 16 bytes at a time, so base and strides must be
   16-byte multiples. */
static fa_status fa__bwd_view_make(const char *fn, const char *name, const fa_tensor *t, fa_dtype dt,
                                   int varlen, fa__bwd_view *v) {
    fa_status s;
    if (t->dtype != dt)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s.dtype differs from q.dtype", fn, name);
    v->data = t->data;
    v->hs = t->head_stride;
    v->ss = t->seq_stride;
    v->bs = t->batch_stride;
    if ((s = fa__check_rows_aligned(fn, name, t, varlen)) != FA_OK) return s;
    return FA_OK;
}

template <bool BF16, int D, int BR, int BC, bool SOFTCAP>
static fa_status fa__bwd_launch_main(const fa__bwd_params &kp, const fa__bwd_plan &pl,
                                     cudaStream_t st) {
    constexpr int NWARPS = 8, WD = D <= 128 ? 1 : 2;
    void (*kern)(const fa__bwd_params) = fa__bwd_kernel_sm80<BF16, D, BR, BC, NWARPS, WD, SOFTCAP>;
    FA__BWD_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem));
    dim3 grid((kp.seqlen_k + BC - 1) / BC, kp.hkv, kp.batch);
    FA__LAUNCH(kern, grid, NWARPS * 32, pl.smem, st, kp);
    FA__BWD_CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

/* Kernel 1, launched by whichever main kernel runs, with its parameters
   (det_store). A block: 8 warps, a row acc_d / 8 lanes (fa__bwd_preprocess_kernel),
   over each sequence's padding rows too (sq_pad). */
template <bool BF16> static cudaError_t fa__bwd_preprocess(const fa__bwd_params &kp, cudaStream_t st)
{
    const int rows = 8 * (32 / (kp.acc_d / 8));
    dim3 pad_grid((unsigned)(fa__bwd_acc_pad(kp.seqlen_q) + rows - 1) / rows, kp.hq, kp.batch);
    FA__LAUNCH(fa__bwd_preprocess_kernel<BF16>, pad_grid, 256, 0, st, kp);
    return cudaGetLastError();
}

#ifndef FLASHATTN_NO_HOPPER
#ifdef FLASHATTN_TEST_HOOKS
/* tests only: backward calls that took the sm_90a kernel, a switch that
   sends every backward to the sm_80 kernel (both tested on one GPU), and a
   cap on the grid, so that small problems too run persistent */
static int fa__bwd_sm90_launches, fa__bwd_sm90_disable, fa__bwd_sm90_grid_cap; /* cap: 0 = none */
static int fa__bwd_sm90_no_rot; /* the DET kernels' walks of one order, as without cooperative launches */
static int fa__bwd_det_chains_any; /* the DET kernels' dQ adds in chains wherever the workspace has the slices */
#define FA__BWD_SM90_OFF fa__bwd_sm90_disable
#else
#define FA__BWD_SM90_OFF 0
#endif
/* Under a block mask, the sm_90a kernel's units (fa__bwd_unit_of) sorted
   by their work, most first: the query
   blocks listed for key block jb's 128-key block, over the heads of KV
   head hk's group. */
struct fa__bwd_unit_count {
    fa__bmask m;
    int nblk, bc, hkv, group;
    __device__ int operator()(int u) const
    {
        int jb, hk, b, n = 0;
        fa__bwd_unit_of(u, nblk, hkv, jb, hk, b);
        const int J = jb * bc / 128;
        for (int hh = 0; hh < group; hh++) {
            const uint32_t *w = m.cbits + ((int64_t)fa__bm_mask(m, b, hk * group + hh) * m.k_blocks + J) * m.qwords;
            for (int i = 0; i < m.qwords; i++) n += __popc(w[i]);
        }
        return n;
    }
};
static cudaError_t fa__bwd_sm90_sort(const fa__bwd_params &kp, const fa__bwd_plan &pl, int32_t *order,
                                     cudaStream_t st) {
    const int nblk = (kp.seqlen_k + pl.bc - 1) / pl.bc;
    const int64_t units = (int64_t)nblk * kp.hkv * kp.batch;
    if (units > INT32_MAX) return cudaSuccess; /* (never the sm_90a kernel: fa__bwd_launch_sm90) */
    const fa__bwd_unit_count count = {kp.bm, nblk, pl.bc, kp.hkv, kp.group};
    FA__LAUNCH(fa__bm_order_kernel<fa__bwd_unit_count>, 1, 1024, 0, st, count, (int)units,
               kp.bm.q_blocks * kp.group + 1, order);
    return cudaGetLastError();
}

/* Whether the deterministic kernels' dQ adds go in chains (p.det_chains,
   fa__bwd_sm90_dq_writer), for nk key blocks: measured faster at D 256
   with no causal or window bound from 16 key blocks on (1k keys), where
   every key block adds to every tile and the one chain of 64 KB adds sets
   the pace; slower under a causal bound, at 512 keys and at D 64 / 128
   (why, not traced) [bwd-det-store]. */
template <int D> static bool fa__bwd_det_chained(const fa__bwd_params &kp, int64_t nk)
{
#ifdef FLASHATTN_TEST_HOOKS
    if (fa__bwd_det_chains_any) return true;
#endif
    return D == 256 && !kp.causal && !kp.window && !kp.bm.bits && !kp.cu_q && nk >= 16;
}

/* Whether the deterministic kernels rotate their walks (fa__bwd_rot), for
   nk key blocks and nq query blocks on sms SMs: where the walks are short
   (at most 64 steps: there the one order's chain of adds is the largest
   part of a unit). Their cooperative grid has a block per SM; the
   sequences that a round holds whole rotate, those split between two
   rounds walk in one order (fa__bwd_rotates). [bwd-det] */
static bool fa__bwd_det_rotates(int64_t nk, int64_t nq, int sms)
{
    return nq <= 64 && nk <= sms;
}
/* Run the main kernel on sm_90a when it can; *ran = 0 (and FA_OK) leaves
   the problem to the sm_80 kernel: no sm_90a code for this GPU, a view TMA
   cannot describe, or too little shared memory. *ran = 1: it ran; 2: a DET
   kernel ran (det_store: kernel 3 reads the tiles' counts). It launches
   kernel 1 first, with the parameters this kernel runs on. */
template <bool BF16, int D, bool EXTRAS, bool SOFTCAP, bool DET, bool VARLEN>
static fa_status fa__bwd_launch_sm90(const fa__bwd_params &kp, const fa__gpu &gpu, cudaStream_t st, int *ran) {
    typedef fa__bwd_sm90_klayout<D, EXTRAS, SOFTCAP, DET> L;
    constexpr int BC = L::bc, BR = L::br;
    const size_t smem = L::request;
    void (*kern)(const fa__bwd_maps, const fa__bwd_params) = fa__bwd_kernel_sm90<BF16, D, EXTRAS, SOFTCAP, DET, VARLEN>;
    cudaFuncAttributes fa;
    fa__bwd_maps tm;
    const int sms = gpu.sms;
    *ran = 0;
    if (cudaFuncGetAttributes(&fa, kern) != cudaSuccess) {
        (void)cudaGetLastError();
        return FA_OK;
    }
    if (fa.binaryVersion != 90 || fa.sharedSizeBytes != 0 || (size_t)gpu.smem_optin < smem) return FA_OK;
    memset(&tm, 0, sizeof tm);
    /* with cu_seqlens the maps are packed (fa__tma_map_seqs); the producer
       takes only whole tiles of a sequence through them, warp 3 the tails */
    auto map = [&](CUtensorMap *m, const fa__bwd_view &v, int seqlen, int heads, int box) {
        return fa__tma_map_seqs(m, v.data, BF16, kp.d, seqlen, heads, kp.batch, kp.cu_q != NULL, v.ss, v.hs, v.bs,
                                box);
    };
    if (map(&tm.q, kp.q, kp.seqlen_q, kp.hq, BR) || map(&tm.dout, kp.dout, kp.seqlen_q, kp.hq, BR) ||
        map(&tm.k, kp.k, kp.seqlen_k, kp.hkv, BC) || map(&tm.v, kp.v, kp.seqlen_k, kp.hkv, BC))
        return FA_OK;
    FA__BWD_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    /* a block per unit (key block, KV head, batch), or persistent blocks,
       one per SM, when there are more units than SMs (see the kernel) */
    const int64_t nblk = (kp.seqlen_k + BC - 1) / BC, units = nblk * kp.hkv * kp.batch;
    const int64_t pairs = (nblk + 1) / 2 * kp.hkv * kp.batch;
    if (units > INT32_MAX) return FA_OK; /* int unit indexes: the sm_80 grid takes it */
    /* (deterministic: a block per unit, in the order the ordered dQ adds need; below, rotated
       walks or a persistent grid where the units outnumber the SMs) */
    int grid = units > sms && !DET ? (int)(pairs < sms ? pairs : sms) : (int)units;
#ifdef FLASHATTN_TEST_HOOKS
    if (fa__bwd_sm90_grid_cap > 0 && grid > fa__bwd_sm90_grid_cap && !DET) grid = fa__bwd_sm90_grid_cap;
#endif
    /* DET without a mask and without cu_seqlens (equal lengths):
       rotated walks where they pay (fa__bwd_det_rotates), on a cooperative
       grid; where the device cannot launch it, the walks of one order on a
       block per unit */
    fa__bwd_params kr = kp;
    kr.det_rot = DET && !kp.causal && !kp.window && !kp.bm.bits && !kp.cu_q && gpu.coop &&
                 fa__bwd_det_rotates(nblk, (kp.seqlen_q + BR - 1) / BR, sms);
#ifdef FLASHATTN_TEST_HOOKS
    if (fa__bwd_sm90_no_rot) kr.det_rot = 0;
#endif
    /* DET otherwise: a block per unit where the SMs take them all at once,
       else a block per SM taking the units from a counter after the tile
       counts (fa__bwd_sm90_take) */
    if (DET && !kr.det_rot) {
        int g = sms;
#ifdef FLASHATTN_TEST_HOOKS
        if (fa__bwd_sm90_grid_cap > 0 && g > fa__bwd_sm90_grid_cap) g = fa__bwd_sm90_grid_cap; /* (tests: rounds) */
#endif
        if (units > g && kp.dq_sem) {
            kr.det_next = kp.dq_sem + fa__bwd_sem_ints(kp.acc_rows * kp.hq);
            grid = g;
        }
    }
    kr.det_store = DET; /* (the writers' first adds copy: no zeroed accumulator) */
    if (!fa__bwd_det_chained<D>(kp, nblk)) kr.det_chains = 1; /* (kernel 3 reads the counts of every chain) */
    FA__BWD_CUDA_TRY(fa__bwd_preprocess<BF16>(kr, st));
    bool launched = false;
    if (kr.det_rot) {
        int64_t g = sms;
#ifdef FLASHATTN_TEST_HOOKS
        if (fa__bwd_sm90_grid_cap > 0 && g > fa__bwd_sm90_grid_cap) /* (tests: rounds, sequences whole and split) */
            g = fa__bwd_sm90_grid_cap > nblk ? fa__bwd_sm90_grid_cap : nblk < sms ? nblk + 1 : nblk;
#endif
        g = units < g ? units : g;
        void *args[2] = {(void *)&tm, (void *)&kr};
        launched = cudaLaunchCooperativeKernel((const void *)kern, dim3((unsigned)g), dim3(384), args, smem,
                                               st) == cudaSuccess;
        if (!launched) {
            (void)cudaGetLastError();
            kr.det_rot = 0;
        }
    }
    if (!launched) FA__LAUNCH(kern, grid, 384, smem, st, tm, kr);
    FA__BWD_CUDA_TRY(cudaGetLastError());
#ifdef FLASHATTN_TEST_HOOKS
    fa__bwd_sm90_launches++;
#endif
    *ran = DET ? 2 : 1; /* (2: det_store, for kernel 3) */
    return FA_OK;
}
/* The default mode on the deterministic kernels. On short sequences a
   key block meets few query blocks, and the default kernels' dQ (adds
   from every key block into an accumulator kernel 1 zeroed) costs more
   than the DET kernels' ordered adds, whose first add of a tile copies
   ([bwd-det-store] has the runs behind the bounds): above D 64, at most
   512 keys and queries, or 1024 under a causal mask (half the blocks
   meet); at D 64 causal only, at most 512; only where the units fill the
   GPU twice, as in the shapes measured (so the tests' small cases keep
   the default kernels). */
template <int D> static bool fa__bwd_det_pays(const fa__bwd_params &kp, int sms)
{
    const int n = D >= 128 ? (kp.causal ? 1024 : 512) : (kp.causal ? 512 : 0), bc = fa__bwd_sm90_layout<D>::bc;
    const int64_t units = (int64_t)(kp.seqlen_k + bc - 1) / bc * kp.hkv * kp.batch;
    return !kp.cu_q && !kp.bm.bits && kp.seqlen_q <= n && kp.seqlen_k <= n && units >= 2 * sms;
}
/* Which sm_90a kernel: softcap, ALiBi and dropout (the extras) take its
   EXTRAS kernels, the deterministic mode its DET kernels (so does the
   default mode where fa__bwd_det_pays); both at once run the sm_80 kernel
   (*ran = 0). A kernel with VARLEN takes cu_seqlens too
   (the maps by token, the tails' copies by warp 3: fa__bwd_sm90_producer);
   the plain and DET kernels have a twin without, for equal lengths, which
   the varlen code slowed [bwd-varlen]. (The EXTRAS kernels take both:
   twins of them too cost compile time.) */
template <bool BF16, int D, bool VARLEN>
static fa_status fa__bwd_sm90_pick_kernel(const fa__bwd_params &kp, const fa__gpu &gpu, cudaStream_t st, int *ran) {
    const bool extras = kp.dropout || kp.softcap > 0.f || kp.alibi, cap = kp.softcap > 0.f;
    /* (D 256 without FA__BWD_SM90_BULK256: slices, any kernel) */
    constexpr bool ORDERED = fa__bwd_sm90_layout<D>::dq_tile || FA__BWD_SM90_BULK256;
    *ran = 0;
    if constexpr (ORDERED)
        if (!extras && (kp.deterministic || fa__bwd_det_pays<D>(kp, gpu.sms))) {
            fa__bwd_params kd = kp; /* (the default mode too: kernel 1 then zeroes the tile counts) */
            kd.deterministic = 1;
            const fa_status s = fa__bwd_launch_sm90<BF16, D, false, false, true, VARLEN>(kd, gpu, st, ran);
            if (s != FA_OK || *ran || kp.deterministic) return s; /* (else the default kernel, below) */
        }
    if (ORDERED && kp.deterministic) return FA_OK; /* (with the extras: the sm_80 kernel's slices) */
    return !extras ? fa__bwd_launch_sm90<BF16, D, false, false, false, VARLEN>(kp, gpu, st, ran)
         : cap     ? fa__bwd_launch_sm90<BF16, D, true, true, false, true>(kp, gpu, st, ran)
                   : fa__bwd_launch_sm90<BF16, D, true, false, false, true>(kp, gpu, st, ran);
}
template <bool BF16, int D>
static fa_status fa__bwd_sm90_pick(const fa__bwd_params &kp, const fa__gpu &gpu, cudaStream_t st, int *ran) {
    return kp.cu_q ? fa__bwd_sm90_pick_kernel<BF16, D, true>(kp, gpu, st, ran)
                   : fa__bwd_sm90_pick_kernel<BF16, D, false>(kp, gpu, st, ran);
}
#endif /* FLASHATTN_NO_HOPPER (backward launch) */

template <bool BF16>
static fa_status fa__bwd_run(const fa__bwd_params &kp, const fa__bwd_plan &pl, const fa__gpu &gpu,
                             cudaStream_t st) {
    fa_status s = FA_OK;
    int ran = 0;
#ifndef FLASHATTN_NO_HOPPER
    /* the sm_90a kernel's coverage (see its comment); the rest runs below.
       (if constexpr: only the head dims compiled in, fa__bwd_dim_compiled) */
    if (!FA__BWD_SM90_OFF && pl.D >= 64) {
        if constexpr (fa__bwd_dim_compiled(64))
            if (pl.D == 64) s = fa__bwd_sm90_pick<BF16, 64>(kp, gpu, st, &ran);
        if constexpr (fa__bwd_dim_compiled(128))
            if (pl.D == 128) s = fa__bwd_sm90_pick<BF16, 128>(kp, gpu, st, &ran);
        if constexpr (fa__bwd_dim_compiled(256))
            if (pl.D == 256) s = fa__bwd_sm90_pick<BF16, 256>(kp, gpu, st, &ran);
        if (s != FA_OK) return s;
    }
#else
    (void)gpu;
#endif /* FLASHATTN_NO_HOPPER (backward dispatch) */
    if (!ran) FA__BWD_CUDA_TRY(fa__bwd_preprocess<BF16>(kp, st)); /* (the sm_80 kernel's) */
    const bool sc = kp.softcap > 0.f;
#define FA__BWD_MAIN(D_, BR_, BC_)                                                           \
    if constexpr (fa__bwd_dim_compiled(D_))                                                  \
        if (!ran && pl.D == D_)                                                              \
            s = sc ? fa__bwd_launch_main<BF16, D_, BR_, BC_, true>(kp, pl, st)               \
                   : fa__bwd_launch_main<BF16, D_, BR_, BC_, false>(kp, pl, st);
    FA__BWD_MAIN(32, 64, 128) FA__BWD_MAIN(64, 64, 128) FA__BWD_MAIN(128, 64, 128) FA__BWD_MAIN(256, 32, 64)
#undef FA__BWD_MAIN
    if (s != FA_OK) return s;
    fa__bwd_params kc = kp; /* the sm_90a kernel left the accumulator tiled (D 256 without BULK256: not), */
    kc.acc_tiled = !ran ? 0 : pl.D <= 128 ? 1 : FA__BWD_SM90_BULK256 ? 2 : 0;
    kc.deterministic = kp.deterministic && !kc.acc_tiled; /* and summed in order: slice 0 holds dQ */
    kc.det_store = ran == 2;
    /* 64 rows a block, its tile 64 x (acc_d + 8) halves (at most 33 KB: no opt-in needed) */
    FA__LAUNCH(fa__bwd_dq_convert_kernel<BF16>, dim3((kp.seqlen_q + 63) / 64, kp.hq, kp.batch), 256,
               (size_t)64 * (kp.acc_d + 8) * 2, st, kc);
    FA__BWD_CUDA_TRY(cudaGetLastError());
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_backward_cuda_workspace_size(const fa_problem *p, size_t *bytes) {
    const char *fn = "fa_backward_cuda_workspace_size";
    fa_problem r;
    fa__bwd_plan pl = {};
    fa_status s = fa__resolve(fn, p, &r, 0); /* host_arrays = 0: device memory */
    if (s != FA_OK || (s = fa__no_block_table(fn, &r)) != FA_OK || (s = fa__bwd_make_plan(fn, &r, &pl)) != FA_OK)
        return s;
    if (!bytes) return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    /* a block mask's sorted lists and bitmap follow (>>gpu-bsparse-host; 256-byte multiples) */
    *bytes = pl.total_bytes + fa__bwd_bm_workspace(&r, &pl);
    return FA_OK;
}

/* The sm_90a kernel's unit order under a block mask (kp->bm, prepared by
   fa__bm_prepare): sorted into the workspace's place for it where
   fa__bwd_bm_sorted, else none (order NULL: the units in their own order,
   fa__bwd_sm90_sched) */
static cudaError_t fa__bwd_bm_order(const fa_problem *r, const fa__bwd_plan *pl, fa__bwd_params *kp,
                                    cudaStream_t st)
{
#ifndef FLASHATTN_NO_HOPPER
    if (fa__bwd_bm_sorted(pl->D, r->causal)) return fa__bwd_sm90_sort(*kp, *pl, (int32_t *)kp->bm.order, st);
#else
    (void)r, (void)pl, (void)st; /* (no sm_90a kernel to read an order) */
#endif
    kp->bm.order = NULL;
    return cudaSuccess;
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
    fa__bwd_plan pl = {};
    fa_status s = fa__check_backward(fn, p, &r, &q, &k, &v, &o, &dout, lse, &dq, &dk, &dv, 0);
    /* a block mask: 128 x 128 blocks, as the forward (>>bwd-bsparse) */
    if (s != FA_OK || (s = fa__check_bm_cuda(fn, &r, 0)) != FA_OK || (s = fa__bwd_make_plan(fn, &r, &pl)) != FA_OK)
        return s;
    const size_t bm_bytes = fa__bwd_bm_workspace(&r, &pl), ws_need = pl.total_bytes + bm_bytes;
    if (q.dtype != FA_F16 && q.dtype != FA_BF16)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: q.dtype must be f16 or bf16 on the GPU", fn);
    fa__bwd_params kp;
    memset(&kp, 0, sizeof kp);
    const int vl = r.cu_seqlens_q != NULL; /* varlen: the batch stride is unused */
    if ((s = fa__bwd_view_make(fn, "q", &q, q.dtype, vl, &kp.q)) || (s = fa__bwd_view_make(fn, "k", &k, q.dtype, vl, &kp.k)) ||
        (s = fa__bwd_view_make(fn, "v", &v, q.dtype, vl, &kp.v)) || (s = fa__bwd_view_make(fn, "o", &o, q.dtype, vl, &kp.o)) ||
        (s = fa__bwd_view_make(fn, "dout", &dout, q.dtype, vl, &kp.dout)) ||
        (s = fa__bwd_view_make(fn, "dq", &dq, q.dtype, vl, &kp.dq)) ||
        (s = fa__bwd_view_make(fn, "dk", &dk, q.dtype, vl, &kp.dk)) ||
        (s = fa__bwd_view_make(fn, "dv", &dv, q.dtype, vl, &kp.dv)))
        return s;
    if (workspace && (workspace_size < ws_need || (uintptr_t)workspace % 16))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: workspace (%zu bytes) is smaller than fa_backward_cuda_workspace_size (%zu) "
                        "or not 16-byte aligned", fn, workspace_size, ws_need);
    int major = 0, minor = 0;
    fa__gpu gpu = {}; /* the kernels' view of the device: shared memory, SMs, cooperative launches */
    {
        const fa_status qs = fa__gpu_query("fa_backward_cuda", &gpu, &major, &minor);
        if (qs != FA_OK) return qs;
    }
    if (major < 8 || (size_t)gpu.smem_optin < pl.smem)
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
    kp.acc_sq = pl.acc_sq;
    kp.acc_rows = pl.acc_rows;
    kp.acc_slice = (int64_t)p->heads_q * kp.acc_rows * pl.D;
    kp.scale = p->scale;
    kp.scale_log2 = kp.scale * 1.4426950408889634f;
    kp.softcap = p->softcap;
    kp.scale_cap = p->softcap > 0.f ? p->scale / p->softcap : 0.f;
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
    if (!ws && (s = fa__ws_alloc(fn, &ws, ws_need, st)) != FA_OK) return s;
    kp.dsum = (float *)ws;
    kp.lse2 = (float *)((char *)ws + pl.dsum_bytes);
    kp.dq_acc = (float *)((char *)ws + 2 * pl.dsum_bytes);
    kp.dq_sem = pl.sem_bytes ? (int *)((char *)ws + 2 * pl.dsum_bytes + pl.acc_bytes) : NULL;
    kp.det_chains = pl.det_chains; /* (at most; fa__bwd_det_chained: where the DET kernels take them) */
    /* a block mask: its bitmap built after the backward's own parts, on the
       stream before the kernels that read it (>>bwd-bsparse) */
    cudaError_t bm_e = cudaSuccess;
    if (bm_bytes) bm_e = fa__bm_prepare(&r, (char *)ws + pl.total_bytes, st, &kp.bm);
    if (bm_bytes && bm_e == cudaSuccess) bm_e = fa__bwd_bm_order(&r, &pl, &kp, st);
    if (bm_e != cudaSuccess) s = fa__cuda_fail(fn, bm_e, "the block mask's sorting kernel");
    else s = q.dtype == FA_F16 ? fa__bwd_run<false>(kp, pl, gpu, st) : fa__bwd_run<true>(kp, pl, gpu, st);
    return workspace ? s : fa__ws_free(fn, ws, st, s);
}
#endif /* FLASHATTN_NO_BACKWARD */

/* A part left out (FLASHATTN_NO_DECODE, FLASHATTN_NO_BACKWARD, >>gpu-config)
   keeps its entry points: each says what was left out. */
#if defined(FLASHATTN_NO_DECODE) || defined(FLASHATTN_NO_BACKWARD)
#ifdef __cplusplus
extern "C" {
#endif
#define FA__LEFT_OUT(fn, macro) fa__fail(FA_ERROR_UNSUPPORTED, "%s: compiled out by %s", fn, macro)
#ifdef FLASHATTN_NO_DECODE
FLASHATTN_DEF fa_status fa_decode_cuda_workspace_size(const fa_problem *, size_t *)
{
    return FA__LEFT_OUT("fa_decode_cuda_workspace_size", "FLASHATTN_NO_DECODE");
}
FLASHATTN_DEF fa_status fa_decode_cuda(const fa_problem *, fa_tensor, fa_tensor, fa_tensor, fa_tensor,
                                       fa_tensor, fa_tensor, float *, void *, size_t, void *)
{
    return FA__LEFT_OUT("fa_decode_cuda", "FLASHATTN_NO_DECODE");
}
#endif
#ifdef FLASHATTN_NO_BACKWARD
FLASHATTN_DEF fa_status fa_backward_cuda_workspace_size(const fa_problem *, size_t *)
{
    return FA__LEFT_OUT("fa_backward_cuda_workspace_size", "FLASHATTN_NO_BACKWARD");
}
FLASHATTN_DEF fa_status fa_backward_cuda(const fa_problem *, fa_tensor, fa_tensor, fa_tensor, fa_tensor,
                                         fa_tensor, const float *, fa_tensor, fa_tensor, fa_tensor,
                                         void *, size_t, void *)
{
    return FA__LEFT_OUT("fa_backward_cuda", "FLASHATTN_NO_BACKWARD");
}
#endif
#undef FA__LEFT_OUT
#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_NO_DECODE || FLASHATTN_NO_BACKWARD */

#endif /* FLASHATTN_CUDA_CUH */
