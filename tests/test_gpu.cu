/* tests/test_gpu.cu - the GPU forward (fa_forward_cuda) against the fp64
   reference (tests/reference.h), on fresh random inputs.

   Build and run: make test-gpu (needs a GPU). Options:
     --quick   a smaller size list (used under compute-sanitizer)
   Built with -DFA_EMU (make test-gpu-emu) the kernels run on the CPU
   instead (tests/emu_cuda.h): no GPU needed, slow (make test runs the
   cases of the Makefile's EMU_FWD_CASES, FA_TEST_ONLY).
   Every case: inputs drawn anew; compared with the fp64 reference AND with
   the CPU fa_forward on the same inputs; O and L poisoned with NaN before the call;
   afterwards every element that should be written is checked finite and
   within tolerance of the reference, every element that should not be
   written (stride gaps) is checked still poisoned, and a second run must give
   the same bits. Tolerances (|got - ref| <= atol + rtol |ref|, times the
   dropout scale): f16 3e-3, bf16 2e-2 on O; 1e-3 + 1e-4 |L| on L.
   Output ends with "N passed, N failed". */
#define FLASHATTN_IMPLEMENTATION
#define FLASHATTN_TEST_HOOKS /* count sm_90a launches; run each case on the sm_80 kernel too */
#include "../flashattn.h"
#ifdef FA_EMU /* the kernels on the CPU (make test-gpu-emu): see tests/emu_cuda.h */
#define FLASHATTN_CUDA_EMU_FWD
#include "emu_cuda.h"
#endif
#include "reference.h"
#include "bmask_lists.h"
#ifdef FLASHATTN_NO_HOPPER /* (no sm_90a kernels: their test hooks stand still) */
static int fa__sm90_launches, fa__sm90_disable, fa__sm90_grid_cap, fa__sm90_shape_sel = -1;
#endif
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

static int g_pass = 0, g_fail = 0;
static const char *g_path = ""; /* which kernel ran the case, in its report line */

/* The reference rows run in parallel when built with OpenMP (make test-gpu). */
#ifdef _OPENMP
#define FA_TEST_PARALLEL_FOR \
    _Pragma("omp parallel for schedule(dynamic, 4) reduction(+ : bad, badl, nanw, badc) reduction(max : maxerr)")
#else
#define FA_TEST_PARALLEL_FOR
#endif

#define CUDA_OK(x)                                                                      \
    do {                                                                                \
        cudaError_t e_ = (x);                                                           \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                    \
        }                                                                               \
    } while (0)

/* ---- random numbers (xorshift64*, seeded per case) ---- */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) /* [0, 1) */
{
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}
static int irand(int n) { return (int)(urand() * n); }

static uint16_t to_bits(fa_dtype t, float x) { return t == FA_BF16 ? ref_f32_to_bf16(x) : ref_f32_to_f16(x); }
static float from_bits(fa_dtype t, uint16_t b) { return t == FA_BF16 ? ref_bf16_to_f32(b) : ref_f16_to_f32(b); }

typedef struct tcase {
    const char *name;
    fa_dtype dt;
    int batch, sq, sk, hq, hkv, d, dv;
    int causal, window, wl, wr;
    float softcap, scale, dropout;
    int alibi, varlen, seqlens_k, strided;
    int ramp; /* keys grow along the sequence (see make_buf) */
    int sm90_shape; /* 1 + the sm_90a shape to take (fa__sm90_shape_sel), 0: as main() alternates */
    /* block mask (128 x 128): 1 + the percent of key blocks each query
       block lists (0: none), drawn per row in a shuffled order, split
       between the two lists where no causal / window mask forbids full
       blocks; bm_heads, bm_batch1: the mask's heads and batch fields;
       bm_no_ws: no workspace given (the call allocates it) */
    int bmask, bm_heads, bm_batch1, bm_no_ws;
} tcase;

/* tcase.bmask's lists (tests/bmask_lists.h), from this file's random numbers */
static int bm_rnd(void *, int n) { return irand(n); }

/* A host tensor [rows, heads, dim] (rows = batch * seq, or total tokens) with
   optional padded strides, its device copy and its view. */
typedef struct tbuf {
    std::vector<uint16_t> h;
    void *dev;
    fa_tensor view;     /* host view (for the reference) */
    fa_tensor dview;    /* device view */
    int64_t s[3];       /* batch, seq, head strides */
} tbuf;

/* ramp: row r of each sequence is scaled by 1 + 3 r / seq, so that the
   scores, and each row's running maximum, grow from key block to key block
   (the kernels' rescaling of O~, lazy or not, then runs at many blocks, not
   only at the first). */
