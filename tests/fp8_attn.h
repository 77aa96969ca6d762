/* tests/fp8_attn.h - the FP8 (e4m3) attention cases of tests/test_gpu_fp8.cu,
   host side: the case list, the inputs and their quantization parameters,
   the fp64 reference on the DEQUANTIZED inputs, the CPU twin (fa_forward on
   the same e4m3 bytes and descales), the error measures and their
   tolerances. The quantizer and the forward under test are the caller's:
   test_gpu_fp8.cu runs fa_quantize_cuda and fa_forward_cuda;
   tests/fp8_calibrate.c runs fa_quantize and a simulated FP8 kernel, to set
   the tolerances below and to show that broken kernels fail them.

   Flow: fp8_setup (lengths, inputs, fa_quant of Q, K, V) -> the caller
   fills e[] and ds[] -> fp8_reference (fp64 O, L and sum_j P_j |V_j| on
   value(e) * descale; the CPU twin) -> the caller's O and L -> fp8_judge. */
#ifndef FLASHATTN_TESTS_FP8_ATTN_H
#define FLASHATTN_TESTS_FP8_ATTN_H

#include "test_util.h"

/* ---- tolerances ---------------------------------------------------------------
   The GPU kernel rounds P = exp(S - m) to e4m3 before P V (FlashAttention-3
   section 3.3): up to 2^-4 relative per element, and more below e4m3's
   normal range (2^-6, where the step is 2^-9). The CPU twin keeps P in
   fp32. Against either reference (they agree to ~1e-6) three measures:
     o_rmse  ||O - ref|| / ||ref|| over the case's output;
     o_elem  max over elements of |O - ref| / (sum_j P_j |V_j|) (P, V of
             the reference): rounding each P_j by a relative d_j (2^-4 in
             e4m3's normal range) moves O by at most max d_j times that sum;
             rows that see no key must give exactly 0;
     l_abs   max |L - ref| over rows that see a key (-inf exactly elsewhere).
   Calibrated by tests/fp8_calibrate.c (make fp8-calibrate) on exactly
   these cases, with a simulated kernel: P rounded to e4m3 (raw in (0, 1],
   subnormals included, or scaled by 256 first), l summing the fp32 P or
   the rounded one (scaled), with and without a model of the FP8 tensor
   cores' accumulator (each k-step of 32 products added with 13 bits below
   the leading bit, truncated), O rounded to f16 / bf16. Largest over the
   full list and every accepted model: o_rmse 2.5e-2, o_elem 0.21 (0.057
   with P scaled first), l_abs 2.3e-2 (l of the rounded P; 8.1e-3 with l of
   the fp32 P and the 13-bit accumulator, 1.6e-6 with neither). The
   tolerances are 2.6x, 2.4x and 2.2x those. Not accepted: l summing the
   raw rounded P, which loses every P below 2^-10 (9.4e-2 / 0.21 / 0.17 on
   rows of 1000 keys). A broken kernel (the 13-bit model plus one bug) fails
   in every case where the bug alone is over the tolerances; per bug, the
   cases caught of those it changes, and the smallest error / tolerance:
   descale_v dropped 36 of 36 (200), descale_k or descale_q dropped 36 of
   36 (18), K's block descales one block off 14 of 14 (2.6), Q's 10 of 11,
   V rows swapped in pairs 34 of 34 (16), the GQA head map h % hkv 10 of 10
   (18), the masks one key off 19 of 20, the scale of 2d 36 of 36 (2.9). */
typedef struct fp8_tol {
    double o_rmse, o_elem, l_abs;
} fp8_tol;
static const fp8_tol FP8_TOL = {0.065, 0.5, 0.05};

/* ---- the cases ---------------------------------------------------------------- */

typedef struct fp8_case {
    int batch, sq, sk, hq, hkv, d;
    int causal, window;   /* window: window_left = sk / 4 + 3, window_right = 5 */
    int varlen;           /* cu_seqlens_q/k: sequence 0 the longest, 1 without queries, 2 without keys */
    int per_tensor, hadamard;
    int outliers;         /* N(0,1) + N(0,100) Bernoulli(0.001), else N(0,1) */
    int lse;              /* ask for L */
    int padded;           /* q, k, v, o with padded strides (16-byte multiples) */
    int zero_block;       /* per block: Q's, K's and V's first block of head 0, sequence 0, all 0 (descale 0) */
    fa_dtype in_dt;       /* what the quantizer reads: f16 or bf16 */
    fa_dtype out_dt;      /* O: f16 or bf16 */
    uint64_t seed;
} fp8_case;

