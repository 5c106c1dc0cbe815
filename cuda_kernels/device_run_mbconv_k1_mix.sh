#!/usr/bin/env bash
# Kernel 1's instruction mix, and the k = 3 two-image fault (session 13, call 2). From the repository root (~4 min):
#   timeout 590 bash cuda_kernels/device_run_mbconv_k1_mix.sh OUTDIR
# 1. compute-sanitizer memcheck on features.7.0 under version 8 with 2-image items (the launch that faulted in call 1;
#    batch 4, then 128): the faulting access, thread and SASS offset;
# 2. Nsight Compute's SourceCounters on kernel 1 at features.2.0, 2.1, 3.1, 5.1 and 6.1 (2-image items), version 9:
#    executed instructions and stall samples per SASS opcode (summed over the kernel by cuda_kernels/sass_mix.py),
#    the lines "MIX ...".
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin MIX 570
for b in 4 128; do
  step "memcheck_$b" 120 env CUDA_KERNELS_K1_IMAGES=2 compute-sanitizer --tool memcheck --print-limit 4 \
    python3 -m cuda_kernels.mbconv_profile --version 8 --batch $b features.7.0
done
grep -E "Invalid|at 0x|by thread|Address|ERROR SUMMARY" "$log" | head -30
for blk in features.2.0 features.2.1 features.3.1 features.5.1 features.6.1; do
  step "src_$blk" 60 env CUDA_KERNELS_K1_IMAGES=2 ncu --clock-control none --section SourceCounters \
    -k regex:expand_dw --launch-skip 1 -c 1 -f -o "/tmp/k1_$blk" python3 -m cuda_kernels.mbconv_profile --version 9 "$blk"
  ncu -i "/tmp/k1_$blk.ncu-rep" --page source --csv --print-source sass > "/tmp/k1_$blk.csv" 2>> "$log"
  python3 -m cuda_kernels.sass_mix "MIX $blk" "/tmp/k1_$blk.csv" 2>> "$log" | tee -a "$log"
done
tar czf "$out/k1_sass.tgz" -C /tmp $(cd /tmp && ls k1_features.*.csv 2>/dev/null) 2>> "$log"
echo "MIX_OK=$ok"
