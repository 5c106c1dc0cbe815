#!/usr/bin/env bash
# H200 call of 2026-11-30 (session 5), from the repository root:
#   bash examples/measurements/h200_call_2026-11-30d.sh OUTDIR
# 1. Nsight Compute on torch.compile'd EfficientNet-B0, ConvNeXt-T and ViT-B/16 (no flush):
#    the inductor plan's kernel counts and bytes (fidelity/ncu_h200.sh compiled)
# 2. EfficientNet-B0 and -B2 under torch.compile with every kernel's time (--per-kernel): where
#    the calibrated estimate falls short
# Files: OUTDIR/fidelity.tar.gz, OUTDIR/runs.tar.gz, OUTDIR/log*.txt.
set -uo pipefail
out=${1:?output folder}
export PYTHONUNBUFFERED=1 PYTHONPATH=.
COMPILED_MODELS="efficientnet_b0 convnext_tiny vit_b_16" COMPILED_MODES=none \
  timeout 400 bash examples/measurements/fidelity/ncu_h200.sh "$out" compiled
runs="$out/runs"; mkdir -p "$runs"
for m in efficientnet_b0 efficientnet_b2; do
  timeout 90 python3 cli.py bench $m --backend inductor --repeats 20 --per-kernel \
    -o "$runs/h200_${m}_inductor_kernels.json" >> "$out/log_kernels.txt" 2>&1
  echo "== $m per-kernel: exit $? $(date +%T)" | tee -a "$out/log_kernels.txt"
  tar -czf "$out/runs.tar.gz" -C "$out" runs
done
