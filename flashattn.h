/* flashattn.h - v0.1.0 - exact attention the FlashAttention way, in one header.
   Public domain or MIT, your choice: see the end of this file.

   O = softmax(scale * Q K^T + mask) V, computed tile by tile with an online
   softmax, so the N x N score matrix never exists in memory.

   ============================================================================
   0. CONTENTS (search for the tag to jump)
   ============================================================================
     1. Usage ............................... this block
     2. Configuration macros ................ this block
     3. Glossary ............................ this block
     4. The API in call order ............... this block
     5. Semantics ........................... this block
     6. What it does not do ................. this block
     7. Performance and accuracy ............ this block (points to README)
     8. References .......................... this block
     >>api           public declarations
     >>impl          implementation (under FLASHATTN_IMPLEMENTATION); on a first
                     read go straight to >>impl-softmax, >>impl-forward's
                     loop, >>impl-backward: the rest is fenced "SKIP ON
                     FIRST READ"
     >>impl-util     status, errors, allocation, threads
     >>impl-convert  f16 / bf16 <-> f32 conversion
     >>impl-philox   dropout random numbers
     >>impl-check    argument validation
     >>impl-fp8      FP8 (e4m3): checks, block descales, the quantizer
                     with its Hadamard rotation
     >>impl-softmax  the online softmax, step by step
     >>impl-forward  CPU forward (FlashAttention-2 loop order)
     >>impl-backward CPU backward (recomputation)
     >>impl-merge    merging partial results by log-sum-exp
     >>impl-decode   CPU decode against a KV cache (split-KV)
     >>license

   ============================================================================
   1. USAGE
   ============================================================================
   In exactly ONE C or C++ file:

       #define FLASHATTN_IMPLEMENTATION
       #include "flashattn.h"

   Everywhere else just #include "flashattn.h". If that one file is compiled by
   nvcc (a .cu file), the GPU half (flashattn_cuda.cuh, next to this header) is
   compiled in too and the fa_*_cuda entry points exist (nvcc --split-compile=0
   spreads its kernels over the cores; README.md, Quick start). The
   declarations need no CUDA header: device pointers and the stream are plain
   `void *`, so a C engine built by gcc, clang or MSVC can call GPU functions
   that were compiled in another translation unit.

       fa_problem p;                  // all zero = full attention, scale 1/sqrt(d)
       fa_tensor q, k, v, o;          // all zero = f32, packed strides
       memset(&p, 0, sizeof p); memset(&q, 0, sizeof q);
       k = v = o = q;
       p.batch = 1; p.seqlen_q = p.seqlen_k = 1024;
       p.heads_q = 8; p.head_dim = 64;
       q.data = Q; k.data = K; v.data = V; o.data = O;   // float arrays
       if (fa_forward(&p, q, k, v, o, NULL, NULL, 0) != FA_OK)
           fprintf(stderr, "%s\n", fa_last_error());

   ============================================================================
   2. CONFIGURATION MACROS (define before the #include that has
      FLASHATTN_IMPLEMENTATION, unless said otherwise)
   ============================================================================
     FLASHATTN_IMPLEMENTATION  (undefined) emit the implementation in this file.
     FLASHATTN_STATIC          (undefined) give every function internal linkage;
                               define before EVERY include in that file.
     FLASHATTN_DEF             (extern, or static under FLASHATTN_STATIC)
                               storage class of every public function.
     FLASHATTN_MALLOC(n), FLASHATTN_FREE(p)
                               (malloc / free) define both or neither; used only
                               when a caller passes no workspace.
     FLASHATTN_ASSERT(x)       (assert(x)) internal invariants only; bad input
                               is never asserted, it returns an fa_status.
     FLASHATTN_CPU_BR          (512) CPU query tile rows Br (1..1024) of the
                               forward and decode (decode: at most its
                               heads_q x seqlen_q); the backward's are
                               min(Br, 256).
     FLASHATTN_CPU_BC          (128) CPU key/value tile columns Bc (1..1024).
                               Each Q tile re-reads all of K and V, so a tall
                               Br saves memory traffic; per-worker scratch is
                               about (3 Br + 2 Bc) x 128 floats (forward, d 128).
     FLASHATTN_NO_SIMD         (undefined) use only the portable C loops, even
                               where AVX-512F, AVX2/FMA or AArch64 NEON is
                               available (32-bit ARM always runs them).
     FLASHATTN_NO_CUDA         (undefined) do not pull in flashattn_cuda.cuh even
                               when compiled by nvcc.
     FLASHATTN_FP8_BLOCK_Q     (128) query rows per FP8 block descale;
     FLASHATTN_FP8_BLOCK_K     (128) key rows (K and V) per FP8 block descale.
                               A power of two in 16..256. They fix the
                               layout of the descale arrays (section 5), so
                               define them alike before EVERY include.
     GPU macros (FLASHATTN_BLOCK_M, FLASHATTN_BLOCK_N, FLASHATTN_WARPS,
     FLASHATTN_HEAD_DIMS, ...) are listed at the top of flashattn_cuda.cuh.
     Names that begin FA__ or fa__ are internal: not configuration.

   ============================================================================
   3. GLOSSARY
   ============================================================================
     d, dv     head_dim of Q/K, head_dim_v of V and O.
     N         sequence length: sq (queries), sk (keys).
     tile      a block of rows held on chip (CPU: in L1/L2 cache).
     Br, Bc    rows of a Q tile, rows of a K/V tile. Tr = ceil(sq/Br), Tc = ceil(sk/Bc).
     S         scores S = scale * Q K^T (then softcap, ALiBi, masks).
     P         probabilities P = softmax(S) by row.
     m         running row maximum of S seen so far.
     l         (ell) running row sum of exp(S - m).
     L         log-sum-exp of a row: L = m + log(l), natural log, fp32.
               O = exp(S - L) V, so L is all the backward pass needs to rebuild P.
     D         rowsum(dO * O), the backward pass's per-row correction term.
     split     a contiguous range of keys processed independently (split-KV);
               partial results are merged by their L.

   ============================================================================
   4. THE API IN CALL ORDER
   ============================================================================
     fa_problem p = {0}; fill the sizes and the features you want.
     fa_problem_resolve(&p, &r)      optional: see every default filled in.
     fa_block_mask_from_bitmap(&p, bitmap, counts, indices, &nc, &ni)
                                     optional: block-sparse lists from a bitmap.
     fa_forward_workspace_size(&p, &bytes)   optional: scratch the call needs.
     fa_forward(&p, q, k, v, o, lse, ws, bytes)      O and L.
     fa_backward(&p, q, k, v, o, dout, lse, dq, dk, dv, ws, bytes)
     fa_decode(&p, q, k_cache, v_cache, k_new, v_new, o, lse, ws, bytes)
     fa_merge(splits, rows, dim, o_parts, lse_parts, o, lse)
     fa_quantize_descales(&qp, &count)   FP8: how many descales fa_quantize writes.
     fa_quantize(&qp, x, x_e4m3, descales)  f32/f16/bf16 -> e4m3 + descales.
     fa_status_string(s), fa_last_error()   what went wrong, naming the argument.
     fa_set_parallel_for(fn, user, workers) run the CPU path on your job system.
     fa_cpu_simd_path()              "avx512", "avx2", "neon" or "portable": the
                                     CPU loops this implementation was built with.
     GPU: the same calls with a _cuda suffix and a trailing `void *stream`.

   ============================================================================
   5. SEMANTICS
   ============================================================================
   Tensors are [batch, seq, heads, dim] with dim contiguous; strides are in
   elements, 0 = packed. With variable-length batches (cu_seqlens_q/k) the
   batch stride is unused and token t of sequence b is row cu_seqlens[b] + t.
   Query row i of a sequence with sq queries and sk keys sits at key position
   i' = i + sk - sq (bottom-right alignment, the KV-cache convention).
     causal:         key j visible when j <= i'.
     sliding window: key j visible when i' - window_left <= j <= i' + window_right.
                     A side of INT_MAX (or any value past seqlen_q + seqlen_k) has
                     no bound; fa_problem_resolve reports it as seqlen_q + seqlen_k.
     softcap c > 0:  s <- c * tanh(s / c), applied to scale * q.k.
     ALiBi:          s <- s - slope[h] * |i' - j|, after softcap.
     dropout p:      P_ij is kept with probability 1 - p and scaled by 1/(1-p);
                     L is the log-sum-exp of the undropped scores. The mask is a
                     pure function of (seed, offset, batch, head, row, column):
                     see >>impl-philox; CPU and GPU agree bit for bit:
                     Philox-4x32-10 with counter
                       c = { j >> 2, i, b * heads_q + h, (uint32)offset }
                     and key
                       k = { (uint32)seed, (uint32)(seed >> 32) ^ (uint32)(offset >> 32) }
                     gives r[0..3]; element (b, h, i, j) (i, j counted within
                     its sequence) is kept when r[j & 3] >= floor(p * 2^32).
   A query row that sees no key gives O = 0 and L = -infinity, never NaN.
   L is fp32, [batch, heads_q, seqlen_q]; with variable-length batches it is
   [heads_q, total_q], total_q = cu_seqlens_q[batch].
   f16/bf16 tensors are read and written in that type; arithmetic is fp32.
   FP8: FA_E4M3 is e4m3fn: 1 sign, 4 exponent (bias 7) and 3 mantissa bits,
   largest 448, no infinity, NaN = 0x7f / 0xff. Q, K and V are all e4m3 or
   none is; O is f32, f16 or bf16 (fa_forward; fa_forward_cuda on compute
   capability 9.0, O f16 or bf16, no softcap / ALiBi / dropout, even head
   dims, key descale blocks a multiple of 128 keys). A stored value
   x^ means x^ * s, s its descale (fp32, finite, >= 0: a scale's size; the
   GPU folds s_q s_k into the softmax's multiplier, where a sign would turn
   the row's maximum into its minimum, so it does not check the entries of
   a device block array and a negative one gives undefined results):
       S = scale * (Q^ s_q)(K^ s_k)^T,   O = softmax(S) (V^ s_v)
   s is per tensor (descale_q/k/v, 0 = 1) or per block (descale_*_block; the
   tensor's per-tensor descale must then be 0): one fp32 per (batch, head,
   block of B rows), at [b][h][n / B] for the row at position n of its
   sequence, ceil(seqlen / B) blocks per (b, h); B = FLASHATTN_FP8_BLOCK_Q
   for Q (heads_q, seqlen_q), FLASHATTN_FP8_BLOCK_K for K and V (heads_kv,
   seqlen_k). With cu_seqlens the blocks restart at each sequence start
   (seqlen_* is then the maximum): no block mixes two sequences, so one
   sequence's outlier never coarsens another's, and a kernel tile that starts
   at a sequence start covers whole blocks. fa_quantize writes this layout;
   with its Hadamard option Q and K are rotated by one orthogonal M (same
   seed for both), which leaves Q K^T unchanged; V is never rotated. The CPU
   computes in fp32 from the decoded values; the GPU also rounds P (256 P,
   <= 256) to e4m3 for P V, as FlashAttention-3 does: its O differs from the
   CPU's by about 2% RMS (relative), its L by up to about 1e-3.
   Block masks (block_mask, block-sparse attention): row i and key j of
   sequence b, both counted within the sequence, fall in block (I, J) =
   (i / block_q, j / block_k). Query head h of sequence b reads mask
   m = mb * heads + h / (heads_q / heads), mb = b (0 when block_mask.batch
   is 1), and key j is visible to row i only when J is among the
   kv_num_blocks[m][I] entries of kv_indices[m][I][..] or the
   full_kv_num_blocks[m][I] of full_kv_indices[m][I][..] AND causal, the
   window and the lengths let it through: the dense mask
   visited(I, J) & visible(i, j). Softcap, ALiBi and dropout are unchanged.
   q_blocks = ceil(seqlen_q / block_q), k_blocks = ceil(seqlen_k / block_k)
   (the maxima: with cu_seqlens the blocks restart at each sequence start,
   as the FP8 block descales do; blocks past a sequence's end see nothing).
   Each count is in [0, k_blocks], each index in [0, k_blocks), no block
   twice in a row (over both lists). A full block is one that causal and
   the window cut nowhere inside the lengths of every sequence that reads
   it: a kernel may skip their element mask there; the CPU checks it. A
   query block with no block sees no key: O = 0, L = -inf, dQ = 0. The
   result depends only on the set of visited blocks, not on the order
   of the lists or the split between them. The CPU forward and backward
   take them, and fa_forward_cuda and fa_backward_cuda at 128 x 128
   blocks (block_q = block_k = 128), with a workspace of their
   _workspace_size bytes (the lists sorted, and for the backward a bitmap
   of them); there out-of-range entries and repeats in the device lists
   are ignored, not reported, and both lists are treated alike (the
   kernels find their own element masks). Decode and the FP8 forward
   refuse them with FA_ERROR_UNSUPPORTED.
   fa_block_mask_from_bitmap builds the lists.
   The same inputs give bit-identical outputs run to run, on any thread count.
   Empty sequences: batch, seqlen_q and seqlen_k (maxima; for decode the
   cache capacity) must be >= 1, but one sequence may be empty: a length of
   0 in cu_seqlens_q/k, or seqlens_k[b] = 0. Its query rows (no key in use,
   or every key masked) give O = 0, L = -inf and dQ = 0; keys that no query
   sees get dK = dV = 0; a sequence with no queries has no O or L rows.
   Dtypes: on the CPU each view carries its own dtype, any mix of f32, f16
   and bf16 in one call. On the GPU all views of a call share one dtype, f16
   or bf16; a mix is refused.
   Scale: any finite value, 0 = 1/sqrt(head_dim); with a softcap, |scale| /
   softcap must be at least FLT_MIN (the CPU folds it into Q). The backward
   applies the scale once to the finished sums, so a tiny scale does not
   underflow dK.
   Memory the host reads. The CPU calls read every pointer on the host. The
   _cuda calls and their workspace queries read on the host only the structs
   (fa_problem, fa_tensor) and never what a pointer in them points to:
   alibi_slopes, cu_seqlens_q/k, seqlens_k, block_table, the tensors, lse
   and the workspace are device memory there, and their contents are not
   checked (section 6). fa_problem_resolve and the CPU workspace queries do
   read and check alibi_slopes, cu_seqlens_q/k, seqlens_k, block_table and
   the block_mask lists: for a problem whose arrays are on the device ask
   the _cuda query.
   Aliasing: an output (o, lse, dq, dk, dv, decode's o and lse) must share no
   element with an input or another output; views that interleave without
   sharing elements are fine (q, k, v, or dq, dk, dv, as slices of one packed
   qkv tensor). Only fa_merge checks this: it works in place with o ==
   o_parts (split 0's slot) and lse == lse_parts and refuses any other
   overlap. fa_decode writes k_cache / v_cache (the appended rows), so
   k_new / v_new must not overlap them.
   A call that fails writes nothing: every check runs before the first write.

   ============================================================================
   6. WHAT IT DOES NOT DO
   ============================================================================
   - It does not hold or cache anything between calls, start threads of its own
     (outside OpenMP), or allocate when you pass a workspace.
   - No FP8 (e4m3) in any backward or decode: FA_ERROR_UNSUPPORTED. The GPU
     FP8 forward runs on compute capability 9.0 in a build for sm_90a without
     FLASHATTN_NO_FP8 / FLASHATTN_NO_HOPPER; elsewhere it is refused the same
     way (the CPU fa_forward takes e4m3 everywhere).
   - No arbitrary additive masks; masks are causal / window / ALiBi and
     block masks (block-sparse), the last in the CPU and GPU forward and
     backward, not in decode or the FP8 forward.
   - On the GPU it cannot check the contents of device arrays (cu_seqlens,
     block tables, cache lengths) without synchronizing, so it does not.

   ============================================================================
   7. PERFORMANCE AND ACCURACY
   ============================================================================
   README.md, "Performance": one current table per area (GPU forward,
   backward and decode, CPU), each beside PyTorch SDPA or the machine's
   measured peak in the same run, with its device, date and result file in
   bench/results/ (whose LOG.md is the history of every run). Accuracy: the
   tests compare every path with an fp64 reference at per-dtype tolerances
   (tests/); the headers hold no measurements that could go stale.

   ============================================================================
   8. REFERENCES (cited by name in the comments)
   ============================================================================
     online softmax   M. Milakov, N. Gimelshein, "Online normalizer
                      calculation for softmax", 2018: the running max m and
                      sum l, rescaled by exp(m_old - m_new).
     FlashAttention   T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Re,
                      "FlashAttention: Fast and Memory-Efficient Exact
                      Attention with IO-Awareness", 2022 (Alg. 1 forward,
                      Alg. 2 with dropout, Alg. 4 backward by recomputation;
                      its appendix derives the softmax gradient; Sec. 3.3,
                      Alg. 5 and Prop. 4: block-sparse FlashAttention).
     FlashAttention-2 T. Dao, "FlashAttention-2: Faster Attention with Better
                      Parallelism and Work Partitioning", 2023: the Q tile in
                      the outer loop, the unscaled O~ with one final rescale,
                      L as the saved statistic, Q split across warps.
     FlashAttention-3 J. Shah, G. Bikshandi, Y. Zhang, V. Thakkar, P. Ramani,
                      T. Dao, "FlashAttention-3: Fast and Accurate Attention
                      with Asynchrony and Low-precision", 2024: TMA, wgmma,
                      warp specialization, pingpong (flashattn_cuda.cuh).
     Flash-Decoding   T. Dao, D. Haziza, F. Massa, G. Sizov, "Flash-Decoding
                      for long-context inference", 2023: split-KV and the
                      log-sum-exp combine.
     FlexAttention    J. Dong, B. Feng, D. Guessous, Y. Liang, H. He, "Flex
                      Attention: A Programming Model for Generating
                      Optimized Attention Kernels", 2024: the BlockMask
                      (kv_num_blocks, kv_indices, full blocks) that
                      fa_block_mask follows.
*/

#ifndef FLASHATTN_H
#define FLASHATTN_H

/* ============================================================================
   >>api  public declarations
   ============================================================================ */

#include <stddef.h>
#include <stdint.h>

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0
#define FLASHATTN_VERSION_STRING "0.1.0"

#ifndef FLASHATTN_DEF
#ifdef FLASHATTN_STATIC
#if defined(__GNUC__) || defined(__clang__)
/* unused: a file that calls only some functions (or has no GPU half) must
   not warn about the rest */
#define FLASHATTN_DEF static __attribute__((unused))
#else
#define FLASHATTN_DEF static
#endif
#else
#define FLASHATTN_DEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes, generated from one list so each has its string. */
#define FLASHATTN_STATUS_LIST(X)                                              \
    X(FA_OK, 0, "ok")                                                         \
    X(FA_ERROR_INVALID_ARGUMENT, -1, "invalid argument")                      \
    X(FA_ERROR_UNSUPPORTED, -2, "valid, but not supported by this build or device") \
    X(FA_ERROR_OUT_OF_MEMORY, -3, "out of memory")                            \
    X(FA_ERROR_CUDA, -4, "CUDA error")

typedef enum fa_status {
#define FLASHATTN_X_ENUM(name, value, text) name = value,
    FLASHATTN_STATUS_LIST(FLASHATTN_X_ENUM)
#undef FLASHATTN_X_ENUM
    FA_STATUS_END_ = 1
} fa_status;

typedef enum fa_dtype {
    FA_F32 = 0,  /* IEEE binary32 */
    FA_F16 = 1,  /* IEEE binary16 */
    FA_BF16 = 2, /* bfloat16 (top half of a binary32) */
    FA_E4M3 = 3  /* fp8 e4m3fn (section 5, FP8): Q, K, V of fa_forward */
} fa_dtype;

/* A view of a [batch, seq, heads, dim] tensor. dim is contiguous. Strides are
   in elements; 0 means packed: head_stride = dim, seq_stride = heads * dim,
   batch_stride = seq * seq_stride. An optional argument is absent when its
   data is NULL. */
typedef struct fa_tensor {
    void *data;
    fa_dtype dtype;
    int64_t batch_stride;
    int64_t seq_stride;
    int64_t head_stride;
} fa_tensor;

/* Block-sparse attention (section 5, "Block masks"), in the shape of
   FlexAttention's BlockMask: for each query block, the key blocks it
   visits. In use when kv_num_blocks or full_kv_num_blocks is set. The
   arrays are int32, [masks][q_blocks] counts and [masks][q_blocks][k_blocks]
   indices, masks = batch x heads (below, resolved), q_blocks =
   ceil(seqlen_q / block_q), k_blocks = ceil(seqlen_k / block_k). */
typedef struct fa_block_mask {
    int block_q;   /* query rows per block, 0 = 128. The CPU takes any >= 1;
                      the GPU forward and backward 128 (their tile) */
    int block_k;   /* key rows per block, 0 = 128; likewise */
    int batch;     /* masks along the batch: 0 = one per sequence (batch),
                      1 = one for every sequence */
    int heads;     /* masks along the heads: 0 = one per query head
                      (heads_q); else a divisor of heads_q: query head h
                      takes mask h / (heads_q / heads) (1 = one for all,
                      heads_kv = one per KV head) */
    const int32_t *kv_num_blocks; /* [masks][q_blocks], each 0..k_blocks */
    const int32_t *kv_indices;    /* [masks][q_blocks][k_blocks]: the first
                                     kv_num_blocks of each row, any order */
    /* Optional, same layout: more visited blocks that the causal and
       window masks cut nowhere (no element mask needed). NULL = none. */
    const int32_t *full_kv_num_blocks;
    const int32_t *full_kv_indices;
} fa_block_mask;

/* Everything about one attention call except the data. Zero-initialize it:
   every zero field means the default written beside it. */
typedef struct fa_problem {
    int batch;      /* number of sequences (required, >= 1) */
    int seqlen_q;   /* queries per sequence (>= 1); with cu_seqlens_q, the maximum */
    int seqlen_k;   /* keys per sequence (>= 1); with cu_seqlens_k, the maximum;
                       for decode, the cache capacity per sequence. An empty
                       sequence: see "Empty sequences" in section 5. */
    int heads_q;    /* query heads (required) */
    int heads_kv;   /* key/value heads; 0 = heads_q. heads_q % heads_kv == 0
                       (GQA; 1 = MQA). Query head h reads KV head h / (heads_q/heads_kv). */
    int head_dim;   /* d of Q and K, 1..256 */
    int head_dim_v; /* d of V and O; 0 = head_dim */
    float scale;    /* 0 = 1/sqrt(head_dim). Must be finite (section 5). */

    int causal;         /* nonzero: causal, bottom-right aligned */
    int sliding_window; /* nonzero: use window_left / window_right */
    int window_left;    /* keys visible to the left of i' (>= 0; INT_MAX or any */
    int window_right;   /* value past seqlen_q + seqlen_k: no bound that side) */
    float softcap;      /* 0 = off; else s <- softcap * tanh(s / softcap) */
    const float *alibi_slopes; /* [heads_q] or NULL (device memory for _cuda) */

    /* Variable-length batches: [batch + 1] non-decreasing offsets, first 0.
       NULL = every sequence has seqlen_q / seqlen_k rows. */
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k;
    /* Keys in use per sequence [batch] (KV caches, padded batches); NULL =
       seqlen_k. For decode: the cache length BEFORE the new tokens. */
    const int32_t *seqlens_k;

    /* Paged KV cache (decode only; forward and backward refuse it): K/V
       views index a pool of pages [num_pages, page_size, heads_kv, dim]
       (batch_stride = page stride);
       token n of sequence b is at page block_table[b * pages_per_seq + n / page_size],
       row n % page_size. NULL = contiguous cache. */
    const int32_t *block_table;
    int page_size;      /* tokens per page, >= 1 */
    int pages_per_seq;  /* row length of block_table */
    int num_pages;      /* pages in the pool (range check) */

    float dropout_p;    /* in [0, 1); 0 = off */
    uint64_t dropout_seed;
    uint64_t dropout_offset;

    int num_splits;     /* decode split-KV count; 0 = choose */
    int deterministic;  /* backward: bit-identical run to run (GPU: on the same GPU, whose
                           kernel and SM count fix the order of dQ's sums); CPU always is */

    float descale_q, descale_k, descale_v; /* FP8 only; 0 = 1 */
    /* FP8 only: per-block descales [batch][heads][blocks] (section 5, FP8;
       device memory for _cuda), NULL = per tensor. */
    const float *descale_q_block, *descale_k_block, *descale_v_block;

    fa_block_mask block_mask; /* block-sparse attention; all zero = none */
} fa_problem;

/* Status text, and the message of the last failed call on this thread
   (it names the offending argument). Never NULL. */
FLASHATTN_DEF const char *fa_status_string(fa_status s);
FLASHATTN_DEF const char *fa_last_error(void);

/* The CPU loops compiled into the implementation: "avx512", "avx2", "neon"
   or "portable" (no SIMD flags, FLASHATTN_NO_SIMD, or 32-bit ARM). */
FLASHATTN_DEF const char *fa_cpu_simd_path(void);

/* Validate p (without tensors) and fill every defaulted field. */
FLASHATTN_DEF fa_status fa_problem_resolve(const fa_problem *p, fa_problem *resolved);

/* A block mask's lists from a dense block bitmap [masks][q_blocks][k_blocks]
   (one byte per block, nonzero = visited), for the shape p gives (seqlen_q,
   seqlen_k, batch, heads_q and block_mask's block_q, block_k, batch, heads;
   its lists are not read). Writes kv_num_blocks [masks][q_blocks] and
   kv_indices [masks][q_blocks][k_blocks], each row ascending with the rest
   of the row 0. num_counts and num_indices (either may be NULL) get the
   element counts of the two arrays, masks x q_blocks and that x k_blocks;
   with bitmap, kv_num_blocks and kv_indices all NULL that is all it does.
   For full_kv_*: call it again with the bitmap of the full blocks. */
FLASHATTN_DEF fa_status fa_block_mask_from_bitmap(const fa_problem *p, const uint8_t *bitmap,
                                                  int32_t *kv_num_blocks, int32_t *kv_indices,
                                                  int64_t *num_counts, int64_t *num_indices);

/* CPU threads: fn(user, n, task, ctx) must call task(ctx, i, worker) once for
   every i in [0, n), from any threads, with worker in [0, workers) and no two
   concurrent calls sharing a worker index; it returns when all are done.
   Pass fn = NULL to go back to OpenMP (if compiled with it) or one thread.
   Threads: the setting is process-wide; the last error is per thread. Every
   call (and fa_*_workspace_size) copies the setting once at entry, so it may
   change from any thread while calls run: those keep the copy they took (fn
   and user must stay usable until they return), later calls take the new
   one. A workspace sized under an older setting with fewer workers is too
   small: the call fails with FA_ERROR_INVALID_ARGUMENT, writing nothing. */
typedef void (*fa_task_fn)(void *ctx, int index, int worker);
typedef void (*fa_parallel_for_fn)(void *user, int n, fa_task_fn task, void *ctx);
FLASHATTN_DEF void fa_set_parallel_for(fa_parallel_for_fn fn, void *user, int workers);

/* ---- CPU ---------------------------------------------------------------- */
/* Bytes of scratch each call needs; pass at least that much as workspace, or
   NULL to let the call allocate with FLASHATTN_MALLOC. */
FLASHATTN_DEF fa_status fa_forward_workspace_size(const fa_problem *p, size_t *bytes);
FLASHATTN_DEF fa_status fa_backward_workspace_size(const fa_problem *p, size_t *bytes);
FLASHATTN_DEF fa_status fa_decode_workspace_size(const fa_problem *p, size_t *bytes);

/* q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv] -> o [b, sq, hq, dv],
   lse (optional) [b, hq, sq]. */
FLASHATTN_DEF fa_status fa_forward(const fa_problem *p, fa_tensor q, fa_tensor k,
                                   fa_tensor v, fa_tensor o, float *lse,
                                   void *workspace, size_t workspace_size);

/* dO and the forward's o and lse in; dq, dk, dv out (shapes of q, k, v). */
FLASHATTN_DEF fa_status fa_backward(const fa_problem *p, fa_tensor q, fa_tensor k,
                                    fa_tensor v, fa_tensor o, fa_tensor dout,
                                    const float *lse, fa_tensor dq, fa_tensor dk,
                                    fa_tensor dv, void *workspace, size_t workspace_size);

/* q [b, sq, hq, d] (sq new tokens per sequence) against a KV cache of capacity
   seqlen_k (contiguous) or paged; seqlens_k[b] tokens are in use. If k_new /
   v_new [b, sq, hkv, d] are given they are first written at positions
   seqlens_k[b] .. seqlens_k[b] + sq - 1, and attention covers those too.
   Splits the keys into num_splits ranges merged by log-sum-exp. */
FLASHATTN_DEF fa_status fa_decode(const fa_problem *p, fa_tensor q, fa_tensor k_cache,
                                  fa_tensor v_cache, fa_tensor k_new, fa_tensor v_new,
                                  fa_tensor o, float *lse, void *workspace,
                                  size_t workspace_size);

/* Merge num_splits partial results of the same rows, each normalized within
   its split: o_parts [num_splits, rows, dim], lse_parts [num_splits, rows]
   -> o [rows, dim], lse [rows] (may be NULL). A split with lse = -inf has no
   weight; rows with no weight anywhere give o = 0, lse = -inf. In place:
   o == o_parts and lse == lse_parts; any other overlap is refused. */
