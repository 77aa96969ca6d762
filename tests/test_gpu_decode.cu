/* tests/test_gpu_decode.cu - fa_decode_cuda against the fp64 reference
   (tests/reference.h) and against the CPU fa_decode.

   Build: make build/test_gpu_decode   (nvcc; see the Makefile's GPU section)
   Run:   build/test_gpu_decode [--quick]   (--quick: a small subset, for
          compute-sanitizer, which runs kernels ~100x slower)

   Every case: fresh random inputs; slots of the cache past each sequence's
   length hold NaN (they must never be read); outputs are NaN-poisoned before
   the call (every element must be written); after the call the whole cache
   allocation, padding included, must equal the expected cache byte for byte
   (the appended tokens in exactly their slots, nothing else changed).
   Ends with "N passed, M failed". */
#define FLASHATTN_TEST_HOOKS /* fa__dec_pairs: run cases on the head-pair kernel too */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#ifdef FA_EMU /* the kernels on the CPU (make test-gpu-emu): see tests/emu_cuda.h */
#define FLASHATTN_CUDA_EMU_DEC
#include "emu_cuda.h"
#endif
#include "test_util.h"

#include <cuda_runtime.h>

static int QUICK = 0;

#include "cuda_check.h"
#include "shard.h"

static uint64_t case_seed(int section, int index) { return 7000003ull * (uint64_t)section + (uint64_t)index * 7919ull + 101; }

/* Tolerances per dtype: P is rounded to the input type for P V, as in the
   CPU path, so the same bounds apply. */
static tol tol_out(fa_dtype d)
{
    tol t;
    if (d == FA_F16) { t.atol = 3e-3; t.rtol = 3e-3; }
    else { t.atol = 2e-2; t.rtol = 2e-2; }
    return t;
}
static tol tol_lse(fa_dtype d) { tol t; (void)d; t.atol = 1e-3; t.rtol = 1e-5; return t; }

/* A host tensor for the GPU: packed, or padded by whole 16-byte chunks
   (the GPU path needs 16-byte aligned rows). */
static tens tens_make_gpu(fa_dtype dt, int nb, int seq, int heads, int dim, int padded)
{
    uint64_t dummy = 1;
    int64_t s2 = dim + 8, s1 = heads * s2 + 16, s0 = (int64_t)seq * s1 + 24;
    if (!padded) return tens_make(dt, nb, seq, heads, dim, LAYOUT_PACKED, &dummy);
    return tens_make_strided(dt, nb, seq, heads, dim, s0, s1, s2, 1);
}

typedef struct dcase {
    int batch, sq, cap, hq, hkv, d;
    fa_dtype dt;
    int page_size;       /* 0 = contiguous */
    int append, splits, causal, layout, null_seqlens, no_lse, use_ws, use_stream;
    const int *lens;     /* fixed cache lengths per sequence (NULL = random, mixed) */
    float softcap;
    int alibi, window, wl, wr;
    int vs_cpu;          /* also compare with the CPU fa_decode */
    int pairs;           /* 1: two KV heads per CTA wherever they fit (fa__dec_pairs), 0: the plan's rule */
} dcase;

/* FA_TEST_SHARD=k/n (tests/shard.h): run_decode call i runs when i % n == k
   (each keeps its seed, case_seed) */
static int g_shard_k, g_shard_n = 1, g_calls;

static void run_decode_case(const dcase *c, uint64_t seed);
/* 1 if the case ran in this shard */
static int run_decode(const dcase *c, uint64_t seed)
{
    if (g_calls++ % g_shard_n != g_shard_k) return 0;
    run_decode_case(c, seed);
    return 1;
}

