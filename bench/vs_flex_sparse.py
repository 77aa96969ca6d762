#!/usr/bin/env python3
"""bench/vs_flex_sparse.py - flashattn's block-sparse GPU forward (or, --backward, backward) beside FlexAttention,
same process, same run.

Issue 51, item 5 (forward; --backward: the backward, below). Loads fa_forward_cuda from the bench
library (bench/fa_bench_lib.cu, `make build/libfa_bench.so`) through ctypes and times, bf16, random inputs, per point:
  ours sparse   fa_bench_forward_sparse: the block mask (128 x 128 blocks) in the problem,
  Flex          torch.compile(flex_attention, dynamic=False) with a BlockMask made by
                BlockMask.from_kv_blocks from the SAME int32 device tensors we are given
                (kv_num_blocks / kv_indices = partial blocks, full_kv_num_blocks /
                full_kv_indices = full blocks, as create_block_mask would split them;
                mask_mod = causal for causal points, none otherwise),
  ours dense    fa_bench_forward, same causal, no block mask,
  SDPA cuDNN    dense (SDPBackend.CUDNN_ATTENTION), same causal,
  and at the document-mask points, ours varlen: the documents as a cu_seqlens batch.
Each contender is timed as single calls (CUDA events, bench/timing.py: every rep times each
contender once, in shuffled order, after a GPU sleep that hides host launch time; the median)
and as a sustained loop (CUDA-graph replays of SUSTAINED_CALLS back-to-back calls, interleaved
the same way; where a capture fails, back-to-back calls timed by events, marked '*').
Two input sets alternate (at 16k tokens each set is 4 x 64 MB, larger than L2).

Points (hidden 2048: d64 x 32 heads and d128 x 16 heads; batch x seqlen = 16k tokens):
  random    a random block bitmap per (batch, head), fixed seed, keeping each block with
            probability 5%, 10%, 25%, 50%; causal and not (causal: the bitmap AND the causal
            block triangle, probability per block of that triangle); seqlen 4k (batch 4), 16k.
            Empty query blocks are left in: both must give O = 0 there (checked).
  document  seqlen 16k (--struct-len), packed documents whose lengths are multiples of 128
            (random, fixed seed; the same in every sequence and head), causal inside each:
            block-diagonal lists + causal = 1 are then exact at token level for both contenders.
            Also ours varlen (cu_seqlens, causal: the documents as a batch) on the same data.
  window+global  seqlen 16k: key blocks within WINDOW blocks of the diagonal, the first GLOBAL
            key blocks, and the first GLOBAL query blocks see every key block; non-causal, and
            causal (the same AND the causal triangle).
  The structured masks are given to both as [batch, heads, n, n] lists (one per (batch, head),
  all equal): the random masks' shape, so Flex compiles no extra shape for them.

density = visited blocks / the blocks the dense contender visits (all blocks, or for causal the
blocks on and below the diagonal); a causal diagonal block counts as a whole block. Effective
TFLOP/s = 4 * 128 * 128 * d * (visited blocks over all batches and heads) / time, so density x
the dense FLOPs; the dense contenders' TFLOP/s use their own block count the same way (causal:
n(n+1)/2 blocks, not half of n^2). Speedups are time ratios: ours/Flex = t_Flex / t_ours,
dense/sparse = t_ours_dense / t_ours_sparse. The issue's targets: dense/sparse >= 7 at 10% of
blocks; ours/Flex >= 1.3 at every density, d64 and d128, from 4k tokens.

Correctness, once per point: max |O_ours - O_Flex| (bf16; above 0.05, or not finite, the row says
MISMATCH and the run goes on); the query rows whose block lists are empty must give O = 0 and
L = -inf in ours (else 'EMPTY-ROWS'). At the start, once, the partial/full split used here is
compared with create_block_mask's on a small problem.

Writes <out>/<date>_<device>_sparse-fwd.md (the table) and .png (effective TFLOP/s vs density).

--backward: the same points, masks and tables for the backward (dQ, dK, dV from O, L, dO), one run:
  ours sparse   fa_bench_backward_sparse (fa_backward_cuda with the block mask; O and L from our sparse
                forward, computed once per input set outside the timing),
  Flex          the compiled flex_attention's backward with the same BlockMask: its forward is run
                once per input set with requires_grad (Q, K, V leaves in its [B, H, S, D] layout), and
                each call timed is torch.autograd.grad(out, (q, k, v), dO, retain_graph=True): the
                backward graph AOTAutograd compiled for it (Flex's backward kernel and its D = rowsum(dO
                * O) prologue), no forward, no .grad accumulation (PyTorch's own
                benchmarks/transformer/score_mod.py times out.backward(dO, retain_graph=True) the same way),
  ours dense    fa_bench_backward (no block mask; O and L from our dense forward),
  SDPA cuDNN    dense, the same autograd.grad of a retained forward (SDPBackend.CUDNN_ATTENTION picks
                the backend at the forward; as bench/vs_torch_backward.py).
  Ours: the default (atomic dQ) mode; --deterministic for the deterministic one. FLOPs = 2.5 x the
  forward's (bench/vs_torch_backward.py's convention): effective TFLOP/s = 2.5 x 4 x 128 x 128 x d x
  visited blocks / time. The whole point runs on one side stream, the retained forwards included: a
  backward kernel runs on its forward's stream, so the CUDA graphs of the sustained loop are captured
  on that stream (bench/timing.py capture(stream=)). The GPU sleep before each single call is
  BWD_SLEEP x bench/timing.py's (autograd.grad's host work is longer than a ctypes call's).
  Correctness, once per point: max |dX_ours - dX_Flex| / max |dX_Flex| for dQ, dK, dV (bf16, set 0;
  above MISMATCH_TOL_BWD, or not finite: MISMATCH); the empty query blocks' dQ rows must be 0
  ('EMPTY-ROWS'). The document points have no varlen column here. Targets: ours/Flex >= 1.2 at
  every point; dense/sparse at 10% as the forward's. Writes <out>/<date>_<device>_sparse-bwd.md, .png.

  python3 bench/vs_flex_sparse.py --lib build/libfa_bench.so --out bench/results
  python3 bench/vs_flex_sparse.py --lib build/libfa_bench.so --out bench/results --backward
  python3 bench/vs_flex_sparse.py --lib build/libfa_bench.so --out /tmp/x --quick [--backward]

--ab LIB[,LIB...] (forward): other builds of the bench library (a trial's kernels) whose sparse forward
is timed as further contenders, interleaved with ours (its own masks and workspace, the same inputs);
an A/B table (their time against --lib's, single calls and sustained) follows the others, and each
build's O is checked against Flex's as ours is.
"""
import argparse
import ctypes
import datetime
import json
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402 (bench/timing.py; its SLEEP_CYCLES, set for --backward)
from timing import interleaved, sustained  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

try:
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError as e:  # noqa: F841 - reported below
    sys.exit(f"FlexAttention is not in this torch ({torch.__version__}): {e}")

