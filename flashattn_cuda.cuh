/* flashattn_cuda.cuh - the GPU half of flashattn.h (included by it when the
   implementation file is compiled by nvcc). See flashattn.h for the API.

   (The forward kernels, their primitives and this file's opening chapter on
   tiling and fragment layouts live on branch `gpu`; this branch only adds the
   decode section at the end, tagged >>decode.)
*/
#ifndef FLASHATTN_CUDA_CUH
#define FLASHATTN_CUDA_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

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
      keys), 2 (<= 32 rows) or 4 (> 32 rows: the FlashAttention-2 layout, each
      warp all 64 keys). Each warp keeps its own online-softmax state (m, l, O)
      and the warps of one row block merge at the end through shared memory,
      by the same log-sum-exp rule the splits use.

   4. Split-KV (flash-decoding). batch * heads_kv CTAs rarely fill 132 SMs,
      so the keys of each sequence are cut into num_splits ranges, one CTA
      each. Every split writes its normalized partial O (fp32) and its
      log-sum-exp; fa__decode_combine_kernel merges them. The split count
      follows FlashAttention-2's wave-efficiency rule (fa__decode_num_splits).

   5. The memory pipeline. K/V tiles of BN = 64 keys go global -> shared by
      cp.async (16-byte copies, zero-fill past the end), STAGES tiles in
      flight (3 at d128: 96 KB of shared memory, two CTAs per SM), one
      barrier per tile. Shared rows are swizzled (16-byte chunk index XOR
      row % 8) so ldmatrix reads are free of bank conflicts.

   6. Paged caches. Token n of sequence b lives in page block_table[b][n / P]
      at row n % P; the gather is per key row, so any page size works (P = 1
      too). The page numbers of the next tile are fetched one tile ahead so
      their latency hides behind the current tile's copies.

   7. Appending. When k_new / v_new are given, a small copy kernel first
      writes them into the cache slots seqlens_k[b] .. + sq - 1 (stream
      ordered, so the attention kernel then reads them from the cache).

   Log base. Inside the kernels every score is kept in base 2 (s * log2(e)),
   so each exponential is one MUFU.EX2; partial log-sum-exps are base 2 as
   well, and only the final L is converted to the natural log the API
   promises. One base throughout: never mix exp and exp2 on the same value.
*/

/* ---- >>decode-prims  primitives (sm_80+) ------------------------------------
   TODO(merge with branch gpu): replace by the forward section's wrappers. */

__device__ __forceinline__ uint32_t fa__dec_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte asynchronous copy global -> shared; bytes past src_bytes (0 or 16)
   are zero-filled, and with src_bytes = 0 nothing is read. */
__device__ __forceinline__ void fa__dec_cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void fa__dec_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void fa__dec_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

__device__ __forceinline__ void fa__dec_ldmatrix_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void fa__dec_ldmatrix_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

/* 2^x in one MUFU.EX2; 2^-inf = +0, which is what masked scores rely on. */
__device__ __forceinline__ float fa__dec_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* D(16x8, fp32) += A(16x16, row-major) * B(16x8, col-major); BF16 picks the
   input type (f16 otherwise). */
template <bool BF16>
__device__ __forceinline__ void fa__dec_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> one register of two 16-bit values (lo in the low half), RNE. */
template <bool BF16>
__device__ __forceinline__ uint32_t fa__dec_pack2(float lo, float hi)
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

/* Pipeline depth by head dim: enough bytes in flight per SM (Little's law:
   ~3 TB/s * ~1 us / 132 SMs = ~25 KB) with room for two CTAs per SM at
   d <= 128. A stage is 64 keys of K and V: 16 KB (d64), 32 KB (d128), 64 KB
   (d256: two stages, one CTA per SM, and it still fits the 163 KB an A100
   allows a CTA). */
__host__ __device__ constexpr int fa__dec_stages(int D) { return D <= 64 ? 5 : D <= 128 ? 3 : 2; }
__host__ __device__ constexpr int fa__dec_tile_bytes(int D) { return FA__DEC_BN * D * 2; }
/* Row blocks of 64 rows (4 warps x 16) need too many registers at d256
   (O alone is 128 per thread): cap it at 32 rows there. */
