"""The loops of each kernel in a cuobjdump SASS listing, largest first, with what their bodies hold: a static
instruction count per loop body that predicts, before a device call, what a change takes off the warps' paths (session
26: the static kernels' item loop at 2.1, 1,810 -> 1,360 instructions, ran 11.8% faster).

    cuobjdump -sass kernel.cubin > k.sass
    python -m cuda_kernels.sass_loops k.sass "dhurfw" [--top 6]

A loop is a backward branch: its body spans from the branch's target to the branch. For each kernel whose mangled name
matches the regular expression, prints its instruction count, then its `--top` largest loop bodies with their
instruction, HFMA2, LDS and HMMA counts (nested loops are listed each on their own; an outer body includes them).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_FUNCTION = re.compile(r"\s*Function : (\S+)")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


@dataclass(frozen=True)
class Loop:
    start: int  # the branch target's address
    end: int  # the backward branch's address
    body: tuple[str, ...]  # the instructions from start to end

    def count(self, opcode: str) -> int:
        """Instructions of the body whose opcode (after any predicate) starts with `opcode`."""
        return sum(1 for ins in self.body if ins.split()[1 if ins.startswith("@") else 0].startswith(opcode))


def functions(text: str) -> dict[str, list[tuple[int, str]]]:
    """Each function's (address, instruction) pairs, in listing order."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = m.group(1)
            out[current] = []
            continue
        m = _INSTRUCTION.search(line)
        if current is not None and m:
            out[current].append((int(m.group(1), 16), m.group(2).strip()))
    return out


def loops(instructions: list[tuple[int, str]]) -> list[Loop]:
    """The function's loops (backward branches), largest body first."""
    found = []
    for address, ins in instructions:
        m = _BRANCH.search(ins)
        if m and int(m.group(1), 16) < address:
            start = int(m.group(1), 16)
            body = tuple(i for a, i in instructions if start <= a <= address)
            found.append(Loop(start, address, body))
    return sorted(found, key=lambda lp: -len(lp.body))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass", type=Path, help="cuobjdump -sass output")
    parser.add_argument("pattern", help="regular expression on the mangled kernel names")
    parser.add_argument("--top", type=int, default=6, help="loops per kernel (default 6)")
    args = parser.parse_args(argv)
    if not args.sass.is_file():
        print(f"sass_loops: {args.sass}: no such file", file=sys.stderr)
        return 2
    for name, instructions in functions(args.sass.read_text()).items():
        if not re.search(args.pattern, name):
            continue
        print(f"{name} {len(instructions)} instructions")
        for lp in loops(instructions)[:args.top]:
            print(f"  loop {lp.start:#06x}-{lp.end:#06x}: {len(lp.body)} instructions, HFMA2 {lp.count('HFMA2')}, "
                  f"LDS {lp.count('LDS')}, HMMA {lp.count('HMMA')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
