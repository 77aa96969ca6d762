#!/usr/bin/env python3
"""bench/vs_torch_backward.py - flashattn's GPU backward beside PyTorch SDPA's
flash (FlashAttention-2) and cuDNN backward, on the FlashAttention-3 paper's
grid: batch * seqlen = 16k tokens, hidden 2048 (heads = 2048 / d), bf16,
d 64 / 128 / 256, causal and not, seqlen 512 .. 16k.

TFLOP/s = 2.5 * 4 * sq * sk * d * heads * batch (halved for causal) / time.
Each timing is the median of CUDA-event timings after warm-up, the contenders
interleaved (each rep times each once, in shuffled order: bench/timing.py); the
backward of SDPA is timed as autograd.grad of its output (its backward kernels
only).

Usage: python3 bench/vs_torch_backward.py [--lib build/libfa_bench.so] [--quick]
       [--dims 64,128] [--seqlens 512,2048] [--variant label=other/libfa_bench.so ...] [--sustained]
       [--det-column] [--train-step]   (with --det-column a --variant labelled det-NAME runs
       deterministic too: e.g. another build's deterministic mode beside ours)
(--train-step: also a training step, forward + backward, ours (fa_bench_forward then
fa_backward_cuda) beside SDPA flash's and cuDNN's (the forward with autograd, then its
backward), interleaved; columns step:*, TFLOP/s of 3.5x the forward FLOPs)
(--sustained: also CUDA-graph replays of 8 back-to-back calls, interleaved, bench/timing.py's
sustained(); columns sus:*)
(--softcap C, --alibi, --dropout P: our backward (and every --variant) with that feature: softcap
C (0 = off), ALiBi slopes 2^(-8 (i + 1) / heads), dropout probability P (fixed seed). O and L
then come from our own forward with the same feature; SDPA has no softcap, so its columns stay
the PLAIN baseline (no feature) and say so, and maxrel-diff compares ours with the first
--variant on the same feature (nan without one). Not with --train-step.)
(--varlen: the same tokens as a variable-length batch (cu_seqlens): sequences of random lengths
from seqlen / 2 to 3 seqlen / 2 (a fixed seed), packed, summing to the point's batch x seqlen;
TFLOP/s from the sum of their lengths squared. A feature as above: SDPA's columns stay the plain
problem of equal lengths.)
(make build/libfa_bench.so: the library as a shared object)."""
import argparse, ctypes, datetime, itertools, os, random, sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved, sustained  # noqa: E402  (bench/timing.py)


class FaTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("batch_stride", ctypes.c_int64),
                ("seq_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64)]


class FaBlockMask(ctypes.Structure):
    _fields_ = [("block_q", ctypes.c_int), ("block_k", ctypes.c_int), ("batch", ctypes.c_int),
                ("heads", ctypes.c_int), ("kv_num_blocks", ctypes.c_void_p), ("kv_indices", ctypes.c_void_p),
                ("full_kv_num_blocks", ctypes.c_void_p), ("full_kv_indices", ctypes.c_void_p)]


# fa_problem of flashattn.h, field for field: the library reads the whole struct, so a field missing
# here would be read from whatever memory follows (checked against the library's sizeof below).
class FaProblem(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int),
                ("heads_q", ctypes.c_int), ("heads_kv", ctypes.c_int), ("head_dim", ctypes.c_int),
                ("head_dim_v", ctypes.c_int), ("scale", ctypes.c_float), ("causal", ctypes.c_int),
                ("sliding_window", ctypes.c_int), ("window_left", ctypes.c_int),
                ("window_right", ctypes.c_int), ("softcap", ctypes.c_float),
                ("alibi_slopes", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p),
                ("cu_seqlens_k", ctypes.c_void_p), ("seqlens_k", ctypes.c_void_p),
                ("block_table", ctypes.c_void_p), ("page_size", ctypes.c_int),
                ("pages_per_seq", ctypes.c_int), ("num_pages", ctypes.c_int),
                ("dropout_p", ctypes.c_float), ("dropout_seed", ctypes.c_uint64),
                ("dropout_offset", ctypes.c_uint64), ("num_splits", ctypes.c_int),
                ("deterministic", ctypes.c_int), ("descale_q", ctypes.c_float),
                ("descale_k", ctypes.c_float), ("descale_v", ctypes.c_float),
                ("descale_q_block", ctypes.c_void_p), ("descale_k_block", ctypes.c_void_p),
                ("descale_v_block", ctypes.c_void_p), ("block_mask", FaBlockMask)]


