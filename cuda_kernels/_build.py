"""Just-in-time build of the block-fusion extension (``torch.utils.cpp_extension.load``).

The target architectures come from, in order: ``TORCH_CUDA_ARCH_LIST`` (e.g. ``"8.0;9.0"``),
the visible GPU's compute capability, else sm_80 and sm_90. The mma.sync kernels use only
sm_80 instructions (``mma.sync``, ``ldmatrix``, ``cp.async``), so every target from 8.0 up works;
9.0 is built as sm_90a, which adds the warpgroup-MMA FFN kernel (``wgmma``, ``setmaxnreg``;
csrc/ffn_sm90.cu) and runs on the H100 and H200 only.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from cuda_kernels._switches import flag

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ["bindings.cpp", "block_fusion_c32.cu", "block_fusion_c64.cu", "block_fusion_c128.cu", "block_fusion_c256.cu",
           "block_fusion_c96.cu", "block_fusion_c192.cu", "ffn_sm90.cu"]
MBCONV_SOURCES = ["mbconv_bindings.cpp", "mbconv.cu", "mbconv_k3.cu", "mbconv_k5.cu", "mbconv_v2_k3.cu",
                  "mbconv_v2_k5.cu", "mbconv_v3.cu", "mbconv_v3_k3.cu", "mbconv_v3_k5.cu", "mbconv_v5_k3.cu", "mbconv_v5_k5.cu",
                  "mbconv_v7.cu", "mbconv_v7_k3.cu", "mbconv_v7_k5.cu", "mbconv_v8_k3.cu", "mbconv_v8_k5.cu",
                  "mbconv_proj_wg.cu", "mbconv_se_v4.cu", "mbconv_se_v5.cu", "effnet_stem_dw.cu"]


def arch_list() -> list[str]:
    """Compute capabilities to build for, as strings like ``"9.0"``."""
    import torch

    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        # "9.0a" (the arch-specific Hopper target) is built as 9.0 is: sm_90a, see gencode_flags
        return [a.strip().replace("+PTX", "").rstrip("a") for a in env.replace(",", ";").split(";") if a.strip()]
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
        suffix = "a" if (major, minor) == ("9", "0") else ""  # wgmma needs the arch-specific target
        flags.append(f"-gencode=arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}")
    return flags


def _load(prefix: str, sources: tuple[str, ...], verbose: bool, defines: tuple[str, ...] = (),
          includes: tuple[str, ...] = ()):
    """Build (cached on disk by torch, per name) and import one extension from csrc/ sources; `defines` (-D) and
    `includes` (-I, searched after csrc/) for the CUDA sources."""
    from torch.utils.cpp_extension import load

    arches = arch_list()
    name = prefix + "_" + "_".join(a.replace(".", "") for a in arches)
    cuda_flags = ["-O3", "-std=c++17", "-lineinfo", *gencode_flags(arches), *(f"-D{d}" for d in defines)]
    cflags = ["-O3"]
    if "9.0" in arches:  # the bindings' and the launchers' (mbconv_v8.cuh sm90a_build) word that wgmma is built
        cflags.append("-DBF_SM90A")
        cuda_flags.append("-DBF_SM90A")
    if os.environ.get("BLOCK_FUSION_PTXAS_VERBOSE"):
        cuda_flags.append("-Xptxas=-v")
    return load(
        name=name,
        sources=[str(CSRC / s) for s in sources],
        extra_cflags=cflags,
        extra_cuda_cflags=cuda_flags,
        extra_include_paths=[str(CSRC), *includes],
        verbose=verbose,
    )


@functools.lru_cache(maxsize=None)
def load_extension(verbose: bool = False):
    """Build (once per process; cached on disk by torch) and import the extension."""
    return _load("perfmodel_block_fusion", tuple(SOURCES), verbose)


D_L2_HINTS_SWITCH = "CUDA_KERNELS_BUILD_D_L2_HINTS"


@functools.lru_cache(maxsize=None)
def load_mbconv_extension(verbose: bool = False):
    """The fused MBConv kernels (csrc/mbconv*), a separate extension: a build error there
    leaves the FFN/ConvFirst extension untouched."""
    from cuda_kernels import static_shapes

    models = static_shapes.requested_models()
    # D's L2 eviction priorities (csrc/mbconv_ptx.cuh, MB_D_L2_HINTS): kernel 1 stores D evict_last and the
    # projections on project_v9t_body's cp.async loader read it evict_first. CUDA_KERNELS_BUILD_D_L2_HINTS=1 builds
    # them, under their own name; off by default: B0 -4.5 us (s36 call 3), but B2 +85 us, +2.3% (s37 call 2)
    hints = flag(D_L2_HINTS_SWITCH, False)
    name, defines = ("perfmodel_mbconv_l2hints", ("MB_D_L2_HINTS",)) if hints else ("perfmodel_mbconv", ())
    if not models:
        return _load(name, tuple(MBCONV_SOURCES), verbose, defines)
    tag, folder = static_header(models)
    return _load(f"{name}_s{tag}", tuple(MBCONV_SOURCES), verbose, ("MB_V8_STATIC_MORE", *defines), (str(folder),))


def static_header(models: list[str]) -> tuple[str, Path]:
    """Write kernel 1's static entries for `models` that the source's table lacks (static_shapes.more_entries) as
    mbconv_v8_static_more.h in a folder named by their hash under the extensions' build root: (hash, folder). The
    hash names the build too, so that each table has its own."""
    import hashlib

    from torch.utils.cpp_extension import get_default_build_root

    from cuda_kernels import static_shapes

    text = static_shapes.header(static_shapes.more_entries(models, static_shapes.listed_entries()))
    tag = hashlib.sha1(text.encode()).hexdigest()[:10]
    folder = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()) / f"perfmodel_static_{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mbconv_v8_static_more.h").write_text(text)
    return tag, folder


CONVFIRST_S2_SOURCES = ["convfirst_s2_bindings.cpp", "convfirst_s2.cu"]


@functools.lru_cache(maxsize=None)
def load_convfirst_s2_extension(verbose: bool = False):
    """The fused stride-2 ConvFirst kernel (csrc/convfirst_s2*), a separate extension: a build
    error there leaves the FFN/ConvFirst extension untouched."""
    return _load("perfmodel_convfirst_s2", tuple(CONVFIRST_S2_SOURCES), verbose)


CONVFIRST_C512_SOURCES = ["convfirst_c512_bindings.cpp", "convfirst_c512.cu", "convfirst_s2_wide.cu"]


@functools.lru_cache(maxsize=None)
def load_convfirst_c512_extension(verbose: bool = False):
    """The fused C = 512 ConvFirst kernel on wgmma (csrc/convfirst_c512*, sm_90a) and the
    stride-2 256 -> 512 block (csrc/convfirst_s2_wide.cu), a separate extension: a build error
    there leaves the other extensions untouched."""
    return _load("perfmodel_convfirst_c512", tuple(CONVFIRST_C512_SOURCES), verbose)


CONVFIRST_C768_SOURCES = ["convfirst_c768_bindings.cpp", "convfirst_c768.cu", "convfirst_s2_c768.cu"]


@functools.lru_cache(maxsize=None)
def load_convfirst_c768_extension(verbose: bool = False):
    """ConvFirstNet-L's C = 768 kernels (csrc/convfirst_c768.cu: stride 1 on wgmma, sm_90a, two-CTA
    clusters; csrc/convfirst_s2_c768.cu: the stride-2 block 384 -> 768), a separate extension: a build
    error there leaves the other extensions untouched."""
    return _load("perfmodel_convfirst_c768", tuple(CONVFIRST_C768_SOURCES), verbose)


CONVFIRST_S2_WGMMA_SOURCES = ["convfirst_s2_wgmma_bindings.cpp", "convfirst_s2_wgmma.cu"]


@functools.lru_cache(maxsize=None)
def load_convfirst_s2_wgmma_extension(verbose: bool = False):
    """The stride-2 ConvFirst kernel on wgmma (csrc/convfirst_s2_wgmma*, sm_90a; C_in -> 2 C_in for C_in 64,
    128, 256), a separate extension: a build error there leaves the other extensions untouched. Off by default
    (convfirst_s2_wgmma.SWITCH)."""
    return _load("perfmodel_convfirst_s2_wgmma", tuple(CONVFIRST_S2_WGMMA_SOURCES), verbose)
