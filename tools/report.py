#!/usr/bin/env python3
"""Charts comparing the lessons, from the JSON reports they write with --json FILE (`make report` runs it).

    python3 tools/report.py build/cpu/results/*.json --out report/ [--command "CMD" ...]

Writes PNG charts into OUT (matplotlib's Agg backend: no display needed) and OUT/README.md embedding them, with
where the numbers come from: the device, the flavor, the git commit ("+dirty" when the work tree has changes), the
date and the commands that made them (each --command, then this script's own). Every chart says on its face whether
its numbers are GPU numbers or CPU-backend numbers (the reports' "backend" and "device").

    time_per_phase.png   ms per epoch in each timed phase, stacked, per lesson (and the epoch's wall time)
    h2d_bytes.png        host->device bytes per epoch per lesson (the "h2d" phase)
    peak_memory.png      peak device memory by category per lesson, stacked (and the peak of the total)
    accuracy.png         final test accuracy per lesson, and test accuracy after each epoch
    gemm_steps.png       lesson 04: one training step's forward and backward with each GEMM step
    precision.png        lesson 05: results.precision_runs (accuracy, stalled updates, underflow with/without scaling)
    checkpointing.png    lesson 06: results.checkpoint_runs (activation memory against time per policy)
    batch_sweep.png      lesson 07: results.batch_sweep (samples/s and peak memory against batch size)
    data_loading.png     lesson 08: results.loader_runs (a step's time by what it waited for; the loader's images/s)

A chart whose data no report has (a lesson not written yet, or not run) is skipped with one line saying so, and a
PNG of it left by an earlier run is removed, so OUT never shows stale charts. Exit codes: 0 done, 1 matplotlib
missing, 2 a file that is not a lesson report. Reads the reports with tools/compare_lessons.py's helpers.
"""

import argparse
import datetime
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_lessons as cl  # noqa: E402  (beside this file)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024.0 * 1024.0
DPI = 120
# The writers' orders (common/phase_timer.h, common/memory_ledger.h), so colors mean the same in every chart.
PHASES = ("h2d", "input_wait", "normalize", "forward", "loss", "backward", "optimizer", "d2h", "host")
CATEGORIES = ("parameters", "gradients", "optimizer_state", "master_weights", "activations", "input_staging",
              "workspace")


# ---- reading the reports -------------------------------------------------------------------------------------------

def lesson_label(report, index):
    """'04 fast kernels' from "lesson04_fast_kernels"; 'report 3' when the program is not recorded."""
    program = report.get("program")
    if not isinstance(program, str) or not program:
        return f"report {index + 1}"
    match = re.fullmatch(r"lesson(\d+)_(.+)", program)
    return f"{match.group(1)} {match.group(2).replace('_', ' ')}" if match else program


def labels_of(reports):
    """One label per report; a lesson given twice gets ' #2', ' #3' so that bars stay apart."""
    labels, seen = [], {}
    for i, report in enumerate(reports):
        label = lesson_label(report, i)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return labels


def tick(label):
    """Under a bar: the number, then the name wrapped to keep neighbouring labels apart."""
    number, _, name = label.partition(" ")
    return number + ("\n" + textwrap.fill(name, 13) if name else "")


def timed_epochs(report):
    return [e for e in cl.epochs_of(report) if isinstance(cl.get(e, "timing", "phases"), dict)]


def phase_means(report):
    """{phase: mean ms per epoch} over the epochs that have timing (a phase missing from an epoch had no calls: 0)."""
    epochs = timed_epochs(report)
    totals = {}
    for epoch in epochs:
        for name, phase in epoch["timing"]["phases"].items():
            ms = cl.number(cl.get(phase, "ms"))
            if ms is not None:
                totals[name] = totals.get(name, 0.0) + ms
    return {name: total / len(epochs) for name, total in totals.items()}


def ordered(names, order):
    """`names` in the writer's order, anything unknown after it."""
    return [n for n in order if n in names] + sorted(n for n in names if n not in order)


def finite(value):
    return cl.number(value) is not None


def runs_of(reports, key):
    """The first report whose results[key] is a non-empty list of objects, and that list; or (None, reason)."""
    for report in reports:
        runs = cl.get(report, "results", key)
        if isinstance(runs, list) and any(isinstance(r, dict) for r in runs):
            return report, [r for r in runs if isinstance(r, dict)]
    return None, f'no report has results["{key}"]'


# ---- what every chart says about its numbers ---------------------------------------------------------------------

def source_note(reports):
    """Whether the figures are a GPU's or the CPU backend's, for the face of every chart."""
    backends = {r.get("backend") if isinstance(r.get("backend"), str) else None for r in reports}
    devices = list(dict.fromkeys(r["device"] for r in reports if isinstance(r.get("device"), str) and r["device"]))
    if backends == {"cpu"}:
        return "CPU-backend numbers (no GPU): times are CPU timings, not a GPU's"
    if backends == {"cuda"}:
        return "GPU numbers: " + ("; ".join(devices) if devices else "device not recorded")
    if "cpu" in backends and "cuda" in backends:
        return "MIXED: some CPU-backend numbers, some GPU numbers; do not compare across them"
    return "backend not recorded: GPU or CPU-backend numbers unknown"


def marked_label(label, marks):
    """A bar's label with the letters tools/compare_lessons.py's table puts after its row's figure."""
    return label + (f" ({','.join(marks)})" if marks else "")


def legend_text(legend, letters):
    """The caption's sentence for the letters a chart shows (compare_lessons.row_markers's legend)."""
    lines = [f"{letter}: {text}." for letter, text in legend if letter in letters]
    return (" Letters, as in make run's table: " + " ".join(lines)) if lines else ""


def new_figure(title, reports, width, height, rows=1, cols=1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # without pyplot: no global state, no display needed

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)  # PNGs rendered by Agg
    figure.suptitle(f"{title}\n{source_note(reports)}", fontsize=12)
    axes = figure.subplots(rows, cols, squeeze=False)
    return figure, [ax for row in axes for ax in row]


def label_bars(ax, bars, texts):
    """A label above each bar (texts[i] None: none); the axis from 0, with room for the labels."""
    for bar, text in zip(bars, texts):
        if text is None:
            continue
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height()),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.margins(y=0.15)
    from_zero(ax)


def from_zero(ax):
    """Bars grow from 0: no negative range under them, and a panel of zeros still has an axis to stand on."""
    top = max((p.get_y() + p.get_height() for p in ax.patches), default=0)
    if top > 0:
        ax.set_ylim(bottom=0, auto=None)  # auto=None: autoscaling stays on, so bars drawn after this still fit
    else:
        ax.set_ylim(0, 1)


def thousands(ax, axis="y"):
    from matplotlib.ticker import FuncFormatter

    formatter = FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}")
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(formatter)