BLOCK = 128               # the block mask's granularity, both contenders (the GPU kernels' tile)
SUSTAINED_CALLS = 8       # calls per CUDA graph in the sustained loop
WINDOW, GLOBAL = 4, 2     # window+global pattern: +-WINDOW blocks around the diagonal, GLOBAL blocks
MISMATCH_TOL = 0.05
MISMATCH_TOL_BWD = 0.05   # --backward: max |dX_ours - dX_Flex| / max |dX_Flex| (bf16: ~5e-3 dense vs SDPA)
BWD_FLOPS = 2.5           # backward FLOPs / forward FLOPs (bench/vs_torch_backward.py)
BWD_SLEEP = 4             # --backward: GPU sleep before a single call, x timing.SLEEP_CYCLES
SEED = 20261205
DEVICE = "cuda"          # (a CPU mock of torch.cuda and the library may set "cpu" to dry-run the script)


def causal_mod(b, h, q_idx, kv_idx):
    """Flex's mask_mod for the causal points' partial (diagonal) blocks; sq == sk, so top-left
    and our bottom-right alignment agree."""
    return q_idx >= kv_idx


# ---- the bench library ----------------------------------------------------------------------
def load(path):
    """The bench library (bench/fa_bench_lib.cu) with the C types of the entries used here."""
    lib = ctypes.CDLL(os.path.abspath(path))
    vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.fa_bench_forward.restype = i
    lib.fa_bench_forward.argtypes = [vp] * 5 + [i] * 8 + [vp]
    lib.fa_bench_last_error.restype = ctypes.c_char_p
    if not hasattr(lib, "fa_bench_forward_sparse"):
        sys.exit(f"{path} has no fa_bench_forward_sparse: rebuild it (make build/libfa_bench.so)")
    lib.fa_bench_forward_sparse.restype = i
    lib.fa_bench_forward_sparse.argtypes = [vp] * 5 + [i] * 8 + [vp] * 4 + [i] * 2 + [vp, ll, vp]
    lib.fa_bench_forward_sparse_workspace.restype = ll
    lib.fa_bench_forward_sparse_workspace.argtypes = [i] * 7 + [vp] * 4 + [i] * 2
    lib.fa_bench_forward_varlen.restype = i
    lib.fa_bench_forward_varlen.argtypes = [vp] * 7 + [i] * 8 + [vp]
    if hasattr(lib, "fa_bench_backward_sparse"):   # (--backward checks for them)
        lib.fa_bench_backward_sparse.restype = i
        lib.fa_bench_backward_sparse.argtypes = [vp] * 9 + [i] * 9 + [vp] * 4 + [i] * 2 + [vp, ll, vp]
        lib.fa_bench_backward_sparse_workspace.restype = ll
        lib.fa_bench_backward_sparse_workspace.argtypes = [i] * 8 + [vp] * 4 + [i] * 2
        lib.fa_bench_backward.restype = i
        lib.fa_bench_backward.argtypes = [vp] * 9 + [i] * 9 + [vp, ll, vp]
    return lib


def check(lib, st, what):
    if st != 0:
        raise RuntimeError(f"{what}: " + lib.fa_bench_last_error().decode())


def cur():
    """torch's current stream handle (a graph capture changes it)."""
    return torch.cuda.current_stream().cuda_stream


def ours_dense(lib, q, k, v, o, lse, causal):
    b, sq, h, d = q.shape
    check(lib, lib.fa_bench_forward(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                                    b, sq, k.shape[1], h, k.shape[2], d, int(causal), 1, cur()), "fa_forward_cuda")


def ptr(t):
    return None if t is None else t.data_ptr()


class OursMask:
    """Our block-mask arguments: the lists (int32 device tensors [B, H, qb(, kb)], B = 1 or batch,
    H = 1 or heads), mask_batch / mask_heads as fa_block_mask's, and the workspace (allocated once)."""

    def __init__(self, lib, shape, causal, lists):
        self.lib, self.shape, self.causal = lib, shape, causal
        b, s, h, d = shape
        kv_num, kv_idx, full_num, full_idx = lists
        for t in lists:
            if t is not None:
                assert t.dtype == torch.int32 and t.is_contiguous() and t.device.type == torch.device(DEVICE).type
        mb, mh = kv_idx.shape[0], kv_idx.shape[1]
        self.mask_batch = 1 if (mb == 1 and b > 1) else 0   # 1: one mask for every sequence
        self.mask_heads = 1 if (mh == 1 and h > 1) else 0   # 1: one mask for every head
        assert mb in (1, b) and mh in (1, h)
        self.lists = lists
        self.args = [ptr(t) for t in lists]
        self.ws_bytes = lib.fa_bench_forward_sparse_workspace(b, s, s, h, h, d, int(causal), *self.args,
                                                              self.mask_batch, self.mask_heads)
        if self.ws_bytes < 0:
            raise RuntimeError("fa_forward_cuda_workspace_size: " + lib.fa_bench_last_error().decode())
        self.ws = torch.empty(max(1, self.ws_bytes), dtype=torch.uint8, device=DEVICE)

    def forward(self, q, k, v, o, lse):
        b, s, h, d = q.shape
        check(self.lib, self.lib.fa_bench_forward_sparse(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), b, s, k.shape[1], h,
            k.shape[2], d, int(self.causal), 1, *self.args, self.mask_batch, self.mask_heads,
            self.ws.data_ptr() if self.ws_bytes > 0 else None, self.ws_bytes, cur()), "fa_forward_cuda (block mask)")

    def backward(self, q, k, v, o, do, lse, dq, dk, dv):
        """fa_backward_cuda with this block mask; its workspace is allocated at the first call (so that
        a forward-only run never asks for it)."""
        b, s, h, d = q.shape
        if not hasattr(self, "bwd_ws"):
            self.bwd_bytes = bwd_workspace(self.lib, self.shape, self.causal, self.args, self.mask_batch,
                                           self.mask_heads)
            self.bwd_ws = torch.empty(max(1, self.bwd_bytes), dtype=torch.uint8, device=DEVICE)
        check(self.lib, self.lib.fa_bench_backward_sparse(
            *(x.data_ptr() for x in (q, k, v, o, do, lse, dq, dk, dv)), b, s, k.shape[1], h, k.shape[2], d,
            int(self.causal), 1, DETERMINISTIC, *self.args, self.mask_batch, self.mask_heads,
            self.bwd_ws.data_ptr() if self.bwd_bytes > 0 else None, self.bwd_bytes, cur()),
            "fa_backward_cuda (block mask)")


DETERMINISTIC = 0   # fa_problem.deterministic of our backward calls (--deterministic)


def bwd_workspace(lib, shape, causal, lists=(None,) * 4, mask_batch=0, mask_heads=0):
    """fa_backward_cuda_workspace_size's bytes (lists = 4 x None: the dense backward)."""
    b, s, h, d = shape
    n = lib.fa_bench_backward_sparse_workspace(b, s, s, h, h, d, int(causal), DETERMINISTIC, *lists,
                                               mask_batch, mask_heads)
    if n < 0:
        raise RuntimeError("fa_backward_cuda_workspace_size: " + lib.fa_bench_last_error().decode())
    return n


