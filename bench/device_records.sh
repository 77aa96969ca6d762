#!/bin/bash
# bench/device_records.sh - the issues' records of one tree in one device call: what the open issues
# measure on the GPU, stage by stage, each stage's logs packed to $OUT/logs.tgz as soon as it ends
# (a call cut by its time limit still returns what was done). Build here first, where the compile
# costs no device time (2 cores: about 6 minutes for all three):
#   nvcc -std=c++17 -O3 -lineinfo --split-compile=0 -gencode arch=compute_90a,code=sm_90a \
#        -DFLASHATTN_NO_DECODE -shared -Xcompiler -fPIC -I. bench/fa_bench_lib.cu -o DIR/lib.so
#   make BUILD=DIR GPU_ARCHS=90a DIR/fp8_accuracy_gpu DIR/bench_fp8_quant
# then run `bash bench/device_records.sh DIR` with carry ["DIR"] (DIR under .dev/, ignored by git).
# Stages (STAGES="..." picks some, in this order; seconds of command on an H100, 2026-12-07):
#   fp8    bench/vs_torch.py --fp8: FP8 beside our bf16, SDPA cuDNN and flash, the e4m3 matmul
#          ceiling, the quantizer alone and quantize + attend (issue 49; about 60 s)
#   acc    FlashAttention-3's Table 3 on the GPU (issue 49; about 15 s)
#   quant  fa_quantize_cuda's bandwidth beside a device copy (issue 49; about 10 s)
#   bwd    bench/vs_torch_backward.py --det-column --sustained (issue 50; about 80 s)
#   train  the training step against cuDNN's (issue 50; about 50 s)
#   sparse bench/vs_flex_sparse.py, forward then backward (issue 51; about 150 s)
#   ctime  bench/compile_time.sh, the default build with and without FP8 (issue 49; about 110 s)
# All of them: about 8 minutes, more than most calls leave after a start; two calls, e.g.
# STAGES="fp8 acc quant bwd train" then STAGES="sparse ctime".
cd "$(dirname "$0")/.."
D=${1:?usage: bench/device_records.sh DIR (holding lib.so, fp8_accuracy_gpu, bench_fp8_quant)}
STAGES=${STAGES:-fp8 acc quant bwd train sparse ctime}
. bench/trials/ab_common.sh "$D" "$D/lib.so" # (L, on, pack; no trials here)
nproc >> $L/gpu.txt; pack
ended() { echo "$1 rc=$2" >> $L/gpu.txt; date -u >> $L/gpu.txt; pack; } # STAGE RC: its line in gpu.txt, the logs out
if on fp8; then
    timeout 200 python3 -u bench/vs_torch.py --lib $D/lib.so --fp8 --no-memory-point --out $L > $L/fp8.txt 2>&1
    ended fp8 $?
fi
on acc && { timeout 60 $D/fp8_accuracy_gpu > $L/acc.txt 2>&1; ended acc $?; }
on quant && { timeout 40 $D/bench_fp8_quant > $L/quant.txt 2>&1; ended quant $?; }
if on bwd; then
    timeout 150 python3 -u bench/vs_torch_backward.py --lib $D/lib.so --det-column --sustained > $L/bwd.txt 2>&1
    ended bwd $?
fi
on train && { timeout 80 python3 -u bench/vs_torch_backward.py --lib $D/lib.so --train-step > $L/train.txt 2>&1
    ended train $?; }
if on sparse; then
    timeout 170 python3 -u bench/vs_flex_sparse.py --lib $D/lib.so --out $L > $L/sparse_fwd.txt 2>&1
    ended "sparse fwd" $?
    timeout 170 python3 -u bench/vs_flex_sparse.py --lib $D/lib.so --backward --out $L > $L/sparse_bwd.txt 2>&1
    ended "sparse bwd" $?
fi
if on ctime; then
    TREES=new BASE_DIR=. ROWS="default no_fp8" PAR=2 OUT=/tmp/ct timeout 200 bench/compile_time.sh \
        > $L/ctime.txt 2> $L/ctime.err
    ended ctime $?
fi
