#!/usr/bin/env bash
# One device call for the fused stem at C1 = 48 (ConvFirstNet-L's 3 -> 48 -> 96; csrc/stem.cu stem_kernel_v2<48>;
# NOTES.md "Fused stem C1 = 48"), from the repository root:
#   bash cuda_kernels/device_run_stem48.sh OUTDIR
# Within ~145 s (each step's limit is cut to what is left of the budget): builds the stem's extension
# (perfmodel_stem) and prints its kernels' registers / spills; a smoke run of C1 = 48 against float64 (batch 2 and
# 128, 224x224) under a short timeout (a hang or a wrong answer stops the script there); the C1 = 48 GPU tests
# (tests/test_stem.py -m cuda -k "c1_48 or convfirstnet_l": batch 1 / 3 / 128 at 224x224, W % 8 == 0 odd sizes,
# NaN-poisoned outputs, <= 2x PyTorch fp16's error against float64; the refusals and the module's PyTorch fallback
# for W % 8 != 0 / misaligned x; ConvFirstNet-L with its stem swapped through check_blocks and torch.compile); the
# benchmark (bench_stem --case 48:224 --versions 2 --modes freezing: batch 128, 224x224, beside eager and
# torch.compile default with freezing). Lines "STEM48 <case> fused=..us compile=..us eager=..us" come last but one;
# the last line, on stdout and in OUTDIR/log.txt, is STEM48_OK=1 (built, smoke and every GPU test passed, the kernel
# passed the benchmark's correctness check and was timed) or STEM48_OK=0.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda-13.0 ]; then
  export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH
fi
start=$(date +%s); budget=${STEM48_BUDGET_S:-145}
ok=1
left() { echo $(( budget - ($(date +%s) - start) )); }
STEP_PREFIX="stem48 " STEP_CLEARS_OK=1
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {
  grep -q "^STEM48 " "$log" || echo "STEM48 not benchmarked: a step before the benchmark failed (see $log)" | tee -a "$log"
  tail -30 "$log"
  echo "STEM48_OK=0" | tee -a "$log"; exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build 85 python3 -c "
from cuda_kernels import stem
ext = stem._extension()
print('extension', ext.__file__, 'smem v2 C1=48', ext.smem_bytes_v2(48), 'C1=32', ext.smem_bytes_v2(32),
      'v1 C1=48', ext.smem_bytes(48))
assert ext.smem_bytes_v2(48) == 192544 and ext.smem_bytes(48) == 0
open('$out/stem_so_path.txt', 'w').write(ext.__file__)
" || finish
cuobjdump=$(find_cuobjdump)
timeout 10 "$cuobjdump" --dump-resource-usage "$(cat "$out/stem_so_path.txt")" 2>&1 | grep -E "Function|REG" \
  | tee "$out/stem_resources.txt" >> "$log"
# smoke: C1 = 48 once at batch 2 and 128 (224x224) against float64 into a NaN-poisoned output; stops the script on a
# hang (timeout) or an error above 2x PyTorch fp16's
step smoke 25 python3 - <<'PY' || finish
import copy, torch
import cuda_kernels
from cuda_kernels import stem
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import fold_batchnorm
from perfmodel.zoo.blocks import ConvBN
for n in (2, 128):
    torch.manual_seed(48 + n)
    s = fold_batchnorm(randomize_batchnorm(torch.nn.Sequential(ConvBN(3, 48, 3, stride=2), torch.nn.ReLU(),
                                                              ConvBN(48, 96, 3, stride=2), torch.nn.ReLU()))).cuda()
    kw = cuda_kernels.FusedStem.from_block(s).weights
    x = torch.randn(n, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    assert stem.v2_applies(x)
    y = torch.full((n, 96, 56, 56), float("nan"), device="cuda", dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    stem.run(x, kw, out=y)
    torch.cuda.synchronize()
    with torch.no_grad():
        exact = copy.deepcopy(s).double()(x.double())
        ref16 = s.half()(x)
    err, terr = relative_error(y, exact), relative_error(ref16, exact)
    print(f"smoke C1=48 n={n}: rel err {err:.3g} (PyTorch fp16 {terr:.3g}), finite {bool(torch.isfinite(y).all())}")
    assert torch.isfinite(y).all() and 0 < terr and err <= 2 * terr
PY
# the C1 = 48 GPU tests (11 shapes against float64, determinism and the V2 switch, the refusals and the module's
# fallback, ConvFirstNet-L's stem in the network)
step tests 45 python3 -m pytest -q -m cuda -k "c1_48 or convfirstnet_l" --maxfail=6 --tb=short \
  -p no:cacheprovider tests/test_stem.py
step bench 60 python3 -m cuda_kernels.bench_stem --case 48:224 --versions 2 --modes freezing \
  --warmup 5 --repeats 30 --out "$out/stem48_bench.json"
python3 - "$out/stem48_bench.json" 2>&1 <<'EOF2' | tee -a "$log" | grep -q "^timed=1" || ok=0
import json, sys
try:
    cases = json.load(open(sys.argv[1]))["results"]["cases"]
except Exception as e:  # noqa: BLE001
    print("STEM48 no benchmark file:", e); cases = []
timed = len(cases) == 1
for c in cases:
    b = c["backends"]
    us = lambda k: f"{b[k]['latency_ms']['median'] * 1e3:.1f}us" if k in b else "FAILED"  # noqa: E731
    err = c.get("correctness", {}).get("variants", {})
    print(f"STEM48 {c['name']} fused={us('cuda_kernels')} compile={us('inductor_freezing')} eager={us('eager')} "
          f"v2_applies={c.get('v2_applies')} errors={err} torch_fp16={c.get('correctness', {}).get('torch_fp16_rel_error')}")
    timed = timed and "cuda_kernels" in b
print(f"timed={int(timed)}")
EOF2
grep "^STEM48 " "$log" | tail -1
echo "STEM48_OK=$ok" | tee -a "$log"