FLASHATTN_DEF fa_status fa_merge(int num_splits, int64_t rows, int dim,
                                 const float *o_parts, const float *lse_parts,
                                 float *o, float *lse);

/* ---- FP8 quantization (>>impl-fp8) ---------------------------------------
   x [batch, seqlen, heads, head_dim] (f32, f16 or bf16; f16 or bf16 for
   _cuda) -> out (same shape, FA_E4M3) and its descales, laid out as the
   forward reads them (section 5, FP8). Per block of B rows (per tensor with
   per_tensor): s = amax / 448 over the block's (rotated) values and each
   value y becomes e4m3(y * (448 / amax)), rounded to nearest even and
   saturated to +-448; a block with amax below 2^-64 (all zero, in practice)
   gets s = 1 and e4m3(y). Blocks past a sequence's end get s = 1. With
   hadamard, every row is first multiplied by M = H diag(sign) / sqrt(d): H
   the Sylvester Hadamard matrix, sign[j] = +-1 from seed, applied in
   O(d log d); head_dim must be a power of two. M is orthogonal, so
   (Q M)(K M)^T = Q K^T when Q and K share the seed; it spreads an outlier
   over the whole row (FlashAttention-3, "incoherent processing"). V is never
   rotated (role FA_QUANT_V refuses it): P V needs V itself. */
#ifndef FLASHATTN_FP8_BLOCK_Q
#define FLASHATTN_FP8_BLOCK_Q 128
#endif
#ifndef FLASHATTN_FP8_BLOCK_K
#define FLASHATTN_FP8_BLOCK_K 128
#endif
typedef enum fa_quant_role {
    FA_QUANT_Q = 0, /* blocks of FLASHATTN_FP8_BLOCK_Q rows */
    FA_QUANT_K = 1, /* blocks of FLASHATTN_FP8_BLOCK_K rows */
    FA_QUANT_V = 2  /* blocks of FLASHATTN_FP8_BLOCK_K rows, never rotated */
} fa_quant_role;

typedef struct fa_quant {
    fa_quant_role role;
    int batch;      /* sequences (>= 1) */
    int seqlen;     /* rows per sequence; with cu_seqlens, the maximum */
    int heads;      /* >= 1 */
    int head_dim;   /* 1..256 */
    /* [batch + 1] offsets as cu_seqlens_q / _k (device memory for _cuda),
       NULL = every sequence has seqlen rows */
    const int32_t *cu_seqlens;
    int per_tensor; /* nonzero: one descale for the whole tensor */
    int hadamard;   /* nonzero: rotate by M first (Q and K; power-of-two head_dim) */
    uint64_t seed;  /* signs of M; give Q and K the same */
} fa_quant;

/* Descales fa_quantize writes: 1 per tensor, else batch * heads * blocks. */
FLASHATTN_DEF fa_status fa_quantize_descales(const fa_quant *p, int64_t *count);
FLASHATTN_DEF fa_status fa_quantize(const fa_quant *p, fa_tensor x, fa_tensor out, float *descale);

/* ---- GPU (defined when the implementation file is compiled by nvcc) --------
   Same arguments as the CPU calls, all pointers in device memory (the host
   never reads through them, section 5), plus the CUDA stream as void*
   (NULL = default stream). Stream-ordered: no host
   synchronization; a workspace not given is allocated stream-ordered.
   A workspace size holds for the problem and device it was asked for: ask
   with the same fa_problem the call gets (for decode, block_table set or
   not changes the split plan) with the call's device current. Block
   masks: fa_forward_cuda and fa_backward_cuda (section 5).
   Under FLASHATTN_STATIC they exist only in a file compiled by nvcc, so
   only such a file declares them. */
#if !defined(FLASHATTN_STATIC) || (defined(__CUDACC__) && !defined(FLASHATTN_NO_CUDA))
FLASHATTN_DEF fa_status fa_forward_cuda_workspace_size(const fa_problem *p, size_t *bytes);
FLASHATTN_DEF fa_status fa_forward_cuda(const fa_problem *p, fa_tensor q, fa_tensor k,
                                        fa_tensor v, fa_tensor o, float *lse,
                                        void *workspace, size_t workspace_size,
                                        void *stream);
FLASHATTN_DEF fa_status fa_backward_cuda_workspace_size(const fa_problem *p, size_t *bytes);
FLASHATTN_DEF fa_status fa_backward_cuda(const fa_problem *p, fa_tensor q, fa_tensor k,
                                         fa_tensor v, fa_tensor o, fa_tensor dout,
                                         const float *lse, fa_tensor dq, fa_tensor dk,
                                         fa_tensor dv, void *workspace, size_t workspace_size,
                                         void *stream);
FLASHATTN_DEF fa_status fa_decode_cuda_workspace_size(const fa_problem *p, size_t *bytes);
FLASHATTN_DEF fa_status fa_decode_cuda(const fa_problem *p, fa_tensor q, fa_tensor k_cache,
                                       fa_tensor v_cache, fa_tensor k_new, fa_tensor v_new,
                                       fa_tensor o, float *lse, void *workspace,
                                       size_t workspace_size, void *stream);
/* fa_quantize on the GPU (x f16 or bf16), bit-identical to it. */
FLASHATTN_DEF fa_status fa_quantize_cuda(const fa_quant *p, fa_tensor x, fa_tensor out, float *descale,
                                         void *stream);
#endif

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_H */

/* ============================================================================
   >>impl  implementation
   ============================================================================ */
#ifdef FLASHATTN_IMPLEMENTATION
#ifndef FLASHATTN_IMPLEMENTATION_DONE
#define FLASHATTN_IMPLEMENTATION_DONE

/* ############################################################################
   SKIP ON FIRST READ: from here to >>impl-softmax is plumbing (status codes
   and messages, allocation, the parallel-for, f16/bf16 conversion, Philox,
   argument validation). The course is >>impl-softmax (fa__row_max ..
   fa__softmax_finish), >>impl-forward's loop (fa__key_band ..
   fa__forward_task), >>impl-backward, >>impl-merge and >>impl-decode; the
   SIMD layer and the loads inside them are fenced the same way.
   ############################################################################ */

/* ============================================================================
   >>impl-util  status, errors, allocation, threads
   ============================================================================
   Everything below is private (prefix fa__) except the fa_* definitions of
   the public functions declared in >>api. */

#include <math.h>
#include <string.h>
#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <float.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Allocation: both or neither. Used only when the caller passes no workspace. */
#if defined(FLASHATTN_MALLOC) && !defined(FLASHATTN_FREE)
#error "flashattn.h: define both FLASHATTN_MALLOC and FLASHATTN_FREE, or neither"
#elif !defined(FLASHATTN_MALLOC) && defined(FLASHATTN_FREE)
#error "flashattn.h: define both FLASHATTN_MALLOC and FLASHATTN_FREE, or neither"
#elif !defined(FLASHATTN_MALLOC)
#include <stdlib.h>
#define FLASHATTN_MALLOC(n) malloc(n)
#define FLASHATTN_FREE(p) free(p)
#endif

#ifndef FLASHATTN_ASSERT
#include <assert.h>
#define FLASHATTN_ASSERT(x) assert(x)
#endif

#ifndef FLASHATTN_CPU_BR
#define FLASHATTN_CPU_BR 512
#endif
#ifndef FLASHATTN_CPU_BC
#define FLASHATTN_CPU_BC 128
#endif
#if FLASHATTN_CPU_BR < 1 || FLASHATTN_CPU_BC < 1 || FLASHATTN_CPU_BR > 1024 || FLASHATTN_CPU_BC > 1024
#error "flashattn.h: FLASHATTN_CPU_BR and FLASHATTN_CPU_BC must be in 1..1024"
#endif

/* The hand-vectorized x86 path (AVX2 + FMA, F16C when present). Everything
   it does also exists as portable C below it, which is the reference.
   Under nvcc only the device passes (__CUDA_ARCH__) leave it out: the host
   pass keeps it when the host compiler targets AVX2 (-Xcompiler -march=native). */
#if defined(__AVX2__) && defined(__FMA__) && !defined(FLASHATTN_NO_SIMD) && !defined(__CUDA_ARCH__)
#define FLASHATTN__AVX2 1
#include <immintrin.h>
#else
#define FLASHATTN__AVX2 0
#endif
/* AVX-512F on top of it: the matrix products and the softmax run 16 wide
   (on CPUs that execute 512-bit FMAs at full rate, twice the AVX2 peak). */
#if FLASHATTN__AVX2 && defined(__AVX512F__)
#define FLASHATTN__AVX512 1
#else
#define FLASHATTN__AVX512 0
#endif
/* The AArch64 NEON path (4 lanes). Everything it needs (FMA, round to
   nearest, the across-lanes sum and max, f16 -> f32) is in base AArch64, so
   no -march flag is needed. 32-bit ARM keeps the portable loops: its NEON
   has no rounding instruction and its FMA is optional (VFPv4). */
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(FLASHATTN_NO_SIMD) && !defined(__CUDA_ARCH__)
#define FLASHATTN__NEON 1
#include <arm_neon.h>
#else
#define FLASHATTN__NEON 0
#endif

#if defined(_MSC_VER)
#define FLASHATTN__TLS __declspec(thread)
#define FLASHATTN__FORCEINLINE __forceinline
#define FLASHATTN__RESTRICT __restrict
#elif defined(__GNUC__) || defined(__clang__)
#define FLASHATTN__TLS __thread
#define FLASHATTN__FORCEINLINE inline __attribute__((always_inline))
#define FLASHATTN__RESTRICT __restrict__
#else
#define FLASHATTN__TLS /* no thread-local storage known: one message for all threads */
#define FLASHATTN__FORCEINLINE inline
#define FLASHATTN__RESTRICT
#endif

#if defined(_MSC_VER) && !defined(__cplusplus)
#define FLASHATTN__INLINE __inline
#else
#define FLASHATTN__INLINE inline
#endif

#define FA__LOG2E 1.4426950408889634
#define FA__LN2 0.6931471805599453

FLASHATTN_DEF const char *fa_status_string(fa_status s)
{
    switch (s) {
#define FLASHATTN_X_CASE(name, value, text) \
    case name:                              \
        return text;
        FLASHATTN_STATUS_LIST(FLASHATTN_X_CASE)
#undef FLASHATTN_X_CASE
    default:
        break;
    }
    return "unknown fa_status";
}

/* The last failure message of this thread. Only failures write it. */
static FLASHATTN__TLS char fa__last_error_buf[256];

FLASHATTN_DEF const char *fa_last_error(void)
{
    return fa__last_error_buf[0] ? fa__last_error_buf : "no error";
}

FLASHATTN_DEF const char *fa_cpu_simd_path(void)
{
    return FLASHATTN__AVX512 ? "avx512" : FLASHATTN__AVX2 ? "avx2" : FLASHATTN__NEON ? "neon" : "portable";
}

/* Record why a call fails and return its status:
       return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: q.data is NULL", fn);
   Messages start with the public function's name and name the argument. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static fa_status fa__fail(fa_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fa__last_error_buf, sizeof fa__last_error_buf, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- threads ---------------------------------------------------------------
   The CPU work is a list of independent tasks (index 0..n-1). Each task is
   handed a worker index so it can use that worker's slice of the workspace
   without locks. Which worker runs which task never changes a result: every
   output element is computed by exactly one task, in a fixed order. */
typedef struct fa__pf {
    fa_parallel_for_fn fn; /* NULL: OpenMP or one thread */
    void *user;
    int workers;
} fa__pf;

/* The setting is process-wide; a call copies it ONCE, at entry, and uses the
   copy throughout (the workspace size and every parallel loop agree), so a
   change from another thread never tears a call. The copy and the change are
   made under a spin lock (a few stores). */
static fa__pf fa__pf_setting;
#if defined(__GNUC__) || defined(__clang__)
static int fa__pf_lock_word;
#define FA__PF_LOCK()                                                        \
    while (__atomic_exchange_n(&fa__pf_lock_word, 1, __ATOMIC_ACQUIRE)) \
        ;
#define FA__PF_UNLOCK() __atomic_store_n(&fa__pf_lock_word, 0, __ATOMIC_RELEASE)
#elif defined(_MSC_VER)
#include <intrin.h>
static volatile long fa__pf_lock_word;
#define FA__PF_LOCK()                                  \
    while (_InterlockedExchange(&fa__pf_lock_word, 1)) \
        ;
#define FA__PF_UNLOCK() _InterlockedExchange(&fa__pf_lock_word, 0)
#else /* no atomics known: change the setting only while no call runs */
#define FA__PF_LOCK()
#define FA__PF_UNLOCK()
#endif

FLASHATTN_DEF void fa_set_parallel_for(fa_parallel_for_fn fn, void *user, int workers)
{
    FA__PF_LOCK();
    fa__pf_setting.fn = fn;
    fa__pf_setting.user = user;
    fa__pf_setting.workers = fn ? (workers < 1 ? 1 : workers) : 0;
    FA__PF_UNLOCK();
}

/* This call's copy of the setting (see above); returns pf. */
static const fa__pf *fa__pf_get(fa__pf *pf)
{
    FA__PF_LOCK();
    *pf = fa__pf_setting;
    FA__PF_UNLOCK();
    return pf;
}

static int fa__num_workers(const fa__pf *pf)
{
    if (pf->fn)
        return pf->workers;
#ifdef _OPENMP
    {
        int n = omp_get_max_threads();
        return n < 1 ? 1 : n;
    }
#else
    return 1;
#endif
}

static void fa__parallel_for(const fa__pf *pf, int n, fa_task_fn task, void *ctx)
{
    int i;
    if (n <= 0)
        return;
    if (pf->fn) {
        pf->fn(pf->user, n, task, ctx);
        return;
    }
#ifdef _OPENMP
    {
        int nw = fa__num_workers(pf);
        if (nw > 1 && n > 1) {
            /* dynamic: tasks differ in cost (causal tiles); the order of the
               index list puts the heaviest first. */
#pragma omp parallel for num_threads(nw) schedule(dynamic, 1)
            for (i = 0; i < n; ++i)
                task(ctx, i, omp_get_thread_num());
            return;
        }
    }
#endif
    for (i = 0; i < n; ++i)
        task(ctx, i, 0);
}

/* ============================================================================
   >>impl-convert  f16 / bf16 <-> f32 conversion
   ============================================================================
   Software conversions, bit-exact, round-to-nearest-even, with NaN, infinity
   and subnormals handled. Pure C with no CUDA types: under nvcc they are
   __host__ __device__ so the GPU file calls the very same functions. */
#ifdef __CUDACC__
#define FLASHATTN_HD __host__ __device__
#else
#define FLASHATTN_HD
#endif

static FLASHATTN_HD FLASHATTN__INLINE uint32_t fa__f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

static FLASHATTN_HD FLASHATTN__INLINE float fa__bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
static FLASHATTN_HD FLASHATTN__INLINE float fa__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) /* inf / NaN: keep the payload */
        return fa__bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (m == 0)
            return fa__bits_f32(sign);
        /* subnormal m * 2^-24: shift the leading 1 up to bit 10 */
        e = 1;
        while (!(m & 0x400u)) {
            m <<= 1;
            --e;
        }
        m &= 0x3ffu;
    }
    /* rebias: exponent e - 15 + 127 = e + 112 */
    return fa__bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static FLASHATTN_HD FLASHATTN__INLINE uint16_t fa__f32_to_f16(float f)
{
    uint32_t x = fa__f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu, h, rem;
    if (ax >= 0x7f800000u) /* inf, or NaN made quiet with its top payload */
        return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : 0x7c00u));
    if (ax >= 0x47800000u) /* >= 65536: beyond even the rounding range */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a half subnormal, unit 2^-24 */
        uint32_t e = ax >> 23, mant = (ax & 0x7fffffu) | 0x800000u, shift, half;
        if (ax < 0x33000000u) /* below 2^-25: rounds to zero */
            return (uint16_t)sign;
        shift = 126u - e; /* value = mant * 2^(e-150) = (mant >> shift) * 2^-24 */
        h = mant >> shift;
        rem = mant & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u)))
            ++h; /* may carry into the smallest normal: still the right bits */
        return (uint16_t)(sign | h);
    }
    h = (ax - 0x38000000u) >> 13; /* rebias 127 -> 15, drop 13 mantissa bits */
    rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        ++h; /* a carry out of the mantissa bumps the exponent, up to inf */
    return (uint16_t)(sign | h);
}

/* bfloat16 is the top half of a binary32. */
static FLASHATTN_HD FLASHATTN__INLINE float fa__bf16_to_f32(uint16_t b)
{
    return fa__bits_f32((uint32_t)b << 16);
}

static FLASHATTN_HD FLASHATTN__INLINE uint16_t fa__f32_to_bf16(float f)
{
    uint32_t x = fa__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, keep it quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u); /* round half to even on bit 16 */
    return (uint16_t)(x >> 16);
}

/* e4m3fn (FP8): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity,
   0x7f / 0xff are NaN, 0x7e = 448 is the largest. Every code is exact in f32. */
static FLASHATTN_HD FLASHATTN__INLINE float fa__e4m3_to_f32(uint8_t c)
{
    uint32_t sign = (uint32_t)(c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 7u;
    if ((c & 0x7fu) == 0x7fu)
        return fa__bits_f32(sign | 0x7fc00000u);
    if (e == 0) /* subnormal m * 2^-9 (exact), or zero */
        return fa__bits_f32(sign | fa__f32_bits((float)m * 0.001953125f));
    return fa__bits_f32(sign | ((e + 120u) << 23) | (m << 20)); /* rebias 7 -> 127 */
}

/* m >> shift (1..31), rounded to nearest, ties to even. */
static FLASHATTN_HD FLASHATTN__INLINE uint32_t fa__shift_rne(uint32_t m, uint32_t shift)
{
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return h + (rem > half || (rem == half && (h & 1u)));
}

/* Round to nearest even, saturating: anything beyond 448 (infinity too)
   becomes +-448 (as the hardware's cvt.rn.satfinite); NaN becomes 0x7f. */
static FLASHATTN_HD FLASHATTN__INLINE uint8_t fa__f32_to_e4m3(float f)
{
    uint32_t x = fa__f32_bits(f), ax = x & 0x7fffffffu;
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    if (ax > 0x7f800000u)
        return 0x7fu;
    if (ax >= 0x43e00000u) /* >= 448 */
        return (uint8_t)(sign | 0x7eu);
    if (ax <= 0x3a800000u) /* at most 2^-10, half the smallest subnormal: to (even) zero */
        return sign;
    if (ax < 0x3c800000u) /* below 2^-6: a subnormal, (mant * 2^(e-150)) / 2^-9 = mant >> (141 - e);
                             a carry into the smallest normal gives the right bits */
        return (uint8_t)(sign | fa__shift_rne((ax & 0x7fffffu) | 0x800000u, 141u - (ax >> 23)));
    /* rebias 127 -> 7 and drop 20 mantissa bits; a carry bumps the exponent,
       and below 448 it stops at 0x7e */
    return (uint8_t)(sign | fa__shift_rne(ax - 0x3c000000u, 20u));
}

/* ============================================================================
   >>impl-philox  dropout random numbers
   ============================================================================
   Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
   3", SC 2011): a counter-based generator, so the keep/drop decision for
   element (b, h, i, j) is a pure function of its coordinates. The forward,
   the backward (which must drop the same elements) and the GPU kernels all
   call these functions. */
static FLASHATTN_HD FLASHATTN__INLINE void fa__philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2,
                                                            uint32_t c3, uint32_t k0, uint32_t k1,
                                                            uint32_t out[4])
{
    int round;
    for (round = 0; round < 10; ++round) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u; /* the Weyl key schedule */
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Keep an element when its 32-bit random number is >= floor(p * 2^32):
   probability 1 - p (to within 2^-32). */
static FLASHATTN_HD FLASHATTN__INLINE uint32_t fa__dropout_threshold(float p)
{
    double t;
    if (!(p > 0.0f))
        return 0u;
    t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
}

/* The four random words shared by columns 4*(j>>2) .. 4*(j>>2)+3 of row i. */
static FLASHATTN_HD FLASHATTN__INLINE void fa__dropout_bits(uint64_t seed, uint64_t offset, int b, int h,
                                                           int heads_q, int i, int j, uint32_t r[4])
{
    fa__philox4x32_10((uint32_t)j >> 2, (uint32_t)i, (uint32_t)b * (uint32_t)heads_q + (uint32_t)h,
                      (uint32_t)offset, (uint32_t)seed,
                      (uint32_t)(seed >> 32) ^ (uint32_t)(offset >> 32), r);
}

/* Element (b, h, i, j), i and j counted within the sequence: kept? */
static FLASHATTN_HD FLASHATTN__INLINE int fa__dropout_keep(uint64_t seed, uint64_t offset, int b, int h,
                                                          int heads_q, int i, int j, uint32_t threshold)
{
    uint32_t r[4];
    fa__dropout_bits(seed, offset, b, h, heads_q, i, j, r);
    return r[j & 3] >= threshold;
}

/* ============================================================================
   >>impl-check  argument validation
   ============================================================================
   Shared by the CPU and GPU entry points. Every check runs before anything is
   written, so a failing call leaves every output untouched. host_arrays = 1
   means cu_seqlens_q/k, seqlens_k, block_table and alibi_slopes are host
   memory and their contents are checked too; 0 means device memory, which
   is never read here. */

static int fa__mul64(int64_t a, int64_t b, int64_t *out) /* a, b >= 0 */
{
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static int fa__add64(int64_t a, int64_t b, int64_t *out) /* a, b >= 0 */
{
    if (b > INT64_MAX - a)
        return 0;
    *out = a + b;
    return 1;
}

static int fa__dtype_size(fa_dtype t)
{
    return t == FA_F32 ? 4 : t == FA_E4M3 ? 1 : 2;
}

static const char *fa__dtype_name(fa_dtype t)
{
    switch (t) {
    case FA_F32: return "FA_F32";
    case FA_F16: return "FA_F16";
    case FA_BF16: return "FA_BF16";
    case FA_E4M3: return "FA_E4M3";
    }
    return "?";
}

static int fa__isfinite(float x)
{
    return x == x && x - x == 0.0f;
}
/* An FP8 descale (section 5): finite and >= 0 */
static int fa__descale_ok(float s) { return fa__isfinite(s) && s >= 0.0f; }

/* Tokens in use in sequence b's cache (forward: keys of sequence b). */
static int64_t fa__cache_len(const fa_problem *r, int b)
{
    if (r->seqlens_k)
        return r->seqlens_k[b];
    if (r->cu_seqlens_k)
        return (int64_t)r->cu_seqlens_k[b + 1] - r->cu_seqlens_k[b];
    return r->seqlen_k;
}

/* Block-table entries that cover tokens [0, len_b + extra) of each sequence
   must name a page of the pool. */
static fa_status fa__check_pages(const char *fn, const fa_problem *r, int extra)
{
    int b;
    for (b = 0; b < r->batch; ++b) {
        int64_t n = fa__cache_len(r, b) + extra, pages = (n + r->page_size - 1) / r->page_size, t;
        for (t = 0; t < pages; ++t) {
            int32_t pg = r->block_table[(int64_t)b * r->pages_per_seq + t];
            if (pg < 0 || pg >= r->num_pages)
                return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                                "%s: block_table[%d * pages_per_seq + %lld] = %d is not a page "
                                "index in [0, num_pages = %d)",
                                fn, b, (long long)t, (int)pg, r->num_pages);
        }
    }
    return FA_OK;
}

/* Offsets [batch + 1]: start at 0, never decrease, each length <= max. */
static fa_status fa__check_cu(const char *fn, const char *name, const int32_t *cu, int batch,
                              int maxlen, const char *maxname)
{
    int b;
    if (cu[0] != 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s[0] = %d, must be 0", fn, name, (int)cu[0]);
    for (b = 0; b < batch; ++b) {
        int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len < 0)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s decreases: [%d] = %d > [%d] = %d", fn,
                            name, b, (int)cu[b], b + 1, (int)cu[b + 1]);
        if (len > maxlen)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: %s[%d + 1] - %s[%d] = %lld exceeds %s (%d)", fn, name, b, name, b,
                            (long long)len, maxname, maxlen);
    }
    return FA_OK;
}

/* ---- block masks (section 5, "Block masks") ------------------------------- */

static int fa__has_block_mask(const fa_problem *p)
{
    const fa_block_mask *m = &p->block_mask;
    return m->kv_num_blocks || m->kv_indices || m->full_kv_num_blocks || m->full_kv_indices;
}

static int fa__blocks(int len, int block) /* ceil(len / block), len >= 0, block >= 1 */
{
    return (int)(((int64_t)len + block - 1) / block);
}

/* block_mask's sizes, defaults filled in (x: batch, heads_q and the lengths
   already checked). The lists are not looked at. */
static fa_status fa__resolve_block_shape(const char *fn, fa_problem *x)
{
    fa_block_mask *m = &x->block_mask;
    int64_t n;
    if (m->block_q < 0 || m->block_k < 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.%s (%d) must be >= 1 (0 = 128)", fn,
                        m->block_q < 0 ? "block_q" : "block_k", m->block_q < 0 ? m->block_q : m->block_k);
    if (m->block_q == 0) m->block_q = 128;
    if (m->block_k == 0) m->block_k = 128;
    if (m->batch == 0) m->batch = x->batch;
    if (m->heads == 0) m->heads = x->heads_q;
    if (m->batch != 1 && m->batch != x->batch)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.batch (%d) must be 0, 1 or batch (%d)", fn,
                        m->batch, x->batch);
    if (m->heads < 1 || x->heads_q % m->heads != 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.heads (%d) must be 0 or a divisor of heads_q (%d)",
                        fn, m->heads, x->heads_q);
    if (!fa__mul64((int64_t)m->batch * m->heads, fa__blocks(x->seqlen_q, m->block_q), &n) ||
        !fa__mul64(n, fa__blocks(x->seqlen_k, m->block_k), &n) || n > INT64_MAX / 8)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask: masks x q_blocks x k_blocks overflows int64", fn);
    return FA_OK;
}

/* Counts in [0, k_blocks], indices in [0, k_blocks), no key block twice in
   a row over both lists. Repeats are found with a bitmap of FA__BM_WINDOW
   key blocks on the stack, one window of them at a time. */
#define FA__BM_WINDOW 4096
static fa_status fa__check_block_lists(const char *fn, const fa_problem *r)
{
    const fa_block_mask *m = &r->block_mask;
    const int32_t *cnt[2], *idx[2];
    const char *name[2] = {"kv", "full_kv"};
    int kb = fa__blocks(r->seqlen_k, m->block_k), qb = fa__blocks(r->seqlen_q, m->block_q), l, w0;
    int64_t row, rows = (int64_t)m->batch * m->heads * qb, t;
    uint32_t seen[FA__BM_WINDOW / 32];
    cnt[0] = m->kv_num_blocks; idx[0] = m->kv_indices;
    cnt[1] = m->full_kv_num_blocks; idx[1] = m->full_kv_indices;
    for (row = 0; row < rows; ++row) {
        for (l = 0; l < 2; ++l) {
            if (!cnt[l])
                continue;
            if (cnt[l][row] < 0 || cnt[l][row] > kb)
                return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.%s_num_blocks[%lld] = %d is not in [0, "
                                "k_blocks = %d]", fn, name[l], (long long)row, (int)cnt[l][row], kb);
            for (t = row * kb; t < row * kb + cnt[l][row]; ++t)
                if (idx[l][t] < 0 || idx[l][t] >= kb)
                    return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.%s_indices[%lld] = %d is not a key "
                                    "block in [0, k_blocks = %d)", fn, name[l], (long long)t, (int)idx[l][t], kb);
        }
        for (w0 = 0; w0 < kb; w0 += FA__BM_WINDOW) {
            memset(seen, 0, sizeof seen);
            for (l = 0; l < 2; ++l)
                for (t = row * kb; cnt[l] && t < row * kb + cnt[l][row]; ++t) {
                    int32_t j = idx[l][t] - w0;
                    if (j < 0 || j >= FA__BM_WINDOW)
                        continue;
                    if (seen[j >> 5] & (1u << (j & 31)))
                        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.%s_indices[%lld] = %d: key block "
                                        "listed twice in row %lld (kv_indices and full_kv_indices together list "
                                        "each at most once)", fn, name[l], (long long)t, (int)idx[l][t], (long long)row);
                    seen[j >> 5] |= 1u << (j & 31);
                }
        }
    }
    return FA_OK;
}

/* A full block must be cut by neither causal nor the window anywhere inside
   the lengths of each sequence that reads its mask. */
