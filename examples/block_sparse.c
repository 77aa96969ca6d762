/* block_sparse.c - block-sparse attention: a local + global mask as a
   block mask, on the CPU (the same lists work with fa_forward_cuda, as
   device arrays, at 128 x 128 blocks).

   Build and run (from this folder):
       cc -O2 -I.. block_sparse.c -lm -o block_sparse && ./block_sparse

   The mask, per 128 x 128 block (query block I, key block J): a query
   block sees its own key block and the WINDOW before it (local), every
   query block sees the first GLOBAL key blocks, and the first GLOBAL
   query blocks see every key block (global tokens). A kernel that walks
   only the listed blocks does work in proportion to their number
   (Block-Sparse FlashAttention). The result must equal attention with the
   same mask applied key by key: checked here against a textbook softmax
   over each row's visible keys (dense_masked_row). */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { SEQ = 1000, HEADS = 2, DIM = 64, BLOCK = 128, WINDOW = 1, GLOBAL = 1 };
enum { NB = (SEQ + BLOCK - 1) / BLOCK }; /* query blocks = key blocks = 8 */

static float rand_uniform(uint64_t *state) { /* [-1, 1) */
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* the mask, block by block */
static int visited(int I, int J) { return (J <= I && J >= I - WINDOW) || J < GLOBAL || I < GLOBAL; }

/* One output row the textbook way (softmax over the visible keys only,
   in double), for the check. Q, K, V packed [seq, heads, dim]. */
static void dense_masked_row(const float *Q, const float *K, const float *V, int i, int h, double *out)
{
    double m = -INFINITY, l = 0.0, s[SEQ];
    const double scale = 1.0 / sqrt((double)DIM);
    int j, c;
    for (j = 0; j < SEQ; j++) {
        double dot = 0.0;
        s[j] = -INFINITY;
        if (!visited(i / BLOCK, j / BLOCK)) continue;
        for (c = 0; c < DIM; c++) dot += (double)Q[(i * HEADS + h) * DIM + c] * K[(j * HEADS + h) * DIM + c];
        s[j] = dot * scale;
        if (s[j] > m) m = s[j];
    }
    for (c = 0; c < DIM; c++) out[c] = 0.0;
    for (j = 0; j < SEQ; j++) {
        const double p = s[j] == -INFINITY ? 0.0 : exp(s[j] - m);
        l += p;
        for (c = 0; c < DIM; c++) out[c] += p * V[(j * HEADS + h) * DIM + c];
    }
    for (c = 0; c < DIM; c++) out[c] /= l;
}

int main(void)
{
    const int nb = NB;
    const size_t n = (size_t)SEQ * HEADS * DIM;
    float *Q = malloc(n * sizeof *Q), *K = malloc(n * sizeof *K), *V = malloc(n * sizeof *V);
    float *O = malloc(n * sizeof *O);
    uint8_t bitmap[NB * NB];
    int32_t counts[NB], indices[NB * NB];
    int64_t n_counts = 0, n_indices = 0, listed = 0;
    double max_err = 0.0;
    uint64_t seed = 7;
    size_t k;
    int I, J, i, h, c;
    fa_problem p = {0};
    fa_tensor q = {0}, kt = {0}, v = {0}, o = {0};
    fa_status s;

    for (k = 0; k < n; k++) Q[k] = rand_uniform(&seed), K[k] = rand_uniform(&seed), V[k] = rand_uniform(&seed);
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = SEQ;
    p.heads_q = HEADS;
    p.head_dim = DIM;
    p.block_mask.block_q = p.block_mask.block_k = BLOCK;
    p.block_mask.batch = 1; /* one mask for every sequence */
    p.block_mask.heads = 1; /* and for every head */

    /* 1. The dense block bitmap [masks][q_blocks][k_blocks], then the
          lists the kernels walk (FlexAttention's BlockMask layout). */
    for (I = 0; I < nb; I++)
        for (J = 0; J < nb; J++) {
            bitmap[I * nb + J] = (uint8_t)visited(I, J);
            listed += bitmap[I * nb + J];
        }
    s = fa_block_mask_from_bitmap(&p, bitmap, counts, indices, &n_counts, &n_indices);
    if (s != FA_OK) {
        fprintf(stderr, "%s: %s\n", fa_status_string(s), fa_last_error());
        return 1;
    }
    p.block_mask.kv_num_blocks = counts;
    p.block_mask.kv_indices = indices;
    printf("%d x %d blocks of %d, %lld listed (%.0f%% of the work of full attention)\n", nb, nb, BLOCK,
           (long long)listed, 100.0 * (double)listed / (nb * nb));
    for (I = 0; I < nb; I++) {
        printf("  query block %d sees key blocks", I);
        for (J = 0; J < counts[I]; J++) printf(" %d", indices[I * nb + J]);
        printf("\n");
    }

    /* 2. The forward with the block mask. */
    q.data = Q; kt.data = K; v.data = V; o.data = O;
    s = fa_forward(&p, q, kt, v, o, NULL, NULL, 0);
    if (s != FA_OK) {
        fprintf(stderr, "%s: %s\n", fa_status_string(s), fa_last_error());
        return 1;
    }

    /* 3. Against the textbook softmax over each row's visible keys. */
    for (i = 0; i < SEQ; i++)
        for (h = 0; h < HEADS; h++) {
            double ref[DIM];
            dense_masked_row(Q, K, V, i, h, ref);
            for (c = 0; c < DIM; c++) {
                const double e = fabs(O[(i * HEADS + h) * DIM + c] - ref[c]);
                if (e > max_err) max_err = e;
            }
        }
    printf("max |block-sparse - masked reference| = %.2e -> %s\n", max_err, max_err < 1e-4 ? "OK" : "FAILED");
    free(Q); free(K); free(V); free(O);
    return max_err < 1e-4 ? 0 : 1;
}
