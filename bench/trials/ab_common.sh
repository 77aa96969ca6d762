# bench/trials/ab_common.sh - the start that the device-round scripts share (run_bwd_ab.sh,
# run_fp8_ab.sh, bench/device_records.sh), sourced with their arguments BUILD_DIR MAIN_SO
# NAME=TRIAL_SO ...: sets B and MAIN, V (the trials as --variant options), FIRST (the first trial's
# .so), L (the log folder), on STAGE (is it in $STAGES) and pack (the logs to $OUT/logs.tgz), and
# records the GPU and the time in $L/gpu.txt.
on() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }
B=$1; MAIN=$2
L=/tmp/rlog; mkdir -p $L
pack() { tar czf $OUT/logs.tgz -C /tmp rlog; }
V=""; for x in "${@:3}"; do V="$V --variant $x"; done
FIRST=${3#*=}
( nvidia-smi --query-gpu=name,clocks.max.sm --format=csv; date -u ) > $L/gpu.txt
