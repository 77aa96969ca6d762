/* bench/sm90_trace/trace.cu - runs one forward problem on the sm_90a kernel with its trace points
   on (FLASHATTN_TRACE, defined below before the header) and prints the clock() timestamps of
   blocks 0 and 1: "block role event tile iteration clock". Lane 0 of warps 0, 4, 8 (and 12) record:
   role 0 the producer, 1.. the consumer warpgroups. The events (the tile k and iteration it):
     0 kernel start; producer: 1 a tile's slot free (HANDOFF; its publication, right before the Q
     copy), 2 / 3 K / V of key block it about to be copied (its stage free);
     consumers: 10 tile start (it: its key blocks), 11 Q landed, 18 turn requested, 12 turn taken,
     13 S ready, 15 P V ready, 14 softmax done, 20 the end of the epilogue's first part,
     21 L stored, 16 / 17 the O store's start / end, 22 / 19 before / after the wait for the
     tile's slot (HANDOFF: the persistent three- and four-warpgroup kernels; there "Q landed"
     marks the end of the tile's own set-up).
   In a key block the trace waits for P V before the softmax (FLASHATTN_TRACE_PV_FIRST), where
   ptxas 13.0 puts that wait in the untraced kernel; each event is a branch, which ptxas does not
   schedule across. The timestamps' global stores perturb the kernel a little (about 2%).
   Build and run (on an H100 / H200):
     nvcc -std=c++17 -O3 -I. -gencode arch=compute_90a,code=sm_90a bench/sm90_trace/trace.cu -o trace
     ./trace D SEQLEN BATCH HEADS CAUSAL [fp8 | bmP] > tr.txt; python3 bench/sm90_trace/phases.py tr.txt
   (bmP: a random 128 x 128 block mask keeping P% of the blocks, one per (batch, head), the
   block-sparse kernel; its tiles in fa__bm_order_kernel's order, so block 0 takes the longest)
     python3 bench/sm90_trace/segments.py tr.txt   (where the producer hands tiles over: d 64's long rows) */
#include <cuda_runtime.h>
__device__ int4 fa__tr_buf[8 * 8192]; /* (block, role) x 8192 events */
__device__ int fa__tr_n[8];           /* events so far, per (block, role); event 0 restarts the count */
#define FLASHATTN_TRACE(ev, k, it)                                                                     \
    do {                                                                                               \
        if ((threadIdx.x & 127) == 0 && blockIdx.x < 2) {                                              \
            const int r_ = blockIdx.x * 4 + (threadIdx.x >> 7), i_ = (ev) == 0 ? 0 : fa__tr_n[r_];    \
            if (i_ < 8192) {                                                                           \
                fa__tr_buf[r_ * 8192 + i_] = make_int4((ev), (k), (it), (int)clock());                 \
                fa__tr_n[r_] = i_ + 1;                                                                 \
            }                                                                                          \
        }                                                                                              \
    } while (0)
#define FLASHATTN_TRACE_PV_FIRST 1
#ifndef FLASHATTN_HEAD_DIMS /* (make test's compile check builds d 64 alone) */
#define FLASHATTN_HEAD_DIMS 64, 128, 256
#endif
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h" /* (build from the repository root: -I.) */
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_bf16.h>
#include "../../tests/bmask_lists.h"
static int trace_rnd(void *, int n) { return rand() % n; }
int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s D SEQLEN BATCH HEADS CAUSAL [fp8 | bmP]\n", argv[0]);
        return 2;
    }
    int d = atoi(argv[1]), sq = atoi(argv[2]), batch = atoi(argv[3]), heads = atoi(argv[4]), causal = atoi(argv[5]);
    const bool fp8 = argc > 6 && !strcmp(argv[6], "fp8"); /* e4m3 Q, K, V (codes of +-[1/64, 1)), per-tensor descales 1 */
    const int bm_pct = argc > 6 && !strncmp(argv[6], "bm", 2) ? atoi(argv[6] + 2) : -1; /* a block mask, % kept */
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
    if (fp8) { /* (the first n bytes of each buffer) */
        std::vector<unsigned char> e(n);
        for (size_t i = 0; i < n; i++) e[i] = (unsigned char)((rand() & 0x80) | (0x10 + rand() % 0x28));
        cudaMemcpy(q, e.data(), n, cudaMemcpyHostToDevice);
        cudaMemcpy(k, e.data(), n, cudaMemcpyHostToDevice);
        cudaMemcpy(v, e.data(), n, cudaMemcpyHostToDevice);
    }
    fa_problem p; fa_tensor tq, tk, tv, to;
    memset(&p, 0, sizeof p); memset(&tq, 0, sizeof tq);
    p.batch = batch; p.seqlen_q = sq; p.seqlen_k = sq; p.heads_q = heads; p.heads_kv = heads; p.head_dim = d; p.causal = causal;
    tk = tv = to = tq; tq.data = q; tk.data = k; tv.data = v; to.data = o;
    tq.dtype = tk.dtype = tv.dtype = to.dtype = FA_BF16;
    if (fp8) tq.dtype = tk.dtype = tv.dtype = FA_E4M3;
    double fl = 4.0 * sq * sq * d * heads * batch * (causal ? 0.5 : 1);
    void *ws = NULL;
    size_t ws_bytes = 0;
    tbm_lists bm;
    fa_block_mask bm_host;
    if (bm_pct >= 0) { /* random lists (tests/bmask_lists.h), one per (batch, head); FLOPs of the blocks walked */
        const int nb = (sq + 127) / 128;
        long long walked = 0;
        tbm_make(&bm, batch * heads, sq, sq, bm_pct, 0, 0, 0, trace_rnd, NULL, &bm_host, &p.block_mask);
        for (int r = 0; r < batch * heads * nb; r++) /* (causal: the blocks on and below the diagonal) */
            for (int x = 0; x < bm.h[0][r]; x++) walked += !causal || bm.h[1][(size_t)r * nb + x] <= r % nb;
        if (fa_forward_cuda_workspace_size(&p, &ws_bytes) != FA_OK) { printf("err %s\n", fa_last_error()); return 1; }
        cudaMalloc(&ws, ws_bytes);
        fl = 4.0 * 128 * 128 * d * (double)walked; /* (a diagonal block counted whole) */
    }
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int r = 0; r < 5; r++) if (fa_forward_cuda(&p, tq, tk, tv, to, lse, ws, ws_bytes, 0) != FA_OK) { printf("err %s\n", fa_last_error()); return 1; }
    cudaEventRecord(a);
    for (int r = 0; r < 10; r++) fa_forward_cuda(&p, tq, tk, tv, to, lse, ws, ws_bytes, 0);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); ms /= 10;
    printf("# d %d sq %d batch %d heads %d causal %d%s: %.3f ms %.1f TFLOP/s%s\n", d, sq, batch, heads, causal,
           fp8 ? " fp8" : "", ms, fl / ms / 1e9, bm_pct >= 0 ? " (effective: the visited blocks)" : "");
    if (bm_pct >= 0) printf("# block mask: %d%% of the blocks kept\n", bm_pct);
    std::vector<int4> tr(8 * 8192); /* 2 blocks x (producer + up to 3 consumer warpgroups) */
    cudaMemcpyFromSymbol(tr.data(), fa__tr_buf, tr.size() * sizeof(int4));
    for (int r = 0; r < 8; r++) for (int i = 0; i < 8192; i++) { int4 e = tr[r * 8192 + i]; if (e.x == 0 && e.w == 0) break;
        printf("%d %d %d %d %d %u\n", r / 4, r % 4, e.x, e.y, e.z, (unsigned)e.w); }
    return 0;
}
