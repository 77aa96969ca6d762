"""bench/timing.py - CUDA-event timing of several contenders, interleaved.

Used by vs_torch.py (forward), vs_torch_backward.py, vs_torch_decode.py and
vs_flex_sparse.py; event_ms is the one place a call is timed, sustained() the
one sustained loop.

A long run of one kernel heats the GPU and its clock drops (power capping), so a contender timed in one
block right after another contender's block inherits that state. On the H100
(2026-11-23, ..._fwd-order-bias.md, now in git history) two builds of ours with the
same kernel, timed one block after the other, differed by 6-12% at the grid's
long rows (d128 8k, d256 16k), the first block always the faster. So here every
rep times each contender once, and a contender's time is the median of its
reps: each sees the same mix of states.

What a contender follows matters too: what that neighbour leaves behind
(heat, clocks) biases it. With a rotation every contender always follows the
same neighbour: in the decode benchmark (2026-11-24, H100) our library, listed
first and so always timed right after cuDNN, read 3% below the same file
loaded a second time at batch 32 x 128k, in each of three runs. A shuffle with
a fixed seed is no cure for a handful of reps: it gives every point of a grid
the same orders, and in the backward's sustained loops (7 reps, 4 contenders;
H100, 2026-12-06) the fourth label followed SDPA-flash's long loop in 4 of
its 7 reps, so its median did, and two builds with the same kernels read
8-11% apart at d64 8k-16k, whichever build was listed fourth the slower.
So the reps follow a balanced Latin square (Williams' design): over a full
cycle of it (n orders for n contenders, 2n for odd n) every contender takes
every position equally often and follows every other one equally often; the
labels are assigned to the design's rows by a seeded shuffle, and the reps
are rounded up to whole cycles. FA_TIMING_ORDER=shuffle brings back the
former fresh shuffle per rep (for comparing the two).
"""
import os
import random
import statistics

import torch


# GPU cycles of busy-waiting before the first event (~200 us on an H100).
SLEEP_CYCLES = 400000


def event_ms(fn):
    """Milliseconds of fn() between two CUDA events, waited for.

    The GPU first spins for SLEEP_CYCLES, so that the host has queued fn's
    work before the first event is reached: the time is the GPU's alone.
    Without it the GPU sat idle at the first event while the host was still
    in Python, ctypes and the library's own launch code, and that host time
    was counted. On the H100 (2026-11-24) this made short forward calls look
    slower by the caller's host cost, which is largest for SDPA's cuDNN
    backend: at d128, 2k tokens, cuDNN read 521 TFLOP/s timed that way and
    611 timed as CUDA-graph replays (ours 575 and 587)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(SLEEP_CYCLES)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def williams(n):
    """Williams' balanced Latin square on 0 .. n-1: its orders (n of them, 2n
    for odd n), in which each index takes each position equally often and
    directly follows each other index equally often."""
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def _interleave(labels, reps, time_one):
    """The interleaving itself: rep it times each label once, in the order of
    row it of a Williams design over the labels (the labels placed by a seeded
    shuffle, so a run can be repeated), reps rounded up to whole cycles of the
    design; time_one(label, it) -> a time. Median per label."""
    t = {label: [] for label in labels}
    rng = random.Random(20261124)
    if os.environ.get("FA_TIMING_ORDER") == "shuffle":
        orders = None
    else:
        placed = list(labels)
        rng.shuffle(placed)
        orders = [[placed[i] for i in row] for row in williams(len(labels))]
        reps = -(-reps // len(orders)) * len(orders)
    for it in range(reps):
        if orders:
            order = orders[it % len(orders)]
        else:
            order = list(labels)
            rng.shuffle(order)
        for label in order:
            t[label].append(time_one(label, it))
    return {label: statistics.median(v) for label, v in t.items()}


def interleaved(fns, reps=15, warmup=3):
    """fns: {label: fn(it)}, it = the rep index (to alternate input sets).

    Returns ({label: median milliseconds}, {label: exception}): a contender
    that raises during its warm-up (a backend that refuses the shape) is
    left out of the timed reps and reported in the second dict."""
    live, failed = {}, {}
    for label, fn in fns.items():
        try:
            for w in range(warmup):
                fn(w)
            torch.cuda.synchronize()
            live[label] = fn
        except Exception as e:  # noqa: BLE001 - reported to the caller
            failed[label] = e
    return _interleave(list(live), reps, lambda label, it: event_ms(lambda: live[label](it))), failed


def capture(fn, calls, stream=None):
    """A CUDA graph of `calls` calls of fn(i) (warmed up first, outside the
    graph: lazy init, caches), replayed once. For short kernels: a replay
    has no launch gaps of Python or the host code.

    stream: where to warm up and capture (default: a new side stream for the
    warm-up, torch.cuda.graph's own stream for the capture). An autograd
    backward runs its kernels on the stream its forward ran on, not on the
    caller's: to capture torch.autograd.grad of a forward run earlier, give
    the stream that forward ran on (bench/vs_flex_sparse.py --backward)."""
    s = torch.cuda.Stream() if stream is None else stream
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(calls):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(calls):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    return g, calls


def interleaved_graphs(graphs, reps=15):
    """graphs: {label: (graph, calls)} from capture(). Median microseconds per
    call of each, the replays interleaved as in interleaved()."""
    return _interleave(list(graphs), reps,
                       lambda label, it: event_ms(graphs[label][0].replay) * 1e3 / graphs[label][1])


def sustained(fns, reps, calls=8, stream=None):
    """us per call of each contender in a loop of `calls` back-to-back calls: CUDA-graph replays,
    interleaved as in interleaved(); a contender whose capture fails is timed as `calls` plain
    calls between two events (host launch time then counts if the host falls behind). stream:
    the capture stream (an autograd backward: the stream its retained forward ran on, see
    capture()). Returns ({label: us}, {label: 'graph' | 'events'})."""
    graphs, plain, how = {}, {}, {}
    for label, fn in fns.items():
        try:
            graphs[label] = capture(fn, calls, stream=stream)
            how[label] = "graph"
        except Exception as e:  # noqa: BLE001 - reported, timed without a graph
            print(f"    sustained {label}: capture failed ({str(e).splitlines()[0][:100]}); back-to-back calls",
                  flush=True)
            torch.cuda.synchronize()
            plain[label] = fn
            how[label] = "events"

    def one(label, it):
        if label in graphs:
            g, n = graphs[label]
            return event_ms(g.replay) * 1e3 / n
        fn = plain[label]
        return event_ms(lambda: [fn(i) for i in range(calls)]) * 1e3 / calls

    us = _interleave(list(fns), reps, one)
    del graphs
    return us, how
