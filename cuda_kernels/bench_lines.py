"""Summary lines of a device script's measurement files in one folder: per block of every ``blocks_*.json``,
``blocks.json`` and ``accept.json`` (cuda_kernels.mbconv_bench) its CUDA-graph medians for the fused versions and
torch.compile, and the end-to-end medians of every ``b0_*.json`` (``perfmodel bench``):

    python -m cuda_kernels.bench_lines V10 OUTDIR [--kernels project,se_v3]

prints ``V10 blocks_auto features.2.1 cuda_kernels_v9=197.2us`` (``| project_v9t_kernel=..`` with --kernels: the
profiled kernel times whose names contain one of the words), ``V10 e2e b0_inductor=3.135ms b0_v10_auto=2.282ms``,
and for an end-to-end file with per-kernel rows (``perfmodel bench --per-kernel``) the kernels that take the most
time per pass, summed by name: ``V10 kernels b0_v11_kernels sum=1950us expand_dw_v8_kernel<48,3,1,1,true>=612.3 ..``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def block_lines(prefix: str, out: Path, kernels: list[str]) -> list[str]:
    lines = []
    for path in sorted(out.glob("blocks_*.json")) + sorted(out.glob("blocks.json")) + sorted(out.glob("accept.json")):
        for row in json.loads(path.read_text())["results"]["cases"]:
            b = row.get("backends", {})
            times = " ".join(f"{k}={b[k]['graph_latency_ms']['median'] * 1e3:.1f}us" for k in b
                             if k.startswith(("cuda_kernels_v", "inductor")) and "graph_latency_ms" in b[k])
            line = f"{prefix} {path.stem} {row['path']} {times}"
            if kernels:
                by_version = row.get("kernels_us_by_version") or {}
                line += " | " + " ".join(f"{n.split('<')[0].split('::')[-1]}={x:.1f}" for ks in by_version.values()
                                         for n, x in ks.items() if any(word in n for word in kernels))
            lines.append(line)
    return lines


def e2e_line(prefix: str, out: Path) -> str:
    medians = {f.stem: json.loads(f.read_text())["results"]["latency_ms"]["median"] for f in sorted(out.glob("b0_*.json"))}
    return f"{prefix} e2e " + " ".join(f"{k}={v:.3f}ms" for k, v in medians.items())


def short_kernel_name(name: str) -> str:
    """'void mb::expand_dw_v8_kernel<48, 3, 1, 2, true>(mb::Params)' -> 'expand_dw_v8_kernel<48,3,1,2,true>'."""
    head = name.split("(")[0].removeprefix("void ").replace(" ", "")
    base, _, args = head.partition("<")
    return base.split("::")[-1] + (f"<{args}" if args else "")


def kernel_lines(prefix: str, out: Path, top: int = 12) -> list[str]:
    lines = []
    for f in sorted(out.glob("b0_*.json")):
        rows = json.loads(f.read_text())["results"].get("kernels") or []
        if not rows:
            continue
        by_name: dict[str, float] = {}
        for row in rows:
            key = short_kernel_name(row["name"])[:60]
            by_name[key] = by_name.get(key, 0.0) + row["duration_ms"] * 1e3
        ranked = sorted(by_name.items(), key=lambda kv: -kv[1])[:top]
        lines.append(f"{prefix} kernels {f.stem} sum={sum(by_name.values()):.0f}us "
                     + " ".join(f"{k}={v:.1f}" for k, v in ranked))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix")
    parser.add_argument("out", type=Path)
    parser.add_argument("--kernels", default="", help="comma-separated words: also print these profiled kernels")
    args = parser.parse_args(argv)
    for line in block_lines(args.prefix, args.out, [w for w in args.kernels.split(",") if w]):
        print(line)
    print(e2e_line(args.prefix, args.out))
    for line in kernel_lines(args.prefix, args.out):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
