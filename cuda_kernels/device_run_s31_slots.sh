#!/usr/bin/env bash
# Session 31's second call (~6 minutes; NOTES.md "Current state", the prediction there): project_v9s in a deeper ring
# of tasks (CUDA_KERNELS_PROJ_V9_SLOTS=3 / 4, project_v9sd_kernel): its GPU tests (float64, bit for bit the two-slot
# kernel, B0 end to end), B0 with 2 / 3 / 4 slots and the ablation (b0_switches, one process), the projections of
# 1.0-3.1 under Nsight Compute (L2 flushed) at each setting, then B2 with 4. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s31_slots.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/slots.tgz (switches.json, the CSVs), OUTDIR/b2/. Last lines SLOTS_OK, B2_OK.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu, b2_switches
mbconv_begin SLOTS 420
STEP_CLEARS_OK=1
d="$out/slots"; mkdir -p "$d"
S=CUDA_KERNELS_PROJ_V9_SLOTS
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py -k deeper
step switches 150 python3 -m cuda_kernels.b0_switches "$S=3" "$S=4" --ablation -o "$d/switches.json"
for v in "$S=0" "$S=3" "$S=4"; do
  kernel_ncu "$d" PROJ project_v9 "$v" features.1.0 features.2.0 features.2.1 features.3.0 features.3.1
done
tar czf "$out/slots.tgz" -C "$out" slots && rm -rf "$d"
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -30
echo "SLOTS_OK=$ok"
b2_switches "$out" "$S=4"
