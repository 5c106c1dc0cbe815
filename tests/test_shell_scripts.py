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
