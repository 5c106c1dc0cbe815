#!/usr/bin/env bash
# EfficientNet-B0's stride-1 blocks of stages 2-4 with and without D's L2 eviction priorities (the extension built with
# CUDA_KERNELS_BUILD_D_L2_HINTS=1 against the default build), fused only (no torch.compile baseline: --budget-s 0; the
# eager block still runs), runs a and b interleaved. Whether a block that the whole network cannot take the hints for
# (B2 lost 85 us to them, s37 call 2) would gain them alone, as a compile-time choice of its static kernel-1 entry.
# Also the default build with CUDA_KERNELS_PROJ_WG=all (project_wg at 2.1 and 3.1 instead of project_v9s: not timed
# since project_v9s became their default in session 20), and with its producer warp (option 73) at 3.1. From the repository root (~6 minutes):
#   timeout 590 bash cuda_kernels/device_run_l2h_blocks.sh OUTDIR
# Files: OUTDIR/log.txt, blocks_{1,0}_{a,b}.json, blocks_wg{all,73}_{a,b}.json. Last line L2HB_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, build_mbconv
mbconv_begin L2HB "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
build_mbconv build_hints L2HB CUDA_KERNELS_BUILD_D_L2_HINTS=1
for run in a b; do
  for v in 1 0; do
    step "blocks_${v}_$run" 120 env CUDA_KERNELS_BUILD_D_L2_HINTS=$v python3 -m cuda_kernels.mbconv_bench \
      --budget-s 0 --repeats 20 --version 11 --block features.2.1 --block features.3.1 --block features.4.1 \
      --block features.4.2 --out "$out/blocks_${v}_$run.json"
  done
  step "blocks_wgall_$run" 90 env CUDA_KERNELS_PROJ_WG=all python3 -m cuda_kernels.mbconv_bench --budget-s 0 \
    --repeats 20 --version 11 --block features.2.1 --block features.3.1 --out "$out/blocks_wgall_$run.json"
  step "blocks_wg73_$run" 60 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_PROJ_WG_OPT=73 python3 -m cuda_kernels.mbconv_bench \
    --budget-s 0 --repeats 20 --version 11 --block features.3.1 --out "$out/blocks_wg73_$run.json"
done
grep -E "^== |features\.|Error" "$log" | cut -c1-240 | tail -30
echo "L2HB_OK=$ok"
