"""bench/profile_decode.py LIB - kernel start / end times (torch.profiler, CUPTI) of CUDA-graph
replays of 8 decode calls: ours (LIB = build/libfa_bench_decode.so) beside SDPA cuDNN and flash, batch
32 x 4k, 32 x 32k, 8 x 4k, d 128, 32 / 8 heads, bf16, contiguous cache. Per contender: the kernels, their
durations, the gaps between them (negative: a programmatic dependent launch started before the
one before it ended) and the time per kernel from first end to last end."""
import json, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import capture  # noqa: E402  (bench/timing.py)
from vs_torch_decode import HQ, HKV, D, load  # noqa: E402  (the benchmark's shapes and library loader)
lib = load(sys.argv[1])
out = os.environ.get("OUT", ".")
for batch, L in ((32, 4096), (32, 32768), (8, 4096)):
    k = torch.randn(batch, L, HKV, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, L, HKV, D, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(batch, 1, HQ, D, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    seqlens = torch.full((batch,), L, dtype=torch.int32, device="cuda")
    ws_bytes = lib.fa_bench_decode_ws(batch, 1, HQ, HKV, D, L, 0, None, 0, 0, 0)
    ws = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device="cuda")
    def ours(i):
        st = lib.fa_bench_decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), seqlens.data_ptr(), None,
                                 batch, 1, HQ, HKV, D, L, 0, 0, 0, 2, 0, ws.data_ptr(), ws_bytes,
                                 torch.cuda.current_stream().cuda_stream)
        assert st == 0
    def sdpa(backend):
        def f(i):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True)
        return f
    graphs = {"ours": capture(ours, 8), "cudnn": capture(sdpa(SDPBackend.CUDNN_ATTENTION), 8),
              "flash": capture(sdpa(SDPBackend.FLASH_ATTENTION), 8)}
    for name, (g, calls) in graphs.items():
        for _ in range(3): g.replay()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3): g.replay()
            torch.cuda.synchronize()
        fn = f"{out}/trace_{name}_{batch}_{L}.json"
        prof.export_chrome_trace(fn)
        ev = [e for e in json.load(open(fn))["traceEvents"] if e.get("cat") == "kernel"]
        ev.sort(key=lambda e: e["ts"])
        names = sorted(set(e["name"][:60] for e in ev))
        ends = [e["ts"] + e["dur"] for e in ev]
        durs = [e["dur"] for e in ev]
        gaps = [ev[i + 1]["ts"] - ends[i] for i in range(len(ev) - 1)]
        per = (ends[-1] - ends[0]) / (len(ev) - 1) if len(ev) > 1 else 0
        print(f"batch {batch} L {L} {name}: {len(ev)} kernels in 3 replays; kernels: {names}")
        print(f"   dur us: min {min(durs):.1f} median {sorted(durs)[len(durs)//2]:.1f} max {max(durs):.1f}; "
              f"gap (next start - this end) us: min {min(gaps):.1f} median {sorted(gaps)[len(gaps)//2]:.1f} max {max(gaps):.1f}; "
              f"end-to-end per kernel {per:.1f}")
        os.remove(fn)
    del k, v, graphs
    torch.cuda.empty_cache()
