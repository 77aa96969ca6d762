/* bench/fa_bench_lib.cu - a tiny C ABI over fa_forward_cuda, fa_backward_cuda
   and fa_quantize_cuda for ctypes (bench/vs_torch.py, bench/vs_flex_sparse.py;
   bench/vs_torch_backward.py calls fa_backward_cuda itself).
   Build: make build/libfa_bench.so
     nvcc -std=c++17 -O3 -shared -Xcompiler -fPIC bench/fa_bench_lib.cu -o build/libfa_bench.so */
#ifndef FLASHATTN_HEAD_DIMS
#define FLASHATTN_HEAD_DIMS 64, 128, 256 /* the benchmark grid's; a third of the compile time */
#endif
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

/* The packed [b, s, h, d] problem of the benchmarks. */
static void bench_problem(fa_problem *p, fa_tensor *t, int batch, int sq, int sk, int hq, int hkv, int d,
                          int causal)
{
    memset(p, 0, sizeof *p);
    memset(t, 0, sizeof *t);
    p->batch = batch; p->seqlen_q = sq; p->seqlen_k = sk; p->heads_q = hq; p->heads_kv = hkv;
    p->head_dim = d; p->causal = causal;
}

/* q [b, sq, hq, d], k/v [b, sk, hkv, d], o [b, sq, hq, d] packed, device
   pointers; lse [b, hq, sq] or NULL; stream a cudaStream_t. Returns fa_status. */
extern "C" int fa_bench_forward(void *q, void *k, void *v, void *o, float *lse, int batch, int sq,
                                int sk, int hq, int hkv, int d, int causal, int bf16, void *stream)
{
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    bench_problem(&p, &tq, batch, sq, sk, hq, hkv, d, causal);
    tk = tv = to = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = bf16 ? FA_BF16 : FA_F16;
    return (int)fa_forward_cuda(&p, tq, tk, tv, to, lse, NULL, 0, stream);
}

/* The block mask of the sparse entries below: FlexAttention's BlockMask
   layout (kv_num [masks][q_blocks], kv_idx [masks][q_blocks][k_blocks],
   int32, device), 128 x 128 blocks; full_num / full_idx may be NULL;
   mask_batch, mask_heads as fa_block_mask's batch, heads. */
static void bench_block_mask(fa_problem *p, const int *kv_num, const int *kv_idx, const int *full_num,
                             const int *full_idx, int mask_batch, int mask_heads)
{
    p->block_mask.block_q = p->block_mask.block_k = 128;
    p->block_mask.batch = mask_batch; p->block_mask.heads = mask_heads;
    p->block_mask.kv_num_blocks = (const int32_t *)kv_num; p->block_mask.kv_indices = (const int32_t *)kv_idx;
    p->block_mask.full_kv_num_blocks = (const int32_t *)full_num;
    p->block_mask.full_kv_indices = (const int32_t *)full_idx;
}

/* Workspace bytes fa_bench_forward_sparse needs for that problem (the lists
   are not read, only whether they are NULL), or -1: refused (the message in
   fa_bench_last_error). */
extern "C" long long fa_bench_forward_sparse_workspace(int batch, int sq, int sk, int hq, int hkv, int d,
                                                       int causal, const int *kv_num, const int *kv_idx,
                                                       const int *full_num, const int *full_idx, int mask_batch,
                                                       int mask_heads)
{
    fa_problem p;
    fa_tensor t;
    size_t bytes = 0;
    bench_problem(&p, &t, batch, sq, sk, hq, hkv, d, causal);
    bench_block_mask(&p, kv_num, kv_idx, full_num, full_idx, mask_batch, mask_heads);
    return fa_forward_cuda_workspace_size(&p, &bytes) == FA_OK ? (long long)bytes : -1;
}

/* fa_bench_forward with a block mask (bench_block_mask above) and the
   workspace it needs (device, ws_bytes >= fa_bench_forward_sparse_workspace;
   NULL when that is 0). Returns fa_status. */
extern "C" int fa_bench_forward_sparse(void *q, void *k, void *v, void *o, float *lse, int batch, int sq, int sk,
                                       int hq, int hkv, int d, int causal, int bf16, const int *kv_num,
                                       const int *kv_idx, const int *full_num, const int *full_idx,
                                       int mask_batch, int mask_heads, void *workspace, long long ws_bytes,
                                       void *stream)
{
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    bench_problem(&p, &tq, batch, sq, sk, hq, hkv, d, causal);
    bench_block_mask(&p, kv_num, kv_idx, full_num, full_idx, mask_batch, mask_heads);
    tk = tv = to = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = bf16 ? FA_BF16 : FA_F16;
    return (int)fa_forward_cuda(&p, tq, tk, tv, to, lse, workspace, (size_t)ws_bytes, stream);
}

