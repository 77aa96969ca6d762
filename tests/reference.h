/* tests/reference.h - an independent fp64 reference for flashattn (tests only).

   Written from the Semantics section of flashattn.h, not from the library's
   implementation. It materializes every score row, in double precision, so it
   is slow (O(sq * sk * d) per head) and meant for test sizes only.

   Plain C99 that also compiles as C++ (nvcc includes it from tests/test_gpu.cu):
   every function is `static`, there are no globals, and all memory it reads
   is host memory reached through the library's own fa_problem / fa_tensor.

   Contents
     ref_f16_to_f32 / ref_f32_to_f16   IEEE binary16 <-> binary32, round to nearest even
     ref_bf16_to_f32 / ref_f32_to_bf16 bfloat16 <-> binary32, round to nearest even
     ref_get / ref_put                 one element of a tensor, any dtype, as double
     ref_resolve                       the defaults of fa_problem (heads_kv, head_dim_v, scale)
     ref_block_visited                 a block mask's lists, searched for one (query, key) pair
     ref_strides / ref_offset          element offset of (batch, row, head) in a view
     ref_e4m3_value / ref_e4m3_encode  e4m3fn (FP8) codes <-> values, round to nearest even
     ref_fp8_descale, ref_fp8_dequantize   the FP8 descale layout; e4m3 tensor -> f32 values
     ref_philox4x32_10, ref_dropout_keep   the documented dropout rule
     ref_forward                       O (double, packed) and L (double, library layout)
     ref_backward                      dQ, dK, dV (double, packed)
     ref_decode                        decode against a contiguous or paged cache (+ appended tokens)
     ref_decode_append                 the cache as it must be after appending

   Output layouts used by the reference (all packed doubles):
     rows_q = cu_seqlens_q ? cu_seqlens_q[batch] : batch * seqlen_q, likewise rows_k.
     row of token t of sequence b: cu_seqlens ? cu_seqlens[b] + t : b * seqlen + t.
     O, dQ: [rows_q, heads_q, dv or d];  dK, dV: [rows_k, heads_kv, d or dv].
     L: the library's layout, [batch, heads_q, seqlen_q] or [heads_q, total_q].
*/
#ifndef FLASHATTN_TESTS_REFERENCE_H
#define FLASHATTN_TESTS_REFERENCE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../flashattn.h"

/* Every function is static; unused ones must not warn under -Wall -Werror. */
#if defined(__GNUC__) || defined(__clang__)
#define REF_FN static __attribute__((unused))
#else
#define REF_FN static
#endif

/* ---- number formats ------------------------------------------------------- */

REF_FN uint32_t ref_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
REF_FN float ref_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits. Exact widening. */
REF_FN float ref_f16_to_f32(uint16_t h)
{
    int sign = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) {
        if (m) return ref_bits_f32((sign ? 0xFFC00000u : 0x7FC00000u) | ((uint32_t)m << 13));
        v = INFINITY;
    } else if (e == 0) {
        v = (double)m / 16777216;               /* subnormal: m * 2^-24 */
    } else { /* (1 + m/1024) 2^(e-15) = (m + 1024) 2^e / 2^25, every step exact (not ldexp: the
                references convert every product's operands) */
        v = (double)((uint64_t)(m + 1024) << e) / 33554432;
    }
    return (float)(sign ? -v : v);
}

/* Round a finite non-negative double to the nearest multiple of 2^q, ties to even. */
REF_FN double ref_round_to_quantum(double a, int q)
{
    double x = ldexp(a, -q), fl = floor(x), frac = x - fl;
    if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0.0)) fl += 1.0;
    return ldexp(fl, q);
}

/* binary32 -> binary16, round to nearest, ties to even, by arithmetic rather
   than bit tricks (so it is independent of a bit-twiddling implementation). */
REF_FN uint16_t ref_f32_to_f16(float f)
{
    uint32_t u = ref_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    double a = fabs((double)f), r;
    int e;
    if (f != f) return (uint16_t)(sign | 0x7E00u | ((u >> 13) & 0x3FFu)); /* quiet NaN, keep payload top */
    if (isinf(a)) return (uint16_t)(sign | 0x7C00u);
    if (a == 0.0) return sign;
    frexp(a, &e);                        /* a = m * 2^e, m in [0.5, 1) */
    /* quantum: 2^(e-1-10) for normals (exponent e-1 >= -14), else 2^-24 */
    r = ref_round_to_quantum(a, (e - 1 >= -14) ? e - 11 : -24);
    if (r >= 65536.0) return (uint16_t)(sign | 0x7C00u);   /* overflow to inf */
    if (r < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)ldexp(r, 24)); /* subnormal (or zero) */
    frexp(r, &e);
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) |
                      (uint16_t)(ldexp(r, -(e - 1) + 10) - 1024.0));
}

