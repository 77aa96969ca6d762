#!/usr/bin/env python3
"""bench/trials/quant_ab_table.py DIR [NAME ...] - bench_fp8_quant alternated in one device call (files
DIR/qNAME1.txt, DIR/qNAME2.txt, ..., each a bench/bench_fp8_quant.cu table; up to 9 runs, the run being the
last digit, so a NAME may end in one) as one table: for every size and variant, main's median time, each
trial's median time and its ratio to main's, and the range of "of copy" over the runs. NAME: main first (the
default: main and every other NAME found in DIR)."""
import glob, os, re, statistics, sys


def runs(d, name):  # [{(B, N, H, D, variant): (us, of copy)}] per run, in run order
    out = []
    files = sorted(glob.glob(os.path.join(d, f'q{name}[0-9].txt')))
    for f in files:
        t = {}
        for line in open(f):
            c = [x.strip() for x in line.strip().strip('|').split('|')]
            if len(c) == 9 and c[0].isdigit():
                t[tuple(c[:5])] = (float(c[5]), c[8])
        out.append(t)
    return out


d = sys.argv[1]
names = sys.argv[2:] or ['main'] + sorted({re.match(r'q(.+)\d\.txt$', os.path.basename(f)).group(1)
                                         for f in glob.glob(os.path.join(d, 'q*[0-9].txt'))} - {'main'})
data = {n: runs(d, n) for n in names}
keys = list(data['main'][0])
print(f'runs: ' + ', '.join(f'{n} {len(data[n])}' for n in names) + '\n')
print('| B | N | H | D | variant | main us | ' + ' | '.join(f'{n} us | {n}/main' for n in names[1:]) +
      ' | ' + ' | '.join(f'{n} of copy' for n in names) + ' |')
print('|---' * (6 + 2 * (len(names) - 1) + len(names)) + '|')
for k in keys:  # (a shape a build's table lacks, e.g. one built before the shape was added: -)
    has = {n: all(k in r for r in data[n]) for n in names}
    med = {n: statistics.median(r[k][0] for r in data[n]) for n in names if has[n]}
    cop = {n: sorted((r[k][1] for r in data[n]), key=lambda c: float(c.rstrip('%'))) for n in names if has[n]}
    cells = list(k) + [f'{med["main"]:.1f}']
    for n in names[1:]:
        cells += [f'{med[n]:.1f}', f'{med[n] / med["main"]:.3f}'] if has[n] else ['-', '-']
    cells += [('-' if not has[n] else c[0] if c[0] == c[-1] else f'{c[0]}-{c[-1]}') for n, c in
              ((n, cop.get(n)) for n in names)]
    print('| ' + ' | '.join(cells) + ' |')
