#!/usr/bin/env bash
# MBConv version 11 as the default (with the projection's option 1 since session 15's first call): the MBConv GPU
# suite under it, B0 end to end with the wgmma projection late (the default) and everywhere, the fused network's
# kernels one by one, and the per-block table the acceptance reads (stride-1 blocks of stages 2-4 against
# torch.compile default and max-autotune-no-cudagraphs, one run). From the repository root (~9 minutes):
#   timeout 590 bash cuda_kernels/device_run_mbconv_v11.sh OUTDIR
# build -> GPU tests (MBCONV_TEST_VERSIONS=11: test_mbconv_kernels, hfma2, v10, arch, pdl; the projection's options
# test, fixed for features.7.0's atomic pool) -> B0 end to end: version 11 (late), all, torch.compile default
# (freezing, CUDA graphs); version 11's kernels one by one (the stem and head of the compiled rest among them) -> per
# block (CUDA graphs): 2.1, 3.1, 4.1, 5.1, 6.1 with version 11 and torch.compile default and
# max-autotune-no-cudagraphs. Prediction: B0 1.98 -> ~1.94 ms late (the ncu gains of option 1 at 5.x-7.0, ~-5 us
# per block over 8 blocks), all ~1.95 (2.x-4.x: 3.1 and 4.1 faster than project_v9 under ncu, in the network unknown).
# Last line V11_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH, B0_FUSED
mbconv_begin V11 575
step tests 170 env MBCONV_TEST_VERSIONS=11 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider \
  tests/test_mbconv_kernels.py tests/test_mbconv_hfma2.py tests/test_mbconv_v10.py tests/test_mbconv_arch.py \
  tests/test_pdl.py "tests/test_mbconv_proj_wg.py::test_options_give_option_0s_values" || ok=0
step e2e_v11 60 "${B0_FUSED[@]}" -o "$out/b0_v11.json"
step e2e_all 60 env CUDA_KERNELS_PROJ_WG=all "${B0_FUSED[@]}" -o "$out/b0_v11_all.json"
step e2e_inductor 80 "${B0_BENCH[@]}" --backend inductor --freezing -o "$out/b0_inductor.json"
# every kernel of the fused network (profiler, 3 passes): the compiled rest's stem and head beside the MBConv kernels
step e2e_kernels 60 "${B0_FUSED[@]}" --per-kernel -o "$out/b0_v11_kernels.json"
step blocks 150 python3 -m cuda_kernels.mbconv_bench --budget-s 110 --compile-mode default \
  --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 --block features.3.1 \
  --block features.4.1 --block features.5.1 --block features.6.1 --out "$out/blocks.json" --version 11
python3 -m cuda_kernels.bench_lines V11 "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -12
echo "V11_OK=$ok"
