#!/usr/bin/env bash
# Nsight Compute (full set, per-instruction stall sampling) of MBConv version 3's kernel 1 (expand + depthwise + SiLU +
# pool partials: 60% of EfficientNet-B0's fused time, session 7's in-place profile), from the repository root
# (~2-3 minutes on an H200):
#   bash cuda_kernels/device_run_ncu_mbconv_k1.sh OUTDIR   (BLOCKS="features.2.1 features.3.1 features.5.1", VERSION=3)
# (REGEX=project: the projections instead, or any kernel regex matching one launch a block)
# Why (NOTES.md, "MBConv version 5: why v3 sits ~3x above its floors" and "Session 8"): versions 4-7 each moved a part
# the static accounting blamed (occupancy, the depthwise's instruction count on tensor cores, the projection, the SE)
# and none made B0 faster; issue 11's 2x needs kernel 1 several times faster, and the next design should start from
# where its warps really stall (stall reasons per SASS instruction), as the C = 256 block's did
# (ncu_in_place/c256_v3_v7/). cuda_kernels.mbconv_profile runs each block twice; the second launch of each is the one
# whose source page is exported. Files: OUTDIR/raw.csv, OUTDIR/details.csv, OUTDIR/source_<block>.csv, log.txt, and
# OUTDIR/ncu_mbconv_k1.tar.gz of them.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
blocks=${BLOCKS:-"features.2.1 features.3.1 features.5.1"} version=${VERSION:-3} regex=${REGEX:-expand_dw}
timeout 120 python3 -c "from cuda_kernels._build import load_mbconv_extension as l; print('built', l().__file__)" \
  >> "$log" 2>&1
timeout 200 ncu --clock-control none --cache-control none --set full --import-source no -k regex:"$regex" \
  -f -o "$out/k1" python3 -m cuda_kernels.mbconv_profile --version "$version" $blocks >> "$log" 2>&1
echo "ncu exit $?" | tee -a "$log"
ncu --import "$out/k1.ncu-rep" --page raw --csv > "$out/raw.csv" 2>> "$log"
ncu --import "$out/k1.ncu-rep" --page details --csv > "$out/details.csv" 2>> "$log"
n=0
for b in $blocks; do  # launches in order: each block's first (warm-up) and second
  timeout 60 ncu --import "$out/k1.ncu-rep" --page source --csv --print-source sass --launch-skip $((2 * n + 1)) \
    --launch-count 1 > "$out/source_$b.csv" 2>> "$log"
  n=$((n + 1))
done
rm -f "$out/k1.ncu-rep"
ls -la "$out" >> "$log"
tar -czf "$out/ncu_mbconv_k1.tar.gz" -C "$out" $(cd "$out" && ls ./*.csv log.txt)
