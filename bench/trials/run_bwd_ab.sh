#!/bin/bash
# One device round for backward trials (run from the repository root on the device machine):
#   bench/trials/run_bwd_ab.sh BUILD_DIR MAIN_SO NAME=TRIAL_SO [NAME=TRIAL_SO ...]
# BUILD_DIR holds test_gpu_backward built from the trial (make BUILD=... GPU_ARCHS=90a);
# the .so files are bench/fa_bench_lib.cu built per tree. Writes $OUT/logs.tgz after each
# stage (a call cut by its time limit still returns what was done):
#   tests.txt / san.txt (+ sanitize-*.log): the whole list in 12 shards, the sanitizers on
#   the quick list; bench1.txt: main with the trials interleaved; ncu_k128.csv: each kernel's
#   time in one d 128 1k backward (preprocess, main, convert, then SDPA's); bench2.txt: the
#   first trial with main, roles swapped.
# DIMS="64,128" narrows the benches (default 64,128,256); T1, T2 their time limits in seconds
# (default 200, 150).
# STAGES="tests bench1 ncu bench2" (the default) picks stages, so that a round too long for one
# call can be split over two; PROGS="test_gpu_backward" (the default) the test programs (each
# already built in BUILD_DIR).
STAGES=${STAGES:-tests bench1 ncu bench2}; PROGS=${PROGS:-test_gpu_backward}
. "$(dirname "$0")/ab_common.sh" "$@" # (B, MAIN, V, FIRST, L, on, pack)
O=""; for p in $PROGS test_gpu_fp8; do O="$O -o $B/$p"; done  # (test-gpu always wants test_gpu_fp8: -o, never rebuilt here)
if on tests; then
( make -s $O test-gpu BUILD=$B GPU_TEST_PROGS="$PROGS" GPU_SHARDS=12 SANITIZERS= \
    > $L/tests.txt 2>&1; echo rc=$? >> $L/tests.txt ) &
( make -s $O test-gpu BUILD=$B GPU_TEST_PROGS="$PROGS" GPU_TEST_RUN=no \
    > $L/san.txt 2>&1; echo rc=$? >> $L/san.txt ) &
wait
cp $B/sanitize-* $L/ 2>/dev/null; pack
fi
S="--sustained --seqlens 1024,4096,16384 --dims ${DIMS:-64,128,256}"
on bench1 && { timeout ${T1:-200} python3 -u bench/vs_torch_backward.py --lib $MAIN $V $S > $L/bench1.txt 2>&1; pack; }
on ncu && { timeout 100 ncu --metrics gpu__time_duration.sum -c 70 --csv python3 bench/vs_torch_backward.py \
    --lib $FIRST --dims 128 --seqlens 1024 > $L/ncu_k128.csv 2>&1; pack; }
on bench2 && { timeout ${T2:-150} python3 -u bench/vs_torch_backward.py --lib $FIRST --variant main=$MAIN $S \
    > $L/bench2.txt 2>&1; pack; }
