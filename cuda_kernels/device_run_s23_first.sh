#!/usr/bin/env bash
# Session 23's first call (NOTES.md "Current state", session 22): project_wg with V resident in shared memory
# (CUDA_KERNELS_PROJ_WG_VR=1, project_wg_vr_kernel), with the SE folded into it (CUDA_KERNELS_PROJ_WG_VR_SE=1), and
# the projections with A scaled in fp16 - project_wg's option 25 (9 with one HMUL2 a register by the scale rounded to
# fp16: 80 -> 32 instructions a warp a chunk) and project_v9sh (CUDA_KERNELS_PROJ_V9_H2=1: 20 -> 6 a unit) - tested
# against float64 and the kernels they replace, timed on B0 (b0_switches, each alone and together), profiled (Nsight
# Compute, L2 flushed) at 2.1 / 3.1 / 4.0 / 4.1 / 5.0 / 5.1.
# From the repository root (~6 minutes on an H200):
#   timeout 480 bash cuda_kernels/device_run_s23_first.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s23.tgz. Last line S23_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, proj_ncu
mbconv_begin S23 470
mkdir -p "$out/s23"
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py \
  tests/test_mbconv_proj_wg.py tests/test_ablate.py \
  -k "fp16_scale or option_25 or h2 or vr or v_resident or se_folded or efficientnet_b0_with_the_split" || ok=0
step switches 170 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_WG_VR=1 \
  "CUDA_KERNELS_PROJ_WG_VR=1 CUDA_KERNELS_PROJ_WG_VR_SE=1" CUDA_KERNELS_PROJ_WG_OPT=25 CUDA_KERNELS_PROJ_V9_H2=1 \
  "CUDA_KERNELS_PROJ_WG_OPT=25 CUDA_KERNELS_PROJ_V9_H2=1" \
  "CUDA_KERNELS_PROJ_WG_VR=1 CUDA_KERNELS_PROJ_WG_VR_SE=1 CUDA_KERNELS_PROJ_V9_H2=1" -o "$out/s23/switches.json" || ok=0
blocks=(features.2.1 features.3.1 features.4.0 features.4.1 features.5.0 features.5.1)
for v in "CUDA_KERNELS_PROJ_V9_H2=0" "CUDA_KERNELS_PROJ_WG_VR=1" "CUDA_KERNELS_PROJ_WG_OPT=25 CUDA_KERNELS_PROJ_V9_H2=1"; do
  proj_ncu "$out/s23" "$v" "${blocks[@]}"
done
tar czf "$out/s23.tgz" -C "$out" s23 && rm -rf "$out/s23"
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -24
echo "S23_OK=$ok"
