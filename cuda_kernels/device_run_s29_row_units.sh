#!/usr/bin/env bash
# Session 29's first call (~8 minutes; NOTES.md "Current state", next 0, prediction there): kernel 1's depthwise in
# whole units of one output row at the static wgmma blocks (CUDA_KERNELS_K1_ROW_UNITS=1: 7 wide at B0's 14 x 14 and
# 7 x 7, 9 wide at B2's 9 x 9): its GPU tests, B0 with and without it (b0_switches), kernel 1 at 4.1, 5.0, 5.1 and 6.1
# under Nsight Compute off and on, then EfficientNet-B2 with and without it. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s29_row_units.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/rows.tgz, OUTDIR/b2/ (log.txt, b2_switches.json). Last lines ROWS_OK=1|0, B2_OK=1|0.
set -uo pipefail
out=${1:?output folder}
SWITCH_BUDGET=380 bash cuda_kernels/device_run_switch.sh "$out" ROWS CUDA_KERNELS_K1_ROW_UNITS=1 \
  tests/test_mbconv_k1_row_units.py features.4.1 features.5.0 features.5.1 features.6.1
source cuda_kernels/device_lib.sh  # b2_switches
b2_switches "$out" CUDA_KERNELS_K1_ROW_UNITS=1
