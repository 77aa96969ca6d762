#!/bin/sh
# tests/run_fuzz.sh SECONDS LIBFUZZER_BIN DRIVER_BIN WORK_CORPUS
# Runs tests/fuzz_args.c for SECONDS: the libFuzzer build when LIBFUZZER_BIN
# exists (new inputs go to WORK_CORPUS, tests/fuzz_corpus seeds it and is
# never written), else the seeded random driver DRIVER_BIN on the same seeds.
# Ends with "N passed, M failed" (see tests/run_check.sh).
secs=$1; lf=$2; drv=$3; work=$4
if [ -x "$lf" ]; then
    mkdir -p "$work"
    "$lf" -max_total_time="$secs" -max_len=512 -timeout=30 -print_final_stats=1 "$work" tests/fuzz_corpus > "$work.log" 2>&1
    rc=$?
    grep -E 'FUZZ FAILURE|ERROR: |SUMMARY|Done [0-9]+ runs|stat::number_of_executed_units' "$work.log"
    if [ $rc -eq 0 ]; then
        echo "fuzz_args (libFuzzer, ASan+UBSan, $secs s): no failure"
        echo "1 passed, 0 failed"
    else
        tail -n 40 "$work.log"
        echo "fuzz_args (libFuzzer, ASan+UBSan): failed (exit $rc); the input is saved as ./crash-* or ./leak-*"
        echo "0 passed, 1 failed"
    fi
else
    echo "libFuzzer build missing: the seeded random driver"
    "$drv" "$secs" 47 tests/fuzz_corpus/*
fi
