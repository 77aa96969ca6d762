/* tests/test_fp8.c - FP8 (e4m3) on the CPU: the conversions, fa_quantize
   (scales, round trip, the Hadamard rotation), fa_forward with e4m3 inputs
   against the fp64 reference on the DEQUANTIZED inputs, and bad input.

   The e4m3 reference (tests/reference.h, ref_e4m3_value / _encode) works by
   arithmetic on doubles (frexp / ldexp / round to a quantum), independent of
   the library's bit tricks.

   Build: cc -std=c99 -O2 tests/test_fp8.c -lm   (see the Makefile) */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "test_util.h"

#include <ctype.h>

/* O against the fp64 reference: the CPU FP8 path is the f32 path after the
   decode, so the f32 tolerances of test_cpu.c; f16 / bf16 add the output's
   rounding. */
static tol tol_out(fa_dtype d)
{
    tol t;
    t.atol = d == FA_F32 ? 1e-5 : d == FA_F16 ? 1.5e-3 : 8e-3;
    t.rtol = d == FA_F32 ? 5e-5 : d == FA_F16 ? 1.5e-3 : 8e-3;
    return t;
}

static void test_conversions(void)
{
    int c, bad = 0, s;
    uint64_t u;
    for (c = 0; c < 256; c++) { /* every code decodes to its value, -0 and NaN included */
        float got = fa__e4m3_to_f32((uint8_t)c);
        double want = ref_e4m3_value(c);
        if (want != want ? got == got : ref_f32_bits(got) != ref_f32_bits((float)want)) bad++;
    }
    check(!bad, "e4m3 decode: %d of 256 codes wrong", bad);
    bad = 0;
    for (s = 0; s < 2; s++) /* every value, and each midpoint and its neighbours */
        for (c = 0; c < 0x7f; c++) {
            int sg = s ? 0x80 : 0, even;
            float v = (float)ref_e4m3_value(c), mid, lo, hi;
            if (s) v = -v;
            if (fa__f32_to_e4m3(v) != (sg | c)) bad++;
            if (c == 0x7e) continue;
            mid = (float)((ref_e4m3_value(c) + ref_e4m3_value(c + 1)) / 2); /* 5 bits: exact */
            even = (c & 1) ? c + 1 : c;
            lo = nextafterf(mid, 0.0f);
            hi = nextafterf(mid, 1000.0f);
            if (s) { mid = -mid; lo = -lo; hi = -hi; }
            if (fa__f32_to_e4m3(mid) != (sg | even) || fa__f32_to_e4m3(lo) != (sg | c) ||
                fa__f32_to_e4m3(hi) != (sg | (c + 1)))
                bad++;
        }
    check(!bad, "e4m3 encode at the %d values and midpoints: %d wrong", 2 * 127, bad);
    {
        const struct { float f; int want; } cases[] = {
            {448.0f, 0x7e}, {449.0f, 0x7e}, {464.0f, 0x7e}, {480.0f, 0x7e}, {1e30f, 0x7e}, {INFINITY, 0x7e},
            {-INFINITY, 0xfe}, {-500.0f, 0xfe}, {NAN, 0x7f}, {-NAN, 0x7f}, {0.0f, 0x00}, {-0.0f, 0x80},
            {0.0009765625f, 0x00} /* 2^-10: a tie, to even 0 */, {0.0029296875f, 0x02} /* 1.5 2^-9: tie to 2 */, {0.00146484375f, 0x01} /* 0.75 2^-9 */,
            {1e-40f, 0x00}, {-1e-40f, 0x80}, {0.015625f, 0x08} /* 2^-6, the smallest normal */,
            {0.0146484375f, 0x08} /* 7.5 2^-9: tie, up to the normal */, {240.0f, 0x77}, {256.0f, 0x78}};
        int i, nb = 0;
        for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
            if (fa__f32_to_e4m3(cases[i].f) != cases[i].want) {
                printf("  e4m3(%g) = 0x%02x, want 0x%02x\n", cases[i].f, fa__f32_to_e4m3(cases[i].f), cases[i].want);
                nb++;
            }
        check(!nb, "e4m3 encode special cases: %d wrong", nb);
    }
    bad = 0;
    for (u = 0; u < 0x100000000ull; u += 4093) { /* a sweep of all binary32 patterns */
        float f = ref_bits_f32((uint32_t)u);
        if (fa__f32_to_e4m3(f) != ref_e4m3_encode((double)f)) bad++;
    }
    check(!bad, "e4m3 encode over a sweep of every 4093rd binary32: %d wrong", bad);
}

