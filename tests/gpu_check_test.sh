#!/usr/bin/env bash
# tests/gpu_check_test.sh — tools/gpu_check.sh's phases and --lease dry-run on the CPU backend (CI runs this after
# `make test`, whose build/cpu tree the dry run reuses). Checks, for every phase: it passes, its output folder holds exactly
# summary-PHASE.md and gpu-check-PHASE.tar.gz, the summary is complete and the archive holds the phase's files; the
# report phase also from a returned archive (--from); and a phase stopped by its budget, or killed by a signal, still
# leaves both files with a summary that says so.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# expect_outputs DIR PHASE RESULT_PATTERN: exactly the two files, the summary's result line matching the pattern.
expect_outputs() {
    local dir=$1 phase=$2 pattern=$3 listing
    listing=$(ls -A "$dir" | paste -sd' ')
    [ "$listing" = "gpu-check-$phase.tar.gz summary-$phase.md" ] ||
        fail "$phase: expected exactly gpu-check-$phase.tar.gz and summary-$phase.md in $dir, found: $listing"
    grep -Eq -- "^- result: \*\*$pattern" "$dir/summary-$phase.md" ||
        fail "$phase: the summary's result is not /$pattern/: $(grep '^- result' "$dir/summary-$phase.md")"
    grep -q 'device.txt$' <<<"$(tar -tzf "$dir/gpu-check-$phase.tar.gz")" || fail "$phase: the archive has no device.txt"
}

# run_phase NAME EXPECTED_EXIT ARGS...: gpu_check.sh ARGS with its output in the scratch folder.
run_phase() {
    local name=$1 expected=$2 rc
    shift 2
    echo "== gpu_check.sh $*"
    bash tools/gpu_check.sh "$@" >"$scratch/$name.log" 2>&1
    rc=$?
    tail -3 "$scratch/$name.log"
    if [ "$rc" -ne "$expected" ]; then
        fail "$name: exit $rc, expected $expected"
        tail -30 "$scratch/$name.log" >&2
    fi
}

# The lessons need MNIST, found as gpu_check.sh finds it; without it they are reported as skipped (and no report).
mnist=""
for d in "${MNIST_DIR:-}" ../shared/data/mnist data/mnist; do
    if [ -n "$d" ] && compgen -G "$d/train-images-idx3-ubyte*" >/dev/null; then mnist=$d; break; fi
done
[ -n "$mnist" ] || echo "gpu_check_test: no MNIST here: the lessons phase can only report them as skipped"

for phase in build-test bench lessons report; do
    if [ -z "$mnist" ] && [ "$phase" = report ]; then
        run_phase "$phase" 1 --dry-run --phase "$phase" --out "$scratch/$phase"  # no lesson JSON to draw
        expect_outputs "$scratch/$phase" "$phase" FAILED
        continue
    fi
    run_phase "$phase" 0 --dry-run --phase "$phase" --out "$scratch/$phase"
    expect_outputs "$scratch/$phase" "$phase" passed
done
grep -q '^| tests | ok' "$scratch/build-test/summary-build-test.md" || fail "build-test: no passing tests row"
if [ -z "$mnist" ]; then
    grep -q '^| lesson01_naive_fp32 | skip (no MNIST)' "$scratch/lessons/summary-lessons.md" ||
        fail "lessons: without MNIST the lessons should be listed as skipped"
    ((failures)) && exit 1
    echo "gpu_check_test: every phase dry-run leaves exactly its summary and archive (lessons skipped: no MNIST)"
    exit 0
fi
# (The listing first, then grep: `tar | grep -q` would fail under pipefail when grep stops reading early.)
lessons_listing=$(tar -tzf "$scratch/lessons/gpu-check-lessons.tar.gz")
grep -q 'lesson01_naive_fp32.json$' <<<"$lessons_listing" || fail "lessons: the archive has no lesson JSON"
grep -q 'report/.*\.png$' <<<"$lessons_listing" || fail "lessons: no charts"
grep -q '^## comparison' "$scratch/lessons/summary-lessons.md" || fail "lessons: the summary quotes no comparison"

