#!/usr/bin/env bash
# project_v9s (CUDA_KERNELS_PROJ_V9_SS=1: the SE scale row staged in shared memory with each task's D rows; NOTES.md
# "Session 20: the projections wait on their scale loads") measured in one call: build -> its GPU tests -> Nsight
# Compute of the early projections both ways (L2 flushed: time, DRAM, issue, instructions) and v9s's per-instruction
# stalls at 2.1 -> B0 under the switch in one process (b0_switches.py). From the repository root (~5 minutes on an
# H200, every extension rebuilt):
#   timeout 500 bash cuda_kernels/device_run_s20_v9s.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/v9s.tgz. Summaries in the log: PROJ lines (ncu_lines), SWITCHES lines, sass_mix.
# Last line V9S_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, PROJ_METRICS
mbconv_begin V9S 490
mkdir -p "$out/v9s"
blocks=(features.1.0 features.2.0 features.2.1 features.3.0 features.3.1)
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_v9s.py || ok=0
for ss in 0 1; do
  step "ncu_ss$ss" 80 env CUDA_KERNELS_PROJ_V9_SS=$ss ncu --clock-control none --cache-control all \
    --print-units base -k regex:project_v9 --metrics "$PROJ_METRICS" --csv --page raw \
    --log-file "$out/v9s/proj_ss$ss.csv" python3 -m cuda_kernels.mbconv_profile "${blocks[@]}" || ok=0
  python3 -m cuda_kernels.ncu_lines "PROJ ss$ss" "$out/v9s/proj_ss$ss.csv" project_v9 "${blocks[@]}" 2>> "$log" \
    | tee -a "$log"
done
step ncu_src 90 env CUDA_KERNELS_PROJ_V9_SS=1 ncu --clock-control none --cache-control none --set full \
  --import-source no -k regex:project_v9 -c 2 -f -o "$out/v9s/src" python3 -m cuda_kernels.mbconv_profile \
  features.2.1 || ok=0
timeout 60 ncu --import "$out/v9s/src.ncu-rep" --page source --csv --print-source sass --launch-skip 1 \
  --launch-count 1 > "$out/v9s/source_v9s_2.1.csv" 2>> "$log"
ncu --import "$out/v9s/src.ncu-rep" --page raw --csv > "$out/v9s/raw_v9s_2.1.csv" 2>> "$log"
rm -f "$out"/v9s/*.ncu-rep
python3 -m cuda_kernels.sass_mix V9S "$out/v9s/source_v9s_2.1.csv" --lines 8 2>> "$log" | tee -a "$log"
step switches 150 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_V9_SS=1 \
  "CUDA_KERNELS_PROJ_V9_SS=1 CUDA_KERNELS_STEM_DW_SEG=8" -o "$out/v9s/switches.json" || ok=0
tar czf "$out/v9s.tgz" -C "$out" v9s && rm -rf "$out/v9s"
grep -E "^== |^SWITCHES |^PROJ |^V9S |passed|failed|Error|error:" "$log" | tail -40
echo "V9S_OK=$ok"
