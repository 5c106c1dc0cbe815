#!/usr/bin/env bash
# Session 32: the SE inside the projection (CUDA_KERNELS_PROJ_SE=1, csrc/mbconv_proj_se.cuh; call 2 also timed the
# ldmatrix form, =2, since removed) in one device call: its GPU tests, EfficientNet-B0 end to end with the switch off
# and on (b0_switches: one process, interleaved), the fused blocks of stages 2-3 per setting, twice, interleaved
# (mbconv_bench beside eager, no torch.compile: --budget-s 0), and Nsight Compute (L2 flushed) of the SE and
# projection kernels at 2.1 and 3.1 per setting. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s32_proj_se.sh OUTDIR
# Files: OUTDIR/log.txt, switches.json, blocks_{0,1}{a,b}.json, ps_*.csv. Last line PROJ_SE_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, kernel_ncu
mbconv_begin PROJ_SE "${BUDGET_S:-560}"
step tests 200 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_se.py
step switches 150 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_SE=1 -o "$out/switches.json"
for run in a b; do
  for v in 0 1; do
    step "blocks_$v$run" 70 env CUDA_KERNELS_PROJ_SE=$v python3 -m cuda_kernels.mbconv_bench \
      --out "$out/blocks_$v$run.json" --budget-s 0 --repeats 20 --version 11 --block features.2.0 \
      --block features.2.1 --block features.3.0 --block features.3.1
  done
done
for v in 0 1; do kernel_ncu "$out" PS "project|se_v3" "CUDA_KERNELS_PROJ_SE=$v" features.2.1 features.3.1; done
grep -E "^== |^SWITCHES |^PS |passed|failed" "$log" | tail -40
echo "PROJ_SE_OK=$ok"
