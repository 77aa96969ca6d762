/* tests/fuzz_args.c - the argument checks under fuzzing.

   One body, fuzz_one(bytes, n), decodes the bytes into an fa_problem (every
   field, the host arrays alibi_slopes, cu_seqlens_q/k, seqlens_k,
   block_table and the block_mask lists, each allocated at exactly the size
   the API documents), the
   tensor views (dtype, strides that may overlap, NULL data) with buffers
   sized from the views, and fa_merge's arguments (overlaps included), then
   calls fa_problem_resolve, the three workspace queries, fa_forward,
   fa_backward (on the forward's O and L), fa_decode and fa_merge. It asserts:
     - no crash, no out-of-bounds access (ASan), no undefined behaviour (UBSan);
     - a call that fails returns a known status, names its function in
       fa_last_error(), and leaves every output byte (and every input byte)
       as it was;
     - a call that succeeds gives finite O, dQ, dK, dV and no NaN in L, and
       writes nothing past the workspace size its query reported;
     - fa_merge in place (o == o_parts, lse == lse_parts) gives the bytes
       that the same call out of place gives.
   A failed assertion prints what failed and aborts (libFuzzer keeps the input).

   Two drivers of the same body:
     libFuzzer (clang -fsanitize=fuzzer,address,undefined -DFUZZ_LIBFUZZER):
       build/fuzz_args_lf CORPUS_DIR -max_total_time=N
     a seeded random driver where libFuzzer is missing (any C99 compiler):
       build/fuzz_args [SECONDS [SEED]] [FILE...]   runs FILEs, then random
       inputs (random bytes and mutations of FILEs) for SECONDS (default 30).
   Both end with "N passed, M failed" (see tests/run_check.sh); `make fuzz
   SECONDS=n` runs longer. Seed corpus: tests/fuzz_corpus/. */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- reading the bytes --------------------------------------------------- */

typedef struct reader { const uint8_t *p; size_t n, at; } reader;

static unsigned u8(reader *r) { return r->at < r->n ? r->p[r->at++] : 0u; }
static int in(reader *r, int lo, int hi) { return lo + (int)(u8(r) % (unsigned)(hi - lo + 1)); } /* [lo, hi] */
static int one_in(reader *r, int n) { return u8(r) % (unsigned)n == 0; }
static int choose(reader *r, const int *v, int n) { return v[u8(r) % (unsigned)n]; }

/* ---- checks ---------------------------------------------------------------- */

static long long n_checks, n_ok[4]; /* calls that succeeded: forward, backward, decode, merge */
static const char *current; /* the call being checked, for the failure message */

static void fuzz_assert(int ok, const char *what)
{
    n_checks++;
    if (!ok) {
        printf("FUZZ FAILURE in %s: %s (last error: \"%s\")\n", current, what, fa_last_error());
        fflush(stdout);
        abort();
    }
}

/* A status the library documents; on failure the message names the call. */
static void check_status(fa_status s, const char *fn)
{
    fuzz_assert(s == FA_OK || s == FA_ERROR_INVALID_ARGUMENT || s == FA_ERROR_UNSUPPORTED ||
                    s == FA_ERROR_OUT_OF_MEMORY, "status is not one of the CPU's fa_status codes");
    if (s != FA_OK)
        fuzz_assert(!strncmp(fa_last_error(), fn, strlen(fn)), "fa_last_error() does not start with the function");
}

/* ---- buffers ------------------------------------------------------------------ */

/* A heap buffer of exactly `bytes` (ASan sees every byte past it), and a
   copy of its contents to tell whether a call wrote it. */
typedef struct buf { unsigned char *p, *snap; size_t bytes; } buf;

static buf buf_new(size_t bytes)
{
    buf b;
    b.bytes = bytes;
    b.p = (unsigned char *)calloc(bytes ? bytes : 1, 1);
    b.snap = (unsigned char *)malloc(bytes ? bytes : 1);
    return b;
}
static void buf_snap(buf *b) { memcpy(b->snap, b->p, b->bytes); }
static int buf_same(const buf *b) { return !memcmp(b->snap, b->p, b->bytes); }
static void buf_free(buf *b) { free(b->p); free(b->snap); }