static void run_decode_case(const dcase *c, uint64_t seed)
{
    uint64_t rng = seed;
    fa_problem p;
    char ctx[512];
    int32_t *used, *table = NULL;
    float slopes[256];
    int b, pps = 0, npages = 0, hkv = c->hkv ? c->hkv : c->hq, cap = c->cap, i;
    tens q, kc, vc, kn, vn, o, kexp, vexp, ocpu;
    double *oref, *lref;
    float *lse, *lse_cpu;
    int64_t nl, bad;
    fa_status st;
    void *dq = 0, *dkc = 0, *dvc = 0, *dkn = 0, *dvn = 0, *dout = 0, *dws = 0;
    float *dlse = 0, *dslopes = 0;
    int32_t *dused = 0, *dtable = 0;
    size_t ws_bytes = 0;
    int pair_runs = 0; /* fa__dec_pair_launches before the call */
    cudaStream_t stream = 0;
    fa_tensor tq, tkc, tvc, tkn, tvn, to;

    snprintf(ctx, sizeof ctx,
             "gpu-decode seed=%llu b=%d sq=%d cap=%d hq=%d hkv=%d d=%d %s page=%d%s splits=%d%s%s%s%s%s layout=%d%s%s%s%s",
             (unsigned long long)seed, c->batch, c->sq, c->cap, c->hq, hkv, c->d, dt_name(c->dt),
             c->page_size, c->append ? " append" : "", c->splits, c->causal ? " causal" : "",
             c->null_seqlens ? " no-seqlens" : "", c->softcap > 0 ? " softcap" : "",
             c->alibi ? " alibi" : "", c->window ? " window" : "", c->layout,
             c->use_ws ? " ws" : "", c->use_stream ? " stream" : "", c->no_lse ? " no-lse" : "",
             c->pairs ? " pairs" : "");
    memset(&p, 0, sizeof p);
    if (c->page_size) { pps = (cap + c->page_size - 1) / c->page_size; npages = c->batch * pps + 3; }
    p.batch = c->batch; p.seqlen_q = c->sq; p.seqlen_k = cap; p.heads_q = c->hq; p.heads_kv = c->hkv;
    p.head_dim = c->d; p.causal = c->causal; p.num_splits = c->splits;
    p.softcap = c->softcap; p.sliding_window = c->window; p.window_left = c->wl; p.window_right = c->wr;
    if (c->alibi) { for (b = 0; b < c->hq; b++) slopes[b] = (float)rng_uniform(&rng); p.alibi_slopes = slopes; }
    used = (int32_t *)malloc(sizeof(int32_t) * (size_t)c->batch);
    for (b = 0; b < c->batch; b++) {
        int room = cap - (c->append ? c->sq : 0);
        used[b] = c->lens ? c->lens[b] : (b == 0 ? room : b == 1 ? 0 : rng_int(&rng, 0, room));
        if (used[b] > room) used[b] = room;
        /* seqlens_k == NULL means every sequence holds seqlen_k tokens (flashattn.h):
           the whole cache is in use, so no slot may be NaN-poisoned below */
        if (c->null_seqlens) used[b] = cap;
    }
    if (!c->null_seqlens) p.seqlens_k = used;
    if (c->page_size) { /* a random permutation of the pool, 3 pages unused */
        table = (int32_t *)malloc(sizeof(int32_t) * (size_t)npages);
        for (i = 0; i < npages; i++) table[i] = i;
        for (i = npages - 1; i > 0; i--) { int j = rng_int(&rng, 0, i), t = table[i]; table[i] = table[j]; table[j] = t; }
        p.block_table = table; p.page_size = c->page_size; p.pages_per_seq = pps; p.num_pages = npages;
        kc = tens_make_gpu(c->dt, npages, c->page_size, hkv, c->d, c->layout);
        vc = tens_make_gpu(c->dt, npages, c->page_size, hkv, c->d, c->layout);
    } else {
        kc = tens_make_gpu(c->dt, c->batch, cap, hkv, c->d, c->layout);
        vc = tens_make_gpu(c->dt, c->batch, cap, hkv, c->d, c->layout);
    }
    tens_fill(&kc, &rng, 1.0); tens_fill(&vc, &rng, 1.0);
    for (b = 0; b < c->batch; b++) { /* slots past the cache length: NaN that must never be read */
        int64_t n;
        int h, e;
        for (n = used[b]; n < cap; n++)
            for (h = 0; h < hkv; h++) {
                for (e = 0; e < c->d; e++) tens_set_bits_nan(&kc, ref_cache_offset(&p, kc.t, c->d, b, n, h) + e);
                for (e = 0; e < c->d; e++) tens_set_bits_nan(&vc, ref_cache_offset(&p, vc.t, c->d, b, n, h) + e);
            }
    }
    q = tens_make_gpu(c->dt, c->batch, c->sq, c->hq, c->d, c->layout);
    tens_fill(&q, &rng, 1.0);
    memset(&kn, 0, sizeof kn); memset(&vn, 0, sizeof vn);
    if (c->append) {
        kn = tens_make_gpu(c->dt, c->batch, c->sq, hkv, c->d, c->layout);
        vn = tens_make_gpu(c->dt, c->batch, c->sq, hkv, c->d, c->layout);
        tens_fill(&kn, &rng, 1.0); tens_fill(&vn, &rng, 1.0);
    }
    o = tens_make_gpu(c->dt, c->batch, c->sq, c->hq, c->d, c->layout); /* NaN everywhere */
    tens_snapshot(&o);
    nl = (int64_t)c->batch * c->hq * c->sq;
    lse = (float *)malloc(sizeof(float) * (size_t)(nl + 1));
    for (i = 0; i <= nl; i++) lse[i] = NAN;

    /* the reference, and the expected caches */
    oref = (double *)malloc(sizeof(double) * (size_t)(o.n + 1));
    lref = (double *)malloc(sizeof(double) * (size_t)(nl + 1));
    ref_decode(&p, q.t, kc.t, vc.t, kn.t, vn.t, oref, lref);
    kexp = tens_clone(&kc); vexp = tens_clone(&vc);
    if (c->append) ref_decode_append(&p, kexp.t, vexp.t, kn.t, vn.t);

    /* device copies; arrays named by the problem move to the device too */
    tq = to_dev(&q, &dq); tkc = to_dev(&kc, &dkc); tvc = to_dev(&vc, &dvc); to = to_dev(&o, &dout);
    memset(&tkn, 0, sizeof tkn); memset(&tvn, 0, sizeof tvn);
    if (c->append) { tkn = to_dev(&kn, &dkn); tvn = to_dev(&vn, &dvn); }
    CK(cudaMalloc((void **)&dlse, sizeof(float) * (size_t)(nl + 1)));
    CK(cudaMemcpy(dlse, lse, sizeof(float) * (size_t)(nl + 1), cudaMemcpyHostToDevice));
    {
        fa_problem pd = p;
        CK(cudaMalloc((void **)&dused, sizeof(int32_t) * (size_t)c->batch));
        CK(cudaMemcpy(dused, used, sizeof(int32_t) * (size_t)c->batch, cudaMemcpyHostToDevice));
        if (p.seqlens_k) pd.seqlens_k = dused;
        if (table) {
            CK(cudaMalloc((void **)&dtable, sizeof(int32_t) * (size_t)npages));
            CK(cudaMemcpy(dtable, table, sizeof(int32_t) * (size_t)npages, cudaMemcpyHostToDevice));
            pd.block_table = dtable;
        }
        if (c->alibi) {
            CK(cudaMalloc((void **)&dslopes, sizeof(float) * (size_t)c->hq));
            CK(cudaMemcpy(dslopes, slopes, sizeof(float) * (size_t)c->hq, cudaMemcpyHostToDevice));
            pd.alibi_slopes = dslopes;
        }
        if (c->use_stream) CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        fa__dec_pairs = c->pairs ? 1 : -1;
        pair_runs = fa__dec_pair_launches;
        if (c->use_ws) {
            st = fa_decode_cuda_workspace_size(&pd, &ws_bytes);
            check(st == FA_OK, "%s: workspace_size: %s", ctx, fa_last_error());
            if (ws_bytes) {
                CK(cudaMalloc(&dws, ws_bytes + 64));
                CK(cudaMemset(dws, 0xFF, ws_bytes + 64)); /* NaN: must be written before read */
            }
        }
        /* The copies and the memset above went to the legacy default stream,
           and a copy from pageable memory may return before it has landed:
           a call on a non-blocking stream does not wait for them. */
        CK(cudaDeviceSynchronize());
        st = fa_decode_cuda(&pd, tq, tkc, tvc, tkn, tvn, to, c->no_lse ? NULL : dlse, dws, ws_bytes, (void *)stream);
        fa__dec_pairs = -1;
        CK(cudaStreamSynchronize(stream));
        CK(cudaGetLastError());
        /* a forced case must fit a pair: else it would quietly test the single-head CTA */
        if (c->pairs) check(fa__dec_pair_launches == pair_runs + 1, "%s: ran the head-pair kernel", ctx);
    }
    if (check(st == FA_OK, "%s: status %d (%s)", ctx, (int)st, fa_last_error())) {
        int64_t kbad = 0, vbad = 0;
        size_t es = dt_size(c->dt);
        from_dev(&o, dout);
        CK(cudaMemcpy(lse, dlse, sizeof(float) * (size_t)(nl + 1), cudaMemcpyDeviceToHost));
        bad = compare(ctx, "O", &o, oref, tol_out(c->dt));
        if (!c->no_lse) bad += compare_lse(ctx, lse, lref, nl, tol_lse(c->dt));
        else for (i = 0; i < nl; i++) bad += lse[i] == lse[i]; /* not asked: not written */
        bad += lse[nl] == lse[nl]; /* nothing past the end */
        check(bad == 0, "%s: O / L vs reference", ctx);
        from_dev(&kc, dkc); from_dev(&vc, dvc);
        for (i = 0; i < kc.n; i++) kbad += memcmp((char *)kc.buf + i * es, (char *)kexp.buf + i * es, es) != 0;
        for (i = 0; i < vc.n; i++) vbad += memcmp((char *)vc.buf + i * es, (char *)vexp.buf + i * es, es) != 0;
        check(kbad == 0 && vbad == 0, "%s: cache after the call: %lld K and %lld V elements differ from the expected cache",
              ctx, (long long)kbad, (long long)vbad);

        if (c->vs_cpu) { /* the CPU twin on the same inputs (its own cache copy) */
            tens kc2 = kc, vc2 = vc;
            kc2.buf = malloc((size_t)kc.n * es); vc2.buf = malloc((size_t)vc.n * es);
            memcpy(kc2.buf, kexp.buf, (size_t)kc.n * es); memcpy(vc2.buf, vexp.buf, (size_t)vc.n * es);
            kc2.t.data = kc2.buf; vc2.t.data = vc2.buf;
            /* the CPU call appends again into an already appended copy: same bytes */
            ocpu = tens_make_gpu(c->dt, c->batch, c->sq, c->hq, c->d, c->layout);
            lse_cpu = (float *)malloc(sizeof(float) * (size_t)(nl + 1));
            st = fa_decode(&p, q.t, kc2.t, vc2.t, kn.t, vn.t, ocpu.t, lse_cpu, NULL, 0);
            if (check(st == FA_OK, "%s: CPU fa_decode: %s", ctx, fa_last_error())) {
                /* GPU vs CPU: both round P to the input type; allow two reference tolerances */
                double *ocd = (double *)malloc(sizeof(double) * (size_t)(o.n + 1));
                double *lcd = (double *)malloc(sizeof(double) * (size_t)(nl + 1));
                int bb, tt, hh, cc;
                tol t2 = tol_out(c->dt);
                t2.atol *= 2; t2.rtol *= 2;
                for (bb = 0; bb < c->batch; bb++)
                    for (tt = 0; tt < c->sq; tt++)
                        for (hh = 0; hh < c->hq; hh++)
                            for (cc = 0; cc < c->d; cc++)
                                ocd[(((int64_t)bb * c->sq + tt) * c->hq + hh) * c->d + cc] = tens_get(&ocpu, bb, tt, hh, cc);
                for (i = 0; i < nl; i++) lcd[i] = lse_cpu[i];
                bad = compare(ctx, "O vs CPU", &o, ocd, t2);
                if (!c->no_lse) bad += compare_lse(ctx, lse, lcd, nl, tol_lse(c->dt));
                check(bad == 0, "%s: GPU vs CPU fa_decode", ctx);
                free(ocd); free(lcd);
            }
            free(kc2.buf); free(vc2.buf); free(lse_cpu); tens_free(&ocpu);
        }
    }
    if (dws) {
        /* bytes past the workspace size untouched */
        unsigned char tail[64];
        CK(cudaMemcpy(tail, (char *)dws + ws_bytes, 64, cudaMemcpyDeviceToHost));
        for (i = 0; i < 64 && tail[i] == 0xFF; i++) {}
        check(i == 64, "%s: wrote past the workspace", ctx);
    }
    if (stream) CK(cudaStreamDestroy(stream));
    cudaFree(dq); cudaFree(dkc); cudaFree(dvc); cudaFree(dkn); cudaFree(dvn); cudaFree(dout);
    cudaFree(dws); cudaFree(dlse); cudaFree(dslopes); cudaFree(dused); cudaFree(dtable);
    tens_free(&kexp); tens_free(&vexp); free(oref); free(lref); free(lse); free(used); free(table);
    tens_free(&q); tens_free(&kc); tens_free(&vc); tens_free(&o);
    if (c->append) { tens_free(&kn); tens_free(&vn); }
}

