#!/usr/bin/env bash
# project_v9s on 11 warps a CTA (CUDA_KERNELS_PROJ_V9_WARPS=11, off until measured; B0's 3.1) in one device call: its
# GPU tests (float64, bit for bit project_v9s, the profiler naming project_v9sw_kernel; B0 through the check), the
# projection under Nsight Compute off and on (L2 flushed), the chain of 3.1 off and on (mbconv_chain), and B0 end to
# end (b0_switches). From the repository root (~5 minutes):
#   timeout 590 bash cuda_kernels/device_run_v9sw.sh OUTDIR
# Files: OUTDIR/log.txt, proj_*.csv, chain_0.json, chain_11.json, switches.json. Last line V9SW_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, proj_ncu
mbconv_begin V9SW "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py -k eleven
for v in 0 11; do
  proj_ncu "$out" "CUDA_KERNELS_PROJ_V9_WARPS=$v" features.3.1
  step "chain_$v" 40 env CUDA_KERNELS_PROJ_V9_WARPS=$v python3 -m cuda_kernels.mbconv_chain features.3.1 \
    -o "$out/chain_$v.json"
done
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_V9_WARPS=11 -o "$out/switches.json"
grep -E "^== |^SWITCHES |^CHAIN |^PROJ |passed|failed" "$log" | cut -c1-220 | tail -30
echo "V9SW_OK=$ok"
