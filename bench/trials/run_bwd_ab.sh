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
B=$1; MAIN=$2; shift 2
L=/tmp/rlog; mkdir -p $L
pack() { tar czf $OUT/logs.tgz -C /tmp rlog; }
V=""; for x in "$@"; do V="$V --variant $x"; done
FIRST=${1#*=}
( nvidia-smi --query-gpu=name,clocks.max.sm --format=csv; date -u ) > $L/gpu.txt
( make -s -o $B/test_gpu_backward test-gpu BUILD=$B GPU_TEST_PROGS=test_gpu_backward GPU_SHARDS=12 SANITIZERS= \
    > $L/tests.txt 2>&1; echo rc=$? >> $L/tests.txt ) &
( make -s -o $B/test_gpu_backward test-gpu BUILD=$B GPU_TEST_PROGS=test_gpu_backward GPU_TEST_RUN=no \
    > $L/san.txt 2>&1; echo rc=$? >> $L/san.txt ) &
wait
cp $B/sanitize-* $L/ 2>/dev/null; pack
S="--sustained --seqlens 1024,4096,16384 --dims 64,128,256"
timeout 200 python3 -u bench/vs_torch_backward.py --lib $MAIN $V $S > $L/bench1.txt 2>&1; pack
timeout 100 ncu --metrics gpu__time_duration.sum -c 70 --csv python3 bench/vs_torch_backward.py --lib $FIRST \
    --dims 128 --seqlens 1024 > $L/ncu_k128.csv 2>&1; pack
timeout 150 python3 -u bench/vs_torch_backward.py --lib $FIRST --variant main=$MAIN $S > $L/bench2.txt 2>&1; pack
