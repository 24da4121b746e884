#!/usr/bin/env python3
"""Self-test of tools/report.py (`make report`'s charts): runs it on small generated reports in a temporary directory.

    python3 tests/report_test.py      (needs matplotlib: Debian's python3-matplotlib; no build, GPU or MNIST needed)

Lessons 01-04 have the shape RunReport::to_json() writes (common/report.cpp); lessons 05-08 are fixtures with the
results keys their charts read (precision_runs, checkpoint_runs, batch_sweep, loader_runs), with the row keys those
lessons write.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import matplotlib  # noqa: F401  (tools/report.py draws with it)
except ImportError:
    sys.exit(f"report_test.py: needs matplotlib (Debian/Ubuntu: python3-matplotlib, which tools/install_deps.sh "
             f"installs); this is {sys.executable}")

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "report.py")
CHARTS = ("time_per_phase.png", "h2d_bytes.png", "timelines.png", "peak_memory.png", "accuracy.png",
          "gemm_steps.png", "precision.png", "checkpointing.png", "batch_sweep.png", "data_loading.png")
MIB = 1024 * 1024
CPU_NOTE = "CPU-backend numbers"


def load_module():
    spec = importlib.util.spec_from_file_location("report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def phase(ms, bytes_=0):
    return {"ms": ms, "calls": 10, "avg_us": 100 * ms, "bytes": bytes_, "gb_per_s": 0}


def lesson(number, name, h2d_bytes, seconds, accuracies, **results):
    phases = {"normalize": phase(40.0), "forward": phase(300.0), "backward": phase(600.0), "optimizer": phase(80.0)}
    if h2d_bytes is not None:
        phases["h2d"] = phase(20.0, h2d_bytes)
    epochs = [{"epoch": i + 1, "train_loss": 0.5 / (i + 1), "train_accuracy": 0.8, "test_accuracy": a,
               "seconds": seconds, "samples_per_second": 1280 / seconds,
               "timing": {"clock": "CPU timings (host clock)", "wall_ms": 1000 * seconds, "phases_ms": 1040.0,
                          "phases": phases}} for i, a in enumerate(accuracies)]
    memory = {"device": {"parameters": {"current_bytes": 3 * MIB, "peak_bytes": 3 * MIB},
                         "gradients": {"current_bytes": 3 * MIB, "peak_bytes": 3 * MIB},
                         "optimizer_state": {"current_bytes": 6 * MIB, "peak_bytes": 6 * MIB},
                         "master_weights": {"current_bytes": 0, "peak_bytes": 0},
                         "activations": {"current_bytes": MIB, "peak_bytes": 2 * MIB},
                         "input_staging": {"current_bytes": 8 * MIB, "peak_bytes": 8 * MIB},
                         "workspace": {"current_bytes": 1024, "peak_bytes": 1024},
                         "total": {"current_bytes": 21 * MIB, "peak_bytes": 22 * MIB}}}
    return {"program": f"lesson{number}_{name}", "backend": "cpu", "device": "CPU backend (2 workers), no GPU: "
            "timings are CPU timings", "data": "MNIST: first 1280 train, first 1000 test images",
            "config": {"layers": "784-1024-1024-10", "epochs": len(accuracies), "batch": 128, "limit": 1280,
                       "test_limit": 1000},
            "epochs": epochs, "results": {"final_test_accuracy": accuracies[-1], **results}, "memory": memory,
            "transfers": {"h2d_pageable_bytes": h2d_bytes or 0, "h2d_pinned_bytes": 0}}


def trace_of_lesson(program):
    """A --trace file as PhaseTimer::write_trace writes it: 2 steps of 2 epochs, lesson 03's copies on stream 2."""
    copy_tid = 2 if program.startswith("lesson03") else 1
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": program}},
              {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "stream 1 (CUDA events): forward"}}]
    if copy_tid == 2:
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "stream 2: h2d"}})
    for epoch in (1, 2):
        for step in (0, 1):
            t = 10000.0 * (epoch - 1) + 1000.0 * step
            events.append({"name": "h2d", "ph": "X", "ts": t, "dur": 200.0, "pid": 1, "tid": copy_tid,
                           "args": {"epoch": epoch, "step": step, "bytes": 100352}})
            events.append({"name": "forward", "ph": "X", "ts": t + 250.0, "dur": 600.0, "pid": 1, "tid": 1,
                           "args": {"epoch": epoch, "step": step}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"what": "the first 2 training steps"}}