FA_BF16 = 2


def view(x):
    """fa_tensor of a [b, s, h, d] torch tensor (any strides, d contiguous)."""
    assert x.stride(3) == 1
    return FaTensor(x.data_ptr(), FA_BF16, x.stride(0), x.stride(1), x.stride(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfa_bench.so")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--train-step", action="store_true",
                    help="also forward + backward, ours beside SDPA flash and cuDNN (columns step:*)")
    ap.add_argument("--det-column", action="store_true",
                    help="also our deterministic mode, timed in the same run (column det)")
    ap.add_argument("--dims", default="64,128,256", help="head dims, comma-separated")
    ap.add_argument("--seqlens", default=None, help="seqlens, comma-separated (default: 512 .. 16384)")
    ap.add_argument("--sustained", action="store_true",
                    help="also a sustained loop: CUDA-graph replays of 8 back-to-back calls, interleaved")
    ap.add_argument("--variant", action="append", default=[],
                    help="label=path: another build of the library, timed in the same run (extra column)")
    ap.add_argument("--softcap", type=float, default=0.0, help="softcap C for ours and the variants (0 = off)")
    ap.add_argument("--alibi", action="store_true", help="ALiBi for ours and the variants")
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout probability for ours and the variants")
    ap.add_argument("--varlen", action="store_true", help="ours and the variants on cu_seqlens (random lengths)")
    a = ap.parse_args()
    feat = a.softcap > 0 or a.alibi or a.dropout > 0 or a.varlen
    if feat and a.train_step:
        sys.exit("--train-step times the plain forward: not with --softcap / --alibi / --dropout")

    def maxrel(pairs):  # the largest |ours - reference| over max |reference|, of dQ, dK, dV
        return max((x - r).abs().max().item() / r.abs().max().item() for x, r in pairs)

    def load(path):
        lib = ctypes.CDLL(path)
        lib.fa_backward_cuda.restype = ctypes.c_int
        lib.fa_forward_cuda.restype = ctypes.c_int
        lib.fa_bench_forward.restype = ctypes.c_int
        lib.fa_backward_cuda_workspace_size.restype = ctypes.c_int
        lib.fa_last_error.restype = ctypes.c_char_p
        if hasattr(lib, "fa_bench_sizeof_problem") and lib.fa_bench_sizeof_problem() != ctypes.sizeof(FaProblem):
            sys.exit(f"{path}: sizeof(fa_problem) {lib.fa_bench_sizeof_problem()} != FaProblem's "
                     f"{ctypes.sizeof(FaProblem)}: update FaProblem to flashattn.h")
        return lib
    lib = load(a.lib)
    variants = [(v.split("=", 1)[0], load(v.split("=", 1)[1])) for v in a.variant]
    if a.det_column:  # the main build again, deterministic (a problem and workspace of its own below)
        variants.append(("det", lib))

    def ws_need(prob):
        """The workspace bytes for prob: the most any build asks (one buffer serves ours and
        every variant, and another build's layout may need more)."""
        need = []
        for l in [lib] + [l for _, l in variants]:
            n = ctypes.c_size_t(0)
            assert l.fa_backward_cuda_workspace_size(ctypes.byref(prob), ctypes.byref(n)) == 0
            need.append(n.value)
        return max(need)
    dev = torch.cuda.get_device_name()
    print(f"# flashattn backward vs SDPA, bf16, {dev}, torch {torch.__version__}, "
          f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    # with a feature, ours is checked against the first variant that is not a det-* one
    ref = next(((n, l) for n, l in variants if not n.startswith("det")), None)
    if feat:
        print(f"# features (ours and every variant): softcap {a.softcap}, alibi {int(a.alibi)}, dropout {a.dropout}, "
              f"varlen {int(a.varlen)}; "
              f"sdpa-flash, cudnn and ours/flash: SDPA WITHOUT the features (plain baseline); maxrel-diff: ours vs "
              f"{ref[0] if ref else '(no variant: nan)'} on the same feature")
    print(f"{'d':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} | {'ours':>7} {'sdpa-flash':>10} {'cudnn':>7}"
          f" | {'ours/flash':>10} {'maxrel-diff':>11}" + "".join(f" {n:>8}" for n, _ in variants) +
          ("".join(f" {'sus:' + n:>10}" for n in ["ours", "flash", "cudnn"] + [n for n, _ in variants])
           if a.sustained else "") +
          ("".join(f" {'step:' + n:>10}" for n in ["ours", "flash", "cudnn"]) if a.train_step else "") +
          "   (TFLOP/s)")
    side = torch.cuda.Stream()
    seqlens = [512, 1024, 2048, 4096, 8192, 16384]
    if a.quick:
        seqlens = [2048, 8192]
    if a.seqlens:
        seqlens = [int(x) for x in a.seqlens.split(",")]
    torch.manual_seed(0)
    for d in (int(x) for x in a.dims.split(",")):
        for causal in (False, True):
            for sq in seqlens:
                with torch.cuda.stream(side):  # (the point on one side stream: its graphs are captured there)
                    b, h = 16384 // sq, 2048 // d
                    q, k, v, do = (torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                    dot = do.transpose(1, 2)
                    flops = 2.5 * 4 * sq * sq * d * h * b / (2 if causal else 1)
                    fns = {}
                    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel([be]):  # the forward picks the backend; its graph keeps it
                                out_b = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                            fns[name] = lambda it, out_b=out_b: torch.autograd.grad(
                                out_b, (qt, kt, vt), dot, retain_graph=True)
                        except Exception:  # backend unavailable for this shape
                            pass
                    # O and L from SDPA's flash forward (its logsumexp is [b, h, sq], natural log).
                    with torch.no_grad():
                        o, lse = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, causal)[:2]
                    o = o.transpose(1, 2)  # [b, sq, h, d] view
                    lse = lse[..., :sq].contiguous()
                    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
                    p = FaProblem()
                    p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.head_dim = b, sq, sq, h, d
                    p.causal = int(causal)
                    p.deterministic = int(a.deterministic)
                    slopes = cu = None
                    if a.varlen:  # ours: b sequences of random lengths, b sq tokens in all
                        lens = varlen_lengths(b, sq)
                        cu = torch.tensor([0] + list(itertools.accumulate(lens)), device="cuda", dtype=torch.int32)
                        p.batch, p.seqlen_q, p.seqlen_k = len(lens), max(lens), max(lens)
                        p.cu_seqlens_q = p.cu_seqlens_k = cu.data_ptr()
                        flops_ours = 2.5 * 4 * sum(n * n for n in lens) * d * h / (2 if causal else 1)
                    if feat:
                        p.softcap, p.dropout_p, p.dropout_seed = a.softcap, a.dropout, 1234
                        if a.alibi:
                            slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], device="cuda")
                            p.alibi_slopes = slopes.data_ptr()
                        # O and L of the featured problem: our forward (its workspace allocated by itself)
                        o = torch.empty_like(q)
                        lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)  # ([h, b sq] with cu_seqlens)
                        s = lib.fa_forward_cuda(ctypes.byref(p), view(q), view(k), view(v), view(o),
                                                ctypes.c_void_p(lse.data_ptr()), None, ctypes.c_size_t(0),
                                                ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                        if s != 0:
                            raise RuntimeError(lib.fa_last_error().decode())
                    ws_bytes = ctypes.c_size_t(ws_need(p))
                    ws = torch.empty(ws_bytes.value, dtype=torch.uint8, device="cuda")
                    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
                    args = (ctypes.byref(p), view(q), view(k), view(v), view(o), view(do),
                            ctypes.c_void_p(lse.data_ptr()), view(dq), view(dk), view(dv),
                            ctypes.c_void_p(ws.data_ptr()), ctypes.c_size_t(ws_bytes.value), stream)

                    if a.det_column:
                        pd = FaProblem.from_buffer_copy(p)
                        pd.deterministic = 1
                        wsd_bytes = ctypes.c_size_t(ws_need(pd))
                        wsd = torch.empty(wsd_bytes.value, dtype=torch.uint8, device="cuda")
                        args_det = (ctypes.byref(pd),) + args[1:10] + (
                            ctypes.c_void_p(wsd.data_ptr()), ctypes.c_size_t(wsd_bytes.value), stream)

                    def run(l, args=args):
                        s = l.fa_backward_cuda(*args)
                        if s != 0:
                            raise RuntimeError(l.fa_last_error().decode())
                    fns["ours"] = lambda it: run(lib)
                    for label, l in variants:
                        # "det", and with --det-column every variant labelled det-*: deterministic
                        fns[label] = (lambda it, l=l: run(l, args_det)) if label.startswith("det") else (lambda it, l=l: run(l))
                    ms, _ = interleaved(fns)  # a backend that fails is nan below
                    keys = ["ours", "flash", "cudnn"] + [label for label, _ in variants]
                    fl = {key: flops_ours if a.varlen and key not in ("flash", "cudnn") else flops for key in keys}
                    res = {key: fl[key] / ms[key] / 1e9 if key in ms else float("nan") for key in keys}
                    extra = "".join(f" {res[label]:8.1f}" for label, _ in variants)
                    if a.sustained:  # us per call in a loop of 8 calls (the same contenders)
                        us, _ = sustained({k: f for k, f in fns.items() if k in ms}, reps=7, stream=side)
                        extra += "".join(f" {fl[k] / us[k] / 1e6 if k in us else float('nan'):10.1f}" for k in keys)
                    del fns
                    out_b = None  # frees the SDPA graphs
                    if a.train_step:
                        extra += "".join(f" {x:10.1f}" for x in train_step(lib, a, q, k, v, do, qt, kt, vt, dot, causal,
                                                                            args, flops * 3.5 / 2.5))
                    if feat:  # sanity: ours against the first variant, the same feature and seed
                        err = float("nan")
                        if ref:
                            run(ref[1])
                            gq, gk, gv = (x.clone() for x in (dq, dk, dv))
                        run(lib)
                        if ref:
                            err = maxrel(((dq, gq), (dk, gk), (dv, gv)))
                        out = gq = gk = gv = None
                    else:
                        run(lib)  # the checked result below is the main build's
                        # sanity: our dQ against SDPA flash's
                        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                            gq, gk, gv = torch.autograd.grad(out, (qt, kt, vt), dot)
                        err = maxrel((a, g.transpose(1, 2)) for a, g in ((dq, gq), (dk, gk), (dv, gv)))
                    print(f"{d:>4} {str(causal):>6} {sq:>6} {b:>5} | {res['ours']:7.1f} {res['flash']:10.1f} "
                          f"{res['cudnn']:7.1f} | {res['ours'] / res['flash']:10.2f} {err:11.2e}{extra}", flush=True)
                    del q, k, v, do, qt, kt, vt, o, lse, dq, dk, dv, ws, out, gq, gk, gv
                    wsd = slopes = cu = None
                    torch.cuda.empty_cache()


def varlen_lengths(b, sq):
    """b lengths from sq / 2 to 3 sq / 2 (seeded by the point), summing to b sq; one sequence: [sq]."""
    rng = random.Random(b * 100003 + sq)
    lens = [rng.randint(sq // 2, 3 * sq // 2) for _ in range(b)]
    while sum(lens) != b * sq:  # move the surplus or deficit one token at a time, within the range
        i = rng.randrange(b)
        step = 1 if sum(lens) < b * sq else -1
        if sq // 2 <= lens[i] + step <= 3 * sq // 2:
            lens[i] += step
    return lens


def train_step(lib, a, q, k, v, do, qt, kt, vt, dot, causal, args, flops):
    """TFLOP/s of forward + backward: ours (fa_bench_forward writing O and L, then
    fa_backward_cuda with the same workspace as the backward's timing), SDPA flash's and
    cuDNN's (the forward under autograd, then the gradients), interleaved single calls."""
    b, sq, h, d = q.shape
    o2 = torch.empty_like(q)
    lse2 = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    bargs = list(args)
    bargs[4], bargs[6] = view(o2), ctypes.c_void_p(lse2.data_ptr())

    def ours(it):
        s = lib.fa_bench_forward(ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(k.data_ptr()),
                                 ctypes.c_void_p(v.data_ptr()), ctypes.c_void_p(o2.data_ptr()),
                                 ctypes.c_void_p(lse2.data_ptr()), b, sq, sq, h, h, d, int(causal), 1, stream)
        s = s or lib.fa_backward_cuda(*bargs)
        if s != 0:
            raise RuntimeError(lib.fa_last_error().decode())
    fns = {"ours": ours}
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def sdpa(it, be=be):
            with sdpa_kernel([be]):
                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            torch.autograd.grad(out, (qt, kt, vt), dot)
        fns[name] = sdpa
    ms, _ = interleaved(fns)
    return [flops / ms[key] / 1e9 if key in ms else float("nan") for key in ("ours", "flash", "cudnn")]


if __name__ == "__main__":
    sys.exit(main())