/* ---- the Hadamard rotation ------------------------------------------------------- */

/* M = H diag(sign) / sqrt(d) built from the library's rows e_i M; checks
   |M_ij| = 1/sqrt(d) with H's sign pattern, M M^T = I, and
   (q M)(k M)^T = q k^T to fp32 rounding for random rows. */
static void test_hadamard(int d, uint64_t seed)
{
    float mul[256], *M = (float *)malloc((size_t)d * d * sizeof(float)), qr[256], kr[256];
    double q[256], k[256], worst_i = 0.0, worst_dot = 0.0;
    int i, j, l, pat = 0, neg = 0, t;
    uint64_t rng = seed * 7 + 1;
    for (j = 0; j < d; j++) mul[j] = fa__hadamard_mul(seed, j, (float)(1.0 / sqrt((double)d)));
    for (i = 0; i < d; i++) { /* row i of M is e_i M: exactly H_ij sign_j / sqrt(d) */
        float *row = M + (size_t)i * d;
        for (j = 0; j < d; j++) row[j] = i == j ? 1.0f : 0.0f;
        fa__hadamard_row(row, d, mul);
        for (j = 0; j < d; j++) {
            int h = 1;
            for (l = i & j; l; l &= l - 1) h = -h; /* H_ij = (-1)^popcount(i & j) */
            pat += row[j] != (float)h * mul[j] || fabs(fabs((double)mul[j]) * sqrt((double)d) - 1.0) > 1e-7;
        }
    }
    for (j = 0; j < d; j++) neg += mul[j] < 0;
    for (i = 0; i < d; i++)
        for (j = 0; j < d; j++) {
            double s = 0.0;
            for (l = 0; l < d; l++) s += (double)M[(size_t)i * d + l] * M[(size_t)j * d + l];
            s -= i == j;
            if (fabs(s) > worst_i) worst_i = fabs(s);
        }
    for (t = 0; t < 20; t++) {
        double dot = 0.0, rdot = 0.0, nq = 0.0, nk = 0.0;
        for (j = 0; j < d; j++) {
            qr[j] = (float)(q[j] = (float)rng_normal(&rng) * (rng_uniform(&rng) < 0.01 ? 30.0 : 1.0));
            kr[j] = (float)(k[j] = (float)rng_normal(&rng));
            dot += q[j] * k[j];
            nq += q[j] * q[j];
            nk += k[j] * k[j];
        }
        fa__hadamard_row(qr, d, mul);
        fa__hadamard_row(kr, d, mul);
        for (j = 0; j < d; j++) rdot += (double)qr[j] * kr[j];
        if (fabs(rdot - dot) / sqrt(nq * nk) > worst_dot) worst_dot = fabs(rdot - dot) / sqrt(nq * nk);
    }
    check(!pat, "hadamard d=%d seed=%llu: %d entries not sign(j) H_ij / sqrt(d)", d, (unsigned long long)seed, pat);
    check(d < 8 || (neg > 0 && neg < d), "hadamard d=%d seed=%llu: signs all alike (%d negative)", d,
          (unsigned long long)seed, neg);
    check(worst_i < 4e-7 * (1 + log2((double)d)), "hadamard d=%d: |M M^T - I| = %.3g", d, worst_i);
    check(worst_dot < 2e-6 * (1 + log2((double)d)), "hadamard d=%d: |(qM)(kM)^T - qk^T| / (|q||k|) = %.3g", d,
          worst_dot);
    free(M);
}

/* ---- fa_quantize ------------------------------------------------------------------- */

typedef struct qcase {
    fa_dtype dt;
    fa_quant_role role;
    int batch, seqlen, heads, d, per_tensor, hadamard, varlen, layout, outliers;
    uint64_t seed, data; /* the Hadamard's signs; the data's RNG */
    const int32_t *cu_from; /* varlen: these offsets (V takes K's), NULL = random lengths */
} qcase;

