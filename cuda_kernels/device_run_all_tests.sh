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
source cuda_kernels/device_lib.sh  # run_test_files
left() { echo $((limit - ($(date +%s) - start))); }
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
files=("$@")
[ ${#files[@]} -gt 0 ] || mapfile -t files < <(grep -l "pytest.mark.cuda" tests/test_*.py)
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -2 | tee -a "$log"
ok=1; : > "$out/summary.txt"
run_test_files "$out" "${files[@]}"
echo "ALL_TESTS_OK=$ok" | tee -a "$out/summary.txt"
