#!/usr/bin/env bash
# tools/gpu_check.sh — everything worth running on a GPU, in short phases that each fit one command on a borrowed
# machine (a cloud instance by the minute, a shared lab box, a CI runner with a time limit). Each phase has a time
# budget it enforces, and leaves exactly two files in the output folder, written as it goes, so that a timeout or a
# kill still returns what was measured:
#     summary-PHASE.md        the device, one row per step (status, seconds), the headline figures; complete on exit
#                             or on a signal, and rewritten after every step before that
#     gpu-check-PHASE.tar.gz  the logs, JSON and charts of the phase (re-packed after every step)
#
# Phases (budget: the most the phase may take, enforced with `timeout`; estimates for one H100/H200-class GPU and
# 16 CPU cores, from the sizes involved, since no GPU has run this yet):
#     build-test  300 s  configure, build the cuda flavor, run the whole suite (est. 2-3 min build + 1-2 min tests)
#     bench       180 s  build bench, `bench --quick` (GEMM staircase and HGEMM steps at 4096³ and the lessons'
#                        shapes, cuBLAS beside them; memory-bound kernels) and backend_bench (est. 1-2 min); with
#                        Nsight Compute (ncu) present, `bench --once` profiled for each GEMM step's memory requests,
#                        sectors and wavefronts, set beside the counting build's (DEPS/access_counts.csv, made by
#                        --prepare) in counts-vs-ncu.md
#     lessons     300 s  build the lessons, each on full MNIST for 1 epoch with --json, then the comparison table
#                        and the charts (est. 2-4 min)
#     report       60 s  the comparison and charts again from the lessons phase's JSON (no GPU needed: run it here
#                        on a returned archive with --from)
# On the device tool (10 minutes a command) that is two calls: `--phase build-test --phase bench`, then
# `--phase lessons`. `--phase all` runs build-test, bench and lessons in order, each in its own budget.
#
# --lease [--deadline S]: ONE command for a lent GPU (15 minutes in all, machine start included, 10 a command): one
#   global deadline (default 510 s = 8.5 min) for everything, the most valuable measurements first, each step
#   given only what is left, and at most 4 files in --out, each rewritten as it goes: summary-lease.md,
#   gpu-check-lease.tar.gz, and up to 2 charts. In order: configure for the visible GPU's architecture only (CMake
#   asks nvidia-smi) and build bench; bench --quick (GEMM steps 1-7 and the HGEMM steps at the lessons' shapes and
#   4096^3 beside cuBLAS, the memory-bound kernels beside a copy); Nsight Compute on bench --once (only the metrics
#   `ncu --query-metrics` lists); the GPU test subset (kernels, streams, lessons 01-04 end to end: lease_tests);
#   the lessons at GPU sizes with --trace (01-06, 08, then 07's sweep), their comparison and charts. Nothing
#   CPU-only runs (no backend_bench, no whole suite). See tools/README.md.
#
#   tools/gpu_check.sh --phase P [--phase P ...] [--deps DIR] [--out DIR] [--budget S]
#   tools/gpu_check.sh --lease [--deadline S] [--deps DIR] [--out DIR]
#   tools/gpu_check.sh --phase report --from gpu-check-lessons.tar.gz [--out DIR]
#   tools/gpu_check.sh --prepare DIR        (Debian, as root) gather what a bare GPU machine lacks into DIR
#   tools/gpu_check.sh --dry-run --phase P  the same phase on the CPU backend with tiny sizes (CI runs every phase)
#
# --prepare DIR: `apt-get download` + `dpkg -x DIR/root` of catch2, zlib1g-dev, zlib1g, libcli11-dev and
#   nlohmann-json3-dev (what the cuda flavor's configure needs; it does not need Boost; `apt-get update` is run once
#   if a download fails), and a copy of MNIST (from $MNIST_DIR, else ../shared/data/mnist relative to the repository
#   root, else data/mnist) in DIR/mnist. Prints DIR's size at the end: the device tool carries at most 64 MiB.
#   DIR must be inside the repository for the device tool to carry it; keep it out of git and name it in `carry`:
#       echo /gpu-deps/ >> .git/info/exclude
#       tools/gpu_check.sh --prepare gpu-deps
#       (device tool) run  command: tools/gpu_check.sh --deps gpu-deps --phase build-test --phase bench
#                          carry: ["gpu-deps"]   timeout_s: 540
# --deps DIR: CMAKE_PREFIX_PATH=DIR/root/usr (Catch2 in usr/lib/cmake/Catch2, CLI11 and nlohmann_json in
#   usr/share/cmake/...), ZLIB_ROOT / ZLIB_INCLUDE_DIR / ZLIB_LIBRARY in DIR/root (libz.a, linked statically; if
#   only the .so is there, LD_LIBRARY_PATH points at it for the runs), MNIST_DIR=DIR/mnist for the tests and
#   --data DIR/mnist for the lessons. Build tree build/gpu-check-cuda (build/cuda-native without --deps).
# --dry-run: cpu flavor in build/cpu (the tree `make test` builds, so CI builds nothing twice), a quick subset of
#   the suite, `bench --quick`, the lessons with `--epochs 1 --limit 256 --test-limit 256`.
# --out DIR: where the two files of each phase go (default $OUT when set, else build/gpu-check-out). The phase's
#   working files are in build/gpu-check-work/PHASE (kept: the report phase reads the lessons phase's JSON there).
# --budget S: every phase's budget in seconds instead of the one above (the tests use a tiny one). A dry run without
#   --budget gets 4x the budgets above: it emulates every kernel on the CPU.
# Without --deps, MNIST comes from $MNIST_DIR, ../shared/data/mnist or data/mnist; if none is there the lessons are
# reported as skipped (with --deps a missing DIR/mnist is a failure).
# Exit status: 0 every step passed (skipped tests are listed as skips, not failures), 1 a step failed, 3 a phase
# was stopped at its budget (and nothing failed before), 2 a usage error.
set -uo pipefail

