#!/usr/bin/env bash
# ConvFirstNet-L's C = 768 kernels (NOTES.md "C = 768"), one device call of ~5 minutes, from the repository root:
#   bash cuda_kernels/device_run_c768.sh OUTDIR [STEPS]
# STEPS (default "build smoke tests bench e2e") may also name "e2e23": ConvFirstNet-L fused with the C = 768
# kernels off (23 of 27 blocks; the four C = 768 blocks in compiled PyTorch), and "e2e24": only the stride-2
# 384 -> 768 kernel on (CUDA_KERNELS_C768=stride2, 24 of 27). The network runs use each kernel's fastest variant
# from the bench step (CUDA_KERNELS_C768_VARIANT, CUDA_KERNELS_C768_S2_VARIANT; 0 without it).
# build  the C = 768 extension (ptxas log) in front; the block-fusion, stride-2 and C = 512 extensions (the
#        rest of ConvFirstNet-L) build on the other CPUs meanwhile;
# smoke  two small launches (one tile of the stride-1 cluster kernel, one stride-2 case) under 40 s: a hang
#        stops the call here;
# tests  the GPU tests of tests/test_convfirst_c768.py (float64 reference, <= 2x PyTorch fp16's error, outputs
#        poisoned with NaN, batch 128 / 1 / odd, odd sizes, the raw ops' refusals, the swapped 3-block net);
# bench  C = 768 a6 7x7 and 384 -> 768 a6 14x14 (batch 128) beside eager and torch.compile (default);
# e2e    ConvFirstNet-L with every switch on (27 of 27 blocks fused), rest compiled, freezing, CUDA graphs,
#        30 repeats; then `--backend inductor --freezing --cuda-graphs` of the same network.
# Each step has its own time limit; the tail of log.txt greps the results.
set -uo pipefail
out=${1:?output folder}; steps=${2:-build smoke tests bench e2e}
mkdir -p "$out"; log="$out/log.txt"
has() { [[ " $steps " == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
export CUDA_KERNELS_C768=1 CUDA_KERNELS_C384=1 CUDA_KERNELS_L_WIDTHS=1  # every ConvFirstNet-L switch on
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
others=""
if has e2e || has e2e23 || has e2e24; then
  timeout 280 python3 -c "from cuda_kernels._build import load_extension as a, load_convfirst_s2_extension as b, \
load_convfirst_c512_extension as c; a(); b(); c()" > "$out/build_others.log" 2>&1 &
  others=$!
fi
if has build; then
  step build 150 env BLOCK_FUSION_PTXAS_VERBOSE=1 python3 -c \
    "from cuda_kernels._build import load_convfirst_c768_extension as l; l(verbose=True)" || { tail -30 "$log"; exit 1; }
fi
if has smoke; then
  step smoke 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c768.py \
    -k "test_odd_sizes_and_batches and 6-1-1-1 or test_stride2_odd_sizes and 2-5-2-2"
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "== smoke hung: stopping (see $log)" | tee -a "$log"; exit 1; fi
fi
has tests && step tests 100 python3 -m pytest -q --maxfail=6 --tb=short -p no:cacheprovider -m cuda tests/test_convfirst_c768.py
if has bench; then
  step bench_s1 60 python3 -m cuda_kernels.bench_c768 --stride 1 --modes default --repeats 20 --out "$out/c768_bench.json"
  step bench_s2 60 python3 -m cuda_kernels.bench_c768 --stride 2 --modes default --repeats 20 --out "$out/s2_c768_bench.json"
fi
[ -n "$others" ] && { wait "$others"; echo "== build_others: exit $? $(date +%T)" | tee -a "$log"; }
best() { python3 -c "from cuda_kernels.bench_c768 import best_variant as b; print(b('$1'))" 2>/dev/null || echo 0; }
export CUDA_KERNELS_C768_VARIANT=$(best "$out/c768_bench.json") CUDA_KERNELS_C768_S2_VARIANT=$(best "$out/s2_c768_bench.json")
echo "== variants: stride 1 $CUDA_KERNELS_C768_VARIANT, stride 2 $CUDA_KERNELS_C768_S2_VARIANT" | tee -a "$log"
if has e2e; then
  step e2e_fused 100 python3 cli.py bench convfirstnet_l --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_convfirstnet_l_cuda_kernels_compiled_graphs.json"
fi
if has e2e24; then  # the stride-2 384 -> 768 kernel only: 24 of 27 fused, the three C = 768 blocks compiled
  step e2e_fused24 100 env CUDA_KERNELS_C768=stride2 python3 cli.py bench convfirstnet_l --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_convfirstnet_l_cuda_kernels_24of27_compiled_graphs.json"
fi
if has e2e23; then  # the four C = 768 blocks in compiled PyTorch (their kernels off): 23 of 27 fused
  step e2e_fused23 100 env CUDA_KERNELS_C768=0 python3 cli.py bench convfirstnet_l --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_convfirstnet_l_cuda_kernels_23of27_compiled_graphs.json"
fi
if has e2e; then
  step e2e_inductor 120 python3 cli.py bench convfirstnet_l --backend inductor --freezing --cuda-graphs --repeats 30 \
    -o "$out/h200_convfirstnet_l_inductor_freezing_graphs.json"
fi
grep -E "passed|failed|error|FAILED|fused|fallback|TFLOP|registers|spill|latency|median|Segmentation|== " "$log" | tail -60