class OursDenseBackward:
    """Our dense backward (fa_bench_backward) with its workspace, allocated once."""

    def __init__(self, lib, shape, causal):
        self.lib, self.causal = lib, causal
        self.ws_bytes = bwd_workspace(lib, shape, causal)
        self.ws = torch.empty(max(1, self.ws_bytes), dtype=torch.uint8, device=DEVICE)

    def __call__(self, q, k, v, o, do, lse, dq, dk, dv):
        b, s, h, d = q.shape
        check(self.lib, self.lib.fa_bench_backward(
            *(x.data_ptr() for x in (q, k, v, o, do, lse, dq, dk, dv)), b, s, k.shape[1], h, k.shape[2], d,
            int(self.causal), 1, DETERMINISTIC, self.ws.data_ptr() if self.ws_bytes > 0 else None, self.ws_bytes,
            cur()), "fa_backward_cuda")


# ---- masks ------------------------------------------------------------------------------------
def dense_to_lists(dense):
    """A dense block bitmap [B, H, qb, kb] (bool) -> (num [B, H, qb], indices [B, H, qb, kb]) int32,
    contiguous: each row's visited blocks first, ascending (the order of a stable descending sort)."""
    d = dense.to(torch.int32)
    num = d.sum(dim=-1, dtype=torch.int32).contiguous()
    idx = torch.argsort(d, dim=-1, descending=True, stable=True).to(torch.int32).contiguous()
    return num, idx


def lists_to_dense(num, idx):
    """The inverse of dense_to_lists, for checks: [B, H, qb, kb] bool."""
    kb = idx.shape[-1]
    col = torch.arange(kb, device=idx.device)
    valid = col < num[..., None].to(torch.int64)
    tgt = torch.where(valid, idx.to(torch.int64), kb)
    out = torch.zeros(*idx.shape[:-1], kb + 1, dtype=torch.bool, device=idx.device)
    out.scatter_(-1, tgt, True)
    return out[..., :kb]


def causal_blocks(n, dev):
    """[n, n] bool: blocks on or below the diagonal."""
    return torch.ones(n, n, dtype=torch.bool, device=dev).tril()


def split_lists(bitmap, causal):
    """The visited-block bitmap [B, H, n, n] -> (kv_num, kv_idx, full_num, full_idx) as
    create_block_mask splits a mask_mod = bitmap (AND causal): with causal the diagonal blocks are
    partial (the element mask cuts them) and the blocks below it full; without, all are full."""
    n = bitmap.shape[-1]
    if causal:
        diag = torch.eye(n, dtype=torch.bool, device=bitmap.device)
        partial, full = bitmap & diag, bitmap & ~diag & causal_blocks(n, bitmap.device)
    else:
        partial, full = torch.zeros_like(bitmap), bitmap
    return (*dense_to_lists(partial), *dense_to_lists(full))


def random_bitmap(batch, heads, n, p, causal, gen, dev):
    m = torch.rand(batch, heads, n, n, generator=gen, device=dev) < p
    return m & causal_blocks(n, dev) if causal else m


def document_lengths(total_blocks, rng):
    """Document lengths in blocks (random, 4..48 blocks = 512..6144 tokens) summing to total_blocks."""
    out, left = [], total_blocks
    while left > 0:
        n = min(left, int(torch.randint(4, 49, (1,), generator=rng).item()))
        out.append(n)
        left -= n
    return out


def document_bitmap(doc_blocks, dev):
    n = sum(doc_blocks)
    m = torch.zeros(n, n, dtype=torch.bool, device=dev)
    at = 0
    for nb in doc_blocks:
        m[at:at + nb, at:at + nb] = True
        at += nb
    return m & causal_blocks(n, dev)   # the document mask is causal inside each document


def window_global_bitmap(n, causal, dev):
    i = torch.arange(n, device=dev)
    m = ((i[:, None] - i[None, :]).abs() <= WINDOW) | (i[None, :] < GLOBAL) | (i[:, None] < GLOBAL)
    return m & causal_blocks(n, dev) if causal else m