declare -A phase_budget=([build-test]=300 [bench]=180 [lessons]=300 [report]=60 [lease]=510)
all_phases=(build-test bench lessons)

usage() {
    cat << EOF
usage: $0 --phase PHASE [--phase PHASE ...] [--deps DIR] [--out DIR] [--budget SECONDS] [--dry-run]
       $0 --lease [--deadline SECONDS] [--deps DIR] [--out DIR] [--dry-run]
       $0 --phase report --from ARCHIVE [--out DIR]
       $0 --prepare DIR
Runs the GPU checks in phases, each within a time budget, each leaving exactly summary-PHASE.md and
gpu-check-PHASE.tar.gz in the output folder (written as it goes, completed on exit or on a signal).
  --phase PHASE   build-test (${phase_budget[build-test]} s): configure, build the cuda flavor, the whole test suite
                  bench (${phase_budget[bench]} s): bench --quick and backend_bench
                  lessons (${phase_budget[lessons]} s): every lesson, 1 epoch of full MNIST, --json; comparison; charts
                  report (${phase_budget[report]} s): comparison and charts from the lessons phase's JSON
                  all: build-test, bench, lessons (each in its own budget)
  --lease         one command for a lent GPU: the most valuable measurements first under one deadline, at most 4
                  files in the output folder (summary-lease.md, gpu-check-lease.tar.gz, 2 charts)
  --deadline S    --lease's global deadline in seconds (default ${phase_budget[lease]}: 8.5 minutes)
  --deps DIR      build against a folder made by --prepare (a bare GPU machine: no Catch2, zlib headers, MNIST)
  --out DIR       the output folder (default \$OUT when set, else build/gpu-check-out)
  --budget S      every phase's budget in seconds, instead of the defaults above
  --from ARCHIVE  report phase: read the lessons' JSON from a gpu-check-lessons.tar.gz (e.g. one a GPU returned)
  --dry-run       the same phases on the CPU backend (cpu flavor, build/cpu, tiny sizes): CI runs it
  --prepare DIR   (Debian, as root, with apt) gather what a bare GPU machine lacks into DIR: catch2, zlib1g-dev,
                  zlib1g, libcli11-dev, nlohmann-json3-dev unpacked into DIR/root, MNIST into DIR/mnist (from
                  \$MNIST_DIR, ../shared/data/mnist or data/mnist). DIR must be inside the repository to be carried:
                    echo /gpu-deps/ >> .git/info/exclude; $0 --prepare gpu-deps
                  then on the GPU machine: $0 --deps gpu-deps --phase build-test --phase bench
Exit status: 0 passed, 1 a step failed, 3 stopped at a budget, 2 usage error.
Environment: OUT (the output folder when --out is not given), MNIST_DIR (where MNIST is, without --deps),
PATH (searched for nvidia-smi, nvcc, cmake, ctest, ninja; /usr/local/cuda/bin is appended).
EOF
}

die_usage() {
    echo "gpu_check.sh: $1 (see --help)" >&2
    exit 2
}

