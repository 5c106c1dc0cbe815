#!/usr/bin/env bash
# Session 18's last call: SE version 4 (now on by default where hidden >= 480) under Nsight Compute, then EfficientNet-B0
# fused against torch.compile default and max-autotune-no-cudagraphs in one run. From the repository root, with the
# autotuning timings unpacked (tar xzf examples/measurements/mbconv/s17/call3/autotune_timings.tgz -C .) and
# carry: [".inductor_cache"] (~5 minutes, one H200):
#   timeout 590 bash cuda_kernels/device_run_s18_final.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/se_ncu.csv (the full set of se_v4_fc1 / se_v4_fc2 at features.5.1 and 6.1, raw page),
# OUTDIR/auto/ (device_run_b0_autotune.sh's files). Last line FIN_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin FIN 560
step ncu_se 90 ncu --clock-control none --cache-control all --print-units base -k regex:se_v4 --set full --csv \
  --page raw --log-file "$out/se_ncu.csv" python3 -m cuda_kernels.mbconv_profile features.5.1 features.6.1 || ok=0
python3 -m cuda_kernels.ncu_lines SE "$out/se_ncu.csv" se_v4 features.5.1 features.6.1 2>> "$log" | tee -a "$log"
AUTO_BUDGET=$(( $(left) - 15 )) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -4
echo "FIN_OK=$ok"
