"""The MBConv extension on GPUs older than Hopper: the sm_90-only wrappers (csrc/ptx_sm90.cuh) compile for sm_80
(where they trap, and the launcher refuses a device older than 9.0 before a launch), and the operator runs
FALLBACK_VERSION there instead of a version that needs bulk copies, with a warning."""

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import cuda_kernels
from cuda_kernels import mbconv as mb

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


def test_sm90_versions_mirror_the_launcher():
    cu = (CSRC / "mbconv.cu").read_text()
    expr = re.search(r"constexpr bool version_needs_sm90\(int version\) \{ return (.*?); \}", cu).group(1)
    needs = [v for v in range(1, 12) if eval(expr.replace("&&", " and ").replace("||", " or "), {"version": v})]
    assert needs == [6, 8, 9, 10, 11] == list(mb.SM90_VERSIONS)
    assert mb.FALLBACK_VERSION == 3 and mb.FALLBACK_VERSION not in mb.SM90_VERSIONS
    assert "if (!sm90) return cudaErrorNotSupported;" in cu
    assert "needs compute capability 9.0 or newer" in (CSRC / "mbconv_bindings.cpp").read_text()


@pytest.mark.parametrize("capability,version,expected", [
    ((8, 0), 11, 3), ((8, 6), 8, 3), ((8, 0), 6, 3),  # bulk copies: version 3 on an A100 / RTX 30x0
    ((8, 0), 7, 7), ((8, 0), 3, 3), ((8, 0), 2, 2),   # mma.sync and cp.async only: as asked
    ((9, 0), 11, 11), ((10, 0), 10, 10),              # Hopper and newer: as asked
])
def test_runnable_version(capability, version, expected, monkeypatch):
    monkeypatch.setattr(mb, "_capability", lambda index: capability)
    mb._warn_fallback.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert mb.runnable_version(version, torch.device("cuda", 0)) == expected
    fell_back = [w for w in caught if "needs compute capability 9.0" in str(w.message)]
    assert len(fell_back) == (expected != version)
    if fell_back:
        assert f"version {version} needs" in str(fell_back[0].message) and "version 3 runs instead" in str(
            fell_back[0].message)


def test_the_warning_is_given_once(monkeypatch):
    monkeypatch.setattr(mb, "_capability", lambda index: (8, 0))
    mb._warn_fallback.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            mb.runnable_version(11, torch.device("cuda", 0))
    assert len(caught) == 1


def test_cpu_tensors_keep_their_version():
    assert mb.runnable_version(11, torch.device("cpu")) == 11  # check_input refuses them before a launch


