#!/usr/bin/env bash
# The stem + block 1.0 kernel's two options (NOTES.md "Session 19: the stem + block 1.0 kernel, two options": the
# stem's bias in its MMA, CUDA_KERNELS_STEM_DW_BC=1, and whole-band depthwise items, CUDA_KERNELS_STEM_DW_SEG=8) under
# Nsight Compute, the four builds (L2 flushed): time, instructions, issue. The follow-up to session 20's first call
# (which runs their GPU tests and times B0 with each). From the repository root (~2 minutes on an H200):
#   timeout 300 bash cuda_kernels/device_run_stem_dw_opts.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/stem_dw_opts.tgz. Last line SDW_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, PROJ_METRICS
mbconv_begin SDW 290
mkdir -p "$out/sdw"
for v in "0 4" "1 4" "0 8" "1 8"; do
  set -- $v
  step "ncu_bc$1_seg$2" 60 env CUDA_KERNELS_STEM_DW_BC=$1 CUDA_KERNELS_STEM_DW_SEG=$2 ncu --clock-control none \
    --cache-control all --print-units base -k regex:stem_dw --metrics "$PROJ_METRICS" --csv --page raw \
    --log-file "$out/sdw/ncu_bc$1_seg$2.csv" python3 -m cuda_kernels.effnet_stem_profile --unit || ok=0
  python3 -m cuda_kernels.ncu_lines "SDW bc$1 seg$2" "$out/sdw/ncu_bc$1_seg$2.csv" stem_dw unit 2>> "$log" | tee -a "$log"
done
tar czf "$out/stem_dw_opts.tgz" -C "$out" sdw && rm -rf "$out/sdw"
echo "SDW_OK=$ok"
