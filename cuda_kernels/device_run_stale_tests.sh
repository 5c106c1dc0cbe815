#!/usr/bin/env bash
# The 8 GPU tests that failed on the H200 on 2026-11-30 (examples/measurements/gpu_tests/2026-11-30/), after
# their fixes, and the GPU checks that decide the MBConv one (item 5 below). From the repository root, at most
# 90 s (each step under its own timeout):
#   bash cuda_kernels/device_run_stale_tests.sh OUTDIR
# Ran once (2026-11-30 16:09 UTC, examples/measurements/gpu_tests/2026-11-30/stale/): items 1-4 8/8 passed, item 5
# pool_nondeterministic; test_repeated_launches_are_bitwise_equal is now test_repeated_launches_agree (bitwise for
# version 3 only), so this script records that run rather than being one to repeat.
# Items 1-4 (stale tests, written before a default changed):
#   1 test_convfirst_c512 raw op: num_variants against convfirst_c512.VARIANTS (variants 5-7 were added)
#   2 test_convfirst_s2 other variants at 384 -> 768: CUDA_KERNELS_C768=stride2 for those cases (off by default)
#   3 test_cuda_kernels drop-in: C = 64 stride-1 blocks go to the wgmma kernel by default (both switch settings)
#   4 test_cuda_kernels bench backend: the stem is a default swap ('Stem': 1, one more block checked)
# Item 5, test_mbconv_kernels test_v3_agrees_with_v2[features.1.0-5-6] (v6 == v5 bit for bit): run again, with
#   test_repeated_launches_are_bitwise_equal[3/5/6] (8 launches of features.1.0 on one input: kernel 1 adds each
#     channel's band sum with shared-memory float atomicAdd from several warps, in arrival order) and
#   test_v6_projection_equals_v5_given_a_pool_independent_scale (SE's fc2 weight zeroed: the scale no longer
#     depends on the pool, so only the projection can differ).
# Writes OUTDIR/build/, OUTDIR/stale.log, OUTDIR/item5.log, OUTDIR/summary.txt. Prints ITEM5=<verdict>:
#   project_bulk_bug        the projection test fails: version 6's projection is wrong (a kernel bug)
#   pool_nondeterministic   the projection test passes, repeated launches of version 5 or 6 differ: kernel 1's
#                           pool is order-dependent, so no bitwise comparison of two runs can hold (kernel fix:
#                           a fixed-order reduction of the warps' sums; the (5, 6) test cannot pass before it)
#   unexplained             both pass, the original still fails (e.g. a per-image scale offset in project_bulk)
#   not_reproduced          everything passes
# and last STALE_TESTS_OK=1 when every test of items 1-4 passed (item 5's verdict is the line before).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
unset MBCONV_TEST_VERSIONS
start=$(date +%s)
timeout -k 3 30 bash cuda_kernels/device_build_all.sh "$out/build" | tail -2

stale=(
  "tests/test_convfirst_c512.py::test_raw_op_refuses_overlap_and_bad_shapes"
  "tests/test_convfirst_s2.py::test_other_variants[56-4-384-1]"
  "tests/test_convfirst_s2.py::test_other_variants[13-3-384-1]"
  "tests/test_convfirst_s2.py::test_other_variants[14-37-384-1]"
  "tests/test_convfirst_s2.py::test_other_variants[7-1-384-1]"
  "tests/test_cuda_kernels.py::test_dropin_module_replaces_convfirst_blocks"
  "tests/test_cuda_kernels.py::test_bench_backend_runs_convfirstnet_on_the_kernels"
)
item5=(
  "tests/test_mbconv_kernels.py::test_v3_agrees_with_v2[features.1.0-5-6]"
  "tests/test_mbconv_kernels.py::test_repeated_launches_are_bitwise_equal"
  "tests/test_mbconv_kernels.py::test_v6_projection_equals_v5_given_a_pool_independent_scale"
)
timeout -k 3 35 python3 -m pytest -q -rA --tb=short -p no:cacheprovider "${stale[@]}" > "$out/stale.log" 2>&1
rc_stale=$?
timeout -k 3 22 python3 -m pytest -q -rA --tb=short -p no:cacheprovider "${item5[@]}" > "$out/item5.log" 2>&1
rc_item5=$?

passed() { grep -c "^PASSED $1" "$2"; }
failed() { grep -c "^FAILED $1" "$2"; }
n_pass=$(grep -c "^PASSED " "$out/stale.log")
# 8 tests: 1 (c512) + 4 (s2, 384 -> 768) + 2 (drop-in, CUDA_KERNELS_WGMMA_CONVFIRST=0 and unset) + 1 (bench)
ok=0; [ "$rc_stale" -eq 0 ] && [ "$n_pass" -eq 8 ] && ok=1
proj=$(failed "tests/test_mbconv_kernels.py::test_v6_projection" "$out/item5.log")
proj_ok=$(passed "tests/test_mbconv_kernels.py::test_v6_projection" "$out/item5.log")
rep=$(grep -cE "^FAILED tests/test_mbconv_kernels.py::test_repeated_launches_are_bitwise_equal\[(5|6)\]" "$out/item5.log")
orig=$(failed "tests/test_mbconv_kernels.py::test_v3_agrees_with_v2" "$out/item5.log")
if [ "$rc_item5" -ne 0 ] && [ "$rc_item5" -ne 1 ]; then verdict="not_decided (pytest exit $rc_item5: timeout or error)"
elif [ "$proj" -gt 0 ]; then verdict=project_bulk_bug
elif [ "$proj_ok" -ne 4 ]; then verdict="not_decided (projection test passed $proj_ok of 4)"
elif [ "$rep" -gt 0 ]; then verdict=pool_nondeterministic
elif [ "$orig" -gt 0 ]; then verdict=unexplained
else verdict=not_reproduced; fi
{
  echo "stale tests (items 1-4): pytest exit $rc_stale, $n_pass of 8 passed"
  grep -E "^(PASSED|FAILED|ERROR) " "$out/stale.log"
  echo "item 5: pytest exit $rc_item5"
  grep -E "^(PASSED|FAILED|ERROR) " "$out/item5.log"
  grep -E "elements differ" "$out/item5.log" | head -8
  echo "time: $(( $(date +%s) - start )) s"
  echo "ITEM5=$verdict"
  echo "STALE_TESTS_OK=$ok"
} | tee "$out/summary.txt"
