/* tests/test_gpu_backward.cu - fa_backward_cuda against the fp64 reference
   (tests/reference.h) and the CPU fa_backward, on fresh random inputs.

   Every case: random Q, K, V, dO (N(0,1), rounded to f16/bf16); O and L from
   the fp64 reference forward (O rounded to the dtype, L to fp32), so the
   backward's inputs are consistent; outputs poisoned with NaN (padding too,
   and the padding must stay untouched); odd lengths with seqlen_q != seqlen_k;
   every feature. Errors are relative L2 norms, ||gpu - ref|| / ||ref||, per
   output. Deterministic cases run three times and must agree bit for bit.
   A case that ran on the sm_90a kernel runs again with its grid capped at
   3 persistent blocks ("[3 blocks]": each walks many units) and on the
   sm_80 kernel ("[sm80]"), so one H100 tests every path; on an H100 every
   case must take the sm_90a kernel but variable-length ones, those of
   the d 32 kernel and deterministic ones with softcap, ALiBi or dropout
   at d <= 128. (Deterministic cases on the sm_90a kernel: "[3 blocks]"
   caps nothing there, the kernel takes a block per unit.) First, the sm_90a kernel's per-element steps for
   softcap, ALiBi and dropout are checked on their own (test_sm90_steps).
   The CPU emulator (-DFA_EMU, tests/emu_cuda.h: make test-gpu-emu) runs
   all of this too, the sm_90a kernel included, as on an H100.

   Build: nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a \
          -o build/test_gpu_backward tests/test_gpu_backward.cu
   Run:   build/test_gpu_backward          (all cases)
          build/test_gpu_backward --quick   (or FA_QUICK=1; small cases: for compute-sanitizer)
          FA_BMASK=1 build/test_gpu_backward   (the block-mask cases only; FA_CASE=i: case i,
                                                FA_CASE=i-j: cases i to j, FA_CASE=0-6,10,75:
                                                a list of both;
                                                FA_TEST_SHARD=k/n: tests/shard.h)
   Ends with the line "N passed, M failed". */
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_TEST_HOOKS /* count sm_90a backward launches; run those cases on the sm_80 kernel too */
#include "../flashattn.h"
#include "test_util.h"

#ifdef FA_EMU /* the kernels on the CPU: see tests/emu_cuda.h */
#include "emu_cuda.h"
#else
#include <cuda_runtime.h>
#endif

#include "cuda_check.h"
#include "bmask_lists.h"
#ifdef FLASHATTN_NO_HOPPER /* (no sm_90a kernels: their test hooks stand still) */
static int fa__bwd_sm90_launches, fa__bwd_sm90_grid_cap, fa__bwd_sm90_no_rot, fa__bwd_sm90_disable,
    fa__bwd_det_chains_any;
#endif
#include "shard.h"

typedef struct bcase {
    const char *name;
    fa_dtype dt;
    int d, batch, sq, sk, hq, hkv;
    int causal, window, wl, wr;
    float softcap;
    int alibi;
    float dropout;
    int varlen;     /* lengths vary per sequence (cu_seqlens) */
    int layout;     /* LAYOUT_PACKED or LAYOUT_PADDED (strided views) */
    int det;        /* deterministic: 3 runs, bit-identical */
    int workspace;  /* pass a caller workspace (else stream-ordered allocation) */
    int cpu;        /* also compare with the CPU fa_backward */
    /* block mask (128 x 128, device lists): 1 + the percent of key blocks
       each query block lists (0: none), drawn per row in a shuffled order
       and split between the two lists where no causal / window mask
       forbids full blocks; bm_heads, bm_batch1: the mask's heads and batch
       fields (bm_heads 0: one mask per query head, so that the heads of a
       GQA group visit different blocks) */
    int bmask, bm_heads, bm_batch1;
} bcase;

/* bcase.bmask's lists (tests/bmask_lists.h), from the case's random numbers */
static int bm_rnd(void *rng, int n) { return rng_int((uint64_t *)rng, 0, n - 1); }

static double rel_l2(const tens *x, const double *ref, int64_t *nan_count)
{
    double num = 0, den = 0;
    int b, h, c;
    int64_t t;
    for (b = 0; b < x->nb; b++)
        for (t = 0; t < x->seq; t++)
            for (h = 0; h < x->heads; h++)
                for (c = 0; c < x->dim; c++) {
                    double got = tens_get(x, b, t, h, c);
                    double want = ref[(((int64_t)b * x->seq + t) * x->heads + h) * x->dim + c];
                    if (got != got || isinf(got)) { (*nan_count)++; continue; }
                    num += (got - want) * (got - want);
                    den += want * want;
                }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* tens_make with padding that keeps every row 16-byte aligned (the GPU
   kernels move 16 bytes at a time; other strides are FA_ERROR_UNSUPPORTED). */
static tens tens_make_gpu(fa_dtype dt, int nb, int seq, int heads, int dim, int layout, uint64_t *rng)
{
    int64_t s0, s1, s2;
    if (layout != LAYOUT_PADDED) return tens_make(dt, nb, seq, heads, dim, LAYOUT_PACKED, rng);
    s2 = dim + 8 * rng_int(rng, 1, 2);
    s1 = heads * s2 + 8 * rng_int(rng, 1, 3);
    s0 = (int64_t)seq * s1 + 8 * rng_int(rng, 1, 3);
    return tens_make_strided(dt, nb, seq, heads, dim, s0, s1, s2, 1);
}

static void *to_device(const void *h, size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 16));
    if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static fa_tensor dev_view(const tens *x, void *dptr)
{
    fa_tensor t = x->t;
    t.data = dptr;
    return t;
}

