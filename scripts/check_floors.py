#!/usr/bin/env python3
"""Fails when a source file includes a header from a floor above its own.

The floors, lowest first (docs/ARCHITECTURE.md): base jinja kv attn cache model grammar
pml engine server cli. A file in src/F may include only headers of F and of the
floors below it. Run by the build (target check_floors) and by CTest.

    scripts/check_floors.py [SRC_DIR]
"""
import os
import re
import sys

FLOORS = "base jinja kv attn cache model grammar pml engine server cli".split()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"')


def violations(src):
    rank = {f: i for i, f in enumerate(FLOORS)}
    out = []
    for floor in sorted(os.listdir(src)):
        d = os.path.join(src, floor)
        if not os.path.isdir(d):
            continue
        if floor not in rank:
            out.append(f"{d}: a directory that is no floor (add it to FLOORS and docs/ARCHITECTURE.md)")
            continue
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and m.group(1) in rank and rank[m.group(1)] > rank[floor]:
                        out.append(f"{path}:{n}: {floor} includes {m.group(1)}, a floor above it: {line.strip()}")
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    bad = violations(src)
    for b in bad:
        print(b, file=sys.stderr)
    if bad:
        print(f"{len(bad)} include(s) run up a floor ({' <- '.join(FLOORS)})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