/* Shapes: batch, sq, sk, heads_q, heads_kv, d, mask (1 causal, 2 window,
   3 both), varlen. Odd lengths (1, 17, 127, 129, 300, 1000), sq != sk both
   ways (with causal and sq > sk the first rows see no key), MHA, GQA, MQA. */
static const int FP8_SHAPES[][8] = {
    {1, 1, 1, 2, 2, 64, 0, 0},        {2, 17, 300, 4, 1, 64, 1, 0},    {2, 1000, 1000, 2, 2, 64, 0, 0},
    {3, 129, 127, 6, 2, 64, 1, 1},    {1, 300, 1000, 4, 4, 64, 2, 0},  {2, 127, 129, 2, 1, 64, 3, 0},
    {1, 1000, 1000, 4, 2, 128, 1, 0}, {2, 129, 129, 2, 2, 128, 0, 0},  {3, 300, 300, 4, 1, 128, 0, 1},
    {2, 1, 1000, 8, 2, 128, 1, 0},    {1, 1000, 17, 2, 2, 128, 1, 0},  {3, 127, 300, 6, 3, 128, 2, 1},
    {1, 300, 300, 2, 1, 256, 1, 0},   {2, 129, 1000, 4, 4, 256, 0, 0}, {3, 1000, 129, 2, 2, 256, 2, 1},
    {1, 17, 17, 4, 2, 256, 3, 0},     {2, 1000, 1000, 2, 1, 256, 0, 0}, {2, 1, 129, 2, 2, 256, 0, 1},
};
/* --quick (compute-sanitizer): small, every feature still there */
static const int FP8_SHAPES_QUICK[][8] = {
    {1, 129, 129, 2, 2, 256, 2, 0}, {3, 65, 33, 2, 2, 128, 0, 1}, {1, 17, 129, 2, 1, 64, 1, 0},
    {3, 33, 65, 4, 2, 64, 3, 1},    {1, 1, 17, 2, 2, 128, 0, 0},  {2, 127, 127, 2, 1, 256, 1, 0},
};

/* Case i of the list (quick or full); returns 0 past its end. Each full
   shape runs twice, with two of the four quantizations (per block or per
   tensor, with or without the Hadamard rotation), so each head dim sees
   all four; dtypes, outliers, L and padding alternate. */
REF_FN int fp8_case_at(int quick, int i, fp8_case *c)
{
    int n = quick ? (int)(sizeof FP8_SHAPES_QUICK / sizeof FP8_SHAPES_QUICK[0])
                  : 2 * (int)(sizeof FP8_SHAPES / sizeof FP8_SHAPES[0]);
    int s = quick ? i : i / 2, v = quick ? 0 : i % 2, quant = (s + 2 * v) % 4;
    const int *sh = quick ? FP8_SHAPES_QUICK[s] : FP8_SHAPES[s];
    if (i >= n) return 0;
    memset(c, 0, sizeof *c);
    c->batch = sh[0]; c->sq = sh[1]; c->sk = sh[2]; c->hq = sh[3]; c->hkv = sh[4]; c->d = sh[5];
    c->causal = sh[6] & 1; c->window = (sh[6] & 2) != 0; c->varlen = sh[7];
    c->per_tensor = quant >= 2;
    c->hadamard = quant % 2 == 0;
    c->outliers = v == 0 || s % 3 == 0;
    c->lse = (s + v) % 3 != 2;
    c->padded = (s + v) % 5 == 1;
    c->zero_block = !c->per_tensor && (s + v) % 2 == 0;
    c->in_dt = (s / 2 + v) % 2 ? FA_BF16 : FA_F16;
    c->out_dt = (s + v) % 2 ? FA_BF16 : FA_F16;
    c->seed = 4900 + (uint64_t)i * 7919 + (quick ? 1 : 0);
    return 1;
}

/* ---- one case's inputs and references ----------------------------------------- */

typedef struct fp8_run {
    fp8_case c;
    fa_problem p;        /* host arrays (cu_seqlens, descale blocks) */
    int32_t cuq[9], cuk[9];
    fa_quant qp[3];      /* Q, K, V; cu_seqlens host */
    tens x[3];           /* the f16 / bf16 inputs */
    tens e[3];           /* their e4m3 codes: the caller's quantizer writes them */
    float *ds[3];        /* and their descales, nds[i] each */
    int64_t nds[3], nl;
    tens deq[3];         /* value(e) * descale, f32 */
    double *oref, *aref, *lref; /* fp64: O, sum_j P_j |V_j| (per element), L */
    double *otwin, *ltwin;      /* the CPU fa_forward on e[] */
    int nbq, seqq, nbk, seqk;
    char ctx[240];
} fp8_run;