static int dsize(fa_dtype t) { return t == FA_F32 ? 4 : t == FA_F16 || t == FA_BF16 ? 2 : 1; }

/* element i of a buffer in dtype t; f16 / bf16 decoded by hand */
static float get_elem(const unsigned char *p, fa_dtype t, size_t i)
{
    if (t == FA_F32) { float f; memcpy(&f, p + 4 * i, 4); return f; }
    if (t == FA_F16 || t == FA_BF16) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        if (t == FA_BF16) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
        if ((h & 0x7c00u) == 0x7c00u) return (h & 0x3ffu) ? NAN : INFINITY; /* the only cases that matter here */
        return 1.0f;
    }
    return 0.0f;
}

/* Fill with finite values in [-2, 2) of dtype t (e4m3 / unknown: zero bytes). */
static void fill_finite(buf *b, fa_dtype t, reader *r)
{
    size_t i, n = b->bytes / (size_t)dsize(t);
    uint32_t x = 0x9e3779b9u ^ u8(r);
    for (i = 0; i < n; i++) {
        float f;
        x = x * 1664525u + 1013904223u;
        f = (float)((int)(x >> 16) - 32768) / 16384.0f;
        if (t == FA_F32) memcpy(b->p + 4 * i, &f, 4);
        else if (t == FA_BF16 || t == FA_F16) {
            uint32_t u;
            uint16_t h;
            memcpy(&u, &f, 4);
            /* bf16: the top half; f16: an exactly representable value from the same bits */
            h = t == FA_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(((x >> 20) & 0x83ffu) | 0x3800u);
            memcpy(b->p + 2 * i, &h, 2);
        }
    }
}

/* All elements of an output buffer finite? (Unwritten bytes stay 0.) */
static int all_finite(const buf *b, fa_dtype t)
{
    size_t i, n = b->bytes / (size_t)dsize(t);
    for (i = 0; i < n; i++) {
        float f = get_elem(b->p, t, i);
        if (!(f - f == 0.0f)) return 0;
    }
    return 1;
}

/* ---- the problem and its views --------------------------------------------- */

typedef struct view { fa_tensor t; buf b; } view;

/* A [nb, ns, nh, dim] view: a dtype (mostly valid), strides packed, padded,
   transposed or small random (overlaps included), data NULL now and then;
   the buffer covers the extent the strides give. */
static view view_new(reader *r, int64_t nb, int64_t ns, int64_t nh, int64_t dim, int output)
{
    static const int dtypes[] = {FA_F32, FA_F32, FA_F32, FA_F16, FA_BF16, FA_F16, FA_BF16, FA_F32,
                                 FA_F32, FA_F16, FA_BF16, FA_F32, FA_F32, FA_F32, FA_E4M3, 7};
    view v;
    int64_t s[3], cnt[3], ext, i;
    int mode = (int)(u8(r) % 8);
    memset(&v, 0, sizeof v);
    if (nb < 1) nb = 1;
    if (ns < 1) ns = 1;
    if (nh < 1) nh = 1;
    if (dim < 1) dim = 1;
    v.t.dtype = (fa_dtype)choose(r, dtypes, 16);
    if (mode == 1) { /* padded */
        v.t.head_stride = dim + in(r, 0, 3);
        v.t.seq_stride = nh * v.t.head_stride + in(r, 0, 5);
        v.t.batch_stride = ns * v.t.seq_stride + in(r, 0, 7);
    } else if (mode == 2) { /* [b, h, s, d] */
        v.t.seq_stride = dim;
        v.t.head_stride = ns * dim;
        v.t.batch_stride = nh * ns * dim;
    } else if (mode == 3) { /* anything small, overlapping or not */
        v.t.head_stride = in(r, 0, 40);
        v.t.seq_stride = in(r, 0, 80);
        v.t.batch_stride = in(r, 0, 200);
    }
    /* the extent, with zero strides packed as the library resolves them */
    s[2] = v.t.head_stride ? v.t.head_stride : dim;
    s[1] = v.t.seq_stride ? v.t.seq_stride : nh * dim;
    s[0] = v.t.batch_stride ? v.t.batch_stride : ns * s[1];
    cnt[0] = nb; cnt[1] = ns; cnt[2] = nh;
    for (ext = dim, i = 0; i < 3; i++) ext += (cnt[i] - 1) * s[i];
    v.b = buf_new((size_t)ext * (size_t)dsize(v.t.dtype));
    if (!output) fill_finite(&v.b, v.t.dtype, r);
    v.t.data = one_in(r, 40) ? NULL : v.b.p;
    return v;
}

