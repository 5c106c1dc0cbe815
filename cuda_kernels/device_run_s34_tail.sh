#!/usr/bin/env bash
# Session 34, call 3 (NOTES.md "Session 34"): the fused image's tail reorganised (the first tile's D in flight during
# the SE, a ring of D blocks across tiles, the SE's weights prefetched into L1, the shortcut loaded two blocks early):
# its GPU tests, blocks 3.1 / 4.1 under 0 / 1 twice interleaved, the chain under 1 and 3, B0 under 1, and Nsight
# Compute's per-instruction profile of the fused kernel at 4.1 and 3.1. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s34_tail.sh OUTDIR
# Files: OUTDIR/log.txt, switches.json, tail.tgz (blocks, chains), ncu/ncu_mbconv_k1.tar.gz. Last line TAIL_OK=1|0.
# (RUNS="a": the blocks once; NCU=0: no profile; CHAINS="1": the chain under mode 1 only - call 4's short form.)
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin TAIL "${BUDGET_S:-570}"
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_fused_image.py || ok=0
for run in ${RUNS:-a b}; do
  for v in 0 1; do
    step "blocks_$v$run" 60 env CUDA_KERNELS_FUSED_IMAGE=$v python3 -m cuda_kernels.mbconv_bench \
      --out "$out/blocks_$v$run.json" --budget-s 0 --repeats 20 --version 11 --block features.3.1 \
      --block features.4.1 || ok=0
  done
done
for v in ${CHAINS:-1 3}; do
  step "chain_$v" 40 env CUDA_KERNELS_FUSED_IMAGE=$v python3 -m cuda_kernels.mbconv_chain features.3.1 features.4.1 \
    -o "$out/chain_$v.json" || ok=0
done
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_FUSED_IMAGE=1 -o "$out/switches.json" || ok=0
(cd "$out" && tar -czf tail.tgz blocks_*.json chain_*.json 2>/dev/null && rm -f blocks_*.json chain_*.json)
[ "${NCU:-1}" = 1 ] && step ncu 200 env CUDA_KERNELS_FUSED_IMAGE=1 REGEX=_fi BLOCKS="features.4.1 features.3.1" VERSION=11 \
  bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/ncu" || ok=0
[ "${NCU:-1}" = 1 ] && for b in 4.1 3.1; do
  python3 -m cuda_kernels.sass_mix "$b fused" "$out/ncu/source_features.$b.csv" --lines 20 --regions 0x1000 \
    >> "$log" 2>&1
done
[ "${NCU:-1}" = 1 ] && (cd "$out/ncu" && rm -f ./*.csv ./*.ncu-rep)
grep -E "^== |^SWITCHES |^CHAIN |passed|failed|features\.[34]\.1 |fused|^ " "$log" | cut -c1-220 | tail -90
echo "TAIL_OK=$ok"
