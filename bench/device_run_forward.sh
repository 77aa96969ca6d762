#!/bin/bash
# One device call for a forward change: `make test-gpu` for the forward test
# program (its full run, the three sanitizers on the quick list, the SASS check;
# the Makefile says how), the sm_90a forward kernels' HGMMA and local-memory
# counts, then the benchmark grid (bench/vs_torch.py) alone on the GPU. Logs
# under $OUT. About 8-10 minutes on a GPU's machine (test-gpu of test_gpu took 8
# min on an H100, 2026-11-25), so build here first, where the compile costs no
# device time:
#   make build/test_gpu build/libfa_bench.so
# and run `bash bench/device_run_forward.sh` with carry ["build"] (make -o keeps
# the carried test program instead of rebuilding it there).
# VARIANT=label=path adds another build of the bench library as a column.
# (First run on an H100 on 2026-11-27 at 08:37 UTC: 9 min 45 s; at 12:11 it
# ran past the device call's 10-minute limit in the sanitizers.) So it can run
# as two calls, each a make test-gpu with a part left out (the Makefile says
# how): PART=1 the test program in full, its SASS check, the HGMMA count and
# the grid (about 4 min); PART=2 the three sanitizers on the quick list, all
# at once (7 min on an H100, 12:21), and nothing after them. Without PART, all
# of it in one call. The quick list outgrew one call's 10 minutes under the
# sanitizers (2026-11-27 21:50), so each sanitizer's run is split into
# SAN_SHARDS (default 4) runs side by side (the Makefile's SAN_SHARDS).
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
date -u
case "${PART:-}" in
1) LEAVE_OUT="SANITIZERS=" ;;
2) LEAVE_OUT="GPU_TEST_RUN=no" ;;
esac
make -o build/test_gpu test-gpu GPU_TEST_PROGS=test_gpu SAN_SHARDS=${SAN_SHARDS:-4} $LEAVE_OUT > $OUT/test-gpu.log 2>&1
echo "make test-gpu rc=$?" >> $OUT/test-gpu.log
[ "${PART:-}" = 1 ] || cat build/sanitize-test_gpu-*.log > $OUT/sanitize.log
if [ "${PART:-}" = 2 ]; then grep -E "passed, .* failed|SUMMARY|== |rc=" $OUT/test-gpu.log; exit; fi
date -u
grep -E "sm_90a kernel|passed, .* failed|SUMMARY|== |rc=" $OUT/test-gpu.log | tail -20
cuobjdump -sass -arch sm_90a build/libfa_bench.so 2>/dev/null | awk '/Function :/ {f=$3} /HGMMA/ {h[f]++} /STL|LDL/ {l[f]++} END {for (k in h) if (k ~ /fwd_kernel_sm90/) print h[k], "HGMMA,", l[k] + 0, "local", k}' > $OUT/sass-hgmma.txt
echo "== sm_90a forward kernels with HGMMA: $(wc -l < $OUT/sass-hgmma.txt), with local memory: $(awk '$3 > 0' $OUT/sass-hgmma.txt | wc -l)"
PYTHONUNBUFFERED=1 timeout ${BENCH_S:-120} python3 bench/vs_torch.py --lib build/libfa_bench.so --reps 30 --out $OUT \
    ${VARIANT:+--variant $VARIANT} 2>&1 | tee $OUT/bench.txt | grep -E "^d|memory point"
date -u
