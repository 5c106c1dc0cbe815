#!/usr/bin/env bash
# SE version 4, the squeeze-excitation as two batched products (CUDA_KERNELS_SE_V4=0|1|all; session 18, compiled and
# CPU-tested, not yet run; NOTES.md "The SE as two batched products"). From the repository root (~6 minutes, one H200):
#   timeout 590 bash cuda_kernels/device_run_se_v4.sh OUTDIR
# build -> GPU tests (test_mbconv_se_v4.py: every distinct B0 / B2 block at batches 1, 5, 128 against float64, both
# kernels named by the profiler, within 2e-3 of se_v3, repeatable; B0 through the check before timing) -> B0's
# per-kernel profile with SE_V4=all and PDL off (each SE's time beside session 18 call 2's se_v3 table) -> B0 default /
# SE_V4=1 / SE_V4=all, twice -> Nsight Compute of the projections at 1.0, 2.1, 3.1 (SE4_PROJ=0: not). Predicted: SE at 6.1-7.0 19.6 ->
# ~5 us, 5.x / 6.0 ~10 -> ~5; B0 -60..-70 us (serialised SE 161 -> ~95 us). Files: OUTDIR/log.txt, OUTDIR/se_v4.tgz. Last line SE4_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin SE4 575
mkdir -p "$out/se4"
variants=(default)
step tests 170 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v4.py \
  && variants+=("CUDA_KERNELS_SE_V4=1" "CUDA_KERNELS_SE_V4=all") || ok=0
if [ ${#variants[@]} -gt 1 ]; then
  step b0_pdl0_all 90 env CUDA_KERNELS_PDL=0 CUDA_KERNELS_SE_V4=all "${B0_FUSED[@]}" --per-kernel \
    --trace "$out/se4/b0_pdl0_all.trace.json.gz" -o "$out/se4/b0_pdl0_all.json" || ok=0
fi
b0_runs "$out/se4" CUDA_KERNELS_SE_V4=0 "${variants[@]}"
# the early projections (1.0, 2.1, 3.1: 48.8, 64.4, 34.3 us in call 2 against DRAM floors of ~36, ~36, ~18): the next
# design's numbers
[ "${SE4_PROJ:-1}" = 1 ] && step ncu_proj 60 ncu --clock-control none --cache-control all --print-units base -k regex:project --metrics \
  "$PROJ_METRICS,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_write.sum" --csv --page raw \
  --log-file "$out/se4/proj.csv" python3 -m cuda_kernels.mbconv_profile features.1.0 features.2.1 features.3.1
[ -f "$out/se4/proj.csv" ] && python3 -m cuda_kernels.ncu_lines PROJ "$out/se4/proj.csv" project features.1.0 \
  features.2.1 features.3.1 2>> "$log" | tee -a "$log"
python3 -m cuda_kernels.bench_lines SE4 "$out/se4" 2>> "$log" | tee -a "$log"
tar czf "$out/se_v4.tgz" -C "$out" se4 && rm -rf "$out/se4"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -14
echo "SE4_OK=$ok"
