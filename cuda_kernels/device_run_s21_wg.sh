#!/usr/bin/env bash
# Session 21's second call (NOTES.md, "Session 21: the projection's chain of chunk steps"): project_wg with the hidden
# dimension split over two warpgroups (CUDA_KERNELS_PROJ_WG_SPLIT=1) and project_wg at B0's 4.1 / 4.2 instead of
# project_v9's ring (CUDA_KERNELS_PROJ_WG=ring) tested -> Nsight Compute of the projections each way (L2 flushed) ->
# B0 under the switches in one process (b0_switches.py); also the fused head's GPU tests under its new default. From
# the repository root (~5 minutes on an H200, every extension rebuilt):
#   timeout 560 bash cuda_kernels/device_run_s21_wg.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/wg.tgz. Last line WG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, PROJ_METRICS
mbconv_begin WG 550
mkdir -p "$out/wg"
step tests 200 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py \
  -k "split or ring" || ok=0
step head_tests 90 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_effnet_head.py || ok=0
for v in "CUDA_KERNELS_PROJ_WG=late" "CUDA_KERNELS_PROJ_WG=all" "CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_PROJ_WG_SPLIT=1"; do
  tag=$(echo "$v" | tr ' =' '_-')
  step "ncu_$tag" 60 env $v ncu --clock-control none --cache-control all --print-units base -k regex:project \
    --metrics "$PROJ_METRICS" --csv --page raw --log-file "$out/wg/proj_$tag.csv" python3 -m cuda_kernels.mbconv_profile \
    features.4.1 features.5.1 features.6.1 features.7.0 || ok=0
  python3 -m cuda_kernels.ncu_lines "PROJ $tag" "$out/wg/proj_$tag.csv" project features.4.1 features.5.1 \
    features.6.1 features.7.0 2>> "$log" | tee -a "$log"
done
step switches 100 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_WG=ring CUDA_KERNELS_PROJ_WG_SPLIT=1 \
  "CUDA_KERNELS_PROJ_WG=ring CUDA_KERNELS_PROJ_WG_SPLIT=1" -o "$out/wg/switches.json" || ok=0
tar czf "$out/wg.tgz" -C "$out" wg && rm -rf "$out/wg"
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -30
echo "WG_OK=$ok"
