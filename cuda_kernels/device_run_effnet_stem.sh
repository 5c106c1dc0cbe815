#!/usr/bin/env bash
# EfficientNet's fused stem (cuda_kernels/effnet_stem.py, CUDA_KERNELS_EFFNET_STEM=1; session 14, compiled and
# CPU-tested, not yet run). From the repository root (~5 minutes on one H200; torch.compile's baseline is in the
# autotune call that follows it):
#   timeout 330 bash cuda_kernels/device_run_effnet_stem.sh OUTDIR
# build (the stem's extension and the MBConv one) -> GPU tests (test_effnet_stem.py; -x) -> Nsight Compute of the
# stem kernel at B0's shape (batch 128, 224 x 224; line "STEM ...") -> B0 end to end, fused, without and with the
# stem. Prediction (NOTES.md, "EfficientNet's stem"): the kernel ~35-45 us
# (141 MB at ~4 TB/s); B0 -70 to -150 us if Inductor's stem takes what eager's cuDNN conv does (147 us). Session
# 15's profile of the fused network (mbconv/s15/v11): the compiled stem is a cuDNN conv (111.3 us) and a Triton
# bias + SiLU (95.5 us), so B0 1.95 -> ~1.80 ms. Last line STEM_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin, B0_BENCH, B0_FUSED
mbconv_begin STEM 320
step build_stem 90 python3 -c "from cuda_kernels.effnet_stem import _extension as e; print('STEM so:', e().__file__)" \
  || ok=0
step tests 80 python3 -m pytest -q -x -m cuda --tb=short -p no:cacheprovider tests/test_effnet_stem.py || ok=0
step ncu 40 ncu --clock-control none --cache-control all --print-units base -k regex:"stem_kernel" \
  --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active \
  --csv --page raw --log-file "$out/stem_ncu.csv" python3 -c "
import torch
from torch import nn
from cuda_kernels import effnet_stem as es
conv = nn.Conv2d(3, 32, 3, stride=2, padding=1).cuda()
x = torch.randn(128, 3, 224, 224, device='cuda', dtype=torch.float16).contiguous(memory_format=torch.channels_last)
w = es.prepare_weights(conv.weight, conv.bias)
for _ in range(2):
    es.run(x, w)
torch.cuda.synchronize()"
python3 -c "
import csv
rows = [r for r in csv.DictReader(l for l in open('$out/stem_ncu.csv') if not l.startswith('=='))]
for r in rows[-1:]:
    print('STEM', r.get('Kernel Name', '')[:40], r.get('gpu__time_duration.sum'), 'ns', 'read', r.get('dram__bytes_read.sum'),
          'write', r.get('dram__bytes_write.sum'), 'dram%', r.get('dram__throughput.avg.pct_of_peak_sustained_elapsed'))
" 2>> "$log" | tee -a "$log"
if [ "$ok" = 1 ]; then
  step e2e_off 60 "${B0_FUSED[@]}" -o "$out/b0_fused.json"
  step e2e_stem 60 env CUDA_KERNELS_EFFNET_STEM=1 "${B0_FUSED[@]}" -o "$out/b0_fused_stem.json"
fi
python3 -m cuda_kernels.bench_lines STEM "$out" 2>> "$log" | tee -a "$log"
grep -E "^== |passed|failed|Error|error:" "$log" | tail -10
echo "STEM_OK=$ok"
