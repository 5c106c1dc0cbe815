#!/usr/bin/env bash
# Nsight Compute of one C = 256 a6 14x14 block in place, variants 3 and 7 (the pass of session 8,
# examples/measurements/ncu_in_place/c256_v3_v7/; files then named ncu_v3_v7.tar.gz, now ncu_c256.tar.gz), from the
# repository root (~2 minutes):
#   bash cuda_kernels/device_run_ncu_v3_v7.sh OUTDIR
set -uo pipefail
VARIANTS="3 7" exec bash cuda_kernels/device_run_ncu_c256.sh "${1:?output folder}"
