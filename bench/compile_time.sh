#!/usr/bin/env bash
# bench/compile_time.sh - how long nvcc takes on a user's translation unit
# (examples/gpu_simple.cu: the implementation with the given macros), per
# configuration macro, for this tree's headers and, beside them, another
# revision's (BASE, default main; taken with `git show` into a folder).
#
#   bench/compile_time.sh                  every row, both trees
#   ROWS="default split" bench/compile_time.sh    some rows (names below)
#   TREES=new bench/compile_time.sh        this tree alone (or TREES=base)
#   PAR=4 bench/compile_time.sh            up to 4 single-threaded compiles at
#                                          once (the --split-compile rows run
#                                          alone); wall times then include
#                                          some sharing of memory bandwidth
#   ARCH=80 / BASE=<rev> / NVCC=<path> / OUT=<dir> (build/compile-time)
#   BASE_DIR=<dir>                         the base tree's two headers from this
#                                          folder instead of `git show` (a copy
#                                          without .git, as on the device machine)
#
# Prints a markdown table: wall seconds and CPU seconds (user + sys, all of
# nvcc's child processes) per row and tree. Compiles with -c (no link), -O3,
# as a user would; the object files are thrown away.
set -euo pipefail
cd "$(dirname "$0")/.."

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
ARCH=${ARCH:-90a}
BASE=${BASE:-main}
OUT=${OUT:-build/compile-time}
PAR=${PAR:-1}
TREES=${TREES:-base new}
ALL_ROWS="default split no_fp8 split_no_fp8 hd128 hd64_128 no_bwd no_dec no_bwd_dec hd128_fwd_only no_hopper"
ROWS=${ROWS:-$ALL_ROWS}

# row -> "macros (one #define per ';') | extra nvcc flags"
row_spec() {
    case $1 in
    default)        echo "|" ;;
    split)          echo "| --split-compile=0" ;;
    no_fp8)         echo "FLASHATTN_NO_FP8|" ;;   # issue 49 item 7: the FP8 path's share
    split_no_fp8)   echo "FLASHATTN_NO_FP8| --split-compile=0" ;;
    hd128)          echo "FLASHATTN_HEAD_DIMS 128|" ;;
    hd64_128)       echo "FLASHATTN_HEAD_DIMS 64, 128|" ;;
    no_bwd)         echo "FLASHATTN_NO_BACKWARD|" ;;
    no_dec)         echo "FLASHATTN_NO_DECODE|" ;;
    no_bwd_dec)     echo "FLASHATTN_NO_BACKWARD;FLASHATTN_NO_DECODE|" ;;
    hd128_fwd_only) echo "FLASHATTN_HEAD_DIMS 128;FLASHATTN_NO_BACKWARD;FLASHATTN_NO_DECODE|" ;;
    no_hopper)      echo "FLASHATTN_NO_HOPPER|" ;;
    *) echo "unknown row '$1' (rows: $ALL_ROWS)" >&2; exit 2 ;;
    esac
}

rm -rf "$OUT" && mkdir -p "$OUT/base" "$OUT/new" "$OUT/tu" "$OUT/times"
for f in flashattn.h flashattn_cuda.cuh; do
    if [ -n "${BASE_DIR:-}" ]; then cp "$BASE_DIR/$f" "$OUT/base/$f"; else git show "$BASE:$f" > "$OUT/base/$f"; fi
    cp "$f" "$OUT/new/$f"
done
src=$(pwd)/examples/gpu_simple.cu

# One TU per row: its #defines, then the example (a list with commas cannot
# go through nvcc's -D).
for r in $ROWS; do
    spec=$(row_spec "$r")
    {
        IFS=';' read -ra defs <<< "${spec%%|*}"
        for d in "${defs[@]}"; do [ -n "$d" ] && echo "#define $d"; done
        echo "#include \"$src\""
    } > "$OUT/tu/$r.cu"
done

# compile ROW TREE: writes $OUT/times/ROW-TREE ("wall user sys" or "FAIL")
compile() {
    local r=$1 t=$2 spec flags
    spec=$(row_spec "$r"); flags=${spec#*|}
    if /usr/bin/time -f "%e %U %S" -o "$OUT/times/$r-$t.raw" \
         "$NVCC" -std=c++17 -O3 -I"$OUT/$t" $flags -gencode "arch=compute_$ARCH,code=sm_$ARCH" \
         -c "$OUT/tu/$r.cu" -o "$OUT/times/$r-$t.o" > "$OUT/times/$r-$t.log" 2>&1; then
        tail -n 1 "$OUT/times/$r-$t.raw" > "$OUT/times/$r-$t"
    else
        echo FAIL > "$OUT/times/$r-$t"
    fi
    rm -f "$OUT/times/$r-$t.o"
    echo "  $r ($t): $(cat "$OUT/times/$r-$t")" >&2
}

echo "compile_time.sh: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $("$NVCC" --version | tail -n 1)" >&2
echo "sm_$ARCH, rows: $ROWS; trees: $TREES (base = ${BASE_DIR:-$BASE}); PAR=$PAR" >&2
running=0
for r in $ROWS; do
    for t in $TREES; do
        case $(row_spec "$r") in
        *split-compile*) wait; running=0; compile "$r" "$t" ;; # alone: it uses every core
        *) compile "$r" "$t" & running=$((running + 1))
           if [ "$running" -ge "$PAR" ]; then wait; running=0; fi ;;
        esac
    done
done
wait

cell() { # ROW TREE -> "wall | cpu"
    local f=$OUT/times/$1-$2
    if [ ! -f "$f" ]; then echo "- | -"; return; fi
    if [ "$(cat "$f")" = FAIL ]; then echo "FAIL | FAIL"; return; fi
    awk '{printf "%.0f | %.0f", $1, $2 + $3}' "$f"
}
echo
echo "nvcc -std=c++17 -O3 -gencode arch=compute_$ARCH,code=sm_$ARCH -c examples/gpu_simple.cu, $(nproc) CPUs, $(date -u +%Y-%m-%d)"
echo
b=${BASE_DIR:-$BASE}
echo "| row | macros | flags | $b: wall s | $b: CPU s | this tree: wall s | this tree: CPU s |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: |"
for r in $ROWS; do
    spec=$(row_spec "$r"); macros=${spec%%|*}; flags=${spec#*|}
    macros=${macros//;/ + }
    echo "| $r | ${macros:-(defaults)} | ${flags:--} | $(cell "$r" base) | $(cell "$r" new) |"
done
