#!/usr/bin/env bash
# One wgmma ConvFirst variant against variant 3 in a short device call (<= ~155 s by its step limits 55 + 25 + 40 +
# 35), from the repository root:
#   [BESIDE="3 7"] bash cuda_kernels/device_run_c512_variant.sh OUTDIR VARIANT TESTS_K "SMOKE" "BENCH"
# VARIANT: the variant under test; BESIDE: the variants run beside it (default 3; the last is the one its bits are
# compared with); TESTS_K: the pytest -k expression of its GPU tests in tests/test_convfirst_c512.py; SMOKE: cases
# C:alpha:batch:size run before anything else against float64 (<= 2x PyTorch fp16's error, output poisoned with NaN;
# also says whether the output equals the last BESIDE variant's bit for bit, and by how much it differs); BENCH:
# bench_c512 cases (cC:alpha:size, batch 128) timed for the BESIDE variants and VARIANT beside eager.
# build (cached if built; registers and local memory of the persistent kernels from the built library) -> smoke
# (stops with V<n>_OK=0 if it hangs or fails) -> the GPU tests -> the bench. Last line V<n>_OK=1|0 (smoke and every
# test passed), above it one line per case "V<n> <case> v3=..us v<n>=..us". OUTDIR/log.txt, OUTDIR/v<n>_bench.json.
# A variant's own script (device_run_v<n>.sh) holds its cases and its prediction, written before the run.
set -uo pipefail
out=${1:?output folder}; variant=${2:?variant}; tests_k=${3:?pytest -k expression}; smoke=${4:?smoke cases}
bench=${5:?bench cases}
tag="V$variant"
beside=${BESIDE:-3}
variants=$(echo $beside $variant | tr ' ' ',')  # "3,7,8": bench_c512's --variants and variant_lines' tuple
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
finish() {  # ok
  grep -E "^== |passed|failed|Error|error:|$tag smoke|$tag res-usage" "$log" | tail -30
  python3 -c "from cuda_kernels import bench_c512; [print(l) for l in bench_c512.variant_lines('$out/v${variant}_bench.json', ($variants), '$tag')]" \
    2>> "$log"
  echo "${tag}_OK=$1"
  exit 0
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
# no BLOCK_FUSION_PTXAS_VERBOSE: a change of flags makes torch rebuild the extension in the next process
step build 55 python3 -c \
  "from cuda_kernels._build import load_convfirst_c512_extension as l; m = l(); print('$tag so:', m.__file__)" \
  || finish 0
so=$(grep -E "^$tag so: " "$log" | tail -1 | cut -d' ' -f3)
cuobj=$(find_cuobjdump)
if [ -n "$so" ] && [ -x "$cuobj" ]; then  # REG (at entry), LOCAL (spill / stack bytes) of the persistent kernels
  "$cuobj" -res-usage "$so" 2>/dev/null \
    | awk -v tag="$tag" '/Function .*(persistent|pingpong|ksplit|conv8|ffn8)_kernel/ {f = $2; next} f {print tag, "res-usage", f, $1, $2, $4; f = ""}' \
    | tee -a "$log"
fi
step smoke 25 python3 - "$variant" "$beside" $smoke <<'PY'
import sys

import torch

from cuda_kernels import convfirst_c512 as c512
from cuda_kernels.bench_c512 import smoke_case
from perfmodel.harness import relative_error

variant = int(sys.argv[1])
beside = [int(v) for v in sys.argv[2].split()]
for case in sys.argv[3:]:
    channels, alpha, batch, size = map(int, case.split(":"))
    x, w, exact, torch_err = smoke_case(case)
    outs = {}
    for v in (*beside, variant):
        out = torch.full_like(x, float("nan"))
        outs[v] = c512.run(x, w, out=out, variant=v)
        torch.cuda.synchronize()
        err = relative_error(outs[v], exact)
        print(f"V{variant} smoke C {channels} alpha {alpha} {batch}x{size}x{size} variant {v}: rel error {err:.3g} "
              f"(PyTorch fp16 {torch_err:.3g})", flush=True)
        assert torch.isfinite(outs[v]).all() and err <= 2 * torch_err, (case, v)
    near = beside[-1]
    print(f"V{variant} smoke {case}: variant {variant} bitwise variant {near}: {torch.equal(outs[near], outs[variant])}, "
          f"max |v{variant} - v{near}| {(outs[variant].float() - outs[near].float()).abs().max().item():.3g}", flush=True)
PY
rc=$?
if [ $rc -ne 0 ]; then
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== smoke hung: stopping" | tee -a "$log"
  finish 0
fi
step tests 40 python3 -m pytest -q --tb=short -p no:cacheprovider tests/test_convfirst_c512.py -m cuda -k "$tests_k"
ok=$([ $? -eq 0 ] && echo 1 || echo 0)
cases=(); for c in $bench; do cases+=(--case "$c"); done
step bench 35 python3 -m cuda_kernels.bench_c512 --modes "" --no-mma-sync --variants "$variants" "${cases[@]}" \
  --warmup 5 --repeats 20 --out "$out/v${variant}_bench.json"
finish "$ok"
