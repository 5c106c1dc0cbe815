#!/usr/bin/env bash
# Part of session 28's first call (device_run_s28_first.sh runs it; ~3 minutes alone): does a block's batch in chunks
# on two streams let the GPU overlap chunk i's SE and projection with chunk i + 1's kernel 1 (NOTES.md "Session 27",
# prediction there)? The GPU tests of the split
# (bit for bit the whole batch's output), then cuda_kernels/mbconv_split.py at B0's 2.1, 3.1, 4.1 and 5.1 in 2 and 4
# chunks, one stream and two. From the repository root:
#   timeout 300 bash cuda_kernels/device_run_s28_split.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/split.json. Last line SPLIT_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin SPLIT 280
STEP_CLEARS_OK=1
step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_split.py
step split $(( $(left) - 5 )) python3 -m cuda_kernels.mbconv_split --block features.2.1 --block features.3.1 \
  --block features.4.1 --block features.5.1 --chunks 2 --chunks 4 -o "$out/split.json"
grep -E "^SPLIT " "$log" | tail -20
echo "SPLIT_OK=$ok"
