"""How full kernel 1's rounds are, block by block: the items over the CTAs, and each item's depthwise units over the
thread groups. Session 30 measured that these rounds, not the instruction count, set kernel 1's time at B0's 3.1: in 3
bands of 10 rows its 1,920 items took 8 rounds of the 264 CTAs (7.27 of them filled) and each band's 35 units 4 rounds
of the 10 thread groups; in 2 bands of 14 (with E's halo kept) 1,280 items took 5 rounds and 49 units 5: instructions
-7%, time -16% (NOTES.md "Current state").

    python -m cuda_kernels.k1_rounds efficientnet_b0 [--batch 128] [--sms 132]

Per block with a static kernel 1 (static_shapes.route, version 11's defaults, the taller bands of K1_HALO5_BANDS
included): its bands, items (chunks x image groups x bands), the item rounds of two CTAs an SM and how full they are,
the depthwise units an item (column groups x row segments, or whole output rows where the one-row units run) and the
thread groups' rounds over them. A CTA's items are a contiguous share of the list (expand_dw_v8_body), so the kernel
lasts as many rounds as its busiest CTA has items.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuda_kernels import mbconv as mb
from cuda_kernels import static_shapes as ss

GROUPS = 10  # csrc/mbconv_v8.cuh V8Dw::GROUPS: 256 threads / 24 channel pairs
CTAS_PER_SM = 2  # version 8's kernel 1 is built for two CTAs an SM (kV8TwoCtaSmem)


@dataclass(frozen=True)
class Rounds:
    """Kernel 1's rounds for one block: `items` over `ctas`, and each band's depthwise units over GROUPS."""
    rows: int  # output rows per band
    bands: int
    items: int
    ctas: int
    units: tuple[int, ...]  # depthwise units of an item, per band

    @property
    def item_rounds(self) -> int:
        return -(-self.items // self.ctas)

    @property
    def item_fill(self) -> float:
        return self.items / (self.item_rounds * self.ctas)

    @property
    def group_rounds(self) -> tuple[int, ...]:
        return tuple(-(-u // GROUPS) for u in self.units)

    @property
    def group_fill(self) -> float:
        return sum(self.units) / (GROUPS * sum(self.group_rounds))


def row_unit_cols(out: int, hidden: int) -> int:
    """Width of the one-row depthwise units at a static wgmma entry (csrc/mbconv_v8.cuh v8_row_unit_cols): 7 where 7
    divides the output width, else the whole row up to 9, 0 (none) past that or where a chunk is not all real."""
    return 0 if hidden % 48 else 7 if out % 7 == 0 else out if out <= 9 else 0


def block_rounds(e: ss.V8Static, batch: int, sms: int, halo_bands: bool = True) -> Rounds:
    """Rounds of kernel 1 at static entry `e` for `batch` images on `sms` SMs; `halo_bands`: version 11's default
    taller bands where K1_HALO5_BANDS lists the shape (CUDA_KERNELS_K1_HALO5=2)."""
    rows = e.rows
    if halo_bands:
        rows = mb.K1_HALO5_BANDS.get((e.H, e.W, e.ks, e.stride, e.C_in, e.k_pad, e.hidden), rows)
    out = mb.output_size(e.H, e.stride)
    bands = -(-out // rows)
    images = 2 if e.route == "kV8RouteTx2" else 1
    uc = row_unit_cols(out, e.hidden) if e.route in ("kV8RouteTx1", "kV8RouteTx2") else 0
    ow, seg = (uc, 1) if uc else ((4 if e.stride == 1 else 2), mb.v8_segment_rows(e.ks, e.stride))
    band_rows = [min(rows, out - b * rows) for b in range(bands)]
    units = tuple(images * -(-out // ow) * -(-r // seg) for r in band_rows)
    items = e.hidden // 48 * -(-batch // images) * bands
    return Rounds(rows, bands, items, min(items, CTAS_PER_SM * sms), units)


def _per_band(values: tuple[int, ...]) -> str:
    """"28 x 7" where every band has the same value, else "49/35/28"."""
    return f"{values[0]} x {len(values)}" if len(set(values)) == 1 and len(values) > 1 else "/".join(map(str, values))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="How full kernel 1's item and depthwise rounds are, per block.")
    parser.add_argument("model", help="a torchvision EfficientNet, e.g. efficientnet_b0")
    parser.add_argument("--batch", type=int, default=ss.BATCH)
    parser.add_argument("--sms", type=int, default=132, help="the GPU's SMs (an H200: 132)")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.sms < 1:
        parser.exit(2, "error: --batch and --sms must be positive\n")
    try:
        routes = ss.model_routes(args.model)
    except ValueError as exc:
        parser.exit(2, f"error: {exc}\n")
    print(f"{'block':14} {'shape':14} {'bands':9} {'items':>6} {'rounds':>7} {'fill':>6}   {'units/band':14} "
          f"{'group rounds':14} fill")
    for path, e, why in routes:
        if e is None:
            print(f"{path:14} -  ({why})")
            continue
        r = block_rounds(e, args.batch, args.sms)
        shape = f"{e.H}x{e.W} k{e.ks} s{e.stride}"
        units, groups = _per_band(r.units), _per_band(r.group_rounds)
        print(f"{path:14} {shape:14} {r.bands} x {r.rows:<3} {r.items:6} {r.item_rounds:7} {r.item_fill:6.1%}   "
              f"{units:14} {groups:14} {r.group_fill:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
