#!/usr/bin/env bash
# The issue's per-block table in one run: the stride-1 blocks of EfficientNet-B0's stages 2-6 on the fused kernels
# (MBConv version 11, the default) against eager and torch.compile default and max-autotune-no-cudagraphs (freezing,
# CUDA graphs for every backend). Session 15's table (mbconv/s15/call2) ran out of its 110 s compile budget after 4.1's
# default; this call gives the baselines the whole call, with Inductor's autotuning timings carried from the autotune
# calls where there are any (device_run_b0_autotune.sh; `carry: [".inductor_cache"]`: the blocks' SE addmms and 1x1
# convolutions are the network's). From the repository root (~9 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_blocks.sh OUTDIR
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin BLOCKS 575
export TORCHINDUCTOR_CACHE_DIR="$PWD/.inductor_cache"
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
step blocks 520 python3 -m cuda_kernels.mbconv_bench --budget-s 460 --compile-mode default \
  --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 --block features.3.1 \
  --block features.4.1 --block features.5.1 --block features.6.1 --version 11 --out "$out/blocks.json"
python3 -m cuda_kernels.bench_lines BLOCKS "$out" 2>> "$log" | tee -a "$log"
echo "BLOCKS_OK=$ok"
