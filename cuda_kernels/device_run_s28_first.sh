#!/usr/bin/env bash
# Session 28's first call (~9 minutes; NOTES.md "Session 27", predictions there): project_v9s with one task slot a
# warp (CUDA_KERNELS_PROJ_V9_S1=1: its GPU tests, B0 with and without it, the projections at 3.1 and 2.1 under Nsight
# Compute off and on) with, in the same B0 process, kernel 1's image-major items (CUDA_KERNELS_K1_IMAGE_MAJOR=1, its
# GPU tests too) and B0's ablation under the session-27 defaults (what kernel 1, the SE and the projections cost on the
# critical path now), then the batch split into chunks on two streams (device_run_s28_split.sh). From the repository
# root:
#   timeout 590 bash cuda_kernels/device_run_s28_first.sh OUTDIR
# Files: OUTDIR/log.txt and OUTDIR/s1.tgz (device_run_switch.sh's), OUTDIR/split/ (log.txt, split.json). Last lines
# S1_OK=1|0 and SPLIT_OK=1|0.
set -uo pipefail
out=${1:?output folder}
ablation="CUDA_KERNELS_ABLATE=se;CUDA_KERNELS_ABLATE=project;CUDA_KERNELS_ABLATE=kernel1"
tests="tests/test_mbconv_proj_v9s1.py tests/test_mbconv_split.py tests/test_mbconv_k1_image_major.py"
SWITCH_BUDGET=340 NCU_LABEL=PROJ KERNEL_REGEX=project EXTRA_VARIANTS="CUDA_KERNELS_K1_IMAGE_MAJOR=1;$ablation" \
  bash cuda_kernels/device_run_switch.sh "$out" S1 CUDA_KERNELS_PROJ_V9_S1=1 "$tests" features.3.1 features.2.1
bash cuda_kernels/device_run_s28_split.sh "$out/split"