/* Cache lengths 1, 7, 255, 256, 257, 4097 and mixed; pages 1, 16, 64, 256;
   the paged kernels of every head dim at pages 1-64 with windows. */
static void test_lengths(void)
{
    static const int lens[6] = {1, 7, 255, 256, 257, 4097};
    static const int pages[5] = {0, 1, 16, 64, 256};
    int n = 0, li, pi, before = T_COUNT.failed;
    dcase c;
    for (li = 0; li < 6; li++)
        for (pi = 0; pi < 5; pi++) {
            int L[4];
            if (QUICK && ((li != 0 && li != 1 && li != 4) || (pi != 0 && pi != 2))) continue;
            memset(&c, 0, sizeof c);
            L[0] = L[1] = L[2] = L[3] = lens[li];
            c.batch = 2; c.sq = 1; c.cap = lens[li] + 5; c.hq = 8; c.hkv = 2; c.d = 128;
            c.dt = (li + pi) % 2 ? FA_BF16 : FA_F16; c.page_size = pages[pi]; c.lens = L;
            c.use_ws = (li + pi) % 3 == 0; c.use_stream = pi % 2; c.layout = (li % 2) && pi != 1;
            c.vs_cpu = lens[li] <= 300;
            run_decode(&c, case_seed(1, n++));
            /* the same on the head-pair kernel (hkv = 2: one pair) */
            c.pairs = 1;
            run_decode(&c, case_seed(1, n++));
            c.pairs = (li + pi) % 2;
            /* the same length reached by appending sq = 1..3 new tokens */
            c.append = 1; c.sq = 1 + li % 3; c.causal = 1;
            L[0] = L[1] = lens[li] - c.sq > 0 ? lens[li] - c.sq : 0;
            run_decode(&c, case_seed(1, n++));
        }
    /* mixed lengths within one batch (0, full, random), several splits */
    {
        static const int splits[4] = {0, 1, 3, 128};
        int si;
        for (si = 0; si < 4; si++) {
            memset(&c, 0, sizeof c);
            c.batch = 5; c.sq = 1 + si; c.cap = QUICK ? 300 : 2000 + 333 * si; c.hq = 16; c.hkv = 4; c.d = 128;
            c.dt = si % 2 ? FA_BF16 : FA_F16; c.page_size = si == 2 ? 16 : 0; c.splits = splits[si];
            c.append = si % 2; c.causal = si >= 2; c.use_ws = si % 2; c.vs_cpu = 1;
            run_decode(&c, case_seed(2, n++));
            c.pairs = 1; /* 4 to 16 rows a head: each fits the head-pair kernel */
            run_decode(&c, case_seed(2, n++));
        }
    }
    /* paged caches run their own kernel (fa__dec_kv), whose threads copy
       rows within a block of 4 (d64) or 16 (d128, every second row of it;
       d256) rows of a tile: pages smaller than that, of it and larger (one
       table read a thread and tile), with windows whose first key falls
       inside a tile, and odd lengths */
    {
        static const int dims[3] = {64, 128, 256}, pgs[3][4] = {{1, 2, 4, 16}, {2, 8, 16, 32}, {1, 8, 16, 64}};
        int pi, di;
        for (di = 0; di < 3; di++)
            for (pi = 0; pi < 4; pi++) {
                int L[2];
                L[0] = QUICK ? 257 - 50 * pi : 4097 - 1000 * pi; L[1] = 37 + 61 * pi;
                memset(&c, 0, sizeof c);
                c.batch = 2; c.sq = 1 + pi % 2; c.cap = L[0] + 3; c.hq = 16; c.hkv = 2; c.d = dims[di];
                c.dt = (pi + di) % 2 ? FA_BF16 : FA_F16; c.page_size = pgs[di][pi]; c.lens = L;
                c.causal = 1; c.window = pi >= 1; c.wl = 100 + 77 * pi; c.wr = 0; c.vs_cpu = 1;
                c.append = pi == 3; c.splits = pi == 2 ? 3 : 0;
                run_decode(&c, case_seed(4, n++));
                if (c.d > 128) continue;
                c.pairs = 1; /* 16 rows a head: the head-pair kernel */
                run_decode(&c, case_seed(4, n++));
            }
    }
    printf("lengths / pages / mixed: %d cases, %d failures\n", n, T_COUNT.failed - before);
}

