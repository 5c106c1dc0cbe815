#!/usr/bin/env bash
# The fused image (CUDA_KERNELS_FUSED_IMAGE, NOTES.md "Session 34") in one device call: its GPU tests, blocks 3.1 /
# 4.1 under 0 and each of MODES (twice, interleaved: mbconv_bench beside eager, --budget-s 0), the kernels on one
# clock under each of CHAINS (mbconv_chain; 3 = the items alone), B0 under each of MODES (b0_switches: one process,
# interleaved), and Nsight Compute's per-instruction profile of the fused kernel at 4.1 and 3.1 under NCU_MODE.
# Session 34's call 3 ran it with MODES="1" CHAINS="1 3" NCU_MODE=1, session 35's call 1 with MODES="1 4" CHAINS="1 4 3"
# NCU_MODE=4 (mode 4 since removed). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s34_tail.sh OUTDIR
# (MODES="1 5" CHAINS="1 5 3" NCU_MODE=5 BLOCKS="features.4.1 features.4.2" NCU_BLOCKS="4.1" unless set; RUNS="a":
# the blocks once; NCU_MODE=0: no profile.)
# Files: OUTDIR/log.txt, switches.json, tail.tgz (blocks, chains), ncu/ncu_mbconv_k1.tar.gz. Last line TAIL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin TAIL "${BUDGET_S:-570}"
modes=${MODES:-1 5} ncu_mode=${NCU_MODE:-5} blocks=${BLOCKS:-features.4.1 features.4.2} ncu_blocks=${NCU_BLOCKS:-4.1}
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_fused_image.py || ok=0
for run in ${RUNS:-a b}; do
  for v in 0 $modes; do
    # shellcheck disable=SC2046  # (one --block a block)
    step "blocks_$v$run" 60 env CUDA_KERNELS_FUSED_IMAGE=$v python3 -m cuda_kernels.mbconv_bench \
      --out "$out/blocks_$v$run.json" --budget-s 0 --repeats 20 --version 11 $(printf -- '--block %s ' $blocks) || ok=0
  done
done
for v in ${CHAINS:-1 5 3}; do
  # shellcheck disable=SC2086  # (the blocks as words)
  step "chain_$v" 40 env CUDA_KERNELS_FUSED_IMAGE=$v python3 -m cuda_kernels.mbconv_chain $blocks \
    -o "$out/chain_$v.json" || ok=0
done
# shellcheck disable=SC2046  # (one word per mode)
step switches 150 python3 -m cuda_kernels.b0_switches $(printf 'CUDA_KERNELS_FUSED_IMAGE=%s ' $modes) \
  -o "$out/switches.json" || ok=0
(cd "$out" && tar -czf tail.tgz blocks_*.json chain_*.json 2>/dev/null && rm -f blocks_*.json chain_*.json)
if [ "$ncu_mode" != 0 ]; then
  step ncu 200 env CUDA_KERNELS_FUSED_IMAGE="$ncu_mode" REGEX=_fi BLOCKS="$(printf 'features.%s ' $ncu_blocks)" \
    VERSION=11 bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/ncu" || ok=0
  for b in $ncu_blocks; do
    python3 -m cuda_kernels.sass_mix "$b fused" "$out/ncu/source_features.$b.csv" --lines 20 --regions 0x1000 \
      >> "$log" 2>&1
  done
  (cd "$out/ncu" && rm -f ./*.csv ./*.ncu-rep)
fi
grep -E "^== |^SWITCHES |^CHAIN |passed|failed|features\.[34]\.[12] |fused|^ " "$log" | cut -c1-220 | tail -90
echo "TAIL_OK=$ok"