static void run_case(const bcase *c, uint64_t seed, const char *path)
{
    uint64_t rng = seed;
    fa_problem p;
    int32_t cuq[8], cuk[8];
    float slopes[64];
    int b, i;
    memset(&p, 0, sizeof p);
    p.batch = c->batch;
    p.heads_q = c->hq;
    p.heads_kv = c->hkv;
    p.head_dim = c->d;
    p.causal = c->causal;
    p.sliding_window = c->window;
    p.window_left = c->wl;
    p.window_right = c->wr;
    p.softcap = c->softcap;
    p.dropout_p = c->dropout;
    p.dropout_seed = rng_next(&rng);
    p.dropout_offset = rng_next(&rng) & 0xffffffffffull;
    p.deterministic = c->det;
    p.seqlen_q = c->sq;
    p.seqlen_k = c->sk;
    int nbq = c->batch, seqq = c->sq, nbk = c->batch, seqk = c->sk;
    if (c->varlen) {
        /* lengths in [1, sq] / [1, sk]; the first sequence gets the maximum */
        cuq[0] = cuk[0] = 0;
        for (b = 0; b < c->batch; b++) {
            int lq = b == 0 ? c->sq : rng_int(&rng, 1, c->sq);
            int lk = b == 0 ? c->sk : rng_int(&rng, 1, c->sk);
            cuq[b + 1] = cuq[b] + lq;
            cuk[b + 1] = cuk[b] + lk;
        }
        p.cu_seqlens_q = cuq;
        p.cu_seqlens_k = cuk;
        nbq = nbk = 1;
        seqq = cuq[c->batch];
        seqk = cuk[c->batch];
    }
    if (c->alibi) {
        for (i = 0; i < c->hq; i++) slopes[i] = (float)pow(2.0, -8.0 * (i + 1) / c->hq);
        p.alibi_slopes = slopes;
    }
    tbm_lists bml;
    fa_block_mask bm_dev;
    memset(&bml, 0, sizeof bml);
    if (c->bmask) /* p: host lists */
        tbm_make(&bml, (c->bm_batch1 ? 1 : c->batch) * (c->bm_heads ? c->bm_heads : c->hq), c->sq, c->sk,
                 c->bmask - 1, !c->causal && !c->window, c->bm_heads, c->bm_batch1, bm_rnd, &rng, &p.block_mask,
                 &bm_dev);
    char ctx[256];
    snprintf(ctx, sizeof ctx, "%s%s [%s d=%d b=%d sq=%d sk=%d hq=%d hkv=%d seed=%llu]", c->name, path,
             dt_name(c->dt), c->d, c->batch, c->sq, c->sk, c->hq, c->hkv, (unsigned long long)seed);

    tens q = tens_make_gpu(c->dt, nbq, seqq, c->hq, c->d, c->layout, &rng);
    tens k = tens_make_gpu(c->dt, nbk, seqk, c->hkv, c->d, c->layout, &rng);
    tens v = tens_make_gpu(c->dt, nbk, seqk, c->hkv, c->d, c->layout, &rng);
    tens o = tens_make_gpu(c->dt, nbq, seqq, c->hq, c->d, c->layout, &rng);
    tens dout = tens_make_gpu(c->dt, nbq, seqq, c->hq, c->d, c->layout, &rng);
    tens dq = tens_make_gpu(c->dt, nbq, seqq, c->hq, c->d, c->layout, &rng);
    tens dk = tens_make_gpu(c->dt, nbk, seqk, c->hkv, c->d, c->layout, &rng);
    tens dv = tens_make_gpu(c->dt, nbk, seqk, c->hkv, c->d, c->layout, &rng);
    tens_fill(&q, &rng, 1.0);
    tens_fill(&k, &rng, 1.0);
    tens_fill(&v, &rng, 1.0);
    tens_fill(&dout, &rng, 1.0);
    tens_snapshot(&dq);
    tens_snapshot(&dk);
    tens_snapshot(&dv);

    /* O and L from the fp64 forward, rounded as a real forward would store them. */
    int64_t nq = ref_rows_q(&p), nk = ref_rows_k(&p), nl = ref_lse_count(&p);
    double *o_ref = (double *)malloc(sizeof(double) * (size_t)(nq * c->hq * c->d));
    double *l_ref = (double *)malloc(sizeof(double) * (size_t)nl);
    float *lse = (float *)malloc(sizeof(float) * (size_t)nl);
    ref_forward(&p, q.t, k.t, v.t, o_ref, l_ref);
    for (b = 0; b < nbq; b++)
        for (int64_t t = 0; t < seqq; t++)
            for (int h = 0; h < c->hq; h++)
                for (int e = 0; e < c->d; e++)
                    ref_put(o.t, tens_index(&o, b, t, h, e), o_ref[(((int64_t)b * seqq + t) * c->hq + h) * c->d + e]);
    for (int64_t x = 0; x < nl; x++) lse[x] = (float)l_ref[x];
    double *gq = (double *)malloc(sizeof(double) * (size_t)(nq * c->hq * c->d));
    double *gk = (double *)malloc(sizeof(double) * (size_t)(nk * c->hkv * c->d));
    double *gv = (double *)malloc(sizeof(double) * (size_t)(nk * c->hkv * c->d));
    ref_backward(&p, q.t, k.t, v.t, dout.t, gq, gk, gv);

    /* Device copies (whole allocations, padding included). */
    size_t es = dt_size(c->dt);
    void *d_q = to_device(q.buf, q.n * es), *d_k = to_device(k.buf, k.n * es), *d_v = to_device(v.buf, v.n * es);
    void *d_o = to_device(o.buf, o.n * es), *d_do = to_device(dout.buf, dout.n * es);
    void *d_dq = to_device(dq.buf, dq.n * es), *d_dk = to_device(dk.buf, dk.n * es), *d_dv = to_device(dv.buf, dv.n * es);
    float *d_lse = (float *)to_device(lse, sizeof(float) * nl);
    fa_problem pd = p;
    if (c->varlen) {
        pd.cu_seqlens_q = (const int32_t *)to_device(cuq, sizeof(int32_t) * (c->batch + 1));
        pd.cu_seqlens_k = (const int32_t *)to_device(cuk, sizeof(int32_t) * (c->batch + 1));
    }
    if (c->alibi) pd.alibi_slopes = (const float *)to_device(slopes, sizeof(float) * c->hq);
    if (c->bmask) pd.block_mask = bm_dev;
    size_t ws_bytes = 0;
    void *d_ws = NULL;
    fa_status st = fa_backward_cuda_workspace_size(&pd, &ws_bytes);
    check(st == FA_OK, "%s: workspace_size: %s (%s)", ctx, fa_status_string(st), fa_last_error());
    if (c->workspace) CK(cudaMalloc(&d_ws, ws_bytes));
    cudaStream_t stream;
    CK(cudaStreamCreate(&stream));

    unsigned char *first[3] = {NULL, NULL, NULL};
    int runs = c->det ? 3 : 1, identical = 1;
    for (int run = 0; run < runs; run++) {
        /* fresh NaN poison before every run, the caller's workspace too (as
           fp32 NaN: a kernel that read what it did not write, such as a stale
           bitmap or accumulator, would show) */
        if (c->workspace) CK(cudaMemset(d_ws, 0xff, ws_bytes));
        CK(cudaMemcpy(d_dq, dq.snap, dq.n * es, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_dk, dk.snap, dk.n * es, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_dv, dv.snap, dv.n * es, cudaMemcpyHostToDevice));
        st = fa_backward_cuda(&pd, dev_view(&q, d_q), dev_view(&k, d_k), dev_view(&v, d_v),
                              dev_view(&o, d_o), dev_view(&dout, d_do), d_lse, dev_view(&dq, d_dq),
                              dev_view(&dk, d_dk), dev_view(&dv, d_dv), d_ws, ws_bytes, stream);
        if (!check(st == FA_OK, "%s: fa_backward_cuda: %s (%s)", ctx, fa_status_string(st), fa_last_error()))
            break;
        CK(cudaStreamSynchronize(stream));
        CK(cudaGetLastError());
        CK(cudaMemcpy(dq.buf, d_dq, dq.n * es, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(dk.buf, d_dk, dk.n * es, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(dv.buf, d_dv, dv.n * es, cudaMemcpyDeviceToHost));
        if (c->det) {
            tens *outs[3] = {&dq, &dk, &dv};
            for (int x = 0; x < 3; x++) {
                if (run == 0) {
                    first[x] = (unsigned char *)malloc(outs[x]->n * es);
                    memcpy(first[x], outs[x]->buf, outs[x]->n * es);
                } else if (memcmp(first[x], outs[x]->buf, outs[x]->n * es)) {
                    identical = 0;
                }
            }
        }
    }
    if (st == FA_OK) {
        const double tl = c->dt == FA_BF16 ? 2e-2 : 5e-3;
        int64_t nan_q = 0, nan_k = 0, nan_v = 0;
        double eq = rel_l2(&dq, gq, &nan_q), ek = rel_l2(&dk, gk, &nan_k), ev = rel_l2(&dv, gv, &nan_v);
        int64_t pad = tens_padding_changed(&dq) + tens_padding_changed(&dk) + tens_padding_changed(&dv);
        printf("%-10s %-62s rel-L2 vs fp64: dQ %.2e dK %.2e dV %.2e%s\n", nan_q + nan_k + nan_v + pad ? "BAD" : "",
               ctx, eq, ek, ev, c->det ? (identical ? "  (3 runs bit-identical)" : "  (runs DIFFER)") : "");
        check(nan_q + nan_k + nan_v == 0, "%s: %lld/%lld/%lld non-finite (unwritten) elements in dQ/dK/dV", ctx,
              (long long)nan_q, (long long)nan_k, (long long)nan_v);
        check(pad == 0, "%s: %lld padding elements changed", ctx, (long long)pad);
        check(eq <= tl && ek <= tl && ev <= tl, "%s: error vs fp64 reference over %.0e", ctx, tl);
        if (c->det) check(identical, "%s: deterministic runs differ", ctx);
        if (c->cpu) {
            /* The CPU fa_backward on the same host inputs; GPU and CPU should
               agree to the same tolerance. */
            double *gpu_q = tens_to_packed(&dq), *gpu_k = tens_to_packed(&dk), *gpu_v = tens_to_packed(&dv);
            tens cq = tens_make(c->dt, nbq, seqq, c->hq, c->d, LAYOUT_PACKED, &rng);
            tens ck = tens_make(c->dt, nbk, seqk, c->hkv, c->d, LAYOUT_PACKED, &rng);
            tens cv = tens_make(c->dt, nbk, seqk, c->hkv, c->d, LAYOUT_PACKED, &rng);
            st = fa_backward(&p, q.t, k.t, v.t, o.t, dout.t, lse, cq.t, ck.t, cv.t, NULL, 0);
            if (check(st == FA_OK, "%s: CPU fa_backward: %s (%s)", ctx, fa_status_string(st), fa_last_error())) {
                int64_t n0 = 0;
                double cq_e = rel_l2(&cq, gpu_q, &n0), ck_e = rel_l2(&ck, gpu_k, &n0), cv_e = rel_l2(&cv, gpu_v, &n0);
                printf("%-10s %-62s rel-L2 GPU vs CPU: dQ %.2e dK %.2e dV %.2e\n", "", "", cq_e, ck_e, cv_e);
                check(n0 == 0 && cq_e <= tl && ck_e <= tl && cv_e <= tl, "%s: GPU vs CPU fa_backward over %.0e", ctx, tl);
            }
            tens_free(&cq); tens_free(&ck); tens_free(&cv);
            free(gpu_q); free(gpu_k); free(gpu_v);
        }
    }
    fflush(stdout);
    for (int x = 0; x < 3; x++) free(first[x]);
    CK(cudaStreamDestroy(stream));
    cudaFree(d_q); cudaFree(d_k); cudaFree(d_v); cudaFree(d_o); cudaFree(d_do);
    cudaFree(d_dq); cudaFree(d_dk); cudaFree(d_dv); cudaFree(d_lse); cudaFree(d_ws);
    if (c->varlen) { cudaFree((void *)pd.cu_seqlens_q); cudaFree((void *)pd.cu_seqlens_k); }
    if (c->alibi) cudaFree((void *)pd.alibi_slopes);
    if (c->bmask) tbm_free(&bml);
    tens_free(&q); tens_free(&k); tens_free(&v); tens_free(&o); tens_free(&dout);
    tens_free(&dq); tens_free(&dk); tens_free(&dv);
    free(o_ref); free(l_ref); free(lse); free(gq); free(gk); free(gv);
}

/* Bad arguments: a failing call must return the right status. */
static void test_errors(void)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen_q = 8; p.seqlen_k = 8; p.heads_q = 2; p.head_dim = 64;
    size_t bytes = 0;
    check(fa_backward_cuda_workspace_size(&p, &bytes) == FA_OK && bytes > 0, "workspace size of a valid problem");
    check(fa_backward_cuda_workspace_size(NULL, &bytes) == FA_ERROR_INVALID_ARGUMENT, "NULL problem");
    p.head_dim = 60; /* not a multiple of 8 */
    check(fa_backward_cuda_workspace_size(&p, &bytes) == FA_ERROR_UNSUPPORTED, "head_dim 60 is unsupported");
    p.head_dim = 64;
    fa_tensor none;
    memset(&none, 0, sizeof none);
    check(fa_backward_cuda(&p, none, none, none, none, none, NULL, none, none, none, NULL, 0, NULL) ==
              FA_ERROR_INVALID_ARGUMENT,
          "NULL tensors are an invalid argument");
}

/* ---- the sm_90a kernel's per-element steps with softcap, ALiBi and dropout
   (fa__bwd_sm90_keep, fa__bwd_sm90_p, fa__bwd_sm90_ds; plain CUDA, so the
   emulator runs them too): one warpgroup's S^T and dP^T fragments filled
   with known values of (key, query), every element checked against the
   definitions, the keep bits against fa__dropout_keep. A wrong key or
   query in the fragment mapping (ALiBi's distance, the mask, the Philox
   coordinates, the lanes that share a Philox call) shows here without a
   Hopper GPU. */
typedef struct steps_args {
    fa__bwd_params p;
    fa__bwd_seq s;
    int b, h, i0, j0;
    float *out; /* per thread: pT[32], P^T dropped [32] (unpacked), dS^T[32], keep bits */
} steps_args;
enum { STEPS_OUT = 97 };

static FLASHATTN_HD float steps_s(int k, int q) { return 3.0f * sinf(0.37f * (float)k + 0.91f * (float)q); }
static FLASHATTN_HD float steps_dp(int k, int q) { return 2.0f * cosf(0.53f * (float)k - 0.29f * (float)q); }
static FLASHATTN_HD float steps_l(int q) { return 1.5f + 0.01f * (float)q; } /* L, natural log */
static FLASHATTN_HD float steps_d(int q) { return 0.25f - 0.005f * (float)q; }

template <bool SOFTCAP>
__global__ void sm90_steps_kernel(const steps_args a)
{
    const int tid = threadIdx.x, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int kj = a.j0 + 16 * (tid / 32) + g; /* the thread's first key (krow = 16 wq + g) */
    float sT[8][4], dpT[8][4], pT[8][4], dsT[8][4];
    float2 sL2[32], sD2[32]; /* L (log2 units) and D of the 64 queries */
    uint32_t pa[4][1][4];
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++) {
            const int k = kj + 8 * (e >> 1), q = a.i0 + 8 * n + 2 * t + (e & 1);
            sT[n][e] = steps_s(k, q);
            dpT[n][e] = steps_dp(k, q);
        }
    for (int r = 0; r < 32; r++) {
        const float LOG2E = 1.4426950408889634f;
        sL2[r] = make_float2(steps_l(a.i0 + 2 * r) * LOG2E, steps_l(a.i0 + 2 * r + 1) * LOG2E);
        sD2[r] = make_float2(steps_d(a.i0 + 2 * r), steps_d(a.i0 + 2 * r + 1));
    }
    const uint32_t keep = fa__bwd_sm90_keep<8>(a.p, a.b, a.h, a.i0, kj, t, lane);
    fa__bwd_sm90_p<false, true, SOFTCAP, 8>(a.p, a.s, sT, pT, pa, (const float *)sL2, keep, true, a.h, a.i0, kj, t);
    fa__bwd_sm90_ds<true, 8>(a.p, dpT, pT, dsT, (const float *)sD2, keep, t);
    float *o = a.out + tid * STEPS_OUT;
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++) {
            const uint32_t w = pa[n / 2][0][2 * (n % 2) + e / 2];
            o[4 * n + e] = pT[n][e];
            o[32 + 4 * n + e] = __half2float(__ushort_as_half((unsigned short)(e % 2 ? w >> 16 : w & 0xffff)));
            o[64 + 4 * n + e] = dsT[n][e];
        }
    memcpy(&o[96], &keep, 4);
}

