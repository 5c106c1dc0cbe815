#!/usr/bin/env bash
# The TMA projection made persistent, its tiles' chunk order staggered (session 14, call 4; call 3: TMA loads halved
# its instructions but 98 CTAs reading the same chunk of V held 6.1 at 32 us). From the repository root (~4 minutes):
#   timeout 590 bash cuda_kernels/device_run_mbconv_proj_wg4.sh OUTDIR
# build -> GPU tests (test_mbconv_proj_wg.py; -x) -> Nsight Compute of the projections at 2.1-7.0, off and all
# (lines "PROJ ...") -> B0 end to end off / late / all (if the tests passed). Prediction (NOTES.md): 6.1 32 -> ~15 us,
# 7.0 23 -> ~14, 5.1 38 -> ~20, 2.1 66 -> ~45; B0 with all 2.01 -> ~1.90 ms. Last line WG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH
mbconv_begin WG 575
step tests 170 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py || ok=0
blocks="features.2.1 features.3.1 features.4.1 features.5.1 features.6.1 features.7.0"
for mode in off all; do
  step "ncu_$mode" 50 env CUDA_KERNELS_PROJ_WG=$mode ncu --clock-control none --cache-control all --print-units base \
    -k regex:"project" --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_bytes.sum \
    --csv --page raw --log-file "$out/proj_$mode.csv" python3 -m cuda_kernels.mbconv_profile --version 10 $blocks
  python3 -m cuda_kernels.ncu_lines "PROJ $mode" "$out/proj_$mode.csv" project $blocks 2>> "$log" | tee -a "$log"
done
if [ "$ok" = 1 ]; then
  for mode in off late all; do
    step "e2e_$mode" 60 env CUDA_KERNELS_PROJ_WG=$mode "${B0_BENCH[@]}" --backend cuda_kernels --compile-rest \
      --freezing -o "$out/b0_wg_$mode.json"
  done
fi
python3 -m cuda_kernels.bench_lines WG "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -10
echo "WG_OK=$ok"
