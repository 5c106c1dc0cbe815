#!/usr/bin/env bash
# One kernel switch (or a few, measured alone and together) against the defaults in one device call: its GPU tests,
# EfficientNet-B0 with and without it (b0_switches: one process, interleaved), and the kernels matching KERNEL_REGEX
# (default expand_dw: kernel 1; their lines labelled NCU_LABEL, default K1) under Nsight Compute (L2 flushed unless
# NCU_CACHE=none; NCU_METRICS: see device_lib.sh kernel_ncu) with the switches off and on at the named blocks.
# From the repository root:
#   timeout 330 bash cuda_kernels/device_run_switch.sh OUTDIR TAG "NAME=VALUE [NAME=VALUE...]" "TEST_FILE..." BLOCK...
# (SWITCH_BUDGET=S: seconds, 320 unless set; EXTRA_VARIANTS: see below.) Files: OUTDIR/log.txt, OUTDIR/tag.tgz
# (switches.json, the CSVs; tag: TAG in lower case). Last line TAG_OK=1|0.
set -uo pipefail
out=${1:?output folder}
tag=${2:?tag}
switch=${3:?NAME=VALUE}
tests=${4:?test file}
read -ra settings <<< "$switch"
variants=("${settings[@]}")
(( ${#settings[@]} > 1 )) && variants+=("$switch")  # each alone, then all together
# EXTRA_VARIANTS="N=V[ N=V...][;...]": more B0 variants in the same process (not profiled, not tested here)
IFS=';' read -ra extra <<< "${EXTRA_VARIANTS:-}"
(( ${#extra[@]} )) && variants+=("${extra[@]}")
off=$(for s in "${settings[@]}"; do printf '%s=0 ' "${s%%=*}"; done)
shift 4
(( $# )) || { echo "device_run_switch.sh: name at least one block (features.2.1 ...)" >&2; exit 2; }
source cuda_kernels/device_lib.sh  # step, mbconv_begin, kernel_ncu
mbconv_begin "$tag" "${SWITCH_BUDGET:-320}"
STEP_CLEARS_OK=1
name=$(echo "$tag" | tr 'A-Z' 'a-z')
d="$out/$name"
mkdir -p "$d"
# shellcheck disable=SC2086  # (the test files: one word each)
step tests $(( 60 + 40 * $(wc -w <<< "$tests") )) python3 -m pytest -q -m cuda --tb=short -p no:cacheprovider $tests
step switches $(( 80 + 20 * ${#variants[@]} )) \
  python3 -m cuda_kernels.b0_switches "${variants[@]}" -o "$d/switches.json"
for v in "${off% }" "$switch"; do
  kernel_ncu "$d" "${NCU_LABEL:-K1}" "${KERNEL_REGEX:-expand_dw}" "$v" "$@"
done
tar czf "$out/$name.tgz" -C "$out" "$name" && rm -rf "$d"
grep -E "^== |^SWITCHES |^${NCU_LABEL:-K1} |passed|failed" "$log" | tail -20
echo "${tag}_OK=$ok"
