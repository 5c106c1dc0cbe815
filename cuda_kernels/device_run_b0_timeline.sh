#!/usr/bin/env bash
# Where EfficientNet-B0's fused time goes now (session 18): from the repository root (~4 minutes, one H200)
#   timeout 590 bash cuda_kernels/device_run_b0_timeline.sh OUTDIR
# build -> B0 fused (rest compiled, freezing) with the per-kernel profile and its trace, PDL off (kernels serialised by
# the stream: each kernel's own time, L2 warm as in a real run) and on (the default; durations overlap) -> Nsight
# Compute of every fused block's kernels (mbconv_profile over B0's 16 MBConv paths; L2 flushed; time, instructions,
# issue active, DRAM bytes; in session 18's call 2 its regex was "mb::", which matched nothing: Nsight Compute matches
# the function's own name). Files: OUTDIR/log.txt, OUTDIR/timeline.tgz. Last line TL_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_FUSED
mbconv_begin TL 575
mkdir -p "$out/tl"
for pdl in 0 1; do
  step "b0_pdl$pdl" 90 env CUDA_KERNELS_PDL=$pdl "${B0_FUSED[@]}" --per-kernel --trace "$out/tl/b0_pdl$pdl.trace.json.gz" \
    -o "$out/tl/b0_pdl$pdl.json" || ok=0
done
paths="features.1.0 features.2.0 features.2.1 features.3.0 features.3.1 features.4.0 features.4.1 features.4.2 features.5.0
features.5.1 features.5.2 features.6.0 features.6.1 features.6.2 features.6.3 features.7.0"
step ncu_blocks 150 ncu --clock-control none --cache-control all --print-units base -k regex:"expand_dw|se_v|project|stem_dw" \
  --metrics gpu__time_duration.sum,launch__grid_size,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum \
  --csv --page raw --log-file "$out/tl/blocks_ncu.csv" python3 -m cuda_kernels.mbconv_profile $paths || ok=0
python3 -m cuda_kernels.bench_lines TL "$out/tl" 2>> "$log" | tee -a "$log"
tar czf "$out/timeline.tgz" -C "$out" tl && rm -rf "$out/tl"
grep -E "^== |Error|error:" "$log" | tail -8
echo "TL_OK=$ok"
