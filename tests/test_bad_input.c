/* tests/test_bad_input.c - every invalid argument is refused.

   Each case starts from a valid call (checked to succeed first), breaks one
   argument, and checks that the call returns FA_ERROR_INVALID_ARGUMENT (or
   FA_ERROR_UNSUPPORTED for e4m3 where it is not taken), that fa_last_error() names the
   offending field, and that nothing was written: every output buffer has
   guard bytes before and after it and padding between its heads and rows,
   and all of it must be byte-identical to its state before the call.
   Then the rules issue 47 settled, each against the fp64 reference where
   there are numbers: the backward at tiny scales, mixed dtypes on the CPU,
   empty sequences, block_table refused outside decode, the stride at fault
   named, fa_merge in place and its overlaps; and the block mask's lists
   (issue 51).

   Build: cc -O2 tests/test_bad_input.c -lm   (see the Makefile) */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "test_util.h"

#include <ctype.h>

/* ---- guarded buffers ---------------------------------------------------------- */

#define GUARD 256
typedef struct guarded { unsigned char *raw, *snap; size_t bytes; void *data; } guarded;

static guarded g_alloc(size_t bytes)
{
    guarded g;
    g.bytes = bytes;
    g.raw = (unsigned char *)malloc(bytes + 2 * GUARD);
    g.snap = (unsigned char *)malloc(bytes + 2 * GUARD);
    g.data = g.raw + GUARD;
    memset(g.raw, 0xCD, bytes + 2 * GUARD);
    return g;
}
static void g_snapshot(guarded *g) { memcpy(g->snap, g->raw, g->bytes + 2 * GUARD); }
static int g_unchanged(const guarded *g) { return !memcmp(g->snap, g->raw, g->bytes + 2 * GUARD); }
static void g_free(guarded *g) { free(g->raw); free(g->snap); }
static void g_fill_random(guarded *g, uint64_t *rng) /* valid f32 values in the data part */
{
    size_t i;
    for (i = 0; i < g->bytes / 4; i++) ((float *)g->data)[i] = (float)rng_normal(rng);
}

/* ---- one valid setup, reset before every case ---------------------------------- */

enum { B = 2, SQ = 5, SK = 9, HQ = 4, HKV = 2, D = 8, DV = 6, CAP = 12, PAGE = 4, PPS = 3, NPAGES = 7, DSQ = 2 };

typedef struct env {
    fa_problem p;
    const fa_problem *pp; /* the pointer passed (NULL in the "p itself" case) */
    fa_tensor q, k, v, o, dout, dq, dk, dv;             /* forward / backward */
    fa_tensor dq_in, kc, vc, kn, vn, od;                /* decode */
    float *lse, *lse_d;
    const float *lse_in;
    int32_t cu_q[B + 1], cu_k[B + 1], used[B], table[B * PPS], slopes_dummy;
    /* a block mask of 2 x 4 blocks: 3 query blocks, 3 key blocks, B x HQ masks */
    int32_t bm_cnt[B * HQ * 3], bm_idx[B * HQ * 3 * 3], bm_fcnt[B * HQ * 3], bm_fidx[B * HQ * 3 * 3];
    void *ws; size_t ws_bytes;
    /* merge */
    int m_splits; int64_t m_rows; int m_dim;
    const float *m_op, *m_lp; float *m_o, *m_l;
    /* storage */
    guarded gq, gk, gv, go, gdout, glse, gdq, gdk, gdv, gkc, gvc, gkn, gvn, gqd, god, glse_d,
            gpk, gpv, gmop, gmlp, gmo, gml, gws;
} env;

static env E;

/* Padded strides [b, s, h, d]: head d+1, row heads*(d+1)+3, batch s*row+2. */
static fa_tensor view(void *data, int seq, int heads, int dim)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data; t.dtype = FA_F32;
    t.head_stride = dim + 1;
    t.seq_stride = (int64_t)heads * (dim + 1) + 3;
    t.batch_stride = (int64_t)seq * t.seq_stride + 2;
    return t;
}
static size_t view_bytes(int nb, int seq, int heads, int dim)
{
    return 4 * (size_t)(nb * ((int64_t)seq * ((int64_t)heads * (dim + 1) + 3) + 2));
}

static void env_alloc(env *e)
{
    uint64_t rng = 42;
    memset(e, 0, sizeof *e);
    e->gq = g_alloc(view_bytes(B, SQ, HQ, D)); g_fill_random(&e->gq, &rng);
    e->gk = g_alloc(view_bytes(B, SK, HKV, D)); g_fill_random(&e->gk, &rng);
    e->gv = g_alloc(view_bytes(B, SK, HKV, DV)); g_fill_random(&e->gv, &rng);
    e->gdout = g_alloc(view_bytes(B, SQ, HQ, DV)); g_fill_random(&e->gdout, &rng);
    e->go = g_alloc(view_bytes(B, SQ, HQ, DV));
    e->glse = g_alloc(4 * B * HQ * SQ);
    e->gdq = g_alloc(view_bytes(B, SQ, HQ, D));
    e->gdk = g_alloc(view_bytes(B, SK, HKV, D));
    e->gdv = g_alloc(view_bytes(B, SK, HKV, DV));
    e->gkc = g_alloc(view_bytes(B, CAP, HKV, D)); g_fill_random(&e->gkc, &rng);
    e->gvc = g_alloc(view_bytes(B, CAP, HKV, DV)); g_fill_random(&e->gvc, &rng);
    e->gpk = g_alloc(view_bytes(NPAGES, PAGE, HKV, D)); g_fill_random(&e->gpk, &rng);
    e->gpv = g_alloc(view_bytes(NPAGES, PAGE, HKV, DV)); g_fill_random(&e->gpv, &rng);
    e->gkn = g_alloc(view_bytes(B, DSQ, HKV, D)); g_fill_random(&e->gkn, &rng);
    e->gvn = g_alloc(view_bytes(B, DSQ, HKV, DV)); g_fill_random(&e->gvn, &rng);
    e->gqd = g_alloc(view_bytes(B, DSQ, HQ, D)); g_fill_random(&e->gqd, &rng);
    e->god = g_alloc(view_bytes(B, DSQ, HQ, DV));
    e->glse_d = g_alloc(4 * B * HQ * DSQ);
    e->gmop = g_alloc(4 * 3 * 10 * 5); g_fill_random(&e->gmop, &rng);
    e->gmlp = g_alloc(4 * 3 * 10); g_fill_random(&e->gmlp, &rng);
    e->gmo = g_alloc(4 * 10 * 5);
    e->gml = g_alloc(4 * 10);
    e->gws = g_alloc(1 << 20);
}

