"""Kernel 1 with D's epilogue in packed fp16 (csrc/mbconv_v8.cuh, CUDA_KERNELS_K1_DH2; on by default in version 11
since session 23: B0 -16.6 us, 5.1's kernel 1 73.6 -> 65.8 us; NOTES.md "Session 23"): the HFMA2 depthwise's fp16
sums get the bias in fp16 (one rounding, where PyTorch's fp16 conv rounds its output), SiLU(2h) = h + h tanh(h) by
tanh.approx.f16x2 and one HFMA2, and each output row's OW values are summed in fp16 before they join the pool's fp32
sums: 12 -> ~8 instructions an output pair (the widening, two fp32 bias adds, two fp32 FMAs, a pack and two pool adds
gone); and the taps as half2, whose smaller shared memory lets X come by the tensor memory accelerator, with the
expand on warpgroup MMAs, at B0's 5.0-5.2.

CPU: the switch as the source reads it, the epilogue, the fp16 row sums by literal arithmetic, and the float64 model
of the block's error on the activations B0 really sees (within 10% of the fp32 epilogue's, and not equal to it).
GPU (@pytest.mark.cuda): every distinct MBConv of B0 and B2 at batches 1, 5 and 128 against float64 (<= 2x PyTorch
fp16's error, output poisoned) with the switch on, the profiler naming a _dh kernel wherever version 8's kernel 1
runs, the output within 2e-3 of the fp32 epilogue's and not equal to it at batch 128; B0 through the check before
timing."""

import re
from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


def test_the_switch_is_on_in_version_11_unless_0_and_selects_the_dh_kernels():
    v8 = (CSRC / "mbconv_v8.cuh").read_text()
    assert mb.K1_DH2_SWITCH == "CUDA_KERNELS_K1_DH2"
    assert 'kernel1_switch("CUDA_KERNELS_K1_DH2");\n  return v != nullptr ? v[0] == \'1\' : v11;' in v8  # v11: on unset
    assert ("if (kernel1_v8_dh_requested(v11)) return launch_expand_dw_v8_hf<KS, true, true>(p, stream, pdl, v10, v11);"
            in v8)
    for entry in ("expand_dw_v8_kernel_txdh<HC, KS, S, G, WG>", "expand_dw_v8_kernel_bcdh<HC, KS, S, G>",
                  "expand_dw_v8_kernel_dh<HC, KS, S, G>"):
        assert f"return {entry};" in v8


def test_the_epilogue_adds_the_bias_and_takes_silu_in_fp16():
    v2, v8 = (CSRC / "mbconv_v2.cuh").read_text(), (CSRC / "mbconv_v8.cuh").read_text()
    assert 'asm("tanh.approx.f16x2 %0, %1;"' in v2
    assert "return __hfma2(h, *reinterpret_cast<const __half2*>(&t), h);" in v2
    assert "silu_of_half_h2(__hadd2(acch[o][u], dbias_h));" in v8
    assert "row_sum = u == 0 ? s : __hadd2(row_sum, s);" in v8


def test_row_sums_in_fp16_by_hand():
    from mbconv_helpers import row_sums_fp16

    d = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64).view(1, 1, 1, 5)
    assert row_sums_fp16(d).item() == 15.0  # runs [1 2 3 4] and [5]
    # 2048 + 1 rounds to 2048 in fp16 (its ulp there is 2), twice: the run sums to 2048, not 2050
    d = torch.tensor([2048.0, 1.0, 1.0, 0.0], dtype=torch.float64).view(1, 1, 1, 4)
    assert row_sums_fp16(d).item() == 2048.0
    d = torch.tensor([[1.0, 1.0], [2.0, 0.5]], dtype=torch.float64).view(1, 1, 2, 2)
    assert row_sums_fp16(d, ow=2).item() == 4.5


@pytest.mark.parametrize("path", ["features.2.1", "features.3.0", "features.3.1"])
def test_the_model_puts_the_error_near_the_default_epilogues(path):
    from mbconv_helpers import depthwise_model_error

    torch_err, default = depthwise_model_error(path, "pytorch"), depthwise_model_error(path, "fp16")
    dh2 = depthwise_model_error(path, "dh2")
    assert dh2 != default  # the model rounds differently, or it is blind
    assert dh2 <= 1.1 * default and dh2 <= 1.5 * torch_err, (dh2, default, torch_err)


# ---- GPU ----

