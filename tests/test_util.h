/* tests/test_util.h - small helpers shared by the CPU tests: counters, a
   seeded RNG, tensors with chosen strides and padding, NaN-poisoned outputs,
   and an element-wise comparison against the fp64 reference.

   Every test binary ends by printing one line "N passed, M failed"; the
   Makefile sums those lines. */
#ifndef FLASHATTN_TESTS_UTIL_H
#define FLASHATTN_TESTS_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

/* ---- counters ------------------------------------------------------------- */

typedef struct tcount {
    int passed, failed;
    double worst[4]; /* per dtype: the largest err / (atol + rtol |ref|) seen by compare() */
} tcount;
static tcount T_COUNT; /* the one global of the test program */

/* Record one check; on failure print the message (it should carry the seed). */
REF_FN int check(int ok, const char *fmt, ...)
{
    if (ok) { T_COUNT.passed++; return 1; }
    T_COUNT.failed++;
    {
        va_list ap;
        va_start(ap, fmt);
        fputs("FAIL: ", stdout);
        vfprintf(stdout, fmt, ap);
        fputc('\n', stdout);
        va_end(ap);
    }
    fflush(stdout);
    return 0;
}

REF_FN int summary(const char *prog)
{
    if (T_COUNT.worst[0] + T_COUNT.worst[1] + T_COUNT.worst[2] > 0)
        printf("%s: largest error / tolerance: f32 %.3f, f16 %.3f, bf16 %.3f\n", prog, T_COUNT.worst[0],
               T_COUNT.worst[1], T_COUNT.worst[2]);
    printf("%s: %d passed, %d failed\n", prog, T_COUNT.passed, T_COUNT.failed);
    printf("%d passed, %d failed\n", T_COUNT.passed, T_COUNT.failed);
    return T_COUNT.failed ? 1 : 0;
}

/* ---- RNG: splitmix64 ------------------------------------------------------ */