/* Outputs (and the caches, which decode writes) are compared byte for byte. */
static guarded *outputs[12];
static int n_outputs;

static void env_reset(env *e)
{
    int i;
    guarded *outs[] = {&e->go, &e->glse, &e->gdq, &e->gdk, &e->gdv, &e->god, &e->glse_d, &e->gmo, &e->gml};
    for (i = 0; i < 9; i++) memset(outs[i]->raw, 0xCD, outs[i]->bytes + 2 * GUARD);
    memset(&e->p, 0, sizeof e->p);
    e->p.batch = B; e->p.seqlen_q = SQ; e->p.seqlen_k = SK; e->p.heads_q = HQ; e->p.heads_kv = HKV;
    e->p.head_dim = D; e->p.head_dim_v = DV;
    e->pp = &e->p;
    e->q = view(e->gq.data, SQ, HQ, D); e->k = view(e->gk.data, SK, HKV, D); e->v = view(e->gv.data, SK, HKV, DV);
    e->o = view(e->go.data, SQ, HQ, DV); e->dout = view(e->gdout.data, SQ, HQ, DV);
    e->dq = view(e->gdq.data, SQ, HQ, D); e->dk = view(e->gdk.data, SK, HKV, D); e->dv = view(e->gdv.data, SK, HKV, DV);
    e->lse = (float *)e->glse.data; e->lse_in = (const float *)e->gmlp.data; /* any finite values do for L */
    e->lse_in = (const float *)e->glse.data;
    { /* valid L for the backward: fill with finite numbers */
        for (i = 0; i < B * HQ * SQ; i++) ((float *)e->glse.data)[i] = 1.0f;
    }
    e->dq_in = view(e->gqd.data, DSQ, HQ, D);
    e->kc = view(e->gkc.data, CAP, HKV, D); e->vc = view(e->gvc.data, CAP, HKV, DV);
    e->kn = view(e->gkn.data, DSQ, HKV, D); e->vn = view(e->gvn.data, DSQ, HKV, DV);
    e->od = view(e->god.data, DSQ, HQ, DV);
    e->lse_d = (float *)e->glse_d.data;
    e->used[0] = 5; e->used[1] = CAP - DSQ;
    e->cu_q[0] = 0; e->cu_q[1] = 3; e->cu_q[2] = 8;
    e->cu_k[0] = 0; e->cu_k[1] = 9; e->cu_k[2] = 14;
    for (i = 0; i < B * PPS; i++) e->table[i] = (i * 3 + 1) % NPAGES;
    e->ws = NULL; e->ws_bytes = 0;
    e->m_splits = 3; e->m_rows = 10; e->m_dim = 5;
    e->m_op = (const float *)e->gmop.data; e->m_lp = (const float *)e->gmlp.data;
    e->m_o = (float *)e->gmo.data; e->m_l = (float *)e->gml.data;
    n_outputs = 0;
    {
        guarded *all[] = {&e->go, &e->glse, &e->gdq, &e->gdk, &e->gdv, &e->god, &e->glse_d, &e->gmo, &e->gml,
                          &e->gkc, &e->gvc, &e->gpk};
        for (i = 0; i < 12; i++) { g_snapshot(all[i]); outputs[n_outputs++] = all[i]; }
        g_snapshot(&e->gpv);
    }
}

/* A valid block mask: row r visits r % 3 key blocks from r % 3 on, and
   one more (r + 2) % 3 as a full block when that is not among them. */
static void as_block_mask(env *e)
{
    int r, t;
    for (r = 0; r < B * HQ * 3; r++) {
        e->bm_cnt[r] = r % 3;
        for (t = 0; t < 3; t++) e->bm_idx[r * 3 + t] = (r + t) % 3;
        e->bm_fcnt[r] = r % 3 < 2;
        e->bm_fidx[r * 3] = (r + 2) % 3; e->bm_fidx[r * 3 + 1] = e->bm_fidx[r * 3 + 2] = -9;
    }
    e->p.block_mask.block_q = 2; e->p.block_mask.block_k = 4;
    e->p.block_mask.kv_num_blocks = e->bm_cnt; e->p.block_mask.kv_indices = e->bm_idx;
    e->p.block_mask.full_kv_num_blocks = e->bm_fcnt; e->p.block_mask.full_kv_indices = e->bm_fidx;
}

/* Decode problems: seqlen_q new tokens against a cache of capacity CAP. */
static void as_decode(env *e)
{
    e->p.seqlen_q = DSQ; e->p.seqlen_k = CAP; e->p.seqlens_k = e->used;
}
static void as_paged(env *e)
{
    as_decode(e);
    e->p.block_table = e->table; e->p.page_size = PAGE; e->p.pages_per_seq = PPS; e->p.num_pages = NPAGES;
    e->kc = view(e->gpk.data, PAGE, HKV, D); e->vc = view(e->gpv.data, PAGE, HKV, DV);
}

enum { FWD, BWD, DEC, MERGE, FWD_WS, BWD_WS, DEC_WS, RESOLVE };

static fa_status call(env *e, int entry)
{
    size_t bytes = 0;
    fa_problem r;
    switch (entry) {
    case FWD: return fa_forward(e->pp, e->q, e->k, e->v, e->o, e->lse, e->ws, e->ws_bytes);
    case BWD: return fa_backward(e->pp, e->q, e->k, e->v, e->o, e->dout, e->lse_in, e->dq, e->dk, e->dv, e->ws, e->ws_bytes);
    case DEC: return fa_decode(e->pp, e->dq_in, e->kc, e->vc, e->kn, e->vn, e->od, e->lse_d, e->ws, e->ws_bytes);
    case MERGE: return fa_merge(e->m_splits, e->m_rows, e->m_dim, e->m_op, e->m_lp, e->m_o, e->m_l);
    case FWD_WS: return fa_forward_workspace_size(e->pp, &bytes);
    case BWD_WS: return fa_backward_workspace_size(e->pp, &bytes);
    case DEC_WS: return fa_decode_workspace_size(e->pp, &bytes);
    case RESOLVE: return fa_problem_resolve(e->pp, &r);
    }
    return FA_OK;
}

