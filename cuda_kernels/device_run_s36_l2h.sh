#!/usr/bin/env bash
# D's L2 eviction priorities (session 36): the build with CUDA_KERNELS_BUILD_D_L2_HINTS=1 (kernel 1 stores D
# evict_last, project_v9s reads it evict_first; csrc/mbconv_ptx.cuh; the default build since s36 call 3) against the
# build with =0 (without them) in one device call:
# both extensions built, the chain of 2.1 / 3.0 / 3.1 / 4.1 under each (mbconv_chain: each kernel's share on one
# clock, L2 flushed before each call), and B0 end to end under each (b0_switches "as is", with fused_model's check
# before timing; two runs each, interleaved). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s36_l2h.sh OUTDIR
# Files: OUTDIR/log.txt, chain_0.json, chain_1.json, b0_0_a.json ... Last line L2H_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, build_mbconv
mbconv_begin L2H "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
build_mbconv build_nohints L2H CUDA_KERNELS_BUILD_D_L2_HINTS=0
for v in 0 1; do
  step "chain_$v" 40 env CUDA_KERNELS_BUILD_D_L2_HINTS=$v python3 -m cuda_kernels.mbconv_chain features.2.1 \
    features.3.0 features.3.1 features.4.1 -o "$out/chain_$v.json"
done
for run in a b; do
  for v in 0 1; do
    step "b0_${v}_$run" 90 env CUDA_KERNELS_BUILD_D_L2_HINTS=$v python3 -m cuda_kernels.b0_switches \
      -o "$out/b0_${v}_$run.json"
  done
done
grep -E "^== |^SWITCHES |^CHAIN |passed|failed|Error" "$log" | cut -c1-240 | tail -40
echo "L2H_OK=$ok"
