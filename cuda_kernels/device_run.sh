#!/usr/bin/env bash
# One device call's work, on a CUDA machine from the repository root:
#   bash cuda_kernels/device_run.sh OUTDIR [steps...]
# Steps (default: network tests r50 cfeager cfinductor, in the order given; each under its own
# time limit, later steps run even if an earlier one fails):
#   network     ConvFirstNet-S end to end on the fused kernels, per-kernel rows + profiler trace
#   tests       the CUDA tests (tests/test_cuda_kernels.py, the bench end to end included)
#   r50         ResNet-50 eager with per-kernel rows (attribution on a library-only model)
#   cfeager     ConvFirstNet-S eager with per-kernel rows
#   cfinductor  ConvFirstNet-S under torch.compile (default mode) with per-kernel rows
#   bench       the kernel benchmark, one process per case -> OUTDIR/cuda_kernels_h200.json
#   lwidths     ConvFirstNet-L's widths (CUDA_KERNELS_L_WIDTHS, off by default): the stride-2 extension
#               built beside this one, the GPU tests of tests/test_l_widths.py, then per block (batch 128,
#               alpha 6) the kernels vs eager and torch.compile: stride-1 C = 96 56x56 and 192 28x28
#               -> OUTDIR/l_widths_stride1.json, stride-2 96 -> 192 and 192 -> 384 -> l_widths_stride2.json
# Every step's output goes to OUTDIR/log.txt beside the JSON files (the device tool brings
# back at most 8 files, also when the call is stopped at its limit).
set -uo pipefail
out=${1:?output folder}; shift
steps=${*:-network tests r50 cfeager cfinductor}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
run() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T)"
  echo "== $name: $*" >> "$log"
  timeout "$limit" "$@" > "$out/step.log" 2>&1
  local rc=$?
  cat "$out/step.log" >> "$log"; echo "== $name: exit $rc $(date +%T)" | tee -a "$log"
  tail -n 8 "$out/step.log"; rm -f "$out/step.log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$log" 2>&1
case " $steps " in *" lwidths "*)  # the stride-2 extension builds beside the block-fusion one
  timeout 240 python3 -c "from cuda_kernels._build import load_convfirst_s2_extension as l; l(); print('s2 built')" \
    > "$out/build_s2.log" 2>&1 & s2build=$! ;; esac
run build 300 python3 -c "from cuda_kernels._build import load_extension as l; m = l(); print('built, wgmma:', m.has_wgmma)"
bench="python3 cli.py bench convfirstnet_s --repeats 30 --per-kernel"
for step in $steps; do
  case $step in
    network) run network 150 $bench --backend cuda_kernels --trace "$out/convfirstnet_s_cuda_kernels_trace.json.gz" \
               -o "$out/h200_convfirstnet_s_cuda_kernels_kernels.json" ;;
    tests) run tests 240 python3 -m pytest -q -x tests/test_cuda_kernels.py ;;
    r50) run r50 90 python3 cli.py bench resnet50 --per-kernel --repeats 30 -o "$out/h200_resnet50_eager_kernels.json" ;;
    cfeager) run cfeager 60 $bench -o "$out/h200_convfirstnet_s_eager_kernels.json" ;;
    cfinductor) run cfinductor 150 $bench --backend inductor -o "$out/h200_convfirstnet_s_inductor_kernels.json" ;;
    bench) run bench 420 python3 -m cuda_kernels.bench --isolate --out "$out/cuda_kernels_h200.json" ;;
    lwidths) wait "${s2build:-}"; echo "== build_s2: exit $?" | tee -a "$log"; cat "$out/build_s2.log" >> "$log"
      run ltests 150 python3 -m pytest -q -p no:cacheprovider -m cuda --maxfail=10 --tb=short tests/test_l_widths.py
      run lbench 100 python3 -m cuda_kernels.bench --l-widths --warmup 5 --repeats 20 --out "$out/l_widths_stride1.json"
      run lbench_s2 100 python3 -m cuda_kernels.bench_s2 --l-widths --modes default --warmup 5 --repeats 20 \
        --out "$out/l_widths_stride2.json" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