REF_FN void fp8_setup(fp8_run *r, const fp8_case *c)
{
    uint64_t rng = c->seed * 0x9E3779B97F4A7C15ull + 1;
    int b, i;
    memset(r, 0, sizeof *r);
    r->c = *c;
    r->p.batch = c->batch; r->p.seqlen_q = c->sq; r->p.seqlen_k = c->sk;
    r->p.heads_q = c->hq; r->p.heads_kv = c->hkv; r->p.head_dim = c->d;
    r->p.causal = c->causal;
    if (c->window) { r->p.sliding_window = 1; r->p.window_left = c->sk / 4 + 3; r->p.window_right = 5; }
    r->nbq = r->nbk = c->batch; r->seqq = c->sq; r->seqk = c->sk;
    if (c->varlen) {
        for (b = 0; b < c->batch; b++) {
            r->cuq[b + 1] = r->cuq[b] + (b == 0 ? c->sq : b == 1 ? 0 : rng_int(&rng, 1, c->sq));
            r->cuk[b + 1] = r->cuk[b] + (b == 0 ? c->sk : b == 2 ? 0 : rng_int(&rng, 1, c->sk));
        }
        r->p.cu_seqlens_q = r->cuq; r->p.cu_seqlens_k = r->cuk;
        r->nbq = r->nbk = 1; r->seqq = r->cuq[c->batch]; r->seqk = r->cuk[c->batch];
    }
    r->nl = ref_lse_count(&r->p);
    for (i = 0; i < 3; i++) {
        int nb = i ? r->nbk : r->nbq, seq = i ? r->seqk : r->seqq, heads = i ? c->hkv : c->hq;
        int64_t k;
        fa_quant *q = &r->qp[i];
        r->x[i] = tens_make(c->in_dt, nb, seq, heads, c->d, LAYOUT_PACKED, &rng);
        if (c->outliers) tens_fill_outliers(&r->x[i], &rng);
        else tens_fill(&r->x[i], &rng, 1.0);
        if (c->zero_block) { /* (packed [nb, seq, heads, d]: rows of head 0 from position 0) */
            int rows = i ? FLASHATTN_FP8_BLOCK_K : FLASHATTN_FP8_BLOCK_Q, n, j;
            for (n = 0; n < rows && n < (i ? c->sk : c->sq); n++)
                for (j = 0; j < c->d; j++) ref_put(r->x[i].t, (int64_t)n * heads * c->d + j, 0.0);
        }
        r->e[i] = tens_make_aligned(FA_E4M3, nb, seq, heads, c->d, c->padded, 16, &rng);
        q->role = (fa_quant_role)i; q->batch = c->batch; q->seqlen = i ? c->sk : c->sq; q->heads = heads;
        q->head_dim = c->d; q->cu_seqlens = c->varlen ? (i ? r->cuk : r->cuq) : NULL;
        q->per_tensor = c->per_tensor; q->hadamard = c->hadamard && i != FA_QUANT_V;
        q->seed = c->seed ^ 0xfa8ull; /* Q and K alike: (QM)(KM)^T = QK^T */
        fa_quantize_descales(q, &r->nds[i]);
        r->ds[i] = (float *)malloc((size_t)r->nds[i] * sizeof(float));
        for (k = 0; k < r->nds[i]; k++) r->ds[i][k] = NAN;
    }
    snprintf(r->ctx, sizeof r->ctx,
             "fp8 seed=%llu b%d sq%d sk%d hq%d hkv%d d%d%s%s%s %s%s %s->%s%s%s%s%s",
             (unsigned long long)c->seed, c->batch, c->sq, c->sk, c->hq, c->hkv, c->d, c->causal ? " causal" : "",
             c->window ? " window" : "", c->varlen ? " varlen" : "", c->per_tensor ? "per-tensor" : "per-block",
             c->hadamard ? "+hadamard" : "", dt_name(c->in_dt), dt_name(c->out_dt),
             c->outliers ? " outliers" : "", c->lse ? " L" : "", c->padded ? " padded" : "",
             c->zero_block ? " zero-block" : "");
}

/* The descales in p (per tensor: the one value; else the arrays), for the
   CPU calls: host memory. */
