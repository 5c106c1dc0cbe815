#!/usr/bin/env bash
# One device call for programmatic dependent launch (CUDA_KERNELS_PDL; NOTES.md, "Programmatic dependent
# launch"), from the repository root:
#   bash cuda_kernels/device_run_pdl.sh OUTDIR
# 1. builds the five extensions that have PDL (block fusion, stride 2, wgmma ConvFirst + 256 -> 512, stem,
#    MBConv), in parallel, and saves each kernel's registers / spills (cuobjdump) and whether its SASS has the
#    griddepcontrol instructions (ACQBULK = wait, PREEXIT = launch_dependents);
# 2. runs tests/test_pdl.py (CPU checks and the GPU chains: PDL on bit-identical to off, eager and from
#    CUDA graphs, outputs poisoned with NaN);
# 3. only if they all passed: ConvFirstNet-H200 end to end (fused blocks, the rest compiled with freezing,
#    CUDA graphs, 30 replays) with CUDA_KERNELS_PDL=0 and =1; EfficientNet-B0 (fused MBConv version 3, the
#    rest eager, CUDA graphs) with 0 and 1; then H200 0 / 1 again (drift) and ConvFirstNet-M 0 / 1 while the
#    time lasts (each run is skipped when fewer than 30 s of the call's ~235 s remain).
# JSON files under OUTDIR; OUTDIR/log.txt; the medians are printed at the end. The last line is PDL_OK=1
# (built, every test passed, the first H200 pair finished) or PDL_OK=0.
set -uo pipefail
out=${1:?output folder}
mkdir -p "$out"; log="$out/log.txt"
export PYTHONUNBUFFERED=1 PYTHONPATH=.
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda-13.0 ]; then
  export CUDA_HOME=/usr/local/cuda-13.0 PATH=/usr/local/cuda-13.0/bin:$PATH
fi
start=$(date +%s)
left() { echo $((235 - ($(date +%s) - start))); }
ok=1
STEP_PREFIX="pdl " STEP_CLEARS_OK=1
source cuda_kernels/device_lib.sh  # step, find_cuobjdump
medians() {
  python3 - "$out" >> "$log" 2>&1 <<'EOF'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        r = json.load(open(f))["results"]
        lat = r["latency_ms"]
        print(f"{os.path.basename(f)}: median {lat['median']:.4f} ms (p20 {lat.get('p20', float('nan')):.4f}, "
              f"p80 {lat.get('p80', float('nan')):.4f})")
    except Exception as e:  # a run that did not finish
        print(f"{os.path.basename(f)}: unreadable ({e})")
EOF
  grep -E "^h200_.*median|unreadable" "$log" | tail -8
}
finish() { medians; echo "PDL_OK=$ok" | tee -a "$log"; exit 0; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >> "$log" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$log" 2>&1

# 1. build, the five extensions at once (each is its own ninja build)
export MAX_JOBS=4
for ext in stem s2 c512 bf mb; do
  python3 - "$ext" "$out" > "$out/build_$ext.log" 2>&1 <<'EOF' &
import sys
from cuda_kernels import _build, stem
ext, out = sys.argv[1], sys.argv[2]
load = {"stem": stem._extension, "s2": _build.load_convfirst_s2_extension,
        "c512": _build.load_convfirst_c512_extension, "bf": _build.load_extension,
        "mb": _build.load_mbconv_extension}[ext]
m = load()
open(f"{out}/so_{ext}.txt", "w").write(m.__file__)
print("built", ext, m.__file__)
EOF
done
echo "== pdl build (parallel) $(date +%T)" | tee -a "$log"
wait
cat "$out"/build_*.log >> "$log"
for ext in stem s2 c512 bf mb; do
  [ -s "$out/so_$ext.txt" ] || { echo "== pdl build: $ext FAILED" | tee -a "$log"; ok=0; }
done
echo "== pdl build: done $(date +%T)" | tee -a "$log"
[ $ok -eq 1 ] || finish
# static facts: registers / stack per kernel, and the griddepcontrol instructions per kernel
for ext in stem s2 c512 bf mb; do
  so=$(cat "$out/so_$ext.txt")
  timeout 20 cuobjdump --dump-resource-usage "$so" 2>&1 | grep -E "Function|REG" > "$out/resources_$ext.txt"
  timeout 30 cuobjdump -sass "$so" 2>/dev/null | awk '/Function :/ {f=$3} /ACQBULK/ {a[f]++} /PREEXIT/ {p[f]++}
    END {for (k in a) print k, "ACQBULK", a[k], "PREEXIT", p[k]+0}' > "$out/griddepcontrol_$ext.txt"
  echo "$ext: $(wc -l < "$out/griddepcontrol_$ext.txt") kernels with ACQBULK" | tee -a "$log"
done

# 2. tests
step tests 70 python3 -m pytest -q --maxfail=4 --tb=short -p no:cacheprovider tests/test_pdl.py || finish

# 3. networks, alternating PDL off / on
net() {  # model, pdl, tag, extra options...: one network run
  local model=$1 pdl=$2 tag=$3; shift 3
  local limit=$(left)
  [ "$limit" -gt 30 ] || { echo "== pdl $model pdl=$pdl $tag: skipped (time)" | tee -a "$log"; return 1; }
  [ "$limit" -gt 60 ] && limit=60
  step "${model}_pdl${pdl}_$tag" "$limit" env CUDA_KERNELS_PDL="$pdl" python3 cli.py bench "$model" \
    --backend cuda_kernels --cuda-graphs --repeats 30 "$@" -o "$out/h200_${model}_cuda_kernels_graphs_pdl${pdl}_$tag.json"
}
net convfirstnet_h200 0 a --compile-rest --freezing
net convfirstnet_h200 1 a --compile-rest --freezing
h_ok=$ok
net efficientnet_b0 0 a
net efficientnet_b0 1 a
net convfirstnet_h200 0 b --compile-rest --freezing
net convfirstnet_h200 1 b --compile-rest --freezing
net convfirstnet_m 0 a --compile-rest --freezing
net convfirstnet_m 1 a --compile-rest --freezing
ok=$h_ok  # the runs after the first H200 pair are informational
finish
