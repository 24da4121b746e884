#!/usr/bin/env python3
"""Pinned results of every lesson on the CPU backend: a refactoring of the lessons must not change a bit.

Runs each lesson executable of a cpu build tree with two short configurations on a generated dataset (the same
bytes on every machine: a fixed-seed generator written here) and compares what the run computed — the weights
checksum, every epoch's loss and accuracies, every step's loss where the lesson reports it, and the comparison
tables' non-timing figures (lesson 05's precisions, lesson 06's policies, lesson 07's sweep, lesson 08's data
paths) — with tests/lesson_pins.json, recorded from the tree before the lessons were restructured (issue 21;
lesson 08's when it was added).

    python3 tests/lesson_pins_test.py BUILD_DIR            compare (ctest runs this in the plain cpu tree)
    python3 tests/lesson_pins_test.py BUILD_DIR --record   rewrite tests/lesson_pins.json
    python3 tests/lesson_pins_test.py BUILD_DIR --async late   the same pins with CUDA_CPU_ASYNC=late: every stream
                                                           operation as late as CUDA allows (a missing wait reads
                                                           poison), and still the same bits

Re-record only with a change that alters the numerics on purpose, and say why in its commit.
The CPU backend only: a GPU's kernels round differently (its own checks are tools/gpu_check.sh's).
"""

import json
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PINS = os.path.join(HERE, "lesson_pins.json")

# Two configurations per lesson: small models, a partial last batch in each, the lesson's own switches.
COMMON_A = "--limit 300 --test-limit 100 --batch 64 --hidden 128,64 --epochs 2"
COMMON_B = "--limit 181 --test-limit 37 --batch 37 --hidden 97 --epochs 1 --seed 7"
CONFIGS = {
    "01_naive_fp32": [COMMON_A, COMMON_B + " --optimizer sgd"],
    "02_device_normalize": [COMMON_A, COMMON_B],
    "03_pinned_async": [COMMON_A, COMMON_B + " --resident"],
    "04_fast_kernels": [COMMON_A, COMMON_B + " --resident --gemm v3"],
    "05_mixed_precision": [COMMON_A, COMMON_B + " --precision mixed --init-scale 1024 --growth-interval 2"],
    "06_activation_checkpointing": [
        "--limit 200 --test-limit 50 --batch 64 --hidden 64,64,64,64,64 --epochs 1",
        COMMON_B.replace("--hidden 97", "--hidden 48,48,48,48") + " --checkpoint every=2 --no-compare --precision fp32",
    ],
    "07_batch_size": [
        "--limit 300 --test-limit 100 --hidden 64 --batches 16,50 --samples 200 --no-largest",
        "--limit 181 --test-limit 37 --hidden 48 --batches 37 --samples 150 --lr-scaling linear --no-largest",
    ],
    "08_data_loading": [COMMON_A + " --augment host --workers 3 --compare-steps 2",
                        COMMON_B + " --augment device --compare-steps 0"],
    # One process (MPI's singleton: no mpirun); its runs with 2 and 4 ranks are tests/data_parallel_test.py's.
    "09_data_parallel": [COMMON_A + " --compare-steps 2", COMMON_B + " --overlap off --compare-steps 0"],
}

# Keys whose values are times or depend on the machine: not pinned.
UNPINNED = re.compile(r"second|_ms$|^ms$|_per_step$|per_s|bandwidth|gb_per|time|hidden_fraction|busy|wall|usable|largest|probe_bytes")


def write_idx(path, images, labels, count):
    with open(path + "-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, count, 28, 28))
        f.write(bytes(images))
    with open(path + "-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, count))
        f.write(bytes(labels))


def generated_split(state, count):
    """MNIST-like bytes from a 64-bit LCG (fixed: the pins depend on every byte): 4 pixels in 5 are 0."""
    images, labels = bytearray(count * 784), bytearray(count)

    def next_value():
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return state[0] >> 33

    for i in range(count * 784):
        value = next_value()
        images[i] = (value >> 8) & 0xFF if value % 5 == 0 else 0
    for i in range(count):
        labels[i] = next_value() % 10
    return images, labels


def write_dataset(folder):
    state = [20261202]
    for name, count in (("train", 400), ("t10k", 120)):
        images, labels = generated_split(state, count)
        write_idx(os.path.join(folder, name), images, labels, count)


def pinned_figures(value):
    """The report's values that a run computes, without times and machine-dependent figures."""
    if isinstance(value, dict):
        return {k: pinned_figures(v) for k, v in value.items() if not UNPINNED.search(k)}
    if isinstance(value, list):
        return [pinned_figures(v) for v in value]
    return value


def summary(report):
    epochs = [{k: e[k] for k in ("train_loss", "train_accuracy", "test_accuracy") if k in e}
              for e in report.get("epochs", [])]
    results = pinned_figures(report["results"])
    return {"epochs": epochs, "results": results}


def run_lesson(build, lesson, args, data, folder, tag, async_mode):
    binary = os.path.join(build, "lessons", "lesson" + lesson)
    out = os.path.join(folder, tag + ".json")
    command = [binary] + args.split() + ["--data", data, "--quiet", "--json", out]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, CUDA_CPU_ASYNC=async_mode))
    if done.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}")
    with open(out) as f:
        return summary(json.load(f))


def differences(want, got, path=""):
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(want) | set(got)):
            if key not in got:
                out.append(f"{path}/{key}: missing now")
            elif key not in want:
                out.append(f"{path}/{key}: new (not pinned)")
            else:
                out += differences(want[key], got[key], f"{path}/{key}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        out = []
        for i, (w, g) in enumerate(zip(want, got)):
            out += differences(w, g, f"{path}[{i}]")
        return out
    return [] if want == got else [f"{path}: pinned {json.dumps(want)[:120]}, now {json.dumps(got)[:120]}"]


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    build, record = sys.argv[1], "--record" in sys.argv[2:]
    async_mode = "0"
    if "--async" in sys.argv[2:]:
        async_mode = sys.argv[sys.argv.index("--async") + 1]
    only = [a for a in sys.argv[2:] if not a.startswith("--") and a != async_mode]
    if record and async_mode != "0":
        raise SystemExit("--record records the synchronous runs only")
    got = {}
    with tempfile.TemporaryDirectory() as folder:
        write_dataset(folder)
        for lesson, configs in CONFIGS.items():
            if only and lesson not in only:
                continue
            for i, args in enumerate(configs):
                got[f"{lesson} {args}"] = run_lesson(build, lesson, args, folder, folder, f"{lesson}_{i}", async_mode)
                print(f"ran lesson {lesson} {args}", flush=True)
    if record:
        with open(PINS, "w") as f:
            json.dump(got, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"recorded {len(got)} runs in {PINS}")
        return 0
    with open(PINS) as f:
        want = json.load(f)
    failures = []
    for key, figures in got.items():
        if key not in want:
            failures.append(f"{key}: not pinned (run with --record after a deliberate change)")
            continue
        for line in differences(want[key], figures):
            failures.append(f"{key}: {line}")
    if not only:
        failures += [f"{key}: pinned but not run" for key in want if key not in got]
    for line in failures:
        print("FAIL:", line)
    if failures:
        return 1
    print(f"all {len(got)} runs bitwise as pinned (weights checksum, losses, accuracies, comparison figures; "
          f"CUDA_CPU_ASYNC={async_mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
