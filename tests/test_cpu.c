/* tests/test_cpu.c - the CPU implementation against the fp64 reference.

   Build: cc -O2 -fopenmp tests/test_cpu.c -lm -lpthread   (see the Makefile)
   Run:   build/test_cpu [--quick]     (--quick or FA_TEST_QUICK=1: small sizes only;
                                        FA_TEST_QUICK=2, make test's sanitizer run: also
                                        one dtype per head dim and per feature, in turn)

   Every case draws fresh random inputs from its own seed (printed on failure),
   poisons outputs with NaN before the call (so an element never written shows
   up), fills padding and unused cache slots with NaN (so reading them shows
   up), and compares with tests/reference.h element by element:
   |got - ref| <= atol + rtol * |ref|, tolerances per dtype.

   Sections: conversions, Philox, resolve, forward grid, backward grid,
   finite differences, fully masked rows, block masks, decode, merge,
   determinism across thread counts, NaN/Inf inputs. */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "test_util.h"

#include <pthread.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int QUICK = 0;

/* ---- tolerances per dtype ------------------------------------------------------ */
/* Forward: fp32 arithmetic on inputs that are exact in fp64, so the error is
   the fp32 accumulation plus, for 16-bit types, the rounding of O on output
   and of P as the operand of P.V (half an ulp of the type each). */
static tol tol_out(fa_dtype d)
{
    tol t;
    if (d == FA_F32) { t.atol = 1e-5; t.rtol = 5e-5; }
    else if (d == FA_F16) { t.atol = 1.5e-3; t.rtol = 1.5e-3; }
    else { t.atol = 8e-3; t.rtol = 8e-3; }
    return t;
}
static tol tol_lse(fa_dtype d)
{
    tol t;
    t.atol = d == FA_F32 ? 1e-4 : 1e-3;
    t.rtol = 1e-5;
    return t;
}
/* Backward: errors grow with the size of the gradient, so atol is scaled by
   the RMS of the reference tensor, floored at 0.05: with one visible key per
   row the exact gradient dQ = dK = 0, and what is left is the cancellation
   error of dP - D with D = rowsum(dO * O), O being the forward's stored
   output (for 16-bit types, rounded), of the order of the inputs times eps.
   Outlier inputs (FA3's N(0,100) * Bernoulli(0.001)) make O and dP large
   next to dQ, so those cases get 4x the tolerance (`loose`). */
static tol tol_grad(fa_dtype d, double ref_rms, int loose)
{
    tol t;
    double s = ref_rms > 0.05 ? ref_rms : 0.05;
    if (d == FA_F32) { t.atol = 4e-4 * s; t.rtol = 1e-3; }
    else if (d == FA_F16) { t.atol = 1.5e-2 * s; t.rtol = 1e-2; }
    else { t.atol = 1.2e-1 * s; t.rtol = 6e-2; }
    if (loose) { t.atol *= 4; t.rtol *= 4; }
    return t;
}

/* ---- workspace with a canary tail ------------------------------------------------ */

#define WS_CANARY 64
typedef struct wspace { unsigned char *base, *buf; size_t bytes; } wspace;

/* use = 0: no workspace (the call allocates); else exactly the size asked for. */
static wspace ws_make(fa_status (*size_fn)(const fa_problem *, size_t *), const fa_problem *p, int use)
{
    wspace w;
    w.base = w.buf = NULL; w.bytes = 0;
    if (!use) return w;
    if (size_fn(p, &w.bytes) != FA_OK) { check(0, "workspace_size failed: %s", fa_last_error()); return w; }
    w.base = (unsigned char *)malloc(w.bytes + WS_CANARY + 8);
    /* use = 2: an odd address (the API takes any void *) */
    w.buf = w.base + (use == 2 ? 3 : 0);
    memset(w.buf, 0xA5, w.bytes + WS_CANARY);
    return w;
}
static int ws_canary_ok(const wspace *w)
{
    size_t i;
    if (!w->buf) return 1;
    for (i = 0; i < WS_CANARY; i++) if (w->buf[w->bytes + i] != 0xA5) return 0;
    return 1;
}

/* ==========================================================================
   >>conversions  f16 / bf16 <-> f32 (internal functions, tested directly)
   ========================================================================== */
#ifndef FA_T_F16_TO_F32
#define FA_T_F16_TO_F32 fa__f16_to_f32
#define FA_T_F32_TO_F16 fa__f32_to_f16
#define FA_T_BF16_TO_F32 fa__bf16_to_f32
#define FA_T_F32_TO_BF16 fa__f32_to_bf16
#endif

static int same_float(float a, float b)
{
    if (a != a) return b != b;
    return ref_f32_bits(a) == ref_f32_bits(b);
}
static int is_f16_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu); }
static int is_bf16_nan(uint16_t h) { return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu); }

static void test_conversions(void)
{
    uint32_t i;
    int64_t bad16 = 0, badb = 0, bad_rt16 = 0, bad_rtb = 0;
    uint64_t rng = 0xC0FFEE;
    int64_t badr16 = 0, badrb = 0, n;
    /* exhaustive: every 16-bit pattern widens exactly and narrows back */
    for (i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = FA_T_F16_TO_F32(h), g = FA_T_BF16_TO_F32(h);
        if (!same_float(f, ref_f16_to_f32(h))) { if (bad16 < 3) printf("  f16 %04x -> %g want %g\n", h, f, ref_f16_to_f32(h)); bad16++; }
        if (!same_float(g, ref_bf16_to_f32(h))) { if (badb < 3) printf("  bf16 %04x -> %g want %g\n", h, g, ref_bf16_to_f32(h)); badb++; }
        if (is_f16_nan(h) ? !is_f16_nan(FA_T_F32_TO_F16(f)) : FA_T_F32_TO_F16(f) != h) {
            if (bad_rt16 < 3) printf("  f16 round trip %04x -> %04x\n", h, FA_T_F32_TO_F16(f));
            bad_rt16++;
        }
        if (is_bf16_nan(h) ? !is_bf16_nan(FA_T_F32_TO_BF16(g)) : FA_T_F32_TO_BF16(g) != h) {
            if (bad_rtb < 3) printf("  bf16 round trip %04x -> %04x\n", h, FA_T_F32_TO_BF16(g));
            bad_rtb++;
        }
    }
    check(bad16 == 0, "f16 -> f32 exhaustive: %lld wrong", (long long)bad16);
    check(badb == 0, "bf16 -> f32 exhaustive: %lld wrong", (long long)badb);
    check(bad_rt16 == 0, "f16 -> f32 -> f16 round trip exhaustive: %lld wrong", (long long)bad_rt16);
    check(bad_rtb == 0, "bf16 -> f32 -> bf16 round trip exhaustive: %lld wrong", (long long)bad_rtb);

    /* fa__load_row, which widens f16 with F16C (8 at a time) or NEON (4) where
       it can, then a scalar tail: every pattern, times a scale, must give the
       bits of the scalar widening times it. From an odd start: unaligned
       vector loads, and 65533 values leave a tail for either width. */
    {
        static uint16_t hs[65536];
        static float got[65536];
        const float muls[2] = {1.0f, 0.0883883476f};
        int64_t bad_load = 0;
        int m, dt;
        for (i = 0; i < 65536; i++) hs[i] = (uint16_t)i;
        for (dt = 0; dt < 2; dt++)
            for (m = 0; m < 2; m++) {
                fa_dtype t = dt ? FA_BF16 : FA_F16;
                fa__load_row(hs + 1, t, 65533, muls[m], got);
                for (i = 0; i < 65533; i++) {
                    float want = (dt ? ref_bf16_to_f32(hs[i + 1]) : ref_f16_to_f32(hs[i + 1])) * muls[m];
                    if (!same_float(got[i], want)) {
                        if (bad_load < 3) printf("  load_row %s %04x * %g -> %g want %g\n", dt ? "bf16" : "f16", hs[i + 1], muls[m], got[i], want);
                        bad_load++;
                    }
                }
            }
        check(bad_load == 0, "fa__load_row f16 / bf16 exhaustive (vector loads and tail, times a scale): %lld wrong", (long long)bad_load);
    }

    /* random f32 bit patterns (all exponents: subnormals, overflow, inf, NaN),
       values near the f16 range, and exact ties between neighbours */
    n = QUICK ? 200000 : 2000000;
    for (i = 0; i < (uint32_t)n; i++) {
        uint32_t u = (uint32_t)rng_next(&rng);
        float f;
        uint16_t want16, wantb, got16, gotb;
        int kind = (int)(i % 5);
        if (kind == 1) /* exponents around the f16 range: 2^-26 .. 2^17 */
            u = (u & 0x807FFFFFu) | ((uint32_t)(101 + (u >> 23) % 44) << 23);
        else if (kind == 2) { /* the exact midpoint of two neighbouring f16 values */
            uint16_t h = (uint16_t)(u & 0x7BFEu);
            double a = ref_f16_to_f32(h), b = ref_f16_to_f32((uint16_t)(h + 1));
            f = (float)((a + b) / 2);
            if (u & 0x80000000u) f = -f;
            u = ref_f32_bits(f);
        } else if (kind == 3) { /* the exact midpoint of two neighbouring bf16 values */
            u = (u & 0xFFFF0000u) | 0x8000u;
        } else if (kind == 4) /* f32 subnormals and tiny normals */
            u &= 0x80FFFFFFu;
        f = ref_bits_f32(u);
        want16 = ref_f32_to_f16(f); wantb = ref_f32_to_bf16(f);
        got16 = FA_T_F32_TO_F16(f); gotb = FA_T_F32_TO_BF16(f);
        if (f != f ? !is_f16_nan(got16) || (got16 & 0x8000u) != (want16 & 0x8000u) : got16 != want16) {
            if (badr16 < 4) printf("  f32 %08x (%.9g) -> f16 %04x, want %04x\n", u, f, got16, want16);
            badr16++;
        }
        if (f != f ? !is_bf16_nan(gotb) || (gotb & 0x8000u) != (wantb & 0x8000u) : gotb != wantb) {
            if (badrb < 4) printf("  f32 %08x (%.9g) -> bf16 %04x, want %04x\n", u, f, gotb, wantb);
            badrb++;
        }
    }
    check(badr16 == 0, "f32 -> f16 RNE on %lld random values (ties, subnormals, overflow, NaN): %lld wrong", (long long)n, (long long)badr16);
    check(badrb == 0, "f32 -> bf16 RNE on %lld random values (ties, subnormals, overflow, NaN): %lld wrong", (long long)n, (long long)badrb);
    /* a few by hand: ties go to even, overflow goes to inf */
    check(FA_T_F32_TO_F16(65520.0f) == 0x7C00u && FA_T_F32_TO_F16(65519.996f) == 0x7BFFu &&
          FA_T_F32_TO_F16(-65536.0f) == 0xFC00u, "f32 -> f16 overflow boundary");
    check(FA_T_F32_TO_F16(1.0f + 1.0f / 2048.0f) == 0x3C00u && FA_T_F32_TO_F16(1.0f + 3.0f / 2048.0f) == 0x3C02u,
          "f32 -> f16 ties to even at 1.0");
    check(FA_T_F32_TO_F16(ldexpf(1.0f, -25)) == 0x0000u && FA_T_F32_TO_F16(ldexpf(3.0f, -25)) == 0x0002u &&
          FA_T_F32_TO_F16(ldexpf(1.0f, -24)) == 0x0001u, "f32 -> f16 subnormal ties");
    check(FA_T_F32_TO_BF16(ref_bits_f32(0x3F808000u)) == 0x3F80u && FA_T_F32_TO_BF16(ref_bits_f32(0x3F818000u)) == 0x3F82u &&
          FA_T_F32_TO_BF16(ref_bits_f32(0x7F7FFFFFu)) == 0x7F80u, "f32 -> bf16 ties to even, overflow to inf");
}

