#!/usr/bin/env bash
# Session 31's first call (~8 minutes; NOTES.md "Current state", items 0 and 1): the expand's biases loaded early
# (device_run_s31_bias_early.sh: its tests, B0 and B2 with and without it, kernel 1 at 4.1 / 5.1 / 6.1 under Nsight
# Compute), then the GPU test files that run B0's 3.1 on a launch-value kernel 1 (bands of 14 under
# CUDA_KERNELS_K1_HALO5=2, the default since session 30, with another kernel-1 switch at its off value) and had not
# run under that default, each under its own share of the time left. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s31_first.sh OUTDIR
# Files: OUTDIR/bias/ (that script's), OUTDIR/suite/ (device_run_mbconv_files.sh's: summary.txt, logs.tgz).
set -uo pipefail
out=${1:?output folder}
start=$(date +%s); limit=${LIMIT_S:-580}
left() { echo $((limit - ($(date +%s) - start))); }
bash cuda_kernels/device_run_s31_bias_early.sh "$out/bias" 2>&1 | tail -30
LIMIT_S=$(left) bash cuda_kernels/device_run_mbconv_files.sh "$out/suite" tests/test_mbconv_k1_fastdiv.py \
  tests/test_mbconv_k1_u_reg.py tests/test_mbconv_k1_whole.py tests/test_mbconv_v8.py tests/test_mbconv_hfma2.py \
  tests/test_mbconv_proj_v9s.py
