#!/usr/bin/env python3
"""bench/vs_torch_decode.py - fa_decode_cuda beside PyTorch SDPA (flash, cuDNN)
and the device's measured copy bandwidth, in one run on one GPU.

Grid: batch 1, 8, 32 x cache 4k, 32k, 128k; 32 query heads, 8 KV heads,
d 128, bf16, one query token; our cache contiguous and paged (page 16, 256;
pages in a random order). --hq, --hkv, --d, --sq, --batches, --caches give
other shapes (the query rows of a KV head, sq * hq / hkv, pick the kernel). Reported: GB/s of K+V read = 2 * b * L * hkv * d * 2
bytes / time. Each kernel is timed as CUDA-graph replays (a graph of several
calls, so launch gaps of Python and the host code are out of the numbers),
median of several replays, the contenders' replays interleaved (each rep
replays each once, in shuffled order: bench/timing.py); small caches rotate over copies of the inputs so
that the 50 MB L2 does not serve them.

The "splits" column gives our split count for the contiguous / paged cache
(a contiguous cache is planned for one CTA per SM, a paged one for two).
--variant label=lib.so (repeatable) times other builds of the library in the
same run, as extra lines under each row.

Run: python3 bench/vs_torch.py decode --lib build/libfa_bench_decode.so --out bench/results
(the same as python3 bench/vs_torch_decode.py ...; writes <out>/<date>_<device>_decode.md)
"""
import argparse
import ctypes
import datetime
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import capture, interleaved_graphs  # noqa: E402  (bench/timing.py)

HQ, HKV, D = 32, 8, 128
BF16 = 2


def time_graph(fn, calls, reps=15):
    """Median microseconds per call of fn(i) alone: graph replays (bench/timing.py)."""
    return interleaved_graphs({"x": capture(fn, calls)}, reps)["x"]


def copy_bandwidth():
    n = 1 << 30  # 2 GiB of bf16 -> read 2 GiB + write 2 GiB
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    us = time_graph(lambda i: y.copy_(x), 4)
    del x, y
    return 2 * (1 << 30) * 2 / (us * 1e-6) / 1e9


