"""Choose a ConvFirstNet configuration with perfmodel itself.

Objective: the largest waterline C_max under the block plan (one fused kernel per
ConvFirst block) on h200-sxm at batch 128, float16, with MACs no larger than ConvNeXt-T.
Writes examples/convfirstnet_search.md. Run: python examples/convfirstnet_search.py
"""
from __future__ import annotations

import itertools
from pathlib import Path

import perfmodel
from perfmodel.zoo.convfirstnet import ConvFirstNet

BASE_WIDTHS = (32, 48, 64, 96, 128)
EXPANSIONS = (2, 4, 6)
DEPTHS = ((2, 2, 6, 2), (2, 3, 9, 2), (3, 4, 12, 3), (3, 4, 14, 3), (2, 2, 18, 2))


def main(out: Path = Path(__file__).with_name("convfirstnet_search.md")) -> None:
    budget = perfmodel.analyze_spec("convnext_tiny", batch=1).gmacs_per_image
    rows = []
    for base, alpha, depths in itertools.product(BASE_WIDTHS, EXPANSIONS, DEPTHS):
        widths = tuple(base * 2**i for i in range(4))
        r = perfmodel.analyze(ConvFirstNet(widths, depths, alpha), (3, 224, 224), batch=128,
                              hardware="h200-sxm", plan="block:ConvFirstBlock")
        rows.append((r.totals.c_max, r.gmacs_per_image, widths, depths, alpha,
                     r.totals.t_min_s * 1e3))
    feasible = sorted((r for r in rows if r[1] <= budget), key=lambda r: (-r[0], r[1]))
    best = feasible[0]
    lines = ["# ConvFirstNet configuration search", "",
             f"Objective: maximum waterline C_max, `block:ConvFirstBlock` plan, h200-sxm, batch "
             f"128, float16; constraint: GMACs per image <= ConvNeXt-T's {budget:.3f}. "
             f"{len(rows)} configurations (base width x expansion x depths), {len(feasible)} "
             "within the budget. `python examples/convfirstnet_search.py` wrote this file.", "",
             f"**Chosen:** widths {best[2]}, depths {best[3]}, expansion {best[4]}: "
             f"C_max {100 * best[0]:.1f}%, {best[1]:.3f} GMACs, T_min {best[5]:.3f} ms.", "",
             "| rank | widths | depths | expansion | GMACs | T_min (ms) | C_max |",
             "|---|---|---|---|---|---|---|"]
    for i, (c, g, w, d, a, t) in enumerate(feasible[:15], 1):
        lines.append(f"| {i} | {w} | {d} | {a} | {g:.3f} | {t:.3f} | {100 * c:.1f}% |")
    lines += ["", "Narrowest configurations, for contrast:", "",
              "| widths | depths | expansion | GMACs | C_max |", "|---|---|---|---|---|"]
    for c, g, w, d, a, t in sorted(rows, key=lambda r: r[0])[:5]:
        lines.append(f"| {w} | {d} | {a} | {g:.3f} | {100 * c:.1f}% |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))


if __name__ == "__main__":
    main()
