#!/usr/bin/env bash
# Every runtime switch of the SE and projection kernels (and two of kernel 1's) re-timed at B0's 3.1 and 4.1 under
# today's defaults: each was measured against the defaults of its own session, and kernel 1, the SE and the projections
# have changed around it since. One mbconv_bench run (fused and eager only: --budget-s 0) per switch, the defaults
# first and last. From the repository root (~5 minutes):
#   timeout 590 bash cuda_kernels/device_run_switch_sweep.sh OUTDIR
# SWEEP_BLOCKS (default "features.3.1 features.4.1") and SWEEP_SWITCHES (NAME=VALUE words; "default" = none) narrow it.
# Files: OUTDIR/log.txt, OUTDIR/sweep.tar.gz (one JSON a run: NN_<switch>.json). Last line SWEEP_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin SWEEP "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
default_switches="default CUDA_KERNELS_K1_IMAGES=2 CUDA_KERNELS_K1_BIAS_EARLY=0 CUDA_KERNELS_SE_V5_IMAGES=8
  CUDA_KERNELS_SE_V6=1 CUDA_KERNELS_SE_V5=0 CUDA_KERNELS_SE_V4=0 CUDA_KERNELS_SE_V3_PRE=0 CUDA_KERNELS_PROJ_V9_SX=1
  CUDA_KERNELS_PROJ_V9_RX=1 CUDA_KERNELS_PROJ_V9_BULK=1 CUDA_KERNELS_PROJ_WG_OPT=1 CUDA_KERNELS_PROJ_WG_OPT=2
  CUDA_KERNELS_PROJ_WG_OPT=3 CUDA_KERNELS_PROJ_WG_OPT=5 CUDA_KERNELS_PROJ_WG_OPT=73 CUDA_KERNELS_PROJ_WG_M128=1
  CUDA_KERNELS_PROJ_WG_SPLIT=1 default"
blocks=()
for b in ${SWEEP_BLOCKS:-features.3.1 features.4.1}; do blocks+=(--block "$b"); done
mkdir -p "$out/runs"
n=0
for s in ${SWEEP_SWITCHES:-$default_switches}; do
  n=$((n + 1))
  name=$(printf "%02d_%s" "$n" "${s#CUDA_KERNELS_}")
  env_args=()
  [ "$s" = default ] || env_args=("$s")
  step "$name" 60 env "${env_args[@]}" python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 --version 11 \
    "${blocks[@]}" --out "$out/runs/$name.json"
done
tar -czf "$out/sweep.tar.gz" -C "$out/runs" . && rm -rf "$out/runs"
grep -E "^== .*exit|^features\.|Error" "$log" | cut -c1-200 | tail -60
echo "SWEEP_OK=$ok"
