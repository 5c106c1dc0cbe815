#!/usr/bin/env bash
# Variant 8's conv kernel, version b (NOTES.md "Variant 8's conv kernel, version b (before any run)"), one short device
# call (<= ~155 s by its step limits 55 + 18 + 38 + 2 x 22), from the repository root:
#   timeout 170 bash cuda_kernels/device_run_conv8b.sh OUTDIR
# build (cached if built; registers and local memory of conv8, conv8b and ffn8 from the built library) -> smoke: variant
# 8 at C = 256 96 x 14 x 14 and 37 x 13 x 13 (alpha 6, 4) with CUDA_KERNELS_CONV8B=0 and =1 against float64 (<= 2x
# PyTorch fp16's error, NaN-poisoned output), and whether the scratch and the output of conv8b equal conv8's bit for
# bit (expected: the same m16n8k8 chains on the same fragments, the bias after the taps, one rounding); stop with
# CONV8B_OK=0 if it hangs or fails -> the GPU tests of tests/test_convfirst_c512.py -k "conv8b and not convfirstnet"
# (test_variant8's 14 shapes bit for bit, a PDL chain, a swapped network; test_conv8b_in_convfirstnet_h200 needs every
# other extension built and runs with all GPU tests, device_run_all_tests.sh) -> bench_c512 of variants 3 and 8
# at c256:6:14 and c256:4:14 (batch 128), once with CUDA_KERNELS_CONV8B=0 and once with =1 (bench_c512 times a variant
# once per call: two files).
# Predicted before any run (NOTES.md): the conv kernel ~8 us (6.5-10) against conv8's 15.1; C = 256 a6 14x14 variant 8
# ~77 us (75-79) against 83.6 with conv8 (a4 ~60 against 66.6).
# Last line CONV8B_OK=1|0 (smoke and every test passed), above it "CONV8B <case> off v3=..us v8=..us" and "... on ...".
# OUTDIR/log.txt, OUTDIR/conv8b_off.json, OUTDIR/conv8b_on.json. If it hangs: the slice loop's barriers.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
lines() {  # the CONV8B lines of both bench files
  for mode in off on; do
    python3 -c "from cuda_kernels import bench_c512; [print(l) for l in bench_c512.variant_lines('$out/conv8b_$mode.json', (3, 8), 'CONV8B')]" \
      2>> "$log" | sed "s/^CONV8B \([^ ]*\) /CONV8B \1 $mode /"
  done
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
ok=0
if step build 55 python3 -c \
    "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(); print('CONV8B so:', m.__file__)"; then
  so=$(grep -E "^CONV8B so: " "$log" | tail -1 | cut -d' ' -f3)
  cuobj=$(find_cuobjdump)
  if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG, LOCAL (spill / stack bytes) of the variant-8 kernels
    "$cuobj" -res-usage "$so" 2>/dev/null \
      | awk '/Function .*(conv8|conv8b|ffn8)_kernel/ {f = $2; next} f {print "CONV8B res-usage", f, $1, $2, $4; f = ""}' \
      | tee -a "$log"
  fi
  step smoke 18 python3 - 256:6:96:14 256:4:37:13 <<'PY'
import os
import sys

import torch

from cuda_kernels import convfirst_c512 as c512
from cuda_kernels.bench_c512 import smoke_case
from perfmodel.harness import relative_error

for case in sys.argv[1:]:
    x, w, exact, torch_err = smoke_case(case)
    batch, size = x.shape[0], x.shape[-1]
    outs, scratch = {}, {}
    for flag in ("0", "1"):
        os.environ[c512.CONV8B_SWITCH] = flag
        xconv = torch.full((c512.conv8_scratch_bytes(batch * size * size) + 64,), 255, dtype=torch.uint8, device="cuda")
        out = torch.full_like(x, float("nan"))
        outs[flag] = c512.run(x, w, out=out, variant=8, xconv=xconv)
        torch.cuda.synchronize()
        scratch[flag] = xconv
        err = relative_error(outs[flag], exact)
        print(f"CONV8B smoke {case} conv8b={flag}: rel error {err:.3g} (PyTorch fp16 {torch_err:.3g})", flush=True)
        assert torch.isfinite(outs[flag]).all() and err <= 2 * torch_err, (case, flag)
        assert (xconv[-64:] == 255).all(), (case, flag)  # nothing written past the scratch
    same_x = torch.equal(scratch["0"], scratch["1"])
    same = torch.equal(outs["0"], outs["1"])
    print(f"CONV8B smoke {case}: conv8b scratch bitwise conv8: {same_x}, output bitwise: {same}, max |diff| "
          f"{(outs['1'].float() - outs['0'].float()).abs().max().item():.3g}", flush=True)
    assert same_x and same, case
PY
  rc=$?
  if [ $rc -eq 0 ]; then
    step tests 38 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -m cuda \
      -k "conv8b and not convfirstnet"
    [ $? -eq 0 ] && ok=1
    for mode in off on; do
      flag=$([ $mode = on ] && echo 1 || echo 0)
      step bench_$mode 22 env CUDA_KERNELS_CONV8B=$flag python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync \
        --variants 3,8 --case c256:6:14 --case c256:4:14 --warmup 5 --repeats 20 --out "$out/conv8b_$mode.json"
    done
  else
    { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo "== smoke hung: stopping" | tee -a "$log"
  fi
fi
grep -E "^== |passed|failed|Error|error:|CONV8B smoke|CONV8B res-usage" "$log" | tail -30
lines
echo "CONV8B_OK=$ok"
