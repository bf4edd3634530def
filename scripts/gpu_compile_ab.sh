#!/usr/bin/env bash
# First-step compile time on a GPU machine, compiles in threads against worker processes, measured in one call so
# that both see the machine in the same state (the seventeenth session's first comparison did not: RESULTS.md).
# Order: a warm-up run (vendor libraries' own first-run work), then threads, processes, threads, processes, each
# with an empty Triton cache and no tuning records; the first process run also writes the tuning log that
# benchmarks/tuning_census.py reads. Tables go to $OUT (or ./gpu-logs)/compile_ab.txt.
#
#   bash scripts/gpu_compile_ab.sh                      # ResNet-50, float32
#   bash scripts/gpu_compile_ab.sh bert "--precompile"  # another model, extra compile_breakdown.py arguments
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-resnet50}
extra=${2:-}
logs=${OUT:-gpu-logs}
mkdir -p "$logs"
out="$logs/compile_ab.txt"
run() {  # label, then compile_breakdown.py arguments
    local label=$1
    shift
    echo "== $label" | tee -a "$out"
    local start=$SECONDS cache rc
    cache=$(mktemp -d)
    # shellcheck disable=SC2086
    TRITON_CACHE_DIR=$cache python3 benchmarks/compile_breakdown.py --model "$model" --records off $extra "$@" \
        >> "$out" 2>> "$logs/compile_ab.err"
    rc=$?
    rm -rf "$cache"
    echo "== $label: exit $rc, $((SECONDS - start)) s" | tee -a "$out"
}
run "warm-up (threads)"
run "threads"
OPGRAPH_TUNING_LOG="$logs/tuning-$model.jsonl" run "processes" --compile-processes
run "threads again"
run "processes again" --compile-processes
if [ -s "$logs/tuning-$model.jsonl" ]; then
    python3 benchmarks/tuning_census.py "$logs/tuning-$model.jsonl" --top 25 > "$logs/tuning_census.txt" 2>&1
fi