def _distinct():
    from mbconv_helpers import DISTINCT

    return DISTINCT


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _distinct())
def test_every_shape_against_float64(name, path, batch, monkeypatch):
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, default, names, params, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_DH2_SWITCH, "1")
    # version 8's kernel 1: every expand block of B0 and B2 (chunks of 48) but 7 x 7 at k = 3, stride 1 (features.7.0)
    v8 = params.expand_w is not None and not mb.kernel1_v9_takes_v3(params.kernel_size, params.stride, got.shape[2],
                                                                     got.shape[3])
    if v8:
        # g: TAPS_G; ur: U_REG; f: FASTDIV; w: WHOLE; s: STATIC (B0's 2.0-3.1) and STATIC_REST (4.0-6.1; sw: ROW_UNITS;
        # swb: and BIAS_EARLY, the default since session 31; wsh: HALO5, B0's 3.1)
        assert re.search(r"expand_dw_v8_kernel_(tx|bc)?dh(g|urf?)?(wsh|ws|swb|sw|w|s)?<", names), names[:600]
        assert relative_error(got, default.double()) < 2e-3
        if batch == 128:
            assert not torch.equal(got, default)  # another epilogue ran
    else:  # version 3's kernel 1 (no expand, or features.7.0): the switch changes nothing there
        assert "dh<" not in names


def test_its_smaller_taps_let_x_come_by_tma_at_stage_5():
    """The taps as half2 with the bias after them (v8_smem's dh) take k k x 48 x 2 bytes less: at B0's 5.1 (14 x 14,
    C_in = k_pad = 112, k = 5, one band of 14 rows) X by the tensor memory accelerator needs 115,912 bytes, 200 over
    two CTAs' 115,712, and 113,512 with them; with the wgmma expand's U 116,680 -> 114,280 (5.0 too)."""
    v8 = (CSRC / "mbconv_v8.cuh").read_text()
    assert "dh ? ks * ks * chunk * 2 + chunk * 4 : (ks * ks + 1) * chunk * 4);" in v8
    assert "kernel1_v8_tx(true, p.H, p.W, p.Wo, p.rows_per_tile, KS, 1, p.C_in, p.k_pad, 48, g, with_wg, DH)" in v8
    assert "if (wg && aligned && tx_fits(true))" in v8 and "if (tx && aligned && tx_fits(false))" in v8
    args = (14, 14, 14, 5, 1, 112, 48, True, 11, 112, 1)
    assert mb.kernel1_smem_bytes(*args, tx=True) == 115_912 > mb.V8_TWO_CTA_SMEM == 115_712
    assert mb.kernel1_smem_bytes(*args, tx=True, dh=True) == 115_912 - 25 * 48 * 2 == 113_512
    assert mb.kernel1_smem_bytes(*args, tx=True, wg=True, dh=True) == 116_680 - 2_400
    assert not mb.kernel1_v8_tx(True, 14, 14, 5, 1, 112, 112, 14, 1)
    assert mb.kernel1_v8_tx(True, 14, 14, 5, 1, 112, 112, 14, 1, wg=True, dh=True)
    assert not mb.kernel1_v8_tx(True, 14, 14, 5, 1, 80, 80, 14, 1, wg=True)  # 5.0: the wgmma expand only with dh
    assert mb.kernel1_v8_tx(True, 14, 14, 5, 1, 80, 80, 14, 1, wg=True, dh=True)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.5.0", "features.5.1"])
def test_stage_5_runs_x_by_tma_and_the_wgmma_expand(path, monkeypatch):
    """With the switch, B0's 5.0 and 5.1 run kernel 1 with X by the tensor memory accelerator and the expand on
    warpgroup MMAs (expand_dw_v8_kernel_txdh<48, 5, 1, 1, true>; since session 27 the kernel compiled for the block's
    shape, txdhs<48, 5, 1, 1, true, entry>; since session 29 in units of one row, txdhsw<..., 7, 1>; since session 31
    with the biases loaded early, txdhswb), within 2x PyTorch fp16's error of float64."""
    from mbconv_helpers import switched_against_float64

    *_, names, _, _, _ = switched_against_float64(monkeypatch, "efficientnet_b0", path, 128, mb.K1_DH2_SWITCH, "1")
    assert re.search(r"expand_dw_v8_kernel_txdh(swb?|s)?<48, 5, 1, 1, true[,>]", names), names[:600]


# ---- the taps from global memory at stride 2 (CUDA_KERNELS_K1_TAPS_G, on by default in version 11 since session 24:
# B0's 3.0 kernel 1 99.5 -> 93.2 us, B0 -5.2 us) ----

