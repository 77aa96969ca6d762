/* demo.c - what `make run` shows: flashattn on the CPU against the textbook
   way, at a medium size, with the error and the time of each.

   Build and run (from this folder):
       cc -O2 -march=native -fopenmp -I.. demo.c -lm -o demo && ./demo
   (without -fopenmp both sides run on one thread.)

   The textbook way (the FlashAttention paper's "Algorithm 0") materializes
   the score matrix S = scale * Q K^T of each head, N x N floats, takes a
   row-wise softmax in place, then multiplies by V. flashattn computes the same O tile by tile
   with an online softmax and never holds more than a tile of S. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum { BATCH = 1, SEQ = 1024, HEADS = 8, DIM = 64, REPS = 5 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float rand_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* Textbook attention, one head at a time (heads in parallel). Tensors are
   [SEQ, HEADS, DIM] (batch 1); S is [SEQ, SEQ] per head. */
static void naive_attention(const float *Q, const float *K, const float *V, float *O,
                            int causal, float *S_all) {
    const float scale = 1.0f / sqrtf((float)DIM);
    int h;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (h = 0; h < HEADS; h++) {
        float *S = S_all + (size_t)h * SEQ * SEQ;
        int i, j, c;
        for (i = 0; i < SEQ; i++) {            /* 1: S = scale * Q K^T (masked: -inf) */
            const float *q = Q + ((size_t)i * HEADS + h) * DIM;
            for (j = 0; j < SEQ; j++) {
                const float *k = K + ((size_t)j * HEADS + h) * DIM;
                float dot = 0.0f;
                for (c = 0; c < DIM; c++) dot += q[c] * k[c];
                S[(size_t)i * SEQ + j] = causal && j > i ? -INFINITY : dot * scale;
            }
        }
        for (i = 0; i < SEQ; i++) {            /* 2: P = softmax(S), row by row, in place */
            float *s = S + (size_t)i * SEQ, m = -INFINITY, l = 0.0f;
            for (j = 0; j < SEQ; j++) m = fmaxf(m, s[j]);
            for (j = 0; j < SEQ; j++) { s[j] = expf(s[j] - m); l += s[j]; }
            for (j = 0; j < SEQ; j++) s[j] /= l;
        }
        for (i = 0; i < SEQ; i++) {            /* 3: O = P V */
            float *o = O + ((size_t)i * HEADS + h) * DIM;
            for (c = 0; c < DIM; c++) o[c] = 0.0f;
            for (j = 0; j < SEQ; j++) {
                const float pij = S[(size_t)i * SEQ + j], *v = V + ((size_t)j * HEADS + h) * DIM;
                for (c = 0; c < DIM; c++) o[c] += pij * v[c];
            }
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    size_t n = (size_t)BATCH * SEQ * HEADS * DIM, i;
    float *Q = malloc(n * sizeof(float)), *K = malloc(n * sizeof(float));
    float *V = malloc(n * sizeof(float)), *O = malloc(n * sizeof(float));
    float *O_ref = malloc(n * sizeof(float));
    float *S = malloc((size_t)HEADS * SEQ * SEQ * sizeof(float));
    void *ws;
    size_t ws_bytes = 0;
    uint64_t seed = 2024;
    int threads = 1, causal;
    if (!Q || !K || !V || !O || !O_ref || !S) { fprintf(stderr, "out of memory\n"); return 1; }
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    for (i = 0; i < n; i++) {
        Q[i] = rand_uniform(&seed);
        K[i] = rand_uniform(&seed);
        V[i] = rand_uniform(&seed);
    }
    printf("flashattn %s demo: batch %d, seqlen %d, %d heads, head_dim %d, fp32, %d thread%s\n",
           FLASHATTN_VERSION_STRING, BATCH, SEQ, HEADS, DIM, threads, threads == 1 ? "" : "s");

    for (causal = 0; causal <= 1; causal++) {
        fa_problem p = {0};
        fa_tensor q = {0}, k = {0}, v = {0}, o = {0};
        fa_status s;
        double t_flash[REPS], t0, t_naive, err = 0.0, flops;
        int r;
        p.batch = BATCH;
        p.seqlen_q = p.seqlen_k = SEQ;
        p.heads_q = HEADS;
        p.head_dim = DIM;
        p.causal = causal;
        q.data = Q; k.data = K; v.data = V; o.data = O;

        s = fa_forward_workspace_size(&p, &ws_bytes);
        ws = malloc(ws_bytes ? ws_bytes : 1);
        if (s != FA_OK || !ws) {
            fprintf(stderr, "fa_forward_workspace_size: %s: %s\n", fa_status_string(s), fa_last_error());
            return 1;
        }
        for (r = -1; r < REPS; r++) {          /* r = -1: warm-up, not timed */
            t0 = now_s();
            s = fa_forward(&p, q, k, v, o, NULL, ws, ws_bytes);
            if (r >= 0) t_flash[r] = now_s() - t0;
            if (s != FA_OK) {
                fprintf(stderr, "fa_forward: %s: %s\n", fa_status_string(s), fa_last_error());
                return 1;
            }
        }
        qsort(t_flash, REPS, sizeof(double), cmp_double);

        t0 = now_s();
        naive_attention(Q, K, V, O_ref, causal, S);
        t_naive = now_s() - t0;

        for (i = 0; i < n; i++) err = fmax(err, fabs((double)O[i] - (double)O_ref[i]));
        flops = 4.0 * SEQ * SEQ * DIM * HEADS * BATCH * (causal ? 0.5 : 1.0);
        printf("\n%s attention\n", causal ? "causal" : "full");
        printf("  naive (S materialized, %5.1f MiB):  %8.2f ms  %6.2f GFLOP/s\n",
               (double)HEADS * SEQ * SEQ * sizeof(float) / 1048576.0, 1e3 * t_naive, flops / t_naive * 1e-9);
        printf("  flashattn (workspace %7.1f KiB): %8.2f ms  %6.2f GFLOP/s  (median of %d)\n",
               (double)ws_bytes / 1024.0, 1e3 * t_flash[REPS / 2], flops / t_flash[REPS / 2] * 1e-9, REPS);
        printf("  speedup %.1fx, max |O - O_naive| = %.2e %s\n", t_naive / t_flash[REPS / 2], err,
               err < 1e-4 ? "(ok)" : "(TOO LARGE)");
        free(ws);
        if (!(err < 1e-4)) return 1;
    }
    free(Q); free(K); free(V); free(O); free(O_ref); free(S);
    return 0;
}
