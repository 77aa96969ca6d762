/* cpu_simple.c - the smallest complete use of flashattn on the CPU.

   Build and run (from this folder):
       cc -O2 -I.. cpu_simple.c -lm -o cpu_simple && ./cpu_simple
   Add -fopenmp to use every core.

   One batch of 2 sequences, 128 tokens each, 4 heads of dimension 64, fp32.
   Tensors are [batch, seq, heads, dim] with dim contiguous, so a packed
   tensor needs no strides: the zero strides in fa_tensor mean "packed". */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 2, SEQ = 128, HEADS = 4, DIM = 64 };

/* Uniform in [-1, 1) from a 64-bit linear congruential generator. */
static float rand_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

int main(void) {
    size_t n = (size_t)BATCH * SEQ * HEADS * DIM;
    float *Q = malloc(n * sizeof *Q), *K = malloc(n * sizeof *K);
    float *V = malloc(n * sizeof *V), *O = malloc(n * sizeof *O);
    float *L = malloc((size_t)BATCH * HEADS * SEQ * sizeof *L); /* [batch, heads, seq] */
    uint64_t seed = 42;
    size_t i;
    if (!Q || !K || !V || !O || !L) { fprintf(stderr, "out of memory\n"); return 1; }
    for (i = 0; i < n; i++) {
        Q[i] = rand_uniform(&seed);
        K[i] = rand_uniform(&seed);
        V[i] = rand_uniform(&seed);
    }

    {
        fa_problem p = {0};  /* zero = full attention, scale 1/sqrt(head_dim) */
        fa_tensor q = {0}, k = {0}, v = {0}, o = {0};
        fa_status s;
        p.batch = BATCH;
        p.seqlen_q = p.seqlen_k = SEQ;
        p.heads_q = HEADS;   /* heads_kv = 0: same as heads_q */
        p.head_dim = DIM;
        p.causal = 1;        /* a decoder: token i sees tokens 0..i */
        q.data = Q; k.data = K; v.data = V; o.data = O; /* dtype 0 = FA_F32 */

        /* No workspace: the call allocates (and frees) its own scratch. */
        s = fa_forward(&p, q, k, v, o, L, NULL, 0);
        if (s != FA_OK) {
            fprintf(stderr, "fa_forward: %s: %s\n", fa_status_string(s), fa_last_error());
            return 1;
        }
    }

    /* Row 0 is causal, so it sees only key 0: its output is exactly V's row 0
       and its log-sum-exp is its one scaled score. */
    printf("O[b=0, t=0, h=0, 0:4] = %+.5f %+.5f %+.5f %+.5f\n", O[0], O[1], O[2], O[3]);
    printf("V[b=0, t=0, h=0, 0:4] = %+.5f %+.5f %+.5f %+.5f\n", V[0], V[1], V[2], V[3]);
    printf("O[b=1, t=%d, h=3, 0:4] = %+.5f %+.5f %+.5f %+.5f\n", SEQ - 1,
           O[n - DIM], O[n - DIM + 1], O[n - DIM + 2], O[n - DIM + 3]);
    printf("L[b=1, h=3, t=%d] = %.5f\n", SEQ - 1, L[(size_t)BATCH * HEADS * SEQ - 1]);
    {   /* check it: row 0 of every (b, h) must be V's row 0, L its score */
        int b, h, c, bad = 0;
        for (b = 0; b < BATCH; b++)
            for (h = 0; h < HEADS; h++) {
                size_t row = ((size_t)b * SEQ * HEADS + h) * DIM;
                double dot = 0.0;
                for (c = 0; c < DIM; c++) {
                    bad += fabsf(O[row + c] - V[row + c]) > 1e-6f;
                    dot += (double)Q[row + c] * K[row + c];
                }
                bad += fabs(L[(size_t)(b * HEADS + h) * SEQ] - dot / sqrt((double)DIM)) > 1e-5;
            }
        printf("check: row 0 of each (b, h) is V's row 0 and L its score: %s\n", bad ? "MISMATCH" : "OK");
        free(Q); free(K); free(V); free(O); free(L);
        return bad ? 1 : 0;
    }
}
