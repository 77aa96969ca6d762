/* bench/fa_bench_decode_lib.cu - a flat C entry point over fa_decode_cuda for
   bench/vs_torch_decode.py (ctypes), so Python needs no copy of the
   fa_problem / fa_tensor layouts.
   Build: nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a \
          bench/fa_bench_decode_lib.cu -o build/libfa_bench_decode.so */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

/* The problem both entry points describe; block_table NULL = contiguous. */
static fa_problem bench_problem(const int32_t *seqlens, const int32_t *block_table, int batch, int sq, int hq,
                                int hkv, int d, int cap, int page_size, int pages_per_seq, int num_pages,
                                int num_splits)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = batch; p.seqlen_q = sq; p.seqlen_k = cap; p.heads_q = hq; p.heads_kv = hkv;
    p.head_dim = d; p.seqlens_k = seqlens; p.num_splits = num_splits;
    if (block_table) {
        p.block_table = block_table; p.page_size = page_size;
        p.pages_per_seq = pages_per_seq; p.num_pages = num_pages;
    }
    return p;
}

/* q [b, 1..16, hq, d], caches [b, cap, hkv, d] or pages [num_pages, page, hkv, d]
   (block_table != NULL), all bf16 (dtype 2) or f16 (1), packed. */
extern "C" int fa_bench_decode(void *q, void *k, void *v, void *o, const int32_t *seqlens,
                               const int32_t *block_table, int batch, int sq, int hq, int hkv,
                               int d, int cap, int page_size, int pages_per_seq, int num_pages,
                               int dtype, int num_splits, void *ws, size_t ws_bytes, void *stream)
{
    fa_problem p = bench_problem(seqlens, block_table, batch, sq, hq, hkv, d, cap, page_size, pages_per_seq,
                                 num_pages, num_splits);
    fa_tensor tq, tk, tv, to, none;
    memset(&tq, 0, sizeof tq);
    memset(&none, 0, sizeof none);
    tq.dtype = (fa_dtype)dtype;
    tk = tv = to = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o;
    return (int)fa_decode_cuda(&p, tq, tk, tv, none, none, to, NULL, ws, ws_bytes, stream);
}

/* The workspace fa_bench_decode needs; block_table as there (whether there
   is one changes the plan: paged caches are split for two CTAs per SM,
   contiguous ones for one). */
extern "C" size_t fa_bench_decode_ws(int batch, int sq, int hq, int hkv, int d, int cap, int num_splits,
                                     const int32_t *block_table, int page_size, int pages_per_seq,
                                     int num_pages)
{
    fa_problem p = bench_problem(NULL, block_table, batch, sq, hq, hkv, d, cap, page_size, pages_per_seq,
                                 num_pages, num_splits);
    size_t bytes = 0;
    if (fa_decode_cuda_workspace_size(&p, &bytes) != FA_OK) return (size_t)-1;
    return bytes;
}

extern "C" const char *fa_bench_last_error(void) { return fa_last_error(); }
