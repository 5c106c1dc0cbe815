#!/usr/bin/env bash
# MBConv version 10's projection (NOTES.md, "MBConv version 10"): project_v10 inside version 9, switched by
# CUDA_KERNELS_PROJ_V10 (off | late | all). From the repository root (~6 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_v10.sh OUTDIR
# build -> the GPU tests of tests/test_mbconv_v10.py -> Nsight Compute of the projection kernels at B0's features.4.1
# and 5.0-7.0 under each mode, serialised and L2 flushed (OUTDIR/proj_<mode>.csv, lines "PROJ ...") -> the per-block
# bench of those blocks under each mode (CUDA graphs, L2 flushed) -> EfficientNet-B0 end to end under each mode and
# torch.compile (freezing, CUDA graphs) in the same call. Last line V10_OK=1|0 (1: the tests passed).
# MODES (default "off late all"), BLOCKS (default features.4.1 and 5.0-7.0), TESTS (default tests/test_mbconv_v10.py),
# NCU=0 skips Nsight Compute, ACCEPT=1 adds the issue's per-block comparison with torch.compile default (freezing) at
# features.2.1, 3.1, 4.1 and 6.1 (OUTDIR/accept.json). Session 12's second call ran the defaults; its third:
#   MODES="auto off" NCU=0 ACCEPT=1 BLOCKS="<all 16 B0 blocks>" TESTS="tests/test_mbconv_v10.py tests/test_mbconv_v9.py"
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin V10 570  # the folder, the environment, `left`, ok=1, the build
step tests 200 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider ${TESTS:-tests/test_mbconv_v10.py}
rc=$?
[ $rc -eq 0 ] || ok=0
modes=${MODES:-off late all}
blocks=${BLOCKS:-features.4.1 features.5.0 features.5.1 features.6.0 features.6.1 features.7.0}
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__grid_size
metrics=$metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for m in $modes; do
  [ "${NCU:-1}" = 1 ] || break
  step "ncu_$m" 40 env CUDA_KERNELS_PROJ_V10=$m ncu --clock-control none --cache-control all --print-units base \
    -k regex:"project" --metrics "$metrics" --csv --page raw --log-file "$out/proj_$m.csv" \
    python3 -m cuda_kernels.mbconv_profile --version 9 $blocks
done
for f in "$out"/proj_*.csv; do  # one line per block (cuda_kernels/ncu_lines.py)
  [ -e "$f" ] || continue
  t=$(basename "$f" .csv)
  python3 -m cuda_kernels.ncu_lines "PROJ ${t#proj_}" "$f" project $blocks 2>> "$log" | tee -a "$log"
done
for m in $modes; do
  step "bench_$m" 40 env CUDA_KERNELS_PROJ_V10=$m python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 \
    $(printf -- "--block %s " $blocks) --out "$out/blocks_$m.json" --version 9
done
for m in $modes; do
  step "e2e_$m" 60 env CUDA_KERNELS_PROJ_V10=$m python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
    --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_v10_$m.json"
done
step e2e_inductor 80 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
if [ "${ACCEPT:-0}" = 1 ]; then  # the acceptance blocks against torch.compile default (freezing), same process
  step accept 150 python3 -m cuda_kernels.mbconv_bench --out "$out/accept.json" --version 9 --compile-mode default \
    --budget-s 1000 --repeats 20 --block features.2.1 --block features.3.1 --block features.4.1 --block features.6.1
fi
python3 -m cuda_kernels.bench_lines V10 "$out" 2>> "$log" | tee -a "$log"  # bench_lines.py
grep -E "^== |passed|failed|Error|error:" "$log" | tail -24
echo "V10_OK=$ok"