REF_FN float ref_bf16_to_f32(uint16_t b) { return ref_bits_f32((uint32_t)b << 16); }

/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (quiet). */
REF_FN uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u = ref_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    double a = fabs((double)f), r;
    int e;
    if (f != f) return (uint16_t)((u >> 16) | 0x0040u);
    if (isinf(a)) return (uint16_t)(sign | 0x7F80u);
    if (a == 0.0) return sign;
    frexp(a, &e);
    r = ref_round_to_quantum(a, (e - 1 >= -126) ? e - 8 : -133);
    if (r >= ldexp(1.0, 128)) return (uint16_t)(sign | 0x7F80u);
    return (uint16_t)(sign | (ref_f32_bits((float)r) >> 16)); /* r is exactly a bf16 value */
}

/* e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinity, 0x7f and
   0xff NaN, 448 the largest. The value of code c (exact in double). */
REF_FN double ref_e4m3_value(int c)
{
    int e = (c >> 3) & 15, m = c & 7;
    double v;
    if ((c & 0x7f) == 0x7f) return NAN;
    v = e ? ldexp(8.0 + m, e - 10) : ldexp((double)m, -9); /* (1 + m/8) 2^(e-7), or m 2^-9 */
    return (c & 0x80) ? -v : v;
}

/* The nearest e4m3 code, ties to even, saturated to +-448; NaN -> 0x7f. */
REF_FN int ref_e4m3_encode(double v)
{
    int sign = signbit(v) ? 0x80 : 0, e;
    double a = fabs(v), r;
    if (v != v) return 0x7f;
    if (a >= 448.0) return sign | 0x7e;
    if (a == 0.0) return sign;
    frexp(a, &e); /* a = f 2^e, f in [0.5, 1): exponent e - 1, quantum 2^(e-1-3) or 2^-9 */
    r = ref_round_to_quantum(a, e - 1 >= -6 ? e - 4 : -9);
    if (r < ldexp(1.0, -6)) return sign | (int)ldexp(r, 9);
    frexp(r, &e);
    return sign | ((e - 1 + 7) << 3) | (int)(ldexp(r, -(e - 1) + 3) - 8.0);
}

REF_FN size_t ref_dtype_size(fa_dtype t) { return t == FA_F32 ? 4 : t == FA_E4M3 ? 1 : 2; }

/* Element `index` (in elements) of t.data, widened to double. */
REF_FN double ref_get(fa_tensor t, int64_t index)
{
    if (t.dtype == FA_F32) return (double)((const float *)t.data)[index];
    if (t.dtype == FA_F16) return (double)ref_f16_to_f32(((const uint16_t *)t.data)[index]);
    if (t.dtype == FA_BF16) return (double)ref_bf16_to_f32(((const uint16_t *)t.data)[index]);
    return NAN;
}

/* Store x (rounded to float first, then RNE to the 16-bit types). */
REF_FN void ref_put(fa_tensor t, int64_t index, double x)
{
    float f = (float)x;
    if (t.dtype == FA_F32) ((float *)t.data)[index] = f;
    else if (t.dtype == FA_F16) ((uint16_t *)t.data)[index] = ref_f32_to_f16(f);
    else if (t.dtype == FA_BF16) ((uint16_t *)t.data)[index] = ref_f32_to_bf16(f);
}

/* ---- problem defaults and tensor addressing -------------------------------- */

typedef struct ref_dims {
    int hq, hkv, d, dv, group; /* group = hq / hkv */
    double scale;
} ref_dims;

REF_FN ref_dims ref_resolve(const fa_problem *p)
{
    ref_dims r;
    r.hq = p->heads_q;
    r.hkv = p->heads_kv ? p->heads_kv : p->heads_q;
    r.d = p->head_dim;
    r.dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    r.group = r.hq / r.hkv;
    r.scale = p->scale != 0.0f ? (double)p->scale : 1.0 / sqrt((double)r.d);
    return r;
}

/* Resolve a view's strides: s[0] batch, s[1] seq, s[2] head. Zero means packed:
   head = dim, seq = heads * dim, batch = seq_len * (resolved seq stride). */
REF_FN void ref_strides(fa_tensor t, int64_t seq_len, int heads, int dim, int64_t s[3])
{
    s[2] = t.head_stride ? t.head_stride : dim;
    s[1] = t.seq_stride ? t.seq_stride : (int64_t)heads * dim;
    s[0] = t.batch_stride ? t.batch_stride : seq_len * s[1];
}