/* Every feature, head dims, GQA ratios, query lengths up to 16. */
static void test_features(void)
{
    static const int dims[3] = {64, 128, 256};
    static const int groups[5][2] = {{32, 8}, {8, 8}, {16, 1}, {12, 4}, {64, 2}};
    static const int sqs[6] = {1, 4, 16, 2, 7, 16}, pgs[6] = {0, 16, 7, 64, 0, 256}, sps[6] = {0, 1, 5, 0, 2, 0};
    int n = 0, di, gi, f, before = T_COUNT.failed;
    dcase c;
    for (di = 0; di < 3; di++)
        for (gi = 0; gi < 5; gi++)
            for (f = 0; f < 6; f++) {
                if (QUICK && ((f != 0 && f != 2) || (gi != 0 && gi != 2))) continue;
                memset(&c, 0, sizeof c);
                c.batch = 2; c.hq = groups[gi][0]; c.hkv = groups[gi][1]; c.d = dims[di];
                c.sq = sqs[f];
                c.cap = QUICK ? 200 : (gi == 4 ? 150 : 500) + 61 * f; /* the fp64 reference is the slow part */
                c.dt = (di + gi + f) % 2 ? FA_BF16 : FA_F16;
                c.page_size = pgs[f];
                c.append = f % 2; c.splits = sps[f];
                c.causal = f != 4; c.layout = f >= 3; c.use_ws = f % 3 == 1; c.no_lse = f == 5;
                if (f == 1) c.softcap = 5.0f;
                if (f == 2) c.alibi = 1;
                if (f == 3) { c.window = 1; c.wl = 100; c.wr = 0; }
                if (f == 4) { c.window = 1; c.wl = 33; c.wr = 5; c.alibi = 1; c.softcap = 2.0f; }
                c.vs_cpu = (gi + f) % 3 == 0;
                run_decode(&c, case_seed(3, n++));
                /* and on the head-pair kernel where it fits (an even heads_kv,
                   at most 16 rows, d <= 128) */
                if (c.hkv % 2 == 0 && c.sq * (c.hq / c.hkv) <= 16 && c.d <= 128) {
                    c.pairs = 1;
                    run_decode(&c, case_seed(3, n++));
                }
            }
    /* a full cache without seqlens_k */
    memset(&c, 0, sizeof c);
    c.batch = 3; c.sq = 2; c.cap = 333; c.hq = 4; c.hkv = 2; c.d = 64; c.dt = FA_BF16; c.null_seqlens = 1;
    c.causal = 1; c.vs_cpu = 1;
    run_decode(&c, case_seed(3, n++));
    c.page_size = 64; run_decode(&c, case_seed(3, n++));
    /* a window that sees nothing of the cache for the first rows, and rows with no key at all */
    memset(&c, 0, sizeof c);
    c.batch = 3; c.sq = 5; c.cap = 400; c.hq = 8; c.hkv = 8; c.d = 128; c.dt = FA_F16; c.window = 1; c.wl = 0; c.wr = 0;
    c.causal = 1; c.splits = 4; c.vs_cpu = 1;
    run_decode(&c, case_seed(3, n++));
    printf("features: %d cases, %d failures\n", n, T_COUNT.failed - before);
}

