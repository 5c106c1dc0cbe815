#!/usr/bin/env bash
# Session 31's first call (~8 minutes; NOTES.md "Current state", items 0 and 1): the expand's biases loaded early
# (device_run_s31_bias_early.sh: its tests, B0 and B2 with and without it, kernel 1 at 4.1 / 5.1 / 6.1 under Nsight
# Compute), then the GPU test files that run B0's 3.1 on a launch-value kernel 1 (bands of 14 under
# CUDA_KERNELS_K1_HALO5=2, the default since session 30, with another kernel-1 switch at its off value) and had not
# run under that default, each under its own share of the time left. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_s31_first.sh OUTDIR
# Files: OUTDIR/bias/ (that script's), OUTDIR/suite/<file>.log and summary.txt (last line ALL_TESTS_OK=1|0).
set -uo pipefail
out=${1:?output folder}
start=$(date +%s); limit=${LIMIT_S:-580}
left() { echo $((limit - ($(date +%s) - start))); }
bash cuda_kernels/device_run_s31_bias_early.sh "$out/bias" 2>&1 | tail -30
source cuda_kernels/device_lib.sh  # file_share
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
export MBCONV_TEST_VERSIONS=11
files=(tests/test_mbconv_k1_fastdiv.py tests/test_mbconv_k1_u_reg.py tests/test_mbconv_k1_whole.py
       tests/test_mbconv_v8.py tests/test_mbconv_hfma2.py tests/test_mbconv_proj_v9s.py)
d="$out/suite"; mkdir -p "$d"; all=1; : > "$d/summary.txt"
for i in "${!files[@]}"; do
  f=${files[$i]}; name=$(basename "$f" .py); t=$(left)
  if [ "$t" -lt 20 ]; then echo "$name: not run (time)" | tee -a "$d/summary.txt"; all=0; continue; fi
  share=$(FILE_MIN_S=40 file_share "$t" $(( ${#files[@]} - i )))
  timeout -k 5 "$share" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider "$f" > "$d/$name.log" 2>&1
  rc=$?
  summary=$(grep -E "^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed|skipped)|no tests ran" "$d/$name.log" | tail -1)
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && summary="timed out after ${share}s ($summary)"
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || all=0
  echo "$name: ${summary:-exit $rc}" | tee -a "$d/summary.txt"
done
echo "ALL_TESTS_OK=$all" | tee -a "$d/summary.txt"
