#!/usr/bin/env bash
# Nsight Compute's full set with per-instruction stall sampling of the SE kernel at B0's 4.1 (hidden 480) and 6.1
# (1152), under SE version 6 (CUDA_KERNELS_SE_V6=1) and version 5 (=0), L2 not flushed (as in a real run; each block
# runs twice, both captured). From the repository root (~3 minutes on an H200, the extension built):
#   timeout 400 bash cuda_kernels/device_run_ncu_se.sh OUTDIR
# Files: OUTDIR/ncu_se.tgz (raw_vV.csv: every metric; source_vV_K.csv: SASS with stall samples, K = 1 for 4.1's second
# launch, 3 for 6.1's) and OUTDIR/log.txt. Summaries: python -m cuda_kernels.sass_mix, ncu_lines.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin NCUSE 390
mkdir -p "$out/se"
for v in 6 5; do
  step "ncu_v$v" 100 env CUDA_KERNELS_SE_V6=$((v == 6)) ncu --clock-control none --cache-control none --set full \
    --import-source no -k regex:se_v -c 4 -f -o "$out/se/v$v" python3 -m cuda_kernels.mbconv_profile features.4.1 \
    features.6.1 || ok=0
  ncu --import "$out/se/v$v.ncu-rep" --page raw --csv > "$out/se/raw_v$v.csv" 2>> "$log"
  for k in 1 3; do
    timeout 60 ncu --import "$out/se/v$v.ncu-rep" --page source --csv --print-source sass --launch-skip "$k" \
      --launch-count 1 > "$out/se/source_v${v}_$k.csv" 2>> "$log"
  done
  rm -f "$out/se/v$v.ncu-rep"
done
tar czf "$out/ncu_se.tgz" -C "$out" se && rm -rf "$out/se"
echo "NCUSE_OK=$ok"
