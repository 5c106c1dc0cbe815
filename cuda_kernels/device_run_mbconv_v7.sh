#!/usr/bin/env bash
# MBConv version 7 (NOTES.md, "MBConv version 7: the projection's parallelism and SE without its own kernel"), one
# device call of at most ~235 s (its own budget, each step capped by what is left), from the repository root:
#   timeout 250 bash cuda_kernels/device_run_mbconv_v7.sh OUTDIR
# build (the MBConv extension; registers / local memory of project_v7 and kernel 1 v7 from the library) -> smoke:
# version 7 on B0's features.4.1 (14x14, project_v7 KS = 2), 6.1 (7x7, KS = 4), 7.0 (5 N tiles) and 2.1 (version 3's
# projection, SE in kernel 1) at batch 128 into NaN-poisoned outputs against float64, <= 2x PyTorch fp16's error,
# and twice in a row (the per-image counters back at zero); under 25 s, else it stops with MB7_OK=0 ->
# EfficientNet-B0 end to end (rest eager, CUDA graphs, as the 2.875 ms of session 7) with version 3, then 7
# (CUDA_KERNELS_MBCONV_VERSION, as mbconv_device_run.sh's e2e step) -> the version-7 GPU tests
# (tests/test_mbconv_v7.py -m cuda) -> per-block bench of versions 3 and 7 (L2 flushed, CUDA graphs,
# torch.profiler per kernel; no torch.compile) at B0's stage 2-4 stride-1 blocks features.2.1, 3.1, 4.1 and the
# late blocks 5.1, 6.1, 7.0.
# Output: log.txt, mb7_blocks.json, b0_v3.json, b0_v7.json; last line MB7_OK=1|0 (smoke and every test passed),
# above it "MB7 block <path> v3=..us v7=..us (graph)" with v7's kernels, and "MB7 e2e v3=..ms v7=..ms".
# Predicted before any run (NOTES): B0 2.875 -> ~2.52 ms; late projections 28.9-47.2 -> 8-22 us each.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
start=$(date +%s)
left() { echo $((235 - ($(date +%s) - start))); }
source cuda_kernels/device_lib.sh  # step (capped by left), find_cuobjdump
ok=1
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|MB7 smoke|MB7 res-usage" "$log" | tail -40
  python3 - "$out" <<'EOF' 2>> "$log"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
p = out / "mb7_blocks.json"
if p.exists():
    for row in json.loads(p.read_text())["results"]["cases"]:
        b = row.get("backends", {})
        def g(v):
            r = b.get(f"cuda_kernels_v{v}", {})
            return f"{r['graph_latency_ms']['median'] * 1e3:.1f}" if "graph_latency_ms" in r else "-"
        k7 = row.get("kernels_us_by_version", {}).get("cuda_kernels_v7", {})
        k3 = row.get("kernels_us_by_version", {}).get("cuda_kernels_v3", {})
        short = lambda k: "; ".join(f"{n.split('<')[0].split('(')[0].split('::')[-1]} {t:.1f}" for n, t in k.items())
        print(f"MB7 block {row['path']} v3={g(3)}us v7={g(7)}us (graph)  v3: {short(k3)} | v7: {short(k7)}")
e = {}
for v in (3, 7):
    f = out / f"b0_v{v}.json"
    if f.exists():
        e[v] = json.loads(f.read_text())["results"]["latency_ms"]["median"]
print("MB7 e2e " + " ".join(f"v{v}={e[v]:.3f}ms" if v in e else f"v{v}=-" for v in (3, 7)))
EOF
  echo "MB7_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build 70 python3 -c "from cuda_kernels._build import load_mbconv_extension as l; m = l(); print('MB7 so:', m.__file__)" \
  || finish 0
so=$(grep -E "^MB7 so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG and LOCAL (spill / stack bytes) of the version-7 kernels
  "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*(project_v7|Lb0ELb1EE)/ {f = $2; next} f {print "MB7 res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 25 python3 -c "
import copy, torch, torchvision
from cuda_kernels import mbconv as mb
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import fold_batchnorm
torch.manual_seed(0)
model = randomize_batchnorm(torchvision.models.efficientnet_b0()).eval()
shapes = {'features.2.1': (24, 56), 'features.4.1': (80, 14), 'features.6.1': (192, 7), 'features.7.0': (192, 7)}
for path, (c, s) in shapes.items():
    block = fold_batchnorm(copy.deepcopy(model.get_submodule(path))).cuda()
    x = torch.randn(128, c, s, s, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = mb.reference(x.double(), mb.block_params(copy.deepcopy(block).double()))
        torch_err = relative_error(copy.deepcopy(block).half()(x), exact)
    params = mb.block_params(block)
    w = mb.prepare_weights(params)
    for rep in range(2):
        out = torch.full(tuple(exact.shape), float('nan'), device='cuda', dtype=torch.float16)
        got = mb.mbconv(x, params, w, out=out.contiguous(memory_format=torch.channels_last), version=7)
        torch.cuda.synchronize()
        err = relative_error(got, exact)
        print(f'MB7 smoke {path} batch 128 run {rep}: rel error {err:.3g} (PyTorch fp16 {torch_err:.3g})', flush=True)
        assert torch.isfinite(got).all() and err <= 2 * torch_err, path
"
rc=$?
if [ $rc -ne 0 ]; then
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
for v in 3 7; do  # the headline pair first, so that a slow test step cannot crowd it out
  step "e2e_v$v" 30 env CUDA_KERNELS_MBCONV_VERSION=$v python3 cli.py bench efficientnet_b0 --repeats 20 --warmup 5 \
    --cuda-graphs --backend cuda_kernels -o "$out/b0_v$v.json"
done
step tests 75 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_v7.py || ok=0
step bench 40 python3 -m cuda_kernels.mbconv_bench --out "$out/mb7_blocks.json" --version 3 --version 7 --budget-s 0 \
  --repeats 20 --block features.2.1 --block features.3.1 --block features.4.1 --block features.5.1 \
  --block features.6.1 --block features.7.0
finish "$ok"
