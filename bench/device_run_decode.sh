#!/usr/bin/env bash
# bench/device_run_decode.sh - one device call for a decode change: GPU tests,
# benchmark, sanitizers (quick subset), SASS facts.
# Run from the repository root (a copy of branch decode with build/ carried).
# Writes logs to $OUT (or ./out).
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/device.txt"
echo "== test"; timeout 120 ./build/test_gpu_decode 2>&1 | tee "$OUT/test.log" | grep -v "^  " | tail -12
echo "== bench"; PYTHONUNBUFFERED=1 timeout 150 python3 bench/vs_torch_decode.py --lib build/libfa_bench_decode.so --out "$OUT" 2>&1 | tee "$OUT/bench.log"
for tool in memcheck racecheck synccheck; do
  echo "== $tool"
  lim=60; [ $tool = synccheck ] && lim=40
  timeout $lim compute-sanitizer --tool $tool --print-limit 5 ./build/test_gpu_decode --quick > "$OUT/san_$tool.log" 2>&1
  echo "rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, .* failed$" "$OUT/san_$tool.log" | tail -3
done
echo "== sass (d128 rows<=16 bf16, sm_90a)"
cuobjdump -sass -arch sm_90a build/test_gpu_decode 2>/dev/null | awk '/Function : _Z17fa__decode_kernelILi128ELi1ELb1E/{f=1;next} /Function : /{f=0} f' \
  | grep -oE "LDGSTS[.A-Z0-9]*|LDSM[.A-Z0-9]*|HMMA[.A-Z0-9]*|LDL[.A-Z0-9]*|STL[.A-Z0-9]*" | sort | uniq -c
