#!/usr/bin/env bash
# Session 31's first call (~5 minutes; NOTES.md "Current state", its prediction there): the expand's biases loaded at
# the item's start in the static wgmma row-unit kernels (CUDA_KERNELS_K1_BIAS_EARLY=1, expand_dw_v8_kernel_txdhswb):
# its GPU tests (float64, bit for bit the default, B0 end to end), B0 with and without it (b0_switches), kernel 1 at
# 4.1, 5.1 and 6.1 under Nsight Compute off and on, then B2 with and without it. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s31_bias_early.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/bias_early.tgz, OUTDIR/b2/ (log.txt, b2_switches.json). Last lines BIAS_EARLY_OK, B2_OK.
set -uo pipefail
dir=${1:?output folder}
SWITCH_BUDGET=300 bash cuda_kernels/device_run_switch.sh "$dir" BIAS_EARLY CUDA_KERNELS_K1_BIAS_EARLY=1 \
  tests/test_mbconv_k1_bias_early.py features.4.1 features.5.1 features.6.1
source cuda_kernels/device_lib.sh  # b2_switches
b2_switches "$dir" CUDA_KERNELS_K1_BIAS_EARLY=1
