"""The committed cuda_kernels benchmark beside perfmodel's bounds for the same blocks."""
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli
import perfmodel
from perfmodel.kernel_results import load_kernel_results

BENCH = Path(__file__).parent.parent / "examples" / "measurements" / "cuda_kernels_h200.json"


@pytest.fixture(scope="module")
def cases():
    return load_kernel_results(BENCH, perfmodel.load_hardware("h200-sxm"))


def test_benchmark_bytes_equal_the_block_plan(cases):
    assert len(cases) >= 6
    for c in cases:  # counted independently by cuda_kernels/bench.py
        assert c.dram_bytes == c.block_dram_bytes, c.name


def test_every_measured_backend_respects_the_block_bound(cases):
    for c in cases:
        for backend, us in c.median_us.items():
            assert us >= c.block_t_min_us, (c.name, backend)
        assert c.block_t_min_us <= c.layer_t_min_us


def test_kernels_command(tmp_path):
    out = tmp_path / "k.png"
    result = CliRunner().invoke(cli.cli, ["kernels", str(BENCH), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "convfirst_c64_a4_56x56_n128" in result.output and out.stat().st_size > 20_000


def test_network_rows_take_each_backends_fastest_setting():
    from types import SimpleNamespace

    from perfmodel.kernel_results import network_cases

    def m(backend, ms, setting, path=None):
        return SimpleNamespace(backend=backend, latency_ms=ms, batch=128, setting=setting, path=path)

    def r(t_min_s):
        return SimpleNamespace(model="Net", totals=SimpleNamespace(t_min_s=t_min_s))

    block, layer = r(0.3e-3), r(0.9e-3)
    [row] = network_cases([(m("cuda_kernels", 3.0, "cuda_kernels"), block, layer),
                           (m("cuda_kernels", 2.0, "cuda_kernels (compiled rest)"), block, layer),
                           (m("inductor", 3.5, "inductor (freezing)"), block, layer)])
    assert row.median_us == {"cuda_kernels": 2000.0, "inductor": 3500.0}
    assert row.settings["cuda_kernels"] == "cuda_kernels (compiled rest)"
    assert (row.block_t_min_us, row.layer_t_min_us) == (300.0, 900.0)
    assert row.fraction_of_bound() == 300 / 2000 and row.label == "Net (network)"


def test_network_rows_compare_within_one_run():
    """Files of one folder are one run: the row is the run with the fastest fused network,
    with that run's baselines, never another run's faster torch.compile."""
    from types import SimpleNamespace

    from perfmodel.kernel_results import network_cases

    def m(backend, ms, run):
        return SimpleNamespace(backend=backend, latency_ms=ms, batch=128, setting=backend,
                               path=f"/m/{run}/{backend}.json")

    t = SimpleNamespace(model="Net", totals=SimpleNamespace(t_min_s=1e-3))
    [row] = network_cases([(m("cuda_kernels", 5.0, "a"), t, t), (m("inductor", 6.0, "a"), t, t),
                           (m("cuda_kernels", 4.0, "b"), t, t), (m("inductor", 6.5, "b"), t, t)])
    assert row.median_us == {"cuda_kernels": 4000.0, "inductor": 6500.0}


def test_kernels_command_draws_networks_beside_the_blocks(tmp_path, capsys):
    from pathlib import Path

    from helpers import run_main

    m = Path(__file__).parent.parent / "examples" / "measurements"
    runs = sorted(str(p) for p in (m / "convfirstnet_e2e" / "run3").glob("*.json"))
    code, out, _ = run_main(["kernels", str(m / "cuda_kernels_h200.json"),
                             *(a for f in runs for a in ("--network", f)),
                             "-o", str(tmp_path / "k.png")], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("ConvFirstNet-S"))
    # fused 2.194 ms (rest compiled, CUDA graphs) against torch.compile's best, 3.224 ms
    cells = row.split()  # name, block, layer, fused, of bound (2 cells: "14.0 %"), compile, eager, x
    assert (cells[3], cells[6], cells[-1]) == ("2194", "3224", "1.47")


def test_a_network_without_a_baseline_prints_dashes():
    from perfmodel.kernel_results import NetworkCase
    from perfmodel.report import kernel_case_lines

    row = NetworkCase("Net", 128, {"cuda_kernels": 2000.0}, {}, 300.0, 900.0)
    cells = kernel_case_lines([row])[1].split()
    assert cells[:4] == ["Net", "300.0", "900.0", "2000"] and cells[-3:] == ["-", "-", "-"]


WGMMA_BENCH = Path(__file__).parent.parent / "examples" / "measurements" / "convfirst_wgmma_v4" / "v3_bench.json"
S2_BENCH = Path(__file__).parent.parent / "examples" / "measurements" / "convfirst_c768" / "s2_c768_bench.json"


def test_wgmma_bench_files_are_stride_1_convfirst_rows():
    """bench_c512's files have no per-row `block` (workload.blocks names the one kernel): their rows are
    the stride-1 ConvFirst blocks their widths describe, and their torch.compile column (inductor_default)
    is the figure's inductor. Numbers from the file as measured (convfirst_wgmma_v4/README.md)."""
    cases = load_kernel_results(WGMMA_BENCH, perfmodel.load_hardware("h200-sxm"))
    by_name = {c.name: c for c in cases}
    c = by_name["convfirst_c256_a6_14x14_n128"]
    assert (c.block, c.channels, c.expansion, c.size, c.batch) == ("convfirst", 256, 6, 14, 128)
    assert c.median_us["inductor"] == c.median_us["inductor_default"] == pytest.approx(280.2, abs=0.05)
    assert c.median_us["cuda_kernels"] == pytest.approx(111.3, abs=0.05)
    # the file's own byte count (bench_c512) is the block plan's: input + output + weights, fp16
    # (activations in and out, grouped-conv, U and V weights, the three biases)
    assert c.dram_bytes == c.block_dram_bytes == 2 * (2 * 128 * 14 * 14 * 256 + 256 * 8 * 9 + 2 * 256 * 1536
                                                      + 256 + 1536 + 256)


def test_kernels_command_refuses_rows_without_a_zoo_block(tmp_path, capsys):
    """A stride-2 benchmark file: one line naming the file, the row and why; exit 2, no figure."""
    from helpers import run_main

    code, _, err = run_main(["kernels", str(S2_BENCH), "-o", str(tmp_path / "k.png")], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert str(S2_BENCH) in err and "results.cases[0]" in err and "convfirst_s2_c384_a6_14x14_n128" in err
    assert not (tmp_path / "k.png").exists()


NETWORK_TABLE = Path(__file__).parent.parent / "examples" / "measurements" / "convfirstnet_table" / "networks_table.json"


def test_network_tables_give_their_stride_1_blocks_and_name_the_rest(tmp_path, capsys):
    """bench_networks' table (ConvFirstNet-H200's units, examples/measurements/convfirstnet_table/README.md): its four
    stride-1 blocks are figure rows with the medians as measured; the stem, the three stride-2 blocks and the head
    are named as not drawn."""
    from helpers import run_main

    skipped: list[str] = []
    cases = load_kernel_results(NETWORK_TABLE, perfmodel.load_hardware("h200-sxm"), skipped)
    assert [(c.channels, c.expansion, c.size) for c in cases] == [(64, 6, 56), (128, 6, 28), (256, 6, 14), (512, 6, 7)]
    c256 = {c.channels: c for c in cases}[256]
    assert c256.median_us["cuda_kernels"] == pytest.approx(102.1, abs=0.05)
    assert c256.median_us["inductor"] == pytest.approx(349.2, abs=0.05)
    assert skipped == ["stem_3_32_64_224x224_n128", "convfirst_s2_c64_a6_56x56_n128", "convfirst_s2_c128_a6_28x28_n128",
                       "convfirst_s2_c256_a6_14x14_n128", "head_c512_1280_1000_7x7_n128"]
    code, out, _ = run_main(["kernels", str(NETWORK_TABLE), "-o", str(tmp_path / "k.png")], capsys)
    assert code == 0 and "not drawn (5 units" in out and (tmp_path / "k.png").exists()


MBCONV_BLOCKS = Path(__file__).parent.parent / "examples" / "measurements" / "mbconv" / "s37" / "call4" / "blocks.json"


def test_mbconv_bench_files_are_rows_with_their_block_bounds(tmp_path, capsys):
    """cuda_kernels/mbconv_bench.py's table (EfficientNet-B0's 2.1 / 3.1 / 4.1, s37 call 4): each torchvision block is
    rebuilt and analysed; its medians are the CUDA-graph replays and torch.compile's better mode, as the README's
    per-block comparison reads them (mbconv/s37/README.md)."""
    from helpers import run_main

    cases = load_kernel_results(MBCONV_BLOCKS, perfmodel.load_hardware("h200-sxm"))
    by_path = {c.name.split()[-1]: c for c in cases}
    assert sorted(by_path) == ["features.2.1", "features.3.1", "features.4.1"]
    c = by_path["features.3.1"]
    assert (c.block, c.channels, c.expansion, c.size, c.batch) == ("mbconv", 40, 6, 28, 128)
    assert c.label == "mbconv C=40 a=6 28x28 k5 (efficientnet_b0 features.3.1)"
    # the block plan's bytes: x in and out (128 x 28 x 28 x 40), the 1x1 expand, 5x5 depthwise, SE and 1x1 project
    # weights, their biases (240 + 240 + 10 + 240 + 40), all fp16; the benchmark counted the same
    weights = 40 * 240 + 240 * 25 + 2 * 240 * 10 + 240 * 40
    assert c.dram_bytes == c.block_dram_bytes == 2 * (2 * 128 * 28 * 28 * 40 + weights + 770) == 16_117_860
    # compute-bound on h200-sxm's 989.4 TFLOP/s: 2 x MACs + the biases (eq. 22)
    macs = 128 * (784 * 40 * 240 + 784 * 240 * 25 + 2 * 240 * 10 + 784 * 240 * 40)
    assert c.block_t_min_us == pytest.approx((2 * macs + 770) / 989.4e12 * 1e6, rel=1e-9)
    assert c.block_t_min_us < c.layer_t_min_us
    assert c.median_us["cuda_kernels"] == pytest.approx(79.6, abs=0.05)
    assert c.median_us["inductor"] == pytest.approx(216.6, abs=0.05)  # max-autotune-no-cudagraphs, the better
    assert by_path["features.4.1"].median_us["inductor"] == pytest.approx(109.7, abs=0.05)  # default, the better
    code, out, _ = run_main(["kernels", str(MBCONV_BLOCKS), "-o", str(tmp_path / "k.png")], capsys)
    assert code == 0 and "efficientnet_b0 features.3.1" in out and (tmp_path / "k.png").exists()


def test_mbconv_rows_keep_a_block_the_fused_kernel_did_not_time_and_name_a_bad_model(tmp_path, capsys):
    """A row without a fused timing (its check failed) stays, its baselines drawn and '-' printed as fused; a model
    torchvision does not have is one line naming the file and the field, exit 2."""
    import json

    from helpers import run_main

    data = json.loads(MBCONV_BLOCKS.read_text())
    for backend in [b for b in data["results"]["cases"][2]["backends"] if b.startswith("cuda_kernels")]:
        del data["results"]["cases"][2]["backends"][backend]
    untimed = tmp_path / "untimed.json"
    untimed.write_text(json.dumps(data))
    cases = load_kernel_results(untimed, perfmodel.load_hardware("h200-sxm"))
    assert [("cuda_kernels" in c.median_us) for c in cases] == [True, True, False]
    assert cases[2].median_us["eager"] == pytest.approx(193.4, abs=0.05)
    code, out, _ = run_main(["kernels", str(untimed), "-o", str(tmp_path / "k.png")], capsys)
    assert code == 0 and [line.split()[4] for line in out.splitlines() if "features.4.1" in line] == ["-"]
    data["workload"]["model"] = "not_a_model"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, _, err = run_main(["kernels", str(bad), "-o", str(tmp_path / "b.png")], capsys)
    assert code == 2 and "Traceback" not in err and str(bad) in err and "workload.model" in err
    assert not (tmp_path / "b.png").exists()
