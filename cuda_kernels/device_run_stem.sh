#!/usr/bin/env bash
# One device call for the fused ConvFirstNet stem (csrc/stem.cu), from the repository root:
#   bash cuda_kernels/device_run_stem.sh OUTDIR
# Builds its extension (perfmodel_stem), prints the kernels' registers / spills / shared memory
# (cuobjdump), runs the GPU tests of tests/test_stem.py (-m cuda; the CPU ones run anywhere) and, only
# if every one passed, the benchmark (cuda_kernels.bench_stem: C1 = 32, batch 128, 224x224, beside
# eager with cudnn.benchmark and torch.compile default / default + freezing; L2 flushed, median)
# into OUTDIR/stem_bench.json, then ConvFirstNet-S's stem (C1 = 16; kernel and eager) into
# OUTDIR/stem_bench_s.json. About 2 minutes on an H200. The last line, on stdout and in
# OUTDIR/log.txt, is STEM_OK=1 (built, every GPU test passed, the benchmark's own correctness check
# passed and the kernel was timed) or STEM_OK=0 (the log says which step failed).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda-13.0 ]; then
  export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH
fi
ok=1
STEP_PREFIX="stem " STEP_CLEARS_OK=1
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() { echo "STEM_OK=$ok" | tee -a "$log"; exit 0; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build 110 python3 -c "
from cuda_kernels import stem
ext = stem._extension()
print('extension', ext.__file__, 'smem C1=32', ext.smem_bytes(32), 'C1=16', ext.smem_bytes(16))
open('$out/stem_so_path.txt', 'w').write(ext.__file__)
" || finish
# static facts: registers, spills (stack), shared memory per kernel, as built here
timeout 15 cuobjdump --dump-resource-usage "$(cat "$out/stem_so_path.txt")" 2>&1 | grep -E "Function|REG" \
  | tee "$out/stem_resources.txt" >> "$log"
step tests 60 python3 -m pytest -q -m cuda --maxfail=6 --tb=short -p no:cacheprovider tests/test_stem.py || finish
step bench 75 python3 -m cuda_kernels.bench_stem --modes default,freezing --warmup 5 --repeats 30 \
  --out "$out/stem_bench.json" || finish
python3 - "$out/stem_bench.json" >> "$log" 2>&1 <<'EOF' || ok=0
import json, sys
r = json.load(open(sys.argv[1]))["results"]["cases"]
for case in r:
    b = case["backends"]
    print(case["name"], {k: round(v["latency_ms"]["median"] * 1e3, 1) for k, v in b.items()}, "us",
          "speedups", {k: round(v, 2) for k, v in case.get("speedups", {}).items()})
    assert "cuda_kernels" in b, "the kernel failed the benchmark's correctness check"
EOF
# ConvFirstNet-S's stem (C1 = 16), kernel and eager only; informational (does not change STEM_OK)
echo "== stem bench_s (limit 30s) $(date +%T)" | tee -a "$log"
timeout 30 python3 -m cuda_kernels.bench_stem --modes "" --case 16:224 --warmup 5 --repeats 30 \
  --out "$out/stem_bench_s.json" >> "$log" 2>&1
echo "== stem bench_s: exit $? $(date +%T)" | tee -a "$log"
tail -4 "$log"
finish
