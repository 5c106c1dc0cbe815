#!/usr/bin/env bash
# Where kernel 1 stores D evict_last (CUDA_KERNELS_D_L2_KEEP, read at every launch; session 37): EfficientNet-B2 and
# -B0 end to end in one process each (b0_switches: the check before timing under the default, then the graphs of
# "as is" = only where the projection reads D evict_first, "all" = every block as in session 36's build, and "off"
# timed interleaved). From the repository root (~4 minutes):
#   timeout 590 bash cuda_kernels/device_run_l2keep.sh OUTDIR
# Files: OUTDIR/log.txt, b2.json, b0.json. Last line L2KEEP_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step
mbconv_begin L2KEEP "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
for m in b2 b0; do
  step "$m" 150 python3 -m cuda_kernels.b0_switches --model "efficientnet_$m" --runs 3 \
    CUDA_KERNELS_D_L2_KEEP=all CUDA_KERNELS_D_L2_KEEP=off -o "$out/$m.json"
done
grep -E "^== |^SWITCHES |Error" "$log" | cut -c1-240 | tail -20
echo "L2KEEP_OK=$ok"
