#!/usr/bin/env bash
# SE version 6, version 5's cluster with its products register-blocked over the 8 images (CUDA_KERNELS_SE_V6=1 where
# version 5 runs; NOTES.md "Current state", session 19). From the repository root (~7 minutes on an H200, the
# extension rebuilt):
#   timeout 590 bash cuda_kernels/device_run_se_v6.sh OUTDIR
# build -> GPU tests (test_mbconv_se_v5.py: versions 5 and 6 at every distinct B0 / B2 block, batches 1, 5, 128
# against float64, the profiler naming the kernel; test_mbconv_se_v4.py, whose shared copy changed) -> B0 default /
# SE_V6=1 / SE_V6=1 with SE_V4=all, twice, interleaved -> B0's per-kernel trace without PDL under SE_V6=1.
# Files: OUTDIR/log.txt, OUTDIR/se_v6.tgz. Last line SE6_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin SE6 575
mkdir -p "$out/se6"
variants=(default)
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v5.py \
  tests/test_mbconv_se_v4.py && variants+=("CUDA_KERNELS_SE_V6=1") || ok=0
b0_runs "$out/se6" CUDA_KERNELS_SE_V6=0 "${variants[@]}"
if [ ${#variants[@]} -gt 1 ]; then
  for run in a b; do
    step "e2e_SE_V6_all_$run" 60 env CUDA_KERNELS_SE_V6=1 CUDA_KERNELS_SE_V4=all "${B0_FUSED[@]}" \
      -o "$out/se6/b0_SE_V6_all_$run.json" || ok=0
  done
  step b0_pdl0_se6 90 env CUDA_KERNELS_PDL=0 CUDA_KERNELS_SE_V6=1 "${B0_FUSED[@]}" --per-kernel \
    --trace "$out/se6/b0_pdl0_se6.trace.json.gz" -o "$out/se6/b0_pdl0_se6.json" || ok=0
fi
python3 -m cuda_kernels.bench_lines SE6 "$out/se6" 2>> "$log" | tee -a "$log"
tar czf "$out/se_v6.tgz" -C "$out" se6 && rm -rf "$out/se6"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -14
echo "SE6_OK=$ok"
