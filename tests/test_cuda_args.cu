/* tests/test_cuda_args.cu - the _cuda entry points never read device memory
   on the host.

   Every fa_*_cuda call and every fa_*_cuda_workspace_size query is given
   problems whose pointer fields (alibi_slopes, cu_seqlens_q/k, seqlens_k,
   block_table), tensors, lse and workspace point into memory the host
   cannot read:
     - no GPU (CI): a PROT_NONE mapping. The argument checks must run and
       pass without touching it; the call then fails at its first CUDA call
       (FA_ERROR_CUDA, an acceptable result) or, for a query that needs no
       device, returns FA_OK. A host read of any of it is a segmentation
       fault: the test dies, and run_check.sh counts the crash.
     - a GPU: device memory from cudaMalloc (the host cannot read it either)
       holding valid arrays, and every call must succeed and its kernels run
       without error.
   Each case prints its name before the call, so a crash names its case.
   With a GPU it also runs the backward at tiny scales (1e-30, 1e-20) and
   compares dQ and dK with the CPU backward's, and checks that empty
   sequences give O = 0, L = -inf and dQ = 0 on the GPU too.
   Also: argument errors that need no array contents are still reported
   (FA_ERROR_INVALID_ARGUMENT naming the field) with the arrays unreadable,
   and block masks: fa_forward_cuda_workspace_size sizes them and
   fa_forward_cuda checks their shape and workspace, the other calls
   refuse them (FA_ERROR_UNSUPPORTED), none reading the lists on the host.

   And the CPU path of this nvcc build (no CUDA call): nvcc's host pass must
   build the SIMD loops its host target allows (-Xcompiler -march=native), not
   the portable ones, and the CPU forward must be right.

   Built as a user's translation unit: the implementation's default macros
   (every head dim), for sm_80 and sm_90a:
   nvcc -Xcompiler -march=native -I. tests/test_cuda_args.cu (see the Makefile). */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "reference.h" /* ref_forward: the CPU path's fp64 check */

static int n_pass, n_fail;

/* The tests' random numbers: the next state of a 32-bit linear congruential generator. */
static uint32_t lcg(uint32_t *x)
{
    return *x = *x * 1664525u + 1013904223u;
}

static void check(int ok, const char *what, const char *detail)
{
    if (ok) { n_pass++; return; }
    n_fail++;
    printf("FAIL: %s: %s\n", what, detail);
}

/* ---- the arena: where every pointer of the problems points ------------------ */

enum { B = 2, SQ = 64, SK = 128, HQ = 4, HKV = 2, D = 64, PAGE = 16, PPS = SK / PAGE, NPAGES = B * PPS };
static const size_t ARENA = (size_t)16 << 20;

static char *arena;   /* PROT_NONE mapping, or device memory */
static size_t used;   /* carved so far */
static int on_gpu;    /* 1: arena is device memory with valid contents */

/* The next `bytes` of the arena, 256-byte aligned; with a GPU, `init` (if
   any) is copied there. */
static void *carve(size_t bytes, const void *init)
{
    char *p = arena + used;
    used += (bytes + 255) / 256 * 256;
    if (used > ARENA) { printf("arena too small\n"); exit(2); }
    if (on_gpu && init && cudaMemcpy(p, init, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        printf("cudaMemcpy failed\n");
        exit(2);
    }
    return p;
}

static fa_tensor tensor(int64_t rows, int heads)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = FA_BF16;
    t.data = carve((size_t)rows * heads * D * 2, NULL); /* zeros on the GPU: finite */
    return t;
}

/* ---- the problems ------------------------------------------------------------ */

typedef struct arrays { const float *alibi; const int32_t *cu_q, *cu_k, *seqlens, *seqlens_room, *table; } arrays;

static arrays make_arrays(void)
{
    float slopes[HQ];
    int32_t cu_q[B + 1] = {0, 40, 40 + SQ}, cu_k[B + 1] = {0, 100, 100 + SK};
    int32_t seqlens[B] = {SK, 77}, room[B] = {SK - SQ, 5}, table[NPAGES];
    arrays a;
    int i;
    for (i = 0; i < HQ; i++) slopes[i] = 0.5f / (float)(i + 1);
    for (i = 0; i < NPAGES; i++) table[i] = (i * 5 + 3) % NPAGES; /* a permutation */
    a.alibi = (const float *)carve(sizeof slopes, slopes);
    a.cu_q = (const int32_t *)carve(sizeof cu_q, cu_q);
    a.cu_k = (const int32_t *)carve(sizeof cu_k, cu_k);
    a.seqlens = (const int32_t *)carve(sizeof seqlens, seqlens);
    a.seqlens_room = (const int32_t *)carve(sizeof room, room); /* room for SQ appended tokens */
    a.table = (const int32_t *)carve(sizeof table, table);
    return a;
}

