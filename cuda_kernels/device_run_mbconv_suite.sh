#!/usr/bin/env bash
# The MBConv GPU suite under version 11's defaults, the files not run under the session-27/28 defaults first (s28
# call 3 ran the last twelve; s27 call 4 and s28 call 2 the four before them; kernel 1's static file second: B2's
# entries are in the default build since session 28), so that what the time cuts is the least changed (s25 call 2
# ran ~1,000 of these without a failure and did not finish: NOTES.md "Session 25"). Building every extension takes
# ~145 s of LIMIT_S (s27 call 3); each file then gets at least 90 s (device_lib.sh file_share). From the repository
# root (~LIMIT_S + 30 s; LIMIT_S 560 unless set):
#   timeout 590 bash cuda_kernels/device_run_mbconv_suite.sh OUTDIR [test files...]
# (test files given: those instead of the list below, in their order - a suite split over two calls)
# Files: OUTDIR/log.txt, OUTDIR/summary.txt, OUTDIR/logs.tgz (every file's log, packed: too many files come back
# otherwise). Last line ALL_TESTS_OK=1|0.
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(tests/test_mbconv_k1_dh2.py tests/test_mbconv_k1_static.py tests/test_mbconv_k1_row_units.py \
  tests/test_mbconv_proj_wg.py tests/test_mbconv_proj_v9s.py tests/test_mbconv_proj_v9b.py tests/test_mbconv_v7.py tests/test_mbconv_hfma2.py \
  tests/test_mbconv_k1_tma_x.py tests/test_mbconv_k1_bias_c.py tests/test_mbconv_arch.py tests/test_mbconv_split.py \
  tests/test_mbconv_kernels.py tests/test_mbconv_v8.py tests/test_mbconv_k1_whole.py \
  tests/test_stem_mbconv.py tests/test_effnet_head.py tests/test_effnet_stem.py tests/test_pdl.py \
  tests/test_mbconv_se_v5.py tests/test_mbconv_se_v4.py tests/test_mbconv_se_v3_pre.py tests/test_ablate.py \
  tests/test_mbconv_k1_u_reg.py tests/test_mbconv_k1_fastdiv.py tests/test_mbconv_v10.py tests/test_mbconv_v9.py)
MBCONV_TEST_VERSIONS=11 LIMIT_S=${LIMIT_S:-560} bash cuda_kernels/device_run_all_tests.sh /tmp/suite "${files[@]}" \
  > "$out/log.txt" 2>&1
cp /tmp/suite/summary.txt "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp/suite . 2>/dev/null
tail -30 "$out/summary.txt"
