#!/usr/bin/env bash
# tools/gpu_check.sh — everything worth running on a GPU, in one go, with logs: build the cuda flavor for the GPU
# that is present, run the whole test suite (nothing may be skipped there), the benchmarks, every lesson on full
# MNIST and the table comparing them; a summary table (step | status | seconds | log file) is printed last.
#
#   tools/gpu_check.sh [LOG_DIR]                 build against the system's packages (the original behaviour)
#   tools/gpu_check.sh --prepare DIR             on a Debian machine with apt (as root): gather into DIR what a bare
#                                                GPU machine lacks, so that --deps works there with no network
#   tools/gpu_check.sh --deps DIR [LOG_DIR]      on a bare GPU machine (CUDA toolkit, CMake, ninja, Python only):
#                                                configure and build against DIR, then run everything
#   tools/gpu_check.sh --dry-run [LOG_DIR]       the same pipeline on the CPU (cpu flavor, small subsets), for CI
#   tools/gpu_check.sh --dry-run --deps DIR [LOG_DIR]   the dry run against the prepared DIR (tests --deps here)
#
# --prepare DIR: `apt-get download` + `dpkg -x DIR/root` of catch2, zlib1g-dev, zlib1g, libcli11-dev and
#   nlohmann-json3-dev (what the cuda flavor's configure needs; it does not need Boost; `apt-get update` is run once
#   if a download fails), and a copy of MNIST (from $MNIST_DIR, else ../shared/data/mnist relative to the repository
#   root, else data/mnist) in DIR/mnist. Prints DIR's size at the end: the device tool carries at most 64 MiB.
#   DIR must be inside the repository for the device tool to carry it; keep it out of git and name it in `carry`:
#       echo /gpu-deps/ >> .git/info/exclude
#       tools/gpu_check.sh --prepare gpu-deps
#       (device tool) run  command: tools/gpu_check.sh --deps gpu-deps   carry: ["gpu-deps"]
# --deps DIR: CMAKE_PREFIX_PATH=DIR/root/usr (Catch2 in usr/lib/cmake/Catch2, CLI11 and nlohmann_json in
#   usr/share/cmake/...), ZLIB_ROOT / ZLIB_INCLUDE_DIR / ZLIB_LIBRARY in DIR/root (libz.a, linked statically; if
#   only the .so is there, LD_LIBRARY_PATH points at it for the runs), MNIST_DIR=DIR/mnist for the tests and
#   --data DIR/mnist for the lessons. Build tree build/gpu-check-cuda (build/cuda-native without --deps).
# --dry-run: cpu flavor in build/gpu-check-dry (build/gpu-check-dry-deps with --deps; the cpu flavor also needs
#   Boost.Context, from the system), the ctest suite as it is, `bench --quick`, the lessons with
#   `--epochs 1 --limit 256 --test-limit 256`. A few minutes on 2 cores.
# Steps: configure, build (-j $(nproc), ninja when present), tests (ctest -j 8; a skipped test is a failure),
#   backend_bench, bench (its exit status counts), each lessons/NN_name as build/<tree>/lessons/lessonNN_name
#   --data MNIST --json LOG_DIR/lessonNN_name.json (a failing lesson counts), compare (tools/compare_lessons.py),
#   report (tools/report.py's charts and README into LOG_DIR/report/, with a python3 that has matplotlib).
#   Without --deps MNIST comes from $MNIST_DIR, ../shared/data/mnist or data/mnist; if none is there the lessons
#   and the comparison are reported as "skip" (with --deps a missing DIR/mnist is a failure).
# LOG_DIR (default $OUT when set, else build/gpu-check-logs; a relative path — also DIR — is taken from the
#   repository root) gets device.txt, one log per step and the lessons' JSON reports.
# Ends non-zero if any step fails (or a test was skipped); 2 for a usage error.
set -uo pipefail

