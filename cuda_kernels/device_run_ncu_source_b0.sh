#!/usr/bin/env bash
# Nsight Compute's full set with per-instruction stall sampling of the B0 kernels with the most time left and no
# source-level profile yet (NOTES.md "Current state", session 19): the stem + block 1.0 kernel (stem_dw_kernel: 126 us,
# issue-bound at 68.5 M warp instructions, ~52% of issue slots used; its SASS per warp: the stem tile ~250
# instructions, of which ~110 integer; a depthwise item ~830, of which 144 HFMA2 and ~260 integer) and the early
# projections (project_v9t at 2.1 and 3.1: 42% / 28% of DRAM). L2 not flushed (as in a run). From the repository root
# (~3 minutes on an H200, the extension built):
#   timeout 400 bash cuda_kernels/device_run_ncu_source_b0.sh OUTDIR
# Files: OUTDIR/ncu_src.tgz (raw_stem.csv, raw_proj.csv: every metric; source_stem.csv, source_proj_2.1.csv,
# source_proj_3.1.csv: SASS with stall samples, the second launch of each) and OUTDIR/log.txt. Summaries:
# python -m cuda_kernels.sass_mix PREFIX CSV --regions 0x400. Last line NCUSRC_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin NCUSRC 390
mkdir -p "$out/src"
step ncu_stem 120 ncu --clock-control none --cache-control none --set full --import-source no -k regex:stem_dw \
  -c 2 -f -o "$out/src/stem" python3 -m cuda_kernels.effnet_stem_profile --unit || ok=0
step ncu_proj 120 ncu --clock-control none --cache-control none --set full --import-source no -k regex:project_v9 \
  -c 4 -f -o "$out/src/proj" python3 -m cuda_kernels.mbconv_profile features.2.1 features.3.1 || ok=0
for r in stem proj; do
  ncu --import "$out/src/$r.ncu-rep" --page raw --csv > "$out/src/raw_$r.csv" 2>> "$log"
done
timeout 60 ncu --import "$out/src/stem.ncu-rep" --page source --csv --print-source sass --launch-skip 1 \
  --launch-count 1 > "$out/src/source_stem.csv" 2>> "$log"
n=0
for b in 2.1 3.1; do  # each block's first (warm-up) and second launch
  timeout 60 ncu --import "$out/src/proj.ncu-rep" --page source --csv --print-source sass --launch-skip $((2 * n + 1)) \
    --launch-count 1 > "$out/src/source_proj_$b.csv" 2>> "$log"
  n=$((n + 1))
done
rm -f "$out"/src/*.ncu-rep
tar czf "$out/ncu_src.tgz" -C "$out" src && rm -rf "$out/src"
echo "NCUSRC_OK=$ok"
