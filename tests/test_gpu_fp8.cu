/* tests/test_gpu_fp8.cu - FP8 (e4m3) on the GPU, on fresh random inputs:

   1. fa_quantize_cuda against the CPU fa_quantize, bit for bit (inputs
      N(0,1) + N(0,100) Bernoulli(0.001), the FlashAttention-3 outlier mix):
      every role, per block and per tensor, with and without the Hadamard
      rotation, odd lengths, variable-length batches, padded strides, head
      dims from 16 to 256. Every output byte is compared, padding included,
      and so is every descale with guard entries either side: both sides
      start NaN-poisoned (0x7f codes, NaN descales), so a value one side
      fails to write shows.
   2. fa_forward_cuda on e4m3 Q, K, V made by fa_quantize_cuda on the device
      (tests/fp8_attn.h has the cases, the references and the tolerances):
      head dims 64, 128, 256; causal, sliding window, GQA / MQA, variable
      length with an empty sequence, L, odd lengths, seqlen_q != seqlen_k;
      per block and per tensor, with and without the Hadamard rotation; O in
      f16 and bf16, NaN-poisoned (padding too, which must stay), L poisoned
      with guards. Against the fp64 reference on the DEQUANTIZED inputs and
      against the CPU fa_forward on the same e4m3 inputs (the CPU twin), at
      tolerances that allow P's rounding to e4m3 (tests/fp8_calibrate.c);
      the same call twice gives the same bytes.
   3. Refusals a correct FP8 kernel still makes (o in e4m3, mixed dtypes,
      descales given twice or for a non-e4m3 tensor, a NaN descale), each
      naming its argument and writing nothing; and an f32 x for the
      quantizer.
   4. The softmax's exponentials on the FMA pipe (fa__exp2_fma) against
      exp2.
   Built with the default head dims, as users build it.

   Build: make build/test_gpu_fp8   (nvcc, sm_80 and sm_90a)
   Run:   build/test_gpu_fp8          (all cases)
          build/test_gpu_fp8 --quick  (small cases: for compute-sanitizer)
   With -DFA_EMU (build/test_gpu_fp8_fwd_emu, make test-gpu-emu) the forward
   and the quantizer run on the CPU (tests/emu_cuda.h; the quantizer's e4m3
   rounding there is the CPU's function, which part 1 holds the GPU's
   instruction to on a GPU).
   Ends with the line "N passed, M failed". */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "test_util.h"

#ifdef FA_EMU /* the forward and the quantizer on the CPU (make test-gpu-emu): tests/emu_cuda.h */
#define FLASHATTN_CUDA_EMU_FWD
#define FA__QUANT_RING_CTAS 3 /* the quantizer's ring kernel walks several blocks a CTA in the small cases too */
#include "emu_cuda.h"
#else
#include <cuda_runtime.h>
#endif

#include "cuda_check.h"

typedef struct gcase {
    fa_dtype dt;
    fa_quant_role role;
    int batch, seqlen, heads, d, per_tensor, hadamard, varlen, layout;
    uint64_t seed;
} gcase;