#ifndef FLASHATTN_NO_HOPPER
/* The sm_90a backward's shared memory (fa__bwd_sm90_bars_at) at every
   offset of the dynamic array's base from a 1024-byte boundary: the
   barrier block 16-aligned, clear of the tiles, and both within the
   request (the real base is likely aligned; the other offsets are the
   slack path's). Returns the number of bad offsets. */
template <class L>
static int bars_at_bad(void)
{
    const uint32_t bb = L::bar_bytes;
    int bad = 0;
    for (uint32_t off = 0; off < 1024; off++) {
        const uint32_t base = 5 * 1024 + off, aligned = (base + 1023u) & ~1023u,
                       bars = fa__bwd_sm90_bars_at<L>(base, aligned), tiles_end = aligned + L::end,
                       asked_end = base + L::request;
        const bool clear = bars + bb <= aligned || bars >= tiles_end;
        bad += !(bars % 16 == 0 && bars >= base && bars + bb <= asked_end && tiles_end <= asked_end && clear);
    }
    return bad;
}
static void test_bars_at(void)
{
    const int bad = bars_at_bad<fa__bwd_sm90_layout<64, 128, true>>() + bars_at_bad<fa__bwd_sm90_layout<64, 128>>() +
                    bars_at_bad<fa__bwd_sm90_layout<64, 64, true>>() + bars_at_bad<fa__bwd_sm90_layout<128, 64, true>>() +
                    bars_at_bad<fa__bwd_sm90_layout<128>>() + bars_at_bad<fa__bwd_sm90_layout<256, 64, true>>() +
                    bars_at_bad<fa__bwd_sm90_layout<64>>() + bars_at_bad<fa__bwd_sm90_layout<256>>();
    printf("%-10s sm_90a backward shared memory at 1024 base offsets, 8 layouts: %d bad\n", bad ? "BAD" : "", bad);
    check(bad == 0, "sm_90a backward: %d base offsets put the barrier block out of place", bad);
}
#endif

