#!/usr/bin/env bash
# The early projections compiled for B0's shapes (CUDA_KERNELS_PROJ_STATIC=1, off until measured; NOTES.md "Session
# 26"): its GPU tests (every distinct B0 / B2 block, bit for bit project_v9s's output; B0 end to end), B0 with and
# without it (b0_switches), the projections under Nsight Compute (L2 flushed) at 2.0, 2.1, 3.0, 3.1, off and on.
# Predictions: 2.0 27.8 -> ~24-26 us, 2.1 -1..-3 us (near its DRAM time), 3.0 14.1 -> ~12-13, 3.1 21.3 -> ~19-20; B0
# -5..-12 us. From the repository root (~4 minutes):
#   timeout 360 bash cuda_kernels/device_run_s27_proj.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/projs.tgz (switches.json, proj_*.csv). Last line PROJS_OK=1|0.
SWITCH_BUDGET=340 KERNEL_REGEX=project NCU_LABEL=PROJ exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" \
  PROJS CUDA_KERNELS_PROJ_STATIC=1 tests/test_mbconv_proj_static.py features.2.0 features.2.1 features.3.0 features.3.1
