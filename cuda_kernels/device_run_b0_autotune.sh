#!/usr/bin/env bash
# EfficientNet-B0 against torch.compile max-autotune-no-cudagraphs with freezing, the baseline that did not finish
# compiling in 330 s (session 14) or 411 s (session 15) on a machine without an Inductor cache: each addmm and
# convolution is autotuned, the SE layers' small addmms at 8-14 s apiece. The work is carried across calls through
# Inductor's autotuning timings (its local cache, .inductor_cache/cache/<system hash>, a JSON of each choice's time
# per op and input shapes, keyed by GPU name, CUDA and Triton: a later call on another H200 with the same software
# finds them and skips the precompiling and benchmarking of every op already timed). The whole cache (72 MB of
# compiled kernels) cannot come back; the timings can. From the repository root:
#   timeout 590 bash cuda_kernels/device_run_b0_autotune.sh OUTDIR   (AUTO_BUDGET=S: a shorter budget; INDUCTOR_CODE=1:
#   also the compiled rest's generated code, OUTDIR/inductor_code.txt.gz; FUSED_VARIANTS="NAME=VALUE ...": the fused
#   network with each switch as well; MODEL=efficientnet_b2: that model instead of B0, its files still named b0_*;
#   AUTO_STEP_S=S: the limit of each fused step and of torch.compile default, 90 s unless set: B0's fused step takes ~70 s)
# returns OUTDIR/autotune_timings.tgz; unpack it here (tar xzf ... -C .) and give the next call
# `carry: [".inductor_cache"]` until the max-autotune file appears. With timings carried, the fused network and
# torch.compile default are timed first, so the call that finishes has every baseline in one run; without (the first
# call) they are skipped: the whole call goes to autotuning, whose file could not be compared anyway.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH, B0_FUSED
mbconv_begin AUTO "${AUTO_BUDGET:-565}"  # seconds; less where another script follows in the call
export TORCHINDUCTOR_CACHE_DIR="$PWD/.inductor_cache"
mkdir -p "$TORCHINDUCTOR_CACHE_DIR"
timings() {  # (op, inputs) keys in the autotuning timings cache; prints the count last
  python3 - "$TORCHINDUCTOR_CACHE_DIR/cache" <<'PY'
import json, pathlib, sys
files = [f for f in pathlib.Path(sys.argv[1]).glob("*") if f.is_file()]
caches = [json.loads(f.read_text()).get("cache", {}) for f in files]
keys = sum(len(v) for c in caches for v in c.values())
print(f"autotune timings: {len(files)} file(s), {keys} (op, inputs) keys")
print(keys)
PY
}
carried=$(timings 2>> "$log" | tee -a "$log" | tail -1)
if [ "${carried:-0}" -gt 0 ]; then
  step fused "${AUTO_STEP_S:-90}" "${B0_FUSED[@]}" -o "$out/b0_fused.json"
  for v in ${FUSED_VARIANTS:-}; do  # NAME=VALUE each: the fused network with that switch too, in the same call
    step "fused_${v%%=*}" "${AUTO_STEP_S:-90}" env "$v" "${B0_FUSED[@]}" -o "$out/b0_fused_${v%%=*}.json"
  done
  # the compiled rest's own kernels around the fused blocks (session 19: 0.7-1.0 us Triton kernels named
  # triton_poi_fused_mbconv_1 / _2 / _stem_mbconv_0 before blocks 1.0, 2.0, 2.1 and 3.0, each also a break in the
  # PDL chain): Inductor's generated code says what they are (INDUCTOR_CODE=1)
  if [ "${INDUCTOR_CODE:-0}" = 1 ]; then
    step inductor_code 120 bash -c "TORCH_LOGS=output_code TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 cli.py bench \
      efficientnet_b0 --repeats 2 --warmup 1 --backend cuda_kernels --compile-rest --freezing \
      -o $out/b0_fused_code_run.json > $out/inductor_code.txt 2>&1"
    gzip -f "$out/inductor_code.txt"
  fi
  step inductor "${AUTO_STEP_S:-90}" "${B0_BENCH[@]}" --backend inductor --freezing -o "$out/b0_inductor.json"
fi
step autotune 540 "${B0_BENCH[@]}" --backend inductor --compile-mode max-autotune-no-cudagraphs --freezing \
  -o "$out/b0_inductor_max_autotune.json"
timings 2>> "$log" | tee -a "$log"
tar czf "$out/autotune_timings.tgz" -C "$PWD" .inductor_cache/cache 2>> "$log"
python3 -m cuda_kernels.bench_lines AUTO "$out" 2>> "$log" | tee -a "$log"
echo "AUTO_OK=$ok"
