/* tests/fp8_calibrate.c - where tests/test_gpu_fp8.cu's FP8 attention
   tolerances (tests/fp8_attn.h, FP8_TOL) come from, on the CPU: the same
   cases, quantized by fa_quantize (bit-identical to fa_quantize_cuda),
   judged the same way, with the GPU kernel's output replaced by a
   simulation of an FP8 kernel:
     - P = exp(S - m) rounded to e4m3 before P V, raw in (0, 1] (subnormals
       below 2^-6, zero below 2^-10) or scaled by 256 first; m the row's
       final maximum (a running maximum is smaller, so P larger and rounded
       more finely: the final one is the worse case);
     - l summing the fp32 P (FlashAttention-3) or the rounded P;
     - with or without a model of the FP8 tensor cores' accumulator: each
       k-step of 32 products added with ACC_BITS bits below the leading bit
       of the largest addend, truncated (DeepSeek-V3 reports about 14 bits
       kept on H800; this model is rougher than the hardware, not exact);
     - O rounded to f16 / bf16, L to fp32.
   Then the same simulation with one bug each (a descale dropped, the block
   descales of the wrong block, V rows swapped, the GQA head map, the masks
   one key off, the scale of 2d): every case where the bug changes the
   exact output must fail the tolerances.

   Build: cc -std=c99 -O2 -Itests tests/fp8_calibrate.c -lm -o build/fp8_calibrate
          (make build/fp8_calibrate)
   Run:   build/fp8_calibrate [--quick]
   Prints, per model, the largest measures over the cases, and per bug the
   cases caught; ends with "N passed, M failed" (an accepted model over the
   tolerances fails, and so does a bug missed in a case where the bug alone,
   in exact arithmetic, is over them). Full list: about 10 minutes on one
   core of a shared Xeon; --quick: seconds. */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "fp8_attn.h"

enum { ACC_BITS = 13 };

typedef struct sim_model {
    const char *name;
    int accepted;  /* a design the tolerances must accept (else reported only) */
    int p_round;   /* 0: P exact; 1: e4m3(P); 2: e4m3(256 P) / 256 */
    int l_rounded; /* l sums the rounded P */
    int acc;       /* the ACC_BITS accumulator model */
    int gqa_mod;   /* bug: query head h reads KV head h % heads_kv */
    int mask_shift; /* bug: masks use i' + mask_shift */
} sim_model;

/* acc + the n terms t, added as one k-step of the tensor cores (acc_model:
   truncated to ACC_BITS bits below the leading bit of the largest addend). */
static double k_step(double acc, const double *t, int n, int acc_model)
{
    double s = acc, big = fabs(acc), q;
    int i;
    for (i = 0; i < n; i++) {
        s += t[i];
        if (fabs(t[i]) > big) big = fabs(t[i]);
    }
    if (!acc_model || big == 0.0) return s;
    q = ldexp(1.0, ilogb(big) - ACC_BITS);
    return trunc(s / q) * q;
}

static double round_p(double u, int mode)
{
    if (mode == 1) return ref_e4m3_value(ref_e4m3_encode(u));
    if (mode == 2) return ref_e4m3_value(ref_e4m3_encode(u * 256.0)) / 256.0;
    return u;
}

/* The simulated kernel: q, k, v the dequantized f32 tensors (packed), O into
   o (its dtype), L into lse (NULL: not asked). Causal, window, GQA, varlen. */