static fa_problem base(void)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.seqlen_q = SQ; p.seqlen_k = SK; p.heads_q = HQ; p.heads_kv = HKV; p.head_dim = D;
    return p;
}

/* What a call that passed its argument checks may return here. */
static int expected(fa_status s)
{
    return on_gpu ? s == FA_OK : (s == FA_OK || s == FA_ERROR_CUDA);
}

static void after(const char *name, fa_status s)
{
    char detail[400];
    snprintf(detail, sizeof detail, "status %d (%s): %s", (int)s, fa_status_string(s), fa_last_error());
    check(expected(s), name, detail);
    if (on_gpu && s == FA_OK) {
        cudaError_t e = cudaDeviceSynchronize();
        snprintf(detail, sizeof detail, "the kernels failed: %s", cudaGetErrorString(e));
        check(e == cudaSuccess, name, detail);
    }
}

static void announce(const char *name)
{
    printf("case: %s\n", name);
    fflush(stdout);
}

/* ---- forward and backward -------------------------------------------------------- */

static void forward_cases(const arrays *a)
{
    static const char *names[] = {"alibi_slopes", "cu_seqlens_q/k", "seqlens_k", "alibi + cu_seqlens + seqlens_k"};
    int c;
    for (c = 0; c < 4; c++) {
        fa_problem p = base();
        int varlen = c == 1 || c == 3;
        int64_t rq = varlen ? (int64_t)B * SQ : (int64_t)SQ, rk = varlen ? (int64_t)B * SK : (int64_t)SK;
        int64_t nb = varlen ? (int64_t)1 : (int64_t)B;
        fa_tensor q = tensor(nb * rq, HQ), k = tensor(nb * rk, HKV), v = tensor(nb * rk, HKV), o = tensor(nb * rq, HQ);
        fa_tensor dout = tensor(nb * rq, HQ), dq = tensor(nb * rq, HQ), dk = tensor(nb * rk, HKV), dv = tensor(nb * rk, HKV);
        float *lse = (float *)carve(sizeof(float) * (size_t)(HQ * B * SQ), NULL);
        char name[160];
        size_t bytes = 0;
        fa_status s;
        void *ws;
        if (c == 0 || c == 3) p.alibi_slopes = a->alibi;
        if (varlen) { p.cu_seqlens_q = a->cu_q; p.cu_seqlens_k = a->cu_k; }
        if (c >= 2) p.seqlens_k = c == 2 ? a->seqlens : a->seqlens_room;
        p.causal = c & 1;

        snprintf(name, sizeof name, "fa_forward_cuda_workspace_size, %s", names[c]);
        announce(name);
        s = fa_forward_cuda_workspace_size(&p, &bytes);
        after(name, s);
        snprintf(name, sizeof name, "fa_forward_cuda, %s", names[c]);
        announce(name);
        after(name, fa_forward_cuda(&p, q, k, v, o, lse, NULL, 0, NULL));
        if (c == 2 || c == 3) continue; /* seqlens_k is decode's and the forward's: the backward refuses it */

        snprintf(name, sizeof name, "fa_backward_cuda_workspace_size, %s", names[c]);
        announce(name);
        bytes = 0;
        s = fa_backward_cuda_workspace_size(&p, &bytes);
        after(name, s);
        ws = carve(bytes ? bytes : 1, NULL);
        snprintf(name, sizeof name, "fa_backward_cuda (workspace given), %s", names[c]);
        announce(name);
        after(name, fa_backward_cuda(&p, q, k, v, o, dout, lse, dq, dk, dv, ws, bytes, NULL));
        snprintf(name, sizeof name, "fa_backward_cuda (no workspace), %s", names[c]);
        announce(name);
        after(name, fa_backward_cuda(&p, q, k, v, o, dout, lse, dq, dk, dv, NULL, 0, NULL));
    }
}

/* ---- FP8: e4m3 q, k, v with block descales (device arrays) ----------------------
   On a GPU of compute capability 9.0 every call must run; elsewhere (another
   GPU, or none) it may only be refused as unsupported or fail in CUDA, never
   read the descales or cu_seqlens on the host. */
