"""Kernel 1 split by role (csrc/mbconv_v8_pc.cuh, expand_dw_v8_kernel_dhurfwsp; CUDA_KERNELS_K1_PC=1, off until
measured; NOTES.md "Current state", next 3): at the static U-in-registers entries (B0's 2.1 and 3.1, B2's 3.1 / 3.2)
one CTA of 512 threads an SM, 4 producer warps expanding item i + 1 into one E tile while 12 consumer warps (16 thread
groups of 24) run item i's depthwise from the other, E and X double-buffered, mbarriers in place of the CTA barriers.

E and D are _dhurfws's bit for bit; the pool adds 16 thread groups' fp32 sums instead of 10, so the output differs from
the default's in the last bits (the SE scale).

CPU: the switch and the route as the source reads them, the roles' synchronisation, the shared memory by literal
arithmetic (the host function, compiled and run), which entries take it. ptxas (spills, registers) is
test_mbconv_v8.py's spill test. GPU (@pytest.mark.cuda): B0's and B2's blocks that take it at batches 1, 5, 128
against float64 (poisoned output), the kernel named by the profiler, within 1e-4 of the switch-off output; B0 end to
end."""

from pathlib import Path

import pytest

import cuda_kernels
from cuda_kernels import mbconv as mb
from mbconv_helpers import host_run, nvcc_path

CSRC = Path(cuda_kernels.__file__).resolve().parent / "csrc"
SOURCE = (CSRC / "mbconv_v8.cuh").read_text()
PC_SOURCE = (CSRC / "mbconv_v8_pc.cuh").read_text()


def test_the_switch_and_the_route():
    assert mb.K1_PC_SWITCH == "CUDA_KERNELS_K1_PC"
    assert """  const char* v = kernel1_switch("CUDA_KERNELS_K1_PC");
  return v != nullptr && v[0] == '1';""" in SOURCE  # off unless 1
    # only the U-in-registers static route, through the one launcher
    assert "const bool pc = kernel1_v8_pc_requested();" in SOURCE
    assert "if constexpr (PC)\n      return expand_dw_v8_kernel_dhurfwsp<HC, KS, UR, SH>;" in SOURCE
    assert 'static_assert(SH > 0 && UR > 0, "the static U-in-registers entries");' in PC_SOURCE
    # 4 producer warps and 12 consumer warps, one CTA an SM; the launcher sizes the grid by occupancy at 512 threads
    assert "constexpr int kV8PcProducers = 128, kV8PcConsumers = 384;" in PC_SOURCE
    assert "GROUPS = kV8PcConsumers / PAIRS;" in PC_SOURCE
    assert "__launch_bounds__(kV8PcThreads, 1)" in PC_SOURCE
    assert "constexpr int threads = PC ? kV8PcThreads : kExpandThreads;" in SOURCE


def test_the_roles_meet_only_at_mbarriers_and_their_own_barriers():
    # after the split no CTA barrier: the producers on named barrier 1, the consumers on 2, each role all its threads
    body = PC_SOURCE[PC_SOURCE.index("if (i_begin >= i_end) return;"):]
    assert "__syncthreads" not in body
    assert body.count("bf::named_barrier_sync(1, kV8PcProducers);") == 2
    assert body.count("bf::named_barrier_sync(2, kV8PcConsumers);") == 2
    # E full: the producers' 128 arrivals; E empty: the consumers' 384; X full: thread 0's expect_tx and the copies
    assert "bf::mbar_init(e_full(b), kV8PcProducers);" in PC_SOURCE
    assert "bf::mbar_init(e_empty(b), kV8PcConsumers);" in PC_SOURCE
    assert body.count("bf::mbar_arrive(e_full(b));") == 1 and body.count("bf::mbar_arrive(e_empty(b));") == 1
    assert "bf::mbar_init(x_full(b), 1);" in PC_SOURCE
    # item k uses tile k % 2: its fill is the (k / 2)-th phase of that tile's barriers, the producer waiting for the
    # consumers' release of item k - 2 (parity of the phase before; a fresh barrier's "previous" phase is complete)
    assert "bf::mbar_wait(e_empty(b), parity ^ 1);" in body and "bf::mbar_wait(e_full(b), (k >> 1) & 1);" in body