static void sim_forward(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v, const sim_model *m, tens *o,
                        float *lse)
{
    ref_dims r = ref_resolve(p);
    int64_t qs[3], ks[3], vs[3], i, j, maxk = 1;
    int b, h, c, n;
    double *s, *pq, t[32], acc;
    for (b = 0; b < p->batch; b++)
        if (ref_len_k(p, b) > maxk) maxk = ref_len_k(p, b);
    s = (double *)malloc(sizeof(double) * (size_t)maxk);
    pq = (double *)malloc(sizeof(double) * (size_t)maxk);
    ref_strides(q, p->seqlen_q, r.hq, r.d, qs);
    ref_strides(k, p->seqlen_k, r.hkv, r.d, ks);
    ref_strides(v, p->seqlen_k, r.hkv, r.dv, vs);
    for (b = 0; b < p->batch; b++) {
        int64_t sq = ref_len_q(p, b), sk = ref_len_k(p, b);
        for (h = 0; h < r.hq; h++) {
            int hk = m->gqa_mod ? h % r.hkv : h / r.group;
            for (i = 0; i < sq; i++) {
                int64_t qo = ref_offset(qs, p->cu_seqlens_q, b, i, h), row = ref_row_q(p, b, i);
                double mx = -INFINITY, l = 0.0;
                for (j = 0; j < sk; j++) {
                    int64_t ko = ref_offset(ks, p->cu_seqlens_k, b, j, hk);
                    s[j] = -INFINITY;
                    if (!ref_visible(p, i + m->mask_shift, j, sq, sk)) continue;
                    for (acc = 0.0, c = 0; c < r.d; c += 32) {
                        for (n = 0; n < 32 && c + n < r.d; n++) t[n] = ref_get(q, qo + c + n) * ref_get(k, ko + c + n);
                        acc = k_step(acc, t, n, m->acc);
                    }
                    s[j] = r.scale * acc;
                    if (s[j] > mx) mx = s[j];
                }
                for (j = 0; j < sk; j++) {
                    double u = s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                    pq[j] = round_p(u, m->p_round);
                    l += m->l_rounded ? pq[j] : u;
                }
                for (c = 0; c < r.dv; c++) {
                    for (acc = 0.0, j = 0; j < sk; j += 32) {
                        for (n = 0; n < 32 && j + n < sk; n++)
                            t[n] = pq[j + n] * ref_get(v, ref_offset(vs, p->cu_seqlens_k, b, j + n, hk) + c);
                        acc = k_step(acc, t, n, m->acc);
                    }
                    ref_put(o->t, tens_index(o, p->cu_seqlens_q ? 0 : b, p->cu_seqlens_q ? row : i, h, c),
                            mx == -INFINITY ? 0.0 : acc / l);
                }
                if (lse) lse[ref_lse_index(p, b, h, i)] = mx == -INFINITY ? -INFINITY : (float)(mx + log(l));
            }
        }
    }
    free(s);
    free(pq);
}

/* Run model m on the (possibly altered) inputs q, k, v under problem p, O
   in out_dt, and judge it against the case's true references. */
static double sim_judge(const fp8_run *r, const fa_problem *p, const tens *q, const tens *k, const tens *v,
                        const sim_model *m, fa_dtype out_dt, int record, fp8_err *ef)
{
    uint64_t rng = 1;
    tens o = tens_make(out_dt, r->nbq, r->seqq, r->c.hq, r->c.d, LAYOUT_PACKED, &rng);
    float *lse = (float *)malloc((size_t)(r->nl + 1) * sizeof(float));
    double x;
    sim_forward(p, q->t, k->t, v->t, m, &o, r->c.lse ? lse : NULL);
    fp8_measure(r, &o, r->c.lse ? lse : NULL, r->oref, r->lref, ef);
    x = fp8_judge(r, m->name, &o, r->c.lse ? lse : NULL, record);
    tens_free(&o);
    free(lse);
    return x;
}

enum { NMODEL = 7, NBUG = 9, BUG_BASE = 4 };
static const sim_model MODELS[NMODEL] = {
    {"P exact (the twin's way), O rounded", 1, 0, 0, 0, 0, 0},
    {"e4m3(P), l of fp32 P", 1, 1, 0, 0, 0, 0},
    {"e4m3(256 P) / 256, l of fp32 P", 1, 2, 0, 0, 0, 0},
    {"e4m3(256 P) / 256, l of rounded P", 1, 2, 1, 0, 0, 0},
    {"e4m3(P), l of fp32 P, 13-bit accumulator", 1, 1, 0, 1, 0, 0},
    {"e4m3(256 P) / 256, l of rounded P, 13-bit accumulator", 1, 2, 1, 1, 0, 0},
    /* l loses every P below 2^-10 (flushed to 0 in e4m3): biased on long rows */
    {"e4m3(P), l of rounded P (not accepted)", 0, 1, 1, 0, 0, 0},
};
static const char *BUGS[NBUG] = {"descale_v dropped", "descale_k dropped", "descale_q dropped",
                                 "K block descales one block off", "Q block descales one block off",
                                 "V rows swapped in pairs", "GQA head map h % heads_kv", "masks one key off",
                                 "scale of 2d"};

/* Case r's inputs with bug `bug` (deq tensors, problem); 0 if the bug does
   not apply to this case. The altered tensors go in a[3] (free them). */