/* More CTAs (sequence x KV head x row block x split) than SMs: grids of
   several waves, at every head dim, with mixed lengths, so some CTAs have
   nothing to read (length 0, or a split past the end of a short sequence)
   and must still write their rows (O = 0, L = -inf or an empty partial). */
static void test_waves(void)
{
    static const int dims[3] = {64, 128, 256};
    int n = 0, di, f, before = T_COUNT.failed, sms = 0, dev = 0;
    dcase c;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    for (di = 0; di < 3; di++)
        for (f = 0; f < 4; f++) {
            if (QUICK && f > 1) continue;
            memset(&c, 0, sizeof c);
            c.hq = f == 2 ? 64 : 32; c.hkv = 8; c.d = dims[di];
            c.batch = sms / c.hkv + 3 + f; /* more CTAs than SMs even without splits */
            c.sq = f == 2 ? 16 : 1 + f;    /* f == 2: 128 rows, two row blocks at d <= 128 */
            c.cap = QUICK ? 150 : 300 + 37 * f;
            c.dt = (di + f) % 2 ? FA_BF16 : FA_F16;
            c.splits = f == 3 ? 3 : 0;
            c.append = f % 2; c.causal = f != 1; c.layout = f == 3;
            if (f == 1) c.softcap = 5.0f;
            if (f == 2) { c.alibi = 1; c.window = 1; c.wl = 40; c.wr = 0; }
            c.use_ws = f == 3; c.use_stream = f == 1; c.vs_cpu = f == 0;
            run_decode(&c, case_seed(5, n++));
        }
    /* Enough KV heads for two waves of single-head CTAs and one of pairs:
       at d64 the plan's own rule takes the head-pair kernel, at d128 not
       (fa__decode_pairs). */
    for (di = 0; di < 2; di++) {
        int before_pairs = fa__dec_pair_launches;
        memset(&c, 0, sizeof c);
        c.hq = 32; c.hkv = 8; c.d = dims[di]; c.batch = 2 * sms / c.hkv - 4;
        c.sq = 1 + di; c.cap = QUICK ? 100 : 200 + 77 * di; c.dt = di ? FA_BF16 : FA_F16;
        c.causal = 1; c.append = di; c.layout = di; c.vs_cpu = di == 0;
        if (run_decode(&c, case_seed(5, n++)))
            check(fa__dec_pair_launches == before_pairs + (c.d == 64),
                  "waves: batch %d x %d KV heads (d %d) ran the head-pair kernel %d times",
                  c.batch, c.hkv, c.d, fa__dec_pair_launches - before_pairs);
    }
    printf("waves (more CTAs than SMs): %d cases, %d failures\n", n, T_COUNT.failed - before);
}