usage() {
    cat << EOF
usage: $0 [LOG_DIR]
       $0 --prepare DIR
       $0 --deps DIR [LOG_DIR]
       $0 --dry-run [--deps DIR] [LOG_DIR]
On a machine with an NVIDIA GPU: builds the cuda flavor for that GPU, runs the whole test suite there (a skipped
test counts as a failure), backend_bench and bench, every lesson on full MNIST (--json reports in LOG_DIR) and
tools/compare_lessons.py and tools/report.py (charts in LOG_DIR/report/) over them, writes each step's log to
LOG_DIR and ends with a summary table (step | status | seconds | log file). Exits 1 if any step fails or a test was skipped.
  (no option)     build against the system's packages, in build/cuda-native
  --prepare DIR   (Debian, as root, with apt) gather what a bare GPU machine lacks into DIR: catch2, zlib1g-dev,
                  zlib1g, libcli11-dev, nlohmann-json3-dev unpacked into DIR/root (apt-get download + dpkg -x), and
                  MNIST into DIR/mnist (from \$MNIST_DIR, ../shared/data/mnist or data/mnist). Prints DIR's size
                  (the device tool carries at most 64 MiB). DIR must be inside the repository to be carried:
                    echo /gpu-deps/ >> .git/info/exclude; $0 --prepare gpu-deps
                  then on the device: $0 --deps gpu-deps   (with carry: ["gpu-deps"])
  --deps DIR      configure against DIR (CMAKE_PREFIX_PATH=DIR/root/usr, ZLIB_* into DIR/root), tests with
                  MNIST_DIR=DIR/mnist, lessons with --data DIR/mnist; build tree build/gpu-check-cuda
  --dry-run       the same pipeline on the CPU: cpu flavor in build/gpu-check-dry (-deps with --deps), ctest suite
                  as is, bench --quick, lessons with --epochs 1 --limit 256 --test-limit 256 (a few minutes)
LOG_DIR: default \$OUT if set, else build/gpu-check-logs. Relative paths (LOG_DIR, DIR) are taken from the
repository root. Without --deps, the lessons need MNIST (\$MNIST_DIR, ../shared/data/mnist or data/mnist) and are
reported as skipped when there is none.
Environment:
  OUT        the log directory when LOG_DIR is not given
  MNIST_DIR  where MNIST is (--prepare, and runs without --deps)
  PATH       searched for nvidia-smi, nvcc, cmake, ctest, ninja (/usr/local/cuda/bin is appended to it)
EOF
}

die_usage() { echo "gpu_check.sh: $1 (see --help)" >&2; exit 2; }

mode=system  # system | prepare
dry_run=0
deps_dir=""
prepare_dir=""
log_arg=""
original_args=("$@")
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --prepare) (($# >= 2)) || die_usage "--prepare needs a directory"; mode=prepare; prepare_dir=$2; shift 2 ;;
        --deps) (($# >= 2)) || die_usage "--deps needs a directory"; deps_dir=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -*) die_usage "unknown option '$1'" ;;
        *) [ -z "$log_arg" ] || die_usage "more than one LOG_DIR given ('$log_arg', '$1')"; log_arg=$1; shift ;;
    esac
done
if [ "$mode" = prepare ] && { [ -n "$deps_dir" ] || ((dry_run)) || [ -n "$log_arg" ]; }; then
    die_usage "--prepare DIR takes no other option or LOG_DIR"
fi

cd "$(dirname "$0")/.." || exit 1
repo_root=$(pwd -P)
export PATH=$PATH:/usr/local/cuda/bin
if [ -n "$deps_dir" ] && [ ! -d "$deps_dir/root/usr" ]; then
    echo "gpu_check.sh: $deps_dir/root/usr not found (run --prepare first)" >&2
    exit 2
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
if [ "$mode" = prepare ]; then
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

# ---------------------------------------------------------------------------------------------- build and run
logs=${log_arg:-${OUT:-build/gpu-check-logs}}
mkdir -p "$logs" || exit 1
logs=$(cd "$logs" && pwd -P)

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
    tree=build/gpu-check-dry${deps_dir:+-deps}
    lesson_args=(--epochs 1 --limit 256 --test-limit 256)
    bench_args=(--quick)
    ctest_jobs=$(nproc)
else
    flavor=cuda
    if [ -n "$deps_dir" ]; then tree=build/gpu-check-cuda; else tree=build/cuda-native; fi
    lesson_args=()
    bench_args=()
    ctest_jobs=8
fi
! command -v ninja >/dev/null || cmake_args+=(-G Ninja)
[ -z "$mnist" ] || export MNIST_DIR="$mnist"

{
    date -u
    echo "mode: $( ((dry_run)) && echo "dry run (cpu flavor)" || echo "cuda flavor")," \
        "dependencies: ${deps:-system packages}; build tree: $tree; MNIST: ${mnist:-none}"
    if ((dry_run)); then
        echo "CPU cores: $(nproc)"
    else
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    fi
    nvcc --version | tail -1
    cmake --version | head -1
} 2>&1 | tee "$logs/device.txt"

status=0
rows=()
# step NAME LOGFILE COMMAND...: runs COMMAND with its output in LOG_DIR/LOGFILE, records a row of the summary.
step() {
    local name=$1 log=$2 start rc
    shift 2
    echo "=== $name: $*" | tee "$logs/$log"
    start=$(date +%s.%N)
    "$@" >>"$logs/$log" 2>&1
    rc=$?
    record "$name" "$([ $rc -eq 0 ] && echo ok || echo "FAIL ($rc)")" "$(elapsed "$start")" "$log"
    return $rc
}
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
record() {
    rows+=("$1|$2|$3|$4")
    case "$2" in ok | skip*) ;; *) status=1 ;; esac
    echo "    $1: $2 (${3}s)"
}
summary() {
    echo
    echo "=== gpu_check summary (logs in $logs)"
    {
        echo "step|status|seconds|log file"
        printf '%s\n' "${rows[@]}"
    } | awk -F'|' '{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } }
                   END { for (r = 1; r <= NR; r++) {
                             line = ""
                             for (i = 1; i < 4; i++) line = line sprintf("%-" w[i] "s | ", cell[r, i])
                             line = line cell[r, 4]
                             print line } }'
    echo "gpu_check: $([ $status -eq 0 ] && echo "all steps passed" || echo "FAILED")"
}

