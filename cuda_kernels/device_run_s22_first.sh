#!/usr/bin/env bash
# Session 22's first call (NOTES.md "Current state", session 21): SE version 3 with its weights copied before the wait
# (CUDA_KERNELS_SE_V3_PRE=1) tested and timed on B0 in one process; Nsight Compute's per-instruction stalls of
# project_wg at 5.1 with one warpgroup and with two (the split, which bought nothing there in s21 call 2); test_pdl
# under session 21's defaults. From the repository root (~6 minutes on an H200, every extension rebuilt):
#   timeout 560 bash cuda_kernels/device_run_s22_first.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s22.tgz. Last line S22_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin S22 550
mkdir -p "$out/s22"
step tests 100 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v3_pre.py || ok=0
step switches 90 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_SE_V3_PRE=1 -o "$out/s22/switches.json" || ok=0
for split in 0 1; do
  step "ncu_split$split" 90 env CUDA_KERNELS_PROJ_WG_SPLIT=$split ncu --clock-control none --cache-control none \
    --set full --import-source no -k regex:project_wg -c 2 -f -o "$out/s22/wg$split" python3 -m cuda_kernels.mbconv_profile \
    features.5.1 || ok=0
  ncu --import "$out/s22/wg$split.ncu-rep" --page raw --csv > "$out/s22/raw_wg$split.csv" 2>> "$log"
  timeout 60 ncu --import "$out/s22/wg$split.ncu-rep" --page source --csv --print-source sass --launch-skip 1 \
    --launch-count 1 > "$out/s22/source_wg$split.csv" 2>> "$log"
  python3 -m cuda_kernels.sass_mix "wg5.1_split$split" "$out/s22/source_wg$split.csv" --lines 8 2>> "$log" | tee -a "$log"
done
rm -f "$out"/s22/*.ncu-rep
step pdl 200 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_pdl.py || ok=0
tar czf "$out/s22.tgz" -C "$out" s22 && rm -rf "$out/s22"
grep -E "^== |^SWITCHES |passed|failed" "$log" | tail -16
echo "S22_OK=$ok"