typedef struct arrays { float *alibi; int32_t *cu_q, *cu_k, *seqlens, *table, *bm[4]; } arrays;

/* Offsets [batch + 1]: valid (lengths 0..max) or, now and then, broken. */
static int32_t *cu_new(reader *r, int batch, int maxlen)
{
    int32_t *cu = (int32_t *)malloc(sizeof(int32_t) * (size_t)(batch + 1));
    int b;
    cu[0] = 0;
    for (b = 0; b < batch; b++) cu[b + 1] = cu[b] + in(r, 0, maxlen > 0 ? maxlen : 0);
    if (one_in(r, 6)) cu[in(r, 0, batch)] += in(r, -3, 3);
    return cu;
}

/* A block mask (section 5): sizes and mask batch / heads valid or not, the
   lists at exactly the sizes section 5 gives for them (one element when
   the sizes are invalid: the library must refuse before reading), their
   entries mostly valid: distinct blocks, now and then a repeat, an index
   or a count out of range, or one array of a pair missing. */
static int rare(reader *r, int n) { return u8(r) % (unsigned)n == (unsigned)n - 1u; } /* never once the bytes run out */

static void block_mask_new(reader *r, fa_problem *p, arrays *a)
{
    static const int blocks[] = {0, 1, 2, 3, 5, 128, -1, 4};
    fa_block_mask *m = &p->block_mask;
    int bq, bk, nb, nh, qb, kb, l, j, t, lists;
    int64_t rows, row;
    m->block_q = choose(r, blocks, 8);
    m->block_k = choose(r, blocks, 8);
    m->batch = rare(r, 8) ? in(r, -1, 3) : in(r, 0, 1);
    m->heads = rare(r, 8) ? in(r, -1, 4) : one_in(r, 2) ? 0 : one_in(r, 2) ? 1 : p->heads_kv;
    bq = m->block_q > 0 ? m->block_q : 128;
    bk = m->block_k > 0 ? m->block_k : 128;
    nb = m->batch ? m->batch : p->batch;
    nh = m->heads ? m->heads : p->heads_q;
    qb = p->seqlen_q > 0 ? (p->seqlen_q + bq - 1) / bq : 0;
    kb = p->seqlen_k > 0 ? (p->seqlen_k + bk - 1) / bk : 0;
    rows = nb > 0 && nh > 0 ? (int64_t)nb * nh * qb : 0;
    lists = rare(r, 3) ? 2 : 1;
    for (l = 0; l < lists; l++) {
        int32_t *cnt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1));
        int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(rows * kb > 0 ? rows * kb : 1));
        cnt[0] = idx[0] = 0;
        for (row = 0; row < rows; row++) {
            cnt[row] = in(r, 0, kb);
            for (t = 0; t < kb; t++) idx[row * kb + t] = (t + (int)row) % kb; /* distinct */
            for (t = 0; t + 1 < kb; t++) { /* shuffled a little */
                j = in(r, t, kb - 1);
                { int32_t x = idx[row * kb + t]; idx[row * kb + t] = idx[row * kb + j]; idx[row * kb + j] = x; }
            }
        }
        if (rows > 0 && kb > 0 && rare(r, 4)) { /* one entry broken */
            row = in(r, 0, (int)(rows - 1 < 255 ? rows - 1 : 255));
            if (one_in(r, 2)) cnt[row] = in(r, -1, kb + 1);
            else idx[row * kb + in(r, 0, kb - 1)] = one_in(r, 2) ? in(r, -1, kb) : idx[row * kb];
        }
        a->bm[2 * l] = cnt;
        a->bm[2 * l + 1] = idx;
    }
    m->kv_num_blocks = rare(r, 16) ? NULL : a->bm[0];
    m->kv_indices = rare(r, 16) ? NULL : a->bm[1];
    m->full_kv_num_blocks = a->bm[2];
    m->full_kv_indices = a->bm[3] && rare(r, 16) ? NULL : a->bm[3];
}

