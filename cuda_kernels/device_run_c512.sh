#!/usr/bin/env bash
# One device call for the C = 512 kernels, from the repository root:
#   bash cuda_kernels/device_run_c512.sh OUTDIR [STEPS]
# csrc/convfirst_c512.cu (stride 1, wgmma) and csrc/convfirst_s2_wide.cu (stride 2, 256 -> 512),
# both in the extension perfmodel_convfirst_c512 and both behind CUDA_KERNELS_C512=1.
# STEPS (default "build smoke tests bench", about 3 minutes on an H200 machine) may add "e2e":
# ConvFirstNet-H200 end to end, fused + rest compiled + CUDA graphs, with both C = 512 kernels on
# and with only the stride-2 one on (CUDA_KERNELS_C512=stride2; the stride-1 blocks then run in
# compiled PyTorch), beside torch.compile (freezing, graphs), in the same call (~3 more minutes),
# and "ncu" (Nsight Compute sections of one launch per variant at a6 7x7, ~1 more minute).
# "wide" benchmarks the kernel's C = 256 / 128 instances (CUDA_KERNELS_WGMMA_CONVFIRST) beside the
# mma.sync kernel and torch.compile; "e2e_wide" runs ConvFirstNet-H200 with every stride-1 C = 256
# block on it (=256), beside torch.compile in the same call; "e2e_wide128" adds a run with the C = 128
# blocks on it too (=128,256).
# Variant 3 (persistent, conv warpgroup; NOTES.md "Variant 3") has its own steps, the next call's
# default set being "build smoke smoke3 tests3 rawop bench3 e2e3" (about 6 minutes; "tests" instead of
# "tests3" runs every GPU test of the file, ~1 minute more):
#   smoke3  four variant-3 launches (C = 128 and 256; one tile, 7 tiles per CTA, odd chunk counts) under
#           a 60 s limit, then two variant-4 launches (smoke4, 45 s); a variant whose launches fail or hang
#           (or variant 3 when tests3 hangs) is left out of every later step (tests, bench3, e2e3) and the
#           call goes on;
#   bench3  variants 0/2/3/4 at C = 256 a6 and a4 14x14 and C = 512 a6 7x7 (v0 and v4 there) beside
#           eager and torch.compile; C = 128 a6 28x28 beside the mma.sync kernel (no compile); C = 384
#           a6 14x14 (variants 0, 1, 4) beside eager and torch.compile;
#   e2e3    ConvFirstNet-H200 and -M end to end, fused (the fastest variant per width, C = 256 a6, 128 a6
#           and 512 a6 7x7, from bench3 through CUDA_KERNELS_C512_VARIANT=256:v,128:v,512:v; C = 128 on
#           the wgmma kernel too if it beat mma.sync in
#           bench3), rest compiled, freezing, CUDA graphs; torch.compile (freezing, graphs) of both in
#           the same call; last, H200 fused with the defaults (variant 2, C = 256 only) for comparison,
#           unless those were the choice already.
# The raw-op test (bad inputs) runs in its own process ("rawop"), under cuda-gdb for a backtrace if
# it dies (it crashed with a segmentation fault in the first call), with a C++-only probe extension
# that throws the same kind of formatted TORCH_CHECK message, so the other tests never die with it.
# Each step has its own time limit; the smoke step (small launches of every width) stops the call
# early if a new kernel hangs, instead of letting every later step hit its limit.
set -uo pipefail
out=${1:?output folder}; steps=${2:-build smoke tests bench}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# bench_s2 (bench step) loads the stride-2 extension and the network (e2e) the block-fusion one too:
# build them on the CPUs while the GPU steps run
others_py="from cuda_kernels._build import load_convfirst_s2_extension as b; b()"
(has e2e || has wide || has e2e_wide || has bench3 || has e2e3) && others_py="$others_py; from cuda_kernels._build import load_extension as a; a()"
others=""
if has bench || has e2e || has wide || has e2e_wide || has bench3 || has e2e3; then
  timeout 300 python3 -c "$others_py" > "$out/build_others.log" 2>&1 &
  others=$!
fi
probe=""  # the C++-only probe extension builds on the CPUs meanwhile (rawop)
if has rawop; then
  timeout 150 python3 -X faulthandler cuda_kernels/probe_torch_check.py > "$out/probe_torch_check.log" 2>&1 &
  probe=$!
