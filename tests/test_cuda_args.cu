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
   Also: argument errors that need no array contents are still reported
   (FA_ERROR_INVALID_ARGUMENT naming the field) with the arrays unreadable.

   Built with the implementation's default macros (every head dim), for
   sm_80 and sm_90a: nvcc -I. tests/test_cuda_args.cu (see the Makefile). */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int n_pass, n_fail;

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

static void refused(const char *name, fa_status s, const char *field)
{
    char detail[400];
    snprintf(detail, sizeof detail, "status %d, \"%s\" (want FA_ERROR_INVALID_ARGUMENT naming %s)", (int)s,
             fa_last_error(), field);
    check(s == FA_ERROR_INVALID_ARGUMENT && strstr(fa_last_error(), field) != NULL, name, detail);
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
        decode_cases(&a);
        error_cases(&a);
    }
    if (on_gpu) cudaFree(arena);
    else munmap(arena, ARENA);
    printf("test_cuda_args: %d passed, %d failed\n", n_pass, n_fail);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
