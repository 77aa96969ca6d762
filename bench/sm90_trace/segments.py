#!/usr/bin/env python3
"""bench/sm90_trace/segments.py TRACE... - for a trace of a kernel that hands its tiles over
(trace.cu's output; events 19-22 are there only then): where a consumer warpgroup's
time goes, tile by tile. A tile runs from one slot landed (event 19) to the next; for each pair
of consecutive events (a -> b) the count a tile, the median and mean cycles, and the cycles a
tile (their sum over the tiles / tiles), consumer warpgroups of blocks 0 and 1, largest first.
The sum of the last column is the mean tile."""
import os
import statistics as st
import sys
from collections import defaultdict
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phases import d, load  # noqa: E402  (the trace's parser and 32-bit clock difference)
for fn in sys.argv[1:]:
    print("".join(line for line in open(fn) if line.startswith('#')), end="")
    ev = load(fn)
    pairs, tile = defaultdict(list), []
    for (blk, role), L in ev.items():
        if role == 0:
            continue  # the producer
        starts = [i for i, (e, k, it, c) in enumerate(L) if e == 19]
        for a, b in zip(starts, starts[1:]):
            tile.append(d(L[a][3], L[b][3]))
            for i in range(a, b):
                pairs[(L[i][0], L[i + 1][0])].append(d(L[i][3], L[i + 1][3]))
    if not tile:
        print(f"{fn}: no slot events (19): not a kernel that hands its tiles over")
        continue
    n = len(tile)
    print(f"{fn}: tiles {n}, tile median {st.median(tile):.0f} mean {st.mean(tile):.0f}")
    for (a, b), v in sorted(pairs.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {a:>2}->{b:<2} n/tile {len(v) / n:4.1f} median {st.median(v):6.0f} mean {st.mean(v):6.0f} "
              f"per tile {sum(v) / n:7.0f}")
