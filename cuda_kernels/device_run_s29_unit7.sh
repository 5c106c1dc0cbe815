#!/usr/bin/env bash
# Session 29's first call (~6 minutes; NOTES.md "Current state", next 0, prediction there): kernel 1's depthwise in
# units of 7 x 1 at B0's 14 x 14 and 7 x 7 wgmma blocks (CUDA_KERNELS_K1_UNIT7=1): its GPU tests, B0 with and
# without it (b0_switches), kernel 1 at 4.1, 5.0, 5.1 and 6.1 under Nsight Compute off and on. From the repository
# root:
#   timeout 400 bash cuda_kernels/device_run_s29_unit7.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/unit7.tgz. Last line UNIT7_OK=1|0.
set -uo pipefail
out=${1:?output folder}
SWITCH_BUDGET=380 bash cuda_kernels/device_run_switch.sh "$out" UNIT7 CUDA_KERNELS_K1_UNIT7=1 \
  tests/test_mbconv_k1_unit7.py features.4.1 features.5.0 features.5.1 features.6.1