static void problem_new(reader *r, fa_problem *p, arrays *a)
{
    static const int dims[] = {1, 2, 3, 4, 5, 7, 8, 8, 16, 16, 17, 24, 32, 33, 64, 0, -1, 257, 8, 4};
    static const float scales[] = {0.0f, 0.0f, 0.0f, 1.0f, 0.3f, -0.5f, 1e-30f, 2.0f, 1e-41f, NAN, INFINITY, 0.125f};
    static const float caps[] = {0.0f, 0.0f, 0.0f, 5.0f, 0.5f, 30.0f, -1.0f, NAN, 1e30f};
    static const float drops[] = {0.0f, 0.0f, 0.0f, 0.1f, 0.5f, 0.9f, 1.0f, -0.1f, NAN};
    static const float slopes[] = {0.5f, 0.25f, 0.0f, 1.0f, 0.125f, 2.0f, -0.5f, NAN};
    int b;
    memset(p, 0, sizeof *p);
    memset(a, 0, sizeof *a);
    p->batch = in(r, -1, 4);
    p->seqlen_q = in(r, -1, 9);
    p->seqlen_k = in(r, -1, 12);
    p->heads_kv = in(r, 0, 3);
    p->heads_q = p->heads_kv ? p->heads_kv * in(r, 1, 3) : in(r, 1, 4);
    if (one_in(r, 16)) p->heads_q = in(r, -1, 7);
    if (one_in(r, 16)) p->heads_kv = in(r, -1, 4);
    p->head_dim = choose(r, dims, 20);
    p->head_dim_v = one_in(r, 2) ? 0 : choose(r, dims, 20);
    p->scale = scales[u8(r) % 12];
    p->causal = one_in(r, 3);
    if (one_in(r, 4)) { p->sliding_window = 1; p->window_left = in(r, -1, 8); p->window_right = in(r, -1, 8); }
    p->softcap = caps[u8(r) % 9];
    p->dropout_p = drops[u8(r) % 9];
    p->dropout_seed = u8(r) * 0x9e3779b97f4a7c15ull;
    p->dropout_offset = u8(r);
    p->num_splits = in(r, -1, 5);
    p->deterministic = one_in(r, 2);
    if (p->batch < 1 || p->batch > 4 || p->heads_q < 1 || p->heads_q > 16)
        return; /* refused before any array is read: none given */
    if (one_in(r, 4)) {
        a->alibi = (float *)malloc(sizeof(float) * (size_t)p->heads_q);
        for (b = 0; b < p->heads_q; b++) a->alibi[b] = one_in(r, 12) ? slopes[7] : slopes[u8(r) % 7];
        p->alibi_slopes = a->alibi;
    }
    if (one_in(r, 3)) { /* variable-length batch */
        a->cu_q = cu_new(r, p->batch, p->seqlen_q);
        a->cu_k = cu_new(r, p->batch, p->seqlen_k);
        p->cu_seqlens_q = a->cu_q;
        p->cu_seqlens_k = one_in(r, 8) ? NULL : a->cu_k;
    }
    if (one_in(r, 3)) {
        a->seqlens = (int32_t *)malloc(sizeof(int32_t) * (size_t)p->batch);
        for (b = 0; b < p->batch; b++) a->seqlens[b] = in(r, one_in(r, 10) ? -2 : 0, p->seqlen_k > 0 ? p->seqlen_k : 0);
        p->seqlens_k = a->seqlens;
    }
    if (rare(r, 4))
        block_mask_new(r, p, a);
    if (one_in(r, 3)) { /* paged: a pool of pages and a block table */
        int n;
        p->page_size = one_in(r, 12) ? in(r, -1, 0) : in(r, 1, 5);
        p->pages_per_seq = (p->seqlen_k + (p->page_size > 0 ? p->page_size : 1) - 1) / (p->page_size > 0 ? p->page_size : 1) +
                           in(r, -1, 1);
        p->num_pages = one_in(r, 12) ? 0 : in(r, 1, 12);
        if (p->pages_per_seq < 1 || p->pages_per_seq > 64) return;
        n = p->batch * p->pages_per_seq;
        a->table = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        for (b = 0; b < n; b++) a->table[b] = one_in(r, 16) ? in(r, -1, p->num_pages + 1) : in(r, 0, p->num_pages - 1 > 0 ? p->num_pages - 1 : 0);
        p->block_table = a->table;
    }
}

