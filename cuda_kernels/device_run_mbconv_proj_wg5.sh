#!/usr/bin/env bash
# The wgmma projection's options (CUDA_KERNELS_PROJ_WG_OPT: 1 the epilogue's shortcut loads grouped before their
# stores, 2 the next chunk's A prepared during this chunk's wgmmas, 3 both; session 14, compiled and CPU-tested, not
# yet run). From the repository root (~6 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_proj_wg5.sh OUTDIR
# build -> GPU tests (test_mbconv_proj_wg.py: the options equal option 0 bit for bit with the profiler's proof, odd
# sizes, B0 on its own activations with option 3; -x) -> Nsight Compute of the projections at 2.1-7.0 (all) per option
# (lines "PROJ optN ...") -> stall samples of 6.1 under option 3 with its 12 most-stalled lines ("MIX ...") -> B0 end
# to end, version 11 (late) with options 0 / 1 / 3 and all with option 3 (if the tests passed).
# Prediction (NOTES.md, "The epilogue's loads"): 6.1 31 -> ~14 us with option 1, ~11 with 3; 5.1 37 -> ~20; 2.1
# 70 -> ~45; B0 1.97 -> ~1.90 ms (late, option 3). Last line WG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED, PROJ_METRICS
mbconv_begin WG 575
step tests 170 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py || ok=0
blocks="features.2.1 features.3.1 features.4.1 features.5.1 features.6.1 features.7.0"
for opt in 0 1 2 3; do
  step "ncu_opt$opt" 40 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_PROJ_WG_OPT=$opt ncu --clock-control none \
    --cache-control all --print-units base -k regex:"project_wg" --metrics "$PROJ_METRICS" \
    --csv --page raw --log-file "$out/proj_opt$opt.csv" python3 -m cuda_kernels.mbconv_profile $blocks
  python3 -m cuda_kernels.ncu_lines "PROJ opt$opt" "$out/proj_opt$opt.csv" project_wg $blocks 2>> "$log" | tee -a "$log"
done
step src_6.1 50 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_PROJ_WG_OPT=3 ncu --clock-control none --section SourceCounters \
  -k regex:project_wg --launch-skip 1 -c 1 -f -o /tmp/wg_6.1 python3 -m cuda_kernels.mbconv_profile features.6.1
ncu -i /tmp/wg_6.1.ncu-rep --page source --csv --print-source sass > /tmp/wg_6.1.csv 2>> "$log"
python3 -m cuda_kernels.sass_mix "MIX features.6.1" /tmp/wg_6.1.csv --lines 12 2>> "$log" | tee -a "$log"
if [ "$ok" = 1 ]; then
  for opt in 0 1 3; do
    step "e2e_late_opt$opt" 60 env CUDA_KERNELS_PROJ_WG_OPT=$opt "${B0_FUSED[@]}" -o "$out/b0_late_opt$opt.json"
  done
  step e2e_all_opt3 60 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_PROJ_WG_OPT=3 "${B0_FUSED[@]}" -o "$out/b0_all_opt3.json"
fi
python3 -m cuda_kernels.bench_lines WG "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "WG_OK=$ok"
