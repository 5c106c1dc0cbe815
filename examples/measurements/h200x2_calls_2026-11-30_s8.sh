#!/usr/bin/env bash
# Session 8's first two device calls (nvidia-h200-x2, 2026-11-30 15:44-15:57 UTC), as sent; $OUT is the call's
# output folder. Each runs two jobs at once, one per GPU (cuda_kernels/device_pair.sh).
# Call 1: GPU 0 the per-block table of ConvFirstNet-H200 with every baseline (max-autotune too), GPU 1 every GPU test.
#   -> convfirstnet_table/autotune_x2/first_try/, gpu_tests/2026-11-30/
# Call 2 (the machine still warm, so Inductor's caches held call 1's compiled units): GPU 0 the table again (one run,
# every column), then variant 7 and the persistent stride-2 kernel; GPU 1 MBConv version 7, then the second L2 probe.
#   -> convfirstnet_table/autotune_x2/, convfirst_c512_v7/, convfirst_s2_persistent/, mbconv/v7/, fidelity/l2probe2/
set -uo pipefail
case "${1:?call 1 or 2}" in
1) LIMIT_S=585 bash cuda_kernels/device_pair.sh $OUT/c1 \
     'LIMIT_S=$((LEFT-8)) bash cuda_kernels/device_run_networks_table.sh $OUT/table --models convfirstnet_h200' \
     'LIMIT_S=$((LEFT-8)) bash cuda_kernels/device_run_all_tests.sh $OUT/tests' ;;
2) LIMIT_S=585 bash cuda_kernels/device_pair.sh $OUT/c2 \
     'LIMIT_S=230 bash cuda_kernels/device_run_networks_table.sh $OUT/table --models convfirstnet_h200; timeout 160 bash cuda_kernels/device_run_v7.sh $OUT/v7; timeout 155 bash cuda_kernels/device_run_s2w_persistent.sh $OUT/s2p' \
     'timeout 250 bash cuda_kernels/device_run_mbconv_v7.sh $OUT/mb7; bash examples/measurements/fidelity/device_l2probe2.sh $OUT/l2p' ;;
esac
