#!/usr/bin/env bash
# The rest of B0's kernel 1 compiled for its shapes (CUDA_KERNELS_K1_STATIC_REST=1, off until measured; NOTES.md
# "Session 26"): its GPU tests (every distinct B0 / B2 block, bit for bit the dynamic kernel's output where a static one
# ran; B0 end to end), B0 with and without it (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 4.0, 4.1,
# 5.0, 5.1, 6.0, 6.1, off and on. Predictions: kernel 1 4.0 -10..-20%, 4.1 -8..-15%, 5.0 / 5.1 -6..-12%, 6.0
# -10..-20%, 6.1 -5..-10%; B0 -25..-50 us. From the repository root (~5 minutes):
#   timeout 400 bash cuda_kernels/device_run_s27_rest.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/rest.tgz (switches.json, k1_*.csv). Last line REST_OK=1|0.
SWITCH_BUDGET=380 exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" REST CUDA_KERNELS_K1_STATIC_REST=1 \
  tests/test_mbconv_k1_static.py features.4.0 features.4.1 features.5.0 features.5.1 features.6.0 features.6.1
