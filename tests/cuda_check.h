/* tests/cuda_check.h - CK(x): a CUDA runtime call that must succeed, else the
   program prints the call, file and line and exits with status 2. Shared by the
   GPU tests and benchmarks; include it after <cuda_runtime.h> (or
   tests/emu_cuda.h, which defines the same names for the CPU emulation).
   After tests/test_util.h it also gives to_dev / from_dev (tensors). */
#ifndef FLASHATTN_TESTS_CUDA_CHECK_H
#define FLASHATTN_TESTS_CUDA_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* With tests/test_util.h included first: a device copy of a host tensor
   (the whole allocation, padding included) and its view; and back. */
#ifdef FLASHATTN_TESTS_UTIL_H
REF_FN fa_tensor to_dev(const tens *x, void **dptr)
{
    fa_tensor t = x->t;
    size_t bytes = (size_t)x->n * dt_size(x->t.dtype);
    CK(cudaMalloc(dptr, bytes));
    CK(cudaMemcpy(*dptr, x->buf, bytes, cudaMemcpyHostToDevice));
    t.data = *dptr;
    return t;
}
REF_FN void from_dev(tens *x, const void *dptr)
{
    CK(cudaMemcpy(x->buf, dptr, (size_t)x->n * dt_size(x->t.dtype), cudaMemcpyDeviceToHost));
}
#endif

#endif
