# Shared pieces of the device scripts, sourced from the repository root after `log` is set:
#   log="$out/log.txt"; source cuda_kernels/device_lib.sh
# step NAME SECONDS COMMAND...  runs COMMAND under `timeout SECONDS`, its output appended to $log, with a
#                               "== NAME (limit ...)" line before and "== NAME: exit RC" after (on stdout and in
#                               $log); returns COMMAND's exit status (124 / 137 when the limit stopped it).
# find_cuobjdump                prints a cuobjdump to use: the one on PATH, else triton's bundled copy.
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s) $(date +%T): $*" | tee -a "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "== $name: exit $rc $(date +%T)" | tee -a "$log"
  return $rc
}
find_cuobjdump() {
  command -v cuobjdump 2>/dev/null && return
  python3 -c "import triton, os; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))" \
    2>/dev/null
}