__host__ __device__ constexpr int fa__dec_max_warps_m(int D) { return D <= 128 ? 4 : 2; }
template <int D, int WARPS_M>
__host__ __device__ constexpr int fa__dec_smem_bytes()
{
    /* K stages + V stages + Q (16 * WARPS_M rows). The epilogue reuses the
       K/V stages for the warps' fp32 O (4 * 16 rows of D + 8 floats), which
       always fits: 64 * (D + 8) * 4 < 2 * stages * tile bytes. */
    return 2 * fa__dec_stages(D) * fa__dec_tile_bytes(D) + 16 * WARPS_M * D * 2;
}

/* Byte offset of 16-byte chunk c of row r in a tile whose rows are D
   elements: the chunk index is XOR-ed with r % 8, so the 8 rows an ldmatrix
   reads at one logical chunk land in 8 different bank groups. */
template <int D>
__device__ __forceinline__ uint32_t fa__dec_swz(int r, int c)
{
    return (uint32_t)(r * (D * 2) + ((c ^ (r & 7)) << 4));
}

/* Element offset of token n of sequence b (head 0) in the cache, for K (kv=0)
   or V (kv=1). `page` is block_table[b][n / P], looked up by the caller. */
__device__ __forceinline__ int64_t fa__dec_cache_offset(const fa__decode_params &p, int b,
                                                        int n, int page, int64_t bs, int64_t ss)
{
    if (p.block_table) return (int64_t)page * bs + (int64_t)(n % p.page_size) * ss;
    return (int64_t)b * bs + (int64_t)n * ss;
}

/* ---- >>decode-kernel  one CTA = (sequence b, KV head hk, row block, split) --
   Grid: x = row block + row_blocks * split, y = hk, z = b. */