static void fp8_cases(const arrays *a)
{
    int c, major = 0, hopper;
    hopper = on_gpu && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
             major == 9;
    for (c = 0; c < 3; c++) {
        fa_problem p = base();
        int varlen = c == 1;
        int64_t rq = varlen ? (int64_t)B * SQ : (int64_t)SQ, rk = varlen ? (int64_t)B * SK : (int64_t)SK;
        int64_t nb = varlen ? (int64_t)1 : (int64_t)B;
        fa_tensor q = tensor(nb * rq, HQ), k = tensor(nb * rk, HKV), v = tensor(nb * rk, HKV), o = tensor(nb * rq, HQ);
        float *lse = (float *)carve(sizeof(float) * (size_t)(HQ * B * SQ), NULL);
        const char *names[3] = {"fa_forward_cuda e4m3, block descales", "fa_forward_cuda e4m3, block descales + cu_seqlens_q/k",
                                "fa_forward_cuda e4m3, per-tensor descales + causal"};
        char detail[400];
        fa_status s;
        q.dtype = k.dtype = v.dtype = FA_E4M3;
        if (varlen) { p.cu_seqlens_q = a->cu_q; p.cu_seqlens_k = a->cu_k; }
        if (c < 2) {
            p.descale_q_block = (const float *)carve(sizeof(float) * (size_t)(B * HQ * ((SQ + 127) / 128)), NULL);
            p.descale_k_block = (const float *)carve(sizeof(float) * (size_t)(B * HKV * ((SK + 127) / 128)), NULL);
            p.descale_v_block = (const float *)carve(sizeof(float) * (size_t)(B * HKV * ((SK + 127) / 128)), NULL);
        } else {
            p.descale_q = 0.5f; p.descale_k = 0.25f; p.descale_v = 2.0f;
            p.causal = 1;
        }
        announce(names[c]);
        s = fa_forward_cuda(&p, q, k, v, o, lse, NULL, 0, NULL);
        if (hopper) {
            after(names[c], s);
        } else {
            snprintf(detail, sizeof detail, "status %d (%s): %s", (int)s, fa_status_string(s), fa_last_error());
            check(s == FA_ERROR_UNSUPPORTED || s == FA_ERROR_CUDA, names[c], detail);
        }
    }
}

/* ---- decode ------------------------------------------------------------------------ */

static void decode_cases(const arrays *a)
{
    int paged, append;
    for (paged = 0; paged < 2; paged++)
        for (append = 0; append < 2; append++) {
            fa_problem p = base();
            int64_t cache_rows = paged ? (int64_t)NPAGES * PAGE : (int64_t)B * SK;
            fa_tensor q = tensor((int64_t)B * 1, HQ), o = tensor((int64_t)B * 1, HQ);
            fa_tensor kc = tensor(cache_rows, HKV), vc = tensor(cache_rows, HKV);
            fa_tensor kn, vn;
            float *lse = (float *)carve(sizeof(float) * B * HQ, NULL);
            char name[160];
            size_t bytes = 0;
            fa_status s;
            void *ws;
            memset(&kn, 0, sizeof kn); memset(&vn, 0, sizeof vn);
            p.seqlen_q = 1;
            p.alibi_slopes = a->alibi;
            p.seqlens_k = append ? a->seqlens_room : a->seqlens;
            if (append) { kn = tensor(B, HKV); vn = tensor(B, HKV); }
            if (paged) { p.block_table = a->table; p.page_size = PAGE; p.pages_per_seq = PPS; p.num_pages = NPAGES; }
            snprintf(name, sizeof name, "fa_decode_cuda_workspace_size, %s%s, alibi + seqlens_k",
                     paged ? "paged" : "contiguous", append ? " + append" : "");
            announce(name);
            s = fa_decode_cuda_workspace_size(&p, &bytes);
            after(name, s);
            ws = carve(bytes ? bytes : 1, NULL);
            snprintf(name, sizeof name, "fa_decode_cuda, %s%s, alibi + seqlens_k", paged ? "paged" : "contiguous",
                     append ? " + append" : "");
            announce(name);
            after(name, fa_decode_cuda(&p, q, kc, vc, kn, vn, o, lse, s == FA_OK ? ws : NULL, bytes, NULL));
        }
}

/* ---- argument errors found without reading the arrays ------------------------------ */

static void refused_as(const char *name, fa_status s, fa_status want, const char *field)
{
    char detail[400];
    snprintf(detail, sizeof detail, "status %d, \"%s\" (want %d naming %s)", (int)s, fa_last_error(), (int)want,
             field);
    check(s == want && strstr(fa_last_error(), field) != NULL, name, detail);
}
static void refused(const char *name, fa_status s, const char *field)
{
    refused_as(name, s, FA_ERROR_INVALID_ARGUMENT, field);
}

