#!/usr/bin/env bash
# tools/run_lessons.sh — runs every lesson of a build tree with --json into a results folder: `make run` and
# `make report` both call it, so `make report` right after `make run` reuses what `make run` measured.
#
#   tools/run_lessons.sh --build DIR --results DIR [--reuse] [--draw OUT] [-- LESSON_ARGS...]
#
# Each lesson writes RESULTS/lessonNN_name.json through a .partial file that replaces the earlier result only when
# the lesson succeeds, so a failing run (a bad flag, a crash) never deletes earlier results. Beside it,
# lessonNN_name.stamp records how it was made: the commit (with "+dirty" for a changed work tree) and the flags.
# --reuse: a lesson whose JSON is newer than its executable and whose stamp matches this commit and these flags is
#          not run again (FRESH=1 in the environment turns reuse off).
# --draw OUT: tools/report.py draws the charts into OUT from the results there are, after every lesson that ran
#          (so each chart appears as soon as its data exists) or once if every result was reused; with
#          RESULTS/access_counts.csv there (make report writes it), the GEMM steps' memory-counts chart too.
# Stops at the first lesson that fails, with its exit code.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build="" results="" reuse=0 draw=""
while (($#)); do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --results) results=$2; shift 2 ;;
        --reuse) reuse=1; shift ;;
        --draw) draw=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "run_lessons.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -n "$build" ] && [ -n "$results" ] || { echo "run_lessons.sh: need --build DIR and --results DIR" >&2; exit 2; }
[ "${FRESH:-0}" = 0 ] || reuse=0
lesson_args=("$@")
mkdir -p "$results"

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
stamp_text="commit $commit; flags: ${lesson_args[*]}"

python=
if [ -n "$draw" ]; then
    for p in python3 /usr/bin/python3; do
        if "$p" -c 'import matplotlib' 2>/dev/null; then python=$p; break; fi
    done
    [ -n "$python" ] || { echo "run_lessons.sh: no python3 with matplotlib (make deps installs python3-matplotlib)" >&2; exit 1; }
fi

names=()
for main in lessons/*/main.cu; do [ -f "$main" ] && names+=("$(basename "$(dirname "$main")")"); done

# The charts from every result there is now, with the command that made each.
draw_charts() {
    local reports=() commands=() name
    for name in "${names[@]}"; do
        [ -f "$results/lesson$name.json" ] || continue
        reports+=("$results/lesson$name.json")
        commands+=(--command "$build/lessons/lesson$name ${lesson_args[*]} --json $results/lesson$name.json")
    done
    ((${#reports[@]})) || return 0
    # The counting build's GEMM counts, when make report has written them (tools/report.py's "GEMM steps ... memory requests" chart).
    local counts=()
    [ ! -f "$results/access_counts.csv" ] || counts=(--counts "$results/access_counts.csv")
    echo "=== the charts so far ($draw/, from ${#reports[@]} of ${#names[@]} lessons)"
    "$python" tools/report.py "${reports[@]}" --out "$draw" "${counts[@]}" "${commands[@]}"
}

ran=0
for name in "${names[@]}"; do
    program=$build/lessons/lesson$name
    report=$results/lesson$name.json
    stamp=$results/lesson$name.stamp
    if ((reuse)) && [ -f "$report" ] && [ "$report" -nt "$program" ] && [ -f "$stamp" ] &&
        [ "$(cat "$stamp")" = "$stamp_text" ]; then
        echo "=== lesson$name: reusing $report (same commit, flags and executable; FRESH=1 runs it again)"
        continue
    fi
    # Lesson 09 (data parallelism) runs as 2 ranks under mpirun; it is not built where MPI was not found.
    launcher=()
    if [[ $name == 09* ]]; then
        if [ ! -x "$program" ]; then
            echo "=== lesson$name: skipped (not built: MPI not found; make deps installs Open MPI)"
            continue
        fi
        launcher=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -n 2 --oversubscribe)
    fi
    echo "=== lesson$name"
    rm -f "$report.partial"
    # --trace: the timeline of its first steps (tools/report.py draws lessons 01-03's).
    "${launcher[@]}" "$program" "${lesson_args[@]}" --json "$report.partial" --trace "$results/lesson$name.trace.json"
    status=$?
    if [ $status -ne 0 ]; then
        rm -f "$report.partial"
        echo "lesson$name failed (exit code $status); stopping here (earlier results in $results/ are kept)" >&2
        exit $status
    fi
    mv -f "$report.partial" "$report"
    printf '%s' "$stamp_text" >"$stamp"
    # On the CPU backend streams run one after the other unless CUDA_CPU_ASYNC=1: for the report's timeline, lesson
    # 03 (copies on their own stream) once more that way, where its copies really run beside the kernels.
    if [ -n "$draw" ] && [[ $name == 03* ]] && grep -q '^FLAVOR:STRING=cpu' "$build/CMakeCache.txt" 2>/dev/null; then
        echo "=== lesson$name again with CUDA_CPU_ASYNC=1, for its timeline (copies beside the kernels)"
        CUDA_CPU_ASYNC=1 "$program" "${lesson_args[@]}" --trace "$results/lesson$name.async.trace.json" >/dev/null ||
            echo "(the asynchronous run failed: the timeline chart uses the synchronous one)" >&2
    fi
    ran=$((ran + 1))
    if [ -n "$draw" ]; then draw_charts || exit; fi
done
if [ -n "$draw" ] && ((ran == 0)); then draw_charts || exit; fi
exit 0