static fa_status fa__check_full_blocks(const char *fn, const fa_problem *r)
{
    const fa_block_mask *m = &r->block_mask;
    int kb = fa__blocks(r->seqlen_k, m->block_k), qb = fa__blocks(r->seqlen_q, m->block_q), b, mh, i;
    if (!m->full_kv_num_blocks || (!r->causal && !r->sliding_window))
        return FA_OK;
    for (b = 0; b < r->batch; ++b) {
        int64_t sk = fa__cache_len(r, b), sq = r->cu_seqlens_q ? r->cu_seqlens_q[b + 1] - r->cu_seqlens_q[b] : r->seqlen_q;
        int nqb = fa__blocks((int)sq, m->block_q); /* query blocks of this sequence */
        for (mh = 0; mh < m->heads; ++mh)
            for (i = 0; i < nqb; ++i) {
                int64_t row = ((int64_t)(m->batch == 1 ? 0 : b) * m->heads + mh) * qb + i, t;
                /* positions i' of the block's first and last rows, then its keys [j0, j1] */
                int64_t p0 = (int64_t)i * m->block_q, p1 = p0 + m->block_q < sq ? p0 + m->block_q - 1 : sq - 1;
                p0 += sk - sq;
                p1 += sk - sq;
                for (t = row * kb; t < row * kb + m->full_kv_num_blocks[row]; ++t) {
                    int64_t j0 = (int64_t)m->full_kv_indices[t] * m->block_k, j1 = j0 + m->block_k - 1;
                    j1 = j1 < sk - 1 ? j1 : sk - 1;
                    if (j0 > j1)
                        continue; /* no key of this sequence in it */
                    if ((r->causal && j1 > p0) ||
                        (r->sliding_window && (j0 < p1 - r->window_left || j1 > p0 + r->window_right)))
                        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.full_kv_indices[%lld] = %d: the "
                                        "causal or window mask cuts that block in sequence %d (list it in kv_indices)",
                                        fn, (long long)t, (int)m->full_kv_indices[t], b);
                }
            }
    }
    return FA_OK;
}

static fa_status fa__resolve(const char *fn, const fa_problem *p, fa_problem *r, int host_arrays)
{
    fa_problem x;
    int b;
    if (r) /* *r is defined on every path (else gcc -Wmaybe-uninitialized in callers) */
        memset(r, 0, sizeof *r);
    if (!p)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: problem is NULL", fn);
    if (!r)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: resolved problem is NULL", fn);
    x = *p;
#define FA__POSITIVE(field)                                                                    \
    if (x.field < 1)                                                                           \
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: " #field " (%d) must be >= 1", fn,     \
                        (int)x.field);
    FA__POSITIVE(batch)
    FA__POSITIVE(heads_q)
    FA__POSITIVE(head_dim)
#undef FA__POSITIVE
    /* the maxima (capacity) of every sequence; one sequence may be empty:
       see "Empty sequences" in section 5 */
    if (x.seqlen_q < 1 || x.seqlen_k < 1)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: %s (%d) must be >= 1 (the maximum over the batch; an empty sequence is a "
                        "length of 0 in cu_seqlens or seqlens_k)",
                        fn, x.seqlen_q < 1 ? "seqlen_q" : "seqlen_k", x.seqlen_q < 1 ? x.seqlen_q : x.seqlen_k);
    if (x.heads_kv < 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: heads_kv (%d) is negative", fn, x.heads_kv);
    if (x.heads_kv == 0)
        x.heads_kv = x.heads_q;
    if (x.heads_q % x.heads_kv != 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: heads_q (%d) is not a multiple of heads_kv (%d)", fn, x.heads_q, x.heads_kv);
    if (x.head_dim > 256)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: head_dim (%d) is over 256", fn, x.head_dim);
    if (x.head_dim_v < 0 || x.head_dim_v > 256)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: head_dim_v (%d) is not in 0..256", fn,
                        x.head_dim_v);
    if (x.head_dim_v == 0)
        x.head_dim_v = x.head_dim;
    if (!fa__isfinite(x.scale))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: scale (%g) is not finite", fn, (double)x.scale);
    if (x.scale == 0.0f)
        x.scale = (float)(1.0 / sqrt((double)x.head_dim));
    if (!fa__isfinite(x.softcap) || x.softcap < 0.0f)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: softcap (%g) must be finite and >= 0", fn,
                        (double)x.softcap);
    /* the CPU folds scale / softcap into Q; below FLT_MIN it loses bits that
       dK = scale dS^T Q needs (>>impl-backward) */
    if (x.softcap > 0.0f && fabs((double)x.scale / (double)x.softcap) < (double)FLT_MIN)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: scale (%g) / softcap (%g) is below FLT_MIN: not representable as a normal float", fn,
                        (double)x.scale, (double)x.softcap);
    if (x.sliding_window && (x.window_left < 0 || x.window_right < 0))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: window_left (%d) / window_right (%d) must be >= 0", fn, x.window_left,
                        x.window_right);
    if (x.sliding_window) { /* a side past every key is no bound (INT_MAX is fine): kept in int range */
        const int64_t most = (int64_t)x.seqlen_q + x.seqlen_k;
        if (x.window_left > most) x.window_left = (int)most;
        if (x.window_right > most) x.window_right = (int)most;
    }
    if (!(x.dropout_p >= 0.0f && x.dropout_p < 1.0f)) /* also NaN */
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: dropout_p (%g) is not in [0, 1)", fn,
                        (double)x.dropout_p);
    if (x.num_splits < 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: num_splits (%d) is negative", fn, x.num_splits);
    {
        const float ds[3] = {x.descale_q, x.descale_k, x.descale_v};
        int i;
        for (i = 0; i < 3; ++i)
            if (!fa__descale_ok(ds[i]))
                return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: descale_%c (%g) must be finite and >= 0", fn,
                                "qkv"[i], (double)ds[i]);
    }
    if (x.descale_q == 0.0f) x.descale_q = 1.0f;
    if (x.descale_k == 0.0f) x.descale_k = 1.0f;
    if (x.descale_v == 0.0f) x.descale_v = 1.0f;
    if (x.block_table) {
        int64_t cap;
        if (x.page_size < 1)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: page_size (%d) must be >= 1 with a block_table",
                            fn, x.page_size);
        if (x.pages_per_seq < 1 || x.num_pages < 1)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: pages_per_seq (%d) and num_pages (%d) must be >= 1 with a block_table",
                            fn, x.pages_per_seq, x.num_pages);
        if (!fa__mul64(x.pages_per_seq, x.page_size, &cap) || cap < x.seqlen_k)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: pages_per_seq (%d) x page_size (%d) is less than seqlen_k (%d)", fn,
                            x.pages_per_seq, x.page_size, x.seqlen_k);
        if (x.cu_seqlens_k)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: cu_seqlens_k and block_table cannot be used together", fn);
    }
    { /* every count the kernels multiply must fit */
        int64_t t;
        if (!fa__mul64((int64_t)x.batch * x.heads_q, x.seqlen_q, &t) ||
            !fa__mul64(t, x.head_dim > x.head_dim_v ? x.head_dim : x.head_dim_v, &t) ||
            !fa__mul64((int64_t)x.batch * x.heads_kv, x.seqlen_k, &t) ||
            !fa__mul64(t, x.head_dim > x.head_dim_v ? x.head_dim : x.head_dim_v, &t))
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: batch x seqlen x heads x head_dim overflows int64", fn);
    }
    if (fa__has_block_mask(&x)) {
        const fa_block_mask *m = &x.block_mask;
        fa_status s;
        /* (host_arrays = 0, the _cuda calls and their queries: the lists
           are device memory, not read here; each call takes or refuses
           block masks itself) */
        if ((s = fa__resolve_block_shape(fn, &x)) != FA_OK)
            return s;
        if (!m->kv_num_blocks != !m->kv_indices || !m->full_kv_num_blocks != !m->full_kv_indices) {
            int full = !m->kv_num_blocks == !m->kv_indices;
            const char *n1 = full ? "full_kv_num_blocks" : "kv_num_blocks", *n2 = full ? "full_kv_indices" : "kv_indices";
            int first_null = full ? !m->full_kv_num_blocks : !m->kv_num_blocks;
            return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: block_mask.%s is NULL but block_mask.%s is not (give "
                            "both or neither)", fn, first_null ? n1 : n2, first_null ? n2 : n1);
        }
    }
    if (host_arrays) {
        fa_status s;
        if (x.cu_seqlens_q &&
            (s = fa__check_cu(fn, "cu_seqlens_q", x.cu_seqlens_q, x.batch, x.seqlen_q, "seqlen_q")) != FA_OK)
            return s;
        if (x.cu_seqlens_k &&
            (s = fa__check_cu(fn, "cu_seqlens_k", x.cu_seqlens_k, x.batch, x.seqlen_k, "seqlen_k")) != FA_OK)
            return s;
        if (x.seqlens_k)
            for (b = 0; b < x.batch; ++b) {
                int64_t cap = x.cu_seqlens_k ? (int64_t)x.cu_seqlens_k[b + 1] - x.cu_seqlens_k[b]
                                             : x.seqlen_k;
                if (x.seqlens_k[b] < 0 || x.seqlens_k[b] > cap)
                    return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                                    "%s: seqlens_k[%d] = %d is not in [0, %lld] (the capacity)", fn, b,
                                    (int)x.seqlens_k[b], (long long)cap);
            }
        if (x.alibi_slopes)
            for (b = 0; b < x.heads_q; ++b)
                if (!fa__isfinite(x.alibi_slopes[b]))
                    return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: alibi_slopes[%d] is not finite", fn, b);
        if (x.block_table && (s = fa__check_pages(fn, &x, 0)) != FA_OK)
            return s;
        if (fa__has_block_mask(&x) &&
            ((s = fa__check_block_lists(fn, &x)) != FA_OK || (s = fa__check_full_blocks(fn, &x)) != FA_OK))
            return s;
    }
    *r = x;
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_problem_resolve(const fa_problem *p, fa_problem *resolved)
{
    return fa__resolve("fa_problem_resolve", p, resolved, 1);
}

FLASHATTN_DEF fa_status fa_block_mask_from_bitmap(const fa_problem *p, const uint8_t *bitmap,
                                                  int32_t *kv_num_blocks, int32_t *kv_indices,
                                                  int64_t *num_counts, int64_t *num_indices)
{
    static const char fn[] = "fa_block_mask_from_bitmap";
    fa_problem x;
    int64_t rows, row;
    int kb, j;
    fa_status s;
    if (!p)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: problem is NULL", fn);
    x = *p;
    if (x.batch < 1 || x.heads_q < 1 || x.seqlen_q < 1 || x.seqlen_k < 1)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: batch (%d), heads_q (%d), seqlen_q (%d) and seqlen_k (%d) "
                        "must be >= 1", fn, x.batch, x.heads_q, x.seqlen_q, x.seqlen_k);
    if ((s = fa__resolve_block_shape(fn, &x)) != FA_OK)
        return s;
    kb = fa__blocks(x.seqlen_k, x.block_mask.block_k);
    rows = (int64_t)x.block_mask.batch * x.block_mask.heads * fa__blocks(x.seqlen_q, x.block_mask.block_q);
    if (bitmap || kv_num_blocks || kv_indices) {
        if (!bitmap || !kv_num_blocks || !kv_indices)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL (give bitmap, kv_num_blocks and kv_indices, "
                            "or none of them to ask the sizes)", fn,
                            !bitmap ? "bitmap" : !kv_num_blocks ? "kv_num_blocks" : "kv_indices");
        for (row = 0; row < rows; ++row) {
            const uint8_t *bits = bitmap + row * kb;
            int32_t *out = kv_indices + row * kb, n = 0;
            for (j = 0; j < kb; ++j)
                if (bits[j])
                    out[n++] = j;
            for (j = n; j < kb; ++j)
                out[j] = 0;
            kv_num_blocks[row] = n;
        }
    }
    if (num_counts)
        *num_counts = rows;
    if (num_indices)
        *num_indices = rows * kb;
    return FA_OK;
}

/* One [nb, ns, nh, dim] view: data present, dtype known, strides >= 0 and
   not overlapping, extent within int64. Zero strides become the packed ones.
   The strides may come in any order (e.g. [batch, heads, seq, dim] is fine):
   sorted by size, each must step over everything the smaller ones span. */
static fa_status fa__check_tensor(const char *fn, const char *name, fa_tensor *t, int64_t nb,
                                  int64_t ns, int64_t nh, int64_t dim)
{
    int64_t cnt[3], str[3], extent = dim;
    const char *fld[3] = {"batch", "seq", "head"};
    int idx[3] = {0, 1, 2}, a, c;
    if (!t->data)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL", fn, name);
    if ((unsigned)t->dtype > (unsigned)FA_E4M3)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s.dtype (%d) is not an fa_dtype", fn, name,
                        (int)t->dtype);
    if (t->batch_stride < 0 || t->seq_stride < 0 || t->head_stride < 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s has a negative stride", fn, name);
    if (t->head_stride == 0)
        t->head_stride = dim;
    if (t->seq_stride == 0 && !fa__mul64(nh, dim, &t->seq_stride))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s size overflows int64", fn, name);
    if (t->batch_stride == 0 && !fa__mul64(ns, t->seq_stride, &t->batch_stride))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s size overflows int64", fn, name);
    cnt[0] = nb; cnt[1] = ns; cnt[2] = nh;
    str[0] = t->batch_stride; str[1] = t->seq_stride; str[2] = t->head_stride;
    /* sort the three dimensions by stride; on a tie the one that is outer
       in [batch, seq, heads] goes last, so that it is the one named */
    for (a = 0; a < 3; ++a)
        for (c = a + 1; c < 3; ++c)
            if (str[idx[c]] < str[idx[a]] || (str[idx[c]] == str[idx[a]] && idx[c] > idx[a])) {
                int tmp = idx[a];
                idx[a] = idx[c];
                idx[c] = tmp;
            }
    for (a = 0; a < 3; ++a) {
        int i = idx[a];
        int64_t span;
        if (cnt[i] <= 1)
            continue; /* a single row has no stride to overlap */
        if (str[i] < extent)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: %s.%s_stride (%lld) overlaps rows of head_dim %lld x heads %lld "
                            "(the inner dimensions span %lld elements)",
                            fn, name, fld[i], (long long)str[i], (long long)dim, (long long)nh,
                            (long long)extent);
        if (!fa__mul64(str[i], cnt[i] - 1, &span) || !fa__add64(span, extent, &extent) ||
            extent > INT64_MAX / 8)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s.%s_stride (%lld) x %lld overflows int64",
                            fn, name, fld[i], (long long)str[i], (long long)cnt[i]);
    }
    return FA_OK;
}

/* Rows of a query-shaped tensor: varlen packs all sequences in one batch. */
static void fa__q_rows(const fa_problem *r, int host_arrays, int64_t *nb, int64_t *ns)
{
    if (r->cu_seqlens_q) {
        *nb = 1;
        *ns = host_arrays ? r->cu_seqlens_q[r->batch] : (int64_t)r->batch * r->seqlen_q;
    } else {
        *nb = r->batch;
        *ns = r->seqlen_q;
    }
}

static void fa__k_rows(const fa_problem *r, int host_arrays, int64_t *nb, int64_t *ns)
{
    if (r->block_table) {
        *nb = r->num_pages;
        *ns = r->page_size;
    } else if (r->cu_seqlens_k) {
        *nb = 1;
        *ns = host_arrays ? r->cu_seqlens_k[r->batch] : (int64_t)r->batch * r->seqlen_k;
    } else {
        *nb = r->batch;
        *ns = r->seqlen_k;
    }
}

/* Paged K/V is decode's: forward and backward refuse a block_table. */
static fa_status fa__no_block_table(const char *fn, const fa_problem *r)
{
    if (r->block_table)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: block_table is set; paged K/V caches are read by decode only", fn);
    return FA_OK;
}

/* Decode's rows mix query heads and tokens (>>impl-decode): no block
   masks (its CPU and GPU calls; every other call takes them). */
static fa_status fa__no_block_mask(const char *fn, const fa_problem *r)
{
    if (fa__has_block_mask(r))
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: block_mask is set; decode does not take block masks "
                        "(fa_forward, fa_backward, fa_forward_cuda and fa_backward_cuda do)", fn);
    return FA_OK;
}

static fa_status fa__check_forward(const char *fn, const fa_problem *p, fa_problem *r, fa_tensor *q,
                                   fa_tensor *k, fa_tensor *v, fa_tensor *o, const float *lse,
                                   int host_arrays)
{
    int64_t qb, qs, kb, ks;
    fa_status s = fa__resolve(fn, p, r, host_arrays);
    (void)lse; /* optional output, any pointer */
    if (s != FA_OK)
        return s;
    if ((s = fa__no_block_table(fn, r)) != FA_OK)
        return s;
    fa__q_rows(r, host_arrays, &qb, &qs);
    fa__k_rows(r, host_arrays, &kb, &ks);
    if ((s = fa__check_tensor(fn, "q", q, qb, qs, r->heads_q, r->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "k", k, kb, ks, r->heads_kv, r->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "v", v, kb, ks, r->heads_kv, r->head_dim_v)) != FA_OK ||
        (s = fa__check_tensor(fn, "o", o, qb, qs, r->heads_q, r->head_dim_v)) != FA_OK)
        return s;
    return FA_OK;
}

static fa_status fa__check_backward(const char *fn, const fa_problem *p, fa_problem *r, fa_tensor *q,
                                    fa_tensor *k, fa_tensor *v, fa_tensor *o, fa_tensor *dout,
                                    const float *lse, fa_tensor *dq, fa_tensor *dk, fa_tensor *dv,
                                    int host_arrays)
{
    int64_t qb, qs, kb, ks;
    fa_status s = fa__check_forward(fn, p, r, q, k, v, o, lse, host_arrays);
    if (s != FA_OK)
        return s;
    if (!lse)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: lse is NULL (the forward's log-sum-exp is required)", fn);
    fa__q_rows(r, host_arrays, &qb, &qs);
    fa__k_rows(r, host_arrays, &kb, &ks);
    if ((s = fa__check_tensor(fn, "dout", dout, qb, qs, r->heads_q, r->head_dim_v)) != FA_OK ||
        (s = fa__check_tensor(fn, "dq", dq, qb, qs, r->heads_q, r->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "dk", dk, kb, ks, r->heads_kv, r->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "dv", dv, kb, ks, r->heads_kv, r->head_dim_v)) != FA_OK)
        return s;
    return FA_OK;
}

/* Decode: q / o / k_new / v_new are [batch, seqlen_q, heads, dim]; the cache
   is [batch, seqlen_k (capacity), heads_kv, dim] or a page pool. */
static fa_status fa__check_decode(const char *fn, const fa_problem *p, fa_problem *r, fa_tensor *q,
                                  fa_tensor *k_cache, fa_tensor *v_cache, fa_tensor *k_new,
                                  fa_tensor *v_new, fa_tensor *o, const float *lse, int host_arrays)
{
    int64_t kb, ks;
    int append;
    fa_status s = fa__resolve(fn, p, r, host_arrays);
    (void)lse;
    if (s != FA_OK || (s = fa__no_block_mask(fn, r)) != FA_OK)
        return s;
    if (r->cu_seqlens_q || r->cu_seqlens_k)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "%s: cu_seqlens_q / cu_seqlens_k are not used by decode (use seqlens_k)", fn);
    if (r->dropout_p != 0.0f)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: dropout_p (%g) must be 0 in decode", fn,
                        (double)r->dropout_p);
    append = k_new->data != NULL || v_new->data != NULL;
    if (append && (!k_new->data || !v_new->data))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL but %s.data is not (give both or neither)",
                        fn, k_new->data ? "v_new" : "k_new", k_new->data ? "k_new" : "v_new");
    fa__k_rows(r, host_arrays, &kb, &ks);
    if ((s = fa__check_tensor(fn, "q", q, r->batch, r->seqlen_q, r->heads_q, r->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "k_cache", k_cache, kb, ks, r->heads_kv, r->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "v_cache", v_cache, kb, ks, r->heads_kv, r->head_dim_v)) != FA_OK ||
        (s = fa__check_tensor(fn, "o", o, r->batch, r->seqlen_q, r->heads_q, r->head_dim_v)) != FA_OK)
        return s;
    if (append) {
        if ((s = fa__check_tensor(fn, "k_new", k_new, r->batch, r->seqlen_q, r->heads_kv, r->head_dim)) != FA_OK ||
            (s = fa__check_tensor(fn, "v_new", v_new, r->batch, r->seqlen_q, r->heads_kv, r->head_dim_v)) != FA_OK)
            return s;
        if (host_arrays) {
            int b;
            for (b = 0; b < r->batch; ++b)
                if (fa__cache_len(r, b) + r->seqlen_q > r->seqlen_k)
                    return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                                    "%s: seqlens_k[%d] (%lld) + seqlen_q (%d) new tokens exceed the "
                                    "cache capacity seqlen_k (%d)",
                                    fn, b, (long long)fa__cache_len(r, b), r->seqlen_q, r->seqlen_k);
            if (r->block_table && (s = fa__check_pages(fn, r, r->seqlen_q)) != FA_OK)
                return s;
        }
    }
    return FA_OK;
}

/* ============================================================================
   >>impl-fp8  FP8 (e4m3): checks, block descales, the quantizer
   ============================================================================
   The forward reads e4m3 through fa__load_row, which decodes each code to
   f32 and multiplies it by the row's descale (fa__fp8_descale, folded into
   the multiplier Q already gets), so the rest of the CPU path is the f32
   one. The quantizer is the CPU twin of fa_quantize_cuda (>>fp8-quant in
   flashattn_cuda.cuh): both use the functions below in the same order of
   operations, so they agree bit for bit. */

/* Rows per descale block of each role (0 Q, 1 K, 2 V), and blocks per (b, h). */
#if (FLASHATTN_FP8_BLOCK_Q & (FLASHATTN_FP8_BLOCK_Q - 1)) || FLASHATTN_FP8_BLOCK_Q < 16 || \
    FLASHATTN_FP8_BLOCK_Q > 256 || (FLASHATTN_FP8_BLOCK_K & (FLASHATTN_FP8_BLOCK_K - 1)) ||  \
    FLASHATTN_FP8_BLOCK_K < 16 || FLASHATTN_FP8_BLOCK_K > 256
#error "FLASHATTN_FP8_BLOCK_Q and FLASHATTN_FP8_BLOCK_K must be powers of two in 16..256"
#endif
#define FA__FP8_ROWS(role) ((role) == 0 ? FLASHATTN_FP8_BLOCK_Q : FLASHATTN_FP8_BLOCK_K)
#define FA__FP8_BLOCKS(seqlen, role) (((int64_t)(seqlen) + FA__FP8_ROWS(role) - 1) / FA__FP8_ROWS(role))

/* The descale of row n (position in sequence b) of head h of the Q (0),
   K (1) or V (2) tensor: 1 unless it is e4m3. r is resolved. */
static float fa__fp8_descale(const fa_problem *r, int role, fa_dtype dt, int b, int h, int n)
{
    const float *blk = role == 0 ? r->descale_q_block : role == 1 ? r->descale_k_block : r->descale_v_block;
    int heads = role == 0 ? r->heads_q : r->heads_kv;
    if (dt != FA_E4M3)
        return 1.0f;
    if (!blk)
        return role == 0 ? r->descale_q : role == 1 ? r->descale_k : r->descale_v;
    return blk[((int64_t)b * heads + h) * FA__FP8_BLOCKS(role == 0 ? r->seqlen_q : r->seqlen_k, role) +
               n / FA__FP8_ROWS(role)];
}

/* The FP8 rules of a forward call (p as given, r resolved): q, k and v all
   e4m3 or none; o never e4m3; a block descale array only for an e4m3
   tensor whose per-tensor descale is 0; on the host, every entry finite
   and >= 0. */
static fa_status fa__check_fp8(const char *fn, const fa_problem *p, const fa_problem *r, const fa_tensor *q,
                               const fa_tensor *k, const fa_tensor *v, const fa_tensor *o, int host_arrays)
{
    const fa_tensor *t[3];
    const char *name[3] = {"q", "k", "v"};
    const float *blk[3];
    float per[3];
    int fp8 = q->dtype == FA_E4M3, i;
    t[0] = q; t[1] = k; t[2] = v;
    blk[0] = p->descale_q_block; blk[1] = p->descale_k_block; blk[2] = p->descale_v_block;
    per[0] = p->descale_q; per[1] = p->descale_k; per[2] = p->descale_v;
    for (i = 0; i < 3; ++i) {
        if ((t[i]->dtype == FA_E4M3) != fp8)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: %s.dtype is %s but q.dtype is %s: q, k and v are all FA_E4M3 or none is", fn,
                            name[i], fa__dtype_name(t[i]->dtype), fa__dtype_name(q->dtype));
        if (blk[i] && !fp8)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: descale_%s_block is set but %s.dtype is %s (descales are for FA_E4M3 only)",
                            fn, name[i], name[i], fa__dtype_name(t[i]->dtype));
        if (blk[i] && per[i] != 0.0f)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: descale_%s_block and descale_%s (%g) are both set: give one (with blocks "
                            "the per-tensor descale must be 0)", fn, name[i], name[i], (double)per[i]);
        if (blk[i] && host_arrays) {
            int64_t n = (int64_t)r->batch * (i ? r->heads_kv : r->heads_q) *
                        FA__FP8_BLOCKS(i ? r->seqlen_k : r->seqlen_q, i), j;
            for (j = 0; j < n; ++j)
                if (!fa__descale_ok(blk[i][j]))
                    return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: descale_%s_block[%lld] (%g) must be finite "
                                    "and >= 0", fn, name[i], (long long)j, (double)blk[i][j]);
        }
    }
    if (o->dtype == FA_E4M3)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: o.dtype is FA_E4M3: the output is f32, f16 or bf16", fn);
    return FA_OK;
}

/* ---- the Hadamard rotation M = H diag(sign) / sqrt(d) ----------------------
   H is Sylvester's: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]]. x H takes
   log2(d) butterfly stages; stage h (h = 1, 2, 4, .. d/2) replaces each
   pair (x[j], x[j + h]), bit h of j clear, by (x[j] + x[j + h], x[j] - x[j + h]).
   Then element j is multiplied by sign[j] / sqrt(d). The GPU runs the same
   stages in the same order (its lanes hold other elements, not other
   sums), so the results match bit for bit. sign[j] is a Philox bit of
   (seed, j), the generator dropout uses. */
static FLASHATTN_HD FLASHATTN__INLINE float fa__hadamard_mul(uint64_t seed, int j, float inv_sqrt_d)
{
    uint32_t r[4];
    fa__philox4x32_10((uint32_t)j >> 2, 0x48414441u /* "HADA" */, 0u, 0u, (uint32_t)seed,
                      (uint32_t)(seed >> 32), r);
    return (r[j & 3] & 1u) ? -inv_sqrt_d : inv_sqrt_d;
}

static void fa__hadamard_row(float *x, int d, const float *mul)
{
    int h, i, j;
    for (h = 1; h < d; h <<= 1)
        for (i = 0; i < d; i += 2 * h)
            for (j = i; j < i + h; ++j) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    for (j = 0; j < d; ++j)
        x[j] *= mul[j];
}

/* A block's scale from its amax: s = amax / 448 (the descale written) and
   its inverse 448 / amax (the multiplier before rounding to e4m3). amax
   below 2^-64 (an all-zero block): 1 and 1, never a division by zero. */
static FLASHATTN_HD FLASHATTN__INLINE void fa__fp8_scale(float amax, float *s, float *inv)
{
    if (!(amax >= 5.42101086242752217e-20f)) {
        *s = 1.0f;
        *inv = 1.0f;
    } else {
        *s = amax / 448.0f;
        *inv = 448.0f / amax;
    }
}

/* Validation of fa_quantize / fa_quantize_cuda. Writes nothing. */
static fa_status fa__check_quant(const char *fn, const fa_quant *p, fa_tensor *x, fa_tensor *out,
                                 const float *descale, int host_arrays)
{
    int64_t nb, ns, blocks;
    fa_status s;
    if (!p)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: p is NULL", fn);
    if ((unsigned)p->role > (unsigned)FA_QUANT_V)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: role (%d) is not an fa_quant_role", fn, (int)p->role);
    if (p->batch < 1 || p->seqlen < 1 || p->heads < 1)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: batch (%d), seqlen (%d) and heads (%d) must be >= 1", fn,
                        p->batch, p->seqlen, p->heads);
    if (p->head_dim < 1 || p->head_dim > 256)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: head_dim (%d) is not in 1..256", fn, p->head_dim);
    if (p->hadamard && p->role == FA_QUANT_V)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: hadamard with role FA_QUANT_V: V is never rotated", fn);
    if (p->hadamard && (p->head_dim & (p->head_dim - 1)))
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: head_dim (%d) must be a power of two with hadamard", fn,
                        p->head_dim);
    if (host_arrays && p->cu_seqlens &&
        (s = fa__check_cu(fn, "cu_seqlens", p->cu_seqlens, p->batch, p->seqlen, "seqlen")) != FA_OK)
        return s;
    nb = p->cu_seqlens ? 1 : p->batch;
    ns = !p->cu_seqlens ? p->seqlen : host_arrays ? p->cu_seqlens[p->batch] : (int64_t)p->batch * p->seqlen;
    if (!fa__mul64((int64_t)p->batch * p->heads, FA__FP8_BLOCKS(p->seqlen, p->role), &blocks) ||
        (s = fa__check_tensor(fn, "x", x, nb, ns, p->heads, p->head_dim)) != FA_OK ||
        (s = fa__check_tensor(fn, "out", out, nb, ns, p->heads, p->head_dim)) != FA_OK)
        return s != FA_OK ? s : fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: the descale count overflows", fn);
    if (x->dtype == FA_E4M3)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: x.dtype is FA_E4M3 (give f32, f16 or bf16)", fn);
    if (out->dtype != FA_E4M3)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: out.dtype is %s (must be FA_E4M3)", fn,
                        fa__dtype_name(out->dtype));
    if (!descale)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: descale is NULL", fn);
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_quantize_descales(const fa_quant *p, int64_t *count)
{
    if (!p || !count)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "fa_quantize_descales: %s is NULL", p ? "count" : "p");
    if (p->batch < 1 || p->seqlen < 1 || p->heads < 1 || (unsigned)p->role > (unsigned)FA_QUANT_V)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                        "fa_quantize_descales: batch, seqlen, heads must be >= 1 and role an fa_quant_role");
    *count = p->per_tensor ? 1 : (int64_t)p->batch * p->heads * FA__FP8_BLOCKS(p->seqlen, p->role);
    return FA_OK;
}

