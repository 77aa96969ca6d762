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

  python3 bench/vs_torch.py --lib build/libfa_bench.so --out bench/results
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
from timing import event_ms, interleaved  # noqa: E402  (bench/timing.py)
from torch.nn.attention import SDPBackend, sdpa_kernel


def load(path):
    """The bench library (bench/fa_bench_lib.cu) with its functions' C types."""
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.fa_bench_forward.restype = ctypes.c_int
    lib.fa_bench_forward.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int] * 8 + [ctypes.c_void_p]
    lib.fa_bench_last_error.restype = ctypes.c_char_p
    return lib


def forward(lib, q, k, v, o, lse, causal, stream):
    """Our bf16 forward through the bench library: q, o [b, sq, h, d], k, v [b, sk, hkv, d], lse
    [b, h, sq] (torch tensors on the GPU), on the CUDA stream handle `stream`."""
    bsz, sq, h, d = q.shape
    st = lib.fa_bench_forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                              bsz, sq, k.shape[1], h, k.shape[2], d, int(causal), 1, stream)
    if st != 0:
        raise RuntimeError("fa_forward_cuda: " + lib.fa_bench_last_error().decode())


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
    args = ap.parse_args()

    lib = load(args.lib)
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
                # every contender once per rep, in shuffled order (bench/timing.py)
                ms, failed = interleaved(fns, args.reps)
                res = {key: flops / t * 1e-9 for key, t in ms.items()}
                for key, e in failed.items():  # a backend may refuse a shape
                    print(f"  {key} failed at d{d} s{sl}: {str(e).splitlines()[0][:120]}", flush=True)
                    res[key] = float("nan")
                # agreement with SDPA (flash) on set 0, as a sanity check
                run_ours(0)
                err = float("nan")
                if "flash" in ms:
                    ref = run_sdpa(SDPBackend.FLASH_ATTENTION)(0).transpose(1, 2)
                    err = (sets[0][3].float() - ref.float()).abs().max().item()
                row = dict(d=d, causal=causal, seqlen=sl, batch=batch, heads=heads, err=err, **res)
                rows.append(row)
                print(f"d{d:<3} {'causal' if causal else 'full  '} s{sl:<6} ours {res['ours']:6.1f}  "
                      f"flash {res['flash']:6.1f}  cudnn {res['cudnn']:6.1f}  "
                      f"ours/flash {res['ours'] / res['flash']:.2f}  ours/cudnn {res['ours'] / res['cudnn']:.2f}  "
                      f"max|ours-flash| {err:.2e}" +
                      "".join(f"  {label} {res[label]:6.1f}" for label, _ in variants), flush=True)
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
    tag = f"{date}_{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')}_fwd"
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
                                   ("cudnn", "SDPA cuDNN")):
                    ax.plot(xs, [r[key] for r in sel], marker="o", label=label)
                ax.axhline(mm_tf, color="gray", linestyle="--", label=f"bf16 matmul {mm_tf:.0f}")
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs)
                ax.set_xticklabels([f"{x // 1024}k" if x >= 1024 else str(x) for x in xs])
                ax.set_title(f"d {d}, {'causal' if causal else 'non-causal'}")
                ax.set_xlabel("seqlen")
                ax.set_ylabel("TFLOP/s")
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"flashattn forward vs PyTorch SDPA, bf16, {name}, {date}")
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
