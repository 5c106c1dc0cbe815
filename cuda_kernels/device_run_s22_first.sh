#!/usr/bin/env bash
# Session 22's first call (NOTES.md "Current state", session 21): four switches built in session 21 without a GPU,
# tested and timed - SE version 3 with its weights copied before the wait (CUDA_KERNELS_SE_V3_PRE=1), project_wg
# with each tile's D prefetched into L2 as one contiguous request (CUDA_KERNELS_PROJ_WG_OPT=5), project_wg wherever
# project_v9s does not run (CUDA_KERNELS_PROJ_WG=unstaged: B0's 4.0), project_wg on 128-row tiles
# (CUDA_KERNELS_PROJ_WG_M128=1) - then Nsight Compute of the projections at 4.0 / 4.1 / 5.0 / 5.1 under each (L2
# flushed), 5.1's per-instruction stalls, and test_pdl under session 21's defaults with the time left. From the repository root (~9 minutes on an H200):
#   timeout 580 bash cuda_kernels/device_run_s22_first.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s22.tgz. Last line S22_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, proj_ncu
mbconv_begin S22 570
mkdir -p "$out/s22"
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v3_pre.py \
  tests/test_mbconv_proj_wg.py -k "pre or bits or options or own_activations or modes or default or m128" || ok=0
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_SE_V3_PRE=1 CUDA_KERNELS_PROJ_WG_OPT=5 \
  CUDA_KERNELS_PROJ_WG=unstaged CUDA_KERNELS_PROJ_WG_M128=1 \
  "CUDA_KERNELS_SE_V3_PRE=1 CUDA_KERNELS_PROJ_WG_OPT=5 CUDA_KERNELS_PROJ_WG=unstaged" -o "$out/s22/switches.json" || ok=0
blocks=(features.4.0 features.4.1 features.5.0 features.5.1)
for v in "CUDA_KERNELS_PROJ_WG_OPT=1" "CUDA_KERNELS_PROJ_WG_OPT=5" "CUDA_KERNELS_PROJ_WG=unstaged" \
         "CUDA_KERNELS_PROJ_WG_M128=1"; do
  proj_ncu "$out/s22" "$v" "${blocks[@]}"
done
step ncu_src 90 ncu --clock-control none --cache-control none --set full --import-source no -k regex:project_wg -c 2 \
  -f -o "$out/s22/wg51" python3 -m cuda_kernels.mbconv_profile features.5.1 || ok=0
ncu --import "$out/s22/wg51.ncu-rep" --page raw --csv > "$out/s22/raw_wg51.csv" 2>> "$log"
timeout 60 ncu --import "$out/s22/wg51.ncu-rep" --page source --csv --print-source sass --launch-skip 1 \
  --launch-count 1 > "$out/s22/source_wg51.csv" 2>> "$log"
python3 -m cuda_kernels.sass_mix wg5.1 "$out/s22/source_wg51.csv" --lines 8 2>> "$log" | tee -a "$log"
rm -f "$out"/s22/*.ncu-rep
step pdl 300 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_pdl.py || ok=0
tar czf "$out/s22.tgz" -C "$out" s22 && rm -rf "$out/s22"
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -20
echo "S22_OK=$ok"
