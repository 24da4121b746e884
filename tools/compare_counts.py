#!/usr/bin/env python3
"""tools/compare_counts.py — the counting build's memory counts beside Nsight Compute's, step by step.

    compare_counts.py NCU_CSV COUNTS_CSV

NCU_CSV: `ncu --csv --log-file NCU_CSV --metrics <the metrics below> bench --once` (one row per kernel and metric,
launches in order). COUNTS_CSV: `build/cpu-counters/bench/bench --once --csv COUNTS_CSV` (one row per step, the same
launches in the same order). Prints a Markdown table: for each step and figure, both values and whether they are
equal. The GEMM kernels are deterministic, so any difference is a finding: a rule of the counting model that the
hardware does not follow, or an access nvcc compiled differently from g++ (see common/cpu_backend/README.md).
Exit status 0 when the tables could be read (differences are reported, not failed), 2 when they could not.
"""
import csv
import sys

# counting-build column -> Nsight Compute metric
METRICS = {
    "global_ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "global_ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global_st_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "global_st_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "shared_ld_requests": "smsp__inst_executed_op_shared_ld.sum",
    "shared_ld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "shared_st_requests": "smsp__inst_executed_op_shared_st.sum",
    "shared_st_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
}


def read_ncu(path):
    """[(kernel name, {metric: value})] in launch order, from ncu's CSV (other lines, ==PROF== notes, skipped)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    launches = {}
    for row in csv.DictReader(lines):
        if "Metric Name" not in row or "ID" not in row:
            continue
        value = row.get("Metric Value", "").replace(",", "")
        try:
            number = float(value)
        except ValueError:
            continue
        launch = launches.setdefault(int(row["ID"]), (row.get("Kernel Name", "?"), {}))
        launch[1][row["Metric Name"]] = number
    return [launches[i] for i in sorted(launches)]


def read_counts(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        ncu, counts = read_ncu(argv[1]), read_counts(argv[2])
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_counts.py: {e}", file=sys.stderr)
        return 2
    if not ncu or not counts:
        print(f"compare_counts.py: no launches in {argv[1]} or no steps in {argv[2]}", file=sys.stderr)
        return 2
    if len(ncu) != len(counts):
        print(f"note: {len(ncu)} profiled launches, {len(counts)} counted steps: compared in order, the extra ones "
              "left out (a step of more than one kernel?)")
    print("| step | kernel (ncu) | figure | counting build | Nsight Compute | |")
    print("|---|---|---|---:|---:|---|")
    equal = total = 0
    for (kernel, metrics), step in zip(ncu, counts):
        short = kernel if len(kernel) <= 40 else kernel[:37] + "..."
        for column, metric in METRICS.items():
            if metric not in metrics:
                continue
            ours, theirs = int(step[column]), int(round(metrics[metric]))
            total += 1
            equal += ours == theirs
            mark = "equal" if ours == theirs else f"**differs** ({theirs / ours:.2f}x)" if ours else "**differs**"
            print(f"| {step['step']} | {short} | {column} | {ours} | {theirs} | {mark} |")
    print(f"\n{equal} of {total} figures equal.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
