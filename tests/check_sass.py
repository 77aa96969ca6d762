#!/usr/bin/env python3
"""check_sass.py LISTING: a check of compiled code that `make test-gpu` runs on
`cuobjdump -sass` of each GPU test program.

Every uniform register (URn) that an LDGSTS (cp.async) reads, as its shared
address offset or as its L2 policy (desc[URn]), must be written by some
instruction of the same kernel (a 64-bit write of URm also writes URm+1).
Why: ptxas 13.0 compiled trial builds of the decode kernel (2026-11-24) whose
cp.async copies read UR0 / UR1 that nothing wrote; they ran into "an illegal
instruction" (flashattn_cuda.cuh, >>decode-prims, FLASHATTN_NO_L2_HINT). This
names such a kernel at build time instead.

Prints one line per kernel that fails, then "sass-check: N kernels with
cp.async, M with an unwritten uniform register", and exits 1 if M > 0.
"""
import re
import sys

INSN = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\s+(.*?);")
UREG = re.compile(r"\bUR(\d+)\b")


def kernels(lines):
    name, body = None, []
    for line in lines:
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        yield name, body


def check(body):
    """(whether the kernel has a cp.async, the URn its copies read that nothing writes)"""
    written, read, copies = set(), set(), False
    for line in body:
        m = INSN.match(line)
        if not m:
            continue
        op, args = m.group(1), m.group(2)
        base = op.split(".")[0]
        first = args.split(",")[0].strip()
        d = re.fullmatch(r"UR(\d+)", first)
        if d and (base.startswith("U") or base in ("R2UR", "S2UR")):
            n = int(d.group(1))
            written.add(n)
            if ".64" in op or "WIDE" in op:
                written.add(n + 1)
        if base == "LDGSTS":
            copies = True
            read.update(int(x) for x in UREG.findall(args))
    return copies, sorted(read - written)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_sass.py LISTING (the output of cuobjdump -sass)")
    with open(sys.argv[1]) as f:
        lines = f.readlines()
    n = bad = 0
    for name, body in kernels(lines):
        copies, missing = check(body)
        if not copies:
            continue
        n += 1
        if missing:
            bad += 1
            print(f"FAIL {name}: cp.async reads UR{', UR'.join(map(str, missing))}, never written")
    print(f"sass-check: {n} kernels with cp.async, {bad} with an unwritten uniform register")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