@pytest.mark.parametrize("source", ["mbconv_v8_k3.cu", "mbconv_v3.cu", "mbconv_se_v4.cu", "mbconv_se_v5.cu"])
def test_sm90_kernels_compile_for_sm80(source):
    """Before the guards, ptxas refused these for sm_80 ("cp.async.bulk requires .target sm_90"), so the MBConv
    extension could not be built for an A100, nor with the default targets (sm_80 and sm_90) on a machine without
    a GPU."""
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    from torch.utils.cpp_extension import include_paths

    cmd = [str(nvcc), "-std=c++17", "-O3", "-gencode=arch=compute_80,code=sm_80", f"-I{CSRC}",
           *[f"-I{p}" for p in include_paths()], "-cubin", str(CSRC / source), "-o", "/dev/null"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.cuda
def test_hopper_runs_the_version_asked():
    """On the H200 (compute capability 9.0) every version runs as asked, without the warning."""
    mb._capability.cache_clear()
    mb._warn_fallback.cache_clear()
    device = torch.device("cuda", torch.cuda.current_device())
    assert mb._capability(device.index) >= (9, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [mb.runnable_version(v, device) for v in mb.VERSIONS] == list(mb.VERSIONS)


@pytest.mark.parametrize("source", ["probe_stream.cu", "probe_clusters.cu", "probe_wg_timeline.cu", "probe_pipes.cu"])
def test_the_standalone_probes_build(source, tmp_path):
    """The device probes (how many clusters fit; the projections' read pattern; the wgmma projection's steps timed) are
    programs built with nvcc alone on the GPU machine: they must compile and link against the CUDA runtime with the
    repository's headers."""
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip("nvcc not found (set CUDA_HOME)")
    probe = CSRC.parent / "probes" / source  # not extension sources: cuda_kernels/probes/, the headers from csrc/
    cmd = [str(nvcc), "-std=c++17", "-O3", "-arch=sm_90a", f"-I{CSRC}", str(probe), "-o", str(tmp_path / "p")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def test_ptxas_puts_hfma2_on_the_mma_pipe_only_without_tensor_instructions(tmp_path):
    """The probes' premise (NOTES.md, session 39): ptxas splits independent fp16x2 FMAs between HFMA2 and HFMA2.MMA,
    except in a kernel that holds a tensor-core instruction, where every one is plain HFMA2 - as in kernel 1 - unless
    they sit in a separately compiled (-rdc) function without one."""
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    cuobjdump = shutil.which("cuobjdump") or next(
        (str(p) for p in Path(sys.prefix).glob("lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump")), None)
    if not nvcc.exists() or cuobjdump is None:
        pytest.skip("nvcc or cuobjdump not found")
    cubin = tmp_path / "p.cubin"
    cmd = [str(nvcc), "-std=c++17", "-O3", "-arch=sm_90a", "-cubin", str(CSRC.parent / "probes" / "probe_pipes.cu"),
           "-o", str(cubin)]
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=600).returncode == 0
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    kernels = dict(re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S))
    split, plain = kernels["_Z11pipe_kernelIL2Op1EEvjPxPj"], kernels["_Z11pipe_kernelIL2Op2EEvjPxPj"]
    assert "HMMA" not in split and split.count("HFMA2.MMA ") >= 32  # 128 chain FMAs a loop body, about half of them
    assert "HMMA" in plain and "HFMA2.MMA " not in plain and plain.count("HFMA2 ") == 128
    # probe_dw_rdc: under -rdc=true the __noinline__ unit function gets the split though its caller holds the HMMA,
    # while the inline form (kernel 1's) keeps all 200 HFMA2 of the unit plain
    obj = tmp_path / "r.o"
    cmd = [str(nvcc), "-std=c++17", "-O3", "-arch=sm_90a", "-rdc=true", "-c",
           str(CSRC.parent / "probes" / "probe_dw_rdc.cu"), "-o", str(obj)]
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=600).returncode == 0
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, timeout=120).stdout
    kernels = dict(re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S))
    inline = kernels["_Z9dw_kernelIL4Form0EEvPK7__half2PxPj"]
    callees = [body for name, body in kernels.items() if re.match(r"_Z\d+units_call", name)]
    assert "HMMA" in inline and "HFMA2.MMA " not in inline and inline.count("HFMA2 ") == 200
    assert len(callees) >= 2 and all(body.count("HFMA2.MMA ") >= 80 and "HMMA" not in body for body in callees)


def test_the_timeline_hooks_are_empty_in_the_extension():
    """probe_wg_timeline defines MB_WG_STAMP before it includes the projection's source; the extension does not, and
    then every hook must expand to nothing (the extension's code is the same with or without them)."""
    source = (CSRC / "mbconv_proj_wg.cu").read_text()
    assert "#ifndef MB_WG_STAMP\n#define MB_WG_STAMP(slot)\n#endif" in source
    assert re.findall(r"MB_WG_STAMP\(([^)]*)\);", source) == ["0", "1 + i", "14", "15"]  # the slots the probe reads
    probe = (CSRC.parent / "probes" / "probe_wg_timeline.cu").read_text()
    assert probe.index("#define MB_WG_STAMP(slot) mb_wg_stamp(slot)") < probe.index('#include "../csrc/mbconv_proj_wg.cu"')
    assert "MB_WG_STAMP" not in "".join((CSRC / name).read_text() for name in ("mbconv.cu", "mbconv_bindings.cpp"))
