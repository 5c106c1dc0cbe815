#!/usr/bin/env bash
# Kernel 1's mma.sync expand with U's fragments in registers, loaded once an item (CUDA_KERNELS_K1_U_REG=1, off until
# measured; NOTES.md "Session 24"): its GPU tests (every distinct B0 / B2 block bit for bit the default's output where
# it runs - 2.1, 3.1 - ; B0 end to end), B0 (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 2.1 and 3.1
# off and on. Prediction: 2.1's kernel 1 -5..-8% (119 -> ~110-113 us), 3.1 -3..-5% (80 -> ~77); B0 -8..-14 us. From
# the repository root (~4 minutes):
#   timeout 330 bash cuda_kernels/device_run_s25_ureg.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/ureg.tgz (switches.json, k1_*.csv). Last line UREG_OK=1|0.
exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" UREG CUDA_KERNELS_K1_U_REG=1 \
  tests/test_mbconv_k1_u_reg.py features.2.1 features.3.1
