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
     7. Performance and accuracy ............ this block
     >>api           public declarations
     >>impl          implementation (under FLASHATTN_IMPLEMENTATION)
     >>impl-util     status, errors, allocation, threads
     >>impl-convert  f16 / bf16 <-> f32 conversion
     >>impl-philox   dropout random numbers
     >>impl-check    argument validation
     >>impl-softmax  the online softmax, step by step
     >>impl-forward  CPU forward (FlashAttention-2 loop order)
     >>impl-backward CPU backward (recomputation)
     >>impl-decode   CPU decode against a KV cache (split-KV)
     >>impl-merge    merging partial results by log-sum-exp
     >>license

   ============================================================================
   1. USAGE
   ============================================================================
   In exactly ONE C or C++ file:

       #define FLASHATTN_IMPLEMENTATION
       #include "flashattn.h"

   Everywhere else just #include "flashattn.h". If that one file is compiled by
   nvcc (a .cu file), the GPU half (flashattn_cuda.cuh, next to this header) is
   compiled in too and the fa_*_cuda entry points exist. The declarations need
   no CUDA header: device pointers and the stream are plain `void *`, so a C
   engine built by gcc, clang or MSVC can call GPU functions that were compiled
   in another translation unit.

       fa_problem p = {0};            // zero = full attention, scale 1/sqrt(d)
       p.batch = 1; p.seqlen_q = p.seqlen_k = 1024;
       p.heads_q = 8; p.head_dim = 64;
       fa_tensor q = {Q, FA_F32}, k = {K, FA_F32}, v = {V, FA_F32}, o = {O, FA_F32};
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
     FLASHATTN_CPU_BR          (64) CPU query tile rows Br.
     FLASHATTN_CPU_BC          (64) CPU key/value tile columns Bc.
     FLASHATTN_NO_SIMD         (undefined) use only the portable C loops, even
                               where AVX2/FMA or NEON is available.
     FLASHATTN_NO_CUDA         (undefined) do not pull in flashattn_cuda.cuh even
                               when compiled by nvcc.
     GPU macros (FLASHATTN_BLOCK_M, FLASHATTN_BLOCK_N, FLASHATTN_WARPS,
     FLASHATTN_HEAD_DIMS, ...) are listed at the top of flashattn_cuda.cuh.

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
     fa_forward_workspace_size(&p, &bytes)   optional: scratch the call needs.
     fa_forward(&p, q, k, v, o, lse, ws, bytes)      O and L.
     fa_backward(&p, q, k, v, o, dout, lse, dq, dk, dv, ws, bytes)
     fa_decode(&p, q, k_cache, v_cache, k_new, v_new, o, lse, ws, bytes)
     fa_merge(splits, rows, dim, o_parts, lse_parts, o, lse)
     fa_status_string(s), fa_last_error()   what went wrong, naming the argument.
     fa_set_parallel_for(fn, user, workers) run the CPU path on your job system.
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
   The same inputs give bit-identical outputs run to run, on any thread count.

   ============================================================================
   6. WHAT IT DOES NOT DO
   ============================================================================
   - It does not hold or cache anything between calls, start threads of its own
     (outside OpenMP), or allocate when you pass a workspace.
   - No FP8 (e4m3) on the CPU: FA_ERROR_UNSUPPORTED.
   - No arbitrary additive masks; masks are causal / window / ALiBi only.
   - On the GPU it cannot check the contents of device arrays (cu_seqlens,
     block tables, cache lengths) without synchronizing, so it does not.

   ============================================================================
   7. PERFORMANCE AND ACCURACY
   ============================================================================
   See README.md and bench/results/ (numbers with date and machine).
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
#define FLASHATTN_DEF static
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
    FA_E4M3 = 3  /* fp8 e4m3fn: reserved for the GPU FP8 path */
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

/* Everything about one attention call except the data. Zero-initialize it:
   every zero field means the default written beside it. */
