#!/bin/sh
# tests/run_check.sh RESULT NAME COMMAND...
# Runs COMMAND with its output in RESULT.log, prints that log in one piece (so
# parallel make does not interleave it), and writes RESULT: one line
# "N passed, M failed". When the command prints lines ending in that form
# ("N passed, M failed" or "name: N passed, M failed"), the LAST of them is
# the result (a test binary's own total), plus one failure if the command
# exited non-zero (a crash). Otherwise (a compile check) it counts as one
# check, passed when the command exited 0. Always exits 0: the summary decides.
result=$1; name=$2; shift 2
"$@" > "$result.log" 2>&1
rc=$?
counts=$(grep -E '(^|: )[0-9]+ passed, [0-9]+ failed$' "$result.log" | tail -n 1 |
         sed -E 's/^(.*: )?([0-9]+) passed, ([0-9]+) failed$/\2 \3/')
if [ -n "$counts" ]; then
    set -- $counts
    p=$1; f=$2
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
else
    if [ $rc -eq 0 ]; then p=1; f=0; else p=0; f=1; fi
fi
if [ $rc -ne 0 ]; then echo "exit status $rc" >> "$result.log"; fi
if [ -n "$counts" ] || [ $f -ne 0 ]; then
    echo "==== $name"; cat "$result.log"
else
    echo "ok: $name"
fi
echo "$p passed, $f failed" > "$result"
exit 0
