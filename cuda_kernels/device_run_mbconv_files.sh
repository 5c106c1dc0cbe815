#!/usr/bin/env bash
# Some MBConv GPU test files under version 11's defaults, with only the MBConv extension built (~40 s, where
# device_run_all_tests.sh builds every extension: ~145 s), each file under its own share of the time left (device_lib.sh
# file_share, at least FILE_MIN_S, 40 s unless set). From the repository root:
#   LIMIT_S=420 bash cuda_kernels/device_run_mbconv_files.sh OUTDIR tests/test_a.py tests/test_b.py ...
# Files: OUTDIR/<file>.log, OUTDIR/logs.tgz (every log, packed), OUTDIR/summary.txt (last line ALL_TESTS_OK=1|0).
set -uo pipefail
d=${1:?output folder}; shift
start=$(date +%s); limit=${LIMIT_S:-560}
left() { echo $((limit - ($(date +%s) - start))); }
source cuda_kernels/device_lib.sh  # run_test_files
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
export MBCONV_TEST_VERSIONS=${MBCONV_TEST_VERSIONS:-11}
mkdir -p "$d"; ok=1; : > "$d/summary.txt"
timeout 200 python3 -c "from cuda_kernels._build import load_mbconv_extension as l; print('built', l().__file__)" \
  > "$d/build.log" 2>&1 || { echo "build failed" | tee -a "$d/summary.txt"; ok=0; }
FILE_MIN_S=${FILE_MIN_S:-40} run_test_files "$d" "$@"
tar czf "$d/logs.tgz" -C "$d" $(cd "$d" && ls ./*.log) && rm -f "$d"/*.log
echo "ALL_TESTS_OK=$ok" | tee -a "$d/summary.txt"
