#!/usr/bin/env bash
# One device call for the stride-2 ConvFirst kernel, from the repository root:
#   bash cuda_kernels/device_run_s2.sh OUTDIR [MODES]
# builds both extensions side by side, runs tests/test_convfirst_s2.py, the kernel benchmark
# (cuda_kernels.bench_s2: the ConvFirstNet-S shapes with eager and torch.compile in MODES,
# default "default"; then the M/H200 shapes, kernel and eager only) and ConvFirstNet-S end to
# end on the fused kernels. Each step has its own time limit; logs and JSON go to OUTDIR.
set -uo pipefail
out=${1:?output folder}; modes=${2-default}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  echo "== $name: exit $? $(date +%T)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build_s2 90 python3 -c "from cuda_kernels._build import load_convfirst_s2_extension as l; l()"
# the block-fusion extension (for the network) builds on the CPUs while the tests use the GPU
timeout 150 python3 -c "from cuda_kernels._build import load_extension as l; l()" > "$out/build_bf.log" 2>&1 &
bf=$!
step tests 55 python3 -m pytest -q --maxfail=8 --tb=short -p no:cacheprovider tests/test_convfirst_s2.py
echo "== waiting for the block-fusion build $(date +%T)" | tee -a "$log"
wait $bf; echo "== build_bf: exit $? $(date +%T)" | tee -a "$log"
cat "$out/build_bf.log" >> "$log"
step network 45 python3 cli.py bench convfirstnet_s --backend cuda_kernels --repeats 30 \
  -o "$out/h200_convfirstnet_s_cuda_kernels.json"
step bench_s 60 python3 -m cuda_kernels.bench_s2 --modes "$modes" --out "$out/convfirst_s2_bench.json"
step bench_wide 30 python3 -m cuda_kernels.bench_s2 --modes "" --case 64:6:56 --case 128:6:28 --case 64:4:56 \
  --case 128:4:28 --out "$out/convfirst_s2_bench_wide.json"
grep -E "passed|failed|error|FAILED|fused|x[0-9]" "$log" | tail -40
