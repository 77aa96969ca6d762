#!/usr/bin/env python3
"""bench/sm90_trace/qtime.py TRACE... - for a trace printed by trace.cu: per tile and consumer warpgroup
of blocks 0 and 1, the cycles from the producer issuing its Q copy (event 1) to the warpgroup starting
the tile (10) and to its Q having landed (11); medians, means, p10 and p90."""
d = lambda x, y: (y - x) & 0xffffffff
for fn in sys.argv[1:]:
    ev = {}
    for l in open(fn):
        if l.startswith('#'): print(fn, l.strip()); continue
        blk, role, e, k, it, clk = map(int, l.split())
        ev.setdefault((blk, role), []).append((e, k, it, clk))
    res = {}
    for blk in (0, 1):
        prod = ev.get((blk, 0), [])
        qiss = {}
        for e, k, it, c in prod:
            if e == 1 and k not in qiss: qiss[k] = c
        for role in (1, 2, 3):
            L = ev.get((blk, role), [])
            start = {}; landed = {}
            for e, k, it, c in L:
                if e == 10 and k not in start: start[k] = c
                if e == 11 and k not in landed: landed[k] = c
            for k in landed:
                if k in qiss and k in start:
                    res.setdefault('issue->start', []).append(d(qiss[k], start[k]))
                    res.setdefault('start->landed', []).append(d(start[k], landed[k]))
                    res.setdefault('issue->landed', []).append(d(qiss[k], landed[k]))
    for k, v in res.items():
        v = [x for x in v if x < 1 << 30]
        print(f"  {k}: median {st.median(v):.0f} mean {st.mean(v):.0f} p10 {sorted(v)[len(v)//10]} p90 {sorted(v)[9*len(v)//10]} n {len(v)}")