/* fa__exp2_row, the softmax's exponential: s <- exp2(s - base) scale against
   exp2 in fp64, for integral bases (the vector loop: 2^k in the exponent bits,
   2^f a polynomial) and for others (the scalar loop), with underflow past
   2^-127, -inf (exactly 0: masked scores), NaN, a vector tail and a scale. */
static void test_exp2_row(void)
{
    static const float bases[8] = {0.0f, 5.0f, -3.0f, 137.0f, 4194303.0f, 4194304.0f, 1.0e7f, 2.5f};
    static const float scales[2] = {1.0f, 1.7f};
    uint64_t rng = 0x5eed0e2ull;
    long long bad = 0, bad_zero = 0, bad_nan = 0, bad_sum = 0, n_checked = 0;
    int b, sc, j, rep;
    for (b = 0; b < 8; b++)
        for (sc = 0; sc < 2; sc++)
            for (rep = 0; rep < 40; rep++) {
                float s[67], in[67], sum;
                double want_sum = 0.0;
                for (j = 0; j < 67; j++) {
                    double u = rep % 2 ? 140.0 * rng_uniform(&rng) : 8.0 * rng_uniform(&rng);
                    in[j] = j == 0 ? bases[b] : (float)((double)bases[b] - u);
                }
                in[5] = -INFINITY;
                in[6] = bases[b] - 127.0f;
                if (rep == 3) in[9] = NAN;
                memcpy(s, in, sizeof s);
                sum = fa__exp2_row(s, 67, bases[b], scales[sc]);
                for (j = 0; j < 67; j++) {
                    double x = (double)in[j] - (double)bases[b], want = exp2(x) * scales[sc];
                    n_checked++;
                    if (in[j] != in[j]) { bad_nan += s[j] == s[j]; continue; }
                    want_sum += want;
                    if (in[j] == -INFINITY) bad_zero += s[j] != 0.0f;
                    else if (want < 0x1p-125) bad += !(fabs((double)s[j]) <= 0x1p-125);
                    else bad += !(fabs((double)s[j] - want) <= (4e-7 + 6e-8 * fabs(x)) * want);
                }
                if (rep != 3) bad_sum += !(fabs((double)sum - want_sum) <= 1e-5 * want_sum + 1e-30);
            }
    check(bad == 0 && bad_zero == 0 && bad_nan == 0 && bad_sum == 0,
          "fa__exp2_row on %lld values (integral bases up to 2^22 and beyond, other bases, scale): "
          "%lld off by more than a few ulp, %lld -inf not 0, %lld NaN lost, %lld sums wrong",
          n_checked, bad, bad_zero, bad_nan, bad_sum);
}

/* Philox-4x32-10 known-answer vectors (Random123's published kat_vectors):
   this checks our reference generator, which the dropout tests rely on. */
static void test_philox(void)
{
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0}, {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    int t;
    for (t = 0; t < 3; t++) {
        uint32_t out[4];
        ref_philox4x32_10(ctr[t], key[t], out);
        check(!memcmp(out, want[t], sizeof out), "reference Philox-4x32-10 KAT %d: %08x %08x %08x %08x", t,
              out[0], out[1], out[2], out[3]);
    }
    { /* the keep rate is 1 - p */
        fa_problem p;
        int i, j, kept = 0;
        memset(&p, 0, sizeof p);
        p.heads_q = 1; p.dropout_p = 0.3f; p.dropout_seed = 0x123456789ull; p.dropout_offset = 77;
        for (i = 0; i < 200; i++) for (j = 0; j < 200; j++) kept += ref_dropout_keep(&p, 0, 0, i, j);
        check(fabs(kept / 40000.0 - 0.7) < 0.01, "reference dropout keep rate %.4f, want 0.7", kept / 40000.0);
    }
}

static void test_resolve(void)
{
    fa_problem p, r;
    memset(&p, 0, sizeof p);
    memset(&r, 0xFF, sizeof r);
    p.batch = 2; p.seqlen_q = 5; p.seqlen_k = 9; p.heads_q = 6; p.head_dim = 80;
    check(fa_problem_resolve(&p, &r) == FA_OK, "fa_problem_resolve on a plain problem: %s", fa_last_error());
    check(r.heads_kv == 6 && r.head_dim_v == 80, "resolve: heads_kv %d (want 6), head_dim_v %d (want 80)", r.heads_kv, r.head_dim_v);
    check(fabs(r.scale - 1.0 / sqrt(80.0)) < 1e-7, "resolve: scale %.9g, want 1/sqrt(80)", r.scale);
    check(r.descale_q == 1.0f && r.descale_k == 1.0f && r.descale_v == 1.0f, "resolve: descale %g %g %g, want 1",
          r.descale_q, r.descale_k, r.descale_v);
    check(r.batch == 2 && r.seqlen_q == 5 && r.seqlen_k == 9 && r.heads_q == 6 && r.head_dim == 80,
          "resolve keeps the given fields");
    p.heads_kv = 2; p.head_dim_v = 3; p.scale = 0.5f;
    check(fa_problem_resolve(&p, &r) == FA_OK && r.heads_kv == 2 && r.head_dim_v == 3 && r.scale == 0.5f,
          "resolve keeps non-default heads_kv / head_dim_v / scale");
    p.sliding_window = 1; p.window_left = INT_MAX; p.window_right = 7;
    check(fa_problem_resolve(&p, &r) == FA_OK && r.window_left == 14 && r.window_right == 7,
          "resolve: window (INT_MAX, 7) -> (%d, %d), want (14, 7)", r.window_left, r.window_right);
}

/* ==========================================================================
   >>attention  forward and backward cases
   ========================================================================== */

typedef struct fcase {
    int batch, sq, sk, hq, hkv, d, dv; /* hkv, dv: 0 = default */
    fa_dtype dt;
    int causal, window, wl, wr;
    float softcap, scale;
    int alibi, varlen, seqlens_k;
    float dropout;
    int layout, backward, outliers;
    /* block mask (section 5): density of visited blocks (0 = none), block
       sizes and mask batch / heads as in fa_block_mask (0 = defaults),
       full: move blocks that causal / window cut nowhere to the full list */
    double bm_density;
    int bq, bk, bm_batch, bm_heads, bm_full;
} fcase;

static void fcase_str(const fcase *c, uint64_t seed, char *buf, size_t n)
{
    snprintf(buf, n, "seed=%llu b=%d sq=%d sk=%d hq=%d hkv=%d d=%d dv=%d %s%s%s%s%s%s%s%s%s%s layout=%d",
             (unsigned long long)seed, c->batch, c->sq, c->sk, c->hq, c->hkv, c->d, c->dv, dt_name(c->dt),
             c->causal ? " causal" : "", c->window ? " window" : "", c->softcap > 0 ? " softcap" : "",
             c->alibi ? " alibi" : "", c->varlen ? " varlen" : "", c->seqlens_k ? " seqlens_k" : "",
             c->dropout > 0 ? " dropout" : "", c->scale != 0 ? " scale" : "", c->outliers ? " outliers" : "",
             c->layout);
    if (c->window) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, " wl=%d wr=%d", c->wl, c->wr);
    }
    if (c->bm_density > 0) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, " block_mask %.0f%% bq=%d bk=%d batch=%d heads=%d%s", 100 * c->bm_density, c->bq,
                 c->bk, c->bm_batch, c->bm_heads, c->bm_full ? " full" : "");
    }
}

/* Inputs of one attention problem, drawn from the seed. */
typedef struct attn {
    fa_problem p;
    int32_t cu_q[65], cu_k[65], used_k[64];
    float slopes[64];
    tens q, k, v;
    int hkv, dv;
    int32_t *bm_lists[4]; /* kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices */
} attn;

static void bm_make(attn *a, const fcase *c, uint64_t *rng);

static void attn_make(attn *a, const fcase *c, uint64_t *rng)
{
    int b, hkv = c->hkv ? c->hkv : c->hq, dv = c->dv ? c->dv : c->d;
    int nbq = c->batch, nbk = c->batch, rq = c->sq, rk = c->sk;
    memset(a, 0, sizeof *a);
    a->hkv = hkv; a->dv = dv;
    a->p.batch = c->batch; a->p.seqlen_q = c->sq; a->p.seqlen_k = c->sk;
    a->p.heads_q = c->hq; a->p.heads_kv = c->hkv; a->p.head_dim = c->d; a->p.head_dim_v = c->dv;
    a->p.scale = c->scale; a->p.causal = c->causal;
    a->p.sliding_window = c->window; a->p.window_left = c->wl; a->p.window_right = c->wr;
    a->p.softcap = c->softcap; a->p.dropout_p = c->dropout;
    a->p.dropout_seed = rng_next(rng); a->p.dropout_offset = rng_next(rng) >> (rng_next(rng) % 64);
    if (c->alibi) {
        for (b = 0; b < c->hq; b++) a->slopes[b] = (float)(rng_uniform(rng) * 0.5);
        a->p.alibi_slopes = a->slopes;
    }
    if (c->varlen) { /* lengths in [0, max], one sequence at the max; zero-length ones allowed */
        a->cu_q[0] = a->cu_k[0] = 0;
        for (b = 0; b < c->batch; b++) {
            int lq = b == 0 ? c->sq : rng_int(rng, 0, c->sq);
            int lk = b == c->batch - 1 ? c->sk : rng_int(rng, 0, c->sk);
            a->cu_q[b + 1] = a->cu_q[b] + lq;
            a->cu_k[b + 1] = a->cu_k[b] + lk;
        }
        a->p.cu_seqlens_q = a->cu_q; a->p.cu_seqlens_k = a->cu_k;
        nbq = nbk = 1; rq = a->cu_q[c->batch]; rk = a->cu_k[c->batch];
    }
    if (c->seqlens_k) {
        for (b = 0; b < c->batch; b++) a->used_k[b] = b == 0 ? c->sk : rng_int(rng, 0, c->sk);
        a->p.seqlens_k = a->used_k;
    }
    a->q = tens_make(c->dt, nbq, rq, c->hq, c->d, c->layout, rng);
    a->k = tens_make(c->dt, nbk, rk, hkv, c->d, c->layout, rng);
    a->v = tens_make(c->dt, nbk, rk, hkv, dv, c->layout, rng);
    if (c->outliers) { tens_fill_outliers(&a->q, rng); tens_fill_outliers(&a->k, rng); tens_fill_outliers(&a->v, rng); }
    else { tens_fill(&a->q, rng, 1.0); tens_fill(&a->k, rng, 1.0); tens_fill(&a->v, rng, 1.0); }
    if (c->bm_density > 0) bm_make(a, c, rng);
    if (c->seqlens_k) { /* keys past seqlens_k are garbage (NaN): they must not be read */
        int64_t t;
        int h, e;
        for (b = 0; b < c->batch; b++)
            for (t = a->used_k[b]; t < c->sk; t++)
                for (h = 0; h < hkv; h++) {
                    for (e = 0; e < c->d; e++) tens_set_bits_nan(&a->k, tens_index(&a->k, b, t, h, e));
                    for (e = 0; e < dv; e++) tens_set_bits_nan(&a->v, tens_index(&a->v, b, t, h, e));
                }
    }
}