REF_FN void fp8_set_descales(fa_problem *p, float *const ds[3], int per_tensor)
{
    if (per_tensor) {
        p->descale_q = ds[0][0]; p->descale_k = ds[1][0]; p->descale_v = ds[2][0];
        p->descale_q_block = p->descale_k_block = p->descale_v_block = NULL;
    } else {
        p->descale_q = p->descale_k = p->descale_v = 0.0f;
        p->descale_q_block = ds[0]; p->descale_k_block = ds[1]; p->descale_v_block = ds[2];
    }
}

/* ---- measures ------------------------------------------------------------------- */

typedef struct fp8_err {
    double o_rmse, o_elem, o_max, l_abs;
    int64_t o_nan, o_not_zero, l_bad, pad;
} fp8_err;

/* o (logical [nbq, seqq, hq, d], any dtype) and lse ([nl], NULL = not asked)
   against oref / lref (packed doubles). */
REF_FN void fp8_measure(const fp8_run *r, const tens *o, const float *lse, const double *oref, const double *lref,
                        fp8_err *e)
{
    double se = 0.0, sr = 0.0;
    int64_t t, i, n = 0;
    int b, h, c;
    memset(e, 0, sizeof *e);
    for (b = 0; b < o->nb; b++)
        for (t = 0; t < o->seq; t++)
            for (h = 0; h < o->heads; h++)
                for (c = 0; c < o->dim; c++, n++) {
                    double got = tens_get(o, b, t, h, c), want = oref[n], a = r->aref[n], err = fabs(got - want);
                    if (got != got || isinf(got)) { e->o_nan++; continue; }
                    if (a == 0.0) { e->o_not_zero += got != 0.0 || want != 0.0; continue; } /* no key seen */
                    se += err * err;
                    sr += want * want;
                    if (err / a > e->o_elem) e->o_elem = err / a;
                    if (err > e->o_max) e->o_max = err;
                }
    e->o_rmse = sr > 0.0 ? sqrt(se / sr) : sqrt(se);
    if (o->snap) e->pad = tens_padding_changed(o);
    for (i = 0; lse && i < r->nl; i++) {
        double got = lse[i], want = lref[i];
        if (want == -INFINITY || got != got || isinf(got)) e->l_bad += got != want;
        else if (fabs(got - want) > e->l_abs) e->l_abs = fabs(got - want);
    }
}

/* Output buffers for O [rows_q, hq, d] (and the same of doubles). */
REF_FN double *fp8_doubles(int64_t n) { return (double *)calloc((size_t)n + 1, sizeof(double)); }

/* The references, once e[] and ds[] hold the quantized inputs. */
REF_FN void fp8_reference(fp8_run *r)
{
    const fp8_case *c = &r->c;
    int64_t no = (int64_t)r->nbq * r->seqq * c->hq * c->d, k;
    tens vabs, twin;
    float *lt = (float *)malloc((size_t)(r->nl + 1) * sizeof(float));
    uint64_t rng = 1;
    int i;
    fa_status st;
    fp8_set_descales(&r->p, r->ds, c->per_tensor);
    for (i = 0; i < 3; i++) {
        r->deq[i] = tens_make(FA_F32, i ? r->nbk : r->nbq, i ? r->seqk : r->seqq, i ? c->hkv : c->hq, c->d,
                              LAYOUT_PACKED, &rng);
        ref_fp8_dequantize(&r->p, i, r->e[i].t, r->deq[i].t);
    }
    vabs = tens_clone(&r->deq[2]);
    for (k = 0; k < vabs.n; k++) ((float *)vabs.buf)[k] = fabsf(((float *)vabs.buf)[k]);
    r->oref = fp8_doubles(no); r->aref = fp8_doubles(no); r->lref = fp8_doubles(r->nl);
    ref_forward(&r->p, r->deq[0].t, r->deq[1].t, r->deq[2].t, r->oref, r->lref);
    ref_forward(&r->p, r->deq[0].t, r->deq[1].t, vabs.t, r->aref, NULL);
    /* the CPU twin: O in f32, so it is the fp32 path with nothing rounded after */
    twin = tens_make(FA_F32, r->nbq, r->seqq, c->hq, c->d, LAYOUT_PACKED, &rng);
    st = fa_forward(&r->p, r->e[0].t, r->e[1].t, r->e[2].t, twin.t, lt, NULL, 0);
    check(st == FA_OK, "%s: the CPU twin fa_forward: %s", r->ctx, fa_last_error());
    r->otwin = tens_to_packed(&twin);
    r->ltwin = fp8_doubles(r->nl);
    for (k = 0; k < r->nl; k++) r->ltwin[k] = lt[k];
    { /* the test's own check: the twin agrees with the fp64 reference built
         from the test's reading of the e4m3 codes and the descale layout */
        fp8_err e;
        fp8_measure(r, &twin, lt, r->oref, r->lref, &e);
        check(e.o_rmse <= 1e-5 && e.o_elem <= 1e-4 && e.l_abs <= 1e-3 && !e.o_nan && !e.o_not_zero && !e.l_bad,
              "%s: the CPU twin against the fp64 reference on the dequantized inputs: rmse %.3g elem %.3g L %.3g, "
              "%lld/%lld/%lld bad", r->ctx, e.o_rmse, e.o_elem, e.l_abs, (long long)e.o_nan,
              (long long)e.o_not_zero, (long long)e.l_bad);
    }
    tens_free(&vabs);
    tens_free(&twin);
    free(lt);
}

