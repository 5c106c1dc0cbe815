#!/usr/bin/env bash
# Variant 8 of the wgmma ConvFirst kernel at C = 256 (NOTES.md "What binds the C = 256 block", "Next: variant 8" and
# "Variant 8: built"), one short device call (<= ~155 s by its step limits 55 + 25 + 40 + 35), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v8.sh OUTDIR
# build (cached if built; registers and local memory of the k-split and variant-8 kernels from the built library) ->
# smoke: variants 3, 7 and 8 at C = 256 96 x 14 x 14 (294 tiles: 2-3 per thread block, both X buffers reused) at alpha 6
# and 4 against float64 (<= 2x PyTorch fp16's error, NaN-poisoned output), and whether variant 8 equals variant 7 bit for
# bit (expected: the same conv arithmetic in its own kernel, the same FFN, exchange and epilogue order), under 25 s; stop
# with V8_OK=0 if they hang or fail -> the variant-8 GPU tests of tests/test_convfirst_c512.py (-k "variant8 or
# smem_matches": alpha 2-8, batch 128 / 1 / odd, odd sizes, 1 to 919 tiles, bits against variant 7, determinism, the
# scratch against the conv, the binding's refusals, a PDL chain, the swapped network) -> bench_c512 of variants 3, 7 and
# 8 at C=256 a6 and a4 14x14, batch 128 (eager beside, no torch.compile, no mma.sync).
# Predicted before any run (NOTES.md "Next: variant 8"): c256:6:14 v8 ~78 us (range 72-90; measured v3 103.4, v7 101.8),
# c256:4:14 ~57 (v3 78.4, v7 81.3; not predicted in NOTES: the same parts scaled, FFN 8/12 of 62.0 + the same tile end,
# first copy and conv kernel).
# Last line V8_OK=1|0 (smoke and every test passed), above it one line per case "V8 <case> v3=..us v7=..us v8=..us".
# OUTDIR/log.txt, OUTDIR/v8_bench.json. If it hangs: the new synchronisation is the X pair (x_full / x_empty, the
# producer issuing tile k + 1's X after tile k's first chunk), x_dead (consumers -> copier warps) and sc_full (copiers
# -> the epilogue), and the exchange's four named barriers per tile.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|V8 smoke|V8 res-usage" "$log" | tail -30
  python3 -c "from cuda_kernels import bench_c512; [print(l) for l in bench_c512.variant_lines('$out/v8_bench.json', (3, 7, 8), 'V8')]" \
    2>> "$log"
  echo "V8_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
step build 55 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(); print('V8 so:', m.__file__)" \
  || finish 0
so=$(grep -E "^V8 so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), STACK, LOCAL (spills) of the k-split and variant-8 kernels
  "$cuobj" -res-usage "$so" 2>/dev/null \
    | awk '/Function .*(ksplit|conv8|ffn8)_kernel/ {f = $2; next} f {print "V8 res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 25 python3 - 256:6:96:14 256:4:96:14 <<'PY'
import sys

import torch

from cuda_kernels import convfirst_c512 as c512
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm

for case in sys.argv[1:]:
    channels, alpha, batch, size = map(int, case.split(":"))
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(channels, alpha), seed=0)).cuda()
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=torch.float16)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
        torch_err = relative_error(block.half()(x), exact)
        w = c512.prepare_weights(block.conv.weight, block.conv.bias, block.ffn.expand.weight, block.ffn.expand.bias,
                                 block.ffn.project.weight, block.ffn.project.bias)
    outs = {}
    for v in (3, 7, 8):
        out = torch.full_like(x, float("nan"))
        outs[v] = c512.run(x, w, out=out, variant=v)
        torch.cuda.synchronize()
        err = relative_error(outs[v], exact)
        print(f"V8 smoke C {channels} alpha {alpha} {batch}x{size}x{size} variant {v}: rel error {err:.3g} "
              f"(PyTorch fp16 {torch_err:.3g})", flush=True)
        assert torch.isfinite(outs[v]).all() and err <= 2 * torch_err, (case, v)
    print(f"V8 smoke {case}: variant 8 bitwise variant 7: {torch.equal(outs[7], outs[8])}, "
          f"max |v8 - v7| {(outs[8].float() - outs[7].float()).abs().max().item():.3g}", flush=True)
PY
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
step tests 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -m cuda \
  -k "variant8 or smem_matches"
ok=$([ $? -eq 0 ] && echo 1 || echo 0)
step bench 35 python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync --variants "3,7,8" --case c256:6:14 \
  --case c256:4:14 --warmup 5 --repeats 20 --out "$out/v8_bench.json"
finish "$ok"