/* Quantized tensor, its descales, and its dequantized f32 copy. */
typedef struct qres {
    tens x, e, deq;  /* input, e4m3 output, decode(e) * s (packed rows like x) */
    float *descale;  /* count + 8 guard floats each side */
    int64_t count;
    int32_t cu[9];
} qres;

static int row_len(const qcase *c, const qres *r, int b)
{
    return c->varlen ? r->cu[b + 1] - r->cu[b] : c->seqlen;
}

static void q_params(const qcase *c, const qres *r, fa_quant *p)
{
    memset(p, 0, sizeof *p);
    p->role = c->role; p->batch = c->batch; p->seqlen = c->seqlen; p->heads = c->heads; p->head_dim = c->d;
    p->cu_seqlens = c->varlen ? r->cu : NULL;
    p->per_tensor = c->per_tensor; p->hadamard = c->hadamard; p->seed = c->seed;
}

/* Row n of sequence b, head h of the input as f32, rotated as asked. */
static void ref_quant_row(const qcase *c, const qres *r, int b, int h, int n, const float *mul, float *y)
{
    int j;
    for (j = 0; j < c->d; j++)
        y[j] = (float)tens_get(&r->x, c->varlen ? 0 : b, c->varlen ? r->cu[b] + n : n, h, j);
    if (c->hadamard) fa__hadamard_row(y, c->d, mul);
}

/* amax of block k of (b, h): rows past the sequence's end are not there. */
static float ref_block_amax(const qcase *c, const qres *r, int b, int h, int64_t k, const float *mul)
{
    int rows = c->role == FA_QUANT_Q ? FLASHATTN_FP8_BLOCK_Q : FLASHATTN_FP8_BLOCK_K, n, j;
    int n0 = (int)k * rows, n1 = n0 + rows < row_len(c, r, b) ? n0 + rows : row_len(c, r, b);
    float y[256], amax = 0.0f;
    for (n = n0; n < n1; n++) {
        ref_quant_row(c, r, b, h, n, mul, y);
        for (j = 0; j < c->d; j++) amax = fabsf(y[j]) > amax ? fabsf(y[j]) : amax;
    }
    return amax;
}

/* Run fa_quantize on fresh data and check it: each descale = amax / 448 of
   its block's (rotated) rows, exactly (1 past a sequence's end); each code
   = the reference encoding of y * (448 / amax); the decoded value within
   half an e4m3 step of y; padding and the descale array's guards untouched.
   Fills r->deq with decode(code) * s. */
