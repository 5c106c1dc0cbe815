#!/usr/bin/env bash
# Session 30's third call (~7 minutes): B0's 3.1 in bands of 14 with the halo kept, version 11's default since s30
# call 2 (CUDA_KERNELS_K1_HALO5=2 unless set): the GPU tests that run B0's 3.1 on version 11 (the halo kernel's own,
# the static kernels pinned to today's bands, the packed-fp16 epilogue, the multiplies, U in registers, whole units,
# version 8's, the HFMA2 depthwise, the staged projection), then B0 with and without it (b0_switches). From the
# repository root:
#   timeout 590 bash cuda_kernels/device_run_s30_default.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/tests.log, OUTDIR/switches.json. Last line DEFAULT_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin DEFAULT 560
step tests 330 bash -c "python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_halo5.py \
  tests/test_mbconv_k1_static.py tests/test_mbconv_k1_dh2.py tests/test_mbconv_k1_fastdiv.py \
  tests/test_mbconv_k1_u_reg.py tests/test_mbconv_k1_whole.py tests/test_mbconv_v8.py tests/test_mbconv_hfma2.py \
  tests/test_mbconv_proj_v9s.py -k 'halo5 or 3.1 or efficientnet_b0_' > $out/tests.log 2>&1"
tail -3 "$out/tests.log" | tee -a "$log"
grep -E "^FAILED" "$out/tests.log" | head -20 | tee -a "$log"
step switches 110 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_HALO5=0 -o "$out/switches.json"
grep -E "^SWITCHES " "$log" | tail -3
echo "DEFAULT_OK=$ok"
