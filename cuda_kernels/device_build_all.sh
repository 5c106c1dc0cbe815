#!/usr/bin/env bash
# Build every CUDA extension of cuda_kernels/ at once (each its own ninja build, MAX_JOBS=2 apiece), so that a
# device call's later steps (tests, benches, networks) find them in torch's extension cache. From the root:
#   bash cuda_kernels/device_build_all.sh OUTDIR
# Writes OUTDIR/build_<ext>.log, OUTDIR/so_<ext>.txt (the built .so) and, per extension, the registers and
# stack of each kernel (cuobjdump). Last line BUILD_OK=1 when every extension built, else BUILD_OK=0 and the
# names of those that did not.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=2
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda-13.0 ]; then
  export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH
fi
exts="bf mb s2 c512 c768 s2w stem estem ehead"
start=$(date +%s)
for ext in $exts; do
  timeout 300 python3 - "$ext" "$out" > "$out/build_$ext.log" 2>&1 <<'PY' &
import sys
from cuda_kernels import _build, effnet_head, effnet_stem, stem
ext, out = sys.argv[1], sys.argv[2]
load = {"bf": _build.load_extension, "mb": _build.load_mbconv_extension,
        "s2": _build.load_convfirst_s2_extension, "c512": _build.load_convfirst_c512_extension,
        "c768": _build.load_convfirst_c768_extension, "s2w": _build.load_convfirst_s2_wgmma_extension,
        "stem": stem._extension, "estem": effnet_stem._extension, "ehead": effnet_head._extension}[ext]
m = load()
open(f"{out}/so_{ext}.txt", "w").write(m.__file__)
print("built", ext, m.__file__)
PY
done
wait
cuobj=$(command -v cuobjdump || python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))" 2>/dev/null)
failed=""
for ext in $exts; do
  if [ -s "$out/so_$ext.txt" ]; then
    [ -x "$cuobj" ] && timeout 20 "$cuobj" --dump-resource-usage "$(cat "$out/so_$ext.txt")" 2>&1 \
      | grep -E "Function|REG" > "$out/resources_$ext.txt"
  else
    failed="$failed $ext"; tail -5 "$out/build_$ext.log"
  fi
done
echo "build: $(( $(date +%s) - start )) s"
[ -z "$failed" ] && echo "BUILD_OK=1" || echo "BUILD_OK=0 failed:$failed"