def legend_outside(ax, reverse=False, **kwargs):
    """To the right of the axes, so it never covers a bar; `reverse`: bars top first, as they stack (lines first)."""
    from matplotlib.container import BarContainer

    handles, names = ax.get_legend_handles_labels()
    if reverse:
        entries = list(zip(handles, names))
        bars = [e for e in entries if isinstance(e[0], BarContainer)]
        entries = [e for e in entries if not isinstance(e[0], BarContainer)] + bars[::-1]
        handles, names = [h for h, _ in entries], [n for _, n in entries]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, **kwargs)


def dash(ax, x, values, name, scale=1.0):
    """A black dash across each bar at `values` (None: none), e.g. the wall time or the peak of the total."""
    points = [(i, scale * v) for i, v in zip(x, values) if v is not None]
    if points:
        ax.hlines([v for _, v in points], [i - 0.33 for i, _ in points], [i + 0.33 for i, _ in points],
                  colors="black", linewidths=2.5, zorder=3, label=name)


def missing_mark(ax, x, text="n/a"):
    ax.annotate(text, (x, 0), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8,
                color="gray")


def percent(value, digits=2):
    return f"{100 * value:.{digits}f}%"


def small_percent(value):
    """Fractions that may be tiny (underflow): 12.3%, 0.041%, 3.2e-05%."""
    p = 100 * value
    if p == 0:
        return "0%"
    if p >= 10:
        return f"{p:.1f}%"
    if p >= 0.01:
        return f"{p:.3g}%"
    return f"{p:.2g}%"


def colors(count):
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    return [palette[i % len(palette)] for i in range(count)]


# ---- the charts: each returns (figure, caption), or a string saying why it is skipped -------------------------------

