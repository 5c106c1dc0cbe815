#!/usr/bin/env bash
# Session 20's last call: the new defaults (project_v9s with the scale and shortcut rows staged; the stem + 1.0
# kernel's whole-band depthwise items) tested and measured, then EfficientNet-B0 fused (and with the fused head,
# CUDA_KERNELS_EFFNET_HEAD=1) against torch.compile default and max-autotune-no-cudagraphs in one run. From the
# repository root, with the autotuning timings unpacked (tar xzf examples/measurements/mbconv/s18/call6/
# autotune_timings.tgz -C .) and carry: [".inductor_cache"] (~9 minutes, one H200):
#   timeout 590 bash cuda_kernels/device_run_s20_final.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/final.tgz (Nsight Compute lines, switches.json), OUTDIR/auto/ (device_run_b0_autotune.sh's
# files). Last line FINAL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, PROJ_METRICS
mbconv_begin FINAL 575
mkdir -p "$out/final"
blocks=(features.1.0 features.2.0 features.2.1 features.3.0 features.3.1)
step tests 170 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py \
  tests/test_stem_mbconv.py tests/test_pdl.py || ok=0
step ncu 60 ncu --clock-control none --cache-control all --print-units base -k regex:project_v9 \
  --metrics "$PROJ_METRICS" --csv --page raw --log-file "$out/final/proj.csv" python3 -m cuda_kernels.mbconv_profile \
  "${blocks[@]}" || ok=0
python3 -m cuda_kernels.ncu_lines "PROJ v9s+x" "$out/final/proj.csv" project_v9 "${blocks[@]}" 2>> "$log" | tee -a "$log"
step switches 100 python3 -m cuda_kernels.b0_switches "CUDA_KERNELS_PROJ_V9_SS=0 CUDA_KERNELS_STEM_DW_SEG=4" \
  -o "$out/final/switches.json" || ok=0
tar czf "$out/final.tgz" -C "$out" final && rm -rf "$out/final"
AUTO_BUDGET=$(( $(left) - 10 )) FUSED_VARIANTS=CUDA_KERNELS_EFFNET_HEAD=1 bash cuda_kernels/device_run_b0_autotune.sh \
  "$out/auto" | tail -6
grep -E "^SWITCHES |^PROJ |passed|failed" "$log" | tail -12
echo "FINAL_OK=$ok"
