#!/usr/bin/env bash
# Session 24's last call, after the wgmma expand's unrolled loop became kernel 1's only one (NOTES.md "Session 24"):
# the wgmma kernels' GPU tests (the fp32-epilogue kernels, whose code changed without a run, and the packed one's at
# 5.0 / 5.1; B0's check before timing covers every fused block), EfficientNet-B0 against torch.compile default and
# max-autotune-no-cudagraphs in one run, and the per-block table at 2.1 / 3.1 / 4.1 in the same call. From the repository root, with the autotuning timings unpacked
# (tar xzf examples/measurements/mbconv/s24/call2/auto/autotune_timings.tgz -C .) and carry: [".inductor_cache"]
# (~9.5 minutes):
#   timeout 590 bash cuda_kernels/device_run_s24_final.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/auto/ (device_run_b0_autotune.sh's files), OUTDIR/blocks.json. Last line FINAL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin FINAL 580
STEP_CLEARS_OK=1
step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tma_x.py \
  tests/test_mbconv_k1_dh2.py -k "the_wgmma_expand or stage_5"
AUTO_BUDGET=$(( $(left) - 200 )) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -8
step blocks $(( $(left) - 5 )) python3 -m cuda_kernels.mbconv_bench --budget-s $(( $(left) - 45 )) \
  --compile-mode default --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.4.1 \
  --block features.2.1 --block features.3.1 --version 11 --out "$out/blocks.json" || ok=0
grep -E "passed|failed" "$log" | tail -3
echo "FINAL_OK=$ok"
