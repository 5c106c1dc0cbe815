#!/usr/bin/env bash
# Kernel 1 with the depthwise on tensor cores as banded products (CUDA_KERNELS_K1_TCDW=1, off by default; B0's 3.1 and
# 4.1) in one device call: its GPU tests (float64, the profiler naming it, close to version 8), kernel 1 under Nsight
# Compute off and on (L2 flushed: time, instructions, issue active), the chain of both blocks off and on
# (mbconv_chain: each kernel's share on one clock), and with TCDW_B0=1 B0 end to end (b0_switches). From the
# repository root:
#   timeout 590 bash cuda_kernels/device_run_s36_tcdw.sh OUTDIR
# Files: OUTDIR/log.txt, k1_*.csv, chain_0.json, chain_1.json, switches.json. Last line TCDW_OK=1|0.
set -uo pipefail
out=${1:?output folder}
source cuda_kernels/device_lib.sh  # mbconv_begin, step, kernel_ncu
mbconv_begin TCDW "${BUDGET_S:-570}"
STEP_CLEARS_OK=1
step tests 120 python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider tests/test_mbconv_k1_tc.py || ok=0
K1_METRICS=gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for v in 0 1; do
  NCU_METRICS=$K1_METRICS kernel_ncu "$out" K1 "expand_dw" "CUDA_KERNELS_K1_TCDW=$v" features.3.1 features.4.1
done
for v in 0 1; do
  step "chain_$v" 40 env CUDA_KERNELS_K1_TCDW=$v python3 -m cuda_kernels.mbconv_chain features.3.1 features.4.1 \
    -o "$out/chain_$v.json" || ok=0
done
[ "${TCDW_B0:-0}" = 1 ] &&
  { step switches 150 python3 -m cuda_kernels.b0_switches CUDA_KERNELS_K1_TCDW=1 -o "$out/switches.json" || ok=0; }
grep -E "^== |^SWITCHES |^CHAIN |^K1 |passed|failed" "$log" | cut -c1-220 | tail -50
echo "TCDW_OK=$ok"
