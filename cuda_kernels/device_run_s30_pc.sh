#!/usr/bin/env bash
# Session 30's first call (~6 minutes; NOTES.md "Current state", next 3, its prediction there): kernel 1 split by role
# at B0's 2.1 / 3.1 and B2's 3.1 / 3.2 (CUDA_KERNELS_K1_PC=1, expand_dw_v8_kernel_dhurfwsp, one CTA of 512 threads
# an SM, 4 producer warps expanding item i + 1 while 12 consumer warps run item i's depthwise): its GPU tests (against
# float64 and the default, B0 end to end), B0 with and without it (b0_switches), kernel 1 at 3.1 and 2.1 under Nsight
# Compute off and on, then EfficientNet-B2 with and without it. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s30_pc.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/pc.tgz, OUTDIR/b2/ (log.txt, b2_switches.json). Last lines PC_OK=1|0, B2_OK=1|0.
# (A hang - the roles' mbarriers never completing - ends at the steps' time limits: the log then names the step.)
set -uo pipefail
out=${1:?output folder}
SWITCH_BUDGET=330 bash cuda_kernels/device_run_switch.sh "$out" PC CUDA_KERNELS_K1_PC=1 \
  tests/test_mbconv_k1_pc.py features.3.1 features.2.1
source cuda_kernels/device_lib.sh  # b2_switches
b2_switches "$out" CUDA_KERNELS_K1_PC=1
