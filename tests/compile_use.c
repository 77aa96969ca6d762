/* tests/compile_use.c - uses every public declaration; compiled as C99 and
   C++11, linked against tests/compile_impl.c (extern) or with the
   implementation in the same file (tests/compile_static.c). Compiling and
   linking is the check; running it only exercises the error paths. */
#ifndef FLASHATTN_H
#include "../flashattn.h"
#endif
#include <stdio.h>
#include <string.h>

static void serial_for(void *user, int n, fa_task_fn task, void *ctx)
{
    int i;
    (void)user;
    for (i = 0; i < n; i++) task(ctx, i, 0);
}

int main(void)
{
    fa_problem p, r;
    fa_tensor t;
    size_t bytes = 0;
    float buf[64];
    int bad = 0;
    memset(&p, 0, sizeof p);
    memset(&t, 0, sizeof t);
    memset(buf, 0, sizeof buf);
    t.data = buf;
    t.dtype = FA_F32;
    p.batch = 1; p.seqlen_q = 2; p.seqlen_k = 2; p.heads_q = 1; p.head_dim = 4;
    fa_set_parallel_for(serial_for, NULL, 1);
    bad |= fa_problem_resolve(&p, &r) != FA_OK;
    bad |= fa_forward_workspace_size(&p, &bytes) != FA_OK;
    bad |= fa_backward_workspace_size(&p, &bytes) != FA_OK;
    bad |= fa_forward(&p, t, t, t, t, buf + 40, NULL, 0) != FA_OK;
    bad |= fa_backward(NULL, t, t, t, t, t, buf, t, t, t, NULL, 0) != FA_ERROR_INVALID_ARGUMENT;
    bad |= fa_decode_workspace_size(NULL, &bytes) != FA_ERROR_INVALID_ARGUMENT;
    bad |= fa_decode(NULL, t, t, t, t, t, t, NULL, NULL, 0) != FA_ERROR_INVALID_ARGUMENT;
    bad |= fa_merge(0, 1, 1, buf, buf, buf, buf) != FA_ERROR_INVALID_ARGUMENT;
    fa_set_parallel_for(NULL, NULL, 0);
    printf("%s %s %s\n", FLASHATTN_VERSION_STRING, fa_status_string(FA_OK), fa_last_error());
    return bad;
}