static void error_cases(const arrays *a)
{
    fa_problem p = base();
    fa_tensor q = tensor((int64_t)B * SQ, HQ), k = tensor((int64_t)B * SK, HKV), v = tensor((int64_t)B * SK, HKV);
    fa_tensor o = tensor((int64_t)B * SQ, HQ);
    float *lse = (float *)carve(sizeof(float) * B * HQ * SQ, NULL);
    size_t bytes;
    p.alibi_slopes = a->alibi; p.cu_seqlens_q = a->cu_q; p.cu_seqlens_k = a->cu_k; p.seqlens_k = a->seqlens;
    announce("refused: head_dim 0 with unreadable arrays");
    p.head_dim = 0;
    refused("fa_forward_cuda_workspace_size, head_dim 0", fa_forward_cuda_workspace_size(&p, &bytes), "head_dim");
    refused("fa_backward_cuda_workspace_size, head_dim 0", fa_backward_cuda_workspace_size(&p, &bytes), "head_dim");
    refused("fa_decode_cuda_workspace_size, head_dim 0", fa_decode_cuda_workspace_size(&p, &bytes), "head_dim");
    p.head_dim = D;
    announce("refused: q.data NULL with unreadable arrays");
    q.data = NULL;
    refused("fa_forward_cuda, q.data NULL", fa_forward_cuda(&p, q, k, v, o, lse, NULL, 0, NULL), "q.data");
    announce("refused: block_table on the forward");
    p.block_table = a->table; p.page_size = PAGE; p.pages_per_seq = PPS; p.num_pages = NPAGES; p.cu_seqlens_k = NULL;
    refused("fa_forward_cuda_workspace_size, block_table", fa_forward_cuda_workspace_size(&p, &bytes), "block_table");
    refused("fa_backward_cuda_workspace_size, block_table", fa_backward_cuda_workspace_size(&p, &bytes), "block_table");
}

/* ---- block masks, with the lists unreadable (none may be read on the host) ----
   The forward's query sizes the sorted lists (counts, lists, bitmaps by
   query and by key block and the tile order, each rounded up to 256 bytes); the forward refuses blocks other than 128 x
   128 (FA_ERROR_UNSUPPORTED) and a short workspace (FA_ERROR_INVALID_ARGUMENT),
   each by name; the backward and decode refuse block masks
   (FA_ERROR_UNSUPPORTED naming block_mask; issue 51). */
