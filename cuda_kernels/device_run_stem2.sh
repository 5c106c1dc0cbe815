#!/usr/bin/env bash
# One device call for the fused stem's version 2 (csrc/stem.cu stem_kernel_v2; NOTES.md "Fused stem v2"),
# from the repository root:
#   bash cuda_kernels/device_run_stem2.sh OUTDIR
# Within ~120 s (each step's limit is cut to what is left of the budget): builds the stem's extension
# (perfmodel_stem) and prints its kernels' registers / spills; a smoke run of v2 against float64 under a
# short timeout (a hang or a wrong answer stops the script there); the GPU tests of both versions
# (tests/test_stem.py -m cuda, version 2's); the benchmark of v1 and v2 side by side (bench_stem
# --versions 1,2, eager beside them, no torch.compile: its 242.2 us is in examples/measurements/stem/) at
# batch 128, 224x224, C1 = 32 and 16. Lines "STEM2 <case> v1=..us v2=..us" come last but one; the last
# line, on stdout and in OUTDIR/log.txt, is STEM2_OK=1 (built, smoke and every GPU test passed, both
# versions passed the benchmark's correctness check and were timed) or STEM2_OK=0. Version 1's shapes
# (tests -k "against_float64 and 1]") run last, with the budget that is left.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda-13.0 ]; then
  export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH
fi
start=$(date +%s); budget=${STEM2_BUDGET_S:-118}
ok=1
left() { echo $(( budget - ($(date +%s) - start) )); }
STEP_PREFIX="stem2 " STEP_CLEARS_OK=1
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {
  grep -q "^STEM2 " "$log" || echo "STEM2 not benchmarked: a step before the benchmark failed (see $log)" | tee -a "$log"
  echo "STEM2_OK=$ok" | tee -a "$log"; exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build 85 python3 -c "
from cuda_kernels import stem
ext = stem._extension()
print('extension', ext.__file__, 'smem v1 C1=32', ext.smem_bytes(32), 'v2 C1=32', ext.smem_bytes_v2(32),
      'v2 C1=16', ext.smem_bytes_v2(16))
open('$out/stem_so_path.txt', 'w').write(ext.__file__)
" || finish
cuobjdump=$(find_cuobjdump)
timeout 10 "$cuobjdump" --dump-resource-usage "$(cat "$out/stem_so_path.txt")" 2>&1 | grep -E "Function|REG" \
  | tee "$out/stem_resources.txt" >> "$log"
# smoke: v2 once at batch 2 and batch 128 (224x224, C1 = 32 and 16) against float64; stops the script on a
# hang (timeout) or an error above 2x PyTorch fp16's
step smoke 25 python3 - <<'PY' || finish
import copy, torch
import cuda_kernels
from cuda_kernels import stem
from perfmodel.harness import relative_error
from perfmodel.zoo import fold_batchnorm
from perfmodel.zoo.blocks import ConvBN
from perfmodel.harness import randomize_batchnorm
for c1, n in ((32, 2), (16, 2), (32, 128)):
    torch.manual_seed(c1 + n)
    s = fold_batchnorm(randomize_batchnorm(torch.nn.Sequential(ConvBN(3, c1, 3, stride=2), torch.nn.ReLU(),
                                                              ConvBN(c1, 2 * c1, 3, stride=2), torch.nn.ReLU()))).cuda()
    kw = cuda_kernels.FusedStem.from_block(s).weights
    x = torch.randn(n, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    assert stem.v2_applies(x)
    y = stem.run(x, kw, version=2)
    torch.cuda.synchronize()
    with torch.no_grad():
        exact = copy.deepcopy(s).double()(x.double())
        ref16 = s.half()(x)
    err, terr = relative_error(y, exact), relative_error(ref16, exact)
    print(f"smoke v2 C1={c1} n={n}: rel err {err:.3g} (PyTorch fp16 {terr:.3g}), finite {bool(torch.isfinite(y).all())}")
    assert torch.isfinite(y).all() and err <= 2 * terr
PY
# version 2's GPU tests (22: every shape of test_kernel_against_float64 at version 2, the v1 / v2 comparison
# and switch, the unaligned route)
step tests 30 python3 -m pytest -q -m cuda -k "(against_float64 and 2]) or v2" --maxfail=6 --tb=short \
  -p no:cacheprovider tests/test_stem.py
step bench 45 python3 -m cuda_kernels.bench_stem --versions 1,2 --modes "" --case 32:224 --case 16:224 \
  --warmup 5 --repeats 30 --out "$out/stem2_bench.json"
# then version 1's shapes through the new binding, with what is left of the budget
if [ "$(left)" -ge 15 ]; then
  step tests_v1 30 python3 -m pytest -q -m cuda -k "against_float64 and 1]" --maxfail=6 --tb=short \
    -p no:cacheprovider tests/test_stem.py
else
  echo "== stem2 tests_v1: skipped, $(left)s of the budget left (does not change STEM2_OK)" | tee -a "$log"
fi
python3 - "$out/stem2_bench.json" 2>&1 <<'EOF2' | tee -a "$log" | grep -q "^both=1" || ok=0
import json, sys
try:
    cases = json.load(open(sys.argv[1]))["results"]["cases"]
except Exception as e:  # noqa: BLE001
    print("STEM2 no benchmark file:", e); cases = []
both = len(cases) == 2
for c in cases:
    b = c["backends"]
    us = {v: (f"{b[f'cuda_kernels_v{v}']['latency_ms']['median'] * 1e3:.1f}us" if f"cuda_kernels_v{v}" in b
              else "FAILED") for v in (1, 2)}
    eager = f"{b['eager']['latency_ms']['median'] * 1e3:.1f}us" if "eager" in b else "-"
    print(f"STEM2 {c['name']} v1={us[1]} v2={us[2]} eager={eager} v2_applies={c.get('v2_applies')}")
    both = both and "FAILED" not in us.values()
print(f"both={int(both)}")
EOF2
grep "^STEM2 " "$log" | tail -2
echo "STEM2_OK=$ok" | tee -a "$log"