/* Row n of sequence b, head h of x, as f32 in y[d], rotated if asked. */
static void fa__quant_row(const fa_quant *p, const fa_tensor *x, int b, int h, int n, const float *mul, float *y)
{
    int64_t row = p->cu_seqlens ? (int64_t)p->cu_seqlens[b] + n : n, bi = p->cu_seqlens ? 0 : b;
    size_t at = (size_t)(bi * x->batch_stride + row * x->seq_stride + h * x->head_stride);
    int j;
    for (j = 0; j < p->head_dim; ++j)
        y[j] = x->dtype == FA_F32 ? ((const float *)x->data)[at + (size_t)j]
             : x->dtype == FA_F16 ? fa__f16_to_f32(((const uint16_t *)x->data)[at + (size_t)j])
                                  : fa__bf16_to_f32(((const uint16_t *)x->data)[at + (size_t)j]);
    if (p->hadamard)
        fa__hadamard_row(y, p->head_dim, mul);
}

/* Block k of (b, h) (rows past the sequence's end are not there): with
   store = 0 its amax, else its rows written as e4m3(y * inv). NaN never
   wins the amax (the comparison is false). */
static float fa__quant_block(const fa_quant *p, const fa_tensor *x, const fa_tensor *out, int b, int h,
                             int64_t k, const float *mul, int store, float inv)
{
    float y[256], amax = 0.0f;
    int len = p->cu_seqlens ? p->cu_seqlens[b + 1] - p->cu_seqlens[b] : p->seqlen, n, j;
    int n0 = (int)k * FA__FP8_ROWS(p->role), n1 = n0 + FA__FP8_ROWS(p->role) < len ? n0 + FA__FP8_ROWS(p->role) : len;
    for (n = n0; n < n1; ++n) {
        fa__quant_row(p, x, b, h, n, mul, y);
        if (!store) {
            for (j = 0; j < p->head_dim; ++j)
                amax = fabsf(y[j]) > amax ? fabsf(y[j]) : amax;
        } else {
            int64_t row = p->cu_seqlens ? (int64_t)p->cu_seqlens[b] + n : n, bi = p->cu_seqlens ? 0 : b;
            uint8_t *o = (uint8_t *)out->data + bi * out->batch_stride + row * out->seq_stride + h * out->head_stride;
            for (j = 0; j < p->head_dim; ++j)
                o[j] = fa__f32_to_e4m3(y[j] * inv);
        }
    }
    return amax;
}

FLASHATTN_DEF fa_status fa_quantize(const fa_quant *p, fa_tensor x, fa_tensor out, float *descale)
{
    float mul[256], amax = 0.0f, s = 1.0f, inv = 1.0f;
    int b, h, j;
    int64_t nblk, k;
    fa_status st = fa__check_quant("fa_quantize", p, &x, &out, descale, 1);
    if (st != FA_OK)
        return st;
    for (j = 0; j < p->head_dim; ++j)
        mul[j] = fa__hadamard_mul(p->seed, j, (float)(1.0 / sqrt((double)p->head_dim)));
    nblk = FA__FP8_BLOCKS(p->seqlen, p->role);
    if (p->per_tensor) { /* a first pass for the tensor's amax */
        for (b = 0; b < p->batch; ++b)
            for (h = 0; h < p->heads; ++h)
                for (k = 0; k < nblk; ++k) {
                    float a = fa__quant_block(p, &x, &out, b, h, k, mul, 0, 0.0f);
                    amax = a > amax ? a : amax;
                }
        fa__fp8_scale(amax, &s, &inv);
        descale[0] = s;
    }
    for (b = 0; b < p->batch; ++b)
        for (h = 0; h < p->heads; ++h)
            for (k = 0; k < nblk; ++k) {
                if (!p->per_tensor) {
                    fa__fp8_scale(fa__quant_block(p, &x, &out, b, h, k, mul, 0, 0.0f), &s, &inv);
                    descale[((int64_t)b * p->heads + h) * nblk + k] = s;
                }
                fa__quant_block(p, &x, &out, b, h, k, mul, 1, inv);
            }
    return FA_OK;
}

/* ============================================================================
   >>impl-softmax  the online softmax, step by step
   ============================================================================
   softmax(s)_j = exp(s_j - m) / l with m = max_j s_j and l = sum_j exp(s_j - m).
   The scores of a row arrive one key tile at a time, so keep a running m and
   l for the tiles seen so far (online softmax). When tile t brings a larger
   maximum, every exp(s - m_old) already summed into l must become
   exp(s - m_new): multiply l by alpha = exp(m_old - m_new). The same alpha
   rescales the unscaled output accumulator O~ = sum_j exp(s_j - m) v_j, so
   after the last tile O = O~ / l with ONE division (FlashAttention-2), and
   the row's log-sum-exp is L = m + log(l).

   The CPU code works in base 2: scores arrive already multiplied by log2(e)
   (folded into Q when it is loaded), so exp(s - m) = exp2(s2 - m2), which is
   cheaper, and L = (m2 + log2 l) * ln 2 at the end.

   Any m at or above the maximum works as well (the paper's m is just the
   safest choice: no exp2 exceeds 1), so the CPU rounds it UP to an integer:
   each alpha is then a power of two, the rescale of O~ exact, and exp2(s2 -
   m2) splits into 2^k, written into the exponent bits, times 2^f with |f| <=
   1/2, a short polynomial (fa__exp2_row).

   A row whose keys are all masked has m = -inf; using 0 in place of m keeps
   exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN, so l stays 0 and the
   row ends as O = 0, L = -inf. */

/* ---- SKIP ON FIRST READ: the SIMD layer, to fa__row_max below -------------- */

/* ---- the vector width ------------------------------------------------------
   The hot loops are written ONCE over a float vector of FA__VW lanes: 16 with
   AVX-512F (zmm), 8 with AVX2 + FMA (ymm), 4 with AArch64 NEON (q
   registers). fa__vf is that vector; the FA__V* macros are its operations.
   Without any of them, FA__VW is 0 and only the portable loops exist. */
#if FLASHATTN__AVX512
typedef __m512 fa__vf;
#define FA__VW 16
#define FA__VLOAD(p) _mm512_loadu_ps(p)
#define FA__VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define FA__VSET1(x) _mm512_set1_ps(x)
#define FA__VZERO() _mm512_setzero_ps()
#define FA__VADD(a, b) _mm512_add_ps((a), (b))
#define FA__VSUB(a, b) _mm512_sub_ps((a), (b))
#define FA__VMUL(a, b) _mm512_mul_ps((a), (b))
#define FA__VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c)) /* a * b + c */
/* (the all-lanes maskz forms: the plain ones pass gcc 12's C++ -Wextra
   -Werror only with a "may be used uninitialized" in its own header) */
#define FA__VALL ((__mmask16)0xffff)
#define FA__VMAX(a, b) _mm512_maskz_max_ps(FA__VALL, (a), (b)) /* b when either is NaN */
/* the bits of x shifted left by 23: the low 9 bits of x into the sign and exponent */
#define FA__VSHL23(x) _mm512_castsi512_ps(_mm512_maskz_slli_epi32(FA__VALL, _mm512_castps_si512(x), 23))
/* horizontal sum / max: the two 8-lane halves, then as AVX2 does */
#define FA__VHALF(v, i) _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xff, _mm512_castps_pd(v), i))
#define FA__VHSUM(v) fa__hsum_avx2(_mm256_add_ps(FA__VHALF(v, 0), FA__VHALF(v, 1)))
#define FA__VHMAX(v) fa__hmax_avx2(_mm256_max_ps(FA__VHALF(v, 0), FA__VHALF(v, 1)))
#elif FLASHATTN__AVX2
typedef __m256 fa__vf;
#define FA__VW 8
#define FA__VLOAD(p) _mm256_loadu_ps(p)
#define FA__VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define FA__VSET1(x) _mm256_set1_ps(x)
#define FA__VZERO() _mm256_setzero_ps()
#define FA__VADD(a, b) _mm256_add_ps((a), (b))
#define FA__VSUB(a, b) _mm256_sub_ps((a), (b))
#define FA__VMUL(a, b) _mm256_mul_ps((a), (b))
#define FA__VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define FA__VMAX(a, b) _mm256_max_ps((a), (b))
#define FA__VSHL23(x) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(x), 23))
#define FA__VHSUM(v) fa__hsum_avx2(v)
#define FA__VHMAX(v) fa__hmax_avx2(v)
#elif FLASHATTN__NEON
typedef float32x4_t fa__vf;
#define FA__VW 4
#define FA__VLOAD(p) vld1q_f32(p)
#define FA__VSTORE(p, v) vst1q_f32((p), (v))
#define FA__VSET1(x) vdupq_n_f32(x)
#define FA__VZERO() vdupq_n_f32(0.0f)
#define FA__VADD(a, b) vaddq_f32((a), (b))
#define FA__VSUB(a, b) vsubq_f32((a), (b))
#define FA__VMUL(a, b) vmulq_f32((a), (b))
#define FA__VFMA(a, b, c) vfmaq_f32((c), (a), (b)) /* NEON puts the addend first */
/* FMAX gives NaN when either operand is NaN (x86: the second one),
   so a NaN score of fa__exp2_row stays NaN here too */
#define FA__VMAX(a, b) vmaxq_f32((a), (b))
#define FA__VSHL23(x) vreinterpretq_f32_u32(vshlq_n_u32(vreinterpretq_u32_f32(x), 23))
#define FA__VHSUM(v) vaddvq_f32(v)
#define FA__VHMAX(v) vmaxvq_f32(v)
#else
#define FA__VW 0
#endif

#if FLASHATTN__AVX2
static FLASHATTN__FORCEINLINE float fa__hsum_avx2(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static FLASHATTN__FORCEINLINE float fa__hmax_avx2(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#if FA__VW
/* 2^f for FA__VW lanes, |f| <= 1/2: the polynomial of degree 6 closest to
   2^f on [-1/2, 1/2] (a Chebyshev fit: error below 2e-9, so the f32 result
   is within about 1 ulp of exp2f). */
static FLASHATTN__FORCEINLINE fa__vf fa__exp2_frac(fa__vf f)
{
    fa__vf p = FA__VSET1(1.5461444698569129e-04f);
    p = FA__VFMA(p, f, FA__VSET1(1.3400428177615838e-03f));
    p = FA__VFMA(p, f, FA__VSET1(9.6180566785246381e-03f));
    p = FA__VFMA(p, f, FA__VSET1(5.5503272266703021e-02f));
    p = FA__VFMA(p, f, FA__VSET1(2.4022650922288758e-01f));
    p = FA__VFMA(p, f, FA__VSET1(6.9314720670283260e-01f));
    return FA__VFMA(p, f, FA__VSET1(1.0f));
}
#endif

/* ---- END OF THE SIMD LAYER: the online softmax step by step ---------------- */

static float fa__row_max(const float *s, int n)
{
    float mx = -INFINITY;
    int j = 0;
#if FA__VW
    if (n >= FA__VW) {
        fa__vf v = FA__VLOAD(s);
        for (j = FA__VW; j + FA__VW <= n; j += FA__VW)
            v = FA__VMAX(v, FA__VLOAD(s + j));
        mx = FA__VHMAX(v);
    }
#endif
    for (; j < n; ++j)
        mx = s[j] > mx ? s[j] : mx;
    return mx;
}

/* s[j] <- exp2(s[j] - base) scale; returns the sum of the new s[j]. The
   row's maximum is at most base.

   The vector loop needs an integral base, |base| < 2^22 (any other base,
   as for scores of 2^22 and more, takes the scalar loop, exp2f). It
   writes s - base = k + f, k = round(s - base), |f| <= 1/2, without a
   rounding instruction: t = s + c with c = 1.5 2^23 + 127 - base lies in
   [2^23, 2^24), where floats are the integers, so the addition itself
   rounds s - base to k and t = 1.5 2^23 + 127 + k exactly. t's low 9 bits
   are then 127 + k, the exponent field of 2^k, which FA__VSHL23 moves into
   place; t - c = base + k, so f = s - (t - c), exact. s is first raised to
   base - 127: masked scores (-inf) and any 2^-127 below the maximum get
   k = -127, exponent field 0, so exactly 0. A NaN score stays NaN (x86's
   max returns its SECOND operand when one is NaN; NEON's gives NaN). Five
   instructions where subtracting base, clamping both ways, rounding and
   converting took eight [cpu-exp2]. */
static float fa__exp2_row(float *s, int n, float base, float scale)
{
    float sum = 0.0f;
    int j = 0;
#if FA__VW
    if (fabsf(base) < 4194304.0f && (float)(int)base == base) {
        const fa__vf lo = FA__VSET1(base - 127.0f), c = FA__VSET1(12582912.0f + 127.0f - base);
        fa__vf acc = FA__VZERO();
        for (; j + FA__VW <= n; j += FA__VW) {
            fa__vf x = FA__VMAX(lo, FA__VLOAD(s + j)), t = FA__VADD(x, c);
            fa__vf p = FA__VMUL(fa__exp2_frac(FA__VSUB(x, FA__VSUB(t, c))), FA__VSHL23(t));
            if (scale != 1.0f) /* (the backward's rows; the loop is unswitched) */
                p = FA__VMUL(p, FA__VSET1(scale));
            FA__VSTORE(s + j, p);
            acc = FA__VADD(acc, p);
        }
        sum = FA__VHSUM(acc);
    }
#endif
    for (; j < n; ++j) {
        s[j] = exp2f(s[j] - base) * scale;
        sum += s[j];
    }
    return sum;
}

/* One online-softmax step for ONE query row: the row's scores s[0..n) of the
   next key tile (base-2 units) arrive; m and l summarize the earlier tiles
   (m: their maximum rounded up to an integer). On return s holds P~ =
   exp2(s - m_new), m and l are updated, and the result is alpha =
   exp2(m_old - m_new), a power of two: the factor the caller must apply to
   the row's accumulator O~ before adding P~ V. */
static float fa__softmax_step(float *s, int n, float *m, float *l)
{
    float m_old = *m, tile_max = fa__row_max(s, n);
    float m_new = tile_max > m_old ? ceilf(tile_max) : m_old;
    float base = m_new == -INFINITY ? 0.0f : m_new; /* all masked so far: see above */
    float alpha = m_new == m_old ? 1.0f : exp2f(m_old - base); /* m_old = -inf gives 0: nothing to rescale */
    float rowsum = fa__exp2_row(s, n, base, 1.0f);
    *l = *l * alpha + rowsum; /* l_new = e^(m_old - m_new) l_old + rowsum(P~) */
    *m = m_new;
    return alpha;
}

/* After the last tile: O = O~ / l and L = m + log l (natural log). */
static void fa__softmax_finish(float *o, int dv, float m, float l, float *L)
{
    int c;
    if (l > 0.0f) {
        for (c = 0; c < dv; ++c)
            o[c] /= l;
        *L = (float)((double)m * FA__LN2 + log((double)l));
    } else { /* the row saw no key */
        for (c = 0; c < dv; ++c)
            o[c] = 0.0f;
        *L = -INFINITY;
    }
}

/* ============================================================================
   >>impl-forward  CPU forward (FlashAttention-2 loop order)
   ============================================================================
   Shapes (per sequence b, query head h, KV head h / (heads_q / heads_kv)):
       Q [sq, d], K [sk, d], V [sk, dv], O [sq, dv], L [sq]
   Q is cut into Tr = ceil(sq / Br) tiles Q_i of Br rows, K and V into tiles
   K_j, V_j of Bc rows. FlashAttention-2 puts the Q tile in the OUTER loop:
   one task = one (b, h, Q_i), which owns its rows of O and L outright, so
   tasks never share an output and need no locks or atomics.

       for each task (b, h, i):                      parallel
           Q~_i = Q_i * scale * log2 e     (f32, once)
           m = -inf, l = 0, O~ = 0         [Br], [Br], [Br, dv]
           for each K_j, V_j that any row of Q_i may see:
               S = Q~_i K_j^T              [Br, Bc]  (then softcap, ALiBi, masks)
               P~ = exp2(S - m_new), rescale l and O~ by alpha   (online softmax)
               O~ += dropout(P~) V_j       [Br, dv]
           O_i = O~ / l,  L_i = m + log l

   Everything on the CPU is f32 in a worker's scratch: tiles are converted
   from the tensors' storage type (f32, f16, bf16) as they are loaded. The
   matrix products are one routine, fa__gemm, on row-major tiles whose
   widths are padded to 16 floats (zeros in the padding); only tiles of at
   most FA__FEW_ROWS query rows (decode) read K and V in place instead, with
   dot products (fa__dots_rows, fa__pv_rows).

   Why Br = 512 by default: every Q tile streams all of K and V through the
   cache once, so K/V traffic is (sq / Br) x (size of K and V); a tall tile
   keeps the forward off the K/V loads [cpu-br].

   Block-sparse (FlashAttention, Sec. 3.3, Alg. 5): a block mask says which
   (Q block, K block) pairs exist at all; the loop above simply skips the
   K_j, V_j of the others, loading nothing and computing nothing for them.
   The paper's Prop. 4 counts the memory traffic: dense FlashAttention makes
   Theta(N^2 d^2 / M) accesses to slow memory (HBM; here RAM) for on-chip
   (SRAM; here cache) size M, because each of the N d / M Q tiles streams
   all of K and V; with a fraction s of the blocks visited only those K and
   V tiles stream, giving Theta(N d + N^2 d^2 s / M): the N d is reading Q
   and writing O once, which no sparsity removes. Time falls with s too,
   down to the per-block bookkeeping. The backward skips the same pairs. */

#define FA__BR FLASHATTN_CPU_BR
/* the backward's six row-tile buffers (Q~, dO, S, dP, T, Z) stay in L2 at
   256 rows; the forward's three gain from 512 [cpu-br] */
#define FA__BR_BWD (FA__BR < 256 ? FA__BR : 256)
#define FA__BC FLASHATTN_CPU_BC
#define FA__PAD(n) (((n) + 15) / 16 * 16)
#define FA__FEW_ROWS 4 /* up to this many query rows: K, V read in place (decode) */

/* ---- SKIP ON FIRST READ: the matrix product, row loads, the few-row (decode)
   dot products, the call's context, scratch and tile loads, to fa__key_band,
   where the forward loop above begins in code. ---------------------------- */

/* ---- the matrix product --------------------------------------------------
   C[M, N] (+)= A[M, K] B[K, N], all row-major, N a multiple of 16. The
   micro-kernel keeps an mr x (nv FA__VW) block of C in registers and walks
   K: each step loads nv vectors of one row of B, broadcasts one A element
   per row and multiplies it into them (a rank-1 update): 2 mr nv FLOP-lanes
   for nv loads and mr broadcasts. That is why K tiles are stored transposed
   (K^T[d, Bc]): S = Q K^T then reads B = K^T row by row, contiguously.

   The block is as tall as the registers allow (FA__MR rows of 2 vectors):
       AVX-512: 12 x 32 = 24 zmm accumulators + 2 B vectors + 1 broadcast
                of the 32 zmm registers;
       AVX2:     6 x 16 = 12 ymm accumulators + 2 + 1 of the 16 ymm;
       NEON:    12 x 8  = 24 q accumulators + 2 + 1 of the 32 v registers.
   Every element of C is summed over k = 0, 1, ... K-1 in that order, so the
   result does not depend on how the rows are cut into blocks. */
#if FA__VW
#if FLASHATTN__AVX512 || FLASHATTN__NEON
#define FA__MR 12
#else
#define FA__MR 6
#endif
/* The loops over the rows and vectors of the block must be unrolled for
   the block to live in registers; gcc does not do it by itself at -O2.
   (nvcc's front end flags the GCC pragma as unknown, then passes it on to
   the host compiler: its warning 1675 is silenced for the pragma alone.) */
#if defined(__CUDACC__) && defined(__NVCC__)
#define FA__UNROLL _Pragma("nv_diag_suppress 1675") _Pragma("GCC unroll 16") _Pragma("nv_diag_default 1675")
#elif defined(__GNUC__)
#define FA__UNROLL _Pragma("GCC unroll 16")
#else
#define FA__UNROLL
#endif
static FLASHATTN__FORCEINLINE void fa__kernel(const int mr, const int nv, int K, const float *A, int lda,
                                              const float *B, int ldb, float *C, int ldc, int acc)
{
    fa__vf c[FA__MR][2], b[2]; /* mr and nv are constants after inlining */
    int r, v, k;
    FA__UNROLL for (r = 0; r < mr; ++r)
        FA__UNROLL for (v = 0; v < nv; ++v)
            c[r][v] = acc ? FA__VLOAD(C + (size_t)r * (size_t)ldc + v * FA__VW) : FA__VZERO();
    for (k = 0; k < K; ++k) {
        FA__UNROLL for (v = 0; v < nv; ++v)
            b[v] = FA__VLOAD(B + (size_t)k * (size_t)ldb + v * FA__VW);
        FA__UNROLL for (r = 0; r < mr; ++r) {
            fa__vf a = FA__VSET1(A[(size_t)r * (size_t)lda + (size_t)k]);
            FA__UNROLL for (v = 0; v < nv; ++v)
                c[r][v] = FA__VFMA(a, b[v], c[r][v]);
        }
    }
    FA__UNROLL for (r = 0; r < mr; ++r)
        FA__UNROLL for (v = 0; v < nv; ++v)
            FA__VSTORE(C + (size_t)r * (size_t)ldc + v * FA__VW, c[r][v]);
}

/* All rows of one strip of nv vectors: full FA__MR blocks, then the rest. */
static FLASHATTN__FORCEINLINE void fa__kernel_strip(const int nv, int M, int K, const float *A, int lda,
                                                    const float *B, int ldb, float *C, int ldc, int acc)
{
    int i;
    for (i = 0; i + FA__MR <= M; i += FA__MR)
        fa__kernel(FA__MR, nv, K, A + (size_t)i * (size_t)lda, lda, B, ldb, C + (size_t)i * (size_t)ldc, ldc, acc);
    A += (size_t)i * (size_t)lda;
    C += (size_t)i * (size_t)ldc;
    switch (M - i) { /* one constant-size instance per remainder */
#define FA__KERNEL_REST(n) \
    case n: fa__kernel(n, nv, K, A, lda, B, ldb, C, ldc, acc); break;
#if FA__MR > 6
    FA__KERNEL_REST(11) FA__KERNEL_REST(10) FA__KERNEL_REST(9) FA__KERNEL_REST(8) FA__KERNEL_REST(7)
    FA__KERNEL_REST(6)
#endif
    FA__KERNEL_REST(5) FA__KERNEL_REST(4) FA__KERNEL_REST(3) FA__KERNEL_REST(2) FA__KERNEL_REST(1)
#undef FA__KERNEL_REST
    default: break;
    }
}
#endif

/* pack: room for K x 32 floats (w->pack); unused by the portable loops. */
static void fa__gemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                     int ldc, int accumulate, float *pack)
{
    int i, j;
    FLASHATTN_ASSERT(N % 16 == 0);
#if FA__VW
    /* One strip of 2 vectors of B (16 KiB at K = 128, AVX-512) at a time
       stays in L1 while the rows of A stream past. The strip is first
       copied to contiguous memory: in place, its rows sit ldb floats apart
       (512 bytes at Bc = 128), so they would all fall in a quarter of the
       L1 sets and evict each other. N % (2 FA__VW) = 16 leaves one
       single-vector strip (AVX-512 only). */
    for (j = 0; j < N; j += 2 * FA__VW) {
        int nv = N - j >= 2 * FA__VW ? 2 : 1, wdt = nv * FA__VW, ldp = ldb, k;
        const float *b = B + j;
        if (M > FA__MR && pack) { /* (one block of rows reads the strip once: no gain) */
            /* vector moves, not memcpy: a call per 64-byte row costs more
               than the copy itself [cpu-avx2] */
            for (k = 0; k < K; ++k) {
                FA__VSTORE(pack + (size_t)k * (size_t)wdt, FA__VLOAD(b + (size_t)k * (size_t)ldb));
                if (nv == 2)
                    FA__VSTORE(pack + (size_t)k * (size_t)wdt + FA__VW, FA__VLOAD(b + (size_t)k * (size_t)ldb + FA__VW));
            }
            b = pack;
            ldp = wdt;
        }
        if (nv == 2)
            fa__kernel_strip(2, M, K, A, lda, b, ldp, C + j, ldc, accumulate);
        else
            fa__kernel_strip(1, M, K, A, lda, b, ldp, C + j, ldc, accumulate);
    }
    (void)i;
#else
    (void)pack;
    /* portable: i-k-j order so the inner loop is a contiguous axpy that the
       compiler vectorizes */
    for (i = 0; i < M; ++i) {
        float *FLASHATTN__RESTRICT c = C + (size_t)i * (size_t)ldc;
        int k;
        if (!accumulate)
            for (j = 0; j < N; ++j)
                c[j] = 0.0f;
        for (k = 0; k < K; ++k) {
            const float a = A[(size_t)i * (size_t)lda + (size_t)k];
            const float *FLASHATTN__RESTRICT b = B + (size_t)k * (size_t)ldb;
            for (j = 0; j < N; ++j)
                c[j] += a * b[j];
        }
    }
#endif
}

/* ---- loading and storing rows ------------------------------------------- */
#if FA__VW
/* FA__VW elements of type dt at p, as f32. The conversions are exact (f16:
   the F16C / AVX-512F / NEON instruction, which gives the bits of
   fa__f16_to_f32; bf16: a 16-bit shift), so vector and scalar code agree. */
static FLASHATTN__FORCEINLINE fa__vf fa__vload_as(const void *p, const fa_dtype dt)
{
    if (dt == FA_F32)
        return FA__VLOAD((const float *)p);
#if FLASHATTN__NEON
    {
        uint16x4_t h = vld1_u16((const uint16_t *)p);
        if (dt == FA_F16)
            return vcvt_f32_f16(vreinterpret_f16_u16(h));
        return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    }
#elif FLASHATTN__AVX512
    {
        __m256i h = _mm256_loadu_si256((const __m256i *)p);
        if (dt == FA_F16)
            return _mm512_maskz_cvtph_ps(FA__VALL, h);
        return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(FA__VALL, _mm512_maskz_cvtepu16_epi32(FA__VALL, h), 16));
    }
#else
    {
        __m128i h = _mm_loadu_si128((const __m128i *)p);
        if (dt == FA_BF16)
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#if defined(__F16C__)
        return _mm256_cvtph_ps(h);
#else /* AVX2 without F16C: lane by lane */
        {
            float f[8];
            int i;
            for (i = 0; i < 8; ++i)
                f[i] = fa__f16_to_f32(((const uint16_t *)p)[i]);
            return _mm256_loadu_ps(f);
        }
#endif
    }
#endif
}
#endif

/* dst[0 .. n) = src[0 .. n) * mul, widened to f32: whole vectors through
   fa__vload_as, then a scalar tail. */
static void fa__load_row(const void *src, fa_dtype dt, int n, float mul, float *dst)
{
    int c = 0;
#if FA__VW
    const size_t es = dt == FA_F32 ? 4 : 2;
    const fa__vf vm = FA__VSET1(mul);
    for (; c + FA__VW <= n && dt != FA_E4M3; c += FA__VW)
        FA__VSTORE(dst + c, FA__VMUL(fa__vload_as((const char *)src + (size_t)c * es, dt), vm));
#endif
    if (dt == FA_E4M3) { /* FP8: mul carries the descale (>>impl-fp8) */
        const uint8_t *s = (const uint8_t *)src;
        for (; c < n; ++c)
            dst[c] = fa__e4m3_to_f32(s[c]) * mul;
    } else if (dt == FA_F32) {
        const float *s = (const float *)src;
        for (; c < n; ++c)
            dst[c] = s[c] * mul;
    } else if (dt == FA_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (; c < n; ++c)
            dst[c] = fa__f16_to_f32(s[c]) * mul;
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (; c < n; ++c)
            dst[c] = fa__bf16_to_f32(s[c]) * mul;
    }
}

