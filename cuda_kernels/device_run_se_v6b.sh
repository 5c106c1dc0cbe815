#!/usr/bin/env bash
# SE version 6 built for two CTAs an SM (session 19 call 5 ran it as CUDA_KERNELS_SE_V6=2; since then the only build, =1) and how many clusters of 8 the H200 holds at once
# (probes/probe_clusters.cu): session 19's call 4 found versions 5 and 6 active on each SM for about half the kernel's
# time (6.1: version 6 17.5 K cycles of 20 us), as if the 16 clusters ran in two waves. From the repository root
# (~5 minutes on an H200, the extension built):
#   timeout 400 bash cuda_kernels/device_run_se_v6b.sh OUTDIR
# Files: OUTDIR/log.txt, OUTDIR/se_v6b.tgz. Last line SE6B_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin SE6B 390
mkdir -p "$out/se6b"
step probe 60 bash -c "nvcc -std=c++17 -arch=sm_90a cuda_kernels/probes/probe_clusters.cu -o /tmp/probe_clusters && /tmp/probe_clusters"
variants=(default)
step tests 60 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_se_v5.py \
  -k version_6 && variants+=("CUDA_KERNELS_SE_V6=1") || ok=0
b0_runs "$out/se6b" CUDA_KERNELS_SE_V6=0 "${variants[@]}"
if [ ${#variants[@]} -gt 1 ]; then
  step b0_pdl0_se6b 90 env CUDA_KERNELS_PDL=0 CUDA_KERNELS_SE_V6=1 "${B0_FUSED[@]}" --per-kernel \
    --trace "$out/se6b/b0_pdl0_se6b.trace.json.gz" -o "$out/se6b/b0_pdl0_se6b.json" || ok=0
fi
python3 -m cuda_kernels.bench_lines SE6B "$out/se6b" 2>> "$log" | tee -a "$log"
tar czf "$out/se_v6b.tgz" -C "$out" se6b && rm -rf "$out/se6b"
grep -E "^== |passed|failed|Error|error:|clusters" "$log" | tail -16
echo "SE6B_OK=$ok"