template <int D, int WARPS_M, bool BF16>
__global__ void __launch_bounds__(FA__DEC_THREADS)
fa__decode_kernel(const fa__decode_params p)
{
    constexpr int BN = FA__DEC_BN;
    constexpr int STAGES = fa__dec_stages(D);
    constexpr int WARPS_N = 4 / WARPS_M;
    constexpr int KW = BN / WARPS_N;          /* keys per warp per tile */
    constexpr int NK = KW / 16;               /* 16-key MMA steps per warp per tile */
    constexpr int NS = D <= 128 ? NK : 1;     /* 16-key steps per softmax update */
    constexpr int ROWS = 16 * WARPS_M;        /* query rows of this CTA */
    constexpr int CH = D / 8;                 /* 16-byte chunks per row */
    constexpr int RSTEP = FA__DEC_THREADS / CH; /* rows one pass of the CTA copies */
    constexpr int RPT = BN / RSTEP;           /* K (or V) rows each thread copies per tile */
    constexpr int TILE = fa__dec_tile_bytes(D);
    constexpr bool Q_IN_REGS = D <= 128;      /* d256: Q fragments would cost 64 registers */
    constexpr int OPAD = D + 8;               /* fp32 row stride of the epilogue's O */

    extern __shared__ __align__(128) unsigned char fa__dec_smem[];
    unsigned char *ks = fa__dec_smem;                     /* STAGES K tiles */
    unsigned char *vs = fa__dec_smem + STAGES * TILE;     /* STAGES V tiles */
    unsigned char *qs = fa__dec_smem + 2 * STAGES * TILE; /* ROWS x D */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int g = lane >> 2, tq = lane & 3; /* MMA fragment coordinates */
    const int rb = blockIdx.x % p.row_blocks, split = blockIdx.x / p.row_blocks;
    const int hk = blockIdx.y, b = blockIdx.z;

    /* Keys this sequence attends to: the cache plus the appended tokens,
       clamped to the capacity so a bad length cannot read outside. */
    int sk = (p.seqlens_k ? p.seqlens_k[b] : p.seqlen_k) + p.sq_new;
    sk = min(sk, p.capacity);
    const int sq = p.sq;
    /* Keys left of every row's window are never loaded. */
    const int lo = p.window ? max(0, sk - sq - p.window_left) : 0;
    const int n_tiles = sk > lo ? (sk - lo + BN - 1) / BN : 0;
    const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
    const int t_begin = split * per_split;
    const int my_tiles = max(0, min(n_tiles, t_begin + per_split) - t_begin);
    const int n_first = lo + t_begin * BN; /* first key of this split */

    const uint16_t *kbase = (const uint16_t *)p.k + (int64_t)hk * p.k_hs;
    const uint16_t *vbase = (const uint16_t *)p.v + (int64_t)hk * p.v_hs;
    const int32_t *btab = p.block_table ? p.block_table + (int64_t)b * p.pages_per_seq : 0;

    /* ---- Q: ROWS packed rows -> shared (zero rows past the real ones) ---- */
    for (int i = tid; i < ROWS * CH; i += FA__DEC_THREADS) {
        int r = i / CH, c = i % CH, row = rb * ROWS + r;
        int ok = row < p.rows;
        int t = ok ? row / p.group : 0, hh = ok ? row % p.group : 0;
        const uint16_t *src = (const uint16_t *)p.q + (int64_t)b * p.q_bs + (int64_t)t * p.q_ss +
                       (int64_t)(hk * p.group + hh) * p.q_hs + c * 8;
        fa__dec_cp_async16(fa__dec_smem_addr(qs + fa__dec_swz<D>(r, c)), src, ok ? 16 : 0);
    }
    fa__dec_cp_async_commit();

    /* ---- the copy of one K/V tile: thread copies chunk tid % CH of rows
       tid / CH + RSTEP * i. Page numbers come from `pages`, fetched one tile
       ahead (fa__dec_fetch_pages) so the issue never waits on the table. */
    const int my_c = tid % CH, my_r = tid / CH;
    int pages[RPT];
#pragma unroll
    for (int i = 0; i < RPT; i++) pages[i] = 0;
    auto fetch_pages = [&](int tile) {
        if (!btab) return;
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            int n = n_first + tile * BN + my_r + RSTEP * i;
            pages[i] = (tile < my_tiles && n < sk) ? __ldg(btab + n / p.page_size) : 0;
        }
    };
    auto issue_tile = [&](int tile) {
        const int stage = tile % STAGES;
        const uint32_t kdst = fa__dec_smem_addr(ks + stage * TILE);
        const uint32_t vdst = fa__dec_smem_addr(vs + stage * TILE);
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            int r = my_r + RSTEP * i, n = n_first + tile * BN + r;
            int ok = n < sk;
            int nn = ok ? n : 0; /* a valid address even when nothing is read */
            int64_t ko = fa__dec_cache_offset(p, b, nn, ok ? pages[i] : 0, p.k_bs, p.k_ss);
            int64_t vo = fa__dec_cache_offset(p, b, nn, ok ? pages[i] : 0, p.v_bs, p.v_ss);
            uint32_t so = fa__dec_swz<D>(r, my_c);
            /* zero-fill past the end: masked P is 0, and 0 * garbage could be NaN */
            fa__dec_cp_async16(kdst + so, kbase + ko + my_c * 8, ok ? 16 : 0);
            fa__dec_cp_async16(vdst + so, vbase + vo + my_c * 8, ok ? 16 : 0);
        }
    };

    /* ---- prologue: STAGES - 1 tiles in flight before any math ---- */
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        fetch_pages(s);
        if (s < my_tiles) issue_tile(s);
        fa__dec_cp_async_commit(); /* empty groups keep the group count uniform */
    }
    fetch_pages(STAGES - 1);

    /* ---- per-row constants: this thread holds rows g and g + 8 of its warp ---- */
    int ip[2];        /* bottom-right aligned key position of the row's query */
    float slope2[2];  /* ALiBi slope * log2(e) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = rb * ROWS + wm * 16 + g + 8 * h;
        int rr = min(row, p.rows - 1);
        int t = rr / p.group;
        ip[h] = t + sk - sq;
        slope2[h] = p.alibi ? p.alibi[hk * p.group + rr % p.group] * FA__DEC_LOG2E : 0.f;
    }

    /* Online-softmax state (seed 000, FA2 Alg. 1 lines 5-10), base 2:
       m = running max of the scores, l = this thread's share of the running
       sum of 2^(s - m) (the quad is summed once, at the end), o = unscaled
       accumulator of P V for rows g (o[j][0..1]) and g + 8 (o[j][2..3]). */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    /* Q lands first (it was the first commit group). */
    fa__dec_cp_async_wait<STAGES - 1>();
    __syncthreads(); /* every thread's Q chunks are visible to every warp */
    uint32_t qf[Q_IN_REGS ? D / 16 : 1][4];
    const uint32_t q_addr_lane = fa__dec_smem_addr(qs); /* + swizzle per k-step */
    /* A operand (16 x 16 of Q): matrices (rows 0-7, k 0-7), (8-15, 0-7),
       (0-7, 8-15), (8-15, 8-15); lane L gives row L % 8 of matrix L / 8. */
    const int qa_row = wm * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qa_c = lane >> 4;
    if (Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < (Q_IN_REGS ? D / 16 : 1); kk++)
            fa__dec_ldmatrix_x4(qf[kk], q_addr_lane + fa__dec_swz<D>(qa_row, 2 * kk + qa_c));
    }
    /* B operand of Q K^T from K [key][d] (non-transposed ldmatrix): matrices
       (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (8-15, 8-15)
       -> b0, b1 of n-tile 0, then of n-tile 1. */
    const int kb_row = (lane & 7) + (lane >> 4) * 8, kb_c = (lane >> 3) & 1;
    /* B operand of P V from V [key][d] (transposed ldmatrix): matrices
       (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (8-15, 8-15)
       -> b0, b1 of d-tile 2j, then of d-tile 2j + 1. */
    const int vb_row = (lane & 7) + ((lane >> 3) & 1) * 8, vb_c = lane >> 4;

    for (int it = 0; it < my_tiles; it++) {
        fa__dec_cp_async_wait<STAGES - 2>(); /* this thread's copies of tile `it` are done */
        __syncthreads(); /* (1) everyone's copies of tile `it` are visible;
                            (2) every warp finished tile it - 1, so its stage,
                                (it - 1) % STAGES = (it + STAGES - 1) % STAGES,
                                may be overwritten by the issue just below. */
        if (it + STAGES - 1 < my_tiles) issue_tile(it + STAGES - 1);
        fa__dec_cp_async_commit();
        fetch_pages(it + STAGES); /* used one iteration from now */

        const int stage = it % STAGES;
        const uint32_t kt = fa__dec_smem_addr(ks + stage * TILE);
        const uint32_t vt = fa__dec_smem_addr(vs + stage * TILE);
        const int n0 = n_first + it * BN; /* first key of the tile */
        const int kw0 = wn * KW;           /* this warp's first key within the tile */

        /* Does any key of this tile need a mask (past the end, causal, window)? */
        const bool need_mask = n0 + BN > sk ||
                               (p.causal && n0 + BN - 1 > sk - sq) ||
                               (p.window && (n0 < sk - 1 - p.window_left ||
                                             n0 + BN - 1 > sk - sq + p.window_right));

        /* The warp's KW keys in steps of 16 * NS: the whole slice at once at
           d <= 128 (one max/rescale per tile), 16 keys at a time at d256,
           where the S fragments of a whole slice would not fit the registers. */
#pragma unroll
        for (int c0 = 0; c0 < NK; c0 += NS) {
            /* S = Q K^T for this warp's 16 rows x 16 * NS keys (fp32). */
            float s[2 * NS][4];
#pragma unroll
            for (int j = 0; j < 2 * NS; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[4];
                if (Q_IN_REGS) {
                    a[0] = qf[Q_IN_REGS ? kk : 0][0]; a[1] = qf[Q_IN_REGS ? kk : 0][1];
                    a[2] = qf[Q_IN_REGS ? kk : 0][2]; a[3] = qf[Q_IN_REGS ? kk : 0][3];
                } else {
                    fa__dec_ldmatrix_x4(a, q_addr_lane + fa__dec_swz<D>(qa_row, 2 * kk + qa_c));
                }
#pragma unroll
                for (int c = 0; c < NS; c++) {
                    uint32_t bk[4];
                    fa__dec_ldmatrix_x4(bk, kt + fa__dec_swz<D>(kw0 + 16 * (c0 + c) + kb_row, 2 * kk + kb_c));
                    fa__dec_mma<BF16>(s[2 * c], a, bk[0], bk[1]);
                    fa__dec_mma<BF16>(s[2 * c + 1], a, bk[2], bk[3]);
                }
            }

            /* Scores in base 2, then softcap, ALiBi and masks. Element e of
               s[j] is row g + 8 * (e >> 1), key n0 + kw0 + 16 * c0 + 8 * j + 2 * tq + (e & 1). */
#pragma unroll
            for (int j = 0; j < 2 * NS; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, key = n0 + kw0 + 16 * c0 + 8 * j + 2 * tq + (e & 1);
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

            /* Online softmax (seed 000 FA2 Alg. 1 line 9): new max, rescale the
               old sum and accumulator by 2^(m_old - m_new), add this tile. */
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
                const float alpha = fa__dec_exp2(m[h] - m_ref); /* rescale of the old state */
                m[h] = m_new;
                float sum = 0.f;
#pragma unroll
                for (int j = 0; j < 2 * NS; j++) {
                    s[j][2 * h] = fa__dec_exp2(s[j][2 * h] - m_ref);
                    s[j][2 * h + 1] = fa__dec_exp2(s[j][2 * h + 1] - m_ref);
                    sum += s[j][2 * h] + s[j][2 * h + 1];
                }
                l[h] = l[h] * alpha + sum;
#pragma unroll
                for (int j = 0; j < D / 8; j++) { o[j][2 * h] *= alpha; o[j][2 * h + 1] *= alpha; }
            }

            /* O += P V. The C fragments of n-tiles 2c, 2c + 1 of S, rounded to f16/bf16,
               are exactly the A fragment of the 16-key step c: no shuffles. */
#pragma unroll
            for (int c = 0; c < NS; c++) {
                uint32_t a[4];
                a[0] = fa__dec_pack2<BF16>(s[2 * c][0], s[2 * c][1]);
                a[1] = fa__dec_pack2<BF16>(s[2 * c][2], s[2 * c][3]);
                a[2] = fa__dec_pack2<BF16>(s[2 * c + 1][0], s[2 * c + 1][1]);
                a[3] = fa__dec_pack2<BF16>(s[2 * c + 1][2], s[2 * c + 1][3]);
#pragma unroll
                for (int j = 0; j < D / 16; j++) {
                    uint32_t bv[4];
                    fa__dec_ldmatrix_x4_trans(bv, vt + fa__dec_swz<D>(kw0 + 16 * (c0 + c) + vb_row, 2 * j + vb_c));
                    fa__dec_mma<BF16>(o[2 * j], a, bv[0], bv[1]);
                    fa__dec_mma<BF16>(o[2 * j + 1], a, bv[2], bv[3]);
                }
            }
        }
    }

    /* ---- epilogue: merge the WARPS_N key slices of each row block ---- */
    fa__dec_cp_async_wait<0>(); /* no copy may still be writing the stages we reuse */
    __syncthreads();            /* and every warp is done reading K/V from them */
    float *os = (float *)fa__dec_smem;          /* [4 warps][16][OPAD] */
    float *ms = os + 4 * 16 * OPAD;             /* [4 warps][16] */
    float *ls = ms + 4 * 16;                    /* [4 warps][16] */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float lsum = l[h];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
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
    for (int i = tid; i < ROWS * (D / 4); i += FA__DEC_THREADS) {
        const int r = i / (D / 4), c4 = (i % (D / 4)) * 4;
        const int row = rb * ROWS + r;
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
                const float f = fa__dec_exp2(ms[ww * 16 + r16] - M); /* 0 for an empty slice */
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
        const int64_t orow = ((int64_t)b * p.hq + h) * sq + t; /* index in L's layout */
        if (final_out) {
            uint16_t *dst = (uint16_t *)p.o + (int64_t)b * p.o_bs + (int64_t)t * p.o_ss + (int64_t)h * p.o_hs + c4;
            /* 4 values, 8 bytes: aligned, since strides are multiples of 8 elements */
            *reinterpret_cast<uint2 *>(dst) = make_uint2(fa__dec_pack2<BF16>(acc.x, acc.y), fa__dec_pack2<BF16>(acc.z, acc.w));
            if (p.lse && c4 == 0) p.lse[orow] = lse2 * FA__DEC_LN2;
        } else {
            const int64_t prow = (int64_t)split * p.batch * p.hq * sq + orow;
            *reinterpret_cast<float4 *>(p.o_part + prow * D + c4) = acc;
            if (c4 == 0) p.lse_part[prow] = lse2;
        }
    }
}

