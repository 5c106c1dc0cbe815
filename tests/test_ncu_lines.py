"""cuda_kernels/ncu_lines.py: the summary lines the device scripts print from an Nsight Compute CSV, checked on a
committed file against the lines session 12's first call printed with its own parser (its log.txt)."""

from pathlib import Path

from cuda_kernels import ncu_lines

ROOT = Path(__file__).resolve().parents[1]
CALL1 = ROOT / "examples" / "measurements" / "mbconv" / "s12" / "call1"
BLOCKS = ["features.1.0", "features.2.0", "features.2.1", "features.3.0", "features.3.1", "features.4.0",
          "features.4.1", "features.4.2", "features.5.0", "features.5.1", "features.5.2", "features.6.0",
          "features.6.1", "features.6.2", "features.6.3", "features.7.0"]


def test_second_runs_per_block():
    runs = ncu_lines.second_launches(CALL1 / "kernels_v9.csv", "", len(BLOCKS))
    assert len(runs) == 16 and all(len(r) == 3 for r in runs)  # kernel 1, SE, projection
    # features.2.1's second run, as the call's log printed it: 125.9, 6.4 and 72.3 us
    k1, se, proj = runs[2]
    assert "expand_dw_v8_kernel<48, 3, 1>" in k1["Kernel Name"] and "se_v3" in se["Kernel Name"]
    assert [round(ncu_lines.value(r, "gpu__time_duration.sum") / 1e3, 1) for r in runs[2]] == [125.9, 6.4, 72.3]


def test_summary_lines(capsys):
    assert ncu_lines.main(["K", str(CALL1 / "kernels_v9.csv"), "project", *BLOCKS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 16
    log = (CALL1 / "log.txt").read_text()
    assert "K features.6.1 void project_v3_kernel<64> 65.4us grid 147" in log
    assert lines[12].startswith("K features.6.1 project_v3_kernel<64> 65.4us grid 147 read 17.9MB")
    assert "dram 6% warps 7% issue 14% tensor 7% inst 7.9M" in lines[12]


def test_a_missing_file_is_said_not_raised(capsys, tmp_path):
    assert ncu_lines.main(["K", str(tmp_path / "none.csv"), "x", "features.1.0"]) == 0
    assert "no file" in capsys.readouterr().out
    assert ncu_lines.main(["K"]) == 2


def test_units_other_than_base_are_converted(capsys, tmp_path):
    """A file written without --print-units base (device_run_ncu_mbconv_k1.sh's raw page) gives microseconds and
    megabytes: 2.0's kernel 1 of session 17's call 1 read 192.352 us and 56.55936 Mbyte."""
    rows = ['"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","launch__grid_size"',
            '"","","us","Mbyte",""']
    for i, (t, b) in enumerate([("190.0", "50.0"), ("192.352000", "56.559360")]):
        rows.append(f'"{i}","void mb::expand_dw_v8_kernel<48, 3, 2, 1, true>(mb::Params)","{t}","{b}","264"')
    (tmp_path / "raw.csv").write_text("\n".join(rows) + "\n")
    [[row]] = ncu_lines.second_launches(tmp_path / "raw.csv", "expand_dw", 1)
    assert ncu_lines.value(row, "gpu__time_duration.sum") == 192_352.0
    assert ncu_lines.value(row, "dram__bytes_read.sum") == 56_559_360.0
    assert ncu_lines.main(["S2", str(tmp_path / "raw.csv"), "expand_dw", "features.2.0"]) == 0
    assert "S2 features.2.0 expand_dw_v8_kernel<48, 3, 2, 1, true> 192.4us grid 264 read 56.6MB" in capsys.readouterr().out
