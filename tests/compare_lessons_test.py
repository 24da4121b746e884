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


def phase(ms, bytes_):
    return {"ms": ms, "calls": 8, "avg_us": 1000 * ms / 8, "bytes": bytes_, "gb_per_s": 0}


def epoch(n, seconds, h2d=None):
    phases = {"forward": phase(4000, 0)}
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
        self.assertNotIn("different settings", out)
        rows = self.rows(out)
        self.assertEqual(list(rows), ["lesson01_naive_fp32", "lesson02_uint8_upload"])  # the order given
        self.assertEqual(rows["lesson01_naive_fp32"].split()[1:],
                         ["12.5", "s", "36.8", "MiB", "11.0", "ms", "1.50", "GiB", "91.23%"])
        # No h2d phase and no memory section: "-" for those columns; 0.3 s shows as 300 ms.
        self.assertEqual(rows["lesson02_uint8_upload"].split()[1:], ["300", "ms", "-", "-", "-", "50.00%"])

    def test_columns_aligned(self):
        result = self.run_script(self.write("a.json", LESSON01), self.write("b.json", lesson02()))
        lines = [l for l in result.stdout.splitlines() if l.startswith("  ")]
        self.assertEqual(len({len(l) for l in lines}), 1, "header, rule and rows end in the same column")

    def test_order_given(self):
        result = self.run_script(self.write("b.json", lesson02()), self.write("a.json", LESSON01))
        self.assertEqual(list(self.rows(result.stdout)), ["lesson02_uint8_upload", "lesson01_naive_fp32"])

    def test_different_settings_noted(self):
        other = lesson02()
        other["config"]["batch"] = 256
        result = self.run_script(self.write("a.json", LESSON01), self.write("b.json", other))
        self.assertEqual(result.returncode, 0, result.stderr)
        note = [l for l in result.stdout.splitlines() if "different settings" in l]
        self.assertEqual(len(note), 1, result.stdout)
        self.assertIn("batch", note[0])
        self.assertNotIn("layers", note[0])
        self.assertNotIn("batch 128", result.stdout)  # not claimed as shared

    def test_lesson07_without_epochs_shows_its_accuracy(self):
        # Lesson 07 trains by --samples, not epochs: no epoch rows, but the --batch run's accuracy in its results.
        lesson07 = copy.deepcopy(LESSON01)
        lesson07["program"] = "lesson07_batch_size"
        lesson07["epochs"] = []
        lesson07["config"]["epochs"] = 0
        lesson07["results"] = {"final_test_accuracy": 0.756, "batch_sweep": [{"batch": 128, "test_accuracy": 0.756}]}
        result = self.run_script(self.write("a.json", LESSON01), self.write("g.json", lesson07))
        self.assertEqual(result.returncode, 0, result.stderr)
        row = self.rows(result.stdout)["lesson07_batch_size"]
        self.assertTrue(row.split()[-1] == "75.60%", row)

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
        self.assertIn("| lesson01_naive_fp32 | 12.5 s | 36.8 MiB | 11.0 ms | 1.50 GiB | 91.23% |", table)
        self.assertIn("| lesson02_uint8_upload | 300 ms | - | - | - | 50.00% |", table)

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