/* ---- >>decode-combine  merge the splits by log-sum-exp ----------------------
   One warp per output row (b, h, t); lane holds D/32 columns.
     M = max_s LSE_s (0 if all are -inf), L = M + log2 sum_s 2^(LSE_s - M),
     O = sum_s 2^(LSE_s - L) O_s         (seed 000, flash-decoding) */
template <int D, bool BF16>
__global__ void __launch_bounds__(128)
fa__decode_combine_kernel(const fa__decode_params p)
{
    constexpr int PER = D / 32;
    const int lane = threadIdx.x & 31;
    const int64_t R = (int64_t)p.batch * p.hq * p.sq;
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= R) return;
    const int S = p.num_splits;

    float M = -INFINITY;
    for (int s = lane; s < S; s += 32) M = fmaxf(M, p.lse_part[s * R + row]);
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, x));
    const float m_ref = M == -INFINITY ? 0.f : M;
    float sum = 0.f;
    for (int s = lane; s < S; s += 32) sum += fa__dec_exp2(p.lse_part[s * R + row] - m_ref);
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
    const float L2 = sum > 0.f ? m_ref + __log2f(sum) : -INFINITY;

    float acc[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) acc[i] = 0.f;
    if (sum > 0.f) {
        for (int s = 0; s < S; s++) {
            const float w = fa__dec_exp2(p.lse_part[s * R + row] - L2); /* 0 for an empty split */
            const float *src = p.o_part + (s * R + row) * D + lane * PER;
#pragma unroll
            for (int i = 0; i < PER; i += 2) {
                const float2 v = *reinterpret_cast<const float2 *>(src + i);
                acc[i] += w * v.x; acc[i + 1] += w * v.y;
            }
        }
    }
    /* row = (b * hq + h) * sq + t */
    const int t = (int)(row % p.sq), h = (int)((row / p.sq) % p.hq), b = (int)(row / ((int64_t)p.sq * p.hq));
    uint16_t *dst = (uint16_t *)p.o + (int64_t)b * p.o_bs + (int64_t)t * p.o_ss + (int64_t)h * p.o_hs + lane * PER;
