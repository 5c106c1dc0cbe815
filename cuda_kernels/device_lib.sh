# Shared pieces of the device scripts, sourced from the repository root after `log` is set:
#   log="$out/log.txt"; source cuda_kernels/device_lib.sh
# step NAME SECONDS COMMAND...  runs COMMAND under `timeout SECONDS`, its output appended to $log, with a
#                               "== NAME (limit ...)" line before and "== NAME: exit RC" after (on stdout and in
#                               $log); returns COMMAND's exit status (124 / 137 when the limit stopped it).
#   STEP_PREFIX    put before every step's name (e.g. "stem2 ");
#   STEP_CLEARS_OK=1  a failing step sets ok=0 (for scripts whose last line is a verdict built from every step);
#   a function `left` (seconds left in the script's own budget), if the script defines one, caps each step's
#   limit, and a step with less than 5 s left does not run (exit 124).
# find_cuobjdump                prints a cuobjdump to use: the one on PATH, else triton's bundled copy.
# file_share LEFT FILES_LEFT    the seconds one test file of device_run_all_tests.sh gets: LEFT less a 20-s reserve
#                               for each file after it (twice a fair share, the rule until session 25, stopped 10 of
#                               22 files mid-way when the first files were short: s25 call 2), and never less than
#                               FILE_MIN_S (90 s) or LEFT: with 20 s each, 12 files under a 400-s limit all timed out
#                               in pytest's start-up (s27 call 3); better that the first files finish.
file_share() {  # seconds left, files left (this one included)
  local share=$(( $1 - 20 * ($2 - 1) )) min=${FILE_MIN_S:-90}
  (( min > $1 )) && min=$1
  (( share < min )) && share=$min
  echo "$share"
}
# run_test_files DIR FILE...   (after `left` is defined) the GPU tests (pytest -m cuda) of each file, one file at a time
#                               under its file_share of the time left: DIR/<file>.log, a line per file appended to
#                               DIR/summary.txt (passed / failed / skipped counts, "timed out", "not run"); a failed,
#                               timed-out or unrun file sets ok=0 (exit 5, no test selected, does not)
run_test_files() {
  local d=$1 i f name t share rc summary
  shift
  local files=("$@")
  for i in "${!files[@]}"; do
    f=${files[$i]}; name=$(basename "$f" .py); t=$(left)
    if [ "$t" -lt 20 ]; then echo "$name: not run (time)" | tee -a "$d/summary.txt"; ok=0; continue; fi
    share=$(file_share "$t" $(( ${#files[@]} - i )))
    timeout -k 5 "$share" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider "$f" > "$d/$name.log" 2>&1
    rc=$?
    summary=$(grep -E "^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed|skipped)|no tests ran" "$d/$name.log" |
              tail -1)
    { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && summary="timed out after ${share}s ($summary)"
    [ $rc -eq 0 ] || [ $rc -eq 5 ] || ok=0
    echo "$name: ${summary:-exit $rc}" | tee -a "$d/summary.txt"
  done
}
step() {  # name, seconds, command...
  local name="${STEP_PREFIX:-}$1" limit=$2 rc; shift 2
  if declare -F left > /dev/null; then
    local remaining; remaining=$(left)
    [ "$limit" -gt "$remaining" ] && limit=$remaining
    if [ "$limit" -lt 5 ]; then
      echo "== $name: no time left" | tee -a "$log"
      [ "${STEP_CLEARS_OK:-0}" = 1 ] && ok=0
      return 124
    fi
  fi
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout -k 5 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  echo "== $name: exit $rc $(date +%T)" | tee -a "$log"
  [ $rc -eq 0 ] || { [ "${STEP_CLEARS_OK:-0}" = 1 ] && ok=0; }
  return $rc
}
find_cuobjdump() {
  command -v cuobjdump 2>/dev/null && return
  python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))" \
    2>/dev/null
}
# mbconv_begin TAG BUDGET_S  (after `out` is set): the output folder and its log.txt, the environment of the MBConv
#                             device scripts, `left` (seconds of BUDGET_S left), ok=1, and the extension's build as the
#                             first step; on a failed build it prints TAG_OK=0 and exits.
mbconv_begin() {
  local tag=$1
  mkdir -p "$out"; log="$out/log.txt"
  export PYTHONUNBUFFERED=1 PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 TORCH_EXTENSIONS_DIR="$PWD/.mbconv_ext"
  start=$(date +%s); budget=$2; ok=1
  left() { echo $((budget - ($(date +%s) - start))); }
  build_mbconv build "$tag" || { echo "${tag}_OK=0"; exit 0; }
}
# build_mbconv STEP TAG [NAME=VALUE...]  the MBConv extension built (or found built) as step STEP under the build-time
#                                       switches given (e.g. CUDA_KERNELS_BUILD_D_L2_HINTS=1: another extension name)
build_mbconv() {
  local name=$1 tag=$2
  shift 2
  step "$name" 200 env "$@" python3 -c \
    "from cuda_kernels._build import load_mbconv_extension as l; print('$tag so:', l().__file__)"
}
# b2_switches OUTDIR "NAME=VALUE ..."  (after a script's own calls; in a subshell: it sets `out`, `log`, `ok`)
#                                      EfficientNet-B2 end to end with and without the switches (b0_switches --model
#                                      efficientnet_b2, 150 s with the extension built): OUTDIR/b2/log.txt and
#                                      b2_switches.json; prints the SWITCHES lines and B2_OK=1|0.
b2_switches() {
  out="$1/b2"
  mbconv_begin B2 150
  # shellcheck disable=SC2086  # (the switches: one word each)
  step switches $(( $(left) - 5 )) python3 -m cuda_kernels.b0_switches --model efficientnet_b2 $2 \
    -o "$out/b2_switches.json"
  grep -E "^SWITCHES " "$log" | tail -3
  echo "B2_OK=$ok"
}
# B0_BENCH  the command line of EfficientNet-B0 end to end (`perfmodel bench` with the device scripts' repeats, warm-up
#           and CUDA-graph timing), an array so that `step` (timeout) runs it: step NAME S "${B0_BENCH[@]}" --backend ...
#           MODEL=efficientnet_b2 (set before sourcing) times that model instead; the files keep their b0_ names.
B0_BENCH=(python3 cli.py bench "${MODEL:-efficientnet_b0}" --repeats 30 --warmup 5 --cuda-graphs)
# PROJ_METRICS  the Nsight Compute metrics behind ncu_lines' projection lines ("PROJ ...": time, grid, DRAM read and
#               throughput, issue active, instructions)
PROJ_METRICS=gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
# kernel_ncu DIR LABEL REGEX "VARIANT" BLOCK...  Nsight Compute (L2 flushed; NCU_CACHE=none keeps it, NCU_METRICS
#                                               replaces PROJ_METRICS) of the kernels matching REGEX in BLOCK...
#                                               under VARIANT ("NAME=VALUE ..."), the CSV in DIR/label_TAG.csv (label:
#                                               LABEL in lower case; TAG: VARIANT with "=" -> "-", " " -> "_"), and
#                                               ncu_lines' "LABEL TAG" lines on stdout and in $log; a failure sets ok=0
kernel_ncu() {
  local dir=$1 label=$2 regex=$3 v=$4 tag csv
  shift 4
  tag=$(echo "$v" | tr '= ' '-_')
  csv="$dir/$(echo "$label" | tr 'A-Z' 'a-z')_$tag.csv"
  step "ncu_$tag" 60 env $v ncu --clock-control none --cache-control "${NCU_CACHE:-all}" --print-units base \
    -k "regex:$regex" --metrics "${NCU_METRICS:-$PROJ_METRICS}" --csv --page raw --log-file "$csv" python3 -m cuda_kernels.mbconv_profile "$@" || ok=0
  python3 -m cuda_kernels.ncu_lines "$label $tag" "$csv" "$regex" "$@" 2>> "$log" | tee -a "$log"
}
# proj_ncu DIR "VARIANT" BLOCK...  kernel_ncu of the projections: DIR/proj_TAG.csv, "PROJ TAG" lines
proj_ncu() {
  local dir=$1 v=$2
  shift 2
  kernel_ncu "$dir" PROJ project "$v" "$@"
}
# B0_FUSED  B0_BENCH for the fused network (the rest compiled, freezing): step NAME S "${B0_FUSED[@]}" -o FILE
B0_FUSED=("${B0_BENCH[@]}" --backend cuda_kernels --compile-rest --freezing)
# b0_runs DIR OFF V...  B0_FUSED for each variant V ("default", or NAME=VALUE, or several "N1=V1 N2=V2"), twice (runs a
#                       and b, the variants interleaved); "default" runs under OFF (the switches at their off values: an
#                       exported setting cannot leak in); files DIR/b0_TAG_RUN.json, TAG = NAME without CUDA_KERNELS_
#                       and K1_, then _VALUE where VALUE is not 1, several joined by "+" (step names e2e_TAG_RUN)
b0_runs() {
  local dir=$1 off=$2 run v tag
  shift 2
  for run in a b; do
    for v in "$@"; do
      tag=default
      if [ "$v" != default ]; then  # each NAME=VALUE of the variant, joined by "+"
        tag=""
        for a in $v; do
          t=${a%%=*}; t=${t#CUDA_KERNELS_}; t=${t#K1_}
          [ "${a#*=}" != 1 ] && t+="_${a#*=}"
          tag+="${tag:++}$t"
        done
      fi
      step "e2e_${tag}_$run" 60 env ${v/default/$off} "${B0_FUSED[@]}" -o "$dir/b0_${tag}_$run.json"
    done
  done
}
