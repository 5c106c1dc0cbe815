#!/usr/bin/env bash
# Variant 7 of the wgmma ConvFirst kernel at C = 256 and 128 (NOTES.md "Variant 7: the C = 256 FFN split by k, stage 2
# from registers"), one short device call (<= ~145 s by its step limits 50 + 25 + 40 + 30), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v7.sh OUTDIR
# build (cached if built; registers and local memory of the persistent and k-split kernels from the built library) ->
# smoke: variants 3 and 7 at C = 256 96 x 14 x 14 (294 tiles: 2-3 per thread block, so the next tile's halo prefetch,
# the exchange and the conv of a later tile run) at alpha 6 and 4, and C = 128 32 x 28 x 28 a6 (392 tiles), against
# float64 under 25 s; stop with V7_OK=0 if they hang or fail -> the variant-7 GPU tests of tests/test_convfirst_c512.py
# (-k ksplit: alpha 2-8, batch 128 / 1 / odd, odd sizes, 1 to 1568 tiles, determinism, the extension's shared-memory
# size, the swapped network) -> bench_c512 of variants 3 and 7 at C=256 a6 and a4 14x14 and C=128 a6 28x28, batch 128
# (eager beside, no torch.compile, no mma.sync). Last line V7_OK=1|0 (smoke and every test passed), above it one line
# per case "V7 <case> v3=..us v7=..us". Predicted before any run: c256:6:14 v7 ~72 us (62-95; v3 102.4), c256:4:14 ~51
# (44-68), c128:6:28 ~85 (75-120; v3 135.0, v5 131.4).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "== $name: exit $rc $(date +%T)" | tee -a "$log"
  return $rc
}
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|V7 smoke|V7 res-usage" "$log" | tail -30
  python3 -c "from cuda_kernels import bench_c512; [print(l) for l in bench_c512.variant_lines('$out/v7_bench.json', (3, 7), 'V7')]" \
    2>> "$log"
  echo "V7_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# no BLOCK_FUSION_PTXAS_VERBOSE: a change of flags makes torch rebuild the extension in the next process
step build 50 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(); print('V7 so:', m.__file__)" \
  || finish 0
so=$(grep -E "^V7 so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))" 2>/dev/null)
command -v cuobjdump > /dev/null && cuobj=cuobjdump
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of the persistent kernels
  "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*(persistent|ksplit)_kernel/ {f = $2; next} f {print "V7 res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 25 python3 -c "
import torch
from cuda_kernels import convfirst_c512 as c512
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm
for channels, alpha, batch, size in ((256, 6, 96, 14), (256, 4, 96, 14), (128, 6, 32, 28)):
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(channels, alpha), seed=0)).cuda()
    x = torch.randn(batch, channels, size, size, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
        torch_err = relative_error(block.half()(x), exact)
        w = c512.prepare_weights(block.conv.weight, block.conv.bias, block.ffn.expand.weight, block.ffn.expand.bias,
                                 block.ffn.project.weight, block.ffn.project.bias)
    for v in (3, 7):
        out = torch.full_like(x, float('nan'))
        got = c512.run(x, w, out=out, variant=v)
        torch.cuda.synchronize()
        err = relative_error(got, exact)
        print(f'V7 smoke C {channels} alpha {alpha} variant {v}: rel error {err:.3g} (PyTorch fp16 {torch_err:.3g})', flush=True)
        assert torch.isfinite(got).all() and err <= 2 * torch_err, (channels, alpha, v)
"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
step tests 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -m cuda -k "ksplit"
ok=$([ $? -eq 0 ] && echo 1 || echo 0)
step bench 30 python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync --variants 3,7 --case c256:6:14 \
  --case c256:4:14 --case c128:6:28 --warmup 5 --repeats 20 --out "$out/v7_bench.json"
finish "$ok"