static void attn_free(attn *a)
{
    int i;
    tens_free(&a->q); tens_free(&a->k); tens_free(&a->v);
    for (i = 0; i < 4; i++) free(a->bm_lists[i]);
}

static float *lse_make(int64_t n)
{
    float *l = (float *)malloc(sizeof(float) * (size_t)(n + 1));
    int64_t i;
    for (i = 0; i <= n; i++) l[i] = NAN;
    return l;
}

/* Rows whose L is -inf must have O exactly 0. */
static int64_t check_masked_rows_zero(const attn *a, const tens *o, const double *lref)
{
    int b, h, c;
    int64_t i, bad = 0;
    for (b = 0; b < a->p.batch; b++)
        for (h = 0; h < a->p.heads_q; h++)
            for (i = 0; i < ref_len_q(&a->p, b); i++)
                if (lref[ref_lse_index(&a->p, b, h, i)] == -INFINITY) {
                    /* varlen tensors are one batch of cu_seqlens_q[batch] rows */
                    int bb = a->p.cu_seqlens_q ? 0 : b;
                    int64_t t = a->p.cu_seqlens_q ? ref_row_q(&a->p, b, i) : i;
                    for (c = 0; c < a->dv; c++)
                        if (ref_get(o->t, tens_index(o, bb, t, h, c)) != 0.0) bad++;
                }
    return bad;
}

static void run_attention(const fcase *c, uint64_t seed)
{
    attn a;
    uint64_t rng = seed;
    char ctx[400];
    tens o, dout, dq, dk, dv;
    double *oref, *lref, *dqr, *dkr, *dvr;
    float *lse;
    int64_t nq, nk, nl, bad;
    int no_lse;
    wspace ws;
    fa_status st;
    fcase_str(c, seed, ctx, sizeof ctx);
    attn_make(&a, c, &rng);
    nq = ref_rows_q(&a.p); nk = ref_rows_k(&a.p); nl = ref_lse_count(&a.p);
    o = tens_make(c->dt, a.q.nb, a.q.seq, c->hq, a.dv, c->layout, &rng);
    tens_snapshot(&o);
    lse = lse_make(nl);
    oref = (double *)malloc(sizeof(double) * (size_t)(nq * c->hq * a.dv + 1));
    lref = (double *)malloc(sizeof(double) * (size_t)(nl + 1));
    ref_forward(&a.p, a.q.t, a.k.t, a.v.t, oref, lref);

    ws = ws_make(fa_forward_workspace_size, &a.p, (int)(seed % 3));
    /* lse is optional: leave it out now and then (not when the backward needs it) */
    no_lse = !c->backward && (seed >> 3) % 3 == 0;
    st = fa_forward(&a.p, a.q.t, a.k.t, a.v.t, o.t, no_lse ? NULL : lse, ws.buf, ws.bytes);
    if (check(st == FA_OK, "forward %s%s: status %d (%s)", ctx, no_lse ? " lse=NULL" : "", (int)st, fa_last_error())) {
        bad = compare(ctx, "O", &o, oref, tol_out(c->dt));
        if (!no_lse) bad += compare_lse(ctx, lse, lref, nl, tol_lse(c->dt));
        check(bad == 0 && lse[nl] != lse[nl], "forward %s%s", ctx, no_lse ? " lse=NULL" : "");
        check(check_masked_rows_zero(&a, &o, lref) == 0, "forward %s: a row with L = -inf has O != 0", ctx);
        check(ws_canary_ok(&ws), "forward %s: wrote past the workspace", ctx);
    }
    free(ws.base);

    if (c->backward && st == FA_OK) {
        double grms;
        dout = tens_make(c->dt, a.q.nb, a.q.seq, c->hq, a.dv, c->layout, &rng);
        tens_fill(&dout, &rng, 1.0);
        dq = tens_make(c->dt, a.q.nb, a.q.seq, c->hq, c->d, c->layout, &rng);
        dk = tens_make(c->dt, a.k.nb, a.k.seq, a.hkv, c->d, c->layout, &rng);
        dv = tens_make(c->dt, a.k.nb, a.k.seq, a.hkv, a.dv, c->layout, &rng);
        tens_snapshot(&dq); tens_snapshot(&dk); tens_snapshot(&dv);
        dqr = (double *)malloc(sizeof(double) * (size_t)(nq * c->hq * c->d + 1));
        dkr = (double *)malloc(sizeof(double) * (size_t)(nk * a.hkv * c->d + 1));
        dvr = (double *)malloc(sizeof(double) * (size_t)(nk * a.hkv * a.dv + 1));
        ref_backward(&a.p, a.q.t, a.k.t, a.v.t, dout.t, dqr, dkr, dvr);
        ws = ws_make(fa_backward_workspace_size, &a.p, (int)((seed >> 1) % 3));
        st = fa_backward(&a.p, a.q.t, a.k.t, a.v.t, o.t, dout.t, lse, dq.t, dk.t, dv.t, ws.buf, ws.bytes);
        if (check(st == FA_OK, "backward %s: status %d (%s)", ctx, (int)st, fa_last_error())) {
            grms = rms(dqr, nq * c->hq * c->d);
            bad = compare(ctx, "dQ", &dq, dqr, tol_grad(c->dt, grms, c->outliers));
            grms = rms(dkr, nk * a.hkv * c->d);
            bad += compare(ctx, "dK", &dk, dkr, tol_grad(c->dt, grms, c->outliers));
            grms = rms(dvr, nk * a.hkv * a.dv);
            bad += compare(ctx, "dV", &dv, dvr, tol_grad(c->dt, grms, c->outliers));
            check(bad == 0, "backward %s", ctx);
            check(ws_canary_ok(&ws), "backward %s: wrote past the workspace", ctx);
        }
        free(ws.base);
        free(dqr); free(dkr); free(dvr);
        tens_free(&dout); tens_free(&dq); tens_free(&dk); tens_free(&dv);
    }
    free(oref); free(lref); free(lse);
    tens_free(&o);
    attn_free(&a);
}

static fcase fc(int batch, int sq, int sk, int hq, int hkv, int d, int dv, fa_dtype dt)
{
    fcase c;
    memset(&c, 0, sizeof c);
    c.batch = batch; c.sq = sq; c.sk = sk; c.hq = hq; c.hkv = hkv; c.d = d; c.dv = dv; c.dt = dt;
    return c;
}

static uint64_t case_seed(int section, int index) { return 1000003ull * (uint64_t)section + (uint64_t)index * 7919ull + 17; }

static void test_attention_grid(void)
{
    static const int lens[6] = {1, 7, 64, 113, 203, 1023};
    static const int dims[12] = {1, 3, 8, 16, 32, 64, 80, 96, 128, 130, 192, 256};
    static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    int i, j, n = 0;
    fcase c;
    int before = T_COUNT.failed;

    /* 1. every (seqlen_q, seqlen_k) pair, above and below each other */
    for (i = 0; i < 6; i++)
        for (j = 0; j < 6; j++) {
            int big = lens[i] == 1023 || lens[j] == 1023;
            if (QUICK && big) continue;
            c = fc(big ? 1 : 2, lens[i], lens[j], 2, (i + j) % 2 ? 1 : 2, big ? 16 : (n % 2 ? 32 : 19), 0, dts[n % 3]);
            c.causal = n % 2;
            c.layout = n % 3 == 2 ? LAYOUT_PADDED : LAYOUT_PACKED;
            c.backward = (long)lens[i] * lens[j] <= 203L * 1023;
            run_attention(&c, case_seed(1, n++));
        }
    printf("  lengths grid: %d cases\n", n);

    /* 2. head dims 1..256, every dtype, d != dv */
    for (i = 0; i < 12; i++)
        for (j = 0; j < 3; j++) {
            if (QUICK > 1 && j != i % 3) { n++; continue; } /* (the other cases keep their seeds) */
            c = fc(2, 37, 45 + 8 * j, 3, 1 + (j == 1 ? 2 : 0), dims[i], 0, dts[j]);
            c.causal = i % 2; c.layout = (i + j) % 3 == 0 ? LAYOUT_PADDED : (i + j) % 3;
            c.backward = 1;
            run_attention(&c, case_seed(2, n++));
        }
    {
        static const int dd[8][2] = {{64, 32}, {32, 128}, {3, 130}, {256, 1}, {130, 80}, {1, 256}, {80, 96}, {192, 128}};
        for (i = 0; i < 8; i++) {
            c = fc(2, 29, 53, 4, 2, dd[i][0], dd[i][1], dts[i % 3]);
            c.causal = i % 2; c.layout = i % 3; c.backward = 1;
            run_attention(&c, case_seed(3, n++));
        }
    }
    printf("  head dims: done (%d cases so far)\n", n);

    /* 3. features, alone and combined, each in every dtype with sq < sk and sq > sk */
    for (i = 0; i < 28; i++)
        for (j = 0; j < 3; j++) {
            int sq = (i + j) % 2 ? 47 : 113, sk = (i + j) % 2 ? 113 : 47;
            if (QUICK > 1 && j != i % 3) { n++; continue; } /* (the other cases keep their seeds) */
            c = fc(3, sq, sk, 4, 4, 24, 0, dts[j]);
            c.backward = 1; c.layout = (i + j) % 4;
            switch (i) {
            case 0: c.causal = 1; break;
            case 1: c.window = 1; c.wl = 9; c.wr = 4; break;
            case 2: c.window = 1; c.wl = 0; c.wr = 0; break;
            case 3: c.window = 1; c.wl = 30; c.wr = 0; c.causal = 1; break;
            case 4: c.window = 1; c.wl = 0; c.wr = 200; break;
            case 5: c.softcap = 2.5f; c.scale = 1.0f; break; /* large scores: the cap matters */
            case 6: c.alibi = 1; break;
            case 7: c.hkv = 2; break;            /* GQA */
            case 8: c.hkv = 1; break;            /* MQA */
            case 9: c.varlen = 1; break;
            case 10: c.seqlens_k = 1; break;
            case 11: c.dropout = 0.1f; break;
            case 12: c.dropout = 0.5f; break;
            case 13: c.dropout = 0.9f; break;
            case 14: c.scale = 0.37f; c.hkv = 0; break; /* heads_kv 0 = heads_q */
            case 15: c.causal = 1; c.alibi = 1; c.softcap = 5.0f; c.hkv = 2; break;
            case 16: c.causal = 1; c.varlen = 1; c.hkv = 1; c.dropout = 0.2f; break;
            case 17: c.window = 1; c.wl = 17; c.wr = 3; c.varlen = 1; c.alibi = 1; break;
            case 18: c.seqlens_k = 1; c.causal = 1; c.hkv = 2; c.softcap = 3.0f; break;
            case 19: c.seqlens_k = 1; c.window = 1; c.wl = 5; c.wr = 5; c.dropout = 0.3f; break;
            case 20: c.causal = 1; c.window = 1; c.wl = 11; c.wr = 0; c.softcap = 4.0f; c.alibi = 1;
                     c.hkv = 2; c.dropout = 0.15f; c.varlen = 1; c.dv = 40; break;
            case 21: c.outliers = 1; break;
            case 22: c.outliers = 1; c.causal = 1; c.hkv = 1; break;
            case 23: c.varlen = 1; c.batch = 5; c.softcap = 1.0f; c.dv = 9; break;
            case 24: c.dropout = 0.25f; c.alibi = 1; c.seqlens_k = 1; c.hkv = 1; break;
            case 25: c.causal = 1; c.dropout = 0.4f; c.d = 130; c.dv = 66; break;
            case 26: c.window = 1; c.wl = INT_MAX; c.wr = 2; break; /* INT_MAX: no bound that side */
            case 27: c.window = 1; c.wl = 3; c.wr = INT_MAX; c.varlen = 1; break;
            }
            run_attention(&c, case_seed(4, n++));
        }
    printf("  features: done (%d cases so far)\n", n);

    /* 4. long sequences with every feature, few heads, small dims */
    if (!QUICK) {
        static const int big[4][2] = {{1023, 1023}, {203, 1023}, {1023, 113}, {1023, 1023}};
        for (i = 0; i < 4; i++) {
            c = fc(i == 3 ? 3 : 1, big[i][0], big[i][1], 2, 1, 8, 16, dts[i % 3]);
            c.causal = i != 1; c.layout = i % 2 ? LAYOUT_PADDED : LAYOUT_PACKED;
            c.alibi = i == 0; c.softcap = i == 1 ? 3.0f : 0.0f; c.dropout = i >= 2 ? 0.1f : 0.0f;
            c.window = i == 1; c.wl = 300; c.wr = 40; c.varlen = i == 3;
            c.backward = i != 0 && i != 3;
            run_attention(&c, case_seed(5, n++));
        }
    }
    printf("attention grid: %d cases, %d failures\n", n, T_COUNT.failed - before);
}

