"""Three ways to run each MBConv block of EfficientNet-B0 and -B2, compared with the tensor
machine before any kernel is written (issue 11; the tensor machine is paper section 5.1):

  (a) two_pass    pass 1 expand + depthwise per tile, only the pooled sums leave the chip;
                  a tiny SE kernel; pass 2 recomputes, scales, projects, adds the shortcut
  (b) write_back  expand + depthwise once, the depthwise output D written to DRAM and read
                  back after the SE
  (c) layer       layer by layer (six kernels; equals perfmodel's traced `layer` plan)

beside the `block` plan's one-kernel bound (input, output and weights once), which no design
reaches because the SE's global pool is a dependency across all tiles of an image.

    python examples/mbconv_designs.py [--hardware h200-sxm] [--batch 128] [-o examples/mbconv_designs.md]
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

import perfmodel
from perfmodel.machine_programs import PROGRAMS

DESIGNS = ("two_pass", "write_back", "layer")


def mbconv_shapes(spec_name: str, batch: int) -> list[dict]:
    """Every torchvision MBConv of the spec's model, with the input size it sees."""
    from torchvision.models.efficientnet import MBConv

    from perfmodel.build import meta_init

    spec = perfmodel.load_spec(spec_name)
    with meta_init():
        model = perfmodel.spec.build_model(spec).eval()
    shapes = []

    def record(module, args):
        _, c, h, w = args[0].shape
        convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
        dw = next(m for m in convs if m.groups > 1)
        shapes.append(dict(name=names[module], c=c, h=h, w=w, c_out=module.out_channels,
                           alpha=dw.in_channels // c, k=dw.kernel_size[0], stride=dw.stride[0],
                           squeeze=module.block[-2].fc1.out_channels, n=batch))

    names = {m: n for n, m in model.named_modules()}
    hooks = [m.register_forward_pre_hook(record) for m in model.modules() if isinstance(m, MBConv)]
    with torch.no_grad():
        model(torch.empty(1, *spec.inputs[0], device="meta"))
    for h in hooks:
        h.remove()
    return shapes


def block_bound(shape: dict, hw, dtype: str = "float16"):
    """T_min and bytes of the block as one kernel (the `block` plan's compulsory traffic)."""
    from functools import partial

    from torchvision.models.efficientnet import MBConv, MBConvConfig

    cnf = MBConvConfig(shape["alpha"], shape["k"], shape["stride"], shape["c"], shape["c_out"], 1)
    with perfmodel.build.meta_init():
        block = MBConv(cnf, 0.0, partial(torch.nn.BatchNorm2d, eps=1e-3)).eval()
    r = perfmodel.analyze(block, (shape["c"], shape["h"], shape["w"]), batch=shape["n"],
                          plan="block:MBConv", hardware=hw, dtype=dtype)
    return r.totals


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def best_tiling(design: str, params: dict, hw):
    """The output tile side (a divisor of the output size) and, for the fused designs, the
    hidden-channel chunk (a divisor of alpha C, a multiple of 8 or all of it) with the lowest
    T_min whose local tiles fit in one SM's shared memory. Returns (report, tile, chunk)."""
    out_side = params["h"] // params["stride"]
    hidden = params["alpha"] * params["c"]
    chunks = [0] if design == "layer" else [d for d in _divisors(hidden) if d % 8 == 0 or d == hidden]
    limit = hw.smem_kib_per_sm * 1024
    best = None
    for tile in reversed(_divisors(out_side)):  # on a tie the larger tile and chunk win:
        for chunk in reversed(chunks):          # fewer halo pixels and wider matrix products
            extra = {"chunk": chunk} if chunk else {}
            program = PROGRAMS[f"mbconv_{design}"](**params, tile=tile, **extra)
            if design != "layer" and max(k.local_bytes for k in program.kernels) > limit:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the layer design's tiles are the libraries'
                report = program.analyze(hw)
            if best is None or report.t_min_s < best[0].t_min_s:
                best = (report, tile, chunk or hidden)
    return best


def compare(shape: dict, hw) -> dict:
    params = {k: shape[k] for k in ("n", "h", "w", "c", "c_out", "alpha", "k", "stride", "squeeze")}
    row = {"shape": shape}
    for design in DESIGNS:
        report, tile, chunk = best_tiling(design, params, hw)
        row[design] = (report.program.dram_bytes, report.program.flops, report.t_min_s,
                       f"{tile}²" + ("" if design == "layer" else f", {chunk}"))
    bound = block_bound(shape, hw)
    row["block"] = (bound.dram_bytes, bound.flops, bound.t_min_s)
    return row


def table(model: str, rows: list[dict], hw) -> list[str]:
    out = [f"### {model} on {hw.name}, batch {rows[0]['shape']['n']}, float16",
           "",
           "| block | C→C' | α | k | s | H | bound µs | (a) two-pass MB / GFLOP / µs | "
           "(b) write-back MB / GFLOP / µs | (c) layer MB / GFLOP / µs | best |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    totals = {d: 0.0 for d in DESIGNS + ("block", "best")}
    for r in rows:
        s = r["shape"]
        cells = []
        for d in DESIGNS:
            b, f, t, tile = r[d]
            totals[d] += t
            cells.append(f"{b / 1e6:.1f} / {f / 1e9:.2f} / {t * 1e6:.1f} ({tile})")
        totals["block"] += r["block"][2]
        best = min(DESIGNS, key=lambda d: r[d][2])
        totals["best"] += r[best][2]
        out.append(f"| {s['name']} | {s['c']}→{s['c_out']} | {s['alpha']} | {s['k']} | {s['stride']} | "
                   f"{s['h']} | {r['block'][2] * 1e6:.1f} | " + " | ".join(cells) + f" | {best} |")
    out += ["", "Sum of T_min over the MBConv blocks (µs): " + ", ".join(
        f"{d} {totals[d] * 1e6:.0f}" for d in ("block",) + DESIGNS + ("best",))
            + " (best: each block's best design)", ""]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h200-sxm")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("-o", "--output", default=None, help="also write the tables (markdown)")
    args = parser.parse_args(argv)
    hw = perfmodel.load_hardware(args.hardware)
    lines = ["# MBConv designs, compared with the tensor machine", "",
             "Generated by `python examples/mbconv_designs.py` (see its docstring for the "
             "designs). Per design: DRAM MB, GFLOP (2 x MACs + biases, recomputation included) "
             "and T_min = sum over its kernels of max(flops/R, bytes/B). In brackets: the output "
             "tile and, for the fused designs, the hidden channels per step, chosen per block "
             "and design as those with the lowest T_min whose local tiles fit in one SM's "
             "shared memory (the layer design's tiles are the libraries' business).", ""]
    for spec in ("efficientnet_b0", "efficientnet_b2"):
        rows = [compare(s, hw) for s in mbconv_shapes(spec, args.batch)]
        lines += table(perfmodel.load_spec(spec).name, rows, hw)
    text = "\n".join(lines)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
