#!/usr/bin/env bash
# The projection on warpgroup MMAs with tensor-memory-accelerator loads (session 14, call 3; calls 1-2 measured the
# cp.async form issue-bound on its loaders' address arithmetic). From the repository root (~6 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_proj_wg3.sh OUTDIR
# build -> GPU tests (test_mbconv_proj_wg.py: every shape at batch 1 / 5 / 128, odd sizes, against the mma.sync
# projections, B0 on its own activations; -x) -> Nsight Compute of the projections at 2.1-7.0, off and all (lines
# "PROJ ...") -> stall samples per opcode at 6.1 ("MIX ...") -> B0 end to end off / late / all / all with version 3's
# HFMA2 (if the tests passed). Prediction (NOTES.md): projection 6.1 37 -> ~15 us, 4.1 22 -> ~12, 7.0 33 -> ~15,
# 2.1 68 -> ~45; B0 2.06 -> ~1.95 ms. Last line WG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH
mbconv_begin WG 575
step tests 170 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py || ok=0
blocks="features.2.1 features.3.1 features.4.1 features.5.1 features.6.1 features.7.0"
for mode in off all; do
  step "ncu_$mode" 50 env CUDA_KERNELS_PROJ_WG=$mode ncu --clock-control none --cache-control all --print-units base \
    -k regex:"project" --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
    --csv --page raw --log-file "$out/proj_$mode.csv" python3 -m cuda_kernels.mbconv_profile --version 10 $blocks
  python3 -m cuda_kernels.ncu_lines "PROJ $mode" "$out/proj_$mode.csv" project $blocks 2>> "$log" | tee -a "$log"
done
step src_6.1 50 env CUDA_KERNELS_PROJ_WG=all ncu --clock-control none --section SourceCounters -k regex:project_wg \
  --launch-skip 1 -c 1 -f -o /tmp/wg_6.1 python3 -m cuda_kernels.mbconv_profile --version 10 features.6.1
ncu -i /tmp/wg_6.1.ncu-rep --page source --csv --print-source sass > /tmp/wg_6.1.csv 2>> "$log"
python3 -m cuda_kernels.sass_mix "MIX features.6.1" /tmp/wg_6.1.csv 2>> "$log" | tee -a "$log"
if [ "$ok" = 1 ]; then
  for mode in off late all; do
    step "e2e_$mode" 60 env CUDA_KERNELS_PROJ_WG=$mode "${B0_BENCH[@]}" --backend cuda_kernels --compile-rest \
      --freezing -o "$out/b0_wg_$mode.json"
  done
  step e2e_all_v3hf 60 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_K1_V3_HFMA2=1 "${B0_BENCH[@]}" \
    --backend cuda_kernels --compile-rest --freezing -o "$out/b0_wg_all_v3hf.json"
fi
python3 -m cuda_kernels.bench_lines WG "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -14
echo "WG_OK=$ok"
