#!/usr/bin/env python3
"""tests/emu_fwd_dropout.py OUTDIR - the sm_80 forward's dropout step (fa__sm80_dropout, cut out
of flashattn_cuda.cuh) run on the CPU by a warp of 32 fibers (tests/emu_cuda.h's), against
fa__dropout_keep (the CPU rule) for every score of a thread's fragments: the same keep bits, no
GPU needed. Writes OUTDIR/emu_cuda_warp.h and OUTDIR/test_fwd_dropout_emu.cpp; build the last with
  c++ -std=c++20 -O1 -I<cuda include> -o OUT OUTDIR/test_fwd_dropout_emu.cpp -lpthread
(make test-gpu-emu-dropout does it all)."""
import os, sys

from emu_common import HERE as here, cuda_header, thread_model

out = sys.argv[1]
s = cuda_header()
a = s.index("template <int MT, int NS>\nstatic __device__ __forceinline__ void fa__sm80_dropout(")
b = s.index("\n}\n", a) + 3
fn = s[a:b].replace("static __device__ __forceinline__", "static inline")

# emu_cuda.h's warp (its shuffle takes floats: the keep bits are words)
open(os.path.join(out, "emu_cuda_warp.h"), "w").write(thread_model("""
static inline uint32_t __shfl_xor_sync(unsigned, uint32_t v, int m) { return (uint32_t)emu_shfl((int)v, emu_lane() ^ m); }
"""))

src = r'''#include "emu_cuda_warp.h"
#define FLASHATTN_IMPLEMENTATION
#include "%(h)s"
#include <cstdio>

/* the fields the step reads */
struct fa__fwd_params {
    int heads_q;
    uint32_t dropout_threshold;
    uint64_t dropout_seed, dropout_offset;
};

%(fn)s
/* one warp's call: lane l's scores all 1 before */
template <int MT, int NS> struct warp_args {
    fa__fwd_params p;
    int b, h, wrow0, k0;
    float (*s)[MT][NS][4];
};
template <int MT, int NS> static void warp_kernel(const warp_args<MT, NS> &a) {
    const int l = (int)threadIdx.x;
    for (int mt = 0; mt < MT; mt++)
        for (int j = 0; j < NS; j++)
            for (int e = 0; e < 4; e++) a.s[l][mt][j][e] = 1.0f;
    fa__sm80_dropout<MT, NS>(a.s[l], a.p, a.b, a.h, a.wrow0, a.k0, l / 4, l %% 4);
}
template <int MT, int NS> static int run(const fa__fwd_params &p, int b, int h, int wrow0, int k0) {
    static float s[32][MT][NS][4];
    int bad = 0;
    emu_launch(warp_kernel<MT, NS>, dim3(1), dim3(32), 0, 0, warp_args<MT, NS>{p, b, h, wrow0, k0, s});
    for (int l = 0; l < 32; l++)
        for (int mt = 0; mt < MT; mt++)
            for (int j = 0; j < NS; j++)
                for (int e = 0; e < 4; e++) {
                    const int i = wrow0 + mt * 16 + l / 4 + 8 * (e >> 1), key = k0 + j * 8 + 2 * (l %% 4) + (e & 1);
                    const int keep = fa__dropout_keep(p.dropout_seed, p.dropout_offset, b, h, p.heads_q, i, key,
                                                      p.dropout_threshold);
                    bad += keep != (s[l][mt][j][e] != 0.0f);
                }
    return bad;
}

int main(void) {
    int fails = 0, n = 0;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int c = 0; c < 12; c++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        fa__fwd_params p;
        p.heads_q = 1 + (int)(x %% 7);
        p.dropout_threshold = fa__dropout_threshold(ps[c %% 3]);
        p.dropout_seed = x ^ 0x1234567890abcdefull;
        p.dropout_offset = (x >> 7) * 3;
        const int b = (int)(x >> 40) %% 5, h = (int)(x >> 50) %% p.heads_q;
        const int wrow0 = 16 * (int)((x >> 20) %% 300), k0 = 8 * (int)((x >> 30) %% 500);
        /* (BLOCK_N 64 and 32, MT 1 and 2: the kernels' shapes) */
        const int bad = c %% 3 == 0 ? run<2, 8>(p, b, h, wrow0, k0) : c %% 3 == 1 ? run<1, 8>(p, b, h, wrow0, k0)
                                                                 : run<2, 4>(p, b, h, wrow0, k0);
        n++;
        if (bad) { fails++; printf("FAIL case %%d: %%d scores differ from fa__dropout_keep\n", c, bad); }
    }
    printf("fa__sm80_dropout (emulated warp): %%d passed, %%d failed\n", n - fails, fails);
    return fails != 0;
}
''' % {"h": os.path.join(here, "..", "flashattn.h"), "fn": fn}
open(os.path.join(out, "test_fwd_dropout_emu.cpp"), "w").write(src)
