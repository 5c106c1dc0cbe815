#!/usr/bin/env bash
# Session 34 (NOTES.md "Current state", its prediction there): the whole block of one image in one CTA pair
# (CUDA_KERNELS_FUSED_IMAGE=1: the pair a cluster; 2: meeting through a count in global memory) at B0's 3.1, 4.1 and
# 4.2, in one device call: how many CTAs of kernel 1's size run at once in clusters of two (probe_cluster_occupancy),
# the GPU tests (float64, poisoned; B0's check before timing), the fused blocks under 0 / 1 / 2, twice, interleaved
# (mbconv_bench beside eager: --budget-s 0), the kernels of 3.1 / 4.1 on one clock (mbconv_chain; also under the
# diagnostic modes 3 / 4, which stop once the pair has met: kernel 1's items in this arrangement alone), and
# EfficientNet-B0 end to end under 1 and 2 (b0_switches: one process, interleaved). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s34_fused.sh OUTDIR
# Files: OUTDIR/log.txt, switches.json, fused.tgz (blocks_*.json, chain_*.json). Last line FUSED_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin FUSED "${BUDGET_S:-570}"
step probe 60 bash -c "nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
  cuda_kernels/probes/probe_cluster_occupancy.cu -o /tmp/probe_cluster && /tmp/probe_cluster" || ok=0
step tests 170 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_fused_image.py || ok=0
for run in a b; do
  for v in 0 1 2; do
    step "blocks_$v$run" 60 env CUDA_KERNELS_FUSED_IMAGE=$v python3 -m cuda_kernels.mbconv_bench \
      --out "$out/blocks_$v$run.json" --budget-s 0 --repeats 20 --version 11 --block features.3.1 \
      --block features.4.1 || ok=0
  done
done
for v in 1 2 3 4; do  # (3 / 4: items only, the pair met: a diagnostic)
  step "chain_$v" 40 env CUDA_KERNELS_FUSED_IMAGE=$v python3 -m cuda_kernels.mbconv_chain features.3.1 features.4.1 \
    -o "$out/chain_$v.json" || ok=0
done
step switches 150 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_FUSED_IMAGE=1 CUDA_KERNELS_FUSED_IMAGE=2 \
  -o "$out/switches.json" || ok=0
(cd "$out" && tar -czf fused.tgz blocks_*.json chain_*.json 2>/dev/null && rm -f blocks_*.json chain_*.json)
grep -E "^== |^smem |^SWITCHES |^CHAIN |passed|failed|features\.[34]\.1 " "$log" | tail -60
echo "FUSED_OK=$ok"
