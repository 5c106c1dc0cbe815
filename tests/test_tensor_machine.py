"""Tensor-machine programs against the plans of the same blocks traced from the zoo."""
import pytest

import perfmodel
from perfmodel.hardware import load_hardware
from perfmodel.machine_programs import PROGRAMS
from perfmodel.zoo.blocks import FFN, ConvFirstBlock
from perfmodel.zoo.mbconv import MBConv

N = 8


def plan_bytes(module, c, h, plan):
    r = perfmodel.analyze(module, (c, h, h), batch=N, plan=plan)
    return r.totals.dram_bytes, r.totals.flops, len(r.kernels)


CASES = [  # (layer program, fused program, zoo block, block class, C, H, kwargs)
    ("ffn_layer", "ffn_fused", lambda c, a: FFN(c, a), "FFN", 64, 28, {"alpha": 4}),
    ("convfirst_layer", "convfirst_fused", lambda c, a: ConvFirstBlock(c, a), "ConvFirstBlock",
     64, 56, {"alpha": 4}),
    ("convfirst_layer", "convfirst_fused", lambda c, a: ConvFirstBlock(c, a), "ConvFirstBlock",
     128, 14, {"alpha": 6}),
]


@pytest.mark.parametrize("layer, fused, block, cls, c, h, kw", CASES)
def test_programs_match_layer_and_block_plans(layer, fused, block, cls, c, h, kw):
    module = block(c, kw["alpha"])
    lp = PROGRAMS[layer](n=N, h=h, w=h, c=c, **kw)
    fp = PROGRAMS[fused](n=N, h=h, w=h, c=c, **kw)
    layer_bytes, layer_flops, layer_kernels = plan_bytes(module, c, h, "layer")
    block_bytes, block_flops, block_kernels = plan_bytes(module, c, h, f"block:{cls}")
    assert (lp.dram_bytes, lp.flops, len(lp.kernels)) == (layer_bytes, layer_flops, layer_kernels)
    assert (fp.dram_bytes, fp.flops, len(fp.kernels)) == (block_bytes, block_flops, 1)


def test_fused_ffn_bytes_literal():
    p, c, a = N * 28 * 28, 64, 4
    fp = PROGRAMS["ffn_fused"](n=N, h=28, w=28, c=c, alpha=a)
    assert fp.dram_bytes == 2 * (p * c + p * c + c * a * c + a * c + a * c * c + c)
    lp = PROGRAMS["ffn_layer"](n=N, h=28, w=28, c=c, alpha=a)
    assert lp.dram_bytes - fp.dram_bytes == 2 * (2 * p * a * c)  # H written and read


def test_channel_split_moves_what_the_fused_kernel_moves():
    kw = dict(n=N, h=14, w=14, c=256, alpha=4)
    split, fused = PROGRAMS["convfirst_split"](**kw), PROGRAMS["convfirst_fused"](**kw)
    assert split.dram_bytes == fused.dram_bytes
    assert split.macs == fused.macs
    assert split.kernels[0].global_bytes > fused.kernels[0].global_bytes  # partial sums


def test_mbconv_layer_matches_plan_and_two_pass_pays_a_second_read():
    c, h, a = 24, 28, 6
    module = MBConv(c, a, 3)
    lp = PROGRAMS["mbconv_layer"](n=N, h=h, w=h, c=c, alpha=a, squeeze=6)
    tp = PROGRAMS["mbconv_two_pass"](n=N, h=h, w=h, c=c, alpha=a, squeeze=6)
    layer_bytes, layer_flops, layer_kernels = plan_bytes(module, c, h, "layer")
    block_bytes, _, _ = plan_bytes(module, c, h, "block:MBConv")
    assert (lp.dram_bytes, lp.flops, len(lp.kernels)) == (layer_bytes, layer_flops, layer_kernels)
    p, hid = N * h * h, a * c
    second_read = p * c + c * hid + hid + hid * 9 + hid  # X, expand and depthwise weights
    pooled = 2 * N * hid + 2 * N * hid  # S and S2, each written and read once
    assert tp.dram_bytes == block_bytes + 2 * (second_read + pooled)
    assert tp.macs > lp.macs  # recomputation (and the halo's expand) costs arithmetic
    assert tp.dram_bytes < lp.dram_bytes / 3


def test_report_and_waterline():
    prog = PROGRAMS["convfirst_fused"](c=64, alpha=4)
    rep = prog.analyze(load_hardware("h200-sxm"))
    assert rep.t_min_s == pytest.approx(max(prog.flops / 989.4e12, prog.dram_bytes / 4800e9))
    assert "ConvFirst block-fused" in "\n".join(rep.lines())


