#!/usr/bin/env bash
# Two independent device jobs at once on a machine of two GPUs (the device tool's nvidia-h200-x2), one per GPU,
# from the repository root:
#   LIMIT_S=585 bash cuda_kernels/device_pair.sh OUTDIR "JOB FOR GPU 0" "JOB FOR GPU 1"
# Builds every extension once first (cuda_kernels/device_build_all.sh), so that the two jobs find them cached
# instead of building the same ones side by side; then runs each job (a bash command line; $OUT is its own folder
# OUTDIR/gpu0 or OUTDIR/gpu1, $LEFT the seconds left of LIMIT_S) with CUDA_VISIBLE_DEVICES set to its GPU, and waits
# for both. A timing on one GPU does not see the other's kernels (separate chips, memories and power limits); the
# host's cores are shared, so host-bound timings (launch overhead without CUDA graphs) can. Measurement files record
# the GPU they ran on (perfmodel.harness asks nvidia-smi for the first visible GPU).
# Files: OUTDIR/pair.tar.gz (everything, outputs and logs of both jobs) and OUTDIR/log.txt.
set -uo pipefail
out=${1:?output folder}; job0=${2:?job for GPU 0}; job1=${3:?job for GPU 1}
mkdir -p "$out/gpu0" "$out/gpu1"; log="$out/log.txt"
start=$(date +%s); limit=${LIMIT_S:-585}
left() { echo $((limit - ($(date +%s) - start))); }
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
bash cuda_kernels/device_build_all.sh "$out/build" 2>&1 | tail -2 | tee -a "$log"
run() {  # gpu, job
  local gpu=$1 t; t=$(left)
  echo "== gpu$gpu $(date +%T) ($t s left): $2" >> "$log"
  OUT="$out/gpu$gpu" LEFT=$t CUDA_VISIBLE_DEVICES=$gpu timeout -k 5 "$t" bash -c "$2" > "$out/gpu$gpu/job.log" 2>&1
  echo "== gpu$gpu exit $? $(date +%T)" >> "$log"
}
run 0 "$job0" & run 1 "$job1" &
wait
tail -n 4 "$out"/gpu*/job.log >> "$log"
(cd "$out" && tar -czf pair.tar.gz --exclude=pair.tar.gz log.txt build gpu0 gpu1)
cat "$log"
