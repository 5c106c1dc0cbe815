"""b_se1 padded to mbconv.SE1_BIAS_MIN floats: torch.compile with freezing gives a frozen constant of at most 8
elements a kernel of its own at every call (s19 call 2: one-warp Triton kernels before B0's blocks 1.0, 2.0, 2.1 and
3.0, whose squeeze widths are 8, 4, 6 and 6; none before 3.1, 10). The premise checked on Inductor's CPU backend (the
same lowering of constants), the padding checked on B0's blocks."""

import shutil

import pytest
import torch
from torch import nn

from cuda_kernels import mbconv as mb


@torch.library.custom_op("perfmodel_test::takes_a_constant", mutates_args=())
def takes_a_constant(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return x + b.sum()


@takes_a_constant.register_fake
def _fake(x, b):
    return torch.empty_like(x)


class Holder(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.register_buffer("b", torch.arange(n, dtype=torch.float32), persistent=False)

    def forward(self, x):
        return takes_a_constant(x, self.b)


def kernels_for_a_constant_of(n: int) -> int:
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with inductor_config.patch(freezing=True), torch.no_grad():
        _, code = run_and_get_code(torch.compile(Holder(n).eval()), torch.randn(4))
    return sum(1 for line in code[0].splitlines() if line.strip().startswith("cpp_fused_") and "(" in line)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="Inductor's CPU backend needs a C++ compiler")
def test_inductor_gives_a_small_constant_a_kernel():
    assert kernels_for_a_constant_of(6) >= 1  # what B0's early blocks had
    assert kernels_for_a_constant_of(mb.SE1_BIAS_MIN) == 0


def test_b_se1_is_padded_with_zeros():
    from mbconv_helpers import block_of
    from perfmodel.zoo import fold_batchnorm

    for path, sq in (("features.1.0", 8), ("features.2.0", 4), ("features.2.1", 6), ("features.3.1", 10),
                     ("features.6.1", 48)):
        params = mb.block_params(fold_batchnorm(block_of("efficientnet_b0", path)))
        b = mb.prepare_weights(params).b_se1
        assert b.numel() == max(sq, 16) and torch.equal(b[:sq], params.se1_b.float())
        assert not b[sq:].any()
