#!/usr/bin/env bash
# project_v9s reading D evict_first from L2 (CUDA_KERNELS_PROJ_V9_EF=1, project_v9se_kernel: the read half of the
# D-hints build, chosen at launch): B0's stage 2-3 blocks alone with and without it (fused and eager, runs a / b
# interleaved), B0 and B2 end to end (b0_switches: the check before timing, CUDA graphs, interleaved), then its GPU
# tests (float64, bit for bit project_v9s). From the repository root (~6 minutes):
#   timeout 590 bash cuda_kernels/device_run_proj_ef.sh OUTDIR
# Files: OUTDIR/log.txt (the tests' output too), blocks_{0,1}_{a,b}.json, b0.json, b2.json. Last line PROJEF_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin PROJEF "${BUDGET_S:-500}"
STEP_CLEARS_OK=1
for run in a b; do
  for v in 0 1; do
    step "blocks_${v}_$run" 60 env CUDA_KERNELS_PROJ_V9_EF=$v python3 -m cuda_kernels.mbconv_bench --budget-s 0 \
      --repeats 20 --version 11 --block features.2.0 --block features.2.1 --block features.3.0 --block features.3.1 \
      --out "$out/blocks_${v}_$run.json"
  done
done
step b0 80 python3 -m cuda_kernels.b0_switches --model efficientnet_b0 --runs 3 CUDA_KERNELS_PROJ_V9_EF=1 \
  -o "$out/b0.json"
step b2 110 python3 -m cuda_kernels.b0_switches --model efficientnet_b2 --runs 3 CUDA_KERNELS_PROJ_V9_EF=1 \
  -o "$out/b2.json"
step tests 120 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_mbconv_proj_v9s.py -k evict_first
grep -E "^== .*exit|^features\.|^SWITCHES |passed|failed|Error" "$log" | awk '!seen[$0]++' | cut -c1-200 | tail -40
echo "PROJEF_OK=$ok"
