#!/usr/bin/env python3
"""Each lesson's main.cu stays a short CUDA program: its training loop plus its one idea (issues 21 and 36), so the
limits do not creep back:

  * every lesson's main.cu has at most 220 lines, lesson 07's at most 200;
  * every lesson's main.cu names itself after its folder (lessonNN_name: its banner and its JSON report);
  * every lesson's main.cu launches a kernel (`<<<`), and lessons 01–03 make their copies with cudaMemcpy* in it;
  * `make diff` of neighbours (diff -u of the two main.cu) changes at most 150 lines, and so do 04 → 08 and 04 → 09
    (lessons 08 and 09 build on lesson 04, not on the lesson before them).

Issue 36 asks 150 of every pair. Two are not there, held at what they measure so that they can only shrink:
  * 03 → 04 (212): lesson 03 must show every CUDA call of its idea inline (issue 36): its training step's <<<>>>
    launches (forward and backward, 44 lines) and its data path (streams, events, the loader, the copies, about 90
    lines). Lesson 04 replaces both, by the fast kernels and by BatchPipeline (03's data path as a class, which 05–09
    share: keeping it inline in 04 would move the same lines into 04 → 05 and 04 → 08, both at 150 already).
    Measured (2026-12-05) on copies of the two files, with every change that brings them closer without hiding
    lesson 04's idea: lesson 04 creating and destroying its streams itself (BatchPipeline taking them), lesson 04's
    forward and backward written in its main.cu in lesson 03's shape, and lesson 03 summing the loss with
    DeviceLosses (which hides its pinned download): 178. What is left is lesson 03's own pipeline (the prefetch,
    the three rules' waits, the loader, the resident path) and lesson 04's own lines (the --gemm flag, the
    workspace, the staircase table): neither can leave its lesson.
  * 04 → 09 (276): lesson 09 (written after issue 36) keeps its training step in a lambda that its scaling comparison
    reuses, so none of its step's lines line up with lesson 04's; reshaping it as a train_run like 08's is left open.

    python3 tests/lesson_size_test.py      (standard library and diff only)
"""

import glob
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAIR_LIMIT = 150
NOT_YET = {("03", "04"): 212, ("04", "09"): 276}


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
    numbers = sorted(os.path.basename(d)[:2] for d in glob.glob(os.path.join(ROOT, "lessons", "[0-9][0-9]_*"))
                     if os.path.isfile(os.path.join(d, "main.cu")))
    built_on = {"08": "04", "09": "04"}  # a lesson that builds on an earlier one than the lesson before it
    pairs = [(a, b) for a, b in zip(numbers, numbers[1:]) if b not in built_on or a == "07"]
    pairs += [(base, b) for b, base in built_on.items() if b in numbers and base in numbers]
    for a, b in pairs:
        limit = NOT_YET.get((a, b), PAIR_LIMIT)
        count = changed_lines(main_of(a), main_of(b))
        note = f" (issue 36's goal: {PAIR_LIMIT})" if limit != PAIR_LIMIT else ""
        print(f"make diff A={a} B={b}: {count} changed lines (limit {limit}){note}")
        if count > limit:
            failures.append(f"lessons {a} → {b} change {count} lines (limit {limit})")
    for number in numbers:
        path = main_of(number)
        lesson = os.path.basename(os.path.dirname(path))
        limit = 200 if number == "07" else 220
        with open(path, encoding="utf-8") as f:
            text = f.read()
        count = text.count("\n")
        print(f"{lesson}/main.cu: {count} lines (limit {limit})")
        if count > limit:
            failures.append(f"{lesson}/main.cu has {count} lines (limit {limit})")
        if f'"lesson{lesson}"' not in text:  # the banner's and the JSON report's name (lesson 02 once said 01's)
            failures.append(f"{lesson}/main.cu does not name itself \"lesson{lesson}\"")
        if "<<<" not in text:
            failures.append(f"{lesson}/main.cu launches no kernel itself (no <<<)")
        if number in ("01", "02", "03") and not re.search(r"\bcudaMemcpy(Async)?\(", text):
            failures.append(f"{lesson}/main.cu makes no cudaMemcpy itself")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
