#!/usr/bin/env bash
# What bounds the projections that stand between B0's 3.1 / 4.1 and their 3x (session 37: project_v9s at 3.1 got
# slower on 11 warps than on 8, so its limit is shared by the SM's warps, not each warp's chain): Nsight Compute's
# SpeedOfLight, MemoryWorkloadAnalysis (shared-memory wavefronts and bank conflicts, L1 / L2 / DRAM throughput),
# WarpStateStats, SchedulerStats and Occupancy sections of project_v9s at 3.1 and project_wg at 4.1, L2 flushed.
# From the repository root (~3.5 minutes with the build):
#   timeout 590 bash cuda_kernels/device_run_proj_limits.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/sections_3.1.csv, sections_4.1.csv (--page details). Last line LIMITS_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin LIMITS "${BUDGET_S:-570}"
for b in 3.1 4.1; do
  step "ncu_$b" 90 ncu --clock-control none --cache-control all --print-units base -k regex:project \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section SchedulerStats --section Occupancy --csv --page details \
    --log-file "$out/sections_$b.csv" python3 -m cuda_kernels.mbconv_profile "features.$b" || ok=0
done
grep -E "^== " "$log" | tail -8
echo "LIMITS_OK=$ok"
