/* decode_ab: two versions of flashattn.h's CPU decode in one process, the
   calls alternated (old, new, old, new, ...) so that both see the same
   machine: the same cache, the same neighbours on a shared host, the same
   memory bandwidth of the moment. Prints the median GB/s of K + V read
   (every cache byte once) for each and their ratio, on 1 and 2 threads.

       bench/decode_ab/decode_ab.sh OLD_DIR NEW_DIR [d tokens reps hq hkv]

   Cache: f16, batch 1, one query token, hq query / hkv KV heads, filled
   with fixed f16 bit patterns. The two outputs are compared bit for bit
   (a change of the summation order shows as a nonzero ulp distance). */
#include "flashattn.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int decode_old(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v, fa_tensor o, void *ws, size_t ws_bytes);
int decode_new(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v, fa_tensor o, void *ws, size_t ws_bytes);
size_t workspace_old(const fa_problem *p);
size_t workspace_new(const fa_problem *p);

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The read ceiling of the moment: a u64 sum over both arrays of the cache
   (the same memory), best of 3. */
static double read_gbs(const unsigned short *a, const unsigned short *b, size_t n)
{
    const unsigned long long *x = (const unsigned long long *)a, *y = (const unsigned long long *)b;
    long long m = (long long)(n / 4), i;
    double best = 0;
    int r;
    for (r = 0; r < 3; r++) {
        unsigned long long s = 0;
        double t0 = now_s(), g;
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (i = 0; i < m; i++)
            s += x[i] + y[i];
        g = 4.0 * (double)n / (now_s() - t0) / 1e9;
        if (g > best) best = g;
        if (s == 42) printf(" ");
    }
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int d = argc > 1 ? atoi(argv[1]) : 128, reps = argc > 3 ? atoi(argv[3]) : 15;
    int hq = argc > 4 ? atoi(argv[4]) : 32, hkv = argc > 5 ? atoi(argv[5]) : 8, th, r, e;
    long long tokens = argc > 2 ? atoll(argv[2]) : 131072;
    size_t n = (size_t)tokens * (size_t)hkv * (size_t)d, nq = (size_t)hq * (size_t)d, i, ws_bytes;
    unsigned short *K = malloc(n * 2), *V = malloc(n * 2), *q = malloc(nq * 2), *o_old = malloc(nq * 2),
                   *o_new = malloc(nq * 2);
    double *t_old = malloc(sizeof(double) * (size_t)reps), *t_new = malloc(sizeof(double) * (size_t)reps);
    int32_t len = (int32_t)tokens;
    fa_problem p;
    fa_tensor tq, tk, tv, to_old, to_new;
    void *ws;
    if (!K || !V || !q || !o_old || !o_new || !t_old || !t_new || reps < 1) {
        fprintf(stderr, "decode_ab: out of memory or bad arguments\n");
        return 1;
    }
    for (i = 0; i < n; i++) {
        K[i] = (unsigned short)(0x3000 + i * 7919 % 1024);
        V[i] = (unsigned short)(0x3000 + i * 104729 % 1024);
    }
    for (i = 0; i < nq; i++)
        q[i] = (unsigned short)(0x3400 + i % 512);
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen_q = 1; p.seqlen_k = (int)tokens; p.heads_q = hq; p.heads_kv = hkv; p.head_dim = d;
    p.seqlens_k = &len;
    memset(&tq, 0, sizeof tq);
    tq.data = q; tq.dtype = FA_F16;
    tk = tq; tk.data = K;
    tv = tq; tv.data = V;
    to_old = tq; to_old.data = o_old;
    to_new = tq; to_new.data = o_new;
    ws_bytes = workspace_old(&p) > workspace_new(&p) ? workspace_old(&p) : workspace_new(&p);
    ws = malloc(ws_bytes ? ws_bytes : 1);
    printf("decode_ab: d %d, %lld tokens, %d / %d heads, f16 cache of %.0f MiB (K + V), %d alternated pairs of calls\n",
           d, tokens, hq, hkv, 4.0 * (double)n / 1048576.0, reps);
    for (th = 1; th <= 2; th++) {
        int ulp = 0;
        double g_old, g_new;
        omp_set_num_threads(th);
        decode_old(&p, tq, tk, tv, to_old, ws, ws_bytes); /* warm-up */
        decode_new(&p, tq, tk, tv, to_new, ws, ws_bytes);
        for (r = 0; r < reps; r++) {
            double t0 = now_s(), t1, t2;
            if (decode_old(&p, tq, tk, tv, to_old, ws, ws_bytes) != 0) return 1;
            t1 = now_s();
            if (decode_new(&p, tq, tk, tv, to_new, ws, ws_bytes) != 0) return 1;
            t2 = now_s();
            t_old[r] = t1 - t0;
            t_new[r] = t2 - t1;
        }
        for (e = 0; e < (int)nq; e++) {
            int dist = abs((int)o_old[e] - (int)o_new[e]);
            if (dist > ulp) ulp = dist;
        }
        qsort(t_old, (size_t)reps, sizeof(double), cmp_double);
        qsort(t_new, (size_t)reps, sizeof(double), cmp_double);
        g_old = 4.0 * (double)n / t_old[reps / 2] / 1e9;
        g_new = 4.0 * (double)n / t_new[reps / 2] / 1e9;
        printf("threads %d: old %.1f GB/s, new %.1f GB/s, new/old %.3f (best old %.1f, new %.1f); read %.1f GB/s;"
               " outputs differ by %d f16 ulp at most\n",
               th, g_old, g_new, g_new / g_old, 4.0 * (double)n / t_old[0] / 1e9, 4.0 * (double)n / t_new[0] / 1e9,
               read_gbs(K, V, n), ulp);
    }
    return 0;
}
