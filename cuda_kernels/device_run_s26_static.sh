#!/usr/bin/env bash
# Kernel 1 compiled for B0's shapes (CUDA_KERNELS_K1_STATIC=1, off until measured; NOTES.md "Session 26"): its GPU
# tests (every distinct B0 / B2 block, bit for bit the dynamic kernel's output where a static one ran; B0 end to end),
# B0 with and without it (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 2.0, 2.1, 3.0, 3.1, off and on,
# then features.2.1 beside eager and both torch.compile modes with the switch on (mbconv_bench, CUDA-graph replays:
# the block the issue's 3x is nearest at, 142.8 against 408.4 us in call 3). Predictions: kernel 1 2.1 -6..-12%, 3.1
# -5..-10%, 2.0 -8..-15%, 3.0 -6..-12%; B0 -25..-45 us; 2.1's block ~131-137 us. From the repository root (~8 minutes):
#   timeout 490 bash cuda_kernels/device_run_s26_static.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/static.tgz (switches.json, k1_*.csv), OUTDIR/block_2_1.json, OUTDIR/bench_log.txt.
out=${1:?output folder}
SWITCH_BUDGET=300 bash cuda_kernels/device_run_switch.sh "$out" STATIC CUDA_KERNELS_K1_STATIC=1 \
  tests/test_mbconv_k1_static.py features.2.0 features.2.1 features.3.0 features.3.1
left=$(( 460 - SECONDS ))
echo "== bench 2.1 (limit ${left}s)"
CUDA_KERNELS_K1_STATIC=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext" timeout "$left" \
  python3 -m cuda_kernels.mbconv_bench --budget-s $(( left - 30 )) --compile-mode default \
  --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 --version 11 \
  --out "$out/block_2_1.json" > "$out/bench_log.txt" 2>&1
echo "BENCH rc=$? $(tail -3 "$out/bench_log.txt" | tr '\n' ' ')"
