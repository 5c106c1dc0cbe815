"""Kernel 1 compiled for a model's block shapes (csrc/mbconv_v8.cuh kV8Static), for any torchvision EfficientNet.

Version 11's kernel 1 takes a block's sizes as launch values; for a shape listed in kV8Static the launcher runs a copy
compiled with those sizes as constants (B0: kernel 1 -9..-21% per block, EfficientNet-B0 -108 us; NOTES.md sessions
26-27). The source lists B0's blocks at 224 x 224 and B2's at 288 x 288 (B2 -190 us, s28 call 2). For other models,
set ``CUDA_KERNELS_STATIC_MODELS`` (e.g. ``efficientnet_b1,efficientnet_b3``) before the extension is built:
``_build.py`` then appends these models' entries (``more_entries``) to the table through a generated header, in a
build of its own name.

Each entry carries the route its launch takes at version 11's defaults (``route``, the Python mirror of
``launch_expand_dw_v8_hf``), which decides the static kernel compiled for it. A shape whose route the mirror got
wrong only misses its static kernel: each route's launcher takes the entries tagged with it and no other, and every
other launch runs the launch-value kernels.
"""

from __future__ import annotations

import os
from dataclasses import astuple, dataclass

from cuda_kernels import mbconv as mb

MODELS_ENV = "CUDA_KERNELS_STATIC_MODELS"
# csrc/mbconv_v8.cuh V8Route
ROUTES = ("kV8RouteUrWhole", "kV8RouteBcWhole", "kV8RouteBc", "kV8RouteTx1", "kV8RouteTx2")
BATCH = 128  # the batch whose item count decides the multiplies (kernel1_v8_fd_requested): the default workload's


@dataclass(frozen=True)
class V8Static:
    """One kV8Static entry: input H x W, depthwise k and stride, C_in, padded k, hidden, band rows, route."""
    H: int
    W: int
    ks: int
    stride: int
    C_in: int
    k_pad: int
    hidden: int
    rows: int
    route: str

    def cpp(self) -> str:
        return "{" + ", ".join(str(v) for v in astuple(self)) + "}"


def all_whole(ks: int, stride: int, out: int, rows: int, hidden: int, hid_pad: int) -> bool:
    """Whether every depthwise unit of the launch is whole (csrc/mbconv_v8.cuh kernel1_v8_all_whole): column groups of
    OW outputs fill the row (4 at stride 1, 2 at stride 2: DwTile), segments of R rows fill every band
    (v8_segment_rows), the channels are all real."""
    ow, r = (4 if stride == 1 else 2), mb.v8_segment_rows(ks, stride)
    return out % ow == 0 and rows % r == 0 and out % rows % r == 0 and hidden == hid_pad


