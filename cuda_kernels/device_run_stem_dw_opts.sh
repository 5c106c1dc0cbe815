#!/usr/bin/env bash
# The stem + block 1.0 kernel's two options (NOTES.md "Session 19: the stem + block 1.0 kernel, two options"): the
# stem's bias in its MMA (CUDA_KERNELS_STEM_DW_BC=1) and whole-band depthwise items (CUDA_KERNELS_STEM_DW_SEG=8).
# From the repository root (~7 minutes on an H200, the extension built):
#   timeout 590 bash cuda_kernels/device_run_stem_dw_opts.sh OUTDIR
# build -> GPU tests (test_stem_mbconv.py: the four builds against float64 at five shapes, the profiler naming each;
# B0 with the unit) -> Nsight Compute of the kernel in each build (time, instructions, issue) -> B0 default / BC /
# SEG=8 / both, twice, interleaved. Files: OUTDIR/log.txt, OUTDIR/stem_dw_opts.tgz. Last line SDW_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin SDW 580
mkdir -p "$out/sdw"
step tests 150 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_stem_mbconv.py || ok=0
for v in "0 4" "1 4" "0 8" "1 8"; do
  set -- $v
  step "ncu_bc$1_seg$2" 60 env CUDA_KERNELS_STEM_DW_BC=$1 CUDA_KERNELS_STEM_DW_SEG=$2 ncu --clock-control none \
    --cache-control all --print-units base -k regex:stem_dw --metrics "$PROJ_METRICS" --csv --page raw \
    --log-file "$out/sdw/ncu_bc$1_seg$2.csv" python3 -m cuda_kernels.effnet_stem_profile --unit || ok=0
done
if [ "$ok" = 1 ]; then
  b0_runs "$out/sdw" "CUDA_KERNELS_STEM_DW_BC=0 CUDA_KERNELS_STEM_DW_SEG=4" default CUDA_KERNELS_STEM_DW_BC=1 \
    CUDA_KERNELS_STEM_DW_SEG=8 "CUDA_KERNELS_STEM_DW_BC=1 CUDA_KERNELS_STEM_DW_SEG=8"
fi
python3 -m cuda_kernels.bench_lines SDW "$out/sdw" 2>> "$log" | tee -a "$log"
tar czf "$out/stem_dw_opts.tgz" -C "$out" sdw && rm -rf "$out/sdw"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -16
echo "SDW_OK=$ok"