def test_the_consumers_16_thread_groups_cover_each_unit_once():
    from mbconv_helpers import depthwise_walk

    # 3.1's bands of 10, 10 and 8 rows, units of 4 x 2 (7 column groups): 35, 35 and 28 units on 16 thread groups
    # (today's 10: the slowest 4, 4, 3); 2.1's bands of 8 rows at 56 wide, units of 4 x 4: 28 (today the slowest 3)
    for rows, wo, r, units, slowest in ((10, 28, 2, 35, 3), (8, 28, 2, 28, 2), (8, 56, 4, 28, 2)):
        visits, _ = depthwise_walk(1, rows, wo, r, 4, 16)
        want = {(0, r * s, 4 * c) for s in range(rows // r) for c in range(wo // 4)}
        assert sorted(visits) == sorted(want) and len(visits) == units
        per_group = [sum(1 for j in range(g, units, 16)) for g in range(16)]
        assert max(per_group) == slowest


def _pc_bytes_by_hand(h, w, rows, ks, c_in, k_pad, chunk=48):
    """The role-split kernel's shared memory, written out: two X bands (dense rows: m_pad C_in + 8 halves, rounded
    to 8), U (chunk rows of k_pad + 8 halves), two E tiles (e_rows x e_width pixels at 60 halves), two sets of the 16
    consumer thread groups' sums (fp32), the taps as half2 and the bias in fp32, six mbarriers."""
    e_rows, e_width = rows - 1 + ks, (-(-w // 4) * 4 - 1) + ks
    m_pad = -(-min(e_rows, h) * w // 16) * 16
    x_band = -(-(m_pad * c_in + 8) // 8) * 8 * 2
    return (2 * x_band + chunk * (k_pad + 8) * 2 + 2 * e_rows * e_width * 60 * 2 + 2 * 16 * chunk * 4
            + ks * ks * chunk * 2 + chunk * 4 + 6 * 8)


def test_shared_memory_by_hand():
    # B0's 3.1 (28 x 28, bands of 10, C_in 40 -> k_pad 48): X 2 x 32,016, U 5,376, E 2 x 53,760, sums 2 x 3,072,
    # taps and bias 2,592, mbarriers 48
    by_hand = _pc_bytes_by_hand(28, 28, 10, 5, 40, 48)
    assert by_hand == 2 * 32_016 + 5_376 + 2 * 53_760 + 2 * 3_072 + 2_592 + 48 == 185_712
    # B0's 2.1 (56 x 56, bands of 8, k = 3, C_in 24 -> k_pad 32): X 2 x 26,896, U 3,840, E 2 x 69,600 (10 x 58
    # pixels), sums 2 x 3,072, taps and bias 1,056, mbarriers 48
    by_hand_2_1 = _pc_bytes_by_hand(56, 56, 8, 3, 24, 32)
    assert by_hand_2_1 == 2 * 26_896 + 3_840 + 2 * 69_600 + 2 * 3_072 + 1_056 + 48 == 204_080
    # one CTA an SM: under the 227 KB a block may opt in to on Hopper
    assert by_hand <= 227 * 1024 and by_hand_2_1 <= 227 * 1024
    assert _pc_bytes_by_hand(36, 36, 8, 5, 48, 48) <= 227 * 1024  # B2's 3.1 / 3.2


def test_shared_memory_in_cuda_is_the_sum_by_hand(tmp_path):
    nvcc = nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc not found (set CUDA_HOME)")
    cases = [(28, 28, 10, 5, 40, 48), (36, 36, 8, 5, 48, 48), (56, 56, 8, 3, 24, 32)]
    rows = "\n".join("  {" + ", ".join(map(str, c)) + "}," for c in cases)
    (tmp_path / "g.cu").write_text(f"""#include <cstdio>
#include "mbconv_v8.cuh"
int main() {{
  const int cases[][6] = {{
{rows}
  }};
  for (const auto& c : cases)
    std::printf("%d\\n", mb::expand_dw_v8_pc_smem_bytes(c[0], c[1], c[1], c[2], c[3], c[4], c[5], 48));
  return 0;
}}
""")
    assert host_run(nvcc, tmp_path / "g.cu") == [(_pc_bytes_by_hand(*c),) for c in cases]


def test_which_entries_take_it():
    from cuda_kernels import static_shapes as ss

    entries = [(e.H, e.ks, e.C_in) for e in ss.listed_entries() if e.route == "kV8RouteUrWhole"]
    assert entries == [(56, 3, 24), (28, 5, 40), (36, 5, 48)]  # B0's 2.1 and 3.1, B2's 3.1 / 3.2


# ---- GPU ----

PC_BLOCKS = [("efficientnet_b0", "features.2.1"), ("efficientnet_b0", "features.3.1"),
             ("efficientnet_b2", "features.3.1"), ("efficientnet_b2", "features.3.2")]


@pytest.mark.cuda
@pytest.mark.parametrize("batch", [1, 5, 128])
@pytest.mark.parametrize("name,path", PC_BLOCKS)
def test_against_float64_and_the_default(name, path, batch, monkeypatch):
    """Against float64 (check_shape, output poisoned) with the switch on, the profiler naming the role-split kernel,
    and within 1e-4 of the switch-off output (the pool's sums in another order; E and D the same)."""
    from mbconv_helpers import switched_against_float64

    from perfmodel.harness import relative_error

    got, off, names, *_ = switched_against_float64(monkeypatch, name, path, batch, mb.K1_PC_SWITCH, "1")
    assert "expand_dw_v8_kernel_dhurfwsp<" in names, names[:600]
    assert relative_error(got, off.double()) < 1e-4


@pytest.mark.cuda
def test_efficientnet_b0_with_it(monkeypatch):
    """B0 through the check before timing (every fused block within 2x PyTorch fp16's error; none falls back)."""
    from mbconv_helpers import check_fused_b0

    check_fused_b0(monkeypatch, {mb.K1_PC_SWITCH: "1"}, {"StemMBConv": 1, "MBConv": 15}, 16)
