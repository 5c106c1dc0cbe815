"""Sum a kernel's executed instructions and stall samples per SASS opcode, from Nsight Compute's source page.

    ncu --section SourceCounters -k regex:NAME -c 1 -o rep python prog.py
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python -m cuda_kernels.sass_mix "PREFIX" rep.csv [--lines N]

prints one line: PREFIX, the kernel's warp instructions and stall samples, then the opcodes that execute most, each
with its share of instructions and of stall samples (MUFU.TANH keeps its function; other opcodes drop modifiers);
where the page has the per-reason columns (stall_long_sb, stall_barrier, ...), a second line with the reasons' shares
of all samples; with --lines N, the N SASS lines with the most samples, each with its address and top reasons; with
--regions BYTES, the kernel cut into address ranges of that many bytes (0x200: 32 instructions), each range that
holds at least 1.5% of the samples or of the instructions with both shares and its commonest opcodes, which is how a
kernel's phases (the expand's MMA loop, a barrier, the depthwise) show up in session 16's NOTES.md table; with
--blocks N, the N runs of consecutive lines executed equally often that execute the most instructions (loops whose
bodies are bookkeeping).
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


def _number(text: str | None) -> float:
    """A cell as a number: 0 where it is empty, not a number, or missing (the page's short trailing rows)."""
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def _columns(rows: list[dict[str, str]]) -> tuple[str, str | None, str, str | None]:
    """The page's column names: source, address (None where absent), instructions executed, all stall samples (None
    where absent)."""
    keys = list(rows[0])
    src = next(k for k in keys if k.strip() == "Source")
    address = next((k for k in keys if k.strip().lstrip("# ") == "Address"), None)
    inst = next(k for k in keys if k.strip() == "Instructions Executed")
    samples = next((k for k in keys if k.strip().startswith("Warp Stall Sampling (All")), None)
    return src, address, inst, samples


def mix(rows: list[dict[str, str]]) -> tuple[Counter, Counter]:
    """Warp instructions executed and stall samples (all) per opcode."""
    if not rows:
        return Counter(), Counter()
    src, _, inst, samples = _columns(rows)
    executed, stalls = Counter(), Counter()
    for row in rows:
        op = opcode(row[src])
        executed[op] += _number(row[inst])
        if samples:
            stalls[op] += _number(row[samples])
    return executed, stalls


def _reason_columns(rows: list[dict[str, str]]) -> list[str]:
    """The page's per-reason stall columns over all samples (stall_*, not the "(Not Issued)" ones)."""
    return [k for k in (rows[0] if rows else {}) if k.strip().startswith("stall_") and "Not Issued" not in k]


def reasons(rows: list[dict[str, str]]) -> Counter:
    """Stall samples per reason (the name after stall_), summed over the kernel."""
    total = Counter()
    for key in _reason_columns(rows):
        total[key.strip()[len("stall_"):]] = sum(_number(row[key]) for row in rows)
    return total


def top_lines(rows: list[dict[str, str]], n: int) -> list[str]:
    """The n SASS lines with the most stall samples: 'address: source (samples; reason share, ...)'."""
    if not rows:
        return []
    src, address, _, samples = _columns(rows)
    if samples is None:
        return []
    columns = _reason_columns(rows)
    out = []
    for row in sorted(rows, key=lambda r: -_number(r[samples]))[:n]:
        count = _number(row[samples])
        if count <= 0:
            break
        why = sorted(((_number(row[k]), k.strip()[len("stall_"):]) for k in columns), reverse=True)[:3]
        why_text = ", ".join(f"{name} {100 * v / count:.0f}%" for v, name in why if v > 0)
        detail = f"{count:.0f}; {why_text}" if why_text else f"{count:.0f}"
        out.append(f"{row[address].strip()}: {' '.join(row[src].split())} ({detail})")
    return out


def read_rows(path: str) -> list[dict[str, str]]:
    """The source page's rows, of its first kernel section only: Nsight Compute 2025 can print the same launch's page
    twice, each section after a "Kernel Name" line, and summing both would double every count."""
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("==")]
    start = next(i for i, line in enumerate(lines) if "Source" in line and "Instructions Executed" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith('"Kernel Name"')), len(lines))
    return list(csv.DictReader(lines[start:end]))


