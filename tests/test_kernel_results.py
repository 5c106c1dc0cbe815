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
