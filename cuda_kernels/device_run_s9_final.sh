#!/usr/bin/env bash
# Session 9's last device call, on an nvidia-h200-x2, from the repository root (~9.5 minutes):
#   bash cuda_kernels/device_run_s9_final.sh OUTDIR
# GPU 0 (`--gpu0 OUTDIR SECONDS`): the wgmma ConvFirst kernels after desc_advance (NOTES.md "Session 9"):
#   1. bench_c512 at the network's widths, variants 3-6 and 8 where each width has them (validated against float64
#      before timing). Predicted: C=64 a6 56x56 ~150 us, C=128 a6 28x28 ~122, C=512 a6 7x7 ~100 (this session's table,
#      before the change: 162.3 / 133.3 / 108.0; C = 256 variant 8 83.6);
#   2. bench_s2_wgmma at 128 -> 256 and 256 -> 512 (table: 120.3 / 84.5);
#   3. ConvFirstNet-H200 end to end, fused and torch.compile alternated, variant 3 at C = 256 as the third run
#      (convfirstnet_e2e_spread.sh with TRY=256:3); predicted fused ~2.77 ms (2.866 before);
#   4. ConvFirstNet-S, -M, then -L (CUDA_KERNELS_C768=1): fused (rest compiled) and torch.compile, CUDA graphs, while
#      time is left.
# GPU 1: every GPU test (device_run_all_tests.sh). Files: OUTDIR/pair.tar.gz (cuda_kernels/device_pair.sh).
set -uo pipefail
if [ "${1:-}" = "--gpu0" ]; then
  out=${2:?output folder}; limit=${3:?seconds}; start=$(date +%s)
  left() { echo $((limit - ($(date +%s) - start))); }
  mkdir -p "$out"; log="$out/log.txt"
  export PYTHONUNBUFFERED=1 PYTHONPATH=.
  echo "== bench_c512 $(date +%T)" | tee -a "$log"
  timeout 90 python3 -m cuda_kernels.bench_c512 --modes '' --no-mma-sync --variants 3,4,5,6,8 --case c64:6:56 \
    --case c128:6:28 --case c256:6:14 --case c512:6:7 --warmup 5 --repeats 20 --out "$out/c512_bench.json" >> "$log" 2>&1
  echo "   exit $?" | tee -a "$log"
  echo "== bench_s2_wgmma $(date +%T)" | tee -a "$log"
  timeout 60 python3 -m cuda_kernels.bench_s2_wgmma --modes '' --case 128:6:28 --case 256:6:14 --warmup 5 --repeats 20 \
    --out "$out/s2w_bench.json" >> "$log" 2>&1
  echo "   exit $?" | tee -a "$log"
  TRY=256:3 timeout $(( $(left) - 10 )) bash examples/measurements/convfirstnet_e2e_spread.sh "$out/e2e" > /dev/null 2>&1
  for model in convfirstnet_s convfirstnet_m convfirstnet_l; do
    t=$(left); [ "$t" -lt 100 ] && break
    c768=0; [ $model = convfirstnet_l ] && c768=1
    CUDA_KERNELS_C768=$c768 CONFIGS="cuda_kernels_compiled_graphs inductor_freezing_graphs" timeout $((t - 10)) \
      bash examples/measurements/convfirstnet_e2e.sh "$out/e2e_$model" $model > /dev/null 2>&1
  done
  grep -h "median" "$out"/e2e*/log.txt | tee -a "$log"
  exit 0
fi
out=${1:?output folder}
LIMIT_S=${LIMIT_S:-585} bash cuda_kernels/device_pair.sh "$out" \
  'bash cuda_kernels/device_run_s9_final.sh --gpu0 $OUT $((LEFT - 5))' \
  'LIMIT_S=$((LEFT - 8)) bash cuda_kernels/device_run_all_tests.sh $OUT/tests'
