#!/usr/bin/env bash
# Session 22's second call: the defaults made in session 22 (SE version 3's weights before the wait, project_wg
# wherever project_v9s does not fit) through their GPU tests, and project_wg's option 9 (3 stages: three CTAs an SM
# at 5.x, its 392 row tiles in one wave) tested, timed on B0 against the defaults and against session 21's defaults,
# and profiled at 4.0-5.2 (Nsight Compute, L2 flushed). From the repository root (~5 minutes on an H200):
#   timeout 400 bash cuda_kernels/device_run_s22_second.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s22b.tgz. Last line S22B_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, proj_ncu
mbconv_begin S22B 390
mkdir -p "$out/s22b"
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v3_pre.py \
  tests/test_mbconv_proj_wg.py tests/test_mbconv_proj_v9b.py \
  -k "default or unstaged or options or modes or the_default or cp_async or keeps_the_bits or efficientnet" || ok=0
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_WG_OPT=9 \
  "CUDA_KERNELS_SE_V3_PRE=0 CUDA_KERNELS_PROJ_WG=ring" -o "$out/s22b/switches.json" || ok=0
blocks=(features.4.0 features.4.1 features.5.0 features.5.1)
for v in "CUDA_KERNELS_PROJ_WG_OPT=1" "CUDA_KERNELS_PROJ_WG_OPT=9"; do
  proj_ncu "$out/s22b" "$v" "${blocks[@]}"
done
tar czf "$out/s22b.tgz" -C "$out" s22b && rm -rf "$out/s22b"
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -24
echo "S22B_OK=$ok"
