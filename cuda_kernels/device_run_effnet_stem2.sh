#!/usr/bin/env bash
# EfficientNet's stem, version 2 (CUDA_KERNELS_EFFNET_STEM_V2=1), and the stem with block 1.0's kernel 1 in one
# kernel (CUDA_KERNELS_EFFNET_STEM_DW=1); session 15, both compiled and CPU-tested, not yet run. From the repository
# root (~9 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_effnet_stem2.sh OUTDIR
# build (the stem's extension and the MBConv one) -> GPU tests (test_effnet_stem.py: both versions against float64,
# version 2 equal to version 1 bit for bit with the profiler naming each; test_stem_mbconv.py: the unit against
# float64 of the two blocks, B0 with it; -x each) -> Nsight Compute at B0's shape: the stem's versions (lines "STEM v1
# / v2") and the unit's kernels ("UNIT": stem_dw_kernel, the SE, the projection) -> B0 end to end, fused: version 1,
# version 2, the unit. Predictions (NOTES.md, "EfficientNet's stem, version 2" and "The stem and block 1.0's kernel
# 1 in one kernel"): the stem 71.7 -> ~40 us; stem_dw_kernel ~55-65 us; B0 1.833 -> ~1.80 (version 2), ~1.75-1.77
# (the unit). Also kernel 1 at three CTAs per SM (CUDA_KERNELS_K1_3CTA=1, B0's 6.1-6.3; NOTES.md "Kernel 1 against its
# floors") and kernel 1 with a producer and consumers (CUDA_KERNELS_K1_V12=1, "Design sketch: kernel 1 with a producer
# and consumers"): their GPU tests, Nsight Compute of 6.1's kernel 1 for each ("K1 ..."), B0 end to end (predicted
# 6.1's kernel 1 59 -> ~45-50 us with three CTAs, ~32 with the producer; B0 -30 / -60 us). Last line STEM2_OK=1|0
# UNIT_OK=1|0 K13_OK=1|0 V12_OK=1|0.
# Ran once (session 16, mbconv/s16/call1) at commit 12111b6; the three-CTA and version-12 kernels it tests were
# removed after it (both slower), so it reproduces at that commit only.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED
STEM_METRICS=gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
mbconv_begin STEM2 575
step build_stem 90 python3 -c "from cuda_kernels.effnet_stem import _extension as e; print('STEM2 so:', e().__file__)" \
  || ok=0
step tests 80 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_effnet_stem.py || ok=0
unit_ok=1
step tests_unit 80 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_stem_mbconv.py || unit_ok=0
for v in 0 1; do
  step "ncu_v2_$v" 30 env CUDA_KERNELS_EFFNET_STEM_V2=$v ncu --clock-control none --cache-control all \
    --print-units base -k regex:"stem_kernel" --metrics "$STEM_METRICS" --csv --page raw \
    --log-file "$out/stem_v2_$v.csv" python3 -m cuda_kernels.effnet_stem_profile
  python3 -m cuda_kernels.ncu_lines "STEM v$((v + 1))" "$out/stem_v2_$v.csv" stem_kernel b0 2>> "$log" | tee -a "$log"
done
step ncu_unit 40 ncu --clock-control none --cache-control all --print-units base -k regex:"stem_dw|se_v3|project" \
  --metrics "$STEM_METRICS" --csv --page raw --log-file "$out/unit.csv" \
  python3 -m cuda_kernels.effnet_stem_profile --unit
python3 -m cuda_kernels.ncu_lines "UNIT" "$out/unit.csv" "" b0 2>> "$log" | tee -a "$log"
k13_ok=1 v12_ok=1
step tests_k13 60 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_3cta.py \
  || k13_ok=0
step tests_v12 60 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_v12.py || v12_ok=0
for k1 in K1_V12=0 K1_3CTA=1 K1_V12=1; do  # 6.1's kernel 1: version 11's (2-image items), 3 CTAs, producer
  step "ncu_$k1" 30 env CUDA_KERNELS_$k1 ncu --clock-control none --cache-control all --print-units base \
    -k regex:"expand_dw" --metrics "$STEM_METRICS" --csv --page raw --log-file "$out/k1_${k1/=/_}.csv" \
    python3 -m cuda_kernels.mbconv_profile features.6.1
  python3 -m cuda_kernels.ncu_lines "K1 $k1" "$out/k1_${k1/=/_}.csv" expand_dw features.6.1 2>> "$log" | tee -a "$log"
done
step e2e_v1 70 "${B0_FUSED[@]}" -o "$out/b0_fused_stem_v1.json"
[ "$k13_ok" = 1 ] && step e2e_k13 70 env CUDA_KERNELS_K1_3CTA=1 "${B0_FUSED[@]}" -o "$out/b0_fused_k13.json"
[ "$v12_ok" = 1 ] && step e2e_v12 70 env CUDA_KERNELS_K1_V12=1 "${B0_FUSED[@]}" -o "$out/b0_fused_v12.json"
[ "$ok" = 1 ] && step e2e_v2 70 env CUDA_KERNELS_EFFNET_STEM_V2=1 "${B0_FUSED[@]}" -o "$out/b0_fused_stem_v2.json"
[ "$unit_ok" = 1 ] && step e2e_unit 70 env CUDA_KERNELS_EFFNET_STEM_DW=1 "${B0_FUSED[@]}" -o "$out/b0_fused_unit.json"
python3 -m cuda_kernels.bench_lines STEM2 "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -10
echo "STEM2_OK=$ok UNIT_OK=$unit_ok K13_OK=$k13_ok V12_OK=$v12_ok"
