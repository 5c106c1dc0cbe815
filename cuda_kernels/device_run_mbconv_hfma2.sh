#!/usr/bin/env bash
# Kernel 1's depthwise in HFMA2 (CUDA_KERNELS_K1_HFMA2=1, off by default; NOTES.md, "Session 13"),
# with 2-image items (CUDA_KERNELS_K1_IMAGES=2) after their k = 3 fix. From the repository root (~8 minutes):
#   timeout 590 bash cuda_kernels/device_run_mbconv_hfma2.sh OUTDIR
# build -> GPU tests (HFMA2: every B0 / B2 shape; the 2-image items) -> Nsight Compute of kernel 1 on B0's blocks
# with fp32 / fp16 sums (lines "K1 ...") -> per block (CUDA graphs; with torch.compile default at 2.1, 3.1, 5.1, 6.1)
# -> B0 end to end: version 9 with 2-image items, then with HFMA2 too; torch.compile (freezing, CUDA graphs).
# Prediction (NOTES.md): kernel 1 3.1 96 -> ~72 us, 5.1 84 -> ~64, 2.1 126 -> ~103, B0 2.23 -> ~2.0-2.05 ms.
# NCU_HF / BENCH_HF (default "0 1"): which of the fp32 (0) / HFMA2 (1) kernels to profile and bench per block.
# Last line HF_OK=1|0 (1: the tests passed).
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin HF 575
export CUDA_KERNELS_K1_IMAGES=2
step tests 150 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_hfma2.py \
  "tests/test_mbconv_v8.py::test_k1_images_against_one_image_items" || ok=0
blocks="features.2.0 features.2.1 features.3.0 features.3.1 features.4.0 features.4.1 features.5.0 features.5.1"
blocks="$blocks features.6.0 features.6.1"
for hf in ${NCU_HF:-0 1}; do
  step "ncu_$hf" 60 env CUDA_KERNELS_K1_HFMA2=$hf ncu --clock-control none --cache-control all --print-units base \
    -k regex:"expand_dw" --metrics gpu__time_duration.sum,launch__grid_size,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
    --csv --page raw --log-file "$out/k1_hf$hf.csv" python3 -m cuda_kernels.mbconv_profile --version 9 $blocks
  python3 -m cuda_kernels.ncu_lines "K1 hf$hf" "$out/k1_hf$hf.csv" expand_dw $blocks 2>> "$log" | tee -a "$log"
done
step e2e_base 60 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend cuda_kernels --compile-rest \
  --freezing --cuda-graphs -o "$out/b0_k1i2.json"
step e2e_hf 60 env CUDA_KERNELS_K1_HFMA2=1 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
  --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_k1i2_hf.json"
step e2e_inductor 80 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
python3 -m cuda_kernels.bench_lines HF "$out" 2>> "$log" | tee -a "$log"
for hf in ${BENCH_HF:-0 1}; do
  step "bench_$hf" 100 env CUDA_KERNELS_K1_HFMA2=$hf python3 -m cuda_kernels.mbconv_bench --budget-s $((hf * 60)) \
    --compile-mode default --repeats 20 --block features.2.1 --block features.3.1 --block features.5.1 \
    --block features.6.1 --out "$out/blocks_hf$hf.json" --version 9
done
python3 -m cuda_kernels.bench_lines HF "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "HF_OK=$ok"
