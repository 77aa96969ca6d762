#!/usr/bin/env python3
"""bench/vs_torch.py - flashattn's GPU forward beside PyTorch SDPA, same process, same run.

Loads fa_forward_cuda from a shared library built by nvcc (bench/fa_bench_lib.cu,
`make build/libfa_bench.so`) through ctypes and times, on the FlashAttention-3
paper's grid (batch * seqlen = 16k tokens, hidden 2048, heads = 2048 / d, head dims
64 / 128 / 256, causal and not, seqlen 512 .. 16k), bf16, random inputs:
  ours, SDPA flash (SDPBackend.FLASH_ATTENTION = FlashAttention-2),
  SDPA cuDNN (SDPBackend.CUDNN_ATTENTION),
with CUDA events, warm-up, the median of the timed runs (the contenders
interleaved rep by rep, in shuffled order: bench/timing.py), two input sets
alternating (each set 4 x 64 MB, larger than L2). TFLOP/s with FLOPs =
4 sq sk d heads batch, halved for causal; the bf16 matmul ceiling is an 8192^3
torch.matmul measured in the same run. --variant label=lib.so (repeatable) times
other builds of ours in the same run as extra columns (the sm_90a ablation:
e.g. the sm_80 kernel alone, built with -DFLASHATTN_NO_HOPPER). Also the memory point: batch 1, 16 heads,
d 128, seqlen 131072, and the device memory it takes beyond O and L.

Writes <out>/<date>_<device>_fwd.md (table) and .png (TFLOP/s vs seqlen, one
panel per head dim and mask).

--fp8 adds FP8 (e4m3) columns, in the same run: each input set quantized once
(fa_quantize_cuda through the library, per block of 128 rows, or --fp8-quant torch:
the same rule in torch ops, e4m3fn by torch.float8_e4m3fn; --fp8-per-tensor,
--fp8-hadamard), then timed among the other contenders, interleaved: ours on e4m3
(O bf16), the quantizer alone (Q, K and V) and quantize + attend end to end; then
a sustained loop (CUDA-graph replays of several back-to-back calls, bench/timing.py)
of ours bf16, SDPA cuDNN, ours FP8 and the end-to-end pair; and once, the e4m3
matmul ceiling (torch._scaled_mm, 8192^3). FLOPs as for bf16. Its files end in
_fwd-fp8.

  python3 bench/vs_torch.py --lib build/libfa_bench.so --out bench/results
  python3 bench/vs_torch.py --lib build/libfa_bench.so --out bench/results --fp8 --no-memory-point
  python3 bench/vs_torch.py decode --lib build/libfa_bench_decode.so    (bench/vs_torch_decode.py)
  python3 bench/vs_torch.py backward ...                                (bench/vs_torch_backward.py)
"""
import argparse
import ctypes
import datetime
import os
import re
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import capture, event_ms, interleaved, interleaved_graphs  # noqa: E402  (bench/timing.py)
from torch.nn.attention import SDPBackend, sdpa_kernel


def load(path):
    """The bench library (bench/fa_bench_lib.cu) with its functions' C types."""
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.fa_bench_forward.restype = ctypes.c_int
    lib.fa_bench_forward.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 8 + [ctypes.c_void_p]
    lib.fa_bench_last_error.restype = ctypes.c_char_p
    if hasattr(lib, "fa_bench_forward_fp8"):  # (a build from before the FP8 entries has none)
        lib.fa_bench_forward_fp8.restype = ctypes.c_int
        lib.fa_bench_forward_fp8.argtypes = ([ctypes.c_void_p] * 8 + [ctypes.c_float] * 3 + [ctypes.c_int] * 8 +
                                             [ctypes.c_void_p])
        lib.fa_bench_quantize.restype = ctypes.c_int
        lib.fa_bench_quantize.argtypes = ([ctypes.c_void_p] * 3 + [ctypes.c_int] * 7 +
                                          [ctypes.c_ulonglong, ctypes.c_int, ctypes.c_void_p])
        lib.fa_bench_descales.restype = ctypes.c_longlong
        lib.fa_bench_descales.argtypes = [ctypes.c_int] * 5
        lib.fa_bench_fp8_block.restype = ctypes.c_int
        lib.fa_bench_fp8_block.argtypes = [ctypes.c_int]
    return lib


