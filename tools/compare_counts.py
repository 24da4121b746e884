#!/usr/bin/env python3
"""tools/compare_counts.py — the counting build's memory counts beside Nsight Compute's, step by step.

    compare_counts.py NCU_CSV COUNTS_CSV

NCU_CSV: `ncu --csv --log-file NCU_CSV --metrics <the metrics below> bench --once` (one row per kernel and metric).
COUNTS_CSV: `build/cpu-counters/bench/bench --once --csv COUNTS_CSV` (one row per step and the kernel it launched).
Steps and launches are paired by kernel name (in order where the counts name none).
`compare_counts.py --metrics` prints the metric list for ncu's --metrics. Prints a Markdown table: for each step and figure, both values and whether they are
equal. The GEMM kernels are deterministic, so any difference is a finding: a rule of the counting model that the
hardware does not follow, or an access nvcc compiled differently from g++ (see common/cpu_backend/README.md).
Exit status 0 when the tables could be read (differences are reported, not failed), 2 when they could not.
"""
import csv
import sys

# counting-build column -> the Nsight Compute metrics whose sum it equals. The counting build counts an ldmatrix
# (LDSM) as a shared load and a cp.async (LDGSTS) as a global load, where Nsight Compute keeps them apart: their
# metrics are added in. A cp.async's write into shared memory is not a shared store (op_st) for either.
METRICS = {
    "global_ld_requests": ["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                           "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum"],
    "global_ld_sectors": ["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                          "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"],
    "global_st_requests": ["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"],
    "global_st_sectors": ["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"],
    "shared_ld_requests": ["smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_ldsm.sum"],
    "shared_ld_wavefronts": ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                             "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum"],
    "shared_st_requests": ["smsp__inst_executed_op_shared_st.sum"],
    "shared_st_wavefronts": ["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"],
}
ALL_METRICS = sorted({m for ms in METRICS.values() for m in ms})


def bare_name(kernel):
    """'void (anonymous namespace)::gemm_naive_kernel<false, false>(int, ...)' -> 'gemm_naive_kernel<false, false>'."""
    name = kernel.replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, c in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return name[:i].strip()
    return name.strip()


def pair(ncu, counts):
    """Each counted step with its profiled launch: by kernel name where the counts name it, else in order."""
    unused = list(range(len(ncu)))
    pairs = []
    for step in counts:
        wanted = step.get("kernel", "")
        match = next((i for i in unused if wanted and bare_name(ncu[i][0]) == wanted), None)
        if match is None and not wanted and unused:
            match = unused[0]
        if match is None:
            print(f"note: no profiled launch of {wanted or step['step']}: left out")
            continue
        unused.remove(match)
        pairs.append((ncu[match], step))
    return pairs


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
    if len(argv) == 2 and argv[1] == "--metrics":
        print(",".join(ALL_METRICS))
        return 0
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
    print("| step | kernel (ncu) | figure | counting build | Nsight Compute | |")
    print("|---|---|---|---:|---:|---|")
    equal = total = 0
    for (kernel, metrics), step in pair(ncu, counts):
        short = bare_name(kernel)
        short = short if len(short) <= 40 else short[:37] + "..."
        for column, names in METRICS.items():
            present = [m for m in names if m in metrics]
            if not present:
                continue
            ours, theirs = int(step[column]), int(round(sum(metrics[m] for m in present)))
            total += 1
            equal += ours == theirs
            mark = "equal" if ours == theirs else f"**differs** ({theirs / ours:.2f}x)" if ours else "**differs**"
            print(f"| {step['step']} | {short} | {column} | {ours} | {theirs} | {mark} |")
    print(f"\n{equal} of {total} figures equal.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
