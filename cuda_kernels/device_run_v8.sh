#!/usr/bin/env bash
# Variant 8 of the wgmma ConvFirst kernel at C = 256 (NOTES.md "What binds the C = 256 block", "Next: variant 8" and
# "Variant 8: built"), one short device call (<= ~155 s by its step limits 55 + 25 + 40 + 35), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v8.sh OUTDIR
# build (cached if built; registers and local memory of the k-split and variant-8 kernels from the built library) ->
# smoke: variants 3, 7 and 8 at C = 256 96 x 14 x 14 (294 tiles: 2-3 per thread block, both X buffers reused) at alpha 6
# and 4 against float64 (<= 2x PyTorch fp16's error, NaN-poisoned output), and whether variant 8 equals variant 7 bit for
# bit (expected: the same conv arithmetic in its own kernel, the same FFN, exchange and epilogue order), under 25 s; stop
# with V8_OK=0 if they hang or fail -> the variant-8 GPU tests of tests/test_convfirst_c512.py (-k "variant8 or
# smem_matches": alpha 2-8, batch 128 / 1 / odd, odd sizes, 1 to 919 tiles, bits against variant 7, determinism, the
# scratch against the conv, the binding's refusals, a PDL chain, the swapped network) -> bench_c512 of variants 3, 7 and
# 8 at C=256 a6 and a4 14x14, batch 128 (eager beside, no torch.compile, no mma.sync).
# Predicted before any run (NOTES.md "Next: variant 8"): c256:6:14 v8 ~78 us (range 72-90; measured v3 103.4, v7 101.8),
# c256:4:14 ~57 (v3 78.4, v7 81.3; not predicted in NOTES: the same parts scaled, FFN 8/12 of 62.0 + the same tile end,
# first copy and conv kernel).
# Last line V8_OK=1|0 (smoke and every test passed), above it one line per case "V8 <case> v3=..us v7=..us v8=..us".
# (The steps are cuda_kernels/device_run_c512_variant.sh's, shared by variants 5-8; BESIDE="3 7" runs 3 and 7 beside.)
# OUTDIR/log.txt, OUTDIR/v8_bench.json. If it hangs: the new synchronisation is the X pair (x_full / x_empty, the
# producer issuing tile k + 1's X after tile k's first chunk), x_dead (consumers -> copier warps) and sc_full (copiers
# -> the epilogue), and the exchange's four named barriers per tile.
set -uo pipefail
BESIDE="3 7" exec bash cuda_kernels/device_run_c512_variant.sh "${1:?output folder}" 8 "variant8 or smem_matches" \
  "256:6:96:14 256:4:96:14" \
  "c256:6:14 c256:4:14"
