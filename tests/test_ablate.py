"""The ablation switch (csrc/mbconv.cu `ablated`, CUDA_KERNELS_ABLATE: a diagnostic) and the driver that times B0
under several switch settings in one process (cuda_kernels/b0_switches.py, `--ablation`): skipping kernel 1, the SE or
the projection of versions 9-11 so that a timed network shows what each part costs on its critical path.

CPU: the switch guards exactly the three launch points, its token parsing (compiled with the host compiler from the
source itself), the driver's variant parsing and its refusal to start with the switch already set. GPU
(@pytest.mark.cuda): with each value, the profiler shows only the parts left, and with the switch unset the block's
output is the default's bit for bit."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import b0_switches
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
LAUNCHER = (CSRC / "mbconv.cu").read_text()


def test_the_switch_guards_the_three_parts():
    assert 'const char* v = std::getenv("CUDA_KERNELS_ABLATE");' in LAUNCHER
    assert b0_switches.ABLATE == "CUDA_KERNELS_ABLATE"
    assert len(re.findall(r'ablated\("kernel1"\)', LAUNCHER)) == 2  # version 9-11's kernel 1 and the stem + 1.0 kernel
    assert 'if (v9 && ablated("kernel1")) return launch_se_project_v9(p, version, stream, pdl);' in LAUNCHER
    assert 'ablated("kernel1") ? cudaSuccess : launch_stem_dw(p, s, stream, pdl)' in LAUNCHER
    assert 'cudaError_t err = ablated("se")                            ? cudaSuccess' in LAUNCHER
    assert 'if (ablated("project")) return cudaSuccess;' in LAUNCHER


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_token_parsing(tmp_path):
    """The function itself, cut from the source and compiled on the host: whole comma-separated tokens only."""
    body = LAUNCHER[LAUNCHER.index("static bool ablated(const char* part) {"):]
    body = body[:body.index("\n}\n") + 3]
    program = tmp_path / "ablated.cpp"
    program.write_text("#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n" + body + r"""
