#!/usr/bin/env bash
# Session 21's first call (NOTES.md "Current state", session 20): project_v9sr (CUDA_KERNELS_PROJ_V9_RX=1: the
# shortcut in registers one task ahead) tested and measured -> Nsight Compute of the residual early projections both
# ways (L2 flushed) -> B0 under the switch in one process (b0_switches.py). From the repository root (~4 minutes on an
# H200, every extension rebuilt):
#   timeout 400 bash cuda_kernels/device_run_s21_first.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/rx.tgz. Last line RX_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, PROJ_METRICS
mbconv_begin RX 390
mkdir -p "$out/rx"
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py || ok=0
for rx in 0 1; do
  step "ncu_rx$rx" 60 env CUDA_KERNELS_PROJ_V9_RX=$rx ncu --clock-control none --cache-control all \
    --print-units base -k regex:project_v9 --metrics "$PROJ_METRICS" --csv --page raw \
    --log-file "$out/rx/proj_rx$rx.csv" python3 -m cuda_kernels.mbconv_profile features.2.1 features.3.1 || ok=0
  python3 -m cuda_kernels.ncu_lines "PROJ rx$rx" "$out/rx/proj_rx$rx.csv" project_v9 features.2.1 features.3.1 \
    2>> "$log" | tee -a "$log"
done
step switches 80 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_V9_RX=1 -o "$out/rx/switches.json" || ok=0
tar czf "$out/rx.tgz" -C "$out" rx && rm -rf "$out/rx"
grep -E "^== |^SWITCHES |^PROJ |passed|failed" "$log" | tail -16
echo "RX_OK=$ok"