static void fa__store_row(void *dst, fa_dtype dt, int n, const float *src)
{
    int c;
    if (dt == FA_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else if (dt == FA_F16)
        for (c = 0; c < n; ++c)
            ((uint16_t *)dst)[c] = fa__f32_to_f16(src[c]);
    else
        for (c = 0; c < n; ++c)
            ((uint16_t *)dst)[c] = fa__f32_to_bf16(src[c]);
}

/* Ask the cache for the bytes [p, p + bytes) ahead of their use. */
static FLASHATTN__FORCEINLINE void fa__prefetch_level(const void *p, int bytes, const int l2)
{
#if defined(__GNUC__) || defined(__clang__)
    int off;
    for (off = 0; off < bytes; off += 64)
        if (l2) /* (the locality must be a constant) */
            __builtin_prefetch((const char *)p + off, 0, 1);
        else
            __builtin_prefetch((const char *)p + off, 0, 3);
#else
    (void)p; (void)bytes; (void)l2;
#endif
}
static FLASHATTN__FORCEINLINE void fa__prefetch_bytes(const void *p, int bytes) { fa__prefetch_level(p, bytes, 0); }
/* The same into L2 only: what a later pass reads (decode's next tile) */
static FLASHATTN__FORCEINLINE void fa__prefetch_l2(const void *p, int bytes) { fa__prefetch_level(p, bytes, 1); }

/* ---- few query rows: K and V read where they lie --------------------------
   With at most FA__FEW_ROWS query rows per KV head (decode: the GQA group
   of one new token) each K and V element takes part in only a few FMAs, so
   the tile is bound by reading K and V from memory, not by arithmetic.
   Converting the tile to f32 first, as the many-row path does for fa__gemm,
   would read every element, write it back as f32 and read it again; here
   each K and V row is read once, in its storage type, FA__VW elements at a
   time, converted in registers (f16: the F16C / AVX-512F vcvtph2ps
   instruction, exact like fa__f16_to_f32; bf16: a 16-bit shift, exact; f32:
   a plain load) and used at once:
       S[i, c]   = sum_x Q~[i, x] k_c[x]     fa__dots_kernel, 4 keys at a time
       O~[i, x] += sum_c P~[i, c] v_c[x]     fa__pv_kernel, a strip of x at a time
   The rows are given as pointers (row c of the tile at rows[c]), so paged
   and strided caches cost nothing extra. Every sum runs in a fixed order:
   the results are bit-identical run to run. nr and dt are constants in
   each instance of the kernels (FA__FEW_ROWS_CALL). */
#if FA__VW
/* Elements x .. x+FA__VW-1 of a row of type dt of which only n exist from
   x on: the lanes past them read as 0, and nothing past the row's end is
   touched (its last elements are copied to a zeroed buffer first). Called
   with n = FA__VW (a constant) inside a row, with n < FA__VW at its end. */
static FLASHATTN__FORCEINLINE fa__vf fa__vload_n(const void *row, const fa_dtype dt, int x, const int n)
{
    const size_t es = dt == FA_F32 ? 4 : 2;
    const char *p = (const char *)row + (size_t)x * es;
    float buf[FA__VW]; /* room for FA__VW floats, or halves */
    if (n >= FA__VW)
        return fa__vload_as(p, dt);
    memset(buf, 0, sizeof buf);
    memcpy(buf, p, (size_t)n * es);
    return fa__vload_as(buf, dt);
}

/* The sums of all lanes of a0, a1, a2 and a3, as one vector of 4 floats:
   two pairs of vectors are interleaved and added, leaving the four partial
   sums side by side in every 128-bit lane, then the lanes are added. (Four
   separate horizontal sums would cost twice the instructions.) NEON: two
   rounds of pairwise adds. */
#if FLASHATTN__NEON
typedef float32x4_t fa__v4;
#define FA__V4STORE(p, v) vst1q_f32(p, v)
#else
typedef __m128 fa__v4;
#define FA__V4STORE(p, v) _mm_storeu_ps(p, v)
#endif
static FLASHATTN__FORCEINLINE fa__v4 fa__vhsum4(fa__vf a0, fa__vf a1, fa__vf a2, fa__vf a3)
{
#if FLASHATTN__NEON
    return vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
#else
#if FLASHATTN__AVX512
    __m512 t0 = _mm512_add_ps(_mm512_maskz_unpacklo_ps(FA__VALL, a0, a1), _mm512_maskz_unpackhi_ps(FA__VALL, a0, a1));
    __m512 t1 = _mm512_add_ps(_mm512_maskz_unpacklo_ps(FA__VALL, a2, a3), _mm512_maskz_unpackhi_ps(FA__VALL, a2, a3));
    __m512 u = _mm512_add_ps(_mm512_maskz_shuffle_ps(FA__VALL, t0, t1, 0x44), _mm512_maskz_shuffle_ps(FA__VALL, t0, t1, 0xee));
    __m256 h = _mm256_add_ps(FA__VHALF(u, 0), FA__VHALF(u, 1));
#else
    __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
    __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
    __m256 h = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, 0x44), _mm256_shuffle_ps(t0, t1, 0xee));
#endif
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
#endif
}

/* Query rows per pass of fa__dots_kernel: its 4 x 4 accumulators, 4 key
   vectors and a Q vector take 21 of the 32 zmm (NEON: v) registers; AVX2
   has 16 ymm, so 2 rows per pass (13), and K is read again from L1 for the
   others. */
#if FLASHATTN__AVX512 || FLASHATTN__NEON
#define FA__DOT_ROWS 4
#else
#define FA__DOT_ROWS 2
#endif

/* One step of fa__dots_kernel: elements x .. x+FA__VW-1 (n of them exist)
   of the 4 keys k[] into acc[i][j] += Q[i] . k_j. */
static FLASHATTN__FORCEINLINE void fa__dots_step(const int nr, const fa_dtype dt, fa__vf acc[][4],
                                                 const void *const *k, const float *Q, int ldq, int x, const int n)
{
    fa__vf kv[4];
    int i, j;
    FA__UNROLL for (j = 0; j < 4; ++j)
        kv[j] = fa__vload_n(k[j], dt, x, n);
    FA__UNROLL for (i = 0; i < nr; ++i) {
        fa__vf q = FA__VLOAD(Q + (size_t)i * (size_t)ldq + x);
        FA__UNROLL for (j = 0; j < 4; ++j)
            acc[i][j] = FA__VFMA(q, kv[j], acc[i][j]);
    }
}

/* S[i, c] = Q[i] . k_c for i < nr (Q rows ldq apart, zero-padded to a
   multiple of FA__VW) and c < nc. Four keys at a time, so that one
   fa__vhsum4 finishes four dot products; a short last group repeats its
   last key, and S gets all 4 columns anyway (S rows are padded to 16: the
   caller masks columns >= nc). The rows pf[0 .. npf) (the next tile's) are
   requested from memory along the way, pf_bytes each. */
static FLASHATTN__FORCEINLINE void fa__dots_kernel(const int nr, const fa_dtype dt, int d, int nc, const float *Q,
                                                   int ldq, const void *const *rows, float *S, int lds,
                                                   const void *const *pf, int npf, int pf_bytes)
{
    int c, i, j, x;
    for (c = 0; c < nc; c += 4) {
        fa__vf acc[FA__FEW_ROWS][4];
        const void *k[4];
        for (j = c; j < c + 4 && j < npf; ++j)
            fa__prefetch_bytes(pf[j], pf_bytes);
        FA__UNROLL for (j = 0; j < 4; ++j)
            k[j] = rows[c + j < nc ? c + j : nc - 1];
        FA__UNROLL for (i = 0; i < nr; ++i)
            FA__UNROLL for (j = 0; j < 4; ++j)
                acc[i][j] = FA__VZERO();
        for (x = 0; x + FA__VW <= d; x += FA__VW)
            fa__dots_step(nr, dt, acc, k, Q, ldq, x, FA__VW);
        if (x < d)
            fa__dots_step(nr, dt, acc, k, Q, ldq, x, d - x);
        FA__UNROLL for (i = 0; i < nr; ++i)
            FA__V4STORE(S + (size_t)i * (size_t)lds + c, fa__vhsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    }
}

/* O[i, x .. x + nv FA__VW) += sum_c P[i, c] v_c[same] for i < nr, c < nc:
   the strip of every row's O stays in registers while the nc V rows stream
   past; n elements exist in the strip's last vector. The widest strip,
   FA__PV_VECS vectors: AVX-512 4 rows x 4 = 16 zmm accumulators, 4 for the
   V vectors, 1 broadcast; AVX2 4 x 3 = 12 accumulators, 3 for V, 1
   broadcast: all 16 ymm. Each accumulator is a chain of FMAs, one per V
   row, so 12 chains keep two FMA pipes busy through an FMA's latency where
   8 only just do [cpu-decode-avx2]. NEON: 4 x 2 (not measured wider). */
#if FLASHATTN__AVX512
#define FA__PV_VECS 4
#elif FLASHATTN__AVX2
#define FA__PV_VECS 3
#else
#define FA__PV_VECS 2
#endif
static FLASHATTN__FORCEINLINE void fa__pv_strip(const int nr, const int nv, const fa_dtype dt, int nc, const float *P,
                                                int ldp, const void *const *rows, int x, const int n, float *O,
                                                int ldo, const void *const *pf, int npf, int pf_bytes,
                                                const int streams, const char *sp, int nsp, int sp_step)
{
    fa__vf acc[FA__FEW_ROWS][FA__PV_VECS], vv[FA__PV_VECS];
    int c, i, v;
    FA__UNROLL for (i = 0; i < nr; ++i)
        FA__UNROLL for (v = 0; v < nv; ++v)
            acc[i][v] = FA__VLOAD(O + (size_t)i * (size_t)ldo + x + v * FA__VW);
    for (c = 0; c < nc; ++c) {
        if (c < npf)
            fa__prefetch_bytes(pf[c], pf_bytes);
        if (streams && c < nsp)
            fa__prefetch_l2(sp + (size_t)c * (size_t)sp_step, sp_step);
        FA__UNROLL for (v = 0; v < nv; ++v)
            vv[v] = fa__vload_n(rows[c], dt, x + v * FA__VW, v == nv - 1 ? n : FA__VW);
        FA__UNROLL for (i = 0; i < nr; ++i) {
            fa__vf p = FA__VSET1(P[(size_t)i * (size_t)ldp + (size_t)c]);
            FA__UNROLL for (v = 0; v < nv; ++v)
                acc[i][v] = FA__VFMA(p, vv[v], acc[i][v]);
        }
    }
    FA__UNROLL for (i = 0; i < nr; ++i)
        FA__UNROLL for (v = 0; v < nv; ++v)
            FA__VSTORE(O + (size_t)i * (size_t)ldo + x + v * FA__VW, acc[i][v]);
}

/* O[i, :dv] += sum_c P[i, c] v_c: strips of FA__PV_VECS vectors, then one
   of 2 and one of 1 for what is left (two vectors share a strip: a strip
   of one has a quarter of the chains); each call names its width as a
   constant, so that the strip's loops unroll. The last vector may be partial
   when dv is not a multiple of FA__VW; O rows are padded, so a vector
   never runs into the next row. pf as for dots, while the first strip
   streams. sp_bytes (0: none) from sp on are requested from memory in
   address order, an equal share at every step of every strip (a few
   prefetches at each step cost less than a burst [cpu-decode-avx2]); only
   with FA__FEW_ROWS rows (decode's), whose strips have instances that
   stream, so that the others keep the loop they had. */
static FLASHATTN__FORCEINLINE int fa__pv_width(int left) /* the next strip's vectors */
{
    return left >= FA__PV_VECS ? FA__PV_VECS : left >= 2 ? 2 : 1;
}
static FLASHATTN__FORCEINLINE void fa__pv_kernel(const int nr, const fa_dtype dt, int dv, int nc, const float *P,
                                                 int ldp, const void *const *rows, float *O, int ldo,
                                                 const void *const *pf, int npf, int pf_bytes, const char *sp,
                                                 int sp_bytes)
{
    int x = 0, left = (dv + FA__VW - 1) / FA__VW; /* vectors left */
    int t, strips = 0, step = 64; /* step: bytes requested at each of the strips' nc steps */
    for (t = left; t > 0; t -= fa__pv_width(t))
        ++strips;
    if (sp_bytes > 0 && nc > 0)
        step = ((sp_bytes + strips * nc - 1) / (strips * nc) + 63) & ~63;
    while (left > 0) {
        const int nv = fa__pv_width(left);
        const int last = dv - x - (nv - 1) * FA__VW, n = last < FA__VW ? last : FA__VW; /* in its last vector */
        const int nsp = (sp_bytes + step - 1) / step; /* steps of this strip that request */
#define FA__PV_STRIP(nv_, st_) fa__pv_strip(nr, nv_, dt, nc, P, ldp, rows, x, n, O, ldo, pf, npf, pf_bytes, st_, sp, nsp, step)
#define FA__PV_WIDTHS(st_)                                                     \
    do {                                                                       \
        if (nv == FA__PV_VECS)                                                 \
            FA__PV_STRIP(FA__PV_VECS, st_);                                    \
        else if (nv == 2)                                                      \
            FA__PV_STRIP(2, st_);                                              \
        else                                                                   \
            FA__PV_STRIP(1, st_);                                              \
    } while (0)
        if (nr == FA__FEW_ROWS && nsp > 0) /* only decode's 4-row heads stream: their own instances */
            FA__PV_WIDTHS(1);
        else
            FA__PV_WIDTHS(0);
#undef FA__PV_WIDTHS
#undef FA__PV_STRIP
        x += nv * FA__VW;
        left -= nv;
        npf = 0;
        if (sp_bytes > 0) {
            sp += (size_t)nc * (size_t)step;
            sp_bytes -= nc * step;
        }
    }
}

/* CALL(nr, dt) with both as constants: one unrolled instance each. */
#define FA__FEW_ROWS_CALL(nr, dt, CALL)                                        \
    switch ((nr) * 3 + ((dt) == FA_F16 ? 1 : (dt) == FA_BF16 ? 2 : 0)) {      \
    case 3: CALL(1, FA_F32); break;  case 4: CALL(1, FA_F16); break;          \
    case 5: CALL(1, FA_BF16); break; case 6: CALL(2, FA_F32); break;          \
    case 7: CALL(2, FA_F16); break;  case 8: CALL(2, FA_BF16); break;         \
    case 9: CALL(3, FA_F32); break;  case 10: CALL(3, FA_F16); break;         \
    case 11: CALL(3, FA_BF16); break; case 12: CALL(4, FA_F32); break;        \
    case 13: CALL(4, FA_F16); break; default: CALL(4, FA_BF16); break;        \
    }

/* The dot products for decode, keys outside and KV heads inside
   (fa__dots_heads below; why: fa__decode_tile_few): nr <= 4 rows against
   nk = 1, 2 or 3 K rows of one head, kr[0 .. nk) (S columns 0 .. nk-1),
   each key's four sums finished by one fa__vhsum4 (rows past nr are zero).
   The keys share each Q vector's load: at 4 rows one key's 64 FMAs come
   with 80 loads (64 of Q), which two loads a cycle make the bound; two
   keys' 128 FMAs come with 96 [cpu-decode-avx2]. Three keys
   (FA__DOT_COL_KEYS, the most) keep 12 accumulators, 3 K vectors and the
   Q vector: all 16 AVX2 registers, and 12 chains of FMAs where 8 only just
   cover an FMA's latency on two pipes. FA__KEEP_REG keeps the compiler from
   folding that load into every FMA again as memory operands. */
#define FA__DOT_COL_KEYS 3
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define FA__KEEP_REG(v) __asm__("" : "+x"(v))
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__aarch64__)
#define FA__KEEP_REG(v) __asm__("" : "+w"(v))
#else
#define FA__KEEP_REG(v) (void)0
#endif
static FLASHATTN__FORCEINLINE void fa__dot_col_step(const int nr, const int nk, const fa_dtype dt, fa__vf (*acc)[4],
                                                    const void *const *kr, const float *Q, int ldq, int x,
                                                    int n)
{
    fa__vf kv[FA__DOT_COL_KEYS], q;
    int i, k;
    FA__UNROLL for (k = 0; k < nk; ++k)
        kv[k] = fa__vload_n(kr[k], dt, x, n);
    FA__UNROLL for (i = 0; i < nr; ++i) {
        q = FA__VLOAD(Q + (size_t)i * (size_t)ldq + x);
        if (nk >= 2)
            FA__KEEP_REG(q);
        FA__UNROLL for (k = 0; k < nk; ++k)
            acc[k][i] = FA__VFMA(q, kv[k], acc[k][i]);
    }
}
static FLASHATTN__FORCEINLINE void fa__dot_col(const int nr, const int nk, const fa_dtype dt, int d, const float *Q,
                                               int ldq, const void *const *kr, float *S, int lds)
{
    fa__vf acc[FA__DOT_COL_KEYS][4];
    float out[FA__DOT_COL_KEYS][4];
    int i, k, x;
    FA__UNROLL for (k = 0; k < nk; ++k)
        FA__UNROLL for (i = 0; i < 4; ++i)
            acc[k][i] = FA__VZERO();
    for (x = 0; x + FA__VW <= d; x += FA__VW)
        fa__dot_col_step(nr, nk, dt, acc, kr, Q, ldq, x, FA__VW);
    if (x < d) /* Q rows are zero-padded: the lanes past d add 0 */
        fa__dot_col_step(nr, nk, dt, acc, kr, Q, ldq, x, d - x);
    FA__UNROLL for (k = 0; k < nk; ++k)
        FA__V4STORE(out[k], fa__vhsum4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]));
    FA__UNROLL for (i = 0; i < nr; ++i)
        FA__UNROLL for (k = 0; k < nk; ++k)
            S[(size_t)i * (size_t)lds + (size_t)k] = out[k][i];
}
#endif

/* S[nr, lds] = Q[nr, ldq] K^T, K rows of type dt at rows[0 .. nc), and
   O[nr, ldo] += P[nr, ldp] V, V rows at rows[0 .. nc); nr <= FA__FEW_ROWS;
   pf[0 .. npf) (pf_bytes each) are prefetched along the way. The portable
   loops convert each row to f32 into buf [max(d, dv)] first. */
static void fa__dots_rows(int nr, fa_dtype dt, int d, int nc, const float *Q, int ldq, const void *const *rows,
                          float *S, int lds, float *buf, const void *const *pf, int npf, int pf_bytes)
{
#if FA__VW
    int i, n;
    (void)buf;
    for (i = 0; i < nr; i += n) {
        const float *Qi = Q + (size_t)i * (size_t)ldq;
        float *Si = S + (size_t)i * (size_t)lds;
        n = nr - i < FA__DOT_ROWS ? nr - i : FA__DOT_ROWS;
#define FA__DOTS(n_, t_) fa__dots_kernel(n_, t_, d, nc, Qi, ldq, rows, Si, lds, pf, i == 0 ? npf : 0, pf_bytes)
        FA__FEW_ROWS_CALL(n, dt, FA__DOTS)
#undef FA__DOTS
    }
#else
    int c, i, x;
    for (c = 0; c < nc; ++c) {
        if (c < npf)
            fa__prefetch_bytes(pf[c], pf_bytes);
        fa__load_row(rows[c], dt, d, 1.0f, buf);
        for (i = 0; i < nr; ++i) {
            float acc = 0.0f;
            for (x = 0; x < d; ++x)
                acc += Q[(size_t)i * (size_t)ldq + (size_t)x] * buf[x];
            S[(size_t)i * (size_t)lds + (size_t)c] = acc;
        }
    }
#endif
}

static void fa__pv_rows(int nr, fa_dtype dt, int dv, int nc, const float *P, int ldp, const void *const *rows,
                        float *O, int ldo, float *buf, const void *const *pf, int npf, int pf_bytes, const char *sp,
                        int sp_bytes)
{
#if FA__VW
    (void)buf;
#define FA__PV(n_, t_) fa__pv_kernel(n_, t_, dv, nc, P, ldp, rows, O, ldo, pf, npf, pf_bytes, sp, sp_bytes)
    FA__FEW_ROWS_CALL(nr, dt, FA__PV)
#undef FA__PV
#else
    int c, i, x;
    (void)sp; /* (the stream is for decode's SIMD loops only: FA__DECODE_MULTI) */
    (void)sp_bytes;
    for (c = 0; c < nc; ++c) {
        if (c < npf)
            fa__prefetch_bytes(pf[c], pf_bytes);
        fa__load_row(rows[c], dt, dv, 1.0f, buf);
        for (i = 0; i < nr; ++i) {
            const float p = P[(size_t)i * (size_t)ldp + (size_t)c];
            float *FLASHATTN__RESTRICT o = O + (size_t)i * (size_t)ldo;
            for (x = 0; x < dv; ++x)
                o[x] += p * buf[x];
        }
    }
#endif
}

/* Decode: S = Q K^T for the nh KV heads of a key tile, every head with
   nr query rows. Key c of head j lies at rows[c] + j * hbytes; its query
   rows are Q + j * qstep rows (S likewise). The loop runs over keys outside
   and heads inside: in a packed cache that is address order (see
   fa__decode_tile_few for why that matters). After key c of head j these
   are requested from memory: the K bytes of the same head FA__K_AHEAD
   steps on (rows[c + FA__K_AHEAD steps], when below nk; rows holds nk >= nc
   + 2 FA__K_AHEAD keys), with v_now the vbytes of the same key's V row
   (vrows[c] + j * vhbytes), and into L2 the next tile's V row of that
   place (vrows[nc + c], when below nv; vrows holds nv >= nc keys): the
   hardware prefetcher alone keeps too few lines in flight for a core that
   computes between its loads [cpu-decode-avx2]. A step takes
   FA__DECODE_KEYS keys of a head (fa__dot_col). Portable loops: row to f32
   in buf first (and nothing of the next tile).
   FA__HEAD_DIMS(n, CALL, ...) runs CALL(..., n) with n a constant for the
   usual head sizes 64 and 128, so the loop over a row unrolls (a few
   percent faster [cpu-head-dims]). */
#define FA__K_AHEAD 2
/* Several keys a step in the dot pass, and the next tile requested by
   both passes (fa__decode_tile_few): with FA__FEW_ROWS rows a head and rows
   of at least 8 vectors. Measured slower with fewer rows (less work a key
   to hide the extra memory traffic under) and with 4-vector rows (AVX-512
   at d 64) [cpu-decode-avx2]. FA__DECODE_KEYS: the keys a step, then three
   from 128 elements a row (measured faster there; slower at AVX2's d 64),
   else two; one without FA__DECODE_MULTI. */
#define FA__DECODE_MULTI(nr, d) (FA__VW > 0 && (nr) == FA__FEW_ROWS && (d) >= 8 * FA__VW)
#define FA__DECODE_KEYS(nr, d) (!FA__DECODE_MULTI(nr, d) ? 1 : (d) >= 128 ? FA__DOT_COL_KEYS : 2)
#define FA__HEAD_DIMS(n, CALL, a_, b_)                                         \
    do {                                                                       \
        if ((n) == 64) {                                                       \
            CALL(a_, b_, 64);                                                  \
        } else if ((n) == 128) {                                               \
            CALL(a_, b_, 128);                                                 \
        } else {                                                               \
            CALL(a_, b_, n);                                                   \
        }                                                                      \
    } while (0)
