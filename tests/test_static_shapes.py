"""cuda_kernels/static_shapes.py and _build.py's static header: kernel 1's compile-time shapes for any torchvision
EfficientNet (CUDA_KERNELS_STATIC_MODELS). The Python mirror of version 11's kernel-1 routes must reproduce the
source's hand-made table of B0 (whose every entry the GPU tests saw run, by the profiler's kernel names), followed by
B2's entries, which the mirror computed; other models' entries are B0's rules applied to their blocks. CPU only: the
GPU checks are test_mbconv_k1_static.py's."""
import pytest

from cuda_kernels import mbconv as mb
from cuda_kernels import static_shapes as ss


def test_the_mirror_reproduces_the_sources_table():
    """B0's 10 entries (hand-made in session 26-27), then B2's 8 (the mirror's, in the source since session 28)."""
    b0 = ss.model_entries("efficientnet_b0")
    assert b0 + ss.more_entries(["efficientnet_b2"], b0) == ss.listed_entries()
    assert len(b0) == 10 and {e.route for e in b0} == set(ss.ROUTES) and len(ss.listed_entries()) == 18
    assert ss.more_entries(["efficientnet_b0", "efficientnet_b2"], ss.listed_entries()) == []


def test_blocks_without_a_static_kernel_say_why():
    # B0's 1.0: expand ratio 1 (32 -> 32 channels); 7.0: 7 x 7 at k 3 stride 1 (49 output pixels, version 3's kernel 1)
    assert ss.route(112, 112, 3, 1, 32, 32) == (None, "version 3's kernel 1 (no expand, or chunks of 32)")
    assert ss.route(7, 7, 3, 1, 192, 1152)[1] == "version 3's kernel 1 (at most 64 output pixels)"
    assert ss.route(7, 7, 3, 1, 192, 1152)[0] is None
    # a hidden width that is not a multiple of 48 runs chunks of 32 (version 3's kernel 1)
    assert ss.route(28, 28, 3, 1, 40, 200)[0] is None


def test_all_whole():
    # 28 outputs a row in groups of 4 (stride 1), bands of 10 rows in segments of 2 (k 5), 28 % 10 = 8 rows in the last
    assert ss.all_whole(5, 1, 28, 10, 240, 240)
    assert not ss.all_whole(5, 1, 14, 14, 480, 480)  # 14 columns: not a multiple of 4
    assert not ss.all_whole(3, 1, 56, 6, 144, 144)  # k 3 stride 1: segments of 4 rows, bands of 6
    assert not ss.all_whole(5, 1, 28, 10, 200, 240)  # padded channels


def test_b2_entries():
    """EfficientNet-B2 at 288 x 288: stem to 144 x 144 x 32; stages of 16, 24, 48, 88, 120, 208, 352 channels,
    expand ratio 6, strides 2 at 2.0 (144 -> 72), 3.0 (72 -> 36), 4.0 (36 -> 18) and 6.0 (18 -> 9); k 5 at stages 3,
    5, 6. Its entries that B0's lacks, each with the band rows band_rows gives."""
    more = ss.more_entries(["efficientnet_b2"], ss.model_entries("efficientnet_b0"))
    shapes = [(e.H, e.ks, e.stride, e.C_in, e.hidden) for e in more]
    assert shapes == [(144, 3, 2, 16, 96), (72, 5, 2, 24, 144), (36, 5, 1, 48, 288), (36, 3, 2, 48, 288),
                      (18, 5, 2, 120, 720), (9, 5, 1, 208, 1248), (9, 3, 1, 208, 1248), (9, 3, 1, 352, 2112)]
    for e in more:
        assert e.W == e.H and e.k_pad == -(-e.C_in // 16) * 16 and e.route in ss.ROUTES
        assert e.rows == mb.band_rows(e.H, e.W, e.ks, e.stride, e.k_pad, 48, True, 11, e.C_in,
                                      mb.kernel1_taps_global(11, e.stride, e.ks))
    # stride 2 on the bias-in-C kernels, 9 x 9 on the wgmma ones (one image an item), 36 x 36 at k 5 on U in registers
    assert [e.route for e in more] == ["kV8RouteBc", "kV8RouteBcWhole", "kV8RouteUrWhole", "kV8RouteBcWhole",
                                       "kV8RouteBc", "kV8RouteTx1", "kV8RouteTx1", "kV8RouteTx1"]



def test_the_header_and_the_variable(monkeypatch):
    e = ss.V8Static(36, 36, 5, 1, 48, 48, 288, 8, "kV8RouteUrWhole")
    assert ss.header([e]).splitlines()[1:] == [", {36, 36, 5, 1, 48, 48, 288, 8, kV8RouteUrWhole}"]
    monkeypatch.delenv(ss.MODELS_ENV, raising=False)
    assert ss.requested_models() == []
    monkeypatch.setenv(ss.MODELS_ENV, " efficientnet_b2, ,efficientnet_b4 ")
    assert ss.requested_models() == ["efficientnet_b2", "efficientnet_b4"]
    with pytest.raises(ValueError, match="CUDA_KERNELS_STATIC_MODELS: 'efficientnet_b99' is not"):
        ss.model_entries("efficientnet_b99")


def test_the_build_writes_one_header_per_table(monkeypatch, tmp_path):
    from cuda_kernels._build import static_header

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    # B1 at 240 x 240: stem to 120 x 120, 2.0 at stride 2 to 60 x 60; 2.1 expands 24 (k_pad 32) to 144, k 3 stride 1
    tag, folder = static_header(["efficientnet_b1"])
    text = (folder / "mbconv_v8_static_more.h").read_text()
    assert folder.parent == tmp_path and folder.name == f"perfmodel_static_{tag}" and len(tag) == 10
    assert text.count("\n, {") == 8 and "\n, {60, 60, 3, 1, 24, 32, 144, " in text
    assert static_header(["efficientnet_b1"])[0] == tag  # the same table, the same build
    assert static_header(["efficientnet_b2"])[0] != tag  # B2's are in the source: nothing to add, another table


def test_each_reason_a_route_gives_none():
    # B2's 2.1: 72 x 72 at k 3, bands of 6 rows against segments of 4; its 4.1: C_in 88 (k_pad 96), dense X rows
    assert ss.route(72, 72, 3, 1, 24, 144) == (None, "U in registers, but not every depthwise unit is whole")
    assert ss.route(18, 18, 3, 1, 88, 528)[1] == "bulk-copied X at k_pad 96: U in registers takes 32 (k 3) or 48 (k 5)"
    # B0's 2.1 at a batch of 16,384: 3 chunks x 16,384 images x 7 bands = 344,064 items, 344,064^2 >= 2^31
    assert ss.route(56, 56, 3, 1, 24, 144, batch=16384)[1] == \
        "U in registers, but 344064 items at batch 16384 are too many for the multiplies"
    assert ss.route(56, 56, 3, 1, 24, 144, batch=128)[0].route == "kV8RouteUrWhole"


def test_the_command_line(capsys):
    assert ss.main(["efficientnet_b0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 16  # B0's 16 MBConv blocks
    assert lines[0].split()[:2] == ["features.1.0", "-"]
    assert lines[2].split()[:2] == ["features.2.1", "UrWhole"] and lines[2].endswith("in the source's table")
    with pytest.raises(SystemExit) as exc:
        ss.main(["resnet_x"])
    assert exc.value.code == 2 and "'resnet_x' is not a torchvision" in capsys.readouterr().err
