"""D's L2 eviction priorities (csrc/mbconv_ptx.cuh, MB_D_L2_HINTS; the default build in session 36, off since session
37: B2 +2.3%): kernel 1 stores D evict_last and the projections on project_v9t_body's cp.async loader read it
evict_first. CPU: the build's name and defines under CUDA_KERNELS_BUILD_D_L2_HINTS (unset / 0: the plain name without
the define; 1: its own name with it), and the define guarding exactly D's stores in version 8 and D's loads in the
projection."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import _build

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


@pytest.mark.parametrize("value,name,defined", [(None, "perfmodel_mbconv", False), ("0", "perfmodel_mbconv", False),
                                                ("1", "perfmodel_mbconv_l2hints", True)])
def test_the_build_switch(value, name, defined, monkeypatch):
    calls = []
    monkeypatch.setattr(_build, "_load", lambda *args: calls.append(args))
    monkeypatch.setattr("cuda_kernels.static_shapes.requested_models", lambda: [])
    if value is None:
        monkeypatch.delenv(_build.D_L2_HINTS_SWITCH, raising=False)
    else:
        monkeypatch.setenv(_build.D_L2_HINTS_SWITCH, value)
    _build.load_mbconv_extension.__wrapped__()
    (prefix, sources, _, defines), = calls
    assert prefix == name and ("MB_D_L2_HINTS" in defines) == defined and "mbconv_v3.cu" in sources


def test_the_define_guards_d_only():
    v8 = (CSRC / "mbconv_v8.cuh").read_text()
    v3 = (CSRC / "mbconv_v3.cu").read_text()
    assert v8.count("store_d_pair(p.d + dofs") == 2 and v8.count("l2_evict_last()") == 2
    assert v3.count("cp_async16_d(dst + i * 16, src + i * 8, policy)") == 1 and "l2_evict_first()" in v3
    ptx = (CSRC / "mbconv_ptx.cuh").read_text()
    assert "createpolicy.fractional.L2::evict_last.b64" in ptx and "createpolicy.fractional.L2::evict_first.b64" in ptx
    assert "st.global.L2::cache_hint.b32" in ptx and "cp.async.cg.shared.global.L2::cache_hint" in ptx
