#!/usr/bin/env bash
# Session 30's second call (~8 minutes; NOTES.md "Current state", its predictions there): E's halo rows kept between
# bands at k = 5 (CUDA_KERNELS_K1_HALO5=1, expand_dw_v8_kernel_dhurfwsh at B0's 3.1, B2's 3.1 / 3.2) and, =2, B0's 3.1
# in 2 bands of 14 with it (kV8HaloBands): the GPU tests (float64, the default bit for bit / within 1e-4, B0 end to
# end), B0 with each (b0_switches, one process), kernel 1 at 3.1 under Nsight Compute off, =1 and =2, B2 with =1;
# then Nsight Compute's full set with per-instruction stall sampling of the defaults' kernel 1 at 3.1 and 4.1 (what
# its warps wait on, for the next design). From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s30_halo5.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/halo5.tgz, OUTDIR/b2/ (log.txt, b2_switches.json), OUTDIR/bands/ (log.txt, the =2
# CSV), OUTDIR/k1src/ (log.txt, ncu_mbconv_k1.tar.gz: raw.csv, details.csv, source_features.3.1.csv,
# source_features.4.1.csv). Last lines HALO5_OK, B2_OK, BANDS_OK.
set -uo pipefail
dir=${1:?output folder}
EXTRA_VARIANTS="CUDA_KERNELS_K1_HALO5=2" SWITCH_BUDGET=270 bash cuda_kernels/device_run_switch.sh "$dir" HALO5 \
  CUDA_KERNELS_K1_HALO5=1 tests/test_mbconv_k1_halo5.py features.3.1
source cuda_kernels/device_lib.sh  # b2_switches, mbconv_begin, kernel_ncu
b2_switches "$dir" CUDA_KERNELS_K1_HALO5=1
out="$dir/bands"
mbconv_begin BANDS 70
kernel_ncu "$out" K1 expand_dw CUDA_KERNELS_K1_HALO5=2 features.3.1
echo "BANDS_OK=$ok"
VERSION=11 BLOCKS="features.3.1 features.4.1" timeout 170 bash cuda_kernels/device_run_ncu_mbconv_k1.sh "$dir/k1src"
rm -f "$dir"/k1src/*.csv
