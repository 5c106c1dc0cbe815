#!/usr/bin/env bash
# The projection's tasks in the order kernel 1 wrote D, newest first (CUDA_KERNELS_PROJ_ORDER=1, off until measured;
# NOTES.md "Session 26"): its GPU tests (every distinct B0 / B2 block, bit for bit the default order's output; B0 end
# to end), B0 with and without it (b0_switches; also WHOLE off, the new default's gain again in the same process), and
# the projections at 2.0, 2.1, 3.0, 3.1 under Nsight Compute with L2 NOT flushed (what kernel 1 left there is the
# point): DRAM bytes read, L2 hit rate, duration, switch off and on. Prediction: 2.1's projection reads ~25-30 MB less
# of its 154 MB (46 -> ~40 us), 2.0's ~20 MB less; 3.0 / 3.1 (D of 29 / 48 MB, in L2 already) about the same; B0
# -8..-15 us. From the repository root (~5 minutes):
#   timeout 400 bash cuda_kernels/device_run_s26_order.sh OUTDIR
# (Ran as session 26's call 2: B0 -2.1 us, noise; the switch is removed since, NOTES.md "Session 26".)
# Files: OUTDIR/log.txt, OUTDIR/order.tgz (switches.json, proj_*.csv). Last line ORDER_OK=1|0.
EXTRA_VARIANTS="CUDA_KERNELS_K1_WHOLE=0" SWITCH_BUDGET=380 KERNEL_REGEX=project NCU_LABEL=PROJ NCU_CACHE=none \
  NCU_METRICS=gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
  exec bash cuda_kernels/device_run_switch.sh "${1:?output folder}" ORDER CUDA_KERNELS_PROJ_ORDER=1 \
  tests/test_mbconv_proj_order.py features.2.0 features.2.1 features.3.0 features.3.1
