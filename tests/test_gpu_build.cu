/* tests/test_gpu_build.cu - `make test`'s GPU translation unit until
   tests/test_cuda_args.cu takes its place (the Makefile's GPU_CHECK_TU).

   Compiled once per architecture with the default macros (every head dim,
   decode and backward), warnings as errors, linked and run. It needs no
   GPU: each call below is refused by its argument checks before any CUDA
   call, so it runs on CI. The GPU tests proper are `make test-gpu`. */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
#include "test_util.h"

static void refused(fa_status s, const char *call, const char *needle)
{
    const char *msg = fa_last_error();
    check(s == FA_ERROR_INVALID_ARGUMENT && msg && strstr(msg, needle),
          "%s: want FA_ERROR_INVALID_ARGUMENT naming '%s', got %d (%s)", call, needle, (int)s,
          msg ? msg : "(null)");
}

int main(void)
{
    fa_tensor t;
    size_t bytes = 0;
    memset(&t, 0, sizeof t);
    refused(fa_forward_cuda_workspace_size(NULL, &bytes), "fa_forward_cuda_workspace_size", "problem");
    refused(fa_backward_cuda_workspace_size(NULL, &bytes), "fa_backward_cuda_workspace_size", "problem");
    refused(fa_decode_cuda_workspace_size(NULL, &bytes), "fa_decode_cuda_workspace_size", "problem");
    refused(fa_forward_cuda(NULL, t, t, t, t, NULL, NULL, 0, NULL), "fa_forward_cuda", "problem");
    refused(fa_decode_cuda(NULL, t, t, t, t, t, t, NULL, NULL, 0, NULL), "fa_decode_cuda", "problem");
    check(bytes == 0, "a refused workspace-size query wrote *bytes (%zu)", bytes);
    return summary("test_gpu_build");
}
