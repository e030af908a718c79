#!/usr/bin/env bash
# make test-stress: the whole suite where timing luck would show (issue 41, docs/testing.md).
#
#   1. RUNS (default 5) whole runs of make test's command with both CPUs kept busy by
#      BURNERS (default: one per CPU) busy-loop processes, as stress-ng --cpu N would;
#   2. one serial run (-n 0), nothing else running;
#   3. the stop storm (tests/reliability/test_stop_storm.py: 200 stops of a periodic agent
#      with one CPU busy, each within a second), which make test leaves out.
# Stops at the first failing step; prints each step's wall time and closing line.
set -euo pipefail
cd "$(dirname "$0")/.."

python=.venv/bin/python
runs=${RUNS:-5}
burners=${BURNERS:-$(nproc)}
pids=()
stop_burners() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    pids=()
}
trap stop_burners EXIT

summary=()
step() {
    local name=$1
    shift
    local started=$SECONDS log
    log=$(mktemp)
    if ! "$@" >"$log" 2>&1; then
        tail -n 60 "$log"
        rm -f "$log"
        echo "test-stress: $name failed (above)" >&2
        exit 1
    fi
    summary+=("$name: $((SECONDS - started)) s, $(grep -E '^[0-9]+ passed' "$log" | tail -n 1)")
    rm -f "$log"
    echo "${summary[-1]}"
}

for _ in $(seq 1 "$burners"); do
    "$python" -c 'while True: pass' &
    pids+=($!)
done
for run in $(seq 1 "$runs"); do
    step "loaded run $run of $runs ($burners CPUs busy)" "$python" -m pytest -q -n auto
done
stop_burners
step "serial run" "$python" -m pytest -q -n 0
step "stop storm" "$python" -m pytest -q -n 0 --stress tests/reliability/test_stop_storm.py

printf '%s\n' "" "test-stress: every step passed" "${summary[@]}"
