#!/usr/bin/env bash
# Kernel 1's mma.sync expand with U's fragments in registers, loaded once an item (CUDA_KERNELS_K1_U_REG=1, off until
# measured; NOTES.md "Session 24"): its GPU tests (every distinct B0 / B2 block bit for bit the default's output where
# it runs - 2.1, 3.1 - ; B0 end to end), B0 (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 2.1 and 3.1
# off and on. Prediction: 2.1's kernel 1 -5..-8% (119 -> ~110-113 us), 3.1 -3..-5% (80 -> ~77); B0 -8..-14 us. From
# the repository root (~4 minutes):
#   timeout 330 bash cuda_kernels/device_run_s25_ureg.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/ureg.tgz (switches.json, k1_*.csv). Last line UREG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin UREG 320
STEP_CLEARS_OK=1
d="$out/ureg"
mkdir -p "$d"
step tests 100 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_u_reg.py
step switches 100 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_U_REG=1 -o "$d/switches.json"
for v in "CUDA_KERNELS_K1_U_REG=0" "CUDA_KERNELS_K1_U_REG=1"; do
  kernel_ncu "$d" K1 expand_dw "$v" features.2.1 features.3.1
done
tar czf "$out/ureg.tgz" -C "$out" ureg && rm -rf "$d"
grep -E "^== |^SWITCHES |^K1 |passed|failed" "$log" | tail -20
echo "UREG_OK=$ok"