/* The grid rule (fa__decode_grid) on the shapes it was measured on: 132
   SMs, two CTAs of one KV head fit an SM, 64 tiles (a 4k cache), d128
   unless said. A host function: no GPU involved, so the choice is pinned
   on any device. */
static void test_grid_rule(void)
{
    static const struct { int units, blocks, paged, d, tiles, cps, splits; } t[] = {
        {64, 2, 0, 128, 64, 1, 2},   /* batch 8 x 8 KV heads: split in 2, one CTA a SM */
        {96, 2, 0, 128, 64, 2, 1},   /* under one a SM: whole, two allowed */
        {96, 2, 0, 64, 64, 1, 4},    /* d64: split below 80% of the SMs */
        {128, 2, 0, 128, 64, 2, 1},
        {136, 2, 0, 128, 64, 2, 3},  /* a last wave of 4: two a SM, 1.5 waves of them */
        {160, 2, 0, 128, 64, 2, 3},  /* 2 or 3 splits leave it 42% / 64% full */
        {192, 2, 0, 128, 64, 1, 2},  /* split in 2: two whole waves of one a SM */
        {224, 2, 0, 128, 64, 1, 1},  /* last wave 70% full */
        {256, 2, 0, 128, 64, 1, 1},
        {272, 2, 0, 128, 64, 2, 2},
        {536, 2, 0, 128, 64, 2, 1},  /* 2 waves of two a SM, and 8 more */
        {136, 2, 0, 128, 1, 2, 1},   /* one tile: nothing to split */
        {17, 2, 0, 128, 128, 1, 15}, /* splits of at least 2 tiles (not 128 of one) */
        {272, 1, 0, 256, 64, 1, 1},  /* d256: one CTA a SM is all that fits */
        {256, 2, 1, 128, 64, 2, 1},  /* paged: two a SM, one wave */
        {272, 2, 1, 128, 64, 2, 2},  /* paged: past one wave, 1.5 waves */
    };
    int i, before = T_COUNT.failed;
    for (i = 0; i < (int)(sizeof t / sizeof t[0]); i++) {
        int cps = -1, splits = -1;
        fa__decode_grid(t[i].units, 132, t[i].blocks, t[i].paged, t[i].d, t[i].tiles, &cps, &splits);
        check(cps == t[i].cps && splits == t[i].splits,
              "grid rule: %d units, %d a SM fit, paged %d, d %d, %d tiles: %d CTAs a SM x %d splits, expected %d x %d",
              t[i].units, t[i].blocks, t[i].paged, t[i].d, t[i].tiles, cps, splits, t[i].cps, t[i].splits);
    }
    {   /* batch 1: split by fa__decode_num_splits, one CTA a SM */
        int cps = -1, splits = -1;
        fa__decode_grid(8, 132, 2, 0, 128, 64, &cps, &splits);
        check(cps == 1 && splits > 1 && splits <= 64, "grid rule: 8 units: %d x %d", cps, splits);
    }
    printf("grid rule: %d failures\n", T_COUNT.failed - before);
}