if step configure configure.txt cmake -S . -B "$tree" -DFLAVOR=$flavor "${cmake_args[@]}" &&
    step build build.txt cmake --build "$tree" -j "$(nproc)"; then
    built=1
else
    built=0
    tail -40 "$logs/configure.txt" "$logs/build.txt" 2>/dev/null
fi

if ((built)); then
    echo "=== tests: ctest -j $ctest_jobs (MNIST_DIR=${MNIST_DIR:-unset})" | tee "$logs/tests.txt"
    start=$(date +%s.%N)
    ctest --test-dir "$tree" --output-on-failure -j "$ctest_jobs" >>"$logs/tests.txt" 2>&1
    rc=$?
    tail -5 "$logs/tests.txt"
    if [ $rc -ne 0 ]; then
        result="FAIL ($rc)"
    elif grep -q "Not Run\|Skipped" "$logs/tests.txt"; then
        result="FAIL (skipped tests)"
        grep "Not Run\|Skipped" "$logs/tests.txt" | head -20
    elif ! grep -q "tests passed" "$logs/tests.txt"; then
        result="FAIL (no tests ran)"
    else
        result=ok
    fi
    record tests "$result" "$(elapsed "$start")" tests.txt

    step backend_bench backend_bench.txt "$tree/bench/backend_bench"
    step bench bench.txt "$tree/bench/bench" "${bench_args[@]}"

    reports=()
    for main in lessons/*/main.cu; do
        [ -f "$main" ] || continue
        name=lesson$(basename "$(dirname "$main")")
        if [ -z "$mnist" ]; then
            if ((mnist_required)); then
                record "$name" "FAIL (no $deps_dir/mnist)" 0 -
            else
                record "$name" "skip (no MNIST)" 0 -
            fi
            continue
        fi
        rm -f "$logs/$name.json"
        step "$name" "$name.txt" "$tree/lessons/$name" --data "$mnist" "${lesson_args[@]}" --json "$logs/$name.json" &&
            reports+=("$logs/$name.json")
    done
    if ((${#reports[@]})); then
        step compare compare.txt python3 tools/compare_lessons.py "${reports[@]}"
        tail -n +2 "$logs/compare.txt"
        # The charts (make report's drawing step) from the same reports, into LOG_DIR/report/.
        python=
        for p in python3 /usr/bin/python3; do
            if "$p" -c 'import matplotlib' 2>/dev/null; then python=$p; break; fi
        done
        if [ -n "$python" ]; then
            step report report.txt "$python" tools/report.py "${reports[@]}" --out "$logs/report" \
                --command "tools/gpu_check.sh ${original_args[*]}"
        else
            record report "FAIL (no python3 with matplotlib)" 0 -
        fi
    else
        record compare "$([ -z "$mnist" ] && ((!mnist_required)) && echo "skip (no lesson ran)" || echo "FAIL (no report)")" 0 -
    fi
fi

summary
exit $status