/* Rows that see no key at all: O = 0 exactly, L = -inf, never NaN. */
static void test_fully_masked(void)
{
    fcase c;
    int n = 0, t;
    fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    for (t = 0; t < 3; t++) {
        c = fc(2, 64, 7, 2, 1, 16, 0, dts[t]); c.causal = 1; c.backward = 1;   /* 57 rows before key 0 */
        run_attention(&c, case_seed(6, n++));
        c = fc(2, 10, 3, 2, 2, 8, 0, dts[t]); c.window = 1; c.backward = 1;   /* window (0, 0), i' < 0 */
        run_attention(&c, case_seed(6, n++));
        c = fc(1, 5, 40, 1, 1, 8, 0, dts[t]); c.window = 1; c.wl = 0; c.wr = 0; c.causal = 1; c.softcap = 2.0f;
        c.backward = 1; run_attention(&c, case_seed(6, n++));
        c = fc(4, 9, 13, 2, 1, 8, 0, dts[t]); c.seqlens_k = 1; c.backward = 1; c.alibi = 1;
        run_attention(&c, case_seed(6, n++));                                      /* some seqlens_k = 0 */
    }
    { /* every sequence empty of keys: all L = -inf */
        attn a;
        uint64_t rng = case_seed(6, 99);
        tens o;
        float *lse;
        int b;
        int64_t i, bad = 0;
        c = fc(3, 6, 8, 2, 2, 4, 0, FA_F32); c.seqlens_k = 1;
        attn_make(&a, &c, &rng);
        for (b = 0; b < 3; b++) a.used_k[b] = 0;
        o = tens_make(FA_F32, 3, 6, 2, 4, LAYOUT_PACKED, &rng);
        lse = lse_make(ref_lse_count(&a.p));
        check(fa_forward(&a.p, a.q.t, a.k.t, a.v.t, o.t, lse, NULL, 0) == FA_OK, "forward with all seqlens_k = 0: %s", fa_last_error());
        for (i = 0; i < 3 * 6 * 2 * 4; i++) bad += ((float *)o.buf)[i] != 0.0f;
        for (i = 0; i < ref_lse_count(&a.p); i++) bad += lse[i] != -INFINITY;
        check(bad == 0, "all seqlens_k = 0: O must be 0 and L -inf (%lld wrong)", (long long)bad);
        free(lse); tens_free(&o); attn_free(&a);
    }
}

/* ==========================================================================
   >>block-sparse  block masks (section 5, "Block masks")
   ==========================================================================
   The test draws a dense block bitmap per mask (the equivalent dense mask:
   key j visible to row i only if block (i / block_q, j / block_k) is set),
   writes its lists itself (each row in a random order, some blocks in the
   full list when causal and the window cut them nowhere), and the fp64
   reference searches those lists for every (i, j). K and V rows of key
   blocks that no query block of their KV head visits are NaN: reading them
   at all would show. */

typedef struct bmshape { int bq, bk, nb, nh, qblocks, kblocks; int64_t rows; } bmshape;

/* The mask's sizes, from section 5's defaults. */
static bmshape bm_shape(const fa_problem *p)
{
    bmshape s;
    const fa_block_mask *m = &p->block_mask;
    s.bq = m->block_q ? m->block_q : 128;
    s.bk = m->block_k ? m->block_k : 128;
    s.nb = m->batch ? m->batch : p->batch;
    s.nh = m->heads ? m->heads : p->heads_q;
    s.qblocks = (p->seqlen_q + s.bq - 1) / s.bq;
    s.kblocks = (p->seqlen_k + s.bk - 1) / s.bk;
    s.rows = (int64_t)s.nb * s.nh * s.qblocks;
    return s;
}

/* Do causal and the window let every (i, j) of block (I, J) through, inside
   the lengths of every sequence that reads mask batch mb? */
static int bm_block_full(const fa_problem *p, const bmshape *sh, int mb, int I, int J)
{
    int b;
    int64_t i, j;
    for (b = 0; b < p->batch; b++) {
        int64_t sq = ref_len_q(p, b), sk = ref_len_k(p, b);
        if (sh->nb != 1 && b != mb) continue;
        for (i = (int64_t)I * sh->bq; i < (int64_t)(I + 1) * sh->bq && i < sq; i++)
            for (j = (int64_t)J * sh->bk; j < (int64_t)(J + 1) * sh->bk && j < sk; j++)
                if (!ref_visible(p, i, j, sq, sk)) return 0;
    }
    return 1;
}

/* NaN into the K and V rows of key blocks no query block of their KV head
   visits (dense: the bitmap [rows][kblocks]). */
static void bm_poison(attn *a, const bmshape *sh, const uint8_t *dense)
{
    int b, kvh, J, g, I, h, e;
    int64_t t;
    for (b = 0; b < a->p.batch; b++)
        for (kvh = 0; kvh < a->hkv; kvh++)
            for (J = 0; J < sh->kblocks; J++) {
                int used = 0, bb = a->p.cu_seqlens_k ? 0 : b;
                for (g = 0; g < a->p.heads_q / a->hkv && !used; g++) {
                    h = kvh * (a->p.heads_q / a->hkv) + g;
                    for (I = 0; I < sh->qblocks; I++)
                        used |= dense[((((int64_t)(sh->nb == 1 ? 0 : b) * sh->nh + h / (a->p.heads_q / sh->nh)) *
                                        sh->qblocks + I) * sh->kblocks + J)];
                }
                for (t = (int64_t)J * sh->bk; !used && t < (int64_t)(J + 1) * sh->bk && t < ref_len_k(&a->p, b); t++) {
                    int64_t row = a->p.cu_seqlens_k ? a->p.cu_seqlens_k[b] + t : t;
                    for (e = 0; e < a->k.dim; e++) tens_set_bits_nan(&a->k, tens_index(&a->k, bb, row, kvh, e));
                    for (e = 0; e < a->v.dim; e++) tens_set_bits_nan(&a->v, tens_index(&a->v, bb, row, kvh, e));
                }
            }
}

static void bm_make(attn *a, const fcase *c, uint64_t *rng)
{
    fa_block_mask *m = &a->p.block_mask;
    bmshape sh;
    int64_t row;
    int i, t, J, n, nf, *order;
    uint8_t *dense;
    m->block_q = c->bq; m->block_k = c->bk; m->batch = c->bm_batch; m->heads = c->bm_heads;
    sh = bm_shape(&a->p);
    for (i = 0; i < 4; i++)
        a->bm_lists[i] = (int32_t *)malloc(sizeof(int32_t) * (size_t)(i % 2 ? sh.rows * sh.kblocks : sh.rows) + 4);
    dense = (uint8_t *)calloc((size_t)(sh.rows * sh.kblocks), 1);
    order = (int *)malloc(sizeof(int) * (size_t)sh.kblocks);
    for (row = 0; row < sh.rows; row++) {
        int I = (int)(row % sh.qblocks), mb = (int)(row / ((int64_t)sh.qblocks * sh.nh));
        int empty = c->bm_density < 1.0 && rng_uniform(rng) < 0.1; /* a query block that sees nothing */
        int32_t *idx = a->bm_lists[1] + row * sh.kblocks, *fidx = a->bm_lists[3] + row * sh.kblocks;
        for (J = 0; J < sh.kblocks; J++) order[J] = J;
        for (J = sh.kblocks - 1; J > 0; J--) { /* shuffled: the order of a list must not matter */
            int k = rng_int(rng, 0, J), tmp = order[J];
            order[J] = order[k]; order[k] = tmp;
        }
        for (n = nf = t = 0; t < sh.kblocks; t++) {
            J = order[t];
            if (empty || rng_uniform(rng) >= c->bm_density) continue;
            dense[row * sh.kblocks + J] = 1;
            if (c->bm_full && (rng_next(rng) & 1) && bm_block_full(&a->p, &sh, mb, I, J)) fidx[nf++] = J;
            else idx[n++] = J;
        }
        for (t = n; t < sh.kblocks; t++) idx[t] = 0x7fffffff;  /* past the count: never read */
        for (t = nf; t < sh.kblocks; t++) fidx[t] = -5;
        a->bm_lists[0][row] = n;
        a->bm_lists[2][row] = nf;
    }
    m->kv_num_blocks = a->bm_lists[0]; m->kv_indices = a->bm_lists[1];
    if (c->bm_full) { m->full_kv_num_blocks = a->bm_lists[2]; m->full_kv_indices = a->bm_lists[3]; }
    bm_poison(a, &sh, dense);
    free(order); free(dense);
}

/* fa_block_mask_from_bitmap: the size query, then the lists of a random
   bitmap, ascending, the rest of each row 0; and fa_problem_resolve's
   defaults for a block mask. */
