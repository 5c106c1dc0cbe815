#!/usr/bin/env bash
# Variant 6 of the wgmma ConvFirst kernel at C = 64 (NOTES.md "Variant 6: one tile per consumer warpgroup at C = 64"),
# one short device call (<= ~150 s by its step limits 55 + 20 + 40 + 35), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v6.sh OUTDIR
# build (cached if built; registers and local memory of the persistent kernels and convfirst_c64_pingpong_kernel
# from the built library) -> smoke: variants 3 and 6 at C = 64 8 x 56 x 56 (392 tiles: 2-3 per thread block, both
# consumer warpgroups and both X buffers in use) at alpha 6 and 4 against float64 under 20 s; stop with V6_OK=0 if they
# hang or fail -> the variant-6 GPU tests of tests/test_convfirst_c512.py (-k pingpong: alpha 2-8, batch 128 / 1 / odd,
# odd sizes, 1 to 6272 tiles, determinism, the alpha-10 refusal and fallback, the extension's shared-memory size, the
# swapped network) -> bench_c512 of variants 3 and 6 at C=64 a6 and a4 56x56, batch 128 (eager beside, no
# torch.compile, no mma.sync). Last line V6_OK=1|0 (smoke and every test passed), above it one line per case
# "V6 <case> v3=..us v6=..us". Predicted before any run: a6 v6 ~100 us (75-140; v3 174.8), a4 ~85 (65-125; v3 153.0).
# (The steps are cuda_kernels/device_run_c512_variant.sh's, shared by variants 5, 6 and 7.)
set -uo pipefail
exec bash cuda_kernels/device_run_c512_variant.sh "${1:?output folder}" 6 "pingpong" \
  "64:6:8:56 64:4:8:56" \
  "c64:6:56 c64:4:56"