static void run_case(const gcase *c)
{
    uint64_t rng = c->seed * 7919 + 3;
    int32_t cu[17];
    int b, nb;
    int64_t total, count = 0, k, bad_codes = 0, bad_scales = 0;
    tens x, e;
    fa_quant p;
    void *d_x, *d_out;
    float *d_ds, *ds_cpu, *ds_gpu;
    int32_t *d_cu = NULL;
    uint8_t *gpu_out;
    fa_status s1, s2;
    char ctx[200];
    cu[0] = 0;
    for (b = 0; b < c->batch; b++) cu[b + 1] = cu[b] + (c->varlen ? rng_int(&rng, 0, c->seqlen) : c->seqlen);
    nb = c->varlen ? 1 : c->batch;
    total = c->varlen ? cu[c->batch] : c->seqlen;
    x = tens_make(c->dt, nb, (int)(total ? total : 1), c->heads, c->d, c->layout, &rng);
    e = tens_make(FA_E4M3, nb, x.seq, c->heads, c->d, c->layout, &rng);
    tens_fill_outliers(&x, &rng);
    memset(&p, 0, sizeof p);
    p.role = c->role; p.batch = c->batch; p.seqlen = c->seqlen; p.heads = c->heads; p.head_dim = c->d;
    p.per_tensor = c->per_tensor; p.hadamard = c->hadamard; p.seed = c->seed ^ 0x5eedull;
    fa_quantize_descales(&p, &count);
    ds_cpu = (float *)malloc((size_t)(count + 16) * sizeof(float));
    ds_gpu = (float *)malloc((size_t)(count + 16) * sizeof(float));
    gpu_out = (uint8_t *)malloc((size_t)e.n);
    for (k = 0; k < count + 16; k++) ds_cpu[k] = NAN;
    snprintf(ctx, sizeof ctx, "seed=%llu %s role=%d b%d s%d h%d d%d per_tensor=%d hadamard=%d varlen=%d layout=%d",
             (unsigned long long)c->seed, dt_name(c->dt), (int)c->role, c->batch, c->seqlen, c->heads, c->d,
             c->per_tensor, c->hadamard, c->varlen, c->layout);
    /* the CPU twin on the host copy */
    if (c->varlen) p.cu_seqlens = cu;
    s1 = fa_quantize(&p, x.t, e.t, ds_cpu + 8);
    /* the GPU on a device copy of the same buffers (padding included) */
    CK(cudaMalloc(&d_x, (size_t)x.n * dt_size(c->dt)));
    CK(cudaMalloc(&d_out, (size_t)e.n));
    CK(cudaMalloc((void **)&d_ds, (size_t)(count + 16) * sizeof(float)));
    CK(cudaMemcpy(d_x, x.buf, (size_t)x.n * dt_size(c->dt), cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0x7f, (size_t)e.n));
    CK(cudaMemset(d_ds, 0xff, (size_t)(count + 16) * sizeof(float))); /* NaN bits */
    if (c->varlen) {
        CK(cudaMalloc((void **)&d_cu, sizeof cu));
        CK(cudaMemcpy(d_cu, cu, sizeof cu, cudaMemcpyHostToDevice));
        p.cu_seqlens = d_cu;
    }
    {
        fa_tensor tx = x.t, te = e.t;
        tx.data = d_x;
        te.data = d_out;
        s2 = fa_quantize_cuda(&p, tx, te, d_ds + 8, NULL);
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(gpu_out, d_out, (size_t)e.n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ds_gpu, d_ds, (size_t)(count + 16) * sizeof(float), cudaMemcpyDeviceToHost));
    if (check(s1 == FA_OK && s2 == FA_OK, "%s: fa_quantize %d, fa_quantize_cuda %d: %s", ctx, (int)s1, (int)s2,
              fa_last_error())) {
        for (k = 0; k < e.n; k++) {
            uint8_t want = e.live[k] ? ((uint8_t *)e.buf)[k] : 0x7f;
            if (gpu_out[k] != want) {
                if (bad_codes < 4)
                    printf("  %s: byte %lld: gpu 0x%02x cpu 0x%02x%s\n", ctx, (long long)k, gpu_out[k], want,
                           e.live[k] ? "" : " (padding)");
                bad_codes++;
            }
        }
        for (k = 0; k < count + 16; k++) {
            int guard = k < 8 || k >= count + 8;
            uint32_t g = ref_f32_bits(ds_gpu[k]), w = ref_f32_bits(ds_cpu[k]);
            if (guard ? g != 0xffffffffu : g != w) {
                if (bad_scales < 4)
                    printf("  %s: descale[%lld]: gpu %.9g cpu %.9g%s\n", ctx, (long long)k - 8, ds_gpu[k], ds_cpu[k],
                           guard ? " (guard)" : "");
                bad_scales++;
            }
        }
        check(!bad_codes, "%s: %lld e4m3 bytes differ from the CPU's", ctx, (long long)bad_codes);
        check(!bad_scales, "%s: %lld descales differ from the CPU's", ctx, (long long)bad_scales);
    }
    CK(cudaFree(d_x)); CK(cudaFree(d_out)); CK(cudaFree(d_ds));
    if (d_cu) CK(cudaFree(d_cu));
    free(ds_cpu); free(ds_gpu); free(gpu_out);
    tens_free(&x); tens_free(&e);
}

