#!/usr/bin/env bash
# Session 20's first call: what session 19 built without a GPU, measured in one run (NOTES.md "Current state",
# session 19). From the repository root (~8 minutes on an H200, every extension rebuilt):
#   timeout 590 bash cuda_kernels/device_run_s20_first.sh OUTDIR
# build -> the read-pattern probe (probes/probe_stream.cu) -> GPU tests of project_v9b, the fused head and the ablation
# switch -> B0 default / PROJ_V9_BULK=1 / EFFNET_HEAD=1, twice, interleaved (a variant whose tests failed is not
# timed) -> the ablation (what kernel 1, the SE and the projections cost on the critical path).
# Files: OUTDIR/log.txt, OUTDIR/s20.tgz. Last line S20_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin S20 580
mkdir -p "$out/s20"
step probe 60 bash -c "nvcc -std=c++17 -O3 -arch=sm_90a -Icuda_kernels/csrc cuda_kernels/probes/probe_stream.cu \
  -o /tmp/probe_stream && /tmp/probe_stream | tee $out/s20/probe_stream.txt" || ok=0
variants=(default)
step tests_v9b 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9b.py \
  && variants+=("CUDA_KERNELS_PROJ_V9_BULK=1") || ok=0
step tests_head 90 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_effnet_head.py \
  && variants+=("CUDA_KERNELS_EFFNET_HEAD=1") || ok=0
step tests_ablate 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_ablate.py || ok=0
# "default" runs with both new switches off (an exported value cannot leak in)
b0_runs "$out/s20" "CUDA_KERNELS_PROJ_V9_BULK=0 CUDA_KERNELS_EFFNET_HEAD=0" "${variants[@]}"
step ablate 150 python3 -m cuda_kernels.ablate_b0 -o "$out/s20/ablate.json" || ok=0
python3 -m cuda_kernels.bench_lines S20 "$out/s20" 2>> "$log" | tee -a "$log"
tar czf "$out/s20.tgz" -C "$out" s20 && rm -rf "$out/s20"
grep -E "^== |^ABLATE |passed|failed|Error|error:" "$log" | tail -24
echo "S20_OK=$ok"
