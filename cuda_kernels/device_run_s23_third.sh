#!/usr/bin/env bash
# Session 23's third call: CUDA_KERNELS_K1_DH2=1 with its smaller taps, so that B0's 5.0-5.2 take X by the tensor memory
# accelerator and the wgmma expand (NOTES.md "Session 23"): its GPU tests, B0 (b0_switches) and kernel 1 under Nsight
# Compute (L2 flushed) at 2.1 / 3.1 / 4.1 / 5.0 / 5.1, off and on. From the repository root (~4 minutes on an H200):
#   timeout 330 bash cuda_kernels/device_run_s23_third.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s23c.tgz (switches.json, k1_*.csv). Last line S23C_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin S23C 320
STEP_CLEARS_OK=1
d="$out/s23c"
mkdir -p "$d"
step dh2_tests 90 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_dh2.py
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_DH2=1 -o "$d/switches.json"
for v in "CUDA_KERNELS_K1_DH2=0" "CUDA_KERNELS_K1_DH2=1"; do
  kernel_ncu "$d" K1 expand_dw "$v" features.2.1 features.3.1 features.4.1 features.5.0 features.5.1
done
tar czf "$out/s23c.tgz" -C "$out" s23c && rm -rf "$d"
grep -E "^== |^SWITCHES |^K1 |passed|failed" "$log" | tail -24
echo "S23C_OK=$ok"