def forward(lib, q, k, v, o, lse, causal, stream):
    """Our bf16 forward through the bench library: q, o [b, sq, h, d], k, v [b, sk, hkv, d], lse
    [b, h, sq] (torch tensors on the GPU), on the CUDA stream handle `stream`."""
    bsz, sq, h, d = q.shape
    st = lib.fa_bench_forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                              bsz, sq, k.shape[1], h, k.shape[2], d, int(causal), 1, stream)
    if st != 0:
        raise RuntimeError("fa_forward_cuda: " + lib.fa_bench_last_error().decode())


# ---- FP8 (--fp8) ------------------------------------------------------------------------
SUSTAINED_CALLS = 8  # calls per CUDA graph in the sustained loop
HADAMARD_SEED = 2024


def torch_quantize(x, block, per_tensor, codes, ds):
    """fa_quantize's rule (flashattn.h, >>impl-fp8) in torch ops, without the Hadamard rotation:
    x [b, s, h, d] -> codes (uint8 view of e4m3fn) and descales ds = amax / 448 per block of `block`
    rows of each (batch, head), [b, h, blocks] (or one for the tensor); amax below 2^-64 -> 1."""
    b, s, h, d = x.shape
    nblk = -(-s // block)
    xf = F.pad(x.float(), (0, 0, 0, 0, 0, nblk * block - s)).view(b, nblk, block, h, d)
    amax = xf.abs().amax() if per_tensor else xf.abs().amax(dim=(2, 4))  # [b, blocks, h]
    tiny = amax < 2.0 ** -64
    scale = torch.where(tiny, torch.ones_like(amax), amax / 448.0)
    inv = torch.where(tiny, torch.ones_like(amax), 448.0 / amax)
    y = xf * (inv if per_tensor else inv[:, :, None, :, None])
    y = y.view(b, nblk * block, h, d)[:, :s].clamp(-448.0, 448.0)  # e4m3fn has no infinity: saturate
    codes.copy_(y.to(torch.float8_e4m3fn).view(torch.uint8))
    ds.copy_(scale.reshape(-1) if per_tensor else scale.permute(0, 2, 1).reshape(-1))


class Fp8Set:
    """One input set in e4m3: codes [b, s, h, d] (uint8) and descales of Q, K, V, O (bf16) and L,
    made from a bf16 set (q, k, v) by quantize()."""

    def __init__(self, lib, args, q, k, v, lse):
        b, s, h, _ = q.shape
        self.lib, self.args, self.src = lib, args, (q, k, v)
        self.codes = [torch.empty(t.shape, dtype=torch.uint8, device=t.device) for t in (q, k, v)]
        self.ds = [torch.empty(max(1, lib.fa_bench_descales(role, b, s, h, int(args.fp8_per_tensor))),
                               dtype=torch.float32, device=q.device) for role in range(3)]
        self.o, self.lse = torch.empty_like(q), torch.empty_like(lse)
        self.host_s = [0.0, 0.0, 0.0]

    def quantize(self, stream):
        """Q, K and V to e4m3, on `stream` (the library) or torch's current stream."""
        for role, (x, c, ds) in enumerate(zip(self.src, self.codes, self.ds)):
            if self.args.fp8_quant == "torch":
                torch_quantize(x, self.lib.fa_bench_fp8_block(role), self.args.fp8_per_tensor, c, ds)
                continue
            b, s, h, d = x.shape
            st = self.lib.fa_bench_quantize(x.data_ptr(), c.data_ptr(), ds.data_ptr(), role, b, s, h, d,
                                            int(self.args.fp8_per_tensor),
                                            int(self.args.fp8_hadamard and role < 2), HADAMARD_SEED, 1, stream)
            if st != 0:
                raise RuntimeError("fa_quantize_cuda: " + self.lib.fa_bench_last_error().decode())

    def read_per_tensor(self):
        """Per tensor, fa_problem takes the descales as host floats: read them back (a sync) once."""
        if self.args.fp8_per_tensor:
            self.host_s = [ds.item() for ds in self.ds]

    def forward(self, causal, stream, lib=None):
        """Our FP8 forward on the codes; lib: another build of ours (--variant), default the --lib one."""
        b, s, h, d = self.codes[0].shape
        blk = [None] * 3 if self.args.fp8_per_tensor else [ds.data_ptr() for ds in self.ds]
        st = (lib or self.lib).fa_bench_forward_fp8(*(c.data_ptr() for c in self.codes), self.o.data_ptr(),
                                           self.lse.data_ptr(), *blk, *self.host_s, b, s,
                                           self.codes[1].shape[1], h, self.codes[1].shape[2], d, int(causal), 1,
                                           stream)
        if st != 0:
            raise RuntimeError("fa_forward_cuda (e4m3): " + self.lib.fa_bench_last_error().decode())

    def bytes_quantized(self):
        """Bytes the quantizer moves: 2 read + 1 written an element, and the descales."""
        return sum(3 * c.numel() + 4 * ds.numel() for c, ds in zip(self.codes, self.ds))


def fp8_matmul_ceiling(dev):
    """TFLOP/s of torch._scaled_mm on e4m3 8192^3 (scales 1, bf16 out): {fast accumulation: x}."""
    n = 8192
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.ones((), device=dev, dtype=torch.float32)
    res = {}
    for fast in (True, False):
        ms = timed(lambda it: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                               use_fast_accum=fast), 20)
        res[fast] = 2 * n ** 3 / ms * 1e-9
    return res