/* Offset of (sequence b, token t, head h, element 0). With cu (varlen) the
   batch stride is unused and the row is cu[b] + t. */
REF_FN int64_t ref_offset(const int64_t s[3], const int32_t *cu, int b, int64_t t, int h)
{
    if (cu) return ((int64_t)cu[b] + t) * s[1] + (int64_t)h * s[2];
    return (int64_t)b * s[0] + t * s[1] + (int64_t)h * s[2];
}

REF_FN int ref_len_q(const fa_problem *p, int b)
{
    return p->cu_seqlens_q ? p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b] : p->seqlen_q;
}

/* Keys in use by sequence b (forward / backward). */
REF_FN int ref_len_k(const fa_problem *p, int b)
{
    if (p->seqlens_k) return p->seqlens_k[b];
    return p->cu_seqlens_k ? p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b] : p->seqlen_k;
}

REF_FN int64_t ref_rows_q(const fa_problem *p)
{
    return p->cu_seqlens_q ? p->cu_seqlens_q[p->batch] : (int64_t)p->batch * p->seqlen_q;
}

REF_FN int64_t ref_rows_k(const fa_problem *p)
{
    return p->cu_seqlens_k ? p->cu_seqlens_k[p->batch] : (int64_t)p->batch * p->seqlen_k;
}

/* Packed row index of token t of sequence b. */
REF_FN int64_t ref_row_q(const fa_problem *p, int b, int64_t t)
{
    return p->cu_seqlens_q ? p->cu_seqlens_q[b] + t : (int64_t)b * p->seqlen_q + t;
}

REF_FN int64_t ref_row_k(const fa_problem *p, int b, int64_t t)
{
    return p->cu_seqlens_k ? p->cu_seqlens_k[b] + t : (int64_t)b * p->seqlen_k + t;
}

/* Index of L for (b, h, i) in the library's layout. */
REF_FN int64_t ref_lse_index(const fa_problem *p, int b, int h, int64_t i)
{
    if (p->cu_seqlens_q)
        return (int64_t)h * p->cu_seqlens_q[p->batch] + p->cu_seqlens_q[b] + i;
    return ((int64_t)b * p->heads_q + h) * p->seqlen_q + i;
}

REF_FN int64_t ref_lse_count(const fa_problem *p)
{
    return (int64_t)p->heads_q * ref_rows_q(p);
}

/* ---- FP8: the descale layout, dequantization ------------------------------ */

/* The descale of row n (position within sequence b) of head h of the e4m3
   tensor of role 0 (Q), 1 (K) or 2 (V), by flashattn.h section 5: per tensor
   (descale_q/k/v, 0 = 1), or one per block of B rows at
   [b][h][n / B], ceil(seqlen / B) blocks per (b, h), B =
   FLASHATTN_FP8_BLOCK_Q for Q and FLASHATTN_FP8_BLOCK_K for K and V. */
REF_FN double ref_fp8_descale(const fa_problem *p, int role, int b, int h, int64_t n)
{
    const float *blk = role == 0 ? p->descale_q_block : role == 1 ? p->descale_k_block : p->descale_v_block;
    float per = role == 0 ? p->descale_q : role == 1 ? p->descale_k : p->descale_v;
    int rows = role == 0 ? FLASHATTN_FP8_BLOCK_Q : FLASHATTN_FP8_BLOCK_K;
    int heads = role == 0 ? p->heads_q : (p->heads_kv ? p->heads_kv : p->heads_q);
    int64_t seqlen = role == 0 ? p->seqlen_q : p->seqlen_k;
    if (!blk) return per != 0.0f ? (double)per : 1.0;
    return (double)blk[((int64_t)b * heads + h) * ((seqlen + rows - 1) / rows) + n / rows];
}

/* dst = value(e) * descale, rounded to dst's dtype (f32: exactly what a
   float multiply gives), for every logical element of the role's tensor
   (Q [.., heads_q, head_dim], K [.., heads_kv, head_dim], V [.., heads_kv,
   head_dim_v]); dst's padding is not touched. */
REF_FN void ref_fp8_dequantize(const fa_problem *p, int role, fa_tensor e, fa_tensor dst)
{
    ref_dims r = ref_resolve(p);
    int heads = role == 0 ? r.hq : r.hkv, dim = role == 2 ? r.dv : r.d, b, h, c;
    int64_t seqlen = role == 0 ? p->seqlen_q : p->seqlen_k, es[3], ds[3], n;
    const int32_t *cu = role == 0 ? p->cu_seqlens_q : p->cu_seqlens_k;
    ref_strides(e, seqlen, heads, dim, es);
    ref_strides(dst, seqlen, heads, dim, ds);
    for (b = 0; b < p->batch; b++)
        for (n = 0; n < (role == 0 ? ref_len_q(p, b) : ref_len_k(p, b)); n++)
            for (h = 0; h < heads; h++) {
                double s = ref_fp8_descale(p, role, b, h, n);
                int64_t eo = ref_offset(es, cu, b, n, h), dof = ref_offset(ds, cu, b, n, h);
                for (c = 0; c < dim; c++)
                    ref_put(dst, dof + c, ref_e4m3_value(((const uint8_t *)e.data)[eo + c]) * s);
            }
}