/* Bad or unsupported input: a status, a message, and O untouched. */
static void test_errors(void)
{
    fa_problem p;
    fa_tensor t;
    void *buf;
    uint16_t h[64];
    int i, before = T_COUNT.failed;
    fa_tensor none;
    memset(&none, 0, sizeof none);
    CK(cudaMalloc(&buf, 1 << 20));
    CK(cudaMemset(buf, 0x7F, 1 << 20));
    memset(&p, 0, sizeof p);
    memset(&t, 0, sizeof t);
    t.data = buf; t.dtype = FA_BF16;
    p.batch = 1; p.seqlen_q = 1; p.seqlen_k = 64; p.heads_q = 2; p.head_dim = 96;
    check(fa_decode_cuda(&p, t, t, t, none, none, t, NULL, NULL, 0, NULL) == FA_ERROR_UNSUPPORTED,
          "head_dim 96: FA_ERROR_UNSUPPORTED (%s)", fa_last_error());
    check(strstr(fa_last_error(), "head_dim") != NULL, "head_dim 96: the message names head_dim: %s", fa_last_error());
    p.head_dim = 64; t.dtype = FA_F32;
    check(fa_decode_cuda(&p, t, t, t, none, none, t, NULL, NULL, 0, NULL) == FA_ERROR_UNSUPPORTED,
          "f32: FA_ERROR_UNSUPPORTED (%s)", fa_last_error());
    t.dtype = FA_BF16; t.data = (char *)buf + 2;
    check(fa_decode_cuda(&p, t, t, t, none, none, t, NULL, NULL, 0, NULL) == FA_ERROR_UNSUPPORTED,
          "misaligned: FA_ERROR_UNSUPPORTED (%s)", fa_last_error());
    t.data = buf; p.heads_kv = 3;
    check(fa_decode_cuda(&p, t, t, t, none, none, t, NULL, NULL, 0, NULL) == FA_ERROR_INVALID_ARGUMENT,
          "heads_q %% heads_kv: FA_ERROR_INVALID_ARGUMENT (%s)", fa_last_error());
    p.heads_kv = 0; p.num_splits = 4;
    {
        size_t need = 0;
        check(fa_decode_cuda_workspace_size(&p, &need) == FA_OK && need > 0, "workspace_size with 4 splits > 0");
        check(fa_decode_cuda(&p, t, t, t, none, none, t, NULL, buf, need - 1, NULL) ==
                  FA_ERROR_INVALID_ARGUMENT, "short workspace: FA_ERROR_INVALID_ARGUMENT (%s)", fa_last_error());
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, buf, sizeof h, cudaMemcpyDeviceToHost));
    for (i = 0; i < 64 && h[i] == 0x7F7F; i++) {}
    check(i == 64, "a failing call wrote nothing");
    cudaFree(buf);
    printf("errors: %d failures\n", T_COUNT.failed - before);
}

