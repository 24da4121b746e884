#!/usr/bin/env python3
"""Planted one-line bugs, each run against the tests that should catch it: the suite's own mutation check.

    python3 tools/mutants.py [BUILD_DIR] [NAME...]     (make mutants: BUILD_DIR build/cpu, every mutant)

For each mutant in CATALOGUE: the line is replaced in the source tree, BUILD_DIR is rebuilt (only what includes the
file), the mutant's tests run with its environment (the plain schedule; for the stream bugs CUDA_CPU_ASYNC=late, or
the fuzzed CUDA_CPU_ASYNC=1 CUDA_CPU_FUZZ=5 where a host thread's wait forces the copy early: a missing rule-3 wait
behind a loader thread that synchronizes on the copy cannot lose deterministically, only by timing),
and the file is put back (also on Ctrl-C). A mutant is *caught* when a test fails (or the build refuses it), and
*escaped* when every test passes: an escape is a hole in the suite. Prints one line per mutant and a summary; exits
1 if any escaped. Slow (a rebuild per mutant: minutes each on 2 cores), so not in CI; its last result is in the
tests/README.md ("The suite's own mutation check").
"""

import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# name, file, the exact text replaced (must occur once), its replacement, ctest -R regex, environment, why it matters
CATALOGUE = [
    ("hgemm-wait-1", "kernels/hgemm_v3_pipelined.cuh", "cp_async_wait<0>();", "cp_async_wait<1>();",
     "hgemm|tensor", {}, "the pipelined HGEMM reads a tile whose cp.async may not have landed"),
    ("hgemm-no-wait", "kernels/hgemm_v3_pipelined.cuh", "cp_async_wait<0>();", "(void)0;",
     "hgemm|tensor", {}, "no cp.async wait at all"),
    ("gemm-v6-no-barrier", "kernels/gemm_v6_double_buffered.cuh",
     "        __syncthreads();                        // the only barrier: tiles[buf] is complete", "",
     "gemm", {}, "the double-buffered GEMM's one barrier removed"),
    ("unscale-skips-last-bias", "lessons/mixed_precision.cu",
     "        tensors.push_back({layer.bias_grad, size_t(layer.out)});",
     "        if (&layer != &net.layers.back()) tensors.push_back({layer.bias_grad, size_t(layer.out)});",
     "mixed|loss_scaling|lessons: 05", {}, "the last layer's bias gradient left out of the unscale list"),
    ("scale-grows-every-step", "kernels/loss_scaling.cuh",
     "if (s.growth_tracker == options.growth_interval) {", "if (s.growth_tracker >= 1) {",
     "loss_scaling|scaler|mixed", {}, "the scale grows after 1 clean step instead of growth_interval"),
    ("lesson03-no-rule3-wait", "lessons/03_pinned_async/main.cu",
     "                CUDA_CHECK(cudaStreamWaitEvent(compute, copied[s]));", "",
     "lessons: 03", {"CUDA_CPU_ASYNC": "1", "CUDA_CPU_FUZZ": "5"},
     "lesson 03's kernels read a slot without waiting for its copy"),
    ("lesson03-event-wrong-stream", "lessons/03_pinned_async/main.cu",
     "CUDA_CHECK(cudaEventRecord(copied[s], copy));", "CUDA_CHECK(cudaEventRecord(copied[s], compute));",
     "lessons: 03|lesson_results_pinned", {"CUDA_CPU_ASYNC": "late"}, "copied[s] recorded on the compute stream"),
    ("loader-refills-early", "lessons/batch_loader.cpp",
     "if (copied != nullptr) CUDA_CHECK(cudaEventSynchronize(copied));", "",
     "lessons: 03|lesson_results_pinned", {"CUDA_CPU_ASYNC": "late"},
     "the loader refills a pinned slot before its copy ran"),
    ("pipeline-no-rule1-wait", "lessons/batch_pipeline.cu", "    CUDA_CHECK(cudaStreamWaitEvent(copy_, consumed_[s]));",
     "", "lesson_results_pinned", {"CUDA_CPU_ASYNC": "late"},
     "lessons 04-07 overwrite a device slot the previous batch's kernels may still read"),
    ("pipeline-no-rule3-wait", "lessons/batch_pipeline.cu",
     "    CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_[batch.slot]));", "",
     "lessons: 0[4-7]", {"CUDA_CPU_ASYNC": "1", "CUDA_CPU_FUZZ": "5"},
     "lessons 04-07's kernels do not wait for the batch's copy"),
]


def run(command, env=None, log=None):
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log is not None:
        log.write(done.stdout)
    return done.returncode


def main():
    args = sys.argv[1:]
    build = args.pop(0) if args and not args[0] in {m[0] for m in CATALOGUE} else "build/cpu"
    chosen = [m for m in CATALOGUE if not args or m[0] in args]
    if not os.path.exists(os.path.join(ROOT, build, "CMakeCache.txt")):
        raise SystemExit(f"mutants: {build} is not a configured build tree (make cpu first)")
    log_path = os.path.join(ROOT, build, "mutants.log")
    escaped = []
    with open(log_path, "w") as log:
        for name, path, old, new, tests, env, why in chosen:
            source = os.path.join(ROOT, path)
            with open(source, encoding="utf-8") as f:
                original = f.read()
            if original.count(old) != 1:
                print(f"{name:28} STALE: the text to replace occurs {original.count(old)} times in {path}")
                escaped.append(name)
                continue
            start = time.time()
            log.write(f"\n===== {name}: {path}: {why}\n")
            try:
                with open(source, "w", encoding="utf-8") as f:
                    f.write(original.replace(old, new))
                if run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)], log=log) != 0:
                    verdict = "caught (the build refuses it)"
                else:
                    environment = dict(os.environ, **env)
                    status = run(["ctest", "--test-dir", build, "-j", str(os.cpu_count() or 2), "-R", tests,
                                  "--timeout", "300", "--output-on-failure"], env=environment, log=log)
                    verdict = "caught" if status != 0 else "ESCAPED"
            finally:
                with open(source, "w", encoding="utf-8") as f:
                    f.write(original)
            mode = " ".join(f"{k}={v}" for k, v in env.items()) or "plain"
            print(f"{name:28} {verdict:30} {mode:34} {time.time() - start:5.0f} s  {why}", flush=True)
            if verdict == "ESCAPED":
                escaped.append(name)
        run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)], log=log)  # the tree as it was
    print(f"\n{len(chosen) - len(escaped)} of {len(chosen)} mutants caught; log: {log_path}")
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main())
