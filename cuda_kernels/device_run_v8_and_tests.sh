#!/usr/bin/env bash
# The next device call for issue 10 (prepared in session 8), on an nvidia-h200-x2, from the repository root:
#   bash cuda_kernels/device_run_v8_and_tests.sh OUTDIR          (~9 minutes; the call's limit is 10)
# GPU 0: variant 8 alone (device_run_v8.sh: smoke against float64, its GPU tests, the bench of variants 3, 7 and 8;
# predicted ~78 us at C = 256 a6 14x14 against 103.4 / 101.8), then ConvFirstNet-H200 end to end with variant 8 at
# C = 256, beside the default fused network and torch.compile, alternated in one sequence
# (examples/measurements/convfirstnet_e2e_spread.sh with TRY=256:8; predicted ~2.80 ms against ~3.12, i.e. ~2.1x
# torch.compile's ~6.0). GPU 1: every GPU test, one file at a time (device_run_all_tests.sh).
# Files: OUTDIR/pair.tar.gz (cuda_kernels/device_pair.sh) with gpu0/v8/, gpu0/e2e/, gpu1/tests/.
set -uo pipefail
out=${1:?output folder}
LIMIT_S=${LIMIT_S:-585} bash cuda_kernels/device_pair.sh "$out" \
  'timeout 160 bash cuda_kernels/device_run_v8.sh $OUT/v8; TRY=256:8 timeout $((LEFT - 175)) bash examples/measurements/convfirstnet_e2e_spread.sh $OUT/e2e' \
  'LIMIT_S=$((LEFT - 8)) bash cuda_kernels/device_run_all_tests.sh $OUT/tests'
