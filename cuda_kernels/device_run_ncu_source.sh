#!/usr/bin/env bash
# Nsight Compute's full set with per-instruction stall sampling for a few fused kernels of ConvFirstNet-H200, in
# place (one forward, cuda_kernels.profile_network), from the repository root (~2 minutes on an H200):
#   bash cuda_kernels/device_run_ncu_source.sh OUTDIR [kernel regex] [count]
# Default regex: the stem, the persistent wgmma ConvFirst kernel at C = 64 and 256; the first 5 matches in launch
# order (the stem, the three C = 64 blocks, the first C = 256 block); SOURCE (default "0 1 4") picks which of them
# get their SASS page. Writes OUTDIR/raw.csv
# (every metric: stall reasons as smsp__average_warp_latency_issue_stalled_* / pcsamp), OUTDIR/source_K.csv (SASS
# with the sampled stall reasons per instruction, kernel K in capture order) and OUTDIR/ncu_source.tar.gz of them.
set -uo pipefail
out=${1:?output folder}
regex=${2:-"stem_kernel|persistent_kernel<64|persistent_kernel<256"}
count=${3:-5}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
timeout 240 ncu --profile-from-start off --clock-control none --cache-control none --set full \
  --import-source no -k regex:"$regex" -c "$count" -f -o "$out/src" \
  python3 -m cuda_kernels.profile_network convfirstnet_h200 >> "$log" 2>&1
echo "ncu exit $?" | tee -a "$log"
ncu --import "$out/src.ncu-rep" --page raw --csv > "$out/raw.csv" 2>> "$log"
for k in ${SOURCE:-0 1 4}; do
  timeout 60 ncu --import "$out/src.ncu-rep" --page source --csv --print-source sass --launch-skip "$k" --launch-count 1 \
    > "$out/source_$k.csv" 2>> "$log"
done
ls -la "$out" | tee -a "$log"
tar -czf "$out/ncu_source.tar.gz" -C "$out" $(cd "$out" && ls raw.csv source_*.csv log.txt)
