#!/usr/bin/env bash
# What each part of EfficientNet-B0's fused blocks costs on the critical path (cuda_kernels/ablate_b0.py: the fused
# network as it is and with every block's kernel 1, SE or projection skipped; CUDA_KERNELS_ABLATE, a diagnostic).
# From the repository root (~2 minutes on an H200, the extension built):
#   timeout 300 bash cuda_kernels/device_run_ablate.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/ablate.json. Last line ABLATE_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin ABLATE 290
step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_ablate.py || ok=0
step ablate 150 python3 -m cuda_kernels.ablate_b0 -o "$out/ablate.json" || ok=0
grep -E "^ABLATE |^== |passed|failed|Error" "$log" | tail -12
echo "ABLATE_OK=$ok"
