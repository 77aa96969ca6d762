/* tests/test_gpu_knobs.cu - the macros that trim the GPU half (flashattn_cuda.cuh,
   >>gpu-config): FLASHATTN_HEAD_DIMS for the backward and decode kernels,
   FLASHATTN_NO_DECODE and FLASHATTN_NO_BACKWARD. No GPU needed: every call
   here is a workspace-size query, answered before any CUDA call.

   The Makefile compiles it three times (test-gpu-knobs):
     -DFLASHATTN_HEAD_DIMS=128                   a trimmed build
     -DFLASHATTN_HEAD_DIMS=64 -DFLASHATTN_NO_DECODE -DFLASHATTN_NO_BACKWARD
     -DFLASHATTN_HEAD_DIMS=128 -DFLASHATTN_NO_HOPPER */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "test_util.h"

static fa_problem problem(int d)
{
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = 2; p.seqlen_q = 1; p.seqlen_k = 1000; p.heads_q = 8; p.heads_kv = 2; p.head_dim = d;
    return p;
}

/* The call returned FA_ERROR_UNSUPPORTED and its message names `needle`. */
static void unsupported(fa_status s, const char *what, const char *needle)
{
    const char *msg = fa_last_error();
    check(s == FA_ERROR_UNSUPPORTED && msg && strstr(msg, needle),
          "%s: want FA_ERROR_UNSUPPORTED naming %s, got %d (%s)", what, needle, (int)s, msg ? msg : "");
}

int main(void)
{
    size_t bytes = 0;
    fa_problem p;
#ifdef FLASHATTN_NO_BACKWARD
    p = problem(64);
    unsupported(fa_backward_cuda_workspace_size(&p, &bytes), "backward, d 64", "FLASHATTN_NO_BACKWARD");
#else
    /* FLASHATTN_HEAD_DIMS=128: d 64 runs on the 128 kernel (its dQ
       accumulator rows 128 floats wide), d 256 on none */
    fa_problem p128 = problem(128);
    size_t bytes128 = 0;
    p = problem(64);
    check(fa_backward_cuda_workspace_size(&p, &bytes) == FA_OK, "backward, d 64: %s", fa_last_error());
    check(fa_backward_cuda_workspace_size(&p128, &bytes128) == FA_OK, "backward, d 128: %s", fa_last_error());
    check(bytes == bytes128 && bytes > 0, "backward, d 64 sized as d 128's kernel: %zu vs %zu bytes", bytes,
          bytes128);
    p = problem(256);
    unsupported(fa_backward_cuda_workspace_size(&p, &bytes), "backward, d 256", "FLASHATTN_HEAD_DIMS");
#endif
#ifdef FLASHATTN_NO_DECODE
    p = problem(64);
    unsupported(fa_decode_cuda_workspace_size(&p, &bytes), "decode, d 64", "FLASHATTN_NO_DECODE");
#else
    /* decode: only a listed head dim (64 is not) */
    p = problem(64);
    unsupported(fa_decode_cuda_workspace_size(&p, &bytes), "decode, d 64", "FLASHATTN_HEAD_DIMS");
    p = problem(256);
    unsupported(fa_decode_cuda_workspace_size(&p, &bytes), "decode, d 256", "FLASHATTN_HEAD_DIMS");
#endif
    return summary("test_gpu_knobs");
}
