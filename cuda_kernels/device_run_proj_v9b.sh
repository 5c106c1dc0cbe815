#!/usr/bin/env bash
# The projections' read pattern (probes/probe_stream.cu) and project_v9t's tasks by bulk copies (project_v9b_kernel,
# CUDA_KERNELS_PROJ_V9_BULK=1; NOTES.md "Session 19: the projections' read pattern"). From the repository root (~6
# minutes on an H200, the extension rebuilt):
#   timeout 590 bash cuda_kernels/device_run_proj_v9b.sh OUTDIR
# build -> the probe (plain reads, v9t's cp.async loader at 2-4 slots, bulk copies; with and without the writes) ->
# GPU tests (test_mbconv_proj_v9b.py: every block where it runs at batches 1, 5, 128 against float64 and bit for bit
# the cp.async loader, odd sizes, B0 through the check) -> B0 default / PROJ_V9_BULK=1, twice, interleaved -> Nsight
# Compute of the projections at 1.0, 2.1, 3.1 both ways (L2 flushed).
# Files: OUTDIR/log.txt, OUTDIR/proj_v9b.tgz. Last line V9B_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs, PROJ_METRICS
mbconv_begin V9B 575
mkdir -p "$out/v9b"
step probe 90 bash -c "nvcc -std=c++17 -O3 -arch=sm_90a -Icuda_kernels/csrc cuda_kernels/probes/probe_stream.cu \
  -o /tmp/probe_stream && /tmp/probe_stream | tee $out/v9b/probe_stream.txt" || ok=0
variants=(default)
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9b.py \
  && variants+=("CUDA_KERNELS_PROJ_V9_BULK=1") || ok=0
b0_runs "$out/v9b" CUDA_KERNELS_PROJ_V9_BULK=0 "${variants[@]}"
for bulk in 0 1; do
  step "ncu_bulk$bulk" 80 env CUDA_KERNELS_PROJ_V9_BULK=$bulk ncu --clock-control none --cache-control all \
    --print-units base -k regex:project_v9 --metrics "$PROJ_METRICS" --csv --page raw \
    --log-file "$out/v9b/proj_bulk$bulk.csv" python3 -m cuda_kernels.mbconv_profile features.1.0 features.2.1 \
    features.3.1 || ok=0
done
python3 -m cuda_kernels.bench_lines V9B "$out/v9b" 2>> "$log" | tee -a "$log"
tar czf "$out/proj_v9b.tgz" -C "$out" v9b && rm -rf "$out/v9b"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -14
echo "V9B_OK=$ok"
