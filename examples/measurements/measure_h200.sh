#!/usr/bin/env bash
# The command that produced the h200_*.json files here, run on the lent H200 from the
# repository root (perfmodel's dependencies are in that machine's image):
#   bash examples/measurements/measure_h200.sh OUTDIR
# Whole-model latency, batch 128 float16 channels-last at each model's native resolution,
# eager and inductor for every model; per-kernel eager data
# for ResNet-50, ConvNeXt-T and EfficientNet-B0.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
pm() { PYTHONPATH=. python3 cli.py "$@"; }
eager=(resnet50 resnet101 resnext101_32x8d mobilenet_v2 convnext_tiny convnext_small
       convnext_base efficientnet_b0 efficientnet_b2 efficientnet_b4 efficientnet_b5)
for m in "${eager[@]}"; do
  pm bench "$m" --backend eager --repeats 30 -o "$out/h200_${m}_eager.json"
done
for m in resnet50 convnext_tiny efficientnet_b0; do
  pm bench "$m" --backend eager --per-kernel --ncu --repeats 20 -o "$out/h200_${m}_eager_kernels.json"
done
# (the inductor files of EfficientNet-B2/B4, ConvNeXt-B and ResNeXt-101 came from a later
# session: INDUCTOR="efficientnet_b2 efficientnet_b4 convnext_base resnext101_32x8d")
for m in ${INDUCTOR:-${eager[@]}}; do
  pm bench "$m" --backend inductor --repeats 30 -o "$out/h200_${m}_inductor.json"
done
# ConvFirstNet-S (random weights, so no accuracy: kept out of the gap plots' globs) with its
# stride-1 ConvFirst blocks on the block-fusion kernels, and in eager. (The committed
# cuda_kernels file predates the per-block output check: its `fusion` records the logits'
# difference instead, 0.0 after the classifier's pooling; tests/test_cuda_kernels.py has the
# per-block check.)
mkdir -p "$out/convfirstnet"
for b in cuda_kernels eager; do
  pm bench convfirstnet_s --backend "$b" --repeats 20 -o "$out/convfirstnet/h200_convfirstnet_s_$b.json"
done
