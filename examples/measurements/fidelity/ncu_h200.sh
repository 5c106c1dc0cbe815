#!/usr/bin/env bash
# The command that produced the files in this folder, run on the lent H200 from the
# repository root:   bash examples/measurements/fidelity/ncu_h200.sh OUTDIR [steps...]
# Steps (default: probe eager compiled):
#   probe     the L2 probe (python -m perfmodel.ncu --probe-file) in both cache modes
#   eager     Nsight Compute rows for five models in eager, --ncu-cache-control none and all
#   compiled  the same for four of them under torch.compile (default mode; Inductor's caches
#             are warmed first, four compiles in parallel, so the profiled run loads them)
# EAGER_MODELS, COMPILED_MODELS and COMPILED_MODES narrow a run (the second H200 call of
# 2026-11-30 ran COMPILED_MODELS="efficientnet_b0 convnext_tiny vit_b_16" COMPILED_MODES=none
# with the steps probe compiled). Batch 128, float16, channels-last. Everything lands in OUTDIR/fidelity.tar.gz (the device
# tool brings back at most 8 files) and OUTDIR/log.txt.
set -uo pipefail
out=${1:?output folder}; shift
steps=${*:-probe eager compiled}
work="$out/fidelity"; mkdir -p "$work"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
pack() { tar -czf "$out/fidelity.tar.gz" -C "$out" fidelity; }
step() {  # seconds, command...
  local limit=$1; shift
  echo "== $* $(date +%T)" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1; echo "== exit $? $(date +%T)" | tee -a "$log"
  pack
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
eager_models=${EAGER_MODELS:-resnet50 efficientnet_b0 convnext_tiny mobilenet_v2 vit_b_16}
compiled_models=${COMPILED_MODELS:-resnet50 efficientnet_b0 convnext_tiny vit_b_16}
compiled_modes=${COMPILED_MODES:-none all}
for s in $steps; do
  case $s in
    probe) for mode in none all; do
             step 60 python3 -m perfmodel.ncu --probe-file "$work/l2_probe_h200_$mode.json" $mode
           done ;;
    eager) for mode in none all; do for m in $eager_models; do
             step 120 python3 cli.py bench "$m" --repeats 20 --ncu --ncu-cache-control $mode \
               -o "$work/h200_${m}_eager_ncu_$mode.json"
           done; done ;;
    compiled)
      pids=""; for m in $compiled_models; do  # warm Inductor's on-disk caches, in parallel
        timeout 240 python3 -c "
import torch, perfmodel
from perfmodel.harness import build_cuda_model, compiled_runner, example_input
spec = perfmodel.load_spec('$m'); torch.backends.cudnn.benchmark = True
run = compiled_runner(build_cuda_model(spec))
with torch.inference_mode(): run(*[example_input(x) for x in spec.input_metas])
print('warmed $m')" >> "$log" 2>&1 & pids="$pids $!"; done; wait $pids
      for mode in $compiled_modes; do for m in $compiled_models; do
        step 150 python3 cli.py bench "$m" --backend inductor --repeats 20 --ncu \
          --ncu-cache-control $mode -o "$work/h200_${m}_inductor_ncu_$mode.json"
      done; done ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
ls -la "$work" >> "$log"
