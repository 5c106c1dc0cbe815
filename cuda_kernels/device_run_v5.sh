#!/usr/bin/env bash
# Variant 5 of the wgmma ConvFirst kernel (NOTES.md "Variant 5: the conv warpgroup's loads off the critical
# path"), one short device call (<= ~150 s by its step limits 55 + 20 + 40 + 35), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v5.sh OUTDIR
# build (cached if device_build_all.sh ran; registers and local memory of the persistent kernels from the
# built library) -> smoke: variants 3 and 5 at C = 64 8 x 56 x 56 (392 tiles: 2-3 per thread block, so the conv
# warpgroup's prefetch runs) and C = 128 32 x 28 x 28 (392 tiles) against float64 under 20 s; stop with V5_OK=0 if they
# hang or fail -> the variant-5 GPU tests of tests/test_convfirst_c512.py (C = 64 / 128, alpha 2-10, batch 128 /
# 1 / odd, odd sizes, bit-identity with variant 3, the extension's shared-memory sizes, the swapped network)
# -> bench_c512 of variants 3 and 5 at C=64 a6 and a4 56x56 and C=128 a6 28x28, batch 128 (eager beside,
# no torch.compile, no mma.sync). Last line V5_OK=1|0 (smoke and every test passed), above it one line per
# case "V5 <case> v3=..us v5=..us". Predicted before any run: C=64 a6 v5 ~120 us (95-150; v3 177), a4 ~95
# (80-125), C=128 a6 ~130 (122-137; v3 137).
# (The steps are cuda_kernels/device_run_c512_variant.sh's, shared by variants 5, 6 and 7.)
set -uo pipefail
exec bash cuda_kernels/device_run_c512_variant.sh "${1:?output folder}" 5 "prefetch" \
  "64:6:8:56 128:6:32:28" \
  "c64:6:56 c64:4:56 c128:6:28"