int main(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) std::printf("%d", ablated(argv[i]) ? 1 : 0);
  return 0;
}
""")
    subprocess.run(["g++", "-std=c++17", "-O1", str(program), "-o", str(tmp_path / "a")], check=True)

    def flags(value):
        env = {} if value is None else {"CUDA_KERNELS_ABLATE": value}
        out = subprocess.run([str(tmp_path / "a"), "x", "kernel1", "se", "project"], env=env, capture_output=True,
                             text=True, check=True)
        return out.stdout

    assert flags(None) == "000" and flags("") == "000"
    assert flags("se") == "010" and flags("project") == "001" and flags("kernel1") == "100"
    assert flags("se,project") == "011" and flags("project,kernel1,se") == "111"
    assert flags("sex") == "000" and flags("xse,project1") == "000" and flags("kernel") == "000"


def test_the_driver_refuses_a_preset_switch(monkeypatch):
    monkeypatch.setenv("CUDA_KERNELS_ABLATE", "se")
    with pytest.raises(SystemExit) as exc:
        b0_switches.main(["--ablation", "--runs", "1"])
    assert exc.value.code == 2


def test_the_drivers_variants():
    got = b0_switches.parse_variant("CUDA_KERNELS_A=1 CUDA_KERNELS_B=8")
    assert got == {"CUDA_KERNELS_A": "1", "CUDA_KERNELS_B": "8"}
    assert b0_switches.label({}) == "as is" and b0_switches.label({"CUDA_KERNELS_A": "1"}) == "CUDA_KERNELS_A=1"
    for bad in ("CUDA_KERNELS_A", "PATH=/x", "CUDA_KERNELS_A=1 B=2"):
        with pytest.raises(ValueError):
            b0_switches.parse_variant(bad)
    with pytest.raises(SystemExit) as exc:  # a bad variant is a usage error before anything is built
        b0_switches.main(["PATH=/x"])
    assert exc.value.code == 2


# ---- GPU ----

@pytest.mark.cuda
@pytest.mark.parametrize("path", ["features.2.1", "features.6.1"])
@pytest.mark.parametrize("value,present,absent", [
    ("se", ["expand_dw", "project"], ["se_v"]),
    ("project", ["expand_dw", "se_v"], ["project"]),
    ("kernel1", ["se_v", "project"], ["expand_dw"]),
    ("se,project", ["expand_dw"], ["se_v", "project"]),
])
def test_each_value_skips_its_parts(path, value, present, absent, monkeypatch):
    from torch.profiler import ProfilerActivity, profile

    from mbconv_helpers import b0_prepared

    params, weights, x = b0_prepared(path, 8)
    base = mb.mbconv(x, params, weights, version=11)
    monkeypatch.setenv("CUDA_KERNELS_ABLATE", value)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        mb.mbconv(x, params, weights, version=11)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events())
    assert all(k in names for k in present) and not any(k in names for k in absent), names[:600]
    monkeypatch.delenv("CUDA_KERNELS_ABLATE")
    assert torch.equal(mb.mbconv(x, params, weights, version=11), base)


def test_the_driver_captures_each_variant_under_its_settings(monkeypatch, tmp_path, capsys):
    """b0_switches.main with the GPU parts replaced: each variant's capture sees its settings (and only it), the
    environment is as started after each capture, the timings come back per variant in order, and the file says what
    was run."""
    import contextlib
    import json

    import perfmodel.bench
    import perfmodel.harness as harness

    monkeypatch.delenv("CUDA_KERNELS_ABLATE", raising=False)
    monkeypatch.setenv("CUDA_KERNELS_X", "0")  # set as the process starts: restored after the variant that changes it
    monkeypatch.delenv("CUDA_KERNELS_Y", raising=False)
    seen, captures = [], []

    class Graph:
        def __init__(self):
            self.env = None

        def replay(self):
            seen.append(self.env)

    @contextlib.contextmanager
    def graph(g):
        g.env = tuple(os.environ.get(f"CUDA_KERNELS_{n}") for n in ("X", "Y", "ABLATE"))
        captures.append(g.env)
        yield

    class Timer:
        def __init__(self, warmup, repeats):
            pass

        def describe(self):
            return {"timer": "fake"}

        def __call__(self, fn):
            fn()
            return {"median": 1.0 + 0.001 * len(seen)}

    monkeypatch.setattr(harness, "require_cuda", lambda: None)
    monkeypatch.setattr(harness, "build_cuda_model", lambda spec: torch.nn.Identity())
    monkeypatch.setattr(harness, "example_input", lambda meta: torch.zeros(1))
    monkeypatch.setattr(harness, "compiled_runner", lambda model, mode, freezing: model)
    monkeypatch.setattr(harness, "Timer", Timer)
    monkeypatch.setattr(harness, "environment", lambda: {"gpu": "fake"})
    monkeypatch.setattr(perfmodel.bench, "fused_model", lambda model, inputs: (model, {"fused_blocks": {}}))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    out = tmp_path / "s.json"
    assert b0_switches.main(["CUDA_KERNELS_X=1", "CUDA_KERNELS_X=1 CUDA_KERNELS_Y=8", "--ablation", "--runs", "2",
                             "-o", str(out)]) == 0
    assert captures == [("0", None, None), ("1", None, None), ("1", "8", None), ("0", None, "se"),
                        ("0", None, "project"), ("0", None, "kernel1"), ("0", None, "se,project")]
    assert os.environ["CUDA_KERNELS_X"] == "0" and "CUDA_KERNELS_Y" not in os.environ
    assert "CUDA_KERNELS_ABLATE" not in os.environ
    assert seen == captures * 2  # two runs, the variants interleaved
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("SWITCHES ")]
    assert lines[0].startswith("SWITCHES as is: median 1.001 / 1.008 ms") and "+1.0 us against as is" in lines[1]
    record = json.loads(out.read_text())
    assert [r["variant"] for r in record["results"]][:3] == ["as is", "CUDA_KERNELS_X=1",
                                                             "CUDA_KERNELS_X=1 CUDA_KERNELS_Y=8"]
    assert record["results"][6]["settings"] == {"CUDA_KERNELS_ABLATE": "se,project"} and record["method"]["runs"] == 2
