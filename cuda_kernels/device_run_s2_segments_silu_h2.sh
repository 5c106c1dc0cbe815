#!/usr/bin/env bash
# Session 17, call 4: kernel 1 at stride 2 and k = 3 with depthwise segments of 2 rows (the default now: V8Seg), and
# E's SiLU in packed fp16 (CUDA_KERNELS_K1_SILU_H2=1, off by default), with EfficientNet-B0 against torch.compile
# max-autotune-no-cudagraphs in the same call. From the repository root, Inductor's autotuning timings carried
# (tar xzf examples/measurements/mbconv/s17/call3/autotune_timings.tgz -C .; carry: [".inductor_cache"]):
#   timeout 595 bash cuda_kernels/device_run_s2_segments_silu_h2.sh OUTDIR
# build -> GPU tests (the packed SiLU at every B0 / B2 shape; version 11 at every shape) -> Nsight Compute of kernel 1
# at the stride-2 blocks 2.0, 3.0, 4.0, 6.0 and at 4.1, 6.1, default and packed (lines "K1 ...") -> B0 default /
# packed, twice -> B0 under max-autotune-no-cudagraphs (freezing, CUDA graphs). Predicted (NOTES.md "Session 17"):
# 2.0's kernel 1 192 -> ~170 us with the segments, B0 1.769 -> ~1.745 ms; the packed SiLU a further -10..-15 us.
# Files: OUTDIR/log.txt, OUTDIR/s17c4.tgz (Nsight Compute CSVs, B0's files). Last line C4_OK=1|0.
# (The packed SiLU was removed after this call, measured slower; run again, its steps find no switch or tests.)
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED, B0_BENCH
mbconv_begin C4 585
export TORCHINDUCTOR_CACHE_DIR="$PWD/.inductor_cache"
mkdir -p "$out/c4" "$TORCHINDUCTOR_CACHE_DIR"
variants=(default)
step tests_sh 100 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_silu_h2.py \
  && variants+=("CUDA_KERNELS_K1_SILU_H2=1") || ok=0
step tests_shapes 70 env MBCONV_TEST_VERSIONS=11 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider \
  tests/test_mbconv_kernels.py -k "not odd" || ok=0
for v in default "CUDA_KERNELS_K1_SILU_H2=1"; do
  tag=${v%%=*}; tag=${tag#CUDA_KERNELS_K1_}
  step "ncu_$tag" 45 env ${v/default/CUDA_KERNELS_K1_SILU_H2=0} ncu --clock-control none --cache-control all \
    --print-units base -k regex:"expand_dw" --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
    --csv --page raw --log-file "$out/c4/k1_$tag.csv" python3 -m cuda_kernels.mbconv_profile features.2.0 \
    features.3.0 features.4.0 features.6.0 features.4.1 features.6.1
  python3 -m cuda_kernels.ncu_lines "K1 $tag" "$out/c4/k1_$tag.csv" expand_dw features.2.0 features.3.0 features.4.0 \
    features.6.0 features.4.1 features.6.1 2>> "$log" | tee -a "$log"
done
b0_runs "$out/c4" CUDA_KERNELS_K1_SILU_H2=0 "${variants[@]}"
step autotune 300 "${B0_BENCH[@]}" --backend inductor --compile-mode max-autotune-no-cudagraphs --freezing \
  -o "$out/c4/b0_inductor_max_autotune.json"
python3 -m cuda_kernels.bench_lines C4 "$out/c4" 2>> "$log" | tee -a "$log"
tar czf "$out/s17c4.tgz" -C "$out" c4 && rm -rf "$out/c4"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -16
echo "C4_OK=$ok"
