#!/usr/bin/env python3
"""bench/sm90_trace/phases.py TRACE... - per-tile phase averages, in SM clock cycles, of the
consumer warpgroups in a trace printed by trace.cu."""
import sys
# per-tile phase averages (cycles) of the consumer warpgroups of blocks 0 and 1
def load(fn):
    ev = {}
    for l in open(fn):
        if l.startswith('#'): continue
        blk, role, e, k, it, clk = map(int, l.split())
        ev.setdefault((blk, role), []).append((e, k, it, clk))
    return ev
def phases(fn):
    ev = load(fn)
    acc = {}
    for (blk, role), L in ev.items():
        if role == 0: continue
        tiles = {}
        for e, k, it, c in L: tiles.setdefault(k, []).append((e, it, c))
        ks = sorted(tiles)
        for a, b in zip(ks, ks[1:]):
            T = tiles[a]; t0 = [c for e, it, c in T if e == 10][0]
            nxt = [c for e, it, c in tiles[b] if e == 10][0]
            get = lambda ee: [c for e, it, c in T if e == ee]
            d = lambda x, y: (y - x) & 0xffffffff
            q = d(t0, get(11)[0]); s0 = d(get(12)[0], get(13)[0])
            smx = [d(x, y) for x, y in zip(get(13), get(14))]
            epi = d(get(16)[0], get(17)[0]); gap = d(get(17)[0], nxt)
            lastpv = d(get(12)[-1], get(15)[-1])
            for name, v in (("tile", d(t0, nxt)), ("Q wait", q), ("first S", s0), ("softmax each", sum(smx) / len(smx)),
                            ("last PV", lastpv), ("epilogue", epi), ("to next tile", gap), ("key blocks", len(smx))):
                acc.setdefault(name, []).append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}, len(acc["tile"])
for fn in sys.argv[1:]:
    r, n = phases(fn)
    print(f"{fn}: {n} tiles; " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()))