static void test_block_mask_helper(void)
{
    fa_problem p, r;
    bmshape sh;
    uint64_t rng = case_seed(11, 1);
    int64_t nc = -1, ni = -1, row, bad = 0;
    uint8_t *bits;
    int32_t *cnt, *idx;
    int J, n, mode;
    for (mode = 0; mode < 3; mode++) {
        memset(&p, 0, sizeof p);
        p.batch = 2; p.heads_q = 4; p.seqlen_q = 50; p.seqlen_k = 77; p.head_dim = 8;
        p.block_mask.block_q = mode == 2 ? 0 : 16; p.block_mask.block_k = mode == 2 ? 0 : 8 + mode;
        p.block_mask.heads = mode == 0 ? 2 : mode == 1 ? 1 : 0; p.block_mask.batch = mode == 1 ? 1 : 0;
        sh = bm_shape(&p);
        check(fa_block_mask_from_bitmap(&p, NULL, NULL, NULL, &nc, &ni) == FA_OK && nc == sh.rows &&
              ni == sh.rows * sh.kblocks, "fa_block_mask_from_bitmap size query (mode %d): %lld %lld, want %lld %lld (%s)",
              mode, (long long)nc, (long long)ni, (long long)sh.rows, (long long)(sh.rows * sh.kblocks), fa_last_error());
        bits = (uint8_t *)malloc((size_t)(sh.rows * sh.kblocks));
        cnt = (int32_t *)malloc(sizeof(int32_t) * (size_t)sh.rows);
        idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(sh.rows * sh.kblocks));
        for (row = 0; row < sh.rows * sh.kblocks; row++) bits[row] = (uint8_t)(rng_uniform(&rng) < 0.3 ? 1 + rng_int(&rng, 0, 200) : 0);
        for (row = 0; row < sh.rows * sh.kblocks; row++) idx[row] = -1;
        check(fa_block_mask_from_bitmap(&p, bits, cnt, idx, NULL, NULL) == FA_OK, "fa_block_mask_from_bitmap: %s", fa_last_error());
        for (row = 0; row < sh.rows; row++) {
            for (n = 0, J = 0; J < sh.kblocks; J++)
                if (bits[row * sh.kblocks + J]) bad += idx[row * sh.kblocks + n++] != J;
            bad += cnt[row] != n;
            for (; n < sh.kblocks; n++) bad += idx[row * sh.kblocks + n] != 0;
        }
        check(bad == 0, "fa_block_mask_from_bitmap (mode %d): %lld entries differ from the bitmap", mode, (long long)bad);
        /* the lists go straight into a problem: fa_problem_resolve takes them and fills the defaults */
        p.block_mask.kv_num_blocks = cnt; p.block_mask.kv_indices = idx;
        check(fa_problem_resolve(&p, &r) == FA_OK && r.block_mask.block_q == sh.bq && r.block_mask.block_k == sh.bk &&
              r.block_mask.batch == sh.nb && r.block_mask.heads == sh.nh && r.block_mask.kv_indices == idx,
              "fa_problem_resolve with a block mask (mode %d): %s; block %d x %d, batch %d, heads %d", mode,
              fa_last_error(), r.block_mask.block_q, r.block_mask.block_k, r.block_mask.batch, r.block_mask.heads);
        free(bits); free(cnt); free(idx);
    }
    memset(&p, 0, sizeof p);
    p.batch = 1; p.heads_q = 1; p.seqlen_q = 3; p.seqlen_k = 3; p.head_dim = 4;
    check(fa_problem_resolve(&p, &r) == FA_OK && r.block_mask.block_q == 0 && r.block_mask.kv_num_blocks == NULL,
          "fa_problem_resolve without a block mask leaves block_mask zero");
}

/* The same problem twice, its lists in other orders and split otherwise
   between kv_indices and full_kv_indices: the same bytes out. */
static void test_block_mask_order(void)
{
    fcase c;
    attn a;
    uint64_t rng = case_seed(12, 0);
    tens o[2], dout, dq[2], dk[2], dv[2];
    float *lse[2];
    int run, ok = 1;
    int64_t row, t, nl;
    bmshape sh;
    c = fc(2, 70, 90, 4, 2, 16, 0, FA_F32);
    c.bm_density = 0.4; c.bq = 16; c.bk = 8; c.bm_full = 1; c.alibi = 1; /* no causal / window: every block is full */
    attn_make(&a, &c, &rng);
    sh = bm_shape(&a.p);
    nl = ref_lse_count(&a.p);
    dout = tens_make(FA_F32, 2, 70, 4, 16, LAYOUT_PACKED, &rng);
    tens_fill(&dout, &rng, 1.0);
    for (run = 0; run < 2; run++) {
        o[run] = tens_make(FA_F32, 2, 70, 4, 16, LAYOUT_PACKED, &rng);
        dq[run] = tens_make(FA_F32, 2, 70, 4, 16, LAYOUT_PACKED, &rng);
        dk[run] = tens_make(FA_F32, 2, 90, 2, 16, LAYOUT_PACKED, &rng);
        dv[run] = tens_make(FA_F32, 2, 90, 2, 16, LAYOUT_PACKED, &rng);
        lse[run] = lse_make(nl);
        if (run == 1) /* everything into kv_indices, each row reversed */
            for (row = 0; row < sh.rows; row++) {
                int32_t *idx = a.bm_lists[1] + row * sh.kblocks, n = a.bm_lists[0][row];
                for (t = 0; t < a.bm_lists[2][row]; t++) idx[n++] = a.bm_lists[3][row * sh.kblocks + t];
                for (t = 0; t < n / 2; t++) { int32_t x = idx[t]; idx[t] = idx[n - 1 - t]; idx[n - 1 - t] = x; }
                a.bm_lists[0][row] = n;
                a.bm_lists[2][row] = 0;
            }
        ok &= fa_forward(&a.p, a.q.t, a.k.t, a.v.t, o[run].t, lse[run], NULL, 0) == FA_OK;
        ok &= fa_backward(&a.p, a.q.t, a.k.t, a.v.t, o[run].t, dout.t, lse[run], dq[run].t, dk[run].t, dv[run].t, NULL, 0) == FA_OK;
    }
    check(ok, "block mask order: a call failed: %s", fa_last_error());
    check(!memcmp(o[0].buf, o[1].buf, (size_t)o[0].n * 4) && !memcmp(lse[0], lse[1], (size_t)nl * 4) &&
          !memcmp(dq[0].buf, dq[1].buf, (size_t)dq[0].n * 4) && !memcmp(dk[0].buf, dk[1].buf, (size_t)dk[0].n * 4) &&
          !memcmp(dv[0].buf, dv[1].buf, (size_t)dv[0].n * 4),
          "block mask order: O, L, dQ, dK, dV differ when the lists are reordered or split otherwise");
    for (run = 0; run < 2; run++) {
        tens_free(&o[run]); tens_free(&dq[run]); tens_free(&dk[run]); tens_free(&dv[run]); free(lse[run]);
    }
    tens_free(&dout);
    attn_free(&a);
}

static void test_block_sparse(void)
{
    static const double dens[5] = {0.05, 0.10, 0.25, 0.50, 1.0};
    static const int blk[6][2] = {{16, 8}, {7, 5}, {64, 32}, {0, 0}, {300, 130}, {1, 3}};
    static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    int i, j, n = 0, before = T_COUNT.failed;
    fcase c;
    /* 1. densities x block sizes (odd lengths, blocks that are not CPU tiles), forward and backward */
    for (i = 0; i < 5; i++)
        for (j = 0; j < 6; j++) {
            if (QUICK && (i + j) % 2) continue;
            c = fc(2, 113, 203, 4, 2, 24, 0, dts[n % 3]);
            c.bm_density = dens[i]; c.bq = blk[j][0]; c.bk = blk[j][1];
            c.backward = 1; c.layout = n % 4;
            run_attention(&c, case_seed(10, n++));
        }
    /* 2. composed with every feature, each in every dtype, sq < sk and sq > sk */
    for (i = 0; i < 16; i++)
        for (j = 0; j < 3; j++) {
            int sq = (i + j) % 2 ? 47 : 113, sk = (i + j) % 2 ? 113 : 47;
            if (QUICK && j == 2 && i % 2) continue;
            c = fc(3, sq, sk, 4, 4, 24, 0, dts[j]);
            c.backward = 1; c.layout = (i + j) % 4;
            c.bm_density = i % 3 == 0 ? 0.25 : 0.5; c.bq = i % 2 ? 16 : 9; c.bk = i % 2 ? 8 : 13;
            switch (i) {
            case 0: c.causal = 1; break;
            case 1: c.window = 1; c.wl = 9; c.wr = 4; break;
            case 2: c.causal = 1; c.window = 1; c.wl = 30; c.wr = 0; c.bm_full = 1; break;
            case 3: c.softcap = 2.5f; c.scale = 1.0f; break;
            case 4: c.alibi = 1; c.bm_full = 1; break;
            case 5: c.hkv = 2; c.bm_heads = 2; break;            /* one mask per KV head */
            case 6: c.hkv = 1; c.bm_heads = 1; c.causal = 1; break; /* MQA, one mask for all heads */
            case 7: c.varlen = 1; c.bm_batch = 1; break;          /* one mask for every sequence */
            case 8: c.varlen = 1; c.causal = 1; c.bm_full = 1; break;
            case 9: c.seqlens_k = 1; c.causal = 1; c.bm_full = 1; break;
            case 10: c.dropout = 0.2f; break;
            case 11: c.hkv = 4; c.bm_heads = 2; c.bm_batch = 1; c.window = 1; c.wl = 5; c.wr = 5; c.bm_full = 1; break;
            case 12: c.bm_full = 1; c.hkv = 2; break;             /* all blocks may be full */
            case 13: c.causal = 1; c.window = 1; c.wl = 11; c.wr = 0; c.softcap = 4.0f; c.alibi = 1; c.hkv = 2;
                     c.dropout = 0.15f; c.varlen = 1; c.dv = 40; c.bm_full = 1; c.bm_heads = 2; break;
            case 14: c.causal = 1; c.varlen = 1; c.bq = 300; c.bk = 130; break; /* blocks beyond the sequences */
            case 15: c.outliers = 1; c.causal = 1; c.bq = 1; c.bk = 1; break;
            }
            run_attention(&c, case_seed(13, n++));
        }
    /* 3. no query block visits anything: O = 0, L = -inf, zero gradients */
    for (j = 0; j < 3; j++) {
        c = fc(2, 33, 41, 2, 1, 8, 0, dts[j]);
        c.bm_density = 1e-12; c.bq = 8; c.bk = 8; c.backward = 1; c.causal = j == 1;
        run_attention(&c, case_seed(14, n++));
    }
    test_block_mask_helper();
    test_block_mask_order();
    printf("block masks: %d cases, %d failures\n", n, T_COUNT.failed - before);
}

/* ==========================================================================
   >>finite-differences  backward against the forward's numerical gradient
   ========================================================================== */

/* loss = sum(O . R), R = dout, from the library's forward (f32) or the reference. */
static double loss_lib(const attn *a, const tens *o, const tens *r)
{
    int b, h, c;
    int64_t t;
    double s = 0.0;
    if (fa_forward(&a->p, a->q.t, a->k.t, a->v.t, o->t, NULL, NULL, 0) != FA_OK) return NAN;
    for (b = 0; b < o->nb; b++) for (t = 0; t < o->seq; t++) for (h = 0; h < o->heads; h++)
        for (c = 0; c < o->dim; c++) s += tens_get(o, b, t, h, c) * tens_get(r, b, t, h, c);
    return s;
}
static double loss_ref(const attn *a, const tens *r, double *obuf)
{
    int b, h, c;
    int64_t t;
    double s = 0.0;
    ref_forward(&a->p, a->q.t, a->k.t, a->v.t, obuf, NULL);
    for (b = 0; b < r->nb; b++) for (t = 0; t < r->seq; t++) for (h = 0; h < r->heads; h++)
        for (c = 0; c < r->dim; c++)
            s += obuf[(((int64_t)b * r->seq + t) * r->heads + h) * r->dim + c] * tens_get(r, b, t, h, c);
    return s;
}

