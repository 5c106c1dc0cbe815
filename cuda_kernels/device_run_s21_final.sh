#!/usr/bin/env bash
# Session 21's last call: EfficientNet-B0 under the session's defaults (the fused head, project_wg at 4.1 / 4.2 and over
# two warpgroups at 6.x) against torch.compile default and max-autotune-no-cudagraphs in one run, then the per-block
# table at the stage 2-4 blocks. From the repository root, with the autotuning timings unpacked (tar xzf
# examples/measurements/mbconv/s20/call4/autotune_timings.tgz -C .) and carry: [".inductor_cache"] (~8 minutes):
#   timeout 590 bash cuda_kernels/device_run_s21_final.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/auto/ (device_run_b0_autotune.sh's files), OUTDIR/blocks.json. Last line FINAL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin FINAL 575
step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_kernels.py \
  -k "through_bench_fused_model" || ok=0
AUTO_BUDGET=$(( $(left) - 150 )) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -6
step blocks 140 python3 -m cuda_kernels.mbconv_bench --budget-s 90 --compile-mode default \
  --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 --block features.3.1 \
  --block features.4.1 --version 11 --out "$out/blocks.json" || ok=0
grep -E "passed|failed" "$log" | tail -3
echo "FINAL_OK=$ok"
