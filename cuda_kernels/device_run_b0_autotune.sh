#!/usr/bin/env bash
# EfficientNet-B0 against torch.compile max-autotune-no-cudagraphs with freezing, the baseline session 14's call 5
# could not finish compiling in 330 s on a machine without an Inductor cache (each addmm and convolution autotuned).
# This call gives it the rest of the call (~470 s) after the fused network and torch.compile default, all in one run,
# with Inductor's cache in the repository (.inductor_cache, ignored by git): where the compile is cut off again, the
# autotuning results it stored come back as autotune_cache.tgz (if under 16 MB) for the next call to carry
# (`carry: [".inductor_cache"]` after unpacking it there). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_b0_autotune.sh OUTDIR
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH, B0_FUSED
mbconv_begin AUTO 565
export TORCHINDUCTOR_CACHE_DIR="$PWD/.inductor_cache"
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
step fused 60 "${B0_FUSED[@]}" -o "$out/b0_fused.json"
step inductor 90 "${B0_BENCH[@]}" --backend inductor --freezing -o "$out/b0_inductor.json"
step autotune 480 "${B0_BENCH[@]}" --backend inductor --compile-mode max-autotune-no-cudagraphs --freezing \
  -o "$out/b0_inductor_max_autotune.json"
if [ ! -f "$out/b0_inductor_max_autotune.json" ]; then
  tar czf /tmp/autotune_cache.tgz -C "$PWD" .inductor_cache 2>> "$log"
  size=$(stat -c %s /tmp/autotune_cache.tgz 2>/dev/null || echo 0)
  echo "inductor cache: $size bytes" | tee -a "$log"
  [ "$size" -gt 0 ] && [ "$size" -lt 16000000 ] && cp /tmp/autotune_cache.tgz "$out/"
fi
python3 -m cuda_kernels.bench_lines AUTO "$out" 2>> "$log" | tee -a "$log"
echo "AUTO_OK=$ok"