static void test_finite_differences(void)
{
    int ci;
    for (ci = 0; ci < 8; ci++) {
        fcase c = fc(2, 3 + ci % 3, 5, 2, 1 + (ci % 2), 4, 3, FA_F32);
        uint64_t seed = case_seed(7, ci), rng = seed;
        attn a;
        tens o, r, g[3];
        tens *x[3];
        double *gref[3], *obuf;
        float *lse;
        char ctx[400];
        int which, bad_lib = 0, bad_ref = 0, bad_refvslib = 0;
        c.causal = ci == 1 || ci == 5; c.softcap = (ci == 2 || ci == 5) ? 1.5f : 0.0f;
        c.alibi = ci == 3 || ci == 5; c.dropout = (ci == 4 || ci == 5 || ci == 7) ? 0.3f : 0.0f;
        c.window = ci == 6; c.wl = 1; c.wr = 1; c.varlen = ci == 7; c.scale = ci == 2 ? 1.0f : 0.0f;
        fcase_str(&c, seed, ctx, sizeof ctx);
        attn_make(&a, &c, &rng);
        o = tens_make(FA_F32, a.q.nb, a.q.seq, c.hq, c.dv, LAYOUT_PACKED, &rng);
        r = tens_make(FA_F32, a.q.nb, a.q.seq, c.hq, c.dv, LAYOUT_PACKED, &rng);
        tens_fill(&r, &rng, 1.0);
        lse = lse_make(ref_lse_count(&a.p));
        obuf = (double *)malloc(sizeof(double) * (size_t)(o.n + 1));
        x[0] = &a.q; x[1] = &a.k; x[2] = &a.v;
        g[0] = tens_make(FA_F32, a.q.nb, a.q.seq, c.hq, c.d, LAYOUT_PACKED, &rng);
        g[1] = tens_make(FA_F32, a.k.nb, a.k.seq, a.hkv, c.d, LAYOUT_PACKED, &rng);
        g[2] = tens_make(FA_F32, a.k.nb, a.k.seq, a.hkv, c.dv, LAYOUT_PACKED, &rng);
        for (which = 0; which < 3; which++)
            gref[which] = (double *)malloc(sizeof(double) * (size_t)(g[which].n + 1));
        ref_backward(&a.p, a.q.t, a.k.t, a.v.t, r.t, gref[0], gref[1], gref[2]);
        if (!check(fa_forward(&a.p, a.q.t, a.k.t, a.v.t, o.t, lse, NULL, 0) == FA_OK &&
                   fa_backward(&a.p, a.q.t, a.k.t, a.v.t, o.t, r.t, lse, g[0].t, g[1].t, g[2].t, NULL, 0) == FA_OK,
                   "finite differences %s: forward/backward failed: %s", ctx, fa_last_error()))
            goto done;
        for (which = 0; which < 3; which++) {
            int64_t i;
            for (i = 0; i < x[which]->n; i++) {
                float *e = (float *)x[which]->buf + i, keep = *e;
                double up, dn, fd_lib, fd_ref, h = 1.0 / 64, gl = ((float *)g[which].buf)[i];
                double d_up, d_dn, gr = gref[which][i];
                if (!x[which]->live[i]) continue;
                *e = (float)(keep + h); d_up = (double)*e - keep;
                up = loss_lib(&a, &o, &r);
                *e = (float)(keep - h); d_dn = keep - (double)*e;
                dn = loss_lib(&a, &o, &r);
                fd_lib = (up - dn) / (d_up + d_dn);
                *e = (float)(keep + 1e-3); d_up = (double)*e - keep;
                up = loss_ref(&a, &r, obuf);
                *e = (float)(keep - 1e-3); d_dn = keep - (double)*e;
                dn = loss_ref(&a, &r, obuf);
                fd_ref = (up - dn) / (d_up + d_dn);
                *e = keep;
                /* reference backward vs reference forward: tight */
                if (fabs(fd_ref - gr) > 1e-5 + 1e-4 * fabs(gr)) {
                    if (bad_ref < 3) printf("  %s: reference d%c[%lld] %.9g, fd %.9g\n", ctx, "qkv"[which], (long long)i, gr, fd_ref);
                    bad_ref++;
                }
                /* library backward vs library forward: loose (fp32 forward, h = 1/64) */
                if (fabs(fd_lib - gl) > 2e-3 + 2e-2 * fabs(gl)) {
                    if (bad_lib < 3) printf("  %s: library d%c[%lld] %.9g, fd %.9g\n", ctx, "qkv"[which], (long long)i, gl, fd_lib);
                    bad_lib++;
                }
                if (fabs(gl - gr) > 1e-4 + 1e-3 * fabs(gr)) bad_refvslib++;
            }
        }
        check(bad_ref == 0, "reference backward vs finite differences of the reference forward %s: %d bad", ctx, bad_ref);
        check(bad_lib == 0, "library backward vs finite differences of the library forward %s: %d bad", ctx, bad_lib);
        check(bad_refvslib == 0, "library backward vs reference backward %s: %d bad", ctx, bad_refvslib);
    done:
        for (which = 0; which < 3; which++) { free(gref[which]); tens_free(&g[which]); }
        free(obuf); free(lse); tens_free(&o); tens_free(&r); attn_free(&a);
    }
}

/* ==========================================================================
   >>decode  against a contiguous or paged KV cache
   ========================================================================== */

typedef struct dcase {
    int batch, sq, cap, hq, hkv, d, dv;
    fa_dtype dt;
    int page_size; /* 0 = contiguous */
    int append, splits, causal, mixed, layout, null_seqlens;
    float softcap;
    int alibi, window, wl, wr;
} dcase;

static void run_decode(const dcase *c, uint64_t seed)
{
    uint64_t rng = seed;
    fa_problem p;
    char ctx[400];
    int32_t used[64], table[64 * 1100];
    float slopes[64];
    int b, pps = 0, npages = 0, hkv = c->hkv ? c->hkv : c->hq, dv = c->dv ? c->dv : c->d, cap = c->cap;
    tens q, kc, vc, kn, vn, o, kexp, vexp;
    double *oref, *lref;
    float *lse;
    int64_t nl, bad;
    int no_lse;
    wspace ws;
    fa_status st;
    snprintf(ctx, sizeof ctx, "decode seed=%llu b=%d sq=%d cap=%d hq=%d hkv=%d d=%d dv=%d %s page=%d%s splits=%d%s%s%s%s%s%s layout=%d",
             (unsigned long long)seed, c->batch, c->sq, c->cap, c->hq, c->hkv, c->d, c->dv, dt_name(c->dt),
             c->page_size, c->append ? " append" : "", c->splits, c->causal ? " causal" : "",
             c->mixed ? " mixed" : "", c->null_seqlens ? " no-seqlens" : "", c->softcap > 0 ? " softcap" : "",
             c->alibi ? " alibi" : "", c->window ? " window" : "", c->layout);
    memset(&p, 0, sizeof p);
    if (c->page_size) { pps = (cap + c->page_size - 1) / c->page_size; cap = pps * c->page_size; npages = c->batch * pps + 3; }
    p.batch = c->batch; p.seqlen_q = c->sq; p.seqlen_k = cap; p.heads_q = c->hq; p.heads_kv = c->hkv;
    p.head_dim = c->d; p.head_dim_v = c->dv; p.causal = c->causal; p.num_splits = c->splits;
    p.softcap = c->softcap; p.sliding_window = c->window; p.window_left = c->wl; p.window_right = c->wr;
    if (c->alibi) { for (b = 0; b < c->hq; b++) slopes[b] = (float)rng_uniform(&rng); p.alibi_slopes = slopes; }
    for (b = 0; b < c->batch; b++) {
        int room = cap - (c->append ? c->sq : 0);
        used[b] = c->mixed ? (b == 0 ? room : b == 1 ? 0 : rng_int(&rng, 0, room)) : room;
    }
    if (!c->null_seqlens) p.seqlens_k = used;
    if (c->page_size) { /* a random permutation of the pool, 3 pages unused */
        int i;
        for (i = 0; i < npages; i++) table[i] = i;
        for (i = npages - 1; i > 0; i--) { int j = rng_int(&rng, 0, i), t = table[i]; table[i] = table[j]; table[j] = t; }
        p.block_table = table; p.page_size = c->page_size; p.pages_per_seq = pps; p.num_pages = npages;
        kc = tens_make(c->dt, npages, c->page_size, hkv, c->d, c->layout, &rng);
        vc = tens_make(c->dt, npages, c->page_size, hkv, dv, c->layout, &rng);
    } else {
        kc = tens_make(c->dt, c->batch, cap, hkv, c->d, c->layout, &rng);
        vc = tens_make(c->dt, c->batch, cap, hkv, dv, c->layout, &rng);
    }
    tens_fill(&kc, &rng, 1.0); tens_fill(&vc, &rng, 1.0);
    for (b = 0; b < c->batch; b++) { /* slots past the cache length: garbage that must not be read */
        int64_t n;
        int h, e;
        for (n = used[b]; n < cap; n++)
            for (h = 0; h < hkv; h++) {
                for (e = 0; e < c->d; e++) tens_set_bits_nan(&kc, ref_cache_offset(&p, kc.t, c->d, b, n, h) + e);
                for (e = 0; e < dv; e++) tens_set_bits_nan(&vc, ref_cache_offset(&p, vc.t, dv, b, n, h) + e);
            }
    }
    q = tens_make(c->dt, c->batch, c->sq, c->hq, c->d, c->layout, &rng);
    tens_fill(&q, &rng, 1.0);
    memset(&kn, 0, sizeof kn); memset(&vn, 0, sizeof vn);
    if (c->append) {
        kn = tens_make(c->dt, c->batch, c->sq, hkv, c->d, c->layout, &rng);
        vn = tens_make(c->dt, c->batch, c->sq, hkv, dv, c->layout, &rng);
        tens_fill(&kn, &rng, 1.0); tens_fill(&vn, &rng, 1.0);
    }
    o = tens_make(c->dt, c->batch, c->sq, c->hq, dv, c->layout, &rng);
    tens_snapshot(&o);
    nl = (int64_t)c->batch * c->hq * c->sq;
    lse = lse_make(nl);
    oref = (double *)malloc(sizeof(double) * (size_t)(o.n + 1));
    lref = (double *)malloc(sizeof(double) * (size_t)(nl + 1));
    ref_decode(&p, q.t, kc.t, vc.t, kn.t, vn.t, oref, lref);
    /* the expected caches: a copy with the new tokens written in */
    kexp = tens_clone(&kc); vexp = tens_clone(&vc);
    if (c->append) ref_decode_append(&p, kexp.t, vexp.t, kn.t, vn.t);

    ws = ws_make(fa_decode_workspace_size, &p, (int)(seed % 3));
    no_lse = (seed >> 3) % 4 == 0; /* lse is optional */
    st = fa_decode(&p, q.t, kc.t, vc.t, kn.t, vn.t, o.t, no_lse ? NULL : lse, ws.buf, ws.bytes);
    if (check(st == FA_OK, "%s: status %d (%s)", ctx, (int)st, fa_last_error())) {
        int64_t i, kbad = 0, vbad = 0;
        size_t es = dt_size(c->dt);
        bad = compare(ctx, "O", &o, oref, tol_out(c->dt));
        if (!no_lse) bad += compare_lse(ctx, lse, lref, nl, tol_lse(c->dt));
        check(bad == 0, "%s%s", ctx, no_lse ? " lse=NULL" : "");
        for (i = 0; i < kc.n; i++) kbad += memcmp((char *)kc.buf + i * es, (char *)kexp.buf + i * es, es) != 0;
        for (i = 0; i < vc.n; i++) vbad += memcmp((char *)vc.buf + i * es, (char *)vexp.buf + i * es, es) != 0;
        check(kbad == 0 && vbad == 0, "%s: cache after the call: %lld K and %lld V elements differ from the expected cache",
              ctx, (long long)kbad, (long long)vbad);
        check(ws_canary_ok(&ws), "%s: wrote past the workspace", ctx);
    }
    free(ws.base);
    tens_free(&kexp); tens_free(&vexp); free(oref); free(lref); free(lse);
    tens_free(&q); tens_free(&kc); tens_free(&vc); tens_free(&o);
    if (c->append) { tens_free(&kn); tens_free(&vn); }
}

