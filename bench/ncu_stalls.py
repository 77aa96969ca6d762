#!/usr/bin/env python3
"""bench/ncu_stalls.py - Nsight Compute's warp stall samples per SASS instruction, summarized.

Input: the CSV of `ncu -i REPORT.ncu-rep --page source --csv --print-source sass` for a report
collected with `--section SourceCounters --section WarpStateStats` (one kernel). Prints the samples
by stall reason, by opcode (with each opcode's leading reasons and executed warp instructions), and
the instructions with the most samples (address, SASS, leading reasons), so that where a kernel's
warps wait can be read without the GUI.

  python3 bench/ncu_stalls.py fp8.sass.csv [--top 40]"""
import argparse
import csv
import collections


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.reader(f))
    kernel = rows[0][1] if rows and len(rows[0]) > 1 else "?"
    hdr = rows[1]
    col = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "(Not Issued)" not in h]
    ins = []
    for r in rows[2:]:
        if len(r) != len(hdr):
            continue
        num = lambda h: float(r[col[h]] or 0) if r[col[h]] not in ("-", "") else 0.0
        src = r[col["Source"]].strip()
        op = src.split()[0] if src else "?"
        if op.startswith("@"):  # predicate
            op = src.split()[1] if len(src.split()) > 1 else "?"
        ins.append(dict(addr=r[col["Address"]], src=src, op=op.split(".")[0], samples=num("Warp Stall Sampling (All Samples)"),
                        executed=num("Instructions Executed"), st={x: num(x) for x in reasons}))
    total = sum(i["samples"] for i in ins)
    print(f"# {kernel}")
    print(f"# {len(ins)} SASS instructions, {total:.0f} warp stall samples\n")
    print("## All samples by reason")
    by = collections.Counter()
    for i in ins:
        by.update(i["st"])
    for k, v in by.most_common():
        if v:
            print(f"{k:<24} {v:8.0f} {100 * v / total:5.1f}%")
    print("\n## By opcode: samples (share), leading reasons, warp instructions executed")
    ops = collections.defaultdict(lambda: [0.0, collections.Counter(), 0.0])
    for i in ins:
        o = ops[i["op"]]
        o[0] += i["samples"]
        o[1].update(i["st"])
        o[2] += i["executed"]
    for op, (s, st, ex) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:25]:
        lead = ", ".join(f"{k[6:]} {v:.0f}" for k, v in st.most_common(3) if v)
        print(f"{op:<10} {s:8.0f} ({100 * s / total:4.1f}%)  [{lead}]  executed {ex:.0f}")
    print(f"\n## The {a.top} instructions with the most samples (index in the listing, address, samples, reasons)")
    for n, i in sorted(enumerate(ins), key=lambda t: -t[1]["samples"])[:a.top]:
        lead = ", ".join(f"{k[6:]} {v:.0f}" for k, v in collections.Counter(i["st"]).most_common(3) if v)
        print(f"{n:5d} {i['addr'][-5:]} {i['samples']:6.0f} {100 * i['samples'] / total:4.1f}%  {i['src'][:60]:<60} [{lead}]")


if __name__ == "__main__":
    main()
