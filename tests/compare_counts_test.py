#!/usr/bin/env python3
"""tests/compare_counts_test.py — tools/compare_counts.py reads ncu's CSV (quoted rows, thousands separators, notes
between them) and the counting build's, pairs launches in order and marks each figure equal or different."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "compare_counts.py")
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def ncu_row(launch, kernel, metric, value):
    return (f'"{launch}","1","bench","h","{kernel}","1","7","(32, 8, 1)","(8, 32, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","","{value}"')


def run(ncu_lines, counts_lines):
    with tempfile.TemporaryDirectory() as d:
        ncu, counts = os.path.join(d, "ncu.csv"), os.path.join(d, "counts.csv")
        with open(ncu, "w") as f:
            f.write("\n".join(ncu_lines) + "\n")
        with open(counts, "w") as f:
            f.write("\n".join(counts_lines) + "\n")
        return subprocess.run([sys.executable, SCRIPT, ncu, counts], capture_output=True, text=True)


COUNTS_HEADER = ("step,global_ld_requests,global_ld_sectors,global_st_requests,global_st_sectors,shared_ld_requests,"
                 "shared_ld_wavefronts,shared_st_requests,shared_st_wavefronts")
failures = 0


def check(condition, what):
    global failures
    if not condition:
        failures += 1
        print("FAIL:", what)


result = run(["==PROF== Connected to process 1", HEADER,
              ncu_row(0, "gemm_naive_kernel<false, false>", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                      "1,048,576"),
              ncu_row(0, "gemm_naive_kernel<false, false>", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                      "17,000,000"),
              "==PROF== a note between rows",
              ncu_row(1, "gemm_coalesced_kernel<false, false>", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                      "0")],
             [COUNTS_HEADER, "gemm 1 naive,1048576,17301504,2048,65536,0,0,0,0", "gemm 2 coalesced,1,2,3,4,0,0,0,0"])
check(result.returncode == 0, f"exit status {result.returncode}: {result.stderr}")
check("| gemm 1 naive | gemm_naive_kernel<false, false> | global_ld_requests | 1048576 | 1048576 | equal |"
      in result.stdout, "the equal request count")
check("global_ld_sectors | 17301504 | 17000000 | **differs** (0.98x)" in result.stdout, "the differing sectors")
check("| gemm 2 coalesced |" in result.stdout and "shared_ld_wavefronts | 0 | 0 | equal" in result.stdout,
      "the second launch paired with the second step")
check("2 of 3 figures equal." in result.stdout, "the tally")

# Paired by kernel name (ncu's demangled name with its parameters), ldmatrix's LDSM added to the shared loads.
result = run([HEADER,
              ncu_row(0, "void hgemm_block_tile_kernel<float, 64, false, false>(int, int, const __half *)",
                      "smsp__inst_executed_op_shared_ld.sum", "0"),
              ncu_row(0, "void hgemm_block_tile_kernel<float, 64, false, false>(int, int, const __half *)",
                      "smsp__inst_executed_op_ldsm.sum", "4,096"),
              ncu_row(1, "void (anonymous namespace)::gemm_naive_kernel<false, false>(int, int)",
                      "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "7")],
             ["step,kernel," + COUNTS_HEADER[5:],
              'gemm 1 naive,"gemm_naive_kernel<false, false>",7,0,0,0,0,0,0,0',
              'hgemm 2 block_tile,"hgemm_block_tile_kernel<float, 64, false, false>",0,0,0,0,4096,0,0,0'])
check(result.returncode == 0, f"exit status {result.returncode}: {result.stderr}")
check("| gemm 1 naive | gemm_naive_kernel<false, false> | global_ld_requests | 7 | 7 | equal |" in result.stdout,
      "paired by name though launched second")
check("| hgemm 2 block_tile |" in result.stdout and "shared_ld_requests | 4096 | 4096 | equal" in result.stdout,
      f"LDSM counted as shared loads: {result.stdout}")
result = subprocess.run([sys.executable, SCRIPT, "--metrics"], capture_output=True, text=True)
check("smsp__inst_executed_op_ldsm.sum" in result.stdout.split(","), "--metrics lists what ncu must measure")

result = run([HEADER], [COUNTS_HEADER])
check(result.returncode == 2 and "no launches" in result.stderr, "empty inputs are refused")

print("compare_counts_test:", "ok" if failures == 0 else f"{failures} failures")
sys.exit(1 if failures else 0)