static void arrays_free(arrays *a)
{
    int i;
    free(a->alibi); free(a->cu_q); free(a->cu_k); free(a->seqlens); free(a->table);
    for (i = 0; i < 4; i++) free(a->bm[i]);
}

/* Rows of the query-side and key-side views, as the documentation gives them. */
static void q_rows(const fa_problem *p, int64_t *nb, int64_t *ns)
{
    *nb = p->cu_seqlens_q ? 1 : p->batch;
    *ns = p->cu_seqlens_q ? p->cu_seqlens_q[p->batch] : p->seqlen_q;
}
static void k_rows(const fa_problem *p, int64_t *nb, int64_t *ns)
{
    if (p->block_table) { *nb = p->num_pages; *ns = p->page_size; return; }
    *nb = p->cu_seqlens_k ? 1 : p->batch;
    *ns = p->cu_seqlens_k ? p->cu_seqlens_k[p->batch] : p->seqlen_k;
}

/* A workspace of exactly the reported size followed by a canary. */
#define CANARY 64
static unsigned char *ws_new(size_t bytes)
{
    unsigned char *w = (unsigned char *)malloc(bytes + CANARY);
    memset(w, 0xA5, bytes + CANARY);
    return w;
}
static int ws_canary_ok(const unsigned char *w, size_t bytes)
{
    int i;
    for (i = 0; i < CANARY; i++)
        if (w[bytes + i] != 0xA5) return 0;
    return 1;
}

/* ---- the calls ---------------------------------------------------------------- */

