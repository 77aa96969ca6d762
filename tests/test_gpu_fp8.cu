/* tests/test_gpu_fp8.cu - fa_quantize_cuda against the CPU fa_quantize, bit
   for bit, on fresh random inputs (N(0,1) + N(0,100) Bernoulli(0.001), the
   FlashAttention-3 outlier mix): every role, per block and per tensor, with
   and without the Hadamard rotation, odd lengths, variable-length batches,
   padded strides, head dims from 16 to 256. Every output byte is compared,
   padding included, and so is every descale with guard entries either side:
   both sides start NaN-poisoned (0x7f codes, NaN descales), so a value one
   side fails to write shows. Then the refusals: an e4m3 fa_forward_cuda
   (the FP8 kernel is not in this build) and an f32 x.

   Build: make build/test_gpu_fp8   (nvcc, sm_80 and sm_90a)
   Run:   build/test_gpu_fp8          (all cases)
          build/test_gpu_fp8 --quick  (small cases: for compute-sanitizer)
   Ends with the line "N passed, M failed". */
#define FLASHATTN_IMPLEMENTATION
#ifndef FLASHATTN_HEAD_DIMS /* the forward kernels are not under test here: d 64's alone */
#define FLASHATTN_HEAD_DIMS 64
#endif
#include "../flashattn.h"
#include "test_util.h"

#include <cuda_runtime.h>

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

static void test_refusals(void)
{
    uint8_t *d;
    fa_problem p;
    fa_tensor q;
    fa_quant qp;
    float ds[1];
    fa_status s;
    CK(cudaMalloc((void **)&d, 1 << 16));
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen_q = p.seqlen_k = 8; p.heads_q = 1; p.head_dim = 64;
    memset(&q, 0, sizeof q);
    q.data = d; q.dtype = FA_E4M3;
    {
        fa_tensor o = q;
        o.dtype = FA_F16;
        s = fa_forward_cuda(&p, q, q, q, o, NULL, NULL, 0, NULL);
        check(s == FA_ERROR_UNSUPPORTED && strstr(fa_last_error(), "FP8"),
              "fa_forward_cuda with e4m3: want FA_ERROR_UNSUPPORTED naming FP8, got %d \"%s\"", (int)s, fa_last_error());
    }
    memset(&qp, 0, sizeof qp);
    qp.batch = 1; qp.seqlen = 8; qp.heads = 1; qp.head_dim = 64;
    {
        fa_tensor x = q, out = q;
        x.dtype = FA_F32;
        s = fa_quantize_cuda(&qp, x, out, (float *)(void *)(d + 4096), NULL);
        check(s == FA_ERROR_UNSUPPORTED && strstr(fa_last_error(), "x.dtype"),
              "fa_quantize_cuda with f32 x: want FA_ERROR_UNSUPPORTED naming x.dtype, got %d \"%s\"", (int)s,
              fa_last_error());
    }
    (void)ds;
    CK(cudaFree(d));
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
    if (!quick) { /* FlashAttention-3's accuracy shape, B2 H16 N4096 D128 */
        gcase c;
        memset(&c, 0, sizeof c);
        c.dt = FA_BF16; c.role = FA_QUANT_K; c.batch = 2; c.seqlen = 4096; c.heads = 16; c.d = 128;
        c.hadamard = 1; c.layout = LAYOUT_PACKED; c.seed = 4096;
        run_case(&c);
        c.per_tensor = 1; c.dt = FA_F16; c.role = FA_QUANT_Q;
        run_case(&c);
    }
    test_refusals();
    return summary("test_gpu_fp8");
}
