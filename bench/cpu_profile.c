/* cpu_profile.c - where the CPU forward's time goes, phase by phase, on ONE
   thread: the same internal calls as fa__forward_task / fa__attend_tile
   (this file includes the implementation, so it can call them), each timed
   by the thread's CPU-time clock, beside the FMA peak of the same build
   timed the same way: time the thread spends descheduled is not counted,
   so the shares hold on a machine shared with other work (its caches and
   memory are still shared: compare variants interleaved).

       cc -O3 -march=native -I. bench/cpu_profile.c -lm -o build/cpu_profile
       ./build/cpu_profile [d] [seqlen] [causal]     (default 128 4096 0)

   Phases per (Q tile of Br rows, K/V tile of Bc keys): K tile loaded
   transposed, V tile loaded, S = Q K^T (+ masks), the online softmax
   (row max, exp2, rescale of O~), O~ += P V. The two products' GFLOP/s
   are against the FMA peak; the softmax's cost is per score. */
#define _POSIX_C_SOURCE 200809L
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile float g_sink;

/* fp32 FMA peak of one thread in this build's vector width (12 chains). */
static double fma_peak(void)
{
#if FA__VW
    fa__vf acc[12], a = FA__VSET1(0.9999999f), b = FA__VSET1(1e-7f);
    long it, iters = 20000000;
    int c;
    double t0;
    for (c = 0; c < 12; c++)
        acc[c] = FA__VSET1(1.0f + 0.01f * (float)c);
    t0 = now_s();
    for (it = 0; it < iters; it++)
        for (c = 0; c < 12; c++)
            acc[c] = FA__VFMA(acc[c], a, b);
    t0 = now_s() - t0;
    for (c = 1; c < 12; c++)
        acc[0] = FA__VADD(acc[0], acc[c]);
    g_sink = FA__VHSUM(acc[0]);
    return 2.0 * FA__VW * 12 * (double)iters / t0 * 1e-9;
#else
    return 0.0;
#endif
}

int main(int argc, char **argv)
{
    int d = argc > 1 ? atoi(argv[1]) : 128, n = argc > 2 ? atoi(argv[2]) : 4096, causal = argc > 3 ? atoi(argv[3]) : 0;
    const int heads = 1, reps = 3;
    size_t elems = (size_t)n * heads * (size_t)d, i;
    float *Q = (float *)malloc(elems * 4), *K = (float *)malloc(elems * 4), *V = (float *)malloc(elems * 4);
    float *O = (float *)malloc(elems * 4);
    fa_problem p, r;
    fa_tensor q, k, v, o;
    fa__attn a;
    fa__scratch w;
    fa__seq s;
    void *mem;
    double t[6] = {0}, total, peak, gemm_flops;
    int rep, tile, ph;
    static const char *names[6] = {"K tile (transposed)", "V tile", "S = Q K^T", "softmax", "O += P V", "other"};
    for (i = 0; i < elems; ++i) {
        Q[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        K[i] = (float)((i * 40503u + 7) % 1000) / 500.0f - 1.0f;
        V[i] = (float)((i * 9973u + 3) % 1000) / 500.0f - 1.0f;
    }
    memset(&p, 0, sizeof p);
    memset(&q, 0, sizeof q);
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = n;
    p.heads_q = heads;
    p.head_dim = d;
    p.causal = causal;
    k = v = o = q;
    q.data = Q;
    k.data = K;
    v.data = V;
    o.data = O;
    if (fa__check_forward("profile", &p, &r, &q, &k, &v, &o, NULL, 1) != FA_OK) {
        printf("%s\n", fa_last_error());
        return 1;
    }
    fa__attn_init(&a, &r, FA__BR);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    mem = malloc(fa__forward_bytes(&a, 1));
    a.ws_workers = fa__align64(mem);
    a.worker_bytes = fa__scratch_layout(&a, FA__SCRATCH_FWD, NULL, &w);
    fa__seq_info(&a, 0, &s);
    peak = fma_peak();
    total = now_s();
    for (rep = 0; rep < reps; ++rep)
        for (tile = 0; tile < a.tr; ++tile) {
            int i0 = tile * FA__BR, nr = n - i0 < FA__BR ? n - i0 : FA__BR, lo, hi, n0;
            fa__worker_scratch(&a, FA__SCRATCH_FWD, 0, &w);
            for (i = 0; i < (size_t)nr; ++i) {
                w.tok[i] = i0 + (int)i;
                w.head[i] = 0;
                w.pos[i] = i0 + (int)i + s.off;
            }
            fa__load_q_rows(&a, &a.q, &s, &w, nr);
            fa__attend_begin(&a, &w, nr);
            fa__key_band(&a, &w, nr, s.sk, 0, s.sk, &lo, &hi);
            for (n0 = lo; n0 < hi; n0 += FA__BC) {
                int nc = hi - n0 < FA__BC ? hi - n0 : FA__BC, r0, r1;
                double t0 = now_s(), t1;
                fa__row_range(&a, &w, nr, n0, nc, &r0, &r1);
                fa__load_tile_t(&a, &a.k, a.d, &s, 0, n0, nc, hi, w.Kt, w.row);
                t1 = now_s(); t[0] += t1 - t0; t0 = t1;
                fa__load_kv_tile(&a, &a.v, a.dv_, &s, 0, n0, nc, hi, w.V, a.dvp);
                t1 = now_s(); t[1] += t1 - t0; t0 = t1;
                fa__score_tile(&a, &w, r0, r1 - r0, n0, nc, s.sk, 0, w.S, NULL);
                t1 = now_s(); t[2] += t1 - t0; t0 = t1;
                fa__softmax_rows(&a, &w, r0, r1, FA__PAD(nc));
                t1 = now_s(); t[3] += t1 - t0; t0 = t1;
                fa__gemm(r1 - r0, a.dvp, nc, w.S + (size_t)r0 * (size_t)a.bcp, a.bcp, w.V, a.dvp,
                         w.O + (size_t)r0 * (size_t)a.dvp, a.dvp, 1, w.pack);
                t1 = now_s(); t[4] += t1 - t0;
            }
        }
    total = now_s() - total;
    t[5] = total;
    for (ph = 0; ph < 5; ++ph)
        t[5] -= t[ph];
    gemm_flops = 2.0 * n * (double)n * d * (causal ? 0.5 : 1.0) * reps; /* one product */
    printf("cpu_profile: path %s, d %d, seqlen %d, causal %d, Br %d, Bc %d, 1 thread, FMA peak %.1f GFLOP/s\n",
           fa_cpu_simd_path(), d, n, causal, FA__BR, FA__BC, peak);
    printf("| phase | ms | %% of time | GFLOP/s | %% of peak |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (ph = 0; ph < 6; ++ph) {
        printf("| %s | %.1f | %.1f%% |", names[ph], 1e3 * t[ph] / reps, 100.0 * t[ph] / total);
        if (ph == 2 || ph == 4)
            printf(" %.1f | %.1f%% |\n", gemm_flops / t[ph] * 1e-9, 100.0 * gemm_flops / t[ph] * 1e-9 / peak);
        else
            printf(" | |\n");
    }
    printf("| all | %.1f | 100%% | %.1f | %.1f%% |\n", 1e3 * total / reps, 2 * gemm_flops / total * 1e-9,
           100.0 * 2 * gemm_flops / total * 1e-9 / peak);
    free(Q); free(K); free(V); free(O); free(mem);
    return 0;
}
