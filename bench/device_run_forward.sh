#!/bin/bash
# One device call for a forward change: the forward tests in full, the three
# sanitizers on the quick list (all at once: they are bound by the host CPU),
# the SASS check, then the benchmark grid (bench/vs_torch.py) alone on the GPU.
# Logs under $OUT. On a GPU's machine it takes about 6-8 minutes (the test
# program alone took 150 s on an H100, 2026-11-27; the sanitizers about 5 min
# on 2026-11-25), so build here first, where the compile is free of device time:
#   make build/test_gpu build/libfa_bench.so
# and run `bash bench/device_run_forward.sh` with carry ["build"].
# VARIANT=label=path adds another build of the bench library as a column.
# (Written on 2026-11-27 after that session's device time ran out: not yet run
# on a device; bench/device_run_backward.sh, of the same shape, has been.)
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
date -u
san() { timeout ${SAN_S:-420} compute-sanitizer --tool $1 --error-exitcode 9 ./build/test_gpu --quick > $OUT/san-$1.log 2>&1; echo "$1 rc=$?" >> $OUT/san-$1.log; }
san memcheck & san racecheck & san synccheck &
timeout ${TEST_S:-300} ./build/test_gpu > $OUT/test.log 2>&1; echo "test rc=$?" >> $OUT/test.log
wait
date -u
echo "== test"; grep -E "^(BAD|FAIL)|rc=|passed|sm_90a kernel" $OUT/test.log | head -20
for t in memcheck racecheck synccheck; do echo "== $t"; grep -E "SUMMARY|passed, .* failed|rc=" $OUT/san-$t.log | head -4; done
echo "== sass-check"; cuobjdump -sass build/test_gpu > /tmp/sass.txt && python3 tests/check_sass.py /tmp/sass.txt
cuobjdump -sass -arch sm_90a build/libfa_bench.so 2>/dev/null | awk '/Function :/ {f=$3} /HGMMA/ {h[f]++} /STL|LDL/ {l[f]++} END {for (k in h) if (k ~ /fwd_kernel_sm90/) print h[k], "HGMMA,", l[k] + 0, "local", k}' > $OUT/sass-hgmma.txt
echo "== sm_90a forward kernels with HGMMA: $(wc -l < $OUT/sass-hgmma.txt), with local memory: $(awk '$3 > 0' $OUT/sass-hgmma.txt | wc -l)"
PYTHONUNBUFFERED=1 timeout ${BENCH_S:-120} python3 bench/vs_torch.py --lib build/libfa_bench.so --reps 30 --out $OUT \
    ${VARIANT:+--variant $VARIANT} 2>&1 | tee $OUT/bench.txt | grep -E "^d|memory point"
date -u
