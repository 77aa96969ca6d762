#!/bin/sh
# decode_ab.sh OLD_DIR NEW_DIR [d tokens reps hq hkv]: build decode_ab from the
# flashattn.h in OLD_DIR and the one in NEW_DIR (e.g. a `git worktree` of the
# previous commit, and .) and run it. CFLAGS: the ISA (default: AVX2 + FMA +
# F16C without AVX-512, as `make bench BENCH_ISA=avx2`; CFLAGS=-march=native
# for the machine's own). Each line also gives the read bandwidth of the
# moment (a sum over the same cache right after the calls, best of 3).
set -e
old=$1; new=$2; shift 2
here=$(dirname "$0")
out=${BUILD:-build}/decode_ab
mkdir -p "$out"
flags=${CFLAGS:--mavx2 -mfma -mno-avx512f -mf16c}
cc -O3 $flags -fopenmp -I"$old" -DFA_AB_NAME=old -c "$here/variant.c" -o "$out/old.o" &
cc -O3 $flags -fopenmp -I"$new" -DFA_AB_NAME=new -c "$here/variant.c" -o "$out/new.o" &
cc -O3 $flags -fopenmp -I"$new" -c "$here/main.c" -o "$out/main.o"
wait
cc -O3 $flags -fopenmp "$out/main.o" "$out/old.o" "$out/new.o" -lm -o "$out/decode_ab"
"$out/decode_ab" "$@"
