#!/usr/bin/env bash
# ConvFirstNets end to end on one H200, every backend in one run (issue 10's baselines):
#   bash examples/measurements/convfirstnet_e2e.sh OUTDIR [models...]
# Per model: eager; the fused kernels with the rest eager, and with the rest compiled
# (--compile-rest), with and without CUDA graphs; torch.compile with freezing, with and
# without CUDA graphs; CONFIGS="inductor_autotune ..." picks configurations (see the case
# below; the autotuned ones are max-autotune-no-cudagraphs). Batch 128, float16, 30 repeats. Files: OUTDIR/runs.tar.gz (updated
# after every run, so a stopped call still returns what finished) and OUTDIR/log.txt.
set -uo pipefail
out=${1:?output folder}; shift
models=${*:-convfirstnet_s convfirstnet_h200}
mkdir -p "$out/runs"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
one() {  # model, config name, limit, options...
  local model=$1 name=$2 limit=$3; shift 3
  echo "== $model $name $(date +%T)" | tee -a "$log"
  timeout "$limit" python3 cli.py bench "$model" --repeats 30 "$@" -o "$out/runs/h200_${model}_${name}.json" \
    >> "$log" 2>&1; echo "   exit $?" | tee -a "$log"; tail -n 1 "$log"
  tar -czf "$out/runs.tar.gz" -C "$out" runs
}
configs=${CONFIGS:-eager cuda_kernels cuda_kernels_compiled cuda_kernels_compiled_graphs inductor_freezing inductor_freezing_graphs}
for model in $models; do
  for config in $configs; do
    case $config in
      eager) one "$model" eager 90 ;;
      cuda_kernels) one "$model" cuda_kernels 120 --backend cuda_kernels ;;
      cuda_kernels_compiled) one "$model" cuda_kernels_compiled 180 --backend cuda_kernels --compile-rest --freezing ;;
      cuda_kernels_compiled_graphs) one "$model" cuda_kernels_compiled_graphs 180 --backend cuda_kernels --compile-rest --freezing --cuda-graphs ;;
      inductor_freezing) one "$model" inductor_freezing 180 --backend inductor --freezing ;;
      inductor_freezing_graphs) one "$model" inductor_freezing_graphs 180 --backend inductor --freezing --cuda-graphs ;;
      inductor_autotune) one "$model" inductor_autotune 330 --backend inductor --freezing --compile-mode max-autotune-no-cudagraphs ;;
      inductor_autotune_graphs) one "$model" inductor_autotune_graphs 330 --backend inductor --freezing --compile-mode max-autotune-no-cudagraphs --cuda-graphs ;;
      *) echo "unknown config $config"; exit 2 ;;
    esac
  done
done