static void run_quantize(const qcase *c, qres *r)
{
    uint64_t rng = c->data * 1000003u + 17;
    int rows = c->role == FA_QUANT_Q ? FLASHATTN_FP8_BLOCK_Q : FLASHATTN_FP8_BLOCK_K;
    int64_t nblk = (c->seqlen + rows - 1) / rows, k, bad_scale = 0, bad_code = 0, bad_rt = 0, total;
    int b, h, n, j;
    float mul[256], y[256], amax_t = 0.0f, s, inv;
    fa_quant p;
    fa_status st;
    memset(r, 0, sizeof *r);
    for (b = 0; b < c->batch; b++)
        r->cu[b + 1] = c->cu_from ? c->cu_from[b + 1] : r->cu[b] + (c->varlen ? rng_int(&rng, 0, c->seqlen) : c->seqlen);
    total = c->varlen ? r->cu[c->batch] : c->seqlen;
    r->x = tens_make(c->dt, c->varlen ? 1 : c->batch, (int)(total ? total : 1), c->heads, c->d, c->layout, &rng);
    r->e = tens_make(FA_E4M3, r->x.nb, r->x.seq, c->heads, c->d, c->layout, &rng);
    r->deq = tens_make(FA_F32, r->x.nb, r->x.seq, c->heads, c->d, LAYOUT_PACKED, &rng);
    if (c->outliers) tens_fill_outliers(&r->x, &rng);
    else tens_fill(&r->x, &rng, 1.0);
    tens_snapshot(&r->e);
    q_params(c, r, &p);
    fa_quantize_descales(&p, &r->count);
    r->descale = (float *)malloc((size_t)(r->count + 16) * sizeof(float));
    for (k = 0; k < r->count + 16; k++) r->descale[k] = NAN;
    st = fa_quantize(&p, r->x.t, r->e.t, r->descale + 8);
    if (!check(st == FA_OK, "fa_quantize seed=%llu: %s", (unsigned long long)c->seed, fa_last_error())) return;
    for (j = 0; j < c->d; j++) mul[j] = fa__hadamard_mul(c->seed, j, (float)(1.0 / sqrt((double)c->d)));
    for (k = 0; k < 8; k++)
        bad_scale += r->descale[k] == r->descale[k] || r->descale[r->count + 8 + k] == r->descale[r->count + 8 + k];
    for (b = 0; b < c->batch; b++)
        for (h = 0; h < c->heads; h++)
            for (k = 0; k < nblk; k++) {
                float a = ref_block_amax(c, r, b, h, k, mul);
                amax_t = a > amax_t ? a : amax_t;
                if (!c->per_tensor) {
                    fa__fp8_scale(a, &s, &inv);
                    bad_scale += r->descale[8 + ((int64_t)b * c->heads + h) * nblk + k] != s;
                }
            }
    fa__fp8_scale(amax_t, &s, &inv);
    if (c->per_tensor) bad_scale += r->descale[8] != s;
    for (b = 0; b < c->batch; b++)
        for (h = 0; h < c->heads; h++)
            for (k = 0; k < nblk; k++) {
                int n0 = (int)k * rows, n1 = n0 + rows < row_len(c, r, b) ? n0 + rows : row_len(c, r, b);
                if (!c->per_tensor) fa__fp8_scale(ref_block_amax(c, r, b, h, k, mul), &s, &inv);
                for (n = n0; n < n1; n++) {
                    int bb = c->varlen ? 0 : b;
                    int64_t row = c->varlen ? r->cu[b] + n : n;
                    ref_quant_row(c, r, b, h, n, mul, y);
                    for (j = 0; j < c->d; j++) {
                        int code = ((uint8_t *)r->e.buf)[tens_index(&r->e, bb, row, h, j)];
                        double a = (double)(y[j] * inv), step, dq = (double)(fa__e4m3_to_f32((uint8_t)code) * s);
                        int e;
                        frexp(fabs(a), &e);
                        step = fabs(a) < 0.015625 ? ldexp(1.0, -9) : ldexp(1.0, e - 4);
                        bad_code += code != ref_e4m3_encode(a);
                        bad_rt += !(fabs(dq - y[j]) <= s * step / 2 * 1.001 + fabs(y[j]) * 1e-6);
                        ((float *)r->deq.buf)[tens_index(&r->deq, bb, row, h, j)] = (float)dq;
                    }
                }
            }
    bad_code += tens_padding_changed(&r->e);
    check(!bad_scale, "fa_quantize seed=%llu %s role %d per_tensor=%d hadamard=%d varlen=%d: %lld descales wrong",
          (unsigned long long)c->seed, dt_name(c->dt), (int)c->role, c->per_tensor, c->hadamard, c->varlen,
          (long long)bad_scale);
    check(!bad_code, "fa_quantize seed=%llu %s role %d per_tensor=%d hadamard=%d varlen=%d: %lld codes wrong",
          (unsigned long long)c->seed, dt_name(c->dt), (int)c->role, c->per_tensor, c->hadamard, c->varlen,
          (long long)bad_code);
    check(!bad_rt, "fa_quantize seed=%llu: %lld values off by more than half an e4m3 step",
          (unsigned long long)c->seed, (long long)bad_rt);
}

static void qres_free(qres *r)
{
    tens_free(&r->x); tens_free(&r->e); tens_free(&r->deq);
    free(r->descale);
}

static qcase qc(fa_dtype dt, fa_quant_role role, int batch, int seqlen, int heads, int d, int per_tensor,
                int hadamard, int varlen, uint64_t seed, uint64_t data)
{
    qcase c;
    memset(&c, 0, sizeof c);
    c.dt = dt; c.role = role; c.batch = batch; c.seqlen = seqlen; c.heads = heads; c.d = d;
    c.per_tensor = per_tensor; c.hadamard = hadamard; c.varlen = varlen; c.layout = LAYOUT_MIXED;
    c.outliers = 1; c.seed = seed; c.data = data;
    return c;
}

