/* bench/fa_capi.cu - the library as a shared object for Python (ctypes).
   nvcc -std=c++17 -O2 -Xcompiler -fPIC -shared -gencode arch=compute_90a,code=sm_90a \
        -o build/libflashattn.so bench/fa_capi.cu */
#define FLASHATTN_IMPLEMENTATION
#include "../flashattn.h"