# The report phase on an archive a GPU returned (here: the dry run's).
run_phase report-from 0 --dry-run --phase report --from "$scratch/lessons/gpu-check-lessons.tar.gz" \
    --out "$scratch/report-from"
expect_outputs "$scratch/report-from" report passed

# A budget too small for the phase: stopped, exit 3, both files there, the summary says where it stopped.
run_phase budget 3 --dry-run --phase lessons --budget 1 --out "$scratch/budget"
expect_outputs "$scratch/budget" lessons "stopped at the budget"

# Killed from outside (a caller's own time limit): the summary is completed by the signal handler.
echo "== timeout -s TERM 4 gpu_check.sh --dry-run --phase lessons"
timeout -s TERM 4 bash tools/gpu_check.sh --dry-run --phase lessons --out "$scratch/signal" >"$scratch/signal.log" 2>&1
rc=$?
[ "$rc" -eq 3 ] || [ "$rc" -eq 124 ] || fail "signal: exit $rc, expected 3 (or timeout's 124)"
expect_outputs "$scratch/signal" lessons "stopped at the budget .*signal"

# --lease: one command under one deadline; at most 4 files (the summary, the archive, up to 2 charts), the
# archive with the bench log, the tests' output, every lesson's JSON and --trace, the summary with each step's row.
# The dry run's default deadline (4 x 510 s) fits the CPU backend's tiny sizes.
# (Lessons 01 and 04 only: the lessons phase above ran every lesson; this checks the lease's plumbing.)
GPU_CHECK_DRY_LESSONS='^lesson0[14]' run_phase lease 0 --dry-run --lease --out "$scratch/lease"
lease_files=$(ls -A "$scratch/lease")
(($(wc -l <<<"$lease_files") <= 4)) || fail "lease: more than 4 files in --out: $lease_files"
for f in summary-lease.md gpu-check-lease.tar.gz; do
    grep -qx "$f" <<<"$lease_files" || fail "lease: no $f in --out"
done
grep -v -e '^summary-lease.md$' -e '^gpu-check-lease.tar.gz$' <<<"$lease_files" | grep -qv '\.png$' &&
    fail "lease: a file in --out that is neither the summary, the archive nor a chart: $lease_files"
grep -Eq '^- result: \*\*passed' "$scratch/lease/summary-lease.md" || fail "lease: the summary does not say passed"
lease_listing=$(tar -tzf "$scratch/lease/gpu-check-lease.tar.gz")
for f in bench.txt tests.txt device.txt; do grep -q "$f$" <<<"$lease_listing" || fail "lease: the archive has no $f"; done
grep -q '^| backend_bench' "$scratch/lease/summary-lease.md" && fail "lease: ran backend_bench (CPU-only)"
if [ -n "$mnist" ]; then
    grep -q 'lesson04_fast_kernels-trace.json$' <<<"$lease_listing" || fail "lease: no lesson --trace in the archive"
    run_phase lease-report 0 --dry-run --phase report --from "$scratch/lease/gpu-check-lease.tar.gz" \
        --out "$scratch/lease-report"
    expect_outputs "$scratch/lease-report" report passed
fi
# A deadline too short: stopped (exit 3), the summary and the archive still there.
run_phase lease-deadline 3 --dry-run --lease --deadline 1 --out "$scratch/lease-deadline"
[ -f "$scratch/lease-deadline/summary-lease.md" ] && [ -f "$scratch/lease-deadline/gpu-check-lease.tar.gz" ] ||
    fail "lease-deadline: the summary or the archive is missing"

# Usage errors: one message, exit 2.
run_phase usage 2 --phase nonsense
run_phase usage-none 2 --dry-run
run_phase usage-lease 2 --lease --phase bench
run_phase usage-deadline 2 --phase bench --deadline 5

if ((failures)); then
    echo "gpu_check_test: $failures check(s) failed"
    exit 1
fi
echo "gpu_check_test: every phase dry-run leaves exactly its summary and archive; budget and signal stops too"
