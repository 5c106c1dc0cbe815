#!/usr/bin/env bash
# ConvFirstNet-H200 end to end, the fused network and torch.compile alternated on one GPU, to see how far each moves
# from run to run (issue 10's 2x: run6 2.03x, run7 2.04x, run8 1.92x with torch.compile at 6.410, 6.398, 6.007 ms and
# the fused network at 3.155, 3.133, 3.133), and variant 7 at C = 256 in the network (101.8 vs 103.4 us per block
# alone). From the repository root, ~4 minutes on an H200 with a cold machine:
#   bash examples/measurements/convfirstnet_e2e_spread.sh OUTDIR
# Order: compile, fused, fused with CUDA_KERNELS_C512_VARIANT=$TRY (default 256:7, as run on 2026-11-30; 256:8 for
# variant 8) or with the switch TRY_ENV (e.g. TRY_ENV=CUDA_KERNELS_CONV8B=1 TRY_NAME=conv8b), compile, fused; each
# `perfmodel bench` with --cuda-graphs, 30 repeats (fused: --compile-rest --freezing; compile: --backend inductor
# --freezing).
# Files: OUTDIR/spread/*.json, OUTDIR/log.txt, OUTDIR/spread.tar.gz.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out/spread"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -2 | tee -a "$log"
bench() {  # name, env..., -- options...
  local name=$1; shift
  echo "== $name $(date +%T)" | tee -a "$log"
  timeout 90 env "$@" -o "$out/spread/h200_convfirstnet_h200_$name.json" >> "$log" 2>&1
  echo "   exit $?" | tee -a "$log"; grep "median" "$log" | tail -1
  tar -czf "$out/spread.tar.gz" -C "$out" spread log.txt
}
fused="python3 cli.py bench convfirstnet_h200 --repeats 30 --cuda-graphs --backend cuda_kernels --compile-rest --freezing"
compiled="python3 cli.py bench convfirstnet_h200 --repeats 30 --cuda-graphs --backend inductor --freezing"
bench compile_1 $compiled
bench fused_1 $fused
try=${TRY:-256:7}
if [ -n "${TRY_ENV:-}" ]; then  # any switch, e.g. TRY_ENV=CUDA_KERNELS_CONV8B=1 (file name fused_<TRY_NAME>)
  bench "fused_${TRY_NAME:-try}" $TRY_ENV $fused
else
  bench "fused_v${try#*:}_${try%%:*}" CUDA_KERNELS_C512_VARIANT=$try $fused
fi
bench compile_2 $compiled
bench fused_2 $fused
