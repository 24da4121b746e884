#!/usr/bin/env python3
"""Compare lessons side by side from the JSON reports they write with --json FILE.

    python3 tools/compare_lessons.py build/cpu/results/*.json           # aligned plain-text table
    python3 tools/compare_lessons.py --markdown FILE.json [FILE.json ...]  # Markdown table, for a README

One row per file, in the order given: the lesson ("program"), its mean epoch time, host->device bytes and time per
epoch (the "h2d" phase), peak device memory (through the ledger) and the final test accuracy. Above the table: which
backend produced the times (the CPU backend's are CPU timings) and the data and settings the rows share; a note
names the settings that differ between rows, since their figures are then not like for like. A figure a report does
not have prints as "-". `make run` prints this table after the lessons. Standard library only.
"""

import argparse
import json
import math
import sys

MISSING = "-"
# Settings that make two rows not like for like when they differ (layers, batch, training subset, epochs, ...).
COMPARED_KEYS = ("layers", "batch", "epochs", "limit", "test_limit")
COLUMNS = ("lesson", "epoch time", "H2D/epoch", "H2D time/epoch", "peak device mem", "test accuracy")


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


def format_ms(ms):
    return MISSING if ms is None else precise(ms, "ms")


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


def row_of(report):
    program = report.get("program")
    return [
        program if isinstance(program, str) and program else MISSING,
        format_seconds(mean(number(e.get("seconds")) for e in epochs_of(report))),
        format_bytes(h2d_mean(report, "bytes")),
        format_ms(h2d_mean(report, "ms")),
        format_bytes(number(get(report, "memory", "device", "total", "peak_bytes"))),
        format_accuracy(number(get(report, "results", "final_test_accuracy"))),
    ]


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
        return "CPU backend: times are CPU timings, not a GPU's."
    if kinds[0] == "cuda":
        devices = list(dict.fromkeys(r.get("device") for r in reports if isinstance(r.get("device"), str)))
        if not devices:
            return "GPU: (device not recorded)"
        if len(devices) == 1:
            return f"GPU: {devices[0]}"
        return "GPUs differ between rows: " + "; ".join(devices)
    return f"Backend: {kinds[0] or 'not recorded'}"


def describe_setting(key, value):
    if key in ("limit", "test_limit") and value == 0:
        return f"{key} 0 (all)"  # 0 = the whole set (common/cli.h)
    if key == "epochs":
        return f"{value} epoch" + ("" if value == 1 else "s")
    return f"{key} {value}"


def settings_lines(reports):
    """The data and settings all rows share, and a note naming those that differ."""
    lines, shared, differing = [], [], []
    data = {r.get("data") for r in reports}
    if len(data) == 1 and isinstance(next(iter(data)), str):
        lines.append(f"Data: {next(iter(data))}")
    elif len(data) > 1:
        differing.append("data")
    for key in COMPARED_KEYS:
        values = [get(r, "config", key) for r in reports]
        distinct = {json.dumps(v, sort_keys=True) for v in values}
        if len(distinct) > 1:
            differing.append(key)  # also when only some rows record it
        elif values[0] is not None:
            shared.append(describe_setting(key, values[0]))
    if shared:
        lines.append("Settings: " + ", ".join(shared))
    if differing:
        lines.append("Note: the rows were run with different settings (" + ", ".join(differing) +
                     "), so their figures are not like for like.")
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

    header = [backend_line(reports)] + settings_lines(reports)
    rows = [list(COLUMNS)] + [row_of(r) for r in reports]
    if args.markdown:
        print("\n\n".join(header))  # separate paragraphs in Markdown
        print()
        print("\n".join(markdown_table(rows)))
    else:
        print("\n".join(header + text_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
