#!/usr/bin/env bash
# Session 23's last call, under its defaults (CUDA_KERNELS_K1_DH2 on in version 11: D's epilogue in packed fp16 and the
# TMA X / wgmma expand at 5.0-5.2): the kernel-1 GPU tests the new default touches and test_pdl; EfficientNet-B0
# against torch.compile default and max-autotune-no-cudagraphs in one run; then the per-block table at the issue's
# stage 2-4 blocks with the time left. From the repository root, with the autotuning timings unpacked (tar xzf
# examples/measurements/mbconv/s22/call3/autotune_timings.tgz -C .) and carry: [".inductor_cache"] (~9.5 minutes):
#   timeout 590 bash cuda_kernels/device_run_s23_final.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/auto/ (device_run_b0_autotune.sh's files), OUTDIR/blocks.json. Last line FINAL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin FINAL 580
step tests 110 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tma_x.py \
  tests/test_mbconv_k1_bias_c.py tests/test_pdl.py || ok=0
step dh2_tests 40 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_dh2.py \
  -k "efficientnet or stage_5" || ok=0
AUTO_BUDGET=$(( $(left) - 170 )) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -8
step blocks $(( $(left) - 5 )) python3 -m cuda_kernels.mbconv_bench --budget-s $(( $(left) - 60 )) \
  --compile-mode default --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 \
  --block features.3.1 --block features.4.1 --version 11 --out "$out/blocks.json" || ok=0
grep -E "passed|failed" "$log" | tail -4
echo "FINAL_OK=$ok"