REF_FN uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
REF_FN double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }
REF_FN int rng_int(uint64_t *s, int lo, int hi) /* [lo, hi] */
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}
REF_FN double rng_normal(uint64_t *s)
{
    double u = rng_uniform(s), v = rng_uniform(s);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* ---- tensors ------------------------------------------------------------------ */

/* packed (strides 0), padded (explicit strides with gaps between heads, rows
   and batches), explicit strides equal to the packed ones, or mixed: each
   tensor of a case picks one of the three. */
enum { LAYOUT_PACKED = 0, LAYOUT_PADDED = 1, LAYOUT_EXPLICIT_PACKED = 2, LAYOUT_MIXED = 3 };

/* A logical [nb, seq, heads, dim] tensor inside an allocation of n elements.
   The view t has strides 0 (packed) or explicit ones with padding between
   heads, rows and batches. live[i] says whether element i belongs to the
   logical tensor; padding is filled with NaN for inputs. */
typedef struct tens {
    fa_tensor t;
    void *buf;
    unsigned char *live;
    void *snap; /* copy of buf taken by tens_snapshot */
    int64_t n;
    int nb, seq, heads, dim;
    int64_t s[3];
} tens;

REF_FN size_t dt_size(fa_dtype d) { return ref_dtype_size(d); }

REF_FN void tens_set_bits_nan(tens *x, int64_t i)
{
    if (x->t.dtype == FA_F32) ((uint32_t *)x->buf)[i] = 0x7FC00000u;
    else if (x->t.dtype == FA_F16) ((uint16_t *)x->buf)[i] = 0x7E00u;
    else if (x->t.dtype == FA_BF16) ((uint16_t *)x->buf)[i] = 0x7FC0u;
    else ((uint8_t *)x->buf)[i] = 0x7F;
}

REF_FN int64_t tens_index(const tens *x, int b, int64_t t, int h, int c)
{
    return (int64_t)b * x->s[0] + t * x->s[1] + (int64_t)h * x->s[2] + c;
}

/* Allocate with element strides s0 (batch), s1 (seq), s2 (head); every
   element, logical and padding, starts as NaN. With explicit = 0 the view's
   strides stay 0 ("packed", which s0..s2 must then be). */
REF_FN tens tens_make_strided(fa_dtype dt, int nb, int seq, int heads, int dim, int64_t s0,
                              int64_t s1, int64_t s2, int explicit_strides)
{
    tens x;
    int64_t i;
    int b, t, h, c;
    memset(&x, 0, sizeof x);
    x.nb = nb; x.seq = seq; x.heads = heads; x.dim = dim;
    x.t.dtype = dt;
    x.s[0] = s0; x.s[1] = s1; x.s[2] = s2;
    if (explicit_strides) {
        x.t.head_stride = x.s[2]; x.t.seq_stride = x.s[1]; x.t.batch_stride = x.s[0];
    }
    x.n = (int64_t)nb * x.s[0] + 16; /* a little tail padding too */
    if (x.n < 16) x.n = 16;
    x.buf = malloc((size_t)x.n * dt_size(dt));
    x.live = (unsigned char *)calloc((size_t)x.n, 1);
    x.t.data = x.buf;
    for (i = 0; i < x.n; i++) tens_set_bits_nan(&x, i);
    for (b = 0; b < nb; b++)
        for (t = 0; t < seq; t++)
            for (h = 0; h < heads; h++)
                for (c = 0; c < dim; c++) x.live[tens_index(&x, b, t, h, c)] = 1;
    return x;
}

/* Allocate in a layout (packed, or padded by a few elements at random). */
REF_FN tens tens_make(fa_dtype dt, int nb, int seq, int heads, int dim, int layout, uint64_t *rng)
{
    int64_t s0, s1, s2;
    if (layout == LAYOUT_MIXED) layout = rng_int(rng, 0, 2);
    if (layout == LAYOUT_PADDED) {
        s2 = dim + rng_int(rng, 1, 3);
        s1 = heads * s2 + rng_int(rng, 1, 5);
        s0 = (int64_t)seq * s1 + rng_int(rng, 1, 9);
    } else {
        s2 = dim;
        s1 = (int64_t)heads * dim;
        s0 = (int64_t)seq * s1;
    }
    return tens_make_strided(dt, nb, seq, heads, dim, s0, s1, s2, layout != LAYOUT_PACKED);
}

/* Fill the logical elements with N(0, sd^2) (rounded to the dtype). */
REF_FN void tens_fill(tens *x, uint64_t *rng, double sd)
{
    int64_t i;
    for (i = 0; i < x->n; i++)
        if (x->live[i]) ref_put(x->t, i, sd * rng_normal(rng));
}

/* FlashAttention-3's accuracy distribution: N(0,1) + N(0,100) * Bernoulli(0.001). */
REF_FN void tens_fill_outliers(tens *x, uint64_t *rng)
{
    int64_t i;
    for (i = 0; i < x->n; i++)
        if (x->live[i]) {
            double v = rng_normal(rng);
            if (rng_uniform(rng) < 0.001) v += 10.0 * rng_normal(rng);
            ref_put(x->t, i, v);
        }
}

/* Allocate packed, or padded by whole multiples of `align` elements (16-byte
   aligned rows for the GPU: align 8 for f16 / bf16, 16 for e4m3). */
REF_FN tens tens_make_aligned(fa_dtype dt, int nb, int seq, int heads, int dim, int padded, int align,
                              uint64_t *rng)
{
    int64_t s2, s1, s0;
    if (!padded) return tens_make(dt, nb, seq, heads, dim, LAYOUT_PACKED, rng);
    s2 = dim + (int64_t)align * rng_int(rng, 1, 2);
    s1 = heads * s2 + (int64_t)align * rng_int(rng, 1, 3);
    s0 = (int64_t)seq * s1 + (int64_t)align * rng_int(rng, 1, 3);
    return tens_make_strided(dt, nb, seq, heads, dim, s0, s1, s2, 1);
}

REF_FN void tens_snapshot(tens *x)
{
    size_t bytes = (size_t)x->n * dt_size(x->t.dtype);
    if (!x->snap) x->snap = malloc(bytes);
    memcpy(x->snap, x->buf, bytes);
}

/* Bytes of non-live elements unchanged since the snapshot? */
REF_FN int64_t tens_padding_changed(const tens *x)
{
    size_t es = dt_size(x->t.dtype);
    int64_t i, bad = 0;
    for (i = 0; i < x->n; i++)
        if (!x->live[i] && memcmp((char *)x->buf + i * es, (char *)x->snap + i * es, es)) bad++;
    return bad;
}

/* A copy of x's whole buffer, padding included (e.g. the expected state of
   a cache); no live map or snapshot of its own. Free it with tens_free. */
REF_FN tens tens_clone(const tens *x)
{
    tens y = *x;
    size_t bytes = (size_t)x->n * dt_size(x->t.dtype);
    y.buf = malloc(bytes);
    memcpy(y.buf, x->buf, bytes);
    y.t.data = y.buf;
    y.live = NULL;
    y.snap = NULL;
    return y;
}

REF_FN void tens_free(tens *x)
{
    free(x->buf); free(x->live); free(x->snap);
    memset(x, 0, sizeof *x);
}

REF_FN double tens_get(const tens *x, int b, int64_t t, int h, int c)
{
    return ref_get(x->t, tens_index(x, b, t, h, c));
}

/* The logical elements as packed doubles [nb * seq, heads, dim] (malloc'd). */
REF_FN double *tens_to_packed(const tens *x)
{
    double *r = (double *)malloc(sizeof(double) * (size_t)x->nb * x->seq * x->heads * x->dim + 8);
    int b, h, c;
    int64_t t;
    for (b = 0; b < x->nb; b++)
        for (t = 0; t < x->seq; t++)
            for (h = 0; h < x->heads; h++)
                for (c = 0; c < x->dim; c++)
                    r[(((int64_t)b * x->seq + t) * x->heads + h) * x->dim + c] = tens_get(x, b, t, h, c);
    return r;
}

/* ---- comparison --------------------------------------------------------------- */

typedef struct tol { double atol, rtol; } tol;

/* Compare the logical elements of x with ref (packed [nb*seq, heads, dim]
   doubles): |x - ref| <= atol + rtol * |ref|; NaN (never written) fails;
   padding must be untouched since the snapshot. Prints the first few
   mismatches with `ctx`. Returns the number of bad elements. */
REF_FN int64_t compare(const char *ctx, const char *what, const tens *x, const double *ref, tol tl)
{
    int64_t bad = 0, unwritten = 0, pad;
    double worst = 0.0, worst_ratio = 0.0, se = 0.0, sr = 0.0;
    int b, h, c;
    int64_t t;
    for (b = 0; b < x->nb; b++)
        for (t = 0; t < x->seq; t++)
            for (h = 0; h < x->heads; h++)
                for (c = 0; c < x->dim; c++) {
                    double got = tens_get(x, b, t, h, c);
                    double want = ref[(((int64_t)b * x->seq + t) * x->heads + h) * x->dim + c];
                    double err = fabs(got - want);
                    int ok = err <= tl.atol + tl.rtol * fabs(want);
                    if (got != got && want == want) unwritten++;
                    if (want != want) ok = 1; /* reference NaN: only NaN/Inf-input tests */
                    if (!ok) {
                        if (bad < 4)
                            printf("  %s %s: [b=%d t=%lld h=%d c=%d] got %.9g want %.9g (err %.3g)\n",
                                   ctx, what, b, (long long)t, h, c, got, want, err);
                        bad++;
                    }
                    if (err == err && err > worst) worst = err;
                    if (err == err && want == want) { se += err * err; sr += want * want; }
                    if (err == err && want == want && err / (tl.atol + tl.rtol * fabs(want)) > worst_ratio)
                        worst_ratio = err / (tl.atol + tl.rtol * fabs(want));
                    if (err == err && want == want && x->t.dtype <= FA_E4M3 &&
                        err / (tl.atol + tl.rtol * fabs(want)) > T_COUNT.worst[x->t.dtype])
                        T_COUNT.worst[x->t.dtype] = err / (tl.atol + tl.rtol * fabs(want));
                }
    if (getenv("FA_TEST_VERBOSE"))
        printf("  %s %s: max err %.3g, max err/tolerance %.3f, rms err/rms ref %.3g\n", ctx, what, worst, worst_ratio,
               sr > 0 ? sqrt(se / sr) : 0.0);
    pad = tens_padding_changed(x);
    if (bad || pad)
        printf("  %s %s: %lld bad (%lld never written, NaN), max err %.3g, %lld padding elements changed\n",
               ctx, what, (long long)bad, (long long)unwritten, worst, (long long)pad);
    return bad + pad;
}

/* Compare fp32 L against the reference's doubles (count n): -inf must be exactly -inf. */
REF_FN int64_t compare_lse(const char *ctx, const float *lse, const double *ref, int64_t n, tol tl)
{
    int64_t i, bad = 0;
    for (i = 0; i < n; i++) {
        double got = lse[i], want = ref[i];
        int ok;
        if (want == -INFINITY) ok = (got == -INFINITY);
        else ok = fabs(got - want) <= tl.atol + tl.rtol * fabs(want);
        if (!ok) {
            if (bad < 4) printf("  %s lse[%lld]: got %.9g want %.9g\n", ctx, (long long)i, got, want);
            bad++;
        }
    }
    if (bad) printf("  %s lse: %lld bad of %lld\n", ctx, (long long)bad, (long long)n);
    return bad;
}

REF_FN double rms(const double *x, int64_t n)
{
    double s = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) s += x[i] * x[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

REF_FN const char *dt_name(fa_dtype d)
{
    return d == FA_F32 ? "f32" : d == FA_F16 ? "f16" : d == FA_BF16 ? "bf16" : "e4m3";
}

#endif /* FLASHATTN_TESTS_UTIL_H */
