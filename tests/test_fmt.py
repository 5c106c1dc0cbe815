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


def test_a_batch_that_cannot_fit_in_dram_is_a_warning(tmp_path, capsys):
    from pathlib import Path

    spec = tmp_path / "tiny.yaml"
    spec.write_text(f"model: {Path(__file__).parent / 'data' / 'tiny_net.py'}:build\n"
                    f"input: [3, 32, 32]\nbatch: 1000000000\nhardware: h200-sxm\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["waterline", str(spec), "-o", str(tmp_path / "w.png")])
    out, err = capsys.readouterr()
    assert exc.value.code == 0
    # the stem kernel reads 3x32x32 and writes 16x32x32 fp16 values per image; weights:
    # conv 16x27, folded-batchnorm bias 16, linear 10x16 and its bias 10
    need = 10**9 * 2 * (3 + 16) * 32 * 32 + 2 * (16 * 27 + 16 + 160 + 10)
    assert err.strip() == (f"warning: tiny at batch 1000000000 needs at least "
                           f"{need / 2**30:.0f} GiB of device memory (its weights, and the "
                           f"inputs and outputs of kernel 'stem'), more than the 131.3 GiB of "
                           f"h200-sxm: this batch cannot run as modelled")
    # stem; mean: 16x32x32 in, 16 out; head: 16 in, 10 out (per image, fp16)
    traffic = 10**9 * 2 * ((3 + 16) * 1024 + (16 * 1024 + 16) + (16 + 10))
    assert f"DRAM traffic              {traffic / 1e12:.2f} TB " in out  # 71.76 TB
