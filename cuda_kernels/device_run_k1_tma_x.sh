#!/usr/bin/env bash
# Kernel 1 with X by the tensor memory accelerator (CUDA_KERNELS_K1_TMA_X=1) and with its expand on warpgroup MMAs
# (CUDA_KERNELS_K1_WGMMA=1); built in session 16, run as session 17's first call (examples/measurements/mbconv/s17/
# call1), after which both became the defaults: run again now, its TMA X variant also takes the wgmma expand (add
# CUDA_KERNELS_K1_WGMMA=0 to it for the TMA X alone). NOTES.md "Kernel 1's stall reasons".
# From the repository root (~8 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_k1_tma_x.sh OUTDIR
# build -> GPU tests (test_mbconv_k1_tma_x.py: TX's bits equal to the padded rows' at B0 / B2 shapes, odd sizes
# against float64, the wgmma expand against float64 and close to TX, B0 with each through the check before timing;
# -x) -> Nsight Compute of kernel 1 at features.4.1, 5.0 and 6.1: off, TX, WG (lines "K1 ...": time, issue,
# instructions, stalls) -> B0 end to end, off / TX / WG twice (from one call), then the stride-2 blocks' kernel 1
# sampled per instruction. Predicted (NOTES.md): TX 4.1's kernel 1 45.7 -> ~40 us, 6.1's 49.2 -> ~45, B0 -30 to
# -40 us; WG 6.1 -> ~35, 4.1 -> ~32, B0 ~-0.1 ms. Files: OUTDIR/log.txt, OUTDIR/k1_tx.tgz (the Nsight Compute CSVs
# and B0's files), OUTDIR/s2/ncu_mbconv_k1.tar.gz and its log. Last line TX_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED
METRICS=gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,smsp__inst_executed.sum
METRICS+=,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in wait barrier long_scoreboard; do METRICS+=,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio; done
mbconv_begin TX 575
mkdir -p "$out/ncu"
# each variant's GPU tests; a variant whose tests fail is not timed end to end (its Nsight Compute lines still run)
variants=(off)
step tests_tx 90 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tma_x.py \
  -k "not wgmma" && variants+=("CUDA_KERNELS_K1_TMA_X=1") || ok=0
step tests_wg 90 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tma_x.py \
  -k wgmma && variants+=("CUDA_KERNELS_K1_WGMMA=1") || ok=0
profiled=(off "CUDA_KERNELS_K1_TMA_X=1" "CUDA_KERNELS_K1_WGMMA=1")
for v in "${profiled[@]}"; do
  tag=${v%%=*}; tag=${tag#CUDA_KERNELS_K1_}  # off, TMA_X, WGMMA
  step "ncu_$tag" 60 env ${v/off/CUDA_KERNELS_K1_TMA_X=0} ncu --clock-control none --cache-control all \
    --print-units base -k regex:"expand_dw" --metrics "$METRICS" --csv --page raw --log-file "$out/ncu/k1_$tag.csv" \
    python3 -m cuda_kernels.mbconv_profile features.4.1 features.5.0 features.6.1
  python3 -m cuda_kernels.ncu_lines "K1 $tag" "$out/ncu/k1_$tag.csv" expand_dw features.4.1 features.5.0 \
    features.6.1 2>> "$log" | tee -a "$log"
done
if [ "${#variants[@]}" -gt 1 ]; then
  b0_runs "$out/ncu" CUDA_KERNELS_K1_TMA_X=0 "${variants[@]}"
fi
python3 -m cuda_kernels.bench_lines TX "$out/ncu" 2>> "$log" | tee -a "$log"
tar czf "$out/k1_tx.tgz" -C "$out" ncu && rm -rf "$out/ncu"
# the stride-2 blocks' kernel 1 (2.0: ~190 us in the network, the costliest kernel; 3.0), never sampled per
# instruction: the full set and SASS source pages, for the next design (OUTDIR/s2/ncu_mbconv_k1.tar.gz)
[ "$(left)" -gt 100 ] && BLOCKS="features.2.0 features.3.0" VERSION=11 timeout $(($(left) - 5)) \
  bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$out/s2" > /dev/null 2>&1 && rm -f "$out"/s2/*.csv
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "TX_OK=$ok"
