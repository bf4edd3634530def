#!/usr/bin/env bash
# Issue 4's rows on a GPU machine in one call, a part at a time:
#   fusion       the fusion table (chains, norms, tiny graphs, the ResNet-18-like step);
#   configs      the bfloat16 32k-wide rows under every launch configuration;
#   configs262k  the 262k-wide rows' generated kernels, split rows meeting at counters or as clusters;
#   long_rows    the 262k-wide rows' hand-written kernels, including the cluster meetings;
#   same_design  the generated kernel forced to the hand-written one's cluster launch, both in one measurement.
# Each part's output goes to its own file in $OUT (or ./gpu-logs) with its exit status and seconds, so a part that
# fails or runs out of the call's time loses only its own file.
#
#   bash scripts/gpu_issue4.sh                        # every part, in the order above
#   bash scripts/gpu_issue4.sh long_rows configs      # some of them, in the order given
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${OUT:-gpu-logs}
mkdir -p "$logs"
parts=${*:-fusion configs configs262k long_rows}
status=0
for part in $parts; do
    start=$SECONDS
    case $part in
        fusion) python3 benchmarks/fusion.py --only chains,norms,tiny,resnet --json "$logs/fusion.json" \
                    > "$logs/fusion.txt" 2> "$logs/fusion.err" ;;
        configs) python3 benchmarks/reduction_configs.py --ops softmax,log_softmax,layer_norm,rms_norm \
                     --dtypes bfloat16 --widths 32768 --chunks 16384 --repeats 10 --top 6 \
                     > "$logs/configs.txt" 2> "$logs/configs.err" ;;
        configs262k) python3 benchmarks/reduction_configs.py --ops softmax,layer_norm,rms_norm \
                         --dtypes float32,bfloat16 --widths 262144 --chunks 16384,32768 --repeats 10 --top 6 \
                         > "$logs/configs262k.txt" 2> "$logs/configs262k.err" ;;
        long_rows) python3 benchmarks/long_rows.py --ops softmax --modes plain,cluster,cluster-rows \
                       --splits 8,16 --warps 4,8 --per-sm 1,2 --repeats 15 --top 10 \
                       > "$logs/long_rows.txt" 2> "$logs/long_rows.err" ;;
        same_design) python3 benchmarks/long_rows.py --ops softmax,rms_norm --dtypes float32,bfloat16 --splits 16 \
                         --warps 4,8 --modes cluster-rows --generated 16x4,16x8 --repeats 15 --top 8 \
                         > "$logs/same_design.txt" 2> "$logs/same_design.err" ;;
        *) echo "unknown part: $part (of fusion, configs, configs262k, long_rows, same_design)" >&2; exit 2 ;;
    esac
    rc=$?
    echo "== $part: exit $rc, $((SECONDS - start)) s" | tee -a "$logs/$part.txt"
    status=$(( status || rc ))
done
exit $status
