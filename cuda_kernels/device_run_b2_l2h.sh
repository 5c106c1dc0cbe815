#!/usr/bin/env bash
# EfficientNet-B2 end to end with and without D's L2 eviction priorities (the build with CUDA_KERNELS_BUILD_D_L2_HINTS=1
# against the default build, without them since session 37), in one device call: both extensions built, then b0_switches
# --model efficientnet_b2 "as is" under each (fused_model's check before timing), runs a and b interleaved. From the
# repository root (~5 minutes):
#   timeout 590 bash cuda_kernels/device_run_b2_l2h.sh OUTDIR
# Files: OUTDIR/log.txt, b2_{1,0}_{a,b}.json. Last line B2L2H_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, build_mbconv
mbconv_begin B2L2H "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
build_mbconv build_hints B2L2H CUDA_KERNELS_BUILD_D_L2_HINTS=1
for run in a b; do
  for v in 1 0; do
    step "b2_${v}_$run" 120 env CUDA_KERNELS_BUILD_D_L2_HINTS=$v python3 -m cuda_kernels.b0_switches \
      --model efficientnet_b2 -o "$out/b2_${v}_$run.json"
  done
done
grep -E "^== |^SWITCHES |Error" "$log" | cut -c1-240 | tail -20
echo "B2L2H_OK=$ok"
