#!/usr/bin/env bash
# Variant 6 of the wgmma ConvFirst kernel at C = 64 (NOTES.md "Variant 6: one tile per consumer warpgroup at C = 64"),
# one short device call (<= ~150 s by its step limits 55 + 20 + 40 + 35), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_v6.sh OUTDIR
# build (cached if built; registers and local memory of the persistent kernels and convfirst_c64_pingpong_kernel
# from the built library) -> smoke: variants 3 and 6 at C = 64 8 x 56 x 56 (392 tiles: 2-3 per thread block, both
# consumer warpgroups and both X buffers in use) at alpha 6 and 4 against float64 under 20 s; stop with V6_OK=0 if they
# hang or fail -> the variant-6 GPU tests of tests/test_convfirst_c512.py (-k pingpong: alpha 2-8, batch 128 / 1 / odd,
# odd sizes, 1 to 6272 tiles, determinism, the alpha-10 refusal and fallback, the extension's shared-memory size, the
# swapped network) -> bench_c512 of variants 3 and 6 at C=64 a6 and a4 56x56, batch 128 (eager beside, no
# torch.compile, no mma.sync). Last line V6_OK=1|0 (smoke and every test passed), above it one line per case
# "V6 <case> v3=..us v6=..us". Predicted before any run: a6 v6 ~100 us (75-140; v3 174.8), a4 ~85 (65-125; v3 153.0).
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|V6 smoke|V6 res-usage" "$log" | tail -30
  python3 -c "from cuda_kernels import bench_c512; [print(l) for l in bench_c512.variant_lines('$out/v6_bench.json', (3, 6), 'V6')]" \
    2>> "$log"
  echo "V6_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# no BLOCK_FUSION_PTXAS_VERBOSE: a change of flags makes torch rebuild the extension in the next process
step build 55 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(); print('V6 so:', m.__file__)" \
  || finish 0
so=$(grep -E "^V6 so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of the persistent kernels
  "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*(persistent|pingpong)_kernel/ {f = $2; next} f {print "V6 res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 20 python3 -c "
import torch
from cuda_kernels import convfirst_c512 as c512
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm
for alpha in (6, 4):
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(64, alpha), seed=0)).cuda()
    x = torch.randn(8, 64, 56, 56, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
        torch_err = relative_error(block.half()(x), exact)
        w = c512.prepare_weights(block.conv.weight, block.conv.bias, block.ffn.expand.weight, block.ffn.expand.bias,
                                 block.ffn.project.weight, block.ffn.project.bias)
    for v in (3, 6):
        out = torch.full_like(x, float('nan'))
        got = c512.run(x, w, out=out, variant=v)
        torch.cuda.synchronize()
        err = relative_error(got, exact)
        print(f'V6 smoke C 64 alpha {alpha} variant {v}: rel error {err:.3g} (PyTorch fp16 {torch_err:.3g})', flush=True)
        assert torch.isfinite(got).all() and err <= 2 * torch_err, (alpha, v)
"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
step tests 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -m cuda -k "pingpong"
ok=$([ $? -eq 0 ] && echo 1 || echo 0)
step bench 35 python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync --variants 3,6 --case c64:6:56 \
  --case c64:4:56 --warmup 5 --repeats 20 --out "$out/v6_bench.json"
finish "$ok"
