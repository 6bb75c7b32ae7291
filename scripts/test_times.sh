#!/usr/bin/env bash
# Time one tier of the test suite and list its slowest tests, by wall time and by CPU time.
#
#   scripts/test_times.sh [fast|slow|all] [N] [PYTEST ARGS...]     (default: fast 20, the whole tests/ folder)
#
# CPU time (user + system of pytest and the child processes it reaped during each test, conftest.py's
# --cpu-durations) moves far less with machine load than wall time: compare it across runs on a shared box.
# The whole report goes to test-times-<tier>.txt; the summary lines are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-fast}
n=${2:-20}
case "$tier" in
    fast) select=(-m "not slow") ;;
    slow) select=(-m slow) ;;
    all) select=() ;;
    *) echo "usage: $0 [fast|slow|all] [N]" >&2; exit 2 ;;
esac
out="test-times-$tier.txt"
python=${PYTHON:-.venv/bin/python}
# as .ci/run does: bytecode compiled once, so that no process of the suite compiles the package again where
# PYTHONDONTWRITEBYTECODE is set
"$python" -m compileall -q -x 'tests/fixtures/' accelopt_nb nkibench tests benchmarks scripts > /dev/null
start=$(date +%s)
/usr/bin/time -o "$out.time" -f "%U %S" "$python" -m pytest -q "${select[@]}" -p no:cacheprovider \
    --durations="$n" --cpu-durations="$n" "${@:3}" > "$out" 2>&1 || status=$?
wall=$(( $(date +%s) - start ))
read -r user sys < <(tail -n 1 "$out.time")    # GNU time writes "Command exited with ..." first on failure
rm -f "$out.time"
grep -A "$n" "slowest $n durations" "$out" | grep -v "^(" || true
grep -A "$n" "CPU seconds per test" "$out" || true
tail -n 1 "$out"
echo "tier $tier: ${wall} s wall, ${user} s user + ${sys} s system (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
exit "${status:-0}"
