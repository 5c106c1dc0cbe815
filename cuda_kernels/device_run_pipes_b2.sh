#!/usr/bin/env bash
# Session 40's first call (cuda_kernels/NOTES.md "Current state", Next 0 and 1): the pipe probes (seconds: does kernel
# 1's depthwise run its HFMA2 on one pipe at half rate, and would a separately compiled depthwise get the other?), then
# EfficientNet-B2 against torch.compile default and max-autotune-no-cudagraphs in one run, from the autotuning timings
# session 39 carried. From the repository root, with carry: [".inductor_cache"] (~8-9 minutes):
#   timeout 590 bash cuda_kernels/device_run_pipes_b2.sh OUTDIR
# Files: OUTDIR/pipes.txt (the probes' lines), OUTDIR/log.txt, OUTDIR/b2/ (device_run_b0_autotune.sh's files, named b0_*
# as there; AUTO_BUDGET=S: its budget, 500 s unless set).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
log="$out/log.txt"
source cuda_kernels/device_lib.sh  # step
step pipes 60 bash -c "nvcc -std=c++17 -O3 -arch=sm_90a cuda_kernels/probes/probe_pipes.cu -o /tmp/probe_pipes \
  && /tmp/probe_pipes"
step dw_rdc 60 bash -c "nvcc -std=c++17 -O3 -arch=sm_90a -rdc=true cuda_kernels/probes/probe_dw_rdc.cu \
  -o /tmp/probe_dw_rdc && /tmp/probe_dw_rdc"
grep -E "^(PIPES|DWRDC)" "$log" | tee "$out/pipes.txt"
tar xzf examples/measurements/mbconv/s39/call3/b2/autotune_timings.tgz -C .
MODEL=efficientnet_b2 AUTO_STEP_S=150 AUTO_BUDGET=${AUTO_BUDGET:-500} \
  bash cuda_kernels/device_run_b0_autotune.sh "$out/b2" | tail -8