static const char *entry_name(int entry)
{
    static const char *n[] = {"fa_forward", "fa_backward", "fa_decode", "fa_merge", "fa_forward_workspace_size",
                              "fa_backward_workspace_size", "fa_decode_workspace_size", "fa_problem_resolve"};
    return n[entry];
}

/* Does msg name the field? `want` is alternatives separated by '|', each a list
   of words joined by '+' that must all appear (case-insensitive). Words of one
   or two letters (tensor names like q, k, o, dq) must stand alone: not inside
   an identifier. */
static int word_in(const char *msg, const char *w, size_t wl)
{
    size_t ml = strlen(msg), i, j;
    for (i = 0; i + wl <= ml; i++) {
        for (j = 0; j < wl && tolower((unsigned char)msg[i + j]) == tolower((unsigned char)w[j]); j++) {}
        if (j < wl) continue;
        if (wl > 2) return 1;
        if (i > 0 && (isalnum((unsigned char)msg[i - 1]) || msg[i - 1] == '_')) continue;
        if (i + wl < ml && (isalnum((unsigned char)msg[i + wl]) || msg[i + wl] == '_')) continue;
        return 1;
    }
    return 0;
}
static int names_field(const char *msg, const char *want)
{
    const char *alt = want;
    while (*alt) {
        const char *end = strchr(alt, '|');
        const char *w = alt;
        int ok = 1;
        if (!end) end = alt + strlen(alt);
        while (w < end) {
            const char *we = w;
            while (we < end && *we != '+') we++;
            if (!word_in(msg, w, (size_t)(we - w))) ok = 0;
            w = we < end ? we + 1 : end;
        }
        if (ok) return 1;
        alt = *end ? end + 1 : end;
    }
    return 0;
}

static void run_bad(env *e, int entry, fa_status want, const char *field, const char *what)
{
    fa_status st = call(e, entry);
    const char *msg = fa_last_error();
    int i, changed = 0;
    for (i = 0; i < n_outputs; i++) changed += !g_unchanged(outputs[i]);
    changed += !g_unchanged(&E.gpv);
    check(st == want, "%s with %s: status %d (%s), want %d", entry_name(entry), what, (int)st, fa_status_string(st), (int)want);
    check(msg && names_field(msg, field), "%s with %s: fa_last_error() = \"%s\" does not name %s", entry_name(entry), what,
          msg ? msg : "(null)", field);
    check(changed == 0, "%s with %s: %d output buffers were written although the call failed", entry_name(entry), what, changed);
}

