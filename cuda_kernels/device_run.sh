#!/usr/bin/env bash
# One device call's work for the block-fusion kernels, on a CUDA machine from the repository
# root:  bash cuda_kernels/device_run.sh OUTDIR [steps...]
# Steps (default: all, in this order; each under its own time limit, later steps run even if
# an earlier one fails):
#   tests    the CUDA correctness tests (tests/test_cuda_kernels.py)
#   bench    the full benchmark, one process per case -> OUTDIR/cuda_kernels_h200.json
#   stalls   Nsight Compute source-level stall sampling of the C=64 a4 56x56 FFN (wgmma)
#   network  ConvFirstNet-S end to end on the kernels with per-kernel times
# Everything ends up in OUTDIR/logs.tar.gz plus the JSON files (few files: the device tool
# brings back at most 8).
set -uo pipefail
out=${1:?output folder}; shift
steps=${*:-tests bench stalls network}
mkdir -p "$out/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" > "$out/logs/$name.log" 2>&1
  echo "== $name: exit $?"; tail -n 12 "$out/logs/$name.log"
}
python3 -c "from cuda_kernels._build import load_extension as l; m = l(); print('built, wgmma:', m.has_wgmma)" \
  > "$out/logs/build.log" 2>&1 || { cat "$out/logs/build.log"; exit 1; }
for step in $steps; do
  case $step in
    tests) run tests 300 python3 -m pytest -q tests/test_cuda_kernels.py ;;
    bench) run bench 420 python3 -m cuda_kernels.bench --isolate --out "$out/cuda_kernels_h200.json" ;;
    stalls) run stalls 240 ncu --clock-control none -k regex:ffn_wgmma --set full --import-source yes \
              -o "$out/logs/ffn_c64_stalls" -f python3 -m cuda_kernels.profile ffn:64:4:56 ;;
    network) run network 300 python3 cli.py bench convfirstnet_s --backend cuda_kernels --per-kernel \
               --repeats 20 -o "$out/h200_convfirstnet_s_cuda_kernels_kernels.json" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