def chart_time_per_phase(reports):
    _, time_marks, legend = cl.row_markers(reports)
    rows = [(marked_label(label, marks), phase_means(r),
             cl.mean(cl.number(cl.get(e, "timing", "wall_ms")) for e in timed_epochs(r)), len(timed_epochs(r)))
            for label, r, marks in zip(labels_of(reports), reports, time_marks)]
    rows = [row for row in rows if row[3] > 0]
    if not rows:
        return "no report has epochs with timing"
    phases = ordered({p for _, means, _, _ in rows for p in means}, PHASES)
    figure, (ax,) = new_figure("Time per phase, per epoch", reports, max(7.5, 1.25 * len(rows) + 4.5), 5.2)
    x = list(range(len(rows)))
    bottoms = [0.0] * len(rows)
    palette = colors(len(PHASES) + 4)
    for phase in phases:
        values = [means.get(phase, 0.0) for _, means, _, _ in rows]
        color = palette[PHASES.index(phase)] if phase in PHASES else None
        ax.bar(x, values, 0.6, bottom=bottoms, label=phase.replace("_", " "), color=color)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    walls = [wall for _, _, wall, _ in rows]
    dash(ax, x, walls, "wall (host clock)")
    for i, (total, wall) in enumerate(zip(bottoms, walls)):
        text = f"phases {total:,.0f} ms" + (f"\nwall {wall:,.0f} ms" if wall is not None else "")
        ax.annotate(text, (i, max(total, wall or 0)), xytext=(0, 4), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
    ax.margins(y=0.15)
    ax.set_ylim(bottom=0)
    ax.set_xticks(x, [tick(label) for label, _, _, _ in rows])
    epochs = sorted({n for _, _, _, n in rows})
    if epochs == [1]:
        ax.set_ylabel("ms in the one epoch each lesson ran")
    else:
        ax.set_ylabel(f"ms per epoch (the mean of each lesson's {' or '.join(map(str, epochs))} epochs)")
    thousands(ax)
    legend_outside(ax, title="phase", reverse=True)
    caption = ("Mean time per epoch in each timed phase, stacked (the label gives their sum); the black dash is the "
               "epoch's wall time on the host clock. Time between phases (launch gaps, waits) is in the wall time "
               "only; phases that overlap (a copy on another stream) can add up to more than it."
               + legend_text(legend, {m for marks in time_marks for m in marks}))
    return figure, caption


TIMELINE_LESSONS = ("01", "02", "03", "08")


def trace_of(report):
    """The --trace timeline beside a report (lessonNN.trace.json), and whether it is an asynchronous CPU run."""
    path = report.get("_file")
    if not isinstance(path, str):
        return None, False
    stem = path[:-5] if path.endswith(".json") else path
    if report.get("backend") == "cpu" and os.path.isfile(stem + ".async.trace.json"):
        return stem + ".async.trace.json", True
    return (stem + ".trace.json", False) if os.path.isfile(stem + ".trace.json") else (None, False)


def chart_timelines(reports):
    """Lessons 01-03 (and 08): the first traced steps of epoch 1, a row per stream and one for the host thread."""
    import json
    panels = []
    for label, report in zip(labels_of(reports), reports):
        if str(report.get("program", ""))[6:8] not in TIMELINE_LESSONS:
            continue
        path, asynchronous = trace_of(report)
        if path is None:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                trace = json.load(f)
            events = trace["traceEvents"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
        slices = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("epoch") == 1]
        if slices:
            panels.append((label, report, asynchronous, names, slices))
    if not panels:
        return "no lesson 01-03 report has a --trace timeline beside it (lessonNN.trace.json: make report writes them)"
    figure, axes = new_figure("The first training steps on a timeline (--trace)", [p[1] for p in panels], 12.0,
                              1.5 + 2.0 * len(panels), rows=len(panels))
    palette = dict(zip(PHASES, colors(len(PHASES))))
    seen = set()
    for ax, (label, report, asynchronous, names, slices) in zip(axes, panels):
        origin = min(s["ts"] for s in slices)
        tracks = sorted({s["tid"] for s in slices})
        for row, tid in enumerate(tracks):
            for s in slices:
                if s["tid"] != tid:
                    continue
                phase = s["name"].replace(" ", "_")
                ax.broken_barh([((s["ts"] - origin) / 1e3, max(s["dur"] / 1e3, 1e-6))], (row - 0.35, 0.7),
                               color=palette.get(phase, "grey"), label=None if phase in seen else s["name"])
                seen.add(phase)
        ax.set_yticks(range(len(tracks)), [names.get(t, f"track {t}").split(" (")[0] for t in tracks], fontsize=8)
        ax.invert_yaxis()
        backend = "GPU" if report.get("backend") == "cuda" else (
            "CPU backend, CUDA_CPU_ASYNC=1: streams run side by side" if asynchronous else
            "CPU backend: streams run one after the other")
        steps = len({s["args"].get("step") for s in slices if s["name"] == "optimizer"})  # whole steps
        ax.set_title(f"lesson {label}: epoch 1, first {steps} steps ({backend})", fontsize=10)
        ax.set_xlabel("ms from the first traced phase")
    handles, texts = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        h, t = ax.get_legend_handles_labels()
        handles, texts = handles + h, texts + t
    axes[0].legend(handles, texts, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    caption = ("Each lesson's first steps as its --trace file records them (open the lessonNN.trace.json files in "
               "ui.perfetto.dev for every step traced): a row per stream, timed by CUDA events, and the host thread. "
               "Lesson 01 copies fp32 images and computes on one stream, one after the other; lesson 02's copy is a "
               "quarter as long (uint8); lesson 03 copies on a stream of its own, the next batch while this one "
               "computes. On the CPU backend the times are CPU timings, and lesson 03's timeline comes from a run "
               "with CUDA_CPU_ASYNC=1, where the backend's streams really overlap.")
    return figure, caption


def chart_h2d_bytes(reports):
    labels = labels_of(reports)
    values = [cl.h2d_mean(r, "bytes") for r in reports]
    if all(v is None for v in values) and not any(timed_epochs(r) for r in reports):
        return "no report has epochs with timing"
    figure, (ax,) = new_figure("Host→device bytes per epoch", reports, max(6.5, 1.2 * len(reports) + 3), 4.8)
    x = list(range(len(reports)))
    bars = ax.bar(x, [(v or 0) / MIB for v in values], 0.6, color=colors(1)[0])
    label_bars(ax, bars, [cl.format_bytes(v) if v is not None else None for v in values])
    for i, v in enumerate(values):
        if v is None:
            missing_mark(ax, i, "no h2d phase")
    ax.set_xticks(x, [tick(label) for label in labels])
    ax.set_ylabel("MiB per epoch (mean over epochs)")
    thousands(ax)
    caption = ("Bytes copied host→device per epoch in the timed `h2d` phase (training batches; the test set, "
               "uploaded once before training, is not in it). A lesson that keeps the data on the device has none.")
    return figure, caption


def chart_roofline(reports):
    """Each lesson's phases (FLOPs / device bytes vs achieved FLOP/s) under the device's roof: GPU runs only."""
    gpu = [(label, r) for label, r in zip(labels_of(reports), reports)
           if r.get("backend") == "cuda" and isinstance(r.get("device_peaks"), dict) and r["device_peaks"].get("known")]
    if not gpu:
        return ("drawn only from a GPU run: the roof is the device's peaks (device_peaks in the JSON), which the CPU "
                "backend does not have (its reports still carry each phase's FLOPs and bytes)")
    peaks = gpu[0][1]["device_peaks"]
    fp32, tensor, dram = peaks["fp32_flops"], peaks["fp16_tensor_flops"], peaks["dram_bytes_per_s"]
    figure, (ax,) = new_figure("Roofline: each phase's arithmetic intensity against the FLOP/s it reached",
                               [r for _, r in gpu], 10.0, 6.5)
    xs = [2.0 ** k for k in range(-6, 13)]
    ax.plot(xs, [min(fp32, x * dram) for x in xs], color="black", linewidth=1.5,
            label=f"fp32 roof ({fp32 / 1e12:.1f} TFLOP/s, {dram / 1e9:.0f} GB/s)")
    if tensor > 0:
        ax.plot(xs, [min(tensor, x * dram) for x in xs], color="grey", linestyle="--", linewidth=1,
                label=f"fp16 tensor-core roof ({tensor / 1e12:.0f} TFLOP/s)")
    markers = "osD^v<>ph"
    palette = colors(len(PHASES))
    plotted = 0
    for i, (label, report) in enumerate(gpu):
        phases = phase_totals(report)
        for phase, totals in phases.items():
            flops, bytes_, ms = totals.get("flops", 0), totals.get("bytes_device", 0), totals.get("ms", 0)
            if not (finite(flops) and finite(bytes_) and finite(ms)) or flops <= 0 or bytes_ <= 0 or ms <= 0:
                continue
            ax.scatter(flops / bytes_, flops / (ms / 1e3), marker=markers[i % len(markers)], s=40,
                       color=palette[PHASES.index(phase)] if phase in PHASES else "grey",
                       label=f"{tick(label)} {phase}")
            plotted += 1
    if not plotted:
        return "no GPU report has phases with FLOPs and device bytes (epochs[].timing.phases.<p>.flops)"
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity: FLOPs per byte of device memory (the lower bound of common/phase_work.h)")
    ax.set_ylabel("achieved FLOP/s")
    legend_outside(ax)
    caption = ("Each lesson's compute phases as points: x is the work's FLOPs per byte it must move, y the FLOP/s "
               "it reached (all epochs). Under the slanted part of the roof a phase is limited by memory bandwidth, "
               "under the flat part by arithmetic; far below both it is latency- or launch-bound. The bytes are a "
               "lower bound, so a naive kernel's point sits where a perfect one's would at that speed.")
    return figure, caption


def phase_totals(report):
    """{phase: {"ms", "flops", "bytes_device"}} summed over a report's epochs."""
    out = {}
    for epoch in report.get("epochs", []):
        phases = epoch.get("timing", {}).get("phases", {}) if isinstance(epoch, dict) else {}
        for name, values in phases.items():
            if not isinstance(values, dict):
                continue
            total = out.setdefault(name, {"ms": 0.0, "flops": 0.0, "bytes_device": 0.0})
            for key in total:
                if finite(values.get(key)):
                    total[key] += values[key]
    return out


def chart_peak_memory(reports):
    pairs = [(label, cl.get(r, "memory", "device")) for label, r in zip(labels_of(reports), reports)]
    pairs = [(label, device) for label, device in pairs if isinstance(device, dict)]
    if not pairs:
        return "no report has a memory section"
    categories = ordered({c for _, d in pairs for c in d if c != "total" and isinstance(d[c], dict)}, CATEGORIES)
    figure, (ax,) = new_figure("Peak device memory by category", [r for r in reports if cl.get(r, "memory")],
                               max(7.5, 1.25 * len(pairs) + 4.5), 5.2)
    x = list(range(len(pairs)))
    bottoms = [0.0] * len(pairs)
    palette = colors(len(CATEGORIES) + 4)
    for category in categories:
        values = [(cl.number(cl.get(d, category, "peak_bytes")) or 0) / MIB for _, d in pairs]
        if not any(values):
            continue
        color = palette[CATEGORIES.index(category)] if category in CATEGORIES else None
        ax.bar(x, values, 0.6, bottom=bottoms, label=category.replace("_", " "), color=color)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    totals = [cl.number(cl.get(d, "total", "peak_bytes")) for _, d in pairs]
    dash(ax, x, totals, "peak of the total", 1 / MIB)
    for i, (bottom, total) in enumerate(zip(bottoms, totals)):
        top = max(bottom, (total or 0) / MIB)
        text = cl.format_bytes(total) if total is not None else cl.format_bytes(bottom * MIB)
        ax.annotate(text, (i, top), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.margins(y=0.12)
    ax.set_ylim(bottom=0)
    ax.set_xticks(x, [tick(label) for label, _ in pairs])
    ax.set_ylabel("MiB (peak per category)")
    thousands(ax)
    legend_outside(ax, title="category", reverse=True)
    caption = ("Each category's peak device bytes, stacked, as counted by the memory ledger (every allocation goes "
               "through it); the black dash and the label are the peak of the total. The categories may peak at "
               "different times, so the stack can stand above the dash.")
    return figure, caption


def chart_accuracy(reports):
    accuracy_marks, _, legend = cl.row_markers(reports)
    labels = labels_of(reports)
    finals = [cl.final_accuracy(r) for r in reports]
    if all(f is None for f in finals):
        return "no report has a test accuracy"
    figure, (left, right) = new_figure("Test accuracy", reports, 13.0, max(4.5, 0.45 * len(reports) + 2.5), 1, 2)
    y = list(range(len(reports)))
    palette = colors(len(reports))
    left.barh(y, [100 * (f or 0) for f in finals], 0.6, color=palette)
    for i, f in enumerate(finals):
        left.annotate(cl.marked(percent(f), accuracy_marks[i]) if f is not None else "n/a", (100 * (f or 0), i),
                      xytext=(4, 0),
                      textcoords="offset points", ha="left", va="center", fontsize=8,
                      color="black" if f is not None else "gray")
    left.set_xlim(0, 115)
    left.set_xticks(range(0, 101, 20))
    left.set_yticks(y, labels)
    left.invert_yaxis()  # the first lesson on top
    left.set_xlabel("test accuracy after the last epoch (%)")
    left.set_title("final", fontsize=10)

    markers = "osD^vP*Xh<>"
    count = len(reports)
    for i, (label, r) in enumerate(zip(labels, reports)):
        points = [(e.get("epoch"), cl.number(e.get("test_accuracy"))) for e in cl.epochs_of(r)]
        points = [(n, a) for n, a in points if isinstance(n, (int, float)) and a is not None]
        if not points:
            continue
        offset = (i - (count - 1) / 2) * 0.03  # lessons with equal curves (same weights) stay visible side by side
        right.plot([n + offset for n, _ in points], [100 * a for _, a in points], marker=markers[i % len(markers)],
                   color=palette[i], label=label, linewidth=1.5, markersize=5, alpha=0.9)
    right.set_xlabel("epoch")
    right.set_ylabel("test accuracy (%)")
    right.set_title("after each epoch", fontsize=10)
    from matplotlib.ticker import MaxNLocator

    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend_outside(right, title="lesson")
    caption = ("Left: test accuracy after the last epoch. Right: after each epoch (lessons with identical curves, "
               "e.g. the same weights bit for bit, are drawn slightly apart so that each stays visible)."
               + legend_text(legend, {m for marks in accuracy_marks for m in marks}))
    return figure, caption


def chart_gemm_steps(reports):
    for label, report in zip(labels_of(reports), reports):
        results = report.get("results") if isinstance(report.get("results"), dict) else {}
        steps = {}
        for key, value in results.items():
            match = re.fullmatch(r"gemm_v(\d+)_(forward|backward)_ms", key)
            if match and finite(value):
                steps.setdefault(int(match.group(1)), {})[match.group(2)] = value
        if steps:
            break
    else:
        return 'no report has results["gemm_vN_forward_ms"] (lesson 04)'
    versions = sorted(steps)
    forward = [steps[v].get("forward", 0.0) for v in versions]
    backward = [steps[v].get("backward", 0.0) for v in versions]
    batch = cl.get(report, "config", "batch")
    figure, (ax,) = new_figure(f"Lesson {label}: one training step with each GEMM step", [report],
                               max(7.5, 1.1 * len(versions) + 4), 5.0)
    x = list(range(len(versions)))
    palette = colors(len(PHASES))
    ax.bar(x, forward, 0.6, label="forward", color=palette[PHASES.index("forward")])
    ax.bar(x, backward, 0.6, bottom=forward, label="backward", color=palette[PHASES.index("backward")])
    totals = [f + b for f, b in zip(forward, backward)]
    first = totals[0] if versions[0] == 1 and totals[0] > 0 else None
    for i, total in enumerate(totals):
        text = f"{total:,.3g} ms" if total < 100 else f"{total:,.0f} ms"
        if first is not None and total > 0:
            text += f"\n{first / total:.2f}× v1"
        ax.annotate(text, (i, total), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                    fontsize=8)
    ax.margins(y=0.2)
    ax.set_xticks(x, [f"v{v}" for v in versions])
    ax.set_xlabel("GEMM step (kernels/README.md: v1 naive … each step adds one idea)")
    ax.set_ylabel(f"ms per training step{f' of {batch} images' if isinstance(batch, int) else ''}")
    thousands(ax)
    legend_outside(ax)
    caption = ("Forward and backward of one training step (no optimizer) with each version of the GEMM, stacked; "
               "the label is their sum and the speed-up over v1. On a GPU at batch 128 the last steps are "
               "launch-bound (lessons/lesson.cu explains); the CPU backend's times show the work, not a GPU's.")
    return figure, caption


def values_of(runs, key):
    return [cl.number(run.get(key)) for run in runs]


def bar_panel(ax, names, values, ylabel, formatter, color, title=None, scale=1.0):
    x = list(range(len(names)))
    bars = ax.bar(x, [scale * (v or 0) for v in values], 0.6, color=color)
    label_bars(ax, bars, [formatter(v) if v is not None else None for v in values])
    for i, v in enumerate(values):
        if v is None:
            missing_mark(ax, i)
    ax.set_xticks(x, names)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return bars


def chart_precision(reports):
    report, runs = runs_of(reports, "precision_runs")
    if report is None:
        return runs + " (written by lesson 05)"
    modes = [str(run.get("mode", f"run {i + 1}")) for i, run in enumerate(runs)]
    figure, axes = new_figure("Lesson 05: precision modes compared", [report], 13.5, 8.0, 2, 3)
    palette = colors(6)
    bar_panel(axes[0], modes, values_of(runs, "test_accuracy"), "test accuracy (%)", percent, palette[0],
              "test accuracy", 100)
    axes[0].set_ylim(0, 112)
    bar_panel(axes[1], modes, values_of(runs, "final_train_loss"), "mean training loss, last epoch",
              lambda v: f"{v:.4g}", palette[1], "final training loss")
    bar_panel(axes[2], modes, values_of(runs, "stalled_update_fraction"), "updates lost to rounding (%)",
              small_percent, palette[2], "stalled updates (w + Δw == w)", 100)

    ax = axes[3]
    x = list(range(len(modes)))
    unscaled, scaled = values_of(runs, "underflow_fraction_unscaled"), values_of(runs, "underflow_fraction_scaled")
    for offset, values, name, color in ((-0.2, unscaled, "without loss scaling", palette[3]),
                                        (0.2, scaled, "with loss scaling", palette[4])):
        bars = ax.bar([i + offset for i in x], [100 * (v or 0) for v in values], 0.38, label=name, color=color)
        label_bars(ax, bars, [small_percent(v) if v is not None else None for v in values])
        for i, v in enumerate(values):
            if v is None:
                missing_mark(ax, i + offset)
    ax.set_xticks(x, modes)
    ax.set_ylabel("gradients flushed to zero in fp16 (%)")
    ax.set_title("gradient underflow", fontsize=10)
    ax.margins(y=0.35)
    from_zero(ax)
    ax.legend(loc="upper center", ncol=2, fontsize=8, frameon=False)

    bar_panel(axes[4], modes, values_of(runs, "seconds_per_epoch"), "seconds per epoch", lambda v: f"{v:.3g} s",
              palette[5], "time per epoch")
    bar_panel(axes[5], modes, values_of(runs, "peak_device_bytes"), "MiB (peak of the total)", cl.format_bytes,
              palette[0], "peak device memory", 1 / MIB)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=9)
    caption = ("The same model trained in each precision mode (results.precision_runs). Stalled updates: the "
               "fraction of weight updates that rounding to the weights' precision cancels. Underflow: the "
               "fraction of gradient values that are zero in fp16 but not in fp32, without and with loss scaling.")
    return figure, caption


def chart_checkpointing(reports):
    report, runs = runs_of(reports, "checkpoint_runs")
    if report is None:
        return runs + " (written by lesson 06)"
    policies = [str(run.get("policy", f"run {i + 1}")) for i, run in enumerate(runs)]
    figure, (scatter, memory, fits) = new_figure("Lesson 06: activation checkpointing, memory against time",
                                                 [report], 15.0, 5.2, 1, 3)
    palette = colors(len(policies) + 3)
    activation = values_of(runs, "activation_peak_bytes")
    seconds = values_of(runs, "seconds_per_epoch")
    for i, (policy, a, s) in enumerate(zip(policies, activation, seconds)):
        if a is None or s is None:
            continue
        scatter.scatter([a / MIB], [s], s=60, color=palette[i], zorder=3, label=policy)
    scatter.set_xlabel("activation memory at its peak (MiB)")
    scatter.set_ylabel("seconds per epoch")
    scatter.set_title("the trade: less memory, more time", fontsize=10)
    scatter.margins(x=0.2, y=0.2)
    scatter.legend(fontsize=8, frameon=False, title="policy", loc="best")

    x = list(range(len(policies)))
    series = (("activation_peak_bytes", "activations, measured"), ("predicted_activation_bytes", "activations, "
              "predicted"), ("peak_device_bytes", "whole device, peak"))
    for k, (key, name) in enumerate(series):
        values = values_of(runs, key)
        offset = (k - 1) * 0.27
        bars = memory.bar([i + offset for i in x], [(v or 0) / MIB for v in values], 0.26, label=name,
                          color=palette[len(policies) + k])
        label_bars(memory, bars, [f"{v / MIB:,.3g}" if v is not None else None for v in values])
    memory.set_xticks(x, policies)
    memory.set_ylabel("MiB")
    memory.set_title("memory per policy (labels in MiB)", fontsize=10)
    memory.margins(y=0.35)
    memory.legend(fontsize=8, frameon=False, loc="best")

    largest = values_of(runs, "largest_batch_that_fits")
    extra = values_of(runs, "extra_forward_flops_fraction")
    texts = [(f"{v:,.0f}" if v is not None else None) for v in largest]
    texts = [None if t is None else t + (f"\n+{100 * e:.0f}% fwd FLOPs" if e is not None else "")
             for t, e in zip(texts, extra)]
    bars = fits.bar(x, [v or 0 for v in largest], 0.6, color=[palette[i] for i in x])
    label_bars(fits, bars, texts)
    fits.margins(y=0.3)
    fits.set_xticks(x, policies)
    fits.set_ylabel("largest batch that fits the device")
    fits.set_title("what the memory buys (and its recompute cost)", fontsize=10)
    thousands(fits)
    for ax in (scatter, memory, fits):
        ax.tick_params(axis="x", labelsize=9)
    caption = ("Each checkpointing policy (results.checkpoint_runs): activation memory at its peak against the time "
               "per epoch; measured against predicted activation bytes and the whole device's peak; and the largest "
               "batch that fits, with the extra forward FLOPs the recomputation costs.")
    return figure, caption


def chart_batch_sweep(reports):
    report, runs = runs_of(reports, "batch_sweep")
    if report is None:
        return runs + " (written by lesson 07)"
    runs = sorted((r for r in runs if finite(r.get("batch")) and r["batch"] > 0), key=lambda r: r["batch"])
    if not runs:
        return 'results["batch_sweep"] has no run with a batch size'
    from matplotlib.ticker import FixedLocator, NullLocator

    batches = [r["batch"] for r in runs]
    largest = cl.number(cl.get(report, "results", "largest_batch_that_fits"))
    figure, axes = new_figure("Lesson 07: batch size", [report], 13.0, 8.5, 2, 2)
    palette = colors(8)
    # No legend inside a panel (it could cover a point): the largest batch is named in the axis label, the device's
    # memory on its line, the two y axes of the last panel by their colors, and the third panel's legend is outside.
    # Far beyond the sweep (a GPU fits far larger batches than the sweep needs), the line would squash the points.
    show_largest = largest is not None and largest <= 2 * max(batches)
    xlabel = "batch size (log₂ scale)"
    if largest is not None:
        xlabel += (f"; dashed: the largest that fits, {largest:,.0f}" if show_largest else
                   f"; the largest that fits, {largest:,.0f}, is off the axis")

    def log2_axis(ax):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(batches))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(batches, [str(int(b)) for b in batches], fontsize=8)
        ax.set_xlabel(xlabel, fontsize=9)
        if show_largest:
            ax.axvline(largest, color="gray", linestyle="--", linewidth=1)

    def line(ax, values, color, name=None, scale=1.0, marker="o"):
        points = [(b, scale * v) for b, v in zip(batches, values) if v is not None]
        ax.plot([b for b, _ in points], [v for _, v in points], marker=marker, color=color, label=name)

    ax = axes[0]
    line(ax, values_of(runs, "samples_per_second"), palette[0])
    log2_axis(ax)
    ax.set_ylabel("training samples per second")
    ax.set_title("throughput", fontsize=10)
    thousands(ax)

    ax = axes[1]
    peaks = values_of(runs, "peak_device_bytes")
    line(ax, peaks, palette[1], scale=1 / MIB)
    log2_axis(ax)
    total = cl.number(cl.get(report, "memory", "device_info", "total_bytes"))
    title = "peak device memory"
    if total is not None and total <= 4 * max((p for p in peaks if p is not None), default=0):
        ax.axhline(total / MIB, color="black", linestyle=":", linewidth=1)
        ax.annotate(f"the device: {cl.format_bytes(total)}", (0.01, total / MIB), xycoords=("axes fraction", "data"),
                    xytext=(0, -3), textcoords="offset points", ha="left", va="top", fontsize=8)
    elif total is not None:
        title += f" (the device has {cl.format_bytes(total)})"  # a line that high would flatten the points
    ax.set_ylabel("peak device memory (MiB)")
    ax.set_title(title, fontsize=10)
    thousands(ax)

    ax = axes[2]
    for key, name, color, marker in (("copy_ms_per_step", "copy", palette[2], "o"),
                                     ("compute_ms_per_step", "compute", palette[3], "s"),
                                     ("input_wait_ms_per_step", "input wait", palette[7], "v"),
                                     ("host_gap_ms_per_step", "host gap", palette[4], "^")):
        values = values_of(runs, key)
        if any(v is not None and v > 0 for v in values):  # a log axis has no 0: a phase never timed is left out
            line(ax, values, color, name, marker=marker)
    log2_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("ms per step (log scale)")
    ax.set_title("where a step's time goes", fontsize=10)
    legend_outside(ax)

    ax = axes[3]
    line(ax, values_of(runs, "test_accuracy"), palette[5], scale=100)
    log2_axis(ax)
    ax.set_ylabel("test accuracy (%), circles", color=palette[5])
    ax.tick_params(axis="y", colors=palette[5])
    ax.set_title("accuracy, and the learning rate each batch size used", fontsize=10)
    lrs = values_of(runs, "lr")
    if any(v is not None for v in lrs):
        twin = ax.twinx()
        line(twin, lrs, palette[6], marker="x")
        twin.set_yscale("log")
        twin.set_ylabel("learning rate (log scale), crosses", color=palette[6])
        twin.tick_params(axis="y", which="both", colors=palette[6])
    caption = ("The same model at each batch size (results.batch_sweep), on a log₂ axis: throughput, peak device "
               "memory, the time of one step split into copy, compute and the host's gap between steps, and the "
               "test accuracy with the learning rate each size used. The dashed line is the largest batch that fits.")
    return figure, caption



# A step's time in lesson 08, as its table splits it (lessons/08_data_loading/loader_comparison.cu), in stack order.
LOADER_PARTS = (("loader_stall_ms_per_step", "loader stall"), ("back_pressure_ms_per_step", "back-pressure"),
                ("input_wait_ms_per_step", "input wait"), ("h2d_ms_per_step", "h2d"),
                ("kernels_ms_per_step", "kernels"))


def loader_run_label(run, index, main):
    """'host, 2 workers' as the lesson's LoaderMode::label() writes it; the main run (the last row) says so."""
    label = str(run["mode"]) if isinstance(run.get("mode"), str) else f"run {index + 1}"
    workers = run.get("workers")
    if isinstance(workers, int) and not isinstance(workers, bool):
        label += f", {workers} worker{'' if workers == 1 else 's'}"
    return label + (" (main run)" if main else "")


def ms_text(value):
    return f"{value:,.3g}" if value < 100 else f"{value:,.0f}"


def chart_data_loading(reports):
    report, runs = runs_of(reports, "loader_runs")
    if report is None:
        return runs + " (written by lesson 08)"
    if not any(finite(run.get(key)) for run in runs for key, _ in LOADER_PARTS):
        return 'results["loader_runs"] has no run with times per step'
    from matplotlib.ticker import FuncFormatter, NullFormatter

    labels = [loader_run_label(run, i, i == len(runs) - 1) for i, run in enumerate(runs)]
    figure, (stack, capacity) = new_figure("Lesson 08: the data-loading bottleneck", [report], 14.0,
                                           max(4.5, 0.5 * len(runs) + 2.5), 1, 2)
    y = list(range(len(runs)))
    palette = colors(len(PHASES) + 1)
    # The phases' colors where the part is a phase; kernels take forward's (the bulk of them), the loader's stall
    # the one color no phase uses, back-pressure (a wait for the device) a neutral one.
    part_colors = (palette[len(PHASES)], "tan", palette[PHASES.index("input_wait")],
                   palette[PHASES.index("h2d")], palette[PHASES.index("forward")])
    lefts = [0.0] * len(runs)
    for (key, name), color in zip(LOADER_PARTS, part_colors):
        values = [v or 0.0 for v in values_of(runs, key)]
        stack.barh(y, values, 0.6, left=lefts, label=name, color=color)
        lefts = [left + v for left, v in zip(lefts, values)]
    walls = values_of(runs, "wall_ms_per_step")
    # What the wall time holds beyond the four parts (the host's own work, launch gaps); none where they overlap
    # (on a GPU the host waits for the loader while the kernels it queued run), and then the stack passes the dash.
    others = [max(wall - left, 0.0) if wall is not None else 0.0 for wall, left in zip(walls, lefts)]
    stack.barh(y, others, 0.6, left=lefts, label="other", color="lightgray")
    points = [(i, wall) for i, wall in zip(y, walls) if wall is not None]
    if points:
        stack.vlines([wall for _, wall in points], [i - 0.33 for i, _ in points], [i + 0.33 for i, _ in points],
                     colors="black", linewidths=2.5, zorder=3, label="wall")
    busy = values_of(runs, "kernels_busy_fraction")
    for i, (left, wall, fraction) in enumerate(zip(lefts, walls, busy)):
        text = f"wall {ms_text(wall)} ms" if wall is not None else f"{ms_text(left)} ms"
        if fraction is not None:
            text += f"\nkernels {percent(fraction, 1)}"
        stack.annotate(text, (max(left, wall or 0), i), xytext=(4, 0), textcoords="offset points", ha="left",
                       va="center", fontsize=8)
    ends = [max(left, wall or 0) for left, wall in zip(lefts, walls)]
    stack.set_xlim(0, 1.35 * max(ends) if max(ends) > 0 else 1)  # room for the labels right of the bars
    stack.set_yticks(y, labels)
    stack.invert_yaxis()  # the first run on top, the main run last
    stack.set_xlabel("ms per training step (the mean over the run's steps)")
    stack.set_title("a step's time, by what it waited for", fontsize=10)
    thousands(stack, "x")
    # Under the panel rather than beside it, which would push the two panels apart.
    stack.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)

    images = values_of(runs, "loader_images_per_second")
    batch = cl.number(cl.get(report, "config", "batch"))
    # The pace the training took images at: a loader whose workers can fill fewer than this holds the step up.
    paces = [batch * 1000 / wall if batch and wall else None for wall in walls]
    positive = [v for v in images + paces if v is not None and v > 0]
    floor = min(positive, default=1) / 3  # a log axis has no 0: bars start at its left edge
    for i, value in enumerate(images):
        if value is not None and value > 0:
            capacity.barh([i], [value - floor], 0.6, left=floor, color=palette[len(PHASES)])
            capacity.annotate(f"{value:,.0f}", (value, i), xytext=(4, 0), textcoords="offset points", ha="left",
                              va="center", fontsize=8)
        else:
            capacity.annotate("not measured", (0.01, i), xycoords=("axes fraction", "data"), ha="left", va="center",
                              fontsize=8, color="gray")
    points = [(i, pace) for i, pace in zip(y, paces) if pace is not None]
    if points:
        capacity.vlines([pace for _, pace in points], [i - 0.33 for i, _ in points], [i + 0.33 for i, _ in points],
                        colors="black", linewidths=2.5, zorder=3, label="the training's pace\n(batch ÷ wall per step)")
        legend_outside(capacity)
    capacity.set_xscale("log")
    capacity.set_xlim(floor, max(positive, default=10) * 10)  # room for the labels
    capacity.xaxis.set_minor_formatter(NullFormatter())
    capacity.set_yticks(y, labels)
    capacity.invert_yaxis()
    capacity.set_xlabel("images per second (log scale)")
    capacity.set_title("what the loader's workers can fill when they never wait", fontsize=10)
    # 1k, 10k, 1M: "1,000,000" beside "10,000,000" would run into each other.
    capacity.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1e6:g}M" if v >= 1e6 else
                                                     f"{v / 1e3:g}k" if v >= 1e3 else f"{v:g}"))
    caption = ("Each run in results.loader_runs (the comparison runs train a few steps of epoch 1 from the same "
               "seed; the main run, last, the lesson's whole run): left, a training step's time split into the "
               "host's wait for the loader (loader stall, back-pressure), the stream's wait for the copy (input "
               "wait), the copy and the kernels, the rest of the wall time as other (the black dash is the wall "
               "time); right, the images per second the loader's "
               "workers can fill, against the pace the training took them at (the dash: batch ÷ wall per step).")
    if report.get("backend") == "cpu":
        caption += (" These are CPU timings: the loader's threads and the emulated GPU share the machine's cores, so "
                    "a worker more can slow the kernels as much as it speeds the loader, and the chart shows the "
                    "loader's capacity more than the stall a GPU would suffer.")
    elif report.get("backend") == "cuda":
        caption += (" On a GPU the host waits for the loader while the kernels it queued run, so the device stalls "
                    "only when the workers' capacity falls under the training's pace; back-pressure (waiting for a "
                    "staging slot the device has not copied out yet) means the device is the slower side.")
    return figure, caption

