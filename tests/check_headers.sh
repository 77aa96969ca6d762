#!/bin/sh
# tests/check_headers.sh [FILE...]
# The headers carry the code and its reasons, not the lab's history: no dates
# (20YY-MM-DD), no "UTC", no commit hashes. Measurements and their dates live
# in bench/results/LOG.md and docs/NOTES.md; a header points there by a tag
# such as [sm90-tail]. A commit hash is a bare lowercase hex word of 7 to 40
# characters with at least one digit and one letter (a-f), not part of an
# identifier, a 0x literal (0x7fffffff has an x before it) or a float's
# digits (1.4426950408889634f, 2.5e-05f).
# One check per (file, kind), plus a self-test that each pattern fires on a
# planted line and not on a clean one. Last line: "N passed, M failed".
cd "$(dirname "$0")/.." || exit 1
[ $# -gt 0 ] || set -- flashattn.h flashattn_cuda.cuh

DATE_RE='20[0-9][0-9]-[01][0-9]-[0-3][0-9]'
UTC_RE='(^|[^A-Za-z0-9_])UTC([^A-Za-z0-9_]|$)'
HASH_RE='(^|[^0-9A-Za-z_.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_.+-])'

hits() { # kind file: the offending lines, "file:line: text"
    case $1 in
    date) grep -nE "$DATE_RE" "$2" ;;
    UTC)  grep -nE "$UTC_RE" "$2" ;;
    hash) grep -nP "$HASH_RE" "$2" ;;
    esac
}

pass=0; fail=0
for f in "$@"; do
    for kind in date UTC hash; do
        if [ ! -r "$f" ]; then
            echo "FAIL $f: cannot read"; fail=$((fail + 1)); continue
        fi
        out=$(hits $kind "$f")
        if [ -z "$out" ]; then
            pass=$((pass + 1))
        else
            n=$(printf '%s\n' "$out" | wc -l)
            echo "FAIL $f: $n line(s) with a $kind (first 10):"
            printf '%s\n' "$out" | head -n 10 | cut -c1-160 | sed 's/^/    /'
            fail=$((fail + 1))
        fi
    done
done

# Self-test: each pattern must fire on its planted line and stay quiet on a
# line of ordinary code, so that this check can fail.
tmp=${TMPDIR:-/tmp}/check_headers.$$
trap 'rm -f "$tmp".*' EXIT
printf '%s\n' '/* measured 2031-04-09 on a quiet machine */' > "$tmp.date"
printf '%s\n' '/* 14:02 UTC, H200 */' > "$tmp.UTC"
printf '%s\n' '/* the kernels of 266a02d */' > "$tmp.hash"
printf '%s\n' 'x = 0x7fffffffu ^ 0xFFFFFFFF00000000ull; f16c_ok = fa__exp2f(a1b2c3d_v) * 1.4426950408889634f + 1.5252733804059840e-05f; /* UTCB */' > "$tmp.clean"
for kind in date UTC hash; do
    if [ -n "$(hits $kind "$tmp.$kind")" ] && [ -z "$(hits $kind "$tmp.clean")" ]; then
        pass=$((pass + 1))
    else
        echo "FAIL self-test: the $kind pattern misses its planted line or flags clean code"
        fail=$((fail + 1))
    fi
done
echo "check_headers: $pass passed, $fail failed"
[ $fail -eq 0 ]