static void fuzz_forward_backward(reader *r, const fa_problem *pp, const fa_problem *p)
{
    int64_t qb, qs, kb, ks, nl;
    int d = p->head_dim, dv = p->head_dim_v ? p->head_dim_v : p->head_dim, hkv = p->heads_kv ? p->heads_kv : p->heads_q;
    view q, k, v, o, dout, dq, dk, dv_;
    buf lse;
    size_t need = 0;
    unsigned char *ws = NULL;
    fa_status s;
    int use_ws = one_in(r, 2), keep_lse = !one_in(r, 5);
    q_rows(p, &qb, &qs);
    k_rows(p, &kb, &ks);
    q = view_new(r, qb, qs, p->heads_q, d, 0);
    k = view_new(r, kb, ks, hkv, d, 0);
    v = view_new(r, kb, ks, hkv, dv, 0);
    o = view_new(r, qb, qs, p->heads_q, dv, 1);
    nl = (int64_t)p->heads_q * (qb * qs > 0 ? qb * qs : 1);
    lse = buf_new((size_t)nl * sizeof(float));
    current = "fa_forward_workspace_size";
    if (fa_forward_workspace_size(pp, &need) == FA_OK && use_ws) ws = ws_new(need);
    buf_snap(&o.b); buf_snap(&lse);
    current = "fa_forward";
    s = fa_forward(pp, q.t, k.t, v.t, o.t, keep_lse ? (float *)(void *)lse.p : NULL, ws, ws ? need : 0);
    check_status(s, "fa_forward");
    if (ws) fuzz_assert(ws_canary_ok(ws, need), "wrote past the workspace size fa_forward_workspace_size reported");
    if (s != FA_OK) {
        fuzz_assert(buf_same(&o.b) && buf_same(&lse), "a refused fa_forward wrote its outputs");
    } else {
        size_t i;
        n_ok[0]++;
        fuzz_assert(all_finite(&o.b, o.t.dtype), "fa_forward gave a non-finite O");
        for (i = 0; keep_lse && i < lse.bytes / 4; i++) {
            float l;
            memcpy(&l, lse.p + 4 * i, 4);
            fuzz_assert(l == l && l != INFINITY, "fa_forward gave NaN or +inf in L");
        }
    }
    free(ws);
    ws = NULL;
    if (s == FA_OK && keep_lse) { /* the backward of that forward */
        int64_t qb2, qs2;
        q_rows(p, &qb2, &qs2);
        dout = view_new(r, qb2, qs2, p->heads_q, dv, 0);
        dq = view_new(r, qb2, qs2, p->heads_q, d, 1);
        dk = view_new(r, kb, ks, hkv, d, 1);
        dv_ = view_new(r, kb, ks, hkv, dv, 1);
        current = "fa_backward_workspace_size";
        if (fa_backward_workspace_size(pp, &need) == FA_OK && use_ws) ws = ws_new(need);
        buf_snap(&dq.b); buf_snap(&dk.b); buf_snap(&dv_.b); buf_snap(&o.b); buf_snap(&lse);
        current = "fa_backward";
        s = fa_backward(pp, q.t, k.t, v.t, o.t, dout.t, (const float *)(void *)lse.p, dq.t, dk.t, dv_.t, ws,
                        ws ? need : 0);
        check_status(s, "fa_backward");
        if (ws) fuzz_assert(ws_canary_ok(ws, need), "wrote past the workspace size fa_backward_workspace_size reported");
        fuzz_assert(buf_same(&o.b) && buf_same(&lse), "fa_backward wrote o or lse (inputs)");
        if (s != FA_OK)
            fuzz_assert(buf_same(&dq.b) && buf_same(&dk.b) && buf_same(&dv_.b), "a refused fa_backward wrote dq, dk or dv");
        else if (++n_ok[1])
            fuzz_assert(all_finite(&dq.b, dq.t.dtype) && all_finite(&dk.b, dk.t.dtype) && all_finite(&dv_.b, dv_.t.dtype),
                        "fa_backward gave a non-finite gradient");
        free(ws);
        buf_free(&dout.b); buf_free(&dq.b); buf_free(&dk.b); buf_free(&dv_.b);
    }
    buf_free(&q.b); buf_free(&k.b); buf_free(&v.b); buf_free(&o.b); buf_free(&lse);
}

