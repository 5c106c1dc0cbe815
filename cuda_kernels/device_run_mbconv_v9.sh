#!/usr/bin/env bash
# MBConv version 9's projection (NOTES.md, "MBConv version 9"): project_v9's loaders side by side. From the repository
# root (~5 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_v9.sh OUTDIR
# CONFIGS (default "8:ring:8 9:ring:8 9:task:8") lists version:loader:depth, the loader and ring depth passed as
# CUDA_KERNELS_PROJ_V9_LOAD / CUDA_KERNELS_PROJ_V9_DEPTH (version 8 ignores them). build -> the GPU tests of
# tests/test_mbconv_v9.py under every version-9 loader -> Nsight Compute of the projection kernels at B0's
# features.1.0, 2.0, 2.1 and 3.1, serialised (no PDL overlap in the durations): duration, DRAM bytes and throughput,
# occupancy, stall reasons per issued instruction (OUTDIR/proj_<config>.csv, summary lines "PROJ ...") -> per-block
# bench of each config (L2 flushed, CUDA graphs) -> EfficientNet-B0 end to end under each. Last line MB9_OK=1|0.
# (Session 11's second call ran an earlier form: configs 8:ring:8 9:ring:8 9:ring:16, the tests last.)
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
start=$(date +%s)
left() { echo $((560 - ($(date +%s) - start))); }
source cuda_kernels/device_lib.sh  # step (capped by left)
ok=1
step build 180 python3 -c "from cuda_kernels._build import load_mbconv_extension as l; print('MB9 so:', l().__file__)" \
  || { echo "MB9_OK=0"; exit 0; }
read -r -a configs <<< "${CONFIGS:-8:ring:8 9:ring:8 9:task:8}"
for c in "${configs[@]}"; do
  IFS=: read -r v l d <<< "$c"
  [ "$v" = 9 ] || continue
  step "tests_$l$d" 100 env CUDA_KERNELS_PROJ_V9_LOAD="$l" CUDA_KERNELS_PROJ_V9_DEPTH="$d" python3 -m pytest -q -m cuda \
    --tb=short -p no:cacheprovider tests/test_mbconv_v9.py || ok=0
done
blocks="features.1.0 features.2.0 features.2.1 features.3.1"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct
for r in long_scoreboard lg_throttle barrier math_pipe_throttle wait short_scoreboard mio_throttle not_selected \
         selected no_instruction dispatch_stall membar drain; do
  metrics=$metrics,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
for c in "${configs[@]}"; do
  IFS=: read -r v l d <<< "$c"
  step "ncu_$v$l$d" 60 env CUDA_KERNELS_PROJ_V9_LOAD="$l" CUDA_KERNELS_PROJ_V9_DEPTH="$d" ncu --clock-control none \
    --cache-control all --print-units base -k regex:"project" --metrics "$metrics" --csv --page raw \
    --log-file "$out/proj_v${v}_${l}${d}.csv" python3 -m cuda_kernels.mbconv_profile --version "$v" $blocks
done
for f in "$out"/proj_*.csv; do  # one line per block (cuda_kernels/ncu_lines.py)
  [ -e "$f" ] || continue
  t=$(basename "$f" .csv)
  python3 -m cuda_kernels.ncu_lines "PROJ ${t#proj_}" "$f" project $blocks 2>> "$log" | tee -a "$log"
done
bench="python3 -m cuda_kernels.mbconv_bench --budget-s 0 --repeats 20 --block features.1.0 --block features.2.0
  --block features.2.1 --block features.3.0 --block features.3.1 --block features.4.0 --block features.4.1"
for c in "${configs[@]}"; do
  IFS=: read -r v l d <<< "$c"
  step "bench_$v$l$d" 30 env CUDA_KERNELS_PROJ_V9_LOAD="$l" CUDA_KERNELS_PROJ_V9_DEPTH="$d" $bench \
    --out "$out/blocks_v${v}_${l}${d}.json" --version "$v"
done
for c in "${configs[@]}"; do
  IFS=: read -r v l d <<< "$c"
  step "e2e_$v$l$d" 60 env CUDA_KERNELS_MBCONV_VERSION="$v" CUDA_KERNELS_PROJ_V9_LOAD="$l" \
    CUDA_KERNELS_PROJ_V9_DEPTH="$d" python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 \
    --backend cuda_kernels --compile-rest --freezing --cuda-graphs -o "$out/b0_v${v}_${l}${d}.json"
done
python3 -m cuda_kernels.bench_lines MB9 "$out" --kernels project 2>> "$log" | tee -a "$log"  # bench_lines.py
grep -E "^== |passed|failed|Error|error:" "$log" | tail -30
echo "MB9_OK=$ok"