typedef struct fa_problem {
    int batch;      /* number of sequences (required, >= 1) */
    int seqlen_q;   /* queries per sequence; with cu_seqlens_q, the maximum */
    int seqlen_k;   /* keys per sequence; with cu_seqlens_k, the maximum;
                       for decode, the cache capacity per sequence */
    int heads_q;    /* query heads (required) */
    int heads_kv;   /* key/value heads; 0 = heads_q. heads_q % heads_kv == 0
                       (GQA; 1 = MQA). Query head h reads KV head h / (heads_q/heads_kv). */
    int head_dim;   /* d of Q and K, 1..256 */
    int head_dim_v; /* d of V and O; 0 = head_dim */
    float scale;    /* 0 = 1/sqrt(head_dim). Must be finite. */

    int causal;         /* nonzero: causal, bottom-right aligned */
    int sliding_window; /* nonzero: use window_left / window_right */
    int window_left;    /* keys visible to the left of i' (>= 0) */
    int window_right;   /* keys visible to the right of i' (>= 0) */
    float softcap;      /* 0 = off; else s <- softcap * tanh(s / softcap) */
    const float *alibi_slopes; /* [heads_q] or NULL (device memory for _cuda) */

    /* Variable-length batches: [batch + 1] non-decreasing offsets, first 0.
       NULL = every sequence has seqlen_q / seqlen_k rows. */
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k;
    /* Keys in use per sequence [batch] (KV caches, padded batches); NULL =
       seqlen_k. For decode: the cache length BEFORE the new tokens. */
    const int32_t *seqlens_k;

    /* Paged KV cache (decode): K/V views index a pool of pages
       [num_pages, page_size, heads_kv, dim] (batch_stride = page stride);
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
    int deterministic;  /* backward: bit-identical run to run (GPU); CPU always is */

    float descale_q, descale_k, descale_v; /* FP8 only; 0 = 1 */
} fa_problem;

/* Status text, and the message of the last failed call on this thread
   (it names the offending argument). Never NULL. */
FLASHATTN_DEF const char *fa_status_string(fa_status s);
FLASHATTN_DEF const char *fa_last_error(void);

/* Validate p (without tensors) and fill every defaulted field. */
FLASHATTN_DEF fa_status fa_problem_resolve(const fa_problem *p, fa_problem *resolved);

/* CPU threads: fn(user, n, task, ctx) must call task(ctx, i, worker) once for
   every i in [0, n), from any threads, with worker in [0, workers) and no two
   concurrent calls sharing a worker index; it returns when all are done.
   Pass fn = NULL to go back to OpenMP (if compiled with it) or one thread. */
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
   weight; rows with no weight anywhere give o = 0, lse = -inf. */
FLASHATTN_DEF fa_status fa_merge(int num_splits, int64_t rows, int dim,
                                 const float *o_parts, const float *lse_parts,
                                 float *o, float *lse);

/* ---- GPU (defined when the implementation file is compiled by nvcc) --------
   Same arguments as the CPU calls, all pointers in device memory, plus the
   CUDA stream as void* (NULL = default stream). Stream-ordered: no host
   synchronization; a workspace not given is allocated stream-ordered. */
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

/* (the CPU implementation goes here) */

/* ---- TEMPORARY (branch decode, until branch cpu is merged): the status
   strings and the last-error message the GPU decode path reports through.
   Branch cpu's >>impl-util replaces this block. */
#include <stdio.h>
#include <string.h>
static char fa__last_error_buf[256] = "";
FLASHATTN_DEF const char *fa_status_string(fa_status s)
{
    switch (s) {
#define FLASHATTN_X_CASE(name, value, text) case name: return text;
        FLASHATTN_STATUS_LIST(FLASHATTN_X_CASE)
#undef FLASHATTN_X_CASE
    default: return "unknown status";
    }
}
FLASHATTN_DEF const char *fa_last_error(void) { return fa__last_error_buf; }
static fa_status fa__fail(fa_status s, const char *msg)
{
    snprintf(fa__last_error_buf, sizeof fa__last_error_buf, "%s", msg);
    return s;
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
