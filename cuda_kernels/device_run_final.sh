#!/usr/bin/env bash
# A session's last call (session 24's, generalised in session 25): the GPU tests named (pytest arguments: the new
# defaults' own), EfficientNet-B0 against torch.compile default and max-autotune-no-cudagraphs in one run, and the
# per-block table at 2.1 / 3.1 / 4.1 in the same call. From the repository root, with the autotuning timings unpacked
# (tar xzf examples/measurements/mbconv/s27/call2/auto/autotune_timings.tgz -C .) and carry: [".inductor_cache"]
# (~9.5 minutes):
#   timeout 590 bash cuda_kernels/device_run_final.sh OUTDIR [PYTEST_ARGS...]
# (session 24: tests/test_mbconv_k1_tma_x.py tests/test_mbconv_k1_dh2.py -k "the_wgmma_expand or stage_5"; the tests
# step has 60 s; FINAL_BUDGET=S: seconds, 580 unless set; FINAL_BLOCKS="features.3.1 ...": the per-block table's
# blocks, 4.1 / 2.1 / 3.1 unless set). Files: OUTDIR/log.txt, OUTDIR/auto/ (device_run_b0_autotune.sh's files), OUTDIR/blocks.json. Last
# line FINAL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin FINAL "${FINAL_BUDGET:-580}"
STEP_CLEARS_OK=1
shift
(( $# )) && step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider "$@"
AUTO_BUDGET=$(( $(left) - 200 )) bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -8
step blocks $(( $(left) - 5 )) python3 -m cuda_kernels.mbconv_bench --budget-s $(( $(left) - 45 )) \
  --compile-mode default --compile-mode max-autotune-no-cudagraphs --repeats 20 \
  $(printf -- '--block %s ' ${FINAL_BLOCKS:-features.4.1 features.2.1 features.3.1}) --version 11 \
  --out "$out/blocks.json" || ok=0
grep -E "passed|failed" "$log" | tail -3
echo "FINAL_OK=$ok"