/* The errors' ratios to the tolerances: the largest (> 1 fails). */
REF_FN double fp8_ratio(const fp8_err *e, const fp8_tol *t)
{
    double x = e->o_rmse / t->o_rmse;
    if (e->o_elem / t->o_elem > x) x = e->o_elem / t->o_elem;
    if (e->l_abs / t->l_abs > x) x = e->l_abs / t->l_abs;
    if (e->o_nan || e->o_not_zero || e->l_bad || e->pad) x = INFINITY;
    return x;
}

/* Judge `who`'s O and L against the fp64 reference and the CPU twin.
   record: count the checks (else only measure). Returns the larger ratio. */
REF_FN double fp8_judge(const fp8_run *r, const char *who, const tens *o, const float *lse, int record)
{
    fp8_err ef, et;
    double rf, rt;
    fp8_measure(r, o, lse, r->oref, r->lref, &ef);
    fp8_measure(r, o, lse, r->otwin, r->ltwin, &et);
    rf = fp8_ratio(&ef, &FP8_TOL);
    rt = fp8_ratio(&et, &FP8_TOL);
    if (!record) return rf > rt ? rf : rt;
    printf("%-4s %s %s: vs fp64 rmse %.2e elem %.3f max %.2e L %.2e | vs CPU twin rmse %.2e elem %.3f L %.2e\n",
           rf > 1 || rt > 1 ? "BAD" : "", r->ctx, who, ef.o_rmse, ef.o_elem, ef.o_max, ef.l_abs, et.o_rmse,
           et.o_elem, et.l_abs);
    check(!ef.o_nan, "%s %s: %lld O elements not finite (never written?)", r->ctx, who, (long long)ef.o_nan);
    check(!ef.o_not_zero, "%s %s: %lld O elements of rows that see no key are not 0", r->ctx, who,
          (long long)ef.o_not_zero);
    check(!ef.pad, "%s %s: %lld padding elements of O changed", r->ctx, who, (long long)ef.pad);
    check(!ef.l_bad, "%s %s: %lld L values wrong (-inf where no key is seen, finite elsewhere)", r->ctx, who,
          (long long)ef.l_bad);
    check(ef.o_rmse <= FP8_TOL.o_rmse && et.o_rmse <= FP8_TOL.o_rmse,
          "%s %s: O relative RMSE %.3g (fp64), %.3g (CPU twin) over %.3g", r->ctx, who, ef.o_rmse, et.o_rmse,
          FP8_TOL.o_rmse);
    check(ef.o_elem <= FP8_TOL.o_elem && et.o_elem <= FP8_TOL.o_elem,
          "%s %s: O element error / sum P|V| %.3g (fp64), %.3g (CPU twin) over %.3g", r->ctx, who, ef.o_elem,
          et.o_elem, FP8_TOL.o_elem);
    check(ef.l_abs <= FP8_TOL.l_abs && et.l_abs <= FP8_TOL.l_abs, "%s %s: L error %.3g (fp64), %.3g (CPU twin) over %.3g",
          r->ctx, who, ef.l_abs, et.l_abs, FP8_TOL.l_abs);
    return rf > rt ? rf : rt;
}

REF_FN void fp8_free(fp8_run *r)
{
    int i;
    for (i = 0; i < 3; i++) {
        tens_free(&r->x[i]); tens_free(&r->e[i]); tens_free(&r->deq[i]);
        free(r->ds[i]);
    }
    free(r->oref); free(r->aref); free(r->lref); free(r->otwin); free(r->ltwin);
}

#endif /* FLASHATTN_TESTS_FP8_ATTN_H */
