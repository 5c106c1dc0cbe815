"""Just-in-time build of the block-fusion extension (``torch.utils.cpp_extension.load``).

The target architectures come from, in order: ``TORCH_CUDA_ARCH_LIST`` (e.g. ``"8.0;9.0"``),
the visible GPU's compute capability, else sm_80 and sm_90. The kernels use only
sm_80 instructions (``mma.sync``, ``ldmatrix``, ``cp.async``), so every target from 8.0 up works.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ["bindings.cpp", "block_fusion_c32.cu", "block_fusion_c64.cu", "block_fusion_c128.cu", "block_fusion_c256.cu"]


def arch_list() -> list[str]:
    """Compute capabilities to build for, as strings like ``"9.0"``."""
    import torch

    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return [a.strip().replace("+PTX", "") for a in env.replace(",", ";").split(";") if a.strip()]
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return [f"{major}.{minor}"]
    return ["8.0", "9.0"]


def gencode_flags(arches: list[str]) -> list[str]:
    flags = []
    for arch in arches:
        major, minor = arch.split(".")
        if int(major) < 8:
            raise ValueError(f"block-fusion kernels need compute capability 8.0 or newer, got {arch}")
        flags.append(f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}")
    return flags


@functools.lru_cache(maxsize=None)
def load_extension(verbose: bool = False):
    """Build (once per process; cached on disk by torch) and import the extension."""
    from torch.utils.cpp_extension import load

    arches = arch_list()
    name = "perfmodel_block_fusion_" + "_".join(a.replace(".", "") for a in arches)
    cuda_flags = ["-O3", "-std=c++17", "-lineinfo", *gencode_flags(arches)]
    if os.environ.get("BLOCK_FUSION_PTXAS_VERBOSE"):
        cuda_flags.append("-Xptxas=-v")
    return load(
        name=name,
        sources=[str(CSRC / s) for s in SOURCES],
        extra_cflags=["-O3"],
        extra_cuda_cflags=cuda_flags,
        extra_include_paths=[str(CSRC)],
        verbose=verbose,
    )
