#!/usr/bin/env bash
# Two kernel-1 switches built in session 23, off until measured (NOTES.md "Current state", session 23, next 1b and
# 3b): CUDA_KERNELS_K1_TAPS_G=1 (at stride 2, k = 5, the taps from global memory, so that B0's 3.0 runs bands of 4
# output rows, 7 a chunk-image for 10) and CUDA_KERNELS_K1_OW2=1 (at B0's 14 x 14 blocks the depthwise 2 outputs wide:
# 7 column groups for 4 partly empty ones). Their GPU tests, B0 (b0_switches: each and both), kernel 1 under Nsight
# Compute (L2 flushed) at 3.0, 4.1, 5.1 off and on. Predictions: 3.0's kernel 1 ~99 -> ~85-90 us (TAPS_G); 4.1 / 4.2
# -2.5..-3.5 us each and 5.x -1..-2 (OW2); B0 -10..-15 and -8..-12 us. From the repository root (~5 minutes):
#   timeout 400 bash cuda_kernels/device_run_s24_k1.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/k1.tgz (switches.json, k1_*.csv). Last line K1_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin K1 390
STEP_CLEARS_OK=1
d="$out/k1"
mkdir -p "$d"
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_dh2.py \
  -k "taps or two_wide"
step switches 150 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_TAPS_G=1 CUDA_KERNELS_K1_OW2=1 \
  "CUDA_KERNELS_K1_TAPS_G=1 CUDA_KERNELS_K1_OW2=1" -o "$d/switches.json"
for v in "CUDA_KERNELS_K1_TAPS_G=0 CUDA_KERNELS_K1_OW2=0" "CUDA_KERNELS_K1_TAPS_G=1 CUDA_KERNELS_K1_OW2=1"; do
  kernel_ncu "$d" K1 expand_dw "$v" features.3.0 features.4.1 features.5.1
done
tar czf "$out/k1.tgz" -C "$out" k1 && rm -rf "$d"
grep -E "^== |^SWITCHES |^K1 |passed|failed" "$log" | tail -20
echo "K1_OK=$ok"