prepare_dir=""
deps_dir=""
out_arg=""
from_archive=""
budget_override=""
dry_run=0
deadline_given=0
phases=()
original_args=("$@")
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --prepare) (($# >= 2)) || die_usage "--prepare needs a directory"; prepare_dir=$2; shift 2 ;;
        --deps) (($# >= 2)) || die_usage "--deps needs a directory"; deps_dir=$2; shift 2 ;;
        --out) (($# >= 2)) || die_usage "--out needs a directory"; out_arg=$2; shift 2 ;;
        --from) (($# >= 2)) || die_usage "--from needs an archive"; from_archive=$2; shift 2 ;;
        --budget)
            (($# >= 2)) && [[ $2 =~ ^[1-9][0-9]*$ ]] || die_usage "--budget needs a whole number of seconds"
            budget_override=$2; shift 2 ;;
        --phase)
            (($# >= 2)) || die_usage "--phase needs a phase name"
            case "$2" in
                all) phases+=("${all_phases[@]}") ;;
                build-test | bench | lessons | report) phases+=("$2") ;;
                *) die_usage "unknown phase '$2' (build-test, bench, lessons, report, all)" ;;
            esac
            shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --lease) phases+=(lease); shift ;;
        --deadline)
            (($# >= 2)) && [[ $2 =~ ^[1-9][0-9]*$ ]] || die_usage "--deadline needs a whole number of seconds"
            phase_budget[lease]=$2; deadline_given=1; shift 2 ;;
        *) die_usage "unknown argument '$1'" ;;
    esac
done
if [ -n "$prepare_dir" ]; then
    if [ -n "$deps_dir" ] || ((dry_run)) || [ -n "$out_arg" ] || ((${#phases[@]})); then
        die_usage "--prepare DIR takes no other option"
    fi
elif ((${#phases[@]} == 0)); then
    die_usage "say which phase: --phase build-test|bench|lessons|report|all, or --lease"
fi
if [[ " ${phases[*]} " == *" lease "* ]] && ((${#phases[@]} > 1)); then die_usage "--lease runs alone (no --phase)"; fi
if ((deadline_given)) && [[ " ${phases[*]} " != *" lease "* ]]; then die_usage "--deadline goes with --lease"; fi
if [ -n "$from_archive" ] && [ "${phases[*]}" != report ]; then die_usage "--from goes with --phase report alone"; fi

cd "$(dirname "$0")/.." || exit 1
repo_root=$(pwd -P)
export PATH=$PATH:/usr/local/cuda/bin
if [ -n "$deps_dir" ] && [ ! -d "$deps_dir/root/usr" ]; then
    echo "gpu_check.sh: $deps_dir/root/usr not found (run --prepare first)" >&2
    exit 2
fi
if [ -n "$from_archive" ]; then
    [ -f "$from_archive" ] || { echo "gpu_check.sh: no archive at $from_archive" >&2; exit 2; }
    from_archive=$(cd "$(dirname "$from_archive")" && pwd -P)/$(basename "$from_archive")
fi

# Where MNIST is when no prepared folder says: $MNIST_DIR, ../shared/data/mnist, data/mnist (first that exists).
find_mnist() {
    local d
    for d in "${MNIST_DIR:-}" ../shared/data/mnist data/mnist; do
        if [ -n "$d" ] && [ -d "$d" ] && compgen -G "$d/train-images-idx3-ubyte*" >/dev/null; then
            (cd "$d" && pwd -P)
            return 0
        fi
    done
    return 1
}

# ------------------------------------------------------------------------------------------------------ --prepare
if [ -n "$prepare_dir" ]; then
    set -e
    mkdir -p "$prepare_dir"
    dir=$(cd "$prepare_dir" && pwd -P)
    case "$dir/" in
        "$repo_root"/*) git check-ignore -q "$dir" 2>/dev/null ||
            echo "note: $dir is not ignored by git; add it, e.g.: echo /${dir#"$repo_root"/}/ >> .git/info/exclude" ;;
        *) echo "note: $dir is outside the repository, so the device tool will not carry it" ;;
    esac
    command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
        { echo "gpu_check.sh --prepare: needs apt-get and dpkg (Debian/Ubuntu)" >&2; exit 1; }
    [ "$(id -u)" -eq 0 ] || echo "note: not root; apt-get download may fail (apt-get update needs root)"
    packages=(catch2 zlib1g-dev zlib1g libcli11-dev nlohmann-json3-dev)
    debs=$(mktemp -d)
    chmod 755 "$debs"
    ! id _apt >/dev/null 2>&1 || chown _apt "$debs"  # apt downloads as _apt when it can write there
    trap 'rm -rf "$debs"' EXIT
    if ! (cd "$debs" && apt-get download "${packages[@]}"); then
        echo "apt-get download failed; running apt-get update and trying again"
        apt-get update -qq
        (cd "$debs" && apt-get download "${packages[@]}")
    fi
    rm -rf "$dir/root" "$dir/mnist"
    for deb in "$debs"/*.deb; do
        dpkg -x "$deb" "$dir/root"
        dpkg-deb -f "$deb" Package Version Architecture | paste -sd' ' >>"$debs/manifest"
    done
    rm -rf "$dir/root/usr/share/doc" "$dir/root/usr/share/man" "$dir/root/usr/share/lintian"
    # zlib1g-dev's libz.so is an absolute link to /lib/.../libz.so.1.x: point it into the folder instead.
    for link in "$dir"/root/usr/lib/*/libz.so; do
        [ -L "$link" ] || continue
        target=$(basename "$(readlink "$link")")
        real=$(compgen -G "$dir/root/lib/*/$target" || compgen -G "$dir/root/usr/lib/*/$target" || true)
        [ -n "$real" ] && ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$real")" "$link"
    done
    if mnist=$(find_mnist); then
        mkdir -p "$dir/mnist"
        cp "$mnist"/*-ubyte* "$dir/mnist/"
        [ ! -f "$mnist/MD5SUMS" ] || cp "$mnist/MD5SUMS" "$dir/mnist/"
        echo "MNIST copied from $mnist"
    else
        echo "gpu_check.sh --prepare: no MNIST found (\$MNIST_DIR, ../shared/data/mnist, data/mnist); run make data" >&2
        exit 1
    fi
    # The counting build's figures for `bench --once` (it needs Boost.Context, which a GPU machine may lack): the bench
    # phase sets Nsight Compute's beside them. Best effort: without it the bench phase says what is missing.
    rm -f "$dir/access_counts.csv"
    if cmake -S . -B build/cpu-counters -DFLAVOR=cpu -DCOUNTERS=ON >/dev/null &&
        cmake --build build/cpu-counters -j "$(nproc)" --target bench >/dev/null &&
        CUDA_CPU_COUNTERS=summary build/cpu-counters/bench/bench --once --csv "$dir/access_counts.csv" >/dev/null 2>&1; then
        echo "the counting build's counts of bench --once: $dir/access_counts.csv"
    else
        echo "note: could not build or run the counting build (build/cpu-counters); the bench phase will not compare" \
            "Nsight Compute's counts with it"
        rm -f "$dir/access_counts.csv"
    fi
    {
        echo "prepared by tools/gpu_check.sh --prepare on $(date -u +%Y-%m-%dT%H:%M:%SZ), $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
        cat "$debs/manifest"
        echo "mnist from $mnist"
    } >"$dir/MANIFEST.txt"
    cat "$dir/MANIFEST.txt"
    echo "CMake package files:"
    (cd "$dir/root" && find . -name '*Config.cmake' | sort)
    size_kib=$(du -sk "$dir" | cut -f1)
    echo "size of $dir: $(du -sh "$dir" | cut -f1) ($size_kib KiB)"
    if ((size_kib > 64 * 1024)); then
        echo "warning: more than the 64 MiB the device tool carries" >&2
        exit 1
    fi
    exit 0
fi

# ------------------------------------------------------------------------------------------------------ the phases
out=${out_arg:-${OUT:-build/gpu-check-out}}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd -P)

cmake_args=()
if [ -n "$deps_dir" ]; then
    deps=$(cd "$deps_dir" && pwd -P)
    zlib_lib=$(compgen -G "$deps/root/usr/lib/*/libz.a" | head -1 || true)
    if [ -z "$zlib_lib" ]; then  # no static library: the shared one, found at run time through LD_LIBRARY_PATH
        zlib_lib=$(compgen -G "$deps/root/usr/lib/*/libz.so" | head -1 || true)
        [ -n "$zlib_lib" ] || { echo "gpu_check.sh: no libz.a or libz.so in $deps/root/usr/lib" >&2; exit 2; }
        zlib_so_dir=$(dirname "$(readlink -f "$zlib_lib")")
        export LD_LIBRARY_PATH="$zlib_so_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    cmake_args+=(-DCMAKE_PREFIX_PATH="$deps/root/usr" -DZLIB_ROOT="$deps/root/usr"
                 -DZLIB_INCLUDE_DIR="$deps/root/usr/include" -DZLIB_LIBRARY="$zlib_lib")
    mnist="$deps/mnist"
    [ -d "$mnist" ] || mnist=""
    mnist_required=1
else
    mnist=$(find_mnist) || mnist=""
    mnist_required=0
fi
if ((dry_run)); then
    flavor=cpu
    tree=build/cpu${deps_dir:+-gpu-check-deps}  # the Makefile's cpu tree: CI has just built it for `make test`
    lesson_args=(--epochs 1 --limit 256 --test-limit 256)
    # The pipeline, not the suite (make test has run it): a few quick tests, one of them reading MNIST.
    ctest_select=(-R '^(test_names_are_ctest_safe|compare_lessons_script|mnist: .*real MNIST.*)$')
    ctest_jobs=$(nproc)
else
    flavor=cuda
    if [ -n "$deps_dir" ]; then tree=build/gpu-check-cuda; else tree=build/cuda-native; fi
    lesson_args=(--epochs 1 --full)
    ctest_select=()
    ctest_jobs=8
fi
! command -v ninja >/dev/null || cmake_args+=(-G Ninja)
[ -z "$mnist" ] || export MNIST_DIR="$mnist"
work_root=$repo_root/build/gpu-check-work
python=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' 2>/dev/null; then python=$p; break; fi
done

# ---- one phase's bookkeeping: rows of the summary, the archive, the budget
phase=""         # the phase running
work=""          # its working folder (logs, JSON, charts): what the archive holds
phase_start=0    # date +%s when it began
budget=0         # its budget in seconds
phase_status=0   # 0 passed, 1 a step failed, 3 stopped at the budget
phase_note=""    # why it ended early, if it did
rows=()          # "step|status|seconds|log"
extras=()        # files whose contents the summary quotes (name|file)

child=""         # the step's process while it runs, for the signal handler

now() { date +%s.%N; }
# bounded SECONDS LOG COMMAND...: COMMAND with its output appended to LOG, killed after SECONDS (exit 124 or 137).
# In the background and waited for, so that a signal reaches on_signal at once rather than after the step.
bounded() {
    local seconds=$1 log=$2
    shift 2
    timeout --kill-after=5 "$seconds" "$@" >>"$log" 2>&1 </dev/null &
    child=$!
    wait "$child"
    local rc=$?
    child=""
    return $rc
}
elapsed() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }
seconds_left() { awk -v s="$phase_start" -v b="$budget" -v e="$(now)" 'BEGIN { printf "%d", b - (e - s) }'; }

# The summary and the archive, as they stand: called after every step and once more at the end (or on a signal).
write_outputs() {
    local final=${1:-0} result
    if ((final)); then
        case $phase_status in
            0) result="passed" ;;
            3) result="stopped at the budget ($budget s): $phase_note" ;;
            *) result="FAILED${phase_note:+: $phase_note}" ;;
        esac
    else
        result="still running (this file is rewritten after every step)"
    fi
    {
        echo "# gpu_check: phase $phase"
        echo
        echo "- result: **$result**"
        echo "- command: tools/gpu_check.sh ${original_args[*]}"
        echo "- budget: $budget s; elapsed: $(elapsed "$phase_start") s"
        sed 's/^/- /' "$work/device.txt" 2>/dev/null
        echo "- logs, JSON and charts: gpu-check-$phase.tar.gz"
        echo
        echo "| step | status | seconds | log |"
        echo "|---|---|---:|---|"
        local row
        for row in "${rows[@]}"; do echo "| ${row//|/ | } |"; done
        local extra name file
        for extra in "${extras[@]}"; do
            name=${extra%%|*}
            file=${extra#*|}
            [ -s "$work/$file" ] || continue
            echo
            echo "## $name ($file)"
            echo
            echo '```'
            cat "$work/$file"
            echo '```'
        done
    } >"$out/summary-$phase.md.tmp" && mv -f "$out/summary-$phase.md.tmp" "$out/summary-$phase.md"
    tar -czf "$out/gpu-check-$phase.tar.gz.tmp" -C "$work" . 2>/dev/null &&
        mv -f "$out/gpu-check-$phase.tar.gz.tmp" "$out/gpu-check-$phase.tar.gz"
}

record() {  # record STEP STATUS SECONDS LOG
    rows+=("$1|$2|$3|$4")
    case "$2" in
        ok* | skip*) ;;
        "stopped at the budget"* | "not run"*)  # a failure before it stays the verdict
            ((phase_status == 1)) || phase_status=3
            [ -n "$phase_note" ] || phase_note="at step $1"
            ;;
        *) phase_status=1 ;;
    esac
    echo "    $1: $2 (${3}s)"
    write_outputs
}

# no_budget_left NAME: true (and a row for NAME) when the phase has no time left for it.
no_budget_left() {
    if ((phase_status != 3 && $(seconds_left) > 0)); then return 1; fi  # (once stopped, no later step runs)
    record "$1" "not run (no budget left)" 0 -
}

# step NAME LOG COMMAND...: runs COMMAND within what is left of the budget, its output in WORK/LOG; records a row.
# Returns 0 if it passed, 1 if it failed, 3 if the budget stopped it (or none was left).
step() {
    local name=$1 log=$2 start rc left
    shift 2
    no_budget_left "$name" && return 3
    left=$(seconds_left)
    echo "=== $name: $*" | tee "$work/$log"
    start=$(now)
    bounded "$left" "$work/$log" "$@"
    rc=$?
    if ((rc == 124 || rc == 137)); then
        echo "=== stopped at the budget: $budget s for phase $phase" | tee -a "$work/$log"
        record "$name" "stopped at the budget" "$(elapsed "$start")" "$log"
        return 3
    fi
    record "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAIL ($rc)")" "$(elapsed "$start")" "$log"
    ((rc == 0)) || return 1
}

# A signal (the caller's own timeout, ^C) still completes the summary and the archive.
on_signal() {
    [ -z "$child" ] || kill -TERM "$child" 2>/dev/null
    phase_status=3
    phase_note="interrupted by a signal (the caller's time limit?)"
    echo "gpu_check: $phase $phase_note" >&2
    [ -z "$phase" ] || write_outputs 1
    exit 3
}
trap on_signal TERM INT HUP

begin_phase() {
    phase=$1
    work=$work_root/$phase
    rm -rf "$work" "$out/summary-$phase.md" "$out/gpu-check-$phase.tar.gz"
    mkdir -p "$work"
    phase_start=$(now)
    budget=${budget_override:-${phase_budget[$phase]}}
    # The dry run emulates every kernel on the CPU (and CI's 2 cores may be busy): 4x the GPU budget, unless given.
    # (--lease with --deadline: that deadline, dry run or not.)
    if ((dry_run)) && [ -z "$budget_override" ] && ! { [ "$phase" = lease ] && ((deadline_given)); }; then
        budget=$((4 * budget))
    fi
    phase_status=0
    phase_note=""
    rows=()
    extras=()
    echo "=== phase $phase (budget $budget s)"
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "mode: $( ((dry_run)) && echo "dry run, cpu flavor (CPU timings)" || echo "cuda flavor")," \
            "dependencies: ${deps:-system packages}; build tree: $tree; MNIST: ${mnist:-none}"
        if ((dry_run)); then
            echo "CPU: $(nproc) cores"
        else
            echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -3 | paste -sd';')"
        fi
        echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
        echo "$(cmake --version | head -1)"
        echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo " (with uncommitted changes)")"
    } >"$work/device.txt" 2>&1
    cat "$work/device.txt"
    write_outputs
}

end_phase() {
    write_outputs 1
    echo "=== phase $phase: $(sed -n 's/^- result: \*\*\(.*\)\*\*$/\1/p' "$out/summary-$phase.md") ($out/summary-$phase.md)"
    phase=""
}

# configure + build TARGETS (all when none): ninja rebuilds nothing that an earlier phase already built.
build() {
    step configure configure.txt cmake -S . -B "$tree" -DFLAVOR=$flavor "${cmake_args[@]}" || return
    step build build.txt cmake --build "$tree" -j "$(nproc)" ${1:+--target "$@"}
}

# ---- build-test: configure, build everything, the whole suite (a skipped test is listed, not failed)
phase_build_test() {
    build || return
    local start rc result skipped
    no_budget_left tests && return
    echo "=== tests: ctest -j $ctest_jobs ${ctest_select[*]} (MNIST_DIR=${MNIST_DIR:-unset})" | tee "$work/tests.txt"
    start=$(now)
    bounded "$(seconds_left)" "$work/tests.txt" \
        ctest --test-dir "$tree" --output-on-failure -j "$ctest_jobs" "${ctest_select[@]}"
    rc=$?
    tail -5 "$work/tests.txt"
    skipped=$(grep -c '\*\*\*Skipped\|Not Run' "$work/tests.txt")
    grep '\*\*\*Skipped\|Not Run' "$work/tests.txt" >"$work/skipped.txt"
    if ((rc == 124 || rc == 137)); then
        result="stopped at the budget"
    elif ((rc != 0)); then
        result="FAIL ($rc)"
    elif ! grep -q "tests passed" "$work/tests.txt"; then
        result="FAIL (no tests ran)"
    elif ((skipped)); then
        result="ok ($skipped skipped: see skipped.txt)"
    else
        result=ok
    fi
    grep -E 'tests passed|tests failed' "$work/tests.txt" >"$work/tests-line.txt"
    extras=("ctest|tests-line.txt" "skipped tests|skipped.txt")
    record tests "$result" "$(elapsed "$start")" tests.txt
}

# The memory figures Nsight Compute measures for `bench --once` (one launch per GEMM/HGEMM step), as the counting
# build names them: tools/compare_counts.py has the pairs and prints the list.
ncu_metrics=$(python3 tools/compare_counts.py --metrics)

# ---- bench: the GEMM staircase beside cuBLAS, the memory-bound kernels, the CPU backend's costs; with Nsight Compute,
# each GEMM step's memory counts beside the counting build's (--prepare computes those: the GPU machine cannot)
phase_bench() {
    build bench backend_bench || return
    extras=("bench --quick|bench.txt")
    step bench bench.txt "$tree/bench/bench" --quick
    step backend_bench backend_bench.txt "$tree/bench/backend_bench"
    if ((dry_run)); then
        record ncu_counts "skip (dry run: no GPU to profile)" 0 -
    elif ! command -v ncu >/dev/null; then
        record ncu_counts "skip (Nsight Compute, ncu, not found)" 0 -
    elif step ncu_counts ncu.txt ncu --csv --log-file "$work/ncu.csv" --metrics "$ncu_metrics" \
        "$tree/bench/bench" --once; then
        if [ -n "${deps:-}" ] && [ -f "$deps/access_counts.csv" ]; then
            step counts_vs_ncu counts-vs-ncu.md python3 tools/compare_counts.py "$work/ncu.csv" \
                "$deps/access_counts.csv" && extras+=("counting build vs Nsight Compute|counts-vs-ncu.md")
        else
            record counts_vs_ncu "skip (no access_counts.csv: run --prepare on a machine with Boost)" 0 -
        fi
    fi
}

# ---- lessons: every lesson once, its JSON kept for the report phase
lesson_targets() {
    local main
    for main in lessons/*/main.cu; do [ -f "$main" ] && echo "lesson$(basename "$(dirname "$main")")"; done
}
phase_lessons() {
    local names=() name reports=()
    mapfile -t names < <(lesson_targets)
    if [ -z "$mnist" ]; then
        for name in "${names[@]}"; do
            record "$name" "$( ((mnist_required)) && echo "FAIL (no $deps_dir/mnist)" || echo "skip (no MNIST)")" 0 -
        done
        return
    fi
    build "${names[@]}" || return
    for name in "${names[@]}"; do
        step "$name" "$name.txt" "$tree/lessons/$name" --data "$mnist" "${lesson_args[@]}" --json "$work/$name.json"
        case $? in
            0) reports+=("$work/$name.json") ;;
            3) return ;;
        esac
    done
    ((${#reports[@]})) && compare_and_draw "${reports[@]}"
}

# The table `make run` ends with, and make report's charts (into WORK/report/), from the lessons' JSON.
compare_and_draw() {
    step compare compare.txt python3 tools/compare_lessons.py "$@"
    extras+=("comparison|compare.txt")
    if [ -n "$python" ]; then
        step report report.txt "$python" tools/report.py "$@" --out "$work/report" \
            --command "tools/gpu_check.sh ${original_args[*]}"
    else
        record report "FAIL (no python3 with matplotlib)" 0 -
    fi
}

# ---- report: the lessons phase's JSON (its working folder, or an archive it returned) drawn again
phase_report() {
    local source=$work_root/lessons reports=()
    if [ -n "$from_archive" ]; then
        source=$work/from
        mkdir -p "$source"
        step unpack unpack.txt tar -xzf "$from_archive" -C "$source" || return
    fi
    mapfile -t reports < <(compgen -G "$source/lesson*.json" | sort)
    if ((${#reports[@]} == 0)); then
        record compare "FAIL (no lesson JSON in $source: run --phase lessons first, or give --from)" 0 -
        return
    fi
    cp "${reports[@]}" "$work/"
    mapfile -t reports < <(compgen -G "$work/lesson*.json" | sort)
    compare_and_draw "${reports[@]}"
}

# ---- lease: one command, one deadline, the most valuable measurements first (the header says which and why)
# The GPU test subset: every kernel's tests, the streams' (async), lessons 01-04 end to end. The whole suite's other
# tests are the CPU's business (CI runs them); the dry run takes its quick pipeline subset instead.
lease_tests='^(gemm|hgemm|bias_grad|bias_add|relu|normalize_pixels|gather_rows|accumulate_loss|softmax_cross_entropy|count_correct|adamw|sgd|augment|tensor|fp16|unscale|async|lessons: (01 and 02|03|04|--optimizer))'

# The metrics of ncu_metrics this device's Nsight Compute knows (ncu --query-metrics lists base names; a metric is
# BASE.suffix): one unknown name would make ncu refuse the whole profile.
ncu_known_metrics() {
    local known
    known=$(ncu --query-metrics 2>/dev/null | awk 'NR > 2 { print $1 }') || return 1
    [ -n "$known" ] || return 1
    tr ',' '\n' <<<"$ncu_metrics" | while read -r metric; do
        grep -qxF "${metric%.*}" <<<"$known" || grep -qxF "$metric" <<<"$known" && echo "$metric"
    done | paste -sd,
}

# The lessons in the order a lease wants them: 01-06 and 08 (the kernels' and the data path's stories), then 07 (a
# sweep of batch sizes: the longest, so whatever time is left).
# A dry run may take fewer (GPU_CHECK_DRY_LESSONS, an extended regex of their names: tests/gpu_check_test.sh's lease
# run, whose every lesson the lessons phase has just run).
lease_lesson_order() {
    local only=.
    ((dry_run)) && [ -n "${GPU_CHECK_DRY_LESSONS:-}" ] && only=$GPU_CHECK_DRY_LESSONS
    lesson_targets | grep -v '^lesson07' | grep -E -- "$only"
    lesson_targets | grep '^lesson07' | grep -E -- "$only"
}

phase_lease() {
    local names=() name reports=() known rc chart charts=0
    build bench || return
    extras=("bench --quick|bench.txt" "GPU tests|tests-line.txt")
    step bench bench.txt "$tree/bench/bench" --quick
    if ((dry_run)); then
        record ncu_counts "skip (dry run: no GPU to profile)" 0 -
    elif ! command -v ncu >/dev/null; then
        record ncu_counts "skip (Nsight Compute, ncu, not found)" 0 -
    elif ! known=$(ncu_known_metrics) || [ -z "$known" ]; then
        record ncu_counts "FAIL (ncu --query-metrics listed none of: $ncu_metrics)" 0 -
    else
        [ "$known" = "$ncu_metrics" ] || echo "metrics this ncu lacks, dropped: $ncu_metrics -> $known" >"$work/ncu-dropped.txt"
        if step ncu_counts ncu.txt ncu --csv --log-file "$work/ncu.csv" --metrics "$known" "$tree/bench/bench" --once &&
            [ -n "${deps:-}" ] && [ -f "$deps/access_counts.csv" ]; then
            step counts_vs_ncu counts-vs-ncu.md python3 tools/compare_counts.py "$work/ncu.csv" \
                "$deps/access_counts.csv" && extras+=("counting build vs Nsight Compute|counts-vs-ncu.md")
        fi
    fi
    mapfile -t names < <(lease_lesson_order)
    step build_tests build-tests.txt cmake --build "$tree" -j "$(nproc)" --target unit_tests "${names[@]}" || return
    no_budget_left tests && return
    local select=(-R "$lease_tests")
    ((dry_run)) && select=("${ctest_select[@]}")
    echo "=== tests: ctest ${select[*]}" | tee "$work/tests.txt"
    local start
    start=$(now)
    bounded "$(seconds_left)" "$work/tests.txt" ctest --test-dir "$tree" --output-on-failure -j "$ctest_jobs" "${select[@]}"
    rc=$?
    grep -E 'tests passed|tests failed' "$work/tests.txt" >"$work/tests-line.txt"
    if ((rc == 124 || rc == 137)); then
        record tests "stopped at the budget" "$(elapsed "$start")" tests.txt
        return
    fi
    record tests "$( ((rc == 0)) && echo ok || echo "FAIL ($rc)")" "$(elapsed "$start")" tests.txt
    if [ -z "$mnist" ]; then
        record lessons "$( ((mnist_required)) && echo "FAIL (no $deps_dir/mnist)" || echo "skip (no MNIST)")" 0 -
        return
    fi
    # The lessons run within the deadline less 30 s, kept for the comparison and the charts (they read JSON only),
    # so that a lesson cut short still leaves the others' figures drawn.
    local reserve=30 cut=0
    budget=$((budget - reserve))
    for name in "${names[@]}"; do
        if (($(seconds_left) <= 0)); then
            record "$name" "skip (the deadline, less ${reserve} s for the charts, is reached)" 0 -
            cut=1
            continue
        fi
        step "$name" "$name.txt" "$tree/lessons/$name" --data "$mnist" "${lesson_args[@]}" --json "$work/$name.json" \
            --trace "$work/$name-trace.json"
        rc=$?
        ((rc == 0)) && reports+=("$work/$name.json")
        if ((rc == 3)); then cut=1; ((phase_status == 1)) || phase_status=0; fi  # (the charts still run)
    done
    budget=$((budget + reserve))
    ((${#reports[@]})) && compare_and_draw "${reports[@]}"
    if ((cut && phase_status == 0)); then
        phase_status=3
        phase_note="the deadline cut the lessons short"
    fi
    for chart in "$work"/report/*.png; do  # at most 2 charts beside the summary and the archive: 4 files in all
        [ -f "$chart" ] && ((charts < 2)) || continue
        cp -f "$chart" "$out/$(basename "$chart")" && charts=$((charts + 1))
    done
}

status=0
for p in "${phases[@]}"; do
    begin_phase "$p"
    case $p in
        build-test) phase_build_test ;;
        bench) phase_bench ;;
        lessons) phase_lessons ;;
        report) phase_report ;;
        lease) phase_lease ;;
    esac
    end_phase
    case $phase_status in
        0) ;;
        3) ((status == 1)) || status=3 ;;
        *) status=1 ;;
    esac
done
echo "gpu_check: summaries and archives in $out"
exit $status
