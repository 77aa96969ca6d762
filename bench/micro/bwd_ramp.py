"""Does a backward slow down as a loop of calls goes on (power, clocks), and does cuDNN's?
Issue 50's loops: at d 128 non-causal 4k-8k ours lost 5-9% from single calls to loops of 8
calls, SDPA cuDNN 1-4%. This times N back-to-back calls of each contender with an event
between every two calls (no gaps added), after an idle pause, and prints the per-call time of
calls 1, 2-8, 9-32, 33-128 and 129-N, with the SM clock and power nvidia-smi saw meanwhile
(sampled every 20 ms in the background when nvidia-smi exists).

  python3 bench/micro/bwd_ramp.py --lib build/libfa_bench.so [--dim 128] [--seqlen 4096]
      [--causal] [--calls 400] [--rounds 3] [--pause 1.0]"""
import argparse, ctypes, os, subprocess, sys, time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from vs_torch_backward import FaProblem, view  # noqa: E402  (bench/vs_torch_backward.py)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfa_bench.so")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pause", type=float, default=1.0, help="idle seconds before each loop")
    a = ap.parse_args()
    lib = ctypes.CDLL(a.lib)
    lib.fa_backward_cuda.restype = ctypes.c_int
    lib.fa_backward_cuda_workspace_size.restype = ctypes.c_int
    d, sq = a.dim, a.seqlen
    b, h = 16384 // sq, 2048 // d
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    dot = do.transpose(1, 2)
    with torch.no_grad():
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, a.causal)[:2]
    o = o.transpose(1, 2)
    lse = lse[..., :sq].contiguous()
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    p = FaProblem()
    p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.head_dim, p.causal = b, sq, sq, h, d, int(a.causal)
    ws_bytes = ctypes.c_size_t(0)
    assert lib.fa_backward_cuda_workspace_size(ctypes.byref(p), ctypes.byref(ws_bytes)) == 0
    ws = torch.empty(ws_bytes.value, dtype=torch.uint8, device="cuda")
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    args = (ctypes.byref(p), view(q), view(k), view(v), view(o), view(do), ctypes.c_void_p(lse.data_ptr()),
            view(dq), view(dk), view(dv), ctypes.c_void_p(ws.data_ptr()), ctypes.c_size_t(ws_bytes.value), stream)

    def ours():
        if lib.fa_backward_cuda(*args) != 0:
            raise RuntimeError("fa_backward_cuda failed")
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out_c = F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)

    def cudnn():
        torch.autograd.grad(out_c, (qt, kt, vt), dot, retain_graph=True)
    fns = {"ours": ours, "cudnn": cudnn}
    for f in fns.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    flops = 2.5 * 4 * sq * sq * d * h * b / (2 if a.causal else 1)

    smi = None
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu",
                                "--format=csv,noheader,nounits", "-lms", "20"],
                               stdout=subprocess.PIPE, text=True)
    except OSError:
        pass
    windows = []
    spans = [(1, 1), (2, 8), (9, 32), (33, 128), (129, a.calls)]
    print(f"# {torch.cuda.get_device_name()}, d {d}, seqlen {sq}, batch {b}, heads {h}, causal {int(a.causal)}, "
          f"{a.calls} back-to-back calls after a {a.pause} s pause; TFLOP/s of the calls in each span")
    print(f"{'round':>5} {'who':>6} " + " ".join(f"{f'{lo}-{hi}':>9}" for lo, hi in spans))
    for r in range(a.rounds):
        for name in (("ours", "cudnn") if r % 2 == 0 else ("cudnn", "ours")):
            f = fns[name]
            time.sleep(a.pause)
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.calls + 1)]
            t0 = time.time()
            ev[0].record()
            for i in range(a.calls):
                f()
                ev[i + 1].record()
            torch.cuda.synchronize()
            windows.append((name, t0, time.time()))
            ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(a.calls)]
            cols = []
            for lo, hi in spans:
                part = sorted(ms[lo - 1:hi])
                cols.append(flops / part[len(part) // 2] / 1e9 if part else float("nan"))
            print(f"{r:>5} {name:>6} " + " ".join(f"{c:9.1f}" for c in cols), flush=True)
    if smi:
        smi.terminate()
        lines = smi.communicate()[0].strip().split("\n")
        samples = []
        for ln in lines:
            try:
                ts, clk, pw, tc = [x.strip() for x in ln.split(",")]
                # (nvidia-smi prints local time, which mktime reads as local time)
                t = time.mktime(time.strptime(ts.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + ts.split(".")[1])
                samples.append((t, float(clk), float(pw), float(tc)))
            except (ValueError, IndexError):
                continue
        print("# nvidia-smi during each loop: median SM MHz, median W, max C, samples")
        for name, t0, t1 in windows:
            s = [x for x in samples if t0 <= x[0] <= t1]
            if s:
                med = lambda i: sorted(y[i] for y in s)[len(s) // 2]  # noqa: E731
                print(f"{name:>6} {med(1):7.0f} {med(2):7.1f} {max(y[3] for y in s):5.0f} {len(s):4d}")
            else:
                print(f"{name:>6} (no samples)")


if __name__ == "__main__":
    sys.exit(main())
