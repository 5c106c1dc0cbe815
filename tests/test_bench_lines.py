"""cuda_kernels/bench_lines.py: the summary lines the device scripts print from their measurement files, checked on
committed folders against the lines those calls printed with their own inline code (their log.txt)."""

import json
from pathlib import Path

from cuda_kernels import bench_lines

S12 = Path(__file__).resolve().parents[1] / "examples" / "measurements" / "mbconv" / "s12"


def test_block_and_e2e_lines_of_call3():
    lines = bench_lines.block_lines("V10", S12 / "call3", [])
    log = (S12 / "call3" / "log.txt").read_text()
    assert "V10 accept features.2.1 cuda_kernels_v9=196.7us inductor_default=407.2us" in lines
    assert "V10 accept features.2.1 cuda_kernels_v9=196.7us inductor_default=407.2us" in log
    assert "V10 blocks_auto features.6.1 cuda_kernels_v9=138.6us" in lines
    assert len(lines) == 2 * 12 + 4  # two bench files of 12 blocks, four acceptance blocks
    assert bench_lines.e2e_line("V10", S12 / "call3") == "V10 e2e b0_inductor=3.135ms b0_v10_auto=2.282ms b0_v10_off=2.329ms"


def test_kernel_times_on_request(capsys):
    assert bench_lines.main(["FIN", str(S12 / "call5"), "--kernels", "project,se_v3,expand"]) == 0
    out = capsys.readouterr().out.splitlines()
    want = "FIN blocks_auto features.6.1 cuda_kernels_v9=138.4us | expand_dw_v8_kernel=94.1 se_v3_kernel=28.1 " \
           "project_v10_kernel=54.6"
    assert want in out and want in (S12 / "call5" / "log.txt").read_text()
    assert out[-1] == "FIN e2e b0_inductor=3.136ms b0_v10_auto=2.290ms b0_v10_late=2.323ms"


def test_a_folder_with_one_blocks_file():
    """s13/call5 wrote blocks.json (no suffix); its medians, read from the file by hand: 6.1 138.3 / 114.3 / 107.0 us."""
    lines = bench_lines.block_lines("V10", S12.parent / "s13" / "call5", [])
    assert "V10 blocks features.6.1 cuda_kernels_v9=138.3us cuda_kernels_v10=114.3us inductor_default=107.0us" in lines
    assert len(lines) == 4


def test_the_kernels_of_a_per_kernel_file(tmp_path):
    rows = [{"name": "void mb::expand_dw_v8_kernel<48, 3, 1, 2, true>(mb::Params)", "module": "", "duration_ms": 0.5,
             "count": 1},
            {"name": "void mb::expand_dw_v8_kernel<48, 3, 1, 2, true>(mb::Params)", "module": "", "duration_ms": 0.25,
             "count": 1},
            {"name": "triton_poi_fused_silu_0", "module": "", "duration_ms": 0.1, "count": 1},
            {"name": "void mb::se_v3_kernel(mb::Params, int)", "module": "", "duration_ms": 0.3, "count": 2}]
    (tmp_path / "b0_v11_kernels.json").write_text(json.dumps({"results": {"latency_ms": {"median": 1.2},
                                                                          "kernels": rows}}))
    (tmp_path / "b0_inductor.json").write_text(json.dumps({"results": {"latency_ms": {"median": 3.2}}}))
    assert bench_lines.kernel_lines("T", tmp_path, top=2) == [
        # summed by name: 0.5 + 0.25 ms = 750 us; 0.3 ms; 0.1 ms; total 1150 us
        "T kernels b0_v11_kernels sum=1150us expand_dw_v8_kernel<48,3,1,2,true>=750.0 se_v3_kernel=300.0"]
    assert bench_lines.short_kernel_name("triton_poi_fused_silu_0") == "triton_poi_fused_silu_0"
