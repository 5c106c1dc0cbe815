#!/usr/bin/env bash
# Session 33 (NOTES.md "Current state", its prediction there): the wgmma projection's options 41 (the tile's shortcut
# loaded before its chunk loop) and 57 (41 with 4 stages where three CTAs still fit an SM: bn <= 80) against the
# default 9, in one device call: their GPU tests (bit for bit option 0, odd sizes), EfficientNet-B0 end to end under
# each (b0_switches: one process, interleaved), the fused blocks 4.0-4.2 and 5.1 per option, twice, interleaved
# (mbconv_bench beside eager: --budget-s 0), Nsight Compute (L2 flushed) of the projections at 4.1 and 5.1 per
# option, and the per-instruction profile of 4.1's projection under 57 (L2 not flushed). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s33_wg_early.sh OUTDIR
# Files: OUTDIR/log.txt, switches.json, wg_early.tgz (blocks_*.json, proj_*.csv), src/ncu_mbconv_k1.tar.gz.
# Last line WG_EARLY_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, proj_ncu
mbconv_begin WG_EARLY "${BUDGET_S:-560}"
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py \
  -k "41 or 57 or default" || ok=0
step switches 150 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_WG_OPT=41 CUDA_KERNELS_PROJ_WG_OPT=57 \
  -o "$out/switches.json" || ok=0
for run in a b; do
  for v in 9 41 57; do
    step "blocks_$v$run" 60 env CUDA_KERNELS_PROJ_WG_OPT=$v python3 -m cuda_kernels.mbconv_bench \
      --out "$out/blocks_$v$run.json" --budget-s 0 --repeats 20 --version 11 --block features.4.0 \
      --block features.4.1 --block features.4.2 --block features.5.1 || ok=0
  done
done
for v in 9 41 57; do proj_ncu "$out" "CUDA_KERNELS_PROJ_WG_OPT=$v" features.4.1 features.5.1; done
(cd "$out" && tar -czf wg_early.tgz blocks_*.json proj_*.csv && rm -f blocks_*.json proj_*.csv)
step src 150 env CUDA_KERNELS_PROJ_WG_OPT=57 REGEX=project BLOCKS=features.4.1 VERSION=11 \
  bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/src" || ok=0
(cd "$out/src" && rm -f ./*.csv)  # (kept in ncu_mbconv_k1.tar.gz)
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -40
echo "WG_EARLY_OK=$ok"