def route(h: int, w: int, ks: int, stride: int, c_in: int, hidden: int,
          batch: int = BATCH) -> tuple[V8Static | None, str]:
    """The kV8Static entry of a block's kernel 1 at version 11's defaults, or None and why not (an expand ratio of 1,
    chunks of 32, version 3's kernel 1, or a route without static kernels)."""
    chunk = mb.chunk_for(hidden)
    if not mb.kernel1_v8_applies(c_in != hidden, chunk):
        return None, "version 3's kernel 1 (no expand, or chunks of 32)"
    out_h, out_w = mb.output_size(h, stride), mb.output_size(w, stride)
    if h != w:
        return None, "not square"
    if mb.kernel1_v9_takes_v3(ks, stride, out_h, out_w):
        return None, "version 3's kernel 1 (at most 64 output pixels)"
    k_pad = -(-c_in // 16) * 16
    hid_pad = -(-hidden // chunk) * chunk
    tg = mb.kernel1_taps_global(11, stride, ks)
    rows = mb.band_rows(h, w, ks, stride, k_pad, chunk, True, 11, c_in, tg)
    row_blocks = -(-out_h // rows)
    whole = all_whole(ks, stride, out_w, rows, hidden, hid_pad)

    def entry(name: str) -> tuple[V8Static, str]:
        return V8Static(h, w, ks, stride, c_in, k_pad, hidden, rows, name), ""

    if stride == 2:
        if ks not in (3, 5):
            return None, f"k = {ks}"
        return entry("kV8RouteBcWhole" if whole else "kV8RouteBc")
    g = mb.kernel1_v8_images(2, row_blocks, h, w, ks, 1, c_in, k_pad, rows)
    expand = mb.kernel1_v8_expand(True, True, h, w, ks, 1, c_in, k_pad, rows, g, dh=True)
    if expand == "wgmma":
        return entry("kV8RouteTx1" if g == 1 else "kV8RouteTx2")
    if expand == "tma":
        return None, "the TMA X with mma.sync: no static kernels on that route"
    if g == 2:
        return None, "two images an item on bulk-copied X: no static kernels on that route"
    if (ks, k_pad) not in ((3, 32), (5, 48)):
        return None, f"bulk-copied X at k_pad {k_pad}: U in registers takes 32 (k 3) or 48 (k 5)"
    if not whole:
        return None, "U in registers, but not every depthwise unit is whole"
    items = hid_pad // 48 * batch * row_blocks
    if items * items >= 1 << 31:
        return None, f"U in registers, but {items} items at batch {batch} are too many for the multiplies"
    return entry("kV8RouteUrWhole")


def listed_entries(source: str | None = None) -> list[V8Static]:
    """The entries of kV8Static as csrc/mbconv_v8.cuh lists them (B0's, then B2's), after the empty one."""
    import re
    from pathlib import Path

    if source is None:
        source = (Path(__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()
    body = source.split("constexpr V8Static kV8Static[] = {")[1].split("};")[0]
    return [V8Static(*(int(v) for v in m[0].split(",")), m[1])
            for m in re.findall(r"\{([\d, ]+), (kV8Route\w+)\}", body)]


def model_routes(name: str) -> list[tuple[str, V8Static | None, str]]:
    """(module path, entry or None, why not) of every MBConv block of torchvision model `name` at its weights' crop
    size."""
    import torchvision

    from cuda_kernels.mbconv_bench import describe, network_blocks

    try:
        size = torchvision.models.get_model_weights(name).DEFAULT.transforms.keywords["crop_size"]
    except (ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"{MODELS_ENV}: {name!r} is not a torchvision classification model with weights") from exc
    rows = []
    for path, block, shape in network_blocks(torchvision.models.get_model(name), size):
        d = describe(block, shape)
        rows.append((path, *route(d["h"], d["w"], d["k"], d["stride"], d["c"], d["hidden"])))
    return rows


def model_entries(name: str) -> list[V8Static]:
    """The distinct kV8Static entries of torchvision model `name`'s MBConv blocks, in block order."""
    found: list[V8Static] = []
    for _, e, _ in model_routes(name):
        if e is not None and e not in found:
            found.append(e)
    return found


def more_entries(models: list[str], listed: list[V8Static]) -> list[V8Static]:
    """The entries of `models` that the source's table (`listed`) does not hold, in model order."""
    more: list[V8Static] = []
    for name in models:
        more += [e for e in model_entries(name) if e not in listed and e not in more]
    return more


def requested_models() -> list[str]:
    """CUDA_KERNELS_STATIC_MODELS as a list of torchvision model names (empty where unset)."""
    return [m.strip() for m in os.environ.get(MODELS_ENV, "").split(",") if m.strip()]


def header(entries: list[V8Static]) -> str:
    """The generated header: entries appended to kV8Static (each line begins with the comma after the one before)."""
    lines = [f"// generated by cuda_kernels/_build.py from {MODELS_ENV}; do not edit"]
    lines += [f", {e.cpp()}" for e in entries]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print each MBConv block's kernel-1 route and whether the extension would hold a static kernel for it."""
    import argparse

    parser = argparse.ArgumentParser(description="Which MBConv blocks of a torchvision EfficientNet get a kernel 1 "
                                                 f"compiled for their shape (with {MODELS_ENV} naming the model).")
    parser.add_argument("model", help="a torchvision model name, e.g. efficientnet_b2")
    args = parser.parse_args(argv)
    try:
        rows = model_routes(args.model)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    listed = listed_entries()
    for path, e, why in rows:
        if e is None:
            print(f"{path:14} -            {why}")
        else:
            where = "in the source's table" if e in listed else f"with {MODELS_ENV}"
            print(f"{path:14} {e.route[8:]:12} {e.H}x{e.W} k{e.ks} s{e.stride} {e.C_in}->{e.hidden}, bands of "
                  f"{e.rows} rows: {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