static void block_mask_cases(void)
{
    fa_problem p = base(), d;
    fa_tensor q = tensor((int64_t)B * SQ, HQ), k = tensor((int64_t)B * SK, HKV), v = tensor((int64_t)B * SK, HKV);
    fa_tensor o = tensor((int64_t)B * SQ, HQ), dout = tensor((int64_t)B * SQ, HQ), dq = tensor((int64_t)B * SQ, HQ);
    fa_tensor dk = tensor((int64_t)B * SK, HKV), dv = tensor((int64_t)B * SK, HKV), kn, vn;
    float *lse = (float *)carve(sizeof(float) * B * HQ * SQ, NULL);
    const int32_t *lists = (const int32_t *)carve(4096, NULL);
    const char *names[6] = {"fa_forward_cuda_workspace_size", "fa_forward_cuda", "fa_backward_cuda_workspace_size",
                            "fa_backward_cuda", "fa_decode_cuda_workspace_size", "fa_decode_cuda"}; /* refused: decode */
    size_t bytes = 0, want, lists_bytes;
    int c;
    memset(&kn, 0, sizeof kn); memset(&vn, 0, sizeof vn);
    p.block_mask.kv_num_blocks = lists;
    p.block_mask.kv_indices = lists + 256;
    {
        const int64_t rows = (int64_t)B * HQ * ((SQ + 127) / 128), kb = (SK + 127) / 128;
        const fa_status s = fa_forward_cuda_workspace_size(&p, &bytes);
        char detail[200];
        const int64_t masks = (int64_t)B * HQ, qwords = ((SQ + 127) / 128 + 31) / 32;
        /* the counts, the lists, the bitmaps by query and by key block;
           then the sm_90a kernel's tile order (an int per 128-row tile:
           as many as rows here) */
        lists_bytes = ((size_t)rows * 4 + 255) / 256 * 256 + ((size_t)(rows * kb) * 4 + 255) / 256 * 256 +
                      ((size_t)(rows * ((kb + 31) / 32)) * 4 + 255) / 256 * 256 +
                      ((size_t)(masks * kb * qwords) * 4 + 255) / 256 * 256;
        want = lists_bytes + ((size_t)rows * 4 + 255) / 256 * 256;
        announce("fa_forward_cuda_workspace_size with a block mask");
        snprintf(detail, sizeof detail, "status %d, %zu bytes (want FA_OK, %zu)", (int)s, bytes, want);
        check(s == FA_OK && bytes == want, "fa_forward_cuda_workspace_size with a block mask", detail);
    }
    d = p;
    d.block_mask.block_k = 64;
    refused_as("fa_forward_cuda, block_mask.block_k 64", fa_forward_cuda(&d, q, k, v, o, lse, NULL, 0, NULL),
               FA_ERROR_UNSUPPORTED, "block_mask.block_k");
    refused_as("fa_forward_cuda, block mask, short workspace",
               fa_forward_cuda(&p, q, k, v, o, lse, (void *)lists, want - 4, NULL), FA_ERROR_INVALID_ARGUMENT,
               "workspace_size");
    for (c = 0; c < 3; c++) {
        /* the backward: its own bytes, then the same sorted lists and
           bitmaps; under a causal mask above D 64 also the sm_90a kernel's
           unit order in place of the forward's tile order (an int per
           128-key block, KV head and sequence at D 128), else none (the
           units keep their own): D 64, D 128, D 128 causal */
        fa_problem plain = base(), masked = p;
        size_t own = 0, got = 0;
        const size_t order = c == 2 ? ((size_t)((SK + 127) / 128 * HKV * B) * 4 + 255) / 256 * 256 : 0;
        plain.head_dim = masked.head_dim = c ? 128 : D;
        plain.causal = masked.causal = c == 2;
        const fa_status s0 = fa_backward_cuda_workspace_size(&plain, &own);
        const fa_status s = fa_backward_cuda_workspace_size(&masked, &got);
        char detail[200];
        announce("fa_backward_cuda_workspace_size with a block mask");
        snprintf(detail, sizeof detail, "d %d causal %d: status %d, %zu bytes (want FA_OK, %zu + %zu + %zu)",
                 masked.head_dim, masked.causal, (int)s, got, own, lists_bytes, order);
        check(s0 == FA_OK && s == FA_OK && got == own + lists_bytes + order,
              "fa_backward_cuda_workspace_size with a block mask", detail);
    }
    d = p;
    d.block_mask.block_k = 64;
    refused_as("fa_backward_cuda, block_mask.block_k 64",
               fa_backward_cuda(&d, q, k, v, o, dout, lse, dq, dk, dv, NULL, 0, NULL), FA_ERROR_UNSUPPORTED,
               "block_mask.block_k");
    d = p;
    d.seqlen_q = 1;
    for (c = 4; c < 6; c++) {
        char name[160], detail[400];
        fa_status s = FA_OK;
        snprintf(name, sizeof name, "refused: %s with a block mask", names[c]);
        announce(name);
        switch (c) {
        case 4: s = fa_decode_cuda_workspace_size(&d, &bytes); break;
        case 5: s = fa_decode_cuda(&d, q, k, v, kn, vn, o, lse, NULL, 0, NULL); break;
        }
        snprintf(detail, sizeof detail, "status %d, \"%s\" (want FA_ERROR_UNSUPPORTED naming block_mask)", (int)s,
                 fa_last_error());
        check(s == FA_ERROR_UNSUPPORTED && strstr(fa_last_error(), "block_mask") != NULL, name, detail);
    }
}

/* ---- the CPU path of an nvcc build (no CUDA call) ----------------------------------
   A user with a CUDA build and a CPU fallback compiles the implementation with nvcc: its
   host pass must build the SIMD loops the host compiler targets, and the CPU forward must
   match the fp64 reference (tests/reference.h). */

/* What the host compiler's target allows (these macros are the host pass's). */
#if defined(FLASHATTN_NO_SIMD)
#define HOST_SIMD_EXPECT "portable"
#elif defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define HOST_SIMD_EXPECT "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define HOST_SIMD_EXPECT "avx2"
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define HOST_SIMD_EXPECT "neon"
#else
#define HOST_SIMD_EXPECT "portable"
#endif