/* The backward entries: q, k, v, o, dout, dq, dk, dv packed [b, s, h, d] as
   above (k, v, dk, dv with hkv heads), device; lse [b, hq, sq] float, the
   forward's (natural log). The block mask as bench_block_mask's; all four
   lists NULL = none (the dense backward). deterministic: fa_problem's. */
static void bench_backward_problem(fa_problem *p, fa_tensor *t, int batch, int sq, int sk, int hq, int hkv,
                                   int d, int causal, int deterministic, const int *kv_num, const int *kv_idx,
                                   const int *full_num, const int *full_idx, int mask_batch, int mask_heads)
{
    bench_problem(p, t, batch, sq, sk, hq, hkv, d, causal);
    p->deterministic = deterministic;
    if (kv_num || full_num) bench_block_mask(p, kv_num, kv_idx, full_num, full_idx, mask_batch, mask_heads);
}

/* Workspace bytes fa_bench_backward_sparse (lists given) or the dense
   fa_bench_backward (all NULL) needs for that problem (the lists are not
   read, only whether they are NULL), or -1: refused (fa_bench_last_error). */
extern "C" long long fa_bench_backward_sparse_workspace(int batch, int sq, int sk, int hq, int hkv, int d,
                                                        int causal, int deterministic, const int *kv_num,
                                                        const int *kv_idx, const int *full_num,
                                                        const int *full_idx, int mask_batch, int mask_heads)
{
    fa_problem p;
    fa_tensor t;
    size_t bytes = 0;
    bench_backward_problem(&p, &t, batch, sq, sk, hq, hkv, d, causal, deterministic, kv_num, kv_idx, full_num,
                           full_idx, mask_batch, mask_heads);
    return fa_backward_cuda_workspace_size(&p, &bytes) == FA_OK ? (long long)bytes : -1;
}

/* fa_backward_cuda with a block mask (or none: all four lists NULL) and the
   workspace it needs (device, ws_bytes >= fa_bench_backward_sparse_workspace;
   NULL: allocated by the call, stream-ordered). Returns fa_status. */
extern "C" int fa_bench_backward_sparse(void *q, void *k, void *v, void *o, void *dout, const float *lse, void *dq,
                                        void *dk, void *dv, int batch, int sq, int sk, int hq, int hkv, int d,
                                        int causal, int bf16, int deterministic, const int *kv_num,
                                        const int *kv_idx, const int *full_num, const int *full_idx,
                                        int mask_batch, int mask_heads, void *workspace, long long ws_bytes,
                                        void *stream)
{
    fa_problem p;
    fa_tensor tq, tk, tv, to, tdo, tdq, tdk, tdv;
    bench_backward_problem(&p, &tq, batch, sq, sk, hq, hkv, d, causal, deterministic, kv_num, kv_idx, full_num,
                           full_idx, mask_batch, mask_heads);
    tk = tv = to = tdo = tdq = tdk = tdv = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o; tdo.data = dout;
    tdq.data = dq; tdk.data = dk; tdv.data = dv;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = tdo.dtype = tdq.dtype = tdk.dtype = tdv.dtype =
        bf16 ? FA_BF16 : FA_F16;
    return (int)fa_backward_cuda(&p, tq, tk, tv, to, tdo, lse, tdq, tdk, tdv, workspace, (size_t)ws_bytes, stream);
}

/* The dense backward: fa_bench_backward_sparse without a block mask
   (its workspace: fa_bench_backward_sparse_workspace with NULL lists). */
extern "C" int fa_bench_backward(void *q, void *k, void *v, void *o, void *dout, const float *lse, void *dq,
                                 void *dk, void *dv, int batch, int sq, int sk, int hq, int hkv, int d, int causal,
                                 int bf16, int deterministic, void *workspace, long long ws_bytes, void *stream)
{
    return fa_bench_backward_sparse(q, k, v, o, dout, lse, dq, dk, dv, batch, sq, sk, hq, hkv, d, causal, bf16,
                                    deterministic, NULL, NULL, NULL, NULL, 0, 0, workspace, ws_bytes, stream);
}

