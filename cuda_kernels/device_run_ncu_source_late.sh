#!/usr/bin/env bash
# Nsight Compute's full set with per-instruction stall sampling where B0's time is after project_v9s (NOTES.md
# "Current state", session 20, next 3): kernel 1 at 2.0 and 2.1 (167 / 113 us in s19 call 2) and the projections past
# stage 4 on warpgroup MMAs (project_wg at 4.1, 5.1 and 6.1), looking first for what project_v9t had: an instruction
# that waits on a global load the warp could have issued earlier. L2 not flushed (as in a run). From the repository
# root (~3 minutes on an H200, the extension built):
#   timeout 400 bash cuda_kernels/device_run_ncu_source_late.sh OUTDIR
# Files: OUTDIR/ncu_late.tgz (raw_k1.csv, raw_wg.csv; source_k1_2.0.csv, source_k1_2.1.csv, source_wg_4.1.csv,
# source_wg_5.1.csv, source_wg_6.1.csv: SASS with stall samples, each block's second launch) and OUTDIR/log.txt;
# sass_mix lines in the log. Last line NCULATE_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin NCULATE 390
mkdir -p "$out/late"
step ncu_k1 120 ncu --clock-control none --cache-control none --set full --import-source no -k regex:expand_dw \
  -c 4 -f -o "$out/late/k1" python3 -m cuda_kernels.mbconv_profile features.2.0 features.2.1 || ok=0
step ncu_wg 120 ncu --clock-control none --cache-control none --set full --import-source no -k regex:project_wg \
  -c 6 -f -o "$out/late/wg" python3 -m cuda_kernels.mbconv_profile features.4.1 features.5.1 features.6.1 || ok=0
for r in k1 wg; do
  ncu --import "$out/late/$r.ncu-rep" --page raw --csv > "$out/late/raw_$r.csv" 2>> "$log"
done
source_of() {  # REPORT N NAME: launch N's SASS with stall samples, then its sass_mix summary
  timeout 60 ncu --import "$out/late/$1.ncu-rep" --page source --csv --print-source sass --launch-skip "$2" \
    --launch-count 1 > "$out/late/source_$3.csv" 2>> "$log"
  python3 -m cuda_kernels.sass_mix "$3" "$out/late/source_$3.csv" --lines 6 2>> "$log" | tee -a "$log"
}
source_of k1 1 k1_2.0
source_of k1 3 k1_2.1
source_of wg 1 wg_4.1
source_of wg 3 wg_5.1
source_of wg 5 wg_6.1
rm -f "$out"/late/*.ncu-rep
tar czf "$out/ncu_late.tgz" -C "$out" late && rm -rf "$out/late"
echo "NCULATE_OK=$ok"
