#!/usr/bin/env bash
# One device call for programmatic dependent launch (CUDA_KERNELS_PDL; NOTES.md, "Programmatic dependent
# launch"), from the repository root:
#   bash cuda_kernels/device_run_pdl.sh OUTDIR
# 1. builds the four extensions that have PDL (block fusion, stride 2, wgmma ConvFirst + 256 -> 512, stem),
#    in parallel, and saves each kernel's registers / spills (cuobjdump) and whether its SASS has the
#    griddepcontrol instructions (ACQBULK = wait, PREEXIT = launch_dependents);
# 2. runs tests/test_pdl.py (CPU checks and the GPU chains: PDL on bit-identical to off, eager and from
#    CUDA graphs, outputs poisoned with NaN);
# 3. only if they all passed: ConvFirstNet-H200 end to end (fused blocks, the rest compiled with freezing,
#    CUDA graphs, 30 replays) with CUDA_KERNELS_PDL=0, =1, =0, =1 (alternating, to see drift), then
#    ConvFirstNet-M with 0 and 1 while the time lasts (the whole call stays under ~240 s on an H200).
# JSON files under OUTDIR; OUTDIR/log.txt; the medians are printed at the end. The last line is PDL_OK=1
# (built, every test passed, every H200 run finished) or PDL_OK=0.
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
step() {  # name, seconds, command...: its exit status; a failure clears ok
  local name=$1 limit=$2; shift 2
  echo "== pdl $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "== pdl $name: exit $rc $(date +%T)" | tee -a "$log"
  [ $rc -eq 0 ] || ok=0
  return $rc
}
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

# 1. build, the four extensions at once (each is its own ninja build)
export MAX_JOBS=4
for ext in stem s2 c512 bf; do
  python3 - "$ext" "$out" > "$out/build_$ext.log" 2>&1 <<'EOF' &
import sys
from cuda_kernels import _build, stem
ext, out = sys.argv[1], sys.argv[2]
load = {"stem": stem._extension, "s2": _build.load_convfirst_s2_extension,
        "c512": _build.load_convfirst_c512_extension, "bf": _build.load_extension}[ext]
m = load()
open(f"{out}/so_{ext}.txt", "w").write(m.__file__)
print("built", ext, m.__file__)
EOF
done
echo "== pdl build (parallel) $(date +%T)" | tee -a "$log"
wait
cat "$out"/build_*.log >> "$log"
for ext in stem s2 c512 bf; do
  [ -s "$out/so_$ext.txt" ] || { echo "== pdl build: $ext FAILED" | tee -a "$log"; ok=0; }
done
echo "== pdl build: done $(date +%T)" | tee -a "$log"
[ $ok -eq 1 ] || finish
# static facts: registers / stack per kernel, and the griddepcontrol instructions per kernel
for ext in stem s2 c512 bf; do
  so=$(cat "$out/so_$ext.txt")
  timeout 20 cuobjdump --dump-resource-usage "$so" 2>&1 | grep -E "Function|REG" > "$out/resources_$ext.txt"
  timeout 30 cuobjdump -sass "$so" 2>/dev/null | awk '/Function :/ {f=$3} /ACQBULK/ {a[f]++} /PREEXIT/ {p[f]++}
    END {for (k in a) print k, "ACQBULK", a[k], "PREEXIT", p[k]+0}' > "$out/griddepcontrol_$ext.txt"
  echo "$ext: $(wc -l < "$out/griddepcontrol_$ext.txt") kernels with ACQBULK" | tee -a "$log"
done

# 2. tests
step tests 70 python3 -m pytest -q --maxfail=4 --tb=short -p no:cacheprovider tests/test_pdl.py || finish

# 3. networks, alternating PDL off / on
net() {  # model, pdl, tag
  local limit=$(left)
  [ "$limit" -gt 30 ] || { echo "== pdl $1 pdl=$2 $3: skipped (time)" | tee -a "$log"; return 1; }
  [ "$limit" -gt 60 ] && limit=60
  step "${1}_pdl$2_$3" "$limit" env CUDA_KERNELS_PDL="$2" python3 cli.py bench "$1" --backend cuda_kernels \
    --compile-rest --freezing --cuda-graphs --repeats 30 -o "$out/h200_${1}_cuda_kernels_graphs_pdl$2_$3.json"
}
net convfirstnet_h200 0 a
net convfirstnet_h200 1 a
net convfirstnet_h200 0 b
net convfirstnet_h200 1 b
m_ok=$ok
net convfirstnet_m 0 a
net convfirstnet_m 1 a
ok=$m_ok  # the M runs are informational
finish
