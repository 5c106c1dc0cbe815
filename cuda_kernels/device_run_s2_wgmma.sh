#!/usr/bin/env bash
# The stride-2 ConvFirst kernel on wgmma (NOTES.md "Stride 2 on the wgmma kernel"), one short device call
# (<= ~180 s), from the repository root:
#   timeout 185 bash cuda_kernels/device_run_s2_wgmma.sh OUTDIR [STEPS]
# STEPS (default "build smoke tests bench"; add "compile" for torch.compile default beside it, ~30 s a shape):
# build (its extension; the mma.sync stride-2 and C = 512 extensions build on the CPUs meanwhile, for the
# comparison test and the bench) -> smoke: C_in 64 / 128 / 256 at 2 x 9 x 9 against float64 under 20 s; stop if
# it hangs or fails -> the GPU tests of tests/test_convfirst_s2_wgmma.py (float64 zoo block, <= 2x PyTorch fp16's
# error, NaN-poisoned outputs, batch 128 / 1 / 37, odd sizes, tiles across images, the routing, the raw op) ->
# bench_s2_wgmma: the H200 shapes (64 -> 128 a6 56x56, 128 -> 256 a6 28x28, 256 -> 512 a6 14x14, batch 128),
# the wgmma kernel beside the mma.sync kernel's variants and eager. Last line S2W_OK=1|0 (every test passed),
# above it "S2W <case> ..." with each kernel's median. Predicted before any run (NOTES.md): 64 -> 128 150-200 us
# (mma.sync 181.5), 128 -> 256 105-135 (136.4), 256 -> 512 80-110 (126.9).
set -uo pipefail
out=${1:?output folder}
steps=${2:-build smoke tests bench}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
has() { [[ " $steps " == *" $1 "* ]]; }
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|S2W " "$log" | tail -40
  echo "S2W_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# the comparison test and the bench's baselines need the mma.sync stride-2 extension and (256 -> 512) the C = 512 one
timeout 150 python3 -c "from cuda_kernels._build import load_convfirst_s2_extension as a; a()" > "$out/build_s2.log" 2>&1 &
timeout 150 python3 -c "from cuda_kernels._build import load_convfirst_c512_extension as a; a()" > "$out/build_c512.log" 2>&1 &
if has build; then
  step build 80 python3 -c \
    "from cuda_kernels._build import load_convfirst_s2_wgmma_extension as l; m = l(verbose=True); print('S2W so:', m.__file__)" \
    || finish 0
  so=$(grep -E "^S2W so: " "$log" | tail -1 | cut -d' ' -f3)
  cuobj=$(find_cuobjdump)
  if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of the three kernels
    "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*s2w_kernel/ {f = $2; next} f {print "S2W res-usage", f, $1, $2, $4; f = ""}' \
      | tee -a "$log"
  fi
fi
if has smoke; then
  step smoke 20 python3 -c "
import torch
from cuda_kernels import convfirst_s2 as s2, convfirst_s2_wgmma as s2w
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm
for cin in (64, 128, 256):
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(cin, 2, 2 * cin, stride=2), seed=0)).cuda()
    x = torch.randn(2, cin, 9, 9, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
    w = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    out = torch.full_like(exact, float('nan'), dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    got = s2w.run(x, w, out=out)
    torch.cuda.synchronize()
    err = relative_error(got, exact)
    print(f'S2W smoke C_in {cin}: rel error {err:.3g}', flush=True)
    assert torch.isfinite(got).all() and err < 5e-3, cin
"
  rc=$?
  if [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
    finish 0
  fi
fi
ok=0
if has tests; then
  step tests 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_s2_wgmma.py -m cuda
  ok=$([ $? -eq 0 ] && echo 1 || echo 0)
fi
if has bench; then
  step bench 35 python3 -m cuda_kernels.bench_s2_wgmma --out "$out/s2w.json" --modes "" --warmup 5 --repeats 20
  grep -E "^convfirst_s2_" "$log" | sed 's/^/S2W /' | tail -6
fi
if has compile; then
  step compile 100 python3 -m cuda_kernels.bench_s2_wgmma --out "$out/s2w_compile.json" --modes default --warmup 5 --repeats 20
  grep -E "^convfirst_s2_" "$log" | sed 's/^/S2W /' | tail -3
fi
finish $ok
