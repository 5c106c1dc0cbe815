#!/usr/bin/env bash
# Kernel 1 with the TMA X and the wgmma expand on by default (session 17): the GPU tests of the new defaults at every
# MBConv shape, which kernel 1 each measured block now runs (Nsight Compute at 4.1, 5.0, 6.1: 5.0 must take the TMA X
# with mma.sync, the wgmma U layout does not fit it), and B0 end to end, defaults against the TMA X alone
# (CUDA_KERNELS_K1_WGMMA=0), twice. Predicted: B0 1.772 (TMA X alone, session 17 call 1) -> ~1.766 ms (the wgmma
# expand at 4.1, 4.2, 6.1-6.3, -2 to -2.3 us each; 5.0 keeps the TMA X). From the repository root (~6 minutes):
#   timeout 590 bash cuda_kernels/device_run_k1_defaults.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/k1_defaults.tgz (Nsight Compute CSV, B0's files). Last line DEF_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED
mbconv_begin DEF 575
STEP_CLEARS_OK=1
mkdir -p "$out/ncu"
step tests_k1 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tma_x.py
step tests_shapes 200 env MBCONV_TEST_VERSIONS=11 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider \
  tests/test_mbconv_kernels.py
step ncu 60 ncu --clock-control none --cache-control all --print-units base -k regex:"expand_dw" \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,smsp__inst_executed.sum --csv --page raw \
  --log-file "$out/ncu/k1_defaults.csv" python3 -m cuda_kernels.mbconv_profile features.4.1 features.5.0 features.6.1
python3 -m cuda_kernels.ncu_lines "K1 defaults" "$out/ncu/k1_defaults.csv" expand_dw features.4.1 features.5.0 \
  features.6.1 2>> "$log" | tee -a "$log"
for run in a b; do
  step "e2e_defaults_$run" 70 "${B0_FUSED[@]}" -o "$out/ncu/b0_defaults_$run.json"
  step "e2e_tma_x_$run" 70 env CUDA_KERNELS_K1_WGMMA=0 "${B0_FUSED[@]}" -o "$out/ncu/b0_tma_x_$run.json"
done
python3 -m cuda_kernels.bench_lines DEF "$out/ncu" 2>> "$log" | tee -a "$log"
tar czf "$out/k1_defaults.tgz" -C "$out" ncu && rm -rf "$out/ncu"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -14
echo "DEF_OK=$ok"