def check_split_against_create_block_mask(dev):
    """create_block_mask with mask_mod = a block bitmap AND causal, on a small problem: does it
    give the partial / full blocks that split_lists gives? (Not timed; it evaluates the mask_mod
    at every element.)"""
    gen = torch.Generator(device=dev).manual_seed(SEED)
    b, h, s = 2, 2, 1024
    n = s // BLOCK
    res = []
    for causal in (False, True):
        bm = random_bitmap(b, h, n, 0.4, causal, gen, dev)

        def mod(bb, hh, qi, ki, bm=bm, causal=causal):
            keep = bm[bb, hh, qi // BLOCK, ki // BLOCK]
            return keep & (qi >= ki) if causal else keep

        ref = create_block_mask(mod, b, h, s, s, device=dev, BLOCK_SIZE=BLOCK)
        kvn, kvi, fn, fi = split_lists(bm, causal)
        ok = torch.equal(lists_to_dense(ref.kv_num_blocks, ref.kv_indices), lists_to_dense(kvn, kvi))
        if ref.full_kv_num_blocks is not None:
            ok = ok and torch.equal(lists_to_dense(ref.full_kv_num_blocks, ref.full_kv_indices),
                                    lists_to_dense(fn, fi))
        else:
            ok = ok and not lists_to_dense(fn, fi).any()
        res.append(f"{'causal' if causal else 'non-causal'} {'agree' if ok else 'DIFFER'}")
    return "; ".join(res)


# ---- one point -------------------------------------------------------------------------------
def make_sets(batch, s, heads, d, dev):
    sets = []
    for _ in range(2):
        q, k, v = (torch.randn(batch, s, heads, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        o_s, o_d, o_v = (torch.empty_like(q) for _ in range(3))
        lse_s, lse_d, lse_v = (torch.empty(batch, heads, s, device=dev, dtype=torch.float32) for _ in range(3))
        # Flex's own copies in its [B, H, S, D] layout, contiguous: no doubt about a hidden copy of
        # strided views inside its call (SDPA cuDNN takes the transposed views, as in vs_torch.py)
        fq, fk, fv = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        sets.append(dict(q=q, k=k, v=v, o_s=o_s, o_d=o_d, o_v=o_v, lse_s=lse_s, lse_d=lse_d, lse_v=lse_v,
                         fq=fq, fk=fk, fv=fv))
    return sets


def point_setup(args, pt):
    """The point's lists, BlockMask, our lists and block counts (forward and backward alike)."""
    d, heads, batch, s, causal, bitmap = pt["d"], pt["heads"], pt["batch"], pt["s"], pt["causal"], pt["bitmap"]
    n = s // BLOCK
    lists = split_lists(bitmap, causal)
    kvn, kvi, fn_, fi = lists
    assert kvi.shape[-1] == n and kvi.dtype == torch.int32 and kvi.is_contiguous()
    # the visited blocks over all (batch, head), and those the dense contender visits
    B_, H_ = bitmap.shape[0], bitmap.shape[1]
    per = batch * heads // (B_ * H_)   # the bitmap broadcast over batch / heads
    visited = int(bitmap.sum().item()) * per
    allowed = (n * (n + 1) // 2 if causal else n * n) * batch * heads
    blk_flops = 4.0 * BLOCK * BLOCK * d
    flops, flops_dense = blk_flops * visited, blk_flops * allowed
    density = visited / allowed

    try:
        bmask = BlockMask.from_kv_blocks(kvn, kvi, fn_, fi, BLOCK_SIZE=(BLOCK, BLOCK),
                                         mask_mod=causal_mod if causal else None, seq_lengths=(s, s))
    except TypeError:  # a torch whose from_kv_blocks has no seq_lengths (the lengths are then n x 128)
        bmask = BlockMask.from_kv_blocks(kvn, kvi, fn_, fi, BLOCK_SIZE=(BLOCK, BLOCK),
                                         mask_mod=causal_mod if causal else None)
    assert tuple(bmask.BLOCK_SIZE) == (BLOCK, BLOCK)
    if args.ours_lists == "merged":   # one list for ours: partial and full together
        ours_lists = (*dense_to_lists(bitmap), None, None)
    else:                             # the very tensors the BlockMask holds
        ours_lists = lists
    return (n, lists, bmask, ours_lists, density, flops, flops_dense)


def time_contenders(fns, errors, args, stream=None):
    """Single calls (interleaved medians, ms) and, unless --no-sustained, the sustained loop
    (us per call, and how it was timed) of the contenders fns; the failures printed."""
    ms, failed = interleaved(fns, args.reps)
    failed.update(errors)
    for key, e in failed.items():
        print(f"    {key} failed: {str(e).splitlines()[0][:160]}", flush=True)
    live = {k: f for k, f in fns.items() if k in ms}
    if args.no_sustained:
        return ms, {}, {}
    us, how = sustained(live, args.sus_reps, calls=SUSTAINED_CALLS, stream=stream)
    return ms, us, how


def record_times(row, ms, us, how, f_of):
    """The row's times and TFLOP/s of each contender in f_of ({key: its FLOPs}): single calls (ms),
    the sustained loop (us) and how it was timed; NaN where a contender did not run."""
    nan = float("nan")
    for key, fl in f_of.items():
        row["ms_" + key] = ms.get(key, nan)
        row["sus_us_" + key] = us.get(key, nan)
        row["how_" + key] = how.get(key, "")
        row["tf_" + key] = fl / row["ms_" + key] * 1e-9
        row["sus_tf_" + key] = fl / row["sus_us_" + key] * 1e-6


def empty_rows(lists, batch, heads, n):
    """The query rows [b, h, s] of query blocks that list no key block (None if there are none)."""
    nb = lists[0] + lists[2]                                         # [B_, H_, n]
    empty = (nb == 0).expand(batch, heads, n)                        # [b, h, n]
    return empty.repeat_interleave(BLOCK, dim=-1) if empty.any() else None


def run_point(lib, flex_c, args, pt, dev, ab_libs=()):
    """Times one point; returns its row (dict). ab_libs: the --ab builds, contenders ab0, ab1, ..."""
    d, heads, batch, s, causal = pt["d"], pt["heads"], pt["batch"], pt["s"], pt["causal"]
    n, lists, bmask, ours_lists, density, flops, flops_dense = point_setup(args, pt)
    sets = make_sets(batch, s, heads, d, dev)
    row = dict(pattern=pt["pattern"], d=d, heads=heads, batch=batch, s=s, causal=causal, density=density,
               nominal=pt.get("nominal"), note=pt.get("note", ""))
    fns, errors = {}, {}
    try:
        om = OursMask(lib, (batch, s, heads, d), causal, ours_lists)
        fns["sparse"] = lambda it: om.forward(*(sets[it & 1][x] for x in ("q", "k", "v", "o_s", "lse_s")))
    except Exception as e:  # noqa: BLE001 - reported; the other contenders still run
        errors["sparse"] = e
        om = None
    ab_masks = {}
    for i, alib in enumerate(ab_libs):
        key = f"ab{i}"
        try:
            ab_masks[key] = OursMask(alib, (batch, s, heads, d), causal, ours_lists)
            fns[key] = lambda it, m=ab_masks[key]: m.forward(*(sets[it & 1][x] for x in ("q", "k", "v", "o_d", "lse_d")))
        except Exception as e:  # noqa: BLE001
            errors[key] = e
    kw = {"kernel_options": args.flex_options} if args.flex_options else {}

    def run_flex(it):
        st = sets[it & 1]
        return flex_c(st["fq"], st["fk"], st["fv"], block_mask=bmask, **kw)

    fns["flex"] = run_flex
    fns["dense"] = lambda it: ours_dense(lib, *(sets[it & 1][x] for x in ("q", "k", "v", "o_d", "lse_d")), causal)

    def run_cudnn(it):
        st = sets[it & 1]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(st["q"].transpose(1, 2), st["k"].transpose(1, 2),
                                                  st["v"].transpose(1, 2), is_causal=causal)

    fns["cudnn"] = run_cudnn
    if pt.get("docs"):   # ours varlen: the documents as sequences of a cu_seqlens batch
        lens = [nb * BLOCK for nb in pt["docs"]] * batch   # every sequence of the batch holds the same documents
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device=dev)
        mx = max(lens)

        def run_varlen(it):
            st = sets[it & 1]
            check(lib, lib.fa_bench_forward_varlen(st["q"].data_ptr(), st["k"].data_ptr(), st["v"].data_ptr(),
                                                   st["o_v"].data_ptr(), st["lse_v"].data_ptr(), cu.data_ptr(),
                                                   cu.data_ptr(), len(lens), mx, mx, heads, heads, d,
                                                   1, 1, cur()), "fa_forward_cuda (cu_seqlens)")
        fns["varlen"] = run_varlen

    ms, us, how = time_contenders(fns, errors, args)
    nan = float("nan")
    record_times(row, ms, us, how,
                 {"sparse": flops, "flex": flops, "varlen": flops, "dense": flops_dense, "cudnn": flops_dense,
                  **{key: flops for key in ab_masks}})

    # correctness: ours against Flex on set 0; ours' empty rows
    row["err"], row["err_varlen"], row["status"] = nan, nan, []
    if "sparse" in ms and "flex" in ms:
        fns["sparse"](0)
        ref = run_flex(0).transpose(1, 2)
        torch.cuda.synchronize()
        row["err"] = (sets[0]["o_s"].float() - ref.float()).abs().max().item()
        if not row["err"] <= MISMATCH_TOL:   # (NaN too)
            row["status"].append("MISMATCH")
        # query blocks with no listed block: O = 0, L = -inf
        rows_empty = empty_rows(lists, batch, heads, n)
        row["empty_rows"] = 0 if rows_empty is None else int(rows_empty.sum().item())
        if rows_empty is not None:
            o_bad = (sets[0]["o_s"].permute(0, 2, 1, 3)[rows_empty] != 0).any().item()
            l_bad = (sets[0]["lse_s"][rows_empty] != float("-inf")).any().item()
            if o_bad or l_bad:
                row["status"].append("EMPTY-ROWS")
        for key in ab_masks:   # (into o_d: the dense contender's output, rewritten at its next call)
            if key in ms:
                fns[key](0)
                torch.cuda.synchronize()
                row["err_" + key] = (sets[0]["o_d"].float() - ref.float()).abs().max().item()
                if not row["err_" + key] <= MISMATCH_TOL:
                    row["status"].append("MISMATCH-" + key)
        del ref
    if "varlen" in ms and "sparse" in ms:
        fns["varlen"](0)
        torch.cuda.synchronize()
        row["err_varlen"] = (sets[0]["o_s"].float() - sets[0]["o_v"].float()).abs().max().item()
    row["failed"] = sorted((set(fns) | set(errors)) - set(ms))
    del sets, fns, bmask, om, ab_masks
    torch.cuda.empty_cache()
    return row


# ---- one point, backward (--backward) ----------------------------------------------------------
def make_sets_bwd(batch, s, heads, d, dev):
    """Two input sets: Q, K, V, dO [b, s, h, d]; per contender of ours (s: sparse, d: dense) O, L of
    our forward and dQ, dK, dV; Flex's leaves in its [B, H, S, D] layout, contiguous (as the forward's
    make_sets), and dO likewise; SDPA cuDNN's leaves: the transposed views (bench/vs_torch_backward.py)."""
    sets = []
    for _ in range(2):
        q, k, v, do = (torch.randn(batch, s, heads, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
        st = dict(q=q, k=k, v=v, do=do)
        for c in ("s", "d"):
            st["o_" + c] = torch.empty_like(q)
            st["lse_" + c] = torch.empty(batch, heads, s, device=dev, dtype=torch.float32)
            for g in ("dq", "dk", "dv"):
                st[g + "_" + c] = torch.empty_like(q)
        st["flex_in"] = tuple(x.transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
        st["fdo"] = do.transpose(1, 2).contiguous()
        st["cudnn_in"] = tuple(x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        st["cdo"] = do.transpose(1, 2)
        sets.append(st)
    return sets


def run_point_bwd(lib, flex_c, args, pt, dev, stream):
    """Times one point's backward; returns its row (dict, the forward's keys). Runs on `stream`."""
    with torch.cuda.stream(stream):
        return _run_point_bwd(lib, flex_c, args, pt, dev, stream)


def _run_point_bwd(lib, flex_c, args, pt, dev, stream):
    d, heads, batch, s, causal = pt["d"], pt["heads"], pt["batch"], pt["s"], pt["causal"]
    n, lists, bmask, ours_lists, density, flops, flops_dense = point_setup(args, pt)
    flops, flops_dense = BWD_FLOPS * flops, BWD_FLOPS * flops_dense
    sets = make_sets_bwd(batch, s, heads, d, dev)
    row = dict(pattern=pt["pattern"], d=d, heads=heads, batch=batch, s=s, causal=causal, density=density,
               nominal=pt.get("nominal"), note=pt.get("note", ""))
    fns, errors = {}, {}
    grads = ("dq", "dk", "dv")

    def ours_args(st, c):
        return [st[x] for x in ("q", "k", "v", "o_" + c, "do", "lse_" + c)] + [st[g + "_" + c] for g in grads]

    # ours: O and L of our own forward (sparse, dense), once per set, outside the timing
    om = od = None
    try:
        om = OursMask(lib, (batch, s, heads, d), causal, ours_lists)
        for st in sets:
            om.forward(*(st[x] for x in ("q", "k", "v", "o_s", "lse_s")))
        fns["sparse"] = lambda it: om.backward(*ours_args(sets[it & 1], "s"))
    except Exception as e:  # noqa: BLE001 - reported; the other contenders still run
        errors["sparse"] = e
    try:
        od = OursDenseBackward(lib, (batch, s, heads, d), causal)
        for st in sets:
            ours_dense(lib, *(st[x] for x in ("q", "k", "v", "o_d", "lse_d")), causal)
        fns["dense"] = lambda it: od(*ours_args(sets[it & 1], "d"))
    except Exception as e:  # noqa: BLE001
        errors["dense"] = e
    # Flex and SDPA cuDNN: one forward per set with requires_grad, kept; each call timed is the backward
    kw = {"kernel_options": args.flex_options} if args.flex_options else {}
    try:
        for st in sets:
            st["flex_out"] = flex_c(*st["flex_in"], block_mask=bmask, **kw)
        fns["flex"] = lambda it: torch.autograd.grad(sets[it & 1]["flex_out"], sets[it & 1]["flex_in"],
                                                     sets[it & 1]["fdo"], retain_graph=True)
    except Exception as e:  # noqa: BLE001
        errors["flex"] = e
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):   # the forward picks the backend; its graph keeps it
            for st in sets:
                st["cudnn_out"] = F.scaled_dot_product_attention(*st["cudnn_in"], is_causal=causal)
        fns["cudnn"] = lambda it: torch.autograd.grad(sets[it & 1]["cudnn_out"], sets[it & 1]["cudnn_in"],
                                                      sets[it & 1]["cdo"], retain_graph=True)
    except Exception as e:  # noqa: BLE001
        errors["cudnn"] = e
    torch.cuda.synchronize()

    ms, us, how = time_contenders(fns, errors, args, stream=stream)
    nan = float("nan")
    record_times(row, ms, us, how, {"sparse": flops, "flex": flops, "dense": flops_dense, "cudnn": flops_dense})

    # correctness: dQ, dK, dV of ours against Flex's on set 0, relative to Flex's largest; ours' empty rows
    row["err"], row["errs"], row["status"] = nan, (nan, nan, nan), []
    if "sparse" in ms and "flex" in ms:
        st = sets[0]
        fns["sparse"](0)
        ref = fns["flex"](0)
        torch.cuda.synchronize()
        errs = []
        for g, r in zip(grads, ref):
            r = r.transpose(1, 2).float()
            errs.append(((st[g + "_s"].float() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item())
        row["errs"] = tuple(errs)
        row["err"] = max(errs) if all(e == e for e in errs) else nan
        if not row["err"] <= MISMATCH_TOL_BWD:   # (NaN too)
            row["status"].append("MISMATCH")
        rows_empty = empty_rows(lists, batch, heads, n)             # (dQ = 0 there)
        row["empty_rows"] = 0 if rows_empty is None else int(rows_empty.sum().item())
        if rows_empty is not None and (st["dq_s"].permute(0, 2, 1, 3)[rows_empty] != 0).any().item():
            row["status"].append("EMPTY-ROWS")
        del ref
    row["failed"] = sorted((set(fns) | set(errors)) - set(ms))
    del sets, fns, bmask, om, od
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return row


# ---- the grid ---------------------------------------------------------------------------------
def points(args, dev):
    """Grouped by (d, seqlen, causal) so that each compiled Flex shape is compiled once."""
    gen = torch.Generator(device=dev).manual_seed(SEED)
    rng = torch.Generator().manual_seed(SEED)
    dims = [int(x) for x in args.dims.split(",")]
    lens = [int(x) for x in args.lens.split(",")]
    dens = [float(x) for x in args.densities.split(",")]
    out = []
    for d in dims:
        heads = 2048 // d
        for s in lens:
            batch = max(1, args.tokens // s)
            n = s // BLOCK
            for causal in (False, True):
                for p in dens:
                    out.append(dict(pattern="random", d=d, heads=heads, batch=batch, s=s, causal=causal,
                                    nominal=p, bitmap_fn=lambda b=batch, h=heads, n=n, p=p, c=causal:
                                    random_bitmap(b, h, n, p, c, gen, dev)))
                if s == args.struct_len and not args.no_structured:
                    # structured masks: one for every (batch, head), given to both as [batch, heads, n, n]
                    # (the random masks' shape, so Flex compiles no extra shape)
                    if causal:
                        docs = document_lengths(n, rng)
                        out.append(dict(pattern="document", d=d, heads=heads, batch=batch, s=s, causal=True,
                                        docs=docs, note=f"{len(docs)} docs, {min(docs) * BLOCK}.."
                                        f"{max(docs) * BLOCK} tokens",
                                        bitmap_fn=lambda n=n, docs=docs, b=batch, h=heads:
                                        document_bitmap(docs, dev)[None, None].expand(b, h, n, n).contiguous()))
                    out.append(dict(pattern="window+global", d=d, heads=heads, batch=batch, s=s, causal=causal,
                                    note=f"+-{WINDOW} blocks, {GLOBAL} global",
                                    bitmap_fn=lambda n=n, c=causal, b=batch, h=heads:
                                    window_global_bitmap(n, c, dev)[None, None].expand(b, h, n, n).contiguous()))
    return out


def fmt(x, spec):
    return "-" if x != x else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build/libfa_bench.so")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--reps", type=int, default=15, help="single-call reps per contender")
    ap.add_argument("--sus-reps", type=int, default=7, help="sustained-loop reps per contender")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--lens", default="4096,16384")
    ap.add_argument("--tokens", type=int, default=16384, help="batch = tokens / seqlen (the FA3 grid's 16k)")
    ap.add_argument("--densities", default="0.05,0.10,0.25,0.50")
    ap.add_argument("--struct-len", type=int, default=16384, help="seqlen of the document and window+global points")
    ap.add_argument("--no-structured", action="store_true")
    ap.add_argument("--no-sustained", action="store_true")
    ap.add_argument("--quick", action="store_true", help="seqlen 4k, densities 10%% and 50%%, structured at 4k")
    ap.add_argument("--ours-lists", choices=("same", "merged"), default="same",
                    help="same: ours gets the BlockMask's partial + full lists; merged: one kv list, no full list")
    ap.add_argument("--flex-options", type=json.loads, default=None,
                    help="flex_attention kernel_options as JSON (default: none, Flex's defaults)")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward (dQ, dK, dV) instead of the forward: <date>_<device>_sparse-bwd.md")
    ap.add_argument("--deterministic", action="store_true", help="--backward: ours in deterministic mode")
    ap.add_argument("--ab", default="", help="forward: other bench libraries timed beside --lib (comma-separated)")
    args = ap.parse_args()
    global DETERMINISTIC
    DETERMINISTIC = int(args.deterministic)
    bwd = args.backward
    if args.quick:
        args.lens, args.densities, args.struct_len = "4096", "0.10,0.50", 4096
    for s in args.lens.split(","):
        if int(s) % BLOCK:
            sys.exit(f"--lens: {s} is not a multiple of {BLOCK}")

    t_start = time.time()
    lib = load(args.lib)
    ab_paths = [x for x in args.ab.split(",") if x]
    if ab_paths and bwd:
        sys.exit("--ab: the forward only")
    ab_libs = [load(x) for x in ab_paths]
    if bwd and not hasattr(lib, "fa_bench_backward_sparse"):
        sys.exit(f"{args.lib} has no fa_bench_backward_sparse: rebuild it (make build/libfa_bench.so)")
    if bwd:   # autograd.grad's host work before its first kernel: a longer GPU sleep hides it
        timing.SLEEP_CYCLES *= BWD_SLEEP
    dev = torch.device(DEVICE)
    name = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    print(f"device: {name}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; {date}", flush=True)

    # every (d, seqlen, causal) shape is one Flex compile; more than dynamo's default limit of 8
    # would silently fall back to eager flex_attention
    for key in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, key):
            setattr(torch._dynamo.config, key, max(256, getattr(torch._dynamo.config, key)))
    flex_c = torch.compile(flex_attention, dynamic=False)

    try:
        split_check = check_split_against_create_block_mask(dev)
    except Exception as e:  # noqa: BLE001 - reported; it checks this script, not a contender
        split_check = f"not run ({str(e).splitlines()[0][:120]})"
    print(f"partial/full split vs create_block_mask (1024 tokens, 40% of blocks): {split_check}", flush=True)

    rows = []
    pts = points(args, dev)
    stream = torch.cuda.Stream() if bwd else None   # --backward: every point on this stream
    seen_shapes = set()
    for pt in pts:
        shape = (pt["d"], pt["s"], pt["batch"], pt["causal"])
        t0 = time.time()
        pt["bitmap"] = pt.pop("bitmap_fn")()
        row = (run_point_bwd(lib, flex_c, args, pt, dev, stream) if bwd
               else run_point(lib, flex_c, args, pt, dev, ab_libs))
        del pt["bitmap"]
        rows.append(row)
        first = shape not in seen_shapes
        seen_shapes.add(shape)
        r = row
        print(f"{r['pattern']:<13} d{r['d']:<3} {'causal' if r['causal'] else 'full  '} s{r['s']:<6} "
              f"dens {r['density'] * 100:5.1f}%  ms: sparse {fmt(r['ms_sparse'], '.3f')} flex {fmt(r['ms_flex'], '.3f')} "
              f"dense {fmt(r['ms_dense'], '.3f')} cudnn {fmt(r['ms_cudnn'], '.3f')}"
              + (f" varlen {fmt(r['ms_varlen'], '.3f')}" if r["pattern"] == "document" and not bwd else "")
              + f"  eff TFLOP/s: sparse {fmt(r['tf_sparse'], '.0f')} flex {fmt(r['tf_flex'], '.0f')}"
              f"  ours/flex {fmt(r['ms_flex'] / r['ms_sparse'], '.2f')} (sustained "
              f"{fmt(r['sus_us_flex'] / r['sus_us_sparse'], '.2f')})  dense/sparse {fmt(r['ms_dense'] / r['ms_sparse'], '.2f')}"
              + (f"  rel diff dQ/dK/dV vs flex {'/'.join(fmt(e, '.1e') for e in r['errs'])}" if bwd else
                 f"  max|ours-flex| {fmt(r['err'], '.1e')}") + f" {' '.join(r['status'])}"
              f"  [{time.time() - t0:.1f} s{', incl. Flex compile' if first else ''}]", flush=True)
    elapsed = time.time() - t_start

    # ---- table ----
    os.makedirs(args.out, exist_ok=True)
    tag = f"{date}_{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')}_sparse-{'bwd' if bwd else 'fwd'}"
    flex_how = f"torch.compile(flex_attention, dynamic=False), kernel_options {args.flex_options or 'default'}"
    what = "backward" if bwd else "forward"
    flex_target = 1.2 if bwd else 1.3
    if bwd:
        how_bwd = (
            "Backward: dQ, dK, dV from O, L (ours: of our own sparse / dense forward, computed once outside the "
            "timing; ours in its " + ("deterministic" if args.deterministic else "default (atomic dQ)") + " mode). "
            "Flex and SDPA cuDNN: their forward run once per input set with requires_grad and kept; each call "
            "timed is torch.autograd.grad(out, (q, k, v), dO, retain_graph=True), i.e. the backward graph alone "
            "(Flex: the backward AOTAutograd compiled, its kernel and the rowsum(dO * O) prologue). The whole "
            f"point runs on one side stream, the CUDA graphs captured on it. Backward FLOPs = {BWD_FLOPS} x the "
            f"forward's. GPU sleep before each single call: {timing.SLEEP_CYCLES} cycles. ")
        err_how = (f"rel. diff vs Flex: max |dX ours - dX Flex| / max |dX Flex| for dQ / dK / dV on one input set, "
                   f"bf16 (MISMATCH above {MISMATCH_TOL_BWD}); EMPTY-ROWS: a query block with no listed block "
                   "whose dQ rows are not 0. ")
    else:
        how_bwd = ""
        err_how = f"max|ours-Flex|: O on one input set, bf16 (MISMATCH above {MISMATCH_TOL}). "
    md = [f"# flashattn block-sparse {what} vs FlexAttention, bf16 — {name}, {date}", "",
          f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}. bench/vs_flex_sparse.py "
          f"({' '.join(sys.argv[1:])}); {len(rows)} points in {elapsed:.0f} s.", "",
          f"Block masks of 128 x 128 blocks; Flex: {flex_how}, its BlockMask built by BlockMask.from_kv_blocks "
          f"from the same int32 lists ours gets ({'the same partial + full tensors' if args.ours_lists == 'same' else 'ours: one merged list'}). "
          f"Hidden 2048 (d64 x 32 heads, d128 x 16 heads); random points: batch x seqlen = {args.tokens} tokens, "
          f"one random bitmap per (batch, head), seed {SEED}. Document points: document lengths multiples "
          f"of 128, so the block lists + causal are exact at token level"
          + ("" if bwd else "; 'varlen' = ours with cu_seqlens (the documents as a batch)")
          + f". window+global: +-{WINDOW} key blocks around the diagonal, the first {GLOBAL} key "
          f"blocks, and the first {GLOBAL} query blocks see all.", "",
          how_bwd +
          "density = visited blocks / the blocks of the dense (same causal) problem, a causal diagonal block counted "
          f"whole. Effective TFLOP/s = {f'{BWD_FLOPS} x ' if bwd else ''}4 x 128 x 128 x d x visited blocks / time "
          "(dense contenders: their own "
          "blocks, causal n(n+1)/2). ours/Flex = t_Flex / t_ours; dense/sparse = t_ours dense / t_ours sparse. "
          f"Single calls: median of {args.reps} reps, contenders interleaved in shuffled order after a GPU sleep "
          f"(bench/timing.py). Sustained: CUDA-graph replays of {SUSTAINED_CALLS} back-to-back calls, median of "
          f"{args.sus_reps} interleaved reps ('*': capture failed, back-to-back calls timed by events). "
          + err_how +
          f"Targets (issue 51): dense/sparse >= 7 at 10%; ours/Flex >= {flex_target} everywhere.", "",
          f"partial/full split vs create_block_mask (small problem): {split_check}", "",
          "## Single calls", "",
          "| pattern | d | causal | seqlen | batch x heads | density | ms ours sparse | ms Flex | ms ours dense | "
          "ms cuDNN dense | eff. TFLOP/s ours | eff. TFLOP/s Flex | TFLOP/s ours dense | TFLOP/s cuDNN | ours/Flex | "
          f"dense/sparse | {'rel. diff vs Flex dQ/dK/dV' if bwd else 'max abs diff vs Flex'} | check |",
          "|" + " --- |" * 18]

    def star(r, k):
        return "*" if r["how_" + k] == "events" else ""

    for r in rows:
        status = " ".join(r["status"]) or ("ok" if r["err"] == r["err"] else "-")
        if r["failed"]:
            status += " (failed: " + ", ".join(r["failed"]) + ")"
        md.append(f"| {r['pattern']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['s']} | "
                  f"{r['batch']} x {r['heads']} | {r['density'] * 100:.1f}% | {fmt(r['ms_sparse'], '.3f')} | "
                  f"{fmt(r['ms_flex'], '.3f')} | {fmt(r['ms_dense'], '.3f')} | {fmt(r['ms_cudnn'], '.3f')} | "
                  f"{fmt(r['tf_sparse'], '.0f')} | {fmt(r['tf_flex'], '.0f')} | {fmt(r['tf_dense'], '.0f')} | "
                  f"{fmt(r['tf_cudnn'], '.0f')} | {fmt(r['ms_flex'] / r['ms_sparse'], '.2f')} | "
                  f"{fmt(r['ms_dense'] / r['ms_sparse'], '.2f')} | "
                  f"{'/'.join(fmt(e, '.1e') for e in r['errs']) if bwd else fmt(r['err'], '.1e')} | {status} |")
    if not args.no_sustained:
        md += ["", f"## Sustained: {SUSTAINED_CALLS} back-to-back calls", "",
               "(effective) TFLOP/s as above; '*': timed without a CUDA graph (its capture failed).", "",
               "| pattern | d | causal | seqlen | density | ours sparse | Flex | ours dense | cuDNN dense | "
               "ours/Flex | dense/sparse |", "|" + " --- |" * 11]
        for r in rows:
            md.append(f"| {r['pattern']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['s']} | "
                      f"{r['density'] * 100:.1f}% | {fmt(r['sus_tf_sparse'], '.0f')}{star(r, 'sparse')} | "
                      f"{fmt(r['sus_tf_flex'], '.0f')}{star(r, 'flex')} | {fmt(r['sus_tf_dense'], '.0f')}"
                      f"{star(r, 'dense')} | {fmt(r['sus_tf_cudnn'], '.0f')}{star(r, 'cudnn')} | "
                      f"{fmt(r['sus_us_flex'] / r['sus_us_sparse'], '.2f')} | "
                      f"{fmt(r['sus_us_dense'] / r['sus_us_sparse'], '.2f')} |")
    docs = [r for r in rows if r["pattern"] == "document"]
    if docs and not bwd:
        md += ["", "Document mask, ours with cu_seqlens (varlen, causal) on the same data:", "",
               "| d | documents | ms varlen | eff. TFLOP/s varlen | ms ours sparse | sustained varlen | "
               "max abs diff varlen vs sparse |", "|" + " --- |" * 7]
        for r in docs:
            md.append(f"| {r['d']} | {r['note']} | {fmt(r['ms_varlen'], '.3f')} | {fmt(r['tf_varlen'], '.0f')} | "
                      f"{fmt(r['ms_sparse'], '.3f')} | {fmt(r['sus_tf_varlen'], '.0f')}{star(r, 'varlen')} | "
                      f"{fmt(r['err_varlen'], '.1e')} |")
    # the targets
    at10 = [r["ms_dense"] / r["ms_sparse"] for r in rows if r["pattern"] == "random" and r["nominal"] == 0.10]
    at10_sus = [r["sus_us_dense"] / r["sus_us_sparse"] for r in rows
                if r["pattern"] == "random" and r["nominal"] == 0.10]
    vs_flex = [r["ms_flex"] / r["ms_sparse"] for r in rows]
    vs_flex_sus = [r["sus_us_flex"] / r["sus_us_sparse"] for r in rows]

    def lo(xs):
        xs = [x for x in xs if x == x]
        return fmt(min(xs), ".2f") if xs else "-"

    per_d = ""
    if bwd:   # the lowest ours/Flex per head dim, and the points under the target
        per_d = " By head dim: " + ", ".join(
            f"d{d} {lo([r['ms_flex'] / r['ms_sparse'] for r in rows if r['d'] == d])} / "
            f"{lo([r['sus_us_flex'] / r['sus_us_sparse'] for r in rows if r['d'] == d])}"
            for d in sorted({r["d"] for r in rows})) + " (single / sustained). Under the target (single calls): " + (
            ", ".join(f"{r['pattern']} d{r['d']} {'causal ' if r['causal'] else ''}"
                      f"{str(r['s'] // 1024) + 'k' if r['s'] >= 1024 else r['s']} "
                      f"{r['density'] * 100:.0f}%" for r in rows
                      if not r["ms_flex"] / r["ms_sparse"] >= flex_target) or "none") + "."
    md += ["", f"Targets: dense/sparse at 10% of blocks, lowest: {lo(at10)} single calls, "
               f"{lo(at10_sus)} sustained (>= 7); ours/Flex, lowest over all "
               f"points: {lo(vs_flex)} single calls, {lo(vs_flex_sus)} sustained (>= {flex_target}).{per_d} "
               f"Rows marked MISMATCH: {sum('MISMATCH' in r['status'] for r in rows)}; EMPTY-ROWS: "
               f"{sum('EMPTY-ROWS' in r['status'] for r in rows)}."]
    if ab_libs:
        md += ["", "## A/B: the --ab builds against --lib (" + args.lib + ")", "",
               "time ratio t_lib / t_build (above 1: the build is faster); single calls, sustained.", "",
               "| pattern | d | causal | seqlen | density | " + " | ".join(
                   f"{p}: single | {p}: sustained | {p}: max abs diff vs Flex" for p in ab_paths) + " |",
               "|" + " --- |" * (5 + 3 * len(ab_paths))]
        for r in rows:
            md.append(f"| {r['pattern']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['s']} | "
                      f"{r['density'] * 100:.1f}% | " + " | ".join(
                          f"{fmt(r['ms_sparse'] / r.get(f'ms_ab{i}', float('nan')), '.3f')} | "
                          f"{fmt(r['sus_us_sparse'] / r.get(f'sus_us_ab{i}', float('nan')), '.3f')} | "
                          f"{fmt(r.get(f'err_ab{i}', float('nan')), '.1e')}" for i in range(len(ab_paths))) + " |")
    with open(os.path.join(args.out, tag + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md), flush=True)

    # ---- plot: effective TFLOP/s vs density, one panel per (d, causal); structured as markers ----
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        dims = sorted({r["d"] for r in rows})
        fig, axes = plt.subplots(2, len(dims), figsize=(6 * len(dims), 9), squeeze=False)
        for ci, causal in enumerate((False, True)):
            for di, d in enumerate(dims):
                ax = axes[ci][di]
                for s in sorted({r["s"] for r in rows if r["pattern"] == "random"}):
                    sel = [r for r in rows if r["pattern"] == "random" and r["d"] == d and r["causal"] == causal
                           and r["s"] == s]
                    if not sel:
                        continue
                    xs = [r["density"] * 100 for r in sel]
                    lab = f"{s // 1024}k"
                    ax.plot(xs, [r["tf_sparse"] for r in sel], marker="o", color="C0",
                            linestyle="-" if s == max(x["s"] for x in rows) else "--", label=f"ours sparse {lab}")
                    ax.plot(xs, [r["tf_flex"] for r in sel], marker="s", color="C1",
                            linestyle="-" if s == max(x["s"] for x in rows) else "--", label=f"Flex {lab}")
                    dn = [r["tf_dense"] for r in sel if r["tf_dense"] == r["tf_dense"]]
                    cu = [r["tf_cudnn"] for r in sel if r["tf_cudnn"] == r["tf_cudnn"]]
                    if dn:
                        ax.axhline(sorted(dn)[len(dn) // 2], color="C2", linestyle=":", label=f"ours dense {lab}")
                    if cu:
                        ax.axhline(sorted(cu)[len(cu) // 2], color="C3", linestyle=":", label=f"cuDNN dense {lab}")
                for r in rows:
                    if r["pattern"] != "random" and r["d"] == d and r["causal"] == causal:
                        mk = "*" if r["pattern"] == "document" else "^"
                        ax.scatter([r["density"] * 100], [r["tf_sparse"]], marker=mk, s=90, color="C0", zorder=3,
                                   label=f"ours {r['pattern']} {r['s'] // 1024}k")
                        ax.scatter([r["density"] * 100], [r["tf_flex"]], marker=mk, s=90, color="C1", zorder=3,
                                   label=f"Flex {r['pattern']} {r['s'] // 1024}k")
                ax.set_xscale("log")
                ax.set_xticks([5, 10, 25, 50])
                ax.set_xticklabels(["5%", "10%", "25%", "50%"])
                ax.set_xlabel("density (visited blocks / dense blocks)")
                ax.set_ylabel("effective TFLOP/s")
                ax.set_title(f"d {d}, {'causal' if causal else 'non-causal'}")
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        fig.suptitle(f"flashattn block-sparse {what} vs FlexAttention (same BlockMask), bf16\n{name}, {date}")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, tag + ".png"), dpi=90)
    except Exception as e:  # noqa: BLE001
        print("plot failed:", e)
    print("wrote", os.path.join(args.out, tag + ".{md,png}"), f"({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
