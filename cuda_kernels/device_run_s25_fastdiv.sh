#!/usr/bin/env bash
# Kernel 1's per-item divisions as multiplies (CUDA_KERNELS_K1_FASTDIV=1, off until measured; NOTES.md "Session 25"):
# its GPU tests (every distinct B0 / B2 block bit for bit the default's output where _dhurf / _txdhf ran; B0 end to
# end), B0 (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 2.1, 3.1, 4.1 and 5.1 off and on. Prediction:
# kernel 1 -1.5..-3% at 2.1 and 4.1, -2..-4% at 3.1; B0 -6..-12 us. From the repository root (~4 minutes):
#   timeout 330 bash cuda_kernels/device_run_s25_fastdiv.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/fastdiv.tgz (switches.json, k1_*.csv). Last line FASTDIV_OK=1|0.
exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" FASTDIV CUDA_KERNELS_K1_FASTDIV=1 \
  tests/test_mbconv_k1_fastdiv.py features.2.1 features.3.1 features.4.1 features.5.1
