"""cuda_kernels/mbconv_coresident.py (the co-residency premise probe) and the kernel-1 CTA cap it sets
(CUDA_KERNELS_K1_CTAS, csrc/mbconv_v8.cuh): CPU checks; the probe itself runs on a GPU only."""
import os
import re
from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv_coresident as cores

V8 = (Path(cuda_kernels.__file__).resolve().parent / "csrc" / "mbconv_v8.cuh").read_text()


def test_switches_set_unset_and_restore(monkeypatch):
    monkeypatch.setenv(cores.CTAS, "1")
    monkeypatch.delenv(cores.ABLATE, raising=False)
    with cores.switches(**{cores.ABLATE: "se,project", cores.CTAS: None}):
        assert os.environ[cores.ABLATE] == "se,project" and cores.CTAS not in os.environ
    assert os.environ[cores.CTAS] == "1" and cores.ABLATE not in os.environ
    with pytest.raises(RuntimeError), cores.switches(**{cores.CTAS: "2"}):
        raise RuntimeError  # restored on the way out of an error too
    assert os.environ[cores.CTAS] == "1"


def test_refuses_to_start_with_a_switch_already_set(monkeypatch, capsys):
    monkeypatch.setenv(cores.ABLATE, "se")
    with pytest.raises(SystemExit) as exc:
        cores.main(["--block", "features.4.1", "-o", "x.json"])
    assert exc.value.code == 2 and cores.ABLATE in capsys.readouterr().err


def test_the_cap_changes_only_kernel_1s_grid():
    """The switch is read in one place, and that place is the v8 launcher's grid: the kernels are the same."""
    assert V8.count('std::getenv("CUDA_KERNELS_K1_CTAS")') == 1
    grids = re.findall(r"const int grid = .*;", V8)
    assert grids == ["const int grid = (int)std::min<long long>(total, kernel1_v8_ctas_per_sm(last_ctas[dev]) * sms[dev]);"]
    assert V8.count("kernel1_v8_ctas_per_sm(") == 2  # its definition and the grid


def test_the_variants_cover_both_occupancies_and_both_parts():
    names = set(cores.variants(lambda: None, [None, None]))
    assert names == {"block", "kernel 1", "kernel 1, one CTA an SM", "projection", "both",
                     "both, kernel 1 at one CTA an SM"}