#define BAD(entry, field, ...) \
    do { env_reset(&E); { __VA_ARGS__; } run_bad(&E, entry, FA_ERROR_INVALID_ARGUMENT, field, #__VA_ARGS__); } while (0)
#define BADST(entry, status, field, ...) \
    do { env_reset(&E); { __VA_ARGS__; } run_bad(&E, entry, status, field, #__VA_ARGS__); } while (0)

/* The unbroken calls must succeed, or the cases below prove nothing. */
static void test_valid_baseline(void)
{
    int entry;
    for (entry = FWD; entry <= RESOLVE; entry++) {
        fa_status st;
        env_reset(&E);
        if (entry == DEC || entry == DEC_WS) as_decode(&E);
        st = call(&E, entry);
        check(st == FA_OK, "baseline %s (contiguous): status %d (%s)", entry_name(entry), (int)st, fa_last_error());
        if (entry == DEC) {
            env_reset(&E); as_paged(&E);
            st = call(&E, entry);
            check(st == FA_OK, "baseline fa_decode (paged): status %d (%s)", (int)st, fa_last_error());
        }
    }
    env_reset(&E);
    E.p.cu_seqlens_q = E.cu_q; E.p.cu_seqlens_k = E.cu_k; E.p.seqlen_k = 9;
    check(call(&E, FWD) == FA_OK, "baseline fa_forward (varlen): %s", fa_last_error());
    env_reset(&E);
    E.p.seqlens_k = E.used; E.used[1] = 9;
    check(call(&E, FWD) == FA_OK, "baseline fa_forward (seqlens_k): %s", fa_last_error());
    for (entry = FWD; entry <= RESOLVE; entry++) {
        if (entry == DEC || entry == DEC_WS || entry == MERGE) continue;
        env_reset(&E);
        as_block_mask(&E);
        check(call(&E, entry) == FA_OK, "baseline %s (block mask): %s", entry_name(entry), fa_last_error());
    }
}

static void test_forward_family(int entry)
{
    const int need_lse = entry == BWD;
    /* the problem pointer and every tensor's data */
    BAD(entry, "p|problem", E.pp = NULL);
    BAD(entry, "q", E.q.data = NULL);
    BAD(entry, "k", E.k.data = NULL);
    BAD(entry, "v", E.v.data = NULL);
    if (entry == FWD) BAD(entry, "o", E.o.data = NULL);
    if (need_lse) {
        BAD(entry, "lse", E.lse_in = NULL);
        BAD(entry, "o", E.o.data = NULL);
        BAD(entry, "dout|do", E.dout.data = NULL);
        BAD(entry, "dq", E.dq.data = NULL);
        BAD(entry, "dk", E.dk.data = NULL);
        BAD(entry, "dv", E.dv.data = NULL);
    }
    /* sizes */
    BAD(entry, "batch", E.p.batch = 0);
    BAD(entry, "batch", E.p.batch = -1);
    BAD(entry, "seqlen_q", E.p.seqlen_q = 0);
    BAD(entry, "seqlen_q", E.p.seqlen_q = -5);
    BAD(entry, "seqlen_k", E.p.seqlen_k = 0);
    BAD(entry, "seqlen_k", E.p.seqlen_k = -3);
    BAD(entry, "heads_q", E.p.heads_q = 0);
    BAD(entry, "heads_q", E.p.heads_q = -4);
    BAD(entry, "heads_kv", E.p.heads_kv = -1);
    BAD(entry, "heads", E.p.heads_kv = 3);
    BAD(entry, "heads", E.p.heads_q = 4; E.p.heads_kv = 8);
    BAD(entry, "head_dim", E.p.head_dim = 0);
    BAD(entry, "head_dim", E.p.head_dim = -8);
    BAD(entry, "head_dim", E.p.head_dim = 257);
    BAD(entry, "head_dim_v", E.p.head_dim_v = 257);
    BAD(entry, "head_dim_v", E.p.head_dim_v = -1);
    /* strides that make rows, heads or batches overlap */
    BAD(entry, "q+stride", E.q.head_stride = D - 1);
    BAD(entry, "k+stride", E.k.head_stride = D; E.k.seq_stride = HKV * D - 1);
    BAD(entry, "v+stride", E.v.batch_stride = (SK - 1) * E.v.seq_stride + 1); /* last row of batch 0 overlaps batch 1 */
    BAD(entry, "q+stride", E.q.head_stride = D; E.q.seq_stride = D);
    if (entry == FWD) BAD(entry, "o+stride", E.o.head_stride = DV - 2);
    if (entry == BWD) {
        BAD(entry, "dq+stride", E.dq.head_stride = D; E.dq.seq_stride = 3 * D);
        BAD(entry, "dk+stride", E.dk.batch_stride = 1);
        BAD(entry, "dout+stride|do+stride", E.dout.head_stride = 1);
    }
    /* strides whose extent overflows int64 */
    BAD(entry, "q+stride|q+overflow", E.q.batch_stride = INT64_MAX);
    BAD(entry, "k+stride|k+overflow", E.k.head_stride = D; E.k.seq_stride = INT64_MAX / 3; E.k.batch_stride = 0);
    BAD(entry, "v+stride|v+overflow", E.v.seq_stride = INT64_MAX / 4; E.v.batch_stride = INT64_MAX / 2);
    /* variable-length offsets */
    BAD(entry, "cu_seqlens_q", E.cu_q[1] = 5; E.cu_q[2] = 3; E.p.cu_seqlens_q = E.cu_q; E.p.cu_seqlens_k = E.cu_k);
    BAD(entry, "cu_seqlens_q", E.cu_q[0] = 1; E.p.cu_seqlens_q = E.cu_q; E.p.cu_seqlens_k = E.cu_k);
    BAD(entry, "cu_seqlens_k", E.cu_k[1] = 10; E.cu_k[2] = 4; E.p.cu_seqlens_q = E.cu_q; E.p.cu_seqlens_k = E.cu_k);
    BAD(entry, "cu_seqlens_k", E.cu_k[0] = 2; E.p.cu_seqlens_q = E.cu_q; E.p.cu_seqlens_k = E.cu_k);
    BAD(entry, "cu_seqlens_q", E.cu_q[0] = -1; E.p.cu_seqlens_q = E.cu_q; E.p.cu_seqlens_k = E.cu_k);
    /* keys in use beyond the tensor */
    BAD(entry, "seqlens_k", E.used[0] = SK + 1; E.used[1] = 1; E.p.seqlens_k = E.used);
    BAD(entry, "seqlens_k", E.used[0] = -1; E.used[1] = 1; E.p.seqlens_k = E.used);
    /* numbers */
    BAD(entry, "dropout_p", E.p.dropout_p = -0.1f);
    BAD(entry, "dropout_p", E.p.dropout_p = 1.0f);
    BAD(entry, "dropout_p", E.p.dropout_p = 1.5f);
    BAD(entry, "dropout_p", E.p.dropout_p = NAN);
    BAD(entry, "scale", E.p.scale = INFINITY);
    BAD(entry, "scale", E.p.scale = -INFINITY);
    BAD(entry, "scale", E.p.scale = NAN);
    BAD(entry, "softcap", E.p.softcap = -1.0f);
    BAD(entry, "softcap", E.p.softcap = NAN);
    BAD(entry, "window_left", E.p.sliding_window = 1; E.p.window_left = -1; E.p.window_right = 2);
    BAD(entry, "window_right", E.p.sliding_window = 1; E.p.window_left = 2; E.p.window_right = -3);
    BAD(entry, "dtype", E.q.dtype = (fa_dtype)9);
    /* e4m3 Q, K, V are valid for the forward (tests/test_fp8.c); an e4m3 O never is */
    BADST(entry, FA_ERROR_UNSUPPORTED, "e4m3|fp8|dtype", E.q.dtype = FA_E4M3; E.k.dtype = FA_E4M3; E.v.dtype = FA_E4M3;
          E.o.dtype = FA_E4M3);
    /* workspace smaller than asked for */
    {
        size_t need = 0;
        env_reset(&E);
        if ((entry == FWD ? fa_forward_workspace_size : fa_backward_workspace_size)(&E.p, &need) == FA_OK && need > 0) {
            BAD(entry, "workspace", E.ws = E.gws.data; E.ws_bytes = need - 1);
            BAD(entry, "workspace", E.ws = E.gws.data; E.ws_bytes = 1);
        } else
            printf("  note: %s needs no workspace for this problem; the too-small-workspace case is skipped\n", entry_name(entry));
    }
}

static void test_decode_args(void)
{
    int paged;
    for (paged = 0; paged < 2; paged++) {
#define DBAD(field, ...) BAD(DEC, field, if (paged) as_paged(&E); else as_decode(&E); __VA_ARGS__)
        DBAD("p|problem", E.pp = NULL);
        DBAD("q", E.dq_in.data = NULL);
        DBAD("k_cache|kcache", E.kc.data = NULL);
        DBAD("v_cache|vcache", E.vc.data = NULL);
        DBAD("v_new", E.vn.data = NULL);
        DBAD("o", E.od.data = NULL);
        DBAD("batch", E.p.batch = 0);
        DBAD("seqlen_q", E.p.seqlen_q = 0);
        DBAD("heads", E.p.heads_kv = 3);
        DBAD("head_dim", E.p.head_dim = 300);
        /* cache lengths beyond capacity, before and after appending */
        DBAD("seqlens_k|seqlen_k|capacity", E.used[1] = CAP + 1);
        DBAD("seqlens_k|seqlen_k|capacity", E.used[1] = CAP - 1);          /* + 2 new tokens > CAP */
        DBAD("seqlens_k", E.used[0] = -2);
        DBAD("seqlens_k|seqlen_k|capacity", E.p.seqlens_k = NULL);  /* a full cache, and 2 tokens to append */
        DBAD("dropout", E.p.dropout_p = 0.1f);
        DBAD("num_splits", E.p.num_splits = -1);
        DBAD("k_cache+stride|kcache+stride", E.kc.head_stride = 3);
        DBAD("k_new+stride|knew+stride", E.kn.head_stride = D; E.kn.seq_stride = D);
        DBAD("scale", E.p.scale = NAN);
        DBAD("softcap", E.p.softcap = -2.0f);
        DBAD("window_left", E.p.sliding_window = 1; E.p.window_left = -1);
        BADST(DEC, FA_ERROR_UNSUPPORTED, "e4m3|fp8|dtype", if (paged) as_paged(&E); else as_decode(&E);
              E.dq_in.dtype = FA_E4M3; E.kc.dtype = FA_E4M3; E.vc.dtype = FA_E4M3; E.kn.dtype = FA_E4M3; E.vn.dtype = FA_E4M3);
        {
            size_t need = 0;
            env_reset(&E);
            if (paged) as_paged(&E); else as_decode(&E);
            if (fa_decode_workspace_size(&E.p, &need) == FA_OK && need > 0)
                DBAD("workspace", E.ws = E.gws.data; E.ws_bytes = need - 1);
            else
                printf("  note: fa_decode needs no workspace here (%s); the too-small-workspace case is skipped\n",
                       paged ? "paged" : "contiguous");
        }
#undef DBAD
    }
    /* paged only */
    BAD(DEC, "block_table", as_paged(&E); E.table[4] = NPAGES);
    BAD(DEC, "block_table", as_paged(&E); E.table[0] = -1);
    BAD(DEC, "block_table", as_paged(&E); E.table[5] = 1 << 30);
    BAD(DEC, "page_size", as_paged(&E); E.p.page_size = 0);
    BAD(DEC, "page_size", as_paged(&E); E.p.page_size = -4);
    BAD(DEC, "pages_per_seq|seqlen_k|capacity", as_paged(&E); E.p.pages_per_seq = 0);
    BAD(DEC, "num_pages", as_paged(&E); E.p.num_pages = 0);
    BAD(DEC, "seqlens_k|seqlen_k|capacity|pages_per_seq", as_paged(&E); E.used[1] = PAGE * PPS + 1);
}

static void test_merge_args(void)
{
    BAD(MERGE, "num_splits", E.m_splits = 0);
    BAD(MERGE, "num_splits", E.m_splits = -2);
    BAD(MERGE, "rows", E.m_rows = -1);
    BAD(MERGE, "dim", E.m_dim = 0);
    BAD(MERGE, "dim", E.m_dim = -3);
    BAD(MERGE, "o_parts", E.m_op = NULL);
    BAD(MERGE, "lse_parts", E.m_lp = NULL);
    BAD(MERGE, "o", E.m_o = NULL);
}

static void test_other_entries(void)
{
    size_t bytes;
    int e;
    for (e = FWD_WS; e <= RESOLVE; e++) {
        BAD(e, "p|problem", E.pp = NULL);
        BAD(e, "batch", E.p.batch = 0);
        BAD(e, "head_dim", E.p.head_dim = 257);
        BAD(e, "dropout_p", E.p.dropout_p = 2.0f);
    }
    env_reset(&E);
    check(fa_forward_workspace_size(&E.p, NULL) == FA_ERROR_INVALID_ARGUMENT && names_field(fa_last_error(), "bytes"),
          "fa_forward_workspace_size(p, NULL): %s", fa_last_error());
    check(fa_problem_resolve(&E.p, NULL) == FA_ERROR_INVALID_ARGUMENT && names_field(fa_last_error(), "resolved"),
          "fa_problem_resolve(p, NULL): %s", fa_last_error());
    (void)bytes;
}


/* ---- issue 47: semantics that used to be accepted silently or computed wrong ---- */

/* One forward + backward problem on fresh tensors (rows packed per the
   problem: with cu_seqlens one batch of total rows), checked against the fp64
   reference. dts: q, k, v, o, dout, dq, dk, dv. */
typedef struct fb_case { tens q, k, v, o, dout, dq, dk, dv; float *lse; int64_t nlse; } fb_case;

static tens fb_make(fa_dtype dt, const fa_problem *p, int query_side, int heads, int dim, uint64_t *rng)
{
    const int32_t *cu = query_side ? p->cu_seqlens_q : p->cu_seqlens_k;
    int nb = cu ? 1 : p->batch, seq = cu ? (int)cu[p->batch] : query_side ? p->seqlen_q : p->seqlen_k;
    return tens_make(dt, nb, seq > 0 ? seq : 1, heads, dim, LAYOUT_PADDED, rng);
}

static void fb_run(const char *ctx, const fa_problem *p, const fa_dtype dt[8], tol tl, fb_case *c)
{
    uint64_t rng = 4747;
    ref_dims r = ref_resolve(p);
    int64_t nq = ref_rows_q(p), nk = ref_rows_k(p);
    double *ro = (double *)calloc((size_t)(nq * r.hq * r.dv) + 1, sizeof(double));
    double *rl = (double *)calloc((size_t)ref_lse_count(p) + 1, sizeof(double));
    double *rdq = (double *)calloc((size_t)(nq * r.hq * r.d) + 1, sizeof(double));
    double *rdk = (double *)calloc((size_t)(nk * r.hkv * r.d) + 1, sizeof(double));
    double *rdv = (double *)calloc((size_t)(nk * r.hkv * r.dv) + 1, sizeof(double));
    fa_status st;
    c->q = fb_make(dt[0], p, 1, r.hq, r.d, &rng);     c->k = fb_make(dt[1], p, 0, r.hkv, r.d, &rng);
    c->v = fb_make(dt[2], p, 0, r.hkv, r.dv, &rng);   c->o = fb_make(dt[3], p, 1, r.hq, r.dv, &rng);
    c->dout = fb_make(dt[4], p, 1, r.hq, r.dv, &rng); c->dq = fb_make(dt[5], p, 1, r.hq, r.d, &rng);
    c->dk = fb_make(dt[6], p, 0, r.hkv, r.d, &rng);   c->dv = fb_make(dt[7], p, 0, r.hkv, r.dv, &rng);
    tens_fill(&c->q, &rng, 1.0); tens_fill(&c->k, &rng, 1.0); tens_fill(&c->v, &rng, 1.0); tens_fill(&c->dout, &rng, 1.0);
    c->nlse = ref_lse_count(p);
    c->lse = (float *)malloc(sizeof(float) * (size_t)(c->nlse + 1));
    tens_snapshot(&c->o); tens_snapshot(&c->dq); tens_snapshot(&c->dk); tens_snapshot(&c->dv);
    st = fa_forward(p, c->q.t, c->k.t, c->v.t, c->o.t, c->lse, NULL, 0);
    if (!check(st == FA_OK, "%s: fa_forward status %d (%s)", ctx, (int)st, fa_last_error())) goto done;
    ref_forward(p, c->q.t, c->k.t, c->v.t, ro, rl);
    check(compare(ctx, "o", &c->o, ro, tl) == 0, "%s: O differs from the reference", ctx);
    check(compare_lse(ctx, c->lse, rl, c->nlse, tl) == 0, "%s: L differs from the reference", ctx);
    st = fa_backward(p, c->q.t, c->k.t, c->v.t, c->o.t, c->dout.t, c->lse, c->dq.t, c->dk.t, c->dv.t, NULL, 0);
    if (!check(st == FA_OK, "%s: fa_backward status %d (%s)", ctx, (int)st, fa_last_error())) goto done;
    ref_backward(p, c->q.t, c->k.t, c->v.t, c->dout.t, rdq, rdk, rdv);
    { /* tolerances relative to each gradient's size (tiny scales give tiny gradients) */
        tol tq = tl, tk = tl;
        tq.atol *= rms(rdq, nq * r.hq * r.d); tk.atol *= rms(rdk, nk * r.hkv * r.d);
        check(compare(ctx, "dq", &c->dq, rdq, tq) == 0, "%s: dQ differs from the reference", ctx);
        check(compare(ctx, "dk", &c->dk, rdk, tk) == 0, "%s: dK differs from the reference", ctx);
        check(compare(ctx, "dv", &c->dv, rdv, tl) == 0, "%s: dV differs from the reference", ctx);
    }
done:
    free(ro); free(rl); free(rdq); free(rdk); free(rdv);
}

static void fb_free(fb_case *c)
{
    tens_free(&c->q); tens_free(&c->k); tens_free(&c->v); tens_free(&c->o); tens_free(&c->dout);
    tens_free(&c->dq); tens_free(&c->dk); tens_free(&c->dv); free(c->lse);
}

static fa_problem small_problem(void)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 2; p.seqlen_q = 5; p.seqlen_k = 9; p.heads_q = 4; p.heads_kv = 2; p.head_dim = 8; p.head_dim_v = 6;
    return p;
}

static const fa_dtype ALL_F32[8] = {FA_F32, FA_F32, FA_F32, FA_F32, FA_F32, FA_F32, FA_F32, FA_F32};

/* Item 2: every finite scale gives the right gradients (dK was formed from
   the pre-scaled Q and divided by the scale again: 0 at 1e-30). */
static void test_tiny_scales(void)
{
    static const float scales[] = {1e-30f, -1e-30f, 1e-20f, 2e-38f, 1e-10f, 0.5f};
    size_t i;
    tol tl = {1e-5, 1e-4}; /* atol relative to the gradient's rms (fb_run) */
    for (i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        int cap;
        for (cap = 0; cap < 2; cap++) {
            char ctx[96];
            fb_case c;
            fa_problem p = small_problem();
            p.scale = scales[i];
            p.causal = (int)i & 1;
            if (cap) { p.softcap = 5.0f; if (fabsf(p.scale) < 1e-36f) continue; }
            snprintf(ctx, sizeof ctx, "scale %g%s", (double)p.scale, cap ? " softcap 5" : "");
            fb_run(ctx, &p, ALL_F32, tl, &c);
            check(tens_get(&c.dk, 0, 0, 0, 0) != 0.0, "%s: dK[0, 0, 0, 0] is exactly 0 (underflow)", ctx);
            fb_free(&c);
        }
    }
    /* scale / softcap below FLT_MIN cannot be folded into Q: refused, naming both */
    BAD(FWD, "scale+softcap", E.p.scale = 1e-30f; E.p.softcap = 1e10f);
    BAD(BWD, "scale+softcap", E.p.scale = 1e-30f; E.p.softcap = 1e10f);
    BAD(RESOLVE, "scale+softcap", E.p.scale = -1e-30f; E.p.softcap = 1e10f);
}

/* Item 3: each view carries its own dtype on the CPU; any mix of f32, f16
   and bf16 is computed in fp32 and checked against the reference. */
static void test_mixed_dtypes(void)
{
    static const fa_dtype mix[2][8] = {{FA_F16, FA_BF16, FA_F32, FA_BF16, FA_F16, FA_F32, FA_BF16, FA_F16},
                                       {FA_F32, FA_F16, FA_BF16, FA_F32, FA_BF16, FA_F16, FA_F32, FA_BF16}};
    tol tl = {2e-2, 2e-2};
    int i;
    for (i = 0; i < 2; i++) {
        fb_case c;
        fa_problem p = small_problem();
        p.causal = i;
        fb_run(i ? "mixed dtypes (2)" : "mixed dtypes (1)", &p, mix[i], tl, &c);
        fb_free(&c);
    }
}

/* Item 3: empty sequences. seqlen_q / seqlen_k (the maxima) stay >= 1; a
   sequence with no keys gives O = 0, L = -inf and dQ = 0, one with no
   queries writes no O and gives its keys dK = dV = 0. */
static void test_empty_sequences(void)
{
    static const int32_t cu_q[3][3] = {{0, 3, 8}, {0, 0, 5}, {0, 5, 5}}, cu_k[3][3] = {{0, 0, 9}, {0, 4, 13}, {0, 9, 9}};
    int32_t used[2] = {0, 9};
    tol tl = {1e-5, 1e-4};
    int i, h, c, t;
    for (i = 0; i < 4; i++) {
        char ctx[64];
        fb_case x;
        fa_problem p = small_problem();
        int64_t bad = 0, row0, rows, krow0, krows;
        if (i < 3) { p.cu_seqlens_q = cu_q[i]; p.cu_seqlens_k = cu_k[i]; }
        else p.seqlens_k = used; /* sequence 0: no keys in use */
        snprintf(ctx, sizeof ctx, "empty sequence case %d", i);
        fb_run(ctx, &p, ALL_F32, tl, &x);
        /* queries with no key: rows [row0, row0 + rows) of sequence 0 or 1 */
        row0 = i == 2 ? cu_q[2][1] : 0;
        rows = i == 3 ? p.seqlen_q : i == 0 ? 3 : i == 2 ? 0 : 0;
        for (t = 0; t < rows; t++)
            for (h = 0; h < 4; h++) {
                int64_t li = i == 3 ? (int64_t)h * p.seqlen_q + t : (int64_t)h * 8 + row0 + t;
                bad += x.lse[li] != -INFINITY;
                for (c = 0; c < 6; c++) bad += tens_get(&x.o, 0, row0 + t, h, c) != 0.0;
                for (c = 0; c < 8; c++) bad += tens_get(&x.dq, 0, row0 + t, h, c) != 0.0;
            }
        /* keys with no query: sequence 0 of case 1, sequence 1 of case 2 */
        krow0 = i == 2 ? 9 : 0;
        krows = i == 1 ? 4 : i == 2 ? 0 : 0;
        for (t = 0; t < krows; t++)
            for (h = 0; h < 2; h++) {
                for (c = 0; c < 8; c++) bad += tens_get(&x.dk, 0, krow0 + t, h, c) != 0.0;
                for (c = 0; c < 6; c++) bad += tens_get(&x.dv, 0, krow0 + t, h, c) != 0.0;
            }
        check(bad == 0, "%s: %lld values of the empty sequence are not O = 0, L = -inf, dQ = dK = dV = 0", ctx,
              (long long)bad);
        fb_free(&x);
    }
    /* decode of an empty cache with nothing to append: O = 0, L = -inf */
    {
        int64_t bad = 0;
        env_reset(&E); as_decode(&E);
        E.used[0] = 0; E.used[1] = 3;
        E.kn.data = NULL; E.vn.data = NULL;
        check(call(&E, DEC) == FA_OK, "decode with seqlens_k[0] = 0: %s", fa_last_error());
        for (t = 0; t < DSQ; t++)
            for (h = 0; h < HQ; h++) {
                bad += E.lse_d[h * DSQ + t] != -INFINITY;
                for (c = 0; c < DV; c++) bad += ((float *)E.od.data)[t * E.od.seq_stride + h * E.od.head_stride + c] != 0.0f;
            }
        check(bad == 0, "decode with an empty cache: %lld values are not O = 0, L = -inf", (long long)bad);
    }
}

/* Item 3: block_table on forward / backward (paged K/V is decode's). */
static void test_block_table_refused(void)
{
    static const int entries[] = {FWD, BWD, FWD_WS, BWD_WS};
    size_t i;
    for (i = 0; i < 4; i++)
        BAD(entries[i], "block_table", E.p.block_table = E.table; E.p.page_size = PAGE; E.p.pages_per_seq = PPS;
            E.p.num_pages = NPAGES);
}

/* Block masks (section 5): each broken list or size is refused naming the
   field, with nothing written; decode refuses block masks altogether. */
static void test_block_mask_args(void)
{
    static const int entries[] = {FWD, BWD, FWD_WS, BWD_WS, RESOLVE};
    size_t i;
    for (i = 0; i < 5; i++) {
        int en = entries[i];
#define MBAD(field, ...) BAD(en, field, as_block_mask(&E); __VA_ARGS__)
        MBAD("block_mask+kv_indices", E.bm_idx[4 * 3] = 3);                 /* row 4 visits 1 block: index out of range */
        MBAD("block_mask+kv_indices", E.bm_idx[5 * 3 + 1] = -1);
        MBAD("block_mask+kv_indices", E.bm_idx[5 * 3 + 1] = E.bm_idx[5 * 3]); /* the same block twice */
        MBAD("block_mask+full_kv_indices", E.bm_fidx[4 * 3] = E.bm_idx[4 * 3]); /* in both lists */
        MBAD("block_mask+full_kv_indices", E.bm_fidx[0] = 7);
        MBAD("block_mask+kv_num_blocks", E.bm_cnt[5] = -1);
        MBAD("block_mask+kv_num_blocks", E.bm_cnt[5] = 4);                  /* more than k_blocks = 3 */
        MBAD("block_mask+full_kv_num_blocks", E.bm_fcnt[23] = -2);
        MBAD("block_mask+full_kv_num_blocks", E.bm_fcnt[3] = 4);
        MBAD("block_mask+kv_indices", E.p.block_mask.kv_indices = NULL);
        MBAD("block_mask+kv_num_blocks", E.p.block_mask.kv_num_blocks = NULL);
        MBAD("block_mask+full_kv_indices", E.p.block_mask.full_kv_indices = NULL);
        MBAD("block_mask+block_q", E.p.block_mask.block_q = -1);
        MBAD("block_mask+block_k", E.p.block_mask.block_k = -128);
        MBAD("block_mask+batch", E.p.block_mask.batch = 3);
        MBAD("block_mask+heads", E.p.block_mask.heads = 3);                  /* not a divisor of heads_q = 4 */
        MBAD("block_mask+heads", E.p.block_mask.heads = -1);
        /* causal: query block 0 (rows 0-1 at key positions 4-5) may not see key block 2 (key 8) whole */
        MBAD("block_mask+full_kv_indices", E.p.causal = 1; E.bm_fidx[0] = 2);
        MBAD("block_mask+full_kv_indices", E.p.sliding_window = 1; E.p.window_left = 1; E.p.window_right = 9;
             E.bm_fidx[0] = 0); /* key block 0 (keys 0-3) reaches past the window's left edge */
#undef MBAD
    }
    BADST(DEC, FA_ERROR_UNSUPPORTED, "block_mask", as_decode(&E); as_block_mask(&E));
    BADST(DEC_WS, FA_ERROR_UNSUPPORTED, "block_mask", as_decode(&E); as_block_mask(&E));
    { /* fa_block_mask_from_bitmap refuses, writing nothing */
        uint8_t bits[B * HQ * 3 * 3];
        int32_t cnt[B * HQ * 3], idx[B * HQ * 3 * 3];
        int64_t nc = -7, ni = -7;
        fa_problem p;
        int k;
        static const char *want[] = {"problem|p", "bitmap", "kv_indices", "block_q", "heads", "seqlen_q"};
        memset(bits, 1, sizeof bits);
        for (k = 0; k < 6; k++) {
            fa_status st;
            env_reset(&E);
            as_block_mask(&E);
            p = E.p;
            memset(cnt, 0x5A, sizeof cnt); memset(idx, 0x5A, sizeof idx);
            if (k == 3) p.block_mask.block_q = -2;
            if (k == 4) p.block_mask.heads = 3;
            if (k == 5) p.seqlen_q = 0;
            st = fa_block_mask_from_bitmap(k == 0 ? NULL : &p, k == 1 ? NULL : bits, cnt, k == 2 ? NULL : idx, &nc, &ni);
            check(st == FA_ERROR_INVALID_ARGUMENT && names_field(fa_last_error(), want[k]),
                  "fa_block_mask_from_bitmap case %d: status %d, \"%s\" should name %s", k, (int)st, fa_last_error(), want[k]);
            check(nc == -7 && ni == -7 && cnt[0] == 0x5A5A5A5A && idx[0] == 0x5A5A5A5A,
                  "fa_block_mask_from_bitmap case %d: wrote an output although it failed", k);
        }
    }
}

/* Item 3: an overlap error names the stride at fault (on a tie, the outer one). */
static void test_stride_names(void)
{
    BAD(FWD, "q+seq_stride", E.q.head_stride = D; E.q.seq_stride = D);
    BAD(FWD, "k+batch_stride", E.k.batch_stride = E.k.seq_stride);
    BAD(BWD, "dv+seq_stride", E.dv.head_stride = DV; E.dv.seq_stride = DV);
    BAD(FWD, "o+head_stride", E.o.head_stride = DV - 1);
}

/* Item 3: fa_merge in place (o == o_parts, lse == lse_parts) gives what the
   out-of-place call gives; any other overlap is refused and writes nothing. */
static void test_merge_in_place(void)
{
    enum { NS = 3, R = 7, DM = 5 };
    float op[NS * R * DM], lp[NS * R], o[R * DM], l[R], ip[NS * R * DM], il[NS * R], snap_o[NS * R * DM], snap_l[NS * R];
    uint64_t rng = 99;
    int i, k;
    for (i = 0; i < NS * R * DM; i++) op[i] = (float)rng_normal(&rng);
    for (i = 0; i < NS * R; i++) lp[i] = (float)rng_normal(&rng);
    lp[0 * R + 1] = -INFINITY;                                 /* row 1: split 0 has no weight */
    lp[0 * R + 2] = lp[1 * R + 2] = lp[2 * R + 2] = -INFINITY; /* row 2: no weight anywhere */
    check(fa_merge(NS, R, DM, op, lp, o, l) == FA_OK, "fa_merge out of place: %s", fa_last_error());
    memcpy(ip, op, sizeof op); memcpy(il, lp, sizeof lp);
    check(fa_merge(NS, R, DM, ip, il, ip, il) == FA_OK, "fa_merge in place: %s", fa_last_error());
    check(!memcmp(ip, o, sizeof o) && !memcmp(il, l, sizeof l), "fa_merge in place differs from out of place");
    memcpy(ip, op, sizeof op);
    check(fa_merge(NS, R, DM, ip, lp, ip, NULL) == FA_OK && !memcmp(ip, o, sizeof o),
          "fa_merge with o == o_parts (lse NULL) differs from out of place");
    for (k = 0; k < 6; k++) {
        static const char *want[] = {"o+o_parts", "o+o_parts", "lse+lse_parts", "o+lse_parts", "lse+o_parts", "lse+o"};
        float *mo = o, *ml = l;
        fa_status st;
        memcpy(ip, op, sizeof op); memcpy(il, lp, sizeof lp);
        memcpy(snap_o, ip, sizeof ip); memcpy(snap_l, il, sizeof il);
        if (k == 0) mo = ip + DM;                   /* o shifted by a row within split 0 */
        if (k == 1) mo = ip + R * DM;               /* o = split 1's slot */
        if (k == 2) ml = il + 1;
        if (k == 3) mo = il;
        if (k == 4) ml = ip + 3;
        if (k == 5) ml = o + 2;
        st = fa_merge(NS, R, DM, ip, il, mo, ml);
        check(st == FA_ERROR_INVALID_ARGUMENT && names_field(fa_last_error(), want[k]),
              "fa_merge overlap case %d: status %d, \"%s\" should name %s", k, (int)st, fa_last_error(), want[k]);
        check(!memcmp(snap_o, ip, sizeof ip) && !memcmp(snap_l, il, sizeof il),
              "fa_merge overlap case %d: an input was written although the call failed", k);
    }
}

/* fa_status_string: every code has its own text, unknown codes still get one. */
static void test_status_strings(void)
{
#define X_CHECK(name, value, text) \
    check(fa_status_string(name) != NULL && !strcmp(fa_status_string(name), text), \
          "fa_status_string(" #name ") = \"%s\", want \"%s\"", fa_status_string(name) ? fa_status_string(name) : "(null)", text);
    FLASHATTN_STATUS_LIST(X_CHECK)
#undef X_CHECK
    check(fa_status_string((fa_status)-99) != NULL && fa_status_string((fa_status)42) != NULL,
          "fa_status_string of an unknown code must not be NULL");
    check(fa_last_error() != NULL, "fa_last_error() is never NULL");
}

static void env_free(env *e)
{
    guarded *all[] = {&e->gq, &e->gk, &e->gv, &e->go, &e->gdout, &e->glse, &e->gdq, &e->gdk, &e->gdv, &e->gkc,
                      &e->gvc, &e->gkn, &e->gvn, &e->gqd, &e->god, &e->glse_d, &e->gpk, &e->gpv, &e->gmop,
                      &e->gmlp, &e->gmo, &e->gml, &e->gws};
    size_t i;
    for (i = 0; i < sizeof all / sizeof all[0]; i++) g_free(all[i]);
}

int main(void)
{
    env_alloc(&E);
    test_status_strings();
    test_valid_baseline();
    test_forward_family(FWD);
    test_forward_family(BWD);
    test_decode_args();
    test_merge_args();
    test_other_entries();
    test_tiny_scales();
    test_mixed_dtypes();
    test_empty_sequences();
    test_block_table_refused();
    test_block_mask_args();
    test_stride_names();
    test_merge_in_place();
    env_free(&E);
    return summary("test_bad_input");
}