/* ---- dropout: Philox-4x32-10 ------------------------------------------------ */

REF_FN void ref_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t prod = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(prod >> 32);
    *lo = (uint32_t)prod;
}

/* Philox-4x32 with 10 rounds (Salmon et al., SC'11): each round multiplies
   words 0 and 2 by the round constants, mixes the high halves with words 1, 3
   and the key; the key is bumped by the Weyl constants between rounds. */
REF_FN void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    int round;
    for (round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        if (round > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        ref_mulhilo32(0xD2511F53u, c0, &hi0, &lo0);
        ref_mulhilo32(0xCD9E8D57u, c2, &hi1, &lo1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* 1 if element (b, h, i, j) is kept, by the rule in flashattn.h's Semantics. */
REF_FN int ref_dropout_keep(const fa_problem *p, int b, int h, int i, int j)
{
    uint32_t ctr[4], key[2], r[4];
    uint64_t threshold;
    if (!(p->dropout_p > 0.0f)) return 1;
    threshold = (uint64_t)floor((double)p->dropout_p * 4294967296.0);
    ctr[0] = (uint32_t)j >> 2;
    ctr[1] = (uint32_t)i;
    ctr[2] = (uint32_t)(b * p->heads_q + h);
    ctr[3] = (uint32_t)p->dropout_offset;
    key[0] = (uint32_t)p->dropout_seed;
    key[1] = (uint32_t)(p->dropout_seed >> 32) ^ (uint32_t)(p->dropout_offset >> 32);
    ref_philox4x32_10(ctr, key, r);
    return (uint64_t)r[j & 3] >= threshold;
}

/* ---- scores ------------------------------------------------------------------- */

/* Is key j visible to query i of a sequence with sq queries and sk keys? */
REF_FN int ref_visible(const fa_problem *p, int64_t i, int64_t j, int64_t sq, int64_t sk)
{
    int64_t ip = i + sk - sq; /* bottom-right aligned position of the query */
    if (j < 0 || j >= sk) return 0;
    if (p->causal && j > ip) return 0;
    if (p->sliding_window && (j < ip - p->window_left || j > ip + p->window_right)) return 0;
    return 1;
}

/* Block masks (flashattn.h section 5): does query block i / block_q of
   (b, h) list key block j / block_k, in either list? A linear search of
   the lists; 1 without a block mask. */
REF_FN int ref_block_visited(const fa_problem *p, int b, int h, int64_t i, int64_t j)
{
    const fa_block_mask *m = &p->block_mask;
    int64_t bq = m->block_q ? m->block_q : 128, bk = m->block_k ? m->block_k : 128;
    int64_t nb = m->batch ? m->batch : p->batch, nh = m->heads ? m->heads : p->heads_q;
    int64_t qblocks = (p->seqlen_q + bq - 1) / bq, kblocks = (p->seqlen_k + bk - 1) / bk, row, t;
    int l;
    if (!m->kv_num_blocks && !m->full_kv_num_blocks) return 1;
    row = ((nb == 1 ? 0 : b) * nh + h / (p->heads_q / nh)) * qblocks + i / bq;
    for (l = 0; l < 2; l++) {
        const int32_t *cnt = l ? m->full_kv_num_blocks : m->kv_num_blocks;
        const int32_t *idx = l ? m->full_kv_indices : m->kv_indices;
        if (!cnt) continue;
        for (t = 0; t < cnt[row]; t++)
            if (idx[row * kblocks + t] == j / bk) return 1;
    }
    return 0;
}

/* The score of a visible pair, given x = scale * q.k; *dsdx gets ds/dx. */
REF_FN double ref_score(const fa_problem *p, int h, double x, int64_t i, int64_t j,
                        int64_t sq, int64_t sk, double *dsdx)
{
    double s = x, ip = (double)(i + sk - sq);
    if (dsdx) *dsdx = 1.0;
    if (p->softcap > 0.0f) {
        double c = (double)p->softcap, t = tanh(x / c);
        s = c * t;
        if (dsdx) *dsdx = 1.0 - t * t;
    }
    if (p->alibi_slopes) s -= (double)p->alibi_slopes[h] * fabs(ip - (double)j);
    return s;
}

/* One attention row in fp64. Keys come from a callback-free pair of
   (tensor, offset-of-token) tables so that forward (plain / varlen) and decode
   (contiguous / paged / appended) share it: koff[j], voff[j] are element
   offsets of key j's head vector in kt[j] / vt[j] (two tensors: the cache and
   the new tokens). s, pr: scratch of sk doubles. Writes o[dv] and returns L. */
REF_FN double ref_row(const fa_problem *p, const ref_dims *r, int b, int h, int64_t i,
                      int64_t sq, int64_t sk, fa_tensor qt, int64_t qoff,
                      const fa_tensor *kt, const int64_t *koff, const fa_tensor *vt,
                      const int64_t *voff, double *s, double *pr, double *o)
{
    int64_t j;
    int c;
    double m = -INFINITY, l = 0.0, L, keep_scale;
    double *qd = (double *)malloc(sizeof(double) * (size_t)(r->d > 0 ? r->d : 1)); /* Q_i, widened once */
    for (c = 0; c < r->dv; c++) o[c] = 0.0;
    for (c = 0; c < r->d; c++) qd[c] = ref_get(qt, qoff + c);
    for (j = 0; j < sk; j++) {
        double x = 0.0;
        if (!ref_visible(p, i, j, sq, sk) || !ref_block_visited(p, b, h, i, j)) { s[j] = -INFINITY; continue; }
        for (c = 0; c < r->d; c++) x += qd[c] * ref_get(kt[j], koff[j] + c);
        s[j] = ref_score(p, h, r->scale * x, i, j, sq, sk, NULL);
        if (s[j] > m) m = s[j];
    }
    free(qd);
    if (m == -INFINITY) return -INFINITY; /* no visible key: O = 0, L = -inf */
    for (j = 0; j < sk; j++) l += (s[j] == -INFINITY) ? 0.0 : exp(s[j] - m);
    L = m + log(l);
    keep_scale = p->dropout_p > 0.0f ? 1.0 / (1.0 - (double)p->dropout_p) : 1.0;
    for (j = 0; j < sk; j++) {
        double w;
        pr[j] = (s[j] == -INFINITY) ? 0.0 : exp(s[j] - L);
        w = pr[j];
        if (w == 0.0) continue;
        if (p->dropout_p > 0.0f)
            w = ref_dropout_keep(p, b, h, (int)i, (int)j) ? w * keep_scale : 0.0;
        for (c = 0; c < r->dv; c++) o[c] += w * ref_get(vt[j], voff[j] + c);
    }
    return L;
}

/* ---- forward -------------------------------------------------------------------- */

/* Scratch for one query row against up to n keys: where each key's K and V
   rows start (koff, voff) and in which tensor (kt, vt: a cache or the new
   tokens), its score s and probability pr. n may be 0: nothing is read. */
REF_FN void ref_row_scratch(int64_t n, int64_t **koff, int64_t **voff, fa_tensor **kt,
                            fa_tensor **vt, double **s, double **pr)
{
    *koff = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
    *voff = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
    *kt = (fa_tensor *)malloc(sizeof(fa_tensor) * (size_t)n);
    *vt = (fa_tensor *)malloc(sizeof(fa_tensor) * (size_t)n);
    *s = (double *)malloc(sizeof(double) * (size_t)n);
    *pr = (double *)malloc(sizeof(double) * (size_t)n);
}
REF_FN void ref_row_scratch_free(int64_t *koff, int64_t *voff, fa_tensor *kt, fa_tensor *vt,
                                 double *s, double *pr)
{
    free(koff); free(voff); free(kt); free(vt); free(s); free(pr);
}

/* O -> o [rows_q, heads_q, dv] packed doubles; L -> lse (library layout, may be NULL). */
REF_FN void ref_forward(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v,
                        double *o, double *lse)
{
    ref_dims r = ref_resolve(p);
    int64_t sq_s[3], k_s[3], v_s[3];
    int64_t maxk = 1;
    int b, h;
    int64_t *koff, *voff, i, j;
    fa_tensor *kt, *vt;
    double *s, *pr;
    for (b = 0; b < p->batch; b++)
        if (ref_len_k(p, b) > maxk) maxk = ref_len_k(p, b);
    ref_strides(q, p->seqlen_q, r.hq, r.d, sq_s);
    ref_strides(k, p->seqlen_k, r.hkv, r.d, k_s);
    ref_strides(v, p->seqlen_k, r.hkv, r.dv, v_s);
    ref_row_scratch(maxk, &koff, &voff, &kt, &vt, &s, &pr);
    for (j = 0; j < maxk; j++) { kt[j] = k; vt[j] = v; }
    for (b = 0; b < p->batch; b++) {
        int64_t sq = ref_len_q(p, b), sk = ref_len_k(p, b);
        for (h = 0; h < r.hq; h++) {
            int hk = h / r.group;
            for (j = 0; j < sk; j++) {
                koff[j] = ref_offset(k_s, p->cu_seqlens_k, b, j, hk);
                voff[j] = ref_offset(v_s, p->cu_seqlens_k, b, j, hk);
            }
            for (i = 0; i < sq; i++) {
                double *orow = o + (ref_row_q(p, b, i) * r.hq + h) * r.dv;
                double L = ref_row(p, &r, b, h, i, sq, sk, q,
                                   ref_offset(sq_s, p->cu_seqlens_q, b, i, h),
                                   kt, koff, vt, voff, s, pr, orow);
                if (lse) lse[ref_lse_index(p, b, h, i)] = L;
            }
        }
    }
    ref_row_scratch_free(koff, voff, kt, vt, s, pr);
}

/* ---- backward ------------------------------------------------------------------ */

/* Gradients of sum(O . dO) by the exact formulas, with P the undropped softmax
   and Z the dropout factor (keep / (1 - p), or 0):
     O_i   = sum_j P_ij Z_ij V_j
     dV_j  = sum_i P_ij Z_ij dO_i
     dP_ij = Z_ij (dO_i . V_j)
     D_i   = sum_j P_ij dP_ij                (= dO_i . O_i)
     dS_ij = P_ij (dP_ij - D_i)              gradient of the final score
     dX_ij = dS_ij * (1 - tanh^2(x/c))       through the softcap (1 without)
     dQ_i  = scale * sum_j dX_ij K_j,  dK_j = scale * sum_i dX_ij Q_i
   (ALiBi and masks add constants, so they pass gradients unchanged.)
   dq [rows_q, hq, d], dk [rows_k, hkv, d], dv [rows_k, hkv, dv]: packed doubles,
   overwritten. GQA: dK/dV sum over the query heads of each group. */
REF_FN void ref_backward(const fa_problem *p, fa_tensor q, fa_tensor k, fa_tensor v,
                         fa_tensor dout, double *dq, double *dk, double *dv)
{
    ref_dims r = ref_resolve(p);
    int64_t q_s[3], k_s[3], v_s[3], do_s[3];
    int64_t maxk = 1, i, j, nq = ref_rows_q(p), nk = ref_rows_k(p);
    int b, h, c;
    double *s, *pr, *dsdx, *dp, *z, *kd, *vd, *qd, *dod;
    double keep_scale = p->dropout_p > 0.0f ? 1.0 / (1.0 - (double)p->dropout_p) : 1.0;
    for (b = 0; b < p->batch; b++)
        if (ref_len_k(p, b) > maxk) maxk = ref_len_k(p, b);
    ref_strides(q, p->seqlen_q, r.hq, r.d, q_s);
    ref_strides(dout, p->seqlen_q, r.hq, r.dv, do_s);
    ref_strides(k, p->seqlen_k, r.hkv, r.d, k_s);
    ref_strides(v, p->seqlen_k, r.hkv, r.dv, v_s);
    memset(dq, 0, sizeof(double) * (size_t)(nq * r.hq * r.d));
    memset(dk, 0, sizeof(double) * (size_t)(nk * r.hkv * r.d));
    memset(dv, 0, sizeof(double) * (size_t)(nk * r.hkv * r.dv));
    s = (double *)malloc(sizeof(double) * (size_t)maxk);
    pr = (double *)malloc(sizeof(double) * (size_t)maxk);
    dsdx = (double *)malloc(sizeof(double) * (size_t)maxk);
    dp = (double *)malloc(sizeof(double) * (size_t)maxk);
    z = (double *)malloc(sizeof(double) * (size_t)maxk);
    /* this head's K and V rows, this row's Q and dO, widened to double once */
    kd = (double *)malloc(sizeof(double) * (size_t)(maxk * r.d));
    vd = (double *)malloc(sizeof(double) * (size_t)(maxk * r.dv));
    qd = (double *)malloc(sizeof(double) * (size_t)r.d);
    dod = (double *)malloc(sizeof(double) * (size_t)r.dv);
    for (b = 0; b < p->batch; b++) {
        int64_t sq = ref_len_q(p, b), sk = ref_len_k(p, b);
        for (h = 0; h < r.hq; h++) {
            int hk = h / r.group;
            for (j = 0; j < sk; j++) {
                int64_t ko = ref_offset(k_s, p->cu_seqlens_k, b, j, hk), vo = ref_offset(v_s, p->cu_seqlens_k, b, j, hk);
                for (c = 0; c < r.d; c++) kd[j * r.d + c] = ref_get(k, ko + c);
                for (c = 0; c < r.dv; c++) vd[j * r.dv + c] = ref_get(v, vo + c);
            }
            for (i = 0; i < sq; i++) {
                int64_t qo = ref_offset(q_s, p->cu_seqlens_q, b, i, h);
                int64_t doo = ref_offset(do_s, p->cu_seqlens_q, b, i, h);
                double m = -INFINITY, l = 0.0, L, D = 0.0;
                double *dqrow = dq + (ref_row_q(p, b, i) * r.hq + h) * r.d;
                for (c = 0; c < r.d; c++) qd[c] = ref_get(q, qo + c);
                for (c = 0; c < r.dv; c++) dod[c] = ref_get(dout, doo + c);
                for (j = 0; j < sk; j++) {
                    double x = 0.0;
                    if (!ref_visible(p, i, j, sq, sk) || !ref_block_visited(p, b, h, i, j)) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    for (c = 0; c < r.d; c++) x += qd[c] * kd[j * r.d + c];
                    s[j] = ref_score(p, h, r.scale * x, i, j, sq, sk, &dsdx[j]);
                    if (s[j] > m) m = s[j];
                }
                if (m == -INFINITY) continue; /* a row that sees nothing has no gradient */
                for (j = 0; j < sk; j++) l += (s[j] == -INFINITY) ? 0.0 : exp(s[j] - m);
                L = m + log(l);
                for (j = 0; j < sk; j++) {
                    double g = 0.0;
                    pr[j] = (s[j] == -INFINITY) ? 0.0 : exp(s[j] - L);
                    z[j] = 1.0;
                    if (p->dropout_p > 0.0f)
                        z[j] = ref_dropout_keep(p, b, h, (int)i, (int)j) ? keep_scale : 0.0;
                    if (pr[j] == 0.0) { dp[j] = 0.0; continue; }
                    for (c = 0; c < r.dv; c++) g += dod[c] * vd[j * r.dv + c];
                    dp[j] = z[j] * g;
                    D += pr[j] * dp[j];
                }
                for (j = 0; j < sk; j++) {
                    int64_t krow;
                    double dx;
                    if (pr[j] == 0.0) continue;
                    krow = ref_row_k(p, b, j) * r.hkv + hk;
                    for (c = 0; c < r.dv; c++)
                        dv[krow * r.dv + c] += pr[j] * z[j] * dod[c];
                    dx = pr[j] * (dp[j] - D) * dsdx[j] * r.scale;
                    for (c = 0; c < r.d; c++) {
                        dqrow[c] += dx * kd[j * r.d + c];
                        dk[krow * r.d + c] += dx * qd[c];
                    }
                }
            }
        }
    }
    free(s); free(pr); free(dsdx); free(dp); free(z); free(kd); free(vd); free(qd); free(dod);
}

/* ---- decode ---------------------------------------------------------------------- */

/* Element offset of token n (within sequence b) of head h in a cache view:
   contiguous [batch, seqlen_k, hkv, dim] or paged [num_pages, page_size, hkv, dim]. */
REF_FN int64_t ref_cache_offset(const fa_problem *p, fa_tensor cache, int dim, int b,
                                int64_t n, int h)
{
    ref_dims r = ref_resolve(p);
    int64_t s[3];
    if (p->block_table) {
        int32_t page = p->block_table[(int64_t)b * p->pages_per_seq + n / p->page_size];
        ref_strides(cache, p->page_size, r.hkv, dim, s);
        return (int64_t)page * s[0] + (n % p->page_size) * s[1] + (int64_t)h * s[2];
    }
    ref_strides(cache, p->seqlen_k, r.hkv, dim, s);
    return (int64_t)b * s[0] + n * s[1] + (int64_t)h * s[2];
}

/* Cache length before the new tokens of sequence b. */
REF_FN int ref_decode_len(const fa_problem *p, int b)
{
    return p->seqlens_k ? p->seqlens_k[b] : p->seqlen_k;
}

/* Decode: q [batch, seqlen_q, hq, d] against seqlens_k[b] cached keys followed,
   when k_new.data != NULL, by the seqlen_q new tokens of k_new / v_new
   [batch, seqlen_q, hkv, d]. The cache itself is only read (the appended tokens
   are taken from k_new / v_new). o [batch * seqlen_q, hq, dv] packed doubles,
   lse [batch, hq, seqlen_q] (may be NULL). */
REF_FN void ref_decode(const fa_problem *p, fa_tensor q, fa_tensor k_cache,
                       fa_tensor v_cache, fa_tensor k_new, fa_tensor v_new,
                       double *o, double *lse)
{
    ref_dims r = ref_resolve(p);
    int append = k_new.data != NULL;
    int64_t q_s[3], kn_s[3], vn_s[3], maxk = 1, i, j;
    int b, h;
    int64_t *koff, *voff;
    fa_tensor *kt, *vt;
    double *s, *pr;
    for (b = 0; b < p->batch; b++) {
        int64_t n = ref_decode_len(p, b) + (append ? p->seqlen_q : 0);
        if (n > maxk) maxk = n;
    }
    ref_strides(q, p->seqlen_q, r.hq, r.d, q_s);
    ref_strides(k_new, p->seqlen_q, r.hkv, r.d, kn_s);
    ref_strides(v_new, p->seqlen_q, r.hkv, r.dv, vn_s);
    ref_row_scratch(maxk, &koff, &voff, &kt, &vt, &s, &pr);
    for (b = 0; b < p->batch; b++) {
        int64_t cached = ref_decode_len(p, b);
        int64_t sk = cached + (append ? p->seqlen_q : 0), sq = p->seqlen_q;
        for (h = 0; h < r.hq; h++) {
            int hk = h / r.group;
            for (j = 0; j < sk; j++) {
                if (j < cached) {
                    kt[j] = k_cache; vt[j] = v_cache;
                    koff[j] = ref_cache_offset(p, k_cache, r.d, b, j, hk);
                    voff[j] = ref_cache_offset(p, v_cache, r.dv, b, j, hk);
                } else {
                    kt[j] = k_new; vt[j] = v_new;
                    koff[j] = ref_offset(kn_s, NULL, b, j - cached, hk);
                    voff[j] = ref_offset(vn_s, NULL, b, j - cached, hk);
                }
            }
            for (i = 0; i < sq; i++) {
                double *orow = o + (((int64_t)b * sq + i) * r.hq + h) * r.dv;
                double L = ref_row(p, &r, b, h, i, sq, sk, q,
                                   ref_offset(q_s, NULL, b, i, h),
                                   kt, koff, vt, voff, s, pr, orow);
                if (lse) lse[((int64_t)b * r.hq + h) * sq + i] = L;
            }
        }
    }
    ref_row_scratch_free(koff, voff, kt, vt, s, pr);
}

/* The cache after appending: copies token t of k_new / v_new (converted to the
   cache's dtype, exact when the dtypes match) into k_cache / v_cache at
   position seqlens_k[b] + t. Call it on a COPY of the cache to build the
   expected cache. */
REF_FN void ref_decode_append(const fa_problem *p, fa_tensor k_cache, fa_tensor v_cache,
                              fa_tensor k_new, fa_tensor v_new)
{
    ref_dims r = ref_resolve(p);
    int64_t kn_s[3], vn_s[3], t;
    int b, h, c;
    ref_strides(k_new, p->seqlen_q, r.hkv, r.d, kn_s);
    ref_strides(v_new, p->seqlen_q, r.hkv, r.dv, vn_s);
    for (b = 0; b < p->batch; b++)
        for (t = 0; t < p->seqlen_q; t++)
            for (h = 0; h < r.hkv; h++) {
                int64_t n = ref_decode_len(p, b) + t;
                int64_t kc = ref_cache_offset(p, k_cache, r.d, b, n, h);
                int64_t vc = ref_cache_offset(p, v_cache, r.dv, b, n, h);
                int64_t kn = ref_offset(kn_s, NULL, b, t, h), vn = ref_offset(vn_s, NULL, b, t, h);
                for (c = 0; c < r.d; c++) {
                    if (k_new.dtype == k_cache.dtype)
                        memcpy((char *)k_cache.data + (size_t)(kc + c) * ref_dtype_size(k_cache.dtype),
                               (const char *)k_new.data + (size_t)(kn + c) * ref_dtype_size(k_new.dtype),
                               ref_dtype_size(k_new.dtype));
                    else
                        ref_put(k_cache, kc + c, ref_get(k_new, kn + c));
                }
                for (c = 0; c < r.dv; c++) {
                    if (v_new.dtype == v_cache.dtype)
                        memcpy((char *)v_cache.data + (size_t)(vc + c) * ref_dtype_size(v_cache.dtype),
                               (const char *)v_new.data + (size_t)(vn + c) * ref_dtype_size(v_new.dtype),
                               ref_dtype_size(v_new.dtype));
                    else
                        ref_put(v_cache, vc + c, ref_get(v_new, vn + c));
                }
            }
}

#endif /* FLASHATTN_TESTS_REFERENCE_H */
