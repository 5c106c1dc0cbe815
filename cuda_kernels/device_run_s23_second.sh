#!/usr/bin/env bash
# Session 23's second call: D's epilogue in packed fp16 (CUDA_KERNELS_K1_DH2=1, NOTES.md "Session 23") tested against
# float64 at every B0 / B2 shape and timed on B0 (b0_switches) and per kernel 1 (Nsight Compute, L2 flushed, at 2.1 /
# 3.1 / 4.1 / 5.1 off and on); the projections' GPU tests after removing the variants call 1 measured and test_pdl;
# then kernel 1 at 3.1 / 4.1 / 5.1 under the full set with per-instruction stall samples, L2 not flushed (2.1's is in
# s21/call1, the same kernel since). From the repository root (~8 minutes on an H200):
#   timeout 560 bash cuda_kernels/device_run_s23_second.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s23b.tgz (switches.json, k1_*.csv; raw_k1.csv, source_k1_3.1.csv, source_k1_4.1.csv,
# source_k1_5.1.csv). Last line S23B_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin S23B 550
STEP_CLEARS_OK=1
d="$out/s23b"
mkdir -p "$d"
step dh2_tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_dh2.py
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_DH2=1 -o "$d/switches.json"
blocks=(features.2.1 features.3.1 features.4.1 features.5.1)
for v in "CUDA_KERNELS_K1_DH2=0" "CUDA_KERNELS_K1_DH2=1"; do
  kernel_ncu "$d" K1 expand_dw "$v" "${blocks[@]}"
done
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py \
  tests/test_mbconv_proj_v9s.py tests/test_pdl.py
step ncu_full 100 ncu --clock-control none --cache-control none --set full --import-source no -k regex:expand_dw \
  -c 6 -f -o "$d/k1" python3 -m cuda_kernels.mbconv_profile features.3.1 features.4.1 features.5.1
if [ -f "$d/k1.ncu-rep" ]; then
  ncu --import "$d/k1.ncu-rep" --page raw --csv > "$d/raw_k1.csv" 2>> "$log"
  source_of() {  # N NAME: launch N's SASS with stall samples, then its sass_mix summary
    timeout 40 ncu --import "$d/k1.ncu-rep" --page source --csv --print-source sass --launch-skip "$1" \
      --launch-count 1 > "$d/source_$2.csv" 2>> "$log"
    python3 -m cuda_kernels.sass_mix "$2" "$d/source_$2.csv" --lines 12 --regions 0x400 2>> "$log" | tee -a "$log"
  }
  source_of 1 k1_3.1
  source_of 3 k1_4.1
  source_of 5 k1_5.1
  rm -f "$d"/k1.ncu-rep
fi
tar czf "$out/s23b.tgz" -C "$out" s23b && rm -rf "$d"
grep -E "^== |^SWITCHES |^K1 |passed|failed" "$log" | tail -30
echo "S23B_OK=$ok"