def fp8_point(args, f8, fns, fp8_fns, ms, flops, ours_now):
    """The FP8 columns of one grid point, after its single-call timing ms: the quantizer's time and
    bandwidth, and the sustained loop (CUDA-graph replays of SUSTAINED_CALLS calls, interleaved) of
    ours bf16, SDPA cuDNN, ours FP8 and quantize + attend. ours_now(it): our bf16 call on torch's
    current stream (a graph capture changes it)."""
    nan = float("nan")
    row = {"rmse": nan, "quant_us": nan, "quant_gbs": nan}
    if "quant" in ms:
        row["quant_us"] = ms["quant"] * 1e3
        row["quant_gbs"] = f8[0].bytes_quantized() / (ms["quant"] * 1e-3) / 1e9
    graphs = {}
    keys = ["ours", "cudnn", "fp8", "e2e"] + [k for k in fp8_fns if k.startswith("fp8 ")]  # (variants last)
    for key, fn in [("ours", ours_now), ("cudnn", fns["cudnn"])] + [(k, fp8_fns[k]) for k in keys[2:]]:
        if key not in ms:
            continue  # refused in the single calls already
        try:
            graphs[key] = capture(fn, SUSTAINED_CALLS)
        except Exception as e:  # noqa: BLE001 - reported, the column stays empty
            print(f"  sustained {key}: capture failed: {str(e).splitlines()[0][:120]}", flush=True)
    us = interleaved_graphs(graphs, args.reps) if graphs else {}
    for key in keys:
        row["sus_" + key] = flops / (us[key] * 1e-6) * 1e-12 if key in us else nan
    return row


