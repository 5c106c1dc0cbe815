#!/usr/bin/env bash
# Session 28's first call (~8 minutes; NOTES.md "Session 27", predictions there): project_v9s with one task slot a
# warp (CUDA_KERNELS_PROJ_V9_S1=1: its GPU tests, B0 with and without it, the projections at 3.1 and 2.1 under Nsight
# Compute off and on) with B0's ablation under the session-27 defaults in the same process (what kernel 1, the SE and
# the projections cost on the critical path now), then the batch split into chunks on two streams
# (device_run_s28_split.sh). From the repository root:
#   timeout 560 bash cuda_kernels/device_run_s28_first.sh OUTDIR
# Files: OUTDIR/log.txt and OUTDIR/s1.tgz (device_run_switch.sh's), OUTDIR/split/ (log.txt, split.json). Last lines
# S1_OK=1|0 and SPLIT_OK=1|0.
set -uo pipefail
out=${1:?output folder}
ablation="CUDA_KERNELS_ABLATE=se;CUDA_KERNELS_ABLATE=project;CUDA_KERNELS_ABLATE=kernel1"
tests="tests/test_mbconv_proj_v9s1.py tests/test_mbconv_split.py"
SWITCH_BUDGET=300 NCU_LABEL=PROJ KERNEL_REGEX=project EXTRA_VARIANTS=$ablation \
  bash cuda_kernels/device_run_switch.sh "$out" S1 CUDA_KERNELS_PROJ_V9_S1=1 "$tests" features.3.1 features.2.1
bash cuda_kernels/device_run_s28_split.sh "$out/split"