def test_machine_command_draws_and_rejects_bad_parameters(tmp_path, capsys):
    from click.testing import CliRunner

    import cli

    out = tmp_path / "m.svg"
    result = CliRunner().invoke(cli.cli, ["machine", "ffn_fused", "--set", "c=64", "--set",
                                          "h=14", "-o", str(out)])
    assert result.exit_code == 0, result.output
    p = PROGRAMS["ffn_fused"](c=64, h=14, w=28)  # w is not tied to h; the CLI set only h
    assert "ffn_fused" in result.output and out.read_text().startswith("<?xml")
    listing = CliRunner().invoke(cli.cli, ["machine"])
    assert all(name in listing.output for name in PROGRAMS)
    with pytest.raises(SystemExit) as exc:
        cli.main(["machine", "ffn_fused", "--set", "c=-3"])
    assert exc.value.code == 2 and "NAME=POSITIVE_INT" in capsys.readouterr().err
    assert p.macs == 2 * (128 * 14 * 28) * 64 * 256  # the program honours both h and w


def test_a_chunk_that_does_not_divide_the_hidden_channels_is_rejected():
    with pytest.raises(ValueError, match="chunk: 1024 is not a multiple of 100"):
        PROGRAMS["ffn_fused"](chunk=100)


def test_bytes_follow_the_dtype_the_program_is_analysed_in():
    n, h, c, a = N, 28, 64, 4
    p = n * h * h
    elements = p * c + p * c + c * a * c + a * c + a * c * c + c  # X, Z, U, a, V, b
    hw = load_hardware("h200-sxm")
    prog = PROGRAMS["ffn_fused"](n=n, h=h, w=h, c=c, alpha=a)
    half, single = prog.analyze(hw, "float16"), prog.analyze(hw, "float32")
    assert half.program.dram_bytes == 2 * elements
    assert single.program.dram_bytes == 4 * elements
    assert single.program.kernels[0].local_bytes == 2 * half.program.kernels[0].local_bytes
    assert single.program.macs == half.program.macs == prog.macs
    assert single.t_min_s == pytest.approx(max(single.program.flops / 66.9e12,
                                               4 * elements / 4800e9))


def test_machine_command_reports_float32_bytes_twice_float16(tmp_path):
    from click.testing import CliRunner

    import cli

    def dram_mb(dtype):
        result = CliRunner().invoke(cli.cli, ["machine", "ffn_fused", "--dtype", dtype,
                                              "-o", str(tmp_path / f"{dtype}.svg")])
        assert result.exit_code == 0, result.output
        return float(result.output.split(" MB DRAM")[0].rsplit(" ", 1)[1])

    p, c, a = 128 * 28 * 28, 256, 4  # the program's defaults
    elements = 2 * p * c + 2 * c * a * c + a * c + c
    assert dram_mb("float16") == round(2 * elements / 1e6, 1)
    assert dram_mb("float32") == round(4 * elements / 1e6, 1)


def test_build_program_checks_settings_against_the_signature():
    from perfmodel.errors import InputError
    from perfmodel.machine_programs import build_program, program_lines

    assert build_program("ffn_fused", ["c=64", "h=14"]).macs == PROGRAMS["ffn_fused"](
        c=64, h=14).macs
    assert len(program_lines()) == len(PROGRAMS)
    for name, settings, message in [("nope", [], "unknown program 'nope'"),
                                    ("ffn_fused", ["c=-3"], "NAME=POSITIVE_INT"),
                                    ("ffn_fused", ["q=3"], "NAME=POSITIVE_INT"),
                                    ("ffn_fused", ["chunk=100"], "not a multiple of 100")]:
        with pytest.raises(InputError, match=message):
            build_program(name, settings)


