#!/usr/bin/env bash
# MBConv version 10 as the default (version 9 with kernel 1's 2-image items and HFMA2 depthwise on). From the
# repository root (~7 minutes on one H200):
#   timeout 470 bash cuda_kernels/device_run_mbconv_v10.sh OUTDIR
# build -> the MBConv GPU suite under the defaults (test_mbconv_kernels at version 10, hfma2, v10, pdl) -> B0 end to
# end: version 10, version 9, torch.compile default (freezing, CUDA graphs) -> per block (CUDA graphs): stages 2-4's
# stride-1 blocks and 6.1 with versions 9 and 10 and torch.compile default. Last line V10_OK=1|0 (1: tests passed).
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin V10 455
step tests 170 env MBCONV_TEST_VERSIONS=10 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider \
  tests/test_mbconv_kernels.py tests/test_mbconv_hfma2.py tests/test_mbconv_v10.py tests/test_pdl.py || ok=0
step e2e_v10 60 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend cuda_kernels --compile-rest \
  --freezing --cuda-graphs -o "$out/b0_v10.json"
step e2e_v9 60 env CUDA_KERNELS_MBCONV_VERSION=9 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
  --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_v9.json"
step e2e_inductor 80 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
step blocks 120 python3 -m cuda_kernels.mbconv_bench --budget-s 90 --compile-mode default --repeats 20 \
  --block features.2.1 --block features.3.1 --block features.4.1 --block features.4.2 --block features.6.1 \
  --out "$out/blocks.json" --version 9 --version 10
python3 -m cuda_kernels.bench_lines V10 "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "V10_OK=$ok"
