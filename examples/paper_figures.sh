#!/usr/bin/env bash
# Regenerate every figure into one folder, on a CPU-only machine:
#   bash examples/paper_figures.sh [OUTDIR]      (default: figures/)
set -euo pipefail
out=${1:-figures}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)

# Figure 2(e): operational intensity of conv layer types against channels
perfmodel intensity --channels 8:1024 --mark a5000-paper --mark h200-sxm -o "$out/fig2e_intensity.png"
# Figure 3: waterline of the baselines on the paper's A5000
perfmodel waterline resnet101 convnext_small efficientnet_b5 -o "$out/fig3_waterline.png"
# Figure 4: C_max against processor op:byte, waterline vs mediant roofline
perfmodel sweep resnet101 convnext_small convnext_tiny efficientnet_b0 efficientnet_b5 \
  --opbyte 10:2000 -o "$out/fig4_sweep.png"
# ConvFirstNet (block plan) beside ConvNeXt and EfficientNet (layer plan)
perfmodel sweep convfirstnet_s convfirstnet_h200 convnext_tiny convnext_small efficientnet_b0 \
  efficientnet_b5 --opbyte 10:2000 -o "$out/sweep_convfirstnet.png"
# Roofline with the kernels of ResNet-50, and Amdahl's roofline on the H200
perfmodel roofline resnet50 -o "$out/roofline_resnet50.png"
perfmodel amdahl resnet50 convnext_tiny efficientnet_b0 efficientnet_b5 -H h200-sxm \
  --fuse-to 400 -o "$out/amdahl_h200.png"
# Figure 1: the efficiency gap on the H200, from committed measurements, per backend
shopt -s nullglob
for backend in eager inductor; do
  files=("$here"/measurements/h200_*[a-z0-9]_"$backend".json)
  if (( ${#files[@]} )); then
    perfmodel gap "${files[@]}" -H h200-sxm -o "$out/gap_h200_$backend.png"
  fi
done
# ConvFirstNets end to end (untrained, so latency against GMACs: panel e), the four of one run (run9: the H200 network's
# first fused and first torch.compile run of its alternated sequence)
e2e=$here/measurements/convfirstnet_e2e/run9
perfmodel gap "$e2e"/h200_convfirstnet_{s,m,l}_*.json "$e2e"/h200_convfirstnet_h200_{fused,compile}_1.json \
  -H h200-sxm -o "$out/gap_h200_convfirstnet.png"
# EfficientNet-B0 on the fused MBConv kernels, stem and head (version 11, the stem inside block 1.0's kernel, kernel 1's
# depthwise and epilogue in packed fp16, its X by the tensor memory accelerator and its expand on wgmma from stage 4,
# the SE on clusters of 4 images, the early projections with the SE scale staged beside D, the later ones on wgmma; the
# head's pool fused; the rest compiled; kernel 1 compiled for B0's shapes) beside every Inductor run, with both
# torch.compile modes (freezing, CUDA graphs) from the same call (mbconv/s39/call1/: fused 1.259 ms, default 3.129,
# max-autotune-no-cudagraphs 3.037), and EfficientNet-B2 fused beside both torch.compile modes from one call
# (mbconv/s40/call1/b2/, its files named b0_* by the script: fused 3.738 ms, default 7.408, max-autotune 7.273)
b0=$here/measurements/mbconv/s39/call1/auto
b2=$here/measurements/mbconv/s40/call1/b2
perfmodel gap "$here"/measurements/h200_*[a-z0-9]_inductor.json "$b0"/b0_fused.json \
  "$b0"/b0_inductor.json "$b0"/b0_inductor_max_autotune.json "$b2"/b0_fused.json "$b2"/b0_inductor.json \
  "$b2"/b0_inductor_max_autotune.json \
  -H h200-sxm -o "$out/gap_h200_fused.png"
# Predicted against measured, per module (eager, with Nsight Compute bytes)
for m in resnet50 convnext_tiny efficientnet_b0; do
  f="$here/measurements/h200_${m}_eager_kernels.json"
  [[ -f $f ]] && perfmodel compare "$m" "$f" -o "$out/compare_${m}_h200.png" > /dev/null
done
# The block-fusion CUDA kernels beside the block- and layer-plan bounds
if [[ -f $here/measurements/cuda_kernels_h200.json ]]; then
  networks=()  # ConvFirstNets end to end; each folder is one call (fused and torch.compile)
  for f in "$here"/measurements/convfirstnet_e2e/run{2,3,4,5,6,7,8,9}/h200_convfirstnet_*.json \
           "$here"/measurements/convfirst_c{512,256}/h200_convfirstnet_*.json; do
    networks+=(--network "$f")
  done
  perfmodel kernels "$here/measurements/cuda_kernels_h200.json" "${networks[@]}" \
    -o "$out/kernels_h200.png" > /dev/null
fi
# EfficientNet-B0's MBConv blocks (2.1 / 3.1 / 4.1) on the fused kernels beside their block- and layer-plan bounds,
# torch.compile's better mode and eager, CUDA-graph medians of one call (mbconv/s39/call1)
perfmodel kernels "$here/measurements/mbconv/s39/call1/blocks.json" -o "$out/kernels_h200_mbconv.png" > /dev/null
# ConvFirstNet-H200's units from one run (its per-block table, CUDA-graph timed) beside the network end to end
table=$here/measurements/convfirstnet_table/v8/networks_table.json
if [[ -f $table ]]; then
  perfmodel kernels "$table" --network "$e2e"/h200_convfirstnet_h200_fused_1.json \
    --network "$e2e"/h200_convfirstnet_h200_compile_1.json \
    -o "$out/kernels_h200_network_table.png" > /dev/null
fi
# Tensor-machine diagrams (paper Figures 5 and 7)
for p in convfirst_layer convfirst_fused convfirst_split mbconv_two_pass; do
  perfmodel machine "$p" -o "$out/machine_$p.png" > /dev/null
done
echo "figures in $out/"
