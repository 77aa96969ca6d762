/* backward.c - gradients of attention with fa_backward, checked the way a
   student would check them: against finite differences of the forward.

   Build and run (from this folder):
       cc -O2 -I.. backward.c -lm -o backward && ./backward

   The loss is loss = sum(O * G) for a fixed random G, so dloss/dO = G: the
   dO that fa_backward takes. The forward saves L, the log-sum-exp of each
   score row; the backward rebuilds P = exp(S - L) from it block by block
   instead of storing the seq x seq matrix P, and needs one more row term,
   D = rowsum(dO * O). Then it walks the blocks as the forward did, with
   S = scale Q K^T and P = exp(S - L) rebuilt in each:
       dV += P^T dO,   dP = dO V^T,   dS = P * (dP - D),
       dQ += scale dS K,   dK += scale dS^T Q.
   The sizes are not multiples of any block, and the mask is causal. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { SEQ = 45, HEADS = 2, DIM = 24, N = SEQ * HEADS * DIM }; /* batch 1 */

static float Q[N], K[N], V[N], O[N], G[N], dQ[N], dK[N], dV[N], L[HEADS * SEQ];

/* Uniform in [-1, 1) from a 64-bit linear congruential generator. */
static float rand_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static fa_problem problem(void) {
    fa_problem p = {0};
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = SEQ;
    p.heads_q = HEADS;
    p.head_dim = DIM;
    p.causal = 1;
    return p;
}

static fa_tensor tensor(float *x) {
    fa_tensor t = {0}; /* f32, packed [batch, seq, heads, dim] */
    t.data = x;
    return t;
}

/* The loss sum(O * G) of the current Q, K, V (forward only), in double. */
static double loss(void) {
    fa_problem p = problem();
    double sum = 0.0;
    int i;
    if (fa_forward(&p, tensor(Q), tensor(K), tensor(V), tensor(O), L, NULL, 0) != FA_OK) {
        fprintf(stderr, "fa_forward: %s\n", fa_last_error());
        exit(1);
    }
    for (i = 0; i < N; i++) sum += (double)O[i] * G[i];
    return sum;
}

/* Central difference of the loss in element i of x (one of Q, K, V). */
static double numeric(float *x, int i) {
    const float h = 1e-2f, keep = x[i];
    double up, down;
    x[i] = keep + h; up = loss();
    x[i] = keep - h; down = loss();
    x[i] = keep;
    return (up - down) / (2.0 * h);
}

int main(void) {
    float *in[3] = {Q, K, V}, *grad[3] = {dQ, dK, dV};
    const char *name[3] = {"dQ", "dK", "dV"};
    uint64_t seed = 7;
    double before, after, worst = 0.0, row0 = 0.0;
    int i, t, bad = 0;
    for (i = 0; i < N; i++) {
        Q[i] = rand_uniform(&seed); K[i] = rand_uniform(&seed);
        V[i] = rand_uniform(&seed); G[i] = rand_uniform(&seed);
    }

    before = loss(); /* leaves O and L of the current inputs in place */
    {
        fa_problem p = problem();
        fa_status s = fa_backward(&p, tensor(Q), tensor(K), tensor(V), tensor(O), tensor(G), L,
                                  tensor(dQ), tensor(dK), tensor(dV), NULL, 0);
        if (s != FA_OK) {
            fprintf(stderr, "fa_backward: %s: %s\n", fa_status_string(s), fa_last_error());
            return 1;
        }
    }

    /* Twelve elements of each input, spread over rows, heads and columns */
    for (t = 0; t < 3; t++) {
        double err = 0.0;
        for (i = 0; i < 12; i++) {
            const int at = (int)(((unsigned)i * 2654435761u) % N);
            const double num = numeric(in[t], at), ana = grad[t][at], e = fabs(num - ana);
            err = e > err ? e : err;
            bad += e > 2e-3 + 1e-2 * fabs(ana);
        }
        printf("%s: largest |fa_backward - finite difference| over 12 elements = %.1e\n", name[t], err);
        worst = err > worst ? err : worst;
    }
    /* Causal: query 0 sees key 0 alone, so its P is 1, dP = dO . V_0 = D
       and dS = P (dP - D) = 0: its dQ is zero in every head, up to the
       rounding of two sums of the same products taken in different orders. */
    for (i = 0; i < HEADS * DIM; i++) row0 = fabs(dQ[i]) > row0 ? fabs(dQ[i]) : row0;
    printf("dQ of query 0 (it sees key 0 alone): largest |element| %.1e -> %s\n", row0,
           row0 <= 1e-5 ? "zero" : "NOT ZERO");
    bad += row0 > 1e-5;

    /* One step of gradient descent on all three inputs lowers the loss. */
    for (t = 0; t < 3; t++)
        for (i = 0; i < N; i++) in[t][i] -= 0.01f * grad[t][i];
    after = loss();
    printf("loss %.5f -> %.5f after one gradient step (learning rate 0.01)\n", before, after);
    bad += !(after < before);
    printf("check: gradients match finite differences (largest error %.1e) and the step lowers the loss: %s\n",
           worst, bad ? "MISMATCH" : "OK");
    return bad ? 1 : 0;
}
