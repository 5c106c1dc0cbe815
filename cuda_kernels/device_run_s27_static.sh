#!/usr/bin/env bash
# Session 26's two static-shape switches in one call (~7 minutes; device_run_switch.sh times either alone):
# CUDA_KERNELS_K1_STATIC_REST=1 (the rest of B0's kernel 1) and CUDA_KERNELS_PROJ_STATIC=1 (B0's
# projections), both off until measured (NOTES.md "Session 26", predictions there): both GPU test files, B0 under
# each alone and both (b0_switches), kernel 1 under Nsight Compute (L2 flushed) at 4.0-6.1 with both off and on, then
# the projections at 2.0-7.0 with PROJ_STATIC off and on. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s27_static.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/static2.tgz, OUTDIR/proj/ (proj_*.csv). Last lines STATIC2_OK=1|0, PROJ_NCU_OK=1|0.
out=${1:?output folder}
SWITCH_BUDGET=420 bash cuda_kernels/device_run_switch.sh "$out" STATIC2 \
  "CUDA_KERNELS_K1_STATIC_REST=1 CUDA_KERNELS_PROJ_STATIC=1" \
  "tests/test_mbconv_k1_static.py tests/test_mbconv_proj_static.py" \
  features.4.0 features.4.1 features.5.0 features.5.1 features.6.0 features.6.1
source cuda_kernels/device_lib.sh  # step, kernel_ncu (the extension is built: device_run_switch.sh's first step)
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
log="$out/log.txt"; start=$(date +%s); budget=150; ok=1
left() { echo $((budget - ($(date +%s) - start))); }
mkdir -p "$out/proj"
for v in CUDA_KERNELS_PROJ_STATIC=0 CUDA_KERNELS_PROJ_STATIC=1; do
  kernel_ncu "$out/proj" PROJ project "$v" features.2.0 features.2.1 features.3.0 features.3.1 features.4.0 \
    features.4.1 features.5.0 features.5.1 features.6.0 features.6.1 features.7.0
done
echo "PROJ_NCU_OK=$ok"
