#!/usr/bin/env python3
"""Self-test of tools/compare_lessons.py: runs the script on generated reports in a temporary directory.

    python3 tests/compare_lessons_test.py      (standard library only; no build, no GPU, no MNIST needed)
"""

import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "compare_lessons.py")

MIB = 1024 * 1024


def phase(ms, bytes_, flops=None, bytes_device=None):
    p = {"ms": ms, "calls": 8, "avg_us": 1000 * ms / 8, "bytes": bytes_, "gb_per_s": 0}
    if flops is not None:
        p["flops"], p["bytes_device"] = flops, bytes_device
    return p


def epoch(n, seconds, h2d=None):
    # The work (common/phase_work.h): forward 2.5 GFLOP and 100 MiB, backward 5 GFLOP and 300 MiB a epoch.
    phases = {"forward": phase(4000, 0, 2.5e9, 100 * MIB), "backward": phase(3000, 0, 5e9, 300 * MIB)}
    if h2d is not None:
        phases["h2d"] = phase(*h2d)
    return {"epoch": n, "train_loss": 0.5, "train_accuracy": 0.8, "test_accuracy": 0.9, "seconds": seconds,
            "samples_per_second": 83.2,
            "timing": {"clock": "CPU timings (host clock)", "wall_ms": 1000 * seconds, "phases_ms": 1000 * seconds,
                       "phases": phases}}