static void test_decode(void)
{
    static const int pages[5] = {0, 1, 3, 16, 64};
    static const int splits[4] = {1, 3, 0, 7};
    static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    int n = 0, pi, si, a, before = T_COUNT.failed;
    dcase c;
    for (pi = 0; pi < 5; pi++)
        for (si = 0; si < 4; si++)
            for (a = 0; a < 2; a++) {
                memset(&c, 0, sizeof c);
                c.batch = 3; c.sq = 1 + (si + a) % 4; c.cap = QUICK ? 150 : 300 + 23 * si;
                c.hq = 4; c.hkv = pi % 2 ? 1 : 2; c.d = 32 + pi; c.dv = (si == 3) ? 24 : 0;
                c.dt = dts[(pi + si + a) % 3]; c.page_size = pages[pi]; c.append = a; c.splits = splits[si];
                c.causal = (si % 2) == 0; c.mixed = 1; c.layout = (pi + si) % 3;
                run_decode(&c, case_seed(8, n++));
            }
    /* features on decode: softcap, alibi, window, MQA, a full cache without seqlens_k, long caches */
    memset(&c, 0, sizeof c);
    c.batch = 2; c.sq = 1; c.cap = 1023; c.hq = 8; c.hkv = 1; c.d = 64; c.dt = FA_F16; c.splits = 0; c.mixed = 1;
    run_decode(&c, case_seed(8, n++));
    c.page_size = 16; c.append = 1; c.softcap = 3.0f; c.alibi = 1; c.dt = FA_BF16; c.splits = 5;
    run_decode(&c, case_seed(8, n++));
    c.page_size = 0; c.append = 0; c.softcap = 0; c.alibi = 0; c.window = 1; c.wl = 50; c.wr = 0; c.dt = FA_F32;
    c.sq = 3; c.causal = 1; run_decode(&c, case_seed(8, n++));
    c.window = 0; c.null_seqlens = 1; c.mixed = 0; c.cap = 77; c.splits = 4; c.sq = 2; c.causal = 1; c.d = 80; c.dv = 40;
    run_decode(&c, case_seed(8, n++));
    c.page_size = 3; c.cap = 30; run_decode(&c, case_seed(8, n++));
    memset(&c, 0, sizeof c); /* 4 rows a KV head over several tiles: two keys a step, the next tile's V streamed */
    c.batch = 2; c.sq = 1; c.cap = 701; c.hq = 8; c.hkv = 2; c.d = 128; c.dt = FA_F16; c.splits = 3; c.mixed = 1;
    run_decode(&c, case_seed(8, n++));
    c.sq = 2; c.hq = 4; c.d = 64; c.dv = 72; c.dt = FA_BF16; c.splits = 0; c.causal = 1; c.append = 1;
    run_decode(&c, case_seed(8, n++));
    c.layout = 1; c.page_size = 64; run_decode(&c, case_seed(8, n++));
    memset(&c, 0, sizeof c); /* larger GQA groups: 8, 21 (3 tokens of 7), 32 and 40 rows a KV head */
    c.batch = 2; c.sq = 1; c.cap = 500; c.hq = 16; c.hkv = 2; c.d = 128; c.dt = FA_F16; c.splits = 0; c.mixed = 1;
    run_decode(&c, case_seed(8, n++));
    c.sq = 3; c.hq = 14; c.causal = 1; c.dt = FA_BF16; c.page_size = 16; c.append = 1; c.d = 64;
    run_decode(&c, case_seed(8, n++));
    c.sq = 4; c.hq = 16; c.dt = FA_F32; c.page_size = 0; c.append = 0; c.splits = 3;
    run_decode(&c, case_seed(8, n++));
    c.sq = 5; c.dt = FA_F16; c.d = 128; c.dv = 96; run_decode(&c, case_seed(8, n++));
    memset(&c, 0, sizeof c); /* more splits than keys */
    c.batch = 4; c.sq = 1; c.cap = 5; c.hq = 2; c.d = 8; c.dt = FA_F32; c.splits = 16; c.mixed = 1; c.append = 1;
    run_decode(&c, case_seed(8, n++));
    c.page_size = 1; c.dt = FA_F16; run_decode(&c, case_seed(8, n++));
    printf("decode: %d cases, %d failures\n", n, T_COUNT.failed - before);
}

/* ==========================================================================
   >>merge  partial results combined by their log-sum-exp
   ========================================================================== */

static void test_merge(void)
{
    int trial;
    for (trial = 0; trial < 12; trial++) {
        uint64_t seed = case_seed(9, trial), rng = seed;
        int splits = 1 + trial % 5, dim = trial % 2 ? 19 : 64, sk = 40, s, c, j;
        int64_t rows = 37 + trial, r, bad = 0;
        float *op = (float *)malloc(sizeof(float) * (size_t)(splits * rows * dim));
        float *lp = (float *)malloc(sizeof(float) * (size_t)(splits * rows));
        float *o = (float *)malloc(sizeof(float) * (size_t)(rows * dim + 1));
        float *l = (float *)malloc(sizeof(float) * (size_t)(rows + 1));
        double *sc = (double *)malloc(sizeof(double) * (size_t)sk);
        double *vv = (double *)malloc(sizeof(double) * (size_t)(sk * dim));
        double *want = (double *)malloc(sizeof(double) * (size_t)(rows * dim));
        double *wantl = (double *)malloc(sizeof(double) * (size_t)rows);
        int bounds[7];
        fa_status st;
        for (r = 0; r < rows * dim + 1; r++) o[r] = NAN;
        for (r = 0; r < rows + 1; r++) l[r] = NAN;
        for (r = 0; r < rows; r++) {
            int visible = r % 7 == 3 ? 0 : rng_int(&rng, 1, sk); /* keys [0, visible) are visible */
            double m = -INFINITY, sum = 0.0;
            /* split boundaries: sorted, empty ranges allowed */
            bounds[0] = 0; bounds[splits] = sk;
            for (s = 1; s < splits; s++) bounds[s] = rng_int(&rng, bounds[s - 1], sk);
            for (j = 0; j < sk; j++) {
                sc[j] = j < visible ? 3.0 * rng_normal(&rng) : -INFINITY;
                for (c = 0; c < dim; c++) vv[j * dim + c] = rng_normal(&rng);
                if (sc[j] > m) m = sc[j];
            }
            for (j = 0; j < sk; j++) sum += sc[j] == -INFINITY ? 0.0 : exp(sc[j] - m);
            wantl[r] = visible ? m + log(sum) : -INFINITY;
            for (c = 0; c < dim; c++) {
                double acc = 0.0;
                for (j = 0; j < visible; j++) acc += exp(sc[j] - wantl[r]) * vv[j * dim + c];
                want[r * dim + c] = acc;
            }
            for (s = 0; s < splits; s++) { /* each split normalized within itself */
                double ms = -INFINITY, ls = 0.0, L;
                for (j = bounds[s]; j < bounds[s + 1]; j++) if (sc[j] > ms) ms = sc[j];
                for (j = bounds[s]; j < bounds[s + 1]; j++) ls += sc[j] == -INFINITY ? 0.0 : exp(sc[j] - ms);
                L = ms == -INFINITY ? -INFINITY : ms + log(ls);
                lp[s * rows + r] = (float)L;
                for (c = 0; c < dim; c++) {
                    double acc = 0.0;
                    if (L != -INFINITY)
                        for (j = bounds[s]; j < bounds[s + 1]; j++)
                            if (sc[j] != -INFINITY) acc += exp(sc[j] - L) * vv[j * dim + c];
                    op[((int64_t)s * rows + r) * dim + c] = (float)acc;
                }
            }
        }
        st = fa_merge(splits, rows, dim, op, lp, o, trial % 4 == 3 ? NULL : l);
        if (check(st == FA_OK, "merge seed=%llu: status %d (%s)", (unsigned long long)seed, (int)st, fa_last_error())) {
            for (r = 0; r < rows; r++) {
                for (c = 0; c < dim; c++) {
                    double g = o[r * dim + c], w = want[r * dim + c];
                    if (!(fabs(g - w) <= 1e-5 + 1e-4 * fabs(w)) || (wantl[r] == -INFINITY && g != 0.0)) {
                        if (bad < 3) printf("  merge row %lld col %d: got %g want %g\n", (long long)r, c, g, w);
                        bad++;
                    }
                }
                if (trial % 4 != 3) {
                    if (wantl[r] == -INFINITY ? l[r] != -INFINITY : !(fabs(l[r] - wantl[r]) <= 1e-5 + 1e-6 * fabs(wantl[r]))) {
                        if (bad < 3) printf("  merge row %lld lse: got %g want %g\n", (long long)r, l[r], wantl[r]);
                        bad++;
                    }
                }
            }
            bad += o[rows * dim] == o[rows * dim]; /* nothing past the end */
            bad += l[rows] == l[rows];
            check(bad == 0, "merge seed=%llu splits=%d rows=%lld dim=%d%s: %lld bad", (unsigned long long)seed,
                  splits, (long long)rows, dim, trial % 4 == 3 ? " lse=NULL" : "", (long long)bad);
        }
        free(op); free(lp); free(o); free(l); free(sc); free(vv); free(want); free(wantl);
    }
}

/* ==========================================================================
   >>determinism  same bytes run to run and on any thread count
   ========================================================================== */

static void pf_reverse(void *user, int n, fa_task_fn task, void *ctx)
{
    int i;
    (void)user;
    for (i = n - 1; i >= 0; i--) task(ctx, i, (n - 1 - i) % 3);
}

typedef struct pool_job {
    pthread_mutex_t mu;
    int next, n, worker_seq;
    fa_task_fn task;
    void *ctx;
} pool_job;

static void *pool_worker(void *arg)
{
    pool_job *j = (pool_job *)arg;
    int me, i;
    pthread_mutex_lock(&j->mu);
    me = j->worker_seq++;
    pthread_mutex_unlock(&j->mu);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        i = j->next++;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->n) break;
        j->task(j->ctx, i, me);
    }
    return NULL;
}

