#!/usr/bin/env bash
# SE version 5 at 4 images a cluster (the default since s35 call 4; CUDA_KERNELS_SE_V5_IMAGES=8 the former) in one
# device call: its GPU tests (bit for bit the 8-image kernel, float64), the chain of B0's 6.1 and 4.1 under 8 and 4
# images (mbconv_chain: each kernel's share of the block on one clock, L2 flushed), and B0 end to end (b0_switches:
# one process, interleaved). From the repository root:
#   timeout 400 bash cuda_kernels/device_run_s35_se_images.sh OUTDIR
# Files: OUTDIR/log.txt, switches.json, chain_8.json, chain_4.json. Last line SEIMG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin SEIMG "${BUDGET_S:-380}"
step tests 90 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v5.py -k four_images \
  || ok=0
for v in 8 4; do
  step "chain_$v" 40 env CUDA_KERNELS_SE_V5_IMAGES=$v python3 -m cuda_kernels.mbconv_chain features.6.1 features.4.1 \
    -o "$out/chain_$v.json" || ok=0
done
# (s35 call 4 ran CUDA_KERNELS_SE_V5_IMAGES=4 against 8, the default then; "as is" is 4 since)
step switches 120 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_SE_V5_IMAGES=8 -o "$out/switches.json" || ok=0
grep -E "^== |^SWITCHES |^CHAIN |passed|failed" "$log" | cut -c1-220 | tail -40
echo "SEIMG_OK=$ok"
