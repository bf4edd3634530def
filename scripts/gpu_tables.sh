#!/usr/bin/env bash
# The `opgraph bench` tables on a GPU machine, one process per model, so that a model's failure or the call's time
# limit loses only its own rows. Every table is appended to one text file and the JSONs go into one tar, rewritten
# after each model, in $OUT (or ./gpu-logs): the device machine returns at most 8 files from a call.
#
#   bash scripts/gpu_tables.sh inference "alexnet resnet18 vgg16" --iters 10 --max-seconds 2
#   bash scripts/gpu_tables.sh cpu-gpu "resnet50 bert vgg16" --iters 3
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
    echo "usage: bash scripts/gpu_tables.sh SECTION \"MODEL ...\" [opgraph bench arguments]" >&2
    exit 2
fi
section=$1
models=$2
shift 2
logs=${OUT:-gpu-logs}
mkdir -p "$logs"
json=$(mktemp -d)
status=0
for m in $models; do
    start=$SECONDS
    opgraph bench --only "$section" --models "$m" --json "$json/$section-$m.json" "$@" \
        >> "$logs/$section.txt" 2>> "$logs/$section.err"
    rc=$?
    echo "== $section $m: exit $rc, $((SECONDS - start)) s" | tee -a "$logs/$section.txt"
    status=$(( status || rc ))
    tar -cf "$logs/$section-json.tar" -C "$json" .
done
exit $status
