#!/usr/bin/env bash
# Kernel 1 at stride 2 with the expand's bias and halving in the MMA (CUDA_KERNELS_K1_BIAS_C=1; session 17, compiled
# and CPU-tested, not yet run; NOTES.md "Current state", next step 1). From the repository root (~5 minutes, one H200):
#   timeout 590 bash cuda_kernels/device_run_k1_bias_c.sh OUTDIR
# build -> GPU tests (test_mbconv_k1_bias_c.py: the stride-2 blocks of B0 / B2 at batches 1, 5, 128 against float64,
# the _bc kernel ran, within 1e-3 of the default; B0 through the check before timing) -> Nsight Compute of kernel 1 at
# 2.0, 3.0, 4.0, 6.0, default and BC (lines "K1 ...") -> B0 default / BC, twice. Predicted (per 16-pixel tile and
# lane: -24 FFMA, -12 CS2R, a few MOVs more): 2.0's kernel 1 173 -> ~163 us (102 M -> ~96 M warp instructions), 3.0
# 100 -> ~96, B0 -10..-16 us. Files: OUTDIR/log.txt,
# OUTDIR/k1_bias_c.tgz. Last line BC_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin BC 575
mkdir -p "$out/bc"
variants=(default)
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_bias_c.py \
  && variants+=("CUDA_KERNELS_K1_BIAS_C=1") || ok=0
for v in default "CUDA_KERNELS_K1_BIAS_C=1"; do
  tag=${v%%=*}; tag=${tag#CUDA_KERNELS_K1_}
  step "ncu_$tag" 45 env ${v/default/CUDA_KERNELS_K1_BIAS_C=0} ncu --clock-control none --cache-control all \
    --print-units base -k regex:"expand_dw" --metrics gpu__time_duration.sum,launch__grid_size,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
    --csv --page raw --log-file "$out/bc/k1_$tag.csv" python3 -m cuda_kernels.mbconv_profile features.2.0 \
    features.3.0 features.4.0 features.6.0
  python3 -m cuda_kernels.ncu_lines "K1 $tag" "$out/bc/k1_$tag.csv" expand_dw features.2.0 features.3.0 features.4.0 \
    features.6.0 2>> "$log" | tee -a "$log"
done
b0_runs "$out/bc" CUDA_KERNELS_K1_BIAS_C=0 "${variants[@]}"
python3 -m cuda_kernels.bench_lines BC "$out/bc" 2>> "$log" | tee -a "$log"
tar czf "$out/k1_bias_c.tgz" -C "$out" bc && rm -rf "$out/bc"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "BC_OK=$ok"
