/* decode_paged.c - token-by-token generation against a paged KV cache.

   Build and run (from this folder):
       cc -O2 -I.. decode_paged.c -lm -o decode_paged && ./decode_paged
   Add -fopenmp to use every core.

   A paged cache stores K and V in a pool of fixed-size pages
   [num_pages, page_size, heads_kv, dim]; each sequence owns a row of a block
   table that lists its pages in order, so token n of sequence b lives in page
   block_table[b * pages_per_seq + n / page_size], row n % page_size. Pages
   can sit anywhere in the pool (here they are shuffled on purpose), and a
   sequence grows one page at a time instead of reserving its maximum length.

   The loop: a prompt of PROMPT tokens goes in with one fa_decode call
   (seqlen_q = PROMPT, causal), then each step feeds one new token. Every call
   passes the new tokens' K/V as k_new / v_new: fa_decode writes them into the
   cache at positions seqlens_k[b] .. seqlens_k[b] + seqlen_q - 1 and attends
   over the whole cache including them. At the end the same tokens go through
   fa_forward on contiguous K/V with a causal mask, which must give the same
   outputs: incremental decoding is causal attention, one row at a time.

   Grouped-query attention: 8 query heads share 2 K/V heads. */
#define FLASHATTN_IMPLEMENTATION
#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    BATCH = 2, HQ = 8, HKV = 2, DIM = 64,
    PROMPT = 7, STEPS = 50, TOKENS = PROMPT + STEPS,
    PAGE = 16,                                    /* tokens per page (small, to use many) */
    PAGES_PER_SEQ = (TOKENS + PAGE - 1) / PAGE,
    NUM_PAGES = BATCH * PAGES_PER_SEQ + 3         /* a few spare pages in the pool */
};

