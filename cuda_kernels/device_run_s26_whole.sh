#!/usr/bin/env bash
# Kernel 1 where every depthwise unit is whole (CUDA_KERNELS_K1_WHOLE=1, off until measured; NOTES.md "Session 25"):
# its GPU tests (every distinct B0 / B2 block bit for bit the default's output where a _w kernel ran; B0 end to end),
# B0 (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 2.0, 2.1, 3.0, 3.1 off and on. Prediction: 2.1's
# kernel 1 -8..-14% (102.6 -> ~88-94 us), 3.1 -5..-9%, 2.0 / 3.0 -3..-6%; B0 -18..-30 us. The off runs also check
# that the defaults did not move (session 25's call 3: 2.1 102.6 us, 3.1 71.7 under the same kernels). From the
# repository root (~4 minutes):
#   timeout 330 bash cuda_kernels/device_run_s26_whole.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/whole.tgz (switches.json, k1_*.csv). Last line WHOLE_OK=1|0.
exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" WHOLE CUDA_KERNELS_K1_WHOLE=1 \
  tests/test_mbconv_k1_whole.py features.2.0 features.2.1 features.3.0 features.3.1
