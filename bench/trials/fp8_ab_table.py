#!/usr/bin/env python3
"""bench/trials/fp8_ab_table.py REPORT.md - the FP8 columns of a bench/vs_torch.py --fp8 report (run_fp8_ab.sh's)
as one table: main's FP8 (the --lib build) against each --variant build, single calls and sustained loops, with
the ratio at every point, and main's FP8/bf16."""
import sys
lines = open(sys.argv[1]).read().splitlines()
i = next(k for k, l in enumerate(lines) if l.startswith('| head dim | causal | seqlen | ours FP8'))
hdr = [c.strip() for c in lines[i].strip('|').split('|')]
rows = []
for l in lines[i + 2:]:
    if not l.startswith('|'): break
    rows.append(dict(zip(hdr, [c.strip() for c in l.strip('|').split('|')])))
vars_ = [h[4:] for h in hdr if h.startswith('FP8 ') and not h.startswith('FP8/')]
out = ['| d | causal | seqlen | FP8 main | ' + ' | '.join(f'FP8 {v} | {v}/main' for v in vars_) +
       ' | sustained main | ' + ' | '.join(f'sustained {v} | {v}/main' for v in vars_) + ' | FP8/bf16 main |',
       '| --: | --- | --: | --: |' + ' --: | --: |' * len(vars_) + ' --: |' + ' --: | --: |' * len(vars_) + ' --: |']
for r in rows:
    m, sm = float(r['ours FP8']), float(r['sustained FP8'])
    cells = [r['head dim'], r['causal'], r['seqlen'], f'{m:.1f}']
    for v in vars_:
        x = float(r['FP8 ' + v]); cells += [f'{x:.1f}', f'{x / m:.3f}']
    cells.append(f'{sm:.1f}')
    for v in vars_:
        x = float(r['sustained FP8 ' + v]); cells += [f'{x:.1f}', f'{x / sm:.3f}']
    cells.append(r['FP8/bf16'])
    out.append('| ' + ' | '.join(cells) + ' |')
print('\n'.join(out))