static void fuzz_decode(reader *r, const fa_problem *pp, const fa_problem *p)
{
    int64_t kb, ks;
    int d = p->head_dim, dv = p->head_dim_v ? p->head_dim_v : p->head_dim, hkv = p->heads_kv ? p->heads_kv : p->heads_q;
    view q, kc, vc, kn, vn, o;
    buf lse;
    size_t need = 0;
    unsigned char *ws = NULL;
    fa_status s;
    int append = one_in(r, 2);
    if (p->block_table) { kb = p->num_pages; ks = p->page_size; }
    else { kb = p->batch; ks = p->seqlen_k; }
    q = view_new(r, p->batch, p->seqlen_q, p->heads_q, d, 0);
    kc = view_new(r, kb, ks, hkv, d, 0);
    vc = view_new(r, kb, ks, hkv, dv, 0);
    kn = view_new(r, p->batch, p->seqlen_q, hkv, d, 0);
    vn = view_new(r, p->batch, p->seqlen_q, hkv, dv, 0);
    if (!append) { kn.t.data = NULL; vn.t.data = one_in(r, 8) ? vn.b.p : NULL; }
    o = view_new(r, p->batch, p->seqlen_q, p->heads_q, dv, 1);
    lse = buf_new(sizeof(float) * (size_t)(p->batch * (p->seqlen_q > 0 ? p->seqlen_q : 1) * p->heads_q));
    current = "fa_decode_workspace_size";
    if (fa_decode_workspace_size(pp, &need) == FA_OK && one_in(r, 2)) ws = ws_new(need);
    buf_snap(&o.b); buf_snap(&lse); buf_snap(&kc.b); buf_snap(&vc.b); buf_snap(&q.b);
    current = "fa_decode";
    s = fa_decode(pp, q.t, kc.t, vc.t, kn.t, vn.t, o.t, (float *)(void *)lse.p, ws, ws ? need : 0);
    check_status(s, "fa_decode");
    if (ws) fuzz_assert(ws_canary_ok(ws, need), "wrote past the workspace size fa_decode_workspace_size reported");
    fuzz_assert(buf_same(&q.b), "fa_decode wrote q");
    if (s != FA_OK) {
        fuzz_assert(buf_same(&o.b) && buf_same(&lse) && buf_same(&kc.b) && buf_same(&vc.b),
                    "a refused fa_decode wrote o, lse or the cache");
    } else {
        size_t i;
        n_ok[2]++;
        fuzz_assert(all_finite(&o.b, o.t.dtype), "fa_decode gave a non-finite O");
        for (i = 0; i < lse.bytes / 4; i++) {
            float l;
            memcpy(&l, lse.p + 4 * i, 4);
            fuzz_assert(l == l && l != INFINITY, "fa_decode gave NaN or +inf in L");
        }
    }
    free(ws);
    buf_free(&q.b); buf_free(&kc.b); buf_free(&vc.b); buf_free(&kn.b); buf_free(&vn.b); buf_free(&o.b); buf_free(&lse);
}

/* fa_merge: one region holds o_parts, lse_parts, o and lse; the outputs sit
   apart, in place, or shifted into an input. */
static void fuzz_merge(reader *r)
{
    int ns = in(r, -1, 4), dim = in(r, -1, 9), mode = in(r, 0, 7), i;
    int64_t rows = in(r, -1, 20);
    size_t nop, nlp, no, total;
    buf reg;
    float *op, *lp, *o, *l;
    fa_status s;
    int uns = ns > 0 ? ns : 1, udim = dim > 0 ? dim : 1;
    int64_t urows = rows > 0 ? rows : 1;
    nop = (size_t)(uns * urows * udim); nlp = (size_t)(uns * urows); no = (size_t)(urows * udim);
    total = nop + nlp + no + (size_t)urows;
    reg = buf_new(total * sizeof(float));
    op = (float *)(void *)reg.p; lp = op + nop; o = lp + nlp; l = o + no;
    for (i = 0; i < (int)(nop + nlp); i++) op[i] = (float)in(r, -40, 40) / 8.0f;
    for (i = 0; i < (int)nlp; i++) if (one_in(r, 4)) lp[i] = -INFINITY;
    if (mode == 1) { o = op; l = lp; }                                 /* in place */
    if (mode == 2) o = op + in(r, 0, (int)(nop - 1));                  /* o inside o_parts */
    if (mode == 3) l = lp + in(r, 1, (int)nlp);                        /* lse shifted in lse_parts */
    if (mode == 4) l = NULL;
    if (mode == 5) o = lp;                                             /* o over lse_parts */
    if (mode == 6 && (size_t)(o + no) <= (size_t)(op + total)) l = o + in(r, 0, (int)no - 1); /* lse inside o */
    buf_snap(&reg);
    current = "fa_merge";
    s = fa_merge(one_in(r, 50) ? 0 : ns, rows, dim, op, lp, o, l);
    check_status(s, "fa_merge");
    if (s != FA_OK) {
        fuzz_assert(buf_same(&reg), "a refused fa_merge wrote memory");
    } else {
        int64_t e;
        n_ok[3]++;
        for (e = 0; e < rows * dim; e++) fuzz_assert(o[e] - o[e] == 0.0f, "fa_merge gave a non-finite o");
        for (e = 0; l && e < rows; e++) fuzz_assert(l[e] == l[e], "fa_merge gave NaN in lse");
        if (mode == 1) { /* the same call out of place, from the saved inputs */
            float *so = (float *)malloc(no * sizeof(float) + 4), *sl = (float *)malloc((size_t)urows * sizeof(float));
            const float *sop = (const float *)(void *)reg.snap, *slp = sop + nop;
            current = "fa_merge (out of place, for comparison)";
            fuzz_assert(fa_merge(ns, rows, dim, sop, slp, so, sl) == FA_OK, "out of place merge refused");
            fuzz_assert(!memcmp(so, o, (size_t)(rows * dim) * sizeof(float)) &&
                            !memcmp(sl, l, (size_t)rows * sizeof(float)),
                        "fa_merge in place differs from out of place");
            free(so); free(sl);
        }
    }
    buf_free(&reg);
}