#pragma unroll
    for (int i = 0; i < PER; i += 2) {
        const uint32_t two = fa__dec_pack2<BF16>(acc[i], acc[i + 1]);
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
    const int page = p.block_table ? p.block_table[(int64_t)b * p.pages_per_seq + n / p.page_size] : 0;
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

/* FlashAttention-2's rule for the number of splits. `ctas` = CTAs without
   splitting, `slots` = CTAs the GPU runs at once (SMs x CTAs per SM),
   `tiles` = K/V tiles of the longest sequence.
   - No split if the CTAs already fill >= 80% of a wave.
   - Else for each count s, wave efficiency = waves / ceil(waves), waves =
     ctas * s / slots; take the SMALLEST s within 85% of the best efficiency
     (fewer splits = less partial output to write and merge). Counts that
     leave tiles-per-split unchanged from s - 1 are skipped: they add CTAs
     without shortening the longest one. */
static int fa__decode_num_splits(int64_t ctas, int slots, int tiles, int max_splits)
{
    float eff[129], best = 0.f;
    int s, prev_per = -1;
    if (ctas >= (int64_t)(0.8f * (float)slots) || tiles <= 1) return 1;
    if (max_splits > tiles) max_splits = tiles;
    if (max_splits > 128) max_splits = 128;
    for (s = 1; s <= max_splits; s++) {
        float waves = (float)(ctas * s) / (float)slots;
        eff[s] = waves / ceilf(waves);
        if (eff[s] > best) best = eff[s];
    }
    for (s = 1; s <= max_splits; s++) {
        int per = (tiles + s - 1) / s;
        int eligible = s == 1 || per != prev_per;
        prev_per = per;
        if (eligible && eff[s] >= 0.85f * best) return s;
    }
    return 1;
}

/* The launch plan for one problem: derived from p alone and the device. */
typedef struct fa__decode_plan {
    int d, warps_m, row_blocks, num_splits;
    size_t workspace; /* bytes of o_part + lse_part */
} fa__decode_plan;

/* Opt the kernel in to more than 48 KB of dynamic shared memory (once per
   device; the attribute belongs to the device's context) and report how many
   CTAs an SM holds. The cache is a plain array: two threads racing on it
   both store the same numbers. */
template <int D, int WM, bool BF16>
static cudaError_t fa__decode_setup(int dev, int *blocks)
{
    static int cached[64]; /* CTAs per SM + 1, per device; 0 = not yet */
    const int smem = fa__dec_smem_bytes<D, WM>();
    cudaError_t e;
    int n = 0;
    if (dev >= 0 && dev < 64 && cached[dev]) { *blocks = cached[dev] - 1; return cudaSuccess; }
    e = cudaFuncSetAttribute(fa__decode_kernel<D, WM, BF16>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fa__decode_kernel<D, WM, BF16>,
                                                      FA__DEC_THREADS, smem);
    if (e != cudaSuccess) return e;
    if (n < 1) return cudaErrorInvalidConfiguration; /* does not fit this device's shared memory */
    if (dev >= 0 && dev < 64) cached[dev] = n + 1;
    *blocks = n;
    return cudaSuccess;
}

/* Set up the kernel this problem will use; CTAs per SM in *blocks. */
static cudaError_t fa__decode_setup_any(int dev, int d, int wm, int bf16, int *blocks)
{
#define FA__DEC_SETUP(D_, T_)                                                   \
    if (d == D_) {                                                              \
        if (wm == 1) return fa__decode_setup<D_, 1, T_>(dev, blocks);           \
        if (wm == 2) return fa__decode_setup<D_, 2, T_>(dev, blocks);           \
        return fa__decode_setup<D_, fa__dec_max_warps_m(D_), T_>(dev, blocks);  \
    }
    if (bf16) { FA__DEC_SETUP(64, true) FA__DEC_SETUP(128, true) FA__DEC_SETUP(256, true) }
    else { FA__DEC_SETUP(64, false) FA__DEC_SETUP(128, false) FA__DEC_SETUP(256, false) }
#undef FA__DEC_SETUP
    *blocks = 1;
    return cudaSuccess;
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
    int hq, hkv, d, group, dev = 0, sms = 0, per_sm = 1, rows, append;
    cudaError_t e;
    fa_status st;
    /* device arrays (seqlens_k, block_table, alibi_slopes): host_arrays = 0 */
    st = have_tensors ? fa__check_decode(fn, p, &r, &q, &kc, &vc, &kn, &vn, &o, lse, 0)
                      : fa__resolve(fn, p, &r, 0);
    if (st != FA_OK) return st;
    hq = r.heads_q; hkv = r.heads_kv; d = r.head_dim; group = hq / hkv;
    append = have_tensors && kn.data != NULL;
    if (r.head_dim_v != d || (d != 64 && d != 128 && d != 256))
        return fa__fail(FA_ERROR_UNSUPPORTED,
                        "%s: head_dim %d / head_dim_v %d: the GPU decode kernels exist for head_dim "
                        "64, 128 and 256 with head_dim_v == head_dim", fn, d, r.head_dim_v);
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
    if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess ||
        (e = fa__decode_setup_any(dev, d, plan->warps_m, !have_tensors || q.dtype == FA_BF16,
                                  &per_sm)) != cudaSuccess)
        return fa__fail(FA_ERROR_CUDA, "%s: %s", fn, cudaGetErrorString(e));
    {
        int64_t ctas = (int64_t)r.batch * hkv * plan->row_blocks;
        int longest = r.seqlen_k; /* device lengths are unknown on the host: plan for the capacity */
        int tiles = (longest + FA__DEC_BN - 1) / FA__DEC_BN;
        int splits = r.num_splits ? r.num_splits
                                   : fa__decode_num_splits(ctas, sms * (per_sm > 0 ? per_sm : 1), tiles, 128);
        if (splits > 65535 / plan->row_blocks) splits = 65535 / plan->row_blocks;
        if (splits < 1) splits = 1;
        plan->num_splits = splits;
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

template <int D, bool BF16>
static cudaError_t fa__decode_launch_t(const fa__decode_params &kp, const fa__decode_plan &plan,
                                       cudaStream_t st)
{
    dim3 grid((unsigned)(plan.row_blocks * plan.num_splits), (unsigned)kp.hkv, (unsigned)kp.batch);
    cudaError_t e;
    if (kp.k_new) {
        int64_t total = (int64_t)kp.batch * kp.sq * kp.hkv * (D / 8);
        fa__decode_append_kernel<D><<<(unsigned)((total + 255) / 256), 256, 0, st>>>(kp);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    /* (fa__decode_setup_any already opted the kernel in to its shared memory) */
#define FA__DEC_LAUNCH(WM)                                                                 \
    if (plan.warps_m == WM && WM <= fa__dec_max_warps_m(D))                                \
        fa__decode_kernel<D, (WM <= fa__dec_max_warps_m(D) ? WM : 2), BF16>                   \
            <<<grid, FA__DEC_THREADS, fa__dec_smem_bytes<D, (WM <= fa__dec_max_warps_m(D) ? WM : 2)>(), st>>>(kp);
    FA__DEC_LAUNCH(1) FA__DEC_LAUNCH(2) FA__DEC_LAUNCH(4)
#undef FA__DEC_LAUNCH
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (plan.num_splits > 1) {
        int64_t R = (int64_t)kp.batch * kp.hq * kp.sq;
        fa__decode_combine_kernel<D, BF16><<<(unsigned)((R + 3) / 4), 128, 0, st>>>(kp);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

static cudaError_t fa__decode_launch(const fa__decode_params &kp, const fa__decode_plan &plan,
                                     int bf16, cudaStream_t st)
{
    if (plan.d == 64) return bf16 ? fa__decode_launch_t<64, true>(kp, plan, st)
                                  : fa__decode_launch_t<64, false>(kp, plan, st);
    if (plan.d == 128) return bf16 ? fa__decode_launch_t<128, true>(kp, plan, st)
                                   : fa__decode_launch_t<128, false>(kp, plan, st);
    return bf16 ? fa__decode_launch_t<256, true>(kp, plan, st)
                : fa__decode_launch_t<256, false>(kp, plan, st);
}

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
    if (owned) {
        cudaError_t e2 = cudaFreeAsync(owned, st);
        if (e == cudaSuccess) e = e2;
    }
    if (e != cudaSuccess) return fa__fail(FA_ERROR_CUDA, "fa_decode_cuda: %s", cudaGetErrorString(e));
    return FA_OK;
}

#endif /* FLASHATTN_CUDA_CUH */