static void cpu_path_cases(void)
{
    enum { CN = 100, CH = 2, CD = 64, NE = CN * CH * CD };
    static float q[NE], k[NE], v[NE], o[NE];
    static double ref[NE];
    fa_problem p;
    fa_tensor tq, tk, tv, to;
    double worst = 0.0;
    char detail[160];
    int i;
    uint32_t z = 1;
    for (i = 0; i < NE; ++i) { /* values in [-1, 1) */
        q[i] = (float)(lcg(&z) >> 8) / 8388608.0f - 1.0f;
        k[i] = (float)(lcg(&z) >> 8) / 8388608.0f - 1.0f;
        v[i] = (float)(lcg(&z) >> 8) / 8388608.0f - 1.0f;
    }
    snprintf(detail, sizeof detail, "nvcc's host pass built the \"%s\" CPU loops; its host target allows \"%s\"",
             fa_cpu_simd_path(), HOST_SIMD_EXPECT);
    check(strcmp(fa_cpu_simd_path(), HOST_SIMD_EXPECT) == 0, "CPU path of the nvcc build", detail);
    memset(&p, 0, sizeof p);
    memset(&tq, 0, sizeof tq); /* f32, packed */
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = CN;
    p.heads_q = CH;
    p.head_dim = CD;
    p.causal = 1;
    tk = tv = to = tq;
    tq.data = q;
    tk.data = k;
    tv.data = v;
    to.data = o;
    if (fa_forward(&p, tq, tk, tv, to, NULL, NULL, 0) != FA_OK) {
        check(0, "CPU forward of the nvcc build", fa_last_error());
        return;
    }
    ref_forward(&p, tq, tk, tv, ref, NULL); /* fp64 (tests/reference.h) */
    for (i = 0; i < NE; ++i)
        worst = fmax(worst, fabs(ref[i] - (double)o[i]));
    snprintf(detail, sizeof detail, "max abs error %.3g (tolerance 1e-5)", worst);
    check(worst <= 1e-5, "CPU forward of the nvcc build", detail);
    printf("CPU path \"%s\" (host target allows \"%s\"), forward max abs error %.2g\n", fa_cpu_simd_path(),
           HOST_SIMD_EXPECT, worst);
}

