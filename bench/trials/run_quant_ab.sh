#!/bin/bash
# One device round for quantizer trials (run from the repository root on the device machine):
#   bench/trials/run_quant_ab.sh BUILD_DIR MAIN_BENCH NAME=TRIAL_BENCH [NAME=TRIAL_BENCH ...]
# The *_BENCH are bench/bench_fp8_quant.cu built per tree or per set of trial macros (nvcc
# $(NVCC_FLAGS) -DFLASHATTN_HEAD_DIMS=64 -gencode arch=compute_90a,code=sm_90a, as make builds it);
# BUILD_DIR holds test_gpu_fp8 built from the tree that would land (make BUILD=... GPU_ARCHS=90a).
# Writes $OUT/logs.tgz after each stage:
#   q<NAME><run>.txt (main's as qmain<run>.txt): bench_fp8_quant's table, main and the trials
#   alternated ROUNDS times (default 3); bench/trials/quant_ab_table.py L main NAME turns them into
#   main against a trial, point by point;
#   ncu-<NAME>-<LPR>.txt: ncu of the ring kernel at d 256 (LPR 8) and d 128 (LPR 4; NCU_LPR="2 8" picks), main and the
#   first trial (a template instance: the filter matches the mangled name);
#   testgpu.txt (+ sanitize-*.log, sass-*.log): make test-gpu of test_gpu_fp8.
# STAGES="bench ncu tests" (the default) picks stages. Session 30's round of main and two trials with
# the tests took 75 s of command on an H100.
STAGES=${STAGES:-bench ncu tests}
. "$(dirname "$0")/ab_common.sh" "$@" # (B, MAIN, FIRST, L, on, pack)
if on bench; then
    for r in $(seq 1 ${ROUNDS:-3}); do
        $MAIN > $L/qmain$r.txt 2>&1
        for x in "${@:3}"; do ${x#*=} > $L/q${x%%=*}$r.txt 2>&1; done
        date -u >> $L/gpu.txt; pack
    done
fi
if on ncu; then
    for X in main=$MAIN "$3"; do for K in ${NCU_LPR:-8 4}; do
        timeout 60 ncu --kernel-name-base mangled -k regex:ring_kernelILi32ELi$K -s 2 -c 1 --section SpeedOfLight \
            --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
            --section MemoryWorkloadAnalysis --section Occupancy ${X#*=} > $L/ncu-${X%%=*}-$K.txt 2>&1
        echo "ncu ${X%%=*} $K rc=$?" >> $L/gpu.txt; pack
    done; done
fi
if on tests; then
    timeout ${T2:-240} make -s -o $B/test_gpu_fp8 test-gpu BUILD=$B GPU_TEST_PROGS=test_gpu_fp8 > $L/testgpu.txt 2>&1
    echo rc=$? >> $L/testgpu.txt; cp $B/sanitize-*.log $B/sass-*.log $L/ 2>/dev/null; date -u >> $L/gpu.txt; pack
fi
