#!/usr/bin/env bash
# Capture what gfd and the driver say on a machine with a real NVIDIA GPU (never run in CI).
#
#   scripts/real-gpu-capture.sh OUTDIR
#
# Needs python3 with gfd importable (built in place or installed) and the driver's
# libnvidia-ml.so.1. Writes into OUTDIR: gfd's facts (YAML), labels and topology matrix; the
# memory-health and Xid-event probe (scripts/nvml_health_probe.py); nvidia-smi's own view for
# comparison; and the real library's export list. Each step that fails is logged and the
# others still run, so one missing tool costs one file.
set -uo pipefail
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}

step() {
    local name=$1
    shift
    echo "== $name: $*" >&2
    "$@" >"$out/$name" 2>"$out/$name.err" || echo "== $name failed with $?" >&2
    [[ -s $out/$name.err ]] || rm -f "$out/$name.err"
}

step facts.yaml "$py" -m gfd facts --format yaml
step facts.json "$py" -m gfd facts --format json
step labels.txt "$py" -m gfd labels --no-timestamp
step topo.txt "$py" -m gfd topo
step probe.json "$py" scripts/nvml_health_probe.py
step nvidia-smi-q.txt nvidia-smi -q
step nvidia-smi-memory.txt nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT
step nvidia-smi-topo.txt nvidia-smi topo -m
step xid-watcher.json "$py" -c '
import json, time
from gfd.nvml.xid_events import XidWatcher
watcher = XidWatcher()
start = time.perf_counter(); watcher.start(); started = time.perf_counter() - start
watched = [gpu.index for gpu in watcher.watched]
unwatched = [[gone.gpu.index, gone.error] for gone in watcher.unwatched]
time.sleep(1.5)
events = watcher.drain()
start = time.perf_counter(); watcher.close(); closed = time.perf_counter() - start
print(json.dumps({"watched": watched, "unwatched": unwatched,
    "wait_error": watcher.wait_error, "events": len(events),
    "start_ms": round(started * 1e3, 1), "close_ms": round(closed * 1e3, 1)}, indent=2))'

# The agent as a DaemonSet runs it (feature file and metrics, no API server), all health
# checks that need no Node, three cycles, then SIGTERM: how long it takes to stop.
agent() {
    mkdir -p "$out/features.d"
    "$py" -m gfd --oneshot=false --sleep-interval 2s --no-timestamp \
        --output-file "$out/features.d/gfd" --health-checks gpu-lost,nvlink,xid,memory \
        --health-label --metrics-address 127.0.0.1:9464 --log-level info &
    local pid=$!
    sleep 7
    "$py" -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9464/metrics").read().decode())' \
        >"$out/agent-metrics.txt" 2>&1
    local start=$(date +%s%N)
    kill -TERM $pid
    wait $pid
    local rc=$?
    echo "exit $rc after SIGTERM in $(( ($(date +%s%N) - start) / 1000000 )) ms"
}
step agent.log agent

library=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["library"][0])' "$out/probe.json" 2>/dev/null)
if [[ -n $library ]]; then
    step library-exports.txt sh -c "nm -D --defined-only '$library' | awk '{print \$3}' | sort -u"
    step library-version.txt sh -c "readlink -f '$library'"
fi
ls -la "$out" >&2