/* Three real threads claiming tasks dynamically. */
static void pf_threads3(void *user, int n, fa_task_fn task, void *ctx)
{
    pool_job j;
    pthread_t th[3];
    int t;
    (void)user;
    pthread_mutex_init(&j.mu, NULL);
    j.next = 0; j.n = n; j.worker_seq = 0; j.task = task; j.ctx = ctx;
    for (t = 0; t < 3; t++) pthread_create(&th[t], NULL, pool_worker, &j);
    for (t = 0; t < 3; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
}

/* Run forward + backward + decode, return a hash-free concatenation of all output bytes. */
typedef struct det_out { unsigned char *bytes; size_t n; } det_out;

static void det_append(det_out *d, const void *p, size_t n)
{
    d->bytes = (unsigned char *)realloc(d->bytes, d->n + n);
    memcpy(d->bytes + d->n, p, n);
    d->n += n;
}

static det_out det_run(fa_dtype dt, uint64_t seed)
{
    det_out out = {NULL, 0};
    uint64_t rng = seed;
    attn a;
    const int sq = QUICK ? 77 : 203, sk = QUICK ? 131 : 250; /* (quick: still several tiles each way) */
    fcase c = fc(2, sq, sk, 4, 2, 64, 0, dt);
    tens o, dout, dq, dk, dv;
    float *lse;
    fa_status st;
    c.causal = 1; c.dropout = 0.1f; c.softcap = 8.0f; c.alibi = 1;
    attn_make(&a, &c, &rng);
    o = tens_make(dt, 2, sq, 4, 64, LAYOUT_PACKED, &rng);
    dout = tens_make(dt, 2, sq, 4, 64, LAYOUT_PACKED, &rng);
    tens_fill(&dout, &rng, 1.0);
    dq = tens_make(dt, 2, sq, 4, 64, LAYOUT_PACKED, &rng);
    dk = tens_make(dt, 2, sk, 2, 64, LAYOUT_PACKED, &rng);
    dv = tens_make(dt, 2, sk, 2, 64, LAYOUT_PACKED, &rng);
    lse = lse_make(ref_lse_count(&a.p));
    st = fa_forward(&a.p, a.q.t, a.k.t, a.v.t, o.t, lse, NULL, 0);
    st = st == FA_OK ? fa_backward(&a.p, a.q.t, a.k.t, a.v.t, o.t, dout.t, lse, dq.t, dk.t, dv.t, NULL, 0) : st;
    check(st == FA_OK, "determinism run: %s", fa_last_error());
    det_append(&out, o.buf, (size_t)o.n * dt_size(dt));
    det_append(&out, lse, sizeof(float) * (size_t)ref_lse_count(&a.p));
    det_append(&out, dq.buf, (size_t)dq.n * dt_size(dt));
    det_append(&out, dk.buf, (size_t)dk.n * dt_size(dt));
    det_append(&out, dv.buf, (size_t)dv.n * dt_size(dt));
    { /* decode with automatic splits, appending */
        fa_problem p;
        int32_t used[2] = {600, 3};
        tens kc = tens_make(dt, 2, 700, 2, 64, LAYOUT_PACKED, &rng), vc = tens_make(dt, 2, 700, 2, 64, LAYOUT_PACKED, &rng);
        tens q = tens_make(dt, 2, 2, 4, 64, LAYOUT_PACKED, &rng), kn = tens_make(dt, 2, 2, 2, 64, LAYOUT_PACKED, &rng);
        tens vn = tens_make(dt, 2, 2, 2, 64, LAYOUT_PACKED, &rng), od = tens_make(dt, 2, 2, 4, 64, LAYOUT_PACKED, &rng);
        float ld[16];
        tens_fill(&kc, &rng, 1.0); tens_fill(&vc, &rng, 1.0); tens_fill(&q, &rng, 1.0);
        tens_fill(&kn, &rng, 1.0); tens_fill(&vn, &rng, 1.0);
        memset(&p, 0, sizeof p);
        p.batch = 2; p.seqlen_q = 2; p.seqlen_k = 700; p.heads_q = 4; p.heads_kv = 2; p.head_dim = 64;
        p.seqlens_k = used; p.causal = 1;
        check(fa_decode(&p, q.t, kc.t, vc.t, kn.t, vn.t, od.t, ld, NULL, 0) == FA_OK, "determinism decode: %s", fa_last_error());
        det_append(&out, od.buf, (size_t)od.n * dt_size(dt));
        det_append(&out, ld, sizeof ld);
        det_append(&out, kc.buf, (size_t)kc.n * dt_size(dt));
        tens_free(&kc); tens_free(&vc); tens_free(&q); tens_free(&kn); tens_free(&vn); tens_free(&od);
    }
    free(lse);
    tens_free(&o); tens_free(&dout); tens_free(&dq); tens_free(&dk); tens_free(&dv);
    attn_free(&a);
    return out;
}

/* Two threads of the caller each running their own forward at once must get
   the bytes a lone call gets (the library keeps no state between calls). */
typedef struct conc_job { attn a; tens o; float *lse; fa_status st; } conc_job;

static void *conc_thread(void *arg)
{
    conc_job *j = (conc_job *)arg;
    j->st = fa_forward(&j->a.p, j->a.q.t, j->a.k.t, j->a.v.t, j->o.t, j->lse, NULL, 0);
    return NULL;
}

static void test_concurrent_calls(void)
{
    conc_job j[2];
    pthread_t th[2];
    int t, same = 1;
    unsigned char *solo[2];
    size_t bytes[2];
    for (t = 0; t < 2; t++) {
        uint64_t rng = case_seed(12, t);
        fcase c = fc(2, 150 + 50 * t, 170, 4, 2, 32, 0, t ? FA_F16 : FA_F32);
        c.causal = t; c.dropout = 0.2f;
        attn_make(&j[t].a, &c, &rng);
        j[t].o = tens_make(c.dt, 2, c.sq, 4, 32, LAYOUT_PACKED, &rng);
        j[t].lse = lse_make(ref_lse_count(&j[t].a.p));
        conc_thread(&j[t]);
        bytes[t] = (size_t)j[t].o.n * dt_size(c.dt);
        solo[t] = (unsigned char *)malloc(bytes[t]);
        memcpy(solo[t], j[t].o.buf, bytes[t]);
        { int64_t i; for (i = 0; i < j[t].o.n; i++) tens_set_bits_nan(&j[t].o, i); } /* poison again */
    }
    for (t = 0; t < 2; t++) pthread_create(&th[t], NULL, conc_thread, &j[t]);
    for (t = 0; t < 2; t++) pthread_join(th[t], NULL);
    for (t = 0; t < 2; t++) {
        same &= j[t].st == FA_OK && !memcmp(solo[t], j[t].o.buf, bytes[t]);
        free(solo[t]); free(j[t].lse); tens_free(&j[t].o); attn_free(&j[t].a);
    }
    check(same, "two concurrent fa_forward calls from two threads: results differ from lone calls (seeds %llu, %llu)",
          (unsigned long long)case_seed(12, 0), (unsigned long long)case_seed(12, 1));
}

static void test_determinism(void)
{
    static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    int t;
    for (t = 0; t < 3; t++) {
        uint64_t seed = case_seed(10, t);
        det_out base, again, rev, thr;
        fa_set_parallel_for(NULL, NULL, 0);
        base = det_run(dts[t], seed);
        again = det_run(dts[t], seed);
        fa_set_parallel_for(pf_reverse, NULL, 3);
        rev = det_run(dts[t], seed);
        fa_set_parallel_for(pf_threads3, NULL, 3);
        thr = det_run(dts[t], seed);
        fa_set_parallel_for(NULL, NULL, 0);
#ifdef _OPENMP
        { /* the OpenMP fallback on 1 and 3 threads */
            int nt = omp_get_max_threads();
            det_out o1, o3;
            omp_set_num_threads(1);
            o1 = det_run(dts[t], seed);
            omp_set_num_threads(3);
            o3 = det_run(dts[t], seed);
            omp_set_num_threads(nt);
            check(base.n == o1.n && !memcmp(base.bytes, o1.bytes, base.n) && base.n == o3.n &&
                  !memcmp(base.bytes, o3.bytes, base.n), "determinism %s seed=%llu: OpenMP on 1 / 3 threads differs",
                  dt_name(dts[t]), (unsigned long long)seed);
            free(o1.bytes); free(o3.bytes);
        }
#endif
        check(base.n == again.n && !memcmp(base.bytes, again.bytes, base.n), "determinism %s seed=%llu: run to run differs",
              dt_name(dts[t]), (unsigned long long)seed);
        check(base.n == rev.n && !memcmp(base.bytes, rev.bytes, base.n),
              "determinism %s seed=%llu: reverse-order parallel-for (3 workers) differs from default", dt_name(dts[t]),
              (unsigned long long)seed);
        check(base.n == thr.n && !memcmp(base.bytes, thr.bytes, base.n),
              "determinism %s seed=%llu: 3-thread parallel-for differs from default", dt_name(dts[t]), (unsigned long long)seed);
        free(base.bytes); free(again.bytes); free(rev.bytes); free(thr.bytes);
    }
    { /* and the results under a custom parallel-for are still right */
        fcase c = fc(2, 113, 203, 4, 2, 32, 0, FA_F32);
        c.causal = 1; c.backward = 1;
        fa_set_parallel_for(pf_threads3, NULL, 3);
        run_attention(&c, case_seed(10, 50));
        fa_set_parallel_for(pf_reverse, NULL, 3);
        c.dt = FA_F16; c.varlen = 1; run_attention(&c, case_seed(10, 51));
        fa_set_parallel_for(NULL, NULL, 0);
    }
}

/* ==========================================================================
   >>nonfinite  NaN / Inf inputs: no crash, valid status
   ========================================================================== */

static void test_nonfinite_inputs(void)
{
    static const fa_dtype dts[3] = {FA_F32, FA_F16, FA_BF16};
    int t, which;
    for (t = 0; t < 3; t++)
        for (which = 0; which < 4; which++) {
            uint64_t seed = case_seed(11, t * 4 + which), rng = seed;
            attn a;
            fcase c = fc(2, 33, 70, 2, 1, 16, 0, dts[t]);
            tens o, dout, dq, dk, dv;
            float *lse;
            int64_t i;
            fa_status s1, s2;
            c.causal = which % 2;
            attn_make(&a, &c, &rng);
            for (i = 0; i < a.q.n; i += 17) if (a.q.live[i]) ref_put(a.q.t, i, which < 2 ? NAN : INFINITY);
            for (i = 0; i < a.k.n; i += 29) if (a.k.live[i]) ref_put(a.k.t, i, which == 1 ? -INFINITY : NAN);
            for (i = 0; i < a.v.n; i += 31) if (a.v.live[i]) ref_put(a.v.t, i, which == 3 ? INFINITY : NAN);
            o = tens_make(dts[t], 2, 33, 2, 16, LAYOUT_PACKED, &rng);
            dout = tens_make(dts[t], 2, 33, 2, 16, LAYOUT_PACKED, &rng);
            tens_fill(&dout, &rng, 1.0);
            dq = tens_make(dts[t], 2, 33, 2, 16, LAYOUT_PACKED, &rng);
            dk = tens_make(dts[t], 2, 70, 1, 16, LAYOUT_PACKED, &rng);
            dv = tens_make(dts[t], 2, 70, 1, 16, LAYOUT_PACKED, &rng);
            lse = lse_make(ref_lse_count(&a.p));
            s1 = fa_forward(&a.p, a.q.t, a.k.t, a.v.t, o.t, lse, NULL, 0);
            s2 = fa_backward(&a.p, a.q.t, a.k.t, a.v.t, o.t, dout.t, lse, dq.t, dk.t, dv.t, NULL, 0);
            check(s1 == FA_OK && s2 == FA_OK, "NaN/Inf inputs %s seed=%llu: forward %d backward %d (no crash, data is not validated)",
                  dt_name(dts[t]), (unsigned long long)seed, (int)s1, (int)s2);
            free(lse);
            tens_free(&o); tens_free(&dout); tens_free(&dq); tens_free(&dk); tens_free(&dv);
            attn_free(&a);
        }
}

static double now(void) { return (double)clock() / CLOCKS_PER_SEC; }

int main(int argc, char **argv)
{
    double t0 = now();
    const char *env = getenv("FA_TEST_QUICK");
    if ((argc > 1 && !strcmp(argv[1], "--quick")) || (env && *env && strcmp(env, "0"))) QUICK = 1;
    if (env && !strcmp(env, "2")) QUICK = 2;
    printf("test_cpu%s\n", QUICK > 1 ? " (quick, one dtype a case)" : QUICK ? " (quick)" : "");
    test_philox();
    test_conversions();
    test_exp2_row();
    printf("conversions: %.1fs cpu\n", now() - t0);
    test_resolve();
    test_attention_grid();
    printf("attention: %.1fs cpu\n", now() - t0);
    test_fully_masked();
    test_block_sparse();
    printf("block masks: %.1fs cpu\n", now() - t0);
    test_finite_differences();
    printf("finite differences: %.1fs cpu\n", now() - t0);
    test_decode();
    printf("decode: %.1fs cpu\n", now() - t0);
    test_merge();
    test_determinism();
    test_concurrent_calls();
    test_nonfinite_inputs();
    printf("total: %.1fs cpu\n", now() - t0);
    return summary("test_cpu");
}