/* The same inputs give the same bits, run to run. */
static void test_determinism(void)
{
    const int B = 4, SQ = 2, HQ = 16, HKV = 4, D = 128, CAP = 3000;
    size_t nq = (size_t)B * SQ * HQ * D, nk = (size_t)B * CAP * HKV * D;
    uint16_t *hq_ = (uint16_t *)malloc(nq * 2), *hk = (uint16_t *)malloc(nk * 2), *o1 = (uint16_t *)malloc(nq * 2),
             *o2 = (uint16_t *)malloc(nq * 2);
    void *dq, *dk, *dv, *dout;
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    uint64_t rng = 99;
    size_t i;
    int32_t lens[4] = {2999, 1, 1500, 2048}, *dl;
    fa_tensor none;
    memset(&none, 0, sizeof none);
    for (i = 0; i < nq; i++) hq_[i] = ref_f32_to_bf16((float)rng_normal(&rng));
    for (i = 0; i < nk; i++) hk[i] = ref_f32_to_bf16((float)rng_normal(&rng));
    CK(cudaMalloc(&dq, nq * 2)); CK(cudaMalloc(&dk, nk * 2)); CK(cudaMalloc(&dv, nk * 2));
    CK(cudaMalloc(&dout, nq * 2)); CK(cudaMalloc((void **)&dl, sizeof lens));
    CK(cudaMemcpy(dq, hq_, nq * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, hk, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, hk, nk * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dl, lens, sizeof lens, cudaMemcpyHostToDevice));
    memset(&p, 0, sizeof p);
    p.batch = B; p.seqlen_q = SQ; p.seqlen_k = CAP; p.heads_q = HQ; p.heads_kv = HKV; p.head_dim = D;
    p.causal = 1; p.seqlens_k = dl;
    memset(&tq, 0, sizeof tq); tq.dtype = FA_BF16; tk = tv = to = tq;
    tq.data = dq; tk.data = dk; tv.data = dv; to.data = dout;
    check(fa_decode_cuda(&p, tq, tk, tv, none, none, to, NULL, NULL, 0, NULL) == FA_OK, "determinism run 1: %s", fa_last_error());
    CK(cudaMemcpy(o1, dout, nq * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemset(dout, 0xFF, nq * 2));
    check(fa_decode_cuda(&p, tq, tk, tv, none, none, to, NULL, NULL, 0, NULL) == FA_OK, "determinism run 2: %s", fa_last_error());
    CK(cudaMemcpy(o2, dout, nq * 2, cudaMemcpyDeviceToHost));
    check(memcmp(o1, o2, nq * 2) == 0, "determinism: two runs give the same bits");
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dl);
    free(hq_); free(hk); free(o1); free(o2);
}

int main(int argc, char **argv)
{
    int i, dev = 0;
    cudaDeviceProp prop;
    (void)rms; (void)tens_fill_outliers; /* shared helpers this file does not need */
    for (i = 1; i < argc; i++) if (!strcmp(argv[i], "--quick")) QUICK = 1;
    if (getenv("FA_TEST_QUICK") && atoi(getenv("FA_TEST_QUICK"))) QUICK = 1;
    setvbuf(stdout, NULL, _IOLBF, 0); /* a log cut short still shows what ran */
    if (!test_shard(&g_shard_k, &g_shard_n)) return 2;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("test_gpu_decode on %s (sm_%d%d, %d SMs)%s\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, QUICK ? " --quick" : "");
    if (g_shard_k == 0) { /* (the checks that are not cases: in one shard) */
        test_grid_rule();
        test_errors();
    }
    test_lengths();
    test_features();
    test_waves();
    if (!QUICK && g_shard_k == 0) test_determinism();
    return summary("test_gpu_decode");
}