fi
wait_others() { [ -n "$others" ] && { wait "$others"; echo "== build_others: exit $? $(date +%T)" | tee -a "$log"; others=""; }; }
has build && step build 150 env BLOCK_FUSION_PTXAS_VERBOSE=1 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; l(verbose=True)"
if has smoke; then
  step smoke 45 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py \
    -k "test_odd_sizes_and_batches and 4-2-9-5 or test_cluster_variant and 2-3-13-13 or test_wide_stride_2_odd_sizes and 2-5-7-9 \
or test_double_halo_variant and 128-4-2-9-5"
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "== smoke hung: stopping (see $log)" | tee -a "$log"; exit 1; fi
fi
v3=1  # variant 3 in the later steps; smoke3 clears it when its small launches fail or hang
v4=1  # likewise variant 4 (smoke4, in the smoke3 step)
if has smoke3; then
  step smoke3 60 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py \
    -k "test_persistent_variant and (128-4-2-9-5 or 256-6-1-1-1 or 256-4-300-14-14 or 128-3-19-28-28)"
  rc=$?
  if [ $rc -ne 0 ]; then v3=0; echo "== smoke3 failed (exit $rc): variant 3 is left out of the later steps" | tee -a "$log"; fi
  step smoke4 45 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py \
    -k "test_split_halo_variant and (512-6-128-7-7 or 128-3-2-9-5)"
  rc=$?
  if [ $rc -ne 0 ]; then v4=0; echo "== smoke4 failed (exit $rc): variant 4 is left out of the later steps" | tee -a "$log"; fi
fi
tests_k="not test_raw_op"; [ $v3 -eq 0 ] && tests_k="$tests_k and not persistent"
[ $v4 -eq 0 ] && tests_k="$tests_k and not split_halo"
has tests && step tests 180 python3 -m pytest -q --maxfail=6 --tb=short -p no:cacheprovider tests/test_convfirst_c512.py \
  -k "$tests_k"
# tests3: only what changed since the last call's 311/311 (variants 0-2 compile to the same SASS): variants
# 3 and 4, C = 384, the swapped network with the variant switch
tests3_k="(persistent or c384 or split_halo) and not test_raw_op"
[ $v3 -eq 0 ] && tests3_k="$tests3_k and not persistent"
[ $v4 -eq 0 ] && tests3_k="$tests3_k and not split_halo"
if has tests3; then
  step tests3 150 python3 -m pytest -q --maxfail=6 --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -k "$tests3_k"
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then v3=0; echo "== tests3 hung: variant 3 is left out of the later steps" | tee -a "$log"; fi
fi
if has rawop; then
  step rawop 60 python3 -X faulthandler -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -k test_raw_op
  rc=$?
  wait "$probe"; echo "== probe_torch_check: exit $? $(date +%T)" | tee -a "$log"
  cat "$out/probe_torch_check.log" >> "$log"
  if [ $rc -ne 0 ] && [ $rc -ne 1 ] && command -v cuda-gdb > /dev/null; then
    step rawop_backtrace 60 cuda-gdb -batch -ex "set pagination off" -ex run -ex bt -ex "info registers rip" \
      --args python3 -m pytest -q -p no:cacheprovider tests/test_convfirst_c512.py -k test_raw_op
  fi
fi
if has bench; then
  step bench_h200 90 python3 -m cuda_kernels.bench_c512 --modes default --case 6:7 --out "$out/c512_bench_h200.json"
  step bench_more 60 python3 -m cuda_kernels.bench_c512 --modes "" --case 4:7 --case 6:14 --out "$out/c512_bench_more.json"
  wait_others
  step bench_s2_wide 90 env CUDA_KERNELS_C512=1 python3 -m cuda_kernels.bench_s2 --modes default --case 256:6:14 \
    --out "$out/s2_wide_bench.json"
fi
if has wide; then
  wait_others
  step bench_c256 120 python3 -m cuda_kernels.bench_c512 --modes default --case c256:6:14 --case c256:4:14 \
    --out "$out/c256_bench.json"
  step bench_c128 45 python3 -m cuda_kernels.bench_c512 --modes "" --case c128:6:28 --out "$out/c128_bench.json"
fi
if has bench3; then
  wait_others
  vars="0,2"; [ $v3 -eq 1 ] && vars="$vars,3"; [ $v4 -eq 1 ] && vars="$vars,4"
  step bench3 150 python3 -m cuda_kernels.bench_c512 --modes default --variants "$vars" --case c256:6:14 --case c256:4:14 \
    --case 6:7 --out "$out/v3_bench.json"
  step bench3_c128 60 python3 -m cuda_kernels.bench_c512 --modes "" --variants "$vars" --case c128:6:28 \
    --out "$out/v3_bench_c128.json"
  # C = 384 (ConvFirstNet-L stage 2; CUDA_KERNELS_C384, off until its GPU tests pass): variants 0 and 1
  step bench3_c384 90 python3 -m cuda_kernels.bench_c512 --modes default --variants "0,1,$vars" --case c384:6:14 \
    --out "$out/c384_bench.json"
