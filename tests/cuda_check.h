/* tests/cuda_check.h - CK(x): a CUDA runtime call that must succeed, else the
   program prints the call, file and line and exits with status 2. Shared by the
   GPU tests and benchmarks; include it after <cuda_runtime.h> (or
   tests/emu_cuda.h, which defines the same names for the CPU emulation). */
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

#endif