static int make_bug(const fp8_run *r, int bug, fa_problem *p, tens a[3], sim_model *m)
{
    float *ds[3];
    float *shifted = NULL;
    int i, role = 0;
    int64_t n, nblk, k;
    *p = r->p;
    *m = MODELS[BUG_BASE];
    m->name = BUGS[bug];
    for (i = 0; i < 3; i++) a[i] = tens_clone(&r->deq[i]);
    for (i = 0; i < 3; i++) ds[i] = r->ds[i];
    switch (bug) {
    case 0: case 1: case 2: /* a descale left out (as 1) */
        role = bug == 0 ? 2 : bug == 1 ? 1 : 0;
        if (role == 0) { p->descale_q = 1.0f; p->descale_q_block = NULL; }
        if (role == 1) { p->descale_k = 1.0f; p->descale_k_block = NULL; }
        if (role == 2) { p->descale_v = 1.0f; p->descale_v_block = NULL; }
        break;
    case 3: case 4: /* per (b, h), block k reads block k + 1's descale (wrapping) */
        role = bug == 3 ? 1 : 0;
        nblk = role ? (r->c.sk + FLASHATTN_FP8_BLOCK_K - 1) / FLASHATTN_FP8_BLOCK_K
                    : (r->c.sq + FLASHATTN_FP8_BLOCK_Q - 1) / FLASHATTN_FP8_BLOCK_Q;
        if (r->c.per_tensor || nblk < 2) return 0;
        n = r->nds[role];
        shifted = (float *)malloc((size_t)n * sizeof(float));
        for (k = 0; k < n; k++) shifted[k] = ds[role][k - k % nblk + (k % nblk + 1) % nblk];
        ds[role] = shifted;
        fp8_set_descales(p, ds, 0);
        break;
    case 5: { /* V rows j and j ^ 1 swapped within each sequence */
        int b, h, c;
        int64_t j;
        for (b = 0; b < r->c.batch; b++)
            for (j = 0; j + 1 < ref_len_k(&r->p, b); j++)
                for (h = 0; h < r->c.hkv; h++)
                    for (c = 0; c < r->c.d; c++) {
                        int bb = r->c.varlen ? 0 : b;
                        int64_t t0 = r->c.varlen ? r->cuk[b] + j : j, t1 = t0 + ((j & 1) ? -1 : 1);
                        if ((j | 1) >= ref_len_k(&r->p, b)) continue; /* a last unpaired row stays */
                        ((float *)a[2].buf)[tens_index(&a[2], bb, t0, h, c)] =
                            ((float *)r->deq[2].buf)[tens_index(&r->deq[2], bb, t1, h, c)];
                    }
        return 1;
    }
    case 6:
        if (r->c.hkv == 1 || r->c.hkv == r->c.hq) return 0;
        m->gqa_mod = 1;
        return 1;
    case 7:
        if (!r->c.causal && !r->c.window) return 0;
        m->mask_shift = 1;
        return 1;
    case 8:
        p->scale = (float)(1.0 / sqrt(2.0 * r->c.d));
        return 1;
    }
    ref_fp8_dequantize(p, role, r->e[role].t, a[role].t);
    fp8_set_descales(p, r->ds, r->c.per_tensor); /* (the simulation reads a[], not the descales) */
    free(shifted);
    return 1;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick"), i, mi, bug;
    double worst[NMODEL][4] = {{0}}, bug_min[NBUG][4];
    int bug_cases[NBUG] = {0}, bug_caught[NBUG] = {0}, bug_over[NBUG] = {0}, bug_missed_over[NBUG] = {0};
    fp8_case c;
    for (bug = 0; bug < NBUG; bug++) bug_min[bug][0] = bug_min[bug][1] = bug_min[bug][2] = bug_min[bug][3] = INFINITY;
    printf("FP8 attention tolerances (tests/fp8_attn.h): O rel. RMSE %.3g, O element error / sum P|V| %.3g, "
           "L %.3g\n", FP8_TOL.o_rmse, FP8_TOL.o_elem, FP8_TOL.l_abs);
    for (i = 0; fp8_case_at(quick, i, &c); i++) {
        fp8_run r;
        int x;
        fp8_setup(&r, &c);
        for (x = 0; x < 3; x++)
            check(fa_quantize(&r.qp[x], r.x[x].t, r.e[x].t, r.ds[x]) == FA_OK, "%s: fa_quantize: %s", r.ctx,
                  fa_last_error());
        fp8_reference(&r);
        for (mi = 0; mi < NMODEL; mi++) {
            fp8_err e;
            sim_judge(&r, &r.p, &r.deq[0], &r.deq[1], &r.deq[2], &MODELS[mi], c.out_dt, MODELS[mi].accepted, &e);
            if (e.o_rmse > worst[mi][0]) worst[mi][0] = e.o_rmse;
            if (e.o_elem > worst[mi][1]) worst[mi][1] = e.o_elem;
            if (e.l_abs > worst[mi][2]) worst[mi][2] = e.l_abs;
            if (e.o_max > worst[mi][3]) worst[mi][3] = e.o_max;
        }
        for (bug = 0; bug < NBUG; bug++) {
            fa_problem p;
            tens a[3];
            sim_model m, m0;
            fp8_err e, exact;
            double ratio;
            int applies = make_bug(&r, bug, &p, a, &m);
            /* the bug must change the exact output (f32, nothing rounded):
               else there is nothing to catch */
            m0 = m;
            m0.p_round = 0; m0.acc = 0; m0.l_rounded = 0;
            double alone = applies ? sim_judge(&r, &p, &a[0], &a[1], &a[2], &m0, FA_F32, 0, &exact) : 0.0;
            if (applies && (exact.o_rmse > 1e-4 || exact.o_elem > 1e-3 || exact.l_abs > 1e-4 ||
                            exact.o_not_zero || exact.l_bad)) {
                ratio = sim_judge(&r, &p, &a[0], &a[1], &a[2], &m, c.out_dt, 0, &e);
                bug_cases[bug]++;
                bug_over[bug] += alone > 1.0;
                bug_caught[bug] += ratio > 1.0;
                bug_missed_over[bug] += alone > 1.0 && ratio <= 1.0;
                if (ratio <= 1.0)
                    printf("  not caught: %s in %s (error / tolerance %.2f; the bug alone, exact: %.2f: rmse %.3g "
                           "elem %.3g L %.3g)\n", BUGS[bug], r.ctx, ratio, alone, exact.o_rmse, exact.o_elem,
                           exact.l_abs);
                if (e.o_rmse < bug_min[bug][0]) bug_min[bug][0] = e.o_rmse;
                if (e.o_elem < bug_min[bug][1]) bug_min[bug][1] = e.o_elem;
                if (e.l_abs < bug_min[bug][2] && c.lse) bug_min[bug][2] = e.l_abs;
                if (ratio < bug_min[bug][3]) bug_min[bug][3] = ratio;
            }
            for (x = 0; x < 3; x++) tens_free(&a[x]);
        }
        fp8_free(&r);
    }
    printf("\n| model | O rel. RMSE | O elem / sum P|V| | L abs | O max abs |\n|---|---|---|---|---|\n");
    for (mi = 0; mi < NMODEL; mi++)
        printf("| %s | %.2e | %.3f | %.2e | %.2e |\n", MODELS[mi].name, worst[mi][0], worst[mi][1], worst[mi][2],
               worst[mi][3]);
    printf("| tolerance | %.2e | %.3f | %.2e | |\n", FP8_TOL.o_rmse, FP8_TOL.o_elem, FP8_TOL.l_abs);
    printf("\nbugs, each on the 13-bit accumulator model, over the cases where it changes the exact output; "
           "\"alone\": where the bug by itself (exact arithmetic) is over the tolerances; the smallest errors, "
           "each column on its own:\n"
           "| bug | changes | alone over | caught | O rel. RMSE | O elem | L abs | error / tolerance |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (bug = 0; bug < NBUG; bug++) {
        printf("| %s | %d | %d | %d | %.3g | %.3g | %.3g | %.3g |\n", BUGS[bug], bug_cases[bug], bug_over[bug],
               bug_caught[bug], bug_min[bug][0], bug_min[bug][1], bug_min[bug][2], bug_min[bug][3]);
        check((!bug_cases[bug] || bug_caught[bug] > 0) && !bug_missed_over[bug],
              "bug \"%s\": caught in %d cases, missed in %d where it alone is over the tolerances", BUGS[bug],
              bug_caught[bug], bug_missed_over[bug]);
    }
    return summary("fp8_calibrate");
}