# (file name, heading, function)
def read_counts_csv(path):
    """The rows of `bench --once --csv` (the counting build): one per GEMM/HGEMM step, every count an int."""
    import csv
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key, value in row.items():
            if key != "step":
                row[key] = int(value)
    return rows


def chart_gemm_counts(rows):
    """Each fp32 GEMM step's memory requests as the counting build counted them (figures true on any machine)."""
    steps = [r for r in rows if r["step"].startswith("gemm ")]
    if not steps:
        return "the counts file has no `gemm N` rows"
    names = [" ".join(r["step"].split()[1:]) for r in steps]  # "1 naive"
    figure, axes = new_figure("", [], max(10.0, 1.5 * len(steps) + 4), 7.5, rows=2, cols=2)
    figure.suptitle("Each GEMM step's memory requests, counted from every warp's addresses\n(the CPU backend's "
                    "counting build: figures a GPU's profiler reports, no GPU needed)", fontsize=12)
    palette = colors(4)
    x = list(range(len(steps)))

    def panel(ax, values, title, ylabel, color, log=False, digits=2):
        texts = [("none" if v == 0 else f"{v:,.{digits}f}" if digits else f"{v:,.0f}") for v in values]
        if log:  # zeros have no bar on a log scale: a label at the axis says "none"
            bottom = min((v for v in values if v > 0), default=1) / 4
            bars = ax.bar(x, [v if v > 0 else bottom for v in values], 0.6, color=color)
            for bar, value in zip(bars, values):
                if value == 0:
                    bar.set_visible(False)
            ax.set_yscale("log")
            ax.set_ylim(bottom=bottom, top=max(values) * 8)
            for i, (v, text) in enumerate(zip(values, texts)):
                ax.annotate(text, (i, v if v > 0 else bottom), xytext=(0, 3), textcoords="offset points",
                            ha="center", va="bottom", fontsize=8)
        else:
            label_bars(ax, ax.bar(x, values, 0.6, color=color), texts)
            ax.margins(y=0.2)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xticks(x, [n.replace(" ", "\n", 1) for n in names], fontsize=8)

    def per(a, b):
        return [r[a] / r[b] if r[b] else 0.0 for r in steps]

    panel(axes[0], per("global_ld_sectors", "global_ld_requests"), "global load: 32-byte sectors per request",
          "sectors per request (4 = coalesced floats, 16 = float4s)", palette[0])
    panel(axes[1], [r["global_ld_sectors"] + r["global_st_sectors"] for r in steps],
          "global sectors moved (loads + stores)", "sectors (log scale)", palette[1], log=True, digits=0)
    panel(axes[2], [r["shared_ld_requests"] for r in steps], "shared-memory load requests",
          "requests (log scale; none before step 3)", palette[2], log=True, digits=0)
    panel(axes[3], per("shared_ld_conflicts", "shared_ld_requests"),
          "shared load: bank conflicts per request", "extra wavefronts per request (0: conflict-free)", palette[3])
    caption = ("One launch of each GEMM step at 256×256×256 (`bench --once` in the counting build, "
               "`build/cpu-counters`): what each warp's addresses ask of the memory system, counted per warp "
               "instruction as a GPU's L1 counts them. Step 2 coalesces (sectors per request fall to 2.5), step 3's "
               "shared tiles cut the global sectors by the tile factor, steps 4-5 cut the shared requests per "
               "multiply-add (register blocking, float4), and step 4's reads of its B tile are 2-way bank "
               "conflicted (step 5 removes it). These figures are the same on any machine; common/cpu_backend/README.md has the model.")
    return figure, caption


