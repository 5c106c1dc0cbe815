#!/usr/bin/env bash
# Session 20's first call: what session 19 built without a GPU, measured in one run (NOTES.md "Current state",
# session 19). From the repository root (~8-9 minutes on an H200, every extension rebuilt):
#   timeout 590 bash cuda_kernels/device_run_s20_first.sh OUTDIR
# build -> the read-pattern probe (probes/probe_stream.cu) -> GPU tests of project_v9b, the fused head, the ablation
# switch, the stem + 1.0 kernel's options and the fused head -> B0 under the launch-time switches in one process
# (b0_switches.py: bulk loader, the stem options alone and together, SE version 6, and the ablation; a switch whose
# tests failed is left out). The fused head is read when the network is swapped, so b0_switches cannot time it:
# FUSED_VARIANTS=CUDA_KERNELS_EFFNET_HEAD=1 in device_run_b0_autotune.sh does, beside torch.compile.
# Files: OUTDIR/log.txt, OUTDIR/s20.tgz. Last line S20_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, b0_runs
mbconv_begin S20 580
mkdir -p "$out/s20"
step probe 60 bash -c "nvcc -std=c++17 -O3 -arch=sm_90a -Icuda_kernels/csrc cuda_kernels/probes/probe_stream.cu \
  -o /tmp/probe_stream && /tmp/probe_stream | tee $out/s20/probe_stream.txt" || ok=0
tests() { step "tests_$1" "$2" python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider "tests/$3"; }
switches=("CUDA_KERNELS_SE_V6=1")
tests v9b 120 test_mbconv_proj_v9b.py && switches+=("CUDA_KERNELS_PROJ_V9_BULK=1") || ok=0
tests stem 150 test_stem_mbconv.py && switches+=("CUDA_KERNELS_STEM_DW_BC=1" "CUDA_KERNELS_STEM_DW_SEG=8" \
  "CUDA_KERNELS_STEM_DW_BC=1 CUDA_KERNELS_STEM_DW_SEG=8") || ok=0
ablation=()
tests ablate 60 test_ablate.py && ablation=(--ablation) || ok=0
tests head 90 test_effnet_head.py || ok=0  # timed in the B0-against-torch.compile call (FUSED_VARIANTS)
step switches 240 python3 -m cuda_kernels.b0_switches "${switches[@]}" "${ablation[@]}" -o "$out/s20/switches.json" \
  || ok=0
python3 -m cuda_kernels.bench_lines S20 "$out/s20" 2>> "$log" | tee -a "$log"
tar czf "$out/s20.tgz" -C "$out" s20 && rm -rf "$out/s20"
grep -E "^== |^SWITCHES |passed|failed|Error|error:" "$log" | tail -30
echo "S20_OK=$ok"
