#!/usr/bin/env bash
# Nsight Compute (full set, per-instruction stall sampling) of one C = 256 a6 14x14 block in place in ConvFirstNet-H200,
# once per variant in VARIANTS (default "3 7", the pass of session 8: ncu_in_place/c256_v3_v7/), from the repository
# root (~1 minute per variant):
#   VARIANTS="3 8" bash cuda_kernels/device_run_ncu_c256.sh OUTDIR
# Each variant runs as CUDA_KERNELS_C512_VARIANT=256:V; the first C = 256 block's kernels are profiled: variants 3 and
# 7 one kernel (persistent / ksplit), variant 8 two (its conv kernel, then the fused FFN kernel), so that their own
# durations say where the block's time goes. CUDA_KERNELS_CONV8B=1 in the environment profiles variant 8 with its
# conv kernel version b (conv8b_kernel). Files: OUTDIR/{raw,details,source}_v<V>.csv and OUTDIR/ncu_c256.tar.gz of
# them with log.txt.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
for v in ${VARIANTS:-3 7}; do
  count=1; [ "$v" = 8 ] && count=2
  timeout 110 env CUDA_KERNELS_C512_VARIANT=256:$v ncu --profile-from-start off --clock-control none \
    --cache-control none --set full --import-source no --kernel-name-base demangled \
    -k regex:"(persistent|ksplit|conv8b?)_kernel<.int.256[,>]|ffn8_kernel" -c $count -f -o "$out/v$v" \
    python3 -m cuda_kernels.profile_network convfirstnet_h200 >> "$log" 2>&1
  echo "v$v ncu exit $?" | tee -a "$log"
  ncu --import "$out/v$v.ncu-rep" --page raw --csv > "$out/raw_v$v.csv" 2>> "$log"
  ncu --import "$out/v$v.ncu-rep" --page details --csv > "$out/details_v$v.csv" 2>> "$log"
  timeout 60 ncu --import "$out/v$v.ncu-rep" --page source --csv --print-source sass > "$out/source_v$v.csv" 2>> "$log"
  grep -h "gpu__time_duration.sum\|Duration" "$out/details_v$v.csv" | head -4 | tee -a "$log"
done
ls -la "$out" >> "$log"
tar -czf "$out/ncu_c256.tar.gz" -C "$out" $(cd "$out" && ls ./*.csv log.txt)