static void fa__dots_heads(int nr, fa_dtype dt, int d, int nc, int nk, int nh, const float *Q, int ldq, int qstep,
                           const void *const *rows, size_t hbytes, float *S, int lds, float *buf,
                           const void *const *vrows, size_t vhbytes, int vbytes, int v_now, int nv)
{
    const int kbytes = d * fa__dtype_size(dt);
    int c, j;
#if FA__VW
    int i, kn, pc, ph; /* pc, ph: the next (key, head) row to request, in address order */
    (void)buf;
#define FA__DOTH_D(n_, t_, d_)                                                                     \
    for (c = 0; c < nc; c += kn) {                                                                  \
        kn = nc - c < FA__DECODE_KEYS(n_, d_) ? nc - c : FA__DECODE_KEYS(n_, d_);                  \
        pc = c;                                                                                     \
        ph = 0;                                                                                     \
        for (j = 0; j < nh; ++j) {                                                                  \
            const size_t j_ = (size_t)j;                                                            \
            const float *q_ = Q + j_ * (size_t)qstep * (size_t)ldq;                                 \
            float *s_ = S + j_ * (size_t)qstep * (size_t)lds + c;                                   \
            const void *kr_[FA__DOT_COL_KEYS]; /* (past kn: the first key again, never read) */      \
            FA__UNROLL for (i = 0; i < FA__DOT_COL_KEYS; ++i)                                       \
                kr_[i] = (const char *)rows[c + (i < kn ? i : 0)] + j_ * hbytes;                    \
            if (kn == 3)                                                                            \
                fa__dot_col(n_, 3, t_, d_, q_, ldq, kr_, s_, lds);                                  \
            else if (kn == 2)                                                                       \
                fa__dot_col(n_, 2, t_, d_, q_, ldq, kr_, s_, lds);                                  \
            else                                                                                    \
                fa__dot_col(n_, 1, t_, d_, q_, ldq, kr_, s_, lds);                                  \
            for (i = 0; i < kn; ++i) { /* the step's kn (key, head) rows in address order */           \
                if (v_now)                                                                          \
                    fa__prefetch_bytes((const char *)vrows[pc] + (size_t)ph * vhbytes, vbytes);     \
                if (pc + kn * FA__K_AHEAD < nk)                                                     \
                    fa__prefetch_bytes((const char *)rows[pc + kn * FA__K_AHEAD] + (size_t)ph * hbytes, kbytes); \
                if (nc + pc < nv)                                                                   \
                    fa__prefetch_l2((const char *)vrows[nc + pc] + (size_t)ph * vhbytes, vbytes);   \
                if (++ph == nh) {                                                                   \
                    ph = 0;                                                                         \
                    ++pc;                                                                           \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }
#define FA__DOTH(n_, t_) FA__HEAD_DIMS(d, FA__DOTH_D, n_, t_)
    FA__FEW_ROWS_CALL(nr, dt, FA__DOTH)
#undef FA__DOTH
#undef FA__DOTH_D
#else
    int i, x;
    (void)nv;
    for (c = 0; c < nc; ++c)
        for (j = 0; j < nh; ++j) {
            if (v_now)
                fa__prefetch_bytes((const char *)vrows[c] + (size_t)j * vhbytes, vbytes);
            if (c + FA__K_AHEAD < nk)
                fa__prefetch_bytes((const char *)rows[c + FA__K_AHEAD] + (size_t)j * hbytes, kbytes);
            fa__load_row((const char *)rows[c] + (size_t)j * hbytes, dt, d, 1.0f, buf);
            for (i = 0; i < nr; ++i) {
                const float *q = Q + ((size_t)j * (size_t)qstep + (size_t)i) * (size_t)ldq;
                float acc = 0.0f;
                for (x = 0; x < d; ++x)
                    acc += q[x] * buf[x];
                S[((size_t)j * (size_t)qstep + (size_t)i) * (size_t)lds + (size_t)c] = acc;
            }
        }
#endif
}

/* ---- the call's context -------------------------------------------------- */
typedef struct fa__attn {
    fa_problem r;                      /* resolved problem */
    fa_tensor q, k, v, o;              /* strides resolved (decode: k, v = the cache) */
    fa_tensor dout, dq, dk, dv, knew, vnew;
    float *lse;                        /* forward output / backward input (as float *) */
    int group;                         /* heads_q / heads_kv query heads per KV head */
    int d, dv_, dp, dvp, bcp;          /* d, dv and the padded widths */
    int br;                            /* query rows per Q tile: FA__BR, the backward FA__BR_BWD */
    int tr, tc;                        /* Q tiles / K tiles per sequence (the max with varlen) */
    int bm;                            /* a block mask is in use (section 5, "Block masks") */
    int bq, bk, qblocks, kblocks;      /* its block sizes, blocks per mask row */
    int qsub, ksub;                    /* CPU tiles per query / key block (0: no block mask) */
    int qwords, kwords;                /* 32-bit words of one row of query / key block bits */
    uint32_t *ws_kq;                   /* backward: per mask and key block, the query blocks visiting it */
    int64_t total_q;                   /* rows of L per head */
    float q_fold;                      /* Q is multiplied by this when loaded */
    float cap2;                        /* softcap * log2 e, 0 = none */
    uint32_t drop_thr;                 /* dropout threshold, 0 = none */
    float drop_scale;                  /* 1 / (1 - p) */
    int splits;                        /* decode */
    float *ws_D;                       /* backward: D; decode: partial O */
    float *ws_L;                       /* decode: partial L */
    char *ws_workers;                  /* per-worker scratch */
    size_t worker_bytes;
} fa__attn;

static void fa__attn_init(fa__attn *a, const fa_problem *r, int br)
{
    memset(a, 0, sizeof *a);
    a->r = *r;
    a->br = br;
    a->group = r->heads_q / r->heads_kv;
    a->d = r->head_dim;
    a->dv_ = r->head_dim_v;
    a->dp = FA__PAD(r->head_dim);
    a->dvp = FA__PAD(r->head_dim_v);
    a->bcp = FA__PAD(FA__BC);
    a->tr = fa__blocks(r->seqlen_q, br);
    a->tc = fa__blocks(r->seqlen_k, FA__BC);
    if (fa__has_block_mask(r)) { /* tiles never span two blocks: tiles per block times blocks */
        int64_t tr, tc;
        a->bm = 1;
        a->bq = r->block_mask.block_q;
        a->bk = r->block_mask.block_k;
        a->qblocks = fa__blocks(r->seqlen_q, a->bq);
        a->kblocks = fa__blocks(r->seqlen_k, a->bk);
        a->qsub = fa__blocks(a->bq < r->seqlen_q ? a->bq : r->seqlen_q, br);
        a->ksub = fa__blocks(a->bk < r->seqlen_k ? a->bk : r->seqlen_k, FA__BC);
        a->qwords = (a->qblocks + 31) / 32;
        a->kwords = (a->kblocks + 31) / 32;
        tr = (int64_t)a->qblocks * a->qsub; /* (too many tasks: refused by fa__task_count) */
        tc = (int64_t)a->kblocks * a->ksub;
        a->tr = tr > INT_MAX ? INT_MAX : (int)tr;
        a->tc = tc > INT_MAX ? INT_MAX : (int)tc;
    }
    a->total_q = r->cu_seqlens_q ? r->cu_seqlens_q[r->batch] : (int64_t)r->batch * r->seqlen_q;
    /* S2 = log2(e) * S, with the constant folded into Q (one multiply per
       element of Q instead of one per score). With a softcap, the scores go
       through tanh first: S2 = (c log2 e) * tanh(Q (scale / c) . k). */
    if (r->softcap > 0.0f) {
        a->q_fold = r->scale / r->softcap;
        a->cap2 = (float)((double)r->softcap * FA__LOG2E);
    } else {
        a->q_fold = (float)((double)r->scale * FA__LOG2E);
    }
    a->drop_thr = fa__dropout_threshold(r->dropout_p);
    a->drop_scale = 1.0f / (1.0f - r->dropout_p);
}

/* Where sequence b lives and how long it is. */
typedef struct fa__seq {
    int b;
    int sq, sk;          /* queries and keys of this sequence */
    int off;             /* sk - sq: query row i sits at key position i + off */
    int64_t q_b, q_row0; /* q row i is at batch q_b, row q_row0 + i */
    int64_t k_b, k_row0; /* same for k / v (unless paged) */
} fa__seq;

static void fa__seq_info(const fa__attn *a, int b, fa__seq *s)
{
    const fa_problem *r = &a->r;
    s->b = b;
    if (r->cu_seqlens_q) {
        s->q_b = 0;
        s->q_row0 = r->cu_seqlens_q[b];
        s->sq = r->cu_seqlens_q[b + 1] - r->cu_seqlens_q[b];
    } else {
        s->q_b = b;
        s->q_row0 = 0;
        s->sq = r->seqlen_q;
    }
    if (r->cu_seqlens_k) {
        s->k_b = 0;
        s->k_row0 = r->cu_seqlens_k[b];
    } else {
        s->k_b = b;
        s->k_row0 = 0;
    }
    s->sk = (int)fa__cache_len(r, b);
    s->off = s->sk - s->sq;
}

static void *fa__at(const fa_tensor *t, int64_t b, int64_t row, int64_t h)
{
    return (char *)t->data + (size_t)fa__dtype_size(t->dtype) * (size_t)(b * t->batch_stride + row * t->seq_stride + h * t->head_stride);
}

/* Row n (key position within the sequence) of a K or V tensor. */
static const void *fa__kv_row(const fa__attn *a, const fa_tensor *t, const fa__seq *s, int n, int h)
{
    const fa_problem *r = &a->r;
    if (r->block_table) {
        int32_t page = r->block_table[(int64_t)s->b * r->pages_per_seq + n / r->page_size];
        return fa__at(t, page, n % r->page_size, h);
    }
    return fa__at(t, s->k_b, s->k_row0 + n, h);
}

/* Index of L[b, h, i] (or L[h, cu_seqlens_q[b] + i] with varlen). */
static int64_t fa__lse_index(const fa__attn *a, const fa__seq *s, int h, int i)
{
    if (a->r.cu_seqlens_q)
        return (int64_t)h * a->total_q + s->q_row0 + i;
    return ((int64_t)s->b * a->r.heads_q + h) * a->r.seqlen_q + i;
}

/* ---- per-worker scratch -------------------------------------------------- */
typedef struct fa__scratch {
    float *Q;      /* [Br, dp]  Q~ tile (Q * q_fold) */
    float *Kt;     /* [d, bcp]  K_j transposed */
    float *K;      /* [Bc, dp]  K_j row-major (backward dQ) */
    float *V;      /* [Bc, dvp] V_j (forward) */
    float *Vt;     /* [dv, bcp] V_j transposed (backward dP) */
    float *S;      /* [Br, bcp] scores, then P */
    float *T;      /* [Br, bcp] tanh of the scores (backward with softcap) */
    float *Z;      /* [Br, bcp] dropout multipliers 0 or 1/(1-p) (backward) */
    float *dP;     /* [Br, bcp] dP, then dS (backward) */
    float *Pt;     /* [Bc, Br]  transposed P or dS (backward) */
    float *dO;     /* [Br, dvp] dO tile (backward) */
    float *O;      /* [Br, max(dvp, dp)] O~ (forward), dQ accumulator (backward) */
    float *dK;     /* [Bc, dp] */
    float *dV;     /* [Bc, dvp] */
    float *m, *l;  /* [Br] row max, row sum (backward: L2 and D) */
    float *slope2; /* [Br] ALiBi slope of the row's head, times log2 e */
    int *pos;      /* [Br] key position i' = i + sk - sq of the row */
    int *head;     /* [Br] query head of the row */
    int *tok;      /* [Br] query index i within its sequence */
    float *row;    /* [8, max(d, dv) padded] conversion buffer */
    const void **krows, **vrows; /* [2 Bc] few rows: where the K / V rows of the tile lie, */
    int npf;                     /* then (from Bc on) npf rows of the next tile to prefetch */
    float *pack;   /* [max(Br, Bc, dp, dvp), 32] one strip of B, copied by fa__gemm */
    uint32_t *vis; /* [kwords] block mask: the key blocks the task's query block visits */
} fa__scratch;

enum { FA__SCRATCH_FWD = 0, FA__SCRATCH_BWD = 1 };

/* Lay out one worker's scratch at base (NULL: just measure). Every buffer
   starts on a 64-byte boundary. */
static size_t fa__scratch_layout(const fa__attn *a, int kind, char *base, fa__scratch *w)
{
    size_t off = 0;
    int br = a->br, bc = FA__BC, wide = a->dvp > a->dp ? a->dvp : a->dp;
#define FA__TAKE(ptr, type, count)                                          \
    do {                                                                    \
        (ptr) = base ? (type *)(void *)(base + off) : (type *)0;            \
        off += ((size_t)(count) * sizeof(type) + 63) / 64 * 64;             \
    } while (0)
    memset(w, 0, sizeof *w);
    FA__TAKE(w->Q, float, br * a->dp);
    FA__TAKE(w->Kt, float, a->d * a->bcp);
    FA__TAKE(w->S, float, br * a->bcp);
    FA__TAKE(w->O, float, br * wide);
    FA__TAKE(w->m, float, br);
    FA__TAKE(w->l, float, br);
    FA__TAKE(w->slope2, float, br);
    FA__TAKE(w->pos, int, br);
    FA__TAKE(w->head, int, br);
    FA__TAKE(w->tok, int, br);
    FA__TAKE(w->row, float, 8 * wide); /* 8 rows for the transposing loads */
    FA__TAKE(w->krows, const void *, 2 * bc);
    FA__TAKE(w->vrows, const void *, 2 * bc);
    {
        int kmax = br > bc ? br : bc;
        kmax = kmax > wide ? kmax : wide;
        FA__TAKE(w->pack, float, kmax * 32);
    }
    FA__TAKE(w->K, float, bc * a->dp);
    FA__TAKE(w->vis, uint32_t, a->kwords);
    if (kind == FA__SCRATCH_FWD) {
        FA__TAKE(w->V, float, bc * a->dvp);
    } else {
        FA__TAKE(w->Vt, float, a->dv_ * a->bcp);
        FA__TAKE(w->T, float, br * a->bcp);
        FA__TAKE(w->Z, float, br * a->bcp);
        FA__TAKE(w->dP, float, br * a->bcp);
        FA__TAKE(w->Pt, float, bc * br);
        FA__TAKE(w->dO, float, br * a->dvp);
        FA__TAKE(w->dK, float, bc * a->dp);
        FA__TAKE(w->dV, float, bc * a->dvp);
    }
#undef FA__TAKE
    return off;
}

static void fa__worker_scratch(const fa__attn *a, int kind, int worker, fa__scratch *w)
{
    fa__scratch_layout(a, kind, a->ws_workers + (size_t)worker * a->worker_bytes, w);
}

/* Round a workspace pointer up to 64 bytes; sizes include that slack. */
static char *fa__align64(void *p)
{
    return (char *)p + ((64 - (size_t)((uintptr_t)p & 63)) & 63);
}

/* ---- tiles ------------------------------------------------------------------ */

#if FLASHATTN__AVX2
/* An 8 x 8 block: rows src[r * lds + 0..7] -> columns dst[c * ldd + r]. */
static FLASHATTN__FORCEINLINE void fa__transpose8_avx2(const float *src, int lds, float *dst, int ldd, int nrows_out)
{
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds),
           r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds),
           r5 = _mm256_loadu_ps(src + 5 * lds), r6 = _mm256_loadu_ps(src + 6 * lds),
           r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    __m256 o[8];
    int i;
    o[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    o[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    o[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    o[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
    for (i = 0; i < nrows_out; ++i)
        _mm256_storeu_ps(dst + (size_t)i * (size_t)ldd, o[i]);
}
#endif

/* dst[c, r] = src[r, c] for r < nr, c < nc (src rows padded to 8 floats). */
static void fa__transpose_tile(const float *src, int lds, int nr, int nc, float *dst, int ldd)
{
    int r0 = 0, r, c;
#if FLASHATTN__AVX2
    for (; r0 + 8 <= nr; r0 += 8)
        for (c = 0; c < nc; c += 8)
            fa__transpose8_avx2(src + (size_t)r0 * (size_t)lds + c, lds, dst + (size_t)c * (size_t)ldd + r0, ldd,
                                nc - c < 8 ? nc - c : 8);
#endif
    for (r = r0; r < nr; ++r)
        for (c = 0; c < nc; ++c)
            dst[(size_t)c * (size_t)ldd + (size_t)r] = src[(size_t)r * (size_t)lds + (size_t)c];
}

/* Rows are loaded with the row FA__PF_AHEAD positions further already
   requested from memory: K/V rows of one head sit heads * d elements apart,
   too far for the hardware prefetcher, and a load loop that waits on each
   row in turn has only a few misses in flight (decode is bound by exactly
   that). n_end: the first row not to ask for. */
#define FA__PF_AHEAD 16
static FLASHATTN__FORCEINLINE void fa__prefetch_row(const fa__attn *a, const fa_tensor *t, int dim, const fa__seq *s,
                                                   int h, int n, int n_end);

#if FLASHATTN__AVX2
/* The stride in floats between f32 rows n and n+1 of t (head h) when rows
   lie an equal stride apart (not paged), so that a tile can be read where it
   lies; 0 when not. (V read in place this way was no faster: the product
   then waits on the same fetch. [cpu-avx2]) */
static int fa__f32_row_stride(const fa__attn *a, const fa_tensor *t, const fa__seq *s, int h, int n)
{
    ptrdiff_t lds;
    if (t->dtype != FA_F32 || a->r.block_table)
        return 0;
    lds = (const float *)fa__kv_row(a, t, s, n + 1, h) - (const float *)fa__kv_row(a, t, s, n, h);
    return lds > 0 && lds <= INT_MAX ? (int)lds : 0;
}
#endif

/* Rows n0 .. n0+nc-1 of a K or V tensor (head h) into Xt[dim, bcp],
   transposed; tile columns nc .. bcp-1 are zero. Rows are converted to f32
   eight at a time into tmp [8, dim padded to 8] and transposed as 8 x 8
   blocks (f32 rows an equal stride apart: transposed where they lie). */
static void fa__load_tile_t(const fa__attn *a, const fa_tensor *t, int dim, const fa__seq *s, int h,
                            int n0, int nc, int n_end, float *Xt, float *tmp)
{
    int c0, c, k, ld = (dim + 7) / 8 * 8;
    for (c0 = 0; c0 < nc; c0 += 8) {
        int cn = nc - c0 < 8 ? nc - c0 : 8;
#if FLASHATTN__AVX2
        int lds = cn == 8 && dim % 8 == 0 ? fa__f32_row_stride(a, t, s, h, n0 + c0) : 0;
        if (lds) { /* transposed where they lie, without the staging copy */
            const float *src = (const float *)fa__kv_row(a, t, s, n0 + c0, h);
            for (c = 0; c < 8; ++c)
                fa__prefetch_row(a, t, dim, s, h, n0 + c0 + c + FA__PF_AHEAD, n_end);
            for (k = 0; k < dim; k += 8)
                fa__transpose8_avx2(src + k, lds, Xt + (size_t)k * (size_t)a->bcp + c0, a->bcp, 8);
            continue;
        }
#endif
        for (c = 0; c < 8; ++c) {
            float *x = tmp + (size_t)c * (size_t)ld;
            if (c < cn) {
                fa__prefetch_row(a, t, dim, s, h, n0 + c0 + c + FA__PF_AHEAD, n_end);
                fa__load_row(fa__kv_row(a, t, s, n0 + c0 + c, h), t->dtype, dim,
                             fa__fp8_descale(&a->r, t == &a->v ? 2 : 1, t->dtype, s->b, h, n0 + c0 + c), x);
            } else
                for (k = 0; k < dim; ++k)
                    x[k] = 0.0f;
            for (k = dim; k < ld; ++k)
                x[k] = 0.0f;
        }
#if FLASHATTN__AVX2
        for (k = 0; k < dim; k += 8)
            fa__transpose8_avx2(tmp + k, ld, Xt + (size_t)k * (size_t)a->bcp + c0, a->bcp, dim - k < 8 ? dim - k : 8);
#else
        for (c = 0; c < 8; ++c)
            for (k = 0; k < dim; ++k)
                Xt[(size_t)k * (size_t)a->bcp + (size_t)c0 + (size_t)c] = tmp[(size_t)c * (size_t)ld + (size_t)k];
#endif
    }
    for (k = 0; k < dim; ++k)
        for (c = (nc + 7) / 8 * 8; c < a->bcp; ++c)
            Xt[(size_t)k * (size_t)a->bcp + (size_t)c] = 0.0f;
}

/* Ask the cache for rows n0 .. n0+nc-1 of a K or V tensor ahead of their
   use: the next tile's rows arrive while this tile's products run. (Rows
   of one head are often 4 KiB or more apart, too far for the hardware
   prefetcher to follow.) */

static FLASHATTN__FORCEINLINE void fa__prefetch_row(const fa__attn *a, const fa_tensor *t, int dim, const fa__seq *s,
                                                   int h, int n, int n_end)
{
    if (n < n_end)
        fa__prefetch_bytes(fa__kv_row(a, t, s, n, h), dim * fa__dtype_size(t->dtype));
}

static void fa__prefetch_rows(const fa__attn *a, const fa_tensor *t, int dim, const fa__seq *s, int h,
                              int n0, int nc)
{
#if defined(__GNUC__) || defined(__clang__)
    int c, bytes = dim * fa__dtype_size(t->dtype), off;
    for (c = 0; c < nc; ++c) {
        const char *row = (const char *)fa__kv_row(a, t, s, n0 + c, h);
        for (off = 0; off < bytes; off += 64)
            __builtin_prefetch(row + off, 0, 2);
    }
#else
    (void)a; (void)t; (void)dim; (void)s; (void)h; (void)n0; (void)nc;
#endif
}

/* Where rows n0 .. n0+nc-1 of a K or V tensor (head h) lie: rows[c]. The
   rows of one page (of the whole sequence when not paged) are seq_stride
   elements apart, so only the first row of each page is looked up. */
static void fa__kv_row_ptrs(const fa__attn *a, const fa_tensor *t, const fa__seq *s, int h, int n0, int nc,
                            const void **rows)
{
    const size_t step = (size_t)t->seq_stride * (size_t)fa__dtype_size(t->dtype);
    int c = 0;
    while (c < nc) {
        const char *p = (const char *)fa__kv_row(a, t, s, n0 + c, h);
        int run = nc - c;
        if (a->r.block_table && a->r.page_size - (n0 + c) % a->r.page_size < run)
            run = a->r.page_size - (n0 + c) % a->r.page_size;
        for (; run > 0; --run, p += step)
            rows[c++] = p;
    }
}

/* Rows of a K or V tile into X[nc, ldx] (ldx >= dim, padding zeroed).
   Even f32 V is copied: read in place, its rows sit heads * dv floats apart
   (4 KiB at 8 heads x 128), so the 16-column strips fa__gemm walks down
   all fall in the same few L1 sets; the copy is faster [cpu-kv-copy]. */
static void fa__load_kv_tile(const fa__attn *a, const fa_tensor *t, int dim, const fa__seq *s, int h,
                             int n0, int nc, int n_end, float *X, int ldx)
{
    int c, k;
    for (c = 0; c < nc; ++c) {
        float *x = X + (size_t)c * (size_t)ldx;
        fa__prefetch_row(a, t, dim, s, h, n0 + c + FA__PF_AHEAD, n_end);
        fa__load_row(fa__kv_row(a, t, s, n0 + c, h), t->dtype, dim,
                     fa__fp8_descale(&a->r, t == &a->v ? 2 : 1, t->dtype, s->b, h, n0 + c), x);
        for (k = dim; k < ldx; ++k)
            x[k] = 0.0f;
    }
}

/* ---- END OF THE PLUMBING: the forward loop, tile by tile -------------------- */

/* Keys [lo, hi) that at least one of the nr rows in w may see. */
static void fa__key_band(const fa__attn *a, const fa__scratch *w, int nr, int sk, int n_lo, int n_hi,
                         int *lo, int *hi)
{
    int64_t pmin = w->pos[0], pmax = w->pos[0], l = n_lo, h = n_hi;
    int r;
    for (r = 1; r < nr; ++r) {
        pmin = w->pos[r] < pmin ? w->pos[r] : pmin;
        pmax = w->pos[r] > pmax ? w->pos[r] : pmax;
    }
    if (h > sk)
        h = sk;
    if (a->r.causal && pmax + 1 < h)
        h = pmax + 1;
    if (a->r.sliding_window) {
        if (pmax + a->r.window_right + 1 < h)
            h = pmax + a->r.window_right + 1;
        if (pmin - a->r.window_left > l)
            l = pmin - a->r.window_left;
    }
    if (l < 0)
        l = 0;
    *lo = (int)l;
    *hi = (int)(h > l ? h : l);
}

/* ---- block-sparse: which tiles a task walks -------------------------------
   With a block mask a task's tile never spans two blocks (fa__tile_rows),
   so all its rows share one list of visited blocks; the task turns that
   list into bits (fa__visited_keys) and walks only the runs of visited
   blocks that meet its key band, tile by tile (fa__walk). Unvisited blocks
   are never loaded or multiplied. Without a mask the walk is the band
   [lo, hi) in tiles, exactly the dense loop. */

/* Rows [*r0, *r1) of tile t of a sequence of len rows: tiles of `tile`
   rows, or with a block mask (sub > 0) each block of `block` rows cut into
   sub tiles of at most `tile`. Empty when the tile lies past len. */
static void fa__tile_rows(int t, int tile, int block, int sub, int len, int *r0, int *r1)
{
    int64_t a0 = (int64_t)t * tile, a1;
    if (sub)
        a0 = (int64_t)(t / sub) * block + (int64_t)(t % sub) * tile;
    a1 = a0 + tile;
    if (sub && a1 > (int64_t)(t / sub) * block + block)
        a1 = (int64_t)(t / sub) * block + block;
    *r0 = (int)(a0 < len ? a0 : len);
    *r1 = (int)(a1 < len ? a1 : len);
}

/* Mask m of (sequence b, query head h), and its row for query block qb. */
static int64_t fa__mask_of(const fa__attn *a, int b, int h)
{
    const fa_block_mask *m = &a->r.block_mask;
    return (int64_t)(m->batch == 1 ? 0 : b) * m->heads + h / (a->r.heads_q / m->heads);
}

/* List l (0: kv_indices, 1: full_kv_indices) of mask row `row`: n entries. */
static const int32_t *fa__mask_list(const fa__attn *a, int l, int64_t row, int *n)
{
    const fa_block_mask *m = &a->r.block_mask;
    const int32_t *cnt = l ? m->full_kv_num_blocks : m->kv_num_blocks;
    *n = cnt ? cnt[row] : 0;
    return cnt ? (l ? m->full_kv_indices : m->kv_indices) + row * a->kblocks : NULL;
}

/* The key blocks visited by the query block of row i0 of (b, h), as bits in
   w->vis; NULL without a block mask. */
static const uint32_t *fa__visited_keys(const fa__attn *a, fa__scratch *w, int b, int h, int i0)
{
    int64_t row;
    int l, t, n;
    if (!a->bm)
        return NULL;
    row = fa__mask_of(a, b, h) * a->qblocks + i0 / a->bq;
    memset(w->vis, 0, (size_t)a->kwords * sizeof(uint32_t));
    for (l = 0; l < 2; ++l) {
        const int32_t *idx = fa__mask_list(a, l, row, &n);
        for (t = 0; t < n; ++t)
            w->vis[idx[t] >> 5] |= 1u << (idx[t] & 31);
    }
    return w->vis;
}

/* The positions of [lo, hi) in blocks whose bit is set (one bit per block
   of `block` positions; bits NULL = all), in tiles of at most `step`. */
typedef struct fa__walk {
    const uint32_t *bits;
    int nblocks, block, lo, hi, step;
    int next;    /* the next block to look at */
    int at, end; /* the current run: next tile start, end */
} fa__walk;

static void fa__walk_init(fa__walk *it, const uint32_t *bits, int nblocks, int block, int lo, int hi, int step)
{
    it->bits = bits;
    it->nblocks = nblocks;
    it->block = block;
    it->lo = lo;
    it->hi = hi;
    it->step = step;
    it->next = bits ? lo / block : nblocks;
    it->at = bits ? 0 : lo; /* no bits: the one run [lo, hi) */
    it->end = bits ? 0 : hi;
}

#define FA__BIT(bits, j) (((bits)[(j) >> 5] >> ((j) & 31)) & 1u)

/* The next tile [*n0, *n0 + *n), *end the end of its run (may be NULL);
   0 when none is left. */
static int fa__walk_next(fa__walk *it, int *n0, int *n, int *end)
{
    while (it->at >= it->end) { /* find the next run of set bits */
        int j = it->next, e;
        if (!it->bits)
            return 0;
        while (j < it->nblocks && (int64_t)j * it->block < it->hi && !FA__BIT(it->bits, j))
            j = (j & 31) == 0 && !it->bits[j >> 5] ? j + 32 : j + 1; /* a word of zeros at once */
        if (j >= it->nblocks || (int64_t)j * it->block >= it->hi) {
            it->next = it->nblocks;
            return 0;
        }
        for (e = j + 1; e < it->nblocks && FA__BIT(it->bits, e); ++e) {}
        it->next = e;
        it->at = (int)((int64_t)j * it->block > it->lo ? (int64_t)j * it->block : it->lo);
        it->end = (int)((int64_t)e * it->block < it->hi ? (int64_t)e * it->block : it->hi);
    }
    *n0 = it->at;
    *n = it->end - it->at < it->step ? it->end - it->at : it->step;
    if (end)
        *end = it->end;
    it->at += *n;
    return 1;
}

/* THE score tile, shared by forward, backward and decode. For the nr query
   rows described in w (Q~ in w->Q, key position, ALiBi slope) and keys
   n0 .. n0+nc-1 (K_j^T in w->Kt, or when k_rows the K rows in place at
   w->krows[0 .. nc), see fa__dots_rows), compute in
   base-2 units
       S = Q~ K_j^T                          (scale * log2 e already in Q~)
       S = c log2e * tanh(S)                 (softcap; tanh kept in T if T)
       S -= slope * log2e * |i' - j|         (ALiBi)
       S = -inf where key j is not visible   (causal, window, j >= sk)
   into rows r0 .. r0+nr-1 of S[., bcp]; columns nc .. bcp-1 are -inf.
   fa__score_mask is the part after the product, for callers (decode) that
   computed S = Q~ K_j^T themselves. */
static void fa__score_mask(const fa__attn *a, const fa__scratch *w, int r0, int nr, int n0, int nc, int sk,
                           float *S, float *T)
{
    const fa_problem *r = &a->r;
    int i, c;
    for (i = r0; i < r0 + nr; ++i) {
        float *s = S + (size_t)i * (size_t)a->bcp;
        int64_t pos = w->pos[i], jlo = 0, jhi = sk - 1; /* visible keys of this row */
        int clo, chi;
        if (a->cap2 != 0.0f)
            for (c = 0; c < nc; ++c) {
                float t = tanhf(s[c]);
                if (T)
                    T[(size_t)i * (size_t)a->bcp + (size_t)c] = t;
                s[c] = a->cap2 * t;
            }
        if (r->alibi_slopes)
            for (c = 0; c < nc; ++c) {
                int64_t dist = pos - (n0 + c);
                s[c] -= w->slope2[i] * (float)(dist < 0 ? -dist : dist);
            }
        if (r->causal && pos < jhi)
            jhi = pos;
        if (r->sliding_window) {
            if (pos + r->window_right < jhi)
                jhi = pos + r->window_right;
            if (pos - r->window_left > jlo)
                jlo = pos - r->window_left;
        }
        /* columns [clo, chi] stay, the rest are masked */
        clo = jlo - n0 < 0 ? 0 : jlo - n0 > nc ? nc : (int)(jlo - n0);
        chi = jhi - n0 < -1 ? -1 : jhi - n0 > nc - 1 ? nc - 1 : (int)(jhi - n0);
        if (chi < clo)
            chi = clo - 1;
        for (c = 0; c < clo; ++c)
            s[c] = -INFINITY;
        for (c = chi + 1; c < a->bcp; ++c)
            s[c] = -INFINITY;
    }
}

static void fa__score_tile(const fa__attn *a, const fa__scratch *w, int r0, int nr, int n0, int nc, int sk,
                           int k_rows, float *S, float *T)
{
    if (k_rows) /* few rows: dot products with the K rows where they lie */
        fa__dots_rows(nr, a->k.dtype, a->d, nc, w->Q + (size_t)r0 * (size_t)a->dp, a->dp, w->krows,
                      S + (size_t)r0 * (size_t)a->bcp, a->bcp, w->row, w->krows + FA__BC, w->npf,
                      a->d * fa__dtype_size(a->k.dtype));
    else
        fa__gemm(nr, a->bcp, a->d, w->Q + (size_t)r0 * (size_t)a->dp, a->dp, w->Kt, a->bcp, S + (size_t)r0 * (size_t)a->bcp,
                 a->bcp, 0, w->pack);
    fa__score_mask(a, w, r0, nr, n0, nc, sk, S, T);
}

/* Dropout on P (rows in w, keys n0 .. n0+nc-1): P <- P * Z, Z = 1/(1-p) for
   kept elements, 0 for dropped ones (FlashAttention, Alg. 2 line 12). Also writes
   Z itself when Z is not NULL (the backward needs it for dP too). */
static void fa__dropout_tile(const fa__attn *a, const fa__scratch *w, int b, int r0, int nr, int n0, int nc,
                             float *P, float *Z)
{
    int i, c;
    for (i = r0; i < r0 + nr; ++i) {
        uint32_t bits[4];
        for (c = 0; c < nc; ++c) {
            int j = n0 + c;
            float z;
            if (c == 0 || (j & 3) == 0) /* one Philox call serves 4 columns */
                fa__dropout_bits(a->r.dropout_seed, a->r.dropout_offset, b, w->head[i], a->r.heads_q,
                                 w->tok[i], j, bits);
            z = bits[j & 3] >= a->drop_thr ? a->drop_scale : 0.0f;
            if (P)
                P[(size_t)i * (size_t)a->bcp + (size_t)c] *= z;
            if (Z)
                Z[(size_t)i * (size_t)a->bcp + (size_t)c] = z;
        }
    }
}

/* Load the Q~ rows described by (seq s, head per row, tok per row). */
static void fa__load_q_rows(const fa__attn *a, const fa_tensor *q, const fa__seq *s, fa__scratch *w, int nr)
{
    int i, c;
    for (i = 0; i < nr; ++i) {
        float *x = w->Q + (size_t)i * (size_t)a->dp;
        if (i + FA__PF_AHEAD < nr) /* rows heads * d apart: see FA__PF_AHEAD */
            fa__prefetch_bytes(fa__at(q, s->q_b, s->q_row0 + w->tok[i + FA__PF_AHEAD], w->head[i + FA__PF_AHEAD]),
                               a->d * fa__dtype_size(q->dtype));
        fa__load_row(fa__at(q, s->q_b, s->q_row0 + w->tok[i], w->head[i]), q->dtype, a->d,
                     a->q_fold * fa__fp8_descale(&a->r, 0, q->dtype, s->b, w->head[i], w->tok[i]), x);
        for (c = a->d; c < a->dp; ++c)
            x[c] = 0.0f;
        w->slope2[i] = a->r.alibi_slopes ? (float)((double)a->r.alibi_slopes[w->head[i]] * FA__LOG2E) : 0.0f;
    }
}

/* Rows [r0, r1) of the nr rows in w that see at least one key of
   n0 .. n0+nc-1. The key position never decreases with the row index
   (forward: i + off; decode: t + off for row t * group + g), and each mask
   keeps a row either from some point on (causal, window right) or up to
   some point (window left), so those rows are one range. */
static void fa__row_range(const fa__attn *a, const fa__scratch *w, int nr, int n0, int nc, int *r0, int *r1)
{
    const fa_problem *r = &a->r;
    int lo = 0, hi = nr;
#define FA__SEES_TILE(p)                                                                     \
    ((!r->causal || (int64_t)(p) >= n0) &&                                                   \
     (!r->sliding_window ||                                                                  \
      ((int64_t)(p) + r->window_right >= n0 && (int64_t)(p) - r->window_left <= (int64_t)n0 + nc - 1)))
    while (lo < hi && !FA__SEES_TILE(w->pos[lo]))
        ++lo;
    while (hi > lo && !FA__SEES_TILE(w->pos[hi - 1]))
        --hi;
#undef FA__SEES_TILE
    *r0 = lo;
    *r1 = hi;
}

/* The inner loop of the forward (and of each decode split), in three
   parts. fa__attend_begin: the nr rows in w start with m = -inf, l = 0,
   O~ = 0. fa__attend_tile: they attend to keys n0 .. n0+nc-1 of KV head
   kvh (rows that see none of them are skipped, and if none does the tile
   is not even loaded); n_end bounds the rows the loads may prefetch.
   fa__attend_rows: all keys in [n_lo, n_hi) that the rows may see, tile by
   tile. Leaves the unscaled O~ [nr, dvp], m and l in w. */
static void fa__attend_begin(const fa__attn *a, fa__scratch *w, int nr)
{
    int i;
    for (i = 0; i < nr; ++i) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    memset(w->O, 0, (size_t)nr * (size_t)a->dvp * sizeof(float));
}

/* Rows [r0, r1) of w: one online-softmax step over their ncp scores in S
   (S becomes P~), O~ rescaled where the maximum moved. */
static void fa__softmax_rows(const fa__attn *a, fa__scratch *w, int r0, int r1, int ncp)
{
    int i, c;
    for (i = r0; i < r1; ++i) {
        float alpha = fa__softmax_step(w->S + (size_t)i * (size_t)a->bcp, ncp, &w->m[i], &w->l[i]);
        if (alpha != 1.0f) { /* a new maximum: O~ was summed against the old one */
            float *o = w->O + (size_t)i * (size_t)a->dvp;
            for (c = 0; c < a->dv_; ++c)
                o[c] *= alpha;
        }
    }
}

static void fa__attend_tile(const fa__attn *a, fa__scratch *w, const fa__seq *s, int kvh, int nr, int n0,
                            int nc, int n_end)
{
    /* FP8 K and V take the tile loads, which decode and descale them */
    int r0, r1, k_rows = nr <= FA__FEW_ROWS && a->k.dtype != FA_E4M3, ncp = FA__PAD(nc);
    /* rows that see none of these keys are skipped: they would get
       S = -inf, alpha = 1 and P = 0, i.e. no change at all */
    fa__row_range(a, w, nr, n0, nc, &r0, &r1);
    if (r0 >= r1)
        return;
    if (k_rows) { /* few rows: K and V are read in place (see fa__dots_rows) */
        fa__kv_row_ptrs(a, &a->k, s, kvh, n0, nc, w->krows);
        fa__kv_row_ptrs(a, &a->v, s, kvh, n0, nc, w->vrows);
        /* the same rows of the next tile (keys before n_end) are requested
           from memory while this tile streams (decode walks its tiles
           differently: fa__decode_tile_few) */
        w->npf = n_end - (n0 + nc) < nc ? n_end - (n0 + nc) : nc;
        w->npf = w->npf < 0 ? 0 : w->npf;
        fa__kv_row_ptrs(a, &a->k, s, kvh, n0 + nc, w->npf, w->krows + FA__BC);
        fa__kv_row_ptrs(a, &a->v, s, kvh, n0 + nc, w->npf, w->vrows + FA__BC);
    } else {
        fa__load_tile_t(a, &a->k, a->d, s, kvh, n0, nc, n_end, w->Kt, w->row);
        fa__load_kv_tile(a, &a->v, a->dv_, s, kvh, n0, nc, n_end, w->V, a->dvp);
    }
    fa__score_tile(a, w, r0, r1 - r0, n0, nc, s->sk, k_rows, w->S, NULL);
    fa__softmax_rows(a, w, r0, r1, ncp);
    if (a->drop_thr) /* l already has the undropped P: L ignores dropout */
        fa__dropout_tile(a, w, s->b, r0, r1 - r0, n0, nc, w->S, NULL);
    if (k_rows) /* O~ += P~ V_j */
        fa__pv_rows(r1 - r0, a->v.dtype, a->dv_, nc, w->S + (size_t)r0 * (size_t)a->bcp, a->bcp, w->vrows,
                    w->O + (size_t)r0 * (size_t)a->dvp, a->dvp, w->row, w->vrows + FA__BC, w->npf,
                    a->dv_ * fa__dtype_size(a->v.dtype), NULL, 0);
    else
        fa__gemm(r1 - r0, a->dvp, nc, w->S + (size_t)r0 * (size_t)a->bcp, a->bcp, w->V, a->dvp,
                 w->O + (size_t)r0 * (size_t)a->dvp, a->dvp, 1, w->pack);
}

static void fa__attend_rows(const fa__attn *a, fa__scratch *w, const fa__seq *s, int kvh, int nr,
                            const uint32_t *vis)
{
    int lo, hi, n0, nc, end;
    fa__walk it;
    fa__attend_begin(a, w, nr);
    /* keys no row can see are never loaded: causal and windowed tiles
       outside the band, and key blocks the block mask leaves out (vis),
       cost nothing */
    fa__key_band(a, w, nr, s->sk, 0, s->sk, &lo, &hi);
    fa__walk_init(&it, vis, a->kblocks, a->bk, lo, hi, FA__BC);
    while (fa__walk_next(&it, &n0, &nc, &end)) {
        /* the next tile of the run arrives while this one computes (few
           rows: asked for row by row inside fa__attend_tile) */
        if (nr > FA__FEW_ROWS && n0 + nc < end) {
            int nn = end - n0 - nc < FA__BC ? end - n0 - nc : FA__BC;
            fa__prefetch_rows(a, &a->k, a->d, s, kvh, n0 + nc, nn);
            fa__prefetch_rows(a, &a->v, a->dv_, s, kvh, n0 + nc, nn);
        }
        fa__attend_tile(a, w, s, kvh, nr, n0, nc, end);
    }
}

/* Task index -> (b, h, Q tile). Consecutive tasks share (b, h), so the
   workers stream the same K and V through the shared cache; within a head
   the last Q tile comes first: under a causal mask it sees the most keys,
   and a dynamic scheduler balances best with the heaviest tasks first. */
static void fa__forward_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    int bh = index / a->tr, tile = a->tr - 1 - index % a->tr;
    int b = bh / a->r.heads_q, h = bh % a->r.heads_q, i0, i1, nr, i;
    fa__scratch w;
    fa__seq s;
    fa__seq_info(a, b, &s);
    fa__tile_rows(tile, a->br, a->bq, a->qsub, s.sq, &i0, &i1);
    if (i0 >= i1)
        return; /* past the end of a short sequence of a varlen batch (or of a block) */
    nr = i1 - i0;
    fa__worker_scratch(a, FA__SCRATCH_FWD, worker, &w);
    for (i = 0; i < nr; ++i) {
        w.tok[i] = i0 + i;
        w.head[i] = h;
        w.pos[i] = i0 + i + s.off;
    }
    fa__load_q_rows(a, &a->q, &s, &w, nr);
    fa__attend_rows(a, &w, &s, h / a->group, nr, fa__visited_keys(a, &w, b, h, i0));
    for (i = 0; i < nr; ++i) {
        float L, *o = w.O + (size_t)i * (size_t)a->dvp;
        float m = w.m[i] == -INFINITY ? 0.0f : w.m[i];
        fa__softmax_finish(o, a->dv_, m, w.l[i], &L);
        fa__store_row(fa__at(&a->o, s.q_b, s.q_row0 + i0 + i, h), a->o.dtype, a->dv_, o);
        if (a->lse)
            a->lse[fa__lse_index(a, &s, h, i0 + i)] = L;
    }
}

/* Take the caller's workspace or allocate one. */
static fa_status fa__workspace(const char *fn, void *workspace, size_t workspace_size, size_t need,
                               void **mem, int *owned)
{
    *owned = 0;
    *mem = workspace;
    if (workspace) {
        if (workspace_size < need)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: workspace_size (%llu bytes) is less than the %llu bytes needed "
                            "(see the *_workspace_size function)",
                            fn, (unsigned long long)workspace_size, (unsigned long long)need);
        return FA_OK;
    }
    *mem = FLASHATTN_MALLOC(need);
    if (!*mem)
        return fa__fail(FA_ERROR_OUT_OF_MEMORY, "%s: could not allocate a %llu-byte workspace", fn,
                        (unsigned long long)need);
    *owned = 1;
    return FA_OK;
}

static fa_status fa__unsupported_dtype(const char *fn, const char *name, const fa_tensor *t)
{
    if (t->data && t->dtype == FA_E4M3)
        return fa__fail(FA_ERROR_UNSUPPORTED, "%s: %s.dtype %s is not supported here (FP8 is for the q, k "
                        "and v of fa_forward)", fn, name, fa__dtype_name(t->dtype));
    return FA_OK;
}

static fa_status fa__task_count(const char *fn, int64_t n, int *out)
{
    if (n > INT_MAX)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %lld tasks is too many for one call", fn, (long long)n);
    *out = (int)n;
    return FA_OK;
}

static size_t fa__forward_bytes(const fa__attn *a, int workers)
{
    fa__scratch w;
    return 64 + (size_t)workers * fa__scratch_layout(a, FA__SCRATCH_FWD, NULL, &w);
}

FLASHATTN_DEF fa_status fa_forward_workspace_size(const fa_problem *p, size_t *bytes)
{
    fa_problem r;
    fa__attn a;
    fa__pf pf;
    fa_status s = fa__resolve("fa_forward_workspace_size", p, &r, 1);
    if (s != FA_OK || (s = fa__no_block_table("fa_forward_workspace_size", &r)) != FA_OK)
        return s;
    if (!bytes)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "fa_forward_workspace_size: bytes is NULL");
    fa__attn_init(&a, &r, FA__BR);
    *bytes = fa__forward_bytes(&a, fa__num_workers(fa__pf_get(&pf)));
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_forward(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v,
                                   fa_tensor o, float *lse, void *workspace, size_t workspace_size)
{
    static const char fn[] = "fa_forward";
    fa_problem r;
    fa__attn a;
    fa__pf pf;
    void *mem;
    int owned, ntasks = 0, workers = fa__num_workers(fa__pf_get(&pf));
    fa_status s = fa__check_forward(fn, p, &r, &q, &k, &v, &o, lse, 1);
    if (s != FA_OK || (s = fa__check_fp8(fn, p, &r, &q, &k, &v, &o, 1)) != FA_OK)
        return s;
    fa__attn_init(&a, &r, FA__BR);
    if ((s = fa__task_count(fn, (int64_t)r.batch * r.heads_q * a.tr, &ntasks)) != FA_OK)
        return s;
    if ((s = fa__workspace(fn, workspace, workspace_size, fa__forward_bytes(&a, workers), &mem, &owned)) != FA_OK)
        return s;
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.ws_workers = fa__align64(mem);
    {
        fa__scratch w;
        a.worker_bytes = fa__scratch_layout(&a, FA__SCRATCH_FWD, NULL, &w);
    }
    fa__parallel_for(&pf, ntasks, fa__forward_task, &a);
    if (owned)
        FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ============================================================================
   >>impl-backward  CPU backward (recomputation)
   ============================================================================
   FlashAttention, Alg. 4, in FlashAttention-2 form: P is never stored; each
   (Q tile, K tile) pair rebuilds it from the saved L:
       S = Q~ K_j^T (same masks, softcap, ALiBi)    P = exp(S - L)
       dV_j += (P o Z)^T dO_i                       Z = dropout multipliers
       dP = dO_i V_j^T
       dS = P o (dP o Z - D_i)                      D = rowsum(dO o O)
       dS <- dS * (1 - tanh^2)                      (softcap derivative)
       dK_j += dS^T Q_i        dQ_i += dS K_j       (both times scale at the end)
   The scale is applied once, to the finished sums: dK_j = scale dS^T Q is
   formed from the Q~ = q_fold Q already in the tile, as (dS^T Q~) (scale /
   q_fold), a factor near 1 (1 / log2 e, or softcap), so no intermediate is
   smaller than dK itself: scaling dS and unfolding Q~ would underflow fp32
   for scales near 1e-20 and below.
   D = rowsum(dO o O) equals rowsum(P o dP) (FlashAttention's appendix),
   computed once per row.

   Ownership decides the loop order. A task (b, KV head, K tile) owns its
   rows of dK and dV: it loops over the Q tiles of every query head of its
   GQA group and sums into them, so no two tasks write the same element.
   dQ would need the opposite ownership: every K tile adds into every row
   of dQ. Accumulating dQ across tasks needs atomics (order-dependent,
   hence not bit-reproducible) or one partial dQ per K tile (Tc times the
   memory). We take the simplest deterministic choice: a SECOND pass whose
   task (b, query head, Q tile) owns its rows of dQ and recomputes P and
   dS for its K tiles. It costs 3 extra matrix products per pair (S, dP and
   dQ: 7 instead of 5) and keeps every result independent of the number of
   threads.

       pass 0  (b, h, Q tile):   D = rowsum(dO o O)
       pass 1  (b, hkv, K tile): dK, dV
       pass 2  (b, h, Q tile):   dQ                                       */

/* Query-side rows of a backward tile: Q~, dO, L (base 2) and D. */
static void fa__bwd_load_rows(const fa__attn *a, const fa__seq *s, fa__scratch *w, int h, int i0, int nr)
{
    int i, c;
    for (i = 0; i < nr; ++i) {
        float L = a->lse[fa__lse_index(a, s, h, i0 + i)], *x = w->dO + (size_t)i * (size_t)a->dvp;
        w->tok[i] = i0 + i;
        w->head[i] = h;
        w->pos[i] = i0 + i + s->off;
        if (i + FA__PF_AHEAD < nr)
            fa__prefetch_bytes(fa__at(&a->dout, s->q_b, s->q_row0 + i0 + i + FA__PF_AHEAD, h),
                               a->dv_ * fa__dtype_size(a->dout.dtype));
        fa__load_row(fa__at(&a->dout, s->q_b, s->q_row0 + i0 + i, h), a->dout.dtype, a->dv_, 1.0f, x);
        for (c = a->dv_; c < a->dvp; ++c)
            x[c] = 0.0f;
        /* P = exp2(S2 - L2). A row that saw no key has L = -inf; using +inf
           instead makes every exp2(S2 - L2) exactly 0: it gets no gradient. */
        w->m[i] = L == -INFINITY ? INFINITY : (float)((double)L * FA__LOG2E);
        w->l[i] = a->ws_D[fa__lse_index(a, s, h, i0 + i)];
    }
    fa__load_q_rows(a, &a->q, s, w, nr);
}

/* One (Q tile, K tile) pair: P into w->S, Z into w->Z (dropout), and
   dS (times the softcap derivative, not the scale) into w->dP. Needs w->Kt,
   w->Vt and the rows from fa__bwd_load_rows. */
static void fa__bwd_pair(const fa__attn *a, fa__scratch *w, const fa__seq *s, int nr, int n0, int nc)
{
    int i, c, bcp = a->bcp;
    fa__score_tile(a, w, 0, nr, n0, nc, s->sk, 0, w->S, a->cap2 != 0.0f ? w->T : NULL);
    for (i = 0; i < nr; ++i) { /* P = exp(S - L): the forward's probabilities, rebuilt */
        float L2 = w->m[i], b = ceilf(L2); /* exp2(S2 - L2) = exp2(S2 - b) exp2(b - L2) */
        fa__exp2_row(w->S + (size_t)i * (size_t)bcp, bcp, b, b == INFINITY ? 1.0f : exp2f(b - L2));
    }
    if (a->drop_thr)
        fa__dropout_tile(a, w, s->b, 0, nr, n0, nc, NULL, w->Z);
    fa__gemm(nr, bcp, a->dv_, w->dO, a->dvp, w->Vt, bcp, w->dP, bcp, 0, w->pack); /* dP = dO V_j^T */
    for (i = 0; i < nr; ++i) {
        const float *p = w->S + (size_t)i * (size_t)bcp, *z = w->Z + (size_t)i * (size_t)bcp, *t = w->T + (size_t)i * (size_t)bcp;
        float *ds = w->dP + (size_t)i * (size_t)bcp, D = w->l[i];
        /* the plain case gets its own loop so that it vectorizes cleanly */
        if (!a->drop_thr && a->cap2 == 0.0f)
            for (c = 0; c < nc; ++c)
                ds[c] = p[c] * (ds[c] - D);
        else
            for (c = 0; c < nc; ++c) {
                float dp = a->drop_thr ? ds[c] * z[c] : ds[c];
                float g = p[c] * (dp - D);
                if (a->cap2 != 0.0f)
                    g *= 1.0f - t[c] * t[c]; /* d/dx c tanh(x / c) */
                ds[c] = g;
            }
        for (; c < bcp; ++c)
            ds[c] = 0.0f;
    }
}

/* pass 0: D = rowsum(dO o O), one task per (b, h, Q tile) */
static void fa__backward_d_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    int bh = index % (a->r.batch * a->r.heads_q), tile = index / (a->r.batch * a->r.heads_q);
    int b = bh / a->r.heads_q, h = bh % a->r.heads_q, i, i0, i1, c;
    fa__scratch w;
    fa__seq s;
    fa__seq_info(a, b, &s);
    fa__worker_scratch(a, FA__SCRATCH_BWD, worker, &w);
    fa__tile_rows(tile, a->br, a->bq, a->qsub, s.sq, &i0, &i1);
    for (i = i0; i < i1; ++i) {
        double D = 0.0;
        fa__load_row(fa__at(&a->dout, s.q_b, s.q_row0 + i, h), a->dout.dtype, a->dv_, 1.0f, w.dO);
        fa__load_row(fa__at(&a->o, s.q_b, s.q_row0 + i, h), a->o.dtype, a->dv_, 1.0f, w.O);
        for (c = 0; c < a->dv_; ++c)
            D += (double)w.dO[c] * (double)w.O[c];
        a->ws_D[fa__lse_index(a, &s, h, i)] = (float)D;
    }
}

/* pass 1: dK_j, dV_j, one task per (b, KV head, K tile); K tile 0 first:
   under a causal mask it sees the most queries. */
static void fa__backward_kv_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    const fa_problem *r = &a->r;
    int nbk = r->batch * r->heads_kv, b = (index % nbk) / r->heads_kv, kvh = (index % nbk) % r->heads_kv;
    int n0, n1, cap, nc, nct, g, i, c, i0, nr, ilo, ihi;
    float unfold = (float)((double)r->scale / (double)a->q_fold); /* dK = scale dS^T Q = (dS^T Q~) scale / q_fold */
    fa__scratch w;
    fa__seq s;
    fa__seq_info(a, b, &s);
    cap = r->cu_seqlens_k ? r->cu_seqlens_k[b + 1] - r->cu_seqlens_k[b] : r->seqlen_k;
    fa__tile_rows(index / nbk, FA__BC, a->bk, a->ksub, cap, &n0, &n1);
    if (n0 >= n1)
        return;
    nct = n1 - n0;                                   /* rows of dK/dV this task writes */
    nc = s.sk - n0 < nct ? (s.sk - n0 > 0 ? s.sk - n0 : 0) : nct; /* of which keys in use */
    fa__worker_scratch(a, FA__SCRATCH_BWD, worker, &w);
    memset(w.dK, 0, (size_t)FA__BC * (size_t)a->dp * sizeof(float));
    memset(w.dV, 0, (size_t)FA__BC * (size_t)a->dvp * sizeof(float));
    if (nc > 0) {
        int64_t lo = 0, hi = s.sq; /* query rows that see at least one key of the tile */
        int loaded = 0;
        if (r->causal && (int64_t)n0 - s.off > lo)
            lo = (int64_t)n0 - s.off;
        if (r->sliding_window) {
            if ((int64_t)n0 - r->window_right - s.off > lo)
                lo = (int64_t)n0 - r->window_right - s.off;
            if ((int64_t)n0 + nc + r->window_left - s.off < hi)
                hi = (int64_t)n0 + nc + r->window_left - s.off;
        }
        ilo = (int)lo;
        ihi = (int)(hi > lo ? hi : lo);
        for (g = 0; g < a->group; ++g) {
            int h = kvh * a->group + g;
            fa__walk it; /* the Q tiles of the query blocks that visit this key block */
            fa__walk_init(&it, a->bm ? a->ws_kq + (size_t)((fa__mask_of(a, b, h) * a->kblocks + n0 / a->bk) * a->qwords)
                                     : NULL, a->qblocks, a->bq, ilo, ihi, a->br);
            while (fa__walk_next(&it, &i0, &nr, NULL)) {
                if (!loaded) { /* K_j, V_j: at the first Q tile (a key block no query visits: never) */
                    fa__load_tile_t(a, &a->k, a->d, &s, kvh, n0, nc, n0 + nc, w.Kt, w.row);
                    fa__load_tile_t(a, &a->v, a->dv_, &s, kvh, n0, nc, n0 + nc, w.Vt, w.row);
                    loaded = 1;
                }
                fa__bwd_load_rows(a, &s, &w, h, i0, nr);
                fa__bwd_pair(a, &w, &s, nr, n0, nc);
                if (a->drop_thr) /* P is done with: keep P o Z in its place */
                    for (i = 0; i < nr; ++i)
                        for (c = 0; c < nc; ++c)
                            w.S[(size_t)i * (size_t)a->bcp + (size_t)c] *= w.Z[(size_t)i * (size_t)a->bcp + (size_t)c];
                fa__transpose_tile(w.S, a->bcp, nr, nc, w.Pt, a->br); /* Pt = (P o Z)^T */
                fa__gemm(nc, a->dvp, nr, w.Pt, a->br, w.dO, a->dvp, w.dV, a->dvp, 1, w.pack); /* dV += P^T dO */
                fa__transpose_tile(w.dP, a->bcp, nr, nc, w.Pt, a->br); /* Pt = dS^T */
                fa__gemm(nc, a->dp, nr, w.Pt, a->br, w.Q, a->dp, w.dK, a->dp, 1, w.pack); /* dK += dS^T Q~ */
            }
        }
    }
    for (c = 0; c < nct; ++c) { /* keys beyond seqlens_k[b] get zero gradient */
        float *dk = w.dK + (size_t)c * (size_t)a->dp;
        for (i = 0; i < a->d; ++i)
            dk[i] *= unfold;
        fa__store_row(fa__at(&a->dk, s.k_b, s.k_row0 + n0 + c, kvh), a->dk.dtype, a->d, dk);
        fa__store_row(fa__at(&a->dv, s.k_b, s.k_row0 + n0 + c, kvh), a->dv.dtype, a->dv_, w.dV + (size_t)c * (size_t)a->dvp);
    }
}

/* pass 2: dQ_i, one task per (b, query head, Q tile), K tiles inner, in
   order: the sum over K tiles is always added up the same way. */
static void fa__backward_q_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    int bh = index % (a->r.batch * a->r.heads_q), tile = a->tr - 1 - index / (a->r.batch * a->r.heads_q);
    int b = bh / a->r.heads_q, h = bh % a->r.heads_q, kvh = h / a->group, i0, i1, nr, i;
    int lo, hi, n0, nc;
    fa__scratch w;
    fa__seq s;
    fa__walk it;
    fa__seq_info(a, b, &s);
    fa__tile_rows(tile, a->br, a->bq, a->qsub, s.sq, &i0, &i1);
    if (i0 >= i1)
        return;
    nr = i1 - i0;
    fa__worker_scratch(a, FA__SCRATCH_BWD, worker, &w);
    fa__bwd_load_rows(a, &s, &w, h, i0, nr);
    memset(w.O, 0, (size_t)nr * (size_t)a->dp * sizeof(float));
    fa__key_band(a, &w, nr, s.sk, 0, s.sk, &lo, &hi);
    fa__walk_init(&it, fa__visited_keys(a, &w, b, h, i0), a->kblocks, a->bk, lo, hi, FA__BC);
    while (fa__walk_next(&it, &n0, &nc, NULL)) {
        fa__load_tile_t(a, &a->k, a->d, &s, kvh, n0, nc, n0 + nc, w.Kt, w.row);
        fa__load_tile_t(a, &a->v, a->dv_, &s, kvh, n0, nc, n0 + nc, w.Vt, w.row);
        fa__load_kv_tile(a, &a->k, a->d, &s, kvh, n0, nc, n0 + nc, w.K, a->dp);
        fa__bwd_pair(a, &w, &s, nr, n0, nc);
        fa__gemm(nr, a->dp, nc, w.dP, a->bcp, w.K, a->dp, w.O, a->dp, 1, w.pack); /* dQ += dS K_j */
    }
    for (i = 0; i < nr; ++i) {
        float *dq = w.O + (size_t)i * (size_t)a->dp;
        int c;
        for (c = 0; c < a->d; ++c)
            dq[c] *= a->r.scale; /* dQ = scale dS K */
        fa__store_row(fa__at(&a->dq, s.q_b, s.q_row0 + i0 + i, h), a->dq.dtype, a->d, dq);
    }
}

/* Before pass 1 with a block mask: the mask's lists turned around, for each
   mask and key block the query blocks that visit it (bits in ws_kq), so
   that a pass-1 task finds its Q tiles without searching the lists. One
   task per mask. */
static void fa__block_mask_transpose_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    uint32_t *kq = a->ws_kq + (size_t)index * (size_t)a->kblocks * (size_t)a->qwords;
    int i, l, t, n;
    (void)worker;
    memset(kq, 0, (size_t)a->kblocks * (size_t)a->qwords * sizeof(uint32_t));
    for (i = 0; i < a->qblocks; ++i)
        for (l = 0; l < 2; ++l) {
            const int32_t *idx = fa__mask_list(a, l, (int64_t)index * a->qblocks + i, &n);
            for (t = 0; t < n; ++t)
                kq[(size_t)idx[t] * (size_t)a->qwords + (size_t)(i >> 5)] |= 1u << (i & 31);
        }
}

/* The workspace: D [heads_q, total_q], ws_kq [masks, k_blocks, qwords]
   (block masks only), then each worker's scratch; each part 64-byte aligned. */
static size_t fa__backward_bytes(const fa__attn *a, int workers, size_t *d_bytes, size_t *kq_bytes)
{
    fa__scratch w;
    size_t masks = a->bm ? (size_t)a->r.block_mask.batch * (size_t)a->r.block_mask.heads : 0;
    *d_bytes = ((size_t)a->r.heads_q * (size_t)a->total_q * sizeof(float) + 63) / 64 * 64;
    *kq_bytes = (masks * (size_t)a->kblocks * (size_t)a->qwords * sizeof(uint32_t) + 63) / 64 * 64;
    return 64 + *d_bytes + *kq_bytes + (size_t)workers * fa__scratch_layout(a, FA__SCRATCH_BWD, NULL, &w);
}

FLASHATTN_DEF fa_status fa_backward_workspace_size(const fa_problem *p, size_t *bytes)
{
    fa_problem r;
    fa__attn a;
    fa__pf pf;
    size_t db, kb;
    fa_status s = fa__resolve("fa_backward_workspace_size", p, &r, 1);
    if (s != FA_OK || (s = fa__no_block_table("fa_backward_workspace_size", &r)) != FA_OK)
        return s;
    if (!bytes)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "fa_backward_workspace_size: bytes is NULL");
    fa__attn_init(&a, &r, FA__BR_BWD);
    *bytes = fa__backward_bytes(&a, fa__num_workers(fa__pf_get(&pf)), &db, &kb);
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_backward(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v,
                                    fa_tensor o, fa_tensor dout, const float *lse, fa_tensor dq,
                                    fa_tensor dk, fa_tensor dv, void *workspace, size_t workspace_size)
{
    static const char fn[] = "fa_backward";
    fa_problem r;
    fa__attn a;
    fa__pf pf;
    void *mem;
    size_t db, kb;
    int owned, nq = 0, nkv = 0, workers = fa__num_workers(fa__pf_get(&pf));
    fa_status s = fa__check_backward(fn, p, &r, &q, &k, &v, &o, &dout, lse, &dq, &dk, &dv, 1);
    if (s != FA_OK || (s = fa__unsupported_dtype(fn, "q", &q)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "k", &k)) != FA_OK || (s = fa__unsupported_dtype(fn, "v", &v)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "o", &o)) != FA_OK || (s = fa__unsupported_dtype(fn, "dout", &dout)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "dq", &dq)) != FA_OK || (s = fa__unsupported_dtype(fn, "dk", &dk)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "dv", &dv)) != FA_OK)
        return s;
    fa__attn_init(&a, &r, FA__BR_BWD);
    if ((s = fa__task_count(fn, (int64_t)r.batch * r.heads_q * a.tr, &nq)) != FA_OK ||
        (s = fa__task_count(fn, (int64_t)r.batch * r.heads_kv * a.tc, &nkv)) != FA_OK)
        return s;
    if ((s = fa__workspace(fn, workspace, workspace_size, fa__backward_bytes(&a, workers, &db, &kb), &mem,
                           &owned)) != FA_OK)
        return s;
    a.q = q; a.k = k; a.v = v; a.o = o; a.dout = dout;
    a.dq = dq; a.dk = dk; a.dv = dv;
    a.lse = (float *)(uintptr_t)lse; /* read only in the backward */
    a.ws_D = (float *)(void *)fa__align64(mem);
    a.ws_kq = (uint32_t *)(void *)((char *)a.ws_D + db);
    a.ws_workers = (char *)a.ws_D + db + kb;
    {
        fa__scratch w;
        a.worker_bytes = fa__scratch_layout(&a, FA__SCRATCH_BWD, NULL, &w);
    }
    if (a.bm)
        fa__parallel_for(&pf, r.block_mask.batch * r.block_mask.heads, fa__block_mask_transpose_task, &a);
    fa__parallel_for(&pf, nq, fa__backward_d_task, &a);
    fa__parallel_for(&pf, nkv, fa__backward_kv_task, &a);
    fa__parallel_for(&pf, nq, fa__backward_q_task, &a);
    if (owned)
        FLASHATTN_FREE(mem);
    return FA_OK;
}

