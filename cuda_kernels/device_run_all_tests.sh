#!/usr/bin/env bash
# Every GPU test (pytest -m cuda) of every test file, one file at a time with its own limit, so that one slow or
# hanging file cannot take the others down, from the repository root (about 6-9 minutes on an H200 with the
# extensions already built):
#   LIMIT_S=560 bash cuda_kernels/device_run_all_tests.sh OUTDIR [test files...]
# Builds every extension first (cuda_kernels/device_build_all.sh), then runs the files (default: every
# tests/test_*.py that has a @pytest.mark.cuda test) in order, each under device_lib.sh's file_share: the time left
# less 20 s for each file after it, at least 90 s (list the files that matter most first).
# MBCONV_TEST_VERSIONS narrows test_mbconv_kernels' versions (default every version). OUTDIR/<file>.log per file,
# OUTDIR/summary.txt (one line per file: passed / failed / skipped counts or "timed out" / "not run"), and a last
# line ALL_TESTS_OK=1 when every file ran and none failed.
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"; log="$out/log.txt"
start=$(date +%s); limit=${LIMIT_S:-560}
source cuda_kernels/device_lib.sh  # file_share
left() { echo $((limit - ($(date +%s) - start))); }
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
files=("$@")
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(grep -l "pytest.mark.cuda" tests/test_*.py)
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -2 | tee -a "$log"
ok=1; : > "$out/summary.txt"
for i in "${!files[@]}"; do
  f=${files[$i]}; name=$(basename "$f" .py)
  remaining=$(( ${#files[@]} - i )); t=$(left)
  if [ "$t" -lt 20 ]; then echo "$name: not run (time)" | tee -a "$out/summary.txt"; ok=0; continue; fi
  share=$(file_share "$t" "$remaining")
  timeout -k 5 "$share" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider "$f" > "$out/$name.log" 2>&1
  rc=$?
  summary=$(grep -E "^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed|skipped)|no tests ran" "$out/$name.log" | tail -1)
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && summary="timed out after ${share}s ($summary)"
  [ $rc -eq 0 ] || [ $rc -eq 5 ] || ok=0  # 5: no test selected
  echo "$name: ${summary:-exit $rc}" | tee -a "$out/summary.txt"
done
echo "ALL_TESTS_OK=$ok" | tee -a "$out/summary.txt"