#include "fp8_attn.h"

/* ---- 2. FP8 attention ------------------------------------------------------------ */

static int g_fp8_absent; /* fa_forward_cuda refused e4m3 as "not in this build" */

static float *nan_floats(int64_t n)
{
    float *x = (float *)malloc((size_t)n * sizeof(float));
    int64_t i;
    for (i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* One case: quantize on the device, copy the codes and descales back for
   the references, run the forward twice, judge it. */
static void run_attn_case(const fp8_case *c, cudaStream_t st)
{
    fp8_run r;
    fa_quant qd[3];
    fa_tensor te[3];
    fa_problem pd;
    void *d_x[3], *d_e[3], *d_o, *d_o2;
    float *d_ds[3], *d_lse, *lse, *lse2;
    int32_t *d_cuq = NULL, *d_cuk = NULL;
    uint64_t rng = c->seed + 77;
    tens o, o2;
    fa_status s;
    int64_t nlg;
    int i;
    fp8_setup(&r, c);
    if (c->varlen) {
        CK(cudaMalloc((void **)&d_cuq, sizeof r.cuq));
        CK(cudaMalloc((void **)&d_cuk, sizeof r.cuk));
        CK(cudaMemcpy(d_cuq, r.cuq, sizeof r.cuq, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_cuk, r.cuk, sizeof r.cuk, cudaMemcpyHostToDevice));
    }
    for (i = 0; i < 3; i++) { /* the quantizer on the device; its results stay there for the forward */
        fa_tensor tx = to_dev(&r.x[i], &d_x[i]);
        te[i] = to_dev(&r.e[i], &d_e[i]); /* 0x7f (NaN) everywhere: the quantizer writes the logical bytes */
        CK(cudaMalloc((void **)&d_ds[i], (size_t)r.nds[i] * sizeof(float)));
        CK(cudaMemcpy(d_ds[i], r.ds[i], (size_t)r.nds[i] * sizeof(float), cudaMemcpyHostToDevice)); /* NaN */
        qd[i] = r.qp[i];
        if (c->varlen) qd[i].cu_seqlens = i ? d_cuk : d_cuq;
        s = fa_quantize_cuda(&qd[i], tx, te[i], d_ds[i], st);
        check(s == FA_OK, "%s: fa_quantize_cuda role %d: %s", r.ctx, i, fa_last_error());
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    for (i = 0; i < 3; i++) {
        from_dev(&r.e[i], d_e[i]);
        CK(cudaMemcpy(r.ds[i], d_ds[i], (size_t)r.nds[i] * sizeof(float), cudaMemcpyDeviceToHost));
    }
    fp8_reference(&r); /* also sets r.p's descales (host): the per-tensor values are read there */

    /* the forward: device arrays everywhere; outputs NaN, L with 8 guards each side */
    pd = r.p;
    pd.cu_seqlens_q = d_cuq;
    pd.cu_seqlens_k = d_cuk;
    if (!c->per_tensor) { pd.descale_q_block = d_ds[0]; pd.descale_k_block = d_ds[1]; pd.descale_v_block = d_ds[2]; }
    o = tens_make_aligned(c->out_dt, r.nbq, r.seqq, c->hq, c->d, c->padded, 8, &rng);
    tens_snapshot(&o);
    o2 = tens_clone(&o);
    nlg = r.nl + 16;
    lse = nan_floats(nlg);
    lse2 = nan_floats(nlg);
    (void)to_dev(&o, &d_o);
    (void)to_dev(&o2, &d_o2);
    CK(cudaMalloc((void **)&d_lse, (size_t)nlg * sizeof(float)));
    CK(cudaMemcpy(d_lse, lse, (size_t)nlg * sizeof(float), cudaMemcpyHostToDevice));
    {
        fa_tensor to = o.t;
        to.data = d_o;
        s = fa_forward_cuda(&pd, te[0], te[1], te[2], to, c->lse ? d_lse + 8 : NULL, NULL, 0, st);
    }
    if (s == FA_ERROR_UNSUPPORTED && strstr(fa_last_error(), "not in this build")) {
        g_fp8_absent = 1;
        check(0, "%s: fa_forward_cuda refuses e4m3 (\"%s\"): the FP8 kernel is not in this build", r.ctx,
              fa_last_error());
    } else if (check(s == FA_OK, "%s: fa_forward_cuda: %s (%s)", r.ctx, fa_status_string(s), fa_last_error())) {
        int64_t g, bad_guard = 0;
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        from_dev(&o, d_o);
        CK(cudaMemcpy(lse, d_lse, (size_t)nlg * sizeof(float), cudaMemcpyDeviceToHost));
        for (g = 0; g < nlg; g++)
            bad_guard += (g < 8 || g >= r.nl + 8 || !c->lse) && lse[g] == lse[g];
        check(!bad_guard, "%s: %lld L entries written outside L (or with L not asked)", r.ctx, (long long)bad_guard);
        fp8_judge(&r, "fa_forward_cuda", &o, c->lse ? lse + 8 : NULL, 1);
        /* run to run: the same call into fresh NaN buffers, the same bytes */
        {
            fa_tensor to = o2.t;
            CK(cudaMemcpy(d_lse, lse2, (size_t)nlg * sizeof(float), cudaMemcpyHostToDevice));
            to.data = d_o2;
            s = fa_forward_cuda(&pd, te[0], te[1], te[2], to, c->lse ? d_lse + 8 : NULL, NULL, 0, st);
            CK(cudaStreamSynchronize(st));
            from_dev(&o2, d_o2);
            CK(cudaMemcpy(lse2, d_lse, (size_t)nlg * sizeof(float), cudaMemcpyDeviceToHost));
            check(s == FA_OK && !memcmp(o.buf, o2.buf, (size_t)o.n * dt_size(o.t.dtype)) &&
                      !memcmp(lse, lse2, (size_t)nlg * sizeof(float)),
                  "%s: a second identical call gives other bytes (or fails: %s)", r.ctx, fa_last_error());
        }
    }
    for (i = 0; i < 3; i++) { CK(cudaFree(d_x[i])); CK(cudaFree(d_e[i])); CK(cudaFree(d_ds[i])); }
    CK(cudaFree(d_o)); CK(cudaFree(d_o2)); CK(cudaFree(d_lse));
    if (d_cuq) { CK(cudaFree(d_cuq)); CK(cudaFree(d_cuk)); }
    tens_free(&o); tens_free(&o2);
    free(lse); free(lse2);
    fp8_free(&r);
}

static void test_attention(int quick)
{
    cudaStream_t st;
    fp8_case c;
    int i, skipped = 0;
    CK(cudaStreamCreate(&st));
    for (i = 0; fp8_case_at(quick, i, &c); i++) {
        if (g_fp8_absent) { skipped++; continue; }
        run_attn_case(&c, i % 2 ? st : NULL); /* the default stream and a stream of its own */
    }
    if (skipped) printf("test_gpu_fp8: %d more FP8 attention cases skipped (no FP8 kernel)\n", skipped);
    CK(cudaStreamDestroy(st));
}

/* ---- 3. refusals ------------------------------------------------------------------- */

/* Each call breaks one rule of a valid e4m3 call (section 5, FP8): the
   status, the named argument, and o and L untouched (NaN). */
static void test_refusals(void)
{
    enum { S = 8, D = 64, OUT = 8192 }; /* q, k, v at 0; o at 4096, L (and descale arrays) at 8192 */
    uint8_t *d, before[OUT], after[OUT];
    float *d_lse;
    fa_problem p;
    fa_tensor q, k, v, o;
    fa_quant qp;
    fa_status s;
    int i;
    const float nan_value = NAN;
    for (i = 0; i < OUT / 4; i++) memcpy(before + 4 * i, &nan_value, 4);
    CK(cudaMalloc((void **)&d, 4096 + OUT));
    CK(cudaMemset(d, 0x38, 3 * S * D)); /* q, k, v: e4m3 1.0 */
    d_lse = (float *)(void *)(d + 8192);
    for (i = 0; i < 9; i++) {
        static const char *field[9] = {"o.dtype", "k.dtype", "k.dtype", "v.dtype", "descale_q", "descale_k_block",
                                       "descale", "descale_v", "x.dtype"};
        const fa_status want = i == 0 || i == 8 ? FA_ERROR_UNSUPPORTED : FA_ERROR_INVALID_ARGUMENT;
        CK(cudaMemcpy(d + 4096, before, OUT, cudaMemcpyHostToDevice));
        memset(&p, 0, sizeof p);
        p.batch = 1; p.seqlen_q = p.seqlen_k = S; p.heads_q = 1; p.head_dim = D;
        memset(&q, 0, sizeof q);
        q.dtype = FA_E4M3;
        k = v = o = q;
        q.data = d; k.data = d + S * D; v.data = d + 2 * S * D;
        o.data = d + 4096; o.dtype = FA_BF16;
        switch (i) {
        case 0: o.dtype = FA_E4M3; break;
        case 1: k.dtype = FA_F16; break;                               /* q e4m3, k not */
        case 2: q.dtype = FA_BF16; break;                              /* q bf16, k and v e4m3 */
        case 3: v.dtype = FA_BF16; break;
        case 4: p.descale_q_block = d_lse; p.descale_q = 2.0f; break; /* both */
        case 5: p.descale_k_block = d_lse; q.dtype = k.dtype = v.dtype = FA_BF16; break;
        case 6: p.descale_k = NAN; break;
        case 7: p.descale_v_block = d_lse; p.descale_v = -1.0f; break;
        }
        if (i < 8) {
            s = fa_forward_cuda(&p, q, k, v, o, d_lse, NULL, 0, NULL);
        } else { /* the quantizer takes f16 / bf16 on the GPU */
            memset(&qp, 0, sizeof qp);
            qp.batch = 1; qp.seqlen = S; qp.heads = 1; qp.head_dim = D;
            q.dtype = FA_F32;
            s = fa_quantize_cuda(&qp, q, k, d_lse, NULL);
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(after, d + 4096, OUT, cudaMemcpyDeviceToHost));
        check(s == want && strstr(fa_last_error(), field[i]) && !memcmp(before, after, OUT),
              "refusal %d: want status %d naming %s, o, L and the descales untouched; got %d \"%s\"%s", i,
              (int)want, field[i], (int)s, fa_last_error(), memcmp(before, after, OUT) ? ", and a write" : "");
    }
    CK(cudaFree(d));
}

/* 4. fa__exp2_fma, the FMA-pipe share of the FP8 kernel's exponentials
   (fa__sm90_cfg's EXP_FMA), against exp2 in double: within 1e-4 relative
   from -125 to 127, exactly 0 at -127 and below (-inf included), NaN for
   NaN. The forward's cases above cannot see an error this small, P being
   rounded to e4m3 after it. On the GPU: a kernel of one thread an x. */
#ifndef FA_EMU
static __global__ void exp2_fma_kernel(const float *x, float *y, int n)
{
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) y[i] = fa__exp2_fma(x[i]);
}
#endif
static void test_exp2_fma(void)
{
    enum { STEPS = 300000, N = STEPS + 3 };
    float *x = (float *)malloc(N * sizeof(float)), *y = (float *)malloc(N * sizeof(float));
    double worst = 0.0;
    int i, bad = 0;
    for (i = 0; i < STEPS; i++) x[i] = -135.0f + 265.0f * (float)i / (float)STEPS; /* -135 .. 130 */
    x[STEPS] = -INFINITY, x[STEPS + 1] = NAN, x[STEPS + 2] = -127.0f;
#ifdef FA_EMU
    for (i = 0; i < N; i++) y[i] = fa__exp2_fma(x[i]);
#else
    float *d;
    CK(cudaMalloc((void **)&d, 2 * N * sizeof(float)));
    CK(cudaMemcpy(d, x, N * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemset(d + N, 0xff, N * sizeof(float))); /* NaN: an x the kernel misses shows */
    exp2_fma_kernel<<<(N + 255) / 256, 256>>>(d, d + N, N);
    CK(cudaGetLastError());
    CK(cudaMemcpy(y, d + N, N * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
#endif
    for (i = 0; i < N; i++) {
        if (x[i] != x[i]) bad += y[i] == y[i];
        else if (x[i] <= -127.0f) bad += y[i] != 0.0f;
        else if (x[i] >= -125.0f && x[i] <= 127.0f) {
            const double r = fabs((double)y[i] / exp2((double)x[i]) - 1.0);
            if (!(r <= worst)) worst = r; /* (a NaN y sets it NaN: fails below) */
        }
    }
    check(bad == 0 && worst <= 1e-4, "fa__exp2_fma: %d wrong at -127 and below or for NaN; worst relative error %.3g "
          "from -125 to 127 (at most 1e-4)", bad, worst);
    free(x);
    free(y);
}

int main(int argc, char **argv)
{
    int quick = (argc > 1 && !strcmp(argv[1], "--quick")) || getenv("FA_QUICK"), i;
    static const int dims[6] = {64, 128, 256, 16, 40, 96};
    for (i = 0; i < (quick ? 12 : 48); i++) {
        gcase c;
        memset(&c, 0, sizeof c);
        c.seed = 500 + (uint64_t)i;
        c.dt = i % 2 ? FA_BF16 : FA_F16;
        c.d = dims[i % 6];
        c.hadamard = (c.d & (c.d - 1)) == 0 && (i / 6) % 2 == 0;
        c.role = (fa_quant_role)(c.hadamard ? (i / 3) % 2 : i % 3);
        c.batch = 1 + i % 3;
        c.seqlen = quick ? 1 + (i * 37) % 200 : 1 + (i * 211) % 1500;
        c.heads = 1 + (i * 5) % 4;
        c.per_tensor = i % 4 == 1;
        c.varlen = i % 5 == 2;
        c.layout = i % 3 == 0 ? LAYOUT_PADDED : LAYOUT_PACKED;
        run_case(&c);
    }
    for (i = 0; i < 3; i++) { /* rotated, 16-byte rows, no cu_seqlens: sm_90's ring kernel, 24 blocks or more */
        gcase c;
        memset(&c, 0, sizeof c);
        c.seed = 600 + (uint64_t)i;
        c.dt = i % 2 ? FA_BF16 : FA_F16;
        c.d = 64 << i;
        c.hadamard = 1;
        c.role = (fa_quant_role)(i % 2);
        c.batch = 2;
        c.seqlen = 700 + 13 * i;
        c.heads = 2;
        c.per_tensor = i == 1;
        c.layout = LAYOUT_PACKED;
        run_case(&c);
    }
    if (!quick) { /* FlashAttention-3's accuracy shape, B2 H16 N4096 D128 */
        gcase c;
        memset(&c, 0, sizeof c);
        c.dt = FA_BF16; c.role = FA_QUANT_K; c.batch = 2; c.seqlen = 4096; c.heads = 16; c.d = 128;
        c.hadamard = 1; c.layout = LAYOUT_PACKED; c.seed = 4096;
        run_case(&c);
        c.per_tensor = 1; c.dt = FA_F16; c.role = FA_QUANT_Q;
        run_case(&c);
        /* more blocks than the ring kernel's CTAs times its stages (sm_90: 264 CTAs of 4 stages at d 64, 132 of 3
           at d 256), so every stage is refilled and its mbarrier's parity turns */
        c.per_tensor = 0; c.dt = FA_BF16; c.role = FA_QUANT_K; c.batch = 2; c.seqlen = 8192 + 77; c.heads = 9;
        c.d = 64; c.seed = 4097;
        run_case(&c);
        c.dt = FA_F16; c.batch = 1; c.seqlen = 4096 + 5; c.heads = 16; c.d = 256; c.seed = 4098;
        run_case(&c);
    }
    test_attention(quick);
    test_refusals();
    test_exp2_fma();
    return summary("test_gpu_fp8");
}
