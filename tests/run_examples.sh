#!/bin/sh
# tests/run_examples.sh BIN_DIR [SAN_DIR]
# Runs every example and checks what it prints: each must exit 0 and print
# the line(s) that say its own check passed. SAN_DIR holds the self-checking
# examples built with ASan + UBSan, run the same way. EXAMPLES_PLAIN=no
# (make test): the self-checking ones only as SAN_DIR holds them (BIN_DIR
# then needs the demo alone). Ends with "N passed, M failed" (see
# tests/run_check.sh).
bin=$1; san=$2
pass=0; fail=0
# run NAME PROGRAM PATTERN...: exit status 0 and every extended-regex PATTERN found
run() {
    name=$1; prog=$2; shift 2
    if [ ! -x "$prog" ]; then echo "FAIL: $name: $prog is missing"; fail=$((fail + 1)); return; fi
    out=$("$prog" 2>&1); rc=$?
    ok=1
    [ $rc -eq 0 ] || { echo "FAIL: $name exited with status $rc"; ok=0; }
    for pat in "$@"; do
        printf '%s\n' "$out" | grep -Eq "$pat" || { echo "FAIL: $name printed no line matching /$pat/"; ok=0; }
    done
    if [ $ok -eq 1 ]; then pass=$((pass + 1)); echo "ok: $name"; else fail=$((fail + 1)); printf '%s\n' "$out" | tail -n 20; fi
}
check_all() { # DIR SUFFIX
    run "cpu_simple$2" "$1/cpu_simple" '^check: .*: OK$' '^L\[b=1, h=3, t=127\] = -?[0-9]+\.[0-9]+$'
    run "online_softmax$2" "$1/online_softmax" '^all agree to .*: yes$' 'merged by fa_merge: L = -?[0-9]'
    run "decode_paged$2" "$1/decode_paged" '^cache contents: match the appended K/V$' \
        '^max \|decode - forward\| over [0-9]+ tokens x [0-9]+ heads: .* -> OK$' '^step +[0-9]+: '
    run "block_sparse$2" "$1/block_sparse" '^max \|block-sparse - masked reference\| = .* -> OK$' \
        '^  query block 7 sees key blocks 0 6 7$'
    run "fp8$2" "$1/fp8" '^block \+ Hadamard closer to f32 than per tensor: yes -> OK$' 'per 128-row block \+ Hadamard: +RMSE of O [0-9]'
    run "backward$2" "$1/backward" '^check: gradients match finite differences .*: OK$' '^dQ of query 0 \(it sees key 0 alone\): largest \|element\| .* -> zero$'
}
if [ "${EXAMPLES_PLAIN:-yes}" != no ]; then check_all "$bin" ""
else echo "(the self-checking examples as built with ASan + UBSan only: make test-all also runs their plain builds)"; fi
[ -n "$san" ] && check_all "$san" " (ASan+UBSan)"
# the demo times itself against a naive attention: built optimized, run once
run demo "$bin/demo" '^  speedup .*\(ok\)$'
echo "examples: $pass passed, $fail failed"
