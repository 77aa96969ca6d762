/* fp8.c - FP8 (e4m3) attention on the CPU: quantize Q, K and V with
   fa_quantize, hand the codes and their descales to fa_forward, and see
   what the two ways of scaling cost in accuracy (FlashAttention-3, section
   3.3: block quantization and incoherent processing). The same codes and
   descales, as device arrays, drive fa_forward_cuda on an sm_90a GPU.

   Build and run (from this folder):
       cc -O2 -I.. fp8.c -lm -o fp8 && ./fp8

   e4m3 keeps 3 mantissa bits and a range of +-448, so every tensor is
   stored as codes x^ and descales s with x ~ x^ s. Two choices:
   - per tensor: one s for the whole tensor, set by its largest entry. A
     single outlier (here, as in FlashAttention-3's test, 0.1% of the
     entries get a second draw of standard deviation 10) sets s for all,
     and the ordinary entries fall into e4m3's coarse small numbers;
   - per block of 128 rows, and Q and K first rotated by one orthogonal
     M = H diag(+-1) / sqrt(d) (Hadamard, same seed for both): Q M (K M)^T
     = Q K^T, and the rotation spreads an outlier over its whole row, so
     each block's largest entry is close to its typical one. V is never
     rotated (P V needs V itself), so O comes out in the original basis.
   The check: both FP8 results close to the f32 one, the second closer. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { SEQ = 700, HEADS = 2, DIM = 128 }; /* 700 rows: the last block of 128 is partial */

static double rand_uniform(uint64_t *state) { /* (0, 1) */
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(*state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* N(0, 1), plus N(0, 100) with probability 0.001 (FlashAttention-3's outliers) */
static float entry(uint64_t *state) {
    const double two_pi = 6.283185307179586;
    double u1 = rand_uniform(state), u2 = rand_uniform(state);
    double x = sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
    if (rand_uniform(state) < 0.001) {
        u1 = rand_uniform(state), u2 = rand_uniform(state);
        x += 10.0 * sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
    }
    return (float)x;
}

static void fail(fa_status s) {
    fprintf(stderr, "%s: %s\n", fa_status_string(s), fa_last_error());
    exit(1);
}

/* x (f32 [SEQ, HEADS, DIM]) -> codes (e4m3) and a malloc'd descale array,
   one per tensor or one per (batch, head, block of 128 rows). */
static float *quantize(const float *x, uint8_t *codes, fa_quant_role role, int per_tensor, int hadamard)
{
    fa_quant qp = {0};
    fa_tensor in = {0}, out = {0};
    int64_t count;
    float *descales;
    fa_status s;
    qp.role = role;
    qp.batch = 1;
    qp.seqlen = SEQ;
    qp.heads = HEADS;
    qp.head_dim = DIM;
    qp.per_tensor = per_tensor;
    qp.hadamard = hadamard && role != FA_QUANT_V; /* V is never rotated */
    qp.seed = 2024;                               /* the same M for Q and K */
    if ((s = fa_quantize_descales(&qp, &count)) != FA_OK) fail(s);
    descales = malloc((size_t)count * sizeof *descales);
    in.data = (void *)x; in.dtype = FA_F32;
    out.data = codes; out.dtype = FA_E4M3;
    if ((s = fa_quantize(&qp, in, out, descales)) != FA_OK) fail(s);
    return descales;
}

/* The attention problem (no mask, scale 1/sqrt(DIM)), f32 or e4m3 alike */
static fa_problem problem(void)
{
    fa_problem p = {0};
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = SEQ;
    p.heads_q = HEADS;
    p.head_dim = DIM;
    return p;
}

/* The FP8 forward of one variant; returns the RMSE of O against ref. */
static double fp8_forward(const float *Q, const float *K, const float *V, const float *ref, int per_tensor,
                          int hadamard, float *O)
{
    const size_t n = (size_t)SEQ * HEADS * DIM;
    uint8_t *q8 = malloc(n), *k8 = malloc(n), *v8 = malloc(n);
    float *dq = quantize(Q, q8, FA_QUANT_Q, per_tensor, hadamard);
    float *dk = quantize(K, k8, FA_QUANT_K, per_tensor, hadamard);
    float *dv = quantize(V, v8, FA_QUANT_V, per_tensor, hadamard);
    fa_problem p = problem();
    fa_tensor q = {0}, k = {0}, v = {0}, o = {0};
    double sum = 0.0;
    size_t e;
    fa_status s;
    if (per_tensor) { /* one descale each, by value */
        p.descale_q = dq[0]; p.descale_k = dk[0]; p.descale_v = dv[0];
    } else {          /* arrays [batch][heads][blocks]; the per-tensor fields stay 0 */
        p.descale_q_block = dq; p.descale_k_block = dk; p.descale_v_block = dv;
    }
    q.data = q8; k.data = k8; v.data = v8;
    q.dtype = k.dtype = v.dtype = FA_E4M3;
    o.data = O; o.dtype = FA_F32;
    if ((s = fa_forward(&p, q, k, v, o, NULL, NULL, 0)) != FA_OK) fail(s);
    for (e = 0; e < n; e++) sum += ((double)O[e] - (double)ref[e]) * ((double)O[e] - (double)ref[e]);
    free(q8); free(k8); free(v8); free(dq); free(dk); free(dv);
    return sqrt(sum / (double)n);
}

int main(void)
{
    const size_t n = (size_t)SEQ * HEADS * DIM;
    float *Q = malloc(n * sizeof *Q), *K = malloc(n * sizeof *K), *V = malloc(n * sizeof *V);
    float *ref = malloc(n * sizeof *ref), *O = malloc(n * sizeof *O);
    fa_problem p = problem();
    fa_tensor q = {0}, k = {0}, v = {0}, o = {0};
    double per_tensor, block_hadamard, rms = 0.0;
    uint64_t seed = 11;
    size_t e;
    fa_status s;
    int ok;

    for (e = 0; e < n; e++) Q[e] = entry(&seed), K[e] = entry(&seed), V[e] = entry(&seed);

    /* 1. The f32 forward: the answer FP8 approximates. */
    q.data = Q; k.data = K; v.data = V; o.data = ref;
    if ((s = fa_forward(&p, q, k, v, o, NULL, NULL, 0)) != FA_OK) fail(s);
    for (e = 0; e < n; e++) rms += (double)ref[e] * (double)ref[e];
    printf("f32 forward: %d x %d heads x d %d, RMS of O %.3f\n", SEQ, HEADS, DIM, sqrt(rms / (double)n));

    /* 2. FP8, per tensor and per block + Hadamard. */
    per_tensor = fp8_forward(Q, K, V, ref, 1, 0, O);
    printf("e4m3, one descale per tensor:          RMSE of O %.2e\n", per_tensor);
    block_hadamard = fp8_forward(Q, K, V, ref, 0, 1, O);
    printf("e4m3, per 128-row block + Hadamard:    RMSE of O %.2e (%.1fx lower)\n", block_hadamard,
           per_tensor / block_hadamard);

    ok = per_tensor < 0.1 && block_hadamard < per_tensor;
    printf("block + Hadamard closer to f32 than per tensor: %s\n", ok ? "yes -> OK" : "no -> FAILED");
    free(Q); free(K); free(V); free(ref); free(O);
    return ok ? 0 : 1;
}
