#!/usr/bin/env bash
# D's L2 eviction priorities: the extension built with CUDA_KERNELS_BUILD_D_L2_HINTS=1 (kernel 1 stores D evict_last,
# the staged projections read it evict_first) against the default build, runs a and b interleaved, in one device call:
#   timeout 590 bash cuda_kernels/device_run_l2h.sh OUTDIR [b2|blocks]
# b2 (the default, ~5 minutes): EfficientNet-B2 end to end (b0_switches "as is": fused_model's check before timing);
# files b2_{1,0}_{a,b}.json (s37 call 2: B2 +85 us with the hints, so they are off by default since).
# blocks (~6 minutes): B0's stride-1 blocks 2.1 / 3.1 / 4.1 / 4.2 alone (mbconv_bench --budget-s 0: fused and eager,
# no torch.compile baseline), files blocks_{1,0}_{a,b}.json; then the default build with CUDA_KERNELS_PROJ_WG=all
# (project_wg at 2.1 / 3.1 instead of project_v9s) and with its producer warp (option 73) at 3.1,
# blocks_wg{all,73}_{a,b}.json (s38 call 2, run as device_run_l2h_blocks.sh at f51f179: 2.1 -6 us with the hints,
# 3.1 / 4.1 nothing). Files also OUTDIR/log.txt; last line L2H_OK=1|0.
set -uo pipefail
out=${1:?output folder}
what=${2:-b2}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, build_mbconv
mbconv_begin L2H "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
build_mbconv build_hints L2H CUDA_KERNELS_BUILD_D_L2_HINTS=1
bench_blocks=(python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 --version 11)
for run in a b; do
  for v in 1 0; do
    if [ "$what" = blocks ]; then
      step "blocks_${v}_$run" 120 env CUDA_KERNELS_BUILD_D_L2_HINTS=$v "${bench_blocks[@]}" --block features.2.1 \
        --block features.3.1 --block features.4.1 --block features.4.2 --out "$out/blocks_${v}_$run.json"
    else
      step "b2_${v}_$run" 120 env CUDA_KERNELS_BUILD_D_L2_HINTS=$v python3 -m cuda_kernels.b0_switches \
        --model efficientnet_b2 -o "$out/b2_${v}_$run.json"
    fi
  done
  if [ "$what" = blocks ]; then
    step "blocks_wgall_$run" 90 env CUDA_KERNELS_PROJ_WG=all "${bench_blocks[@]}" --block features.2.1 \
      --block features.3.1 --out "$out/blocks_wgall_$run.json"
    step "blocks_wg73_$run" 60 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_PROJ_WG_OPT=73 "${bench_blocks[@]}" \
      --block features.3.1 --out "$out/blocks_wg73_$run.json"
  fi
done
grep -E "^== |^SWITCHES |^features\.|Error" "$log" | awk '!seen[$0]++' | cut -c1-240 | tail -30
echo "L2H_OK=$ok"
