/* online_softmax.c - from the 3-pass softmax to FlashAttention's 1-pass
   update, on one row of attention scores. A walk-through to read beside the
   header's >>impl-softmax section; it needs the library only for fa_merge.

   Build and run (from this folder):
       cc -O2 -I.. online_softmax.c -lm -o online_softmax && ./online_softmax

   One query row q attends over N keys: x_j = scale * q . k_j is its row of
   scores, and the output is o = sum_j softmax(x)_j * V[j, :]. We take the
   scores as given (an array x) and show five ways to get o, which all agree:

     0. the textbook softmax exp(x_j) / sum exp(x) ... overflows;
     1. 3-pass safe softmax   (max, then sum, then normalize);
     2. 2-pass online softmax (online softmax: max and sum in one pass, using
                               d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i});
     3. 1-pass attention      (FlashAttention's insight: the output row is
                               updated with the same correction factor);
     4. FlashAttention-2      (keep o unnormalized, rescale only by
                               e^{m_old - m_new}, divide by l once at the end,
                               and return L = m + log l), over tiles of Bc keys;
     5. split the keys in two halves, run 4 on each, and merge the halves by
        their log-sum-exp L (Flash-Decoding), by hand and with
        fa_merge. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>

enum { N = 10, DV = 4, BC = 4 };

/* Scores with a large one (x = 95): exp(95) = 1.8e41 is beyond float's
   3.4e38, which is what makes the textbook formula unsafe. */
static const float x[N] = {1.5f, -0.5f, 3.0f, 95.0f, 2.0f, 94.0f, -3.0f, 93.5f, 0.25f, 94.5f};
static float V[N][DV];

static void print_row(const char *name, const float *o) {
    int c;
    printf("  %-8s o = [", name);
    for (c = 0; c < DV; c++) printf("%s%+.6f", c ? ", " : "", o[c]);
    printf("]\n");
}

static float max_diff(const float *a, const float *b) {
    float e = 0.0f;
    int c;
    for (c = 0; c < DV; c++) e = fmaxf(e, fabsf(a[c] - b[c]));
    return e;
}

/* 1-pass FA-2 style over keys [j0, j1): returns the normalized o and L. */
static void flash_row(int j0, int j1, float *o, float *L) {
    float m = -INFINITY, l = 0.0f, acc[DV] = {0};
    int jb, j, c;
    for (jb = j0; jb < j1; jb += BC) {          /* one tile of up to BC keys */
        int je = jb + BC < j1 ? jb + BC : j1;
        float m_new = m, corr;
        for (j = jb; j < je; j++) m_new = fmaxf(m_new, x[j]);  /* rowmax of the tile */
        corr = expf(m - m_new);                 /* e^{m_old - m_new}; 0 on the first tile */
        l *= corr;
        for (c = 0; c < DV; c++) acc[c] *= corr; /* rescale, but do not divide by l */
        for (j = jb; j < je; j++) {
            float pj = expf(x[j] - m_new);      /* P~ = exp(S - m_new) */
            l += pj;
            for (c = 0; c < DV; c++) acc[c] += pj * V[j][c];
        }
        m = m_new;
    }
    for (c = 0; c < DV; c++) o[c] = acc[c] / l;  /* the one final division */
    *L = m + logf(l);                           /* all the backward pass needs */
}