static void test_sm90_steps(int softcap)
{
    /* queries 64..127 of 150, keys 64..127 of 120: the causal mask (key <=
       query - 30) and the last key cut the tile */
    steps_args a;
    float slopes[3] = {0.5f, 0.125f, 0.0625f};
    memset(&a, 0, sizeof a);
    fa__bwd_params &p = a.p;
    p.hq = 3;
    p.scale = 0.5f;
    p.scale_log2 = p.scale * 1.4426950408889634f;
    p.softcap = softcap ? 2.0f : 0.f;
    p.scale_cap = softcap ? p.scale / p.softcap : 0.f;
    p.causal = 1;
    p.dropout = 1;
    p.rp_drop = 1.f / (1.f - 0.3f);
    p.drop_threshold = fa__dropout_threshold(0.3f);
    p.seed = 0x1234567890abcdefull;
    p.offset = 0x123456789ull;
    p.alibi = (const float *)to_device(slopes, sizeof slopes);
    a.s.sq = 150;
    a.s.sk = 120;
    a.b = 1;
    a.h = 1;
    a.i0 = 64;
    a.j0 = 64;
    const size_t bytes = sizeof(float) * 128 * STEPS_OUT;
    float *out = (float *)malloc(bytes);
    CK(cudaMalloc((void **)&a.out, bytes));
    if (softcap) FA__LAUNCH(sm90_steps_kernel<true>, dim3(1), dim3(128), 0, 0, a);
    else FA__LAUNCH(sm90_steps_kernel<false>, dim3(1), dim3(128), 0, 0, a);
    CK(cudaGetLastError());
    CK(cudaMemcpy(out, a.out, bytes, cudaMemcpyDeviceToHost));
    int bad_keep = 0, bad = 0;
    double worst = 0;
    for (int tid = 0; tid < 128; tid++) {
        const int lane = tid % 32, kj = a.j0 + 16 * (tid / 32) + lane / 4, t = lane % 4;
        const float *o = out + tid * STEPS_OUT;
        uint32_t keep;
        memcpy(&keep, &o[96], 4);
        for (int n = 0; n < 8; n++)
            for (int e = 0; e < 4; e++) {
                const int k = kj + 8 * (e >> 1), q = a.i0 + 8 * n + 2 * t + (e & 1), x = 4 * n + e;
                const int kept = fa__dropout_keep(p.seed, p.offset, a.b, a.h, p.hq, q, k, p.drop_threshold);
                bad_keep += (int)((keep >> x) & 1) != kept;
                /* the definitions: score = c tanh(s scale / c) - slope |q + sk - sq - k|,
                   P = exp(score - L) on visible keys, dS = P dcap (dP Z / (1 - p) - D) */
                double sc = steps_s(k, q) * (double)p.scale, dcap = 1;
                if (softcap) {
                    const double th = tanh(sc / p.softcap);
                    sc = p.softcap * th;
                    dcap = 1 - th * th;
                }
                sc -= slopes[a.h] * fabs((double)(q + a.s.sk - a.s.sq - k));
                const int vis = k < a.s.sk && k <= q + a.s.sk - a.s.sq;
                const double P = vis ? exp(sc - steps_l(q)) : 0, pd = kept ? P * p.rp_drop : 0;
                const double dp = kept ? steps_dp(k, q) * (double)p.rp_drop : 0;
                const double want[3] = {P * dcap, pd, P * dcap * (dp - steps_d(q))};
                for (int w = 0; w < 3; w++) {
                    const double got = o[32 * w + x], tol = (w == 1 ? 1e-3 : 1e-4) * fabs(want[w]) + 1e-6;
                    if (!(fabs(got - want[w]) <= tol)) bad++;
                    worst = fmax(worst, fabs(got - want[w]) / tol);
                }
            }
    }
    printf("%-10s %-62s keep bits wrong %d, values off %d (worst err/tol %.2f)\n", bad_keep + bad ? "BAD" : "",
           softcap ? "sm_90a steps: softcap, ALiBi, dropout, causal" : "sm_90a steps: ALiBi, dropout, causal",
           bad_keep, bad, worst);
    check(bad_keep == 0, "sm_90a steps (softcap %d): %d keep bits differ from fa__dropout_keep", softcap, bad_keep);
    check(bad == 0, "sm_90a steps (softcap %d): %d of P, P dropped, dS off the definitions", softcap, bad);
    cudaFree(a.out);
    cudaFree((void *)p.alibi);
    free(out);
}

