#!/usr/bin/env bash
# Session 23's second call: the projections' GPU tests after removing the variants call 1 measured (V resident, its SE
# fold, option 25, project_v9sh), test_pdl, and kernel 1 where the per-block 3x is furthest (3.1: 28 x 28, k = 5;
# 4.1: 14 x 14, k = 3, X by TMA and the wgmma expand; 5.1: 14 x 14, k = 5) under Nsight Compute's full set with
# per-instruction stall samples, L2 not flushed (2.1's is in s21/call1, the same kernel since). From the repository
# root (~6 minutes on an H200):
#   timeout 450 bash cuda_kernels/device_run_s23_second.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/k1.tgz (raw_k1.csv; source_k1_3.1.csv, source_k1_4.1.csv, source_k1_5.1.csv).
# Last line S23B_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin S23B 440
STEP_CLEARS_OK=1
mkdir -p "$out/k1"
step tests 200 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py \
  tests/test_mbconv_proj_v9s.py tests/test_pdl.py
step ncu_k1 150 ncu --clock-control none --cache-control none --set full --import-source no -k regex:expand_dw \
  -c 6 -f -o "$out/k1/k1" python3 -m cuda_kernels.mbconv_profile features.3.1 features.4.1 features.5.1
ncu --import "$out/k1/k1.ncu-rep" --page raw --csv > "$out/k1/raw_k1.csv" 2>> "$log"
source_of() {  # N NAME: launch N's SASS with stall samples, then its sass_mix summary
  timeout 60 ncu --import "$out/k1/k1.ncu-rep" --page source --csv --print-source sass --launch-skip "$1" \
    --launch-count 1 > "$out/k1/source_$2.csv" 2>> "$log"
  python3 -m cuda_kernels.sass_mix "$2" "$out/k1/source_$2.csv" --lines 12 --regions 0x400 2>> "$log" | tee -a "$log"
}
source_of 1 k1_3.1
source_of 3 k1_4.1
source_of 5 k1_5.1
rm -f "$out"/k1/*.ncu-rep
tar czf "$out/k1.tgz" -C "$out" k1 && rm -rf "$out/k1"
grep -E "^== |passed|failed" "$log" | tail -12
echo "S23B_OK=$ok"
