#!/usr/bin/env bash
# Session 20's check of the defaults as committed (project_v9s without the staged shortcut, CUDA_KERNELS_PROJ_V9_SX
# off): project_v9s's GPU tests (both kernels), test_pdl, and B0 with and without the staged shortcut in one process.
# From the repository root (~5 minutes on an H200, every extension rebuilt):
#   timeout 420 bash cuda_kernels/device_run_s20_check.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/switches.json. Last line CHECK_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin CHECK 410
step tests_v9s 100 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py || ok=0
step tests_pdl 130 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_pdl.py || ok=0
step switches 80 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_V9_SX=1 -o "$out/switches.json" || ok=0
grep -E "^== |^SWITCHES |passed|failed" "$log" | tail -12
echo "CHECK_OK=$ok"
