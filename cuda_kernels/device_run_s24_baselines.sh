#!/usr/bin/env bash
# The baselines session 23's last call left out, for session 24's first call: EfficientNet-B0 under the defaults
# against torch.compile default *and* max-autotune-no-cudagraphs in one run (s23 call 4's max-autotune compile ran out
# of time), then the per-block table at 4.1 and 4.2 (torch.compile not reached there in s23) and 2.1 / 3.1 again. From
# the repository root, with the autotuning timings unpacked (tar xzf
# examples/measurements/mbconv/s23/call4/autotune_timings.tgz -C .) and carry: [".inductor_cache"] (~9.5 minutes):
#   timeout 590 bash cuda_kernels/device_run_s24_baselines.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/auto/ (device_run_b0_autotune.sh's files), OUTDIR/blocks_4.json, OUTDIR/blocks_23.json.
# Last line BASE_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin BASE 580
AUTO_BUDGET=$(( $(left) - 230 )) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -8
step blocks_4 120 python3 -m cuda_kernels.mbconv_bench --budget-s 90 --compile-mode default \
  --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.4.1 --block features.4.2 --version 11 \
  --out "$out/blocks_4.json" || ok=0
step blocks_23 $(( $(left) - 5 )) python3 -m cuda_kernels.mbconv_bench --budget-s $(( $(left) - 50 )) \
  --compile-mode default --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 \
  --block features.3.1 --version 11 --out "$out/blocks_23.json" || ok=0
echo "BASE_OK=$ok"