def lessons_01_to_04():
    gemm = {f"gemm_v{v}_{part}_ms": t / v for v in range(1, 7) for part, t in (("forward", 300.0),
                                                                               ("backward", 600.0))}
    return [lesson("01", "naive_fp32", 4014080, 9.0, [0.82, 0.86]),
            lesson("02", "device_normalize", 1003520, 8.5, [0.82, 0.86]),
            lesson("03", "pinned_async", 1003520, 8.0, [0.82, 0.86]),
            lesson("04", "fast_kernels", None, 2.0, [0.83, 0.87], **gemm)]


def lessons_05_to_07():
    l05 = lesson("05", "mixed_precision", 1003520, 2.0, [0.85])
    l05["results"]["precision_runs"] = [
        {"mode": "fp32", "test_accuracy": 0.87, "final_train_loss": 0.31, "stalled_update_fraction": 0.0,
         "underflow_fraction_unscaled": 0.0, "underflow_fraction_scaled": 0.0, "seconds_per_epoch": 2.0,
         "peak_device_bytes": 22 * MIB, "skipped_steps": 0},
        {"mode": "fp16-pure", "test_accuracy": 0.11, "final_train_loss": None,  # NaN in the lesson: null in JSON
         "stalled_update_fraction": 0.62, "underflow_fraction_unscaled": 0.004, "underflow_fraction_scaled": 0.004,
         "seconds_per_epoch": 1.1, "peak_device_bytes": 11 * MIB, "skipped_steps": 0},
        {"mode": "fp16-weights", "test_accuracy": 0.84, "final_train_loss": 0.38, "stalled_update_fraction": 0.21,
         "underflow_fraction_unscaled": 0.004, "underflow_fraction_scaled": 0.00002, "seconds_per_epoch": 1.2,
         "peak_device_bytes": 14 * MIB, "skipped_steps": 0},
        {"mode": "mixed", "test_accuracy": 0.87, "final_train_loss": 0.31, "stalled_update_fraction": 0.0001,
         "underflow_fraction_unscaled": 0.004, "underflow_fraction_scaled": 0.00002, "seconds_per_epoch": 1.3,
         "peak_device_bytes": 17 * MIB, "skipped_steps": 3},
    ]
    l06 = lesson("06", "activation_checkpointing", 1003520, 2.0, [0.86])
    l06["results"]["checkpoint_runs"] = [
        {"policy": "none", "activation_peak_bytes": 8 * MIB, "predicted_activation_bytes": 8 * MIB,
         "peak_device_bytes": 30 * MIB, "extra_forward_flops_fraction": 0.0, "seconds_per_epoch": 2.0,
         "largest_batch_that_fits": 4096},
        {"policy": "every-other", "activation_peak_bytes": 5 * MIB, "predicted_activation_bytes": 5.2 * MIB,
         "peak_device_bytes": 27 * MIB, "extra_forward_flops_fraction": 0.5, "seconds_per_epoch": 2.4,
         "largest_batch_that_fits": 6144},
        {"policy": "all", "activation_peak_bytes": 2 * MIB, "predicted_activation_bytes": 2 * MIB,
         "peak_device_bytes": 24 * MIB, "extra_forward_flops_fraction": 1.0, "seconds_per_epoch": 2.9,
         "largest_batch_that_fits": 12288},
    ]
    l07 = lesson("07", "batch_size", 1003520, 2.0, [0.86])
    l07["results"]["batch_sweep"] = [
        {"batch": b, "samples_per_second": 1000 * b / (b + 64), "copy_ms_per_step": 0.01 * b,
         "compute_ms_per_step": 0.05 * b + 1, "host_gap_ms_per_step": 0.3, "peak_device_bytes": (20 + b // 64) * MIB,
         "test_accuracy": 0.9 - 0.01 * i, "lr": 1e-3 * (b / 128) ** 0.5}
        for i, b in enumerate((32, 64, 128, 256, 512, 1024, 2048))]
    l07["results"]["largest_batch_that_fits"] = 1536
    # As the lesson writes it: no epochs (it trains by --samples), the --batch 128 run's accuracy as the final one.
    l07["epochs"] = []
    l07["config"]["epochs"] = 0
    l07["results"]["final_test_accuracy"] = 0.88
    l07["memory"]["device_info"] = {"free_before_bytes": 200 * MIB, "total_bytes": 256 * MIB, "free_now_bytes": 0}
    return [l05, l06, l07]


def loader_run(mode, workers, steps, loader_wait, kernels, wall, images_per_second):
    """A row of lesson 08's results.loader_runs (lessons/08_data_loading/loader_comparison.cu), ms per step."""
    return {"mode": mode, "workers": workers, "steps": steps, "loader_stall_ms_per_step": loader_wait,
            "back_pressure_ms_per_step": 0.0,
            "input_wait_ms_per_step": 0.0, "h2d_ms_per_step": 0.01, "kernels_ms_per_step": kernels,
            "wall_ms_per_step": wall, "kernels_busy_fraction": kernels / wall,
            "loader_images_per_second": images_per_second, "image_bytes_per_image": 784.0, "test_accuracy": 0.245}


def lesson_08():
    l08 = lesson("08", "data_loading", 1003520, 2.0, [0.86])
    l08["config"].update({"augment": "host", "workers": 3})
    l08["results"]["loader_runs"] = [
        loader_run("none", 1, 3, 0.02, 58.0, 59.0, 2.5e6),
        loader_run("host", 1, 3, 40.0, 58.0, 99.0, 1300.0),  # under the pace: the step waits for it
        loader_run("host", 2, 3, 0.74, 58.57, 59.35, 131310.0),
        loader_run("host", 4, 3, 0.1, 58.0, 58.5, 260000.0),
        loader_run("host", 3, 3, 0.3, 58.0, 58.4, 200000.0),  # the main run's --workers, not among 1, 2, 4
        loader_run("device", 1, 3, 0.05, 60.0, 60.2, 2.4e6),
        loader_run("host", 3, 20, 0.3, 58.0, 60.0, 195000.0),  # the main run, last: more steps
    ]
    return l08


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.report = load_module()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = os.path.join(self.tmp.name, "out")

    def write_reports(self, reports):
        paths = []
        for r in reports:
            path = os.path.join(self.tmp.name, r["program"] + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(r, f)
            paths.append(path)
            if r["program"][6:8] in ("01", "02", "03", "08"):  # the --trace timeline make report writes beside it
                with open(path[:-5] + ".trace.json", "w", encoding="utf-8") as f:
                    json.dump(trace_of_lesson(r["program"]), f)
        return paths

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)

    def readme(self):
        with open(os.path.join(self.out, "README.md"), encoding="utf-8") as f:
            return f.read()

    def assert_png(self, name):
        path = os.path.join(self.out, name)
        self.assertTrue(os.path.isfile(path), f"{name} not written")
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)
        self.assertGreater(os.path.getsize(path), 10000, f"{name}: too small to hold a chart")

    def test_every_chart_with_all_eight_lessons(self):
        paths = self.write_reports(lessons_01_to_04() + lessons_05_to_07() + [lesson_08()])
        result = self.run_script(*paths, "--out", self.out, "--command", "cmake --build build/x --target lessons",
                                 "--command", "build/x/lessons/lesson01_naive_fp32 --json a.json")
        self.assertEqual(result.returncode, 0, result.stderr)
        skips = [line for line in result.stdout.splitlines() if "skipping" in line]
        self.assertEqual(len(skips), 1, result.stdout)  # the roofline: drawn only from GPU runs
        self.assertIn("drawn only from a GPU run", skips[0])
        for name in CHARTS:
            self.assert_png(name)
        readme = self.readme()
        for name in CHARTS:
            self.assertIn(f"]({name})", readme)  # embedded
        self.assertIn(CPU_NOTE, readme)
        self.assertIn("CPU backend (2 workers)", readme)  # the device
        self.assertRegex(readme, r"\| git commit \| (\w+(\+dirty)?|unknown .*) \|")
        self.assertRegex(readme, r"\| date \| \d{4}-\d\d-\d\d \d\d:\d\d UTC \|")
        self.assertIn("| flavor | cpu", readme)
        commands = readme.split("```")[1].strip().splitlines()  # in order: those given, then report.py's own
        self.assertEqual(commands[:2], ["cmake --build build/x --target lessons",
                                        "build/x/lessons/lesson01_naive_fp32 --json a.json"])
        self.assertIn("report.py", commands[2])
        self.assertIn("--out", commands[2])
        self.assertIn("| lesson01_naive_fp32 |", readme)  # compare_lessons.py's table
        row07 = [line for line in readme.splitlines() if line.startswith("| lesson07_batch_size |")]
        self.assertEqual(len(row07), 1, readme)
        # Its accuracy (not 0.00%), with the letter saying it ran one pass where the others ran more.
        self.assertTrue(row07[0].rstrip().endswith("| 88.00% a |"), row07[0])
        self.assertIn("- a  1 epoch (the other rows:", readme)  # the legend under the table
        self.assertIn("| fp16-weights |", readme)  # the tables of the runs behind charts 6-9
        self.assertIn("| every-other |", readme)
        self.assertIn("| 2048 |", readme)
        self.assertIn("| mode | workers | steps | loader_stall_ms_per_step | back_pressure_ms_per_step |", readme)
        self.assertIn("| host | 3 | 20 | 0.3 |", readme)  # lesson 08's main run, the last row
        self.assertIn("emulated GPU share the machine's cores", readme)  # the CPU backend's caveat, in the caption

    def test_absent_lessons_are_skipped_with_one_line_each_and_stale_charts_removed(self):
        os.makedirs(self.out)
        for name in CHARTS[6:] + ("README.md",):  # as an earlier run with lessons 05-08 left them
            with open(os.path.join(self.out, name), "w", encoding="utf-8") as f:
                f.write("stale")
        result = self.run_script(*self.write_reports(lessons_01_to_04()), "--out", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        skips = [line for line in result.stdout.splitlines() if "skipping" in line]
        self.assertEqual(len(skips), 5, result.stdout)
        for skip, key in zip(skips, ("precision_runs", "checkpoint_runs", "batch_sweep", "loader_runs", "GPU run")):
            self.assertIn(key, skip)
        self.assertIn('skipping 9. Lesson 08: the data-loading bottleneck: no report has results["loader_runs"] '
                      '(written by lesson 08)', skips[3])
        for name in CHARTS[:6]:
            self.assert_png(name)
        for name in CHARTS[6:]:
            self.assertFalse(os.path.exists(os.path.join(self.out, name)), f"stale {name} left behind")
        readme = self.readme()
        self.assertNotIn("stale", readme)
        self.assertNotIn("precision.png", readme)
        self.assertIn("## Not drawn", readme)
        self.assertEqual(sorted(os.listdir(self.out)), sorted(["README.md"] + list(CHARTS[:6])))  # no .tmp left

    def test_gpu_and_mixed_numbers_are_said_on_every_chart(self):
        gpu = lessons_01_to_04() + lessons_05_to_07() + [lesson_08()]
        for r in gpu:
            r["backend"], r["device"] = "cuda", "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0)"
        mixed = lessons_01_to_04()
        mixed[1]["backend"] = "cuda"  # lesson 02 on a GPU: the charts of every lesson mix; lesson 04's own does not
        for case, notes, absent in ((gpu, ["GPU numbers: NVIDIA H200"] * 9, "CPU"),
                                    (mixed, ["MIXED"] * 4 + [CPU_NOTE], None)):
            self.assert_notes(self.report.draw(case), notes, absent)

    def test_roofline_from_gpu_reports_with_peaks_and_work(self):
        reports = lessons_01_to_04()
        for r in reports:
            r["backend"], r["device"] = "cuda", "NVIDIA H200"
            r["device_peaks"] = {"known": True, "fp32_flops": 66.9e12, "fp16_tensor_flops": 989.4e12,
                                 "dram_bytes_per_s": 4.8e12}
            for epoch in r["epochs"]:
                epoch["timing"]["phases"]["forward"].update({"flops": 2e12, "bytes_device": 4e10})
                epoch["timing"]["phases"]["optimizer"].update({"flops": 1e9, "bytes_device": 5e9})
        result = self.report.chart_roofline(reports)
        self.assertNotIsInstance(result, str, result)
        figure, _ = result
        ax = figure.axes[0]
        self.assertEqual(len(ax.collections), 2 * len(reports))  # forward and optimizer of each lesson
        forward = ax.collections[0].get_offsets()[0]
        self.assertAlmostEqual(forward[0], 50.0)  # 2e12 FLOPs / 4e10 bytes
        self.assertAlmostEqual(forward[1], 4e12 / 0.6, delta=1e6)  # 2 epochs × 2e12 FLOPs in 2 × 300 ms
        self.assertIsInstance(self.report.chart_roofline(lessons_01_to_04()), str)  # CPU reports: no roof

    def assert_notes(self, drawn, notes, absent):
        """Each drawn chart's figure has notes[i] in a text on its face, and no text with `absent`."""
        drawn = [(name, figure) for name, _, figure, _ in drawn if figure is not None]
        self.assertEqual(len(drawn), len(notes))
        for (name, figure), note in zip(drawn, notes):
            texts = [t.get_text() for t in figure.texts]  # the suptitle is one of them
            with self.subTest(chart=name, note=note):
                self.assertTrue(any(note in t for t in texts), texts)
                if absent:
                    self.assertFalse(any(absent in t for t in texts), texts)

    def test_figures(self):
        """What the charts plot: checked on the figures' artists, not on pixels."""
        charts = self.report.draw(lessons_01_to_04() + lessons_05_to_07() + [lesson_08()])
        self.assert_notes(charts, [CPU_NOTE] * 9, "GPU numbers")  # every chart says its numbers are CPU-backend ones
        drawn = {name: figure for name, _, figure, _ in charts}
        # 1: the stacks add up to the sum of the phases: 40 + 300 + 600 + 80 (+ 20 h2d where there is one)
        ax = drawn["time_per_phase.png"].axes[0]
        labels = [t.get_text() for t in ax.texts]
        self.assertEqual(labels[2:4], ["phases 1,040 ms\nwall 8,000 ms", "phases 1,020 ms\nwall 2,000 ms"])
        self.assertEqual([t.get_text().replace("\n", " ") for t in ax.get_xticklabels()][:2],
                         ["01 naive fp32", "02 device normalize"])
        self.assertIn("ms per epoch", ax.get_ylabel())
        # 2: 4014080 bytes = 3.83 MiB; lesson 04 has no h2d phase
        ax = drawn["h2d_bytes.png"].axes[0]
        texts = [t.get_text() for t in ax.texts]
        self.assertIn("3.83 MiB", texts)
        self.assertIn("no h2d phase", texts)
        self.assertAlmostEqual(ax.patches[0].get_height(), 4014080 / MIB)
        # 3: categories with a peak, stacked: 3 + 3 + 6 + 2 + 8 MiB + 1 KiB; the label is the total's peak
        ax = drawn["peak_memory.png"].axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertNotIn("master weights", legend)  # never allocated: not drawn
        self.assertIn("optimizer state", legend)
        self.assertIn("22.0 MiB", [t.get_text() for t in ax.texts])
        # 4: final accuracy in percent
        ax = drawn["accuracy.png"].axes[0]
        self.assertIn("87.00%", [t.get_text() for t in ax.texts])
        # 5: v1 = 300 + 600 ms, v3 a third of it: 3.00x
        ax = drawn["gemm_steps.png"].axes[0]
        texts = [t.get_text() for t in ax.texts]
        self.assertEqual(texts[0], "900 ms\n1.00× v1")
        self.assertEqual(texts[2], "300 ms\n3.00× v1")
        # 6: the null loss is drawn as n/a, not as 0; underflow with and without scaling
        axes = drawn["precision.png"].axes
        self.assertIn("n/a", [t.get_text() for t in axes[1].texts])
        underflow = [t.get_text() for t in axes[3].texts]
        self.assertIn("0.4%", underflow)
        self.assertIn("0.002%", underflow)
        # 7: the largest batch and the recompute cost
        fits = [t.get_text() for t in drawn["checkpointing.png"].axes[2].texts]
        self.assertIn("12,288\n+100% fwd FLOPs", fits)
        # 8: a log2 batch axis with the batch sizes as ticks, and the largest batch that fits marked
        ax = drawn["batch_sweep.png"].axes[0]
        self.assertEqual(ax.get_xscale(), "log")
        self.assertEqual([t.get_text() for t in ax.get_xticklabels()], ["32", "64", "128", "256", "512", "1024",
                                                                        "2048"])
        self.assertIn("the largest that fits, 1,536", ax.get_xlabel())
        self.assertIn(1536, [line.get_xdata()[0] for line in ax.lines])  # the dashed line
        # 9: per run, a step's parts stacked, the rest of the wall time as "other"; the main run last and marked
        stack, capacity = drawn["data_loading.png"].axes[:2]
        labels = [t.get_text() for t in stack.get_yticklabels()]
        self.assertEqual(labels, ["none, 1 worker", "host, 1 worker", "host, 2 workers", "host, 4 workers",
                                  "host, 3 workers", "device, 1 worker", "host, 3 workers (main run)"])
        legend = [t.get_text() for t in stack.get_legend().get_texts()]
        self.assertEqual(legend, ["wall", "loader stall", "back-pressure", "input wait", "h2d", "kernels", "other"])
        other = stack.containers[5]  # the sixth stack of bars: 99 - (40 + 0 + 0 + 0.01 + 58) ms for host, 1 worker
        self.assertAlmostEqual(other[1].get_width(), 0.99)
        self.assertAlmostEqual(other[1].get_x() + other[1].get_width(), 99.0)
        self.assertIn("wall 59.4 ms\nkernels 98.7%", [t.get_text() for t in stack.texts])
        self.assertEqual(capacity.get_xscale(), "log")
        self.assertIn("131,310", [t.get_text() for t in capacity.texts])
        paces = capacity.collections[0].get_segments()  # the training's pace: 128 images per 99 ms
        self.assertAlmostEqual(paces[1][0][0], 128 * 1000 / 99.0)
        # A report without loader_runs draws nothing: the skip reason names the key and the lesson.
        self.assertIn("written by lesson 08", self.report.chart_data_loading(lessons_01_to_04()))

    def test_counting_build_chart_from_bench_once_csv(self):
        counts = os.path.join(self.tmp.name, "access_counts.csv")
        with open(counts, "w", encoding="utf-8") as f:
            f.write("step,global_ld_requests,global_ld_sectors,global_st_requests,global_st_sectors,shared_ld_requests,"
                    "shared_ld_wavefronts,shared_st_requests,shared_st_wavefronts,shared_ld_conflicts,"
                    "shared_st_conflicts\n"
                    "gemm 1 naive,1048576,17301504,2048,65536,0,0,0,0,0,0\n"
                    "gemm 3 smem_tiled,32768,131072,2048,8192,1048576,1048576,32768,32768,0,0\n"
                    "gemm 4 register_blocked,16384,65536,2048,65536,131072,196608,16384,24576,65536,8192\n"
                    "hgemm 2 block_tile,2048,32768,2048,16384,4096,16384,2048,12288,0,4096\n")
        paths = self.write_reports(lessons_01_to_04())
        result = self.run_script(*paths, "--out", self.out, "--counts", counts)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_png("gemm_counts.png")
        self.assertIn("](gemm_counts.png)", self.readme())
        figure, _ = self.report.chart_gemm_counts(self.report.read_counts_csv(counts))
        self.assertEqual([b.get_height() for b in figure.axes[0].patches], [16.5, 4.0, 4.0])  # sectors per request
        self.assertEqual([b.get_height() for b in figure.axes[3].patches][2], 0.5)  # step 4's conflicts
        # A file without GEMM rows, or not readable: one skip line, no chart.
        with open(counts, "w", encoding="utf-8") as f:
            f.write("step,global_ld_requests\nhgemm 1 warp_tile,5\n")
        result = self.run_script(*paths, "--out", self.out, "--counts", counts)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("skipping 11. GEMM steps", result.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.out, "gemm_counts.png")))

    def test_broken_file_exits_2_with_one_message(self):
        good = self.write_reports(lessons_01_to_04()[:1])[0]
        broken = os.path.join(self.tmp.name, "broken.json")
        with open(broken, "w", encoding="utf-8") as f:
            f.write("{\"program\": ")
        result = self.run_script(good, broken, "--out", self.out)
        self.assertEqual(result.returncode, 2)
        self.assertIn("broken.json", result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertFalse(os.path.exists(self.out))  # nothing written


if __name__ == "__main__":
    unittest.main()
