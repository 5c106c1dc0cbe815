#!/usr/bin/env bash
# Issue 10's per-block table for the four ConvFirstNets in one device call (~9 minutes), from the repository root:
#   bash cuda_kernels/device_run_networks_table.sh OUTDIR [bench_networks options, e.g. --no-autotune]
# Builds every extension in parallel (cuda_kernels/device_build_all.sh), then runs `python -m cuda_kernels.bench_networks`
# (every unique stem / block / head shape of convfirstnet_s, _m, _h200, _l: fused as replace_blocks swaps it,
# eager, torch.compile default and max-autotune-no-cudagraphs with freezing; module docstring) with a time
# budget that ends it, all told, within LIMIT_S (default 570) seconds of the start: --budget-s is what is left
# after the build less 75 s (the last baseline's overrun, the file), and `timeout` stops it 15 s before LIMIT_S.
# The measurement file is rewritten after every unit, so a stopped run keeps what finished. Kernel switches
# (CUDA_KERNELS_*) pass through from the caller's environment; unset, the defaults the networks use.
# Files: OUTDIR/networks_table.json, OUTDIR/log.txt (the table at its end), OUTDIR/build/, and all of them
# in OUTDIR/networks_table.tar.gz.
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"; log="$out/log.txt"
start=$(date +%s); limit=${LIMIT_S:-570}
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda-13.0 ]; then
  export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
env | grep '^CUDA_KERNELS_' >> "$log"
echo "== build $(date +%T)" | tee -a "$log"
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -3 | tee -a "$log"  # every extension, in parallel
left=$(( limit - ($(date +%s) - start) - 15 ))
budget=$(( left - 75 )); [ "$budget" -lt 1 ] && budget=1  # 0 would mean no budget
echo "== bench_networks $(date +%T): ${left}s left, --budget-s $budget $*" | tee -a "$log"
timeout "$left" python3 -m cuda_kernels.bench_networks --out "$out/networks_table.json" --budget-s "$budget" "$@" \
  >> "$log" 2>&1
echo "== bench_networks: exit $? $(date +%T)" | tee -a "$log"
(cd "$out" && tar -czf networks_table.tar.gz $(ls networks_table.json log.txt build/*.log 2>/dev/null))
tail -n 50 "$log"
