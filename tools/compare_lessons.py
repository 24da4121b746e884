#!/usr/bin/env python3
"""Compare lessons side by side from the JSON reports they write with --json FILE.

    python3 tools/compare_lessons.py build/cpu/results/*.json           # aligned plain-text table
    python3 tools/compare_lessons.py --markdown FILE.json [FILE.json ...]  # Markdown table, for a README

One row per file, in the order given, per epoch (one pass over the training images): the time, the host->device
bytes (the "h2d" phase) and whether they left pinned or pageable memory, the fewest bytes the
kernels must move in device memory and the model's GFLOPs (common/phase_work.h), peak device memory (through the
ledger) and the final test accuracy. Above the table: which backend produced the times (the CPU backend's are CPU
timings) and the data and settings the rows share. Every figure is like for like unless its row says otherwise: a row
trained with other settings (model, epochs, precision, augmentation, ...) carries a letter after its accuracy, and
on the CPU backend a time that goes the other way from a GPU's (slower than the lesson before it, at the same
settings) carries one after its time; the legend under the table says what each letter means. The byte and FLOP
columns hold on any machine. A figure a report does not have prints as "-". `make run` prints this table after the
lessons; tools/report.py's charts use the same markers (row_markers). Standard library only.
"""

import argparse
import json
import math
import sys
import textwrap

MISSING = "-"
# Settings that make two rows not like for like when they differ, with the value a lesson that does not record one
# trained with (None: no default, the lesson must record it). The checkpoint policy is not among them: lesson 06
# shows that it changes no result bit (only memory and time).
COMPARED_KEYS = {"layers": None, "batch": None, "epochs": None, "limit": None, "test_limit": None,
                 "precision": "fp32", "augment": "none", "ranks": 1}
COLUMNS = ("lesson", "time/epoch", "H2D/epoch", "from", "dev bytes/epoch", "GFLOP/epoch", "peak dev mem",
           "test acc")
COLUMN_NOTE = ("from: the host memory the epochs' copies left (pinned or pageable); dev bytes: the fewest "
               "device-memory bytes the kernels must move (each input read once, each output written once); "
               "GFLOP: the model's arithmetic (common/phase_work.h). These hold on any machine.")
# Why a speed idea can cost CPU time on the CPU backend (the "device" is this machine's cores), by lesson number.
CPU_TIME_REASONS = {
    "02": "the normalize kernel runs on the same CPU cores that normalized on the host in lesson 01, so only the "
          "bytes over the bus shrink (a quarter: H2D/epoch)",
    "03": "its loader thread and copy stream compete with the kernels for this machine's cores (on a GPU a copy "
          "engine moves the bytes beside the kernels)",
    "08": "its loader workers compete with the kernels for this machine's cores (on a GPU the kernels have the SMs "
          "to themselves)",
}
CPU_TIME_REASON = ("on the CPU backend this machine's cores run the kernels, the copies and the host's work alike, "
                   "so a GPU's speed idea can cost time here")


class ReportError(Exception):
    """A file that cannot be compared: unreadable, not JSON, not a report."""