static void test_quantize(void)
{
    static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    static const int dims[4] = {64, 128, 40, 16};
    int i;
    for (i = 0; i < 24; i++) {
        int d = dims[i % 4], had = d != 40 && (i / 4) % 2 == 0;
        fa_quant_role role = (fa_quant_role)(had ? i % 2 : i % 3);
        qcase c = qc(dts[i % 3], role, 1 + i % 3, 1 + (i * 37) % 300, 1 + i % 2, d, (i / 2) % 3 == 0, had,
                     i % 5 == 2, 100 + (uint64_t)i, 200 + (uint64_t)i);
        qres r;
        run_quantize(&c, &r);
        qres_free(&r);
    }
    { /* an all-zero block gets descale 1 and codes 0 */
        qcase c = qc(FA_F32, FA_QUANT_K, 1, 3, 1, 8, 0, 0, 0, 1, 1);
        qres r;
        float zero[24] = {0};
        fa_quant p;
        int64_t k;
        memset(&r, 0, sizeof r);
        q_params(&c, &r, &p);
        r.x = tens_make(FA_F32, 1, 3, 1, 8, LAYOUT_PACKED, &c.data);
        memcpy(r.x.buf, zero, sizeof zero);
        r.e = tens_make(FA_E4M3, 1, 3, 1, 8, LAYOUT_PACKED, &c.data);
        r.descale = (float *)malloc(sizeof(float));
        r.descale[0] = NAN;
        check(fa_quantize(&p, r.x.t, r.e.t, r.descale) == FA_OK && r.descale[0] == 1.0f,
              "fa_quantize: an all-zero block's descale is %g, want 1", r.descale[0]);
        for (k = 0; k < 24 && ((uint8_t *)r.e.buf)[k] == 0; k++) {}
        check(k == 24, "fa_quantize: an all-zero block's codes are not all 0");
        qres_free(&r);
    }
}

/* ---- fa_forward with e4m3 ------------------------------------------------------------ */

typedef struct fcase {
    int batch, sq, sk, hq, hkv, d, causal, window, varlen, per_tensor, hadamard;
    fa_dtype in_dt, out_dt;
    uint64_t seed;
} fcase;

/* Quantize Q, K, V with fa_quantize, run fa_forward on the e4m3 tensors,
   compare O and L with the fp64 reference on the dequantized inputs. */