CHARTS = (
    ("time_per_phase.png", "1. Time per phase", chart_time_per_phase),
    ("h2d_bytes.png", "2. Host→device bytes per epoch", chart_h2d_bytes),
    ("timelines.png", "2b. Timelines of lessons 01-03 (--trace)", chart_timelines),
    ("peak_memory.png", "3. Peak device memory by category", chart_peak_memory),
    ("accuracy.png", "4. Test accuracy", chart_accuracy),
    ("gemm_steps.png", "5. Lesson 04: time by GEMM step", chart_gemm_steps),
    ("precision.png", "6. Lesson 05: precision modes", chart_precision),
    ("checkpointing.png", "7. Lesson 06: activation checkpointing", chart_checkpointing),
    ("batch_sweep.png", "8. Lesson 07: batch size", chart_batch_sweep),
    ("data_loading.png", "9. Lesson 08: the data-loading bottleneck", chart_data_loading),
    ("roofline.png", "10. Roofline: the phases against the device's limits (GPU runs)", chart_roofline),
)


# ---- provenance and the README ------------------------------------------------------------------------------------

def git_commit(exclude):
    """`git rev-parse --short HEAD`, "+dirty" when tracked or untracked files differ (the output folder aside)."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=30)
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        pathspec = ["--", "."] + ([f":(exclude){exclude}"] if exclude else [])
        status = subprocess.run(["git", "-C", REPO, "status", "--porcelain"] + pathspec, capture_output=True,
                                text=True, timeout=60)
        dirty = status.returncode != 0 or status.stdout.strip() != ""
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not found)"


def own_command(argv):
    """This script's command line ("python3" when that is the interpreter running it), less the --command options
    (the lines above it in the README)."""
    python = "python3"
    found = shutil.which("python3")
    if not found or os.path.realpath(found) != os.path.realpath(sys.executable):
        python = sys.executable
    words, skip = [], False
    for word in argv:
        if not skip and word == "--command":
            skip = True
        elif skip or word.startswith("--command="):
            skip = False
        else:
            words.append(word)
    return shlex.join([python, os.path.relpath(os.path.abspath(__file__))] + words)


def run_table(runs, keys):
    """A Markdown table of the runs' fields (for lessons 05-08, whose charts summarize several runs)."""
    keys = [k for k in keys if any(k in run for run in runs)]

    def cell(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "-" if value is None else str(value).replace("|", "\\|")
        if isinstance(value, float) and not math.isfinite(value):
            return "-"
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(cell(run.get(k)) for k in keys) + " |" for run in runs]
    return lines


