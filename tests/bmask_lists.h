/* tests/bmask_lists.h - random block-mask lists (128 x 128 blocks) for the
   GPU tests (test_gpu.cu, test_gpu_backward.cu): their host arrays, which
   the fp64 reference and the CPU call read, and device copies for the
   _cuda call.

   Each (mask, query block) row keeps each key block with probability
   percent / 100, in a shuffled order (the lists need no order); a kept
   block goes to the full_kv_* lists one time in three where split (no
   causal or window mask: the CPU refuses a full block such a mask cuts),
   else to kv_*. rnd(ctx, n): a random integer in [0, n). Unused index
   slots hold -1. */
#ifndef FA_TEST_BMASK_LISTS_H
#define FA_TEST_BMASK_LISTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tbm_lists {
    int32_t *h[4], *d[4]; /* kv counts, kv indices, full counts, full indices: host, device */
} tbm_lists;

static int32_t *tbm_device_copy(const int32_t *h, size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n * sizeof(int32_t)) != cudaSuccess ||
        cudaMemcpy(d, h, n * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "tbm_make: cudaMalloc / cudaMemcpy of %zu lists entries failed\n", n);
        exit(2);
    }
    return (int32_t *)d;
}

/* masks = (batch1 ? 1 : batch) x (heads ? heads : heads_q) of the problem
   sq x sk; host and dev: the block_mask fields for the two calls. */
static void tbm_make(tbm_lists *m, int masks, int sq, int sk, int percent, int split, int heads, int batch1,
                     int (*rnd)(void *, int), void *ctx, fa_block_mask *host, fa_block_mask *dev)
{
    const int qb = (sq + 127) / 128, kb = (sk + 127) / 128;
    const size_t n[4] = {(size_t)masks * qb, (size_t)masks * qb * kb, (size_t)masks * qb, (size_t)masks * qb * kb};
    int32_t *row = (int32_t *)malloc(sizeof(int32_t) * (size_t)kb);
    int i, r, j, len, x;
    for (i = 0; i < 4; i++) {
        m->h[i] = (int32_t *)malloc(sizeof(int32_t) * n[i]);
        for (size_t e = 0; e < n[i]; e++) m->h[i][e] = i % 2 ? -1 : 0;
    }
    for (r = 0; r < masks * qb; r++) {
        len = 0;
        for (j = 0; j < kb; j++)
            if (rnd(ctx, 100) < percent) row[len++] = j;
        for (x = len; x > 1; x--) { /* shuffled */
            const int y = rnd(ctx, x), t = row[x - 1];
            row[x - 1] = row[y];
            row[y] = t;
        }
        for (x = 0; x < len; x++) {
            const int full = split && rnd(ctx, 3) == 0;
            int32_t *cnt = m->h[full ? 2 : 0], *idx = m->h[full ? 3 : 1];
            idx[(size_t)r * kb + cnt[r]++] = row[x];
        }
    }
    free(row);
    for (i = 0; i < 4; i++) m->d[i] = tbm_device_copy(m->h[i], n[i]);
    memset(host, 0, sizeof *host);
    host->block_q = host->block_k = 128;
    host->heads = heads;
    host->batch = batch1;
    host->kv_num_blocks = m->h[0];
    host->kv_indices = m->h[1];
    if (split) {
        host->full_kv_num_blocks = m->h[2];
        host->full_kv_indices = m->h[3];
    }
    *dev = *host;
    dev->kv_num_blocks = m->d[0];
    dev->kv_indices = m->d[1];
    if (split) {
        dev->full_kv_num_blocks = m->d[2];
        dev->full_kv_indices = m->d[3];
    }
}

static void tbm_free(tbm_lists *m)
{
    for (int i = 0; i < 4; i++) {
        free(m->h[i]);
        if (m->d[i]) cudaFree(m->d[i]);
        m->h[i] = m->d[i] = NULL;
    }
}

#endif /* FA_TEST_BMASK_LISTS_H */
