"""Every shell script in the repository parses (`bash -n`): the device scripts run only on a lent GPU, where a syntax
error costs a call, so they are checked here, on every machine, before one is sent."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.sh")
                 if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))


def test_the_repository_has_device_scripts():
    assert "cuda_kernels/device_run_v8.sh" in SCRIPTS and "examples/paper_figures.sh" in SCRIPTS


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_parses(script):
    result = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_a_syntax_error_is_caught(tmp_path):
    broken = tmp_path / "broken.sh"
    broken.write_text("if true; then\n  echo unclosed\n")  # no `fi`
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True).returncode != 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_b0_runs_names_each_variant(tmp_path):
    """device_lib.sh's b0_runs: each variant's file tag (the switch without CUDA_KERNELS_ / K1_, _VALUE unless 1, a
    variant of several switches joined by '+'), runs a and b interleaved, and "default" under the off settings."""
    script = f"""source {ROOT / 'cuda_kernels' / 'device_lib.sh'}
step() {{ echo "$1|${{@:3}}"; }}
B0_FUSED=(bench)
b0_runs D "A=0 B=4" default CUDA_KERNELS_K1_IMAGES=2 CUDA_KERNELS_SE_V5=1 "CUDA_KERNELS_X=1 CUDA_KERNELS_Y=8"
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[:4] == ["e2e_default_a|env A=0 B=4 bench -o D/b0_default_a.json",
                       "e2e_IMAGES_2_a|env CUDA_KERNELS_K1_IMAGES=2 bench -o D/b0_IMAGES_2_a.json",
                       "e2e_SE_V5_a|env CUDA_KERNELS_SE_V5=1 bench -o D/b0_SE_V5_a.json",
                       "e2e_X+Y_8_a|env CUDA_KERNELS_X=1 CUDA_KERNELS_Y=8 bench -o D/b0_X+Y_8_a.json"]
    assert len(out) == 8 and out[4].startswith("e2e_default_b|")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_proj_ncu_names_its_files_after_the_variant(tmp_path):
    """device_lib.sh's proj_ncu: the step and CSV named after the variant ('=' -> '-', ' ' -> '_'), every switch of the
    variant in the profiled command's environment, the blocks passed to both the profile and ncu_lines."""
    script = f"""source {ROOT / 'cuda_kernels' / 'device_lib.sh'}
step() {{ echo "$1|${{@:3}}"; }}
python3() {{ echo "lines|$*"; }}
log={tmp_path}/log.txt; ok=1
proj_ncu D "CUDA_KERNELS_A=1 CUDA_KERNELS_B=9" features.2.1 features.5.1
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    name, command = out[0].split("|")
    assert name == "ncu_CUDA_KERNELS_A-1_CUDA_KERNELS_B-9"
    assert command.startswith("env CUDA_KERNELS_A=1 CUDA_KERNELS_B=9 ncu --clock-control none --cache-control all ")
    assert command.endswith("--log-file D/proj_CUDA_KERNELS_A-1_CUDA_KERNELS_B-9.csv python3 -m "
                            "cuda_kernels.mbconv_profile features.2.1 features.5.1")
    assert out[1] == ("lines|-m cuda_kernels.ncu_lines PROJ CUDA_KERNELS_A-1_CUDA_KERNELS_B-9 "
                      "D/proj_CUDA_KERNELS_A-1_CUDA_KERNELS_B-9.csv project features.2.1 features.5.1")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_kernel_ncu_names_its_csv_after_the_label(tmp_path):
    """device_lib.sh's kernel_ncu: the label in lower case before the variant's tag in the CSV's name, the regex given
    to both Nsight Compute and ncu_lines."""
    script = f"""source {ROOT / 'cuda_kernels' / 'device_lib.sh'}
step() {{ echo "$1|${{@:3}}"; }}
python3() {{ echo "lines|$*"; }}
log={tmp_path}/log.txt; ok=1
kernel_ncu D K1 expand_dw CUDA_KERNELS_K1_DH2=1 features.2.1
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    name, command = out[0].split("|")
    assert name == "ncu_CUDA_KERNELS_K1_DH2-1" and " -k regex:expand_dw " in command
    assert command.endswith("--log-file D/k1_CUDA_KERNELS_K1_DH2-1.csv python3 -m cuda_kernels.mbconv_profile "
                            "features.2.1")
    assert out[1] == ("lines|-m cuda_kernels.ncu_lines K1 CUDA_KERNELS_K1_DH2-1 D/k1_CUDA_KERNELS_K1_DH2-1.csv "
                      "expand_dw features.2.1")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_kernel_ncu_takes_the_cache_mode_and_metrics(tmp_path):
    """device_lib.sh's kernel_ncu: NCU_CACHE=none keeps L2 between kernels (what a kernel leaves there for the next is
    then seen), NCU_METRICS replaces the default metric list; unset, L2 is flushed and PROJ_METRICS are asked."""
    script = f"""source {ROOT / 'cuda_kernels' / 'device_lib.sh'}
step() {{ echo "$1|${{@:3}}"; }}
python3() {{ :; }}
log={tmp_path}/log.txt; ok=1
kernel_ncu D PROJ project CUDA_KERNELS_A=1 features.2.1
NCU_CACHE=none NCU_METRICS=dram__bytes_read.sum kernel_ncu D PROJ project CUDA_KERNELS_A=1 features.2.1
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    assert "--cache-control all " in out[0] and "--metrics gpu__time_duration.sum,launch__grid_size," in out[0]
    assert "--cache-control none " in out[1] and "--metrics dram__bytes_read.sum --csv" in out[1]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_file_share_lets_the_first_files_finish():
    """device_lib.sh's file_share: the time left less 20 s for each later file, but at least 90 s (FILE_MIN_S) or all
    that is left."""
    script = f"""source {ROOT / 'cuda_kernels' / 'device_lib.sh'}
file_share 560 5; file_share 256 12; file_share 60 3; FILE_MIN_S=30 file_share 256 12
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(560 - 20 * 4), "90", "60", "36"]