RUN_TABLES = {
    "precision.png": ("precision_runs", ("mode", "test_accuracy", "final_train_loss", "stalled_update_fraction",
                                         "underflow_fraction_unscaled", "underflow_fraction_scaled",
                                         "overflow_fraction_scaled", "probe_scale", "seconds_per_epoch",
                                         "peak_device_bytes", "skipped_steps")),
    "checkpointing.png": ("checkpoint_runs", ("policy", "activation_peak_bytes", "predicted_activation_bytes",
                                              "peak_device_bytes", "extra_forward_flops_fraction",
                                              "seconds_per_epoch", "largest_batch_that_fits")),
    "batch_sweep.png": ("batch_sweep", ("batch", "lr", "steps", "samples_per_second", "ms_per_step",
                                        "copy_ms_per_step", "compute_ms_per_step", "input_wait_ms_per_step",
                                        "host_gap_ms_per_step", "peak_device_bytes", "activation_peak_bytes",
                                        "test_accuracy")),
    "data_loading.png": ("loader_runs", ("mode", "workers", "steps", "loader_stall_ms_per_step",
                                         "back_pressure_ms_per_step", "input_wait_ms_per_step", "h2d_ms_per_step", "kernels_ms_per_step",
                                         "wall_ms_per_step", "kernels_busy_fraction", "loader_images_per_second",
                                         "image_bytes_per_image", "test_accuracy")),
}


