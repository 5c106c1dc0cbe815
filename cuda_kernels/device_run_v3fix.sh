#!/usr/bin/env bash
# Variant 3 after the setmaxnreg fix (NOTES.md "Variant 3: the illegal instruction"), one short device
# call (<= ~110 s), from the repository root:
#   timeout 115 bash cuda_kernels/device_run_v3fix.sh OUTDIR
# build (ptxas log) -> the persistent kernels' USETMAXREG lines from the built extension (expect
# TRY_ALLOC 0xa8, DEALLOC 0x20, TRY_ALLOC 0x90 per instance; no DEALLOC 0x90) -> the four smoke3 tests
# (variant 3 against float64) and one bit-identity test with variant 0 -> if the tests fail: one launch
# under cuda-gdb (faulting warp, PC, x/4i $pc, registers) or compute-sanitizer -> variants 0/2/3/4 at
# C = 256 a6 14x14 and C = 128 a6 28x28 (batch 128, eager beside, no torch.compile, no mma.sync).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
nvidia-smi --query-gpu=name,driver_version --format=csv >> "$log" 2>&1
step build 60 env BLOCK_FUSION_PTXAS_VERBOSE=1 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; l(verbose=True)" || { tail -30 "$log"; exit 1; }
so=$(python3 -c "import torch.utils.cpp_extension as e, glob; print(glob.glob(e._get_build_directory('perfmodel_convfirst_c512_90', False) + '/*.so')[0])" 2>/dev/null)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then
  "$cuobj" -sass "$so" | awk '/Function : /{f = /persistent/; if (f) print} f && /USETMAXREG/' | tee -a "$log"
fi
pers="test_persistent_variant and (128-4-2-9-5 or 256-6-1-1-1 or 256-4-300-14-14 or 128-3-19-28-28)"
step tests3 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py \
  -k "($pers) or (test_persistent_variant_is_bitwise_variant_0 and 128-3-19-28)"
rc=$?
if [ $rc -ne 0 ]; then
  one=(python3 -m pytest -q -x -p no:cacheprovider tests/test_convfirst_c512.py -k "test_persistent_variant and 256-6-1-1-1")
  if command -v cuda-gdb > /dev/null; then
    step gdb 50 env CUDA_LAUNCH_BLOCKING=1 cuda-gdb -batch -ex "set pagination off" -ex "set cuda break_on_launch none" \
      -ex run -ex "info cuda kernels" -ex "cuda kernel block thread" -ex "x/4i \$pc" -ex "x/4i \$pc-32" \
      -ex "info registers" -ex bt --args "${one[@]}"
  elif command -v compute-sanitizer > /dev/null; then
    step sanitizer 50 compute-sanitizer --tool memcheck --show-backtrace device "${one[@]}"
  else
    echo "== no cuda-gdb / compute-sanitizer on this machine" | tee -a "$log"
  fi
  grep -E "passed|failed|error|Error|EXCEPTION|=> |USETMAXREG" "$log" | tail -40
  exit 1
fi
step bench 45 python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync --variants 0,2,3,4 \
  --case c256:6:14 --case c128:6:28 --out "$out/v3fix_bench.json"
grep -E "^== |passed|failed|USETMAXREG|variant|c256|c128" "$log" | tail -40
