#!/usr/bin/env bash
# Session 12's last call: project_v10 with the SE scale in fp16 (HMUL2), under the "auto" and "late" rules, and the
# GPU tests of every MBConv file under the final defaults. From the repository root (~7 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_s12_final.sh OUTDIR
# build -> EfficientNet-B0 end to end (auto, late, torch.compile freezing; CUDA graphs) -> per-block bench of B0's
# blocks past stage 4 (auto, late) -> the GPU tests (test_mbconv_v10, v9, v8, kernels, pdl) with the time left.
# BUDGET_S (default 480) caps the whole script. Last line FINAL_OK=1|0 (1: the tests ran and passed).
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin FINAL ${BUDGET_S:-480}  # the folder, the environment, `left`, ok=1, the build
for m in auto late; do
  step "e2e_$m" 50 env CUDA_KERNELS_PROJ_V10=$m python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
    --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_v10_$m.json"
done
step e2e_inductor 60 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
for m in auto late; do
  step "bench_$m" 30 env CUDA_KERNELS_PROJ_V10=$m python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 \
    --block features.5.0 --block features.5.1 --block features.6.0 --block features.6.1 --block features.7.0 \
    --out "$out/blocks_$m.json" --version 9
done
python3 -m cuda_kernels.bench_lines FIN "$out" --kernels project,se_v3,expand 2>> "$log" | tee -a "$log"  # bench_lines.py
step tests 400 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_v10.py \
  tests/test_mbconv_v9.py tests/test_mbconv_v8.py tests/test_pdl.py tests/test_mbconv_kernels.py
rc=$?
[ $rc -eq 0 ] || ok=0
grep -E "^== |passed|failed|Error|error:" "$log" | tail -16
echo "FINAL_OK=$ok"
