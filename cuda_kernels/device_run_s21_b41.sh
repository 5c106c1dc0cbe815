#!/usr/bin/env bash
# Session 21's last minutes: the per-block table's features.4.1 beside torch.compile default and max-autotune (call 4's
# 90-s budget for new baselines ran out before it), and test_mbconv_arch under the new defaults. From the repository
# root, with `.inductor_cache` carried (~3 minutes):
#   timeout 250 bash cuda_kernels/device_run_s21_b41.sh OUTDIR
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin B41 240
export TORCHINDUCTOR_CACHE_DIR="$PWD/.inductor_cache"
step blocks 150 python3 -m cuda_kernels.mbconv_bench --budget-s 120 --compile-mode default \
  --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.4.1 --version 11 --out "$out/blocks_4.1.json" \
  || ok=0
step arch 30 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_arch.py || ok=0
grep -E "passed|failed" "$log" | tail -2
echo "B41_OK=$ok"