/* ============================================================================
   >>impl-merge  merging partial results by log-sum-exp
   ============================================================================
   Split s attended to its own keys and produced O_s (normalized within the
   split) and L_s = log sum_{j in s} exp(S_j). Over all keys
       L = log sum_s exp(L_s) = M + log sum_s exp(L_s - M),  M = max_s L_s
       O = sum_s exp(L_s - L) O_s
   (subtracting M keeps every exp <= 1). Splits with L_s = -inf saw no key
   and weigh nothing; if all are -inf the row is O = 0, L = -inf. */
static void fa__merge_row(int nsplit, int dim, const float *o_parts, int64_t o_stride,
                          const float *lse_parts, int64_t lse_stride, float *o, float *lse)
{
    float M = -INFINITY, L;
    double sum = 0.0;
    int s, c, first;
    for (s = 0; s < nsplit; ++s)
        if (lse_parts[s * lse_stride] > M)
            M = lse_parts[s * lse_stride];
    if (M == -INFINITY) {
        for (c = 0; c < dim; ++c)
            o[c] = 0.0f;
        if (lse)
            *lse = -INFINITY;
        return;
    }
    for (s = 0; s < nsplit; ++s)
        if (lse_parts[s * lse_stride] != -INFINITY)
            sum += exp((double)lse_parts[s * lse_stride] - (double)M);
    L = (float)((double)M + log(sum));
    for (s = 0, first = 1; s < nsplit; ++s) {
        const float *os = o_parts + s * o_stride;
        float ls = lse_parts[s * lse_stride], wgt;
        if (ls == -INFINITY)
            continue;
        wgt = (float)exp((double)ls - (double)L);
        /* the first split with weight sets o, so that o may be split 0's
           own slot (in place): it is read before it is written */
        for (c = 0; c < dim; ++c)
            o[c] = first ? wgt * os[c] : o[c] + wgt * os[c];
        first = 0;
    }
    if (lse)
        *lse = L;
}

