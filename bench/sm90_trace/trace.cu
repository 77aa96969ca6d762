/* bench/sm90_trace/trace.cu - runs one forward problem on the sm_90a kernel patched by patch.py
   (see there) and prints the timestamps of blocks 0 and 1: "block role event tile iteration clock". */
/* timeline of the sm_90a forward: block 0/1, producer + 2 or 3 consumer WGs */
#ifndef FLASHATTN_HEAD_DIMS /* (make test's compile check builds d 64 alone) */
#define FLASHATTN_HEAD_DIMS 64, 128, 256
#endif
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_bf16.h>
int main(int argc, char **argv) {
    int d = atoi(argv[1]), sq = atoi(argv[2]), batch = atoi(argv[3]), heads = atoi(argv[4]), causal = atoi(argv[5]);
    size_t n = (size_t)batch * sq * heads * d;
    std::vector<__nv_bfloat16> h(n);
    srand(1);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16((rand() / (float)RAND_MAX) * 2 - 1);
    void *q, *k, *v, *o;
    float *lse; /* L too, as bench/vs_torch.py asks for it */
    cudaMalloc(&lse, (size_t)batch * heads * sq * 4);
    cudaMalloc(&q, n * 2); cudaMalloc(&k, n * 2); cudaMalloc(&v, n * 2); cudaMalloc(&o, n * 2);
    cudaMemcpy(q, h.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(k, h.data(), n * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(v, h.data(), n * 2, cudaMemcpyHostToDevice);
    fa_problem p; fa_tensor tq, tk, tv, to;
    memset(&p, 0, sizeof p); memset(&tq, 0, sizeof tq);
    p.batch = batch; p.seqlen_q = sq; p.seqlen_k = sq; p.heads_q = heads; p.heads_kv = heads; p.head_dim = d; p.causal = causal;
    tk = tv = to = tq; tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = FA_BF16;
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int r = 0; r < 5; r++) if (fa_forward_cuda(&p, tq, tk, tv, to, lse, NULL, 0, 0) != FA_OK) { printf("err %s\n", fa_last_error()); return 1; }
    cudaEventRecord(a);
    for (int r = 0; r < 10; r++) fa_forward_cuda(&p, tq, tk, tv, to, lse, NULL, 0, 0);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); ms /= 10;
    double fl = 4.0 * sq * sq * d * heads * batch * (causal ? 0.5 : 1);
    printf("# d %d sq %d batch %d heads %d causal %d: %.3f ms %.1f TFLOP/s\n", d, sq, batch, heads, causal, ms, fl / ms / 1e9);
    std::vector<int4> tr(8 * 8192); /* 2 blocks x (producer + up to 3 consumer warpgroups) */
    cudaMemcpyFromSymbol(tr.data(), fa__tr_buf, tr.size() * sizeof(int4));
    for (int r = 0; r < 8; r++) for (int i = 0; i < 8192; i++) { int4 e = tr[r * 8192 + i]; if (e.x == 0 && e.w == 0) break;
        printf("%d %d %d %d %d %u\n", r / 4, r % 4, e.x, e.y, e.z, (unsigned)e.w); }
    return 0;
}
