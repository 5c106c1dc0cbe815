#!/usr/bin/env bash
# One device call for the MBConv kernels, from the repository root on a CUDA machine:
#   bash cuda_kernels/mbconv_device_run.sh OUTDIR [BENCH ARGS...]
# build (own extension dir, kept on a warm machine), the CUDA tests of tests/test_mbconv_kernels.py,
# then python -m cuda_kernels.mbconv_bench --out OUTDIR/mbconv_b0_h200.json BENCH ARGS.
# Everything is logged to OUTDIR/log.txt; each step has its own time limit (MBCONV_LIMITS).
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext" MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0
read -r build_s tests_s bench_s <<< "${MBCONV_LIMITS:-150 100 120}"
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  echo "== $name: exit $? $(date +%T)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build "$build_s" python3 -c "from cuda_kernels._build import load_mbconv_extension as l; l(); print('built')"
step tests "$tests_s" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_kernels.py
step bench "$bench_s" python3 -m cuda_kernels.mbconv_bench --out "$out/mbconv_b0_h200.json" "$@"
tail -n 40 "$log"
