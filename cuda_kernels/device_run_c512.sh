#!/usr/bin/env bash
# One device call for the C = 512 ConvFirst kernel (csrc/convfirst_c512.cu), from the repository root:
#   bash cuda_kernels/device_run_c512.sh OUTDIR [STEPS]
# STEPS (default "build tests bench", about 3 minutes on an H200 machine) may add "e2e":
# ConvFirstNet-H200 end to end with the kernel switched on (CUDA_KERNELS_C512=1), fused + rest
# compiled + CUDA graphs, beside torch.compile (freezing, graphs) in the same call (~2 more min).
# Each step has its own time limit (a hang in the new kernel's pipeline ends at the limit, not at
# the call's); logs and JSON go to OUTDIR.
set -uo pipefail
out=${1:?output folder}; steps=${2:-build tests bench}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  echo "== $name: exit $? $(date +%T)" | tee -a "$log"
}
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
if has e2e; then  # the network also needs the other two extensions: build them on the CPUs meanwhile
  timeout 240 python3 -c "from cuda_kernels._build import load_extension as a, load_convfirst_s2_extension as b; a(); b()" \
    > "$out/build_others.log" 2>&1 &
  others=$!
fi
has build && step build 120 env BLOCK_FUSION_PTXAS_VERBOSE=1 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; l(verbose=True)"
has tests && step tests 90 python3 -m pytest -q --maxfail=6 --tb=short -p no:cacheprovider tests/test_convfirst_c512.py
has bench && step bench 120 python3 -m cuda_kernels.bench_c512 --modes default --compile-sizes 7 \
  --out "$out/convfirst_c512_bench.json"
if has e2e; then
  wait "$others"; echo "== build_others: exit $? $(date +%T)" | tee -a "$log"
  step e2e_fused 120 env CUDA_KERNELS_C512=1 python3 cli.py bench convfirstnet_h200 --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_convfirstnet_h200_cuda_kernels_compiled_graphs.json"
  step e2e_inductor 120 python3 cli.py bench convfirstnet_h200 --backend inductor --freezing --cuda-graphs \
    --repeats 30 -o "$out/h200_convfirstnet_h200_inductor_freezing_graphs.json"
fi
grep -E "passed|failed|error|FAILED|fused|TFLOP|registers|spill|latency" "$log" | tail -40
