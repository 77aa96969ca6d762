#!/usr/bin/env python3
"""bench/sm90_trace/phases.py TRACE... - for a trace printed by trace.cu: per-tile phase
averages, in SM clock cycles, of the consumer warpgroups; then the medians of the phases of
every key block after a tile's first (request -> turn -> S ready -> P V ready -> softmax done
-> next request), and the spacing of the two consumer warpgroups' turns in blocks 0 and 1; then,
per tile and consumer warpgroup, the cycles from the producer issuing the tile's Q copy (event 1)
to the warpgroup's start of the tile (10) and to its Q having landed (11)."""
import statistics as st
import sys
d = lambda x, y: (y - x) & 0xffffffff  # cycles from x to y (32-bit clock)
qs = lambda v: f"median {st.median(v):.0f} p10 {sorted(v)[len(v) // 10]:.0f} p90 {sorted(v)[9 * len(v) // 10]:.0f} n {len(v)}"
def load(fn):
    ev = {}
    for l in open(fn):
        if l.startswith('#'): continue
        blk, role, e, k, it, clk = map(int, l.split())
        ev.setdefault((blk, role), []).append((e, k, it, clk))
    return ev
# per-tile phase averages (cycles) of the consumer warpgroups of blocks 0 and 1
def phases(fn):
    ev = load(fn)
    acc = {}
    for (blk, role), L in ev.items():
        if role == 0: continue
        tiles = {}
        for e, k, it, c in L: tiles.setdefault(k, []).append((e, it, c))
        ks = sorted(tiles)
        # a tile ends where the next one starts; a block's last tile (a block per tile: its
        # only one) at the end of its O store, with no "to next tile"
        for a, b in zip(ks, ks[1:] + [None]):
            T = tiles[a]; t0 = [c for e, it, c in T if e == 10][0]
            get = lambda ee: [c for e, it, c in T if e == ee]
            if not get(11) or not get(17): continue  # a warpgroup idle in this tile (rows past the sequence, or no key)
            nxt = [c for e, it, c in tiles[b] if e == 10][0] if b is not None else None
            q = d(t0, get(11)[0]); s0 = d(get(12)[0], get(13)[0])
            smx = [d(x, y) for x, y in zip(get(13), get(14))]
            epi = d(get(16)[0], get(17)[0]); gap = d(get(17)[0], nxt) if nxt is not None else None
            # the last P V: from the turn that issued it (the last turn before the last
            # "P V ready"; turns after it are WG_STOP's passes) to that event
            i15 = max(i for i, (e, it, c) in enumerate(T) if e == 15)
            lastpv = d([c for e, it, c in T[:i15] if e == 12][-1], T[i15][2])
            for name, v in (("tile", d(t0, nxt if nxt is not None else get(17)[0])), ("Q wait", q), ("first S", s0),
                            ("softmax each", sum(smx) / len(smx)), ("last PV", lastpv), ("epilogue", epi),
                            ("to next tile", gap), ("key blocks", len(smx))):
                if v is not None: acc.setdefault(name, []).append(v)
    return {k: sum(v) / len(v) for k, v in acc.items()}, len(acc.get("tile", []))
# medians of the key-block phases, and the spacing of the warpgroups' turns
def steady(fn):
    ev = load(fn)
    ph = {}
    turns = {}
    for (blk, role), L in ev.items():
        if role == 0: continue
        turns[(blk, role)] = [(c, k) for e, k, it, c in L if e == 12]
        for i in range(len(L) - 5):
            seq = [L[i + j][0] for j in range(6)]
            if seq == [18, 12, 13, 15, 14, 18]:
                t = [L[i + j][3] for j in range(6)]
                for name, a, b in (("turn wait", 0, 1), ("turn->S", 1, 2), ("S->PV", 2, 3), ("softmax", 3, 4), ("->next req", 4, 5), ("period", 0, 5)):
                    ph.setdefault(name, []).append(d(t[a], t[b]))
    print(fn, " ".join(f"{k} {st.median(v):.0f} (mean {st.mean(v):.0f})" for k, v in ph.items()), "n", len(ph.get("period", [])))
    # turn alternation in block 0: gaps A->B and B->A
    for blk in (0, 1):
        A = [(c, 1) for c, k in turns.get((blk, 1), [])]; B = [(c, 2) for c, k in turns.get((blk, 2), [])]
        if not A or not B: continue
        base = min(A[0][0], B[0][0])
        M = sorted(A + B, key=lambda x: d(base, x[0]))
        g12 = [d(M[i][0], M[i + 1][0]) for i in range(len(M) - 1) if M[i][1] == 1 and M[i + 1][1] == 2]
        g21 = [d(M[i][0], M[i + 1][0]) for i in range(len(M) - 1) if M[i][1] == 2 and M[i + 1][1] == 1]
        print(f"  block {blk}: turn gaps WG1->WG2 {qs(g12)}; WG2->WG1 {qs(g21)}")
# the Q copy's timing: issue -> tile start, start -> landed, issue -> landed. The producer's
# n-th publication (event 1; the last says done) is each consumer warpgroup's n-th tile: the
# consumers count their tiles k without gaps, where the producer's k counts rounds, some of
# which have no tile (the middle pair of the causal walk when the query blocks are odd).
def qtimes(fn):
    ev = load(fn)
    res = {}
    for blk in (0, 1):
        issued = [c for e, k, it, c in ev.get((blk, 0), []) if e == 1]
        for role in (1, 2, 3):
            start, landed = {}, {}
            for e, k, it, c in ev.get((blk, role), []):
                if e == 10: start.setdefault(k, c)
                if e == 11: landed.setdefault(k, c)
            for k in landed:
                if k < len(issued) and k in start:
                    for name, a, b in (("issue->start", issued[k], start[k]), ("start->landed", start[k], landed[k]),
                                       ("issue->landed", issued[k], landed[k])):
                        res.setdefault(name, []).append(d(a, b))
    print(f"{fn} Q copy: " + "; ".join(f"{k} {qs(v)}" for k, v in res.items()))
if __name__ == "__main__":  # (segments.py imports load and d)
    for fn in sys.argv[1:]:
        r, n = phases(fn)
        print(f"{fn}: {n} tiles; " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()))
        steady(fn)
        qtimes(fn)
