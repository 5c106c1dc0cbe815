#!/usr/bin/env bash
# Session 12, first call: version 9 as the default MBConv (version 3's kernel 1 at features.7.0), and where B0's
# block time goes, kernel by kernel. From the repository root (~6 minutes on one H200):
#   timeout 590 bash cuda_kernels/device_run_mbconv_s12.sh OUTDIR
# build -> the GPU tests of the MBConv files under the new default -> EfficientNet-B0 end to end (fused with the rest
# compiled, and torch.compile freezing, both CUDA graphs) -> Nsight Compute of all three kernels of every B0 block,
# serialised and L2 flushed (OUTDIR/kernels_v9.csv, summary lines "K ..."). Last line S12_OK=1|0 (1: the tests passed).
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # step, mbconv_begin
mbconv_begin S12 570  # the folder, the environment, `left`, ok=1, the build
step e2e_v9 70 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend cuda_kernels --compile-rest \
  --freezing --cuda-graphs -o "$out/b0_v9.json"
step e2e_inductor 80 python3 cli.py bench efficientnet_b0 --repeats 30 --warmup 5 --backend inductor --freezing \
  --cuda-graphs -o "$out/b0_inductor.json"
step tests 200 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_v9.py \
  tests/test_mbconv_v8.py tests/test_mbconv_kernels.py tests/test_pdl.py
rc=$?
{ [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; } || ok=0
[ $rc -eq 124 ] || [ $rc -eq 137 ] && ok=0
grep -qE "^FAILED|[0-9]+ failed" "$log" && ok=0
blocks=$(python3 -c "
import torchvision
from cuda_kernels.mbconv_bench import RESOLUTION, network_blocks
print(' '.join(p for p, _, _ in network_blocks(torchvision.models.efficientnet_b0(), RESOLUTION['efficientnet_b0'])))")
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__grid_size
metrics=$metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
step ncu 120 ncu --clock-control none --cache-control all --print-units base -k regex:"expand_dw|se_v3|project" \
  --metrics "$metrics" --csv --page raw --log-file "$out/kernels_v9.csv" python3 -m cuda_kernels.mbconv_profile \
  --version 9 $blocks
python3 -m cuda_kernels.ncu_lines K "$out/kernels_v9.csv" "" $blocks 2>> "$log" | tee -a "$log"  # ncu_lines.py
python3 -m cuda_kernels.bench_lines S12 "$out" 2>> "$log" | tee -a "$log"  # bench_lines.py
grep -E "^== |passed|failed|Error|error:" "$log" | tail -20
echo "S12_OK=$ok"
