#!/usr/bin/env bash
# Session 30's second call (~7 minutes; NOTES.md "Current state", its prediction there): E's halo rows kept between
# bands at k = 5 (CUDA_KERNELS_K1_HALO5=1, expand_dw_v8_kernel_dhurfwsh at B0's 3.1, B2's 3.1 / 3.2): its GPU tests
# (float64, bit for bit the default, B0 end to end), B0 with and without it (b0_switches), kernel 1 at 3.1 under
# Nsight Compute off and on, B2 with and without it; then Nsight Compute's full set with per-instruction stall
# sampling of the defaults' kernel 1 at 3.1 and 4.1 (what its warps wait on, for the next design). From the
# repository root:
#   timeout 590 bash cuda_kernels/device_run_s30_halo5.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/halo5.tgz, OUTDIR/b2/ (log.txt, b2_switches.json), OUTDIR/k1src/ (log.txt,
# ncu_mbconv_k1.tar.gz: raw.csv, details.csv, source_features.3.1.csv, source_features.4.1.csv). Last lines
# HALO5_OK, B2_OK.
set -uo pipefail
out=${1:?output folder}
SWITCH_BUDGET=280 bash cuda_kernels/device_run_switch.sh "$out" HALO5 CUDA_KERNELS_K1_HALO5=1 \
  tests/test_mbconv_k1_halo5.py features.3.1
source cuda_kernels/device_lib.sh  # b2_switches
b2_switches "$out" CUDA_KERNELS_K1_HALO5=1
VERSION=11 BLOCKS="features.3.1 features.4.1" timeout 170 bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/k1src"
rm -f "$out"/k1src/*.csv
