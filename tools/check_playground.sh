#!/usr/bin/env bash
# tools/check_playground.sh — `make check-playground NAME=my_kernel` (or FILE=path/to/file.cu): one playground
# program checked by both sanitizer trees. Builds only that program and what it links (the CPU backend, common/) in
# build/cpu-sanitize (AddressSanitizer + UBSan) and build/cpu-race (ThreadSanitizer), configuring a tree that does
# not exist yet, runs it under each (ARGS are passed to it), and ends with one verdict line per tree.
# Exit status: 0 when neither tree found anything, 1 when one did (or the program failed), 2 when it cannot check.
#
# usage: tools/check_playground.sh NAME|FILE [program arguments...]
#   NAME: playground/NAME.cu.  FILE: a .cu file in playground/ or tests/playground_fixtures/ (CI's planted bugs);
#   these two folders are where the build has a target for every file.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
    echo "usage: make check-playground NAME=my_kernel (playground/my_kernel.cu) or FILE=path/to/file.cu [ARGS=...]" >&2
    exit 2
}
[ $# -ge 1 ] && [ -n "$1" ] || usage
what=$1
shift

if [[ $what == *.cu || $what == */* ]]; then
    file=$what
else
    file=playground/$what.cu
fi
[ -f "$file" ] || {
    echo "check-playground: no file $file (playground/ has: $(cd playground && ls *.cu 2>/dev/null | tr '\n' ' '))" >&2
    exit 2
}
dir=$(cd "$(dirname "$file")" && pwd)
name=$(basename "$file" .cu)
case $dir in
    "$PWD/playground")
        target=playground_$name
        output=playground/$name ;;
    "$PWD/tests/playground_fixtures")
        target=playground_fixture_$name
        output=tests/playground_fixtures/$name ;;
    *)
        echo "check-playground: $file is outside playground/: copy it there (every .cu file in playground/ gets a" \
             "build target)" >&2
        exit 2 ;;
esac

jobs=${JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
export PATH=$PATH:/usr/local/cuda/bin

# tree, its configure flags, its label in the verdict.
trees=(cpu-sanitize cpu-race)
declare -A flags=([cpu-sanitize]="-DSANITIZE=ON" [cpu-race]="-DRACECHECK=ON")
declare -A labels=([cpu-sanitize]="sanitizer (ASan+UBSan)" [cpu-race]="race (ThreadSanitizer)")
declare -A verdicts=()
found=0

verdict_of() {  # log, exit status → one line
    local log=$1 status=$2 kind
    if kind=$(grep -m1 -o 'WARNING: ThreadSanitizer: [a-z -]*' "$log"); then
        kind=${kind#WARNING: ThreadSanitizer: }
        echo "${kind% } reported — see above"
    elif kind=$(grep -m1 -oE 'ERROR: AddressSanitizer: [a-zA-Z-]+' "$log"); then
        echo "${kind#ERROR: AddressSanitizer: } reported — see above"
    elif grep -q 'runtime error:' "$log"; then
        echo "undefined behaviour reported (UBSan) — see above"
    elif grep -q 'CPU backend: kernel fault' "$log"; then
        echo "kernel fault reported by the CPU backend — see above"
    elif [ "$status" -ne 0 ]; then
        echo "the program failed (exit status $status) — see above"
    else
        echo "no error"
    fi
}

for tree in "${trees[@]}"; do
    build=build/$tree
    echo "=== check-playground: $file in $build (${labels[$tree]})"
    if [ ! -f "$build/CMakeCache.txt" ]; then
        cmake -S . -B "$build" "${generator[@]}" -DFLAVOR=cpu ${flags[$tree]} -DCMAKE_BUILD_TYPE=Debug >/dev/null ||
            { echo "check-playground: configuring $build failed" >&2; exit 2; }
    elif ! grep -qw "$target" "$build/build.ninja" "$build/Makefile" 2>/dev/null; then
        cmake "$build" >/dev/null  # a file added since the tree was configured: its target does not exist yet
    fi
    if ! cmake --build "$build" -j "$jobs" --target "$target"; then
        verdicts[$tree]="did not build — see above"
        found=1
        continue
    fi
    log=$(mktemp)
    "$build/$output" "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    verdicts[$tree]=$(verdict_of "$log" "$status")
    rm -f "$log"
    [ "${verdicts[$tree]}" = "no error" ] || found=1
done

echo
echo "=== check-playground: $file"
for tree in "${trees[@]}"; do
    printf '%-24s %s\n' "${labels[$tree]}:" "${verdicts[$tree]}"
done
exit $found
