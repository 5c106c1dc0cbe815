#!/usr/bin/env bash
# Session 8's device calls (nvidia-h200-x2, 2026-11-30), from the repository root:
#   bash examples/measurements/h200x2_calls_2026-11-30_s8.sh CALL OUTDIR
# Each runs two jobs at once, one per GPU (cuda_kernels/device_pair.sh); calls 1 and 2 were sent inline as below.
# Call 1: GPU 0 the per-block table of ConvFirstNet-H200 with every baseline (max-autotune too), GPU 1 every GPU test.
#   -> convfirstnet_table/autotune_x2/first_try/, gpu_tests/2026-11-30/
# Call 2 (the machine still warm, so Inductor's caches held call 1's compiled units): GPU 0 the table again (one run,
# every column), then variant 7 and the persistent stride-2 kernel; GPU 1 MBConv version 7, then the second L2 probe.
#   -> convfirstnet_table/autotune_x2/, convfirst_c512_v7/, convfirst_s2_persistent/, mbconv/v7/, fidelity/l2probe2/
# Call 3: GPU 0 the table again, every backend timed as a CUDA-graph replay (bench_networks' new default); GPU 1 the
# stale GPU tests' re-run (cuda_kernels/device_run_stale_tests.sh), then end to end, fused (rest compiled with
# freezing, CUDA graphs) against torch.compile (freezing, CUDA graphs), one after the other in the same call:
# ConvFirstNet-H200, EfficientNet-B0, -S, -M, -L (L with CUDA_KERNELS_C768=1).
#   -> convfirstnet_table/graphs/, gpu_tests/2026-11-30/stale/, convfirstnet_e2e/run8/
set -uo pipefail
OUT=${2:?output folder}
e2e='CONFIGS="cuda_kernels_compiled_graphs inductor_freezing_graphs" bash examples/measurements/convfirstnet_e2e.sh $OUT/e2e'
case "${1:?call 1, 2 or 3}" in
1) LIMIT_S=585 bash cuda_kernels/device_pair.sh $OUT/c1 \
     'LIMIT_S=$((LEFT-8)) bash cuda_kernels/device_run_networks_table.sh $OUT/table --models convfirstnet_h200' \
     'LIMIT_S=$((LEFT-8)) bash cuda_kernels/device_run_all_tests.sh $OUT/tests' ;;
2) LIMIT_S=585 bash cuda_kernels/device_pair.sh $OUT/c2 \
     'LIMIT_S=230 bash cuda_kernels/device_run_networks_table.sh $OUT/table --models convfirstnet_h200; timeout 160 bash cuda_kernels/device_run_v7.sh $OUT/v7; timeout 155 bash cuda_kernels/device_run_s2w_persistent.sh $OUT/s2p' \
     'timeout 250 bash cuda_kernels/device_run_mbconv_v7.sh $OUT/mb7; bash examples/measurements/fidelity/device_l2probe2.sh $OUT/l2p' ;;
3) LIMIT_S=585 bash cuda_kernels/device_pair.sh $OUT/c3 \
     'LIMIT_S=$((LEFT-8)) bash cuda_kernels/device_run_networks_table.sh $OUT/table --models convfirstnet_h200' \
     "bash cuda_kernels/device_run_stale_tests.sh \$OUT/stale; for m in convfirstnet_h200 efficientnet_b0 convfirstnet_s convfirstnet_m; do $e2e \$m; done; CUDA_KERNELS_C768=1 $e2e convfirstnet_l" ;;
esac
