"""D's L2 eviction priorities (csrc/mbconv_ptx.cuh, MB_D_L2_HINTS; on in the default build since session 36): the
projections on project_v9t_body's cp.async loader read D evict_first, and kernel 1 stores D evict_last where such a
projection follows (CUDA_KERNELS_D_L2_KEEP, read at every launch: since session 37), evict_normal elsewhere. CPU: the build's
name and defines under CUDA_KERNELS_BUILD_D_L2_HINTS (unset / 1: the plain name with the define; 0: its own name
without), and the define guarding exactly D's stores in version 8 and D's loads in the projection."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import _build

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"


@pytest.mark.parametrize("value,name,defined", [(None, "perfmodel_mbconv", True), ("1", "perfmodel_mbconv", True),
                                                ("0", "perfmodel_mbconv_nohints", False)])
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
    assert v8.count("store_d_pair(p.d + dofs") == 2 and v8.count("d_store_policy(p.d_keep_l2)") == 2
    assert v3.count("cp_async16_d(dst + i * 16, src + i * 8, policy)") == 1 and "l2_evict_first()" in v3
    ptx = (CSRC / "mbconv_ptx.cuh").read_text()
    assert "createpolicy.fractional.L2::evict_last.b64" in ptx and "createpolicy.fractional.L2::evict_first.b64" in ptx
    assert "st.global.L2::cache_hint.b32" in ptx and "cp.async.cg.shared.global.L2::cache_hint" in ptx


def test_evict_last_only_where_the_projection_reads_evict_first():
    """The launcher sets Params::d_keep_l2 once per block, from the same choice of projection it then launches."""
    cu = (CSRC / "mbconv.cu").read_text()
    ptx = (CSRC / "mbconv_ptx.cuh").read_text()
    assert "return keep ? l2_evict_last() : l2_evict_normal();" in ptx
    assert "createpolicy.fractional.L2::evict_normal.b64" in ptx
    keep = cu[cu.index("static bool d_keep_l2("):cu.index("cudaError_t launch_se_project_v9(")]
    assert 'std::getenv("CUDA_KERNELS_D_L2_KEEP")' in keep
    assert 'std::strcmp(v, "all") == 0) return true;' in keep and 'std::strcmp(v, "off") == 0) return false;' in keep
    assert "project_v9_choice(p, version) == ProjectV9::v9 &&\n         project_v9_reads_d_by_cp_async(p)" in keep
    assert "#else" in keep and "return false;" in keep.split("#else")[1]  # without the define: never
    # one choice of projection serves the launch and the flag
    assert cu.count("project_wg_applies(") == 1 and "switch (project_v9_choice(p, version))" in cu
    assert "p.d_keep_l2 = d_keep_l2(p, version);" in cu
    v3 = (CSRC / "mbconv_v3.cu").read_text()
    assert "return !project_v9_runs_ring(p) && !project_v9_bulk_requested(); }" in v3
