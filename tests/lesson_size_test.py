#!/usr/bin/env python3
"""Each lesson's main.cu stays its training loop plus its one idea (issue 21), so the limits do not creep back:

  * `make diff A=04 B=05` and `A=05 B=06` (diff -u of the two main.cu) change at most 150 lines each, and
    `A=04 B=08` (lesson 08 builds on 04: its loader and augmentation kernel, and the runs it compares) at most 200;
  * every lesson's main.cu has at most 250 lines, lesson 07's at most 300.

    python3 tests/lesson_size_test.py      (standard library and diff only)
"""

import glob
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAIRS = [("04", "05", 150), ("05", "06", 150), ("04", "08", 200)]


def main_of(number):
    found = glob.glob(os.path.join(ROOT, "lessons", number + "_*", "main.cu"))
    if len(found) != 1:
        raise SystemExit(f"FAIL: expected one lessons/{number}_*/main.cu, found {found}")
    return found[0]


def changed_lines(a, b):
    """Lines a unified diff adds or removes (its +/- lines, not the two file headers)."""
    done = subprocess.run(["diff", "-u", a, b], stdout=subprocess.PIPE, text=True)
    lines = done.stdout.splitlines()[2:]
    return sum(1 for line in lines if line[:1] in "+-")


def main():
    failures = []
    for a, b, limit in PAIRS:
        count = changed_lines(main_of(a), main_of(b))
        print(f"make diff A={a} B={b}: {count} changed lines (limit {limit})")
        if count > limit:
            failures.append(f"lessons {a} → {b} change {count} lines (limit {limit})")
    for path in sorted(glob.glob(os.path.join(ROOT, "lessons", "*_*", "main.cu"))):
        lesson = os.path.basename(os.path.dirname(path))
        limit = 300 if lesson.startswith("07_") else 250
        with open(path, encoding="utf-8") as f:
            count = sum(1 for _ in f)
        print(f"{lesson}/main.cu: {count} lines (limit {limit})")
        if count > limit:
            failures.append(f"{lesson}/main.cu has {count} lines (limit {limit})")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
