#!/usr/bin/env bash
# B0's projections compiled for their shapes (CUDA_KERNELS_PROJ_STATIC=1, off until measured; NOTES.md "Session 26"):
# its GPU tests (every distinct B0 / B2 block, bit for bit the dynamic kernels' output; B0 end to end), B0 with and
# without it (b0_switches), the projections under Nsight Compute (L2 flushed) at 2.0-7.0, off and on. Predictions:
# 2.0 27.8 -> ~24-26 us, 2.1 -1..-3 us (near its DRAM time), 3.0 14.1 -> ~12-13, 3.1 21.3 -> ~19-20, 4.x-5.x -3..-8%,
# 6.x ~0; B0 -10..-25 us. From the repository root (~5 minutes):
#   timeout 400 bash cuda_kernels/device_run_s27_proj.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/projs.tgz (switches.json, proj_*.csv). Last line PROJS_OK=1|0.
SWITCH_BUDGET=380 KERNEL_REGEX=project NCU_LABEL=PROJ exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" \
  PROJS CUDA_KERNELS_PROJ_STATIC=1 tests/test_mbconv_proj_static.py features.2.0 features.2.1 features.3.0 features.3.1 \
  features.4.0 features.4.1 features.5.0 features.5.1 features.6.0 features.6.1 features.7.0
