#!/usr/bin/env bash
# The second H200 call of 2026-11-30 (one call, about nine minutes; every step under its own
# time limit, later steps run even if an earlier one fails), from the repository root:
#   bash examples/measurements/h200_call_2026-11-30b.sh OUTDIR
# 1. the three kernel extensions, built in parallel
# 2. the L2 probe (fidelity/, both cache modes; element-wise kernels this time)
# 3. ConvFirstNet-S and -H200 end to end: every fused block (stride 2 included), the rest
#    compiled, CUDA graphs; against torch.compile with freezing and CUDA graphs, same run
# 4. MBConv kernel-1 v2: GPU tests; if they pass, v2 for the per-block benchmark and for
#    EfficientNet-B0 end to end (against torch.compile with freezing, CUDA graphs)
# 5. the stride-2 ConvFirst blocks against eager and torch.compile (bench_s2)
# 6. EfficientNet-B0 under torch.compile with Nsight Compute (no flush): the inductor plan
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
for ext in load_extension load_convfirst_s2_extension load_mbconv_extension; do
  timeout 150 python3 -c "from cuda_kernels._build import $ext as l; l(); print('built $ext')" >> "$log" 2>&1 &
done
wait; echo "== builds done $(date +%T)" | tee -a "$log"
for mode in none all; do
  step probe_$mode 40 python3 -m perfmodel.ncu --probe-file "$runs/l2_probe_h200_$mode.json" $mode
done
bench() { local model=$1 name=$2 limit=$3; shift 3
  step "${model}_$name" "$limit" python3 cli.py bench "$model" --repeats 30 "$@" -o "$runs/h200_${model}_${name}.json"; }
for model in convfirstnet_s convfirstnet_h200; do
  bench $model cuda_kernels_compiled_graphs 100 --backend cuda_kernels --compile-rest --freezing --cuda-graphs
  bench $model inductor_freezing_graphs 100 --backend inductor --freezing --cuda-graphs
done
version=1
step mbconv_v2_tests 70 env MBCONV_TEST_VERSIONS=2 CUDA_KERNELS_MBCONV_VERSION=2 \
  python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_kernels.py && version=2
echo "== MBConv kernel-1 version for the timings: $version" | tee -a "$log"
export CUDA_KERNELS_MBCONV_VERSION=$version
step mbconv_bench 100 python3 -m cuda_kernels.mbconv_bench \
  --version $version --budget-s 80 --out "$runs/mbconv_b0_h200.json"
bench efficientnet_b0 cuda_kernels_graphs 80 --backend cuda_kernels --cuda-graphs
bench efficientnet_b0 inductor_freezing_graphs 100 --backend inductor --freezing --cuda-graphs
step convfirst_s2_bench 70 python3 -m cuda_kernels.bench_s2 --modes default --out "$runs/convfirst_s2_bench.json"
step b0_inductor_ncu 120 python3 cli.py bench efficientnet_b0 --backend inductor --repeats 20 --ncu \
  -o "$runs/h200_efficientnet_b0_inductor_ncu_none.json"
echo "== done $(date +%T)" | tee -a "$log"
