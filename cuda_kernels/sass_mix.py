"""Sum a kernel's executed instructions and stall samples per SASS opcode, from Nsight Compute's source page.

    ncu --section SourceCounters -k regex:NAME -c 1 -o rep python prog.py
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python -m cuda_kernels.sass_mix "PREFIX" rep.csv

prints one line: PREFIX, the kernel's warp instructions and stall samples, then the opcodes that execute most, each
with its share of instructions and of stall samples (MUFU.TANH keeps its function; other opcodes drop modifiers).
"""

from __future__ import annotations

import csv
import sys
from collections import Counter

_KEEP_MODIFIER = {"MUFU"}  # opcodes whose first modifier names a different unit of work


def opcode(sass: str) -> str:
    """'@!P0 FFMA.FTZ R1, R2, R3, R4 ;' -> 'FFMA'; 'MUFU.TANH R0, R1 ;' -> 'MUFU.TANH'."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    if not words:
        return "?"
    parts = words[0].rstrip(";").split(".")
    return ".".join(parts[:2]) if parts[0] in _KEEP_MODIFIER and len(parts) > 1 else parts[0]


def _number(text: str) -> float:
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def mix(rows: list[dict[str, str]]) -> tuple[Counter, Counter]:
    """Warp instructions executed and stall samples (all) per opcode."""
    if not rows:
        return Counter(), Counter()
    keys = list(rows[0])
    src = next(k for k in keys if k.strip() == "Source")
    inst = next(k for k in keys if k.strip() == "Instructions Executed")
    samples = next((k for k in keys if k.strip().startswith("Warp Stall Sampling (All")), None)
    executed, stalls = Counter(), Counter()
    for row in rows:
        op = opcode(row[src])
        executed[op] += _number(row[inst])
        if samples:
            stalls[op] += _number(row[samples])
    return executed, stalls


def read_rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("==")]
    start = next(i for i, line in enumerate(lines) if "Source" in line and "Instructions Executed" in line)
    return list(csv.DictReader(lines[start:]))


def summary(prefix: str, executed: Counter, stalls: Counter, top: int = 14) -> str:
    total, total_s = sum(executed.values()), sum(stalls.values())
    parts = [f"{op} {100 * n / total:.1f}%/{100 * stalls[op] / total_s if total_s else 0:.1f}%"
             for op, n in executed.most_common(top)]
    return f"{prefix} inst {total / 1e6:.2f}M samples {total_s:.0f} (inst%/stall%): " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    prefix, path = (argv if argv is not None else sys.argv[1:])[:2]
    print(summary(prefix, *mix(read_rows(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
