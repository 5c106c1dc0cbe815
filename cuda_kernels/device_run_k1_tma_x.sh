#!/usr/bin/env bash
# Kernel 1 with X by the tensor memory accelerator (CUDA_KERNELS_K1_TMA_X=1; session 16, compiled and CPU-tested, not
# yet run; NOTES.md "Kernel 1's stall reasons"). From the repository root (~7 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_k1_tma_x.sh OUTDIR
# build -> GPU tests (test_mbconv_k1_tma_x.py: bits equal to the padded rows' at B0 / B2 shapes, odd sizes against
# float64, B0 through the check before timing; -x) -> Nsight Compute of kernel 1 at features.4.1, 5.0 and 6.1 with
# the switch off and on (lines "K1 TX=0|1": time, issue, instructions, stalls) -> B0 end to end, off / on / off / on
# (the pairs from one call), then the stride-2 blocks' kernel 1 sampled per instruction. Predicted (NOTES.md):
# 4.1's kernel 1 45.7 -> ~40 us, 6.1's 49.2 -> ~45; B0 -30 to -40 us. Files: OUTDIR/log.txt, OUTDIR/k1_tx.tgz (the
# Nsight Compute CSVs), OUTDIR/b0_tx*.json (4), OUTDIR/s2/ncu_mbconv_k1.tar.gz and its log. Last line TX_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED
METRICS=gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,smsp__inst_executed.sum
METRICS+=,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in wait barrier long_scoreboard; do METRICS+=,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio; done
mbconv_begin TX 575
mkdir -p "$out/ncu"
step tests 150 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tma_x.py || ok=0
for tx in 0 1; do
  step "ncu_tx$tx" 60 env CUDA_KERNELS_K1_TMA_X=$tx ncu --clock-control none --cache-control all --print-units base \
    -k regex:"expand_dw" --metrics "$METRICS" --csv --page raw --log-file "$out/ncu/k1_tx$tx.csv" \
    python3 -m cuda_kernels.mbconv_profile features.4.1 features.5.0 features.6.1
  python3 -m cuda_kernels.ncu_lines "K1 TX=$tx" "$out/ncu/k1_tx$tx.csv" expand_dw features.4.1 features.5.0 \
    features.6.1 2>> "$log" | tee -a "$log"
done
tar czf "$out/k1_tx.tgz" -C "$out" ncu && rm -rf "$out/ncu"
if [ "$ok" = 1 ]; then
  for run in a b; do
    step "e2e_off_$run" 70 env CUDA_KERNELS_K1_TMA_X=0 "${B0_FUSED[@]}" -o "$out/b0_tx0_$run.json"
    step "e2e_on_$run" 70 env CUDA_KERNELS_K1_TMA_X=1 "${B0_FUSED[@]}" -o "$out/b0_tx1_$run.json"
  done
fi
python3 -m cuda_kernels.bench_lines TX "$out" 2>> "$log" | tee -a "$log"
# the stride-2 blocks' kernel 1 (2.0: ~190 us in the network, the costliest kernel; 3.0), never sampled per
# instruction: the full set and SASS source pages, for the next design (OUTDIR/s2/ncu_mbconv_k1.tar.gz)
[ "$(left)" -gt 100 ] && BLOCKS="features.2.0 features.3.0" VERSION=11 timeout $(($(left) - 5)) \
  bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/s2" > /dev/null 2>&1 && rm -f "$out"/s2/*.csv
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "TX_OK=$ok"
