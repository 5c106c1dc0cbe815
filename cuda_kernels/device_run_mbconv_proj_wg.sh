#!/usr/bin/env bash
# The projection on warpgroup MMAs (CUDA_KERNELS_PROJ_WG=late|all, off by default; NOTES.md, "The projection on
# warpgroup MMAs"). Prepared in session 13, not yet run. From the repository root (~8 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_proj_wg.sh OUTDIR
# build -> GPU tests (test_mbconv_proj_wg.py, hfma2's v3 ones; -x: the first failure stops them) -> Nsight Compute
# of the projections at 2.1, 3.1, 4.1, 5.1, 6.1 and 7.0 with and without it (lines "PROJ off|all ...") -> kernel 1 at
# 1.0 and 7.0: version 3's, in HFMA2 (CUDA_KERNELS_K1_V3_HFMA2=1) and at 7.0 version 8's with both options ("K1 ...")
# -> B0 end to end with off / late / all (if the tests passed), all with version 3's HFMA2, and torch.compile (freezing,
# CUDA graphs).
# Prediction: projection 6.1 44 -> ~10 us, 7.0 58 -> ~12, 5.1 47 -> ~12, 4.1 46 -> ~12, 2.1 72 -> ~35; B0 2.07 -> ~1.80
# ms (late) / ~1.70 (all); version 3's kernel 1 in HFMA2: 1.0 87 -> ~75 us. Last line WG_OK=1|0 (tests passed).
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH
mbconv_begin WG 570
step tests 170 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py \
  tests/test_mbconv_hfma2.py -k "not hfma2_every_shape and not hfma2_odd" || ok=0
blocks="features.2.1 features.3.1 features.4.1 features.5.1 features.6.1 features.7.0"
for mode in off all; do
  step "ncu_$mode" 50 env CUDA_KERNELS_PROJ_WG=$mode ncu --clock-control none --cache-control all --print-units base \
    -k regex:"project" --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active \
    --csv --page raw --log-file "$out/proj_$mode.csv" python3 -m cuda_kernels.mbconv_profile --version 10 $blocks
  python3 -m cuda_kernels.ncu_lines "PROJ $mode" "$out/proj_$mode.csv" project $blocks 2>> "$log" | tee -a "$log"
done
# kernel 1 where versions 9 and 10 run version 3's (features.1.0, 7.0): fp32 sums, and with its depthwise in HFMA2
# (CUDA_KERNELS_K1_V3_HFMA2=1); at 7.0 also version 8's with 2-image items and HFMA2 (measured before only without them:
# 53.5 against 66.7 us). Lines "K1 v10|v3hf|v8 ..."
k1m=gpu__time_duration.sum,launch__grid_size,smsp__inst_executed.sum
step ncu_k1_v10 30 ncu --clock-control none --cache-control all --print-units base -k regex:"expand_dw" --metrics $k1m \
  --csv --page raw --log-file /tmp/k1_v10.csv python3 -m cuda_kernels.mbconv_profile --version 10 features.1.0 features.7.0
step ncu_k1_v3hf 30 env CUDA_KERNELS_K1_V3_HFMA2=1 ncu --clock-control none --cache-control all --print-units base \
  -k regex:"expand_dw" --metrics $k1m --csv --page raw --log-file /tmp/k1_v3hf.csv \
  python3 -m cuda_kernels.mbconv_profile --version 10 features.1.0 features.7.0
step ncu_k1_v8 30 env CUDA_KERNELS_K1_IMAGES=2 CUDA_KERNELS_K1_HFMA2=1 ncu --clock-control none --cache-control all \
  --print-units base -k regex:"expand_dw" --metrics $k1m --csv --page raw --log-file /tmp/k1_v8.csv \
  python3 -m cuda_kernels.mbconv_profile --version 8 features.7.0
for v in v10 v3hf v8; do
  python3 -m cuda_kernels.ncu_lines "K1 $v" /tmp/k1_$v.csv expand_dw features.1.0 features.7.0 2>> "$log" | tee -a "$log"
done
if [ "$ok" = 1 ]; then
  for mode in off late all; do
    step "e2e_$mode" 60 env CUDA_KERNELS_PROJ_WG=$mode "${B0_BENCH[@]}" --backend cuda_kernels --compile-rest \
      --freezing -o "$out/b0_wg_$mode.json"
  done
  step e2e_all_v3hf 60 env CUDA_KERNELS_PROJ_WG=all CUDA_KERNELS_K1_V3_HFMA2=1 "${B0_BENCH[@]}" \
    --backend cuda_kernels --compile-rest --freezing -o "$out/b0_wg_all_v3hf.json"
fi
step e2e_inductor 80 "${B0_BENCH[@]}" --backend inductor --freezing -o "$out/b0_inductor.json"
python3 -m cuda_kernels.bench_lines WG "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "WG_OK=$ok"
