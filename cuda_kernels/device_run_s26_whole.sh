#!/usr/bin/env bash
# Kernel 1's whole depthwise units (NOTES.md "Session 25"), both off until measured, alone and together: where every
# unit of the launch is whole (CUDA_KERNELS_K1_WHOLE=1: B0's 2.0-3.1) and each item's whole units first at the wgmma
# blocks with k = 3 (CUDA_KERNELS_K1_WHOLE_FIRST=1: 4.1, 4.2). Their GPU tests (every distinct B0 / B2 block; WHOLE
# bit for bit the default's output, WHOLE_FIRST within 1e-3 of it - the pool's sums in another order; B0 end to end),
# B0 (b0_switches: each alone and both), kernel 1 under Nsight Compute (L2 flushed) at 2.0, 2.1, 3.0, 3.1, 4.1, both off
# and both on. Predictions: 2.1's kernel 1 -8..-14% (102.6 -> ~88-94 us), 3.1 -5..-9%, 2.0 / 3.0 -3..-6%, 4.1
# -4..-7%; B0 -18..-30 us (WHOLE), -3..-5 (WHOLE_FIRST). The off runs also show the defaults did not move (session
# 25's call 3: 2.1 102.6 us, 3.1 71.7, 4.1 36.7 under the same kernels). From the repository root (~6-7 minutes):
#   timeout 500 bash cuda_kernels/device_run_s26_whole.sh OUTDIR
# (Ran as session 26's call 1; WHOLE is the default since, WHOLE_FIRST and HALF_TILES are removed: NOTES.md
# "Session 26".)
# Files: OUTDIR/log.txt, OUTDIR/whole.tgz (switches.json, k1_*.csv). Last line WHOLE_OK=1|0.
# B0 also under two band-height caps (CUDA_KERNELS_K1_ROWS, the defaults otherwise: the last round of kernel 1's items,
# NOTES.md "Current state", next 6): 3.1 in 4 bands of 7 rows, 2.1 in 14 of 4; and with the last round's m-tiles in
# halves (CUDA_KERNELS_K1_HALF_TILES, alone and with WHOLE; predicted B0 -2..-5 us; its GPU tests are in
# device_run_s26_tests.sh).
EXTRA_VARIANTS="CUDA_KERNELS_K1_ROWS=28x28k5s1=7;CUDA_KERNELS_K1_ROWS=56x56k3s1=4;CUDA_KERNELS_K1_HALF_TILES=1"
EXTRA_VARIANTS+=";CUDA_KERNELS_K1_HALF_TILES=1 CUDA_KERNELS_K1_WHOLE=1"
EXTRA_VARIANTS=$EXTRA_VARIANTS SWITCH_BUDGET=480 \
  exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" WHOLE \
  "CUDA_KERNELS_K1_WHOLE=1 CUDA_KERNELS_K1_WHOLE_FIRST=1" \
  "tests/test_mbconv_k1_whole.py tests/test_mbconv_k1_whole_first.py" \
  features.2.0 features.2.1 features.3.0 features.3.1 features.4.1
