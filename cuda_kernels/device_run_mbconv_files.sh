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
source cuda_kernels/device_lib.sh  # file_share
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
export MBCONV_TEST_VERSIONS=${MBCONV_TEST_VERSIONS:-11}
mkdir -p "$d"; all=1; : > "$d/summary.txt"
timeout 200 python3 -c "from cuda_kernels._build import load_mbconv_extension as l; print('built', l().__file__)" \
  > "$d/build.log" 2>&1 || { echo "build failed" | tee -a "$d/summary.txt"; all=0; }
files=("$@")
for i in "${!files[@]}"; do
  f=${files[$i]}; name=$(basename "$f" .py); t=$(left)
  if [ "$t" -lt 20 ]; then echo "$name: not run (time)" | tee -a "$d/summary.txt"; all=0; continue; fi
  share=$(FILE_MIN_S=${FILE_MIN_S:-40} file_share "$t" $(( ${#files[@]} - i )))
  timeout -k 5 "$share" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider "$f" > "$d/$name.log" 2>&1
  rc=$?
  summary=$(grep -E "^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed|skipped)|no tests ran" "$d/$name.log" |
            tail -1)
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && summary="timed out after ${share}s ($summary)"
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || all=0
  echo "$name: ${summary:-exit $rc}" | tee -a "$d/summary.txt"
done
tar czf "$d/logs.tgz" -C "$d" $(cd "$d" && ls ./*.log) && rm -f "$d"/*.log
echo "ALL_TESTS_OK=$all" | tee -a "$d/summary.txt"
