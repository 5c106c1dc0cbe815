#!/usr/bin/env bash
# Session 16, call 2 (~9.5 minutes on one H200), from the repository root:
#   timeout 595 bash cuda_kernels/device_run_k1_diag_autotune.sh OUTDIR
# 1. Nsight Compute's full set with per-instruction stall sampling of version 11's kernel 1 at features.2.1, 4.1 and
#    6.1, and of the producer/consumer kernel 1 (CUDA_KERNELS_K1_V12=1) at 6.1: neither three CTAs per SM nor the
#    producer made 6.1's kernel 1 faster (stems call: 49.1 -> 55.4 and 52.7 us), so the "serial chain" diagnosis needs
#    the stall reasons before the next design. OUTDIR/k1v11/ncu_mbconv_k1.tar.gz, OUTDIR/k1v12/ncu_mbconv_k1.tar.gz.
# 2. The rest of the call: device_run_b0_autotune.sh (max-autotune's timings, carried to the next call).
# (Version 12 was removed after this call: its part reproduces at commit b1abe2b only.)
set -u
out=${1:?output folder}
BLOCKS="features.2.1 features.4.1 features.6.1" VERSION=11 timeout 170 \
  bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/k1v11" 2>&1 | tail -3
BLOCKS="features.6.1" VERSION=11 CUDA_KERNELS_K1_V12=1 timeout 90 \
  bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/k1v12" 2>&1 | tail -3
rm -f "$out"/k1v11/*.csv "$out"/k1v12/*.csv
AUTO_BUDGET=$((580 - SECONDS)) timeout $((585 - SECONDS)) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" 2>&1 \
  | tail -8
ls -la "$out"/*
