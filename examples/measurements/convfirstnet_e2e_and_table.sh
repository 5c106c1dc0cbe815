#!/usr/bin/env bash
# One device call for issue 10's two records, from the repository root:
#   LIMIT_S=420 bash examples/measurements/convfirstnet_e2e_and_table.sh OUTDIR [models...]
# 1. every extension built (cuda_kernels/device_build_all.sh; cached on a warm machine);
# 2. per model (default: convfirstnet_h200 convfirstnet_l), end to end as issue 10 measures it: the fused network
#    (every fused block one operator, the rest compiled with freezing, CUDA graphs) and torch.compile (default
#    mode, freezing, CUDA graphs), 30 repeats each, in the same call (examples/measurements/convfirstnet_e2e.sh);
#    ConvFirstNet-L runs with CUDA_KERNELS_C768=1 (its C = 768 blocks fused; off by default);
# 3. with the time left (at least 100 s), cuda_kernels.bench_networks for ConvFirstNet-H200's units (stem, blocks,
#    head: fused, eager, torch.compile with freezing; --no-autotune unless TABLE_AUTOTUNE=1), its budget ending it
#    inside LIMIT_S.
# Kernel switches (CUDA_KERNELS_*) pass through from the caller's environment and are recorded in every file.
# Files: OUTDIR/e2e/runs.tar.gz, OUTDIR/table/networks_table.json, OUTDIR/log.txt, all in OUTDIR/all.tar.gz.
set -uo pipefail
out=${1:?output folder}; shift
models=${*:-convfirstnet_h200 convfirstnet_l}
mkdir -p "$out"; log="$out/log.txt"
start=$(date +%s); limit=${LIMIT_S:-420}
left() { echo $((limit - ($(date +%s) - start))); }
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
env | grep '^CUDA_KERNELS_' | tee -a "$log"
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -2 | tee -a "$log"
for model in $models; do
  extra=""; [ "$model" = convfirstnet_l ] && extra="CUDA_KERNELS_C768=${CUDA_KERNELS_C768:-1}"
  echo "== e2e $model ($(left) s left) $extra" | tee -a "$log"
  env $extra CONFIGS="cuda_kernels_compiled_graphs inductor_freezing_graphs" \
    bash examples/measurements/convfirstnet_e2e.sh "$out/e2e" "$model" 2>&1 | grep -E "median|exit" | tee -a "$log"
done
t=$(left)
if [ "$t" -gt 100 ]; then
  opts="--models convfirstnet_h200"; [ "${TABLE_AUTOTUNE:-0}" = 1 ] || opts="$opts --no-autotune"
  echo "== table ($t s left): $opts" | tee -a "$log"
  LIMIT_S=$((t - 5)) bash cuda_kernels/device_run_networks_table.sh "$out/table" $opts 2>&1 | tail -25 | tee -a "$log"
else
  echo "== table skipped: $t s left" | tee -a "$log"
fi
(cd "$out" && tar -czf all.tar.gz log.txt e2e/runs.tar.gz e2e/log.txt table/networks_table.json table/log.txt 2>/dev/null)
echo "E2E_DONE $(left) s left"
