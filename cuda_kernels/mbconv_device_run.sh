#!/usr/bin/env bash
# One device call for the MBConv kernels, from the repository root on a CUDA machine:
#   bash cuda_kernels/mbconv_device_run.sh OUTDIR [BENCH ARGS...]
# Steps (MBCONV_STEPS, default "build tests bench"), each under its own time limit
# (MBCONV_LIMITS, seconds, in the same order), later steps run even if an earlier one fails:
#   build   the extension (own directory, kept on a warm machine)
#   tests   the CUDA tests of tests/test_mbconv_kernels.py (MBCONV_TEST_VERSIONS narrows them)
#   bench   python -m cuda_kernels.mbconv_bench --out OUTDIR/mbconv_b0_h200.json BENCH ARGS
#   e2e     EfficientNet-B0 with every MBConv fused, the rest eager, CUDA graphs
#           (kernel-1 version: CUDA_KERNELS_MBCONV_VERSION) -> OUTDIR/h200_efficientnet_b0_cuda_kernels.json;
#           with MBCONV_E2E_VERSIONS="5 6", once per version (each under the step's limit)
#           -> OUTDIR/h200_efficientnet_b0_cuda_kernels_vN.json
#   e2ec    the same with the rest compiled (--compile-rest --freezing)
#   compile EfficientNet-B0 under torch.compile, freezing, CUDA graphs (the same-run baseline)
#   accept  the issue's acceptance blocks (MBCONV_ACCEPT_BLOCKS, default features.2.1 features.3.1
#           features.4.1), versions MBCONV_ACCEPT_VERSIONS (default "3 5") against eager and
#           torch.compile default, freezing on -> OUTDIR/mbconv_accept_default_h200.json (per block)
#   acceptma the same against torch.compile max-autotune-no-cudagraphs, no new compile after
#           MBCONV_ACCEPT_BUDGET_S (default 60) s -> OUTDIR/mbconv_accept_max-autotune_h200.json
#   ncu     Nsight Compute on MBCONV_NCU_BLOCKS (default features.1.0 features.2.0 features.2.1
#           features.6.1) at kernel version CUDA_KERNELS_MBCONV_VERSION -> OUTDIR/mbconv_ncu.txt
# Everything is logged to OUTDIR/log.txt.
#
# Version 3 (NOTES.md, "MBConv version 3"; about 4 minutes): build, v3's CUDA tests, v2 vs v3 per
# block beside eager (compile baselines: mbconv_b0_h200_v2.json), EfficientNet-B0 on v3:
#   MBCONV_TEST_VERSIONS=3 CUDA_KERNELS_MBCONV_VERSION=3 MBCONV_STEPS="build tests bench e2e" \
#     MBCONV_LIMITS="120 120 150 60" bash cuda_kernels/mbconv_device_run.sh $OUT --version 2 --version 3 \
#     --version 4 --budget-s 0
# then, where time is left, kernel 1's stall reasons: MBCONV_STEPS="build ncu" MBCONV_LIMITS="120 90" (same env).
#
# Versions 5 and 6 (NOTES.md, "MBConv version 5" and "version 6"; about 6 minutes): build, their CUDA
# tests, v3 vs v5 vs v6 on every B0 block, EfficientNet-B0 on v5 and on v6 and the same-run
# torch.compile baseline, then the acceptance blocks against torch.compile (both modes):
#   MBCONV_TEST_VERSIONS=5,6 MBCONV_E2E_VERSIONS="5 6" MBCONV_ACCEPT_VERSIONS="3 5 6" \
#     MBCONV_STEPS="build tests bench e2e compile accept acceptma" MBCONV_LIMITS="90 90 45 30 80 60 60" \
#     bash cuda_kernels/mbconv_device_run.sh $OUT --version 3 --version 5 --version 6 --budget-s 0
set -uo pipefail
out=${1:?output folder}; shift
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext" MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0
read -r -a steps <<< "${MBCONV_STEPS:-build tests bench}"
read -r -a limits <<< "${MBCONV_LIMITS:-150 100 120 60 120 120}"
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  echo "== $name: exit $? $(date +%T)" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
b0="python3 cli.py bench efficientnet_b0 --repeats 30 --cuda-graphs"
for i in "${!steps[@]}"; do
  limit=${limits[$i]:-120}
  case ${steps[$i]} in
    build) step build "$limit" python3 -c "from cuda_kernels._build import load_mbconv_extension as l; l(); print('built')" ;;
    tests) step tests "$limit" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_kernels.py ;;
    bench) step bench "$limit" python3 -m cuda_kernels.mbconv_bench --out "$out/mbconv_b0_h200.json" "$@" ;;
    e2e) if [ -z "${MBCONV_E2E_VERSIONS:-}" ]; then
           step e2e "$limit" $b0 --backend cuda_kernels -o "$out/h200_efficientnet_b0_cuda_kernels.json"
         else
           for v in $MBCONV_E2E_VERSIONS; do
             step "e2e_v$v" "$limit" env CUDA_KERNELS_MBCONV_VERSION="$v" $b0 --backend cuda_kernels \
               -o "$out/h200_efficientnet_b0_cuda_kernels_v$v.json"
           done
         fi ;;
    e2ec) step e2ec "$limit" $b0 --backend cuda_kernels --compile-rest --freezing \
            -o "$out/h200_efficientnet_b0_cuda_kernels_compiled.json" ;;
    compile) step compile "$limit" $b0 --backend inductor --freezing -o "$out/h200_efficientnet_b0_inductor_graphs.json" ;;
    accept|acceptma)
            read -r -a accept_blocks <<< "${MBCONV_ACCEPT_BLOCKS:-features.2.1 features.3.1 features.4.1}"
            read -r -a accept_versions <<< "${MBCONV_ACCEPT_VERSIONS:-3 5}"
            mode=default budget=1000
            [ "${steps[$i]}" = acceptma ] && mode=max-autotune-no-cudagraphs budget=${MBCONV_ACCEPT_BUDGET_S:-60}
            step "${steps[$i]}" "$limit" python3 -m cuda_kernels.mbconv_bench \
              --out "$out/mbconv_accept_${mode%-no-cudagraphs}_h200.json" --compile-mode "$mode" \
              "${accept_blocks[@]/#/--block=}" "${accept_versions[@]/#/--version=}" --budget-s "$budget" ;;
    ncu) read -r -a blocks <<< "${MBCONV_NCU_BLOCKS:-features.1.0 features.2.0 features.2.1 features.6.1}"
         step ncu "$limit" ncu --clock-control none -k 'regex:expand_dw|se_|project' --section SpeedOfLight \
           --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
           --section MemoryWorkloadAnalysis --log-file "$out/mbconv_ncu.txt" \
           python3 -m cuda_kernels.mbconv_profile --version "${CUDA_KERNELS_MBCONV_VERSION:-3}" "${blocks[@]}" ;;
    *) echo "unknown step ${steps[$i]}" | tee -a "$log" ;;
  esac
done
tail -n 40 "$log"
