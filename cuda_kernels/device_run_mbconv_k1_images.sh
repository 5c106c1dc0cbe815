#!/usr/bin/env bash
# Kernel 1 with items of 2 images (NOTES.md, "Kernel 1 items of 2 images: what was built"; CUDA_KERNELS_K1_IMAGES=2,
# off by default; B0's features.6.1-6.3 and, under version 8, 7.0). Prepared in session 12, not yet run. From the
# repository root (~5 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_k1_images.sh OUTDIR
# build -> the GPU tests of 2-image items (tests/test_mbconv_v8.py -k k1_images) and of version 9 -> Nsight Compute of
# kernel 1 at features.6.1 and 7.0 under version 8 with 1 and 2 images (serialised; lines "K1 ...") -> the per-block
# bench of 6.1 and 7.0 (versions 8 and 9, 1 and 2 images) -> B0 end to end (version 9, 1 and 2 images) and
# torch.compile (freezing, CUDA graphs). Prediction: kernel 1 at 6.1 73.7 -> ~48 us, B0 ~-0.08 ms.
# Last line K1I_OK=1|0 (1: the tests passed).
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin K1I 570  # the folder, the environment, `left`, ok=1, the build
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_v8.py -k k1_images || ok=0
step tests_v9 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_v9.py || ok=0
for g in 1 2; do
  step "ncu_$g" 40 env CUDA_KERNELS_K1_IMAGES=$g ncu --clock-control none --cache-control all --print-units base \
    -k regex:"expand_dw" --metrics gpu__time_duration.sum,launch__grid_size,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
    --csv --page raw --log-file "$out/k1_$g.csv" python3 -m cuda_kernels.mbconv_profile --version 8 features.6.1 features.7.0
done
for f in "$out"/k1_*.csv; do  # one line per block (cuda_kernels/ncu_lines.py)
  [ -e "$f" ] || continue
  python3 -m cuda_kernels.ncu_lines "K1 $(basename "$f" .csv)" "$f" expand_dw features.6.1 features.7.0 2>> "$log" \
    | tee -a "$log"
done
# the projections past stage 4 (project_v10 at 6.1, project_v3 at 5.1 and 7.0): why they stay at 5-16% of DRAM with
# the scale's instructions cut (NOTES.md, "fp16 scale, measured"): stall reasons per issued instruction
stalls=gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for r in long_scoreboard barrier wait short_scoreboard mio_throttle math_pipe_throttle not_selected lg_throttle; do
  stalls=$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
step ncu_proj 40 ncu --clock-control none --cache-control all --print-units base -k regex:"project" \
  --metrics "$stalls" --csv --page raw --log-file "$out/proj_stalls.csv" python3 -m cuda_kernels.mbconv_profile \
  --version 9 features.5.1 features.6.1 features.7.0
python3 -m cuda_kernels.ncu_lines PROJ "$out/proj_stalls.csv" project features.5.1 features.6.1 features.7.0 \
  2>> "$log" | tee -a "$log"
for g in 1 2; do
  step "bench_$g" 40 env CUDA_KERNELS_K1_IMAGES=$g python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 \
    --block features.6.1 --block features.7.0 --out "$out/blocks_k1i$g.json" --version 8 --version 9
  step "e2e_$g" 60 env CUDA_KERNELS_K1_IMAGES=$g python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
    --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_k1i$g.json"
done
step e2e_inductor 80 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
python3 -m cuda_kernels.bench_lines K1I "$out" 2>> "$log" | tee -a "$log"  # bench_lines.py
grep -E "^== |passed|failed|Error|error:" "$log" | tail -20
echo "K1I_OK=$ok"