static int fuzz_one(const uint8_t *data, size_t size)
{
    reader r;
    fa_problem p, res;
    arrays a;
    size_t bytes;
    const fa_problem *pp;
    fa_status s;
    r.p = data; r.n = size; r.at = 0;
    problem_new(&r, &p, &a);
    pp = one_in(&r, 64) ? NULL : &p;
    current = "fa_problem_resolve";
    s = fa_problem_resolve(pp, &res);
    check_status(s, "fa_problem_resolve");
    current = "fa_*_workspace_size";
    check_status(fa_forward_workspace_size(pp, &bytes), "fa_forward_workspace_size");
    check_status(fa_backward_workspace_size(pp, &bytes), "fa_backward_workspace_size");
    check_status(fa_decode_workspace_size(pp, &bytes), "fa_decode_workspace_size");
    /* the views need sizes the API accepted (else nothing to size them by) */
    if (s == FA_OK && pp) {
        int which = in(&r, 0, 2);
        if (which != 1) fuzz_forward_backward(&r, pp, &p);
        if (which != 0) fuzz_decode(&r, pp, &p);
    }
    fuzz_merge(&r);
    arrays_free(&a);
    return 0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_one(data, size); }
#else
/* ---- the seeded random driver ------------------------------------------------ */

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct seed_file { uint8_t *p; size_t n; } seed_file;

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 30.0;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 47;
    seed_file files[256];
    int nfiles = 0, i;
    long long runs = 0;
    time_t start = time(NULL);
    uint8_t in_buf[512];
    for (i = 3; i < argc && nfiles < 256; i++) { /* seed inputs: run each once, then mutate them */
        FILE *f = fopen(argv[i], "rb");
        seed_file sf;
        if (!f) continue;
        sf.p = (uint8_t *)malloc(4096);
        sf.n = fread(sf.p, 1, 4096, f);
        fclose(f);
        files[nfiles++] = sf;
        fuzz_one(sf.p, sf.n);
        runs++;
    }
    printf("fuzz_args: random driver, seed %llu, %g s, %d seed inputs\n", (unsigned long long)seed, seconds, nfiles);
    fflush(stdout);
    while (difftime(time(NULL), start) < seconds) {
        int k;
        for (k = 0; k < 64; k++) {
            size_t n, j;
            if (nfiles && rnd(&seed) % 2) { /* a mutation of a seed input */
                const seed_file *sf = &files[rnd(&seed) % (uint64_t)nfiles];
                n = sf->n < sizeof in_buf ? sf->n : sizeof in_buf;
                memcpy(in_buf, sf->p, n);
                for (j = 1 + rnd(&seed) % 4; j > 0 && n > 0; j--) in_buf[rnd(&seed) % n] = (uint8_t)rnd(&seed);
            } else {
                n = (size_t)(rnd(&seed) % sizeof in_buf);
                for (j = 0; j < n; j++) in_buf[j] = (uint8_t)rnd(&seed);
            }
            fuzz_one(in_buf, n);
            runs++;
        }
    }
    for (i = 0; i < nfiles; i++) free(files[i].p);
    printf("fuzz_args: %lld inputs, %lld assertions held; calls that succeeded: fa_forward %lld, fa_backward %lld, "
           "fa_decode %lld, fa_merge %lld\n", runs, n_checks, n_ok[0], n_ok[1], n_ok[2], n_ok[3]);
    printf("%lld passed, 0 failed\n", runs);
    return 0;
}
#endif