int main(void) {
    float o3[DV] = {0}, o2[DV] = {0}, o1[DV] = {0}, o4[DV], oa[DV], ob[DV], om[DV], of[DV];
    float La, Lb, Lm, Lf, L4;
    int i, j, c;

    for (j = 0; j < N; j++)
        for (c = 0; c < DV; c++) V[j][c] = (float)((j * 7 + c * 3) % 11) / 5.0f - 1.0f;

    printf("Scores x (one query row, N = %d keys), V is %d x %d\n  x = [", N, N, DV);
    for (j = 0; j < N; j++) printf("%s%g", j ? ", " : "", x[j]);
    printf("]\n\n");

    /* ---- 0. textbook softmax: sum_j e^{x_j} overflows to inf, inf/inf = NaN */
    {
        float d = 0.0f;
        for (j = 0; j < N; j++) d += expf(x[j]);
        printf("0. textbook softmax e^x / sum e^x: sum = %g, e^95 / sum = %g  (unsafe)\n\n",
               d, expf(95.0f) / d);
    }

    /* ---- 1. 3-pass safe softmax: e^{x - m} / sum e^{x - m} is the same
       number, and every exponent is <= 0, so nothing overflows. */
    {
        float m = -INFINITY, d = 0.0f;
        for (j = 0; j < N; j++) m = fmaxf(m, x[j]);           /* pass 1: m_N */
        for (j = 0; j < N; j++) d += expf(x[j] - m);          /* pass 2: d_N */
        for (j = 0; j < N; j++)                               /* pass 3: a_j, then o */
            for (c = 0; c < DV; c++) o3[c] += expf(x[j] - m) / d * V[j][c];
        printf("1. 3-pass safe softmax:  m = %.6f  l = %.6f\n", m, d);
        print_row("", o3);
        printf("\n");
    }

    /* ---- 2. 2-pass online softmax: one pass keeps a running max m_i and a
       running sum d'_i of e^{x_j - m_i}. When the max grows, the old terms
       were scaled by e^{-m_{i-1}} and must become e^{-m_i}: multiply the
       sum by e^{m_{i-1} - m_i}. */
    {
        float m = -INFINITY, d = 0.0f;
        printf("2. 2-pass online softmax, the first pass step by step:\n");
        printf("     i     x_i        m_i         d'_i\n");
        for (i = 0; i < N; i++) {
            float m_new = fmaxf(m, x[i]);
            d = d * expf(m - m_new) + expf(x[i] - m_new);
            m = m_new;
            printf("   %3d  %7.3f  %9.3f  %11.6f\n", i, x[i], m, d);
        }
        for (j = 0; j < N; j++)                               /* pass 2: as pass 3 above */
            for (c = 0; c < DV; c++) o2[c] += expf(x[j] - m) / d * V[j][c];
        printf("   m = %.6f  l = %.6f\n", m, d);
        print_row("", o2);
        printf("   max |o - o(3-pass)| = %.3g\n\n", max_diff(o2, o3));
    }

    /* ---- 3. 1-pass: attention does not need the probabilities, only
       o = sum a_j V_j. Keep o'_i, the output normalized by the running
       d'_i and m_i, and correct it with the same trick:
         o'_i = o'_{i-1} * d'_{i-1} e^{m_{i-1} - m_i} / d'_i + e^{x_i - m_i} / d'_i * V_i */
    {
        float m = -INFINITY, d = 0.0f;
        for (i = 0; i < N; i++) {
            float m_new = fmaxf(m, x[i]);
            float d_new = d * expf(m - m_new) + expf(x[i] - m_new);
            for (c = 0; c < DV; c++)
                o1[c] = o1[c] * (d * expf(m - m_new) / d_new) + expf(x[i] - m_new) / d_new * V[i][c];
            m = m_new;
            d = d_new;
        }
        printf("3. 1-pass attention (o updated inside the loop):  m = %.6f  l = %.6f\n", m, d);
        print_row("", o1);
        printf("   max |o - o(3-pass)| = %.3g\n\n", max_diff(o1, o3));
    }

    /* ---- 4. FlashAttention-2: the same, over tiles of BC keys, with an
       unnormalized accumulator (one multiply per element per tile, not a
       multiply and a divide per key) and L = m + log l as the output. */
    flash_row(0, N, o4, &L4);
    printf("4. FlashAttention-2, tiles of %d keys, unnormalized accumulator:\n", BC);
    printf("   L = m + log l = %.6f\n", L4);
    print_row("", o4);
    printf("   max |o - o(3-pass)| = %.3g\n\n", max_diff(o4, o3));

    /* ---- 5. Split-KV: each half of the keys gives (o_s, L_s), normalized
       within its half. With L = log(e^{L_a} + e^{L_b}) (computed stably, by
       subtracting the larger), the full row is the weighted sum
         o = e^{L_a - L} o_a + e^{L_b - L} o_b.
       This is how flash-decoding combines splits, and ring attention chunks. */
    flash_row(0, N / 2, oa, &La);
    flash_row(N / 2, N, ob, &Lb);
    {
        float mx = fmaxf(La, Lb);
        Lm = mx + logf(expf(La - mx) + expf(Lb - mx));
        for (c = 0; c < DV; c++) om[c] = expf(La - Lm) * oa[c] + expf(Lb - Lm) * ob[c];
    }
    printf("5. split-KV: keys [0, %d) and [%d, %d) separately, then merged by L\n", N / 2, N / 2, N);
    printf("   L_a = %.6f  L_b = %.6f\n", La, Lb);
    print_row("half a:", oa);
    print_row("half b:", ob);
    printf("   merged by hand: L = %.6f\n", Lm);
    print_row("", om);
    printf("   max |o - o(3-pass)| = %.3g\n", max_diff(om, o3));
    {
        /* fa_merge takes the splits stacked: o_parts [splits, rows, dim],
           lse_parts [splits, rows]; here rows = 1. */
        float o_parts[2 * DV], lse_parts[2];
        fa_status s;
        for (c = 0; c < DV; c++) { o_parts[c] = oa[c]; o_parts[DV + c] = ob[c]; }
        lse_parts[0] = La;
        lse_parts[1] = Lb;
        s = fa_merge(2, 1, DV, o_parts, lse_parts, of, &Lf);
        if (s != FA_OK) {
            fprintf(stderr, "fa_merge: %s: %s\n", fa_status_string(s), fa_last_error());
            return 1;
        }
        printf("   merged by fa_merge: L = %.6f\n", Lf);
        print_row("", of);
        printf("   max |o - o(3-pass)| = %.3g\n", max_diff(of, o3));
    }
    {
        float worst = fmaxf(fmaxf(max_diff(o2, o3), max_diff(o1, o3)),
                            fmaxf(fmaxf(max_diff(o4, o3), max_diff(om, o3)), max_diff(of, o3)));
        printf("\nall agree to %.3g: %s\n", worst, worst < 1e-5f ? "yes" : "NO");
        return worst < 1e-5f ? 0 : 1;
    }
}