static void test_forward(const fcase *f)
{
    qcase cq = qc(f->in_dt, FA_QUANT_Q, f->batch, f->sq, f->hq, f->d, f->per_tensor, f->hadamard, f->varlen,
                  f->seed, f->seed * 3 + 1);
    qcase ck = qc(f->in_dt, FA_QUANT_K, f->batch, f->sk, f->hkv, f->d, f->per_tensor, f->hadamard, f->varlen,
                  f->seed, f->seed * 3 + 2);
    qcase cv = qc(f->in_dt, FA_QUANT_V, f->batch, f->sk, f->hkv, f->d, f->per_tensor, 0, f->varlen, f->seed,
                  f->seed * 3 + 3);
    qres rq, rk, rv;
    fa_problem p;
    tens o;
    float *lse;
    double *oref, *lref;
    int64_t nl, i, bad;
    uint64_t rng = f->seed;
    char ctx[200];
    fa_status st;
    cq.outliers = ck.outliers = cv.outliers = 0;
    run_quantize(&cq, &rq);
    run_quantize(&ck, &rk);
    cv.cu_from = rk.cu;
    run_quantize(&cv, &rv);
    memset(&p, 0, sizeof p);
    p.batch = f->batch; p.seqlen_q = f->sq; p.seqlen_k = f->sk; p.heads_q = f->hq; p.heads_kv = f->hkv;
    p.head_dim = f->d; p.causal = f->causal;
    if (f->window) { p.sliding_window = 1; p.window_left = f->window; p.window_right = f->window / 3; }
    if (f->varlen) { p.cu_seqlens_q = rq.cu; p.cu_seqlens_k = rk.cu; }
    o = tens_make(f->out_dt, rq.x.nb, rq.x.seq, f->hq, f->d, LAYOUT_MIXED, &rng);
    tens_snapshot(&o);
    nl = ref_lse_count(&p);
    lse = (float *)malloc((size_t)(nl + 1) * sizeof(float));
    for (i = 0; i <= nl; i++) lse[i] = NAN;
    oref = (double *)calloc((size_t)rq.x.nb * rq.x.seq * f->hq * f->d, sizeof(double));
    lref = (double *)calloc((size_t)nl + 1, sizeof(double));
    ref_forward(&p, rq.deq.t, rk.deq.t, rv.deq.t, oref, lref);
    if (f->per_tensor) {
        p.descale_q = rq.descale[8]; p.descale_k = rk.descale[8]; p.descale_v = rv.descale[8];
    } else {
        p.descale_q_block = rq.descale + 8; p.descale_k_block = rk.descale + 8; p.descale_v_block = rv.descale + 8;
    }
    snprintf(ctx, sizeof ctx,
             "fp8 fwd seed=%llu b%d sq%d sk%d hq%d hkv%d d%d causal=%d window=%d varlen=%d %s had=%d %s->%s",
             (unsigned long long)f->seed, f->batch, f->sq, f->sk, f->hq, f->hkv, f->d, f->causal, f->window,
             f->varlen, f->per_tensor ? "per-tensor" : "per-block", f->hadamard, dt_name(f->in_dt),
             dt_name(f->out_dt));
    st = fa_forward(&p, rq.e.t, rk.e.t, rv.e.t, o.t, lse, NULL, 0);
    if (check(st == FA_OK, "%s: %s", ctx, fa_last_error())) {
        bad = compare(ctx, "o", &o, oref, tol_out(f->out_dt));
        check(!bad, "%s: o", ctx);
        tol tl;
        tl.atol = 1e-4; tl.rtol = 1e-5;
        bad = compare_lse(ctx, lse, lref, nl, tl) + (lse[nl] == lse[nl]);
        check(!bad, "%s: lse", ctx);
    }
    qres_free(&rq); qres_free(&rk); qres_free(&rv);
    tens_free(&o);
    free(lse); free(oref); free(lref);
}

/* ---- bad input --------------------------------------------------------------------- */

/* A message names the argument: `want` appears in it, any case. */
static int names(const char *msg, const char *want)
{
    size_t i, j, n = strlen(want);
    for (i = 0; msg[i]; i++) {
        for (j = 0; j < n && msg[i + j] && tolower((unsigned char)msg[i + j]) == tolower((unsigned char)want[j]); j++) {}
        if (j == n) return 1;
    }
    return 0;
}

/* Every case breaks one argument of a valid call: the status, the named
   argument, and output buffers byte-identical to before. */