def regions(rows: list[dict[str, str]], step: int, floor: float = 0.015) -> list[str]:
    """'+0x7a00 samples 15.1% inst 12.8%: HMMA 27%, LDSM 18%, ...' per address range of `step` bytes from the
    kernel's first instruction, for the ranges with at least `floor` of the samples or of the instructions."""
    if not rows:
        return []
    src, address, inst, samples = _columns(rows)
    lines = [(int(r[address].strip(), 16), r) for r in rows if (r[address] or "").strip().startswith("0x")]
    if not lines:
        return []
    first = min(a for a, _ in lines)
    per = {}
    for a, r in lines:
        bucket = per.setdefault((a - first) // step, [0.0, 0.0, Counter()])
        executed = _number(r[inst])
        bucket[0] += executed
        bucket[1] += _number(r[samples]) if samples else 0.0
        bucket[2][opcode(r[src])] += executed
    total_i = sum(v[0] for v in per.values()) or 1.0
    total_s = sum(v[1] for v in per.values()) or 1.0
    out = []
    for k in sorted(per):
        n, s, ops = per[k]
        if n / total_i < floor and s / total_s < floor:
            continue
        mix_text = ", ".join(f"{op} {100 * c / n:.0f}%" for op, c in ops.most_common(6)) if n else ""
        out.append(f"+{hex(k * step)} samples {100 * s / total_s:.1f}% inst {100 * n / total_i:.1f}%: {mix_text}")
    return out


def blocks(rows: list[dict[str, str]], n: int) -> list[str]:
    """The n costliest straight runs of code: consecutive lines executed equally often (a basic block, or several in a
    row), ranked by executions x lines, each as '0x6d80: 27 lines x 102,400 = 14.2% of instructions, 9.7% of
    samples: UMOV 5, USHF 2, ...'. A loop whose body is mostly bookkeeping around one useful instruction shows up
    here even where the opcode mix spreads it over many opcodes (session 24: kernel 1's wgmma loop, 27 instructions a
    wgmma)."""
    if not rows:
        return []
    src, address, inst, samples = _columns(rows)
    runs = []  # [first address, executions, lines, samples, opcodes]
    for row in rows:
        executed = _number(row[inst])
        if executed <= 0:
            continue
        where = (row[address] or "").strip() if address else "?"
        if runs and runs[-1][1] == executed:
            run = runs[-1]
        else:
            run = [where, executed, 0, 0.0, Counter()]
            runs.append(run)
        run[2] += 1
        run[3] += _number(row[samples]) if samples else 0.0
        run[4][opcode(row[src])] += 1
    total_i = sum(r[1] * r[2] for r in runs) or 1.0
    total_s = sum(r[3] for r in runs) or 1.0
    out = []
    for where, executed, count, stalled, ops in sorted(runs, key=lambda r: -r[1] * r[2])[:n]:
        ops_text = ", ".join(f"{op} {c}" for op, c in ops.most_common(6))
        out.append(f"{where}: {count} lines x {executed:,.0f} = {100 * executed * count / total_i:.1f}% of "
                   f"instructions, {100 * stalled / total_s:.1f}% of samples: {ops_text}")
    return out


def summary(prefix: str, executed: Counter, stalls: Counter, top: int = 14) -> str:
    total, total_s = sum(executed.values()), sum(stalls.values())
    parts = [f"{op} {100 * n / total:.1f}%/{100 * stalls[op] / total_s if total_s else 0:.1f}%"
             for op, n in executed.most_common(top)]
    return f"{prefix} inst {total / 1e6:.2f}M samples {total_s:.0f} (inst%/stall%): " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    parser.add_argument("csv")
    parser.add_argument("--lines", type=int, default=0, help="also print the N lines with the most stall samples")
    parser.add_argument("--regions", type=lambda t: int(t, 0), default=0, metavar="BYTES",
                        help="also print samples and instructions per address range of BYTES (e.g. 0x200)")
    parser.add_argument("--blocks", type=int, default=0, metavar="N",
                        help="also print the N runs of equally executed lines that execute the most instructions")
    args = parser.parse_args(argv)
    rows = read_rows(args.csv)
    print(summary(args.prefix, *mix(rows)))
    why = reasons(rows)
    if sum(why.values()):
        total = sum(why.values())
        print(f"{args.prefix} stalls: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in why.most_common(8)))
    for line in top_lines(rows, args.lines):
        print(f"{args.prefix} line {line}")
    if args.regions > 0:
        for line in regions(rows, args.regions):
            print(f"{args.prefix} region {line}")
    for line in blocks(rows, args.blocks):
        print(f"{args.prefix} block {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
