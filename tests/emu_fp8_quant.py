#!/usr/bin/env python3
"""tests/emu_fp8_quant.py OUTDIR - tests/test_gpu_fp8.cu with fa_quantize_cuda's kernels run
on the CPU (no GPU needed), through tests/emu_cuda.h's thread model: every CUDA thread a
fiber, __syncthreads and __shfl_xor_sync emulated. It checks the kernels' row layout, Hadamard
stages, amax reduction and block indexing against the CPU fa_quantize bit for bit. The e4m3
rounding is the software one (the sm_89+ cvt instruction is not emulated), and the test's
attention cases and refusals are left out (FA_TEST_QUANT_ONLY). Writes OUTDIR/emu_cuda_fp8.h,
OUTDIR/fp8_quant.inc and OUTDIR/test_gpu_fp8_emu.cpp; build the last with
  c++ -std=c++20 -O1 -I<cuda include> -o OUT OUTDIR/test_gpu_fp8_emu.cpp -lpthread
(make test-gpu-emu-fp8 does it all)."""
import os, re, sys

from emu_common import HERE as here, cuda_header, thread_model

out = sys.argv[1]
s = cuda_header()
a = s.index("#define FA__QUANT_WARPS")
b = s.index("#endif /* FLASHATTN_CUDA_EMU */", a)  # the section ends at the emulator's fence
sec = s[a:b]
# launches become emu_launch calls; the emulator has no static shared memory: static arrays
# serve, as its CTAs run one after another; no cvt instruction: the software rounding
sec = re.sub(r"(\w+<[^<>]*>|\w+)<<<([^,]+), ([^,]+), 0, st>>>\(([^)]*)\)",
             r"emu_launch(\1, \2, \3, 0, st, \4)", sec)
sec = sec.replace("    __shared__ float", "    static float")
sec = sec.replace("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890", "#if 0")
assert sec.count("emu_launch") >= 6 and "__shared__" not in sec
open(os.path.join(out, "fp8_quant.inc"), "w").write(sec)

# the quantizer instead of the backward
e = thread_model("""
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
/* (cudaMemset, cudaMemsetAsync and cudaDeviceSynchronize: emu_cuda.h's own) */
static inline unsigned atomicMax(unsigned *p, unsigned v) {
    unsigned o = *p;
    if (v > o) *p = v;
    return o;
}
static fa_status fa__cuda_fail(const char *fn, cudaError_t, const char *what) {
    return fa__fail(FA_ERROR_CUDA, "%s: %s", fn, what);
}
#include "fp8_quant.inc"
""")
open(os.path.join(out, "emu_cuda_fp8.h"), "w").write(e)

t = open(os.path.join(here, "test_gpu_fp8.cu")).read()
t = t.replace("#include <cuda_runtime.h>", '#include "emu_cuda_fp8.h"')
t = t.replace('#include "../flashattn.h"', '#include "%s"' % os.path.join(here, "..", "flashattn.h"))
t = t.replace('#include "test_util.h"', '#include "%s"' % os.path.join(here, "test_util.h"))
t = t.replace('#include "cuda_check.h"', '#include "%s"' % os.path.join(here, "cuda_check.h"))
t = "#define FA_TEST_QUANT_ONLY /* the quantizer's part alone: no forward here */\n" + t
open(os.path.join(out, "test_gpu_fp8_emu.cpp"), "w").write(t)
