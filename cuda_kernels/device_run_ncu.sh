#!/usr/bin/env bash
# Nsight Compute on the fused networks' own kernels, in place (one forward each), from the repository
# root; about 3 minutes on an H200:
#   bash cuda_kernels/device_run_ncu.sh OUTDIR [models...]     (default: convfirstnet_h200 efficientnet_b0)
# Why: session 6's overlap models held at wide C but missed by 1.3-2.1x where a kernel's time is
# mostly conv, loads and per-tile overhead (variant 3 at C = 128 / 64, the stem) and entirely for
# MBConv v5 / v6 (NOTES.md, "Session 6 ... against the H200"). Stall reasons say which latency chain
# it is before the next design. Per model: OUTDIR/ncu_MODEL.csv (the details page: speed of light,
# warp state / stall reasons, scheduler, occupancy, launch, memory workload) and log.txt.
set -uo pipefail
out=${1:?output folder}; shift
models=${*:-convfirstnet_h200 efficientnet_b0}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
sections="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
--section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
for m in $models; do
  echo "== $m $(date +%T)" | tee -a "$log"
  rep="$out/ncu_$m"
  timeout 150 ncu --profile-from-start off --clock-control none --cache-control none \
    -k regex:"stem|convfirst|block_fusion|ffn|expand_dw|se_kernel|se_v[0-9]|project|effnet_head" $sections -f -o "$rep" \
    python3 -m cuda_kernels.profile_network "$m" >> "$log" 2>&1
  echo "   ncu exit $?" | tee -a "$log"
  ncu --import "$rep.ncu-rep" --csv --page details > "$out/ncu_$m.csv" 2>> "$log"
  rm -f "$rep.ncu-rep"
done
tar -czf "$out/ncu.tar.gz" -C "$out" $(cd "$out" && ls ncu_*.csv log.txt 2>/dev/null)