/* ---- with a GPU: the backward at tiny scales (issue 47, item 2) ----------------
   dK = scale dS^T Q must not underflow: the GPU's dK and dQ against the CPU
   backward (itself checked against fp64 in test_bad_input) on the same bf16
   inputs, at scales where forming dK from a pre-scaled Q underflows fp32. */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16); /* truncation: an exact bf16 value */
}
static float f32_of(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void gpu_tiny_scales(void)
{
    enum { N = 64, H = 2, E = N * H * D }; /* batch 1, N queries and keys, H heads */
    static const float scales[] = {1e-30f, 1e-20f, -1e-25f};
    uint16_t *hq = (uint16_t *)malloc(4 * E * 2), *hk = hq + E, *hv = hk + E, *hdo = hv + E;
    uint16_t *ho = (uint16_t *)malloc(4 * E * 2), *hdq = ho + E, *hdk = hdq + E, *hdv = hdk + E;
    uint16_t *gdq = (uint16_t *)malloc(2 * E * 2), *gdk = gdq + E;
    float *hl = (float *)malloc(sizeof(float) * H * N);
    uint32_t x = 12345;
    size_t i, c;
    for (i = 0; i < 4 * (size_t)E; i++) {
        hq[i] = bf16_of((float)((int)(lcg(&x) >> 16) - 32768) / 16384.0f);
    }
    for (c = 0; c < sizeof scales / sizeof scales[0]; c++) {
        fa_problem p;
        fa_tensor q, k, v, o, dout, dq, dk, dv;
        float *dl;
        double err_q = 0, err_k = 0, rms_q = 0, rms_k = 0;
        char name[96], detail[200];
        fa_status s1, s2;
        memset(&p, 0, sizeof p);
        p.batch = 1; p.seqlen_q = p.seqlen_k = N; p.heads_q = H; p.head_dim = D; p.scale = scales[c];
        memset(&q, 0, sizeof q);
        q.dtype = FA_BF16;
        k = v = o = dout = dq = dk = dv = q;
        /* the CPU: forward, then backward */
        q.data = hq; k.data = hk; v.data = hv; dout.data = hdo; o.data = ho; dq.data = hdq; dk.data = hdk; dv.data = hdv;
        s1 = fa_forward(&p, q, k, v, o, hl, NULL, 0);
        s2 = s1 == FA_OK ? fa_backward(&p, q, k, v, o, dout, hl, dq, dk, dv, NULL, 0) : s1;
        snprintf(name, sizeof name, "GPU backward at scale %g", (double)p.scale);
        check(s2 == FA_OK, name, fa_last_error());
        /* the GPU, the same calls */
        used = 0;
        q.data = carve(E * 2, hq); k.data = carve(E * 2, hk); v.data = carve(E * 2, hv); dout.data = carve(E * 2, hdo);
        o.data = carve(E * 2, NULL); dq.data = carve(E * 2, NULL); dk.data = carve(E * 2, NULL); dv.data = carve(E * 2, NULL);
        dl = (float *)carve(sizeof(float) * H * N, NULL);
        s1 = fa_forward_cuda(&p, q, k, v, o, dl, NULL, 0, NULL);
        s2 = s1 == FA_OK ? fa_backward_cuda(&p, q, k, v, o, dout, dl, dq, dk, dv, NULL, 0, NULL) : s1;
        check(s2 == FA_OK && cudaDeviceSynchronize() == cudaSuccess, name, fa_last_error());
        cudaMemcpy(gdq, dq.data, E * 2, cudaMemcpyDeviceToHost);
        cudaMemcpy(gdk, dk.data, E * 2, cudaMemcpyDeviceToHost);
        for (i = 0; i < (size_t)E; i++) {
            double a = f32_of(hdq[i]), b = f32_of(hdk[i]);
            err_q = fmax(err_q, fabs(f32_of(gdq[i]) - a)); rms_q += a * a;
            err_k = fmax(err_k, fabs(f32_of(gdk[i]) - b)); rms_k += b * b;
        }
        rms_q = sqrt(rms_q / E); rms_k = sqrt(rms_k / E);
        snprintf(detail, sizeof detail, "max |dQ gpu - cpu| / rms %.3g, max |dK gpu - cpu| / rms %.3g (rms dK %.3g)",
                 err_q / rms_q, err_k / rms_k, rms_k);
        printf("  %s: %s\n", name, detail);
        check(rms_k > 0 && rms_q > 0 && err_q <= 5e-2 * rms_q && err_k <= 5e-2 * rms_k, name, detail);
    }
    free(hq); free(ho); free(gdq); free(hl);
}


/* ---- with a GPU: empty sequences give O = 0, L = -inf, dQ = 0 ----------------
   (section 5 of flashattn.h). Outputs start as 0xFF bytes (NaN), so a row
   the kernels skip shows. */
static void *carve_random(size_t elems, uint32_t seed)
{
    uint16_t *h = (uint16_t *)malloc(elems * 2);
    void *d;
    size_t i;
    for (i = 0; i < elems; i++) {
        h[i] = bf16_of((float)((int)(lcg(&seed) >> 16) - 32768) / 16384.0f);
    }
    d = carve(elems * 2, h);
    free(h);
    return d;
}
static void *carve_nan(size_t bytes)
{
    void *d = carve(bytes, NULL);
    cudaMemset(d, 0xFF, bytes);
    return d;
}

/* rows [r0, r1) of a packed [rows, HQ, D] bf16 output all +0 or -0 (bits & 0x7fff == 0)? */
static int rows_zero(const void *dev, int64_t r0, int64_t r1)
{
    size_t n = (size_t)(r1 - r0) * HQ * D, i;
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    int ok = 1;
    cudaMemcpy(h, (const uint16_t *)dev + (size_t)r0 * HQ * D, n * 2, cudaMemcpyDeviceToHost);
    for (i = 0; i < n; i++) ok &= (h[i] & 0x7fffu) == 0;
    free(h);
    return ok;
}
/* L[i] for i in idx: -inf when want_inf, else finite */
static int lse_is(const float *dev, int64_t n, int64_t lo, int64_t hi, int want_inf)
{
    float *h = (float *)malloc(sizeof(float) * (size_t)n);
    int64_t i;
    int ok = 1;
    cudaMemcpy(h, dev, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost);
    for (i = lo; i < hi; i++) ok &= want_inf ? h[i] == -INFINITY : (h[i] - h[i] == 0.0f);
    free(h);
    return ok;
}

static void gpu_empty_sequences(void)
{
    int32_t seqlens[B] = {0, 77}, cu_q[B + 1] = {0, 40, 104}, cu_k[B + 1] = {0, 0, SK};
    fa_problem p = base();
    fa_tensor q, k, v, o, dout, dq, dk, dv;
    float *lse;
    int h, ok;
    fa_status s;
    used = 0;
    memset(&q, 0, sizeof q);
    q.dtype = FA_BF16;
    k = v = o = dout = dq = dk = dv = q;
    q.data = carve_random((size_t)B * SQ * HQ * D, 1); k.data = carve_random((size_t)B * SK * HKV * D, 2);
    v.data = carve_random((size_t)B * SK * HKV * D, 3); dout.data = carve_random((size_t)B * SQ * HQ * D, 4);
    o.data = carve_nan((size_t)B * SQ * HQ * D * 2); dq.data = carve_nan((size_t)B * SQ * HQ * D * 2);
    dk.data = carve_nan((size_t)B * SK * HKV * D * 2); dv.data = carve_nan((size_t)B * SK * HKV * D * 2);
    lse = (float *)carve_nan(sizeof(float) * B * HQ * SQ);
    /* forward, sequence 0 with no key in use (seqlens_k[0] = 0) */
    p.seqlens_k = (const int32_t *)carve(sizeof seqlens, seqlens);
    s = fa_forward_cuda(&p, q, k, v, o, lse, NULL, 0, NULL);
    ok = s == FA_OK && cudaDeviceSynchronize() == cudaSuccess && rows_zero(o.data, 0, SQ) &&
         lse_is(lse, B * HQ * SQ, 0, HQ * SQ, 1) && lse_is(lse, B * HQ * SQ, HQ * SQ, B * HQ * SQ, 0);
    check(ok, "GPU forward, seqlens_k[0] = 0", "O of sequence 0 is not 0, or its L is not -inf");
    /* forward and backward, varlen: sequence 0 has 40 queries and no keys */
    p.seqlens_k = NULL;
    p.cu_seqlens_q = (const int32_t *)carve(sizeof cu_q, cu_q);
    p.cu_seqlens_k = (const int32_t *)carve(sizeof cu_k, cu_k);
    cudaMemset(o.data, 0xFF, (size_t)B * SQ * HQ * D * 2);
    s = fa_forward_cuda(&p, q, k, v, o, lse, NULL, 0, NULL);
    ok = s == FA_OK && cudaDeviceSynchronize() == cudaSuccess && rows_zero(o.data, 0, 40);
    for (h = 0; ok && h < HQ; h++) ok &= lse_is(lse, HQ * 104, h * 104, h * 104 + 40, 1);
    check(ok, "GPU forward, varlen, sequence 0 without keys", "O of sequence 0 is not 0, or its L is not -inf");
    s = fa_backward_cuda(&p, q, k, v, o, dout, lse, dq, dk, dv, NULL, 0, NULL);
    ok = s == FA_OK && cudaDeviceSynchronize() == cudaSuccess && rows_zero(dq.data, 0, 40);
    check(ok, "GPU backward, varlen, sequence 0 without keys", "dQ of sequence 0 is not 0 (or the call failed)");
    /* decode of an empty cache, nothing appended */
    {
        fa_problem d = base();
        fa_tensor kn, vn;
        memset(&kn, 0, sizeof kn); memset(&vn, 0, sizeof vn);
        d.seqlen_q = 1;
        d.seqlens_k = (const int32_t *)carve(sizeof seqlens, seqlens);
        cudaMemset(o.data, 0xFF, (size_t)B * HQ * D * 2);
        cudaMemset(lse, 0xFF, sizeof(float) * B * HQ);
        s = fa_decode_cuda(&d, q, k, v, kn, vn, o, lse, NULL, 0, NULL);
        ok = s == FA_OK && cudaDeviceSynchronize() == cudaSuccess && rows_zero(o.data, 0, 1) &&
             lse_is(lse, B * HQ, 0, HQ, 1) && lse_is(lse, B * HQ, HQ, B * HQ, 0);
        check(ok, "GPU decode, seqlens_k[0] = 0", "O of sequence 0 is not 0, or its L is not -inf");
    }
}

int main(void)
{
    int devices = 0;
    on_gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    (void)cudaGetLastError();
    if (on_gpu) {
        void *d = NULL;
        if (cudaMalloc(&d, ARENA) != cudaSuccess || cudaMemset(d, 0, ARENA) != cudaSuccess) {
            printf("cudaMalloc of the arena failed\n");
            return 2;
        }
        arena = (char *)d;
    } else {
        void *m = mmap(NULL, ARENA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) { printf("mmap failed\n"); return 2; }
        arena = (char *)m;
    }
    printf("test_cuda_args: %s\n", on_gpu ? "a GPU: device memory with valid arrays, every call must succeed"
                                          : "no GPU: every pointer on a PROT_NONE mapping");
    {
        arrays a = make_arrays();
        forward_cases(&a);
        fp8_cases(&a);
        decode_cases(&a);
        error_cases(&a);
        block_mask_cases();
    }
    cpu_path_cases();
    if (on_gpu) {
        gpu_tiny_scales();
        gpu_empty_sequences();
    }
    if (on_gpu) cudaFree(arena);
    else munmap(arena, ARENA);
    printf("test_cuda_args: %d passed, %d failed\n", n_pass, n_fail);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