def readme(reports, files, drawn, skipped, commands, commit, date):
    backends = sorted({r.get("backend") if isinstance(r.get("backend"), str) else "not recorded" for r in reports})
    devices = list(dict.fromkeys(r["device"] for r in reports if isinstance(r.get("device"), str) and r["device"]))
    lines = [
        "# The lessons compared",
        "",
        "Generated by `make report` (`tools/report.py`) from the lessons' `--json` reports (the commands below); run it again "
        "rather than editing this file.",
        "",
        f"**{source_note(reports)}.**",
        "",
        "| | |",
        "|---|---|",
        f"| device | {'; '.join(devices) if devices else 'not recorded'} |",
        f"| flavor | {', '.join(backends)} (the reports' `backend`) |",
        f"| git commit | {commit} |",
        f"| date | {date} |",
        f"| reports | {', '.join(f'`{os.path.basename(f)}`' for f in files)} |",
        "",
        "Made with these commands:",
        "",
        "```",
        *commands,
        "```",
        "",
        "## The table `make run` prints",
        "",
    ]
    lines += cl.markdown_lines(reports) + [""]
    for name, heading, caption in drawn:
        lines += [f"## {heading}", "", f"![{heading}]({name})", "", caption, ""]
        if name in RUN_TABLES:
            key, keys = RUN_TABLES[name]
            _, runs = runs_of(reports, key)
            lines += run_table(runs, keys) + [""]
    if skipped:
        lines += ["## Not drawn", ""] + [f"- {heading}: {reason}." for heading, reason in skipped] + [""]
    return "\n".join(lines)