static void test_bad_input(void)
{
    enum { B = 2, S = 9, H = 2, D = 16 };
    uint8_t q8[B * S * H * D], k8[B * S * H * D], v8[B * S * H * D], out8[B * S * H * D + 8], snap8[sizeof out8];
    float o[B * S * H * D + 8], osnap[sizeof o / sizeof o[0]], lse[B * H * S + 4], lsnap[sizeof lse / sizeof lse[0]];
    float x[B * S * H * D], blk[B * H * 4], ds[B * H * 4 + 4], dsnap[sizeof ds / sizeof ds[0]];
    int32_t cu[B + 1] = {0, 5, 12};
    fa_problem p;
    fa_tensor tq, tk, tv, to, tx, te;
    fa_quant qp;
    int i, c;
    uint64_t rng = 5;
    memset(q8, 0x38, sizeof q8); memset(k8, 0x30, sizeof k8); memset(v8, 0x41, sizeof v8);
    for (i = 0; i < (int)(sizeof x / sizeof x[0]); i++) x[i] = (float)rng_normal(&rng);
    for (i = 0; i < (int)(sizeof blk / sizeof blk[0]); i++) blk[i] = 0.5f;
    for (c = 0; c < 2; c++) { /* 0: fa_forward cases, 1: fa_quantize cases */
        int k, ncase = c == 0 ? 14 : 13;
        for (k = -1; k < ncase; k++) { /* k = -1: the valid call */
            fa_status want = FA_ERROR_INVALID_ARGUMENT, st;
            const char *field = "";
            memset(&p, 0, sizeof p);
            p.batch = B; p.seqlen_q = S; p.seqlen_k = S; p.heads_q = H; p.head_dim = D;
            memset(&tq, 0, sizeof tq);
            tk = tv = to = tx = te = tq;
            tq.data = q8; tk.data = k8; tv.data = v8; to.data = o;
            tq.dtype = tk.dtype = tv.dtype = FA_E4M3; to.dtype = FA_F32;
            tx.data = x; te.data = out8; te.dtype = FA_E4M3;
            memset(&qp, 0, sizeof qp);
            qp.role = FA_QUANT_K; qp.batch = B; qp.seqlen = S; qp.heads = H; qp.head_dim = D; qp.hadamard = 1;
            if (c == 0) switch (k) {
            case 0: tk.dtype = FA_F16; field = "k.dtype"; break;
            case 1: tq.dtype = FA_BF16; field = "dtype"; break;
            case 2: to.dtype = FA_E4M3; want = FA_ERROR_UNSUPPORTED; field = "o.dtype"; break;
            case 3: p.descale_q_block = blk; p.descale_q = 2.0f; field = "descale_q"; break;
            case 4: p.descale_v_block = blk; p.descale_v = 1.0f; field = "descale_v"; break;
            case 5: p.descale_k_block = blk; tq.dtype = tk.dtype = tv.dtype = FA_F32; field = "descale_k_block"; break;
            case 6: p.descale_k_block = blk; blk[3] = NAN; field = "descale_k_block[3]"; break;
            case 7: p.descale_v_block = blk; blk[B * H * 1 - 1] = INFINITY; field = "descale_v_block"; break;
            case 8: p.descale_q = NAN; field = "descale"; break;
            case 9: tq.dtype = tk.dtype = tv.dtype = to.dtype = FA_E4M3; want = FA_ERROR_UNSUPPORTED; field = "o.dtype"; break;
            case 10: p.descale_q_block = blk; p.descale_k_block = blk; p.descale_k = -1.0f; field = "descale_k"; break;
            case 11: tv.dtype = FA_F32; field = "v.dtype"; break;
            case 12: p.descale_v = -0.5f; field = "descale_v"; break; /* descales are >= 0 */
            case 13: p.descale_q_block = blk; blk[1] = -1.0f; field = "descale_q_block[1]"; break;
            }
            else switch (k) {
            case 0: qp.role = FA_QUANT_V; field = "hadamard"; break;
            case 1: qp.head_dim = 12; tx.head_stride = te.head_stride = D; field = "head_dim"; break;
            case 2: tx.dtype = FA_E4M3; field = "x.dtype"; break;
            case 3: te.dtype = FA_F16; field = "out.dtype"; break;
            case 4: qp.batch = 0; field = "batch"; break;
            case 5: qp.head_dim = 300; field = "head_dim"; break;
            case 6: qp.role = (fa_quant_role)7; field = "role"; break;
            case 7: qp.cu_seqlens = cu; cu[1] = 11; field = "cu_seqlens"; break; /* a length over seqlen */
            case 8: qp.cu_seqlens = cu; cu[0] = 1; field = "cu_seqlens"; break;
            case 9: tx.data = NULL; field = "x.data"; break;
            case 10: te.head_stride = 3; field = "out"; break;
            case 11: qp.seqlen = 0; field = "seqlen"; break;
            case 12: field = "descale"; break; /* NULL below */
            }
            for (i = 0; i < (int)(sizeof o / sizeof o[0]); i++) o[i] = osnap[i] = NAN;
            for (i = 0; i < (int)(sizeof lse / sizeof lse[0]); i++) lse[i] = lsnap[i] = NAN;
            for (i = 0; i < (int)(sizeof ds / sizeof ds[0]); i++) ds[i] = dsnap[i] = NAN;
            memset(out8, 0x7f, sizeof out8);
            memcpy(snap8, out8, sizeof out8);
            st = c == 0 ? fa_forward(&p, tq, tk, tv, to, lse, NULL, 0)
                        : fa_quantize(&qp, tx, te, k == 12 ? NULL : ds);
            if (k < 0) {
                check(st == FA_OK, "fp8 bad-input baseline %s: %s", c ? "fa_quantize" : "fa_forward", fa_last_error());
            } else {
                check(st == want && names(fa_last_error(), field) && !memcmp(out8, snap8, sizeof out8) &&
                          !memcmp(o, osnap, 0) && !memcmp(ds, dsnap, 0),
                      "fp8 bad input %s case %d: status %d (want %d), message \"%s\" should name %s, outputs unchanged",
                      c ? "fa_quantize" : "fa_forward", k, (int)st, (int)want, fa_last_error(), field);
                for (i = 0; i < (int)(sizeof o / sizeof o[0]); i++) if (o[i] == o[i]) break;
                check(i == (int)(sizeof o / sizeof o[0]), "fp8 bad input fa_forward case %d wrote o", k);
                for (i = 0; i < (int)(sizeof ds / sizeof ds[0]); i++) if (ds[i] == ds[i]) break;
                check(i == (int)(sizeof ds / sizeof ds[0]), "fp8 bad input fa_quantize case %d wrote descale", k);
                for (i = 0; i < (int)(sizeof lse / sizeof lse[0]); i++) if (lse[i] == lse[i]) break;
                check(i == (int)(sizeof lse / sizeof lse[0]), "fp8 bad input case %d wrote lse", k);
            }
            cu[0] = 0; cu[1] = 5;
            blk[3] = 0.5f; blk[B * H - 1] = 0.5f;
        }
    }
    { /* the CPU backward and decode refuse e4m3 */
        float g[B * S * H * D];
        fa_tensor tg, none;
        memset(&tg, 0, sizeof tg);
        none = tg;
        tg.data = g;
        memset(&p, 0, sizeof p);
        p.batch = B; p.seqlen_q = S; p.seqlen_k = S; p.heads_q = H; p.head_dim = D;
        check(fa_backward(&p, tq, tk, tv, to, tg, lse, tg, tg, tg, NULL, 0) == FA_ERROR_UNSUPPORTED &&
                  names(fa_last_error(), "FA_E4M3"),
              "fa_backward with e4m3: want FA_ERROR_UNSUPPORTED naming FA_E4M3, got \"%s\"", fa_last_error());
        p.seqlen_q = 1;
        check(fa_decode(&p, tq, tk, tv, none, none, to, lse, NULL, 0) != FA_OK && names(fa_last_error(), "FA_E4M3"),
              "fa_decode with e4m3: want a refusal naming FA_E4M3, got \"%s\"", fa_last_error());
    }
}

