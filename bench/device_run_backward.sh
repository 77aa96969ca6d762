#!/bin/bash
# One device call: tests, the three sanitizers (in parallel, quick case set),
# then the benchmark alone on the GPU. Logs under $OUT.
# Build here first (make build/test_gpu_backward build/libfa_bench.so), then
#   copy flashattn.h flashattn_cuda.cuh Makefile tests bench build/{test_gpu_backward,libfa_bench.so} to <main>/.dev/bwd/
# and run `cd .dev/bwd && bash bench/device_run_backward.sh` with carry [".dev/bwd"].
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
san() { FA_QUICK=1 timeout ${2:-150} compute-sanitizer --tool $1 --error-exitcode 9 ./build/test_gpu_backward > $OUT/$1.log 2>&1; echo "$1 rc=$?" >> $OUT/$1.log; }
san memcheck & san racecheck & san synccheck &
timeout 200 ./build/test_gpu_backward > $OUT/test.log 2>&1; echo "test rc=$?" >> $OUT/test.log
wait
for t in memcheck racecheck synccheck; do echo "== $t"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|Hazard|passed, .* failed|rc=" $OUT/$t.log | sort | uniq -c | head -8; done
echo "== sass (sm_90a): instruction counts per main kernel"
cuobjdump -sass -arch sm_90a build/test_gpu_backward 2>/dev/null | awk '/Function :/ {f=$3} /HMMA|LDSM|LDGSTS|RED\.|MUFU\.EX2/ {match($0, /(HMMA|LDSM|LDGSTS|RED|MUFU)[.A-Z0-9_]*/); n[f" "substr($0, RSTART, RLENGTH)]++} END {for (k in n) print n[k], k}' | grep kernel_sm80 | sed 's/_Z19fa__bwd_kernel_sm80I//; s/EEv14fa__bwd_params//' | sort -k2 > $OUT/sass.txt; grep "Li128ELi64ELi128ELi8ELi1ELb0" $OUT/sass.txt
echo "== test"; grep -E "BAD|FAIL|rc=|passed" $OUT/test.log | head -40; grep -c "rel-L2 vs fp64" $OUT/test.log
PYTHONUNBUFFERED=1 timeout ${BENCH_S:-170} python3 bench/vs_torch_backward.py --lib build/libfa_bench.so $BENCH_ARGS 2>&1 | tee $OUT/bench.txt
