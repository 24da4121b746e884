#!/usr/bin/env bash
# tests/run_lessons_test.sh — tools/run_lessons.sh (what `make run` and `make report` call), with stand-in lesson
# executables in a scratch build tree: every lesson's JSON lands in the results folder; --reuse runs nothing whose
# result matches the commit, the flags and the executable, and runs again what does not; a failing lesson stops the
# run with its exit code and leaves the earlier results as they were.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd -P)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

names=()
for main in "$repo"/lessons/*/main.cu; do names+=("lesson$(basename "$(dirname "$main")")"); done
((${#names[@]} >= 2)) || { echo "run_lessons_test: need two lessons, found ${#names[@]}" >&2; exit 1; }
mkdir -p "$scratch/build/lessons"
# A stand-in lesson: logs its run, fails with 7 when FAIL_LESSON names it, else writes --json FILE.
for name in "${names[@]}"; do
    cat >"$scratch/build/lessons/$name" <<EOF
#!/usr/bin/env bash
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || exit 0  # lesson 09 runs as 2 ranks under mpirun: rank 0 stands for the run
echo "$name" >>"$scratch/ran.log"
[ "\${FAIL_LESSON:-}" = "$name" ] && { echo "$name: simulated failure" >&2; exit 7; }
while ((\$#)); do [ "\$1" = --json ] && { echo '{"program": "$name", "args": "'"\$*"'"}' >"\$2"; }; shift; done
EOF
    chmod +x "$scratch/build/lessons/$name"
done
results=$scratch/results
run() { bash "$repo/tools/run_lessons.sh" --build "$scratch/build" --results "$results" "$@" >>"$scratch/out.log" 2>&1; }
runs() { cat "$scratch/ran.log" 2>/dev/null | grep -c .; }

run -- --epochs 1 || fail "the first run failed"
for name in "${names[@]}"; do
    [ -s "$results/$name.json" ] || fail "no $name.json after a run"
    [ -f "$results/$name.stamp" ] || fail "no $name.stamp after a run"
done
[ "$(ls "$results" | grep -c partial)" -eq 0 ] || fail "a .partial file was left behind"
[ "$(runs)" -eq ${#names[@]} ] || fail "expected ${#names[@]} runs, counted $(runs)"

: >"$scratch/ran.log"
run --reuse -- --epochs 1 || fail "the reusing run failed"
[ "$(runs)" -eq 0 ] || fail "--reuse with the same commit, flags and executables ran $(runs) lessons"

: >"$scratch/ran.log"
FRESH=1 run --reuse -- --epochs 1 || fail "FRESH=1 failed"
[ "$(runs)" -eq ${#names[@]} ] || fail "FRESH=1 ran $(runs) lessons, not all"

: >"$scratch/ran.log"
run --reuse -- --epochs 2 || fail "the run with other flags failed"
[ "$(runs)" -eq ${#names[@]} ] || fail "other flags reran $(runs) lessons, not all"

: >"$scratch/ran.log"
sleep 1.1  # mtime resolution: the rebuilt executable must be newer than its result
touch "$scratch/build/lessons/${names[1]}"
run --reuse -- --epochs 2 || fail "the run after a rebuild failed"
[ "$(cat "$scratch/ran.log" 2>/dev/null)" = "${names[1]}" ] || fail "after rebuilding ${names[1]} only it should run, ran: $(paste -sd' ' "$scratch/ran.log")"

# A failing lesson: exit status passed on, the run stops there, its earlier result is kept byte for byte.
before=$(cat "$results/${names[1]}.json")
: >"$scratch/ran.log"
FAIL_LESSON=${names[1]} run -- --epochs 3
status=$?
[ $status -eq 7 ] || fail "a failing lesson's exit code 7 became $status"
[ "$(paste -sd' ' "$scratch/ran.log")" = "${names[0]} ${names[1]}" ] || fail "the run did not stop at the failing lesson"
[ "$(cat "$results/${names[1]}.json" 2>/dev/null)" = "$before" ] || fail "the failing lesson's earlier result was not kept"
[ ! -e "$results/${names[1]}.json.partial" ] || fail "the failing lesson left a .partial file"
grep -q "earlier results in .* are kept" "$scratch/out.log" || fail "no message that earlier results are kept"

if ((failures)); then
    cat "$scratch/out.log" >&2
    echo "run_lessons_test: $failures check(s) failed"
    exit 1
fi
echo "run_lessons_test: results written, reused when fresh, rerun when stale, kept when a lesson fails"
