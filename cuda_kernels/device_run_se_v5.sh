#!/usr/bin/env bash
# SE version 5, the squeeze-excitation in one kernel on clusters of 8 CTAs (CUDA_KERNELS_SE_V5=1 where SE version 4
# applies; session 18, compiled and CPU-tested, not yet run; NOTES.md "Current state", next 1). From the repository
# root (~4 minutes, one H200):
#   timeout 590 bash cuda_kernels/device_run_se_v5.sh OUTDIR
# build -> GPU tests (test_mbconv_se_v5.py: every distinct B0 / B2 block at batches 1, 5, 128 against float64 with
# SE_V4=all, se_v5_kernel named by the profiler, within 2e-3 of SE version 4; B0 through the check before timing) -> B0
# default (SE version 4) / SE_V5=1, twice -> (SE5_PROFILE=1) B0's per-kernel profile without PDL with SE_V5=1.
# Predicted: SE at 6.1-7.0 ~16 -> ~4 us, 5.x / 6.0 ~10 -> ~3, 4.x -> ~3; B0 -50..-70 us (1.71 -> ~1.65 ms).
# Files: OUTDIR/log.txt, OUTDIR/se_v5.tgz. Last line SE5_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin SE5 575
mkdir -p "$out/se5"
variants=(default)
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v5.py \
  && variants+=("CUDA_KERNELS_SE_V5=1") || ok=0
b0_runs "$out/se5" CUDA_KERNELS_SE_V5=0 "${variants[@]}"
if [ "${SE5_PROFILE:-0}" = 1 ] && [ ${#variants[@]} -gt 1 ]; then
  step b0_pdl0_se5 90 env CUDA_KERNELS_PDL=0 CUDA_KERNELS_SE_V5=1 "${B0_FUSED[@]}" --per-kernel \
    --trace "$out/se5/b0_pdl0_se5.trace.json.gz" -o "$out/se5/b0_pdl0_se5.json" || ok=0
fi
python3 -m cuda_kernels.bench_lines SE5 "$out/se5" 2>> "$log" | tee -a "$log"
tar czf "$out/se_v5.tgz" -C "$out" se5 && rm -rf "$out/se5"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "SE5_OK=$ok"