# The shape RunReport::to_json() writes (common/report.cpp), as in the lessons.
LESSON01 = {
    "program": "lesson01_naive_fp32", "backend": "cpu", "device": "CPU backend (1 worker)",
    "data": "MNIST from data/mnist (./data/mnist): 1024 train, 1000 test images",
    "config": {"layers": "784-1024-1024-10", "batch": 128, "epochs": 2, "limit": 1024, "test_limit": 1000},
    # h2d: 36.75 MiB and 10 ms, then 36.85 MiB and 12 ms → means 36.8 MiB, 11.0 ms; epochs 12 s and 13 s → 12.5 s
    "epochs": [epoch(1, 12.0, (10.0, int(36.75 * MIB))), epoch(2, 13.0, (12.0, int(36.85 * MIB)))],
    "results": {"final_test_accuracy": 0.91234},
    # Every epoch's copies (36.8 MiB each) from pageable memory, and the one-off uploads.
    "transfers": {"h2d_pageable_bytes": 80 * MIB, "h2d_pinned_bytes": 0},
    "memory": {"device": {"parameters": {"current_bytes": 1, "peak_bytes": 1},
                          "total": {"current_bytes": 5, "peak_bytes": 3 * 1024 * 1024 * 1024 // 2}}},
}


def lesson02():
    """Lesson 2: no h2d phase at all (e.g. the copy happens elsewhere), sub-second epochs, no memory section."""
    report = copy.deepcopy(LESSON01)
    report["program"] = "lesson02_uint8_upload"
    report["epochs"] = [epoch(1, 0.25), epoch(2, 0.35)]
    report["results"] = {"final_test_accuracy": 0.5}
    del report["memory"]
    return report


class CompareLessonsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, name, content):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)

    def rows(self, stdout):
        return {line.split()[0]: line for line in stdout.splitlines() if line.strip().startswith("lesson0")}

    def test_figures(self):
        result = self.run_script(self.write("a.json", LESSON01), self.write("b.json", lesson02()))
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn("CPU backend: times are CPU timings, not a GPU's", out)
        self.assertIn("784-1024-1024-10", out)
        self.assertIn("batch 128", out)
        self.assertIn("limit 1024", out)
        self.assertIn("test_limit 1000", out)
        self.assertNotIn("differ", out)
        rows = self.rows(out)
        self.assertEqual(list(rows), ["lesson01_naive_fp32", "lesson02_uint8_upload"])  # the order given
        # time, H2D bytes, from, device bytes (100 + 300 MiB), GFLOP (2.5 + 5), peak memory, accuracy
        self.assertEqual(rows["lesson01_naive_fp32"].split()[1:],
                         ["12.5", "s", "36.8", "MiB", "pageable", "400", "MiB", "7.50", "1.50", "GiB", "91.23%"])
        # No h2d phase and no memory section: "-" for those columns; 0.3 s shows as 300 ms. Slower than lesson 01
        # would be marked on the CPU backend; faster is not.
        self.assertEqual(rows["lesson02_uint8_upload"].split()[1:],
                         ["300", "ms", "-", "-", "400", "MiB", "7.50", "-", "50.00%"])

    def test_copies_from_pinned_pageable_or_both(self):
        cases = {(0, 80): "pageable", (2 * 37 * MIB, 8 * MIB): "pinned", (37 * MIB, 43 * MIB): "both"}
        for (pinned, pageable), expected in cases.items():
            with self.subTest(expected):
                report = copy.deepcopy(LESSON01)
                report["transfers"] = {"h2d_pinned_bytes": pinned, "h2d_pageable_bytes": pageable}
                result = self.run_script(self.write("a.json", report))
                self.assertEqual(self.rows(result.stdout)["lesson01_naive_fp32"].split()[5], expected)

    def test_rows_with_other_settings_carry_a_letter_and_a_legend(self):
        deep, mixed, also_mixed = copy.deepcopy(LESSON01), copy.deepcopy(LESSON01), copy.deepcopy(LESSON01)
        deep["program"], deep["config"]["layers"] = "lesson06_deep", "784-256-256-256-256-10"
        mixed["program"], mixed["config"]["precision"] = "lesson05_mixed", "mixed"
        also_mixed["program"], also_mixed["config"]["precision"] = "lesson05_again", "mixed"
        files = [self.write(f"{i}.json", r) for i, r in enumerate([LESSON01, LESSON01, deep, mixed, also_mixed])]
        result = self.run_script(*files)
        self.assertEqual(result.returncode, 0, result.stderr)
        rows = self.rows(result.stdout)
        self.assertTrue(rows["lesson01_naive_fp32"].endswith("91.23%"))
        self.assertTrue(rows["lesson06_deep"].endswith("91.23% a"), rows["lesson06_deep"])
        self.assertTrue(rows["lesson05_mixed"].endswith("91.23% b"))
        self.assertTrue(rows["lesson05_again"].endswith("91.23% b"))  # the same difference, the same letter
        legend = [l.strip() for l in result.stdout.splitlines() if l.startswith("  a  ") or l.startswith("  b  ")]
        self.assertEqual(len(legend), 2, result.stdout)
        self.assertIn("layers 784-256×4-10 (the other rows: layers 784-1024-1024-10)", legend[0])
        self.assertIn("precision mixed (the other rows: precision fp32)", legend[1])
        self.assertIn("rows with a letter after their accuracy differ", result.stdout)

    def test_cpu_time_slower_than_the_lesson_before_is_marked(self):
        slower = copy.deepcopy(LESSON01)
        slower["program"] = "lesson03_pinned_async"
        slower["epochs"] = [epoch(1, 20.0, (10.0, int(36.75 * MIB))), epoch(2, 20.0, (12.0, int(36.85 * MIB)))]
        other_model = copy.deepcopy(slower)
        other_model["program"], other_model["config"]["layers"] = "lesson06_deep", "784-10"
        result = self.run_script(self.write("a.json", LESSON01), self.write("c.json", slower),
                                 self.write("f.json", other_model))
        rows = self.rows(result.stdout)
        self.assertEqual(rows["lesson03_pinned_async"].split()[1:4], ["20.0", "s", "b"])
        self.assertTrue(rows["lesson06_deep"].endswith("91.23% a"))
        self.assertIn("  b  CPU time, slower than lesson01_naive_fp32 at the same settings: its loader thread",
                      result.stdout)
        # Another model: not compared, so not marked (its accuracy carries the model's letter instead).
        self.assertEqual(rows["lesson06_deep"].split()[1:4], ["20.0", "s", "36.8"])
        # On a GPU the times are the GPU's: nothing to mark.
        gpu = [copy.deepcopy(LESSON01), copy.deepcopy(slower)]
        for report in gpu:
            report["backend"], report["device"] = "cuda", "NVIDIA H200"
        result = self.run_script(self.write("a.json", gpu[0]), self.write("c.json", gpu[1]))
        self.assertEqual(self.rows(result.stdout)["lesson03_pinned_async"].split()[1:4], ["20.0", "s", "36.8"])
        self.assertNotIn("CPU time", result.stdout)

    def test_columns_aligned(self):
        result = self.run_script(self.write("a.json", LESSON01), self.write("b.json", lesson02()))
        lines = [l for l in result.stdout.splitlines() if l.startswith("  ")]
        self.assertEqual(len({len(l) for l in lines}), 1, "header, rule and rows end in the same column")

    def test_order_given(self):
        result = self.run_script(self.write("b.json", lesson02()), self.write("a.json", LESSON01))
        self.assertEqual(list(self.rows(result.stdout)), ["lesson02_uint8_upload", "lesson01_naive_fp32"])

    def test_different_settings_not_claimed_as_shared(self):
        other, third = lesson02(), copy.deepcopy(LESSON01)
        other["config"]["batch"] = 256
        third["config"]["batch"] = 256
        third["program"] = "lesson03_x"
        result = self.run_script(self.write("a.json", LESSON01), self.write("b.json", other),
                                 self.write("c.json", third))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("batch 256", result.stdout.splitlines()[2])  # the most rows' value is the shared one
        self.assertTrue(self.rows(result.stdout)["lesson01_naive_fp32"].endswith("91.23% a"))
        self.assertIn("batch 128 (the other rows: batch 256)", result.stdout)

    def test_lesson07_row_is_its_sweeps_run_at_its_batch(self):
        # Lesson 07 trains one pass at each batch size (--samples), no epochs: its row is the pass at --batch.
        lesson07 = copy.deepcopy(LESSON01)
        lesson07["program"] = "lesson07_batch_size"
        lesson07["epochs"] = []
        lesson07["config"]["epochs"] = 0
        lesson07["results"] = {"final_test_accuracy": 0.756, "batch_sweep": [
            {"batch": 64, "ms_per_step": 50.0, "steps": 16, "test_accuracy": 0.8},
            {"batch": 128, "ms_per_step": 100.0, "steps": 8, "test_accuracy": 0.756}]}
        result = self.run_script(self.write("a.json", LESSON01), self.write("g.json", lesson07))
        self.assertEqual(result.returncode, 0, result.stderr)
        row = self.rows(result.stdout)["lesson07_batch_size"]
        self.assertEqual(row.split()[1:4], ["800", "ms", "b"])  # 8 steps of 100 ms, and why the rest is "-"
        self.assertTrue(row.endswith("75.60% a"), row)  # one pass: one epoch, where lesson 01 ran two
        self.assertIn("a  1 epoch (the other rows: 2 epochs)", result.stdout)
        self.assertIn("b  lesson07_batch_size: the time of its one pass at batch 128", result.stdout)

    def test_gpu_device(self):
        gpu = copy.deepcopy(LESSON01)
        gpu["backend"], gpu["device"] = "cuda", "NVIDIA H200 (sm_90, 132 SMs)"
        result = self.run_script(self.write("a.json", gpu))
        self.assertIn("NVIDIA H200 (sm_90, 132 SMs)", result.stdout)
        self.assertNotIn("CPU backend", result.stdout)

    def test_markdown(self):
        result = self.run_script("--markdown", self.write("a.json", LESSON01), self.write("b.json", lesson02()))
        self.assertEqual(result.returncode, 0, result.stderr)
        table = [l for l in result.stdout.splitlines() if l.startswith("|")]
        self.assertEqual(len(table), 4)  # header, alignment row, two lessons
        self.assertTrue(table[1].startswith("|---|---:|"))
        self.assertIn("| lesson01_naive_fp32 | 12.5 s | 36.8 MiB | pageable | 400 MiB | 7.50 | 1.50 GiB | 91.23% |",
                      table)
        self.assertIn("| lesson02_uint8_upload | 300 ms | - | - | 400 MiB | 7.50 | - | 50.00% |", table)

    def test_broken_files_exit_2(self):
        cases = {
            "truncated.json": json.dumps(LESSON01)[:50],
            "not_object.json": "[1, 2, 3]",
            "empty.json": "",
        }
        good = self.write("good.json", LESSON01)
        for name, content in cases.items():
            with self.subTest(name):
                result = self.run_script(good, self.write(name, content))
                self.assertEqual(result.returncode, 2)
                self.assertIn(name, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)  # one clear message
                self.assertEqual(result.stdout, "")
        result = self.run_script(os.path.join(self.tmp.name, "missing.json"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("missing.json", result.stderr)


if __name__ == "__main__":
    unittest.main()
