#!/usr/bin/env bash
# Session 29's third call (~7 minutes; NOTES.md "Current state", the prediction there): kernel 1 at B0's 3.1 in
# depthwise units of 7 x 2 (CUDA_KERNELS_K1_ROW_UNITS_UR=1, expand_dw_v8_kernel_dhurfwsw): its GPU tests, B0 with and
# without it (b0_switches), kernel 1 at 3.1 (and 2.1, unchanged) under Nsight Compute off and on, then 3.1 with it
# against eager and both torch.compile modes in the same call (mbconv_bench, CUDA graphs). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s29_ur_units.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/rows_ur.tgz, OUTDIR/blocks/ (log.txt, blocks.json). Last lines ROWS_UR_OK=1|0,
# BLOCKS_OK=1|0.
set -uo pipefail
out=${1:?output folder}
SWITCH_BUDGET=300 bash cuda_kernels/device_run_switch.sh "$out" ROWS_UR CUDA_KERNELS_K1_ROW_UNITS_UR=1 \
  tests/test_mbconv_k1_row_units.py features.3.1 features.2.1
# the per-block run only where B0 gained (the SWITCHES line's "-N.N us against as is")
grep -qE "^SWITCHES CUDA_KERNELS_K1_ROW_UNITS_UR=1: .* -[0-9.]+ us against" "$out/log.txt" || { echo "BLOCKS skipped"; exit 0; }
source cuda_kernels/device_lib.sh  # step, mbconv_begin
out="$out/blocks"
mbconv_begin BLOCKS 170
step blocks $(( $(left) - 5 )) env CUDA_KERNELS_K1_ROW_UNITS_UR=1 python3 -m cuda_kernels.mbconv_bench \
  --budget-s $(( $(left) - 45 )) --compile-mode default --compile-mode max-autotune-no-cudagraphs --repeats 20 \
  --block features.3.1 --version 11 --out "$out/blocks.json" || ok=0
grep -E "^features" "$log" | tail -2
echo "BLOCKS_OK=$ok"
