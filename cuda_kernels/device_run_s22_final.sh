#!/usr/bin/env bash
# Session 22's last call (option 25 was measured here and removed after it: +4.5 us on B0; the script ran at
# commit 12d067b): project_wg's option 25 (9 with 2 stages from BN = 160 on: three CTAs an SM at B0's 7.0)
# tested, timed on B0 (b0_switches) and profiled at 7.0; then EfficientNet-B0 under the session's defaults, and with
# option 25, against torch.compile default and max-autotune-no-cudagraphs in one run; then the per-block table at the
# issue's stage 2-4 blocks with the time left. From the repository root, with the autotuning timings unpacked (tar xzf
# examples/measurements/mbconv/s21/call4/autotune_timings.tgz -C .) and carry: [".inductor_cache"] (~9.5 minutes):
#   timeout 590 bash cuda_kernels/device_run_s22_final.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/s22c.tgz (switches.json, proj_*.csv), OUTDIR/auto/ (device_run_b0_autotune.sh's
# files), OUTDIR/blocks.json. Last line FINAL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, proj_ncu
mbconv_begin FINAL 580
mkdir -p "$out/s22c"
step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_proj_wg.py \
  -k "options and 25" || ok=0
step switches 60 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_PROJ_WG_OPT=25 -o "$out/s22c/switches.json" || ok=0
for v in "CUDA_KERNELS_PROJ_WG_OPT=9" "CUDA_KERNELS_PROJ_WG_OPT=25"; do
  proj_ncu "$out/s22c" "$v" features.7.0
done
tar czf "$out/s22c.tgz" -C "$out" s22c && rm -rf "$out/s22c"
FUSED_VARIANTS="CUDA_KERNELS_PROJ_WG_OPT=25" AUTO_BUDGET=$(( $(left) - 170 )) \
  bash cuda_kernels/device_run_b0_autotune.sh "$out/auto" | tail -8
step blocks $(( $(left) - 5 )) python3 -m cuda_kernels.mbconv_bench --budget-s $(( $(left) - 60 )) \
  --compile-mode default --compile-mode max-autotune-no-cudagraphs --repeats 20 --block features.2.1 \
  --block features.3.1 --block features.4.1 --version 11 --out "$out/blocks.json" || ok=0
grep -E "^SWITCHES |^PROJ |passed|failed" "$log" | tail -8
echo "FINAL_OK=$ok"
