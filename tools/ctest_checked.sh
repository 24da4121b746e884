#!/usr/bin/env bash
# tools/ctest_checked.sh CTEST [ARGS...] — runs ctest as given, then fails the run when CTest reported a test as
# skipped that tests/allowed_skips.txt does not allow (a skip is exit_skipped's marker: tests/test_support.h). A test
# that cannot run where it should is a failure, not a quiet pass: the whole run's status says so.
# ALLOW_ALL_SKIPS=1 lets every skip through (the cuda flavor on a machine without a GPU skips every device test).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "${ALLOW_ALL_SKIPS:-0}" = 1 ] && exit "$status"

# ctest's summary: "The following tests did not run:" then lines "	 12 - <name> (Skipped)".
mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9]\{1,\} - \(.*\) (Skipped)$/\1/p' "$log")
# tests/allowed_skips.txt: "always <regex>" or "unset:VAR <regex>" (allowed only while $VAR is empty); # comments.
allowed=()
while read -r condition regex; do
    case "$condition" in
        '' | '#'*) continue ;;
        always) allowed+=("$regex") ;;
        unset:*)
            var=${condition#unset:}
            [ -z "${!var:-}" ] && allowed+=("$regex")
            ;;
        *)
            echo "tools/ctest_checked.sh: bad line in tests/allowed_skips.txt: $condition $regex" >&2
            exit 2
            ;;
    esac
done <"$root/tests/allowed_skips.txt"

unexpected=()
for name in "${skipped[@]}"; do
    ok=0
    for regex in "${allowed[@]}"; do
        if [[ $name =~ $regex ]]; then
            ok=1
            break
        fi
    done
    ((ok)) || unexpected+=("$name")
done
if ((${#unexpected[@]})); then
    echo >&2
    echo "tools/ctest_checked.sh: ${#unexpected[@]} test(s) skipped that tests/allowed_skips.txt does not allow" \
        "(a skip hides whatever the test checks: make it run, or add it there with the reason):" >&2
    printf '  %s\n' "${unexpected[@]}" >&2
    [ "$status" -ne 0 ] || status=1
fi
exit "$status"