def load(path):
    """The bench library (bench/fa_bench_decode_lib.cu) with its functions' C types."""
    l_ = ctypes.CDLL(path)
    l_.fa_bench_decode.restype = ctypes.c_int
    l_.fa_bench_decode.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 11 + [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    l_.fa_bench_decode_ws.restype = ctypes.c_size_t
    l_.fa_bench_decode_ws.argtypes = [ctypes.c_int] * 7 + [ctypes.c_void_p] + [ctypes.c_int] * 3
    l_.fa_bench_last_error.restype = ctypes.c_char_p
    return l_


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfa_bench_decode.so")
    ap.add_argument("--out", default="bench/results",
                    help="folder for <date>_<device>_decode.md (bench/vs_torch.py's convention)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=LIB",
                    help="another build of the bench library, timed in the same run (repeatable)")
    ap.add_argument("--reps", type=int, default=15, help="replays of each contender's graph (median)")
    ap.add_argument("--hq", type=int, default=HQ, help="query heads")
    ap.add_argument("--hkv", type=int, default=HKV, help="KV heads")
    ap.add_argument("--d", type=int, default=D, choices=(64, 128, 256), help="head dim")
    ap.add_argument("--sq", type=int, default=1, help="new query tokens a sequence")
    ap.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes")
    ap.add_argument("--caches", default="4096,32768,131072", help="comma-separated cache lengths (tokens)")
    args = ap.parse_args()
    hq, hkv, d, sq = args.hq, args.hkv, args.d, args.sq
    batches = [int(x) for x in args.batches.split(",")]
    caches = [int(x) for x in args.caches.split(",")]

    lib = load(args.lib)
    variants = [(v.split("=", 1)[0], load(v.split("=", 1)[1])) for v in args.variant]

    dev = torch.cuda.get_device_name()
    props = torch.cuda.get_device_properties(0)
    lines = []

    def out(s=""):
        print(s, flush=True)
        lines.append(s)

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out(f"# decode: fa_decode_cuda vs PyTorch {torch.__version__} SDPA (cuDNN {torch.backends.cudnn.version()})")
    out(f"# device: {dev}, {props.multi_processor_count} SMs; {date}")
    out(f"# q len {sq}, {hq} q heads / {hkv} KV heads, d {d}, bf16; GB/s of K+V read; graph replays, median")
    cbw = copy_bandwidth()
    out(f"# measured device copy bandwidth (read + write): {cbw:.0f} GB/s")
    out("")
    hdr = (f"{'batch':>5} {'cache':>6} {'splits':>6} | {'ours us':>8} {'contig':>7} {'pg16':>7} {'pg256':>7} | "
           f"{'flash':>7} {'cuDNN':>7} | {'vs cuDNN':>8} {'%copy':>6} {'pg16/ct':>7}")
    out(hdr)
    out("-" * len(hdr))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    for batch in batches:
        for L in caches:
            kv_bytes = 2 * batch * L * hkv * d * 2
            copies = max(1, min(16, (256 << 20) // kv_bytes + 1)) if kv_bytes < (256 << 20) else 1
            sets = []
            for _ in range(copies):
                k = torch.randn(batch, L, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                v = torch.randn(batch, L, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                q = torch.randn(batch, sq, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                o = torch.empty_like(q)
                sets.append((q, k, v, o))
            seqlens = torch.full((batch,), L, dtype=torch.int32, device="cuda")
            graphs, keep = {}, []  # every contender's graph, replayed interleaved below
            splits = {}
            for vlabel, vlib in [("", lib)] + variants:
                for name, page in (("contig", 0), ("pg16", 16), ("pg256", 256)):
                    table = None
                    pps = npages = 0
                    if page:
                        pps = L // page
                        npages = batch * pps
                        # the same bytes seen as a pool of pages, handed out in a random order
                        table = torch.randperm(npages, device="cuda", generator=gen).to(torch.int32).reshape(batch, pps)
                    ws_bytes = vlib.fa_bench_decode_ws(batch, sq, hq, hkv, d, L, 0, table.data_ptr() if page else None,
                                                       page, pps, npages)
                    ws = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device="cuda")
                    if not vlabel:
                        # the workspace is splits * rows * (d + 1) floats + 256 bytes (none for one split)
                        splits[name] = (ws_bytes - 256) // (batch * hq * sq * (d + 1) * 4) if ws_bytes else 1

                    def call(i, page=page, table=table, pps=pps, npages=npages, vlib=vlib, ws=ws, ws_bytes=ws_bytes):
                        q, k, v, o = sets[i % copies]
                        st = vlib.fa_bench_decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                                  seqlens.data_ptr(), table.data_ptr() if page else None,
                                                  batch, sq, hq, hkv, d, L, page, pps, npages, BF16, 0,
                                                  ws.data_ptr(), ws_bytes, torch.cuda.current_stream().cuda_stream)
                        if st != 0:
                            raise RuntimeError(vlib.fa_bench_last_error().decode())
                    graphs[vlabel + name] = capture(call, max(copies, 8))
                    keep.append((ws, table))  # the graph reads them at every replay
                    if page == 0 and batch * L <= 8 * 32768:  # spot check: the timed call vs SDPA math
                        q, k, v, o = sets[0]
                        ref = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                                             v.transpose(1, 2).float(), enable_gqa=True).transpose(1, 2)
                        torch.cuda.synchronize()
                        err = (o.float() - ref).abs().max().item()
                        if err > 2e-2:
                            out(f"!! {vlabel or 'main'} batch {batch} cache {L}: max |O - ref| = {err:.3g}")
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                def sdpa(i, backend=backend):
                    q, k, v, o = sets[i % copies]
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                       enable_gqa=True)
                try:
                    graphs[name] = capture(sdpa, max(copies, 8))
                except Exception as e:  # a backend that refuses this shape
                    print(f"   ({name} failed: {str(e).splitlines()[0][:100]})", file=sys.stderr)
            # each rep replays every contender once, in shuffled order (bench/timing.py)
            res = interleaved_graphs(graphs, args.reps)
            res.update({name: float("nan") for name in ("flash", "cudnn") if name not in res})
            gbs = {k_: kv_bytes / (t * 1e-6) / 1e9 for k_, t in res.items()}
            out(f"{batch:>5} {L // 1024:>5}k {splits['contig']:>3}/{splits['pg16']:<2} | {res['contig']:>8.1f} {gbs['contig']:>7.0f} {gbs['pg16']:>7.0f} "
                f"{gbs['pg256']:>7.0f} | {gbs['flash']:>7.0f} {gbs['cudnn']:>7.0f} | "
                f"{gbs['contig'] / gbs['cudnn']:>7.2f}x {100 * gbs['contig'] / cbw:>5.0f}% "
                f"{gbs['pg16'] / gbs['contig']:>7.2f}")
            for vlabel, _ in variants:
                out(f"{'':>5} {'':>6} {vlabel[:14]:>14} {gbs[vlabel + 'contig']:>7.0f} {gbs[vlabel + 'pg16']:>7.0f} "
                    f"{gbs[vlabel + 'pg256']:>7.0f} | {'':>7} {'':>7} | "
                    f"{gbs[vlabel + 'contig'] / gbs['cudnn']:>7.2f}x {100 * gbs[vlabel + 'contig'] / cbw:>5.0f}% "
                    f"{gbs[vlabel + 'pg16'] / gbs[vlabel + 'contig']:>7.2f}")
            del sets, graphs, keep
            torch.cuda.empty_cache()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        tag = f"{datetime.date.today().isoformat()}_{re.sub(r'[^A-Za-z0-9]+', '-', dev).strip('-')}_decode"
        path = os.path.join(args.out, tag + ".md")
        with open(path, "w") as f:
            f.write("```\n" + "\n".join(lines) + "\n```\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