def load_report(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ReportError(f"{path}: cannot read it ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a JSON report (not UTF-8 text)") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    if not isinstance(report, dict):
        raise ReportError(f"{path}: not a lesson report (the JSON is a {type(report).__name__}, not an object)")
    return report


def get(tree, *keys):
    """tree[k0][k1]... or None where a key is missing or a level is not an object."""
    for key in keys:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def number(value):
    """value if it is a finite JSON number (the reports write NaN and infinities as null), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def epochs_of(report):
    epochs = report.get("epochs")
    return [e for e in epochs if isinstance(e, dict)] if isinstance(epochs, list) else []


def h2d_mean(report, field):
    """Mean over epochs of timing.phases.h2d.<field>. An epoch whose phases lack "h2d" had no such copy (the
    writer leaves out phases with no calls), so it counts as 0; None when no epoch has the phase at all."""
    values, seen = [], False
    for epoch in epochs_of(report):
        phases = get(epoch, "timing", "phases")
        if not isinstance(phases, dict):
            continue  # no timing for this epoch: unknown, not zero
        if "h2d" in phases:
            seen = True
            values.append(number(get(phases, "h2d", field)))
        else:
            values.append(0)
    return mean(values) if seen else None


def precise(value, unit):
    """3 significant figures or so, as the lessons' own tables print: 4.56, 45.6, 456."""
    return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"


def format_seconds(seconds):
    if seconds is None:
        return MISSING
    return precise(seconds * 1000, "ms") if seconds < 1 else precise(seconds, "s")


def format_bytes(count):
    """Binary units like common/report.cpp's format_bytes: 512 B, 4.00 KiB, 36.8 MiB, 1.25 GiB."""
    if count is None:
        return MISSING
    if count < 1024:
        return f"{count:.0f} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return precise(value, unit)


def format_accuracy(fraction):
    return MISSING if fraction is None else f"{100 * fraction:.2f}%"


def epoch_mean(report, field):
    """Mean over the timed epochs of the sum over phases of timing.phases.*.<field> (phase_work's "flops" and
    "bytes_device"); None when no phase has the field."""
    totals = []
    for epoch in epochs_of(report):
        phases = get(epoch, "timing", "phases")
        if not isinstance(phases, dict):
            continue
        values = [number(get(phase, field)) for phase in phases.values()]
        values = [v for v in values if v is not None]
        if values:
            totals.append(sum(values))
    return mean(totals)


def copied_from(report):
    """Where the epochs' host->device copies came from: "pinned" when the run's bytes sent from pinned memory
    (report "transfers", the ledger's count of every copy) cover all the epochs' h2d bytes, "pageable" when none was
    pinned, "both" otherwise; None without the figures. (The run's total also holds the one-off uploads of the initial
    weights and the test set, which are pageable in every lesson.)"""
    pinned = number(get(report, "transfers", "h2d_pinned_bytes"))
    pageable = number(get(report, "transfers", "h2d_pageable_bytes"))
    per_epoch = h2d_mean(report, "bytes")
    if pinned is None or pageable is None or per_epoch is None or per_epoch == 0:
        return None
    if pinned == 0:
        return "pageable"
    return "pinned" if pinned >= per_epoch * len(epochs_of(report)) else "both"


def sweep_main_run(report):
    """Lesson 07 trains one pass over the images at each batch size (results.batch_sweep) and records no epochs: its
    row is the pass at its --batch (config.batch), the run its weights and accuracy come from. None elsewhere."""
    if epochs_of(report):
        return None
    runs = get(report, "results", "batch_sweep")
    batch = get(report, "config", "batch")
    if not isinstance(runs, list):
        return None
    return next((r for r in runs if isinstance(r, dict) and r.get("batch") == batch), None)


def epoch_seconds(report):
    run = sweep_main_run(report)
    if run is not None:
        ms, steps = number(run.get("ms_per_step")), number(run.get("steps"))
        return ms * steps / 1000 if ms is not None and steps is not None else None
    return mean(number(e.get("seconds")) for e in epochs_of(report))


def final_accuracy(report):
    final = number(get(report, "results", "final_test_accuracy"))
    if final is None and epochs_of(report):
        final = number(epochs_of(report)[-1].get("test_accuracy"))
    return final


def format_gflop(flops):
    return MISSING if flops is None else precise(flops / 1e9, "").strip()


def figures_of(report):
    """The row's cells but the markers: the lesson, then each column's figure."""
    program = report.get("program")
    return [
        program if isinstance(program, str) and program else MISSING,
        format_seconds(epoch_seconds(report)),
        format_bytes(h2d_mean(report, "bytes")),
        copied_from(report) or MISSING,
        format_bytes(epoch_mean(report, "bytes_device")),
        format_gflop(epoch_mean(report, "flops")),
        format_bytes(number(get(report, "memory", "device", "total", "peak_bytes"))),
        format_accuracy(final_accuracy(report)),
    ]


def lesson_number(report):
    program = report.get("program")
    return program[6:8] if isinstance(program, str) and program.startswith("lesson") else None


def setting(report, key):
    """A compared setting as the row trained with it. "epochs" is the epochs it ran (lesson 07 runs one pass over
    the images at its --batch, whatever --epochs says), else the config's value or the key's default."""
    if key == "epochs" and epochs_of(report):
        return len(epochs_of(report))
    if key == "epochs" and sweep_main_run(report) is not None:
        return 1  # one pass at each batch size
    value = get(report, "config", key)
    if key == "precision" and value == "all":
        value = "mixed"  # lesson 05's default: its main run is mixed, the other precisions are in its own table
    if key == "ranks" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if key == "epochs" and not (isinstance(value, int) and value > 0):
        return None  # no epoch ran, and none is recorded: unknown
    if value is None:
        value = COMPARED_KEYS[key]
    return value


def compact_layers(layers):
    """784-256-256-...-10 as 784-256×16-10: runs of three or more equal widths counted."""
    if not isinstance(layers, str):
        return str(layers)
    parts, out = layers.split("-"), []
    for part in parts:
        if out and out[-1][0] == part:
            out[-1][1] += 1
        else:
            out.append([part, 1])
    return "-".join("-".join([w] * n) if n < 3 else f"{w}×{n}" for w, n in out)


def describe_setting(key, value):
    if key in ("limit", "test_limit") and value == 0:
        return f"{key} 0 (all)"  # 0 = the whole set (common/cli.h)
    if key == "epochs":
        return f"{value} epoch" + ("" if value == 1 else "s")
    if key == "layers":
        return f"layers {compact_layers(value)}"
    if key == "ranks":
        return f"{value} rank" + ("" if value == 1 else "s")
    if isinstance(value, bool):
        return f"{key} {'on' if value else 'off'}"
    return f"{key} {value}"


# What a differing setting does to a row's figures, beyond naming it.
SETTING_EFFECTS = {
    "layers": "another model: other FLOPs, bytes, memory and accuracy",
    "epochs": "another number of passes over the images: another accuracy",
    "batch": "another batch size: other steps, memory and accuracy",
    "limit": "another number of training images",
    "test_limit": "another test set size",
    "precision": "16-bit weights and activations with fp32 master weights and dynamic loss scaling: half the "
                 "bytes, other rounding, so another accuracy",
    "augment": "each epoch trains on randomly shifted, rotated and scaled images: another accuracy",
    "ranks": "the batch is split over ranks",
}


def reference_settings(reports):
    """Per compared key, the value most rows share (ties: the earliest row's), and whether every row shares it."""
    reference = {}
    for key in COMPARED_KEYS:
        values = [json.dumps(setting(r, key), sort_keys=True) for r in reports if setting(r, key) is not None]
        if not values:
            reference[key] = (None, True)
            continue
        best = max(dict.fromkeys(values), key=values.count)  # dict keeps the first row's order for ties
        reference[key] = (json.loads(best), all(v == best for v in values))
    return reference


def row_markers(reports):
    """(accuracy markers per row, time markers per row, legend): a letter after a row's accuracy for each setting it
    does not share with most rows; after a time, one where the time is a sweep's run (lesson 07), and on the CPU
    backend one where it is slower than the nearest earlier row trained with the same settings (the idea of a lesson
    is speed on a GPU; here it may cost CPU time). The legend
    is [(letter, text)], in the order the letters were given."""
    reference = reference_settings(reports)
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    given, legend = {}, []

    def letter_for(what, text):
        if what not in given:
            given[what] = next(letters)
            legend.append((given[what], text))
        return given[what]

    accuracy, settings = [], []
    for report in reports:
        marks, differs = [], []
        for key, (common, _) in reference.items():
            value = setting(report, key)
            if value is None or common is None or value == common:
                continue  # the same, or not recorded (unknown is not different)
            differs.append((key, json.dumps(value, sort_keys=True)))
            text = (f"{describe_setting(key, value)} (the other rows: {describe_setting(key, common)}): "
                    f"{SETTING_EFFECTS.get(key, 'not like for like')}")
            marks.append(letter_for(differs[-1], text))
        accuracy.append(marks)
        settings.append(tuple(differs))

    times = [[] for _ in reports]
    for i, report in enumerate(reports):
        if sweep_main_run(report) is not None:  # a time without the per-epoch figures: say why
            times[i].append(letter_for(("sweep", i), (
                f"{report.get('program')}: the time of its one pass at batch {get(report, 'config', 'batch')} (its "
                "batch-size sweep's run); the sweep records its figures per batch size, in its own table, not per "
                "epoch")))
        seconds = epoch_seconds(report)
        if report.get("backend") != "cpu" or seconds is None:
            continue
        earlier = [j for j in range(i) if settings[j] == settings[i] and epoch_seconds(reports[j]) is not None]
        if not earlier:
            continue
        before = epoch_seconds(reports[earlier[-1]])
        if seconds > 1.05 * before:
            number_ = lesson_number(report)
            reason = CPU_TIME_REASONS.get(number_, CPU_TIME_REASON)
            name = reports[earlier[-1]].get("program", "the row before")
            times[i].append(letter_for(("cpu time", number_),
                                       f"CPU time, slower than {name} at the same settings: {reason}"))
    return accuracy, times, legend


def marked(cell, marks):
    return cell + (" " + ",".join(marks) if marks else "")


def rows_of(reports):
    """The table's rows (the header first) and the legend lines."""
    accuracy, times, legend = row_markers(reports)
    rows = [list(COLUMNS)]
    for report, acc_marks, time_marks in zip(reports, accuracy, times):
        cells = figures_of(report)
        cells[1] = marked(cells[1], time_marks)
        cells[-1] = marked(cells[-1], acc_marks)
        rows.append(cells)
    return rows, [f"{letter}  {text}" for letter, text in legend]


def backend_line(reports):
    """Which backend made the times: the CPU backend's are CPU timings, the cuda flavor's a GPU's."""
    names = [r["program"] if isinstance(r.get("program"), str) and r["program"] else f"row {i + 1}"
             for i, r in enumerate(reports)]
    backends = [r.get("backend") if isinstance(r.get("backend"), str) else None for r in reports]
    kinds = sorted(set(backends), key=str)
    if len(kinds) > 1:
        groups = "; ".join(
            f"{kind or 'unknown'}: " + ", ".join(n for n, b in zip(names, backends) if b == kind) for kind in kinds)
        return f"Mixed backends ({groups}): CPU-backend times are CPU timings, not a GPU's; do not compare them."
    if kinds[0] == "cpu":
        return ("CPU backend: times are CPU timings, not a GPU's (this machine's cores run the kernels); the byte "
                "and FLOP columns are what a GPU would move and compute.")
    if kinds[0] == "cuda":
        devices = list(dict.fromkeys(r.get("device") for r in reports if isinstance(r.get("device"), str)))
        if not devices:
            return "GPU (device not recorded): times from CUDA events"
        if len(devices) == 1:
            return f"GPU: {devices[0]}: times from CUDA events"
        return "GPUs differ between rows: " + "; ".join(devices)
    return f"Backend: {kinds[0] or 'not recorded'}"


def settings_lines(reports):
    """The data and the settings the rows share (most rows, when a letter marks the others)."""
    lines = []
    data = {r.get("data") for r in reports}
    if len(data) == 1 and isinstance(next(iter(data)), str):
        lines.append(f"Data: {next(iter(data))}")
    reference = reference_settings(reports)
    shared = [describe_setting(key, value) for key, (value, everyone) in reference.items()
              if value is not None and (COMPARED_KEYS[key] is None or not everyone)]
    if shared:
        everyone = all(e for _, e in reference.values())
        lines.append(("Settings: " if everyone else "Settings (rows with a letter after their accuracy differ): ")
                     + ", ".join(shared))
    return lines


def text_table(rows):
    """Aligned like the lessons' own tables (common/report.cpp): the lesson left, figures right."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(COLUMNS))]

    def render(row):
        cells = [cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)]
        return ("  " + "   ".join(cells)).rstrip()

    rule = "  " + "-" * (sum(widths) + 3 * (len(widths) - 1))
    return [render(rows[0]), rule] + [render(row) for row in rows[1:]]


def markdown_table(rows):
    def escape(cell):
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(escape(c) for c in rows[0]) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|"]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows[1:]]
    return lines


def text_lines(reports):
    """The table as make run prints it: the backend and settings above, the legend and what the columns mean below."""
    rows, legend = rows_of(reports)
    header = [backend_line(reports)] + settings_lines(reports)
    return header + text_table(rows) + ["  " + line for line in legend] + textwrap.wrap(COLUMN_NOTE, 116)


def markdown_lines(reports):
    """The same in Markdown (tools/report.py's README uses it): paragraphs, the table, the legend as a list."""
    rows, legend = rows_of(reports)
    header = [backend_line(reports)] + settings_lines(reports)
    return ["\n\n".join(header), ""] + markdown_table(rows) + [""] + [f"- {line}" for line in legend + [COLUMN_NOTE]]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Compare lessons from their --json reports: one table, one row per file, in the order given.")
    parser.add_argument("files", nargs="+", metavar="FILE.json", help="a report written by a lesson's --json FILE")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for a README)")
    args = parser.parse_args(argv)

    try:
        reports = [load_report(path) for path in args.files]
    except ReportError as error:
        print(f"compare_lessons.py: {error}", file=sys.stderr)
        return 2

    print("\n".join(markdown_lines(reports) if args.markdown else text_lines(reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
