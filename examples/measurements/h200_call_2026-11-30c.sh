#!/usr/bin/env bash
# H200 call of 2026-11-30 (session 5), from the repository root:
#   bash examples/measurements/h200_call_2026-11-30c.sh OUTDIR
# 1. EfficientNet-B0 end to end, every MBConv fused (kernel version 3, the rest eager, CUDA
#    graphs) and torch.compile (freezing, CUDA graphs; and default, CUDA graphs) in the same call
# 2. the latency-estimate calibration, every section (perfmodel calibrate), written over the
#    committed file
# Files: OUTDIR/runs.tar.gz (refreshed after every step) and OUTDIR/log.txt.
set -uo pipefail
out=${1:?output folder}
runs="$out/runs"; mkdir -p "$runs"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T)" | tee -a "$log"
  echo "   $*" >> "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "== $name: exit $rc $(date +%T)" | tee -a "$log"
  tar -czf "$out/runs.tar.gz" -C "$out" runs log.txt
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
timeout 150 python3 -c "from cuda_kernels._build import load_mbconv_extension as l; l(); print('built')" >> "$log" 2>&1
bench() { local model=$1 name=$2 limit=$3; shift 3
  step "${model}_$name" "$limit" python3 cli.py bench "$model" --repeats 30 "$@" -o "$runs/h200_${model}_${name}.json"; }
export CUDA_KERNELS_MBCONV_VERSION=3
bench efficientnet_b0 cuda_kernels_graphs 80 --backend cuda_kernels --cuda-graphs
bench efficientnet_b0 inductor_freezing_graphs 100 --backend inductor --freezing --cuda-graphs
bench efficientnet_b0 inductor_graphs 100 --backend inductor --cuda-graphs
cp configs/hardware/calibration/h200-sxm.yaml "$runs/h200-sxm.calibration.yaml"
step calibrate 240 python3 cli.py calibrate --hardware h200-sxm -o "$runs/h200-sxm.calibration.yaml"
echo "== done $(date +%T)" | tee -a "$log"