static float rand_uniform(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

int main(void) {
    /* The model's per-token projections, made up: [batch, tokens, heads, dim]. */
    size_t nq = (size_t)BATCH * TOKENS * HQ * DIM, nkv = (size_t)BATCH * TOKENS * HKV * DIM;
    float *Q = xcalloc(nq, sizeof *Q), *K = xcalloc(nkv, sizeof *K), *V = xcalloc(nkv, sizeof *V);
    float *O_dec = xcalloc(nq, sizeof *O_dec), *O_ref = xcalloc(nq, sizeof *O_ref);
    /* The paged cache pool, and its block table. */
    size_t page_elems = (size_t)PAGE * HKV * DIM;
    float *k_pool = xcalloc(NUM_PAGES * page_elems, sizeof *k_pool);
    float *v_pool = xcalloc(NUM_PAGES * page_elems, sizeof *v_pool);
    int32_t block_table[BATCH * PAGES_PER_SEQ], seqlens_k[BATCH], perm[NUM_PAGES];
    void *workspace;
    size_t ws_prompt, ws_step, ws_bytes;
    uint64_t seed = 7;
    size_t i;
    int b, t, step;
    fa_problem p = {0};
    fa_tensor kc = {0}, vc = {0};
    fa_status s;

    for (i = 0; i < nq; i++) Q[i] = rand_uniform(&seed);
    for (i = 0; i < nkv; i++) { K[i] = rand_uniform(&seed); V[i] = rand_uniform(&seed); }

    /* Hand out the pool's pages in a shuffled order. */
    for (i = 0; i < NUM_PAGES; i++) perm[i] = (int32_t)i;
    for (i = NUM_PAGES - 1; i > 0; i--) {
        size_t r = (size_t)((rand_uniform(&seed) + 1.0f) * 0.5f * (float)(i + 1)) % (i + 1);
        int32_t tmp = perm[i]; perm[i] = perm[r]; perm[r] = tmp;
    }
    for (i = 0; i < BATCH * PAGES_PER_SEQ; i++) block_table[i] = perm[i];

    /* The problem: a cache of capacity PAGES_PER_SEQ * PAGE tokens per sequence. */
    p.batch = BATCH;
    p.heads_q = HQ;
    p.heads_kv = HKV;
    p.head_dim = DIM;
    p.causal = 1;             /* new token i sees the cache and new tokens 0..i */
    p.seqlen_k = PAGES_PER_SEQ * PAGE;
    p.seqlens_k = seqlens_k;  /* tokens already in the cache, per sequence */
    p.block_table = block_table;
    p.page_size = PAGE;
    p.pages_per_seq = PAGES_PER_SEQ;
    p.num_pages = NUM_PAGES;

    /* Cache views over the pool: batch_stride is the page stride. */
    kc.data = k_pool; kc.batch_stride = (int64_t)page_elems;
    kc.seq_stride = HKV * DIM; kc.head_stride = DIM;
    vc = kc;
    vc.data = v_pool;

    /* Empty caches. The workspace queries below read seqlens_k too (on the
       CPU every array of the problem is checked), so it is set first. */
    for (b = 0; b < BATCH; b++) seqlens_k[b] = 0;

    /* One workspace, big enough for the prompt call and for a step, so the
       loop itself never allocates. */
    for (b = 0; b < BATCH; b++) seqlens_k[b] = 0;  /* read by the size query too */
    p.seqlen_q = PROMPT;
    s = fa_decode_workspace_size(&p, &ws_prompt);
    p.seqlen_q = 1;
    if (s == FA_OK) s = fa_decode_workspace_size(&p, &ws_step);
    if (s != FA_OK) {
        fprintf(stderr, "fa_decode_workspace_size: %s: %s\n", fa_status_string(s), fa_last_error());
        return 1;
    }
    ws_bytes = ws_prompt > ws_step ? ws_prompt : ws_step;
    workspace = xcalloc(ws_bytes ? ws_bytes : 1, 1);
    printf("paged cache: %d pages of %d tokens, %d per sequence; workspace %zu bytes\n",
           NUM_PAGES, PAGE, PAGES_PER_SEQ, ws_bytes);

    t = 0;
    for (step = 0; step <= STEPS; step++) {
        int n_new = step == 0 ? PROMPT : 1;        /* the prompt, then one token a step */
        fa_tensor q = {0}, kn = {0}, vn = {0}, o = {0};
        /* Views of tokens t .. t + n_new - 1 inside the [batch, TOKENS, heads, dim]
           arrays: a pointer offset plus the full arrays' strides. */
        q.data = Q + (size_t)t * HQ * DIM;     q.batch_stride = (int64_t)TOKENS * HQ * DIM;
        o.data = O_dec + (size_t)t * HQ * DIM; o.batch_stride = q.batch_stride;
        kn.data = K + (size_t)t * HKV * DIM;   kn.batch_stride = (int64_t)TOKENS * HKV * DIM;
        vn.data = V + (size_t)t * HKV * DIM;   vn.batch_stride = kn.batch_stride;
        p.seqlen_q = n_new;
        s = fa_decode(&p, q, kc, vc, kn, vn, o, NULL, workspace, ws_bytes);
        if (s != FA_OK) {
            fprintf(stderr, "fa_decode (step %d): %s: %s\n", step, fa_status_string(s), fa_last_error());
            return 1;
        }
        for (b = 0; b < BATCH; b++) seqlens_k[b] += n_new;  /* the cache grew */
        t += n_new;
        if (step % 10 == 0 || step == STEPS)
            printf("step %2d: %2d token(s) in, cache holds %2d, o[b=0, h=0, 0:3] = %+.5f %+.5f %+.5f\n",
                   step, n_new, seqlens_k[0], O_dec[(size_t)(t - 1) * HQ * DIM],
                   O_dec[(size_t)(t - 1) * HQ * DIM + 1], O_dec[(size_t)(t - 1) * HQ * DIM + 2]);
    }

    /* The cache must now hold exactly K and V, token by token. */
    {
        int bad = 0, h, c;
        for (b = 0; b < BATCH; b++)
            for (t = 0; t < TOKENS; t++)
                for (h = 0; h < HKV; h++)
                    for (c = 0; c < DIM; c++) {
                        size_t page = (size_t)block_table[b * PAGES_PER_SEQ + t / PAGE];
                        size_t at = page * page_elems + ((size_t)(t % PAGE) * HKV + h) * DIM + c;
                        size_t src = (((size_t)b * TOKENS + t) * HKV + h) * DIM + c;
                        bad += k_pool[at] != K[src] || v_pool[at] != V[src];
                    }
        printf("cache contents: %s\n", bad ? "WRONG" : "match the appended K/V");
        if (bad) return 1;
    }

    /* Reference: plain causal attention over all TOKENS, contiguous K/V. */
    {
        fa_problem r = {0};
        fa_tensor q = {0}, k = {0}, v = {0}, o = {0};
        float err = 0.0f;
        r.batch = BATCH;
        r.seqlen_q = r.seqlen_k = TOKENS;
        r.heads_q = HQ;
        r.heads_kv = HKV;
        r.head_dim = DIM;
        r.causal = 1;
        q.data = Q; k.data = K; v.data = V; o.data = O_ref;
        s = fa_forward(&r, q, k, v, o, NULL, NULL, 0);
        if (s != FA_OK) {
            fprintf(stderr, "fa_forward: %s: %s\n", fa_status_string(s), fa_last_error());
            return 1;
        }
        for (i = 0; i < nq; i++) err = fmaxf(err, fabsf(O_dec[i] - O_ref[i]));
        printf("max |decode - forward| over %d tokens x %d heads: %.3g -> %s\n",
               BATCH * TOKENS, HQ, err, err <= 1e-5f ? "OK" : "MISMATCH");
        free(Q); free(K); free(V); free(O_dec); free(O_ref);
        free(k_pool); free(v_pool); free(workspace);
        return err <= 1e-5f ? 0 : 1;
    }
}
