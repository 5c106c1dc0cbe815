"""Summary lines of an Nsight Compute CSV that a device script wrote (``ncu --csv --page raw --log-file F``), one per
profiled kernel of the second run of each block (``cuda_kernels.mbconv_profile`` runs every block twice; the first
launch pays the one-time set-up):

    python -m cuda_kernels.ncu_lines "PROJ v9" proj.csv project features.2.1 features.3.1

prints ``PROJ v9 features.2.1 project_v9t_kernel<3> 72.3us grid 264 dram 42% ...`` for every metric of the file it
knows (duration, grid, DRAM read / write and throughput, warps active, issue active, tensor pipe, instructions, L2 hit
rate, L2 bytes, shared-memory wavefronts and bank conflicts, stall reasons per issue).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

# metric -> (label, scale, unit) in print order
FIELDS = {
    "gpu__time_duration.sum": ("", 1e-3, "us"),
    "launch__grid_size": ("grid ", 1, ""),
    "dram__bytes_read.sum": ("read ", 1e-6, "MB"),
    "dram__bytes_write.sum": ("write ", 1e-6, "MB"),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("dram ", 1, "%"),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("warps ", 1, "%"),
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("issue ", 1, "%"),
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": ("tensor ", 1, "%"),
    "smsp__inst_executed.sum": ("inst ", 1e-6, "M"),
    "lts__t_sector_hit_rate.pct": ("L2hit ", 1, "%"),
    "lts__t_bytes.sum": ("L2 ", 1e-6, "MB"),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": ("smem_wavefronts ", 1e-6, "M"),
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": ("smem_conflicts ", 1e-6, "M"),
}


# Nsight Compute's units (the raw page's second row) -> the base unit's multiple; a file written without
# --print-units base says "us" or "Mbyte" where the scripts' own files say "ns" and "byte"
TO_BASE = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
           "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def second_launches(path: Path, name_filter: str, blocks: int) -> list[list[dict]]:
    """Per block, the rows of its second run's kernels whose name contains `name_filter` (each run of a block
    launches the same kernels, so a run is len(rows) / (2 blocks) rows), durations in ns and sizes in bytes whatever
    units the file was written in."""
    lines = [line for line in path.read_text().splitlines() if line.startswith('"')]
    table = list(csv.DictReader(lines))
    units = next((r for r in table if not r.get("Kernel Name")), {})  # the units row has no kernel name
    scale = {k: TO_BASE[u] for k, u in units.items() if u in TO_BASE and TO_BASE[u] != 1}
    rows = [r for r in table if r.get("Kernel Name") and name_filter in r["Kernel Name"]]
    for r in rows:
        for k, f in scale.items():
            r[k] = str(value(r, k) * f)
    per = len(rows) // (2 * blocks) if blocks else 0
    return [rows[(2 * i + 1) * per:(2 * i + 2) * per] for i in range(blocks)]


def value(row: dict, key: str) -> float:
    try:
        return float(row[key].replace(",", ""))
    except (KeyError, ValueError):
        return float("nan")


def summary(row: dict) -> str:
    """The kernel's short name and every known metric of the row, then its four largest stall reasons."""
    name = row["Kernel Name"].split("(")[0].replace("void ", "").replace("mb::", "")
    parts = [name]
    for key, (label, scale, unit) in FIELDS.items():
        if key in row:
            v = value(row, key) * scale
            parts.append(f"{label}{v:.1f}{unit}" if unit in ("us", "MB", "M") else f"{label}{v:.0f}{unit}")
    stalls = {k.split("stalled_")[1].split("_per")[0]: value(row, k) for k in row if "issue_stalled" in k}
    if stalls:
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:4]
        parts.append("stalls " + " ".join(f"{k} {v:.1f}" for k, v in top))
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    prefix, path, name_filter, blocks = args[0], Path(args[1]), args[2], args[3:]
    if not path.exists():
        print(f"{prefix} {path}: no file (the profile did not run)")
        return 0
    for block, rows in zip(blocks, second_launches(path, name_filter, len(blocks))):
        for row in rows:
            print(f"{prefix} {block} {summary(row)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
