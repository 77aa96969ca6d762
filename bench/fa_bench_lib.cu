/* bench/fa_bench_lib.cu - a tiny C ABI over fa_forward_cuda for ctypes
   (bench/vs_torch.py). Build: make build/libfa_bench.so
     nvcc -std=c++17 -O3 -shared -Xcompiler -fPIC bench/fa_bench_lib.cu -o build/libfa_bench.so */
#ifndef FLASHATTN_HEAD_DIMS
#define FLASHATTN_HEAD_DIMS 64, 128, 256 /* the benchmark grid's; a third of the compile time */
#endif
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

/* q [b, sq, hq, d], k/v [b, sk, hkv, d], o [b, sq, hq, d] packed, device
   pointers; lse [b, hq, sq] or NULL; stream a cudaStream_t. Returns fa_status. */
extern "C" int fa_bench_forward(void *q, void *k, void *v, void *o, float *lse, int batch, int sq,
                                int sk, int hq, int hkv, int d, int causal, int bf16, void *stream)
{
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    const fa_dtype dt = bf16 ? FA_BF16 : FA_F16;
    memset(&p, 0, sizeof p);
    memset(&tq, 0, sizeof tq);
    p.batch = batch; p.seqlen_q = sq; p.seqlen_k = sk; p.heads_q = hq; p.heads_kv = hkv;
    p.head_dim = d; p.causal = causal;
    tk = tv = to = tq;
    tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = dt;
    return (int)fa_forward_cuda(&p, tq, tk, tv, to, lse, NULL, 0, stream);
}

extern "C" const char *fa_bench_last_error(void) { return fa_last_error(); }
