#!/usr/bin/env bash
# Kernel 1's wgmma expand with its k loop unrolled per 64-channel box and uniform descriptors
# (CUDA_KERNELS_K1_WG_LOOP=1, off until measured; NOTES.md "Session 24"): its GPU tests (every distinct B0 / B2 block
# bit for bit the default's output; B0 end to end), B0 (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at
# 4.1, 5.1 and 6.1 off and on. Prediction: 4.1's kernel 1 -4..-7% (38.5 -> ~36 us), 5.1 ~-6..-9%, 6.1 ~-5%; B0
# -8..-20 us. From the repository root (~4 minutes):
#   timeout 330 bash cuda_kernels/device_run_s24_wg.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/wg.tgz (switches.json, k1_*.csv). Last line WG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin WG 320
STEP_CLEARS_OK=1
d="$out/wg"
mkdir -p "$d"
step tests 100 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_wg_loop.py
step switches 100 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_WG_LOOP=1 -o "$d/switches.json"
for v in "CUDA_KERNELS_K1_WG_LOOP=0" "CUDA_KERNELS_K1_WG_LOOP=1"; do
  kernel_ncu "$d" K1 expand_dw "$v" features.4.1 features.5.1 features.6.1
done
tar czf "$out/wg.tgz" -C "$out" wg && rm -rf "$d"
grep -E "^== |^SWITCHES |^K1 |passed|failed" "$log" | tail -20
echo "WG_OK=$ok"
