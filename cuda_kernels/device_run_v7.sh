#!/usr/bin/env bash
# Variant 7 of the wgmma ConvFirst kernel at C = 256 and 128 (NOTES.md "Variant 7: the C = 256 FFN split by k, stage 2
# from registers"), one short device call (<= ~145 s by its step limits 50 + 25 + 40 + 30), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v7.sh OUTDIR
# build (cached if built; registers and local memory of the persistent and k-split kernels from the built library) ->
# smoke: variants 3 and 7 at C = 256 96 x 14 x 14 (294 tiles: 2-3 per thread block, so the next tile's halo prefetch,
# the exchange and the conv of a later tile run) at alpha 6 and 4, and C = 128 32 x 28 x 28 a6 (392 tiles), against
# float64 under 25 s; stop with V7_OK=0 if they hang or fail -> the variant-7 GPU tests of tests/test_convfirst_c512.py
# (-k ksplit: alpha 2-8, batch 128 / 1 / odd, odd sizes, 1 to 1568 tiles, determinism, the extension's shared-memory
# size, the swapped network) -> bench_c512 of variants 3 and 7 at C=256 a6 and a4 14x14 and C=128 a6 28x28, batch 128
# (eager beside, no torch.compile, no mma.sync). Last line V7_OK=1|0 (smoke and every test passed), above it one line
# per case "V7 <case> v3=..us v7=..us". Predicted before any run: c256:6:14 v7 ~72 us (62-95; v3 102.4), c256:4:14 ~51
# (44-68), c128:6:28 ~85 (75-120; v3 135.0, v5 131.4).
# (The steps are cuda_kernels/device_run_c512_variant.sh's, shared by variants 5, 6 and 7.)
set -uo pipefail
exec bash cuda_kernels/device_run_c512_variant.sh "${1:?output folder}" 7 "ksplit" \
  "256:6:96:14 256:4:96:14 128:6:32:28" \
  "c256:6:14 c256:4:14 c128:6:28"
