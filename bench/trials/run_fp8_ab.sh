#!/bin/bash
# One device round for FP8 forward trials (run from the repository root on the device machine):
#   bench/trials/run_fp8_ab.sh BUILD_DIR MAIN_SO NAME=TRIAL_SO [NAME=TRIAL_SO ...]
# BUILD_DIR holds test_gpu_fp8 built from the first trial (make BUILD=... GPU_ARCHS=90a) and, if
# present, fp8_accuracy_gpu (make BUILD=... BUILD/fp8_accuracy_gpu); the .so files are
# bench/fa_bench_lib.cu built per tree (nvcc ... -DFLASHATTN_NO_DECODE -shared, default head dims).
# Writes $OUT/logs.tgz after each stage (a call cut by its time limit still returns what was done):
#   bench.txt and the report (+ .png): bench/vs_torch.py --fp8 with main as --lib and the trials as
#   --variant, one process (FP8 columns "FP8 NAME" and "sustained FP8 NAME"); acc.txt: Table 3
#   (bench/fp8_accuracy_gpu.cu); tests.txt (+ sanitize-*.log): make test-gpu of test_gpu_fp8 (its
#   whole list, the three sanitizers on the quick list, the SASS check); sass_cmp.txt: which sm_90a
#   forward kernels of MAIN_SO and the first trial differ (cuobjdump).
# DIMS="128" narrows the grid (default 64,128,256); STAGES="bench acc tests sass" (the default)
# picks stages. The 2026-12-07 rounds took 150-180 s of command for all four stages on an H100.
# bench/trials/fp8_ab_table.py on the report gives main against each trial, point by point.
STAGES=${STAGES:-bench acc tests sass}
. "$(dirname "$0")/ab_common.sh" "$@" # (B, MAIN, V, FIRST, L, on, pack)
on bench && { timeout ${T1:-240} python3 -u bench/vs_torch.py --lib $MAIN $V --fp8 --dims ${DIMS:-64,128,256} \
    --no-memory-point --out $L > $L/bench.txt 2>&1; date -u >> $L/gpu.txt; pack; }
on acc && [ -x $B/fp8_accuracy_gpu ] && { timeout 60 $B/fp8_accuracy_gpu > $L/acc.txt 2>&1; pack; }
if on tests; then
    timeout ${T2:-240} make -s -o $B/test_gpu_fp8 test-gpu BUILD=$B GPU_TEST_PROGS=test_gpu_fp8 > $L/tests.txt 2>&1
    echo rc=$? >> $L/tests.txt; cp $B/sanitize-*.log $B/sass-*.log $L/ 2>/dev/null; date -u >> $L/gpu.txt; pack
fi
if on sass; then
    cuobjdump -sass $MAIN > /tmp/ab_main.sass 2>/dev/null; cuobjdump -sass $FIRST > /tmp/ab_trial.sass 2>/dev/null
    python3 - /tmp/ab_main.sass /tmp/ab_trial.sass > $L/sass_cmp.txt 2>&1 <<'PY'
import collections, re, sys
def load(f):  # the sm_90a forward kernels, addresses and encodings dropped
    d, k = collections.defaultdict(list), None
    for line in open(f):
        m = re.search(r'Function : (\S+)', line)
        if m: k = m.group(1); continue
        if k and 'fwd_kernel_sm90' in k:
            t = re.sub(r'/\*[0-9a-f]{4}\*/|/\* 0x[0-9a-f]+ \*/', '', line).strip()
            if t: d[k].append(t)
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
for k in sorted(set(a) | set(b)):  # FP8: the template's eighth argument (FP8) true
    fp8 = re.search(r'sm90ILb\dELi\d+ELi\d+ELi\d+ELb\dELi\dELb\dELb1E', k) is not None
    print('FP8 ' if fp8 else '16-bit', 'same' if a.get(k) == b.get(k) else 'DIFF', len(a.get(k, [])), len(b.get(k, [])), k)
PY
    pack
fi
