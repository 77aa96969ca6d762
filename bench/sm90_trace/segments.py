#!/usr/bin/env python3
"""bench/sm90_trace/segments.py TRACE... - for a trace of a kernel that hands its tiles over
(trace.cu's output; patch.py's events 19-22 are there only then): where a consumer warpgroup's
time goes, tile by tile. A tile runs from one slot landed (event 19) to the next; for each pair
of consecutive events (a -> b) the count a tile, the median and mean cycles, and the cycles a
tile (their sum over the tiles / tiles), consumer warpgroups of blocks 0 and 1, largest first.
The sum of the last column is the mean tile."""
import statistics as st
import sys
from collections import defaultdict
d = lambda x, y: (y - x) & 0xffffffff  # cycles from x to y (32-bit clock)
for fn in sys.argv[1:]:
    ev = defaultdict(list)
    for line in open(fn):
        if line.startswith('#'):
            print(line.strip())
            continue
        blk, role, e, k, it, clk = map(int, line.split())
        ev[(blk, role)].append((e, clk))
    pairs, tile = defaultdict(list), []
    for (blk, role), L in ev.items():
        if role == 0:
            continue  # the producer
        starts = [i for i, (e, c) in enumerate(L) if e == 19]
        for a, b in zip(starts, starts[1:]):
            tile.append(d(L[a][1], L[b][1]))
            for i in range(a, b):
                pairs[(L[i][0], L[i + 1][0])].append(d(L[i][1], L[i + 1][1]))
    if not tile:
        print(f"{fn}: no slot events (19): not a kernel that hands its tiles over")
        continue
    n = len(tile)
    print(f"{fn}: tiles {n}, tile median {st.median(tile):.0f} mean {st.mean(tile):.0f}")
    for (a, b), v in sorted(pairs.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {a:>2}->{b:<2} n/tile {len(v) / n:4.1f} median {st.median(v):6.0f} mean {st.mean(v):6.0f} "
              f"per tile {sum(v) / n:7.0f}")
