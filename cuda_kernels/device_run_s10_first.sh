#!/usr/bin/env bash
# The first device call of the session after session 9, on an nvidia-h200-x2, from the repository root (~9.5 minutes):
#   bash cuda_kernels/device_run_s10_first.sh OUTDIR
# GPU 0: variant 8's conv kernel version b (device_run_conv8b.sh: smoke, bits against conv8, its GPU tests, bench_c512
#   with CUDA_KERNELS_CONV8B=0 / 1; predicted conv kernel 15.1 -> ~8 us, C = 256 a6 block 83.6 -> ~77), then
#   ConvFirstNet-H200 end to end with it beside the default and torch.compile, alternated (convfirstnet_e2e_spread.sh
#   with TRY_ENV=CUDA_KERNELS_CONV8B=1; predicted ~2.65 ms against 2.742, C >= 40%).
# GPU 1: issue 10's per-block table again with today's kernels (device_run_networks_table.sh --models
#   convfirstnet_h200; session 9's table predates the desc_advance change to the C = 64 / 128 / 512 and stride-2 units).
# Files: OUTDIR/pair.tar.gz (cuda_kernels/device_pair.sh).
set -uo pipefail
out=${1:?output folder}
LIMIT_S=${LIMIT_S:-585} bash cuda_kernels/device_pair.sh "$out" \
  'timeout 175 bash cuda_kernels/device_run_conv8b.sh $OUT/conv8b; TRY_ENV=CUDA_KERNELS_CONV8B=1 TRY_NAME=conv8b timeout $((LEFT - 185)) bash examples/measurements/convfirstnet_e2e_spread.sh $OUT/e2e' \
  'LIMIT_S=$((LEFT - 5)) bash cuda_kernels/device_run_networks_table.sh $OUT/table --models convfirstnet_h200'
