/* bench/micro/fp8_smoke.cu - a quick look at the FP8 forward without PyTorch: 28 cases of
   fa_forward_cuda on e4m3 (fa_quantize on the CPU) against the CPU twin (fa_forward on the same
   e4m3 inputs), outputs poisoned first; "time": TFLOP/s of our bf16 and FP8 forward on the
   FlashAttention-3 grid (16k tokens, hidden 2048), 20 calls back to back after 3 warm-up, CUDA
   events (SHORT=1: 4k and 16k only). The tests are tests/test_gpu_fp8.cu; the benchmark beside
   SDPA is bench/vs_torch.py --fp8. Build from the repository root:
     nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I. bench/micro/fp8_smoke.cu -o fp8_smoke
   Run: ./fp8_smoke [quick | time] */
#define FLASHATTN_NO_BACKWARD
#define FLASHATTN_NO_DECODE
#define FLASHATTN_IMPLEMENTATION
#include "../../flashattn.h"
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
static uint64_t rs = 88172645463325252ull;
static double urand(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (rs >> 11) * (1.0 / 9007199254740992.0); }
static float nrand(void) { double u = urand() + 1e-12, v = urand(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307 * v)); }
static float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s line %d\n", cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)
static int fails = 0, passes = 0;
static void run(int B, int sq, int sk, int hq, int hkv, int d, int causal, int per_tensor, int had, int window)
{
    int64_t nq = (int64_t)B * sq * hq * d, nk = (int64_t)B * sk * hkv * d;
    float *q = (float *)malloc(nq * 4), *k = (float *)malloc(nk * 4), *v = (float *)malloc(nk * 4);
    for (int64_t i = 0; i < nq; i++) q[i] = nrand();
    for (int64_t i = 0; i < nk; i++) k[i] = nrand(), v[i] = nrand();
    uint8_t *q8 = (uint8_t *)malloc(nq), *k8 = (uint8_t *)malloc(nk), *v8 = (uint8_t *)malloc(nk);
    fa_quant qp; memset(&qp, 0, sizeof qp);
    int64_t cq, ck, cv;
    qp.batch = B; qp.heads = hq; qp.head_dim = d; qp.per_tensor = per_tensor; qp.hadamard = had; qp.seed = 7;
    qp.role = FA_QUANT_Q; qp.seqlen = sq; fa_quantize_descales(&qp, &cq);
    float *dq = (float *)malloc(cq * 4);
    fa_tensor x = {q, FA_F32, (int64_t)sq * hq * d, (int64_t)hq * d, d}, y = {q8, FA_E4M3, (int64_t)sq * hq * d, (int64_t)hq * d, d};
    if (fa_quantize(&qp, x, y, dq)) { printf("quant q: %s\n", fa_last_error()); exit(1); }
    qp.role = FA_QUANT_K; qp.seqlen = sk; qp.heads = hkv; fa_quantize_descales(&qp, &ck);
    float *dk = (float *)malloc(ck * 4), *dv = (float *)malloc(ck * 4);
    fa_tensor xk = {k, FA_F32, (int64_t)sk * hkv * d, (int64_t)hkv * d, d}, yk = {k8, FA_E4M3, (int64_t)sk * hkv * d, (int64_t)hkv * d, d};
    if (fa_quantize(&qp, xk, yk, dk)) { printf("quant k: %s\n", fa_last_error()); exit(1); }
    qp.role = FA_QUANT_V; qp.hadamard = 0; fa_quantize_descales(&qp, &cv);
    fa_tensor xv = {v, FA_F32, (int64_t)sk * hkv * d, (int64_t)hkv * d, d}, yv = {v8, FA_E4M3, (int64_t)sk * hkv * d, (int64_t)hkv * d, d};
    if (fa_quantize(&qp, xv, yv, dv)) { printf("quant v: %s\n", fa_last_error()); exit(1); }
    fa_problem p; memset(&p, 0, sizeof p);
    p.batch = B; p.seqlen_q = sq; p.seqlen_k = sk; p.heads_q = hq; p.heads_kv = hkv; p.head_dim = d; p.causal = causal;
    if (window) { p.sliding_window = 1; p.window_left = window; p.window_right = 0; p.causal = 0; }
    if (per_tensor) { p.descale_q = dq[0]; p.descale_k = dk[0]; p.descale_v = dv[0]; }
    else { p.descale_q_block = dq; p.descale_k_block = dk; p.descale_v_block = dv; }
    float *oc = (float *)malloc(nq * 4), *lc = (float *)malloc((int64_t)B * hq * sq * 4);
    fa_tensor tq = y, tk = yk, tv = yv, to = {oc, FA_F32, (int64_t)sq * hq * d, (int64_t)hq * d, d};
    if (fa_forward(&p, tq, tk, tv, to, lc, NULL, 0)) { printf("cpu: %s\n", fa_last_error()); exit(1); }
    /* device */
    void *gq, *gk, *gv, *go; float *gl, *gdq, *gdk, *gdv;
    CK(cudaMalloc(&gq, nq)); CK(cudaMalloc(&gk, nk)); CK(cudaMalloc(&gv, nk)); CK(cudaMalloc(&go, nq * 2));
    CK(cudaMalloc(&gl, (int64_t)B * hq * sq * 4)); CK(cudaMalloc(&gdq, cq * 4)); CK(cudaMalloc(&gdk, ck * 4)); CK(cudaMalloc(&gdv, cv * 4));
    CK(cudaMemcpy(gq, q8, nq, cudaMemcpyHostToDevice)); CK(cudaMemcpy(gk, k8, nk, cudaMemcpyHostToDevice)); CK(cudaMemcpy(gv, v8, nk, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(gdq, dq, cq * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(gdk, dk, ck * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(gdv, dv, cv * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(go, 0xff, nq * 2)); CK(cudaMemset(gl, 0xff, (int64_t)B * hq * sq * 4));
    if (!per_tensor) { p.descale_q_block = gdq; p.descale_k_block = gdk; p.descale_v_block = gdv; }
    tq.data = gq; tk.data = gk; tv.data = gv;
    fa_tensor tog = {go, FA_BF16, (int64_t)sq * hq * d, (int64_t)hq * d, d};
    fa_status st = fa_forward_cuda(&p, tq, tk, tv, tog, gl, NULL, 0, NULL);
    cudaError_t e = cudaDeviceSynchronize();
    uint16_t *og = (uint16_t *)malloc(nq * 2); float *lg = (float *)malloc((int64_t)B * hq * sq * 4);
    double maxe = 0, se = 0, sr = 0, maxl = 0; int64_t nan = 0;
    if (st == FA_OK && e == cudaSuccess) {
        CK(cudaMemcpy(og, go, nq * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(lg, gl, (int64_t)B * hq * sq * 4, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < nq; i++) { double g = bf2f(og[i]), r = oc[i]; if (g != g) { nan++; continue; } double a = fabs(g - r); if (a > maxe) maxe = a; se += a * a; sr += r * r; }
        for (int64_t i = 0; i < (int64_t)B * hq * sq; i++) { double a = (isinf(lc[i]) && isinf(lg[i])) ? 0 : fabs(lg[i] - lc[i]); if (a != a) { nan++; continue; } if (a > maxl) maxl = a; }
    }
    double rel = sqrt(se / (sr + 1e-30));
    int ok = st == FA_OK && e == cudaSuccess && nan == 0 && rel < 0.05 && maxe < 0.25 && maxl < 0.02;
    printf("%s B%d sq%d sk%d h%d/%d d%d causal%d win%d %s%s: st=%d(%s) cuda=%s nan=%lld relrmse=%.3e maxabs=%.3e maxlse=%.3e\n",
           ok ? "PASS" : "FAIL", B, sq, sk, hq, hkv, d, causal, window, per_tensor ? "tensor" : "block", had ? "+had" : "", (int)st,
           st ? fa_last_error() : "", cudaGetErrorString(e), (long long)nan, rel, maxe, maxl);
    ok ? passes++ : fails++;
    if (e != cudaSuccess) exit(1);
    cudaFree(gq); cudaFree(gk); cudaFree(gv); cudaFree(go); cudaFree(gl); cudaFree(gdq); cudaFree(gdk); cudaFree(gdv);
    free(q); free(k); free(v); free(q8); free(k8); free(v8); free(dq); free(dk); free(dv); free(oc); free(lc); free(og); free(lg);
}
int main_time(void);
int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && !strcmp(argv[1], "time")) return main_time();
    int ds[3] = {64, 128, 256}, quick = argc > 1 && !strcmp(argv[1], "quick");
    for (int i = 0; i < 3; i++) {
        int d = ds[i];
        run(1, 128, 128, 1, 1, d, 0, 1, 0, 0);
        run(1, 128, 128, 1, 1, d, 0, 0, 0, 0);
        run(2, 300, 300, 4, 2, d, 0, 0, 0, 0);
        if (quick) continue;
        run(2, 300, 300, 4, 2, d, 1, 0, 1, 0);
        run(1, 1000, 777, 3, 1, d, 1, 0, 0, 0);
        run(1, 17, 1000, 2, 2, d, 0, 1, 0, 0);
        run(1, 1000, 1000, 2, 1, d, 0, 0, 0, 200);
        run(4, 2048, 2048, 8, 8, d, 1, 0, 0, 0);
        run(1, 1, 1, 1, 1, d, 0, 0, 0, 0);
    }
    run(1, 300, 300, 2, 2, 80, 0, 0, 0, 0);
    printf("%d passed, %d failed\n", passes, fails);
    return fails != 0;
}
/* timing: ./fp8_smoke time */
static float time_one(int d, int S, int causal, int fp8, int iters)
{
    int H = 2048 / d, B = 16384 / S;
    int64_t n = (int64_t)B * S * H * d;
    void *q, *k, *v, *o; float *ds;
    CK(cudaMalloc(&q, n * 2)); CK(cudaMalloc(&k, n * 2)); CK(cudaMalloc(&v, n * 2)); CK(cudaMalloc(&o, n * 2));
    CK(cudaMalloc(&ds, 1 << 20));
    CK(cudaMemset(q, 0x21, n * 2)); CK(cudaMemset(k, 0x22, n * 2)); CK(cudaMemset(v, 0x23, n * 2));
    fa_problem p; memset(&p, 0, sizeof p);
    p.batch = B; p.seqlen_q = p.seqlen_k = S; p.heads_q = p.heads_kv = H; p.head_dim = d; p.causal = causal;
    fa_dtype dt = fp8 ? FA_E4M3 : FA_BF16;
    fa_tensor tq = {q, dt, 0, 0, 0}, tk = {k, dt, 0, 0, 0}, tv = {v, dt, 0, 0, 0}, to = {o, FA_BF16, 0, 0, 0};
    tq.seq_stride = tk.seq_stride = tv.seq_stride = (int64_t)H * d; tq.head_stride = tk.head_stride = tv.head_stride = d;
    tq.batch_stride = tk.batch_stride = tv.batch_stride = (int64_t)S * H * d; to = tq; to.data = o; to.dtype = FA_BF16;
    if (fp8) { CK(cudaMemset(ds, 0x3c, 1 << 20)); p.descale_q_block = ds; p.descale_k_block = ds; p.descale_v_block = ds; }
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) if (fa_forward_cuda(&p, tq, tk, tv, to, NULL, NULL, 0, NULL)) { printf("time: %s\n", fa_last_error()); exit(1); }
    cudaEventRecord(a);
    for (int i = 0; i < iters; i++) fa_forward_cuda(&p, tq, tk, tv, to, NULL, NULL, 0, NULL);
    cudaEventRecord(b); CK(cudaEventSynchronize(b));
    float ms; cudaEventElapsedTime(&ms, a, b); ms /= iters;
    double fl = 4.0 * B * H * (double)S * S * d * (causal ? 0.5 : 1.0);
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(ds);
    return (float)(fl / ms / 1e9);
}
int main_time(void)
{
    int ds[3] = {64, 128, 256}, Ss[4] = {1024, 2048, 4096, 16384};
    if (getenv("SHORT")) { Ss[0] = 4096; Ss[1] = 16384; Ss[2] = 4096; Ss[3] = 16384; }
    printf("d causal S  bf16-TFLOPs fp8-TFLOPs ratio\n");
    for (int c = 0; c < 2; c++) for (int i = 0; i < 3; i++) for (int j = 0; j < 4; j++) {
        float a = time_one(ds[i], Ss[j], c, 0, 20), b = time_one(ds[i], Ss[j], c, 1, 20);
        printf("%d %d %d %.0f %.0f %.2f\n", ds[i], c, Ss[j], a, b, b / a);
    }
    return 0;
}
