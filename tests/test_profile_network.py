"""cuda_kernels/device_run_ncu.sh and profile_network.py: Nsight Compute on the fused networks' kernels
in place. CPU: the script's kernel filter catches every kernel the extensions define (a kernel it
missed would silently drop out of the profile), and the profiler entry point parses its arguments."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cuda_kernels" / "device_run_ncu.sh"


def kernel_names() -> set[str]:
    """Every __global__ function of cuda_kernels/csrc (the name after __global__ and its attributes)."""
    names = set()
    for path in sorted((ROOT / "cuda_kernels" / "csrc").glob("*.cu*")):
        text = path.read_text()
        for match in re.finditer(r"__global__", text):
            head = text[match.end():match.end() + 300]
            call = re.search(r"([A-Za-z_][A-Za-z_0-9]*)\s*\(", re.sub(r"__launch_bounds__\([^)]*\)", "", head))
            names.add(call.group(1))
    return names


def test_the_ncu_filter_catches_every_kernel():
    text = SCRIPT.read_text()
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    pattern = re.search(r'-k regex:"([^"]+)"', text).group(1)
    names = kernel_names()
    # the families the fused networks launch, spelled out, so a parsing slip cannot pass vacuously
    assert {"stem_kernel", "block_fusion_kernel", "convfirst_c512_kernel", "convfirst_c512_persistent_kernel",
            "convfirst_s2_kernel", "convfirst_c768_kernel", "expand_dw_v2_kernel", "se_v3_kernel",
            "project_v3_kernel", "se_kernel"} <= names
    missed = sorted(n for n in names if not re.search(pattern, n))
    assert missed == []
    # and none of the library / Inductor kernels around them (names from convfirst_wgmma_v4/profile/)
    for other in ("triton_poi_fused_convolution_relu_0", "triton_per_fused_convolution_mean_relu_2",
                  "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT",
                  "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize256x64x32"):
        assert not re.search(pattern, other), other


def test_profile_network_help():
    done = subprocess.run([sys.executable, "-m", "cuda_kernels.profile_network", "--help"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0 and "--profile-from-start off" in done.stdout