def test_local_tiles_larger_than_an_sms_shared_memory_are_a_warning(tmp_path, capsys):
    import warnings

    import cli

    # ffn_fused at 28x28: 7x7-pixel tiles; X_t, Z_t (49 x c), Y_r (49 x 64), U_r, V_r (c x 64)
    def local_kib(c):
        return 2 * (2 * 49 * c + 49 * 64 + 2 * c * 64) / 1024

    assert local_kib(512) == 232.125 and local_kib(256) == 119.125
    with pytest.warns(UserWarning, match=r"kernel 'FFN block-fused' keeps 232\.1 KiB of local "
                      r"tiles per processor, more than the 228 KiB of shared memory per SM of "
                      r"h200-sxm"):
        PROGRAMS["ffn_fused"](c=512).analyze(load_hardware("h200-sxm"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PROGRAMS["ffn_fused"](c=256).analyze(load_hardware("h200-sxm"))  # 119 KiB fits
    with pytest.warns(UserWarning, match=r"119\.1 KiB .* more than the 100 KiB .* of a5000"):
        PROGRAMS["ffn_fused"](c=256).analyze(load_hardware("a5000"))
    with pytest.raises(SystemExit):
        cli.main(["machine", "ffn_fused", "--set", "c=512", "-o", str(tmp_path / "m.svg")])
    assert "warning: ffn_fused: kernel 'FFN block-fused' keeps 232.1 KiB" in \
        capsys.readouterr().err


def test_hardware_configs_give_shared_memory_per_sm():
    kib = {name: load_hardware(name).smem_kib_per_sm for name in perfmodel.list_hardware()}
    assert kib["h100-sxm"] == kib["h200-sxm"] == kib["h200-sxm-measured"] == 228
    assert kib["a100-sxm4-80gb"] == 164
    assert kib["a5000"] == kib["a5000-paper"] == kib["rtx4090"] == kib["l4"] == 100


TV_MBCONV = [  # (expand ratio, k, stride, C, C', H): a stride-2, a kernel-5, an expand-1 block
    (6, 3, 2, 16, 24, 112), (6, 5, 1, 40, 40, 28), (1, 3, 1, 32, 16, 112), (6, 5, 2, 24, 40, 56)]


@pytest.mark.parametrize("e, k, s, c, c_out, h", TV_MBCONV)
def test_mbconv_layer_program_is_torchvisions_layer_plan(e, k, s, c, c_out, h):
    """The generalized layer program against perfmodel's traced layer plan of torchvision's
    own MBConv (stride 2, no shortcut, no expand for ratio 1): the same kernels, bytes, ops."""
    from functools import partial

    import torch
    from torchvision.models.efficientnet import MBConv as TvMBConv
    from torchvision.models.efficientnet import MBConvConfig

    block = TvMBConv(MBConvConfig(e, k, s, c, c_out, 1), 0.0,
                     partial(torch.nn.BatchNorm2d, eps=1e-3)).eval()
    traced = perfmodel.analyze(block, (c, h, h), batch=N, plan="layer").totals
    program = PROGRAMS["mbconv_layer"](n=N, h=h, w=h, c=c, alpha=e, k=k, stride=s, c_out=c_out,
                                       squeeze=max(1, c // 4))
    assert (program.dram_bytes, program.flops) == (traced.dram_bytes, traced.flops)
    assert len(program.kernels) == (6 if e > 1 else 5)


def test_mbconv_write_back_pays_the_depthwise_output_twice():
    c, h, a, k, sq = 24, 28, 6, 3, 6
    hid, p = a * c, N * h * h
    weights = c * hid + hid + hid * k * k + hid + hid * sq + sq + sq * hid + hid + hid * c + c
    wb = PROGRAMS["mbconv_write_back"](n=N, h=h, w=h, c=c, alpha=a, k=k, squeeze=sq)
    # kernel 1: X, expand and depthwise weights in; D and the pooled sums S out. SE: S and
    # its weights in, S2 out. Kernel 3: D, S2, X (shortcut) and project weights in; Z out.
    elements = (p * c + (c * hid + hid + hid * k * k + hid) + p * hid + N * hid
                + N * hid + (hid * sq + sq + sq * hid + hid) + N * hid
                + p * hid + N * hid + p * c + (hid * c + c) + p * c)
    assert wb.dram_bytes == 2 * elements
    assert wb.dram_bytes - 2 * (p * c + p * c + weights) == 2 * (2 * p * hid + 4 * N * hid + p * c)
    # no second pass; only each 7x7 tile's halo is expanded twice: (7 - 1 + 3)^2 = 81 input
    # pixels expanded per tile of 49, over N 28^2 / 49 tiles
    layer = PROGRAMS["mbconv_layer"](n=N, h=h, w=h, c=c, alpha=a, k=k, squeeze=sq)
    assert wb.macs == layer.macs + (N * h * h // 49) * (81 - 49) * c * hid


@pytest.mark.parametrize("name", ["mbconv_two_pass", "mbconv_write_back"])
def test_hidden_chunks_keep_traffic_and_work_and_shrink_the_tiles(name):
    kw = dict(n=N, h=14, w=14, c=112, alpha=6, k=5, squeeze=28, tile=14)
    whole, chunked = PROGRAMS[name](**kw), PROGRAMS[name](**kw, chunk=96)
    assert (chunked.dram_bytes, chunked.macs, chunked.flops) == (whole.dram_bytes, whole.macs, whole.flops)
    # the tile's hidden tensors shrink from 672 to 96 channels: E over (14 - 1 + 5)^2 pixels
    # (two-pass) or D over 14^2 (both), in fp16
    big = max(kk.local_bytes for kk in whole.kernels)
    small = max(kk.local_bytes for kk in chunked.kernels)
    assert big - small >= 2 * 14 * 14 * (672 - 96)
    with pytest.raises(ValueError, match="chunk: 672 is not a multiple of 100"):
        PROGRAMS[name](**kw, chunk=100)
