#!/usr/bin/env bash
# Variant 5 of the wgmma ConvFirst kernel (NOTES.md "Variant 5: the conv warpgroup's loads off the critical
# path"), one short device call (<= ~150 s by its step limits 55 + 20 + 40 + 35), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v5.sh OUTDIR
# build (cached if device_build_all.sh ran; registers and local memory of the persistent kernels from the
# built library) -> smoke: variants 3 and 5 at C = 64 8 x 56 x 56 (392 tiles: 2-3 per thread block, so the conv
# warpgroup's prefetch runs) and C = 128 32 x 28 x 28 (392 tiles) against float64 under 20 s; stop with V5_OK=0 if they
# hang or fail -> the variant-5 GPU tests of tests/test_convfirst_c512.py (C = 64 / 128, alpha 2-10, batch 128 /
# 1 / odd, odd sizes, bit-identity with variant 3, the extension's shared-memory sizes, the swapped network)
# -> bench_c512 of variants 3 and 5 at C=64 a6 and a4 56x56 and C=128 a6 28x28, batch 128 (eager beside,
# no torch.compile, no mma.sync). Last line V5_OK=1|0 (smoke and every test passed), above it one line per
# case "V5 <case> v3=..us v5=..us". Predicted before any run: C=64 a6 v5 ~120 us (95-150; v3 177), a4 ~95
# (80-125), C=128 a6 ~130 (122-137; v3 137).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|V5 smoke|V5 res-usage" "$log" | tail -30
  python3 -c "from cuda_kernels import bench_c512; [print(l) for l in bench_c512.variant_lines('$out/v5_bench.json')]" \
    2>> "$log"
  echo "V5_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# no BLOCK_FUSION_PTXAS_VERBOSE: a change of flags makes torch rebuild the extension in the next process
step build 55 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(); print('V5 so:', m.__file__)" \
  || finish 0
so=$(grep -E "^V5 so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of the persistent kernels
  "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*persistent_kernel/ {f = $2; next} f {print "V5 res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 20 python3 -c "
import torch
from cuda_kernels import convfirst_c512 as c512
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm
for channels, batch, size in ((64, 8, 56), (128, 32, 28)):
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(channels, 6), seed=0)).cuda()
    x = torch.randn(batch, channels, size, size, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
        w = c512.prepare_weights(block.conv.weight, block.conv.bias, block.ffn.expand.weight, block.ffn.expand.bias,
                                 block.ffn.project.weight, block.ffn.project.bias)
    outs = {}
    for v in (3, 5):
        out = torch.full_like(x, float('nan'))
        outs[v] = c512.run(x, w, out=out, variant=v)
        torch.cuda.synchronize()
        err = relative_error(outs[v], exact)
        print(f'V5 smoke C {channels} variant {v}: rel error {err:.3g}', flush=True)
        assert torch.isfinite(outs[v]).all() and err < 5e-3, (channels, v)
    print(f'V5 smoke C {channels}: variant 5 bitwise variant 3: {torch.equal(outs[3], outs[5])}', flush=True)
"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
step tests 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -m cuda -k "prefetch"
ok=$([ $? -eq 0 ] && echo 1 || echo 0)
step bench 35 python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync --variants 3,5 --case c64:6:56 \
  --case c64:4:56 --case c128:6:28 --warmup 5 --repeats 20 --out "$out/v5_bench.json"
finish "$ok"
