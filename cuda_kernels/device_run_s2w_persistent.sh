#!/usr/bin/env bash
# The persistent stride-2 wgmma variant (NOTES.md "Stride 2 on wgmma, persistent"), one short device call (<= 150 s),
# from the repository root:
#   timeout 155 bash cuda_kernels/device_run_s2w_persistent.sh OUTDIR
# build (the stride-2 wgmma extension; the mma.sync stride-2 extension builds on the CPUs meanwhile, for the bench)
# -> the persistent kernels' registers and local memory (cuobjdump -res-usage) -> smoke: the persistent variant at
# C_in 64 / 128 against float64 (2 x 9 x 9, and 64 at 3 x 56 x 56 on 2 CTAs) under 20 s; stop if it hangs or fails
# -> its GPU tests (tests/test_convfirst_s2_wgmma.py -m cuda -k persistent: alpha 4 / 6, batch 128 / 1 / 37, odd sizes,
# 1 .. many tiles per CTA, bits equal to the one-tile kernel) -> bench_s2_wgmma at 64 -> 128 a6 56x56 batch 128: the
# one-tile wgmma kernel (wgmma), the persistent one (wgmma_persistent), the mma.sync kernel's variants (0, 1, 2).
# Predicted before any run: ~110 us (90-150) for the persistent one (wgmma 212.2, mma.sync 175-183).
# Result lines start "S2WP "; the last line is S2WP_OK=1 (smoke and tests passed, the bench ran) or S2WP_OK=0.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
t0=$(date +%s)
left() { echo $((148 - ($(date +%s) - t0))); }
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:" "$log" | tail -30
  grep -E "^S2WP " "$log"
  echo "S2WP_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
timeout 120 python3 -c "from cuda_kernels._build import load_convfirst_s2_extension as a; a()" > "$out/build_s2.log" 2>&1 &
step build 75 python3 -c \
  "from cuda_kernels._build import load_convfirst_s2_wgmma_extension as l; m = l(verbose=True); print('S2WP so:', m.__file__)" \
  || finish 0
so=$(grep -E "^S2WP so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of every s2w kernel
  "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*s2w_.*kernel/ {f = $2; next} f {print "S2WP res-usage", f, $1, $2, $4; f = ""}' \
    >> "$log"
fi
step smoke 20 python3 -c "
import torch
from cuda_kernels import convfirst_s2 as s2, convfirst_s2_wgmma as s2w
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm
for cin, n, size, grid in ((64, 2, 9, 0), (128, 2, 9, 0), (64, 3, 56, 2), (128, 2, 28, 3)):
    torch.manual_seed(0)
    block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(cin, 2, 2 * cin, stride=2), seed=0)).cuda()
    x = torch.randn(n, cin, size, size, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        exact = block.double()(x.double())
    w = s2w.prepare_weights(s2.FoldedWeights.from_block(block))
    out = torch.full_like(exact, float('nan'), dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    got = s2w.run(x, w, out=out, persistent=True, grid=grid)
    torch.cuda.synchronize()
    err = relative_error(got, exact)
    same = torch.equal(got, s2w.run(x, w, persistent=False))
    print(f'S2WP smoke C_in {cin} {n}x{size}x{size} grid {grid}: rel error {err:.3g}, bits equal the one-tile kernel: {same}', flush=True)
    assert torch.isfinite(got).all() and err < 5e-3, cin
"
rc=$?
if [ $rc -ne 0 ]; then
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo "S2WP smoke hung: stopping" | tee -a "$log"
  finish 0
fi
ok=1
step tests 30 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_s2_wgmma.py -m cuda -k persistent
rc=$?
echo "S2WP tests: exit $rc $(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1)" >> "$log"
[ $rc -eq 0 ] || ok=0
step bench 40 python3 -m cuda_kernels.bench_s2_wgmma --out "$out/s2wp.json" --case 64:6:56 --persistent --modes "" \
  --warmup 5 --repeats 20 || ok=0
grep -E "^convfirst_s2_" "$log" | sed 's/^/S2WP bench /' | tail -2 >> "$log"
finish $ok