static void make_buf(tbuf *t, fa_dtype dt, int batch, int seq, int heads, int dim, int strided,
                     int varlen_rows, int fill, int ramp = 0)
{
    int64_t hs = strided ? ((dim + 7) / 8) * 8 + 8 : dim;
    int64_t ss = heads * hs + (strided ? 16 : 0);
    int64_t bs = (int64_t)seq * ss + (strided ? 24 : 0);
    int64_t n = varlen_rows >= 0 ? (int64_t)varlen_rows * ss + 8 : batch * bs + 8;
    t->s[0] = bs; t->s[1] = ss; t->s[2] = hs;
    t->h.assign((size_t)n, 0x7FFF); /* NaN in both f16 and bf16 */
    if (fill)
        for (int64_t i = 0; i < n; i++) {
            const double r = ramp ? (double)(i % bs / ss) / seq : 0.0;
            t->h[(size_t)i] = to_bits(dt, (float)((urand() * 2.0 - 1.0) * (1.0 + 3.0 * r)));
        }
    CUDA_OK(cudaMalloc(&t->dev, (size_t)n * 2));
    CUDA_OK(cudaMemcpy(t->dev, t->h.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
    memset(&t->view, 0, sizeof t->view);
    t->view.data = t->h.data(); t->view.dtype = dt;
    if (strided) { t->view.batch_stride = bs; t->view.seq_stride = ss; t->view.head_stride = hs; }
    t->dview = t->view;
    t->dview.data = t->dev;
}

/* With seqlens_k, cache rows past a sequence's length are unused slots:
   fill them with NaN (host copy and device), so a kernel that reads one
   into its tiles (0 * NaN in P V) fails the check. cuk is empty unless varlen. */
static void poison_unused_rows(tbuf *t, const std::vector<int32_t> &lk, const std::vector<int32_t> &cuk,
                               int sk, int heads, int dim)
{
    for (size_t b = 0; b < lk.size(); b++) {
        int rows = cuk.empty() ? sk : cuk[b + 1] - cuk[b];
        for (int j = lk[b]; j < rows; j++)
            for (int h = 0; h < heads; h++) {
                int64_t at = (cuk.empty() ? (int64_t)b * t->s[0] : (int64_t)cuk[b] * t->s[1]) +
                             (int64_t)j * t->s[1] + (int64_t)h * t->s[2];
                for (int c = 0; c < dim; c++) t->h[(size_t)(at + c)] = 0x7FFF;
            }
    }
    CUDA_OK(cudaMemcpy(t->dev, t->h.data(), t->h.size() * 2, cudaMemcpyHostToDevice));
}

static void check(int ok, const char *name, const char *what)
{
    if (ok) { g_pass++; return; }
    g_fail++;
    printf("FAIL %s: %s\n", name, what);
}

#ifndef FLASHATTN_NO_HOPPER
/* fa__fastdiv (the sm_90a kernel's division by a number fixed at launch)
   against the division, on the host (the same expression as the kernel's
   but for __umulhi): every divisor up to 4096 with numerators around its
   multiples and near 2^31, and random divisors and numerators below 2^31;
   one check per group. */
static void fastdiv(void)
{
    uint64_t r = 0x2545F4914F6CDD1Dull;
    auto next = [&]() { r ^= r << 13; r ^= r >> 7; r ^= r << 17; return r; };
    long bad = 0;
    for (int d = 1; d <= 4096; d++) {
        const fa__fastdiv f = fa__fastdiv_for((uint32_t)d);
        for (int q = 0; q < 64; q++)
            for (int e = -1; e <= 1; e++) {
                const int n = q * d + e;
                if (n >= 0 && fa__fastdiv_q(f, n) != n / d) bad++;
            }
        for (int n = 2147483647; n > 2147483647 - 3 * d; n -= 7)
            if (fa__fastdiv_q(f, n) != n / d) bad++;
    }
    check(bad == 0, "fa__fastdiv", "divisors 1-4096 differ from the division");
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        const int d = 1 + (int)(next() % 2147483647u), n = (int)(next() % 2147483648u);
        if (fa__fastdiv_q(fa__fastdiv_for((uint32_t)d), n) != n / d) bad++;
    }
    check(bad == 0, "fa__fastdiv", "random divisors differ from the division");
}
#endif

static void run_case(const tcase *c)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = c->batch; p.seqlen_q = c->sq; p.seqlen_k = c->sk;
    p.heads_q = c->hq; p.heads_kv = c->hkv; p.head_dim = c->d; p.head_dim_v = c->dv;
    p.causal = c->causal; p.sliding_window = c->window; p.window_left = c->wl; p.window_right = c->wr;
    p.softcap = c->softcap; p.scale = c->scale;
    p.dropout_p = c->dropout; p.dropout_seed = 0x123456789abcdefull ^ g_rng; p.dropout_offset = (7ull << 32) + 12345;
    int dv = c->dv ? c->dv : c->d, hkv = c->hkv ? c->hkv : c->hq;

    /* variable lengths / cache lengths */
    std::vector<int32_t> cuq, cuk, lk;
    int32_t *d_cuq = NULL, *d_cuk = NULL, *d_lk = NULL;
    float *d_alibi = NULL;
    std::vector<float> alibi;
    int rows_q = -1, rows_k = -1;
    if (c->varlen) {
        cuq.push_back(0); cuk.push_back(0);
        for (int b = 0; b < c->batch; b++) {
            int lq = b == 0 ? c->sq : irand(c->sq + 1), lkk = b == 0 ? c->sk : irand(c->sk + 1);
            cuq.push_back(cuq.back() + lq); cuk.push_back(cuk.back() + lkk);
        }
        rows_q = cuq.back(); rows_k = cuk.back();
        CUDA_OK(cudaMalloc(&d_cuq, cuq.size() * 4)); CUDA_OK(cudaMalloc(&d_cuk, cuk.size() * 4));
        CUDA_OK(cudaMemcpy(d_cuq, cuq.data(), cuq.size() * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_cuk, cuk.data(), cuk.size() * 4, cudaMemcpyHostToDevice));
    }
    if (c->seqlens_k) {
        for (int b = 0; b < c->batch; b++) {
            int maxk = c->varlen ? cuk[b + 1] - cuk[b] : c->sk;
            lk.push_back(b == 0 ? 0 : b == 1 ? maxk : irand(maxk + 1));
        }
        CUDA_OK(cudaMalloc(&d_lk, lk.size() * 4));
        CUDA_OK(cudaMemcpy(d_lk, lk.data(), lk.size() * 4, cudaMemcpyHostToDevice));
    }
    if (c->alibi) {
        for (int h = 0; h < c->hq; h++) alibi.push_back((float)(0.02 + 0.4 * urand()));
        CUDA_OK(cudaMalloc(&d_alibi, alibi.size() * 4));
        CUDA_OK(cudaMemcpy(d_alibi, alibi.data(), alibi.size() * 4, cudaMemcpyHostToDevice));
    }

    tbuf q, k, v, o;
    make_buf(&q, c->dt, c->batch, c->sq, c->hq, c->d, c->strided, rows_q, 1);
    make_buf(&k, c->dt, c->batch, c->sk, hkv, c->d, c->strided, rows_k, 1, c->ramp);
    make_buf(&v, c->dt, c->batch, c->sk, hkv, dv, c->strided, rows_k, 1);
    if (c->seqlens_k) {
        poison_unused_rows(&k, lk, cuk, c->sk, hkv, c->d);
        poison_unused_rows(&v, lk, cuk, c->sk, hkv, dv);
    }
    make_buf(&o, c->dt, c->batch, c->sq, c->hq, dv, c->strided, rows_q, 0);
    int64_t nrows = c->varlen ? rows_q : (int64_t)c->batch * c->sq;
    int64_t nlse = (int64_t)c->hq * nrows;
    std::vector<float> lse((size_t)nlse + 1, NAN), lse2((size_t)nlse + 1);
    float *d_lse;
    CUDA_OK(cudaMalloc(&d_lse, lse.size() * 4));
    CUDA_OK(cudaMemcpy(d_lse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));

    fa_problem pd = p; /* device arrays */
    pd.cu_seqlens_q = d_cuq; pd.cu_seqlens_k = d_cuk; pd.seqlens_k = d_lk; pd.alibi_slopes = d_alibi;
    tbm_lists bm = {};
    void *d_ws = NULL;
    size_t ws_bytes = 0;
    if (c->bmask) {
        tbm_make(&bm, (c->bm_batch1 ? 1 : c->batch) * (c->bm_heads ? c->bm_heads : c->hq), c->sq, c->sk,
                 c->bmask - 1, !c->causal && !c->window, c->bm_heads, c->bm_batch1, bm_rnd, NULL, &p.block_mask,
                 &pd.block_mask);
        check(fa_forward_cuda_workspace_size(&pd, &ws_bytes) == FA_OK && ws_bytes > 0, c->name,
              "fa_forward_cuda_workspace_size with a block mask");
        if (!c->bm_no_ws) {
            CUDA_OK(cudaMalloc(&d_ws, ws_bytes));
            CUDA_OK(cudaMemset(d_ws, 0xff, ws_bytes)); /* (stale lists would show) */
        }
    }
    fa_status st = fa_forward_cuda(&pd, q.dview, k.dview, v.dview, o.dview, d_lse, d_ws, ws_bytes, NULL);
    check(st == FA_OK, c->name, fa_last_error());
    if (st != FA_OK) goto done;
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    {
        std::vector<uint16_t> og(o.h.size());
        CUDA_OK(cudaMemcpy(og.data(), o.dev, og.size() * 2, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(lse.data(), d_lse, lse.size() * 4, cudaMemcpyDeviceToHost));
        /* second run: same bits */
        CUDA_OK(cudaMemset(d_lse, 0xFF, lse.size() * 4));
        st = fa_forward_cuda(&pd, q.dview, k.dview, v.dview, o.dview, d_lse, d_ws, ws_bytes, NULL);
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<uint16_t> og2(o.h.size());
        CUDA_OK(cudaMemcpy(og2.data(), o.dev, og2.size() * 2, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(lse2.data(), d_lse, lse2.size() * 4, cudaMemcpyDeviceToHost));
        check(st == FA_OK && memcmp(og.data(), og2.data(), og.size() * 2) == 0 &&
                  memcmp(lse.data(), lse2.data(), (size_t)nlse * 4) == 0,
              c->name, "second run not bit-identical");

        /* reference, row by row, in parallel */
        fa_problem ph = p; /* (with the block mask's host lists) */
        ph.cu_seqlens_q = c->varlen ? cuq.data() : NULL;
        ph.cu_seqlens_k = c->varlen ? cuk.data() : NULL;
        ph.seqlens_k = c->seqlens_k ? lk.data() : NULL;
        ph.alibi_slopes = c->alibi ? alibi.data() : NULL;
        ref_dims r = ref_resolve(&ph);
        std::vector<char> written(og.size(), 0);
        /* the CPU fa_forward on the same host inputs, same output layout */
        std::vector<uint16_t> oc(o.h.size(), 0x7FFF);
        std::vector<float> lc((size_t)nlse + 1, NAN);
        fa_tensor ocv = o.view;
        ocv.data = oc.data();
        fa_status cst = fa_forward(&ph, q.view, k.view, v.view, ocv, lc.data(), NULL, 0);
        check(cst == FA_OK, c->name, "CPU fa_forward failed");
        long long badc = 0;
        const double rt = c->dt == FA_BF16 ? 2e-2 : 3e-3;
        const double dscale = c->dropout > 0 ? 1.0 / (1.0 - c->dropout) : 1.0;
        long long bad = 0, badl = 0, nanw = 0;
        double maxerr = 0;
        for (int b = 0; b < c->batch; b++) {
            int64_t sq = ref_len_q(&ph, b), sk = ref_len_k(&ph, b);
            std::vector<int64_t> koff((size_t)sk + 1), voff((size_t)sk + 1);
            std::vector<fa_tensor> kt((size_t)sk + 1, k.view), vt((size_t)sk + 1, v.view);
            for (int h = 0; h < c->hq; h++) {
                int hk = h / r.group;
                for (int64_t j = 0; j < sk; j++) {
                    koff[(size_t)j] = ref_offset(k.s, ph.cu_seqlens_k, b, j, hk);
                    voff[(size_t)j] = ref_offset(v.s, ph.cu_seqlens_k, b, j, hk);
                }
                FA_TEST_PARALLEL_FOR
                for (int64_t i = 0; i < sq; i++) {
                    std::vector<double> s((size_t)sk + 1), pr((size_t)sk + 1), orow((size_t)dv);
                    double L = ref_row(&ph, &r, b, h, i, sq, sk, q.view, ref_offset(q.s, ph.cu_seqlens_q, b, i, h),
                                       kt.data(), koff.data(), vt.data(), voff.data(), s.data(), pr.data(),
                                       orow.data());
                    int64_t ob = ref_offset(o.s, ph.cu_seqlens_q, b, i, h);
                    for (int cc = 0; cc < dv; cc++) {
                        uint16_t bits = og[(size_t)(ob + cc)];
                        float got = from_bits(c->dt, bits);
                        double ref = L == -INFINITY ? 0.0 : orow[(size_t)cc];
                        written[(size_t)(ob + cc)] = 1;
                        if (got != got) { nanw++; continue; }
                        double err = fabs(got - ref);
                        if (err > maxerr) maxerr = err;
                        if (err > (rt + rt * fabs(ref)) * dscale) bad++;
                        float cg = from_bits(c->dt, oc[(size_t)(ob + cc)]);
                        if (!(fabs(cg - got) <= (2 * rt + 2 * rt * fabs(ref)) * dscale)) badc++;
                    }
                    float lg = lse[(size_t)ref_lse_index(&ph, b, h, i)];
                    if (L == -INFINITY ? lg != -INFINITY : !(fabs(lg - L) <= 1e-3 + 1e-4 * fabs(L))) badl++;
                }
            }
        }
        long long gap = 0;
        for (size_t i = 0; i < og.size(); i++)
            if (!written[i] && og[i] != 0x7FFF) gap++;
        for (size_t i = (size_t)nlse; i < lse.size(); i++)
            if (lse[i] == lse[i]) gap++;
        char msg[256];
        snprintf(msg, sizeof msg, "O: %lld out of tolerance (max err %.3g), %lld unwritten; L: %lld wrong; %lld "
                 "written outside", bad, maxerr, nanw, badl, gap);
        check(bad == 0 && nanw == 0 && badl == 0 && gap == 0, c->name, msg);
        snprintf(msg, sizeof msg, "GPU vs CPU fa_forward: %lld elements differ beyond 2x tolerance", badc);
        check(cst == FA_OK && badc == 0, c->name, msg);
        printf("%-4s %-40s %s%s  (max |err| %.2e)\n", bad || nanw || badl || gap || badc ? "FAIL" : "ok", c->name,
               c->dt == FA_BF16 ? "bf16" : "f16 ", g_path, maxerr);
    }
done:
    cudaFree(q.dev); cudaFree(k.dev); cudaFree(v.dev); cudaFree(o.dev); cudaFree(d_lse);
    cudaFree(d_cuq); cudaFree(d_cuk); cudaFree(d_lk); cudaFree(d_alibi);
    if (c->bmask) tbm_free(&bm);
    cudaFree(d_ws);
}

/* ---- bad arguments: rejected before any launch, outputs untouched ---- */
static void bad_args(void)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 1; p.seqlen_q = 64; p.seqlen_k = 64; p.heads_q = 2; p.head_dim = 64;
    tbuf q, k, v, o;
    make_buf(&q, FA_BF16, 1, 64, 2, 64, 0, -1, 1);
    make_buf(&k, FA_BF16, 1, 64, 2, 64, 0, -1, 1);
    make_buf(&v, FA_BF16, 1, 64, 2, 64, 0, -1, 1);
    make_buf(&o, FA_BF16, 1, 64, 2, 64, 0, -1, 0);
    struct { const char *name; fa_status want; const char *needle; } t[16];
    fa_status got[16];
    int n = 0;
    fa_tensor qq, kk, oo;
    fa_problem pp;

    qq = q.dview; qq.dtype = FA_F32; kk = k.dview; kk.dtype = FA_F32;
    fa_tensor vv = v.dview; vv.dtype = FA_F32; oo = o.dview; oo.dtype = FA_F32;
    got[n] = fa_forward_cuda(&p, qq, kk, vv, oo, NULL, NULL, 0, NULL);
    t[n].name = "f32 tensors -> unsupported"; t[n].want = FA_ERROR_UNSUPPORTED; t[n].needle = "f32"; n++;
    if (strstr(fa_last_error(), t[n - 1].needle) == NULL) got[n - 1] = FA_OK;

    qq = q.dview; qq.data = (char *)q.dev + 2;
    got[n] = fa_forward_cuda(&p, qq, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "misaligned q.data"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = "q.data"; n++;
    if (strstr(fa_last_error(), t[n - 1].needle) == NULL) got[n - 1] = FA_OK;

    kk = k.dview; kk.seq_stride = 130; kk.head_stride = 65; /* rows not 16-byte aligned */
    got[n] = fa_forward_cuda(&p, q.dview, kk, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "k strides not multiples of 8"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = "k strides"; n++;
    if (strstr(fa_last_error(), t[n - 1].needle) == NULL) got[n - 1] = FA_OK;

    oo = o.dview; oo.dtype = FA_F16;
    got[n] = fa_forward_cuda(&p, q.dview, k.dview, v.dview, oo, NULL, NULL, 0, NULL);
    t[n].name = "mixed dtypes"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = ""; n++;

    pp = p; pp.head_dim = 300;
    got[n] = fa_forward_cuda(&pp, q.dview, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "head_dim 300"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = ""; n++;

    pp = p; pp.heads_kv = 3; pp.heads_q = 4;
    got[n] = fa_forward_cuda(&pp, q.dview, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "heads_q % heads_kv != 0"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = ""; n++;

    got[n] = fa_forward_cuda(NULL, q.dview, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "NULL problem"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = ""; n++;

    qq = q.dview; qq.data = NULL;
    got[n] = fa_forward_cuda(&p, qq, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "NULL q.data"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = ""; n++;

    /* block masks: the GPU's block size, the workspace, the calls that refuse them */
    int32_t *d_bm;
    CUDA_OK(cudaMalloc(&d_bm, 64));
    CUDA_OK(cudaMemset(d_bm, 0, 64));
    pp = p; pp.block_mask.kv_num_blocks = d_bm; pp.block_mask.kv_indices = d_bm + 4;
    pp.block_mask.block_q = 64;
    got[n] = fa_forward_cuda(&pp, q.dview, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "block_mask.block_q 64"; t[n].want = FA_ERROR_UNSUPPORTED; t[n].needle = "block_mask.block_q"; n++;
    if (strstr(fa_last_error(), t[n - 1].needle) == NULL) got[n - 1] = FA_OK;
    pp.block_mask.block_q = 0;
    got[n] = fa_forward_cuda(&pp, q.dview, k.dview, v.dview, o.dview, NULL, d_bm, 4, NULL);
    t[n].name = "block mask, workspace too small"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = "workspace_size"; n++;
    if (strstr(fa_last_error(), t[n - 1].needle) == NULL) got[n - 1] = FA_OK;
    pp.block_mask.kv_indices = NULL;
    got[n] = fa_forward_cuda(&pp, q.dview, k.dview, v.dview, o.dview, NULL, NULL, 0, NULL);
    t[n].name = "block mask, kv_indices NULL"; t[n].want = FA_ERROR_INVALID_ARGUMENT; t[n].needle = "kv_indices"; n++;
    if (strstr(fa_last_error(), t[n - 1].needle) == NULL) got[n - 1] = FA_OK;
#ifndef FLASHATTN_NO_BACKWARD
    {
        size_t wsb = 0;
        pp.block_mask.kv_indices = d_bm + 4;
        got[n] = fa_backward_cuda_workspace_size(&pp, &wsb); /* (taken: the backward walks block masks too) */
        t[n].name = "block mask, fa_backward_cuda_workspace_size"; t[n].want = FA_OK; t[n].needle = ""; n++;
    }
#endif

    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> og(o.h.size());
    CUDA_OK(cudaMemcpy(og.data(), o.dev, og.size() * 2, cudaMemcpyDeviceToHost));
    int untouched = 1;
    for (size_t i = 0; i < og.size(); i++) untouched &= og[i] == 0x7FFF;
    for (int i = 0; i < n; i++) {
        char msg[200];
        snprintf(msg, sizeof msg, "bad args: %s: got status %d, want %d", t[i].name, (int)got[i], (int)t[i].want);
        check(got[i] == t[i].want, "bad-args", msg);
        printf("%-4s bad args: %s\n", got[i] == t[i].want ? "ok" : "FAIL", t[i].name);
    }
    check(untouched, "bad-args", "o written by a failing call");
    cudaFree(q.dev); cudaFree(k.dev); cudaFree(v.dev); cudaFree(o.dev); cudaFree(d_bm);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    cudaDeviceProp prop;
    setvbuf(stdout, NULL, _IOLBF, 0); /* a log cut short still shows what ran */
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d)%s\n", prop.name, prop.major, prop.minor, quick ? ", quick size list" : "");
    std::vector<tcase> cs;
    const int dims[] = {32, 64, 96, 128, 192, 256};
    const int lens_full[][2] = {{1, 7}, {7, 1}, {113, 203}, {203, 113}, {1023, 4097}, {4097, 1023}};
    const int lens_quick[][2] = {{1, 7}, {7, 1}, {113, 203}, {203, 113}};
    static char names[768][64];
    int nn = 0;
#define NAME(...) (snprintf(names[nn], 64, __VA_ARGS__), names[nn++])
    for (int dti = 0; dti < 2; dti++) {
        fa_dtype dt = dti ? FA_BF16 : FA_F16;
        int nl = quick ? 4 : 6;
        for (int di = 0; di < 6; di++) {
            int d = dims[di];
            for (int li = 0; li < nl; li++) {
                const int *L = quick ? lens_quick[li] : lens_full[li];
                if (L[0] * (int64_t)L[1] > 1000000 && (d != 64 && d != 128)) continue; /* big sizes: d 64, 128 */
                for (int causal = 0; causal < 2; causal++) {
                    tcase c = {};
                    c.dt = dt; c.batch = 2; c.sq = L[0]; c.sk = L[1]; c.hq = 2; c.d = d; c.causal = causal;
                    if (L[0] * (int64_t)L[1] > 1000000) c.batch = 1;
                    c.name = NAME("d%d sq%d sk%d%s", d, c.sq, c.sk, causal ? " causal" : "");
                    cs.push_back(c);
                }
            }
        }
        /* features, at odd sizes */
        tcase base = {};
        base.dt = dt; base.batch = 2; base.sq = 113; base.sk = 203; base.hq = 4; base.d = 64;
        tcase c;
        c = base; c.d = 128; c.dv = 64; c.name = NAME("dv != d (128, 64)"); cs.push_back(c);
        c = base; c.d = 64; c.dv = 128; c.causal = 1; c.name = NAME("dv != d (64, 128) causal"); cs.push_back(c);
        c = base; c.d = 40; c.dv = 72; c.name = NAME("padded dims (40, 72)"); cs.push_back(c);
        c = base; c.d = 192; c.dv = 128; c.name = NAME("dv != d (192, 128)"); cs.push_back(c);
        c = base; c.d = 8; c.sq = 203; c.sk = 113; c.causal = 1; c.name = NAME("d 8 causal sq > sk"); cs.push_back(c);
        c = base; c.window = 1; c.wl = 17; c.wr = 5; c.name = NAME("window (17, 5)"); cs.push_back(c);
        c = base; c.window = 1; c.wl = 40; c.wr = 9; c.causal = 1; c.sq = 203; c.sk = 113; c.d = 128;
        c.name = NAME("window (40) + causal, sq > sk"); cs.push_back(c);
        c = base; c.softcap = 3.0f; c.scale = 1.0f; c.name = NAME("softcap 3, scale 1"); cs.push_back(c);
        c = base; c.alibi = 1; c.causal = 1; c.name = NAME("alibi causal"); cs.push_back(c);
        c = base; c.alibi = 1; c.softcap = 5.0f; c.d = 128; c.name = NAME("alibi + softcap d128"); cs.push_back(c);
        c = base; c.hq = 8; c.hkv = 2; c.causal = 1; c.name = NAME("GQA 8/2 causal"); cs.push_back(c);
        c = base; c.hq = 6; c.hkv = 1; c.d = 128; c.name = NAME("MQA 6/1 d128"); cs.push_back(c);
        c = base; c.batch = 4; c.varlen = 1; c.name = NAME("varlen b4"); cs.push_back(c);
        c = base; c.batch = 4; c.varlen = 1; c.causal = 1; c.d = 128; c.name = NAME("varlen b4 causal d128"); cs.push_back(c);
        c = base; c.batch = 3; c.seqlens_k = 1; c.causal = 1; c.name = NAME("seqlens_k b3 causal"); cs.push_back(c);
        c = base; c.batch = 4; c.varlen = 1; c.seqlens_k = 1; c.hq = 4; c.hkv = 2; c.name = NAME("varlen + seqlens_k + GQA"); cs.push_back(c);
        c = base; c.strided = 1; c.name = NAME("padded strides"); cs.push_back(c);
        c = base; c.strided = 1; c.varlen = 1; c.batch = 3; c.d = 96; c.causal = 1; c.name = NAME("padded strides varlen d96"); cs.push_back(c);
        c = base; c.dropout = 0.17f; c.name = NAME("dropout 0.17"); cs.push_back(c);
        c = base; c.dropout = 0.5f; c.causal = 1; c.d = 128; c.hq = 4; c.hkv = 2; c.name = NAME("dropout 0.5 causal GQA d128"); cs.push_back(c);
        c = base; c.scale = -0.2f; c.name = NAME("negative scale"); cs.push_back(c);
        for (int d = 64; d <= 256; d *= 2)
            for (int causal = 0; causal < 2; causal++) {
                c = base; c.d = d; c.sq = 203; c.sk = 1500; c.scale = 2.0f; c.ramp = 1; c.causal = causal;
                c.name = NAME("d%d rising scores (scale 2, keys ramped)%s", d, causal ? " causal" : ""); cs.push_back(c);
            }
        /* the first 90 query rows see no key (O = 0, L = -inf), the rest some */
        for (int d = 64; d <= 256; d *= 2) {
            c = base; c.d = d; c.sq = 203; c.sk = 113; c.causal = 1; c.ramp = 1;
            c.name = NAME("d%d causal sq > sk, keys ramped", d); cs.push_back(c);
        }
        /* d 64's three- and four-warpgroup shapes where a warpgroup's
           rows see fewer key blocks than the tile (the kernel's WG_STOP),
           or none (its first 64 rows here: O = 0, L = -inf), or lie past
           the sequence (idle); main() runs each with and without a grid cap */
        for (int k = 0; k < 2; k++) {
            /* (shape: 1 + fa__sm90_shape's SH, 2: three warpgroups in
               192-row tiles, 3: four in 256-row tiles with 64-key blocks,
               where 1000 rows are 4 tiles, the first from row -24 under
               a causal / window mask, and 203 rows leave the fourth
               warpgroup 11) */
            for (int shape = 2; shape <= 3; shape++) {
                c = base; c.d = 64; c.sq = 203; c.sk = 113; c.causal = 1; c.ramp = 1; c.sm90_shape = shape;
                c.name = NAME("d64 causal sq > sk, keys ramped, %d warpgroups", shape + 1); cs.push_back(c);
                c = base; c.d = 64; c.sq = 1000; c.sk = 1000; c.causal = 1; c.hq = 4; c.hkv = 2; c.sm90_shape = shape;
                c.name = NAME("d64 1000 causal GQA, %d warpgroups", shape + 1); cs.push_back(c);
                c = base; c.d = 64; c.sq = 203; c.sk = 500; c.window = 1; c.wl = 70; c.wr = 5; c.sm90_shape = shape;
                c.name = NAME("d64 203x500 window (70, 5), %d warpgroups", shape + 1); cs.push_back(c);
                /* the tiles end where the sequence does (tile_row0): 1000 rows
                   in 6 tiles of 192 start at row -152, so the first tile's first
                   two warpgroups have no rows and its third rows -24 .. 39; here
                   with a window, and with O copied out by the warpgroups (head_dim_v
                   60: no TMA store) */
                c = base; c.d = 64; c.sq = 1000; c.sk = 1200; c.window = 1; c.wl = 100; c.wr = 3; c.sm90_shape = shape;
                c.name = NAME("d64 1000x1200 window (100, 3), %d warpgroups", shape + 1); cs.push_back(c);
                c = base; c.d = 64; c.dv = 60; c.sq = 1000; c.sk = 1000; c.causal = 1; c.strided = 1; c.sm90_shape = shape;
                c.name = NAME("d64 dv 60 1000 causal strided, %d warpgroups", shape + 1); cs.push_back(c);
                /* without a mask: 1000 rows (16 warpgroup rows of 64) in
                   192-row tiles from row -64 (fa__sm90_walk's pad), the first
                   and the last with two warpgroups' rows (the first one's
                   below 0, the last one's past the end); 203 rows (4) in
                   two tiles from row -64 (here with O copied out by the
                   warpgroups: head_dim_v 60); with four warpgroups a last
                   tile of 232 and of 11 rows */
                c = base; c.d = 64; c.sq = 1000; c.sk = 777; c.hq = 4; c.hkv = 2; c.sm90_shape = shape;
                c.name = NAME("d64 1000x777 GQA, %d warpgroups, short last tile", shape + 1); cs.push_back(c);
                c = base; c.d = 64; c.dv = 60; c.sq = 203; c.sk = 300; c.strided = 1; c.sm90_shape = shape;
                c.name = NAME("d64 dv 60 203x300 strided, %d warpgroups, short last tile", shape + 1); cs.push_back(c);
            }
            /* the benchmark's non-causal 1k: 16 warpgroup rows in 6 tiles
               of 192 from row -64 */
            c = base; c.d = 64; c.sq = 1024; c.sk = 1024; c.batch = 2; c.sm90_shape = 2;
            c.name = NAME("d64 1024 b2, 3 warpgroups, tiles from row -64"); cs.push_back(c);
            /* the flat walk (the kernel's FLAT: three warpgroups, persistent,
               no mask, one length for all): tiles of any three warpgroup
               rows of the list of all sequences' rows, so a tile may hold
               the end of one sequence (or batch) and the start of the next.
               512 rows are 8 warpgroup rows (two tiles in eight span two
               sequences), here on 48 sequences (144 tiles of one sequence,
               more than the SMs: persistent without a grid cap too; not in
               the sanitizers' quick list); 460 x 1111 with rising scores, 8
               warpgroup rows with a partial last one; 200 rows (4) of 7
               heads, whose last tile has one warpgroup with rows and two
               idle */
            if (!quick) {
                c = base; c.d = 64; c.sq = 512; c.sk = 512; c.batch = 4; c.hq = 12; c.hkv = 4; c.sm90_shape = 2;
                c.name = NAME("d64 512 b4 GQA 12/4, 3 warpgroups, flat tiles"); cs.push_back(c);
            }
            c = base; c.d = 64; c.sq = 460; c.sk = 1111; c.batch = 2; c.hq = 3; c.hkv = 3; c.ramp = 1; c.sm90_shape = 2;
            c.name = NAME("d64 460x1111 b2, keys ramped, 3 warpgroups, flat tiles"); cs.push_back(c);
            c = base; c.d = 64; c.sq = 200; c.sk = 333; c.batch = 1; c.hq = 7; c.hkv = 7; c.strided = 1; c.sm90_shape = 2;
            c.name = NAME("d64 200x333 7 heads strided, 3 warpgroups, flat tiles"); cs.push_back(c);
            /* the lengths that take four warpgroups (fa__sm90_quad_d64), whole tiles */
            c = base; c.d = 64; c.sq = 512; c.sk = 512; c.causal = 1; c.hq = 4; c.hkv = 2; c.sm90_shape = 3;
            c.name = NAME("d64 512 causal GQA, 4 warpgroups"); cs.push_back(c);
            c = base; c.d = 64; c.sq = 256; c.sk = 256; c.batch = 3; c.sm90_shape = 3;
            c.name = NAME("d64 256 b3, 4 warpgroups"); cs.push_back(c);
            /* d 256's WG_STOP: 1050 rows end 26 rows into a 128-row tile (its
               second warpgroup has none), and with sq > sk the first 90 rows
               see no key */
            c = base; c.d = 256; c.sq = 1050; c.sk = 1050; c.causal = 1; c.hq = 4; c.hkv = 2;
            c.name = NAME("d256 1050 causal GQA"); cs.push_back(c);
            c = base; c.d = 256; c.sq = 203; c.sk = 113; c.causal = 1; c.ramp = 1;
            c.name = NAME("d256 causal sq > sk, keys ramped (again)"); cs.push_back(c);
        }
        /* the causal tail order of a block per tile (fa__sm90_walk's tail):
           32 heads x batches of 3 query blocks, of which the last 22 (on 132
           SMs) go heaviest first and the first 10 head by head; twice in a
           row, as every other case caps the grid (persistent, no tail) */
        for (int k = 0; k < 2; k++) {
            c = base; c.d = 256; c.sq = 300; c.sk = 300; c.causal = 1; c.hq = 16; c.hkv = 4;
            c.name = NAME("d256 300 causal GQA 16/4, tail order"); cs.push_back(c);
        }
        /* a block per tile copies Q, K_0 and V_0 before it knows whether
           the tile has keys (the kernel's EARLY): 400 rows over 100 keys,
           causal, leave rows 0-299 without a key, so whole tiles have none
           (d 256: two of 128 rows; d 64 on three warpgroups: one of 192);
           each twice in a row, one of the pair with an uncapped grid */
        for (int k = 0; k < 2; k++) {
            c = base; c.d = 256; c.sq = 400; c.sk = 100; c.causal = 1; c.ramp = 1;
            c.name = NAME("d256 400x100 causal, tiles without keys"); cs.push_back(c);
        }
        for (int k = 0; k < 2; k++) {
            c = base; c.d = 64; c.sq = 400; c.sk = 100; c.causal = 1; c.hq = 4; c.hkv = 2; c.sm90_shape = 2;
            c.name = NAME("d64 400x100 causal GQA, 3 warpgroups, tiles without keys"); cs.push_back(c);
        }
        /* shapes that reach the sm_90a kernel's tails, maps and tile edges */
        c = base; c.d = 100; c.causal = 1; c.strided = 1; c.name = NAME("padded dims (100, 100) causal, strided"); cs.push_back(c);
        c = base; c.d = 256; c.hq = 8; c.hkv = 2; c.window = 1; c.wl = 60; c.wr = 7; c.name = NAME("GQA 8/2 d256 window"); cs.push_back(c);
        c = base; c.d = 128; c.strided = 1; c.causal = 1; c.hq = 4; c.hkv = 1; c.name = NAME("padded strides MQA d128 causal"); cs.push_back(c);
        c = base; c.d = 256; c.batch = 3; c.seqlens_k = 1; c.name = NAME("seqlens_k b3 d256"); cs.push_back(c);
        c = base; c.d = 200; c.dv = 256; c.varlen = 1; c.batch = 3; c.causal = 1; c.name = NAME("varlen (200, 256) causal"); cs.push_back(c);
        c = base; c.d = 64; c.sq = 300; c.sk = 700; c.varlen = 1; c.batch = 5; c.name = NAME("varlen b5 d64 300x700"); cs.push_back(c);
        if (!quick) {
            c = base; c.d = 128; c.sq = 1023; c.sk = 4097; c.varlen = 1; c.batch = 3; c.causal = 1; c.hq = 4; c.hkv = 2;
            c.name = NAME("varlen b3 d128 1023x4097 causal GQA"); cs.push_back(c);
            c = base; c.d = 256; c.sq = 1023; c.sk = 1500; c.causal = 1; c.window = 1; c.wl = 300; c.wr = 0;
            c.name = NAME("d256 1023x1500 causal window"); cs.push_back(c);
            c = base; c.d = 256; c.sq = 1023; c.sk = 1023; c.causal = 1; c.window = 1; c.wl = 300; c.wr = 0; c.alibi = 1;
            c.name = NAME("d256 1023 window + alibi"); cs.push_back(c);
            c = base; c.d = 128; c.sq = 4097; c.sk = 4097; c.batch = 1; c.hq = 2; c.causal = 1; c.softcap = 10; c.dropout = 0.1f;
            c.name = NAME("d128 4097 causal softcap dropout"); cs.push_back(c);
        }
    }
    /* block masks (128 x 128, device lists; >>gpu-bsparse): the sm_90a
       kernel at d 64 and 128 (no extras), the sm_80 kernel's walk
       elsewhere and again for every sm_90a case (below); odd lengths, a
       key block partly past sk, causal and window bounds that cut listed
       blocks, rows that list none, GQA masks per KV head, one mask for
       every sequence of a variable-length batch */
    for (int dti = 0; dti < 2; dti++) {
        tcase base = {};
        base.dt = dti ? FA_BF16 : FA_F16; base.batch = 2; base.sq = 1000; base.sk = 1000; base.hq = 2; base.d = 64;
        base.bmask = 1 + 30;
        tcase c;
        for (int d = 64; d <= 128; d *= 2)
            for (int causal = 0; causal < 2; causal++) {
                c = base; c.d = d; c.causal = causal;
                c.name = NAME("block mask 30%% d%d 1000%s", d, causal ? " causal" : ""); cs.push_back(c);
            }
        c = base; c.sq = 203; c.sk = 1500; c.ramp = 1; c.bmask = 1 + 50; c.scale = 2.0f;
        c.name = NAME("block mask 50%% d64 203x1500, keys ramped"); cs.push_back(c);
        c = base; c.d = 128; c.sq = 1500; c.sk = 700; c.causal = 1;
        c.name = NAME("block mask d128 1500x700 causal (rows without keys)"); cs.push_back(c);
        c = base; c.bmask = 1; c.name = NAME("block mask 0%% (no block listed)"); cs.push_back(c);
        c = base; c.d = 128; c.bmask = 101; c.causal = 1; c.name = NAME("block mask 100%% d128 causal"); cs.push_back(c);
        c = base; c.hq = 8; c.hkv = 2; c.bm_heads = 2; c.bm_batch1 = 1; c.causal = 1;
        c.name = NAME("block mask per KV head, one for all, GQA 8/2"); cs.push_back(c);
        c = base; c.d = 128; c.batch = 3; c.varlen = 1; c.causal = 1; c.bm_batch1 = 1;
        c.name = NAME("block mask varlen b3 causal d128, one mask"); cs.push_back(c);
        c = base; c.batch = 3; c.seqlens_k = 1; c.bmask = 1 + 60;
        c.name = NAME("block mask seqlens_k b3"); cs.push_back(c);
        c = base; c.window = 1; c.wl = 300; c.wr = 40; c.bmask = 1 + 70;
        c.name = NAME("block mask 70%% window (300, 40)"); cs.push_back(c);
        c = base; c.d = 128; c.softcap = 5.0f; c.alibi = 1; c.causal = 1;
        c.name = NAME("block mask d128 softcap + alibi causal"); cs.push_back(c);
        c = base; c.dropout = 0.2f; c.name = NAME("block mask dropout 0.2"); cs.push_back(c);
        c = base; c.d = 256; c.causal = 1; c.hq = 4; c.hkv = 2; c.name = NAME("block mask d256 causal GQA"); cs.push_back(c);
        c = base; c.d = 96; c.dv = 72; c.strided = 1; c.name = NAME("block mask d96 dv72 strided"); cs.push_back(c);
        c = base; c.d = 128; c.strided = 1; c.bm_no_ws = 1; c.name = NAME("block mask, no workspace given, strided"); cs.push_back(c);
        if (!quick) {
            c = base; c.d = 128; c.sq = 4097; c.sk = 4097; c.batch = 1; c.hq = 4; c.bmask = 1 + 20; c.causal = 1;
            c.name = NAME("block mask 20%% d128 4097 causal"); cs.push_back(c);
            c = base; c.d = 64; c.sq = 4097; c.sk = 4097; c.batch = 1; c.hq = 4; c.bmask = 1 + 10;
            c.name = NAME("block mask 10%% d64 4097"); cs.push_back(c);
        }
    }
    /* a window side of INT_MAX (no bound on that side) must not overflow the
       kernels' bounds: sq > sk and sq < sk, d 64 / 128, both kernels */
    {
        tcase c = {};
        c.dt = FA_BF16; c.batch = 2; c.hq = 2; c.window = 1;
        c.d = 64; c.sq = 203; c.sk = 113; c.wl = INT_MAX; c.wr = 3;
        c.name = NAME("window (INT_MAX, 3) sq > sk"); cs.push_back(c);
        c.d = 128; c.sq = 113; c.sk = 203; c.wl = 5; c.wr = INT_MAX; c.dt = FA_F16;
        c.name = NAME("window (5, INT_MAX) sq < sk"); cs.push_back(c);
        c.d = 128; c.sq = 1000; c.sk = 700; c.wl = INT_MAX; c.wr = INT_MAX; c.causal = 1;
        c.name = NAME("window (INT_MAX, INT_MAX) causal"); cs.push_back(c);
    }
    /* On compute capability 9.0 a case the sm_90a kernel ran is run again on
       the sm_80 kernel (fresh inputs from the same seed), so both are tested.
       Every other case caps the sm_90a kernel's persistent grid at 1 to 5
       blocks, so that each block walks many tiles (its barrier phases and
       ring position carried from tile to tile), and the pairs of cases go
       round the shapes (fa__sm90_shape's SH: the base shape, the one for
       long rows, d 64: three consumer warpgroups, d 128: 176-key blocks;
       and d 64's four warpgroups), which the sizes here would otherwise
       seldom reach. */
    int sm90_cases = 0;
    char path[40]; /* the report line's label of how the sm_90a kernel was run */
    /* FA_TEST_ONLY=a,b,...: only the cases whose names hold one of these
       strings (a shorter run under the sanitizers; each case keeps its
       index, so its grid cap and shape are those of the whole list) */
    const char *only = getenv("FA_TEST_ONLY");
    auto chosen = [&](const char *name) {
        if (!only || !*only) return true;
        for (const char *a = only; *a;) {
            const char *e = strchr(a, ',');
            const size_t n = e ? (size_t)(e - a) : strlen(a);
            if (n && std::string(name).find(std::string(a, n)) != std::string::npos) return true;
            a += n + (e ? 1 : 0);
        }
        return false;
    };
    int shard_k, shard_n; /* FA_TEST_SHARD (tests/shard.h) */
    if (!test_shard(&shard_k, &shard_n)) return 2;
    for (size_t i = 0; i < cs.size(); i++) {
        if (!chosen(cs[i].name) || (int)(i % shard_n) != shard_k) continue;
        const int before = fa__sm90_launches;
        g_rng = 0x9E3779B97F4A7C15ull * (i + 1);
        fa__sm90_grid_cap = i % 2 ? 1 + (int)(i / 2) % 5 : 0;
        fa__sm90_shape_sel = cs[i].sm90_shape ? cs[i].sm90_shape - 1 : (int)(i / 2) % 3;
        const char *shape_name[3] = {"", " [long]", " [shape 2]"}; /* (shape 2: d 64's four warpgroups) */
        if (fa__sm90_grid_cap)
            snprintf(path, sizeof path, "%s [grid cap %d]", shape_name[fa__sm90_shape_sel], fa__sm90_grid_cap);
        else
            snprintf(path, sizeof path, "%s", shape_name[fa__sm90_shape_sel]);
        g_path = path;
        run_case(&cs[i]);
        fa__sm90_grid_cap = 0;
        fa__sm90_shape_sel = -1;
        if (fa__sm90_launches == before) continue;
        sm90_cases++;
        g_rng = 0x9E3779B97F4A7C15ull * (i + 1);
        g_path = " [sm_80 kernel]";
        fa__sm90_disable = 1;
        run_case(&cs[i]);
        fa__sm90_disable = 0;
    }
    g_path = "";
    printf("%d of %zu cases ran on the sm_90a kernel (then again on the sm_80 kernel)\n", sm90_cases, cs.size());
#ifdef FLASHATTN_NO_HOPPER
    check(sm90_cases == 0, "sm_90a", "FLASHATTN_NO_HOPPER, but a case took the sm_90a kernel");
#else
    if (prop.major == 9 && prop.minor == 0)
        check(sm90_cases > 0, "sm_90a", "compute capability 9.0 but no case took the sm_90a kernel");
#endif
    bad_args();
#ifndef FLASHATTN_NO_HOPPER
    fastdiv();
#endif
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
