#!/usr/bin/env python3
"""bench/ncu_points.py - runs a few forward grid points of bench/vs_torch.py (ours, SDPA flash,
SDPA cuDNN, two calls each) inside an NVTX range "prof", for Nsight Compute to read the
kernels' counters side by side: where the time of a point goes (DRAM bytes and throughput, L2
hit rate, the fraction of the kernel's time its SMs were active).

  ncu --nvtx --nvtx-include "prof/" --clock-control none --section SpeedOfLight \
      --section LaunchStats --metrics dram__bytes_read.sum,dram__bytes_write.sum,\
lts__t_sector_hit_rate.pct,sm__cycles_active.avg,sm__cycles_elapsed.avg \
      python3 bench/ncu_points.py --lib build/libfa_bench.so --points 256:1:512,64:0:512

A point is head_dim:causal:seqlen on the FlashAttention-3 paper's grid (batch * seqlen = 16k,
hidden 2048), bf16, random inputs. The kernels print in the order ours, flash, cudnn per point."""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from vs_torch import forward, load  # the benchmark's library loader and call (bench/ is on sys.path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfa_bench.so")
    ap.add_argument("--points", default="256:1:512,64:0:512,64:1:512")
    ap.add_argument("--calls", type=int, default=2)
    args = ap.parse_args()
    lib = load(args.lib)
    dev = torch.device("cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for pt in args.points.split(","):
        d, causal, sl = (int(x) for x in pt.split(":"))
        heads, batch = 2048 // d, 16384 // sl
        q, k, v = (torch.randn(batch, sl, heads, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(batch, heads, sl, device=dev, dtype=torch.float32)

        def ours():
            forward(lib, q, k, v, o, lse, causal, stream)

        def sdpa(backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=bool(causal))

        contenders = [("ours", ours), ("flash", lambda: sdpa(SDPBackend.FLASH_ATTENTION)),
                      ("cudnn", lambda: sdpa(SDPBackend.CUDNN_ATTENTION))]
        for _, fn in contenders:  # warm-up outside the range: plans, autotuning, lazy loading
            fn()
        torch.cuda.synchronize()
        for name, fn in contenders:
            print(f"d{d} causal {causal} s{sl}: {name} x {args.calls}", flush=True)
            torch.cuda.nvtx.range_push("prof")
            for _ in range(args.calls):
                fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()


if __name__ == "__main__":
    main()
