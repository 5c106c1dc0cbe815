#!/usr/bin/env bash
# Session 22's fourth call: the GPU tests of the projection on warpgroup MMAs (every B0 / B2 shape it serves, now under
# option 9 by default and in unstaged mode) and test_pdl under the session's defaults. From the repository root
# (~5 minutes on an H200):
#   timeout 360 bash cuda_kernels/device_run_s22_tests.sh OUTDIR
# Files: OUTDIR/log.txt. Last line S22T_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin S22T 350
step proj_wg 100 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py || ok=0
step pdl 190 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_pdl.py || ok=0
grep -E "^== |passed|failed|Error" "$log" | tail -12
echo "S22T_OK=$ok"
