#!/usr/bin/env bash
# C = 64 on the wgmma ConvFirst kernel (NOTES.md "C = 64 on the wgmma kernel"), one short device call
# (<= ~150 s), from the repository root:
#   timeout 160 bash cuda_kernels/device_run_c64.sh OUTDIR
# build (ptxas log; the mma.sync extension builds on the CPUs meanwhile, for the bench's baseline) ->
# smoke: two tiny launches (variants 0 and 3 at C = 64, 2 x 9 x 9) against float64 under 20 s; stop if
# they hang or fail -> the C = 64 GPU tests of tests/test_convfirst_c512.py in two processes (variants 0
# and 2 with the raw op and its shared-memory sizes; then variant 3, bit-identity between the variants,
# the default-variant shapes and the swapped network: W = 56, 55, 29, 9, 1, odd batches, alpha 2..10) ->
# bench_c512 at C = 64 a6 56x56 batch 128, the variants whose tests passed, beside the mma.sync kernel
# and eager (no torch.compile). Last lines: C64_OK=1|0 (every test passed), C64_OK_V02 / C64_OK_V3 above
# it, and, if it benched, C64_VARIANT=<fastest> (and each backend's median, "C64 <backend>: .. us"). Predicted (before any run): v0 ~235 us (190-280),
# v2 the same, v3 ~135 us (110-165); mma.sync 210 us.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok, variant
  grep -E "^== |passed|failed|Error|error:|C64 " "$log" | tail -30
  echo "C64_OK=$1"
  [ -n "${2:-}" ] && echo "C64_VARIANT=$2"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# the bench's mma.sync baseline needs the block-fusion extension: build it on the CPUs meanwhile
timeout 100 python3 -c "from cuda_kernels._build import load_extension as a; a()" > "$out/build_mma_sync.log" 2>&1 &
mma=$!
# no BLOCK_FUSION_PTXAS_VERBOSE: a change of flags makes torch rebuild the extension in the next process
# (tests, bench); registers / spills come from the built library (cuobjdump -res-usage) instead
step build 50 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(verbose=True); print('C64 so:', m.__file__)" \
  || finish 0
so=$(grep -E "^C64 so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of the C = 64 kernels
  "$cuobj" -res-usage "$so" 2>/dev/null | awk '/Function .*ILi64E/ {f = $2; next} f {print "C64 res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 20 python3 -c "
import torch
from cuda_kernels import convfirst_c512 as c512
from perfmodel.harness import randomize_batchnorm, relative_error
from perfmodel.zoo import ConvFirstBlock, fold_batchnorm
torch.manual_seed(0)
block = fold_batchnorm(randomize_batchnorm(ConvFirstBlock(64, 6), seed=0)).cuda()
x = torch.randn(2, 64, 9, 9, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
with torch.no_grad():
    exact = block.double()(x.double())
    w = c512.prepare_weights(block.conv.weight, block.conv.bias, block.ffn.expand.weight, block.ffn.expand.bias,
                             block.ffn.project.weight, block.ffn.project.bias)
for v in (0, 3):
    out = torch.full_like(x, float('nan'))
    got = c512.run(x, w, out=out, variant=v)
    torch.cuda.synchronize()
    err = relative_error(got, exact)
    print(f'C64 smoke variant {v}: rel error {err:.3g}', flush=True)
    assert torch.isfinite(got).all() and err < 5e-3, v
"
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
# the tests in two processes, so that a variant-3 fault (a dead CUDA context) does not hide variants 0 / 2
step tests02 25 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -k \
  "(test_c64_variants and (v0- or v2-)) or raw_op"
ok02=$([ $? -eq 0 ] && echo 1 || echo 0)
step tests3 30 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -k \
  "(test_c64_variants and v3-) or c64_variants_are_bitwise or c64_in_the_swapped or \
(narrow_convfirstnet_shapes and 64-) or (odd_sizes_and_batches and 64-)"
ok3=$([ $? -eq 0 ] && echo 1 || echo 0)
echo "C64_OK_V02=$ok02 C64_OK_V3=$ok3 (variants 0 / 2; variant 3, bit-identity, the default-variant shapes)" | tee -a "$log"
ok=$([ "$ok02$ok3" = 11 ] && echo 1 || echo 0)
variants=$([ $ok02 = 1 ] && echo 0,2)
[ $ok3 = 1 ] && variants=${variants:+$variants,}3
[ -z "$variants" ] && finish 0
mma_flag="--no-mma-sync"
if wait "$mma"; then mma_flag=""; else echo "== mma.sync extension not built: bench without it" | tee -a "$log"; fi
step bench 25 python3 -m cuda_kernels.bench_c512 --modes "" $mma_flag --variants "$variants" --case c64:6:56 \
  --out "$out/c64_bench.json"
variant=$(python3 - "$out/c64_bench.json" <<'EOF' 2>> "$log"
import json, sys
try:
    cases = json.load(open(sys.argv[1]))["results"]["cases"]
except (OSError, ValueError, KeyError):
    sys.exit(0)
for entry in cases:
    b = entry["backends"]
    for name, r in b.items():
        print(f"C64 {name}: {r['latency_ms']['median'] * 1e3:.1f} us", file=sys.stderr)
    if "cuda_kernels" in b:
        print(b["cuda_kernels"]["variant"])
EOF
)
grep -E "^C64 " "$log" | tail -8
finish "$ok" "$variant"
