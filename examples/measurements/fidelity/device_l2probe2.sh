#!/usr/bin/env bash
# The data the l2 byte model's as-run misses need (issue 14; README, "What the as-run misses
# are"). On the lent H200, from the repository root:
#   bash examples/measurements/fidelity/device_l2probe2.sh OUTDIR
# About 2 minutes (at most 240 s: the steps' time limits). Writes OUTDIR/l2probe2.tar.gz (every file below, < 5 MB) and OUTDIR/log.txt:
#   l2probe2_h200_none.json (+ .ncu.csv)  the second L2 probe (l2probe2.py's docstring), as run,
#                                         two repeats: residency of a written tensor at 16-64 MiB
#                                         in 2 MiB steps (rw), writer -> in-place op (ip),
#                                         dirty write-back against a clean read / a new write
#                                         stream (wbr, wbw), four cuBLAS products (mm)
#   l2probe2_h200_all.json (+ .ncu.csv)   the same flushed before each kernel, one repeat: what a
#                                         write-only kernel and a GEMM leave dirty on their own
#   alloc_{model}.json                    one eager forward (batch 128, fp16, channels-last) of
#                                         ResNet-50, EfficientNet-B0, MobileNetV2, ConvNeXt-T:
#                                         every aten op with the addresses of its tensors, the
#                                         caching allocator's events and segments
set -uo pipefail
here=examples/measurements/fidelity
metrics=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
if [ "${1:-}" = --probe ]; then  # --probe WORK MODE REPEATS: one ncu run of the probe
  work=$2; rep="$work/p2_$3"
  P2_REPEATS=$4 ncu --nvtx --profile-from-start off --clock-control none --cache-control "$3" \
    --metrics $metrics -f -o "$rep" python3 $here/l2probe2.py probe > /dev/null &&
  ncu --import "$rep.ncu-rep" --csv --page raw --print-nvtx-rename kernel --metrics $metrics \
    > "$work/l2probe2_h200_$3.ncu.csv" &&
  python3 $here/l2probe2.py parse "$work/l2probe2_h200_$3.ncu.csv" "$work/l2probe2_h200_$3.json" "$3"
  rc=$?; rm -f "$rep.ncu-rep"; exit $rc
fi
out=${1:?output folder}
work="$out/l2probe2"; mkdir -p "$work"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
pack() { tar -czf "$out/l2probe2.tar.gz" -C "$out" l2probe2; }
step() {  # seconds, command...
  local limit=$1; shift
  echo "== $* $(date +%T)" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1; echo "== exit $? $(date +%T)" | tee -a "$log"
  pack
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
python3 -c "import torch; print('torch', torch.__version__)" >> "$log" 2>&1
for m in resnet50 efficientnet_b0 mobilenet_v2 convnext_tiny; do  # a fresh process each, as ncu's worker
  step 30 python3 $here/l2probe2.py trace "$work" $m
done
step 75 bash $here/device_l2probe2.sh --probe "$work" none 2
step 45 bash $here/device_l2probe2.sh --probe "$work" all 1
ls -la "$work" >> "$log"
