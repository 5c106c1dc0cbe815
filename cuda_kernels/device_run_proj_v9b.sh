#!/usr/bin/env bash
# project_v9t against its bulk-copy loader (project_v9b_kernel, CUDA_KERNELS_PROJ_V9_BULK=1; NOTES.md "Session 19: the
# projections' read pattern") under Nsight Compute at B0's 1.0, 2.1 and 3.1 (L2 flushed): time, DRAM, issue,
# instructions. The follow-up to session 20's first call (which runs the probe, the GPU tests and B0 both ways).
# From the repository root (~2 minutes on an H200, the extension built):
#   timeout 300 bash cuda_kernels/device_run_proj_v9b.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/proj_v9b.tgz. Last line V9B_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, PROJ_METRICS
mbconv_begin V9B 290
mkdir -p "$out/v9b"
for bulk in 0 1; do
  step "ncu_bulk$bulk" 80 env CUDA_KERNELS_PROJ_V9_BULK=$bulk ncu --clock-control none --cache-control all \
    --print-units base -k regex:project_v9 --metrics "$PROJ_METRICS" --csv --page raw \
    --log-file "$out/v9b/proj_bulk$bulk.csv" python3 -m cuda_kernels.mbconv_profile features.1.0 features.2.1 \
    features.3.1 || ok=0
  python3 -m cuda_kernels.ncu_lines "PROJ bulk$bulk" "$out/v9b/proj_bulk$bulk.csv" project_v9 features.1.0 \
    features.2.1 features.3.1 2>> "$log" | tee -a "$log"
done
tar czf "$out/proj_v9b.tgz" -C "$out" v9b && rm -rf "$out/v9b"
echo "V9B_OK=$ok"