typedef struct fa__merge_ctx {
    int nsplit, dim;
    int64_t rows;
    const float *o_parts, *lse_parts;
    float *o, *lse;
} fa__merge_ctx;

#define FA__MERGE_ROWS 256 /* rows per merge task */

/* Do the byte ranges [a, a + an) and [b, b + bn) share a byte? */
static int fa__overlap(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

static void fa__merge_task(void *ctx, int index, int worker)
{
    const fa__merge_ctx *m = (const fa__merge_ctx *)ctx;
    int64_t row = (int64_t)index * FA__MERGE_ROWS, end = row + FA__MERGE_ROWS;
    (void)worker;
    for (; row < end && row < m->rows; ++row)
        fa__merge_row(m->nsplit, m->dim, m->o_parts + row * m->dim, m->rows * m->dim, m->lse_parts + row,
                      m->rows, m->o + row * m->dim, m->lse ? m->lse + row : NULL);
}

FLASHATTN_DEF fa_status fa_merge(int num_splits, int64_t rows, int dim, const float *o_parts,
                                 const float *lse_parts, float *o, float *lse)
{
    static const char fn[] = "fa_merge";
    fa__merge_ctx m;
    int64_t t;
    int ntasks = 0;
    fa__pf pf;
    fa_status s;
    if (num_splits < 1)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: num_splits (%d) must be >= 1", fn, num_splits);
    if (rows < 0)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: rows (%lld) is negative", fn, (long long)rows);
    if (dim < 1)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: dim (%d) must be >= 1", fn, dim);
    if (!fa__mul64(rows, dim, &t) || !fa__mul64(t, num_splits, &t) || t > INT64_MAX / 4)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: num_splits x rows x dim overflows int64", fn);
    if (!o_parts || !lse_parts || !o)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                        !o_parts ? "o_parts" : !lse_parts ? "lse_parts" : "o");
    if ((s = fa__task_count(fn, (rows + FA__MERGE_ROWS - 1) / FA__MERGE_ROWS, &ntasks)) != FA_OK)
        return s;
    { /* in place means o == o_parts (split 0's slot) or lse == lse_parts; any
         other shared byte between an output and an input is refused */
        size_t ob = (size_t)(rows * dim) * sizeof(float), lb = (size_t)rows * sizeof(float);
        size_t opb = ob * (size_t)num_splits, lpb = lb * (size_t)num_splits;
        const char *bad = o != o_parts && fa__overlap(o, ob, o_parts, opb) ? "o overlaps o_parts"
                          : fa__overlap(o, ob, lse_parts, lpb)            ? "o overlaps lse_parts"
                          : !lse                                          ? NULL
                          : lse != lse_parts && fa__overlap(lse, lb, lse_parts, lpb) ? "lse overlaps lse_parts"
                          : fa__overlap(lse, lb, o_parts, opb)            ? "lse overlaps o_parts"
                          : fa__overlap(lse, lb, o, ob)                   ? "lse overlaps o"
                                                                          : NULL;
        if (bad)
            return fa__fail(FA_ERROR_INVALID_ARGUMENT,
                            "%s: %s (in place is o == o_parts and lse == lse_parts only)", fn, bad);
    }
    m.nsplit = num_splits;
    m.dim = dim;
    m.rows = rows;
    m.o_parts = o_parts;
    m.lse_parts = lse_parts;
    m.o = o;
    m.lse = lse;
    fa__parallel_for(fa__pf_get(&pf), ntasks, fa__merge_task, &m);
    return FA_OK;
}

/* ============================================================================
   >>impl-decode  CPU decode against a KV cache (split-KV)
   ============================================================================
   Shapes: q [b, sq, hq, d] (sq new tokens, often 1), cache [b, cap, hkv, d]
   or a page pool, o [b, sq, hq, dv], L [b, hq, sq].

   1. Append: k_new / v_new rows go to cache positions seqlens_k[b] ... (after
      every argument has been checked, so a failing call writes nothing).
   2. Split-KV (Flash-Decoding): with few query rows, one task per
      (b, head) leaves most workers idle and a long cache in one task's
      hands. So the keys of each sequence are cut into num_splits ranges and
      one task = (b, split). The task takes ALL query heads and all sq
      tokens as its rows (row = (kvh * sq + t) * group + g); for each key
      tile it runs the forward's tile step (fa__attend_tile) once per KV
      head on that head's rows, so every K/V byte is read once per GQA
      group, not once per query head, and the cache is walked densely
      (all heads of a token are adjacent). With one new token the rows of
      a KV head are its GQA group, at most FA__DECODE_FEW_MAX of them for
      the usual groups; then the tile step (fa__decode_tile_few) reads K and V
      where they lie, converts them in registers, and walks the tile key
      by key with all KV heads of a key together, i.e. in address order:
      decode is bound by reading the cache, it reads each byte once, and
      one core only streams memory near its bandwidth in that order. More
      rows per KV head: the forward's tile step per KV head. It writes a
      normalized partial O and its L.
   3. Merge the splits with fa__merge_row (the code behind fa_merge).
   The number of splits depends only on the problem (never on the number of
   workers), so the result is bit-identical on any thread count. */

#define FA__DECODE_MIN_KEYS 256 /* keys per split at least */
#define FA__DECODE_TASKS 64     /* aim for this many (b, split) tasks */

static int fa__decode_splits(const fa_problem *r, int append)
{
    int64_t maxk = 0, want;
    int b;
    for (b = 0; b < r->batch; ++b) {
        int64_t n = fa__cache_len(r, b) + (append ? r->seqlen_q : 0);
        maxk = n > maxk ? n : maxk;
    }
    if (r->num_splits > 0)
        want = r->num_splits;
    else {
        int64_t tasks = r->batch; /* one task per (b, split) */
        want = (FA__DECODE_TASKS + tasks - 1) / tasks;
        if (want > (maxk + FA__DECODE_MIN_KEYS - 1) / FA__DECODE_MIN_KEYS)
            want = (maxk + FA__DECODE_MIN_KEYS - 1) / FA__DECODE_MIN_KEYS;
    }
    if (want > maxk) /* more splits than keys would only add empty ones */
        want = maxk;
    if (want > 1024)
        want = 1024;
    return want < 1 ? 1 : (int)want;
}

static void fa__decode_seq(const fa__attn *a, int b, fa__seq *s)
{
    s->b = b;
    s->sq = a->r.seqlen_q;
    s->q_b = b;
    s->q_row0 = 0;
    s->k_b = b;
    s->k_row0 = 0;
    s->sk = (int)fa__cache_len(&a->r, b) + (a->knew.data ? a->r.seqlen_q : 0);
    s->off = s->sk - s->sq;
}

/* w seen from row r on: the row-indexed buffers of the forward, advanced. */
static fa__scratch fa__scratch_from_row(const fa__attn *a, const fa__scratch *w, int r)
{
    fa__scratch v = *w;
    v.Q += (size_t)r * (size_t)a->dp;
    v.S += (size_t)r * (size_t)a->bcp;
    v.O += (size_t)r * (size_t)a->dvp;
    v.m += r;
    v.l += r;
    v.slope2 += r;
    v.pos += r;
    v.head += r;
    v.tok += r;
    return v;
}

/* Keys per decode tile: FA__BC, halved while one tile of all KV heads
   (K and V) is larger than FA__DECODE_AHEAD bytes, so that a tile's V
   prefetched during its dot pass (fa__decode_tile_few) is still in L2 when
   it is summed, and no further: each tile restarts the K and V streams and
   the softmax bookkeeping, so short tiles cost [cpu-decode-tile]. A tile's
   V pass reads only cache and leaves the memory idle, so tiles not much
   longer than that keep the idle stretches short: 256 KiB (64 keys of 8
   heads at d 128) [cpu-decode-avx2]. */
#define FA__DECODE_AHEAD (256 << 10)
/* Up to this many query rows per KV head, decode reads K and V in place
   (fa__decode_tile_few, FA__FEW_ROWS rows at a time); more: the forward's
   tile step per KV head. */
#ifndef FA__DECODE_FEW_MAX
#define FA__DECODE_FEW_MAX 32
#endif
static int fa__decode_tile(const fa__attn *a)
{
    int64_t row_bytes = (int64_t)a->r.heads_kv * (a->d * fa__dtype_size(a->k.dtype) + a->dv_ * fa__dtype_size(a->v.dtype));
    int keys = FA__BC;
    while (keys > 16 && keys * row_bytes > FA__DECODE_AHEAD)
        keys /= 2;
    return keys;
}

/* Keys n0 .. n0+nc-1 against the nr rows of w, which are the rows of
   nr / rph consecutive KV heads, rph <= FA__DECODE_FEW_MAX rows each (taken
   FA__FEW_ROWS at a time: the register blocks of fa__dot_col and
   fa__pv_rows; the groups after the first read K and V from cache): the tile
   step of fa__attend_tile for all these heads at once. Every head's rows
   are the same tokens, so the rows that see the tile are the same range
   [r0, r1) within each head.
   Why the loops run over keys outside and heads inside (fa__dots_heads):
   one core streams only what its hardware prefetcher sees as a stream, in
   address order; head by head (rows 2 KiB apart) reads about 3x slower,
   and software prefetch does not help [cpu-decode-order]. The price: a
   key's dot products finish with one horizontal sum per head (fa__dot_col).
   V: summing key by key would update O~ in L1 (load, FMA, store per
   vector) instead of in registers. Instead the dot pass requests each V
   row from memory right after the dot product of its key and head, i.e.
   in address order, and the V pass then runs head by head with O~ strips
   in registers (fa__pv_rows) on rows already in cache [cpu-decode-order].
   With FA__DECODE_MULTI the dot pass is short enough (2-3 keys a step,
   fa__dot_col) that the memory would idle through the V pass, and one
   core computing between its loads keeps too few lines in flight. So both
   passes ask for the next tile, into L2 (read a pass later, it must not
   evict this tile from L1): the dot pass the next tile's V rows, each after
   the same row of this tile's K (address order, through row pointers, so
   paged caches too), and, where the next tile's K rows of these heads form
   one block of memory (no pages, heads adjacent), the V pass streams that
   block, head j's pass the j-th share in address order; the next dot pass
   then requests no K [cpu-decode-avx2].
   ready: bit 0, this tile's V was requested by the tile before; bit 1, its
   K was. Returns the same for the next tile. */
static int fa__decode_tile_few(const fa__attn *a, fa__scratch *w, const fa__seq *s, int nr, int rph, int n0, int nc,
                               int n_end, int ready)
{
    int nh = nr / rph, kvh0 = w->head[0] / a->group, r0, r1, g0, j, vbytes = a->dv_ * fa__dtype_size(a->v.dtype);
    int ahead = 2 * FA__K_AHEAD, nk = n_end - n0 < nc + ahead ? n_end - n0 : nc + ahead; /* K rows to look ahead */
    int nnext = n_end - n0 - nc < nc ? n_end - n0 - nc : nc; /* keys of the next tile */
    int nv = nc; /* V row pointers: this tile's, and with the next's V requested, the next tile's too */
    size_t kb = (size_t)a->k.head_stride * (size_t)fa__dtype_size(a->k.dtype);
    size_t vb = (size_t)a->v.head_stride * (size_t)fa__dtype_size(a->v.dtype), next_bytes = 0;
    const char *next_k = NULL; /* the next tile's K block, streamed by the V pass */
    fa__row_range(a, w, rph, n0, nc, &r0, &r1);
    if (r0 >= r1)
        return 0;
    if (FA__DECODE_MULTI(r1 - r0 < FA__FEW_ROWS ? r1 - r0 : FA__FEW_ROWS, a->d) && nnext > 0) {
        nv = nc + nnext;
        if (!a->r.block_table && kb == (size_t)a->d * (size_t)fa__dtype_size(a->k.dtype) &&
            (size_t)a->k.seq_stride * (size_t)fa__dtype_size(a->k.dtype) == (size_t)nh * kb) {
            next_k = (const char *)fa__kv_row(a, &a->k, s, n0 + nc, kvh0);
            next_bytes = (size_t)nnext * (size_t)nh * kb;
        }
    }
    fa__kv_row_ptrs(a, &a->k, s, kvh0, n0, nk, w->krows);
    fa__kv_row_ptrs(a, &a->v, s, kvh0, n0, nv, w->vrows);
    /* a head's rows FA__FEW_ROWS at a time; the first group's pass reads
       the memory (and requests what comes next), the others find K in cache */
    for (g0 = r0; g0 < r1; g0 += FA__FEW_ROWS) {
        int g1 = r1 - g0 < FA__FEW_ROWS ? r1 : g0 + FA__FEW_ROWS, first = g0 == r0;
        fa__dots_heads(g1 - g0, a->k.dtype, a->d, nc, first && !(ready & 2) ? nk : 0, nh,
                       w->Q + (size_t)g0 * (size_t)a->dp, a->dp, rph, w->krows, kb,
                       w->S + (size_t)g0 * (size_t)a->bcp, a->bcp, w->row, w->vrows, vb, vbytes,
                       first && !(ready & 1), first ? nv : nc);
    }
    for (j = 0; j < nh; ++j) {
        int i0 = j * rph + r0, i1 = j * rph + r1;
        fa__score_mask(a, w, i0, i1 - i0, n0, nc, s->sk, w->S, NULL);
        fa__softmax_rows(a, w, i0, i1, FA__PAD(nc)); /* (no dropout: decode refuses it) */
    }
    for (j = 0; j < nh; ++j) { /* V rows now in cache: head by head, O~ strips in registers */
        size_t b0 = next_bytes * (size_t)j / (size_t)nh, b1 = next_bytes * (size_t)(j + 1) / (size_t)nh;
        fa__kv_row_ptrs(a, &a->v, s, kvh0 + j, n0, nc, w->vrows);
        for (g0 = r0; g0 < r1; g0 += FA__FEW_ROWS) {
            int g1 = r1 - g0 < FA__FEW_ROWS ? r1 : g0 + FA__FEW_ROWS, i0 = j * rph + g0;
            fa__pv_rows(g1 - g0, a->v.dtype, a->dv_, nc, w->S + (size_t)i0 * (size_t)a->bcp, a->bcp, w->vrows,
                        w->O + (size_t)i0 * (size_t)a->dvp, a->dvp, w->row, NULL, 0, 0,
                        next_k ? next_k + b0 : NULL, g0 == r0 ? (int)(b1 - b0) : 0);
        }
    }
    return (nv > nc) | (next_k != NULL) << 1;
}

/* One task = (b, split): every query row of the sequence (row = (kvh * sq
   + t) * group + g, so the rows of one KV head are adjacent) against the
   split's keys, one key tile at a time, all KV heads within it (few rows
   per head: fa__decode_tile_few; else KV head by KV head). The
   task thus reads ALL heads of each key tile together: K and V rows of
   all heads of a token are contiguous in the cache, so the task walks its
   part of the cache densely (few TLB misses, whole pages) instead of one
   head's rows heads * d elements apart. */
static void fa__decode_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    const fa_problem *r = &a->r;
    int split = index % a->splits, b = index / a->splits, rows = r->heads_q * r->seqlen_q, rc0, i, i1;
    int64_t rows_total = (int64_t)r->batch * r->seqlen_q * r->heads_q;
    int chunk, n_lo, n_hi, n0, tile = fa__decode_tile(a), rph = r->seqlen_q * a->group, step = a->br, ready;
    int few = rph <= FA__DECODE_FEW_MAX && rph <= a->br; /* few rows per KV head: fa__decode_tile_few */
    fa__scratch w;
    fa__seq s;
    fa__decode_seq(a, b, &s);
    chunk = (s.sk + a->splits - 1) / a->splits;
    n_lo = split * chunk;
    n_hi = n_lo + chunk < s.sk ? n_lo + chunk : s.sk;
    fa__worker_scratch(a, FA__SCRATCH_FWD, worker, &w);
    if (few) /* whole KV heads per pass */
        step = a->br / rph * rph;
    for (rc0 = 0; rc0 < rows; rc0 += step) {
        int nr = rows - rc0 < step ? rows - rc0 : step;
        for (i = 0; i < nr; ++i) {
            int row = rc0 + i, kvh = row / (r->seqlen_q * a->group), t = (row / a->group) % r->seqlen_q;
            w.tok[i] = t;
            w.head[i] = kvh * a->group + row % a->group;
            w.pos[i] = t + s.off;
        }
        fa__load_q_rows(a, &a->q, &s, &w, nr);
        fa__attend_begin(a, &w, nr);
        ready = 0;
        for (n0 = n_lo; n0 < n_hi; n0 += tile) {
            int nc = n_hi - n0 < tile ? n_hi - n0 : tile;
            if (few) {
                ready = fa__decode_tile_few(a, &w, &s, nr, rph, n0, nc, n_hi, ready);
                continue;
            }
            for (i = 0; i < nr; i = i1) { /* the rows of one KV head at a time */
                int kvh = w.head[i] / a->group;
                fa__scratch v = fa__scratch_from_row(a, &w, i);
                for (i1 = i + 1; i1 < nr && w.head[i1] / a->group == kvh; ++i1)
                    ;
                fa__attend_tile(a, &v, &s, kvh, i1 - i, n0, nc, n_hi);
            }
        }
        for (i = 0; i < nr; ++i) {
            int64_t row = ((int64_t)b * r->seqlen_q + w.tok[i]) * r->heads_q + w.head[i];
            float *o = w.O + (size_t)i * (size_t)a->dvp, m = w.m[i] == -INFINITY ? 0.0f : w.m[i];
            fa__softmax_finish(o, a->dv_, m, w.l[i], &a->ws_L[split * rows_total + row]);
            memcpy(a->ws_D + (split * rows_total + row) * a->dv_, o, (size_t)a->dv_ * sizeof(float));
        }
    }
}

/* One task per (b, token): merge the splits of its heads into o and L. */
static void fa__decode_merge_task(void *ctx, int index, int worker)
{
    const fa__attn *a = (const fa__attn *)ctx;
    const fa_problem *r = &a->r;
    int b = index / r->seqlen_q, t = index % r->seqlen_q, h;
    int64_t rows_total = (int64_t)r->batch * r->seqlen_q * r->heads_q;
    fa__scratch w;
    fa__worker_scratch(a, FA__SCRATCH_FWD, worker, &w);
    for (h = 0; h < r->heads_q; ++h) {
        int64_t row = (int64_t)index * r->heads_q + h;
        float L;
        fa__merge_row(a->splits, a->dv_, a->ws_D + row * a->dv_, rows_total * a->dv_, a->ws_L + row,
                      rows_total, w.row, &L);
        fa__store_row(fa__at(&a->o, b, t, h), a->o.dtype, a->dv_, w.row);
        if (a->lse)
            a->lse[((int64_t)b * r->heads_q + h) * r->seqlen_q + t] = L;
    }
}

/* Copy k_new / v_new into the cache (any dtype to any dtype). */
static void fa__decode_append(const fa__attn *a)
{
    const fa_problem *r = &a->r;
    int b, t, h;
    for (b = 0; b < r->batch; ++b) {
        fa__seq s;
        int len = (int)fa__cache_len(r, b);
        fa__decode_seq(a, b, &s);
        for (t = 0; t < r->seqlen_q; ++t)
            for (h = 0; h < r->heads_kv; ++h) {
                float *tmp = a->ws_L; /* the partial-L area is free before the splits run */
                fa__load_row(fa__at(&a->knew, b, t, h), a->knew.dtype, a->d, 1.0f, tmp);
                fa__store_row((void *)(uintptr_t)fa__kv_row(a, &a->k, &s, len + t, h), a->k.dtype, a->d, tmp);
                fa__load_row(fa__at(&a->vnew, b, t, h), a->vnew.dtype, a->dv_, 1.0f, tmp);
                fa__store_row((void *)(uintptr_t)fa__kv_row(a, &a->v, &s, len + t, h), a->v.dtype, a->dv_, tmp);
            }
    }
}

/* Workspace: partial O [splits, rows, dv], partial L [splits, rows] (at
   least 256 floats: the append uses it as a row buffer), worker scratch. */
static size_t fa__decode_bytes(const fa__attn *a, int workers, size_t *o_bytes, size_t *l_bytes)
{
    fa__scratch w;
    size_t rows = (size_t)a->r.batch * (size_t)a->r.seqlen_q * (size_t)a->r.heads_q;
    size_t lcount = (size_t)a->splits * rows < 256 ? 256 : (size_t)a->splits * rows;
    *o_bytes = ((size_t)a->splits * rows * (size_t)a->dv_ * sizeof(float) + 63) / 64 * 64;
    *l_bytes = (lcount * sizeof(float) + 63) / 64 * 64;
    return 64 + *o_bytes + *l_bytes + (size_t)workers * fa__scratch_layout(a, FA__SCRATCH_FWD, NULL, &w);
}

/* Decode's query rows per pass: all of a sequence's (heads_q x seqlen_q,
   a few for one token) up to FA__BR, so its scratch is no taller than
   what it holds. */
static int fa__decode_br(const fa_problem *r)
{
    int64_t rows = (int64_t)r->heads_q * r->seqlen_q;
    return rows < FA__BR ? (int)rows : FA__BR;
}

FLASHATTN_DEF fa_status fa_decode_workspace_size(const fa_problem *p, size_t *bytes)
{
    fa_problem r;
    fa__attn a;
    fa__pf pf;
    size_t ob, lb;
    fa_status s = fa__resolve("fa_decode_workspace_size", p, &r, 1);
    if (s != FA_OK || (s = fa__no_block_mask("fa_decode_workspace_size", &r)) != FA_OK)
        return s;
    if (!bytes)
        return fa__fail(FA_ERROR_INVALID_ARGUMENT, "fa_decode_workspace_size: bytes is NULL");
    fa__attn_init(&a, &r, fa__decode_br(&r));
    /* sized for an append (the larger key count), so it fits both uses */
    a.splits = fa__decode_splits(&r, 1);
    {
        int s0 = fa__decode_splits(&r, 0);
        a.splits = s0 > a.splits ? s0 : a.splits;
    }
    *bytes = fa__decode_bytes(&a, fa__num_workers(fa__pf_get(&pf)), &ob, &lb);
    return FA_OK;
}

FLASHATTN_DEF fa_status fa_decode(const fa_problem *p, fa_tensor q, fa_tensor k_cache, fa_tensor v_cache,
                                  fa_tensor k_new, fa_tensor v_new, fa_tensor o, float *lse,
                                  void *workspace, size_t workspace_size)
{
    static const char fn[] = "fa_decode";
    fa_problem r;
    fa__attn a;
    fa__pf pf;
    void *mem;
    size_t ob, lb;
    int owned, ntasks = 0, nmerge = 0, workers = fa__num_workers(fa__pf_get(&pf));
    fa_status s = fa__check_decode(fn, p, &r, &q, &k_cache, &v_cache, &k_new, &v_new, &o, lse, 1);
    if (s != FA_OK || (s = fa__unsupported_dtype(fn, "q", &q)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "k_cache", &k_cache)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "v_cache", &v_cache)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "k_new", &k_new)) != FA_OK ||
        (s = fa__unsupported_dtype(fn, "v_new", &v_new)) != FA_OK || (s = fa__unsupported_dtype(fn, "o", &o)) != FA_OK)
        return s;
    fa__attn_init(&a, &r, fa__decode_br(&r));
    a.knew = k_new;
    a.vnew = v_new;
    a.splits = fa__decode_splits(&r, k_new.data != NULL);
    if ((s = fa__task_count(fn, (int64_t)r.batch * a.splits, &ntasks)) != FA_OK ||
        (s = fa__task_count(fn, (int64_t)r.batch * r.seqlen_q, &nmerge)) != FA_OK)
        return s;
    if ((s = fa__workspace(fn, workspace, workspace_size, fa__decode_bytes(&a, workers, &ob, &lb), &mem,
                           &owned)) != FA_OK)
        return s;
    a.q = q;
    a.k = k_cache;
    a.v = v_cache;
    a.o = o;
    a.lse = lse;
    a.ws_D = (float *)(void *)fa__align64(mem);
    a.ws_L = (float *)(void *)((char *)a.ws_D + ob);
    a.ws_workers = (char *)a.ws_L + lb;
    {
        fa__scratch w;
        a.worker_bytes = fa__scratch_layout(&a, FA__SCRATCH_FWD, NULL, &w);
    }
    if (k_new.data)
        fa__decode_append(&a);
    fa__parallel_for(&pf, ntasks, fa__decode_task, &a);
    fa__parallel_for(&pf, nmerge, fa__decode_merge_task, &a);
    if (owned)
        FLASHATTN_FREE(mem);
    return FA_OK;
}


#if defined(__CUDACC__) && !defined(FLASHATTN_NO_CUDA)
#include "flashattn_cuda.cuh"
#endif

#endif /* FLASHATTN_IMPLEMENTATION_DONE */
#endif /* FLASHATTN_IMPLEMENTATION */

/* ============================================================================
   >>license
   ============================================================================
This software is available under two licenses; choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the flashattn authors
Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:
The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
This is free and unencumbered software released into the public domain.
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this
software, either in source code form or as a compiled binary, for any purpose,
commercial or non-commercial, and by any means.
In jurisdictions that recognize copyright laws, the author or authors of this
software dedicate any and all copyright interest in the software to the public
domain. We make this dedication for the benefit of the public at large and to
the detriment of our heirs and successors. We intend this dedication to be an
overt act of relinquishment of all present and future rights to this software
under copyright law.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN
ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION
WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------
*/