fi
if has e2e3; then
  wait_others
  # the fastest variant per width that passed its check in bench3 (C = 256 a6, C = 128 a6, C = 512 a6 7x7)
  best=$(python3 -c "from cuda_kernels.bench_c512 import best_variant as b; print(b('$out/v3_bench.json', 256, 6))")
  best128=$(python3 -c "from cuda_kernels.bench_c512 import best_variant as b; print(b('$out/v3_bench_c128.json', 128, 6))")
  best512=$(python3 -c "from cuda_kernels.bench_c512 import best_variant as b; print(b('$out/v3_bench.json', 512, 6, 0))")
  widths=256
  python3 -c "import sys; from cuda_kernels.bench_c512 import wgmma_beats_mma_sync as w; sys.exit(0 if w('$out/v3_bench_c128.json') else 1)" \
    && widths=128,256
  choice="256:$best,128:$best128,512:$best512"
  echo "== e2e3: variants $choice, wgmma widths $widths" | tee -a "$log"
  fused() {  # model, tag, extra env
    local model=$1 tag=$2; shift 2
    step "e2e3_${model}_${tag}" 120 env CUDA_KERNELS_C512=1 "$@" python3 cli.py bench "$model" --backend cuda_kernels \
      --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_${model}_cuda_kernels_${tag}_compiled_graphs.json"
  }
  compiled() {
    step "e2e3_${1}_inductor" 150 python3 cli.py bench "$1" --backend inductor --freezing --cuda-graphs --repeats 30 \
      -o "$out/h200_${1}_inductor_freezing_graphs.json"
  }
  tag="v${best}_${best128}_${best512}_w${widths/,/_}"
  fused convfirstnet_h200 "$tag" CUDA_KERNELS_C512_VARIANT=$choice CUDA_KERNELS_WGMMA_CONVFIRST=$widths
  compiled convfirstnet_h200
  fused convfirstnet_m "$tag" CUDA_KERNELS_C512_VARIANT=$choice CUDA_KERNELS_WGMMA_CONVFIRST=$widths
  compiled convfirstnet_m
  [ "$best" != 2 ] || [ "$best512" != 0 ] || [ "$widths" != 256 ] && fused convfirstnet_h200 defaults
fi
if has ncu; then  # Nsight Compute on one launch per variant at the H200 shape: L2 or tensor bound?
  step ncu 150 ncu --clock-control none -k regex:convfirst_c512 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
    python3 -m cuda_kernels.bench_c512 --launch-only --case 6:7
fi
if has e2e; then
  wait_others
  step e2e_fused 150 env CUDA_KERNELS_C512=1 python3 cli.py bench convfirstnet_h200 --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_convfirstnet_h200_cuda_kernels_compiled_graphs.json"
  step e2e_fused_s2only 150 env CUDA_KERNELS_C512=stride2 python3 cli.py bench convfirstnet_h200 --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_convfirstnet_h200_cuda_kernels_s2only_compiled_graphs.json"
  step e2e_inductor 150 python3 cli.py bench convfirstnet_h200 --backend inductor --freezing --cuda-graphs \
    --repeats 30 -o "$out/h200_convfirstnet_h200_inductor_freezing_graphs.json"
fi
if has e2e_wide; then
  wait_others
  step e2e_wide_256 120 env CUDA_KERNELS_C512=1 CUDA_KERNELS_WGMMA_CONVFIRST=256 python3 cli.py bench convfirstnet_h200 \
    --backend cuda_kernels --compile-rest --freezing --cuda-graphs --repeats 30 \
    -o "$out/h200_convfirstnet_h200_cuda_kernels_wgmma256_compiled_graphs.json"
  has e2e_wide128 && step e2e_wide_128_256 120 env CUDA_KERNELS_C512=1 CUDA_KERNELS_WGMMA_CONVFIRST=128,256 python3 cli.py bench \
    convfirstnet_h200 --backend cuda_kernels --compile-rest --freezing --cuda-graphs --repeats 30 \
    -o "$out/h200_convfirstnet_h200_cuda_kernels_wgmma128_256_compiled_graphs.json"
  has e2e || step e2e_inductor 150 python3 cli.py bench convfirstnet_h200 --backend inductor --freezing --cuda-graphs \
    --repeats 30 -o "$out/h200_convfirstnet_h200_inductor_freezing_graphs.json"
fi
grep -E "passed|failed|error|FAILED|fused|TFLOP|registers|spill|latency|median|Segmentation|#[0-9]+ " "$log" | tail -60
