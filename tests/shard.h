/* tests/shard.h - FA_TEST_SHARD=k/n: a GPU test program runs only the cases
   whose index is k modulo n, so that the host's cores can run n copies side
   by side (make test-gpu GPU_SHARDS=n for the full lists, SAN_SHARDS=n under
   the sanitizers). Each case keeps its index, and so its seed. */
#ifndef FLASHATTN_TESTS_SHARD_H
#define FLASHATTN_TESTS_SHARD_H
#include <stdio.h>
#include <stdlib.h>

/* 1 with *k, *n set (0 and 1 without the variable); 0 and a message when
   the variable is malformed. */
static int test_shard(int *k, int *n)
{
    const char *sh = getenv("FA_TEST_SHARD");
    char rest;
    *k = 0;
    *n = 1;
    if (!sh) return 1;
    if (sscanf(sh, "%d/%d%c", k, n, &rest) != 2 || *n < 1 || *k < 0 || *k >= *n) {
        fprintf(stderr, "FA_TEST_SHARD=%s: want k/n with 0 <= k < n\n", sh);
        return 0;
    }
    return 1;
}
#endif