def test_taps_from_global_memory_let_3_0_run_bands_of_4_rows():
    """Without the taps' shared copy (2,400 bytes of half2 taps and 192 of fp32 bias at k = 5) kernel 1 fits bands of
    4 output rows at B0's 3.0 (56 x 56, C_in 24 -> k_pad 32, k = 5, stride 2) in two CTAs: 116,208 bytes with the
    shared taps, 496 over 115,712, and 113,616 without; band_rows then takes 7 bands of 4 for 10 of 3 (the last
    of 1)."""
    v8 = (CSRC / "mbconv_v8.cuh").read_text()
    assert 'kernel1_switch("CUDA_KERNELS_K1_TAPS_G");\n  return v != nullptr ? v[0] == \'1\' : v11;' in v8  # v11: on
    assert "if (kernel1_v8_tg_requested(v11))" in v8
    assert "return launch_expand_dw_v8<48, KS, 2, 1, HF, false, false, true, DH, true>(p, stream, pdl);" in v8
    assert "r.bar = r.wdw + (tg ? 0 : dh ? ks * ks * chunk * 2 + chunk * 4 : (ks * ks + 1) * chunk * 4);" in v8
    # the same values the shared copy held: halved in fp32, then rounded to half2
    assert "wh[t] = __floats2half2_rn(0.5f * w.x, 0.5f * w.y);" in v8
    args = (4, 56, 56, 5, 2, 32, 48, True, 11, 24)
    assert mb.kernel1_smem_bytes(*args, dh=True) == 116_208 > mb.V8_TWO_CTA_SMEM
    assert mb.kernel1_smem_bytes(*args, dh=True, tg=True) == 116_208 - 25 * 48 * 2 - 48 * 4 == 113_616
    assert mb.band_rows(56, 56, 5, 2, 32, 48, True, 11, 24) == 3
    assert mb.band_rows(56, 56, 5, 2, 32, 48, True, 11, 24, taps_global=True) == 4
    assert "if constexpr (DH && KS == 5)" in v8  # k = 3 (2.0, 4.0): no taller band fits anyway
    assert mb.band_rows(112, 112, 3, 2, 16, 48, True, 11, 16, taps_global=True) == 2  # 2.0: 3 rows need 125 KB


def test_the_launcher_and_band_rows_agree_on_when(monkeypatch):
    for name in (mb.K1_DH2_SWITCH, mb.K1_HFMA2_SWITCH, mb.K1_BIAS_C_SWITCH, mb.K1_TAPS_G_SWITCH):
        monkeypatch.delenv(name, raising=False)
    assert mb.kernel1_taps_global(11, 2, 5)  # on unless 0
    monkeypatch.setenv(mb.K1_TAPS_G_SWITCH, "0")
    assert not mb.kernel1_taps_global(11, 2, 5)
    monkeypatch.setenv(mb.K1_TAPS_G_SWITCH, "1")
    assert mb.kernel1_taps_global(11, 2, 5)
    assert not any(mb.kernel1_taps_global(*args) for args in ((11, 1, 5), (10, 2, 5), (11, 2, 3)))
    for name in (mb.K1_DH2_SWITCH, mb.K1_HFMA2_SWITCH, mb.K1_BIAS_C_SWITCH):  # the kernel it needs switched off
        monkeypatch.setenv(name, "0")
        assert not mb.kernel1_taps_global(11, 2, 5)
        monkeypatch.delenv(name)


def _stride2_k5():
    from mbconv_helpers import DISTINCT, block_of

    dws = [(n, p, block_of(n, p).block[-3][0]) for n, p in DISTINCT]
    return [(n, p) for n, p, dw in dws if dw.stride[0] == 2 and dw.kernel_size[0] == 5]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", _stride2_k5())
def test_taps_from_global_memory_against_float64(name, path, batch, monkeypatch):
    """Every stride-2, k = 5 MBConv of B0 and B2 with the switch: within 2x PyTorch fp16's error of float64 (poisoned
    output), the profiler naming expand_dw_v8_kernel_bcdhg, and within 1e-3 of the shared taps' kernel (D's values are
    the same; taller bands add the pool in another order)."""
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, default, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_TAPS_G_SWITCH, "1")
    # (w: WHOLE; at B0's 3.0 and 6.0 the kernel compiled for its shape, STATIC / STATIC_REST, with the taps from global
    # memory: TG true)
    assert re.search(r"expand_dw_v8_kernel_bcdh(gw?<48, |w?s<48, 5, 2, 1, true, )", names), names[:600]
    assert relative_error(got, default.double()) < 1e-3


# ---- EfficientNet-B0 end to end under each switch (ids: the device scripts select them with -k) ----

@pytest.mark.cuda
@pytest.mark.parametrize("switch", [mb.K1_DH2_SWITCH, mb.K1_TAPS_G_SWITCH], ids=["dh2", "taps"])
def test_efficientnet_b0_with_it(switch, monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {switch: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