def write_atomically(path, write):
    temporary = path + ".tmp"
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def draw(reports):
    """[(file name, heading, figure or None, caption or the reason it is skipped)] for every chart."""
    out = []
    for name, heading, function in CHARTS:
        result = function(reports)
        if isinstance(result, str):
            out.append((name, heading, None, result))
        else:
            out.append((name, heading, result[0], result[1]))
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        description="Charts comparing the lessons from their --json reports, and a README.md embedding them.")
    parser.add_argument("files", nargs="+", metavar="FILE.json", help="a report written by a lesson's --json FILE")
    parser.add_argument("--out", default="report", help="the folder for the PNGs and README.md (default: report)")
    parser.add_argument("--counts", metavar="CSV",
                        help="the counting build's `bench --once --csv` file: adds the GEMM steps' memory-counts chart")
    parser.add_argument("--command", action="append", default=[], metavar="CMD",
                        help="a command that made the reports, for the README (repeat it, in order)")
    args = parser.parse_args(argv)

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("report.py: needs matplotlib (Debian/Ubuntu: apt-get install python3-matplotlib, which `make deps` "
              f"does; this is {sys.executable})", file=sys.stderr)
        return 1
    try:
        reports = [cl.load_report(path) for path in args.files]
        for report, path in zip(reports, args.files):
            report["_file"] = path  # for the --trace timeline beside it (chart_timelines)
    except cl.ReportError as error:
        print(f"report.py: {error}", file=sys.stderr)
        return 2

    os.makedirs(args.out, exist_ok=True)
    drawn, skipped = [], []
    for name, heading, figure, text in draw(reports):
        path = os.path.join(args.out, name)
        if figure is None:
            if os.path.exists(path):
                os.remove(path)  # an earlier run's chart would no longer match the reports
            skipped.append((heading, text))
            print(f"report.py: skipping {heading}: {text}")
            continue
        write_atomically(path, lambda p: figure.savefig(p, format="png"))
        drawn.append((name, heading, text))
        print(f"wrote {path}")

    if args.counts:
        name, heading = "gemm_counts.png", "11. GEMM steps: memory requests, counted (no GPU needed)"
        try:
            result = chart_gemm_counts(read_counts_csv(args.counts))
        except (OSError, ValueError, KeyError) as error:
            result = f"could not read {args.counts}: {error}"
        if isinstance(result, str):
            if os.path.exists(os.path.join(args.out, name)):
                os.remove(os.path.join(args.out, name))  # an earlier run's chart would no longer match
            skipped.append((heading, result))
            print(f"report.py: skipping {heading}: {result}")
        else:
            write_atomically(os.path.join(args.out, name), lambda p: result[0].savefig(p, format="png"))
            drawn.append((name, heading, result[1]))
            print(f"wrote {os.path.join(args.out, name)}")

    out_relative = os.path.relpath(os.path.abspath(args.out), REPO)
    exclude = None if out_relative.startswith("..") else out_relative
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commands = args.command + [own_command(argv)]
    text = readme(reports, args.files, drawn, skipped, commands, git_commit(exclude), date)
    path = os.path.join(args.out, "README.md")

    def write_text(p):
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)

    write_atomically(path, write_text)
    print(f"wrote {path} ({len(drawn)} chart{'s' if len(drawn) != 1 else ''}, {len(skipped)} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
