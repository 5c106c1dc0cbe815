#!/usr/bin/env bash
# The SE kernel with G images per CTA (NOTES.md, "MBConv version 10", se_v3_kernel<G>, CUDA_KERNELS_SE_IMAGES) inside
# version 9. From the repository root (~5 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_se.sh OUTDIR
# build -> the GPU tests of tests/test_mbconv_v10.py -> Nsight Compute of the SE kernel at B0's features.2.1, 5.1,
# 6.1 and 7.0 for each G (serialised, L2 flushed; lines "SE ...") -> the per-block bench of every B0 block for each G
# (CUDA graphs) -> EfficientNet-B0 end to end for each G and torch.compile (freezing, CUDA graphs) in the same call.
# IMAGES (default "1 4 8"). Last line SE_OK=1|0 (1: the tests passed). The record of session 12's fourth call: the
# switch was removed after it (slower), so on main every G runs the same kernel; the code it measured is 7e62e34.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin SE 570  # the folder, the environment, `left`, ok=1, the build
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_v10.py || ok=0
images=${IMAGES:-1 4 8}
for g in $images; do
  step "ncu_$g" 40 env CUDA_KERNELS_SE_IMAGES=$g ncu --clock-control none --cache-control all --print-units base \
    -k regex:"se_v3" --metrics gpu__time_duration.sum,launch__grid_size,lts__t_bytes.sum --csv --page raw \
    --log-file "$out/se_$g.csv" python3 -m cuda_kernels.mbconv_profile --version 9 features.2.1 features.5.1 \
    features.6.1 features.7.0
done
for f in "$out"/se_*.csv; do  # one line per block (cuda_kernels/ncu_lines.py)
  [ -e "$f" ] || continue
  python3 -m cuda_kernels.ncu_lines "SE $(basename "$f" .csv)" "$f" se_v3 features.2.1 features.5.1 features.6.1 \
    features.7.0 2>> "$log" | tee -a "$log"
done
blocks="features.1.0 features.2.0 features.2.1 features.3.0 features.3.1 features.4.0 features.4.1 features.4.2
  features.5.0 features.5.1 features.5.2 features.6.0 features.6.1 features.6.2 features.6.3 features.7.0"
for g in $images; do
  step "bench_$g" 40 env CUDA_KERNELS_SE_IMAGES=$g python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 \
    $(printf -- "--block %s " $blocks) --out "$out/blocks_se$g.json" --version 9
done
for g in $images; do
  step "e2e_$g" 60 env CUDA_KERNELS_SE_IMAGES=$g python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
    --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_se$g.json"
done
step e2e_inductor 80 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
python3 -m cuda_kernels.bench_lines SEB "$out" 2>> "$log" | tee -a "$log"  # bench_lines.py
grep -E "^== |passed|failed|Error|error:" "$log" | tail -20
echo "SE_OK=$ok"
