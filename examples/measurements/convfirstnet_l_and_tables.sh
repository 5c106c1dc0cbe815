#!/usr/bin/env bash
# One device call (session 7's last): ConvFirstNet-L's stem kernel, L end to end with zero fallbacks, the per-block
# table of all four ConvFirstNets, then variant 6 at C = 64 if time is left. From the repository root:
#   LIMIT_S=520 bash examples/measurements/convfirstnet_l_and_tables.sh OUTDIR
# 1. every extension built (cuda_kernels/device_build_all.sh);
# 2. cuda_kernels/device_run_stem48.sh (the C1 = 48 stem: smoke, GPU tests, bench beside torch.compile); if it does
#    not end with STEM48_OK=1, the later steps run with CUDA_KERNELS_STEM48=0 (L's stem in PyTorch, a fallback);
# 3. ConvFirstNet-L end to end, fused (its C = 768 blocks too: CUDA_KERNELS_C768=1) and torch.compile (freezing,
#    CUDA graphs), in this call (examples/measurements/convfirstnet_e2e.sh);
# 4. cuda_kernels.bench_networks over the four ConvFirstNets' units (CUDA_KERNELS_C768=1, so that every L block
#    is a fused row; --no-autotune), inside what is left of LIMIT_S less 110 s;
# 5. cuda_kernels/device_run_v6.sh when at least 100 s are left.
# Files: OUTDIR/all.tar.gz (logs, measurement files), OUTDIR/log.txt.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
start=$(date +%s); limit=${LIMIT_S:-520}
left() { echo $((limit - ($(date +%s) - start))); }
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -2 | tee -a "$log"
timeout 160 bash cuda_kernels/device_run_stem48.sh "$out/stem48" 2>&1 | tail -8 | tee -a "$log"
grep -q "STEM48_OK=1" "$log" || { export CUDA_KERNELS_STEM48=0; echo "== stem48 failed: CUDA_KERNELS_STEM48=0" | tee -a "$log"; }
echo "== e2e convfirstnet_l ($(left) s left)" | tee -a "$log"
CUDA_KERNELS_C768=1 CONFIGS="cuda_kernels_compiled_graphs inductor_freezing_graphs" timeout 220 \
  bash examples/measurements/convfirstnet_e2e.sh "$out/e2e" convfirstnet_l 2>&1 | tee -a "$log" | grep -E "==|median" 
t=$(( $(left) - 110 ))
if [ "$t" -gt 60 ]; then
  echo "== table ($t s)" | tee -a "$log"
  CUDA_KERNELS_C768=1 LIMIT_S=$t bash cuda_kernels/device_run_networks_table.sh "$out/table" --no-autotune 2>&1 \
    | grep -E "^==|per model|fused .* ms" | tee -a "$log"
fi
if [ "$(left)" -ge 100 ]; then
  timeout $(( $(left) - 5 )) bash cuda_kernels/device_run_v6.sh "$out/v6" 2>&1 | tail -6 | tee -a "$log"
fi
(cd "$out" && tar -czf all.tar.gz log.txt stem48 e2e/runs.tar.gz e2e/log.txt table/networks_table.json table/log.txt v6 \
  2>/dev/null)
echo "DONE $(left) s left" | tee -a "$log"
