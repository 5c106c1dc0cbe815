#!/usr/bin/env bash
# Nsight Compute (full set, per-instruction stall sampling) of one C = 256 a6 14x14 block in place in ConvFirstNet-H200,
# variant 3 (the default) and variant 7 (CUDA_KERNELS_C512_VARIANT=256:7), from the repository root (~2 minutes):
#   bash cuda_kernels/device_run_ncu_v3_v7.sh OUTDIR
# Why (NOTES.md, "Session 8"): variant 7 removed H's shared-memory round trip and the per-chunk barrier and ran as fast
# as variant 3 (101.8 / 103.4 us); it also moved the conv onto the consumers. Side by side, the tensor pipe's active
# share, the consumers' stall reasons and the instructions per tile say what binds the C = 256 block (42% of the
# network). Files: OUTDIR/{raw,details,source}_v{3,7}.csv and OUTDIR/ncu_v3_v7.tar.gz of them with log.txt.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
for v in 3 7; do
  timeout 110 env CUDA_KERNELS_C512_VARIANT=256:$v ncu --profile-from-start off --clock-control none \
    --cache-control none --set full --import-source no --kernel-name-base demangled \
    -k regex:"(persistent|ksplit)_kernel<.int.256[,>]" -c 1 -f -o "$out/v$v" \
    python3 -m cuda_kernels.profile_network convfirstnet_h200 >> "$log" 2>&1
  echo "v$v ncu exit $?" | tee -a "$log"
  ncu --import "$out/v$v.ncu-rep" --page raw --csv > "$out/raw_v$v.csv" 2>> "$log"
  ncu --import "$out/v$v.ncu-rep" --page details --csv > "$out/details_v$v.csv" 2>> "$log"
  timeout 60 ncu --import "$out/v$v.ncu-rep" --page source --csv --print-source sass > "$out/source_v$v.csv" 2>> "$log"
done
ls -la "$out" >> "$log"
tar -czf "$out/ncu_v3_v7.tar.gz" -C "$out" $(cd "$out" && ls ./*.csv log.txt)