def timed(fn, reps, warmup=3):
    """Median milliseconds of fn() over reps runs (bench/timing.py's event_ms), after warm-up."""
    for _ in range(warmup):
        fn(0)
    torch.cuda.synchronize()
    return statistics.median(event_ms(lambda: fn(it)) for it in range(reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfa_bench.so")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--lens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--no-memory-point", action="store_true")
    ap.add_argument("--variant", action="append", default=[],
                    help="label=path of another build of the bench library, timed as an extra column")
    ap.add_argument("--fp8", action="store_true", help="FP8 (e4m3) columns beside bf16 (see the docstring)")
    ap.add_argument("--fp8-quant", choices=("lib", "torch"), default="lib",
                    help="who quantizes: fa_quantize_cuda (lib) or torch ops (no Hadamard)")
    ap.add_argument("--fp8-per-tensor", action="store_true", help="one descale per tensor (default: per block)")
    ap.add_argument("--fp8-hadamard", action="store_true", help="rotate Q and K first (fa_quantize_cuda only)")
    args = ap.parse_args()
    if args.fp8_hadamard and args.fp8_quant == "torch":
        sys.exit("--fp8-hadamard needs --fp8-quant lib (fa_quantize_cuda's rotation)")

    lib = load(args.lib)
    if args.fp8 and not hasattr(lib, "fa_bench_forward_fp8"):
        sys.exit(f"--fp8: {args.lib} has no fa_bench_forward_fp8 (rebuild it from bench/fa_bench_lib.cu)")
    variants = [(v.split("=", 1)[0], load(v.split("=", 1)[1])) for v in args.variant]

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    print(f"device: {name}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; {date}",
          flush=True)

    # bf16 matmul ceiling, same run
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    mm_ms = timed(lambda it: torch.matmul(a, b), 20)
    mm_tf = 2 * 8192**3 / mm_ms * 1e-9
    del a, b
    print(f"bf16 matmul 8192^3: {mm_tf:.0f} TFLOP/s", flush=True)
    if args.fp8:
        mm8 = fp8_matmul_ceiling(dev)
        mm8_tf = mm8[True]
        print(f"e4m3 matmul 8192^3 (torch._scaled_mm): {mm8[True]:.0f} TFLOP/s with fast accumulation, "
              f"{mm8[False]:.0f} without", flush=True)

    rows = []
    dims = [int(x) for x in args.dims.split(",")]
    lens = [int(x) for x in args.lens.split(",")]
    for d in dims:
        for causal in (False, True):
            for sl in lens:
                heads, batch = 2048 // d, 16384 // sl
                sets = []
                for s in range(2):
                    q, k, v = (torch.randn(batch, sl, heads, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
                    o = torch.empty_like(q)
                    lse = torch.empty(batch, heads, sl, device=dev, dtype=torch.float32)
                    sets.append((q, k, v, o, lse))
                stream = torch.cuda.current_stream().cuda_stream
                flops = 4.0 * sl * sl * d * heads * batch * (0.5 if causal else 1.0)

                def run_ours(it):
                    q, k, v, o, lse = sets[it & 1]
                    forward(lib, q, k, v, o, lse, causal, stream)

                def run_sdpa(backend):
                    def f(it):
                        q, k, v = sets[it & 1][:3]
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                  v.transpose(1, 2), is_causal=causal)
                    return f

                fns = {"ours": run_ours}
                for label, vlib in variants:
                    def run_var(it, vlib=vlib):
                        q, k, v, o, lse = sets[it & 1]
                        forward(vlib, q, k, v, o, lse, causal, stream)
                    fns[label] = run_var
                fns["flash"] = run_sdpa(SDPBackend.FLASH_ATTENTION)
                fns["cudnn"] = run_sdpa(SDPBackend.CUDNN_ATTENTION)
                fp8 = {}
                if args.fp8:
                    f8 = [Fp8Set(lib, args, q, k, v, lse) for q, k, v, _, lse in sets]
                    for f in f8:  # quantized once before timing; the contenders below redo it in place
                        f.quantize(stream)
                        f.read_per_tensor()
                    torch.cuda.synchronize()
                    cur = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731 (graph capture changes it)
                    fp8_fns = {"fp8": lambda it: f8[it & 1].forward(causal, cur()),
                               "quant": lambda it: f8[it & 1].quantize(cur()),
                               "e2e": lambda it: (f8[it & 1].quantize(cur()), f8[it & 1].forward(causal, cur()))}
                    for label, vlib in variants:  # the other builds' FP8 on the same codes
                        if hasattr(vlib, "fa_bench_forward_fp8"):
                            fp8_fns["fp8 " + label] = lambda it, vlib=vlib: f8[it & 1].forward(causal, cur(), vlib)
                    fns.update(fp8_fns)
                # every contender once per rep, in shuffled order (bench/timing.py)
                ms, failed = interleaved(fns, args.reps)
                res = {key: flops / t * 1e-9 for key, t in ms.items()}
                for key, e in failed.items():  # a backend may refuse a shape
                    print(f"  {key} failed at d{d} s{sl}: {str(e).splitlines()[0][:120]}", flush=True)
                    res[key] = float("nan")
                if args.fp8:
                    fp8 = fp8_point(args, f8, fns, fp8_fns, ms, flops, lambda it: forward(
                        lib, *sets[it & 1], causal, torch.cuda.current_stream().cuda_stream))
                # agreement with SDPA (flash) on set 0, as a sanity check
                run_ours(0)
                err = float("nan")
                if "flash" in ms:
                    ref = run_sdpa(SDPBackend.FLASH_ATTENTION)(0).transpose(1, 2)
                    err = (sets[0][3].float() - ref.float()).abs().max().item()
                    if "fp8" in ms:  # ours FP8 on set 0 against the same bf16 result
                        f8[0].forward(causal, stream)
                        fp8["rmse"] = ((f8[0].o.float() - ref.float()).norm() / ref.float().norm()).item()
                row = dict(d=d, causal=causal, seqlen=sl, batch=batch, heads=heads, err=err, **res, **fp8)
                rows.append(row)
                print(f"d{d:<3} {'causal' if causal else 'full  '} s{sl:<6} ours {res['ours']:6.1f}  "
                      f"flash {res['flash']:6.1f}  cudnn {res['cudnn']:6.1f}  "
                      f"ours/flash {res['ours'] / res['flash']:.2f}  ours/cudnn {res['ours'] / res['cudnn']:.2f}  "
                      f"max|ours-flash| {err:.2e}" +
                      "".join(f"  {label} {res[label]:6.1f}" for label, _ in variants), flush=True)
                if args.fp8:
                    print(f"       FP8 {res['fp8']:6.1f} ({res['fp8'] / res['ours']:.2f}x ours bf16, "
                          f"{res['fp8'] / res['cudnn']:.2f}x cudnn)  quant {row['quant_us']:.0f} us "
                          f"({row['quant_gbs']:.0f} GB/s)  quant+attend {res['e2e']:6.1f}  sustained: "
                          f"FP8 {row['sus_fp8']:6.1f} bf16 {row['sus_ours']:6.1f} cudnn {row['sus_cudnn']:6.1f} "
                          f"quant+attend {row['sus_e2e']:6.1f}  rel. RMSE vs flash {row['rmse']:.2e}" +
                          "".join(f"  FP8 {k[4:]} {res[k]:6.1f} (sustained {row['sus_' + k]:6.1f})"
                                  for k in fp8_fns if k.startswith("fp8 ")), flush=True)
                    del f8, fp8_fns, fns  # (their closures hold the FP8 sets)
                del sets
                torch.cuda.empty_cache()

    # memory point: batch 1, 16 heads, d 128, seqlen 131072
    mem_line = ""
    if not args.no_memory_point:
        sl, h, d = 131072, 16, 128
        q, k, v = (torch.randn(1, sl, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(1, h, sl, device=dev, dtype=torch.float32)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_alloc = torch.cuda.memory_allocated()
        free0, total = torch.cuda.mem_get_info()
        ms = event_ms(lambda: forward(lib, q, k, v, o, lse, False, torch.cuda.current_stream().cuda_stream))
        free1, _ = torch.cuda.mem_get_info()
        peak = torch.cuda.max_memory_allocated() - base_alloc
        ok = torch.isfinite(o).all().item() and torch.isfinite(lse).all().item()
        tf = 4.0 * sl * sl * d * h / ms * 1e-9
        mem_line = (f"memory point: batch 1, 16 heads, d128, seqlen 131072, non-causal: {ms:.0f} ms "
                    f"({tf:.0f} TFLOP/s); Q, K, V, O {q.numel() * 2 / 2**20:.0f} MiB each, L "
                    f"{lse.numel() * 4 / 2**20:.0f} MiB; device memory beyond them: torch peak delta "
                    f"{peak} B, cudaMemGetInfo free before - after {free0 - free1} B; outputs finite: {ok}")
        print(mem_line, flush=True)
        del q, k, v, o, lse
        torch.cuda.empty_cache()

    # table + plot
    os.makedirs(args.out, exist_ok=True)
    tag = f"{date}_{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')}_fwd" + ("-fp8" if args.fp8 else "")
    md = [f"# flashattn forward vs PyTorch SDPA, bf16 — {name}, {date}", "",
          *([f"Extra columns, other builds of ours timed in the same run: "
             f"{', '.join(f'{label} = {path}' for label, path in (v.split('=', 1) for v in args.variant))}", ""]
            if variants else []),
          f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; FA3-paper grid "
          f"(batch x seqlen = 16k, hidden 2048); TFLOP/s = 4 sq sk d h b / time (halved for causal); "
          f"median of {args.reps} runs (CUDA events) after warm-up, the contenders interleaved "
          f"(each rep times each once, in shuffled order, after a GPU sleep so host launch time is not counted: bench/timing.py).", "",
          f"bf16 matmul ceiling (8192^3 torch.matmul, same run): **{mm_tf:.0f} TFLOP/s**", "",
          "| head dim | causal | seqlen | batch x heads | ours | SDPA flash | SDPA cuDNN | ours/flash | ours/cuDNN | "
          "ours/matmul | max abs diff vs flash |" + "".join(f" {label} |" for label, _ in variants),
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |" + " --- |" * len(variants)]
    for r in rows:
        md.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['batch']} x {r['heads']} | "
                  f"{r['ours']:.1f} | {r['flash']:.1f} | {r['cudnn']:.1f} | {r['ours'] / r['flash']:.2f} | "
                  f"{r['ours'] / r['cudnn']:.2f} | {r['ours'] / mm_tf:.2f} | {r['err']:.1e} |" +
                  "".join(f" {r[label]:.1f} |" for label, _ in variants))
    if mem_line:
        md += ["", mem_line]
    if args.fp8:
        how = (f"fa_quantize_cuda{' with the Hadamard rotation of Q and K' if args.fp8_hadamard else ''}"
               if args.fp8_quant == "lib" else "torch ops (amax / 448, torch.float8_e4m3fn)")
        md += ["", "## FP8 (e4m3) forward, same run", "",
               f"Q, K, V quantized {'per tensor' if args.fp8_per_tensor else 'per block of 128 rows'} by {how}; "
               f"O bf16. e4m3 matmul ceiling (torch._scaled_mm 8192^3, same run): **{mm8[True]:.0f} TFLOP/s** "
               f"with fast accumulation, {mm8[False]:.0f} without. Single calls as above; quant = Q, K and V "
               f"quantized (time, and GB/s of 2 bytes read + 1 written an element); quant + attend = both, "
               f"TFLOP/s of the attention's FLOPs. Sustained: CUDA-graph replays of {SUSTAINED_CALLS} "
               f"back-to-back calls, interleaved. Rel. RMSE: ours FP8 against SDPA flash (bf16) on the same "
               f"inputs." + (" Per tensor, the descales are read back to the host once per input set (fa_problem "
                             "takes them as floats): quant + attend leaves that sync out." if args.fp8_per_tensor
                             else ""), "",
               "| head dim | causal | seqlen | ours FP8 | ours bf16 | SDPA cuDNN | SDPA flash | FP8/bf16 | FP8/cuDNN | "
               "FP8/e4m3 matmul | quant (us) | quant GB/s | quant + attend | sustained FP8 | sustained bf16 | "
               "sustained cuDNN | sustained quant + attend | rel. RMSE vs flash |" +
               "".join(f" FP8 {label} | sustained FP8 {label} |" for label, _ in variants),
               "|" + " --- |" * (18 + 2 * len(variants))]
        for r in rows:
            md.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['seqlen']} | {r['fp8']:.1f} | "
                      f"{r['ours']:.1f} | {r['cudnn']:.1f} | {r['flash']:.1f} | {r['fp8'] / r['ours']:.2f} | "
                      f"{r['fp8'] / r['cudnn']:.2f} | {r['fp8'] / mm8_tf:.2f} | {r['quant_us']:.0f} | "
                      f"{r['quant_gbs']:.0f} | {r['e2e']:.1f} | {r['sus_fp8']:.1f} | {r['sus_ours']:.1f} | "
                      f"{r['sus_cudnn']:.1f} | {r['sus_e2e']:.1f} | {r['rmse']:.1e} |" +
                      "".join(f" {r.get('fp8 ' + label, float('nan')):.1f} | "
                              f"{r.get('sus_fp8 ' + label, float('nan')):.1f} |" for label, _ in variants))
    with open(os.path.join(args.out, tag + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md), flush=True)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(2, len(dims), figsize=(5 * len(dims), 8), squeeze=False)
        for ci, causal in enumerate((False, True)):
            for di, d in enumerate(dims):
                ax = axes[ci][di]
                sel = [r for r in rows if r["d"] == d and r["causal"] == causal]
                xs = [r["seqlen"] for r in sel]
                for key, label in (("ours", "flashattn (ours)"), ("flash", "SDPA flash (FA2)"),
                                   ("cudnn", "SDPA cuDNN")) + ((("fp8", "flashattn FP8 (ours)"),) if args.fp8 else ()):
                    ax.plot(xs, [r[key] for r in sel], marker="o", label=label)
                ax.axhline(mm_tf, color="gray", linestyle="--", label=f"bf16 matmul {mm_tf:.0f}")
                if args.fp8:
                    ax.axhline(mm8_tf, color="gray", linestyle=":", label=f"e4m3 matmul {mm8_tf:.0f}")
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs)
                ax.set_xticklabels([f"{x // 1024}k" if x >= 1024 else str(x) for x in xs])
                ax.set_title(f"d {d}, {'causal' if causal else 'non-causal'}")
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"flashattn forward vs PyTorch SDPA, bf16{' and our FP8' if args.fp8 else ''}, {name}, {date}")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, tag + ".png"), dpi=90)
    except Exception as e:
        print("plot failed:", e)
    print("wrote", os.path.join(args.out, tag + ".{md,png}"))


if __name__ == "__main__":
    # `vs_torch.py decode ...` and `vs_torch.py backward ...`: the decode and
    # backward grids, each kept in its own file beside this one (their own
    # --lib and --variant options; see their docstrings).
    if len(sys.argv) > 1 and sys.argv[1] in ("decode", "backward"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        mode = sys.argv.pop(1)
        mod = __import__("vs_torch_" + mode)
        sys.exit(mod.main())
    sys.exit(main())