/* Whether case x is in FA_CASE's list ("0-6,10,75": ranges and single indices). */
static int case_picked(const char *spec, int x)
{
    while (*spec) {
        int lo, hi, used = 0;
        if (sscanf(spec, "%d%n", &lo, &used) != 1) return 0;
        spec += used;
        hi = lo;
        if (*spec == '-' && sscanf(spec + 1, "%d%n", &hi, &used) == 1) spec += 1 + used;
        if (x >= lo && x <= hi) return 1;
        if (*spec == ',') spec++;
        else if (*spec) return 0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    (void)compare; (void)compare_lse; (void)rms; (void)tens_fill_outliers; /* test_util.h, unused here */
    const int quick = getenv("FA_QUICK") != NULL || (argc > 1 && !strcmp(argv[1], "--quick"));
    /* FA_CASE=i, i-j or a comma-separated list of both: only those cases (by index) */
    const char *picked = getenv("FA_CASE");
    const int bm_only = getenv("FA_BMASK") != NULL; /* only the block-mask cases */
    int shard_k, shard_n; /* FA_TEST_SHARD (tests/shard.h) */
    if (!test_shard(&shard_k, &shard_n)) return 2;
    const fa_dtype BF = FA_BF16, F16 = FA_F16;
    const int P = LAYOUT_PACKED, S = LAYOUT_PADDED;
    /* name, dtype, d, batch, sq, sk, hq, hkv, causal, window, wl, wr, softcap, alibi,
       dropout, varlen, layout, det, workspace, cpu, bmask, bm_heads, bm_batch1 */
    const bcase cases[] = {
        {"plain", BF, 64, 2, 113, 203, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 1, 0, 0, 0},
        {"plain", F16, 64, 1, 203, 113, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"plain", BF, 128, 1, 7, 1023, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 0, 0, 0, 0},
        {"plain", F16, 128, 2, 1, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"plain", BF, 32, 2, 113, 7, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"plain", F16, 256, 1, 203, 113, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 1, 0, 0, 0},
        {"plain", BF, 256, 1, 113, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"d96", BF, 96, 1, 203, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"d80", F16, 80, 1, 113, 113, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"d192", BF, 192, 1, 113, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"causal", BF, 64, 2, 203, 113, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0}, /* rows with L = -inf */
        {"causal", F16, 128, 1, 113, 203, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"causal", BF, 128, 1, 1023, 1023, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 0, 0, 0, 0},
        {"causal", BF, 256, 1, 203, 203, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"causal", F16, 32, 1, 7, 113, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"window", BF, 64, 1, 203, 203, 2, 2, 0, 1, 37, 11, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"window", F16, 128, 1, 1023, 1023, 1, 1, 0, 1, 100, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"win+causal", BF, 128, 1, 113, 203, 2, 2, 1, 1, 50, 50, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"softcap", BF, 64, 1, 113, 203, 2, 2, 0, 0, 0, 0, 2.0f, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"softcap", F16, 128, 1, 203, 113, 2, 2, 1, 0, 0, 0, 5.0f, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"softcap", BF, 256, 1, 113, 113, 2, 2, 0, 0, 0, 0, 3.0f, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"alibi", F16, 128, 1, 203, 203, 4, 4, 1, 0, 0, 0, 0, 1, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"alibi", BF, 64, 1, 113, 203, 4, 4, 0, 0, 0, 0, 0, 1, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"gqa", BF, 64, 2, 113, 203, 8, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"mqa", F16, 128, 1, 203, 113, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"gqa", BF, 256, 1, 113, 113, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"varlen", BF, 64, 3, 203, 113, 2, 2, 1, 0, 0, 0, 0, 0, 0, 1, P, 0, 0, 1, 0, 0, 0},
        {"varlen", F16, 128, 4, 113, 203, 4, 2, 0, 0, 0, 0, 0, 0, 0, 1, P, 0, 1, 1, 0, 0, 0},
        {"strided", BF, 64, 2, 113, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, S, 0, 0, 1, 0, 0, 0},
        {"strided", F16, 128, 2, 203, 113, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, S, 0, 0, 0, 0, 0, 0},
        {"dropout", BF, 64, 2, 113, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0.17f, 0, P, 0, 0, 1, 0, 0, 0},
        {"dropout", F16, 128, 1, 203, 203, 2, 2, 1, 0, 0, 0, 0, 0, 0.3f, 0, P, 0, 0, 1, 0, 0, 0},
        {"everything", BF, 128, 3, 203, 113, 4, 2, 1, 1, 60, 20, 4.0f, 1, 0.1f, 1, S, 0, 0, 1, 0, 0, 0},
        {"determ", BF, 64, 1, 203, 113, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"determ", BF, 128, 1, 1023, 1023, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 0, 0, 0, 0},
        {"determ", F16, 256, 2, 203, 113, 4, 2, 0, 1, 30, 30, 0, 0, 0.1f, 1, S, 1, 0, 0, 0, 0, 0},
        /* several key and query blocks of the sm_90a kernel's 128 x 64 tile */
        {"long", BF, 128, 2, 517, 1031, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"long", F16, 64, 1, 1031, 517, 4, 1, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 0, 0, 0, 0}, /* MQA, L = -inf rows */
        {"long", BF, 64, 2, 700, 900, 2, 2, 0, 1, 129, 64, 0, 0, 0, 0, S, 0, 0, 0, 0, 0, 0},
        {"long", F16, 128, 1, 333, 333, 6, 2, 1, 0, 0, 0, 0, 0, 0, 0, S, 1, 0, 0, 0, 0, 0},
        {"d112", BF, 112, 1, 257, 191, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        /* the split tile at D = 256 (64 keys, the warpgroups on column halves) */
        {"long", BF, 256, 1, 333, 517, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"long", F16, 256, 1, 391, 333, 2, 2, 0, 1, 129, 64, 0, 0, 0, 0, S, 1, 1, 0, 0, 0, 0},
        {"d160", BF, 160, 1, 257, 191, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        /* block masks (128 x 128, >>bwd-bsparse; the last three fields): the sm_90a
           kernel at d 64, 128 (Bc 128) and 256 (Bc 64: two key blocks a mask
           block), the sm_80 kernel at d 32, 96, and varlen, softcap,
           ALiBi, dropout; odd lengths (key blocks partly past sk), causal
           and window bounds that cut listed blocks, query blocks that list
           none (0%), every block (100%), GQA with a mask per KV head and per
           query head (the heads of a group visit different blocks), one
           mask for every sequence of a variable-length batch, deterministic
           mode (the dQ sum adds the visited slices only) */
        {"bm30", BF, 64, 2, 1000, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 1, 31, 0, 0},
        {"bm30 causal", F16, 64, 2, 1000, 1000, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 31, 0, 0},
        {"bm30", F16, 128, 1, 1000, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 31, 0, 0},
        {"bm30 causal det", BF, 128, 1, 1000, 1000, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 0, 31, 0, 0},
        {"bm50", BF, 128, 1, 203, 1500, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 51, 0, 0},
        {"bm30 causal, rows w/o keys", F16, 128, 1, 1500, 700, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 31, 0, 0},
        {"bm0", BF, 64, 1, 1000, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 1, 1, 0, 0},
        {"bm100 causal", BF, 128, 1, 1000, 1000, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 1, 101, 0, 0},
        {"bm30 gqa 8/2, mask per kv head", BF, 64, 2, 1000, 1000, 8, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 31, 2, 1},
        {"bm30 gqa 8/2, mask per q head", F16, 128, 1, 1000, 1000, 8, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 1, 31, 0, 0},
        {"bm30 gqa 4/2 per q head causal", BF, 64, 2, 1000, 1000, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 0, 31, 0, 0},
        {"bm30 varlen, one mask", BF, 128, 3, 1000, 700, 4, 2, 1, 0, 0, 0, 0, 0, 0, 1, P, 0, 0, 1, 31, 0, 1},
        {"bm30 varlen det", F16, 64, 3, 700, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 1, P, 1, 1, 0, 31, 1, 1},
        {"bm30 d96", BF, 96, 1, 1000, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 31, 0, 0},
        {"bm30 d256 causal gqa", F16, 256, 1, 1000, 1000, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 31, 2, 0},
        {"bm30 d256", BF, 256, 1, 700, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 31, 0, 0},
        {"bm30 d256 softcap dropout", BF, 256, 1, 700, 1000, 2, 2, 0, 0, 0, 0, 3.0f, 0, 0.1f, 0, P, 0, 0, 0, 31, 0, 0},
        {"bm70 window", BF, 64, 1, 1000, 1000, 2, 2, 0, 1, 300, 40, 0, 0, 0, 0, P, 0, 0, 1, 71, 0, 0},
        {"bm30 alibi dropout causal", F16, 128, 2, 1000, 1000, 4, 4, 1, 0, 0, 0, 0, 1, 0.2f, 0, P, 0, 0, 1, 31, 0, 0},
        {"bm30 strided det", BF, 64, 2, 1000, 1000, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, S, 1, 0, 0, 31, 0, 0},
        /* small ones (quick mode, the emulator): 3 x 4 mask blocks */
        {"bm40 small", BF, 64, 1, 300, 450, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 1, 41, 0, 0},
        {"bm40 small causal gqa", F16, 128, 1, 450, 300, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 41, 0, 0},
        {"bm40 small d32 softcap", BF, 32, 2, 300, 300, 2, 2, 0, 0, 0, 0, 2.0f, 0, 0, 0, P, 1, 0, 1, 41, 0, 0},
        {"bm40 small d256 varlen", F16, 256, 2, 300, 450, 2, 1, 1, 0, 0, 0, 0, 0, 0, 1, P, 1, 0, 1, 41, 0, 1},
        /* softcap, ALiBi and dropout on the sm_90a kernel (its EXTRAS and SOFTCAP
           kernels; d 64, 128, 256): GQA / MQA, causal and not, query rows
           without keys, several key blocks, all three together, with a window,
           strided, deterministic; two small ones for quick mode */
        {"softcap gqa", BF, 128, 1, 333, 517, 4, 2, 1, 0, 0, 0, 3.0f, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"extras small", F16, 128, 1, 113, 203, 4, 2, 1, 0, 0, 0, 4.0f, 1, 0.2f, 0, P, 0, 0, 1, 0, 0, 0},
        {"alibi dropout gqa", F16, 64, 2, 203, 333, 6, 2, 0, 0, 0, 0, 0, 1, 0.2f, 0, P, 0, 0, 1, 0, 0, 0},
        {"extras det", BF, 128, 1, 391, 257, 4, 4, 1, 0, 0, 0, 2.5f, 1, 0.15f, 0, P, 1, 1, 0, 0, 0, 0},
        {"extras window mqa", F16, 64, 1, 203, 113, 4, 1, 0, 1, 37, 11, 5.0f, 1, 0.1f, 0, S, 0, 0, 1, 0, 0, 0},
        {"softcap dropout", BF, 256, 1, 203, 333, 4, 2, 1, 0, 0, 0, 3.0f, 0, 0.1f, 0, P, 0, 0, 0, 0, 0, 0},
        {"alibi", F16, 256, 1, 113, 203, 2, 2, 0, 0, 0, 0, 0, 1, 0, 0, P, 0, 0, 1, 0, 0, 0},
        /* the deterministic mode's ordered dQ adds on the sm_90a kernel (its DET
           kernels, d 64 and 128): several key blocks add to each 64-row dQ tile,
           in order (fa__bwd_sm90_send_dq); causal,
           not, window, GQA / MQA, odd lengths, sq != sk. A lost add shows
           against the fp64 reference, an add out of order as runs that differ.
           "det small" (indices 75, 78, 81): quick mode, 2 key blocks */
        {"det small", BF, 64, 1, 203, 203, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det order", BF, 64, 2, 517, 645, 6, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det order", F16, 64, 1, 645, 391, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 0, 0, 0, 0},
        {"det small", F16, 128, 1, 113, 203, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det order", BF, 128, 1, 391, 771, 8, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det order", F16, 128, 2, 771, 517, 4, 1, 1, 0, 0, 0, 0, 0, 0, 0, S, 1, 0, 0, 0, 0, 0}, /* L = -inf rows */
        {"det small window", BF, 128, 1, 203, 203, 2, 2, 0, 1, 100, 20, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det order window", BF, 64, 1, 900, 900, 2, 2, 0, 1, 200, 64, 0, 0, 0, 0, P, 1, 1, 0, 0, 0, 0},
        /* without a mask the DET kernels' walks are rotated (fa__bwd_rot), the
           adds in the walks' order, on a cooperative grid (capped: nk + 1
           blocks, rounds holding whole and split sequences): more key blocks
           than query blocks (walks starting together), and a small one for
           quick mode (index 84) */
        {"det rotated walk", BF, 64, 1, 203, 771, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det rotated small", F16, 128, 1, 150, 203, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 0, 0, 0, 0},
        /* d 64 with seqlen_q 64 past a multiple of 128 (after rounding up to
           64): the sm_90a kernel's 128-row steps (FA__BWD_SM90_WIDE) then
           reach 64 rows past the sequence, into the accumulator's padding,
           which must be there (with 64-row padding those rows are the next
           head's: a wrong dQ). Index 87 runs in quick mode. */
        {"pad128", F16, 64, 1, 317, 203, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"pad128 causal", BF, 64, 2, 60, 113, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 1, 0, 0, 0},
        {"pad128", F16, 64, 1, 190, 203, 4, 2, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        /* the ordered dQ adds at d 256 (the DET kernel's split tile: dQ handed to
           the writers in the step's Q and dO buffers, fa__bwd_sm90_send_dq256);
           index 90 runs in quick mode */
        {"det order d256", F16, 256, 2, 517, 391, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0, S, 1, 1, 0, 0, 0, 0},
        {"det order d256 window", BF, 256, 1, 645, 645, 2, 1, 0, 1, 200, 64, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        {"det small d256", BF, 256, 1, 203, 203, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        /* variable length on the sm_90a kernel: tiles past a sequence's end copied by
           warp 3 of the producer warpgroup (the next sequence's rows, or the end of the buffer, lie
           there), each sequence's accumulator rows from a multiple of 128; the
           deterministic mode's ordered adds with per-sequence key block counts */
        {"varlen long", BF, 64, 4, 517, 391, 4, 2, 0, 0, 0, 0, 0, 0, 0, 1, P, 0, 0, 0, 0, 0, 0},
        {"varlen causal", F16, 256, 3, 203, 333, 2, 2, 1, 0, 0, 0, 0, 0, 0, 1, P, 0, 0, 1, 0, 0, 0},
        {"varlen det small", BF, 64, 3, 150, 203, 2, 2, 0, 0, 0, 0, 0, 0, 0, 1, P, 1, 0, 1, 0, 0, 0}, /* (quick) */
        {"varlen window mqa", BF, 128, 3, 645, 645, 4, 1, 0, 1, 100, 30, 0, 0, 0, 1, S, 0, 1, 0, 0, 0, 0},
        {"varlen det", F16, 128, 4, 391, 517, 4, 2, 1, 0, 0, 0, 0, 0, 0, 1, P, 1, 0, 0, 0, 0, 0},
        /* a window side of INT_MAX (no bound on that side) must not overflow
           the kernels' bounds; the first runs in quick mode */
        {"window max", BF, 64, 1, 203, 113, 2, 2, 0, 1, INT_MAX, 3, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"window max", F16, 128, 1, 113, 203, 2, 2, 0, 1, 5, INT_MAX, 0, 0, 0, 0, P, 0, 0, 1, 0, 0, 0},
        {"window max", BF, 128, 2, 203, 113, 2, 2, 1, 1, INT_MAX, INT_MAX, 0, 0, 0, 0, P, 1, 0, 0, 0, 0, 0},
        /* the sm_90a DET kernels copy a tile's first partial dQ (p.det_store):
           query blocks that no key block reaches (causal, sq - sk = 143 rows
           without keys: the first 128-row, or two 64-row, blocks) have none,
           and kernel 3 must write their zeros (the workspace is poisoned).
           Index 99 runs in quick mode. */
        {"det rows w/o keys", F16, 64, 2, 203, 60, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 0, 0, 0, 0},
        {"det rows w/o keys", BF, 128, 1, 203, 60, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, S, 1, 1, 0, 0, 0, 0},
        {"det rows w/o keys", F16, 256, 1, 203, 60, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, P, 1, 1, 0, 0, 0, 0},
        /* the default mode on the DET kernels (fa__bwd_det_pays: D >= 128, at most 512
           tokens or 1024 causal; D 64 causal, at most 512; units filling 132 SMs twice);
           not emulated (their size) */
        {"det auto", BF, 128, 4, 500, 500, 17, 17, 0, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"det auto causal", F16, 256, 3, 509, 500, 12, 12, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 1, 0, 0, 0, 0},
        {"det auto causal 1k", BF, 128, 2, 1000, 997, 17, 17, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
        {"det auto causal d64", F16, 64, 4, 509, 500, 17, 17, 1, 0, 0, 0, 0, 0, 0, 0, P, 0, 0, 0, 0, 0, 0},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    int dev = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("test_gpu_backward on %s (sm_%d%d)%s\n", prop.name, prop.major, prop.minor, quick ? ", quick" : "");
    test_errors();
    test_sm90_steps(0);
    test_sm90_steps(1);
#ifndef FLASHATTN_NO_HOPPER
    test_bars_at();
#endif
    int sm90_cases = 0, sm90 = 0;
#ifndef FA_EMU
    (void)fa__sm90_launches; (void)fa__sm90_disable; (void)fa__sm90_grid_cap; (void)fa__sm90_shape_sel; /* forward hooks */
    /* The sm_90a backward can run here: a device of compute capability 9.0
       and sm_90a code in this binary (the launcher's own test). Then every
       case must take it (softcap, ALiBi, dropout, variable length and the
       deterministic mode included) but those on the d 32 kernel and the
       deterministic ones with softcap, ALiBi or dropout, which run the sm_80
       kernel (at d 256 these too take it with FA__BWD_SM90_BULK256 0). */
    {
        constexpr int D90 = fa__bwd_kernel_dim(64) ? fa__bwd_kernel_dim(64) : 64;
        cudaFuncAttributes fa;
        sm90 = prop.major == 9 && prop.minor == 0 &&
               cudaFuncGetAttributes(&fa, fa__bwd_kernel_sm90<true, D90, false, false, false, false>) == cudaSuccess &&
               fa.binaryVersion == 90 && fa.sharedSizeBytes == 0;
        (void)cudaGetLastError();
    }
#elif !defined(FA_EMU_NO_SM90)
    sm90 = 1; /* the emulator runs the sm_90a kernel too (tests/emu_cuda90.h) */
#endif
    for (int x = 0; x < n; x++) {
        bcase c = cases[x];
        if (picked && !case_picked(picked, x)) continue;
        if (bm_only && !c.bmask) continue;
        if (x % shard_n != shard_k) continue;
        if (!picked && quick && (c.bmask ? c.sq > 450 || c.sk > 450 : c.sq > 203 || c.sk > 203 || x % 3))
            continue; /* a spread of small cases; the small block-mask ones */
        if (quick) c.cpu = 0;
#ifdef FA_EMU
        if (!strncmp(c.name, "det auto", 8)) continue; /* (too large to emulate) */
#endif
        const int before = fa__bwd_sm90_launches;
        run_case(&c, 0x5eed0000ull + (uint64_t)x * 7919u, "");
        const int ran90 = fa__bwd_sm90_launches != before;
        if (sm90)
            check(ran90 == (fa__bwd_kernel_dim(c.d) >= 64 &&
                            !(c.det && (FA__BWD_SM90_BULK256 || fa__bwd_kernel_dim(c.d) <= 128) &&
                              (c.softcap > 0.f || c.alibi || c.dropout > 0.f))),
                  "case %d (%s d=%d): ran on the %s kernel", x, c.name, c.d, ran90 ? "sm_90a" : "sm_80");
        if (ran90) { /* it ran on sm_90a: now on 3 persistent blocks, */
            sm90_cases++;                         /* then on the sm_80 kernel */
            fa__bwd_sm90_grid_cap = 3; /* (deterministic: the dQ adds in chains, whatever the shape) */
            fa__bwd_det_chains_any = 1;
            run_case(&c, 0x5eed0000ull + (uint64_t)x * 7919u, " [3 blocks]");
            fa__bwd_sm90_grid_cap = fa__bwd_det_chains_any = 0;
            if (c.det && !c.causal && !c.window && !c.bmask) { /* the walks of one order (no cooperative launch) */
                fa__bwd_sm90_no_rot = 1;
                run_case(&c, 0x5eed0000ull + (uint64_t)x * 7919u, " [one order]");
                fa__bwd_sm90_no_rot = 0;
            }
            fa__bwd_sm90_disable = 1;
            run_case(&c, 0x5eed0000ull + (uint64_t)x * 7919u, " [sm80]");
            fa__bwd_sm90_disable = 0;
        }
    }
    printf("%d of the cases ran on the sm_90a kernel (and again on 3 persistent blocks, and on the sm_80 kernel)\n",
           sm90_cases);
    return summary("test_gpu_backward");
}
