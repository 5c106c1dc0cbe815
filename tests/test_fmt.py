"""Numbers print with significant digits: a small value never reads as zero."""
import pytest

import cli
from perfmodel.fmt import pct, si, sig


@pytest.mark.parametrize("value, text", [
    (1.811, "1.811"), (0.000123, "0.0001230"), (1046.8, "1047"), (9.9996, "10.00"),
    (1.23e-5, "1.230e-05"), (0, "0"), (-0.5, "-0.5000"), (float("inf"), "inf"),
])
def test_sig(value, text):
    assert sig(value) == text


def test_si_and_pct():
    assert si(7.053e9, "B") == "7.053 GB"
    assert si(512, "B") == "512 B"
    assert si(999.96) == "1.000 k"
    assert si(442_528) == "442.5 k"
    assert pct(0.584) == "58.4 %" and pct(1.0) == "100 %" and pct(1.234e-5) == "0.00123 %"


def test_a_tiny_model_prints_no_zeros(tmp_path, capsys):
    spec = tmp_path / "linear.yaml"
    spec.write_text("model: torch.nn:Linear\nkwargs: {in_features: 16, out_features: 16}\n"
                    "input: [16]\nbatch: 1\nhardware: h200-sxm\n")
    with pytest.raises(SystemExit):
        cli.main(["waterline", str(spec), "-o", str(tmp_path / "w.png")])
    out = capsys.readouterr().out
    # one kernel: input 16 + weight 256 + bias 16 + output 16 elements, 2 bytes each
    nbytes = 2 * (16 + 256 + 16 + 16)
    assert nbytes == 608
    flops = 2 * 16 * 16 + 16
    assert "MACs per image            256 " in out
    assert f"matrix ops (flops)        {flops}  (other arithmetic 0)" in out
    assert "DRAM traffic              608 B  (compulsory loads, eq. 23)" in out
    assert f"T_min (waterline)         {608 / 4800e9 * 1e3:.3e} ms" in out  # 1.267e-07
    assert f"ideal latency N/R         {528 / 989.4e12 * 1e3:.3e} ms" in out  # 5.337e-10
    assert f"mediant intensity         {528 / 608:.4f} ops/byte" in out  # 0.8684
    assert " 0.000 " not in out and " 0.0 " not in out