/* Variable length: batch sequences packed along one token axis, q, o
   [total_q, hq, d], k, v [total_k, hkv, d], lse [hq, total_q]; cu_q, cu_k
   [batch + 1] int32 offsets (device); sq, sk the longest sequence. */
extern "C" int fa_bench_forward_varlen(void *q, void *k, void *v, void *o, float *lse, const int *cu_q,
                                       const int *cu_k, int batch, int sq, int sk, int hq, int hkv, int d,
                                       int causal, int bf16, void *stream)
{
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    bench_problem(&p, &tq, batch, sq, sk, hq, hkv, d, causal);
    p.cu_seqlens_q = (const int32_t *)cu_q; p.cu_seqlens_k = (const int32_t *)cu_k;
    tk = tv = to = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = bf16 ? FA_BF16 : FA_F16;
    return (int)fa_forward_cuda(&p, tq, tk, tv, to, lse, NULL, 0, stream);
}

/* FP8: q, k, v e4m3 (packed as above, device), o bf16 (or f16). Descales
   per block: device arrays dsq [b][hq][ceil(sq / FLASHATTN_FP8_BLOCK_Q)],
   dsk, dsv [b][hkv][ceil(sk / FLASHATTN_FP8_BLOCK_K)]; or, where dsq is
   NULL, per tensor: the floats q_s, k_s, v_s (host values). */
extern "C" int fa_bench_forward_fp8(void *q, void *k, void *v, void *o, float *lse, const float *dsq,
                                    const float *dsk, const float *dsv, float q_s, float k_s, float v_s, int batch,
                                    int sq, int sk, int hq, int hkv, int d, int causal, int bf16, void *stream)
{
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    bench_problem(&p, &tq, batch, sq, sk, hq, hkv, d, causal);
    if (dsq) {
        p.descale_q_block = dsq; p.descale_k_block = dsk; p.descale_v_block = dsv;
    } else {
        p.descale_q = q_s; p.descale_k = k_s; p.descale_v = v_s;
    }
    tk = tv = to = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = FA_E4M3;
    to.dtype = bf16 ? FA_BF16 : FA_F16;
    return (int)fa_forward_cuda(&p, tq, tk, tv, to, lse, NULL, 0, stream);
}

/* fa_quantize_cuda of a packed [b, s, h, d] f16 / bf16 x into e4m3 out and
   its descales (device; fa_bench_descales says how many). role 0 Q, 1 K,
   2 V (never rotated). */
extern "C" int fa_bench_quantize(const void *x, void *out, float *descale, int role, int batch, int seqlen,
                                 int heads, int d, int per_tensor, int hadamard, unsigned long long seed, int bf16,
                                 void *stream)
{
    fa_quant p;
    fa_tensor tx, tout;
    memset(&p, 0, sizeof p);
    memset(&tx, 0, sizeof tx);
    p.role = (fa_quant_role)role; p.batch = batch; p.seqlen = seqlen; p.heads = heads; p.head_dim = d;
    p.per_tensor = per_tensor; p.hadamard = hadamard; p.seed = seed;
    tout = tx;
    tx.data = (void *)x; tx.dtype = bf16 ? FA_BF16 : FA_F16;
    tout.data = out; tout.dtype = FA_E4M3;
    return (int)fa_quantize_cuda(&p, tx, tout, descale, stream);
}

/* Descales fa_bench_quantize writes for that role and shape (-1: bad input). */
extern "C" long long fa_bench_descales(int role, int batch, int seqlen, int heads, int per_tensor)
{
    fa_quant p;
    int64_t n = -1;
    memset(&p, 0, sizeof p);
    p.role = (fa_quant_role)role; p.batch = batch; p.seqlen = seqlen; p.heads = heads; p.per_tensor = per_tensor;
    return fa_quantize_descales(&p, &n) == FA_OK ? (long long)n : -1;
}

/* Rows per descale block: role 0 (Q) FLASHATTN_FP8_BLOCK_Q, else FLASHATTN_FP8_BLOCK_K. */
extern "C" int fa_bench_fp8_block(int role) { return role ? FLASHATTN_FP8_BLOCK_K : FLASHATTN_FP8_BLOCK_Q; }

extern "C" const char *fa_bench_last_error(void) { return fa_last_error(); }

/* sizeof(fa_problem): bench/vs_torch_backward.py checks its ctypes copy of the struct against it. */
extern "C" int fa_bench_sizeof_problem(void) { return (int)sizeof(fa_problem); }