int main(int argc, char **argv)
{
    static const fa_dtype outs[3] = {FA_F32, FA_F16, FA_BF16};
    int quick = argc > 1 && !strcmp(argv[1], "--quick"), i;
    int had_d[7] = {1, 2, 4, 16, 64, 128, 256};
    test_conversions();
    for (i = 0; i < 7; i++) test_hadamard(had_d[i], 11 + (uint64_t)i);
    test_hadamard(128, 12345);
    test_quantize();
    for (i = 0; i < (quick ? 6 : 18); i++) {
        fcase f;
        memset(&f, 0, sizeof f);
        f.seed = 1000 + (uint64_t)i;
        f.batch = 1 + i % 3;
        f.sq = i % 6 == 5 ? 1 + i % 4 : 1 + (i * 53) % 290; /* a few query rows too (decode-like tiles) */
        f.sk = 1 + (i * 71) % 310;
        f.hkv = 1 + i % 2;
        f.hq = f.hkv * (1 + (i / 2) % 3);                    /* GQA / MQA */
        f.d = i % 4 == 3 ? 40 : i % 2 ? 128 : 64;
        f.causal = i % 3 == 1;
        f.window = i % 5 == 3 ? 37 : 0;
        f.varlen = i % 4 == 2;
        f.per_tensor = i % 3 == 0;
        f.hadamard = f.d != 40 && i % 2 == 0;
        f.in_dt = outs[i % 3];
        f.out_dt = outs[(i / 3) % 3];
        test_forward(&f);
    }
    test_bad_input();
    return summary("test_fp8");
}
