"""Version 8's kernel 1 at three CTAs per SM (csrc/mbconv_v8.cuh expand_dw_v8_kernel_3cta, CUDA_KERNELS_K1_3CTA=1;
off by default until measured; NOTES.md, "Kernel 1 against its floors"): the same body as expand_dw_v8_kernel under
an 80-register budget, where one image's item fits a third of the SM's shared memory.

CPU: the rule and its mirror, which blocks of B0 / B2 take it (shared memory by hand), the existing kernels' code
unchanged by the split into a body and two entry points (the spill test in test_mbconv_v8.py counts the new entry
at <= 80 registers). GPU (@pytest.mark.cuda): with the switch, the profiler shows the _3cta kernel and the block's
output equals the two-CTA kernel's with one image per item (CUDA_KERNELS_K1_IMAGES=1) bit for bit: the same D values,
the same per-item pool sums in the same order, only more CTAs; B0 on its own activations."""

import re
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from perfmodel.zoo import fold_batchnorm

from mbconv_helpers import block_of, mbconv_shapes

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v8.cuh").read_text()


def test_mirrors_match_the_source():
    assert re.search(r"kV8ThreeCtaSmem = (\d+) \* 1024;", SOURCE).group(1) == "74"
    assert mb.V8_THREE_CTA_SMEM == 74 * 1024
    assert 3 * (mb.V8_THREE_CTA_SMEM + 1024) <= 228 * 1024  # three CTAs and their 1 KB reserve per SM
    assert 'kernel1_switch("CUDA_KERNELS_K1_3CTA")' in SOURCE and mb.K1_3CTA_SWITCH == "CUDA_KERNELS_K1_3CTA"
    assert "__launch_bounds__(kExpandThreads, 3) expand_dw_v8_kernel_3cta(const Params p)" in SOURCE
    assert ("return requested && hf && ks == 5 && stride == 1 && row_blocks == 1 &&\n"
            "         expand_dw_v8_smem_bytes(H, W, Wo, rows, ks, stride, C_in, k_pad, 48, 1) <= kV8ThreeCtaSmem;"
            in SOURCE)
    assert "return launch_expand_dw_v8<48, KS, 1, 1, HF, true>(p, stream, pdl);" in SOURCE
    # both entry points run the one body
    assert SOURCE.count("expand_dw_v8_body<HC, KS, S, G, HF>(p);") == 2


def _takes(name: str) -> set[str]:
    taken = set()
    for path, (c, h, w) in mbconv_shapes(name).items():
        params = mb.block_params(fold_batchnorm(block_of(name, path)))
        if params.expand_w is None or mb.chunk_for(params.hidden) != 48:
            continue  # version 3's kernel 1
        k_pad = mb.prepare_weights(params).w_exp.shape[1]
        rows = mb.band_rows(h, w, params.kernel_size, params.stride, k_pad, 48, True, 11, c)
        row_blocks = -(-mb.output_size(h, params.stride) // rows)
        if mb.kernel1_v8_3cta(True, row_blocks, h, w, params.kernel_size, params.stride, c, k_pad, rows, True):
            taken.add(path)
    return taken


def test_which_blocks_take_it():
    """B0: the 7 x 7 k = 5 blocks (one image: X 49 -> 64 padded rows of 200 halves, U 48 x 200, E 11 x 12 pixels x 60
    halves, 10 groups' sums, 26 taps' rows: 67,560 bytes); not 5.x (14 x 14: 111,560), not the stride-2 or k = 3
    blocks."""
    assert _takes("efficientnet_b0") == {"features.6.1", "features.6.2", "features.6.3"}
    assert mb.kernel1_smem_bytes(7, 7, 7, 5, 1, 192, 48, True, 8, 192, 1) == \
        64 * 200 * 2 + 48 * 200 * 2 + 11 * 12 * 60 * 2 + 10 * 48 * 4 + 26 * 48 * 4 + 8 == 67_560
    assert not mb.kernel1_v8_3cta(False, 1, 7, 7, 5, 1, 192, 192, 7, True)  # not asked
    assert not mb.kernel1_v8_3cta(True, 1, 7, 7, 5, 1, 192, 192, 7, False)  # fp32 depthwise: not built
    b2 = _takes("efficientnet_b2")
    assert b2 <= {p for p in mbconv_shapes("efficientnet_b2") if p.startswith("features.6.")}


@pytest.mark.cuda
@pytest.mark.parametrize("path,batch", [("features.6.1", 128), ("features.6.1", 5), ("features.6.3", 1)])
def test_three_ctas_give_the_two_cta_kernels_values(path, batch, monkeypatch):
    from mbconv_helpers import assert_switch_keeps_the_bits

    assert_switch_keeps_the_bits(monkeypatch, path, batch, mb.K1_3CTA_SWITCH,
                                 "expand_dw_v8_kernel_3cta<48, 5, 1, 1, true>")


@pytest.mark.cuda
def test_efficientnet_b0_on_its_own_activations(monkeypatch):
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_3CTA_SWITCH: "1"}, {"MBConv": 16, "EffNetStem": 1}, 17)
