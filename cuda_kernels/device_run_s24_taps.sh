#!/usr/bin/env bash
# CUDA_KERNELS_K1_TAPS_G=1 (built in session 23, off until measured; NOTES.md "Current state", session 23, next 3b): at
# stride 2, k = 5, kernel 1's taps from global memory, so that B0's 3.0 runs bands of 4 output rows (7 a chunk-image)
# for 10 of 3. Its GPU tests, B0 (b0_switches), kernel 1 at 3.0 and 6.0 under Nsight Compute (L2 flushed) off and on.
# Prediction: 3.0's kernel 1 ~99 -> ~86-90 us (a third fewer items; the depthwise's 2-row segments all full), 6.0
# unchanged (one band either way) or a little slower (the taps' loads per item); B0 -10..-15 us. From the repository
# root (~4 minutes on an H200):
#   timeout 330 bash cuda_kernels/device_run_s24_taps.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/taps.tgz (switches.json, k1_*.csv). Last line TAPS_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin TAPS 320
STEP_CLEARS_OK=1
d="$out/taps"
mkdir -p "$d"
step tests 90 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_dh2.py -k taps
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_TAPS_G=1 -o "$d/switches.json"
for v in "CUDA_KERNELS_K1_TAPS_G=0" "CUDA_KERNELS_K1_TAPS_G=1"; do
  kernel_ncu "$d" K1 expand_dw "$v" features.3.0 features.6.0
done
tar czf "$out/taps.tgz" -C "$out" taps && rm -rf "$d"
grep -E "^== |^SWITCHES |^K1 |passed|failed" "$log" | tail -16
echo "TAPS_OK=$ok"
