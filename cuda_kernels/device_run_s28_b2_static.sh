#!/usr/bin/env bash
# Kernel 1 compiled for EfficientNet-B2's shapes (CUDA_KERNELS_STATIC_MODELS=efficientnet_b2: static_shapes.py's 8
# entries appended to B0's, built as an extension of its own name; NOTES.md "Session 27", prediction there): the
# static-shape GPU tests with B2's entries built in (B2's blocks against float64, a static kernel named by the profiler,
# bit for bit the launch-value kernels), then EfficientNet-B2 end to end with the static kernels and without (both
# static switches 0) in one process. From the repository root (~5 minutes):
#   timeout 400 bash cuda_kernels/device_run_s28_b2_static.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/b2_switches.json. Last line B2S_OK=1|0.
set -uo pipefail
out=${1:?output folder}
export CUDA_KERNELS_STATIC_MODELS=efficientnet_b2
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin B2S 380
STEP_CLEARS_OK=1
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_static.py
step switches $(( $(left) - 5 )) python3 -m cuda_kernels.b0_switches --model efficientnet_b2 \
  "CUDA_KERNELS_K1_STATIC=0 CUDA_KERNELS_K1_STATIC_REST=0" -o "$out/b2_switches.json"
grep -E "^SWITCHES |passed|failed" "$log" | tail -6
echo "B2S_OK=$ok"
