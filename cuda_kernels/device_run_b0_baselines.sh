#!/usr/bin/env bash
# EfficientNet-B0's end-to-end baselines the issue asks for, beside the fused network, in one call (~8 minutes; the
# max-autotune compile is the long part, so it runs last). From the repository root:
#   timeout 500 bash cuda_kernels/device_run_b0_baselines.sh OUTDIR
# fused (the default version, rest compiled, freezing, CUDA graphs) -> torch.compile default (freezing, CUDA graphs)
# -> eager (CUDA graphs) -> torch.compile max-autotune-no-cudagraphs (freezing; timed with CUDA graphs). Lines
# "BASE e2e ...". Set the fused run's switches in the environment to measure another configuration.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH
mbconv_begin BASE 480
step fused 60 "${B0_BENCH[@]}" --backend cuda_kernels --compile-rest --freezing -o "$out/b0_fused.json"
step inductor 90 "${B0_BENCH[@]}" --backend inductor --freezing -o "$out/b0_inductor.json"
step eager 40 "${B0_BENCH[@]}" --backend eager -o "$out/b0_eager.json"
step autotune 330 "${B0_BENCH[@]}" --backend inductor --compile-mode max-autotune-no-cudagraphs --freezing \
  -o "$out/b0_inductor_max_autotune.json"
python3 -m cuda_kernels.bench_lines BASE "$out" 2>> "$log" | tee -a "$log"
echo "BASE_OK=$ok"
